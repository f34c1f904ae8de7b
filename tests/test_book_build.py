"""The book builds without warnings, a failing cell or a Sphinx warning fails the build, and the
static sliders of the built HTML work in a real browser (headless Chromium).

The whole book is built ONCE per test run, at the smoke preset with ``-W --keep-going``
(the ``smoke_book`` fixture); the build test and the browser test share that build. The small
failure-path builds use their own throw-away books. All builds go to temporary directories and
use the repository's own _config.yml.
"""

import contextlib
import functools
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

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
JB = pathlib.Path(sys.executable).with_name("jupyter-book")
# Any Sphinx warning fails the build; --keep-going reports all of them instead of the first.
STRICT = ("-W", "--keep-going")

pytestmark = pytest.mark.skipif(not JB.exists(), reason="jupyter-book is not installed in this environment")


def build(root, out, *flags):
    env = dict(os.environ, JAX_PLATFORMS="cpu", ITLIN_PRESET="smoke", ITLIN_PROGRESS="off", ITLIN_SLIDERS="static")
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
    """The whole book, built once at the smoke preset with -W --keep-going."""
    out = tmp_path_factory.mktemp("smoke_book")
    t0 = time.perf_counter()
    result = build(ROOT, out, *STRICT)
    return types.SimpleNamespace(result=result, html=out / "_build" / "html", seconds=time.perf_counter() - t0)


def test_failing_cell_fails_the_build(tmp_path):
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {}, "outputs": [],
                     "source": "raise RuntimeError('this cell fails on purpose')"}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    book = small_book(tmp_path, {"broken.ipynb": json.dumps(nb)})
    result = build(book, tmp_path / "out")
    assert result.returncode != 0, result.stdout[-2000:]
    assert "this cell fails on purpose" in result.stdout + result.stderr


def test_a_sphinx_warning_fails_the_strict_build(tmp_path):
    book = small_book(tmp_path, {"page.md": "# Page\n\nA link to {ref}`no-such-label-anywhere`.\n"})
    result = build(book, tmp_path / "out", *STRICT)
    assert result.returncode != 0, "a build with an unresolved reference passed under -W"
    assert any("no-such-label-anywhere" in line for line in sphinx_warnings(result)), \
        (result.stdout + result.stderr)[-3000:]


def test_whole_book_builds_at_smoke_preset_without_warnings(smoke_book):
    result = smoke_book.result
    warnings = sphinx_warnings(result)
    assert not warnings, "the book build printed Sphinx warnings (fix them; the build runs with -W):\n" + \
        "\n".join(warnings)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    html = smoke_book.html
    for chapter in ["linearisation", "iterative_linearisation"]:
        page = (html / "book" / f"{chapter}.html").read_text()
        assert len(re.findall(r"<img [^>]*_images/", page)) >= 1, f"{chapter}: no executed figure"
        assert "Traceback" not in page and 'class="output stderr"' not in page
        assert re.search(rf"colab\.research\.google\.com/github/[^\"]+/blob/main/book/{chapter}\.ipynb", page), \
            f"{chapter}: no (or a malformed) Colab launch link"
    assert "itlin_core.gn_step" in (html / "book" / "api.html").read_text()
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


def test_static_sliders_move_in_chromium(smoke_book, tmp_path):
    """Every page with a static slider: each player shows a frame, moving the slider (and the
    previous-frame button) changes the displayed frame, and the page logs no JavaScript error."""
    try:
        from selenium.webdriver.common.by import By
    except ImportError:
        pytest.fail("selenium is not installed; it is pinned in requirements.txt (`make venv` installs it).")
    from selenium.webdriver.support.ui import WebDriverWait

    html = smoke_book.html
    pages = sorted(p.relative_to(html).as_posix() for p in (html / "book").glob("*.html")
                   if 'class="anim-slider"' in p.read_text())
    assert pages, f"no page of the built book has a static slider (built into {html}; did the build fail?)"
    shots = os.environ.get("ITLIN_SCREENSHOT_DIR")
    with serve(html) as base_url, headless_chromium(tmp_path / "chromium-profile") as driver:
        wait = WebDriverWait(driver, 30)
        for page in pages:
            driver.get(f"{base_url}/{page}")
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            players = driver.find_elements(By.CSS_SELECTOR, "div.animation")
            ids = [p.find_element(By.TAG_NAME, "img").get_attribute("id") for p in players]
            assert len(ids) == len(set(ids)), f"{page}: the same slider is shown more than once ({ids})"
            for n, player in enumerate(players):
                where = f"{page}, slider {n + 1} of {len(players)}"
                img = player.find_element(By.TAG_NAME, "img")
                slider = player.find_element(By.CSS_SELECTOR, "input.anim-slider")
                wait.until(lambda d: (img.get_attribute("src") or "").startswith("data:image/png"),
                           message=f"{where}: no frame is displayed")
                last = int(slider.get_attribute("max"))
                assert last >= 1, f"{where}: the slider has a single frame"
                before = img.get_attribute("src")
                driver.execute_script(
                    "const s = arguments[0]; s.value = s.max;"
                    "s.dispatchEvent(new Event('input', {bubbles: true}));"
                    "s.dispatchEvent(new Event('change', {bubbles: true}));", slider)
                wait.until(lambda d: img.get_attribute("src") != before,
                           message=f"{where}: moving the slider did not change the displayed frame")
                at_end = img.get_attribute("src")
                player.find_element(By.CSS_SELECTOR, "button[title='Previous frame']").click()
                wait.until(lambda d: img.get_attribute("src") != at_end,
                           message=f"{where}: the previous-frame button did not change the frame")
                assert int(slider.get_attribute("value")) == last - 1, f"{where}: slider not moved by the button"
            if shots:
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", players[0])
                driver.save_screenshot(str(pathlib.Path(shots) / (pathlib.Path(page).stem + ".png")))
            errors = console_errors(driver, base_url)
            assert not errors, f"{page}: JavaScript errors in the browser console:\n" + "\n".join(errors)
