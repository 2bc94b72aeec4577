"""The compile report: OUTDIR/report.html (for people) and OUTDIR/report.json (its data).

One row per instruction of the lowered program, in execution order: what it computes (the
`let` it came from names its buffer), its shapes, its multiply-accumulates, where it runs
(the systolic array or the host CPU), its predicted cycles by part and, on the array, its
utilization. Two plots (cycles per instruction, array utilization per call) are inline SVG
drawn by `svg_chart`, so the page is one self-contained file.

Bytes are deterministic: the SVG carries no date and no ids, text stays text (no embedded
glyphs), and numbers are formatted explicitly. `make sim` adds a section with the simulated
cycles and wall time (`render_html(data, simulation)`).
"""

from __future__ import annotations

import base64
import functools
import json
import math
from dataclasses import asdict, dataclass, field

import jinja2
from markupsafe import Markup

from glensidec.backend.host_reasons import host_reason
from glensidec.backend.lower import (
    AccelLayer,
    ArrayGemm,
    Copy,
    Dot,
    Fill,
    Fold,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    Reduce,
    RequantizePerChannel,
    Softmax,
)
from glensidec.backend.svg_chart import Chart, Series, render_svg
from glensidec.hardware.array import ArrayConfig, array_for, gemm_cycles, ideal_cycles
from glensidec.hardware.host import HOST_ELEMENT, HOST_MAC, HOST_MOVE
from glensidec.hardware.layout import NchwLayout, NhwcLayout
from glensidec.lang.terms import ComputeOp
from glensidec.resources import resource_dir

HTML = "report.html"
DATA = "report.json"


@dataclass(frozen=True)
class Row:
    """One instruction of the lowered program, as the report shows it."""

    index: int
    name: str  # the buffer it writes: the program's `let` name when it has one
    kind: str  # gemm (array), accel, dot, map, fold, fused, reduce, softmax, requantize,
    #            copy, fill
    op: str  # the operation, e.g. relu, elementwise-add, M=256 K=9 N=8
    inputs: list[list[int]]  # shapes read
    output: list[int]  # shape written
    macs: int
    where: str  # "array", "accelerator" (ws_accel: DMA, array, epilogue) or "host"
    array_cycles: int
    host_cycles: int
    ideal_cycles: int  # array calls: MACs / (rows * cols), rounded up
    utilization: float | None  # array calls: MACs / (rows * cols * cycles)
    note: str  # the term it implements
    # accelerator layers: main-memory bytes the commands move (whole bus beats; loads by
    # the tensor they read) and the compulsory bytes (commands.layer_traffic)
    load_bytes: int = 0
    store_bytes: int = 0
    input_load_bytes: int = 0
    weight_load_bytes: int = 0
    residual_load_bytes: int = 0
    compulsory_bytes: int = 0

    @property
    def traffic_ratio(self) -> float | None:
        """Bytes moved per compulsory byte (accelerator layers)."""
        if not self.compulsory_bytes:
            return None
        return (self.load_bytes + self.store_bytes) / self.compulsory_bytes
    # accelerator layers: cycles a row entered the array (the rest is DMA and epilogue wait)
    busy_cycles: int = 0
    # host instructions: why the accelerator does not take it (backend.host_reasons)
    why_host: str = ""


@dataclass
class Simulation:
    """What `make sim` measured: per array call, and the whole run."""

    simulated_cycles: list[int]
    predicted_cycles: list[int]
    wall_seconds: float
    rtl_seconds: float


@dataclass(frozen=True)
class Traffic:
    """Main-memory bytes loaded and stored, beside the compulsory bytes."""

    loaded: int
    stored: int
    compulsory: int

    @property
    def ratio(self) -> float | None:
        return (self.loaded + self.stored) / self.compulsory if self.compulsory else None


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

    @property
    def traffic(self) -> Traffic:
        """The accelerator layers' DRAM traffic together."""
        rows = [row for row in self.rows if row.where == "accelerator"]
        return Traffic(sum(row.load_bytes for row in rows), sum(row.store_bytes for row in rows),
                       sum(row.compulsory_bytes for row in rows))

    @property
    def layers(self) -> list[Row]:
        """The accelerator layers, in program order."""
        return [row for row in self.rows if row.where == "accelerator"]

    @property
    def cycles(self) -> MachineCycles:
        return totals(self)

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
    if isinstance(instruction, AccelLayer) and instruction.layout is not None:
        return "accel", (f"{layout_text(instruction.layout)}, {instruction.load_bytes} B "
                         f"loaded, {instruction.store_bytes} B stored")
    if isinstance(instruction, AccelLayer):
        return "accel", (f"M={instruction.m} K={instruction.k} N={instruction.n}, "
                         f"{instruction.load_bytes} B loaded, {instruction.store_bytes} B stored")
    if isinstance(instruction, Map):
        return "map", instruction.op.name
    if isinstance(instruction, Fused):
        return "fused", " -> ".join(step.op.name if isinstance(step.op, ComputeOp) else step.op
                                    for step in instruction.steps)
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


def layout_text(layout: NhwcLayout | NchwLayout) -> str:
    """What a layout layer does, in a few words."""
    if isinstance(layout, NchwLayout):
        return f"{layout.pixels}x{layout.channels} rows to NCHW"
    return (f"NCHW {layout.channels}x{layout.height}x{layout.width} to NHWC padded by "
            f"{layout.padding}")


def _macs(instruction: Instruction) -> int:
    if isinstance(instruction, AccelLayer) and not instruction.multiplies:
        return 0
    if isinstance(instruction, ArrayGemm | AccelLayer):
        return instruction.m * instruction.k * instruction.n
    if isinstance(instruction, Dot):
        # every member has the destination's dims followed by the reduced ones
        return math.prod(instruction.members[0].shape)
    return 0


def host_cycles(instruction: Instruction) -> int:
    """One instruction's host cycles under the host model (glensidec.hardware.host): per
    element a compute reads, per multiply-accumulate of a product, per element a copy or
    fill writes; nothing for array calls and accelerator layers (their cycles are exact)."""
    if isinstance(instruction, (ArrayGemm, AccelLayer)):
        return 0
    if isinstance(instruction, (Copy, Fill)):
        return HOST_MOVE * math.prod(instruction.dst.shape)
    if isinstance(instruction, Dot):
        return HOST_MAC * _macs(instruction)
    return HOST_ELEMENT * sum(math.prod(view.shape) for view in instruction.reads())


def _traffic_fields(instruction: Instruction) -> dict[str, int]:
    """An accelerator layer's traffic as Row fields (none for other instructions)."""
    if not isinstance(instruction, AccelLayer) or instruction.traffic is None:
        return {}
    traffic = instruction.traffic
    return {"load_bytes": traffic.loaded, "store_bytes": traffic.stored,
            "input_load_bytes": traffic.input_loaded,
            "weight_load_bytes": traffic.weights_loaded,
            "residual_load_bytes": traffic.residual_loaded,
            "compulsory_bytes": traffic.compulsory}


@dataclass(frozen=True)
class MachineCycles:
    """A compiled program's predicted cycles for one run: the one total that `--stats`,
    report.html and the NAS use."""

    accelerator: int  # Σ the accelerator layers' cycles (ws_accel's, exact)
    array: int  # Σ the bare array calls' cycles (the RTL's, exact)
    host: int  # Σ every host instruction under the host model, copies and fills included

    @property
    def total(self) -> int:
        return self.accelerator + self.array + self.host

    @property
    def host_share(self) -> float:
        return self.host / self.total if self.total else 0.0

    def line(self) -> str:
        """How `--stats` prints it."""
        return (f"predicted cycles: {self.total} (accelerator {self.accelerator}, array calls "
                f"{self.array}, host {self.host} = {self.host_share:.1%}; host model: "
                "glensidec/hardware/host.py, copies and fills included)")


def machine_cycles(lowered: LoweredProgram, config: ArrayConfig,
                   more_arrays: tuple[ArrayConfig, ...] = ()) -> MachineCycles:
    """The predicted cycles of a lowered program on its machine: accelerator layers, bare
    array calls (each on its own array) and every host instruction."""
    return totals(report_data("", lowered, config, more_arrays))


def totals(data: ReportData) -> MachineCycles:
    """The same sums from the report's rows (report.json)."""
    return MachineCycles(
        sum(row.array_cycles for row in data.rows if row.where == "accelerator"),
        sum(row.array_cycles for row in data.rows if row.where == "array"),
        data.host_cycles)


def report_data(source: str, lowered: LoweredProgram, config: ArrayConfig,
                more_arrays: tuple[ArrayConfig, ...] = ()) -> ReportData:
    """The report's rows; each array call priced on its own array (`config`, the main one,
    or one of `more_arrays`)."""
    data = ReportData(source, (config.rows, config.cols))
    writers = lowered.writers()
    for index, instruction in enumerate(lowered.instructions):
        kind, op = _kind_and_op(instruction)
        on_array = isinstance(instruction, ArrayGemm | AccelLayer)
        cycles = ideal = 0
        utilization = None
        if isinstance(instruction, AccelLayer):  # the whole accelerator: DMA, array, epilogue
            m, k, n = instruction.m, instruction.k, instruction.n
            cycles = instruction.cycles
            # a pooling or layout layer multiplies nothing: no T_min, no utilization
            multiplies = instruction.multiplies
            ideal = ideal_cycles(config, m, k, n) if multiplies else 0
            utilization = m * k * n / (config.rows * config.cols * cycles) if multiplies \
                else None
        if isinstance(instruction, ArrayGemm):
            m, k, n = instruction.m, instruction.k, instruction.n
            array = array_for(instruction.rows, instruction.cols, (config, *more_arrays))
            cycles = gemm_cycles(array, m, k, n)
            ideal = ideal_cycles(array, m, k, n)
            utilization = m * k * n / (array.rows * array.cols * cycles)
        layer = instruction if isinstance(instruction, AccelLayer) else None
        data.rows.append(Row(
            index, instruction.writes().buffer, kind, op,
            [list(view.shape) for view in instruction.reads()], list(instruction.writes().shape),
            _macs(instruction),
            "accelerator" if layer is not None else "array" if on_array else "host", cycles,
            host_cycles(instruction), ideal, utilization, instruction.note,
            busy_cycles=0 if layer is None or layer.pool else layer.compute_rows,
            why_host=host_reason(instruction, lowered, writers), **_traffic_fields(instruction)))
    return data


# -- plots -------------------------------------------------------------------------------


def _image(chart: Chart, alt: str) -> str:
    """A chart as an inline SVG image."""
    # An <img> of a data: URL keeps each plot's SVG to itself (no ids or styles shared).
    encoded = base64.b64encode(render_svg(chart).encode()).decode()
    return f'<img alt="{alt}" src="data:image/svg+xml;base64,{encoded}">'


def _width(count: int) -> float:
    """Pixels: wider for more bars, within what a page shows."""
    return min(1400.0, max(600.0, 25.0 * min(count, MAX_BARS)))


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


def _chart(title: str, y_label: str, rows: list[Row], series: list[Series],
           combine: str) -> Chart:
    """Bars labelled by instruction, or (a whole network) steps over binned instructions."""
    chart = Chart(title, y_label, series, width=_width(len(rows)))
    if len(rows) <= MAX_BARS:
        chart.bar_labels = [f"[{row.index}] {row.name}" for row in rows]
        return chart
    for index, one in enumerate(series):
        chart.edges, values = _binned(rows, one.values, "mean" if combine == "averaged"
                                      else "sum")
        series[index] = Series(values, one.color, one.label)
    size = math.ceil(len(rows) / MAX_BINS)
    chart.x_label = ("instruction" if size == 1 else
                     f"instruction ({combine} over runs of {size} plotted instructions)")
    return chart


ARRAY_COLOR = "#3b6ea5"
HOST_COLOR = "#e09f3e"


def cycles_plot(data: ReportData) -> str | None:
    """Stacked: predicted array and host cycles of every instruction that costs any."""
    rows = [row for row in data.rows if row.array_cycles or row.host_cycles]
    if not rows:
        return None
    series = [Series([float(row.array_cycles) for row in rows], ARRAY_COLOR, "array"),
              Series([float(row.host_cycles) for row in rows], HOST_COLOR,
                     "host (CPU model)")]
    chart = _chart("Predicted cycles per instruction", "predicted cycles", rows, series,
                   "summed")
    totals = [row.array_cycles + row.host_cycles for row in rows]
    chart.log_y = len(rows) <= MAX_BARS and max(totals) > 100 * min(totals)
    return _image(chart, "predicted cycles per instruction")


# Where the cycles go: one bar per part of the machine, each in a colour of its own.
PARTS = (("array busy", ARRAY_COLOR), ("DMA and epilogue wait", "#8fb3d9"),
         ("bare array calls", "#2a9d8f"), ("host compute", HOST_COLOR),
         ("host copies and fills", "#c8553d"))


def cycle_parts(data: ReportData) -> list[tuple[str, int]]:
    """The predicted total split by where it goes (the parts sum to it)."""
    layers = data.layers
    busy = sum(row.busy_cycles for row in layers)
    moves = sum(row.host_cycles for row in data.rows if row.kind in ("copy", "fill"))
    values = [busy, sum(row.array_cycles for row in layers) - busy,
              sum(row.array_cycles for row in data.rows if row.where == "array"),
              data.host_cycles - moves, moves]
    return [(label, value) for (label, _), value in zip(PARTS, values, strict=True)]


def parts_plot(data: ReportData) -> str | None:
    parts = cycle_parts(data)
    if not any(value for _, value in parts):
        return None
    series = [Series([float(value) if index == position else 0.0
                      for position in range(len(parts))], color, label)
              for index, ((label, value), (_, color)) in enumerate(zip(parts, PARTS,
                                                                      strict=True))]
    chart = Chart("Where the predicted cycles go", "predicted cycles", series, width=600.0)
    chart.bar_labels = [label for label, _ in parts]
    return _image(chart, "where the predicted cycles go")


def utilization_plot(data: ReportData) -> str | None:
    rows = [row for row in data.rows if row.utilization is not None]
    if not rows:
        return None
    series = [Series([100 * (row.utilization or 0.0) for row in rows], ARRAY_COLOR)]
    chart = _chart(f"Array utilization per call ({data.rows_cols[0]}x{data.rows_cols[1]})",
                   "array utilization (%)", rows, series, "averaged")
    chart.y_limits = (0.0, 100.0)
    return _image(chart, "array utilization per call")


# -- the page ----------------------------------------------------------------------------


def _shapes(shapes: list[list[int]]) -> str:
    return ", ".join("×".join(map(str, shape)) or "scalar" for shape in shapes)


@functools.cache
def _html_templates() -> jinja2.Environment:
    """One environment per process: it keeps the compiled template."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=True)
    environment.filters["shapes"] = _shapes
    environment.filters["percent"] = lambda value: "" if value is None else f"{100 * value:.1f}%"
    environment.filters["thousands"] = lambda value: f"{value:,}"
    environment.filters["ratio"] = lambda value: "" if value is None else f"{value:.2f}×"
    return environment


def counted(count: int, noun: str) -> str:
    """"1 array call", "2 array calls"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def simulated_work(layers: int, calls: int) -> str:
    """What a co-simulation ran, for `make sim`'s summary and the report: its accelerator
    layers (on ws_accel) and its array calls (on the bare array), whichever it had."""
    parts = ([counted(layers, "accelerator layer")] if layers else []) + \
        ([counted(calls, "array call")] if calls or not layers else [])
    return " and ".join(parts)


def render_html(data: ReportData, simulation: Simulation | None = None) -> str:
    environment = _html_templates()
    calls = [row for row in data.rows if row.where in ("array", "accelerator")]
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
        "layers": [row for row in data.rows if row.where == "accelerator"],
        "cycles_svg": Markup(cycles_plot(data) or ""),
        "parts_svg": Markup(parts_plot(data) or ""), "parts": cycle_parts(data),
        "total": data.cycles,
        "utilization_svg": Markup(utilization_plot(data) or ""),
        "simulation": simulation, "sim_rows": sim_rows, "rate": rate,
        "simulated_work": simulated_work(*(sum(1 for row in calls[:len(sim_rows)]
                                               if row.where == where)
                                           for where in ("accelerator", "array"))),
    }
    return environment.get_template("report.html.j2").render(context)


def render_files(data: ReportData) -> dict[str, bytes]:
    """The report's two files, for the compiled directory."""
    return {HTML: render_html(data).encode(), DATA: data.to_json().encode()}
