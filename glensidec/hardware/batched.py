"""A batched product as one command stream: `count` independent GEMMs of one shape
(attention's Q·Kᵀ or softmax·V of every window × head), C_g = A_g · B_g, each item its own
activations and its own weights (and its own residual rows, where the epilogue adds or,
in the per-row mode, divides by them: softmax·V), run as ONE accelerator layer.

One item's program is `conv_program`'s for the (M, K, N) GEMM (the schedule the exact
model prices fastest); the batch repeats it with item g's addresses moved into the g-th
slot of each tensor — inputs (count, M, K), weights (count, K, N) as `weight_matrix`
packs them, results (count, M, N), each contiguous — and chains the items: item g's
first LOAD waits for a token item g − 1's last COMPUTE signals (once its last activation
row entered the array), so no load of the next item overwrites a scratchpad row the
previous one still reads, while the next item's loads overlap the previous one's
stores. With residual rows (softmax·V's per-row values), which the epilogue reads from
the scratchpad as each result row enters it, item g's first LOAD also waits for the
token item g − 1's last STORE signals once its last row entered the epilogue: the next
item's loads do not overwrite residual rows still to be read (its loads then overlap
nothing of the previous item). One item's program is balanced (every token it signals,
it takes), so the chained stream is too. The stream is priced by the exact model like
any layer's and runs on ws_accel unchanged: the RTL needs nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from glensidec.hardware.accel import ConvLayer, DmaCommand
from glensidec.hardware.commands import (
    AccelConfig,
    Command,
    Compute,
    LayerProgram,
    LayerQuant,
    Load,
    Store,
    conv_program,
)


@dataclass(frozen=True)
class _Regions:
    """One item program's tensors in main memory: [base, base + size) each."""

    input_base: int
    input_size: int
    weight_base: int
    weight_size: int
    output_base: int
    output_size: int
    residual_base: int = -1  # (-1: no residual rows)
    residual_size: int = 0


def batched_program(config: AccelConfig, item: ConvLayer, quant: LayerQuant, count: int
                    ) -> LayerProgram:
    """The commands of `count` GEMMs of the shape `item` (a 1×1 layer: M = height × width
    pixels, K = channels, N = out_channels), chained as one layer (module docstring)."""
    if item.taps != 1 or item.groups != 1 or count < 1:
        raise ValueError(f"layer {item.name}: a batch is of plain GEMMs (1×1, ungrouped)")
    one = _balanced(conv_program(config, item, quant))
    m, k, n = item.gemm
    regions = _regions(one, m, k, n)
    input_base = 0
    weight_base = _aligned(count * regions.input_size)
    output_base = weight_base + _aligned(count * regions.weight_size)
    # (an item's residual rows, M × N bytes: softmax·V's per-row values, after the results)
    residual_base = output_base + _aligned(count * regions.output_size) \
        if regions.residual_base >= 0 else -1
    bases = (input_base, weight_base, output_base, residual_base)
    commands: list[Command] = []
    for g in range(count):
        moved = [_moved(command, regions, g, bases) for command in one.commands]
        if g > 0:
            first_load = next(i for i, c in enumerate(moved) if isinstance(c, Load))
            load = moved[first_load]
            assert isinstance(load, Load) and not load.wait and not load.wait_store
            moved[first_load] = replace(load, wait=True, wait_store=residual_base >= 0)
        if g < count - 1:
            last = max(i for i, c in enumerate(moved) if isinstance(c, Compute))
            compute = moved[last]
            assert isinstance(compute, Compute) and not compute.signal
            moved[last] = replace(compute, signal=True)
            if residual_base >= 0:  # (module docstring: the epilogue reads residual rows)
                last = max(i for i, c in enumerate(moved) if isinstance(c, Store))
                store = moved[last]
                assert isinstance(store, Store) and not store.signal
                moved[last] = replace(store, signal=True)
        commands += moved
    memory = _aligned(max(output_base + count * regions.output_size,
                          residual_base + count * regions.residual_size))
    return LayerProgram(commands, input_base, weight_base, output_base, memory,
                        one.m_chunk, one.folds, one.piece_folds, residual_base=residual_base)


def _balanced(program: LayerProgram) -> LayerProgram:
    """`program` without the tokens nobody takes: a program may signal more releases
    (COMPUTE → LOAD) or arrivals (LOAD → COMPUTE) than it waits for, and left over in the
    counters they would let the next item's loads (or computes) start early. Waits take
    tokens in the order they are given, so the surplus is the last ones signalled."""
    commands = list(program.commands)
    assert not any((isinstance(c, Store) and c.wait) or
                   (isinstance(c, Load) and (c.signal_store or c.fence))
                   for c in commands), "a plain GEMM's program waits for no loads' rows"
    for giver, taker, flag in ((Compute, Load, "wait"), (Load, Compute, "wait"),
                               (Store, Load, "wait_store")):
        given = [i for i, c in enumerate(commands) if isinstance(c, giver) and c.signal]
        taken = sum(1 for c in commands if isinstance(c, taker) and getattr(c, flag))
        assert taken <= len(given)
        for index in given[taken:]:
            commands[index] = replace(commands[index], signal=False)  # type: ignore[arg-type]
    return replace(program, commands=commands)


def _regions(program: LayerProgram, m: int, k: int, n: int) -> _Regions:
    """Where one item's program reads its input (M·K bytes), its weights (the packed
    K × N matrix) and writes its result (M·N)."""
    weight_size = program.output_base - program.weight_base
    assert program.input_padding == 0
    assert program.input_base + m * k <= program.weight_base
    assert program.residual_base < 0 or program.residual_base >= program.output_base + m * n
    return _Regions(program.input_base, m * k, program.weight_base, min(weight_size, k * n),
                    program.output_base, m * n, program.residual_base,
                    m * n if program.residual_base >= 0 else 0)


def _aligned(value: int, to: int = 64) -> int:
    return -(-value // to) * to


def _moved(command: Command, regions: _Regions, item: int,
           bases: tuple[int, int, int, int]) -> Command:
    """`command` of one item's program with its main-memory address moved to item
    `item`'s slot of the region it reads or writes."""
    if not isinstance(command, Load | Store):
        return command
    address = _first_read(command.dma) if isinstance(command, Load) else command.dma.base
    if address is None:  # only padding rows: nothing read
        return command
    input_base, weight_base, output_base, residual_base = bases
    if isinstance(command, Store):
        offset = output_base + item * regions.output_size - regions.output_base
    elif 0 <= regions.residual_base <= address:
        offset = residual_base + item * regions.residual_size - regions.residual_base
    elif regions.weight_base <= address < regions.output_base:
        offset = weight_base + item * regions.weight_size - regions.weight_base
    else:
        assert regions.input_base <= address < regions.weight_base
        offset = input_base + item * regions.input_size - regions.input_base
    return replace(command, dma=replace(command.dma, base=command.dma.base + offset))


def _first_read(dma: DmaCommand) -> int | None:
    """The address of the first row a load reads from memory (its base may lie outside
    the tensor when its first rows are padding: a K fold's rows past K), or None."""
    for i2 in range(dma.count2):
        if dma.bounds and not 0 <= dma.y0 + i2 * dma.y_step < dma.height:
            continue
        for i1 in range(dma.count1):
            if not dma.bounds or 0 <= dma.x0 + i1 * dma.x_step < dma.width:
                return dma.base + i2 * dma.stride2 + i1 * dma.stride1
    return None
