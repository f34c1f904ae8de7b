"""The package's two layers stay as ARCHITECTURE.md describes them: the algorithm layer never
imports the book layer and has no import cycles, no module grows past about 400 lines, every
module is listed in ARCHITECTURE.md, and no code points readers to a design file that is not in
the repository."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "itlin_core"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 400


def name_of(path):
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imports(path):
    """The itlin_core modules that ``path`` imports (relative imports resolved)."""
    mod = name_of(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if node.module:
                    out.add(target)
                else:
                    out.update(f"{target}.{a.name}" for a in node.names)
            elif node.module and node.module.startswith("itlin_core"):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("itlin_core"))
    return out


def is_book(mod):
    return mod == "itlin_core.book" or mod.startswith("itlin_core.book.")


def is_tools(mod):
    """The maintainers' tools (recording, the build's executor, benchmarks, the Colab-like check):
    they import both layers and neither layer imports them."""
    return mod == "itlin_core.tools" or mod.startswith("itlin_core.tools.")


def test_the_algorithm_layer_never_imports_the_book_layer():
    for path in MODULES:
        mod = name_of(path)
        if not is_book(mod) and not is_tools(mod):
            bad = sorted(m for m in imports(path) if is_book(m))
            assert not bad, f"{mod} imports the book layer: {bad}"


def test_nothing_but_the_tools_imports_the_tools():
    """A chapter's code never depends on the recorder, the executor or the benchmarks."""
    tools = [p for p in MODULES if is_tools(name_of(p)) and p.name != "__init__.py"]
    assert len(tools) >= 5, "the scan found too few tool modules; is it broken?"
    for path in MODULES:
        mod = name_of(path)
        if not is_tools(mod):
            bad = sorted(m for m in imports(path) if is_tools(m))
            assert not bad, f"{mod} imports the tools: {bad}"


def test_the_algorithm_layer_has_no_import_cycles():
    graph = {}
    for path in MODULES:
        mod = name_of(path)
        if not is_book(mod) and not is_tools(mod) and mod != "itlin_core":
            graph[mod] = {m for m in imports(path) if m in {name_of(p) for p in MODULES} and m != "itlin_core"}
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for d in graph.get(m, ()):
            assert state.get(d) != "open", f"import cycle: {' -> '.join(stack + [m, d])}"
            if d not in state:
                visit(d, stack + [m])
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m, [])


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_are_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines; split it (ARCHITECTURE.md)"


def test_every_module_is_in_architecture_md():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    listed = set(re.findall(r"`([A-Za-z_0-9]+\.py)`", text))
    missing = sorted(str(p.relative_to(PACKAGE)) for p in MODULES if p.name not in listed)
    assert not missing, f"modules missing from ARCHITECTURE.md: {missing}"


def test_no_pointer_to_a_missing_design_file():
    for path in MODULES:
        assert "DESIGN" not in path.read_text(), f"{path.relative_to(ROOT)} points to DESIGN.md"


def algorithm_table_order():
    """The algorithm modules in the order of ARCHITECTURE.md's first table (top row first)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    table = text.split("## The algorithms", 1)[1].split("## The book layer", 1)[0]
    return [m.removesuffix(".py") for m in re.findall(r"^\| `([A-Za-z_0-9]+\.py)` \|", table, re.M)]


def test_algorithm_modules_import_only_rows_below_them():
    order = algorithm_table_order()
    assert order[0] == "__init__" and len(order) == len(set(order))
    rank = {f"itlin_core.{m}": i for i, m in enumerate(order)}
    for path in MODULES:
        mod = name_of(path)
        if is_book(mod) or is_tools(mod) or mod == "itlin_core":
            continue
        for dep in imports(path):
            if dep in rank:
                assert rank[dep] > rank[mod], f"{mod} imports {dep}, which ARCHITECTURE.md lists above it"


SHARED_BOOK = {"common", "records", "plotting", "widgets", "exercises", "exercises_features", "exercises_images",
               "exercises_explore",
               "image_runs", "image_records", "image_chapters", "image_settings", "rules", "claims", "estimates", "sweeps"}
#: the image chapter modules, which image_chapters (their table, runner and recorder) imports
IMAGE_CHAPTERS = {"cifar_few_updates", "cifar_features", "cifar_damping", "resnet_mnist"}


# the chapters that build on another chapter's problem (ARCHITECTURE.md says which)
BUILDS_ON = {("mean_field_scaling", "mean_field_gn"), ("mean_field_images", "mean_field_gn"),
             ("mean_field_record", "mean_field_gn"), ("refresh_rules", "digits_cnn"), ("refresh_rules", "xor_features"),
             ("refresh_rules", "mean_field_gn")}


def test_book_layer_arrows():
    book = {name_of(p).rsplit(".", 1)[1] for p in MODULES if is_book(name_of(p)) and p.name != "__init__.py"}
    chapters = book - SHARED_BOOK
    assert {"linearisation", "cifar_damping", "mean_field_gn"} <= chapters
    for path in MODULES:
        mod = name_of(path)
        if not is_book(mod) or path.name == "__init__.py":
            continue
        here = mod.rsplit(".", 1)[1]
        for dep in imports(path):
            if not is_book(dep) or dep == "itlin_core.book":
                continue
            there = dep.rsplit(".", 1)[1]
            if there in chapters and not (here == "image_chapters" and there in IMAGE_CHAPTERS):
                assert here in chapters and (here, there) in BUILDS_ON, \
                    f"{mod} imports the chapter module {dep}"
            if here in IMAGE_CHAPTERS:
                assert there != "image_chapters", f"{mod} imports image_chapters, which imports it (a cycle)"


def test_no_module_is_imported_by_name():
    """Imports are visible import statements: no importlib, no __import__ (an import cycle hidden
    behind one is what the image chapters had)."""
    for path in MODULES:
        text = path.read_text()
        assert "importlib" not in text and "__import__" not in text, path


def test_every_public_name_has_one_place_on_the_api_pages():
    """The API reference is split by topic (book/api/*.md, listed under book/api in _toc.yml):
    every name of ``itlin_core.__all__`` is documented on exactly one page, every page is in the
    table of contents, and nothing documented there is missing from ``__all__``."""
    import itlin_core

    pages = sorted((ROOT / "book" / "api").glob("*.md"))
    toc = (ROOT / "_toc.yml").read_text()
    assert pages and all(f"book/api/{p.stem}" in toc for p in pages), "an API page is not in _toc.yml"
    where = {}
    for page in pages:
        for name in re.findall(r"^\.\. auto(?:function|class):: (\w+)", page.read_text(), flags=re.M):
            where.setdefault(name, []).append(page.name)
    missing = sorted(set(itlin_core.__all__) - set(where))
    twice = {n: p for n, p in where.items() if len(p) > 1}
    unknown = sorted(set(where) - set(itlin_core.__all__))
    assert not missing and not twice and not unknown, \
        f"API pages: missing {missing}, documented twice {twice}, not in __all__ {unknown}"
