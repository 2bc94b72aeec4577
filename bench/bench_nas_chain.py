"""What chaining layers on ws_accel buys the digits-CNN NAS (issue 26's 3x): priced on the
exact cycle model, not yet what the compiler emits.

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
- on chip: all layers' commands as one stream, each layer's stores writing the next
  layer's input rows into the scratchpad and that layer's readers waiting for the rows
  they read (glensidec.hardware.chain.onchip_pair; where it does not apply — the first
  convolution loads its input once per tap — the first load of the result fenced), each
  layer's scratchpad rows at the first shift that keeps them apart from the two layers
  before it;
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

import numpy as np

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
from glensidec.hardware.chain import (  # noqa: E402
    NotChainable,
    onchip_pair,
    relocated,
    spad_rows_used,
)
from glensidec.hardware.commands import (  # noqa: E402
    AccelConfig,
    AccelModel,
    Command,
    Compute,
    Load,
    Store,
    run_functional,
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
    output_base: int  # where it stores its result (its own address space; input at 0)


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
        assert instruction.input_base == 0
        layers.append(Layer(instruction.name, commands, range(instruction.weight_base, end),
                            instruction.output_base))
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


#: where layer j's weights go in the one address space of an on-chip chain
WEIGHT_SPACE = 1 << 20
#: a stream that has not finished by then waits for a token nobody gives
CYCLE_LIMIT = 100_000
#: the scratchpad row shifts tried for each layer of an on-chip chain (rows moved within
#: their banks, towards the middle of each bank)
SHIFTS = tuple(range(0, 2048, 128))


def placed(accel: AccelConfig, layer: Layer, index: int, input_at: int, shift: int
           ) -> list[Command] | None:
    """The layer's commands in one address space: its input and output `input_at` on
    (its input where the layer before stored its result), its weights in a space of their
    own, its scratchpad rows `shift` further in their banks (or back where they would
    leave the bank; None where neither fits)."""
    bank_rows = accel.memory.bank_rows
    used = spad_rows_used(accel, layer.commands)
    shifts = []
    for bank in range(accel.memory.banks):
        offsets = [row % bank_rows for row in used if row // bank_rows == bank] or [0]
        if max(offsets) + shift < bank_rows:
            shifts.append(shift)
        elif min(offsets) - shift >= 0:
            shifts.append(-shift)
        else:
            return None
    moved: list[Command] = []
    for command in relocated(accel, layer.commands, 0, tuple(shifts)):
        if isinstance(command, Load | Store):
            own = isinstance(command, Load) and command.dma.base in layer.weights
            offset = WEIGHT_SPACE * (index + 1) if own else input_at
            command = dataclasses.replace(command, dma=dataclasses.replace(
                command.dma, base=command.dma.base + offset))
        moved.append(command)
    return moved


def onchip(accel: AccelConfig, layers: list[Layer]) -> tuple[list[int], list[str]]:
    """Each layer's cycles in one stream of all of them, each chained to the layer before
    through the scratchpad where onchip_chain can (else its first load of the layer before's
    result fenced), each layer's rows at the shift (SHIFTS) that keeps them apart from the
    two layers before it (the first of them that fits): the running total after each, and how each
    layer was chained. The stream's output equals the layers' run one after the other
    through memory (run_functional on the same random memory; SystemExit otherwise)."""
    stream: list[Command] = []
    reference: list[Command] = []
    totals: list[int] = []
    how: list[str] = []
    recent: list[set[int]] = []  # rows of the last two layers
    input_at = 0
    previous: list[Command] = []  # the layer before, as in the stream (stores to memory)
    for index, layer in enumerate(layers):
        best: tuple[int, list[Command], list[Command], str] | None = None
        rejected: list[str] = []
        for shift, chain in [(shift, True) for shift in SHIFTS] + [(shift, False)
                                                                  for shift in SHIFTS]:
            moved = placed(accel, layer, index, input_at, shift)
            if moved is None:
                rejected.append(f"{shift}: leaves a bank")
                continue
            commands = moved
            if set().union(*recent) & spad_rows_used(accel, commands):
                rejected.append(f"{shift}: rows of the two layers before")
                continue
            kind = "first"
            candidate = stream + commands
            form = commands
            if previous:
                try:
                    if not chain:
                        raise NotChainable("no shift fits on chip")
                    made, reading = onchip_pair(accel, previous, commands)
                    candidate = stream[:len(stream) - len(previous)] + made + reading
                    form = reading
                    kind = "on chip"
                except NotChainable as reason:
                    first = next(i for i, c in enumerate(commands) if isinstance(c, Load)
                                 and c.dma.base < WEIGHT_SPACE)
                    commands[first] = dataclasses.replace(commands[first], fence=True)
                    candidate = stream + commands
                    form = commands
                    kind = f"fenced ({reason})"
            try:
                cycles = AccelModel(accel).run(candidate, limit=CYCLE_LIMIT).cycles
            except (ValueError, RuntimeError) as conflict:  # a bank conflict, a deadlock
                rejected.append(f"{shift}: {conflict}")
                continue
            best = (cycles, candidate, commands, form, kind)
            break  # the first shift that fits (each costs a run of the whole stream)
        if best is None:
            raise SystemExit(f"{layer.name}: no shift fits ({rejected})")
        print(f"{layer.name}: {kind}, {best[0]} cycles", flush=True)
        cycles, stream, commands, previous, kind = best
        reference += commands
        recent = [*recent[-1:], spad_rows_used(accel, previous)]
        input_at += layer.output_base
        totals.append(cycles)
        how.append(kind)
    memory = np.random.default_rng(0).integers(0, 256, input_at + 4096 + WEIGHT_SPACE
                                               * (len(layers) + 1)).astype(np.uint8)
    output = slice(input_at, input_at + 4096)
    through = run_functional(accel, [dataclasses.replace(c, fence=False)
                                     if isinstance(c, Load) else c for c in reference],
                             memory)[output]
    if not (run_functional(accel, stream, memory)[output] == through).all():
        raise SystemExit("the on-chip chain's output differs from the layers' through memory")
    native = native_model()  # the C port prices on-chip rows too: the compile's model
    if native is not None and native_cycles(native, accel, pack_commands(stream),
                                            10**9).cycles != totals[-1]:
        raise SystemExit("the C cycle model and AccelModel differ on an on-chip stream")
    return totals, how


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
        on_chip, how = onchip(accel, layers)
        rows[label] = (layers, alone, fenced, unfenced, on_chip, how)
    lines = ["# Chaining the digits CNN's layers on ws_accel (a what-if, issue 26)", "",
             *(__doc__ or "").split("\n\n")[1:3], "",
             "Made by `python bench/bench_nas_chain.py`: every figure is `AccelModel`'s "
             "(exact to the RTL; the fence is checked by sim/test_ws_accel.py), and the C "
             "port of it, which the compile uses, gives the same chained and on-chip totals "
             "(the benchmark stops otherwise). The compiler does not chain layers yet: "
             "`glensidec compile` predicts the 'alone' column.", ""]
    for label, (layers, alone, fenced, unfenced, on_chip, how) in rows.items():
        choices = ", ".join(f"{k} {v}" for k, v in picks[label].items() if v != "keep")
        lines += [f"## {label}{': ' + choices if choices else ''}", "",
                  "| layer | alone | chained (fenced) | on chip | unfenced bound | on chip: "
                  "its input |",
                  "|---|---:|---:|---:|---:|---|"]
        for index, layer in enumerate(layers):
            step = [totals[index] - (totals[index - 1] if index else 0)
                    for totals in (fenced, on_chip, unfenced)]
            lines.append(f"| {layer.name} | {alone[index]} | {step[0]} | {step[1]} | "
                         f"{step[2]} | {how[index]} |")
        lines += [f"| **total** | **{sum(alone)}** | **{fenced[-1]}** | **{on_chip[-1]}** | "
                  f"**{unfenced[-1]}** | |", ""]
    (_, alone_o, fenced_o, unfenced_o, onchip_o, _), \
        (_, alone_p, fenced_p, unfenced_p, onchip_p, _) = rows.values()
    lines += ["## The NAS's figure", "",
              "| machine | original | pick | fewer cycles (target >= 3x) |",
              "|---|---:|---:|---:|"]
    for what, original, pick in (("layers alone (today)", sum(alone_o), sum(alone_p)),
                                 ("layers chained, fenced", fenced_o[-1], fenced_p[-1]),
                                 ("layers chained on chip", onchip_o[-1], onchip_p[-1]),
                                 ("unfenced bound", unfenced_o[-1], unfenced_p[-1])):
        lines.append(f"| {what} | {original} | {pick} | {original / pick:.2f}x |")
    lines += ["", f"Chained on chip (ws_accel's on-chip rows, docs/hardware.md: each layer's "
              "stores write the next layer's input rows into the scratchpad, and its readers "
              "wait only for the rows they read) the pick is "
              f"{onchip_o[-1] / onchip_p[-1]:.2f}x (the original {sum(alone_o)} -> "
              f"{onchip_o[-1]}, the pick {sum(alone_p)} -> {onchip_p[-1]} cycles); with the "
              f"fence only {fenced_o[-1] / fenced_p[-1]:.2f}x. Each on-chip stream computes "
              "what its layers do through memory (run_functional on the same random memory; "
              "the benchmark stops otherwise). The compiler does not emit on-chip rows yet: "
              "`glensidec compile`, and so the NAS's cost, predict the 'alone' column."]
    (RESULTS / "nas_chain.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[-9:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
