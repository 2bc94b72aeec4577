"""Area of an accelerator configuration: a model fitted to Yosys's cell counts.

`bench/bench_synth.py --area` synthesizes the whole `ws_accel` (per module, generic gates,
no ABC) for a grid of configurations and writes what it measured to `area_cells.json`
beside this module: each configuration's logic cells and its memory bits. The model here
is fitted to the configurations marked "fit" on every import (least squares on relative
error, so small and large machines weigh alike); the "held out" ones are only predicted,
and bench/results/area.md states both errors. A configuration synthesized from an earlier
RTL counts today's epilogue in place of its own (`cells_today`: per module, the cells add
up by module, and `ws_epilogue` is measured alone on both RTLs), so an epilogue change
does not take the whole grid's hours of synthesis again.

Area is one number in *cell equivalents*: the logic cells the model predicts plus the
memories' bits (scratchpad, accumulator, command queues, the epilogue's and the output
FIFO) at `SRAM_CELLS_PER_BIT` each.
Yosys keeps memories as macros — a chip builds them from SRAM, not gates — so their bits
are counted exactly (`sram_bits`, checked against Yosys's count by the bench) and weighed
by that one assumed factor, not measured: a 6T SRAM bit with its periphery is roughly a
quarter to a half of a two-input gate, and a generic Yosys cell (AND, XOR, MUX, flip-flop)
is one to several. docs/nas.md says how the co-design's choice moves with it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig

AREA_DATA = Path(__file__).with_name("area_cells.json")
SRAM_CELLS_PER_BIT = 0.25  # an assumption (module docstring), not a measurement
# ws_accel's command queues (rtl/ws_accel.v): CMD_W-bit load and store queues and an
# EXEC_W-bit execute queue of QUEUE_DEPTH entries, a 4-entry AQ_W-bit activation queue and
# a TRACK-entry 34-bit load tracker, TRACK = next power of two >= LATENCY + 3.
QUEUE_DEPTH, LATENCY, EXEC_W, AQ_W, TRACK_W = 8, 8, 192, 140, 34
FEATURES = ("rows x cols", "cols", "bus bytes x row bytes", "1")
# ws_epilogue alone (bench_synth.py --area-epilogue): its cells against its lanes and columns
EPILOGUE_FEATURES = ("lanes", "cols", "1")
# ws_dma_load + ws_spad alone (bench_synth.py --area-write): the cells W rows a DMA write
# add to those at one row, against the bus and row bytes (each of the W rows is assembled
# from any byte of a beat, as the one row is; ws_spad's reads pick one of W sub-banks)
WRITE_FEATURES = ("(W-1) x bus bytes x row bytes", "(W-1) x row bytes")
# ws_top + ws_spad alone (bench_synth.py --area-load): the cells L weight rows a cycle add
# to those at one. ws_top's grow by nearly the same at any L > 1 (at 16x16: +10,175 cells at
# L 2, +11,070 at L 4; its weights' skew carries L rows a column, column c delayed c
# cycles), taken to scale with cols² (only 16x16 was synthesized); ws_spad's by the
# sub-banks L adds beyond W (S = max(W, L)) and the rows its port 0 reads
LOAD_FEATURES = ("[L > 1] x cols x cols", "row bytes x (S - max(W, 1) + L - 1)")


def size_text(size: int) -> str:
    """Bytes as compile's options take them: 256KiB, 1MiB or a plain number."""
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


@dataclass(frozen=True, order=True)
class Machine:
    """One accelerator configuration: the array, its memories, its bus and the epilogue's
    lanes, the rows a DMA write carries and the weight rows a cycle into the array (what
    `glensidec compile`'s --array, --scratchpad, --accumulator, --dram-bandwidth,
    --epilogue-lanes, --dma-write-rows and --weight-load-rows choose)."""

    rows: int
    cols: int
    scratchpad_bytes: int = 256 * 1024
    accumulator_rows: int = 1024
    bus_bytes: int = 16
    #: columns the epilogue requantizes a cycle (a divisor of cols; a row takes cols /
    #: lanes cycles); 0 means the default of `cols` (commands.default_epilogue_lanes, 4 of
    #: 16), which is what the field then holds, so equal machines compare equal
    epilogue_lanes: int = 0
    #: scratchpad rows one DMA write may carry (ws_dma_load's groups, ws_spad's sub-banks)
    write_rows: int = 1
    #: weight rows a cycle into the array (ws_array's chains shift that many a beat)
    weight_load_rows: int = 1

    def __post_init__(self) -> None:
        from glensidec.hardware.commands import default_epilogue_lanes

        if not self.epilogue_lanes:
            object.__setattr__(self, "epilogue_lanes", default_epilogue_lanes(self.cols))

    @property
    def default_lanes(self) -> bool:
        from glensidec.hardware.commands import default_epilogue_lanes

        return self.epilogue_lanes == default_epilogue_lanes(self.cols)

    def array(self) -> ArrayConfig:
        return ArrayConfig(self.rows, self.cols)

    @property
    def accumulator_bytes(self) -> int:
        return self.accumulator_rows * self.cols * 4  # rows of COLS int32

    @property
    def row_bytes(self) -> int:
        """A scratchpad row: the next power of two >= max(rows, cols) (accel_config_for)."""
        return 1 << (max(self.rows, self.cols) - 1).bit_length()

    def key(self) -> str:
        """rows x cols/scratchpad/accumulator rows/bus, then /lanes when not the default
        and /wN when a DMA write carries N > 1 rows, /lN when the array takes N > 1 weight
        rows a cycle (the keys of the machines before these were knobs stay what they
        were)."""
        lanes = "" if self.default_lanes else f"/{self.epilogue_lanes}"
        write = "" if self.write_rows == 1 else f"/w{self.write_rows}"
        load = "" if self.weight_load_rows == 1 else f"/l{self.weight_load_rows}"
        return (f"{self.rows}x{self.cols}/{self.scratchpad_bytes}/{self.accumulator_rows}/"
                f"{self.bus_bytes}{lanes}{write}{load}")

    @staticmethod
    def parse_key(key: str) -> Machine:
        match = re.fullmatch(r"(\d+)x(\d+)/(\d+)/(\d+)/(\d+)(?:/(\d+))?(?:/w(\d+))?"
                             r"(?:/l(\d+))?", key)
        if match is None:
            raise ValueError(f"not a machine key: {key!r}")
        rows, cols, scratchpad, depth, bus = (int(g) for g in match.groups()[:5])
        return Machine(rows, cols, scratchpad, depth, bus, int(match.group(6) or 0),
                       int(match.group(7) or 1), int(match.group(8) or 1))

    def describe(self) -> str:
        lanes = "" if self.default_lanes else f", epilogue {self.epilogue_lanes} lanes"
        write = "" if self.write_rows == 1 else f", {self.write_rows} rows a DMA write"
        load = ("" if self.weight_load_rows == 1
                else f", {self.weight_load_rows} weight rows a cycle")
        return (f"{self.rows}x{self.cols}, scratchpad {size_text(self.scratchpad_bytes)}, "
                f"accumulator {self.accumulator_rows} rows, bus {self.bus_bytes} B/cycle"
                f"{lanes}{write}{load}")

    def compile_options(self) -> list[str]:
        """The `glensidec compile` options that build this machine."""
        lanes = [] if self.default_lanes else ["--epilogue-lanes", str(self.epilogue_lanes)]
        write = [] if self.write_rows == 1 else ["--dma-write-rows", str(self.write_rows)]
        load = ([] if self.weight_load_rows == 1
                else ["--weight-load-rows", str(self.weight_load_rows)])
        return ["--array", f"{self.rows}x{self.cols}",
                "--scratchpad", size_text(self.scratchpad_bytes),
                "--accumulator", size_text(self.accumulator_bytes),
                "--dram-bandwidth", str(self.bus_bytes), *lanes, *write, *load]


def sram_bits(machine: Machine) -> int:
    """Bits of ws_accel's memories: scratchpad, accumulator, command queues, the
    epilogue's row FIFO (a row of COLS int32 and its COLS int8 residual bytes) and the
    output FIFO of int8 rows, at the compile's defaults for this machine."""
    from glensidec.hardware.commands import accel_config_for

    config = accel_config_for(machine.array(), machine.scratchpad_bytes, machine.bus_bytes,
                              acc_depth=machine.accumulator_rows,
                              epilogue_lanes=machine.epilogue_lanes)
    cmd_w = config.command_width  # the load and store queues' entries
    track = 1 << (LATENCY + 3 - 1).bit_length()
    queues = 2 * QUEUE_DEPTH * cmd_w + QUEUE_DEPTH * EXEC_W + 4 * AQ_W + track * TRACK_W
    fifos = (config.epilogue_depth * 40 + config.out_depth * 8) * machine.cols
    return (8 * machine.scratchpad_bytes + 32 * machine.cols * machine.accumulator_rows
            + queues + fifos)


def features(machine: Machine) -> list[float]:
    """What the logic grows with at the default epilogue lanes (a quarter of the columns):
    the PEs (rows x cols); the epilogue, accumulator and skew lanes (cols); the DMA's
    realignment of bus beats into scratchpad rows (bus bytes x row bytes: a load shifts
    every beat to any byte of a row); the rest (queues, control). Rows alone and the bus
    alone fitted to nothing measurable (bench/results/area.md). Other lanes: `AreaModel`'s
    epilogue term."""
    r, c = machine.rows, machine.cols
    return [r * c, c, machine.bus_bytes * machine.row_bytes, 1.0]


def epilogue_features(cols: int, lanes: int) -> list[float]:
    return [lanes, cols, 1.0]


def write_features(row_bytes: int, bus_bytes: int, write_rows: int) -> list[float]:
    return [(write_rows - 1) * bus_bytes * row_bytes, (write_rows - 1) * row_bytes]


def load_features(cols: int, row_bytes: int, write_rows: int, load: int) -> list[float]:
    return [float(load > 1) * cols * cols,
            row_bytes * (max(write_rows, load) - max(write_rows, 1) + load - 1)]


@dataclass(frozen=True)
class AreaModel:
    coefficients: tuple[float, ...]  # one per FEATURES
    sram_cells_per_bit: float = SRAM_CELLS_PER_BIT
    #: ws_epilogue's cells, one per EPILOGUE_FEATURES (none: every machine at the default
    #: lanes, as the whole-accelerator fit measured them)
    epilogue: tuple[float, ...] = (0.0, 0.0, 0.0)
    #: the cells W rows a DMA write add (ws_dma_load and ws_spad), one per WRITE_FEATURES
    write: tuple[float, ...] = (0.0, 0.0)
    #: the cells L weight rows a cycle add (ws_top and ws_spad), one per LOAD_FEATURES
    load: tuple[float, ...] = (0.0, 0.0)

    def logic_cells(self, machine: Machine) -> float:
        """The whole-accelerator fit at the default lanes and one row a DMA write, the
        epilogue's cells at the machine's lanes in place of those at the default and the
        cells its rows a write add (per module, the accelerator's cells are the sum of its
        modules': the epilogue, the DMA and the scratchpad are measured alone)."""
        from glensidec.hardware.commands import default_epilogue_lanes

        cols = machine.cols
        lanes = (np.dot(self.epilogue, epilogue_features(cols, machine.epilogue_lanes))
                 - np.dot(self.epilogue, epilogue_features(cols, default_epilogue_lanes(cols))))
        write = np.dot(self.write, write_features(machine.row_bytes, machine.bus_bytes,
                                                  machine.write_rows))
        load = np.dot(self.load, load_features(cols, machine.row_bytes, machine.write_rows,
                                               machine.weight_load_rows))
        return float(np.dot(self.coefficients, features(machine)) + lanes + write + load)

    def area(self, machine: Machine) -> float:
        """Cell equivalents: logic cells + SRAM bits at `sram_cells_per_bit`."""
        return self.logic_cells(machine) + self.sram_cells_per_bit * sram_bits(machine)


def rtl_digest() -> str:
    """Which RTL cells were counted on: a digest of rtl/ws_*.v, stored with each synthesized
    configuration (bench_synth.py). A configuration of another digest is another design's
    count: the fit still uses it (re-synthesizing a grid takes hours on a loaded machine),
    and bench/results/area.md says which rows are from the current RTL."""
    import hashlib

    from glensidec.resources import resource_dir

    digest = hashlib.sha256()
    for path in sorted(resource_dir("rtl").glob("ws_*.v")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def current(row: dict[str, Any]) -> bool:
    """Was this synthesized configuration counted on today's RTL?"""
    return bool(row.get("rtl") == rtl_digest())


@cache
def measured() -> dict[str, Any]:
    """The synthesized grid (bench/bench_synth.py --area)."""
    data: dict[str, Any] = json.loads(AREA_DATA.read_text(encoding="utf-8"))
    return data


def fit(rows: list[tuple[Machine, float]]) -> tuple[float, ...]:
    """Least squares on relative error: every configuration weighs alike."""
    return _least_squares([features(m) for m, _ in rows], [cells for _, cells in rows])


def _least_squares(rows: list[list[float]], cells: list[float]) -> tuple[float, ...]:
    matrix = np.array([[f / c for f in row] for row, c in zip(rows, cells, strict=True)])
    solution, *_ = np.linalg.lstsq(matrix, np.ones(len(rows)), rcond=None)
    return tuple(float(x) for x in solution)


def cells_today(key: str, row: dict[str, Any], epilogue: tuple[float, ...]) -> float:
    """A synthesized configuration's cells with today's epilogue. Per module the
    accelerator's cells are its modules' added up, so one synthesized from an earlier RTL
    whose `ws_epilogue` alone was measured on that RTL too (`epilogue_cells`: its columns
    at its lanes, the same script) has those cells swapped for today's epilogue fit's;
    the rest of the accelerator is as synthesized. Others: as synthesized."""
    if current(row) or "epilogue_cells" not in row:
        return float(row["cells"])
    machine = Machine.parse_key(key)
    today = float(np.dot(epilogue, epilogue_features(machine.cols, machine.epilogue_lanes)))
    return float(row["cells"]) - float(row["epilogue_cells"]) + today


def epilogue_rows() -> list[tuple[int, int, int]]:
    """(cols, lanes, cells) of ws_epilogue synthesized alone (area_cells.json "epilogue")."""
    return [(int(cols), int(lanes), row["cells"]) for key, row in
            measured().get("epilogue", {}).items() for cols, lanes in [key.split("x")]]


def fit_epilogue(rows: list[tuple[int, int, int]]) -> tuple[float, ...]:
    """ws_epilogue's cells = a·lanes + b·cols + c, least squares on relative error."""
    if len(rows) < len(EPILOGUE_FEATURES):
        return (0.0,) * len(EPILOGUE_FEATURES)
    return _least_squares([epilogue_features(cols, lanes) for cols, lanes, _ in rows],
                          [cells for _, _, cells in rows])


def write_rows_deltas() -> list[tuple[int, int, int, float]]:
    """(row bytes, bus bytes, W, cells) of each W > 1 synthesized with its W = 1 at the same
    row and bus bytes (area_cells.json "write"): the cells ws_dma_load and ws_spad at W
    have over those at 1."""
    data = measured().get("write", {})
    cells = {tuple(int(v) for v in key.split("x")): row["dma_cells"] + row["spad_cells"]
             for key, row in data.items()}
    return [(r, b, w, float(total - cells[(r, b, 1)])) for (r, b, w), total in
            sorted(cells.items()) if w > 1 and (r, b, 1) in cells]


def weight_load_deltas() -> list[tuple[int, int, int, int, float]]:
    """(rows, cols, W, L, cells) of each L > 1 whose modules were synthesized at L and at 1
    (area_cells.json "load": ws_top at rows x cols, ws_spad at the row bytes and W): the
    cells ws_top and ws_spad at L weight rows a cycle have over those at 1."""
    data = measured().get("load", {})
    top = {tuple(int(v) for v in key[4:].split("x")): row["cells"]
           for key, row in data.items() if key.startswith("top:")}
    spad = {tuple(int(v) for v in key[5:].split("x")): row["cells"]
            for key, row in data.items() if key.startswith("spad:")}
    deltas = []
    for (rows, cols, load), cells in sorted(top.items()):
        row_bytes = 1 << (max(rows, cols) - 1).bit_length()
        for (width, write, at), spad_cells in sorted(spad.items()):
            if load > 1 and at == load and width == row_bytes and \
                    (rows, cols, 1) in top and (width, write, 1) in spad:
                deltas.append((rows, cols, write, load, float(
                    cells - top[(rows, cols, 1)] + spad_cells - spad[(width, write, 1)])))
    return deltas


def fit_load(rows: list[tuple[int, int, int, int, float]]) -> tuple[float, ...]:
    """The weight-rows-a-cycle cells' coefficients, least squares on relative error."""
    if len(rows) < len(LOAD_FEATURES):
        return (0.0,) * len(LOAD_FEATURES)
    return _least_squares([load_features(c, 1 << (max(r, c) - 1).bit_length(), w, n)
                           for r, c, w, n, _ in rows], [cells for *_, cells in rows])


def fit_write(rows: list[tuple[int, int, int, float]]) -> tuple[float, ...]:
    """The write-rows cells' coefficients, least squares on relative error."""
    if not rows:
        return (0.0,) * len(WRITE_FEATURES)
    return _least_squares([write_features(r, b, w) for r, b, w, _ in rows],
                          [cells for *_, cells in rows])


@cache
def fitted(sram_cells_per_bit: float = SRAM_CELLS_PER_BIT) -> AreaModel:
    """The model fitted to the configurations the bench marked "fit"."""
    epilogue = fit_epilogue(epilogue_rows())
    rows = [(Machine.parse_key(key), cells_today(key, row, epilogue))
            for key, row in measured()["configurations"].items() if row["role"] == "fit"]
    if len(rows) < len(FEATURES):
        raise GlensideError(f"{AREA_DATA}: {len(rows)} fitted configurations, the area model "
                            f"needs at least {len(FEATURES)}")
    return AreaModel(fit(rows), sram_cells_per_bit, epilogue, fit_write(write_rows_deltas()),
                     fit_load(weight_load_deltas()))


def quality(model: AreaModel) -> dict[str, float]:
    """Relative errors (%) of the logic cells on the fitted and on the held-out
    configurations, each fitted one left out of a refit (`loo`), and how many
    configurations' SRAM bits `sram_bits` counts exactly (of those synthesized from today's
    RTL, whose memories it counts)."""
    errors: dict[str, list[float]] = {"fit": [], "held out": []}
    exact = 0
    configurations = measured()["configurations"]
    for key, row in configurations.items():
        machine = Machine.parse_key(key)
        cells = cells_today(key, row, model.epilogue)
        errors[row["role"]].append(100 * abs(model.logic_cells(machine) / cells - 1))
        exact += current(row) and sram_bits(machine) == row["memory_bits"]
    fitted_rows = [(Machine.parse_key(k), cells_today(k, r, model.epilogue))
                   for k, r in configurations.items() if r["role"] == "fit"]
    # leave one out: each fit configuration predicted by the model of the others
    left_out = [100 * abs(AreaModel(fit(fitted_rows[:i] + fitted_rows[i + 1:]),
                                    epilogue=model.epilogue)
                          .logic_cells(machine) / cells - 1)
                for i, (machine, cells) in enumerate(fitted_rows)
                if len(fitted_rows) > len(FEATURES)]
    return {"fit_max": max(errors["fit"]), "fit_mean": float(np.mean(errors["fit"])),
            "loo_max": max(left_out, default=float("nan")),
            "loo_mean": float(np.mean(left_out)) if left_out else float("nan"),
            "held_max": max(errors["held out"], default=float("nan")),
            "held_mean": float(np.mean(errors["held out"])) if errors["held out"]
            else float("nan"),
            "bits_exact": exact, "count": len(configurations),
            "current": sum(1 for row in configurations.values() if current(row)),
            "epilogue_max": max((100 * abs(float(np.dot(model.epilogue, epilogue_features(
                cols, lanes))) / cells - 1) for cols, lanes, cells in epilogue_rows()),
                default=float("nan")),
            "write_max": max((100 * abs(float(np.dot(model.write, write_features(r, b, w)))
                                        / cells - 1) for r, b, w, cells in write_rows_deltas()),
                             default=float("nan")),
            "load_max": max((100 * abs(float(np.dot(model.load, load_features(
                c, 1 << (max(r, c) - 1).bit_length(), w, n))) / cells - 1)
                for r, c, w, n, cells in weight_load_deltas()), default=float("nan"))}


def describe_model(model: AreaModel) -> list[str]:
    terms = " + ".join(f"{c:,.1f}·({f})" if f != "1" else f"{c:,.0f}"
                       for c, f in zip(model.coefficients, FEATURES, strict=True))
    epilogue = " + ".join(f"{c:,.1f}·{f}" if f != "1" else f"{c:,.0f}"
                          for c, f in zip(model.epilogue, EPILOGUE_FEATURES, strict=True))
    return [f"Logic cells = {terms} at the default epilogue lanes (a quarter of the "
            f"columns); other lanes add ws_epilogue's cells at them less those at the "
            f"default, ws_epilogue's cells = {epilogue} (synthesized alone): "
            f"{model.epilogue[0]:,.0f} cells a lane.",
            "W rows a DMA write add " + " + ".join(
                f"{c:,.2f}·({f})" for c, f in zip(model.write, WRITE_FEATURES, strict=True))
            + " cells (ws_dma_load and ws_spad synthesized alone, less theirs at one row).",
            "L weight rows a cycle into the array add " + " + ".join(
                f"{c:,.2f}·({f})" for c, f in zip(model.load, LOAD_FEATURES, strict=True))
            + " cells (ws_top and ws_spad synthesized alone, less theirs at one row a "
            "cycle; S = max(W, L) sub-banks).",
            f"Area (cell equivalents) = logic cells + {model.sram_cells_per_bit:g} × SRAM "
            "bits (scratchpad, accumulator, command queues, the epilogue's and the output "
            "FIFO; the factor is an assumption, "
            "glensidec/hardware/area.py)."]
