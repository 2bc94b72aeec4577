"""Window attention's per-head requantizations, made once per head (Swin).

Swin's attention runs per window: its qkv projection is one product over every window's
tokens (windows·tokens × features → 3·heads·width, an int32 result), and the importer's
unrolled batched products read it as one (tokens, width) block per (window, head) — Q, K
and V each brought to int8 by a `requantize-per-channel` of their own (swin_t: 1,824 host
loops of 1,568 elements, 8 M predicted cycles). Every window of one head is requantized
with the same per-column multipliers (the quantizer's scales are the head's), so the 64
loops of a head are one loop over the head's column block of all windows' rows.

`merge_window_requantizations` (before `accel_attention.split_head_projections`) finds an
int8 array call whose readers are such loops — several per block of columns, the same
arithmetic (pre, post, zero point) and the same multiplier per column, together reading
the whole block — and puts one loop per block in their place, right after the call
(writing the block's rows as an int8 (M, width) buffer); each old loop becomes a copy of
its (window, head) rows of that buffer. Then each block has one reader: the projection
splits per head (`split_head_projections`), each head's projection and its loop become
one accelerator layer (`accel_layers`), and each window's products read that layer's rows
where it wrote them (`fuse_activation_products` traces through the copies), so the
copies go too.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from glensidec.backend.accel_attention import (
    _column_block,
    _narrowed,
    _untouched_between,
    apply_edits,
)
from glensidec.backend.accel_layers import LayerBuilder, _fusable, drop_dead_code
from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Copy,
    Instruction,
    LoweredProgram,
    RequantizePerChannel,
    Users,
    constant_array,
)
from glensidec.backend.views import Axis, View, contiguous, view_array
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array


def merge_window_requantizations(lowered: LoweredProgram, weights: dict[str, Array],
                                 accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each block of columns of an int8 array call's result that several
    equal per-channel requantizations read as one requantization of the whole block,
    whose rows copies hand to the old loops' readers (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    edits: dict[int, list[Instruction]] = {}
    readers = result.readers()
    writers = result.writers()
    for index, gemm in enumerate(lowered.instructions):
        if isinstance(gemm, ArrayGemm) and writers.get(gemm.dst.buffer) == [index] and \
                result.is_whole(gemm.dst) and gemm.dst.is_row_major() and \
                _fusable(result, gemm, accel):
            edits.update(_merged(result, builder, index, readers.get(gemm.dst.buffer, []),
                                 weights))
    apply_edits(result, edits)
    return result


def _merged(lowered: LoweredProgram, builder: LayerBuilder, index: int, readers: list[int],
            weights: dict[str, Array]) -> dict[int, list[Instruction]]:
    """The edits for the call at `index`: after it, one requantization per block of
    columns that several of its readers requantize alike; those readers copies."""
    gemm = lowered.instructions[index]
    assert isinstance(gemm, ArrayGemm)
    result = gemm.dst.buffer
    blocks: dict[tuple[int, int], list[int]] = {}
    for reader in readers:
        instruction = lowered.instructions[reader]
        if not isinstance(instruction, RequantizePerChannel) or \
                instruction.members[0].buffer != result or \
                instruction.members[1].buffer == result:
            return {}  # a reader of another kind: the call keeps its readers
        block = _column_block(instruction.members[0], gemm.m, gemm.n)
        if block is None:
            return {}
        blocks.setdefault(block, []).append(reader)
    if not any(len(group) > 1 for group in blocks.values()):
        return {}
    edits: dict[int, list[Instruction]] = {}
    merged_loops: list[Instruction] = []
    for (first, stop), group in sorted(blocks.items()):
        made = _one_loop(lowered, builder, gemm, group, first, stop - first, weights)
        if made is None:
            continue
        loop, copies = made
        merged_loops.append(loop)
        edits.update({reader: [copy] for reader, copy in copies.items()})
    if merged_loops:
        edits[index] = [gemm, *merged_loops]
    return edits


def _one_loop(lowered: LoweredProgram, builder: LayerBuilder, gemm: ArrayGemm,
              group: list[int], first: int, width: int, weights: dict[str, Array]
              ) -> tuple[RequantizePerChannel, dict[int, Copy]] | None:
    """(one requantization of columns [first, first + width) of the call's M rows, each
    reader's copy of its elements of it) when the readers in `group` compute exactly that
    on the elements they read, together reading every element of the block; else None."""
    m, n = gemm.m, gemm.n
    loops = [lowered.instructions[reader] for reader in group]
    assert all(isinstance(loop, RequantizePerChannel) for loop in loops)
    arithmetic = {(loop.pre, loop.post, loop.zero_point) for loop in loops
                  if isinstance(loop, RequantizePerChannel)}
    if len(arithmetic) != 1 or len(group) < 2:
        return None
    multiplier = np.full(width, -1, np.int64)
    covered = np.zeros((m, width), bool)
    everywhere = np.arange(m * n)  # each element's own index (made once: 576 readers)
    read: list[Array] = []
    for loop in loops:
        assert isinstance(loop, RequantizePerChannel)
        accumulators, multipliers = loop.members
        source = lowered.buffer_of(multipliers)
        if source.kind != CONSTANT:
            return None
        indices = view_array(accumulators, everywhere)
        read.append(indices)
        indices = indices.reshape(-1)
        values = view_array(multipliers, constant_array(source, weights).reshape(-1)
                            ).reshape(-1)
        rows, columns = indices // n, indices % n - first
        known = multiplier[columns] >= 0
        if np.any(multiplier[columns][known] != values[known]) or np.any(values < 0):
            return None  # another multiplier for a column: not one head's loop
        multiplier[columns] = values
        covered[rows, columns] = True
    if not covered.all():
        return None  # the merged loop would requantize elements nobody reads
    pre, post, zero_point = arithmetic.pop()
    name = builder.name(f"{gemm.dst.buffer}_heads_{first}")
    lowered.buffers[name] = Buffer(name, "i8", (m, width), ACTIVATION)
    vector = builder.constant(f"{name}_multiplier", "i32", multiplier)
    loop = RequantizePerChannel(
        f"{loops[0].note} (one loop for the {len(group)} that requantize the same columns)",
        contiguous(name, (m, width)),
        (View(gemm.dst.buffer, first, ((Axis(m, n),), (Axis(width, 1),))),
         View(vector.buffer, 0, ((Axis(m, 0),), (Axis(width, 1),)))),
        pre, post, zero_point)
    copies: dict[int, Copy] = {}
    narrow = np.arange(m * width)
    for reader, old, indices in zip(group, loops, read, strict=True):
        assert isinstance(old, RequantizePerChannel)
        moved = _moved_to(old.members[0], indices, name, n, first, width, narrow)
        if moved is None:
            del lowered.buffers[name]
            del lowered.buffers[vector.buffer]
            return None
        copies[reader] = Copy(f"{old.note}: its rows of the head's loop", old.dst, moved)
    return loop, copies


def _moved_to(view: View, indices: Array, new: str, n: int, first: int, width: int,
              narrow: Array) -> View | None:
    """`view` of the M×N buffer (`indices`: the elements it reads) as the same elements
    of `new`, its columns [first, first + width) (`narrow`: that buffer's indices),
    checked element by element (`accel_attention._moved` without making the indices of
    both buffers again for each of a head's readers)."""
    narrowed = _narrowed(view, n, first, width)
    if narrowed is None or narrowed.offset < 0:
        return None
    moved = View(new, narrowed.offset, narrowed.dims)
    expected = (indices // n) * width + indices % n - first
    return moved if np.array_equal(view_array(moved, narrow), expected) else None


# -- the heads' contexts written where the output projection reads them ----------------


def write_heads_in_place(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with the layers whose results one copy rearranges into another buffer
    writing their rows there themselves, rows `output_pitch` apart (a new program).

    Swin's contexts: each (window, head) product's (tokens, width) rows, written in place
    into the heads' concatenation (`accel_attention.write_in_place`), which one copy
    interleaves into the output projection's (windows·tokens, heads·width) rows; each
    layer's rows land there as a block of columns of those rows, so it stores them there
    (the store DMA's strided rows, as a channel concatenation's layers do) and the copy
    goes. The copy must be its source's only reader, read all of it, and write a run no
    one touches between the layers and it; a layer whose elements do not land as rows of
    one pitch keeps the copy."""
    result = LoweredProgram(dict(lowered.buffers), list(lowered.instructions), lowered.output,
                            lowered.output_shape)
    edits: dict[int, list[Instruction]] = {}
    readers, writers = result.readers(), result.writers()
    for index, copy in enumerate(result.instructions):
        if isinstance(copy, Copy):
            moved = _rows_moved(result, index, copy, readers, writers)
            if moved is not None:
                edits[index] = []
                edits.update({position: [layer] for position, layer in moved.items()})
    apply_edits(result, edits)
    drop_dead_code(result)
    return result


def _rows_moved(lowered: LoweredProgram, index: int, copy: Copy,
                readers: Users, writers: Users
                ) -> dict[int, AccelLayer] | None:
    """The layers that write the copy's source, each storing its rows where the copy put
    them; None when the copy must stay."""
    source, target = lowered.buffer_of(copy.src), lowered.buffer_of(copy.dst)
    positions = writers.get(source.name, [])
    if source.kind != ACTIVATION or target.kind != ACTIVATION or source.dtype != "i8" or \
            target.dtype != "i8" or source.name == target.name or \
            readers.get(source.name) != [index] or not positions or \
            max(positions) >= index or not copy.dst.is_row_major() or \
            int(np.prod(copy.src.shape)) != source.elements:
        return None
    layers = [lowered.instructions[position] for position in positions]
    if not all(isinstance(layer, AccelLayer) and not layer.output_pitch and
               layer.layout is None and layer.dst.is_row_major() for layer in layers):
        return None
    read = view_array(copy.src, np.arange(source.elements)).reshape(-1)
    covered = np.zeros(source.elements, bool)  # (each element read once: no sort needed)
    covered[read] = True
    if not covered.all():
        return None
    landed = np.empty(source.elements, np.int64)  # each source element's place in target
    landed[read] = view_array(copy.dst, np.arange(target.elements)).reshape(-1)
    if not _untouched_between(lowered, min(positions), index, copy.dst):
        return None
    moved: dict[int, AccelLayer] = {}
    for position, layer in zip(positions, layers, strict=True):
        assert isinstance(layer, AccelLayer)
        m, n = layer.m, layer.n
        if int(np.prod(layer.dst.shape)) != m * n:
            return None
        places = landed[layer.dst.offset:layer.dst.offset + m * n].reshape(m, n)
        base = int(places[0, 0])
        pitch = int(places[1, 0]) - base if m > 1 else n
        expected = base + pitch * np.arange(m)[:, None] + np.arange(n)[None, :]
        if pitch < n or not np.array_equal(places, expected):
            return None
        moved[position] = replace(
            layer, dst=View(target.name, base, ((Axis(m, pitch),), (Axis(n, 1),))),
            output_pitch=0 if pitch == n else pitch)
    return moved
