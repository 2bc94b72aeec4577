"""Chaining two layers through the scratchpad (on-chip rows, docs/hardware.md).

`onchip_chain` takes the commands of a producer layer and of the consumer that reads its
result from main memory, and returns one command stream in which the producer's STOREs
write their rows straight into the scratchpad rows where the consumer's LOADs would have
put them (`Store.to_spad`), the consumer's LOADs of that result are gone (only its padding
rows are still loaded, without a memory access), and each consumer COMPUTE or pooling
STORE that reads those rows waits only for the rows it reads (`wait_rows`, `rows_ahead`):
the consumer starts on its input while the producer makes it. The consumer's other loads
(its weights) are queued behind the producer's commands and run while it computes.

It applies where each result row the producer stores is loaded by the consumer into
exactly one scratchpad row, whole (a band the consumer keeps resident, not im2col
windows that load a pixel once per tap); otherwise it raises `NotChainable` saying why.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from glensidec.hardware.accel import DmaCommand, dma_rows
from glensidec.hardware.commands import (
    AccelConfig,
    Command,
    Compute,
    Config,
    Load,
    Store,
)


class NotChainable(ValueError):
    """The two layers cannot be chained through the scratchpad (the reason)."""


@dataclass(frozen=True)
class _LoadedRow:
    spad_row: int
    addr: int
    length: int


def _store_rows(store: Store) -> list[tuple[int, int]]:
    """(main-memory address, length) of each row a DRAM Store writes, in order."""
    return [(row.addr, store.dma.length) for row in dma_rows(store.dma)]


def spad_rows_used(config: AccelConfig, commands: Sequence[Command]) -> set[int]:
    """Every scratchpad row the commands write or read (wrapped)."""
    mask = config.memory.scratchpad_rows - 1
    used: set[int] = set()
    residual = False
    for command in commands:
        if isinstance(command, Load):
            used.update((command.dma.spad_row + i) & mask for i in range(command.dma.rows))
        elif isinstance(command, Compute):
            used.update((command.w_row + r) & mask for r in range(config.rows))
            used.update(row & mask for row in command.activation_rows())
        elif isinstance(command, Config):
            residual = command.residual is not None
        elif isinstance(command, Store):
            if command.window:
                used.update(row & mask for i in range(command.dma.rows)
                            for row in command.window_rows(i))
            elif residual:
                used.update((command.dma.spad_row + i) & mask for i in range(command.dma.rows))
            if command.to_spad:
                used.update(row & mask for row in command.spad_rows())
    return used


def _progression(values: list[int]) -> int | None:
    """The common difference of `values` (0 for one value), None if there is none."""
    if len(values) < 2:
        return 0
    step = values[1] - values[0]
    return step if all(b - a == step for a, b in itertools.pairwise(values)) \
        else None


def _onchip_pieces(store: Store, targets: list[int]) -> list[Store]:
    """`store` as on-chip Stores writing its rows to `targets` (one per row, in order):
    one Store when the targets are lines of equal runs a constant step apart (a band's
    pixel rows: lines of a feature map's width, the padding between them), else one per
    run of targets a constant step apart. Signal on the last piece, wait on the first; a
    piece's pooled or residual rows start where its first row's do."""
    count = len(targets)
    step = _progression(targets[:2]) or 0
    run = 1
    while run < count and targets[run] - targets[run - 1] == step:
        run += 1
    lines = [targets[i:i + run] for i in range(0, count, run)]
    if count % run == 0 and all(_progression(line) == step for line in lines):
        stride2 = _progression([line[0] for line in lines])
        if stride2 is not None:
            return [_piece(store, 0, targets[0], run, step, len(lines), stride2, True, True)]
    pieces: list[tuple[int, list[int]]] = []
    for index, target in enumerate(targets):
        last = pieces[-1][1] if pieces else []
        if last and (len(last) == 1 or target - last[-1] == last[1] - last[0]):
            last.append(target)
        else:
            pieces.append((index, [target]))
    return [_piece(store, first, rows[0], len(rows), _progression(rows) or 0, 1, 0,
                   number == 0, number == len(pieces) - 1)
            for number, (first, rows) in enumerate(pieces)]


def _piece(store: Store, first: int, base: int, count1: int, stride1: int, count2: int,
           stride2: int, is_first: bool, is_last: bool) -> Store:
    step = (store.pixel_step or 1) if store.window else 1
    dma = DmaCommand(base=base, length=store.dma.length, count1=count1, stride1=stride1,
                     count2=count2, stride2=stride2, spad_row=store.dma.spad_row + first * step)
    return replace(store, dma=dma, to_spad=True, wait=store.wait and is_first,
                   signal=store.signal and is_last)


def pad_load(spad_row: int, rows: int, length: int, pad_value: int) -> Load:
    """A LOAD of `rows` padding rows (no memory access: every row is outside its bounds)."""
    return Load(DmaCommand(base=0, length=length, count1=rows, stride1=0, count2=1,
                           stride2=0, spad_row=spad_row, bounds=True, y0=0, y_step=0,
                           height=0, x0=0, x_step=0, width=0, pad_value=pad_value))


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """(first, count) of each run of consecutive rows in sorted `rows`."""
    runs: list[tuple[int, int]] = []
    for row in sorted(rows):
        if runs and runs[-1][0] + runs[-1][1] == row:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((row, 1))
    return runs


def onchip_chain(config: AccelConfig, producer: Sequence[Command],
                 consumer: Sequence[Command]) -> list[Command]:
    """The producer's and the consumer's commands as one stream, chained through the
    scratchpad (module docstring). The consumer's scratchpad rows must already be apart
    from the producer's (NotChainable otherwise); every row the producer stores must be
    read by the consumer and by no other layer (the caller's to check)."""
    made, reading = onchip_pair(config, producer, consumer)
    return made + reading


def _fresh_rows(config: AccelConfig, busy: set[int], bank: int, count: int) -> int:
    """The first of `count` consecutive scratchpad rows of `bank` none of which is busy."""
    bank_rows = config.memory.bank_rows
    start = bank * bank_rows
    while start + count <= (bank + 1) * bank_rows:
        clash = [row for row in range(start, start + count) if row in busy]
        if not clash:
            return start
        start = max(clash) + 1
    raise NotChainable(f"no {count} free scratchpad rows in bank {bank}")


def _shifted(rows: list[int], alias: dict[int, int]) -> int | None:
    """The one shift that moves every aliased row of `rows` where it now is (0: none is
    aliased), None when the rows moved apart or only some moved."""
    shifts = {alias[row] - row if row in alias else 0 for row in rows}
    if len(shifts) == 1 and (next(iter(shifts)) == 0 or all(row in alias for row in rows)):
        return next(iter(shifts))
    return None


def unaliased(config: AccelConfig, producer: Sequence[Command],
              consumer: Sequence[Command]) -> list[Command]:
    """The consumer with each load of the producer's result into scratchpad rows that an
    earlier such load filled (a double buffer: a dense layer's input row per K fold, a
    pool's band per chunk) moved to rows of its own in the same bank, and the COMPUTEs and
    STOREs that read those rows until they are loaded again reading them there: each
    stored row then has one target, as onchip_pair needs. Rows that neither layer uses
    are taken; NotChainable where none are left or a reader's rows moved apart."""
    mask = config.memory.scratchpad_rows - 1
    bank_rows = config.memory.bank_rows
    written = {row.addr for command in producer if isinstance(command, Store)
               for row in dma_rows(command.dma)}
    busy = spad_rows_used(config, producer) | spad_rows_used(config, consumer)
    filled: set[int] = set()  # rows a load of the result filled
    alias: dict[int, int] = {}  # a row -> where its latest load of the result put it
    moved: list[Command] = []
    residual = False
    for command in consumer:
        if isinstance(command, Load):
            rows = [(command.dma.spad_row + i) & mask for i in range(command.dma.rows)]
            for row in rows:
                alias.pop(row, None)
            reads_result = any(row.addr in written for row in dma_rows(command.dma)
                               if not row.padding)
            if reads_result and filled & set(rows):
                start = _fresh_rows(config, busy, rows[0] // bank_rows, len(rows))
                busy.update(range(start, start + len(rows)))
                alias.update({row: start + i for i, row in enumerate(rows)})
                command = replace(command, dma=replace(command.dma, spad_row=start))
            elif reads_result:
                filled.update(rows)
        elif isinstance(command, Compute):
            shift = _shifted([row & mask for row in command.activation_rows()], alias)
            if shift is None:
                raise NotChainable("a tile reads rows of two loads of the result")
            command = replace(command, a_row=command.a_row + shift)
        elif isinstance(command, Config):
            residual = command.residual is not None
        elif isinstance(command, Store) and (command.window or residual):
            read = [row & mask for i in range(command.dma.rows)
                    for row in (command.window_rows(i) if command.window
                                else [command.dma.spad_row + i])]
            shift = _shifted(read, alias)
            if shift is None:
                raise NotChainable("a store reads rows of two loads of the result")
            command = replace(command, dma=replace(command.dma,
                                                   spad_row=command.dma.spad_row + shift))
        moved.append(command)
    return moved


def onchip_pair(config: AccelConfig, producer: Sequence[Command],
                consumer: Sequence[Command]) -> tuple[list[Command], list[Command]]:
    """onchip_chain's stream as (the producer's commands, the consumer's; a consumer that
    loads the result into its rows again first `unaliased`)."""
    mask = config.memory.scratchpad_rows - 1
    consumer = unaliased(config, producer, consumer)
    stored: dict[int, int] = {}  # main-memory address of each stored row -> its length
    for command in producer:
        if isinstance(command, Store):
            if command.to_spad:
                raise NotChainable("the producer already writes on-chip rows")
            stored.update(_store_rows(command))
    written = {addr + i for addr, length in stored.items() for i in range(length)}
    # the consumer's loads: which scratchpad row receives each stored row
    target_of: dict[int, int] = {}
    kept: list[Command] = []
    replaced: list[tuple[int, Load, list[int]]] = []  # position, load, its padding rows
    for command in consumer:
        if not isinstance(command, Load):
            kept.append(command)
            continue
        rows = list(dma_rows(command.dma))
        reads = [row for row in rows if not row.padding]
        if not any(row.addr + i in written for row in reads
                   for i in range(command.dma.length)):
            kept.append(command)
            continue
        for row_index, row in enumerate(rows):
            if row.padding:
                continue
            if stored.get(row.addr) != command.dma.length:
                raise NotChainable(f"a consumer row at {row.addr} (length "
                                   f"{command.dma.length}) is not one stored row")
            if row.addr in target_of:
                raise NotChainable(f"the stored row at {row.addr} is loaded twice")
            target = (command.dma.spad_row + row_index) & mask
            if target in target_of.values():  # a buffer the consumer loads again
                raise NotChainable(f"the consumer loads scratchpad row {target} twice")
            target_of[row.addr] = target
        padding = [(command.dma.spad_row + i) & mask for i, row in enumerate(rows)
                   if row.padding]
        replaced.append((len(kept), command, padding))
        kept.append(command)  # replaced below
    if not replaced:
        raise NotChainable("the consumer loads nothing the producer stores")
    missing = [addr for addr in stored if addr not in target_of]
    if missing:
        raise NotChainable(f"{len(missing)} stored rows are not loaded by the consumer")
    targets = set(target_of.values())
    producer_rows = spad_rows_used(config, producer)
    if producer_rows & (targets | {row for _, _, pad in replaced for row in pad}):
        raise NotChainable("the consumer's input rows overlap rows the producer uses")
    others = spad_rows_used(config, [c for c in kept if isinstance(c, Load)
                                      and all(c is not load for _, load, _ in replaced)])
    if others & targets:
        raise NotChainable("the consumer's other loads overwrite its on-chip input rows")
    # the producer's stores, on chip; each row's production index
    chained: list[Command] = []
    made: dict[int, int] = {}  # scratchpad row -> its index among the rows made on chip
    for command in producer:
        if isinstance(command, Store):
            rows_to = [target_of[addr] for addr, _ in _store_rows(command)]
            for target in rows_to:
                made[target] = len(made)
            chained += _onchip_pieces(command, rows_to)
        else:
            chained.append(command)
    made_part, chained = chained, []
    promised = len(made)
    busy = producer_rows | targets | spad_rows_used(config, consumer)
    spare = next(row for row in range(mask, -1, -1) if row not in busy)
    # the consumer: loads of the result become loads of its padding rows (keeping their
    # tokens), readers of on-chip rows wait for the rows they read
    loads = {position: (load, padding) for position, load, padding in replaced}
    residual = False
    for position, command in enumerate(kept):
        if position in loads:
            load, padding = loads[position]
            runs = _runs(padding) or [(spare, 1)]
            for number, (first, count) in enumerate(runs):
                is_first, is_last = number == 0, number == len(runs) - 1
                pad = pad_load(first, count, load.dma.length, load.dma.pad_value)
                chained.append(replace(pad, wait=load.wait and is_first,
                                       wait_store=load.wait_store and is_first,
                                       signal=load.signal and is_last,
                                       signal_store=load.signal_store and is_last))
            continue
        if isinstance(command, Config):
            residual = command.residual is not None
        read: list[int] = []
        if isinstance(command, Compute):
            read = [row & mask for row in command.activation_rows()]
        elif isinstance(command, Store) and command.window:
            read = [row & mask for i in range(command.dma.rows)
                    for row in command.window_rows(i)]
        elif isinstance(command, Store) and residual:
            read = [(command.dma.spad_row + i) & mask for i in range(command.dma.rows)]
        needed = [made[spad_row] for spad_row in read if spad_row in made]
        if needed and isinstance(command, Compute | Store):
            command = replace(command, wait_rows=True, rows_ahead=promised - 1 - max(needed))
        chained.append(command)
    return made_part, chained


def relocated(config: AccelConfig, commands: Sequence[Command], offset: int,
              rows: int | tuple[int, ...]) -> list[Command]:
    """The commands with every main-memory address `offset` bytes further and every
    scratchpad row `rows` further (wrapped), or with a tuple, each row the shift of its
    bank further (the caller keeps each pattern inside its bank): a layer placed beside
    another."""
    mask = config.memory.scratchpad_rows - 1
    bank_rows = config.memory.bank_rows

    def moved_row(row: int) -> int:
        shift = rows if isinstance(rows, int) else rows[(row & mask) // bank_rows]
        return (row + shift) & mask

    moved: list[Command] = []
    for command in commands:
        if isinstance(command, Load | Store):
            onchip = isinstance(command, Store) and command.to_spad
            base = moved_row(command.dma.base) if onchip else command.dma.base + offset
            command = replace(command, dma=replace(
                command.dma, base=base, spad_row=moved_row(command.dma.spad_row)))
        elif isinstance(command, Compute):
            command = replace(command, w_row=moved_row(command.w_row),
                              a_row=moved_row(command.a_row))
        moved.append(command)
    return moved
