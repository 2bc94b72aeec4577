"""Bar charts as small, deterministic SVG documents, for the compile report.

The report needs two kinds of chart: stacked bars with one labelled bar per instruction, and,
for a whole network, filled step curves over binned instructions. matplotlib drew them until
it became most of a compile's CPU time (importing it alone took 0.75 s of ResNet-18's ~2 s),
so this module writes the few SVG elements those charts need directly. It draws nothing
else: no general plotting, just axes with round ticks, bars or steps, a legend and labels.

Bytes are deterministic: coordinates are rounded to 0.01 px and formatted explicitly, and
the document carries no date, no ids and no embedded fonts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

HEIGHT = 320.0
MARGIN_LEFT = 72.0
MARGIN_RIGHT = 16.0
MARGIN_TOP = 30.0  # room for the title
MARGIN_TOP_LEGEND = 46.0  # and for a legend row under it, clear of the bars
MARGIN_BOTTOM_PLAIN = 46.0  # room for the x-axis title
MARGIN_BOTTOM_LABELLED = 110.0  # room for rotated per-bar labels instead
FONT = 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif"'


@dataclass(frozen=True)
class Series:
    """One stacked layer of the chart: a value per bar (or per bin), drawn in one colour."""

    values: list[float]
    color: str
    label: str | None = None


@dataclass
class Chart:
    """Stacked bars over x positions 0..n-1, or stacked steps over bin edges.

    With `edges` (n+1 increasing x values) the series are steps over n bins; without, each
    value is a bar at its index and `bar_labels` (if given) names each bar below the axis.
    """

    title: str
    y_label: str
    series: list[Series]
    width: float = 600.0
    x_label: str = ""
    bar_labels: list[str] = field(default_factory=list)
    edges: list[float] = field(default_factory=list)
    log_y: bool = False
    y_limits: tuple[float, float] | None = None


def _number(value: float) -> str:
    """A coordinate with at most two decimals and no trailing zeros: stable bytes."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def tick_label(value: float) -> str:
    """An axis value as people read it: 1.5M, 20k, 0.5, 100."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def linear_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) covering [low, high]."""
    span = high - low if high > low else 1.0
    raw_step = span / count
    power = 10.0 ** math.floor(math.log10(raw_step))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw_step)
    first = math.floor(low / step)
    last = math.ceil(high / step - 1e-9)
    return [round(i * step, 12) for i in range(first, last + 1)]


def log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten covering [low, high] (both > 0)."""
    return [10.0 ** e for e in range(math.floor(math.log10(low)),
                                     math.ceil(math.log10(high) - 1e-9) + 1)]


@dataclass(frozen=True)
class _Frame:
    """Where the plotting area is and how data maps into it."""

    left: float
    right: float
    top: float
    bottom: float
    x_low: float
    x_high: float
    y_low: float
    y_high: float
    log_y: bool

    def x(self, value: float) -> float:
        return self.left + (value - self.x_low) / (self.x_high - self.x_low) * (
            self.right - self.left)

    def y(self, value: float) -> float:
        if self.log_y:
            value = math.log10(max(value, self.y_low))
            low, high = math.log10(self.y_low), math.log10(self.y_high)
        else:
            low, high = self.y_low, self.y_high
        fraction = (min(max(value, low), high) - low) / (high - low)
        return self.bottom - fraction * (self.bottom - self.top)


def _totals(chart: Chart) -> list[float]:
    return [sum(values) for values in zip(*(s.values for s in chart.series), strict=True)]


def _y_ticks(chart: Chart) -> list[float]:
    if chart.y_limits is not None:
        return linear_ticks(*chart.y_limits)
    totals = _totals(chart)
    if chart.log_y:
        positive = [t for t in totals if t > 0] + [s for s in chart.series[0].values if s > 0]
        return log_ticks(min(positive), max(positive))
    return linear_ticks(0.0, max(totals) or 1.0)


def _frame(chart: Chart, ticks: list[float]) -> _Frame:
    bottom_margin = MARGIN_BOTTOM_LABELLED if chart.bar_labels else MARGIN_BOTTOM_PLAIN
    if chart.edges:
        x_low, x_high = chart.edges[0], chart.edges[-1]
    else:
        x_low, x_high = -0.6, len(chart.series[0].values) - 0.4
    y_low, y_high = chart.y_limits or (ticks[0], ticks[-1])
    top = MARGIN_TOP_LEGEND if any(s.label for s in chart.series) else MARGIN_TOP
    return _Frame(MARGIN_LEFT, chart.width - MARGIN_RIGHT, top,
                  HEIGHT - bottom_margin, x_low, x_high, y_low, y_high, chart.log_y)


def _bars(chart: Chart, frame: _Frame) -> list[str]:
    """One rectangle per bar and series, stacked on the series below."""
    shapes: list[str] = []
    base = [0.0] * len(chart.series[0].values)
    floor = frame.y_low if frame.log_y else 0.0
    for series in chart.series:
        for index, value in enumerate(series.values):
            if value > 0:
                y0, y1 = frame.y(max(base[index], floor)), frame.y(base[index] + value)
                x0, x1 = frame.x(index - 0.4), frame.x(index + 0.4)
                shapes.append(
                    f'<rect x="{_number(x0)}" y="{_number(y1)}" width="{_number(x1 - x0)}" '
                    f'height="{_number(y0 - y1)}" fill="{series.color}"/>')
            base[index] += value
    return shapes


def _steps(chart: Chart, frame: _Frame) -> list[str]:
    """One filled step outline per series, between the series below and its own top."""
    shapes: list[str] = []
    base = [0.0] * len(chart.series[0].values)
    for series in chart.series:
        top = [b + v for b, v in zip(base, series.values, strict=True)]
        upper = [f"{_number(frame.x(chart.edges[i + j]))},{_number(frame.y(value))}"
                 for i, value in enumerate(top) for j in (0, 1)]
        lower = [f"{_number(frame.x(chart.edges[i + j]))},{_number(frame.y(value))}"
                 for i, value in reversed(list(enumerate(base))) for j in (1, 0)]
        shapes.append(f'<polygon points="{" ".join(upper + lower)}" fill="{series.color}"/>')
        base = top
    return shapes


def _axes(chart: Chart, frame: _Frame, ticks: list[float]) -> list[str]:
    parts = [f'<rect x="{_number(frame.left)}" y="{_number(frame.top)}" '
             f'width="{_number(frame.right - frame.left)}" '
             f'height="{_number(frame.bottom - frame.top)}" fill="none" stroke="#333"/>']
    for tick in ticks:
        y = _number(frame.y(tick))
        parts.append(f'<line x1="{_number(frame.left - 4)}" y1="{y}" '
                     f'x2="{_number(frame.left)}" y2="{y}" stroke="#333"/>')
        parts.append(f'<text x="{_number(frame.left - 7)}" y="{y}" text-anchor="end" '
                     f'dominant-baseline="middle" font-size="11">{tick_label(tick)}</text>')
    middle = _number((frame.top + frame.bottom) / 2)
    parts.append(f'<text transform="translate(16 {middle}) rotate(-90)" text-anchor="middle" '
                 f'font-size="12">{escape(chart.y_label)}</text>')
    parts.append(f'<text x="{_number(chart.width / 2)}" y="18" text-anchor="middle" '
                 f'font-size="14">{escape(chart.title)}</text>')
    if chart.x_label:
        parts.append(f'<text x="{_number((frame.left + frame.right) / 2)}" '
                     f'y="{_number(HEIGHT - 10)}" text-anchor="middle" font-size="12">'
                     f'{escape(chart.x_label)}</text>')
    if chart.edges:  # steps over a numeric x axis: round ticks along it
        for tick in linear_ticks(chart.edges[0], chart.edges[-1], 8):
            if frame.x_low <= tick <= frame.x_high:
                x = _number(frame.x(tick))
                parts.append(f'<line x1="{x}" y1="{_number(frame.bottom)}" x2="{x}" '
                             f'y2="{_number(frame.bottom + 4)}" stroke="#333"/>')
                parts.append(f'<text x="{x}" y="{_number(frame.bottom + 15)}" '
                             f'text-anchor="middle" font-size="11">{tick_label(tick)}</text>')
    for index, label in enumerate(chart.bar_labels):
        x, y = _number(frame.x(index)), _number(frame.bottom + 8)
        parts.append(f'<text transform="translate({x} {y}) rotate(-60)" text-anchor="end" '
                     f'font-size="9">{escape(label)}</text>')
    return parts


def _legend(chart: Chart, frame: _Frame) -> list[str]:
    """Labelled series in one row above the plotting area, ending at its right edge."""
    parts: list[str] = []
    x = frame.right
    y = frame.top - 9
    for series in reversed([s for s in chart.series if s.label]):
        label = series.label or ""
        x -= 20 + 6.5 * len(label)  # a swatch, a gap, and the label at ~6.5 px a character
        parts.append(f'<rect class="legend" x="{_number(x)}" y="{_number(y - 5)}" width="14" '
                     f'height="10" fill="{series.color}"/>')
        parts.append(f'<text x="{_number(x + 18)}" y="{_number(y)}" '
                     f'dominant-baseline="middle" font-size="11">{escape(label)}</text>')
        x -= 14
    return parts


def render_svg(chart: Chart) -> str:
    """The chart as a complete SVG document."""
    ticks = _y_ticks(chart)
    frame = _frame(chart, ticks)
    shapes = _steps(chart, frame) if chart.edges else _bars(chart, frame)
    body = [*shapes, *_axes(chart, frame, ticks), *_legend(chart, frame)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_number(chart.width)}" '
            f'height="{_number(HEIGHT)}" viewBox="0 0 {_number(chart.width)} '
            f'{_number(HEIGHT)}" {FONT}>\n'
            f'<rect width="100%" height="100%" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")
