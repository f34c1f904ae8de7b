"""The book's figure style: colours for K that readers can tell apart, and font sizes that stay
legible once a figure is shrunk to the page's width."""

import math
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from matplotlib.colors import to_rgb  # noqa: E402

from itlin_core.book import plotting  # noqa: E402


def luminance(c):
    r, g, b = to_rgb(c)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("Ks", [[1, 10, 1000, None], [1, 2, 5, 10, 20, 50, 100, 1000, None], [1, 10], [5, None]])
def test_neighbouring_periods_get_distinct_colours(Ks):
    colours = plotting.k_colours(Ks)
    finite = sorted(k for k in Ks if k is not None)
    rgb = [np.array(to_rgb(colours[k])) for k in finite] + ([np.zeros(3)] if None in Ks else [])
    gaps = [float(np.linalg.norm(a - b)) for a, b in zip(rgb, rgb[1:])]
    # a sequential map shared by n periods: neighbours at least 0.7/n apart in RGB (0.23 for
    # three periods, about 0.09 for eight, the most a chapter sweeps)
    assert min(gaps) > 0.7 / max(len(finite), 2), f"neighbouring K colours too close: {dict(zip(Ks, gaps))}"
    lum = [luminance(colours[k]) for k in finite]
    assert lum == sorted(lum), "colours must go from dark (K = 1) to light (large K)"
    if None in Ks:
        assert to_rgb(colours[None]) == (0.0, 0.0, 0.0)
    assert plotting.k_colours([math.inf])[math.inf] == "black"


#: Issue 42: text in a figure at least 9 pt (12 CSS px) once the figure is shown at the page's width.
MIN_PX = 12.0
PAGE_PX = 660        # the text column on a desktop screen, measured in the built book


def smallest_legible_pt(width_in=None):
    """The smallest font (in points) that a figure ``width_in`` inches wide (the widest the book
    draws by default) shows at MIN_PX or more when shrunk to the page: s/72*660/W >= 12 px."""
    return MIN_PX * 72 * (width_in or plotting.MAX_FIG_WIDTH) / PAGE_PX


def test_fonts_stay_legible_at_page_width():
    """A figure of width W inches shown 660 px wide (the text column, measured in the built book)
    draws a size-s font at about s/72*660/W px; the style keeps every text at 12 px (9 pt) or
    more for figures up to MAX_FIG_WIDTH inches wide."""
    for key in ["legend.fontsize", "xtick.labelsize", "ytick.labelsize", "axes.labelsize", "axes.titlesize",
                "figure.titlesize"]:
        size = float(plotting.STYLE[key])
        assert size >= smallest_legible_pt(), f"{key} = {size} pt is below {MIN_PX:g} px on the page"


def code_sources():
    """(file name, code) of every chapter notebook and book-layer module."""
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    sources = [(p, "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"] if c["cell_type"] == "code"))
               for p in sorted((root / "book").glob("*.ipynb"))]
    return sources + [(p, p.read_text()) for p in sorted((root / "itlin_core" / "book").glob("*.py"))]


def test_no_text_is_set_smaller_than_the_page_allows():
    """An explicit ``fontsize=`` below the legible size (or a relative one such as "small", which
    shrinks the style's size) would undo the style in that figure."""
    found, small = 0, []
    for path, text in code_sources():
        for m in re.finditer(r"fontsize=([^,)\s]+)", text):
            found += 1
            value = m.group(1).strip("\"'")
            try:
                ok = float(value) >= smallest_legible_pt()
            except ValueError:
                ok = value in {"large", "x-large", "xx-large", "larger"}
            if not ok:
                small.append(f"{path.name}: fontsize={value}")
    assert found >= 3, "the scan found too few font sizes; is it broken?"
    assert not small, f"text smaller than {MIN_PX:g} px at the page's width: {small}"


def figure_widths():
    """(where, width expression) of every ``figsize=(width, ...)`` in the chapters and the book layer."""
    for path, text in code_sources():
        for m in re.finditer(r"figsize=\(", text):
            depth, i = 0, m.end()
            while not (depth == 0 and text[i] == ","):   # the width: up to the first top-level comma
                depth += text[i] in "([{"
                depth -= text[i] in ")]}"
                i += 1
            width = " ".join(text[m.end():i].split())
            yield f"{path.name}: figsize=({width}, ...)", width


def test_no_figure_is_wider_than_the_page_allows():
    """Fonts are sized for figures up to MAX_FIG_WIDTH inches; a literal width above it, or a
    width that grows with the number of panels without a cap, would shrink them below legibility."""
    widths = list(figure_widths())
    assert len(widths) > 20, "the scan found too few figures; is it broken?"
    too_wide = [where for where, w in widths if re.fullmatch(r"[0-9.]+", w) and float(w) > plotting.MAX_FIG_WIDTH]
    uncapped = [where for where, w in widths if not re.fullmatch(r"[0-9.]+", w) and "MAX_FIG_WIDTH" not in w]
    assert not too_wide and not uncapped, f"too wide: {too_wide}; width not capped by MAX_FIG_WIDTH: {uncapped}"


@pytest.mark.parametrize("limits", [(1e-7, 1e5), (1e-5, 1e7), (0.02, 0.9), (3.0, 3000.0), (1.0, 1e6)])
def test_log_axes_label_their_ticks_with_plain_full_size_numbers(limits):
    """Matplotlib's own log labels are powers of ten whose raised exponent is drawn at 70 % of the
    tick size, under the legible size; after use_style every label of a log axis, major and minor,
    is a plain number (no mathtext) that reads back as the tick's value, in one form per axis:
    written out within 0.001 ... 100000, all in the exponent form on an axis reaching beyond."""
    import matplotlib.pyplot as plt

    with matplotlib.rc_context():
        plotting.use_style()
        fig, ax = plt.subplots()
        ax.set_yscale("log")
        ax.set_ylim(*limits)
        fig.canvas.draw()
        labelled = [(t.get_loc(), t.label1.get_text()) for t in ax.yaxis.get_major_ticks() + ax.yaxis.get_minor_ticks()
                    if t.label1.get_text()]
        plt.close(fig)
    assert len(labelled) >= 2
    for value, text in labelled:
        assert "$" not in text, text
        assert math.isclose(float(text.replace("\N{MINUS SIGN}", "-")), value, rel_tol=0.01), (value, text)
    exponent_form = ["e" in text for _, text in labelled]
    assert all(exponent_form) if limits[0] < 1e-3 or limits[1] >= 1e5 else not any(exponent_form), labelled
