"""The Colab-like check (itlin_core.tools.newest): notebooks copied out of the book and executed
elsewhere, a status that says which chapter ran with which versions, and its page sentence."""

import json
import pathlib

import nbformat
import pytest

from itlin_core.tools import newest


def book(tmp_path, cells: dict):
    """A book root whose _toc.yml lists one notebook per entry of ``cells`` (name -> code)."""
    for name, code in cells.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        (tmp_path / "book").mkdir(exist_ok=True)
        nbformat.write(nb, str(tmp_path / "book" / f"{name}.ipynb"))
    names = list(cells)
    (tmp_path / "_toc.yml").write_text(f"format: jb-book\nroot: book/{names[0]}\nchapters:\n"
                                       + "".join(f"  - file: book/{n}\n" for n in names[1:]))
    return tmp_path


def test_chapters_run_outside_the_book_and_the_status_says_which_failed(tmp_path):
    # the first notebook checks that it runs in an empty folder at smoke, outside the book
    root = book(tmp_path, {
        "first": "import os, pathlib\nassert os.environ['ITLIN_PRESET'] == 'smoke'\n"
                 "assert not pathlib.Path('_toc.yml').exists() and pathlib.Path('first.ipynb').exists()",
        "second": "raise RuntimeError('a broken chapter')"})
    out = tmp_path / "status" / "newest.json"
    assert newest.main(["--book", str(root), "--out", str(out), "--jobs", "2"]) == 1   # one chapter failed
    status = json.loads(out.read_text())
    rows = {r["chapter"]: r for r in status["chapters"]}
    assert list(rows) == ["first", "second"]
    assert rows["first"]["passed"] and rows["first"]["error"] is None
    assert not rows["second"]["passed"] and "a broken chapter" in rows["second"]["error"]
    assert status["versions"]["jax"] and status["preset"] == "smoke"
    text = newest.status_markdown(out)
    assert "1 of 2 chapters ran" in text and f"jax {status['versions']['jax']}" in text
    assert "| {doc}`second` | no: " in text and "| {doc}`first` | yes |" in text


def test_bad_input_and_a_damaged_status_say_what_is_wrong(tmp_path, capsys):
    assert newest.main(["--book", str(tmp_path), "--out", str(tmp_path / "s.json")]) == 2
    assert "_toc.yml" in capsys.readouterr().err
    damaged = tmp_path / "newest.json"
    damaged.write_text('{"format": 1, "versions": ')
    with pytest.raises(ValueError, match="damaged"):
        newest.status_markdown(damaged)
    assert "No Colab-like check" in newest.status_markdown(tmp_path / "none.json")
    with pytest.raises(ValueError, match="jobs must be a positive whole number"):
        newest.check(book(tmp_path, {"a": "1"}), damaged, jobs=0)
    # the tests import itlin_core from this checkout: the check refuses, since it would not test
    # the install it reports
    root = pathlib.Path(__file__).resolve().parents[1]
    with pytest.raises(ValueError, match="not from a copy installed with pip"):
        newest.check(root, tmp_path / "never.json")
    assert not (tmp_path / "never.json").exists()


def test_at_the_pinned_versions_only_the_first_and_last_chapters_run_again(tmp_path):
    """Where the newest versions are the pins, `make test` has just executed every chapter with
    them: the check executes the first and last notebooks only and says why the others did not
    run; where one version differs, it executes every chapter."""
    (tmp_path / "b").mkdir()
    root = book(tmp_path / "b", {"first": "x = 1", "middle": "raise RuntimeError('executed')", "last": "y = 2"})
    got = newest.versions()
    same = tmp_path / "same.txt"
    same.write_text("# pins\n" + "".join(f"{k}=={got[k]}\n" for k in newest.COMPARED) + "pytest==9.2.0\n")
    out = tmp_path / "same.json"
    assert newest.main(["--book", str(root), "--out", str(out), "--pinned", str(same)]) == 0
    rows = {r["chapter"]: r for r in json.loads(out.read_text())["chapters"]}
    assert rows["first"]["passed"] and rows["last"]["passed"]
    assert rows["middle"]["passed"] is None and rows["middle"]["error"] == newest.SAME_AS_PINS
    text = newest.status_markdown(out)
    assert "2 of 3 chapters ran" in text and "the other 1 were not re-run" in text
    assert "| {doc}`middle` | not re-run (pinned versions) |  |" in text
    # where one version differs, every chapter runs (the choice itself, without kernels)
    other = tmp_path / "other.txt"
    other.write_text(same.read_text().replace(f"jax=={got['jax']}", "jax==0.0.1"))
    assert newest.to_execute(["first", "middle", "last"], got, other) == (["first", "middle", "last"], False)
    assert newest.to_execute(["first", "middle", "last"], got, same) == (["first", "last"], True)
    assert newest.main(["--book", str(root), "--out", str(out), "--pinned", str(tmp_path / "none.txt")]) == 2
