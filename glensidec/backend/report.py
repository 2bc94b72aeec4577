"""The compile report: OUTDIR/report.html (for people) and OUTDIR/report.json (its data).

One row per instruction of the lowered program, in execution order: what it computes (the
`let` it came from names its buffer), its shapes, its multiply-accumulates, where it runs
(the systolic array or the host CPU), its predicted cycles by part and, on the array, its
utilization. Two plots (cycles per instruction, array utilization per call) are inline SVG
drawn by matplotlib, so the page is one self-contained file.

Bytes are deterministic: the SVG carries no date, its ids come from a fixed hash salt, text
stays text (no embedded glyphs), and numbers are formatted explicitly. `make sim` adds a
section with the simulated cycles and wall time (`render_html(data, simulation)`).
"""

from __future__ import annotations

import base64
import io
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import jinja2
from markupsafe import Markup

from glensidec.backend.lower import (
    ArrayGemm,
    Copy,
    Dot,
    Fill,
    Fold,
    Instruction,
    LoweredProgram,
    Map,
    Reduce,
    RequantizePerChannel,
    Softmax,
)
from glensidec.hardware.array import ArrayConfig, gemm_cycles, ideal_cycles
from glensidec.opt.extract import HOST_ELEMENT, HOST_MAC
from glensidec.resources import resource_dir

HTML = "report.html"
DATA = "report.json"


@dataclass(frozen=True)
class Row:
    """One instruction of the lowered program, as the report shows it."""

    index: int
    name: str  # the buffer it writes: the program's `let` name when it has one
    kind: str  # gemm (array), dot, map, fold, reduce, softmax, requantize, copy, fill
    op: str  # the operation, e.g. relu, elementwise-add, M=256 K=9 N=8
    inputs: list[list[int]]  # shapes read
    output: list[int]  # shape written
    macs: int
    where: str  # "array" or "host"
    array_cycles: int
    host_cycles: int
    ideal_cycles: int  # array calls: MACs / (rows * cols), rounded up
    utilization: float | None  # array calls: MACs / (rows * cols * cycles)
    note: str  # the term it implements


@dataclass
class Simulation:
    """What `make sim` measured: per array call, and the whole run."""

    simulated_cycles: list[int]
    predicted_cycles: list[int]
    wall_seconds: float
    rtl_seconds: float


@dataclass
class ReportData:
    source: str
    rows_cols: tuple[int, int]
    rows: list[Row] = field(default_factory=list)

    @property
    def array_cycles(self) -> int:
        return sum(row.array_cycles for row in self.rows)

    @property
    def host_cycles(self) -> int:
        return sum(row.host_cycles for row in self.rows)

    @property
    def macs(self) -> int:
        return sum(row.macs for row in self.rows)

    def to_json(self) -> str:
        raw = {"source": self.source, "array": list(self.rows_cols),
               "rows": [asdict(row) for row in self.rows]}
        return json.dumps(raw, indent=1, sort_keys=True) + "\n"

    @staticmethod
    def from_json(text: str) -> ReportData:
        raw = json.loads(text)
        rows = [Row(**row) for row in raw["rows"]]
        return ReportData(str(raw["source"]), (int(raw["array"][0]), int(raw["array"][1])),
                          rows)


# -- per-instruction facts ---------------------------------------------------------------


def _kind_and_op(instruction: Instruction) -> tuple[str, str]:
    if isinstance(instruction, ArrayGemm):
        return "gemm", f"M={instruction.m} K={instruction.k} N={instruction.n}"
    if isinstance(instruction, Map):
        return "map", instruction.op.name
    if isinstance(instruction, Fold):
        return "fold", instruction.op
    if isinstance(instruction, Reduce):
        return "reduce", instruction.op
    if isinstance(instruction, RequantizePerChannel):
        return "requantize", "requantize-per-channel"
    if isinstance(instruction, Dot):
        return "dot", "dot-product"
    if isinstance(instruction, Softmax):
        return "softmax", "softmax"
    if isinstance(instruction, Fill):
        return "fill", "min-padding" if instruction.minimum else "zero-padding"
    assert isinstance(instruction, Copy), instruction
    return "copy", "copy"


def _macs(instruction: Instruction) -> int:
    if isinstance(instruction, ArrayGemm):
        return instruction.m * instruction.k * instruction.n
    if isinstance(instruction, Dot):
        # every member has the destination's dims followed by the reduced ones
        return math.prod(instruction.members[0].shape)
    return 0


def _host_cycles(instruction: Instruction) -> int:
    """The CPU model extraction uses (glensidec.opt.extract): per element a compute reads,
    per multiply-accumulate for products; data movement (copy, fill) is not modelled."""
    if isinstance(instruction, (ArrayGemm, Copy, Fill)):
        return 0
    if isinstance(instruction, Dot):
        return HOST_MAC * _macs(instruction)
    return HOST_ELEMENT * sum(math.prod(view.shape) for view in instruction.reads())


def report_data(source: str, lowered: LoweredProgram, config: ArrayConfig) -> ReportData:
    data = ReportData(source, (config.rows, config.cols))
    for index, instruction in enumerate(lowered.instructions):
        kind, op = _kind_and_op(instruction)
        on_array = isinstance(instruction, ArrayGemm)
        cycles = ideal = 0
        utilization = None
        if isinstance(instruction, ArrayGemm):
            m, k, n = instruction.m, instruction.k, instruction.n
            cycles = gemm_cycles(config, m, k, n)
            ideal = ideal_cycles(config, m, k, n)
            utilization = m * k * n / (config.rows * config.cols * cycles)
        data.rows.append(Row(
            index, instruction.writes().buffer, kind, op,
            [list(view.shape) for view in instruction.reads()], list(instruction.writes().shape),
            _macs(instruction), "array" if on_array else "host", cycles,
            _host_cycles(instruction), ideal, utilization, instruction.note))
    return data


# -- plots -------------------------------------------------------------------------------


def _svg(figure: Any, alt: str) -> str:
    """A matplotlib figure as an inline SVG image, byte-identical per input."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buffer = io.StringIO()
    FigureCanvasSVG(figure)
    figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    # An <img> of a data: URL keeps each plot's SVG ids (clip paths) to itself.
    encoded = base64.b64encode(buffer.getvalue().encode()).decode()
    return f'<img alt="{alt}" src="data:image/svg+xml;base64,{encoded}">'


def _figure(width: float) -> Any:
    import matplotlib
    from matplotlib.figure import Figure

    # Fixed ids and text kept as text: the same data gives the same bytes.
    matplotlib.rcParams["svg.hashsalt"] = "glensidec"
    matplotlib.rcParams["svg.fonttype"] = "none"
    return Figure(figsize=(width, 3.2), layout="constrained")


def _width(count: int) -> float:
    return min(14.0, max(6.0, 0.25 * min(count, MAX_BARS)))


# Up to this many instructions a plot has one labelled bar each; past it (a whole network)
# consecutive instructions are binned into at most MAX_BINS steps of one filled curve, which
# keeps the SVG small and quick to draw.
MAX_BARS = 60
MAX_BINS = 200


def _binned(rows: list[Row], values: list[float], combine: str
            ) -> tuple[list[float], list[float]]:
    """Bin edges (instruction indices) and one value per bin: the sum or the mean."""
    size = math.ceil(len(rows) / MAX_BINS)
    edges: list[float] = []
    binned: list[float] = []
    for start in range(0, len(rows), size):
        chunk = values[start:start + size]
        edges.append(float(rows[start].index))
        binned.append(sum(chunk) / (len(chunk) if combine == "mean" else 1))
    edges.append(rows[-1].index + 1.0)
    return edges, binned


def _series(axes: Any, rows: list[Row], values: list[float], bottom: list[float] | None,
            color: str, label: str | None = None, combine: str = "sum") -> None:
    if len(rows) <= MAX_BARS:
        axes.bar(range(len(rows)), values, bottom=bottom, color=color, label=label)
        return
    edges, binned = _binned(rows, values, combine)
    base = _binned(rows, bottom, combine)[1] if bottom else [0.0] * len(binned)
    top = [b + v for b, v in zip(base, binned, strict=True)]
    axes.stairs(top, edges, baseline=base, fill=True, color=color, label=label)


def _label_instructions(axes: Any, rows: list[Row], combine: str = "summed") -> None:
    if len(rows) > MAX_BARS:
        size = math.ceil(len(rows) / MAX_BINS)
        axes.set_xlabel("instruction" if size == 1 else
                        f"instruction ({combine} over runs of {size} plotted instructions)")
        return
    axes.set_xticks(range(len(rows)))
    axes.set_xticklabels([f"[{row.index}] {row.name}" for row in rows], rotation=60,
                         ha="right", fontsize="x-small")
    axes.set_xlim(-0.6, len(rows) - 0.4)


def cycles_plot(data: ReportData) -> str | None:
    """Stacked: predicted array and host cycles of every instruction that costs any."""
    rows = [row for row in data.rows if row.array_cycles or row.host_cycles]
    if not rows:
        return None
    figure = _figure(_width(len(rows)))
    axes = figure.add_subplot()
    array = [float(row.array_cycles) for row in rows]
    _series(axes, rows, array, None, "#3b6ea5", "array")
    _series(axes, rows, [float(row.host_cycles) for row in rows], array, "#e09f3e",
            "host (CPU model)")
    _label_instructions(axes, rows)
    axes.set_ylabel("predicted cycles")
    totals = [row.array_cycles + row.host_cycles for row in rows]
    if len(rows) <= MAX_BARS and max(totals) > 100 * min(totals):
        axes.set_yscale("log")
    axes.legend(loc="upper right", fontsize="small")
    axes.set_title("Predicted cycles per instruction")
    return _svg(figure, "predicted cycles per instruction")


def utilization_plot(data: ReportData) -> str | None:
    rows = [row for row in data.rows if row.utilization is not None]
    if not rows:
        return None
    figure = _figure(_width(len(rows)))
    axes = figure.add_subplot()
    _series(axes, rows, [100 * (row.utilization or 0.0) for row in rows], None, "#3b6ea5",
            combine="mean")
    _label_instructions(axes, rows, "averaged")
    axes.set_ylim(0, 100)
    axes.set_ylabel("array utilization (%)")
    axes.set_title(f"Array utilization per call ({data.rows_cols[0]}x{data.rows_cols[1]})")
    return _svg(figure, "array utilization per call")


# -- the page ----------------------------------------------------------------------------


def _shapes(shapes: list[list[int]]) -> str:
    return ", ".join("×".join(map(str, shape)) or "scalar" for shape in shapes)


def render_html(data: ReportData, simulation: Simulation | None = None) -> str:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=True)
    environment.filters["shapes"] = _shapes
    environment.filters["percent"] = lambda value: "" if value is None else f"{100 * value:.1f}%"
    environment.filters["thousands"] = lambda value: f"{value:,}"
    calls = [row for row in data.rows if row.where == "array"]
    sim_rows = []
    if simulation is not None:
        for row, simulated, predicted in zip(calls, simulation.simulated_cycles,
                                             simulation.predicted_cycles, strict=False):
            sim_rows.append({"row": row, "simulated": simulated, "predicted": predicted})
    rate = (sum(simulation.simulated_cycles) / simulation.rtl_seconds
            if simulation is not None and simulation.rtl_seconds else 0.0)
    context = {
        "data": data, "calls": calls,
        "utilization": (sum(row.macs for row in calls)
                        / (data.rows_cols[0] * data.rows_cols[1] * data.array_cycles)
                        if data.array_cycles else None),
        "cycles_svg": Markup(cycles_plot(data) or ""),
        "utilization_svg": Markup(utilization_plot(data) or ""),
        "simulation": simulation, "sim_rows": sim_rows, "rate": rate,
    }
    return environment.get_template("report.html.j2").render(context)


def render_files(data: ReportData) -> dict[str, bytes]:
    """The report's two files, for the compiled directory."""
    return {HTML: render_html(data).encode(), DATA: data.to_json().encode()}
