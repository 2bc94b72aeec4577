"""What chaining layers on ws_accel would buy the digits-CNN NAS (issue 26's 3x): a what-if
on the exact cycle model, not yet what the compiler emits.

Today every accelerator layer runs alone, from an idle machine: its first weights and
inputs cross the bus before the array starts, and its results drain through the array's
pipeline, the epilogue and the store DMA before the next layer may start. ws_accel's fenced
LOAD (docs/hardware.md) lets the next layer's commands queue behind the previous layer's:
its loads before the fenced one (weights: no layer writes them) run while that layer
drains, and the fenced one — its first load of anything else, the previous layer's result
— starts once every earlier STORE has written its last beat. This benchmark prices, with
`AccelModel` (the model sim/test_ws_accel.py's chain3x3_maxpool checks the fence against
the RTL with), the original digits CNN and the NAS's pick (bench/results/nas_candidates.json,
the search by cycles) compiled as `glensidec compile` does, three ways:

- alone: each layer's commands from an idle machine (today's total);
- chained: all layers' commands as one stream, each layer's first non-weight load fenced,
  every second layer's scratchpad rows moved by an eighth of the scratchpad (so the early
  weight loads of a layer write rows the layer before it does not use; checked, else that
  layer's first load is fenced), whichever parity is faster;
- unfenced (a bound no machine reaches: each layer's loads read its input at once, before
  the previous layer has written it): what layers overlapped without waiting for the
  data would give.

    python bench/bench_nas_chain.py   → bench/results/nas_chain.md (a few seconds)
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import bench_nas  # noqa: E402

from glensidec import pipeline  # noqa: E402
from glensidec.backend.lower import AccelLayer, constant_array  # noqa: E402
from glensidec.hardware.accel import EpilogueConfig  # noqa: E402
from glensidec.hardware.accel_native import (  # noqa: E402
    FIELDS,
    native_cycles,
    native_model,
    pack_commands,
    unpack_commands,
)
from glensidec.hardware.commands import (  # noqa: E402
    AccelConfig,
    AccelModel,
    Command,
    Compute,
    Load,
    Store,
)
from glensidec.lang.typecheck import check_program  # noqa: E402
from glensidec.nas import search as S  # noqa: E402
from glensidec.nas import transforms as T  # noqa: E402
from glensidec.nas.cost import quantized  # noqa: E402
from glensidec.opt.extract import parse_array_size  # noqa: E402

RESULTS = REPO / "bench" / "results"
#: any table entries do: only the commands' timing is priced, not their data
TIMING_ONLY = EpilogueConfig(table=tuple(range(-128, 128)))


@dataclasses.dataclass
class Layer:
    name: str
    commands: list[Command]
    weights: range  # main-memory bytes of its weights (its own address space)


def layers_of(choices: dict[str, str]) -> tuple[AccelConfig, list[Layer]]:
    """The accelerator layers of the original CNN changed by `choices` (inherited weights,
    quantized as the NAS's cost does), in program order, as `glensidec compile` makes
    them."""
    graph = bench_nas.original_graph()
    space = S.search_space(graph, bench_nas.KINDS)
    network = S.apply(graph, space.layers, bench_nas.candidate_of(choices, space.layers),
                      T.INHERIT)
    with tempfile.TemporaryDirectory(prefix="bench_nas_chain.") as folder:
        program = quantized(network, Path(folder))
    target = pipeline.choose_target((parse_array_size(bench_nas.ARRAY),))
    assert target.accel is not None
    compiled = pipeline.compile_for(
        pipeline.Typed(program.program, check_program(program.program)), target)
    lowered = pipeline.lower_for(compiled.program, compiled.types, target.config,
                                 target.accel, program.weights)
    layers = []
    for instruction in lowered.instructions:
        if not isinstance(instruction, AccelLayer):
            raise SystemExit(f"{instruction}: a host instruction between the layers")
        table = constant_array(lowered.buffer_of(instruction.commands), program.weights)
        n = instruction.n
        commands = unpack_commands(table.reshape(-1, len(FIELDS)), target.accel.cols,
                                   TIMING_ONLY, [0] * n, [0] * n, None, [1] * n)
        assert AccelModel(target.accel).run(commands).cycles == instruction.cycles
        bases = [b for b in (instruction.input_base, instruction.output_base,
                             instruction.residual_base) if b > instruction.weight_base]
        end = min(bases) if instruction.k else instruction.weight_base
        layers.append(Layer(instruction.name, commands, range(instruction.weight_base, end)))
    return target.accel, layers


def moved(command: Command, rows: int, mask: int) -> Command:
    """The command with its scratchpad rows `rows` further (modulo the scratchpad)."""
    if isinstance(command, Load | Store):
        return dataclasses.replace(command, dma=dataclasses.replace(
            command.dma, spad_row=(command.dma.spad_row + rows) & mask))
    if isinstance(command, Compute):
        return dataclasses.replace(command, w_row=(command.w_row + rows) & mask,
                                   a_row=(command.a_row + rows) & mask)
    return command


def rows_loaded(commands: list[Command]) -> set[int]:
    return {command.dma.spad_row + i for command in commands if isinstance(command, Load)
            for i in range(command.dma.rows)}


def chained(accel: AccelConfig, layers: list[Layer], parity: int, fence: bool
            ) -> list[int]:
    """Each layer's cycles in one stream of all of them (module docstring): the
    running total after each."""
    total_rows = accel.memory.scratchpad_rows
    stream: list[Command] = []
    before: set[int] = set()
    totals = []
    for index, layer in enumerate(layers):
        shift = total_rows // 8 if index % 2 == parity else 0
        commands = [moved(command, shift, total_rows - 1) for command in layer.commands]
        first = next(i for i, c in enumerate(commands) if isinstance(c, Load)
                     and (c.dma.base not in layer.weights or not fence))
        early = commands[:first]  # loads of weights, before the fence
        if fence and rows_loaded(early) & before:
            first = next(i for i, c in enumerate(commands) if isinstance(c, Load))
        if fence and index:
            commands[first] = dataclasses.replace(commands[first], fence=True)
        stream += commands
        before = rows_loaded(commands)
        totals.append(AccelModel(accel).run(stream).cycles)
    native = native_model()  # the C port prices the fence too: the compile's model
    if native is not None and native_cycles(native, accel, pack_commands(stream),
                                            10**9).cycles != totals[-1]:
        raise SystemExit("the C cycle model and AccelModel differ on a chained stream")
    return totals


def main() -> int:
    saved = json.loads((RESULTS / "nas_candidates.json").read_text())
    picks = {"original": {}, "search by cycles": saved["picks"][1]["choices"]}
    rows = {}
    for label, choices in picks.items():
        accel, layers = layers_of(choices)
        alone = [AccelModel(accel).run(layer.commands).cycles for layer in layers]
        fenced = min((chained(accel, layers, parity, True) for parity in (0, 1)),
                     key=lambda totals: totals[-1])
        unfenced = min((chained(accel, layers, parity, False) for parity in (0, 1)),
                       key=lambda totals: totals[-1])
        rows[label] = (layers, alone, fenced, unfenced)
    lines = ["# Chaining the digits CNN's layers on ws_accel (a what-if, issue 26)", "",
             *(__doc__ or "").split("\n\n")[1:3], "",
             "Made by `python bench/bench_nas_chain.py`: every figure is `AccelModel`'s "
             "(exact to the RTL; the fence is checked by sim/test_ws_accel.py), and the C "
             "port of it, which the compile uses, gives the same chained totals (the "
             "benchmark stops otherwise). The compiler does not chain layers yet: "
             "`glensidec compile` predicts the 'alone' column.", ""]
    for label, (layers, alone, fenced, unfenced) in rows.items():
        choices = ", ".join(f"{k} {v}" for k, v in picks[label].items() if v != "keep")
        lines += [f"## {label}{': ' + choices if choices else ''}", "",
                  "| layer | alone | chained (fenced) | unfenced bound |",
                  "|---|---:|---:|---:|"]
        for index, layer in enumerate(layers):
            step = [totals[index] - (totals[index - 1] if index else 0)
                    for totals in (fenced, unfenced)]
            lines.append(f"| {layer.name} | {alone[index]} | {step[0]} | {step[1]} |")
        lines += [f"| **total** | **{sum(alone)}** | **{fenced[-1]}** | **{unfenced[-1]}** |",
                  ""]
    (_, alone_o, fenced_o, unfenced_o), (_, alone_p, fenced_p, unfenced_p) = rows.values()
    lines += ["## The NAS's figure", "",
              "| machine | original | pick | fewer cycles (target >= 3x) |",
              "|---|---:|---:|---:|"]
    for what, original, pick in (("layers alone (today)", sum(alone_o), sum(alone_p)),
                                 ("layers chained, fenced", fenced_o[-1], fenced_p[-1]),
                                 ("unfenced bound", unfenced_o[-1], unfenced_p[-1])):
        lines.append(f"| {what} | {original} | {pick} | {original / pick:.2f}x |")
    lines += ["", f"Chained with the fence the pick is {fenced_o[-1] / fenced_p[-1]:.2f}x "
              f"(both networks faster: the original {sum(alone_o)} -> {fenced_o[-1]}, the pick "
              f"{sum(alone_p)} -> {fenced_p[-1]} cycles), short of 3x: after the fence each "
              "layer still waits for the previous layer's last result to be in memory, then "
              "loads it (latency and beats), fills the array and drains its own results "
              "through the pipeline and the epilogue. Only the unfenced bound passes 3x: a "
              "layer that starts on the previous layer's rows as they are made (from the "
              "scratchpad, not memory), which ws_accel cannot do."]
    (RESULTS / "nas_chain.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[-5:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
