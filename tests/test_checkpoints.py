"""Checkpoints of the training loop (itlin_core.train with checkpoint_path): an interrupted and
resumed run reproduces the uninterrupted run bit for bit (parameters, optimiser state and every
recorded curve), a crash during a write loses nothing, and a checkpoint of another run is refused."""

import os
import struct
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic

MODEL = ic.mlp([4, 16, 16, 3], "tanh")
N_STEPS, EVAL_EVERY, CHECK_EVERY = 40, 4, 8


def problem(sweep=False):
    """A tiny MLP classifier, minibatches of 8 from 40 examples (5 per epoch, so the data order
    changes every 5 steps), SGD with momentum, IL with K=3 (or a vmapped sweep over K)."""
    kx, kp, kd = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(kx, (48, 4))
    y = jnp.argmax(x[:, :3] * x[:, 1:], axis=1)
    xtr, ytr, xte, yte = x[:40], y[:40], x[40:], y[40:]
    opt = optax.sgd(0.05, momentum=0.9)
    params = MODEL.init(kp)
    eval_fn = ic.make_il_eval(MODEL.apply, {"test": (xte, yte)},
                              {"accuracy": ic.accuracy, "loss": ic.softmax_cross_entropy})
    if sweep:
        step, _ = ic.make_il_sweep_step(MODEL.apply, ic.softmax_cross_entropy, opt, (1, 3, None))
        state = ic.replicate(ic.init_il_state(params, opt), 3)
        eval_fn = jax.vmap(eval_fn)
    else:
        step = ic.make_il_step(MODEL.apply, ic.softmax_cross_entropy, opt, K=3)
        state = ic.init_il_state(params, opt)
    return step, state, ic.minibatches(kd, xtr, ytr, 8), eval_fn, kd


def run_ckpt(path, stop_at=None, sweep=False, **kw):
    step, state, batches, eval_fn, key = problem(sweep)
    return ic.train(step, state, batches, N_STEPS, evaluate=ic.Evaluation(eval_fn, every=EVAL_EVERY),
                    checkpoint=ic.Checkpointing(path, every=CHECK_EVERY, key=key, stop_at=stop_at), **kw)


def assert_same_run(a, b):
    (sa, ha), (sb, hb) = a, b
    la, ta = jax.tree_util.tree_flatten(sa)
    lb, tb = jax.tree_util.tree_flatten(sb)
    assert ta == tb
    for x, y in zip(la, lb):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        assert np.array_equal(np.asarray(x), np.asarray(y)), "state differs"
    keys = {k for k in ha if k not in ("seconds", "resumed_from")}
    assert keys == {k for k in hb if k not in ("seconds", "resumed_from")}
    for k in keys:
        if ha[k] is None:
            assert hb[k] is None, k
        else:
            a, b = np.asarray(ha[k]), np.asarray(hb[k])
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"history[{k!r}] differs"


@pytest.mark.parametrize("sweep", [False, True], ids=["K=3", "sweep"])
def test_resumed_run_equals_uninterrupted_run_bit_for_bit(tmp_path, sweep):
    step, state, batches, eval_fn, _ = problem(sweep)
    plain = ic.train(step, state, batches, N_STEPS, evaluate=ic.Evaluation(eval_fn, every=EVAL_EVERY))
    whole = run_ckpt(tmp_path / "whole.npz", sweep=sweep)
    assert_same_run(whole, plain)  # checkpointing does not change the run
    assert len(whole[1]["loss"]) == N_STEPS and list(whole[1]["eval_step"]) == list(range(0, N_STEPS + 1, EVAL_EVERY))
    # the run learns (so that the comparison is of a real training run)
    acc = np.asarray(whole[1]["test_accuracy_network"])
    assert np.all(acc[-1] > acc[0])

    # interrupted at step 20 (not a multiple of checkpoint_every), resumed by a fresh call
    part_state, part_hist = run_ckpt(tmp_path / "run.npz", stop_at=20, sweep=sweep)
    assert int(np.max(part_state.step)) == 20 and len(part_hist["loss"]) == 20
    resumed = run_ckpt(tmp_path / "run.npz", sweep=sweep)
    assert resumed[1]["resumed_from"] == 20
    assert_same_run(resumed, whole)
    # a finished run called again returns its recorded result without training
    again = run_ckpt(tmp_path / "run.npz", sweep=sweep)
    assert again[1]["resumed_from"] == N_STEPS
    assert_same_run(again, whole)


def test_crash_during_a_checkpoint_write_resumes_from_the_previous_one(tmp_path, monkeypatch):
    whole = run_ckpt(tmp_path / "whole.npz")
    real_savez, calls = np.savez, []

    def savez_then_crash(f, **arrays):  # the third checkpoint write dies half-way
        calls.append(1)
        if len(calls) == 3:
            f.write(b"PK\x03\x04 partial")
            raise KeyboardInterrupt("runtime disconnected")
        real_savez(f, **arrays)

    monkeypatch.setattr(np, "savez", savez_then_crash)
    with pytest.raises(KeyboardInterrupt):
        run_ckpt(tmp_path / "run.npz")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["whole.npz", "run.npz"] or sorted(os.listdir(tmp_path)) == ["run.npz", "whole.npz"]
    ck = ic.load_checkpoint(tmp_path / "run.npz", problem()[1])
    assert ck.step == 2 * CHECK_EVERY  # the last complete checkpoint
    resumed = run_ckpt(tmp_path / "run.npz")
    assert resumed[1]["resumed_from"] == 2 * CHECK_EVERY
    assert_same_run(resumed, whole)


@pytest.mark.system
def test_resume_in_a_new_process(tmp_path):
    """The second half runs in a fresh Python process (new JAX runtime, new compilations)."""
    whole = run_ckpt(tmp_path / "whole.npz")
    run_ckpt(tmp_path / "run.npz", stop_at=12)
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["JAX_PLATFORMS"] = "cpu"
        import jax
        jax.config.update("jax_enable_x64", True)
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import numpy as np
        import test_checkpoints as t
        state, hist = t.run_ckpt({str(tmp_path / 'run.npz')!r})
        leaves = jax.tree_util.tree_leaves(state)
        np.savez({str(tmp_path / 'out.npz')!r}, *[np.asarray(a) for a in leaves],
                 loss=hist["loss"], acc=hist["test_accuracy_network"], resumed=hist["resumed_from"])
    """)
    env = dict(os.environ, ITLIN_PROGRESS="off")
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=300)
    with np.load(tmp_path / "out.npz") as z:
        assert int(z["resumed"]) == 12
        leaves = jax.tree_util.tree_leaves(whole[0])
        for i, a in enumerate(leaves):
            assert np.array_equal(z[f"arr_{i}"], np.asarray(a))
        assert np.array_equal(z["loss"], whole[1]["loss"])
        assert np.array_equal(z["acc"], whole[1]["test_accuracy_network"])


def test_checkpoint_of_another_run_is_refused(tmp_path):
    run_ckpt(tmp_path / "run.npz", stop_at=8)
    step, state, batches, eval_fn, key = problem()
    ck = ic.Checkpointing(tmp_path / "run.npz", every=CHECK_EVERY, key=key)
    args = dict(evaluate=ic.Evaluation(eval_fn, every=EVAL_EVERY))
    with pytest.raises(ValueError, match="another PRNG key"):
        ic.train(step, state, batches, N_STEPS, checkpoint=ck._replace(key=jax.random.PRNGKey(99)), **args)
    with pytest.raises(ValueError, match="other settings"):
        ic.train(step, state, batches, N_STEPS + 8, checkpoint=ck, **args)
    with pytest.raises(ValueError, match="other settings"):
        ic.train(step, state, batches, N_STEPS, checkpoint=ck._replace(meta={"preset": "colab"}), **args)
    adam = optax.adam(1e-3)  # another optimiser: another state structure
    with pytest.raises(ValueError, match="different structure"):
        ic.train(step, ic.init_il_state(state.params, adam), batches, N_STEPS, checkpoint=ck, **args)
    with pytest.raises(ValueError, match="multiple of the evaluation chunk"):
        ic.train(step, state, batches, N_STEPS, checkpoint=ck._replace(every=6), **args)
    with pytest.raises(ValueError, match="stop_at must be"):
        ic.train(step, state, batches, N_STEPS, checkpoint=ck._replace(stop_at=10), **args)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        ic.load_checkpoint(tmp_path / "junk.npz", state)


def corruptions(good: bytes):
    """Damaged copies of a file: emptied, truncated, and one byte flipped at 60 places spread over
    it (headers, compressed data, the zip directory)."""
    yield "empty", b""
    for frac in (0.1, 0.5, 0.9, 0.999):
        yield f"truncated to {frac:.0%}", good[:int(len(good) * frac)]
    for i in np.linspace(0, len(good) - 1, 60).astype(int):
        yield f"byte {i} flipped", good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:]


def test_a_damaged_checkpoint_gives_a_clear_error_or_the_exact_state(tmp_path):
    """Every damaged copy either raises the ValueError that says to delete the file (from
    load_checkpoint and from train, which then leaves the file as it was), or, where the flipped
    byte is one the zip format does not check, loads exactly the saved state and history."""
    path = tmp_path / "run.npz"
    state, hist = run_ckpt(path, stop_at=8)
    good = path.read_bytes()
    _, template, *_ = problem()
    want = ic.load_checkpoint(path, template)
    outcomes = {"error": 0, "same": 0}
    for what, data in corruptions(good):
        path.write_bytes(data)
        try:
            got = ic.load_checkpoint(path, template)
        except ValueError as e:
            assert "delete it" in str(e), (what, str(e))
            outcomes["error"] += 1
            continue
        assert_same_run((got.state, got.history), (want.state, want.history)), what
        assert (got.step, got.meta) == (want.step, want.meta), what
        outcomes["same"] += 1
    assert outcomes["error"] >= 40, outcomes          # most damage is detected, none passes silently
    path.write_bytes(good[:len(good) // 2])
    with pytest.raises(ValueError, match="delete it"):
        run_ckpt(path)
    assert path.read_bytes() == good[:len(good) // 2]


def central_directory_entries(data: bytes) -> list:
    """``(start, end)`` of each entry of a zip file's central directory (46 fixed bytes, then its
    file name, extra field and comment, whose lengths are at offsets 28, 30 and 32)."""
    at, end = struct.unpack("<I", data[-6:-2])[0], len(data) - 22   # the end record's offset field
    entries = []
    while at < end:
        assert data[at:at + 4] == b"PK\x01\x02", at
        n, m, k = struct.unpack("<HHH", data[at + 28:at + 34])
        entries.append((at, at + 46 + n + m + k))
        at = entries[-1][1]
    assert at == end and data[end:end + 4] == b"PK\x05\x06"
    return entries


def test_every_byte_of_the_zip_directory_flipped_gives_a_clear_error_or_the_exact_state(tmp_path):
    """The zip directory (the central directory and its end record) holds the version, flag,
    size and offset fields that zipfile interprets before any CRC is checked; a flip there once
    escaped as zipfile's NotImplementedError ("zip file version 21.0") instead of the clear
    ValueError. Every byte of the first and the last entry of the directory (every entry has the
    same fields) and of the end record, flipped in turn, must give the ValueError or the exact
    state."""
    path = tmp_path / "run.npz"
    run_ckpt(path, stop_at=8)
    good = path.read_bytes()
    _, template, *_ = problem()
    want = ic.load_checkpoint(path, template)
    entries = central_directory_entries(good)
    assert len(entries) > 2
    flipped = [*range(*entries[0]), *range(*entries[-1]), *range(len(good) - 22, len(good))]
    errors = 0
    for i in flipped:
        for flip in (0xFF, 0x01, 0x40):               # every bit pattern class: all, lowest, a flag bit
            path.write_bytes(good[:i] + bytes([good[i] ^ flip]) + good[i + 1:])
            try:
                got = ic.load_checkpoint(path, template)
            except ValueError as e:
                assert "delete it" in str(e), (i, flip, str(e))
                errors += 1
                continue
            assert_same_run((got.state, got.history), (want.state, want.history)), (i, flip)
            assert (got.step, got.meta) == (want.step, want.meta), (i, flip)
    assert errors > len(flipped), errors


def test_checkpoint_round_trip_keeps_optax_state_and_typed_key(tmp_path):
    params = MODEL.init(jax.random.PRNGKey(1))
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    state = ic.init_il_state(params, opt)
    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    _, opt_state = opt.update(grads, state.opt_state, params)
    state = state._replace(opt_state=opt_state, step=jnp.asarray(5, jnp.int32))
    key = jax.random.key(7)
    hist = {"loss": np.array([1.0, np.nan]), "eval_step": np.array([0, 2]), "diverged_at": None, "seconds": 1.5}
    ic.save_checkpoint(tmp_path / "c.npz", state, step=5, history=hist, key=key, meta={"a": 1})
    ck = ic.load_checkpoint(tmp_path / "c.npz", ic.init_il_state(params, opt))
    assert_same_run((ck.state, ck.history), (state, hist))
    assert np.array_equal(ck.key, jax.random.key_data(key)) and ck.step == 5 and ck.meta == {"a": 1}


# ------------------------------------------------------------------------------ the training loop itself

@pytest.mark.parametrize("bad, says", [
    (dict(evaluate=3), "evaluate must be an ic.Evaluation"), (dict(checkpoint=3), "checkpoint must be an ic.Checkpointing"),
    (dict(progress=3), "progress must be an ic.Progress"), (dict(evaluate=ic.Evaluation(fn=3)), "Evaluation.fn must"),
    (dict(progress="loud"), "progress .* must be one of"), (dict(evaluate=ic.Evaluation(every=0)), "Evaluation.every"),
    (dict(evaluate=ic.Evaluation(data={"x": np.zeros(2)})), "Evaluation.data is given without Evaluation.fn"),
], ids=["evaluate", "checkpoint", "progress", "fn", "mode", "every", "data"])
def test_the_option_groups_refuse_what_they_cannot_hold(bad, says):
    step, state, batches, eval_fn, key = problem()
    with pytest.raises((TypeError, ValueError), match=says):
        ic.train(step, state, batches, N_STEPS, **bad)


@pytest.mark.parametrize("step, says", [
    (lambda s, b: s, r"step must return a pair \(state, metrics\), got an array of shape \(\)"),
    (lambda s, b: (s, s, s), "got a tuple of length 3"),
    (lambda s, b: (s, {"l": s}), r"metrics a dict holding 'loss' .*got a dict with keys \['l'\]"),
    (lambda s, b: (s, s), r"holding 'loss' .*got an array of shape \(\)"),
], ids=["state only", "triple", "no loss", "loss not in a dict"])
def test_a_step_that_does_not_return_state_and_metrics_is_named(step, says):
    """(was: a KeyError 'loss', or a message about scan's body from inside JAX)"""
    with pytest.raises(TypeError, match=says):
        ic.train(step, 1.0, None, 3, progress="off")



@pytest.mark.parametrize("sweep", [False, True], ids=["one run", "sweep"])
def test_evaluation_data_are_an_argument_of_the_compiled_evaluation(sweep):
    """Evaluation(fn, data=...) calls fn(state, data) with the data as inputs of the compiled
    program (tracers while it is traced, not constants folded into it) and gives the history of
    the same evaluation closing over the data."""
    step, state, batches, _, _ = problem(sweep)
    x = jax.random.normal(jax.random.PRNGKey(9), (40, 4))
    seen = []

    def with_data(s, data):
        seen.append(isinstance(data["x"], jax.core.Tracer))
        return {"out": jnp.mean(MODEL.apply(s.params, data["x"]), axis=0) * data["scale"]}

    closed = lambda s: with_data(s, {"x": x, "scale": 2.0})
    if sweep:
        with_data_fn, closed = jax.vmap(with_data, in_axes=(0, None)), jax.vmap(closed)
    else:
        with_data_fn = with_data
    _, h_data = ic.train(step, state, batches, 8, progress="off",
                         evaluate=ic.Evaluation(with_data_fn, every=4, data={"x": x, "scale": 2.0}))
    assert seen and all(seen)
    _, h_closed = ic.train(step, state, batches, 8, progress="off", evaluate=ic.Evaluation(closed, every=4))
    np.testing.assert_allclose(h_data["out"], h_closed["out"], rtol=1e-5, atol=1e-6)
    assert h_data["out"].shape[:1] == (3,)


@pytest.mark.parametrize("reserved", ["loss", "eval_step", "diverged_at"])
def test_an_eval_metric_may_not_replace_the_history(reserved):
    step, state, batches, _, _ = problem()
    with pytest.raises(ValueError, match="rename those metrics"):
        ic.train(step, state, batches, 8, evaluate=ic.Evaluation(lambda s: {reserved: jnp.zeros(())}, every=4))


def test_the_callers_state_stays_valid_and_the_chunk_compiles_once():
    """train donates the state buffers to its compiled chunk but copies the state it is given
    first; a second call with the same step and batch source compiles nothing new."""
    step, state, batches, eval_fn, _ = problem()
    before = [np.asarray(a).copy() for a in jax.tree.leaves(state)]
    _, h1 = ic.train(step, state, batches, 16, evaluate=ic.Evaluation(eval_fn, every=4))
    after = [np.asarray(a) for a in jax.tree.leaves(state)]     # would raise if the buffers were donated
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    runner = ic.training._chunk_runner(step, batches.fn, True)     # the compiled chunk train used
    size = runner._cache_size()
    assert size >= 1
    _, h2 = ic.train(step, state, batches, 16, evaluate=ic.Evaluation(eval_fn, every=4))
    assert ic.training._chunk_runner(step, batches.fn, True) is runner and runner._cache_size() == size
    np.testing.assert_array_equal(h1["loss"], h2["loss"])


def test_meta_takes_numpy_numbers_and_refuses_what_json_cannot_hold(tmp_path):
    step, state, batches, eval_fn, key = problem()
    ck = ic.Checkpointing(tmp_path / "m.npz", key=key)
    args = dict(evaluate=ic.Evaluation(every=EVAL_EVERY))
    ic.train(step, state, batches, 8, checkpoint=ck._replace(meta={"lr": np.float32(0.5), "K": np.int64(3)}), **args)
    assert ic.load_checkpoint(tmp_path / "m.npz", state).meta["user"] == {"lr": 0.5, "K": 3}
    for bad in ({"lr": float("nan")}, {"f": print}, ["lr", 0.5]):
        with pytest.raises(ValueError, match="meta must"):
            ic.train(step, state, batches, 8, checkpoint=ck._replace(path=tmp_path / "n.npz", meta=bad), **args)
    assert not (tmp_path / "n.npz").exists()


# ------------------------------------------------------------------------------ bad input to the file format

@pytest.mark.parametrize("value, says", [
    ({"a": 1}, "history\\['x'\\] is a dict"), ({1, 2}, "history\\['x'\\] is a set"),
    ("abc", "history\\['x'\\] is a str"), (["a", "b"], "history\\['x'\\] holds <U1"),
    ([1, "a"], "history\\['x'\\] holds <U"), ([[1], [1, 2]], "history\\['x'\\] cannot be stored as one array"),
    ([print], "history\\['x'\\] holds object"),
], ids=["dict", "set", "str", "strings", "mixed", "ragged", "object"])
def test_save_checkpoint_refuses_history_values_before_writing(tmp_path, value, says):
    """Values that would not come back as written (or not at all) are refused, naming the key, and the
    previous checkpoint stays as it was, with no temporary file left beside it."""
    path = tmp_path / "run.npz"
    ic.save_checkpoint(path, {"w": jnp.arange(3.0)}, step=5, history={"loss": jnp.ones(5)})
    good = path.read_bytes()
    with pytest.raises(ValueError, match=says) as e:
        ic.save_checkpoint(path, {"w": jnp.arange(3.0)}, step=6, history={"loss": jnp.ones(6), "x": value})
    assert "numeric arrays" in str(e.value) and "Nothing was written" in str(e.value)
    assert path.read_bytes() == good and [p.name for p in tmp_path.iterdir()] == ["run.npz"]


def test_save_checkpoint_keeps_numbers_booleans_none_and_numeric_lists(tmp_path):
    hist = {"a": None, "b": True, "c": np.int64(3), "d": np.float32(0.5), "e": [1, 2.5], "f": [[True, False]],
            "g": np.complex64(1 + 2j)}
    ic.save_checkpoint(tmp_path / "ok.npz", jnp.zeros(2), step=0, history=hist)
    got = ic.load_checkpoint(tmp_path / "ok.npz", jnp.zeros(2)).history
    assert (got["a"], got["b"], got["c"], got["d"]) == (None, True, 3, 0.5)
    assert got["e"].tolist() == [1.0, 2.5] and got["f"].tolist() == [[True, False]] and got["g"] == 1 + 2j


@pytest.mark.parametrize("meta, says", [({"lr": float("nan")}, "finite numbers"), ({"s": {1}}, "type set"),
                                        ([1], "meta must be a dict")], ids=["nan", "set", "list"])
def test_save_checkpoint_checks_meta_like_train(tmp_path, meta, says):
    path = tmp_path / "run.npz"
    ic.save_checkpoint(path, jnp.zeros(2), step=1, history={})
    good = path.read_bytes()
    with pytest.raises(ValueError, match=says):
        ic.save_checkpoint(path, jnp.zeros(2), step=2, history={}, meta=meta)
    assert path.read_bytes() == good
    ic.save_checkpoint(path, jnp.zeros(2), step=2, history={}, meta={"lr": np.float32(0.5), "K": np.int64(3)})
    assert ic.load_checkpoint(path, jnp.zeros(2)).meta == {"lr": 0.5, "K": 3}


def test_save_checkpoint_refuses_a_state_of_strings(tmp_path):
    with pytest.raises(ValueError, match=r"state\['w'\] is str .*numeric arrays only"):
        ic.save_checkpoint(tmp_path / "s.npz", {"w": "abc"}, step=0, history={})
    assert not list(tmp_path.iterdir())


def test_a_checkpoint_that_does_not_read_back_keeps_the_previous_one(tmp_path, monkeypatch):
    """The read-back check of the new file (before it replaces the old one) says so, without naming the
    temporary file or telling the user to delete anything."""
    path = tmp_path / "run.npz"
    ic.save_checkpoint(path, jnp.zeros(2), step=1, history={})
    good = path.read_bytes()
    real = ic.checkpoint._contents

    def damaged(p):
        raise ValueError(f"Bad CRC-32 for file in {p}") if p != path else real(p)
    monkeypatch.setattr(ic.checkpoint, "_contents", damaged)
    with pytest.raises(ValueError, match="new checkpoint .*could not be written and read back") as e:
        ic.save_checkpoint(path, jnp.ones(2), step=2, history={})
    assert "previous file" in str(e.value) and "delete" not in str(e.value) and ".tmp" not in str(e.value)
    assert path.read_bytes() == good and [p.name for p in tmp_path.iterdir()] == ["run.npz"]


@pytest.mark.parametrize("where", ["missing", "folder"])
def test_a_missing_checkpoint_or_a_folder_has_its_own_message(tmp_path, where):
    path = tmp_path / "nope.npz" if where == "missing" else tmp_path
    says = "there is no checkpoint file at" if where == "missing" else "is a folder"
    with pytest.raises(ValueError, match=says) as e:
        ic.load_checkpoint(path, jnp.zeros(2))
    assert "delete" not in str(e.value) and "damaged" not in str(e.value)
    if where == "folder":
        with pytest.raises(ValueError, match="is a folder"):
            ic.save_checkpoint(path, jnp.zeros(2), step=0, history={})
        with pytest.raises(ValueError, match="is a folder") as e:
            run_ckpt(path)
        assert "delete" not in str(e.value)
        (tmp_path / "file").write_text("x")
        with pytest.raises(ValueError, match="which is a file, not a folder"):
            ic.save_checkpoint(tmp_path / "file" / "run.npz", jnp.zeros(2), step=0, history={})


@pytest.mark.parametrize("foreign", [b"my notes", None, b""], ids=["text", "npz", "empty"])
def test_save_checkpoint_never_replaces_a_file_that_is_not_a_checkpoint(tmp_path, foreign):
    """A file the writer did not make (notes, someone's arrays, an empty file) is kept, with a sentence
    naming it, unless overwrite=True; a checkpoint, damaged or not, is the writer's own and is replaced."""
    path = tmp_path / "run.npz"
    if foreign is None:
        np.savez(path, data=np.arange(3))
    else:
        path.write_bytes(foreign)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="exists and is not a checkpoint .*overwrite=True"):
        ic.save_checkpoint(path, jnp.zeros(2), step=0, history={})
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["run.npz"]
    ic.save_checkpoint(path, jnp.zeros(2), step=0, history={}, overwrite=True)
    ic.save_checkpoint(path, jnp.ones(2), step=1, history={})                   # now its own file
    assert ic.load_checkpoint(path, jnp.zeros(2)).step == 1
