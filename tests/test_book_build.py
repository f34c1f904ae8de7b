"""The book builds without warnings, a failing cell or a Sphinx warning fails the build, and the
static sliders of the built HTML work in a real browser (headless Chromium).

The whole book is built ONCE per test run, at the smoke preset with ``-W --keep-going``
(the ``smoke_book`` fixture); the build test and the browser test share that build. The small
failure-path builds use their own throw-away books. All builds use the repository's own
_config.yml. The builds are marked ``system`` and run in ``make test-system``, which renders the
notebooks that ``make test`` executed (``$ITLIN_TEST_BOOK_DIR``, see the Makefile); the checks
of this file that build nothing run in ``make test``.
"""

import contextlib
import functools
import io
import http.server
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import types
import warnings

import pytest

from itlin_core.tools import execution

ROOT = pathlib.Path(__file__).resolve().parents[1]
JB = pathlib.Path(sys.executable).with_name("jupyter-book")
# Any Sphinx warning fails the build; --keep-going reports all of them instead of the first.
STRICT = ("-W", "--keep-going")

pytestmark = pytest.mark.skipif(not JB.exists(), reason="jupyter-book is not installed in this environment")


def build(root, out, *flags, env=None):
    env = dict(os.environ, JAX_PLATFORMS="cpu", ITLIN_PRESET="smoke", ITLIN_PROGRESS="off", ITLIN_SLIDERS="static",
               **(env or {}))
    return subprocess.run([str(JB), "build", str(root), "--path-output", str(out), *flags], env=env,
                          capture_output=True, text=True, timeout=2400)   # a guard against a hang only


def sphinx_warnings(result):
    """Sphinx's WARNING/ERROR lines from a build log (not the kernel's own "[IPKernelApp] WARNING |")."""
    log = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + "\n" + result.stderr)
    return [line for line in log.splitlines() if re.search(r"(^|: )(WARNING|ERROR|CRITICAL|SEVERE): ", line)]


def small_book(tmp_path, pages):
    """A throw-away book with the repository's _config.yml (and its local Sphinx extension)."""
    book = tmp_path / "book_src"
    (book / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    shutil.copytree(ROOT / "book" / "_ext", book / "book" / "_ext")
    chapters = "".join(f"  - file: book/{name.split('.')[0]}\n" for name in pages)
    (book / "_toc.yml").write_text(f"format: jb-book\nroot: book/intro\nchapters:\n{chapters}")
    (book / "book" / "intro.md").write_text("# Intro\n")
    (book / "book" / "references.bib").write_text("")
    for name, text in pages.items():
        (book / "book" / name).write_text(text)
    return book


@pytest.fixture(scope="module")
def smoke_book(tmp_path_factory):
    """The whole book, built once at the smoke preset with -W --keep-going.

    Under ``make test-system`` the build goes to ``$ITLIN_TEST_BOOK_DIR``, whose execution cache
    holds the notebooks nbval executed in ``make test`` (``conftest.py`` at the repository root);
    the build renders those that passed and executes only the others. When the notebooks run in
    the same session, it first waits until nbval has run every one of them. Without the variable
    it executes every notebook."""
    given = os.environ.get("ITLIN_TEST_BOOK_DIR")
    out = pathlib.Path(given) if given else tmp_path_factory.mktemp("smoke_book")
    if given:
        still = execution.wait_for_notebooks(out)
        if still:
            warnings.warn(f"the build did not wait any longer for the notebooks {still}; it executes them itself")
    cache = out / "_build" / ".jupyter_cache"
    cached = sorted(p.stem for p in execution.toc_notebooks(ROOT) if cache.exists() and execution.is_cached(cache, p))
    t0 = time.perf_counter()
    result = build(ROOT, out, *STRICT)
    return types.SimpleNamespace(result=result, html=out / "_build" / "html", seconds=time.perf_counter() - t0,
                                 cached=cached)


def test_the_build_waits_for_the_notebooks_nbval_is_running(tmp_path):
    """The marks ``make test``'s notebooks leave for the build: it waits for every expected
    notebook to be done, gives up after its timeout naming those still running, and does not
    wait at all in a session without notebooks."""
    assert execution.wait_for_notebooks(tmp_path, timeout=0) == []
    for name in ("a", "b"):
        execution.mark_notebook(tmp_path, name, "expected")
    execution.mark_notebook(tmp_path, "a", "done")
    t0 = time.perf_counter()
    assert execution.wait_for_notebooks(tmp_path, timeout=0.3, poll=0.05) == ["b"]
    assert time.perf_counter() - t0 >= 0.3
    execution.mark_notebook(tmp_path, "b", "done")
    assert execution.wait_for_notebooks(tmp_path, timeout=60) == []
    with pytest.raises(ValueError, match="state"):
        execution.mark_notebook(tmp_path, "a", "finished")


def notebook(*sources, markdown=""):
    cells = ([{"cell_type": "markdown", "id": "m0", "metadata": {}, "source": markdown}] if markdown else []) + [
        {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [], "source": src}
        for i, src in enumerate(sources)]
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5,
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}}})


@pytest.mark.parametrize("fails", [False, True], ids=["passes", "a cell fails"])
@pytest.mark.system
def test_nbval_hands_the_executed_notebook_to_the_build(tmp_path, fails):
    """`make test`'s shortcut (conftest.py at the repository root): a notebook that nbval has run with
    $ITLIN_TEST_BOOK_DIR set is rendered from the build's cache, not executed again (the notebook
    counts its executions in a file), with its stream, displayed and glued outputs; a notebook
    with a failing cell is not cached, so the build executes it itself and fails with the cell's error."""
    count = "import pathlib\np = pathlib.Path('runs.txt')\np.write_text((p.read_text() if p.exists() else '') + 'x')"
    glue = "from myst_nb import glue\nglue('answer', 6 * 7)\nprint('printed ' + 'line')"
    last = "raise RuntimeError('fails on purpose')" if fails else "from IPython.display import HTML\nHTML('<b>shown</b>')"
    book = small_book(tmp_path, {"page.ipynb": notebook(count, glue, last, markdown="The answer is {glue:text}`answer`.")})
    shutil.copy(ROOT / "conftest.py", book / "conftest.py")
    out = tmp_path / "out"
    nbval = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider",
                            "-p", "no:xdist", "-q", str(book / "book" / "page.ipynb")], cwd=book,
                           env=dict(os.environ, ITLIN_TEST_BOOK_DIR=str(out)), capture_output=True, text=True,
                           timeout=600)
    assert (nbval.returncode != 0) == fails, nbval.stdout[-3000:]
    assert (book / "book" / "runs.txt").read_text() == "x"
    # passed or not, the notebook is marked as expected and done, so the build waits no longer
    assert execution.wait_for_notebooks(out, timeout=0) == []
    assert {p.name for p in (out / "_notebooks").iterdir()} == {"expected-page", "done-page"}
    result = build(book, out)
    runs = (book / "book" / "runs.txt").read_text()
    if fails:   # the build executes it itself, fails, and says why
        assert runs == "xx" and result.returncode != 0, (runs, result.stdout[-2000:])
        assert "fails on purpose" in result.stdout + result.stderr, result.stdout[-2000:]
        return
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert runs == "x", "the build executed the notebook again instead of rendering nbval's outputs"
    page = (out / "_build" / "html" / "book" / "page.html").read_text()
    assert re.search(r"The answer is\s*(<[^>]*>\s*)*42", page), "the glued number is not in the page"
    assert "printed line" in page and "<b>shown</b>" in page


@pytest.mark.system
def test_notebooks_executed_in_parallel_are_rendered_from_the_cache(tmp_path):
    """`make book`'s first step: execution.execute_into_cache runs the table of contents' notebooks
    two at a time into the build's cache; the build then renders them without executing them
    again; a notebook that fails is left out of the cache (so the build runs it and reports it)."""
    count = ("import os, pathlib\np = pathlib.Path('runs-{0}.txt')\np.write_text((p.read_text() if p.exists() else '') + 'x')\n"
             "pathlib.Path('cores-{0}.txt').write_text(repr(sorted(os.sched_getaffinity(0))))")
    pages = {f"p{i}.ipynb": notebook(count.format(i), f"from myst_nb import glue\nglue('v{i}', {i} * 11)",
                                     markdown=f"Value {{glue:text}}`v{i}`.") for i in range(3)}
    pages["bad.ipynb"] = notebook(count.format("bad"), "raise RuntimeError('fails on purpose')")
    book = small_book(tmp_path, pages)
    cache = tmp_path / "out" / "_build" / ".jupyter_cache"
    log = io.StringIO()
    done = execution.execute_into_cache(book, cache, jobs=2, out=log)
    assert sorted(done) == ["p0", "p1", "p2"], log.getvalue()
    assert "bad.ipynb" in log.getvalue() and "FAILED" in log.getvalue()
    assert all(execution.is_cached(cache, book / "book" / f"p{i}.ipynb") for i in range(3))
    assert not execution.is_cached(cache, book / "book" / "bad.ipynb")
    shares = [execution.core_share(k, 2) for k in range(2)]
    if shares[0] is not None:   # each kernel ran on the cores of its worker
        assert all(set(eval((book / "book" / f"cores-{i}.txt").read_text())) in shares for i in range(3))
    assert json.loads((cache.parent / execution.TIMES_FILE).read_text()).keys() == {"p0", "p1", "p2"}
    assert execution.execute_into_cache(book, cache, jobs=2, out=io.StringIO()) == {}   # only `bad` is missing, and fails again
    (book / "book" / "bad.ipynb").unlink()
    (book / "_toc.yml").write_text((book / "_toc.yml").read_text().replace("  - file: book/bad\n", ""))
    result = build(book, tmp_path / "out")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert all((book / "book" / f"runs-{i}.txt").read_text() == "x" for i in range(3)), "a notebook ran twice"
    for i in range(3):
        page = (tmp_path / "out" / "_build" / "html" / "book" / f"p{i}.html").read_text()
        assert re.search(rf"Value\s*(<[^>]*>\s*)*{i * 11}", page)


def test_workers_share_the_cores_out(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert [execution.core_share(k, 2) for k in range(2)] == [{0, 2}, {1, 3}]
    assert [execution.core_share(k, 4) for k in range(4)] == [{0}, {1}, {2}, {3}]
    assert execution.core_share(0, 8) is None          # more workers than cores: nobody is pinned
    monkeypatch.delattr(os, "sched_getaffinity")
    assert execution.core_share(0, 2) is None          # not Linux


def test_the_suites_start_orders_name_files_that_exist():
    """tests/conftest.py starts make test's notebooks and its longest unit-test files first; a name
    there that matches no file would silently drop out of the order."""
    from conftest import SMOKE_SLOWEST_FIRST, UNIT_SLOWEST_FIRST   # tests/conftest.py

    assert all((ROOT / "book" / f"{n}.ipynb").is_file() for n in SMOKE_SLOWEST_FIRST), SMOKE_SLOWEST_FIRST
    assert all((ROOT / "tests" / f"{n}.py").is_file() for n in UNIT_SLOWEST_FIRST), UNIT_SLOWEST_FIRST
    assert len(set(UNIT_SLOWEST_FIRST)) == len(UNIT_SLOWEST_FIRST)


def test_notebooks_start_longest_first_and_untimed_ones_before_the_timed():
    first, second = execution.SLOWEST_FIRST[:2]
    paths = [pathlib.Path(f"book/{n}.ipynb") for n in ("a", second, "b", first, "c")]
    order = [p.stem for p in execution._start_order(paths, {"a": 10.0, "b": 50.0, "c": 20.0})]
    assert order == [first, second, "b", "c", "a"]
    assert [p.stem for p in execution._start_order(paths, {})][:2] == [first, second]


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "2"])
def test_execute_into_cache_refuses_a_bad_number_of_jobs(tmp_path, jobs):
    with pytest.raises(ValueError, match="jobs must be a positive integer"):
        execution.execute_into_cache(tmp_path, tmp_path / "cache", jobs=jobs)


EXERCISE_PAGE = json.dumps({
    "cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Chapter\n\n```{exercise} Do it\n:label: ex-t-1\n"
               "Compute.\n```\n\n```{solution-start} ex-t-1\n:class: dropdown\n```\nThe SOLUTION_TEXT is"},
              {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print('SOLUTION_CODE')"},
              {"cell_type": "markdown", "metadata": {}, "source": "```{solution-end}\n```\n\nAFTER_TEXT"},
              {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print('AFTER_CODE')"}],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5})
#: the Colab-like check's status file that the GPU page's directive renders (a made-up one)
NEWEST_STATUS = {"format": 1, "created": "2026-11-27T18:00:00+00:00", "preset": "smoke",
                 "versions": {"python": "3.11.7", "jax": "9.8.7", "jaxlib": "9.8.7", "optax": "0.2.8", "numpy": "2.4.6",
                              "matplotlib": "3.11.2", "itlin_core": "0.1.0"},
                 "chapters": [{"chapter": "page", "passed": False, "seconds": 3.0, "error": "ValueError: broken"}]}


def strict_small_book(root, hide: bool, with_gpu_page: bool):
    """A small book with the exercise page (and the GPU page's two directives), built with -W at
    ITLIN_HIDE_SOLUTIONS=hide: ``(result, html folder of its pages)``."""
    pages = {"exercise.ipynb": EXERCISE_PAGE}
    if with_gpu_page:
        pages["page.md"] = "# Page\n\n```{itlin-measured-costs} colab\n```\n\n```{itlin-newest-check}\n```\n"
    book = small_book(root, pages)
    (book / "book" / "results").mkdir()
    (book / "book" / "results" / "newest.json").write_text(json.dumps(NEWEST_STATUS))
    result = build(book, root / "out", *STRICT, env={"ITLIN_HIDE_SOLUTIONS": "1" if hide else "0"})
    return result, root / "out" / "_build" / "html" / "book"


@pytest.fixture(scope="module")
def shown_book(tmp_path_factory):
    """One strict build for two tests: solutions shown, and the GPU page's tables."""
    return strict_small_book(tmp_path_factory.mktemp("shown"), hide=False, with_gpu_page=True)


@pytest.mark.parametrize("hide", [False, True])
@pytest.mark.system
def test_solutions_can_be_hidden_for_a_class(tmp_path, hide, request):
    """ITLIN_HIDE_SOLUTIONS=1 (make book SOLUTIONS=hide) removes every solution from the page,
    the code cells of a gated solution included, and keeps the exercise and everything after."""
    result, html = request.getfixturevalue("shown_book") if not hide else strict_small_book(tmp_path, True, False)
    assert result.returncode == 0 and not sphinx_warnings(result), (result.stdout + result.stderr)[-3000:]
    page = (html / "exercise.html").read_text()
    for text in ["SOLUTION_TEXT", "SOLUTION_CODE"]:
        assert (text in page) != hide, f"{text} {'shown' if hide else 'missing'} with hide={hide}"
    assert "AFTER_TEXT" in page and "AFTER_CODE" in page and "Compute." in page


@pytest.mark.system
def test_a_sphinx_warning_fails_the_strict_build(tmp_path):
    book = small_book(tmp_path, {"page.md": "# Page\n\nA link to {ref}`no-such-label-anywhere`.\n"})
    result = build(book, tmp_path / "out", *STRICT)
    assert result.returncode != 0, "a build with an unresolved reference passed under -W"
    assert any("no-such-label-anywhere" in line for line in sphinx_warnings(result)), \
        (result.stdout + result.stderr)[-3000:]


@pytest.mark.system
def test_whole_book_builds_at_smoke_preset_without_warnings(smoke_book):
    result = smoke_book.result
    found = sphinx_warnings(result)
    assert not found, "the book build printed Sphinx warnings (fix them; the build runs with -W):\n" + \
        "\n".join(found)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    if os.environ.get("ITLIN_TEST_BOOK_DIR"):
        missed = sorted({p.stem for p in execution.toc_notebooks(ROOT)} - set(smoke_book.cached))
        if missed:   # correct, only slower: say so in the test report
            warnings.warn(f"the smoke build executed {missed} itself: nbval had not handed them over (yet)")
    html = smoke_book.html
    for chapter in ["linearisation", "iterative_linearisation"]:
        page = (html / "book" / f"{chapter}.html").read_text()
        assert len(re.findall(r"<img [^>]*_images/", page)) >= 1, f"{chapter}: no executed figure"
        assert "Traceback" not in page and 'class="output stderr"' not in page
        assert re.search(rf"colab\.research\.google\.com/github/[^\"]+/blob/main/book/{chapter}\.ipynb", page), \
            f"{chapter}: no (or a malformed) Colab launch link"
    api = (html / "book" / "api" / "gauss_newton.html").read_text()
    assert 'id="itlin_core.gn_step"' in api and "_modules/itlin_core/gauss_newton.html" in api, \
        "the API page documents itlin_core.gn_step with a link to its source"
    assert "Alias for field number" not in (html / "book" / "api" / "iterative.html").read_text()
    # markdown outputs (the image chapters' scale tables) render as tables, not as raw pipes
    raw = [p.name for p in sorted((html / "book").glob("*.html")) if re.search(r"\|\s*(?:—|–|---)\s*\|", p.read_text())]
    assert not raw, f"pages with a table printed as raw pipes: {raw}"
    assert "<table" in (html / "book" / "cifar_damping.html").read_text()
    # MathJax is served with the book (book/_ext/itlin_html.py), not from a CDN
    page = (html / "book" / "linearisation.html").read_text()
    assert re.search(r'<script[^>]*src="\.\./_static/mathjax/tex-mml-chtml\.js(\?v=[0-9a-f]+)?"', page), \
        "MathJax is not loaded from _static"
    assert "cdn.jsdelivr.net/npm/mathjax" not in page
    for part in ["tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "LICENSE"]:
        assert (html / "_static" / "mathjax" / part).exists(), f"_static/mathjax/{part} was not copied"
    # what readers should not see: the Checks blocks (executed, tagged remove-cell) and shorthand
    from test_notebooks_format import shorthand_in
    for page in sorted((html / "book").rglob("*.html")):
        text = page.read_text()
        assert 'id="checks"' not in text, f"{page.name}: the Checks block is shown to readers"
        visible = re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", " ", text, flags=re.S))
        assert not shorthand_in(visible), f"{page.name}: internal shorthand on the page: {shorthand_in(visible)}"
    # the execution table says in words whether each notebook passed (book/_ext/itlin_html.py)
    stats = (html / "book" / "execution_statistics.html").read_text()
    assert stats.count(">passed<") >= len(execution.toc_notebooks(ROOT)), "execution table: a status not in words"
    assert "\u2705" not in stats and "\u274c" not in stats
    glossary = (html / "book" / "glossary.html").read_text()
    for term in ["Lazy regime", "Truncated Gauss-Newton", "WCD", "Test-LRfit"]:
        assert re.search(rf'<dt id="term-[^"]*">{re.escape(term)}', glossary), f"glossary: no entry {term!r}"


# --- the static sliders in headless Chromium ---------------------------------------------------

CHROMIUM = pathlib.Path("/usr/bin/chromium")
CHROMEDRIVER = pathlib.Path("/usr/bin/chromedriver")
INSTALL_BROWSER = ROOT / ".ci" / "install-browser"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  # no request leaves the machine: every host except the local server is unresolvable,
                  # so the test behaves the same with and without internet access
                  "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                  "--window-size=1280,1600"]


def chromium_or_skip():
    """Chromium and its WebDriver; installed with .ci/install-browser when missing, else skip."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        try:
            out = subprocess.run([str(INSTALL_BROWSER)], capture_output=True, text=True, timeout=2400)   # a guard against a hang only
            log = (out.stdout + out.stderr).strip()
        except (OSError, subprocess.TimeoutExpired) as err:
            log = repr(err)
        if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
            pytest.skip(f"Chromium could not be installed ({CHROMIUM} and {CHROMEDRIVER} are needed; "
                        f".ci/install-browser said: {log[-500:]})")
    return CHROMIUM, CHROMEDRIVER


@contextlib.contextmanager
def serve(directory):
    """Serve ``directory`` over HTTP on 127.0.0.1 (a free port) from a background thread."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        timeout = 30

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextlib.contextmanager
def headless_chromium(profile_dir):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = chromium_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile_dir}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(chromedriver)), options=options)
    try:
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(30)
        yield driver
    finally:
        driver.quit()


def console_errors(driver, base_url):
    """SEVERE browser-console entries, except failed requests to other hosts (blocked on purpose:
    the CDN copies of MathJax and Font Awesome) and the browser's own request for /favicon.ico."""
    errors = []
    for entry in driver.get_log("browser"):
        if entry["level"] != "SEVERE":
            continue
        message = entry["message"]
        if entry.get("source") == "network" and (not message.startswith(base_url)
                                                 or message.startswith(f"{base_url}/favicon.ico")):
            continue
        errors.append(message)
    return errors


@pytest.mark.system
def test_maths_renders_offline_in_chromium(smoke_book, tmp_path):
    """With every other host unreachable, MathJax (served from _static) typesets the maths of a
    chapter: the page has MathJax's rendered elements and no displayed TeX is left raw."""
    from selenium.webdriver.support.ui import WebDriverWait

    with serve(smoke_book.html) as base_url, headless_chromium(tmp_path / "chromium-profile") as driver:
        driver.get(f"{base_url}/book/linearisation.html")
        WebDriverWait(driver, 60).until(
            lambda d: d.execute_script("return document.querySelectorAll('mjx-container').length") > 10,
            message="MathJax did not typeset the page offline (no mjx-container elements)")
        raw = driver.execute_script(
            "return [...document.querySelectorAll('div.math')].filter(e => !e.querySelector('mjx-container')).length")
        assert raw == 0, f"{raw} displayed equations were left as raw TeX"
        assert not console_errors(driver, base_url), console_errors(driver, base_url)


def figure_problems(driver, chapter: str, device: str) -> list:
    """What is wrong with the figures of a chapter page as Chromium shows it: every figure has a
    numbered caption, every output image is in a figure (or a slider) and every slider is in a
    numbered figure (glued, issue 42); at desktop width no
    figure is shrunk so far that the style's smallest font (legends and ticks) falls below 12 px
    (9 pt, issue 42) on screen, and on a phone a figure keeps a readable width (it scrolls in its own box)."""
    from itlin_core.book import plotting

    smallest_pt = min(float(plotting.STYLE[k]) for k in ["legend.fontsize", "xtick.labelsize", "ytick.labelsize"])
    natural_px = smallest_pt / 72 * plotting.STYLE["savefig.dpi"]     # in the PNG, before the page scales it
    problems = []
    figures = driver.execute_script(
        "return [...document.querySelectorAll('figure img:not(.itlin-slider-frame)')].map(i => [i.naturalWidth, "
        "i.getBoundingClientRect().width, !!i.closest('figure').querySelector('.caption-number')])")
    for natural, shown, numbered in figures:
        if not numbered:
            problems.append(f"{chapter} ({device}): a figure without a numbered caption")
        if device == "phone" and natural and shown < min(natural, 600):   # book/_ext/static/itlin.css
            problems.append(f"{chapter} (phone): a figure is shrunk to {shown:.0f} px instead of scrolling")
        if device == "desktop" and natural and natural_px * shown / natural < 12:
            problems.append(f"{chapter}: a figure {natural} px wide is shown {shown:.0f} px wide, so "
                            f"{smallest_pt:g} pt text is {natural_px * shown / natural:.1f} px")
    unnumbered = driver.execute_script(
        "return [...document.querySelectorAll('.cell_output img')].filter(i => !i.closest('figure') "
        "&& !i.closest('.itlin-slider')).length")
    if unnumbered:
        problems.append(f"{chapter} ({device}): {unnumbered} output image(s) without a figure caption")
    loose = driver.execute_script(
        "return [...document.querySelectorAll('div.itlin-slider')].filter(p => !(p.closest('figure') "
        "&& p.closest('figure').querySelector('figcaption .caption-number'))).length")
    if loose:
        problems.append(f"{chapter} ({device}): {loose} slider(s) outside a numbered figure")
    return problems


#: Text that must never reach a rendered page outside code: MyST roles that were not parsed
#: (a glued string pasted as text, a role inside inline code) and `cfg.` names from the settings
#: code. Raw `$...$` maths is checked separately (:data:`RAW_MATHS`).
RAW_MARKUP = r"\{(glue(:[a-z]+)?|download|doc|eq|ref|numref|term|cite(:[a-z]+)?)\}`|\bcfg\.[a-z_]+"
#: Inline maths whose dollar signs reached the page (MathJax typesets only the maths MyST parsed).
RAW_MATHS = r"(^|[^\\\w$])\$[^$\s][^$\n]{0,80}\$"

PAGE_FACTS_JS = r"""
const main = document.querySelector('main') || document.body;
const text = (() => { const c = main.cloneNode(true);
  c.querySelectorAll('pre, code, kbd, script, style, mjx-container, .math, .highlight, textarea').forEach(e => e.remove());
  return c.textContent; })();
const noAlt = [...main.querySelectorAll('img')]   // no alt, or only the image's file name as its alt
  .filter(i => { const a = (i.getAttribute('alt') || '').trim();
                 return !a || /_images\//.test(a) || /\.(png|jpe?g|svg|gif)$/i.test(a); })
  .map(i => (i.getAttribute('src') || '').slice(-50));
const links = [...document.querySelectorAll('a[href]')].map(a => a.href).filter(h => h.startsWith(location.origin));
return {text, noAlt, links};
"""
#: How far the page scrolls sideways (0 when nothing sticks out of the viewport).
OVERFLOW_JS = "return document.documentElement.scrollWidth - document.documentElement.clientWidth;"

# The relative luminance of a CSS colour and the contrast of every visible caption and paragraph
# of the article against the first opaque background behind it (WCAG's formula).
CONTRAST_JS = r"""
const lum = c => { const m = c.match(/[\d.]+/g).map(Number);
  const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return [0.2126 * f(m[0]) + 0.7152 * f(m[1]) + 0.0722 * f(m[2]), m.length > 3 ? m[3] : 1]; };
const behind = e => { for (let x = e; x; x = x.parentElement) { const [l, a] = lum(getComputedStyle(x).backgroundColor);
  if (a > 0.5) return l; } return lum(getComputedStyle(document.body).backgroundColor)[0]; };
const low = [];
for (const e of document.querySelectorAll('main figcaption, main .itlin-slider-caption, main p, main td, main th, main li')) {
  if (!e.textContent.trim() || e.getBoundingClientRect().width === 0) continue;
  const [l1] = lum(getComputedStyle(e).color), l2 = behind(e);
  const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  if (ratio < 3) low.push(`${ratio.toFixed(1)}: ${e.textContent.trim().slice(0, 60)}`);
}
return low;
"""


@pytest.mark.system
def test_every_page_reads_at_phone_and_desktop_width_in_light_and_dark_mode(smoke_book, tmp_path):
    """Every page of the book (chapters and reference pages) in headless Chromium at a phone
    (390 px) and a desktop (1280 px) width, in the theme's light and dark modes: the page never
    scrolls sideways (wide content scrolls in its own box), no unparsed MyST role, `cfg.` name
    or raw `$...$` maths shows outside code, every image has alt text (not just its file name), every caption and
    paragraph keeps a contrast of at least 3 against its background, and no internal link
    points to a page that does not exist. On every chapter the maths is typeset before the page
    is read, and its figures pass :func:`figure_problems` at both widths. Screenshots go to
    $ITLIN_SCREENSHOT_DIR when it is set (a CI artifact folder, never the repository)."""
    from selenium.webdriver.support.ui import WebDriverWait

    sys.path.insert(0, str(ROOT))
    chapters = {f"book/{p.stem}.html" for p in execution.toc_notebooks(ROOT)}
    html = smoke_book.html
    pages = sorted(str(p.relative_to(html)) for p in html.glob("book/**/*.html"))
    assert len(pages) >= len(execution.toc_notebooks(ROOT)) and chapters <= set(pages), sorted(chapters - set(pages))
    shots = os.environ.get("ITLIN_SCREENSHOT_DIR")
    problems, links = [], set()
    with serve(html) as base_url, headless_chromium(tmp_path / "chromium-profile") as driver:
        for page in pages:      # each page is loaded (and its maths typeset) once, then resized
            for width, device in [(390, "phone"), (1280, "desktop")]:
                driver.set_window_size(width, 1000)
                if device == "phone":
                    driver.get(f"{base_url}/{page}")
                if page in chapters:
                    WebDriverWait(driver, 60).until(
                        lambda d: d.execute_script("return document.readyState") == "complete"
                        and d.execute_script("return !document.querySelector('div.math') || "
                                             "!!document.querySelector('mjx-container')"),
                        message=f"{page} ({device}): MathJax did not typeset the page")
                    problems += figure_problems(driver, page, device)
                overflow = driver.execute_script(OVERFLOW_JS)   # the layout is the same in both modes
                if overflow > 2:
                    problems.append(f"{page} ({device}): the page scrolls sideways by {overflow} px")
                for mode in ("light", "dark"):
                    driver.execute_script("document.documentElement.dataset.theme = arguments[0]; "
                                          "document.documentElement.dataset.mode = arguments[0];", mode)
                    for low in driver.execute_script(CONTRAST_JS):
                        problems.append(f"{page} ({device}, {mode}): text with contrast {low}")
                    if shots:
                        driver.save_screenshot(str(pathlib.Path(shots) / f"{pathlib.Path(page).stem}-{device}-{mode}.png"))
                if device == "phone":      # the text and images are the same at every width and mode
                    facts = driver.execute_script(PAGE_FACTS_JS)
                    for m in re.finditer(f"{RAW_MARKUP}|{RAW_MATHS}", facts["text"]):
                        problems.append(f"{page}: raw markup {facts['text'][max(0, m.start() - 30):m.end() + 30]!r}")
                    problems += [f"{page}: an image without alt text ({src})" for src in facts["noAlt"]]
                    links.update(link.split("#")[0].split("?")[0] for link in facts["links"])
    for link in sorted(links):
        target = html / link[len(base_url):].lstrip("/")
        if not (target.is_file() or (target / "index.html").is_file()):
            problems.append(f"a dead internal link: {link[len(base_url):]}")
    assert not problems, "\n".join(problems)


@pytest.mark.system
def test_static_sliders_move_in_chromium(smoke_book, tmp_path):
    """Every page with a static slider: each slider shows a frame, names its parameter and shows
    the current value, has written tick labels and no playback controls; moving it (and the
    previous-value button) changes the displayed frame and the value shown; the page logs no
    JavaScript error."""
    try:
        from selenium.webdriver.common.by import By
    except ImportError:
        pytest.fail("selenium is not installed; it is pinned in requirements.txt (`make venv` installs it).")
    from selenium.webdriver.support.ui import WebDriverWait

    html = smoke_book.html
    pages = sorted(p.relative_to(html).as_posix() for p in (html / "book").glob("*.html")
                   if 'class="itlin-slider-range"' in p.read_text())
    assert pages, f"no page of the built book has a static slider (built into {html}; did the build fail?)"
    shots = os.environ.get("ITLIN_SCREENSHOT_DIR")
    with serve(html) as base_url, headless_chromium(tmp_path / "chromium-profile") as driver:
        wait = WebDriverWait(driver, 30)
        for page in pages:
            driver.get(f"{base_url}/{page}")
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            players = driver.find_elements(By.CSS_SELECTOR, "div.itlin-slider")
            ids = [p.get_attribute("id") for p in players]
            assert len(ids) == len(set(ids)), f"{page}: the same slider is shown more than once ({ids})"
            for n, player in enumerate(players):
                where = f"{page}, slider {n + 1} of {len(players)}"
                img = player.find_element(By.CSS_SELECTOR, "img.itlin-slider-frame")
                slider = player.find_element(By.CSS_SELECTOR, "input.itlin-slider-range")
                value = player.find_element(By.CSS_SELECTOR, "output.itlin-slider-value")
                # the name is for screen readers only (the value beside it already starts with it)
                name = player.find_element(By.CSS_SELECTOR, "label.itlin-slider-name").get_attribute("textContent")
                wait.until(lambda d: (img.get_attribute("src") or "").startswith("data:image/png"),
                           message=f"{where}: no frame is displayed")
                assert name and value.text.startswith(f"{name} = "), f"{where}: value shown as {value.text!r}"
                # a numbered figure's caption (the player glued into a {glue:figure}), or its own
                caption = driver.execute_script(
                    "const f = arguments[0].closest('figure');"
                    "const n = f && f.querySelector('figcaption .caption-number');"
                    "const own = arguments[0].querySelector('.itlin-slider-caption');"
                    "return n ? f.querySelector('figcaption').textContent : (own ? own.textContent : '');", player)
                assert caption.strip(), f"{where}: the slider has no caption"
                ticks = [t.text for t in player.find_elements(By.CSS_SELECTOR, ".itlin-slider-tick")]
                assert len(ticks) >= 2 and all(ticks), f"{where}: tick labels {ticks}"
                assert not player.find_elements(By.CSS_SELECTOR, "[class*=anim-], input[type=radio]"), \
                    f"{where}: playback controls are shown"
                last = int(slider.get_attribute("max"))
                assert last >= 1, f"{where}: the slider has a single frame"
                before, before_value = img.get_attribute("src"), value.text
                driver.execute_script(
                    "const s = arguments[0]; s.value = s.max;"
                    "s.dispatchEvent(new Event('input', {bubbles: true}));", slider)
                wait.until(lambda d: img.get_attribute("src") != before,
                           message=f"{where}: moving the slider did not change the displayed frame")
                assert value.text != before_value, f"{where}: the value shown did not follow the slider"
                at_end = img.get_attribute("src")
                player.find_element(By.CSS_SELECTOR, "button[title='Previous value']").click()
                wait.until(lambda d: img.get_attribute("src") != at_end,
                           message=f"{where}: the previous-value button did not change the frame")
                assert int(slider.get_attribute("value")) == last - 1, f"{where}: slider not moved by the button"
            if shots:
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", players[0])
                driver.save_screenshot(str(pathlib.Path(shots) / (pathlib.Path(page).stem + ".png")))
            errors = console_errors(driver, base_url)
            assert not errors, f"{page}: JavaScript errors in the browser console:\n" + "\n".join(errors)


@pytest.mark.system
def test_the_gpu_page_tables_are_computed_from_the_records(shown_book):
    """``{itlin-measured-costs}`` renders the measured costs from the committed records: every
    image chapter is either in the table (with its GPU named) or listed as not recorded; and
    ``{itlin-newest-check}`` renders the Colab-like check's status file as a table."""
    from itlin_core.book import image_chapters
    from itlin_core.tools import costs

    result, pages = shown_book
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    html = (pages / "page.html").read_text()
    assert "0 of 1 chapters ran" in html and "jax 9.8.7" in html and "no: ValueError: broken" in html
    rows, sources = costs.group_costs("colab")
    for chapter in image_chapters.CHAPTERS:
        assert (chapter in costs.missing("colab")) != any(r[0] == chapter for r in rows), chapter
        assert chapter in html, chapter
    for _, device, _, _ in sources:
        assert device in html
    if rows:
        assert "<table" in html
