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

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from glensidec.backend.accel_attention import (
    _column_block,
    _narrowed,
    _untouched_between,
    apply_edits,
)
from glensidec.backend.accel_layers import (
    LayerBuilder,
    _fusable,
    _known,
    check_fits,
    clip_range,
    drop_dead_code,
    evaluate_buffer,
    scalar_value,
)
from glensidec.backend.accel_residual import FormValue, Linear, residual_form, two_int8_form
from glensidec.backend.accel_softmax_exp import _relaid
from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Copy,
    Fill,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    RequantizePerChannel,
    Step,
    Users,
    constant_array,
)
from glensidec.backend.views import Axis, View, contiguous, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig, ResidualConfig
from glensidec.hardware.commands import AccelConfig, LayerQuant, depthwise_weight_matrix
from glensidec.lang.dtypes import Array
from glensidec.lang.terms import ComputeOp


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


# -- the relative-position bias added to the scores, on the accelerator ------------------

#: The bias of columns no score lands in (the max-pool's padding between rows): low
#: enough that the requantize saturates to −128, as the padding's fill writes it.
GAP_BIAS = -(1 << 30)


@dataclass(frozen=True)
class _BiasAdd:
    """requantize(c·cast(s) + b) of int8 scores s and a constant i32 b, as rows (one
    per window: the loop's outermost axis) of `n` columns in both buffers."""

    scores: str  # s's buffer
    dst: str
    score_bases: Array  # (rows,): where each row starts in s's buffer
    dst_bases: Array  # (rows,): in dst's buffer
    columns: Array  # (elements per row,): each element's column, the same in both buffers
    bias: Array  # (rows, elements per row): b
    factor: int  # c
    n: int
    multiplier: int
    epilogue: EpilogueConfig


def fuse_position_biases(lowered: LoweredProgram, weights: dict[str, Array],
                         accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each host loop requantize(c·cast(s) + b) of an int8 s and a constant
    i32 b (Swin's relative-position bias, and the shifted windows' mask, added to the
    scores at a finer scale) as depthwise 1×1 layers, one per run of windows with the same
    bias: a window's scores are one row, so b is a per-column bias, and c·s, wider than an
    int8 weight, is s on the array plus (c − 1)·s as the epilogue's early residual add
    (a new program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        if isinstance(result.instructions[index], Fused):
            found = _bias_add(result, index, weights)
            if found is not None:
                index += _bias_layers(result, index, found, accel)
        index += 1
    drop_dead_code(result)
    return result


def _bias_add(lowered: LoweredProgram, index: int, weights: dict[str, Array]
              ) -> _BiasAdd | None:
    """The loop at `index` as requantize(c·cast(s) + b) in rows of windows, the scores'
    buffer re-laid as the result's rows when they are (the row maximum's padding); else
    None."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    if [step.name for step in fused.steps] != ["cast", "elementwise-mul", "elementwise-add",
                                               "requantize"] or \
            lowered.buffer_of(fused.dst).dtype != "i8" or len(fused.dst.shape) < 2:
        return None
    cast, scale, add, requantize = fused.steps
    if cast.operands[0] < 0 or sorted(scale.operands)[0] != -1 or \
            sorted(add.operands)[0] != -2 or requantize.operands != (-3,) or \
            isinstance(requantize.op, str):
        return None
    scores = fused.leaves[cast.operands[0]]
    factor_leaf = fused.leaves[max(scale.operands)]
    bias_leaf = fused.leaves[max(add.operands)]
    if lowered.buffer_of(scores).dtype != "i8" or \
            lowered.buffer_of(scores).kind != ACTIVATION:
        return None
    factor = scalar_value(lowered, factor_leaf, weights, index)
    flat = evaluate_buffer(lowered, bias_leaf.buffer, weights, index)
    if factor is None or flat is None or not 1 < factor < 1 << 14:
        return None
    multiplier, pre, post, zero_point = (int(v) for v in requantize.op.params)
    rows = fused.dst.shape[0]
    bias = view_array(bias_leaf, flat).reshape(rows, -1).astype(np.int64)
    layout = _row_layout(lowered, fused.dst, scores, rows)
    if layout is None:
        relaid = _relay_scores(lowered, fused.dst, scores)
        if not relaid:
            return None
        fused = lowered.instructions[index]
        assert isinstance(fused, Fused)
        scores = fused.leaves[cast.operands[0]]
        layout = _row_layout(lowered, fused.dst, scores, rows)
        if layout is None:
            return None
    score_bases, dst_bases, columns, n = layout
    if not _gaps_are_padding(lowered, index, fused.dst.buffer, columns, n):
        return None
    return _BiasAdd(scores.buffer, fused.dst.buffer, score_bases, dst_bases, columns, bias,
                    factor, n, multiplier, EpilogueConfig(pre, post, zero_point))


def _row_layout(lowered: LoweredProgram, dst: View, scores: View, rows: int
                ) -> tuple[Array, Array, Array, int] | None:
    """(where each row starts in the scores, in dst, each element's column, the row's
    columns n) when every row of both views reads the same columns of a row n wide, rows
    n apart; else None."""
    read = view_array(scores, np.arange(lowered.buffer_of(scores).elements)).reshape(rows, -1)
    written = view_array(dst, np.arange(lowered.buffer_of(dst).elements)).reshape(rows, -1)
    score_bases, dst_bases = read.min(axis=1), written.min(axis=1)
    columns = written[0] - dst_bases[0]
    if not (np.array_equal(read - score_bases[:, None], written - dst_bases[:, None]) and
            np.array_equal(written - dst_bases[:, None],
                           np.broadcast_to(columns, written.shape))):
        return None
    n = int(columns.max()) + 1
    if rows > 1:
        pitch = int(dst_bases[1] - dst_bases[0])
        if pitch < n or \
                not np.array_equal(dst_bases, dst_bases[0] + pitch * np.arange(rows)) or \
                not np.array_equal(score_bases, score_bases[0] + pitch * np.arange(rows)):
            return None
        n = pitch  # (the gaps after a row's last score: the padding's too)
    if len(np.unique(columns)) != columns.size:
        return None
    return score_bases, dst_bases, columns, n


def _relay_scores(lowered: LoweredProgram, dst: View, scores: View) -> bool:
    """Re-lay the scores' buffer as the result's rows are (`fuse_softmax_maxima`'s padded
    rows, the layers that write the scores writing them that far apart): whether it did."""
    target = lowered.buffer_of(dst)
    source = lowered.buffer_of(scores)
    keys, pitch = source.shape[-1], target.shape[-1]
    if pitch <= keys or source.elements % keys or \
            target.elements != source.elements // keys * pitch:
        return False
    name = LayerBuilder(lowered).name(f"{source.name}_blocks")
    moved = _relaid(lowered, source.name, keys, pitch, name)
    if moved is None:
        return False
    lowered.buffers[name] = Buffer(name, "i8", (source.elements // keys, pitch), ACTIVATION)
    for position, replacement in moved.items():
        assert len(replacement) == 1
        lowered.instructions[position] = replacement[0]
    return True


def _gaps_are_padding(lowered: LoweredProgram, index: int, dst: str, columns: Array,
                      n: int) -> bool:
    """Whether the columns of dst's rows that the loop does not write may be written with
    −128: none, or only fills of the minimum write that buffer besides the loop."""
    if columns.size == n:
        return True
    others = [lowered.instructions[position] for position in lowered.writers().get(dst, [])
              if position != index]
    return all(isinstance(fill, Fill) and fill.minimum for fill in others)


def _bias_layers(lowered: LoweredProgram, index: int, found: _BiasAdd,
                 accel: AccelConfig) -> int:
    """The loop at `index` as one layer per run of rows with the same bias: the number of
    instructions added; 0 (nothing changed) when a layer does not fit."""
    rows = found.bias.shape[0]
    n = found.n
    starts = [0] + [row for row in range(1, rows)
                    if not np.array_equal(found.bias[row], found.bias[row - 1])]
    runs = list(zip(starts, [*starts[1:], rows], strict=True))
    added = ResidualConfig(multiplier=found.factor - 1, early=True)
    layers: list[Instruction] = []
    builder = LayerBuilder(lowered)
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    diagonal = np.zeros(n, np.int64)
    diagonal[found.columns] = 1  # s·1 on the array (the gaps: 0)
    packed_of: dict[int, Array] = {}
    for start, stop in runs:
        bias = np.full(n, GAP_BIAS, np.int64)
        bias[found.columns] = found.bias[start]
        m = stop - start
        name = found.dst
        geometry = ConvLayer(name, m, 1, n, n, groups=n)
        if not _depthwise_fits(accel, m, n, found.epilogue, added):
            return 0  # the host adds the bias
        rows_of = ((Axis(m, n),), (Axis(n, 1),))
        scores = View(found.scores, int(found.score_bases[start]), rows_of)
        if m not in packed_of:  # (the runs' weights differ only in their rows)
            packed_of[m] = depthwise_weight_matrix(geometry, accel.cols, diagonal)
        packed = packed_of[m]
        layers.append(AccelLayer(
            f"{fused.note}: windows {start}..{stop - 1}, the bias per column, c·s as s "
            f"plus the early residual {found.factor - 1}·s",
            View(found.dst, int(found.dst_bases[start]), rows_of), name=name,
            a=scores, b=builder.constant(f"{name}_weights", "i8", packed),
            bias=builder.constant(f"{name}_bias", "i32", bias),
            multiplier=builder.constant(f"{name}_multiplier", "i32",
                                        np.full(n, found.multiplier, np.int64)),
            commands=builder.commands_placeholder(name), m=m, k=packed.shape[0], n=n,
            pre=found.epilogue.pre, post=found.epilogue.post,
            zero_point=found.epilogue.zero_point, low=found.epilogue.low,
            high=found.epilogue.high, image=(m, 1, n), kernel=1, stride=1, groups=n,
            group_cols=accel.cols, residual=scores, residual_add=added))
    lowered.instructions[index:index + 1] = layers
    return len(layers) - 1


@lru_cache(maxsize=256)
def _depthwise_fits(accel: AccelConfig, m: int, n: int, epilogue: EpilogueConfig,
                    residual: ResidualConfig) -> bool:
    """Whether a depthwise 1×1 layer of m rows of n columns with this epilogue and early
    residual add fits (`check_fits` reads no bias or multiplier): asked once per shape, not
    once per run of windows."""
    quant = LayerQuant(epilogue, (0,) * n, (1,) * n, residual=residual)
    try:
        check_fits(accel, ConvLayer("", m, 1, n, n, groups=n), quant)
    except GlensideError:
        return False
    return True


# -- a sum that several requantizes read in parts, requantized in its loop ----------------


def requantize_in_loops(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with each host loop whose i32 result only equal requantizes to int8 read,
    two or more (each a part of it, through a view: the slices of Swin's patch merging
    after a block's last residual add), ending in that requantize itself, its int8
    result a buffer of its own that each reader copies its part of (a new program). The
    loop is then a quantized residual add like any other, which `accel_residual` gives to
    the layer before it; the copies are what the readers' views move."""
    result = lowered.copy()
    readers, writers = result.readers(), result.writers()
    builder = LayerBuilder(result)
    for index, loop in enumerate(lowered.instructions):
        if not isinstance(loop, Fused) or result.buffer_of(loop.dst).dtype != "i32" or \
                writers.get(loop.dst.buffer) != [index] or not result.is_whole(loop.dst):
            continue
        users = readers.get(loop.dst.buffer, [])
        maps = [result.instructions[position] for position in users]
        first = maps[0] if maps else None
        # (one reader of all of it, through a permutation: `accel_residual` writes the
        # loop in the reader's order instead, with no copy after it)
        if not isinstance(first, Map) or len(users) < 2 or min(users) < index or not all(
                isinstance(reader, Map) and reader.op == first.op and
                reader.op.name == "requantize" and
                result.buffer_of(reader.dst).dtype == "i8" for reader in maps):
            continue
        source = result.buffer_of(loop.dst)
        name = builder.name(f"{source.name}_requantized")
        result.buffers[name] = Buffer(name, "i8", source.shape, ACTIVATION)
        result.instructions[index] = replace(
            loop, dst=View(name, loop.dst.offset, loop.dst.dims),
            steps=(*loop.steps, Step(first.op, (-len(loop.steps),), "i8")))
        for position, reader in zip(users, maps, strict=True):
            assert isinstance(reader, Map)
            result.instructions[position] = Copy(
                f"{reader.note}: its part of the loop's requantized result", reader.dst,
                View(name, reader.src.offset, reader.src.dims))
    drop_dead_code(result)
    return result


# -- the attention's output projection in window order, its residual add in image order --


@dataclass(frozen=True)
class _WindowEpilogue:
    """A loop's requantize-per-channel (after an optional bias add) of an array call's
    i32 result G, which it reads a row at a time in another row order."""

    gemm_index: int
    leaf: int  # the loop's leaf reading G
    steps: frozenset[int]  # the loop's steps that compute it (the requantize last)
    requantize: int  # that step
    bias: Array  # (N,) per column
    multiplier: Array  # (N,)
    rows: Array  # (M,): the loop's row j reads G's row rows[j]


def fuse_window_residuals(lowered: LoweredProgram, weights: dict[str, Array],
                          accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each host loop clip(requantize(a·y + b·r + c)) whose y is
    requantize-per-channel(G + bias) of an array call's result G read in another row
    order (Swin's output projection, its rows in window order, read through the window
    reverse: the residual add is in the map's order) done by the call's layer: its
    epilogue requantizes, adds r's rows, read in the layer's row order, and its stores put
    each row where the loop wrote it (`AccelLayer.row_order`: the DMA's 2-D row patterns,
    a window's 7 runs of 7 rows one store), a new program."""
    result = lowered.copy()
    _merge_row_requantizations(result, weights, accel)
    drop_dead_code(result)
    index = 0
    while index < len(result.instructions):
        instruction = result.instructions[index]
        if isinstance(instruction, Fused) and (
                _window_residual(result, index, weights, accel) or
                _traced_residual(result, index, weights, accel)):
            continue  # the loop is gone: look again from where it was
        index += 1
    drop_dead_code(result)
    return result


def _window_residual(lowered: LoweredProgram, index: int, weights: dict[str, Array],
                     accel: AccelConfig) -> bool:
    """Move the loop at `index` into its array call's layer: whether it did."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    destination = lowered.buffer_of(fused.dst)
    if destination.dtype != "i8" or not lowered.is_whole(fused.dst) or \
            lowered.writers().get(fused.dst.buffer) != [index] or len(fused.dst.shape) < 2:
        return False
    found = _window_epilogue(lowered, index, weights)
    if found is None:
        return False
    gemm = lowered.instructions[found.gemm_index]
    assert isinstance(gemm, ArrayGemm)
    m, n = gemm.m, gemm.n
    # the loop with y a leaf of its own (an int8 stand-in for the layer's rows)
    stand_in = len(fused.leaves)
    rest = _without_steps(fused, found.steps, found.requantize, stand_in)
    if rest is None:
        return False
    values: list[FormValue] = []
    runtime: list[int] = []
    leaves = [*fused.leaves, fused.leaves[found.leaf]]
    used = {operand for step in rest.steps for operand in step.operands if operand >= 0}
    for leaf, view in enumerate(leaves):
        scalar = None if leaf == stand_in or leaf not in used else \
            scalar_value(lowered, view, weights, index)
        if scalar is not None:
            values.append(scalar)
        elif leaf in used:
            values.append(Linear(((leaf, 1),), 0))
            runtime.append(leaf)
        else:
            values.append(0)  # (no step reads it any more: G, the bias, the multiplier)
    others = [leaf for leaf in runtime if leaf != stand_in]
    if len(runtime) != 2 or len(others) != 1 or \
            lowered.buffer_of(leaves[others[0]]).dtype != "i8":
        return False
    form = residual_form(rest, values)
    if form is None or form.product or \
            {leaf for leaf, _ in form.linear.coefficients} != set(runtime):
        return False
    residual_view = leaves[others[0]]
    residual_rows = _rows_read(lowered, residual_view, m, n)
    if residual_rows is None or any(
            writer >= found.gemm_index
            for writer in lowered.writers().get(residual_view.buffer, [])):
        return False
    b_values = _known(lowered, gemm.b, weights, found.gemm_index, (gemm.k, n), widen=False)
    if b_values is None:
        return False
    coefficients = dict(form.linear.coefficients)
    added = ResidualConfig(
        self_multiplier=coefficients[stand_in], multiplier=coefficients[others[0]],
        offset=form.linear.constant, requantize_multiplier=form.multiplier, pre=form.pre,
        post=form.post, zero_point=form.zero_point, low=form.low, high=form.high)
    requantize = fused.steps[found.requantize]
    pre, post, zero_point = (int(value) for value in requantize.params)
    epilogue = EpilogueConfig(pre, post, zero_point)
    quant = LayerQuant(epilogue, tuple(int(v) for v in found.bias),
                       tuple(int(v) for v in found.multiplier), residual=added)
    name = fused.dst.buffer
    try:
        check_fits(accel, ConvLayer(name, height=m, width=1, channels=gemm.k, out_channels=n),
                   quant)
    except GlensideError:
        return False
    order = np.empty(m, np.int64)
    order[found.rows] = np.arange(m)  # the layer's row rows[j] is stored at row j
    read_from = np.empty(m, np.int64)
    read_from[found.rows] = residual_rows
    builder = LayerBuilder(lowered)
    layer = AccelLayer(
        f"{fused.note}: the products in window order, stored in the loop's order",
        contiguous(name, (m, n)), name=name,
        a=contiguous(gemm.a.buffer, (m, gemm.k), gemm.a.offset),
        b=builder.constant(f"{name}_weights", "i8", b_values),
        bias=builder.constant(f"{name}_bias", "i32", found.bias),
        multiplier=builder.constant(f"{name}_multiplier", "i32", found.multiplier),
        commands=builder.commands_placeholder(name), m=m, k=gemm.k, n=n, pre=pre,
        post=post, zero_point=zero_point, low=-128, high=127,
        residual=contiguous(residual_view.buffer, (m, n)), residual_add=added,
        row_order=_order_or_none(order),
        residual_order=_order_or_none(read_from))
    del lowered.instructions[index]
    lowered.instructions[found.gemm_index] = layer
    return True


def _rows_read(lowered: LoweredProgram, view: View, m: int, n: int) -> Array | None:
    """(M,): the row of `view`'s (M, N) buffer that each of its M rows of N reads whole, in
    order; None when they are not whole rows of such a buffer."""
    buffer = lowered.buffer_of(view)
    if buffer.elements != m * n or view.shape[-1] != n:
        return None
    positions = view_array(view, np.arange(buffer.elements)).reshape(-1, n)
    if positions.shape[0] != m or np.any(positions[:, 0] % n) or \
            not np.array_equal(positions - positions[:, :1],
                               np.broadcast_to(np.arange(n), positions.shape)):
        return None
    rows: Array = positions[:, 0] // n
    return rows


def _window_epilogue(lowered: LoweredProgram, index: int, weights: dict[str, Array]
                     ) -> _WindowEpilogue | None:
    """The loop's requantization of an array call's result read a row at a time, rows
    permuted, which it alone reads; else None."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    for leaf, view in enumerate(fused.leaves):
        buffer = lowered.buffer_of(view)
        writers = lowered.writers().get(view.buffer, [])
        if buffer.dtype != "i32" or buffer.kind != ACTIVATION or len(writers) != 1 or \
                lowered.readers().get(view.buffer) != [index]:
            continue
        gemm = lowered.instructions[writers[0]]
        if not isinstance(gemm, ArrayGemm) or not lowered.is_whole(gemm.dst) or \
                gemm.m * gemm.n != buffer.elements:
            continue
        rows = _rows_read(lowered, view, gemm.m, gemm.n)
        # (rows in their own order: the epilogue passes take the loop as they always did)
        if rows is None or np.array_equal(rows, np.arange(gemm.m)) or \
                not np.array_equal(np.sort(rows), np.arange(gemm.m)):
            continue
        found = _requantized_leaf(lowered, fused, leaf, index, weights, gemm.n)
        if found is not None:
            steps, requantize, bias, multiplier = found
            return _WindowEpilogue(writers[0], leaf, steps, requantize, bias, multiplier, rows)
    return None


def _requantized_leaf(lowered: LoweredProgram, fused: Fused, leaf: int, index: int,
                      weights: dict[str, Array], n: int
                      ) -> tuple[frozenset[int], int, Array, Array] | None:
    """(steps, the requantize step, bias, multiplier) when the loop reads leaf `leaf` only
    as requantize-per-channel(leaf + bias) or requantize-per-channel(leaf), constant
    per-column bias and multiplier, read by nothing else; else None."""
    users = [position for position, step in enumerate(fused.steps) if leaf in step.operands]
    if len(users) != 1:
        return None
    first = users[0]
    step = fused.steps[first]
    bias = np.zeros(n, np.int64)
    steps = {first}
    if step.name == "elementwise-add" and step.dtype == "i32":
        other = [operand for operand in step.operands if operand != leaf]
        values = _per_column(lowered, fused, other, index, weights, n)
        if values is None:
            return None
        bias = values
        later = [position for position, later_step in enumerate(fused.steps)
                 if -(first + 1) in later_step.operands]
        if len(later) != 1:
            return None
        step, first = fused.steps[later[0]], later[0]
        steps.add(first)
        reads = -(min(steps) + 1)
    else:
        reads = leaf
    if step.name != "requantize-per-channel" or step.operands[0] != reads:
        return None
    multiplier = _per_column(lowered, fused, list(step.operands[1:]), index, weights, n)
    if multiplier is None or np.any(multiplier < 0):
        return None
    return frozenset(steps), first, bias, multiplier


def _per_column(lowered: LoweredProgram, fused: Fused, operands: list[int], index: int,
                weights: dict[str, Array], n: int) -> Array | None:
    """The values of the one leaf in `operands` when it is a compile-time constant equal
    in every row of the loop: (N,); else None."""
    if len(operands) != 1 or operands[0] < 0:
        return None
    view = fused.leaves[operands[0]]
    flat = evaluate_buffer(lowered, view.buffer, weights, index)
    if flat is None or view.shape[-1] != n:
        return None
    values = view_array(view, flat).reshape(-1, n).astype(np.int64)
    if not np.all(values == values[:1]):
        return None
    column: Array = values[0]
    return column


def _without_steps(fused: Fused, removed: frozenset[int], replaced: int, leaf: int
                   ) -> Fused | None:
    """`fused` without the steps `removed`, the result of step `replaced` (one of them)
    read from a new last leaf (index `leaf`) instead; None when a kept step reads another
    removed step."""
    kept = [position for position in range(len(fused.steps)) if position not in removed]
    new_index = {old: new for new, old in enumerate(kept)}
    steps = []
    for position in kept:
        operands = []
        for operand in fused.steps[position].operands:
            if operand >= 0:
                operands.append(operand)
            elif -operand - 1 == replaced:
                operands.append(leaf)
            elif -operand - 1 in removed:
                return None
            else:
                operands.append(-(new_index[-operand - 1] + 1))
        steps.append(replace(fused.steps[position], operands=tuple(operands)))
    return replace(fused, leaves=(*fused.leaves, fused.leaves[0]), steps=tuple(steps))


def _merge_row_requantizations(lowered: LoweredProgram, weights: dict[str, Array],
                               accel: AccelConfig) -> None:
    """Each array call whose i32 result only loops requantizing it alike read — directly
    or through i32 copies (the shifted windows' reverse: the cyclic shift's slices of the
    projection's rows, each requantized) — as one layer that requantizes all its rows in
    its epilogue, the loops and copies copies of its int8 rows (in place)."""
    index = 0
    while index < len(lowered.instructions):
        gemm = lowered.instructions[index]
        if isinstance(gemm, ArrayGemm) and lowered.is_whole(gemm.dst) and \
                lowered.buffer_of(gemm.dst).kind == ACTIVATION and \
                _fusable(lowered, gemm, accel):
            _merge_call(lowered, index, weights, accel)
        index += 1


def _merge_call(lowered: LoweredProgram, index: int, weights: dict[str, Array],
                accel: AccelConfig) -> None:
    gemm = lowered.instructions[index]
    assert isinstance(gemm, ArrayGemm)
    m, n = gemm.m, gemm.n
    readers = lowered.readers()
    copies: list[int] = []
    loops: list[tuple[int, int]] = []  # (position, the leaf reading G or a copy of it)
    for reader in readers.get(gemm.dst.buffer, []):
        instruction = lowered.instructions[reader]
        if isinstance(instruction, Copy) and \
                lowered.buffer_of(instruction.dst).kind == ACTIVATION and \
                lowered.writers().get(instruction.dst.buffer) == [reader]:
            copies.append(reader)
            sources = [instruction.dst.buffer]
            for user in readers.get(instruction.dst.buffer, []):
                found = _loop_leaf(lowered, user, sources)
                if found is None:
                    return
                loops.append(found)
        else:
            found = _loop_leaf(lowered, reader, [gemm.dst.buffer])
            if found is None:
                return
            loops.append(found)
    if len(loops) < 2:
        return  # (one loop: fuse_window_residuals or accel_layers take it)
    settings = set()
    for position, leaf in loops:
        loop = lowered.instructions[position]
        if isinstance(loop, RequantizePerChannel):
            multiplier = _per_column(lowered, Fused("", loop.dst, loop.members, ()), [1],
                                     position, weights, n)
            if multiplier is None or np.any(multiplier < 0):
                return
            settings.add(((0,) * n, tuple(int(v) for v in multiplier), loop.pre, loop.post,
                          loop.zero_point, -128, 127))
            continue
        assert isinstance(loop, Fused)
        requantized = _requantized_leaf(lowered, loop, leaf, position, weights, n)
        if requantized is None:
            return
        steps, requantize, bias, multiplier = requantized
        low, high = -128, 127
        for later in range(requantize + 1, len(loop.steps)):
            step = loop.steps[later]
            if not (isinstance(step.op, ComputeOp) and step.op.name in ("relu", "clip") and
                    step.operands == (-later,)):
                return
            low, high = max(low, clip_range(step.op)[0]), min(high, clip_range(step.op)[1])
        if len(steps) + len(loop.steps) - requantize - 1 != len(loop.steps):
            return  # a step besides the requantize, its bias add and clips
        pre, post, zero_point = (int(value) for value in loop.steps[requantize].params)
        settings.add((tuple(int(v) for v in bias), tuple(int(v) for v in multiplier), pre,
                      post, zero_point, low, high))
    if len(settings) != 1:
        return
    bias_values, multiplier_values, pre, post, zero_point, low, high = settings.pop()
    b_values = _known(lowered, gemm.b, weights, index, (gemm.k, n), widen=False)
    if b_values is None:
        return
    quant = LayerQuant(EpilogueConfig(pre, post, zero_point, low, high), bias_values,
                       multiplier_values)
    builder = LayerBuilder(lowered)
    name = builder.name(f"{gemm.dst.buffer}_requantized")
    try:
        check_fits(accel, ConvLayer(name, height=m, width=1, channels=gemm.k, out_channels=n),
                   quant)
    except GlensideError:
        return
    rows = builder.activation(name, (m, n))
    renamed = {gemm.dst.buffer: name}
    for position in copies:
        copy = lowered.instructions[position]
        assert isinstance(copy, Copy)
        source = lowered.buffer_of(copy.dst)
        narrow = builder.name(f"{source.name}_requantized")
        lowered.buffers[narrow] = Buffer(narrow, "i8", source.shape, ACTIVATION)
        renamed[source.name] = narrow
        lowered.instructions[position] = replace(
            copy, dst=replace(copy.dst, buffer=narrow), src=replace(copy.src, buffer=name))
    for position, leaf in loops:
        loop = lowered.instructions[position]
        assert isinstance(loop, Fused | RequantizePerChannel)
        view = loop.leaves[leaf] if isinstance(loop, Fused) else loop.members[0]
        lowered.instructions[position] = Copy(
            f"{loop.note}: its rows of the layer that requantizes them all", loop.dst,
            replace(view, buffer=renamed[view.buffer]))
    lowered.instructions[index] = AccelLayer(
        f"{gemm.note}: requantized in the epilogue (the rows several loops requantized)",
        rows, name=name, a=contiguous(gemm.a.buffer, (m, gemm.k), gemm.a.offset),
        b=builder.constant(f"{name}_weights", "i8", b_values),
        bias=builder.constant(f"{name}_bias", "i32", np.array(bias_values, np.int64)),
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(multiplier_values, np.int64)),
        commands=builder.commands_placeholder(name), m=m, k=gemm.k, n=n, pre=pre, post=post,
        zero_point=zero_point, low=low, high=high)


def _loop_leaf(lowered: LoweredProgram, position: int, sources: list[str]
               ) -> tuple[int, int] | None:
    """(position, leaf) when the instruction there is a loop with one leaf reading one of
    `sources`; else None."""
    loop = lowered.instructions[position]
    if isinstance(loop, RequantizePerChannel):  # its accumulators, a constant multiplier
        if loop.members[0].buffer in sources and loop.members[1].buffer not in sources and \
                lowered.buffer_of(loop.dst).dtype == "i8":
            return position, 0
        return None
    if not isinstance(loop, Fused) or lowered.buffer_of(loop.dst).dtype != "i8":
        return None
    leaves = [leaf for leaf, view in enumerate(loop.leaves) if view.buffer in sources]
    return (position, leaves[0]) if len(leaves) == 1 else None


def _traced_residual(lowered: LoweredProgram, index: int, weights: dict[str, Array],
                     accel: AccelConfig) -> bool:
    """Move the residual add at `index` into the layer whose rows, permuted a row at a
    time by copies (the shifted windows' reverse), its y is: the layer then stores each
    row where the loop wrote it and the copies go. Whether it did."""
    # (here, not at the top: accel_pool reads accel_residual, which this module reads)
    from glensidec.backend.accel_pool import PADDING, trace_layer_rows
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    found = two_int8_form(lowered, index, weights)
    if found is None or found[0].product:
        return False
    form, runtime = found
    for y_leaf in runtime:
        y_view = fused.leaves[y_leaf]
        if lowered.readers().get(y_view.buffer) != [index]:
            continue
        traced = trace_layer_rows(lowered, y_view.buffer, index)
        if traced is None:
            continue
        layer_index, origin, _ = traced
        layer = lowered.instructions[layer_index]
        if not isinstance(layer, AccelLayer) or layer.residual is not None or layer.pool or \
                layer.output_pitch or layer.layout is not None or layer.scale is not None or \
                not lowered.is_whole(layer.dst) or layer.row_order is not None:
            continue
        m, n = layer.m, layer.n
        positions = view_array(y_view, origin).reshape(-1)
        if positions.size != m * n or np.any(positions == PADDING):
            continue
        rows = _rows_read_of(positions, m, n)
        if rows is None or np.array_equal(rows, np.arange(m)) or \
                not np.array_equal(np.sort(rows), np.arange(m)):
            continue  # (in the layer's own order: accel_residual takes it)
        r_leaf = runtime[0] if runtime[1] == y_leaf else runtime[1]
        r_view = fused.leaves[r_leaf]
        residual_rows = _rows_read(lowered, r_view, m, n)
        if residual_rows is None or any(
                writer >= layer_index for writer in lowered.writers().get(r_view.buffer, [])):
            continue
        coefficients = dict(form.linear.coefficients)
        added = ResidualConfig(
            self_multiplier=coefficients[y_leaf], multiplier=coefficients[r_leaf],
            offset=form.linear.constant, requantize_multiplier=form.multiplier,
            pre=form.pre, post=form.post, zero_point=form.zero_point, low=form.low,
            high=form.high)
        try:
            check_fits(accel, ConvLayer(layer.name, height=m, width=1, channels=layer.k,
                                        out_channels=n),
                       replace(LayerQuant(EpilogueConfig(), (0,) * n, (1,) * n),
                               residual=added))
        except GlensideError:
            continue
        order = np.empty(m, np.int64)
        order[rows] = np.arange(m)
        read_from = np.empty(m, np.int64)
        read_from[rows] = residual_rows
        saved = list(lowered.instructions), dict(lowered.buffers)
        old_rows = layer.dst.buffer
        lowered.instructions[layer_index] = replace(
            layer, note=f"{fused.note}: the products in window order, stored in the loop's "
            f"order", dst=contiguous(fused.dst.buffer, (m, n)), name=fused.dst.buffer,
            residual=contiguous(r_view.buffer, (m, n)), residual_add=added,
            row_order=_order_or_none(order),
            residual_order=_order_or_none(read_from))
        del lowered.instructions[index]
        drop_dead_code(lowered)
        if lowered.readers().get(old_rows):  # another reader of the layer's old rows
            lowered.instructions, lowered.buffers = saved
            continue
        return True
    return False


def _rows_read_of(positions: Array, m: int, n: int) -> Array | None:
    """(M,): the row of an (M, N) buffer each run of N `positions` reads whole, in order."""
    grid = positions.reshape(m, n)
    if np.any(grid[:, 0] % n) or not np.array_equal(
            grid - grid[:, :1], np.broadcast_to(np.arange(n), grid.shape)):
        return None
    rows: Array = grid[:, 0] // n
    return rows


# -- layers that store their rows where copies would put them ----------------------------


def store_rows_in_place(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with each buffer that only copies write, which together put one
    accelerator layer's rows there whole, each row to a row of it (the cyclic shift and
    window partition of Swin's LayerNorm rows before the qkv projection, patch merging's
    2×2 neighbours side by side), written by that layer itself: its stores put each row
    where the copies did (`AccelLayer.row_order`), and the copies go (a new program). The
    layer's rows must have no other reader."""
    # (here, not at the top: accel_pool reads accel_residual, which this module reads)
    from glensidec.backend.accel_pool import PADDING, trace_layer_rows, trace_writers
    result = lowered.copy()
    writers = result.writers()
    readers = result.readers()
    targets = []
    for name, positions in writers.items():
        buffer = result.buffers[name]
        users = readers.get(name, [])
        if name == result.output:  # (read after the program)
            users = [len(result.instructions)]
        if buffer.dtype != "i8" or not users or \
                (buffer.kind != ACTIVATION and name != result.output) or \
                not all(isinstance(result.instructions[position], Copy)
                        for position in positions) or \
                all(user < len(result.instructions) and
                    isinstance(result.instructions[user], Copy) for user in users):
            continue
        targets.append((min(users), name))
    for _, name in sorted(targets, reverse=True):  # (later first: indices stay valid)
        users = result.readers().get(name, [])
        first_reader = len(result.instructions) if name == result.output else \
            min(users, default=-1)
        if first_reader < 0:
            continue
        copies = result.writers().get(name, [])
        if not copies or max(copies) >= first_reader:
            continue
        # (the program's result too, which trace_layer_rows does not follow)
        traced = trace_writers(result, name, copies, 0, trace_layer_rows)
        if traced is None:
            continue
        layer_index, origin, _ = traced
        layer = result.instructions[layer_index]
        buffer = result.buffers[name]
        if not isinstance(layer, AccelLayer) or layer.pool or layer.output_pitch or \
                layer.layout is not None or layer.row_order is not None or \
                not result.is_whole(layer.dst) or buffer.elements != layer.m * layer.n or \
                np.any(origin == PADDING):
            continue
        rows = _rows_read_of(origin, layer.m, layer.n)
        if rows is None or not np.array_equal(np.sort(rows), np.arange(layer.m)):
            continue
        order = np.empty(layer.m, np.int64)
        order[rows] = np.arange(layer.m)  # the layer's row rows[j] lands at row j
        saved = list(result.instructions), dict(result.buffers)
        old_rows = layer.dst.buffer
        result.instructions[layer_index] = replace(
            layer, dst=contiguous(name, (layer.m, layer.n)),
            row_order=_order_or_none(order))
        result.instructions = [instruction for position, instruction
                               in enumerate(result.instructions)
                               if not (isinstance(instruction, Copy) and
                                       instruction.dst.buffer == name and
                                       position != layer_index)]
        drop_dead_code(result)
        if result.readers().get(old_rows):  # another reader of the layer's rows
            result.instructions, result.buffers = saved
    return result


def _order_or_none(order: Array) -> tuple[int, ...] | None:
    """A layer's row order, None when it is the rows' own (nothing to reorder)."""
    if np.array_equal(order, np.arange(order.size)):
        return None
    return tuple(int(value) for value in order)
