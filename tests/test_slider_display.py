"""A cell that ends in ``widgets.slider(...)`` shows the slider once, not twice.

``slider`` displays its player itself; IPython then displays the cell's last value as well.
Before ``Shown`` every chapter's static HTML held each slider twice (the second copy with the
same element ids and an empty frame). Here a real IPython shell runs such a cell and the
displayed outputs are counted; the browser test in test_book_build.py checks the built pages.
"""

import html as html_lib
import re

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
        players = [d for d in published if 'class="itlin-slider-range"' in d.get("text/html", "")]
    else:
        players = [d for d in published if "application/vnd.jupyter.widget-view+json" in d]
    assert len(players) == 1, f"{mode}: slider() displayed {len(players)} players"
    assert last_value is None, f"{mode}: the cell's value displayed the slider again: {sorted(last_value)}"


def test_a_named_static_slider_is_glued_for_a_numbered_figure_not_displayed():
    """With name=..., the static player goes to myst-nb's glue store under that name (shown by a
    ``{glue:figure}`` directive with a Markdown caption) instead of into the cell's output."""
    pytest.importorskip("myst_nb")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.update(plt=plt, widgets=widgets)
    published, last_value = run_cell(shell, "fig, ax = plt.subplots()\n"
                                     "widgets.slider(fig, lambda v: ax.set_title(str(v)), [1, 2], label='t', "
                                     "mode='static', name='fig-demo-slider')\n")
    assert last_value is None
    shown = [d for d in published if 'class="itlin-slider-range"' in d.get("text/html", "")]
    glued = [d for d in published if any(k.endswith("text/html") and k != "text/html" for k in d)]
    assert not shown and len(glued) == 1, "a named slider is glued, not shown in its cell"


@pytest.mark.parametrize("name", ["", 3])
def test_slider_name_must_be_a_glue_key(name):
    fig, _ = plt.subplots()
    with pytest.raises(TypeError, match="name"):
        widgets.slider(fig, lambda v: None, [1, 2], label="t", mode="static", name=name)


def test_shown_gives_the_displayed_object():
    fig, ax = plt.subplots()
    shown = widgets.slider(fig, lambda v: None, [1.0, 2.0], label="t", mode="static")
    assert isinstance(shown, widgets.Shown)
    assert shown.data is shown.obj.data and 'type="range"' in shown.data


def test_static_slider_is_a_labelled_parameter_slider():
    """Static mode: the parameter's name and current value beside the slider, a written tick
    label at every value (few values), previous/next buttons, and no playback controls."""
    fig, ax = plt.subplots()
    labels = {0.1: "0.1", 1.0: "1", 10.0: "10"}
    raw = widgets.slider(fig, lambda v: ax.plot([0, 1], [0, v]), list(labels), label="λ", mode="static",
                         caption="A line whose slope is λ.").data
    assert raw.isascii(), "non-ASCII text must be written as character references"
    html = html_lib.unescape(raw)
    assert 'class="itlin-slider-name"' in html and ">λ</label>" in html
    assert '<output class="itlin-slider-value" for=' in html and ">λ = 0.1</output>" in html
    ticks = re.findall(r'<span class="itlin-slider-tick"[^>]*>([^<]*)</span>', html)
    assert ticks == list(labels.values())
    assert 'title="Previous value"' in html and 'title="Next value"' in html
    assert '<p class="itlin-slider-caption">A line whose slope is λ.</p>' in html
    assert 'alt="A line whose slope is λ."' in html, "without alt, the caption describes the frame"
    for playback in ["Play", "Loop", "Reflect", "Once", "anim-", "Slower", "Faster"]:
        assert playback not in html, f"the static slider still has a playback control: {playback!r}"


def test_static_slider_writes_tick_labels_for_at_most_a_few_values():
    fig, ax = plt.subplots()
    values = list(range(40))
    html = widgets.slider(fig, lambda v: ax.plot([0, 1], [0, v]), values, label="t", mode="static").data
    ticks = re.findall(r'<span class="itlin-slider-tick"[^>]*>([^<]*)</span>', html)
    assert ticks[0] == "0" and ticks[-1] == "39" and 2 < len(ticks) <= widgets.MAX_TICK_LABELS
    assert html.count("<option ") == len(values), "every value needs a tick mark on the track"


@pytest.mark.parametrize("mode", ["static", "live"])
def test_every_frame_has_the_same_axes(monkeypatch, mode):
    """With fixed_axes (the default) each frame is drawn with the union of all frames' limits, so
    frames can be compared; without it each frame keeps its own autoscaled limits."""
    if mode == "live":
        pytest.importorskip("ipywidgets")
    seen = []
    fig, (a1, a2) = plt.subplots(1, 2)

    def draw(v):
        a1.clear(); a2.clear()
        a1.plot([0, 1], [0, v])
        a2.plot([v, 2 * v], [1, 1 + v])

    monkeypatch.setattr(fig, "savefig", lambda *a, **k: seen.append((a1.get_ylim(), a2.get_xlim())))
    if mode == "live":
        from IPython import display as ipd
        monkeypatch.setattr(ipd, "display", lambda obj, *a, **k: obj.savefig() if obj is fig else None)
        shown = widgets.slider(fig, draw, [1.0, 5.0, 20.0], label="v", mode="live")
        shown.children[0].value = 2
        shown.children[0].value = 1
    else:
        widgets.slider(fig, draw, [1.0, 5.0, 20.0], label="v", mode="static")
    assert len(seen) == 3 and len(set(seen)) == 1, f"frames have different axes: {seen}"
    (y_lo, y_hi), (x_lo, x_hi) = seen[0]
    assert y_lo <= 0 and y_hi >= 20 and x_lo <= 1 and x_hi >= 40

    seen.clear()
    fig2, (b1, b2) = plt.subplots(1, 2)
    a1, a2 = b1, b2
    monkeypatch.setattr(fig2, "savefig", lambda *a, **k: seen.append((a1.get_ylim(), a2.get_xlim())))
    if mode == "static":
        widgets.slider(fig2, draw, [1.0, 20.0], label="v", mode="static", fixed_axes=False)
        assert seen[0] != seen[1]


def test_shared_limits_keeps_an_inverted_axis_inverted():
    fig, ax = plt.subplots()

    def draw(v):
        ax.clear()
        ax.plot([0, v], [0, v])
        ax.invert_yaxis()

    (xlim, ylim), = widgets.shared_limits(fig, draw, [1.0, 3.0])
    assert ylim[0] > ylim[1] and ylim[0] >= 3 and xlim[1] >= 3


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(values=[]), ValueError, "at least one value"),
    (dict(label=""), TypeError, "label"),
    (dict(label=3), TypeError, "label"),
    (dict(draw="not a function"), TypeError, "draw"),
])
def test_slider_refuses_bad_arguments(kwargs, error, words):
    fig, _ = plt.subplots()
    args = dict(draw=lambda v: None, values=[1, 2], label="t") | kwargs
    with pytest.raises(error, match=words):
        widgets.slider(fig, args["draw"], args["values"], label=args["label"], mode="static")
