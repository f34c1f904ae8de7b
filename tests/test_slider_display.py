"""A cell that ends in ``widgets.slider(...)`` shows the slider once, not twice.

``slider`` displays its player itself; IPython then displays the cell's last value as well.
Before ``Shown`` every chapter's static HTML held each slider twice (the second copy with the
same element ids and an empty frame). Here a real IPython shell runs such a cell and the
displayed outputs are counted; the browser test in test_book_build.py checks the built pages.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from itlin_core.book import widgets  # noqa: E402


def run_cell(shell, code):
    """Run ``code`` as one cell; return the MIME bundles it displayed with display() and the
    one IPython displayed for its last value (None if none)."""
    published, result_shown = [], []
    pub, hook = shell.display_pub, shell.displayhook
    orig_publish, orig_write = pub.publish, hook.write_format_data
    pub.publish = lambda data, *a, **k: published.append(data)
    hook.write_format_data = lambda data, *a, **k: result_shown.append(data)
    try:
        result = shell.run_cell(code, store_history=False)
    finally:
        pub.publish, hook.write_format_data = orig_publish, orig_write
    result.raise_error()
    return published, (result_shown[0] if result_shown else None)


@pytest.mark.parametrize("mode", ["static", "live"])
def test_cell_ending_in_slider_displays_it_once(mode):
    if mode == "live":
        pytest.importorskip("ipywidgets")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.update(plt=plt, widgets=widgets)
    code = ("fig, ax = plt.subplots()\n"
            "widgets.slider(fig, lambda v: ax.set_title(str(v)), [1, 2, 3], label='t', "
            f"mode={mode!r})\n")
    published, last_value = run_cell(shell, code)
    if mode == "static":
        players = [d for d in published if 'class="anim-slider"' in d.get("text/html", "")]
    else:
        players = [d for d in published if "application/vnd.jupyter.widget-view+json" in d]
    assert len(players) == 1, f"{mode}: slider() displayed {len(players)} players"
    assert last_value is None, f"{mode}: the cell's value displayed the slider again: {sorted(last_value)}"


def test_shown_gives_the_displayed_object():
    fig, ax = plt.subplots()
    shown = widgets.slider(fig, lambda v: None, [1.0, 2.0], label="t", mode="static")
    assert isinstance(shown, widgets.Shown)
    assert shown.data is shown.obj.data and 'type="range"' in shown.data
