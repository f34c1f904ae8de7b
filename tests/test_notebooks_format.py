"""The chapters are stored as the build and Colab expect them: without outputs (the build and
nbval execute them), a hidden Colab install cell first, check cells last, listed in the toc."""

import json
import re
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_checks_run_but_are_not_shown(path):
    """The "## Checks" block at the end of a chapter asserts its claims for maintainers: nbval and the
    build execute it, and the tag ``remove-cell`` keeps it off the rendered page."""
    cells = json.loads(path.read_text())["cells"]
    start = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Checks")]
    assert len(start) == 1, f"{path.name}: expected one '## Checks' heading, found {len(start)}"
    for cell in cells[start[0]:]:
        assert "remove-cell" in cell["metadata"].get("tags", []), \
            f"{path.name}: a cell of the Checks block is not tagged remove-cell: {''.join(cell['source'])[:60]!r}"


#: Shorthand that means something to maintainers only: the papers' file numbers in ../shared/papers
#: ("paper 003", "000 Fig. 5"), raw equation labels ("(eq-gn)"), and maintainer files.
SHORTHAND = re.compile(r"[Pp]apers? 00\d|(?<![\d,.] )(?<![\d,.])\b00[0-3]\b(?:'s)?(?= (?:Figs?\.|§|App\.|eqs?\.|Lemma|uses|for)|'s)"
                       r"|\(eq-[a-z0-9-]+\)|DESIGN\.md|text copy of the paper")
READER_FILES = sorted([*NOTEBOOKS, *(ROOT / "book").glob("*.md"), *(ROOT / "itlin_core").rglob("*.py")])


def shorthand_in(text):
    # an equation's own label after its closing $$ and {eq} references are MyST syntax, not prose
    text = re.sub(r"\$\$ *\(eq-[a-z0-9-]+\)|\{eq\}`[^`]*`", "", text)
    return [text[max(0, m.start() - 40):m.end() + 20].replace("\n", " ") for m in SHORTHAND.finditer(text)]


@pytest.mark.parametrize("path", READER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_shorthand_reaches_readers(path):
    """Chapters, pages and the docstrings of the API page name the papers as readers know them
    (Goldwaser and Ge 2024, Arbel et al. 2023), never by the maintainers' file numbers, and code
    comments and printed output name an equation in words, not by its raw MyST label."""
    text = path.read_text()
    if path.suffix == ".ipynb":
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
    hits = shorthand_in(text)
    assert not hits, f"{path.relative_to(ROOT)}: internal shorthand a reader would not know: {hits}"


def test_the_shorthand_pattern_finds_what_it_should():
    for bad in ["(paper 003 convention)", "as in 000 Fig. 5", "003's RF baseline", "# eq. (eq-gn)", "see DESIGN.md"]:
        assert shorthand_in(bad), bad
    for fine in ["10 000 images", "50,000 images", "$K = 20\\,000$", "$$ (eq-gn)", "{eq}`eq-gn`", "Goldwaser and Ge 2024, Fig. 5"]:
        assert not shorthand_in(fine), fine


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_shown_to_readers_fits_the_page(path):
    """Code lines longer than 90 characters scroll sideways on the page; cells removed from the
    page (the Colab install cell, the Checks block) are exempt."""
    long = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code" and "remove-cell" not in cell["metadata"].get("tags", []):
            long += [f"cell {i}: {line[:60]}..." for line in "".join(cell["source"]).split("\n") if len(line) > 90]
    assert not long, f"{path.name}: code lines over 90 characters: {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_slider_is_a_numbered_figure_with_a_caption(path):
    """A slider's frames are a figure too: each ``widgets.slider(...)`` call passes ``name=`` and
    ``alt=`` (the frames' description), and the Markdown cell right after it shows the glued player
    as ``{glue:figure}`` under that name, with a ``:name:`` to refer to and a written caption."""
    import ast

    cells = json.loads(path.read_text())["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code" or "widgets.slider(" not in "".join(cell["source"]):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "widgets.slider":
                kw = {k.arg: k.value for k in node.keywords}
                assert {"name", "alt"} <= set(kw), f"{path.name}: a slider without name= and alt="
                name = ast.literal_eval(kw["name"])
                after = "".join(cells[i + 1]["source"]) if i + 1 < len(cells) else ""
                m = re.match(r"```\{glue:figure\} (\S+)\n:name: (\S+)\n\n(.+?)\n```", after, re.S)
                assert cells[i + 1]["cell_type"] == "markdown" and m, \
                    f"{path.name}: the cell after slider {name!r} does not show it with {{glue:figure}}"
                assert m.group(1) == m.group(2) == name and len(m.group(3).split()) >= 8, \
                    f"{path.name}: slider {name!r}: figure {m.group(1)!r}, label {m.group(2)!r}, caption {m.group(3)!r}"


def _header(path):
    """The level and reading time a chapter states at its top, e.g. ("intro", "30 min")."""
    nb = json.loads(path.read_text())
    text = re.sub(r"\s+", " ", " ".join("".join(c["source"]) for c in nb["cells"][:3]
                                        if c["cell_type"] == "markdown"))
    level = re.search(r"Level: ([a-z ]+)\.", text)
    time = re.search(r"Reading time: about (\d+ minutes|an hour)", text)
    assert level and time, f"{path.name}: its top states no 'Level: ...' and 'Reading time: about ...'"
    assert level.group(1) in ("intro", "intermediate", "advanced"), \
        f"{path.name}: level {level.group(1)!r} is not intro, intermediate or advanced (book/teachers.md's scale)"
    return level.group(1), "1 h" if time.group(1) == "an hour" else time.group(1).replace(" minutes", " min")


def test_the_introductions_map_lists_every_chapter_with_its_own_level_and_reading_time():
    rows = dict((m.group(1), (m.group(2), m.group(3))) for m in re.finditer(
        r"^\| \{doc\}`(\w+)` \| ([^|]+?) \| ([^|]+?) \|", (ROOT / "book" / "intro.md").read_text(), re.M))
    for path in NOTEBOOKS:
        assert path.stem in rows, f"the map in book/intro.md does not list {path.stem}"
        assert rows[path.stem] == _header(path), f"book/intro.md's row for {path.stem} differs from its top"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_has_its_own_id(path):
    """nbformat 4.5 gives each cell an ``id``; a cell added without one makes nbformat warn on
    every read (and will be an error in later versions)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    ids = [c.get("id") for c in nb["cells"]]
    assert all(ids), f"{path.name}: cells {[i for i, x in enumerate(ids) if not x]} have no id"
    assert len(set(ids)) == len(ids), f"{path.name}: two cells share an id"


def prose_sentences(path) -> list:
    """The sentences of a page's written prose (a notebook's Markdown cells, or a Markdown page),
    whitespace collapsed; only those over 70 characters, the length of a sentence that says
    something rather than a heading or a label."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        text = path.read_text()
    return [s for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text)) if len(s) > 70]


def test_no_sentence_of_the_prose_is_written_twice():
    """Issue 42: no paragraph twice. A sentence shared by two pages (or said twice on one) is
    written once and referred to; the check works on sentences, so that a paragraph copied with
    one word changed is still caught by its other sentences."""
    pages = NOTEBOOKS + sorted((ROOT / "book").glob("*.md"))
    seen = {}
    repeated = []
    for path in pages:
        for sentence in prose_sentences(path):
            if sentence in seen:
                repeated.append(f"{seen[sentence]} and {path.name}: {sentence[:120]}")
            seen.setdefault(sentence, path.name)
    assert not repeated, "\n".join(repeated)


def solutions(path):
    """(label, text of the solution's last Markdown cell) for every solution of a notebook."""
    label, found = None, []
    for cell in json.loads(path.read_text())["cells"]:
        text = "".join(cell["source"])
        start = re.search(r"\{solution-start\}\s+(\S+)", text)
        if start:
            label = start.group(1)
        if "{solution-end}" in text:
            found.append((label, text))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_solution_ends_with_its_conclusion_in_one_sentence(path):
    """Issue 42: a solution closes with a paragraph "**Conclusion.** <one sentence>" just before
    its end, so that a reader who skims the working still takes the answer away."""
    for label, text in solutions(path):
        body = text[: text.index("```{solution-end}")].rstrip()
        last = body.split("\n\n")[-1]
        assert last.startswith("**Conclusion.** "), f"{path.name}: {label} ends without a conclusion"
        sentence = last.removeprefix("**Conclusion.** ").replace("\n", " ")
        # one sentence: it ends with a full stop and none of its other full stops ends a sentence
        inner = re.sub(r"\$[^$]*\$", "", sentence[:-1])
        assert sentence.endswith(".") and not re.search(r"\.\s+[A-Z]", inner), (
            f"{path.name}: {label}'s conclusion is not one sentence: {sentence!r}")


def test_the_solutions_are_found():
    assert sum(len(solutions(p)) for p in NOTEBOOKS) >= 40
