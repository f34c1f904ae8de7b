"""Every writer of the package, killed (SIGKILL) while it writes, leaves each file it writes either
complete in its previous version or complete in its new one, never a partial file: checkpoints
(:func:`itlin_core.save_checkpoint`), results records (:func:`itlin_core.book.records.save_results`),
stand-in data sets (:func:`itlin_core.datasets.write_stand_in`), the tables behind the figures
(:func:`itlin_core.book.figure_data.write_figure_csv`) and the notebook timings of ``make book``
(:func:`itlin_core.tools.execution.write_times`). A child process writes a
first version, then starts a second one and stops inside its n-th call of a file's ``write``
(found with :func:`sys.setprofile`): the test kills it there and reads what is left. A writer
that wrote into the file itself would leave it empty or cut off."""

import csv
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import itlin_core as ic
from itlin_core.book import records
from itlin_core.tools import execution

pytestmark = pytest.mark.system     # each test runs (and kills) a child process: make test-system

N = 100_000     # floats per version: several write calls per file
ROWS = 1000     # rows of a figure's table (each is traced while the child writes, so few), timings

WRITERS = {
    "checkpoint": f"""
import jax.numpy as jnp, itlin_core as ic
def write(v):
    ic.save_checkpoint(DIR + "/ck.npz", jnp.full({N}, float(v)), step=v, history={{"loss": [float(v)] * 50}})
""",
    "record": f"""
import numpy as np
from itlin_core.book import records
from itlin_core.tools import execution
def write(v):
    records.save_results("kill_test", "smoke", {{"g": {{"a": np.full({N // 8}, float(v))}}}}, seed=v, results_dir=DIR)
""",
    "stand_in": """
import itlin_core as ic
def write(v):
    ic.datasets.write_stand_in("mnist", DIR, 600, 100, seed=v, overwrite=True)
""",
    "figure_csv": f"""
import numpy as np
from itlin_core.book import figure_data
def write(v):
    rec = {{"Ks": [1], "labels": ["K=1"], "eval_step": np.arange({ROWS}), "feature_updates": np.ones(({ROWS}, 1), int),
           "metrics": {{"loss": np.full(({ROWS}, 1), float(v))}}}}
    figure_data.write_figure_csv({{"g": rec}}, ["g"], "fig", folder=DIR)
""",
    "timings": f"""
from itlin_core.tools import execution
def write(v):
    execution.write_times(DIR + "/" + execution.TIMES_FILE, {{f"nb{{i}}": float(v) for i in range({ROWS})}})
""",
}

CHILD = """
import io, os, sys, time
DIR, PAUSE_AT = os.path.realpath(sys.argv[1]), int(sys.argv[2])
{writer}
write(0)
calls = 0

def where(f):
    name = getattr(f, "name", "")
    return os.readlink(f"/proc/self/fd/{{name}}") if isinstance(name, int) else os.path.realpath(str(name))

def pause_in_a_write(frame, event, arg):
    global calls
    f = getattr(arg, "__self__", None)
    if event == "c_call" and getattr(arg, "__name__", "") == "write" and \\
            isinstance(f, (io.BufferedWriter, io.TextIOWrapper, io.FileIO)) and where(f).startswith(DIR):
        calls += 1
        if calls == PAUSE_AT:
            print("writing", flush=True)
            time.sleep(60)

sys.setprofile(pause_in_a_write)
write(1)
sys.setprofile(None)
print("finished", flush=True)
"""


def read_back(kind, folder, tmp_path):
    """The parities of the versions the files hold now (a clear error if one is partial)."""
    if kind == "checkpoint":
        ck = ic.load_checkpoint(folder / "ck.npz", np.zeros(N, np.float32))
        state = np.asarray(ck.state)
        assert np.all(state == state[0]) and state[0] == ck.step and ck.history["loss"][0] == ck.step
        return {int(ck.step) % 2}
    if kind == "record":
        rec = records.load_results("kill_test", ("smoke",), results_dir=folder)
        a = np.asarray(rec["data"]["g"]["a"])
        assert a.shape == (N // 8,) and np.all(a == rec["seed"])
        return {rec["seed"] % 2}
    if kind == "figure_csv":
        with open(folder / "fig.csv", newline="") as f:
            header, *rows = csv.reader(f)
        loss = {row[header.index("loss")] for row in rows}
        assert len(rows) == ROWS and len(loss) == 1, "the table is cut short or mixes versions"
        return {int(float(loss.pop())) % 2}
    if kind == "timings":
        times = execution.read_times(folder / execution.TIMES_FILE)     # a ValueError if partial
        assert len(times) == ROWS and len(set(times.values())) == 1
        return {int(times["nb0"]) % 2}
    # stand-in: each file is byte for byte one of the two versions
    parities = set()
    for f in sorted((folder / "mnist").glob("*.gz")):
        versions = [(tmp_path / f"v{v}" / "mnist" / f.name).read_bytes() for v in (0, 1)]
        raw = f.read_bytes()
        assert raw in versions, f"{f.name} is neither version ({len(raw)} bytes)"
        parities.add(versions.index(raw))
    return parities


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the file behind a descriptor in /proc")
@pytest.mark.parametrize("kind, pause_at", [("checkpoint", 1), ("checkpoint", 3), ("record", 1), ("stand_in", 1),
                                            ("stand_in", 2), ("figure_csv", 1), ("timings", 1)])
# a record, a figure's table and the timings are each written in one call
def test_a_writer_killed_mid_write_leaves_a_complete_file(tmp_path, kind, pause_at):
    if kind == "stand_in":
        for v in (0, 1):
            ic.datasets.write_stand_in("mnist", tmp_path / f"v{v}", 600, 100, seed=v)
    folder = tmp_path / "out"
    folder.mkdir()
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(writer=WRITERS[kind]), str(folder), str(pause_at)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, JAX_PLATFORMS="cpu"))
    try:
        line = child.stdout.readline()
    finally:
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate()
    assert line.strip() == "writing", err      # killed inside a write of the second version
    assert read_back(kind, folder, tmp_path) <= {0, 1}
