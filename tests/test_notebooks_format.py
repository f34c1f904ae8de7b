"""The chapters are stored as the build and Colab expect them: without outputs (the build and
nbval execute them), a hidden Colab install cell first, check cells last, listed in the toc."""

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts and "_build" not in p.parts)
TOC = (ROOT / "_toc.yml").read_text()


def test_there_are_chapters():
    assert len(NOTEBOOKS) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs"), f"{path.name}: strip outputs (the build executes notebooks)"
            assert cell.get("execution_count") is None, f"{path.name}: strip execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_colab_cell_checks_and_toc(path):
    nb = json.loads(path.read_text())
    first = nb["cells"][0]
    assert first["cell_type"] == "code" and "remove-cell" in first["metadata"].get("tags", [])
    src = "".join(first["source"])
    assert '"google.colab" in sys.modules' in src and "itlin-core" in src
    assert "jax" not in src.split("install", 1)[1].replace("itlin-core", ""), "do not reinstall JAX on Colab"
    # the chapter ends with check cells asserting its claims
    last_code = [c for c in nb["cells"] if c["cell_type"] == "code"][-1]
    assert "assert" in "".join(last_code["source"])
    assert f"book/{path.stem}" in TOC, f"{path.name} is not in _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_ends_by_displaying_a_glued_value(path):
    """``common.glue`` returns its value (so it can be used inline); as a cell's last expression that
    value would be printed into the page beside the prose that pastes it. End such cells with
    ``_ = common.glue(...)``."""
    import ast

    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                        for line in "".join(cell["source"]).split("\n"))      # IPython magics as `pass`
        body = ast.parse(src).body
        if body and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Call):
            called = ast.unparse(body[-1].value.func)
            assert not called.endswith("glue") or src.rstrip().endswith(";"), \
                f"{path.name}: a cell ends with {called}(...), which displays the glued value; write `_ = {called}(...)`"
