"""Parameter sliders that work live in Jupyter/Colab and still work in the static HTML book.

One helper, :func:`slider`, used by every chapter. It takes a figure and a ``draw(value)``
function that redraws the figure for one slider value (by recomputing, or by looking up a
precomputed sweep), and shows either

* ``"static"``: every value drawn once into a PNG, embedded with a small HTML/JavaScript
  parameter slider (the parameter's name, its current value, a tick label at each value, and
  previous/next buttons; no playback controls, since a parameter is not a time axis). It needs
  no kernel: this is what the rendered book shows; or
* ``"live"``: an ipywidgets selection slider that calls ``draw`` whenever it moves (needs a
  kernel), showing the same name and value.

**Fixed axes.** Frames are only comparable if they share their axes, so by default
(``fixed_axes=True``) every value is drawn once first, the x and y limits of each axes are
recorded, and every frame is then drawn with the union of those limits (in both modes). A
``draw`` that sets its own limits keeps them, as long as it sets the same ones for every value.
This costs one extra ``draw`` per value; pass ``fixed_axes=False`` to skip it.

The mode comes from the ``mode`` argument, else the ``ITLIN_SLIDERS`` environment variable
(the book build and the tests set ``static``), else ``live`` when ipywidgets is importable.
"""

from __future__ import annotations

import base64
import html as _html
import io
import json
import os
import uuid
from typing import Callable, Sequence

import matplotlib.pyplot as plt

#: At most this many values get a written tick label under the static slider (all get a tick
#: mark), so that labels do not crowd each other on a phone.
MAX_TICK_LABELS = 9
#: ... and no two written labels overlap on a slider about this many characters (of the labels'
#: font) wide, the width of a phone's slider; the first and the last value are always written.
MAX_TICK_CHARS = 40


def _mode(mode: str | None) -> str:
    mode = (mode or os.environ.get("ITLIN_SLIDERS", "")).strip().lower()
    if not mode:
        try:
            import ipywidgets  # noqa: F401
            mode = "live"
        except ImportError:
            mode = "static"
    if mode not in ("static", "live"):
        raise ValueError(f"slider mode must be 'static' or 'live' (ITLIN_SLIDERS), got {mode!r}.")
    return mode


class Shown:
    """What :func:`slider` returns: the object it has already displayed, as ``.obj``.

    A notebook shows the value of a cell's last expression, so a cell ending in ``slider(...)``
    would show the slider twice: in the static HTML a second player with the same element ids
    as the first, whose frame stays empty; live, a second copy of the control. ``Shown``
    displays nothing itself (``_ipython_display_`` does nothing); every other attribute is the
    wrapped object's (``.data`` of the HTML, ``.children`` of the widget box).
    """

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        if name == "obj":  # not yet set (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.obj, name)

    def _ipython_display_(self):
        pass

    def __repr__(self):
        return f"Shown({type(self.obj).__name__})"


def _union(limits):
    """The smallest interval holding every ``(a, b)`` in ``limits``, oriented like the first
    (an inverted axis stays inverted)."""
    lo = min(min(a, b) for a, b in limits)
    hi = max(max(a, b) for a, b in limits)
    a, b = limits[0]
    return (lo, hi) if a <= b else (hi, lo)


def shared_limits(fig, draw: Callable, values: Sequence):
    """Draw every value once and return, per axes of ``fig``, the union of its x and y limits
    over all values: ``[(xlim, ylim), ...]`` in the order of ``fig.axes``. ``None`` when the
    figure's axes change from value to value (then the limits cannot be shared)."""
    per_value = []
    for v in values:
        draw(v)
        per_value.append([(ax.get_xlim(), ax.get_ylim()) for ax in fig.axes])
    if len({len(p) for p in per_value}) != 1:
        return None
    return [(_union([p[k][0] for p in per_value]), _union([p[k][1] for p in per_value]))
            for k in range(len(per_value[0]))]


def _tick_positions(labels: Sequence[str]) -> list[int]:
    """Indices of the values that get a written tick label: the most (at most
    ``MAX_TICK_LABELS``) evenly spread ones, always the first and the last, whose labels do not
    run into each other on a slider ``MAX_TICK_CHARS`` characters wide. As on the page, the
    first label starts at the left end, the last ends at the right end and the others are
    centred on their ticks; neighbours keep at least one character apart.

    Examples:
      >>> _tick_positions(["0.001", "0.01", "0.1", "1", "10", "100"])
      [0, 1, 2, 3, 4, 5]
      >>> _tick_positions([str(k) for k in range(9)]), _tick_positions(["x" * 20] * 9)
      ([0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 8])
    """
    n = len(labels)
    widths = [len(str(t)) for t in labels]

    def extent(i):
        x = MAX_TICK_CHARS * i / max(n - 1, 1)
        if i == 0:
            return 0.0, widths[i]
        if i == n - 1:
            return x - widths[i], x
        return x - widths[i] / 2, x + widths[i] / 2

    for m in range(min(n, MAX_TICK_LABELS), 2, -1):
        chosen = sorted({round(k * (n - 1) / (m - 1)) for k in range(m)})
        if all(extent(a)[1] + 1 <= extent(b)[0] for a, b in zip(chosen, chosen[1:])):
            return chosen
    return list(range(n)) if n <= 1 else [0, n - 1]


def static_html(frames_png: Sequence[bytes], labels: Sequence[str], label: str, alt: str = "",
                caption: str = "") -> str:
    """The static parameter slider: ``frames_png[i]`` is shown for ``labels[i]``.

    A range input with one step per value, its current value ("name = value") beside it (the
    name alone is a label for screen readers, hidden from view so that it is not shown twice),
    written tick labels under it (see :func:`_tick_positions`), previous/next buttons, and the
    frame, with ``caption`` (plain text) under it. Self-contained (no kernel, no external
    script); element ids are unique per call."""
    if len(frames_png) != len(labels) or not labels:
        raise ValueError("static_html needs one label per frame and at least one frame.")
    uid = "itlin-slider-" + uuid.uuid4().hex[:12]
    n = len(labels)

    def esc(text):   # HTML-escaped and ASCII-only (character references), whatever the page's encoding
        return _html.escape(str(text)).encode("ascii", "xmlcharrefreplace").decode("ascii")

    ticks = "".join(
        f'<span class="itlin-slider-tick" style="left: {100 * i / max(n - 1, 1):.4f}%">{esc(labels[i])}</span>'
        for i in _tick_positions(labels))
    options = "".join(f'<option value="{i}"></option>' for i in range(n))
    frames = json.dumps([base64.b64encode(p).decode("ascii") for p in frames_png])
    names = json.dumps(list(labels))
    return f"""<div class="itlin-slider" id="{uid}">
<style>
#{uid} .itlin-slider-row {{display: grid; grid-template-columns: auto minmax(8em, 1fr) auto; align-items: center; column-gap: 0.6em; row-gap: 0.2em; max-width: 40em;}}
#{uid} .itlin-slider-head {{grid-column: 1 / -1; display: flex; flex-wrap: wrap; gap: 0.8em; align-items: baseline;}}
#{uid} .itlin-slider-name {{position: absolute; width: 1px; height: 1px; margin: -1px; padding: 0; overflow: hidden; clip: rect(0, 0, 0, 0); white-space: nowrap; border: 0;}}
#{uid} .itlin-slider-track {{position: relative; padding-bottom: 1.9em;}}
#{uid} input[type=range] {{width: 100%; margin: 0;}}
#{uid} .itlin-slider-tick {{position: absolute; top: 1.75em; transform: translateX(-50%); font-size: 0.8em; white-space: nowrap;}}
#{uid} .itlin-slider-tick:first-of-type {{transform: none;}}
#{uid} .itlin-slider-tick:last-of-type {{transform: translateX(-100%);}}
#{uid} output {{font-variant-numeric: tabular-nums;}}
#{uid} button {{min-width: 2em;}}
#{uid} img {{max-width: 100%; height: auto; display: block; margin-top: 0.4em;}}
#{uid} .itlin-slider-caption {{font-size: 0.9em; margin: 0.3em 0 0 0; color: inherit; opacity: 0.85;}}
</style>
<div class="itlin-slider-row">
<div class="itlin-slider-head">
<label class="itlin-slider-name" for="{uid}-range">{esc(label)}</label>
<output class="itlin-slider-value" for="{uid}-range">{esc(label)} = {esc(labels[0])}</output>
</div>
<button type="button" class="itlin-slider-prev" title="Previous value" aria-label="previous value of {esc(label)}">&#8249;</button>
<div class="itlin-slider-track">
<input type="range" class="itlin-slider-range" id="{uid}-range" min="0" max="{n - 1}" step="1" value="0" list="{uid}-ticks" aria-valuetext="{esc(label)} = {esc(labels[0])}">
<datalist id="{uid}-ticks">{options}</datalist>
{ticks}
</div>
<button type="button" class="itlin-slider-next" title="Next value" aria-label="next value of {esc(label)}">&#8250;</button>
</div>
<img class="itlin-slider-frame" id="{uid}-img" alt="{esc(alt or caption or label)}">
{f'<p class="itlin-slider-caption">{esc(caption)}</p>' if caption else ''}
<script>
(function () {{
  const root = document.getElementById("{uid}");
  const frames = {frames};
  const names = {names};
  const range = root.querySelector("input.itlin-slider-range");
  const value = root.querySelector("output.itlin-slider-value");
  const img = root.querySelector("img.itlin-slider-frame");
  function show(i) {{
    i = Math.max(0, Math.min(frames.length - 1, i));
    range.value = i;
    img.src = "data:image/png;base64," + frames[i];
    value.textContent = {json.dumps(label)} + " = " + names[i];
    range.setAttribute("aria-valuetext", value.textContent);
  }}
  range.addEventListener("input", function () {{ show(+range.value); }});
  range.addEventListener("change", function () {{ show(+range.value); }});
  root.querySelector("button.itlin-slider-prev").addEventListener("click", function () {{ show(+range.value - 1); }});
  root.querySelector("button.itlin-slider-next").addEventListener("click", function () {{ show(+range.value + 1); }});
  show(0);
}})();
</script>
</div>"""


def slider(fig, draw: Callable, values: Sequence, *, label: str, fmt: Callable = "{:g}".format,
           mode: str | None = None, fixed_axes: bool = True, alt: str = "", caption: str = "",
           name: str | None = None):
    """Show ``fig`` with a parameter slider over ``values``; ``draw(value)`` redraws the figure.

    The current value is written beside the slider and into the figure's title
    (``"label = value"``), so a frame always says which value it shows. With ``fixed_axes``
    every frame has the same axis limits (the union over all values; see the module
    docstring). ``caption`` (plain text) is shown under the figure, and ``alt`` describes it
    for screen readers (static mode; the caption by default). Returns the
    displayed object (an ``IPython`` ``HTML`` object in static mode, the ipywidgets container
    in live mode) wrapped in :class:`Shown`, so that a cell ending in ``slider(...)`` does not
    display it a second time. The figure is closed afterwards, so no extra still image appears.

    With ``name`` (static mode), the player is not displayed in the cell but glued under ``name``
    (myst-nb's ``glue``), so that the chapter shows it as a numbered figure whose caption is
    written in Markdown (with maths) in the cell that follows:
    ``{glue:figure} name`` / ``:name: name`` / the caption. Where myst-nb is not installed it is
    displayed as without ``name``; in live mode ``name`` changes nothing.

    Examples:
      In static mode (no kernel needed: what the book shows) it displays, and returns, the HTML player:

      >>> import matplotlib; matplotlib.use("Agg")
      >>> import numpy as np
      >>> fig, ax = plt.subplots()
      >>> xs = np.linspace(0, 1, 50)
      >>> shown = slider(fig, lambda k: (ax.clear(), ax.plot(xs, xs ** k)), [1, 2, 3], label="k", mode="static")
      <IPython.core.display.HTML object>
      >>> shown, 'type="range"' in shown.data, plt.fignum_exists(fig.number)    # the figure is closed
      (Shown(HTML), True, False)
    """
    values = list(values)
    if not values:
        raise ValueError("slider needs at least one value in values, got none.")
    if not isinstance(label, str) or not label:
        raise TypeError(f"slider's label must be a non-empty string (the parameter's name), got {label!r}.")
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"slider's name must be a non-empty string (the glue key of its figure) or None, got {name!r}.")
    if not callable(draw):
        raise TypeError(f"slider's draw must be a function draw(value) that redraws the figure, got {draw!r}.")
    from IPython.display import HTML, display

    limits = shared_limits(fig, draw, values) if fixed_axes and len(values) > 1 else None

    def frame(i):
        v = values[i]
        draw(v)
        if limits is not None and len(fig.axes) == len(limits):
            for ax, (xlim, ylim) in zip(fig.axes, limits):
                ax.set_xlim(xlim)
                ax.set_ylim(ylim)
        fig.suptitle(f"{label} = {fmt(v)}", fontsize=13)
        fig.tight_layout()

    if _mode(mode) == "static":
        pngs = []
        for i in range(len(values)):
            frame(i)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=fig.dpi)
            pngs.append(buf.getvalue())
        html = HTML(static_html(pngs, [fmt(v) for v in values], label, alt, caption))
        plt.close(fig)
        try:
            from myst_nb import glue
        except ImportError:
            glue = None
        if name is not None and glue is not None:
            glue(name, html, display=False)   # shown by {glue:figure} name, with its caption
        else:
            display(html)
        return Shown(html)

    import ipywidgets as widgets

    out = widgets.Output()
    control = widgets.SelectionSlider(options=[(fmt(v), i) for i, v in enumerate(values)], value=0,
                                      description=label, continuous_update=False,
                                      layout=widgets.Layout(width="60%"))

    def show(i):
        frame(i)
        with out:
            out.clear_output(wait=True)
            display(fig)

    control.observe(lambda change: show(change["new"]), names="value")
    plt.close(fig)
    box = widgets.VBox([control, out] + ([widgets.HTML(_html.escape(caption))] if caption else []))
    display(box)
    show(0)
    return Shown(box)


__all__ = ["slider", "Shown", "shared_limits", "static_html"]
