"""The notebook timings file of ``make book``'s first step (itlin_core.book.execution): written
atomically and read back before it replaces the old one; a damaged or foreign file at its name is
refused with a sentence that names it, before any notebook runs, and never replaced unless the
caller says so. (The execution itself is tested in test_book_build.py.)"""

import io
import os

import pytest

from itlin_core.book import execution

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
