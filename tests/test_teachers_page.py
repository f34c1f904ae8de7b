"""The page for teachers (book/teachers.md) lists every exercise in the book.

Every page in _toc.yml (notebooks and Markdown) is scanned for sphinx-exercise directives
(`exercise` and the gated `exercise-start`) and their `:label:`. Every labelled exercise must be
linked from the teachers page with {ref}`label`, every exercise must have a label (otherwise it
cannot be linked), and the page must not link exercises that no longer exist. A new chapter
with exercises therefore fails this test until the teachers page lists them.
"""

import json
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEACHERS = ROOT / "book" / "teachers.md"

# Opening line of an exercise directive: ```{exercise} Title, ::::{exercise-start} Title, ...
EXERCISE_OPEN = re.compile(r"^\s*(`{3,}|:{3,})\{(exercise|exercise-start)\}(.*)$")
OPTION = re.compile(r"^\s*:([\w-]+):\s*(.*?)\s*$")


def toc_files(toc=None):
    """Paths (without suffix, relative to the repository root) of every page in _toc.yml."""
    toc = toc if toc is not None else yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    files.append(node[key])
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(toc)
    return files


def page_source(stem):
    """The source of a toc entry as (path, list of Markdown texts)."""
    for suffix in (".ipynb", ".md"):
        path = ROOT / (stem + suffix)
        if path.exists():
            if suffix == ".md":
                return path, [path.read_text()]
            nb = json.loads(path.read_text())
            return path, ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                          for c in nb["cells"] if c["cell_type"] == "markdown"]
    raise AssertionError(f"_toc.yml lists {stem!r}, but neither {stem}.ipynb nor {stem}.md exists.")


def exercises_in(texts):
    """(label or None, title) of every exercise directive in the given Markdown texts."""
    found = []
    for text in texts:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = EXERCISE_OPEN.match(line)
            if not m:
                continue
            title, label = m.group(3).strip(), None
            j = i + 1
            if j < len(lines) and lines[j].strip() == "---":  # options as a YAML block
                end = next((k for k in range(j + 1, len(lines)) if lines[k].strip() == "---"), None)
                if end is not None:
                    opts = yaml.safe_load("\n".join(lines[j + 1:end])) or {}
                    label = opts.get("label")
            else:  # options as :key: value lines
                while j < len(lines) and (m2 := OPTION.match(lines[j])):
                    if m2.group(1) == "label":
                        label = m2.group(2)
                    j += 1
            found.append((label, title))
    return found


def book_exercises():
    """{label: (page, title)} of every exercise in the toc, and the unlabelled ones."""
    labelled, unlabelled = {}, []
    for stem in toc_files():
        path, texts = page_source(stem)
        for label, title in exercises_in(texts):
            if label is None:
                unlabelled.append(f"{path.relative_to(ROOT)}: {title!r}")
            else:
                labelled[label] = (str(path.relative_to(ROOT)), title)
    return labelled, unlabelled


def test_the_scanner_reads_both_option_styles():
    text = ("```{exercise} A\n:label: ex-a\n:class: x\n\nbody\n```\n"
            "::::{exercise-start} B\n---\nlabel: ex-b\n---\n::::\n"
            "```{exercise} C\nno label\n```\n```{solution} ex-a\n```\n")
    assert exercises_in([text]) == [("ex-a", "A"), ("ex-b", "B"), (None, "C")]


def test_every_toc_page_exists_and_the_teachers_page_is_in_the_toc():
    stems = toc_files()
    for stem in stems:
        page_source(stem)
    assert "book/teachers" in stems, "book/teachers.md is not listed in _toc.yml."


def test_teachers_page_lists_every_exercise():
    labelled, unlabelled = book_exercises()
    assert labelled, "no exercises found in the book; the scanner is broken"
    assert not unlabelled, ("these exercises have no :label:, so the teachers page cannot link them: "
                            + "; ".join(unlabelled))
    listed = set(re.findall(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([^`>]+)>?`", TEACHERS.read_text()))
    missing = [f"{label} ({page}: {title!r})" for label, (page, title) in labelled.items() if label not in listed]
    assert not missing, ("book/teachers.md does not list these exercises; add a row with {ref}`label`, "
                         "a one-line learning goal and its kind under the chapter's heading: " + "; ".join(missing))
    stale = sorted(listed - set(labelled))
    assert not stale, f"book/teachers.md links exercises that are not in any toc page: {stale}"


def test_the_teachers_page_marks_checked_exactly_the_exercises_that_name_a_checker():
    """*checked* in the Kind column means the exercise names a checker (``check_...``) that
    students can call; every exercise of the book names one."""
    statements = {}
    for stem in toc_files():
        for text in page_source(stem)[1]:
            for m in re.finditer(r"`{3,4}\{exercise\}.*?:label: (\S+)(.*?)(?=\n`{3,4}\s*$|\Z)", text, re.S | re.M):
                statements[m.group(1)] = m.group(0)
    kinds = {m.group(1): {k.strip() for k in m.group(2).split(",")}
             for m in re.finditer(r"^\| \{ref\}`(ex-[^`]+)`.*\| ([a-z, ]+) \| (?:intro|core|stretch) \|",
                                  TEACHERS.read_text(), re.M)}
    assert statements and kinds.keys() == statements.keys(), set(kinds) ^ set(statements)
    wrong = [label for label, text in statements.items() if ("check_" in text) != ("checked" in kinds[label])]
    assert not wrong, f"the Kind column's 'checked' disagrees with the exercise text: {wrong}"
    assert all("check_" in text for text in statements.values())


def test_each_chapter_ends_with_two_to_four_exercises_then_only_its_checks():
    """The page says: near the end of each chapter a section *Exercises* holds two to four of
    them, followed only by the chapter's check cells. Every chapter notebook of the table of
    contents but the closing one (which trains nothing and sets none) is held to that."""
    assert "two to\nfour of them, followed only by the chapter's check cells" in TEACHERS.read_text()
    labelled, _ = book_exercises()
    counts = {stem: 0 for stem in toc_files() if (ROOT / f"{stem}.ipynb").exists() and stem != "book/conclusion"}
    for page, _title in labelled.values():
        counts[page.removesuffix(".ipynb")] = counts.get(page.removesuffix(".ipynb"), 0) + 1
    assert len(counts) >= 15 and all(2 <= n <= 4 for n in counts.values()), counts
    for stem in counts:
        cells = json.loads((ROOT / f"{stem}.ipynb").read_text())["cells"]
        headings = [line for c in cells if c["cell_type"] == "markdown"
                    for line in "".join(c["source"]).splitlines() if re.match(r"#{1,2} ", line)]
        assert "## Exercises" in headings, stem
        after = headings[headings.index("## Exercises") + 1:]
        assert after in ([], ["## Checks"]), (stem, after)
