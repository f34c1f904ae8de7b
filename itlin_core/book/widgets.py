"""Sliders that work live in Jupyter/Colab and still work in the static HTML book.

One helper, :func:`slider`, used by every chapter. It takes a figure and a ``draw(value)``
function that redraws the figure for one slider value (by recomputing, or by looking up a
precomputed sweep), and shows either

* ``"static"``: every value drawn once into a :class:`matplotlib.animation.FuncAnimation`,
  embedded as HTML/JavaScript (``to_jshtml``), whose slider and buttons step through the frames
  with no kernel: this is what the rendered book shows; or
* ``"live"``: an ipywidgets slider that calls ``draw`` whenever it moves (needs a kernel).

The mode comes from the ``mode`` argument, else the ``ITLIN_SLIDERS`` environment variable
(the book build and the tests set ``static``), else ``live`` when ipywidgets is importable.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import matplotlib.pyplot as plt


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


def slider(fig, draw: Callable, values: Sequence, *, label: str, fmt: Callable = "{:g}".format,
           mode: str | None = None, interval_ms: int = 500):
    """Show ``fig`` with a slider over ``values``; ``draw(value)`` redraws the figure.

    The current value is written into the figure's title (``"label = value"``), so a static
    frame always says which value it shows. Returns the displayed object (an ``IPython``
    ``HTML`` object in static mode, the ipywidgets container in live mode) wrapped in
    :class:`Shown`, so that a cell ending in ``slider(...)`` does not display it a second time.
    In static mode the figure is closed afterwards, so no extra still image appears below the
    animation.
    """
    values = list(values)
    if not values:
        raise ValueError("slider needs at least one value.")
    from IPython.display import HTML, display

    def frame(i):
        v = values[i]
        draw(v)
        fig.suptitle(f"{label} = {fmt(v)}", fontsize=11)
        fig.tight_layout()
        return []

    if _mode(mode) == "static":
        from matplotlib import animation

        anim = animation.FuncAnimation(fig, frame, frames=len(values), interval=interval_ms, blit=False)
        html = HTML(anim.to_jshtml(default_mode="once"))
        plt.close(fig)
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
    box = widgets.VBox([control, out])
    display(box)
    show(0)
    return Shown(box)


__all__ = ["slider", "Shown"]
