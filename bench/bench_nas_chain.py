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
the search by cycles) compiled as `glensidec compile` does, these ways:

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
  before it, on chip or fenced, whichever ends the stream so far sooner (a pool that
  waits for its rows one by one can take longer than one that starts on all of them);
- on chip, weights resident (a what-if): on chip, each layer's weights kept in rows of
  their own (`resident_weights`), loaded once before any inference rather than by each;
  and the same with a 16-lane epilogue (a row a cycle), the commands re-timed (each of
  the two alone too, in the last table);
- unfenced (a bound no machine reaches: each layer's loads read its input at once, before
  the previous layer has written it): what layers overlapped without waiting for the
  data would give.

    python bench/bench_nas_chain.py [--rtl]   → bench/results/nas_chain.md (a minute;
    --rtl: and the on-chip streams co-simulated on ws_accel, a few minutes more)
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
from glensidec.hardware.accel import EpilogueConfig, dma_rows  # noqa: E402
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
    pad_load,
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
    encode_command,
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
                     and (not reads_weights(c, layer.weights) or not fence))
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


def reads_weights(command: Command, weights: range) -> bool:
    """Whether the command is a LOAD of the layer's weights (any row it reads from memory
    lies in `weights`; a layer's weight loads may run backwards from their last row)."""
    return isinstance(command, Load) and any(row.addr in weights for row in
                                             dma_rows(command.dma) if not row.padding)


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
            own = reads_weights(command, layer.weights)
            offset = WEIGHT_SPACE * (index + 1) if own else input_at
            command = dataclasses.replace(command, dma=dataclasses.replace(
                command.dma, base=command.dma.base + offset))
        moved.append(command)
    return moved


def resident_rows(accel: AccelConfig, layers: list[Layer]) -> list[dict[int, int]]:
    """Where each layer's resident weights start in each bank (resident_weights): the
    layers one after another, from the first row past every layer's other rows moved by
    the largest shift (SHIFTS), a spare row for each layer's token loads first."""
    bank_rows = accel.memory.bank_rows
    mask = accel.memory.scratchpad_rows - 1
    used = [row % bank_rows for layer in layers for command in layer.commands
            if not reads_weights(command, layer.weights)
            for row in ([row & mask for row in command.activation_rows()]
                        if isinstance(command, Compute) else spad_rows_used(accel, [command]))]
    cursor = {bank: bank * bank_rows + max(used) + SHIFTS[-1] + 1
              for bank in range(accel.memory.banks)}
    starts = []
    for layer in layers:
        starts.append(dict(cursor))
        cursor[0] += 1
        for command in layer.commands:
            if reads_weights(command, layer.weights):
                assert isinstance(command, Load)
                cursor[command.dma.spad_row // bank_rows] += command.dma.rows
    if any(row > (bank + 1) * bank_rows for bank, row in cursor.items()):
        raise SystemExit("the layers' weights do not fit the scratchpad beside their rows")
    return starts


def resident_weights(accel: AccelConfig, commands: list[Command], weights: range,
                     start: dict[int, int]) -> tuple[list[Command], list[Command]]:
    """A layer whose weights stay in the scratchpad (a what-if: loaded once, before any
    inference, not by each): the LOADs that put them there, each into rows of its own
    from `start` (a row per bank: where its rows were, so the array's bank conflicts are
    unchanged; the spare row of bank 0 first), and the layer's commands without them,
    each COMPUTE reading its weight rows there. A weight load that gave or took a token
    leaves a LOAD of one padding row into the spare row, with its tokens, in its place."""
    mask = accel.memory.scratchpad_rows - 1
    bank_rows = accel.memory.bank_rows
    cursor = dict(start)
    spare = cursor[0]
    cursor[0] += 1
    now: dict[int, int] = {}  # each weight row where the layer loaded it -> its resident row
    prologue: list[Command] = []
    kept: list[Command] = []
    for command in commands:
        if isinstance(command, Load) and reads_weights(command, weights):
            bank = (command.dma.spad_row & mask) // bank_rows
            at = cursor[bank]
            cursor[bank] += command.dma.rows
            now.update({(command.dma.spad_row + i) & mask: at + i
                        for i in range(command.dma.rows)})
            prologue.append(Load(dataclasses.replace(command.dma, spad_row=at)))
            if command.wait or command.signal or command.wait_store or command.signal_store:
                kept.append(dataclasses.replace(
                    pad_load(spare, 1, accel.memory.row_bytes, 0), wait=command.wait,
                    signal=command.signal, wait_store=command.wait_store,
                    signal_store=command.signal_store))
            continue
        if isinstance(command, Compute):
            command = dataclasses.replace(command, w_row=now[command.w_row & mask])
        kept.append(command)
    return prologue, kept


@dataclasses.dataclass
class Stream:
    """A stream as the RTL runs it (`--rtl`): its commands, main memory before it and
    after it (run_functional's)."""

    commands: list[Command]
    memory: np.ndarray
    expected: np.ndarray


def onchip(accel: AccelConfig, layers: list[Layer], resident: bool = False
           ) -> tuple[list[int], list[str], Stream]:
    """Each layer's cycles in one stream of all of them, each chained to the layer before
    through the scratchpad where onchip_chain can (else its first load of the layer before's
    result fenced), each layer's rows at the shift (SHIFTS) that keeps them apart from the
    two layers before it: the first shift that fits on chip and the first that fits
    fenced, whichever ends the stream so far sooner. Returns the running total after each
    layer, how each was chained, and the stream (its prologue in front, if any). The
    stream's output equals the layers' run one after the other through memory
    (run_functional on the same random memory; SystemExit otherwise). With `resident`,
    each layer's weights stay in the scratchpad (resident_weights): loaded by a prologue
    that is not timed (the functional check runs it first)."""
    starts = resident_rows(accel, layers) if resident else []
    prologue: list[Command] = []
    stream: list[Command] = []
    reference: list[Command] = []
    totals: list[int] = []
    how: list[str] = []
    recent: list[set[int]] = []  # rows of the last two layers
    input_at = 0
    previous: list[Command] = []  # the layer before, as in the stream (stores to memory)
    for index, layer in enumerate(layers):
        best: tuple[int, list[Command], list[Command], list[Command], str,
                    list[Command]] | None = None
        rejected: list[str] = []
        found: dict[bool, tuple[int, list[Command], list[Command], list[Command], str,
                                list[Command]]] = {}
        for shift, chain in [(shift, True) for shift in SHIFTS] + [(shift, False)
                                                                  for shift in SHIFTS]:
            if chain in found:
                continue
            moved = placed(accel, layer, index, input_at, shift)
            if moved is None:
                rejected.append(f"{shift}: leaves a bank")
                continue
            loads: list[Command] = []
            own_weights = range(WEIGHT_SPACE * (index + 1) + layer.weights.start,
                                WEIGHT_SPACE * (index + 1) + layer.weights.stop)
            if resident:
                loads, moved = resident_weights(accel, moved, own_weights, starts[index])
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
                        raise NotChainable(
                            "on chip it ends later" if found.get(True, ("",) * 5)[4]
                            == "on chip" else "no shift fits on chip")
                    made, reading = onchip_pair(accel, previous, commands)
                    candidate = stream[:len(stream) - len(previous)] + made + reading
                    form = reading
                    kind = "on chip"
                except NotChainable as reason:
                    first = next(i for i, c in enumerate(commands) if isinstance(c, Load)
                                 and not reads_weights(c, own_weights))
                    commands[first] = dataclasses.replace(commands[first], fence=True)
                    candidate = stream + commands
                    form = commands
                    kind = f"fenced ({reason})"
            try:
                cycles = AccelModel(accel).run(candidate, limit=CYCLE_LIMIT).cycles
            except (ValueError, RuntimeError) as conflict:  # a bank conflict, a deadlock
                rejected.append(f"{shift}: {conflict}")
                continue
            reading_memory = placed(accel, layer, index, input_at, shift)
            assert reading_memory is not None
            # the first shift that fits (each costs a run of the whole stream)
            found[chain] = (cycles, candidate, reading_memory, form, kind, loads)
        if found:  # on chip or fenced, whichever ends the stream so far sooner
            best = min(found.values(), key=lambda entry: entry[0])
        if best is None:
            raise SystemExit(f"{layer.name}: no shift fits ({rejected})")
        print(f"{layer.name}: {kind}, {best[0]} cycles", flush=True)
        cycles, stream, commands, previous, kind, loads = best
        prologue += loads
        reference += commands
        recent = [*recent[-1:], spad_rows_used(accel, previous)]
        input_at += layer.output_base
        totals.append(cycles)
        how.append(kind)
    memory = np.random.default_rng(0).integers(0, 256, input_at + 4096 + WEIGHT_SPACE
                                               * (len(layers) + 1)).astype(np.uint8)
    output = slice(input_at, input_at + 4096)
    through = run_functional(accel, reference, memory)[output]
    expected = run_functional(accel, prologue + stream, memory)
    if not (expected[output] == through).all():
        raise SystemExit("the on-chip chain's output differs from the layers' through memory")
    native = native_model()  # the C port prices on-chip rows too: the compile's model
    if native is not None and native_cycles(native, accel, pack_commands(stream),
                                            10**9).cycles != totals[-1]:
        raise SystemExit("the C cycle model and AccelModel differ on an on-chip stream")
    return totals, how, Stream(prologue + stream, memory, expected)


#: the what-if epilogue: a lane per column (a row a cycle; the default has 4 lanes, a row
#: every 4 cycles at 16 columns), the same commands re-timed
FAST_EPILOGUE_LANES = 16


def co_simulate(accel: AccelConfig, streams: dict[str, Stream]) -> list[str]:
    """Runs each stream on ws_accel (rtl/, the target's parameters; from reset, against
    its memory): a line per stream, its simulated cycles against AccelModel's; stops
    (SystemExit) where they differ or any byte of memory differs from run_functional's."""
    from glensidec.cosim import rtl_build
    from glensidec.cosim.settings import settings_env

    parameters = accel.rtl_parameters()
    runner = rtl_build.build("ws_accel", rtl_build.rtl_sources(),
                             REPO / "sim" / "sim_build" / "bench_nas_chain", parameters,
                             public_ports=True)
    with tempfile.TemporaryDirectory(prefix="bench_nas_chain.") as folder:
        paths = {}
        for number, (name, stream) in enumerate(streams.items()):
            paths[name] = str(Path(folder) / f"{number}.npz")
            np.savez(paths[name], words=np.array([str(encode_command(c, accel.cols))
                                                  for c in stream.commands]),
                     memory=stream.memory, expected=stream.expected)
        job, out = Path(folder) / "job.json", Path(folder) / "out.json"
        (Path(folder) / "run").mkdir()
        job.write_text(json.dumps({"streams": paths, "bus_bytes": accel.memory.bus_bytes,
                                   "latency": accel.memory.latency}))
        tests, failures = rtl_build.run(
            runner, "ws_accel", "cocotb_nas_chain", Path(folder) / "run",
            testcase="run_streams", extra_env=settings_env(
                parameters=parameters, job=str(job), out=str(out)))
        if tests != 1 or failures:
            raise SystemExit("the co-simulation of the streams failed")
        results = json.loads(out.read_text())
    lines = []
    for name, stream in streams.items():
        predicted = AccelModel(accel).run(stream.commands).cycles
        simulated, differ = results[name]["cycles"], results[name]["bytes_differ"]
        if simulated != predicted or differ:
            raise SystemExit(f"{name}: simulated {simulated} cycles, predicted {predicted}; "
                             f"{differ} bytes of memory differ")
        lines.append(f"- {name}: {len(stream.commands)} commands, {simulated} cycles "
                     "simulated = predicted, every byte of main memory as run_functional's")
    return lines


def main() -> int:
    saved = json.loads((RESULTS / "nas_candidates.json").read_text())
    picks = {"original": {}, "search by cycles": saved["picks"][1]["choices"]}
    rows = {}
    streams: dict[str, Stream] = {}
    for label, choices in picks.items():
        accel, layers = layers_of(choices)
        original_accel = accel
        timings = [AccelModel(accel).run(layer.commands) for layer in layers]
        fenced = min((chained(accel, layers, parity, True) for parity in (0, 1)),
                     key=lambda totals: totals[-1])
        unfenced = min((chained(accel, layers, parity, False) for parity in (0, 1)),
                       key=lambda totals: totals[-1])
        on_chip, how, streams[label] = onchip(accel, layers)
        resident, _, streams[f"{label}, weights resident"] = onchip(accel, layers,
                                                                    resident=True)
        fast = dataclasses.replace(accel, epilogue_lanes=FAST_EPILOGUE_LANES)
        resident_fast, _, _ = onchip(fast, layers, resident=True)
        starts = resident_rows(accel, layers)
        alone_resident = sum(AccelModel(accel).run(resident_weights(
            accel, layer.commands, layer.weights, start)[1]).cycles
            for layer, start in zip(layers, starts, strict=True))
        alone_fast = sum(AccelModel(fast).run(layer.commands).cycles for layer in layers)
        rows[label] = (layers, timings, fenced, unfenced, on_chip, how, resident,
                       resident_fast, [alone_resident], [alone_fast])
    lines = ["# Chaining the digits CNN's layers on ws_accel (a what-if, issue 26)", "",
             *(__doc__ or "").split("\n\n")[1:3], "",
             "Made by `python bench/bench_nas_chain.py`: every figure is `AccelModel`'s "
             "(exact to the RTL; the fence is checked by sim/test_ws_accel.py), and the C "
             "port of it, which the compile uses, gives the same chained and on-chip totals "
             "(the benchmark stops otherwise). The compiler does not chain layers yet: "
             "`glensidec compile` predicts the 'alone' column. 'array rows' and 'DMA busy' are "
             "the layer's alone: cycles a row entered the array and cycles the load DMA "
             "issued a bus beat.", ""]
    for label, (layers, timings, fenced, unfenced, on_chip, how, resident,
                resident_fast, _, _) in rows.items():
        choices = ", ".join(f"{k} {v}" for k, v in picks[label].items() if v != "keep")
        lines += [f"## {label}{': ' + choices if choices else ''}", "",
                  "| layer | alone | array rows | DMA busy | chained (fenced) | on chip | "
                  "on chip, weights resident | + a row a cycle through the epilogue | "
                  "unfenced bound | on chip: its input |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for index, layer in enumerate(layers):
            step = [totals[index] - (totals[index - 1] if index else 0)
                    for totals in (fenced, on_chip, resident, resident_fast, unfenced)]
            timing = timings[index]
            lines.append(f"| {layer.name} | {timing.cycles} | {timing.compute_rows} | "
                         f"{timing.load_busy_cycles} | "
                         + " | ".join(str(value) for value in step) + f" | {how[index]} |")
        lines += [f"| **total** | **{sum(t.cycles for t in timings)}** | "
                  f"{sum(t.compute_rows for t in timings)} | "
                  f"{sum(t.load_busy_cycles for t in timings)} | "
                  + " | ".join(f"**{totals[-1]}**" for totals in
                               (fenced, on_chip, resident, resident_fast, unfenced))
                  + " | |", ""]
    if "--rtl" in sys.argv[1:]:
        lines += ["## On ws_accel", "",
                  "`python bench/bench_nas_chain.py --rtl` runs the on-chip streams (each with "
                  "its resident weights' prologue in front where it has one: that prologue "
                  "is timed here, not in the tables) on the RTL, built with the default "
                  "target's parameters (bench/cocotb_nas_chain.py):", "",
                  *co_simulate(original_accel, streams), ""]
    original, pick = rows.values()

    def total(row: tuple, column: int) -> int:  # type: ignore[type-arg]
        return sum(t.cycles for t in row[1]) if column == 1 else row[column][-1]

    lines += ["## The NAS's figure", "",
              "| machine | original | pick | fewer cycles (target >= 3x) |",
              "|---|---:|---:|---:|"]
    for what, column in (("layers alone (today)", 1),
                         ("layers alone, weights resident in the scratchpad", 8),
                         (f"layers alone, {FAST_EPILOGUE_LANES} epilogue lanes", 9),
                         ("layers chained, fenced", 2),
                         ("layers chained on chip", 4),
                         ("on chip, weights resident in the scratchpad", 6),
                         (f"on chip, weights resident, {FAST_EPILOGUE_LANES} epilogue lanes",
                          7),
                         ("unfenced bound", 3)):
        lines.append(f"| {what} | {total(original, column)} | {total(pick, column)} | "
                     f"{total(original, column) / total(pick, column):.2f}x |")
    lines += ["", f"Chained on chip (ws_accel's on-chip rows, docs/hardware.md: each layer's "
              "stores write the next layer's input rows into the scratchpad, and its readers "
              "wait only for the rows they read) the pick is "
              f"{total(original, 4) / total(pick, 4):.2f}x (the original {total(original, 1)} "
              f"-> {total(original, 4)}, the pick {total(pick, 1)} -> {total(pick, 4)} "
              f"cycles); with the fence only {total(original, 2) / total(pick, 2):.2f}x. "
              "Each on-chip stream computes what its layers do through memory (run_functional "
              "on the same random memory; the benchmark stops otherwise). The compiler does "
              "not emit on-chip rows yet: `glensidec compile`, and so the NAS's cost, predict "
              "the 'alone' column.", "",
              "The pick is not array-bound as the original is (array rows "
              f"{sum(t.compute_rows for t in pick[1])} of its {total(pick, 1)} cycles, the "
              f"original {sum(t.compute_rows for t in original[1])} of {total(original, 1)}): "
              "its DMA spends most of its beats on weights, and each layer's start and drain "
              "(first weights and input over the bus; the array's pipeline, the epilogue at "
              "a row every 4 cycles, the store) are a larger share. Two what-ifs beyond the "
              "chain, each on the same commands: weights resident in the scratchpad "
              "(`resident_weights`: loaded once, before any inference, by a prologue the "
              "functional check runs and the timing does not; the layers' weights fit 256 KiB "
              "beside their rows) gives "
              f"{total(original, 6) / total(pick, 6):.2f}x; with it an epilogue of "
              f"{FAST_EPILOGUE_LANES} lanes (a row a cycle; area: docs/hardware.md's epilogue "
              "table) "
              f"{total(original, 7) / total(pick, 7):.2f}x. Neither is in the RTL or the "
              "compiler."]
    (RESULTS / "nas_chain.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[-16:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
