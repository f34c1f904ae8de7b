"""No measurement is typed into the prose: a decimal number or a percentage in a page's text must
come from a cell through myst-nb's ``glue`` (so the sentence always matches the run at the preset
the book was built with), or be listed in ALLOWED below with the reason it is not a measurement of
this book's runs.

The heuristic, on every markdown cell of ``book/*.ipynb`` and every ``book/*.md`` page: remove
what may hold numbers legitimately (maths ``$...$``/``$$...$$``, code spans and fenced code,
``{glue...}`` and ``{cite...}`` roles, link targets, quotations ``> ...``, section numbers
``§3.2``), then look for a number with a decimal point (``0.891``) or a percentage (``60%``).
Integers (sizes, steps, counts of images) are not flagged: they are settings far more often than
measurements.
"""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "book").glob("*.md"))

STRIP = [r"```.*?```", r"\$\$.*?\$\$", r"\$[^$\n]+\$", r"\{glue(?::\w+)?\}`[^`]*`", r"\{cite(?::\w+)?\}`[^`]*`",
         r"`[^`]*`", r"\]\([^)]*\)", r"https?://\S+", r"^[ \t]*>[^\n]*$", r"§\s*[\d.]+(\s*[-–,]\s*[\d.]+)*"]
NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?[ \t]*%|\d+\.\d+)(?![\w.]*\d)")

# (page, number as written) -> why it is not a measurement of this book's runs
ALLOWED = {
    ("*", "100%"): "perfect training accuracy, fitting every training example: a notion, not a measurement",
    ("cifar_damping.ipynb", "60%"): "the paper's reported result (Goldwaser and Ge, Fig. 8), attributed as such",
    ("cifar_damping.ipynb", "69%"): "the paper's reported result (Fig. 8), attributed as such",
    ("cifar_damping.ipynb", "70%"): "the paper's reported result (Fig. 8), attributed as such",
    ("cifar_few_updates.ipynb", "82.3%"): "the paper's reported result (Fig. 3), attributed as such",
    ("cifar_few_updates.ipynb", "81.4%"): "the paper's reported result (Fig. 3), attributed as such",
    ("resnet_mnist.ipynb", "50%"): "the paper's reported result, attributed as such",
    ("*", "50%"): "the accuracy at which a binomial standard error is largest: the tolerances' convention",
    ("mean_field_gn.ipynb", "95%"): "the confidence level of an interval (a setting, as in Arbel et al.'s App. C.1)",
}


def prose(path):
    """(cell index, text) of each markdown cell, or the whole page for a .md file."""
    if path.suffix == ".md":
        return [(0, path.read_text())]
    cells = json.loads(path.read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def typed_numbers(text):
    for pattern in STRIP:
        text = re.sub(pattern, " ", text, flags=re.S | re.M)
    return [re.sub(r"\s+", "", m.group(0)) for m in NUMBER.finditer(text)]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_measurement_is_typed_into_the_prose(path):
    found = [(i, n) for i, text in prose(path) for n in typed_numbers(text)
             if (path.name, n) not in ALLOWED and ("*", n) not in ALLOWED]
    assert not found, (f"{path.name}: numbers typed into the prose (cell, number): {found}. Glue them from the "
                       "cell that computes them ({glue:text}`name`), or, if one is not a measurement of the "
                       "book's runs, add it to ALLOWED in tests/test_prose_numbers.py with the reason.")


@pytest.mark.parametrize("text, expected", [
    ("ends at 0.891 against 0.899 at initialisation", ["0.891", "0.899"]),
    ("about 60% of them, and 12.5 % of the rest", ["60%", "12.5%"]),
    ("glued {glue:text}`acc:.3f` and $\\lambda = 0.1$ and `lr=0.3`", []),
    ("see §3.2-3.3 and {cite}`il2024`, [a link](https://x.org/v1.2)", []),
    ("> a quotation with 0.5 in it\n\nbut 0.25 here", ["0.25"]),
    ("```python\nx = 0.5\n```\nK = 10 steps, 497 images, version v1.2.3", []),
])
def test_the_heuristic(text, expected):
    assert typed_numbers(text) == expected


def test_every_allowed_entry_is_still_used():
    """An allow-list entry whose number has left its page is removed, so the list stays honest."""
    used = {(p.name, n) for p in PAGES for _, text in prose(p) for n in typed_numbers(text)}
    stale = [key for key in ALLOWED if key[0] != "*" and key not in used]
    assert not stale, f"ALLOWED entries no longer found in their page: {stale}"
