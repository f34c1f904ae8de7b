"""The book's figure style: colours for K that readers can tell apart, and font sizes that stay
legible once a figure is shrunk to the page's width."""

import math

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
    assert min(gaps) > 0.1, f"neighbouring K colours too close: {dict(zip(Ks, gaps))}"
    lum = [luminance(colours[k]) for k in finite]
    assert lum == sorted(lum), "colours must go from dark (K = 1) to light (large K)"
    if None in Ks:
        assert to_rgb(colours[None]) == (0.0, 0.0, 0.0)
    assert plotting.k_colours([math.inf])[math.inf] == "black"


def test_fonts_stay_legible_at_page_width():
    """A figure of width W inches shown 750 px wide draws a size-s font at about s/72*750/W px;
    the style keeps tick labels and legends at 8 px or more for figures up to 11 inches wide."""
    page_px, widest_in = 750, 11
    for key in ["legend.fontsize", "xtick.labelsize", "ytick.labelsize", "axes.labelsize", "axes.titlesize"]:
        size = float(plotting.STYLE[key])
        assert size / 72 * page_px / widest_in >= 8, f"{key} = {size} pt is below 8 px on the page"
