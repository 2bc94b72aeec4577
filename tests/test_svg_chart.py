"""The report's SVG charts: round ticks, bars and steps where the data puts them, stable bytes."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest

from glensidec.backend.svg_chart import (
    Chart,
    Series,
    linear_ticks,
    log_ticks,
    render_svg,
    tick_label,
)

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("low", "high", "expected"), [
    (0, 100, [0, 20, 40, 60, 80, 100]),
    (0, 7, [0, 2, 4, 6, 8]),
    (0, 1_830_000, [0, 500_000, 1_000_000, 1_500_000, 2_000_000]),
    (0, 0.3, [0, 0.1, 0.2, 0.3]),
])
def test_linear_ticks_are_round_and_cover_the_range(low: float, high: float,
                                                    expected: list[float]) -> None:
    assert linear_ticks(low, high) == pytest.approx(expected)


def test_log_ticks_are_the_covering_decades() -> None:
    assert log_ticks(17, 4_000) == [10, 100, 1_000, 10_000]
    assert log_ticks(100, 100) == [100]


@pytest.mark.parametrize(("value", "label"), [
    (0, "0"), (0.5, "0.5"), (100, "100"), (20_000, "20k"), (1_500_000, "1.5M"),
    (3e9, "3G")])
def test_tick_labels_read_as_people_write_them(value: float, label: str) -> None:
    assert tick_label(value) == label


def _rects(svg: str, color: str) -> list[dict[str, float]]:
    root = ET.fromstring(svg)
    return [{key: float(rect.get(key, "0")) for key in ("x", "y", "width", "height")}
            for rect in root.iter(f"{SVG}rect")
            if rect.get("fill") == color and rect.get("class") != "legend"]


def test_stacked_bars_have_heights_in_proportion_to_their_values() -> None:
    chart = Chart("t", "cycles", [Series([10.0, 30.0, 0.0], "#111111", "array"),
                                  Series([20.0, 0.0, 40.0], "#222222", "host")],
                  bar_labels=["a", "b", "c"])
    svg = render_svg(chart)
    lower, upper = _rects(svg, "#111111"), _rects(svg, "#222222")
    assert len(lower) == 2 and len(upper) == 2  # no rectangle for a zero value
    per_unit = lower[0]["height"] / 10
    assert lower[1]["height"] == pytest.approx(30 * per_unit, abs=0.02)
    assert upper[0]["height"] == pytest.approx(20 * per_unit, abs=0.02)
    # the host part of bar 0 sits exactly on its array part; bars keep their order on x
    assert upper[0]["y"] + upper[0]["height"] == pytest.approx(lower[0]["y"], abs=0.02)
    assert lower[0]["x"] < lower[1]["x"] < upper[1]["x"]
    texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert {"a", "b", "c", "array", "host", "cycles", "t"} <= set(texts)


def test_a_log_axis_places_each_decade_evenly() -> None:
    chart = Chart("t", "y", [Series([10.0, 100.0, 1000.0], "#111111")], log_y=True)
    heights = [rect["height"] for rect in _rects(render_svg(chart), "#111111")]
    # the bars start at the lowest tick (10): one, two and three decades above it less one
    assert heights[0] == pytest.approx(0, abs=0.02)
    assert heights[2] == pytest.approx(2 * heights[1], abs=0.02)


def test_steps_trace_each_bin_between_its_edges() -> None:
    edges = [0.0, 10.0, 20.0, 30.0]
    chart = Chart("t", "y", [Series([5.0, 0.0, 10.0], "#111111", "s")], edges=edges,
                  x_label="instruction")
    svg = render_svg(chart)
    (polygon,) = [p for p in ET.fromstring(svg).iter(f"{SVG}polygon")]
    points = [tuple(map(float, pair.split(","))) for pair in polygon.get("points", "").split()]
    xs = sorted({x for x, _ in points})
    assert len(xs) == 4  # one x per bin edge
    assert xs[1] - xs[0] == pytest.approx(xs[3] - xs[2], abs=0.02)
    top_of = {x: min(y for px, y in points if px == x) for x in xs}
    bottom = max(y for _, y in points)
    assert top_of[xs[0]] < bottom  # the first bin is raised ...
    assert math.isclose(bottom - top_of[xs[3]], 2 * (bottom - top_of[xs[0]]), abs_tol=0.05)
    assert "instruction" in svg


def test_the_same_chart_gives_the_same_bytes_and_escapes_text() -> None:
    def chart() -> Chart:
        return Chart("a < b & c", "y", [Series([1.0, 2.0], "#111111")],
                     bar_labels=["<x>", "y"])
    first = render_svg(chart())
    assert first == render_svg(chart())
    assert "a &lt; b &amp; c" in first and "&lt;x&gt;" in first
    ET.fromstring(first)  # well-formed XML
    assert not re.search(r"\d\.\d{3,}", first)  # coordinates rounded to 0.01
