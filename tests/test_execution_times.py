"""The notebook timings file of ``make book``'s first step (itlin_core.tools.execution): written
atomically and read back before it replaces the old one; a damaged or foreign file at its name is
refused with a sentence that names it, before any notebook runs, and never replaced unless the
caller says so. (The execution itself is tested in test_book_build.py.)"""

import io
import os

import pytest

from itlin_core.tools import execution

from test_figure_data import HalfWritten


def test_times_come_back_as_written(tmp_path):
    path = tmp_path / execution.TIMES_FILE
    assert execution.read_times(path) == {}
    times = {"a": 12.5, "b": 0.0, "c": 3}
    execution.write_times(path, times)
    assert execution.read_times(path) == times
    execution.write_times(path, {"a": 1.0})
    assert execution.read_times(path) == {"a": 1.0} and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_file_that_reads_back_wrong_never_replaces_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / execution.TIMES_FILE
    execution.write_times(path, {"a": 1.0})
    before = path.read_bytes()
    fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: HalfWritten(fdopen(*a, **k)))
    with pytest.raises(OSError, match="read back .* differ"):
        execution.write_times(path, {f"n{i}": float(i) for i in range(50)})
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [path.name]


def damaged(good: bytes):
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    return {"truncated": good[:len(good) // 2], "bit flip": bytes(flipped), "empty": b"", "binary": b"\x80\xff\x00",
            "a list": b"[1, 2]", "a string time": b'{"a": "12"}', "a negative time": b'{"a": -1}',
            "a bool": b'{"a": true}', "NaN": b'{"a": NaN}'}


@pytest.mark.parametrize("kind", list(damaged(b"{}")))
def test_a_damaged_file_is_refused_by_name_and_kept(tmp_path, kind):
    path = tmp_path / execution.TIMES_FILE
    execution.write_times(path, {"mean_field_gn": 123.25, "digits_cnn": 61.5})
    content = damaged(path.read_bytes())[kind]
    path.write_bytes(content)
    with pytest.raises(ValueError, match=rf"{execution.TIMES_FILE}.*delete it"):
        execution.read_times(path)
    with pytest.raises(ValueError, match="delete it"):
        execution.write_times(path, {"a": 1.0})
    assert path.read_bytes() == content
    execution.write_times(path, {"a": 1.0}, overwrite=True)
    assert execution.read_times(path) == {"a": 1.0}


def test_the_command_stops_on_a_damaged_file_before_running_anything(tmp_path):
    cache = tmp_path / "_build" / ".jupyter_cache"
    cache.parent.mkdir()
    (cache.parent / execution.TIMES_FILE).write_text('{"a": 1.0, "b"')    # cut short
    with pytest.raises(ValueError, match=r"execution-seconds\.json cannot be read as JSON text .* delete it"):
        execution.execute_into_cache(tmp_path, cache, jobs=1, out=io.StringIO())   # no _toc.yml: it was not reached


@pytest.mark.parametrize("bound", [True, False])
def test_a_compile_bound_notebooks_kernel_gets_the_fast_compile_flags_and_no_other(tmp_path, monkeypatch, bound):
    """Each notebook's kernel starts with its own XLA flags (execution.kernel_env), and the worker's
    environment is as before afterwards, so the next notebook does not inherit them."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os; print('flags:', os.environ.get('XLA_FLAGS', ''))")])
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setattr(execution, "COMPILE_BOUND", ("tiny",) if bound else ())
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nonexistent")
    before = dict(os.environ)
    text, seconds, error = execution._execute(str(path), timeout=120)
    assert error is None and seconds > 0
    out = nbformat.reads(text, as_version=4).cells[0].outputs[0]["text"]
    want = f"{execution.FAST_COMPILE_FLAGS} --xla_dump_to=/nonexistent" if bound else "--xla_dump_to=/nonexistent"
    assert out.strip() == f"flags: {want}"
    assert dict(os.environ) == before


def test_the_makefile_and_the_book_build_use_the_same_fast_compile_flags():
    """The fast-compile XLA flags are written twice, in the Makefile (TEST_XLA_FLAGS, for make test
    and check-newest) and in execution.FAST_COMPILE_FLAGS (for make book's compile-bound notebooks):
    the measurements behind both are of one set, so the two lists must stay the same."""
    import pathlib
    import re

    makefile = (pathlib.Path(__file__).resolve().parents[1] / "Makefile").read_text()
    m = re.search(r"^TEST_XLA_FLAGS \?=((?:.*\\\n)*.*)$", makefile, re.M)
    assert m, "TEST_XLA_FLAGS not found in the Makefile"
    assert m.group(1).replace("\\\n", " ").split() == execution.FAST_COMPILE_FLAGS.split()
