"""The book builds, and a failing cell fails the build (issue: "the build must fail when a
cell fails"). Both build into temporary directories with the repository's own _config.yml."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
JB = pathlib.Path(sys.executable).with_name("jupyter-book")

pytestmark = pytest.mark.skipif(not JB.exists(), reason="jupyter-book is not installed in this environment")


def build(root, out):
    env = dict(os.environ, JAX_PLATFORMS="cpu", ITLIN_PRESET="smoke", ITLIN_PROGRESS="off", ITLIN_SLIDERS="static")
    return subprocess.run([str(JB), "build", str(root), "--path-output", str(out)], env=env,
                          capture_output=True, text=True, timeout=900)


def test_failing_cell_fails_the_build(tmp_path):
    book = tmp_path / "book_src"
    (book / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/broken\n")
    (book / "book" / "intro.md").write_text("# Intro\n")
    (book / "book" / "references.bib").write_text("")
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {}, "outputs": [],
                     "source": "raise RuntimeError('this cell fails on purpose')"}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (book / "book" / "broken.ipynb").write_text(json.dumps(nb))
    result = build(book, tmp_path / "out")
    assert result.returncode != 0, result.stdout[-2000:]
    assert "this cell fails on purpose" in result.stdout + result.stderr


def test_whole_book_builds_at_smoke_preset(tmp_path):
    result = build(ROOT, tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    html = tmp_path / "_build" / "html"
    for chapter in ["linearisation", "iterative_linearisation"]:
        page = (html / "book" / f"{chapter}.html").read_text()
        assert len(re.findall(r"<img [^>]*_images/", page)) >= 1, f"{chapter}: no executed figure"
        assert "Traceback" not in page and 'class="output stderr"' not in page
        assert re.search(rf"colab\.research\.google\.com/github/[^\"]+/blob/main/book/{chapter}\.ipynb", page), \
            f"{chapter}: no (or a malformed) Colab launch link"
    assert "itlin_core.gn_step" in (html / "book" / "api.html").read_text()
