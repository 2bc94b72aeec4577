"""Where the co-design's pick spends its cycles, layer by layer, and which of those fixed
costs a machine parameter could cut (issue 31's 1.5x; a what-if on the exact cycle model).

The fixed-machine search's pick (c2 bottlenecked by 2 and strided, c3 by 2) compiled as
`glensidec compile` does for a few machines; each accelerator layer's commands run on
`AccelModel` (the RTL's cycles, checked equal to the compile's prediction) with a trace:
when its DMA issued load slots, when rows entered the array, when results were written.
The machines with "N rows a DMA write" have ws_dma_load's groups (built, in the RTL and
both cycle models: rows that overlap or lie end to end — weight blocks, whole lines of a
map, packed taps a byte apart — and padded lines in runs go into the scratchpad N a
write, several a bus beat). Each layer's cycles are cut in three that add up: the head
(cycle 0 to its first array row: its first loads, their latency, the first fold's
weights), the array span (first to last array row: the rows it took and the cycles it
waited between them), and the tail (after its last array row: the row through the array,
ROWS + COLS - 1 cycles, then the epilogue's lanes and the store). One lever no parameter
of ws_accel offers, priced by running the same commands on the model changed (a what-if,
not RTL):

- **weight rows a cycle (array)**: ws_ctrl shifts one weight row a cycle into the array, so
  a K fold's weights take ROWS cycles before its first activation; with W (each column's
  shift chain cut in W segments fed at once) they take ROWS/W. Priced by counting ROWS/W
  weight beats in `AccelModel` (its bank-free rule shortened with them: optimistic).

    python bench/bench_codesign_breakdown.py   → bench/results/codesign_breakdown.md
                                                 (about a minute)
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import bench_nas as B  # noqa: E402

from glensidec import pipeline  # noqa: E402
from glensidec.backend.lower import AccelLayer, constant_array  # noqa: E402
from glensidec.hardware.accel import EpilogueConfig  # noqa: E402
from glensidec.hardware.accel_native import FIELDS, unpack_commands  # noqa: E402
from glensidec.hardware.area import Machine, fitted  # noqa: E402
from glensidec.hardware.commands import AccelConfig, AccelModel, Command, Load  # noqa: E402
from glensidec.lang.typecheck import check_program  # noqa: E402
from glensidec.nas import hardware as H  # noqa: E402
from glensidec.nas import search as S  # noqa: E402
from glensidec.nas import transforms as T  # noqa: E402
from glensidec.nas.cost import quantized  # noqa: E402

PICK = {"c2": "bottleneck:2", "c2.maxpool": "stride", "c3": "bottleneck:2"}
MACHINES = (Machine(16, 16),  # today's accelerator: the fixed pick's machine
            Machine(16, 16, 16 * 1024, 256, 64, 16),
            Machine(16, 16, 16 * 1024, 256, 64, 16, write_rows=4),
            Machine(16, 32, 16 * 1024, 256, 64, 16),  # --bound's fastest within the budget
            Machine(16, 32, 16 * 1024, 256, 64, 16, write_rows=2),  # fastest with groups
            Machine(16, 32, 16 * 1024, 256, 64, 16, write_rows=4),  # over it
            Machine(16, 32, 16 * 1024, 256, 64, 32, write_rows=4))  # 32 lanes: over it
LEVERS = ((1, 1), (1, 4))  # (weight rows a beat, weight rows a cycle): what-ifs
#: any table entries do: only the commands' timing is priced, not their data
TIMING_ONLY = EpilogueConfig(table=tuple(range(-128, 128)))
OUT = B.RESULTS / "codesign_breakdown.md"


@dataclasses.dataclass
class Layer:
    name: str
    commands: list[Command]
    weights: range  # main-memory bytes of its weights
    cycles: int  # the compile's prediction


def layers_of(machine: Machine) -> tuple[AccelConfig, list[Layer]]:
    """The pick's accelerator layers as `glensidec compile` makes them for `machine`."""
    graph = B.original_graph()
    space = S.search_space(graph, B.KINDS)
    network = S.apply(graph, space.layers, B.candidate_of(PICK, space.layers), T.INHERIT)
    with tempfile.TemporaryDirectory(prefix="bench_codesign_breakdown.") as folder:
        program = quantized(network, Path(folder))
    target = H.target(machine)
    assert target.accel is not None
    compiled = pipeline.compile_for(
        pipeline.Typed(program.program, check_program(program.program)), target)
    lowered = pipeline.lower_for(compiled.program, compiled.types, target.config,
                                 target.accel, program.weights)
    layers = []
    for instruction in lowered.instructions:
        assert isinstance(instruction, AccelLayer), instruction
        table = constant_array(lowered.buffer_of(instruction.commands), program.weights)
        n = instruction.n
        commands = unpack_commands(table.reshape(-1, len(FIELDS)), target.accel.cols,
                                   TIMING_ONLY, [0] * n, [0] * n, None, [1] * n)
        bases = [b for b in (instruction.input_base, instruction.output_base,
                             instruction.residual_base) if b > instruction.weight_base]
        end = min(bases) if instruction.k else instruction.weight_base
        layers.append(Layer(instruction.name, commands, range(instruction.weight_base, end),
                            instruction.cycles))
    return target.accel, layers


def wide_weight_loads(layer: Layer, rows: int) -> list[Command]:
    """The layer's commands with each contiguous weight load of K rows priced as K/rows
    loads of `rows` rows together (the what-if of a DMA writing `rows` rows a beat)."""
    out: list[Command] = []
    for command in layer.commands:
        dma = command.dma if isinstance(command, Load) else None
        if (dma is not None and rows > 1 and not dma.bounds and dma.base in layer.weights
                and abs(dma.stride1) == dma.length and dma.count1 % rows == 0):
            base = dma.base if dma.stride1 > 0 else dma.base - (rows - 1) * dma.length
            command = dataclasses.replace(command, dma=dataclasses.replace(
                dma, base=base, length=dma.length * rows, count1=dma.count1 // rows,
                stride1=dma.stride1 * rows))
        out.append(command)
    return out


def priced(accel: AccelConfig, layer: Layer, beat_rows: int, cycle_rows: int) -> int:
    model = AccelModel(accel)
    if cycle_rows > 1:  # weight beats of a fold: ROWS / cycle_rows (the model reads rows)
        model.config = dataclasses.replace(accel, rows=accel.rows // cycle_rows)
    return model.run(wide_weight_loads(layer, beat_rows)).cycles


def timeline(accel: AccelConfig, layer: Layer) -> dict[str, int | str]:
    """When the layer's DMA, array and stores worked (first..last cycle, cycles busy), and
    its cycles cut in head, array span and tail (module docstring)."""
    timing = AccelModel(accel).run(layer.commands, trace=True)
    if timing.cycles != layer.cycles:
        raise SystemExit(f"{layer.name}: AccelModel {timing.cycles} != compile "
                         f"{layer.cycles}")
    spans: dict[str, int | str] = {}
    for index, what in enumerate(("load slots", "array rows", "store beats")):
        busy = [cycle for cycle, flags in enumerate(timing.trace) if flags[index]]
        spans[what] = f"{len(busy)} ({busy[0]}-{busy[-1]})" if busy else "0"
    rows = [cycle for cycle, flags in enumerate(timing.trace) if flags[1]]
    if rows:  # head + span + tail = cycles
        span = rows[-1] - rows[0] + 1
        spans["phases"] = (f"{rows[0]} / {span} ({span - len(rows)} waiting) / "
                           f"{timing.cycles - rows[-1] - 1}")
    else:  # a pool: no array rows, its loads and pooling stores only
        spans["phases"] = f"- / - / {timing.cycles}"
    return {"cycles": timing.cycles, **spans}


def main() -> int:
    model = fitted()
    out = ["# Where the co-design's pick spends its cycles (issue 31)", "",
           __doc__.split("\n\n    python")[0].strip(), "",
           "Made by `python bench/bench_codesign_breakdown.py`: the pick is "
           + ", ".join(f"{k} {v}" for k, v in PICK.items()) + "; the lever columns are "
           "what-ifs (module docstring), every other figure the exact model's.", ""]
    totals = {}
    for machine in MACHINES:
        accel, layers = layers_of(machine)
        area = model.area(machine)
        name = machine.describe()
        if "epilogue" not in name:
            name += f", epilogue {accel.epilogue_lanes} lanes (the default)"
        out += [f"## {name} ({area:,.0f} cell "
                f"equivalents{', over the budget' if area > model.area(MACHINES[0]) else ''})",
                "", "| layer | cycles | head / array span (waiting) / tail | load slots "
                "(first-last cycle) | array rows | store beats | "
                + " | ".join(f"{c} weight rows a cycle (what-if)" for _, c in LEVERS[1:])
                + " |", "|---|---:|---:|---:|---:|---:|" + "---:|" * (len(LEVERS) - 1)]
        sums = [0] * len(LEVERS)
        for layer in layers:
            span = timeline(accel, layer)
            levers = [priced(accel, layer, b, c) for b, c in LEVERS]
            assert levers[0] == layer.cycles
            sums = [a + b for a, b in zip(sums, levers, strict=True)]
            out.append(f"| {layer.name} | {span['cycles']} | {span['phases']} | "
                       f"{span['load slots']} | "
                       f"{span['array rows']} | {span['store beats']} | "
                       + " | ".join(map(str, levers[1:])) + " |")
        out += [f"| **total** | **{sums[0]}** | | | | | " + " | ".join(
            f"**{s}**" for s in sums[1:]) + " |", ""]
        totals[name] = sums
    fixed = next(iter(totals.values()))[0]
    out += ["## Against the fixed pick on today's 16x16", "",
            f"1.5x of the fixed pick's {fixed} cycles is {fixed / 1.5:.0f}.", "",
            "| machine | today | " + " | ".join(f"{c} weight rows a cycle (what-if)"
                                                  for b, c in LEVERS[1:]) + " |",
            "|---|---:|" + "---:|" * (len(LEVERS) - 1)]
    for machine, sums in totals.items():
        out.append(f"| {machine} | " + " | ".join(
            f"{s} ({fixed / s:.2f}x)" for s in sums) + " |")
    OUT.write_text("\n".join(out) + "\n", encoding="utf-8")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
