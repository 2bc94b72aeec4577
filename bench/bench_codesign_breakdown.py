"""Where the co-design's pick spends its cycles, layer by layer, and which of those fixed
costs a machine parameter cuts (issue 31's 1.5x; every figure the exact cycle model's).

The fixed-machine search's pick (c2 bottlenecked by 2 and strided, c3 by 2) compiled as
`glensidec compile` does for a few machines; each accelerator layer's commands run on
`AccelModel` (the RTL's cycles, checked equal to the compile's prediction) with a trace:
when its DMA issued load slots, when rows entered the array, when results were written.
The machines with "N rows a DMA write" have ws_dma_load's groups (built, in the RTL and
both cycle models: rows that overlap or lie end to end — weight blocks, whole lines of a
map, packed taps a byte apart — and padded lines in runs go into the scratchpad N a
write, several a bus beat). The machines with "N weight rows a cycle" take a K fold's
weights into the array N rows a beat (ROWS/N beats instead of ROWS: ws_array's chains
shift N rows, ws_spad's port 0 reads N sub-banks; built, in the RTL and both cycle models;
an earlier version of this table priced it as a what-if). Each layer's cycles are cut in
three that add up: the head (cycle 0 to its first array row: its first loads, their
latency, the first fold's weights), the array span (first to last array row: the rows it
took and the cycles it waited between them), and the tail (after its last array row: the
row through the array, ROWS + COLS - 1 cycles, then the epilogue's lanes and the store).

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
from glensidec.hardware.commands import AccelConfig, AccelModel, Command  # noqa: E402
from glensidec.lang.typecheck import check_program  # noqa: E402
from glensidec.nas import hardware as H  # noqa: E402
from glensidec.nas import search as S  # noqa: E402
from glensidec.nas import transforms as T  # noqa: E402
from glensidec.nas.cost import quantized  # noqa: E402

PICK = {"c2": "bottleneck:2", "c2.maxpool": "stride", "c3": "bottleneck:2"}
MACHINES = (Machine(16, 16),  # today's accelerator: the fixed pick's machine
            Machine(16, 16, 16 * 1024, 256, 64, 16),
            Machine(16, 16, 16 * 1024, 256, 64, 16, write_rows=4),
            Machine(16, 16, 16 * 1024, 256, 64, 16, write_rows=4, weight_load_rows=2),
            Machine(16, 16, 16 * 1024, 256, 64, 16, write_rows=4, weight_load_rows=4),
            Machine(16, 16, 16 * 1024, 256, 128, 16, write_rows=4, weight_load_rows=4),
            Machine(16, 32, 16 * 1024, 256, 64, 16),  # --bound's fastest within the budget
            Machine(16, 32, 16 * 1024, 256, 64, 16, write_rows=2),  # fastest with groups
            Machine(16, 32, 16 * 1024, 256, 64, 16, write_rows=2, weight_load_rows=2),
            Machine(16, 32, 16 * 1024, 256, 64, 16, write_rows=4))  # over it
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
    budget = model.area(MACHINES[0])
    out = ["# Where the co-design's pick spends its cycles (issue 31)", "",
           __doc__.split("\n\n    python")[0].strip(), "",
           "Made by `python bench/bench_codesign_breakdown.py`: the pick is "
           + ", ".join(f"{k} {v}" for k, v in PICK.items()) + "; every figure the exact "
           "model's.", ""]
    totals = {}
    for machine in MACHINES:
        accel, layers = layers_of(machine)
        area = model.area(machine)
        name = machine.describe()
        if "epilogue" not in name:
            name += f", epilogue {accel.epilogue_lanes} lanes (the default)"
        out += [f"## {name} ({area:,.0f} cell "
                f"equivalents{', over the budget' if area > budget else ''})",
                "", "| layer | cycles | head / array span (waiting) / tail | load slots "
                "(first-last cycle) | array rows | store beats |",
                "|---|---:|---:|---:|---:|---:|"]
        total = 0
        for layer in layers:
            span = timeline(accel, layer)
            total += layer.cycles
            out.append(f"| {layer.name} | {span['cycles']} | {span['phases']} | "
                       f"{span['load slots']} | "
                       f"{span['array rows']} | {span['store beats']} |")
        out += [f"| **total** | **{total}** | | | | |", ""]
        totals[name] = (total, area)
    fixed = next(iter(totals.values()))[0]
    out += ["## Against the fixed pick on today's 16x16", "",
            f"1.5x of the fixed pick's {fixed} cycles is {fixed / 1.5:.0f}; the budget is "
            f"today's 16x16, {budget:,.0f} cell equivalents.", "",
            "| machine | cycles | cell equivalents |", "|---|---:|---:|"]
    for name, (total, area) in totals.items():
        out.append(f"| {name} | {total} ({fixed / total:.2f}x) | {area:,.0f}"
                   f"{' (over the budget)' if area > budget else ''} |")
    OUT.write_text("\n".join(out) + "\n", encoding="utf-8")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
