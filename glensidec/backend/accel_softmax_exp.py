"""softmax's exponentials on the accelerator: e = exp(q − max q) in the epilogue (issue 26).

The quantizer writes attention's softmax (`frontends.quant_compute.integer_softmax`) as a
row maximum, then d = requantize(cast(q) − cast(max)) (int8, zero point 127) and
e = exp_table[d]; lowered, that is two host passes over every score (the loop of the
subtraction and requantize, and the lookup), three host cycles a score of the five its
softmax costs (vit_b_16: 12 × 12 × 197² scores).

ws_epilogue's per-row mode adds a run-time offset o to each row's accumulators before the
bias and requantize, and its lookup table follows the clips: so a depthwise 1×1 layer of
q·1 whose residual rows carry o = −max and the reciprocal p = 1 (h = 1, l = 0: t = acc +
o exactly) computes q − max, the loop's requantize and clips, and the table, bit for bit.
The host only packs each row's (−max, 1) at the start of every N block of the residual
rows: O(rows × blocks), not O(rows × keys).

The per-row values are i32 at the start of each block of COLS columns, so the layer's
columns are a multiple of 4 whose last block holds the 8 bytes; a row of keys that is
not (vit's 197, Swin's 49) runs its leading whole blocks of COLS columns on the
accelerator (reading and writing rows `keys` bytes apart: input and output pitch) and
the few columns after them on the host, the two loops narrowed to those columns.

Runs after `fuse_elementwise` (the subtraction and requantize are one `Fused` by then).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glensidec.backend.accel_dense import moved_view
from glensidec.backend.accel_layer_norm import rewrite_per_row_loops
from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    clip_range,
    drop_dead_code,
    scalar_value,
)
from glensidec.backend.accel_tables import unary_tail
from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Copy,
    Fill,
    Fold,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    Reduce,
    Step,
)
from glensidec.backend.views import Axis, View, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import (
    ConvLayer,
    EpilogueConfig,
    ResidualConfig,
    holds_row_values,
)
from glensidec.hardware.commands import (
    AccelConfig,
    LayerQuant,
    depthwise_weight_matrix,
)
from glensidec.lang.dtypes import Array
from glensidec.lang.terms import ComputeOp


@dataclass(frozen=True)
class _Exponentials:
    """The loop at `index` (d = requantize(cast(q) − cast(max)), clipped) and the table
    steps after it, as the layer's parts."""

    index: int
    scores: View  # q: (rows, keys) row-major, i8
    peak: View  # max: (rows,) contiguous, i8
    epilogue: EpilogueConfig
    multiplier: int
    table: Array  # 256 int8 entries
    tail: tuple[int, ...]  # the table's instructions
    dst: View  # e: (rows, keys) row-major, i8


def fuse_softmax_exponentials(lowered: LoweredProgram, weights: dict[str, Array],
                              accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every softmax's exp(q − max q) loop and lookup as a depthwise layer in
    the epilogue's per-row mode (a new program; unchanged on arrays narrower than the 8
    bytes of a row's values)."""
    def rewrite_at(result: LoweredProgram, index: int) -> int:
        found = _find(result, index, weights)
        return 0 if found is None else _rewrite(result, found, accel)

    return rewrite_per_row_loops(lowered, accel, rewrite_at)


def _find(lowered: LoweredProgram, index: int, weights: dict[str, Array]
          ) -> _Exponentials | None:
    """The loop at `index` as a softmax's subtraction and requantize of int8 scores, with
    the int8 table steps after it; else None."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    shape = fused.dst.shape
    if len(shape) < 2 or lowered.buffer_of(fused.dst).dtype != "i8" or \
            len(fused.leaves) != 2 or fused.dst.buffer == lowered.output:
        return None
    keys = shape[-1]
    rows = int(np.prod(shape[:-1]))
    scores = peak = None
    kinds: list[str] = []
    for leaf in fused.leaves:
        if lowered.buffer_of(leaf).dtype != "i8" or \
                lowered.buffer_of(leaf).kind != ACTIVATION:
            return None
        vector = _per_row(lowered, leaf, rows, keys)
        if vector is not None and peak is None:
            peak = vector
            kinds.append("max")
        elif scores is None and (found := _rows(lowered, leaf, rows, keys)) is not None:
            scores = found
            kinds.append("q")
        else:
            return None
    if scores is None or peak is None:
        return None
    config, multiplier = _steps(fused.steps, kinds)
    if config is None:
        return None
    readers = lowered.readers()

    def next_of(view: View) -> tuple[int, Instruction] | None:
        users = readers.get(view.buffer, [])
        if len(users) != 1 or view.buffer == lowered.output:
            return None
        return users[0], lowered.instructions[users[0]]

    def scalar(view: View) -> int | None:
        return scalar_value(lowered, view, weights, index)

    if not lowered.is_whole(fused.dst) or next_of(fused.dst) is None:
        return None
    tail = unary_tail(lowered, fused.dst, None, next_of, scalar)
    if tail is None or not _narrowable(lowered, tail.indices):
        return None
    dst = _rows(lowered, tail.dst, rows, keys)
    if dst is None:
        return None
    return _Exponentials(index, scores, peak, config, multiplier, tail.table, tail.indices,
                         dst)


def _steps(steps: tuple[Step, ...], kinds: list[str]) -> tuple[EpilogueConfig | None, int]:
    """The loop's requantize and clips when its steps are cast(q) − cast(max) requantized
    to int8 and clipped; else (None, 0)."""
    values: list[str] = []
    config: EpilogueConfig | None = None
    multiplier = 0
    for step in steps:
        name = step.name
        args = [kinds[i] if i >= 0 else values[-i - 1] for i in step.operands]
        if name == "cast" and step.dtype == "i32" and args in (["q"], ["max"]):
            values.append(f"wide {args[0]}")
        elif name == "elementwise-sub" and args == ["wide q", "wide max"]:
            values.append("d")
        elif name == "requantize" and args == ["d"] and step.dtype == "i8" and \
                config is None:
            assert not isinstance(step.op, str)
            multiplier, pre, post, zero_point = (int(v) for v in step.op.params)
            config = EpilogueConfig(pre, post, zero_point)
            values.append("y")
        elif name in ("relu", "clip") and args == ["y"] and config is not None:
            assert not isinstance(step.op, str)
            low, high = clip_range(step.op)
            low, high = max(config.low, low), min(config.high, high)
            if low > high:
                return None, 0
            config = replace(config, low=low, high=high)
            values.append("y")
        else:
            return None, 0
    return (config, multiplier) if values[-1:] == ["y"] else (None, 0)


def _per_row(lowered: LoweredProgram, view: View, rows: int, keys: int) -> View | None:
    """The (rows,) vector `view` reads, one value per row broadcast along it, as a
    contiguous view; else None."""
    buffer = lowered.buffer_of(view)
    read = view_array(view, np.arange(buffer.elements)).reshape(rows, keys)
    first = int(read[0, 0])
    if not np.array_equal(read, np.broadcast_to(first + np.arange(rows)[:, None], read.shape)):
        return None
    return View(view.buffer, first, ((Axis(rows, 1),),))


def _rows(lowered: LoweredProgram, view: View, rows: int, keys: int) -> View | None:
    """`view` as (rows, keys) contiguous row-major elements of its buffer, or None."""
    buffer = lowered.buffer_of(view)
    read = view_array(view, np.arange(buffer.elements)).reshape(rows, keys)
    first = int(read[0, 0])
    if not np.array_equal(read, first + np.arange(rows * keys).reshape(rows, keys)):
        return None
    return View(view.buffer, first, ((Axis(rows, keys),), (Axis(keys, 1),)))


def _narrowable(lowered: LoweredProgram, indices: tuple[int, ...]) -> bool:
    """Whether each table step can be narrowed to the last columns (a Map, or a Fold with
    a scalar: every view's last dim one axis of its own)."""
    for position in indices:
        instruction = lowered.instructions[position]
        if not isinstance(instruction, (Map, Fold)):
            return False
        if any(_columns(view, 0, 1) is None for view in (*instruction.reads(),
                                                           instruction.dst)):
            return False
    return True


def _columns(view: View, first: int, count: int) -> View | None:
    """Columns first … first + count − 1 of the last dim of `view`, or None when that dim
    is not one axis."""
    if not view.dims or len(view.dims[-1]) > 1:
        return None
    stride = view.dims[-1][0].stride if view.dims[-1] else 0
    return View(view.buffer, view.offset + first * stride,
                (*view.dims[:-1], (Axis(count, stride),)))


def _narrowed(instruction: Instruction, first: int, count: int) -> Instruction:
    """`instruction` (an element-wise loop whose views all end in the key axis) over
    columns first … first + count − 1 only."""

    def cut(view: View) -> View:
        found = _columns(view, first, count)
        assert found is not None
        return found

    if isinstance(instruction, Fused):
        return replace(instruction, dst=cut(instruction.dst),
                       leaves=tuple(cut(view) for view in instruction.leaves))
    if isinstance(instruction, Map):
        return replace(instruction, dst=cut(instruction.dst), src=cut(instruction.src))
    assert isinstance(instruction, Fold)
    return replace(instruction, dst=cut(instruction.dst),
                   members=tuple(cut(view) for view in instruction.members))


def layer_columns(keys: int, cols: int) -> int:
    """How many of a row's `keys` columns the layer takes: all when they are a multiple of
    4 whose last N block holds a row's 8 bytes of values, else the whole blocks."""
    return keys if holds_row_values(keys, cols) else keys - keys % cols


def _rewrite(lowered: LoweredProgram, found: _Exponentials, accel: AccelConfig) -> int:
    """The loop and its table steps become the per-row values' packing and the layer (and
    the loop and steps narrowed to the columns after the layer's, on the host): the number
    of instructions added; 0 (nothing changed) when the layer does not fit."""
    rows, keys = found.scores.shape
    columns = layer_columns(keys, accel.cols)
    if columns == 0:
        return 0
    fused = lowered.instructions[found.index]
    assert isinstance(fused, Fused)
    name = found.dst.buffer
    geometry = ConvLayer(name, rows, 1, columns, columns, groups=columns)
    added = ResidualConfig(rows=True)  # t = (acc + o)·1 + trunc((acc + o)·0) = acc + o
    quant = LayerQuant(found.epilogue, (0,) * columns, (found.multiplier,) * columns,
                       residual=added)
    try:
        check_fits(accel, geometry, quant)
    except GlensideError:
        return 0  # the host keeps the loop
    builder = LayerBuilder(lowered)
    values = builder.name(f"{name}_row_values")
    lowered.buffers[values] = Buffer(values, "i32", (rows, columns // 4), ACTIVATION)
    blocks = -(-columns // accel.cols)
    placed = ((Axis(rows, columns // 4),), (Axis(blocks, accel.cols // 4),))
    spread = ((Axis(rows, 1),), (Axis(blocks, 0),))
    note = "softmax's exponentials"
    packing: list[Instruction] = [
        Fused(f"{note}: each row's offset −max, at the start of its N blocks",
              View(values, 0, placed), (View(found.peak.buffer, found.peak.offset, spread),),
              (Step(ComputeOp("cast", ("i32",)), (0,), "i32"),
               Step(ComputeOp("negative", ()), (-1,), "i32"))),
        Fill(f"{note}: each row's reciprocal 1 (h = 1, l = 0)", View(values, 1, placed),
             minimum=False, value=1)]
    pitch = keys if columns != keys else 0
    layer = AccelLayer(
        f"{fused.note}: q − max, requantized and exp's table, in the epilogue's per-row mode",
        View(name, found.dst.offset, ((Axis(rows, keys),), (Axis(columns, 1),))),
        name=name,
        a=View(found.scores.buffer, found.scores.offset,
               ((Axis(rows, keys),), (Axis(columns, 1),))),
        b=builder.constant(f"{name}_weights", "i8",
                           depthwise_weight_matrix(geometry, accel.cols, 1)),
        bias=builder.constant(f"{name}_bias", "i32", np.zeros(columns, np.int64)),
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.full(columns, found.multiplier, np.int64)),
        commands=builder.commands_placeholder(name), m=rows, k=columns, n=columns,
        pre=found.epilogue.pre, post=found.epilogue.post,
        zero_point=found.epilogue.zero_point, low=found.epilogue.low,
        high=found.epilogue.high, image=(rows, 1, columns), kernel=1, stride=1,
        groups=columns, group_cols=accel.cols,
        residual=View(values, 0, ((Axis(rows, columns // 4),), (Axis(columns // 4, 1),))),
        residual_add=added, table=builder.constant(f"{name}_table", "i8", found.table),
        input_pitch=pitch, output_pitch=pitch)
    rest = keys - columns  # the columns after the layer's, on the host
    edits = {position: [_narrowed(lowered.instructions[position], columns, rest)]
             if rest else [] for position in found.tail}
    replacement: list[Instruction] = [*packing, layer]
    if rest:
        replacement.append(_narrowed(fused, columns, rest))
    for position in sorted(edits, reverse=True):
        lowered.instructions[position:position + 1] = edits[position]
    lowered.instructions[found.index:found.index + 1] = replacement
    return len(replacement) - 1


# The row maximum: block maxima by a pool, the host's maximum over them.

@dataclass(frozen=True)
class _Blocks:
    """A row of `keys` scores laid out as a k×k square of pixels of `channels` bytes
    (padded with the minimum to `channels`·k² bytes): a k×k, stride-k max-pool of such
    rows leaves `channels` maxima a row."""

    channels: int
    side: int

    @property
    def pitch(self) -> int:
        return self.channels * self.side * self.side


def row_blocks(keys: int, cols: int) -> _Blocks | None:
    """The squares that price a row's maximum lowest, counting a pool's cycle a tap per
    block of COLS channels, the host's fill of the padding and its maximum over the
    block maxima; None when none beats the host's maximum over the keys (a cycle each)."""
    best: tuple[int, _Blocks] | None = None
    for side in range(1, 17):
        channels = -(-keys // (side * side))
        if channels > 4 * cols:
            continue
        blocks = _Blocks(channels, side)
        cost = side * side * -(-channels // cols) + (blocks.pitch - keys) + channels
        if best is None or cost < best[0]:
            best = (cost, blocks)
    return best[1] if best is not None and best[0] < keys else None


def fuse_softmax_maxima(lowered: LoweredProgram, weights: dict[str, Array],
                        accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each row maximum of int8 scores that only accelerator layers write
    taken by a max-pool layer of their rows (rows re-laid `_Blocks.pitch` bytes apart,
    padded with −128) and the host's maximum of each row's few block maxima (a new
    program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        reduce = result.instructions[index]
        if isinstance(reduce, Reduce) and reduce.op == "reduce-max" and \
                reduce.reduce_rank == 1:
            index += _pool_maximum(result, index, accel)
        index += 1
    drop_dead_code(result)
    return result


def _pool_maximum(lowered: LoweredProgram, index: int, accel: AccelConfig) -> int:
    """The reduce at `index` as a pool layer and a reduce of its block maxima (the score
    rows re-laid for it): the number of instructions added; 0 when it stays."""
    reduce = lowered.instructions[index]
    assert isinstance(reduce, Reduce)
    shape = reduce.src.shape
    keys = shape[-1] if shape else 0
    rows = int(np.prod(shape[:-1])) if shape else 0
    buffer = lowered.buffer_of(reduce.src)
    if keys == 0 or buffer.dtype != "i8" or buffer.kind != ACTIVATION or \
            buffer.elements != rows * keys or reduce.src.buffer == lowered.output or \
            _rows(lowered, reduce.src, rows, keys) != View(buffer.name, 0, (
                (Axis(rows, keys),), (Axis(keys, 1),))):
        return 0
    maxima = _row_vector(lowered, reduce.dst, rows)
    blocks = row_blocks(keys, accel.cols)
    if maxima is None or blocks is None:
        return 0
    geometry = ConvLayer(f"{reduce.dst.buffer}_blocks", rows * blocks.side, blocks.side,
                         blocks.channels, blocks.channels, kernel=blocks.side,
                         stride=blocks.side)
    quant = LayerQuant(EpilogueConfig(), (0,) * blocks.channels, (1,) * blocks.channels)
    try:
        check_fits(accel, geometry, quant, pool=True)
    except GlensideError:
        return 0
    builder = LayerBuilder(lowered)
    padded = buffer.name
    added = 0  # instructions added before the reduce (copies gone: negative)
    if blocks.pitch > keys:  # the rows re-laid, `pitch` bytes apart
        padded = builder.name(f"{buffer.name}_blocks")
        moved = _relaid(lowered, buffer.name, keys, blocks.pitch, padded)
        if moved is None:
            return 0
        lowered.buffers[padded] = Buffer(padded, "i8", (rows, blocks.pitch), ACTIVATION)
        for position in sorted(moved, reverse=True):
            lowered.instructions[position:position + 1] = moved[position]
        gone = sum(len(moved[position]) - 1 for position in moved if position < index)
        index += gone
        added += gone
    name = geometry.name
    out = builder.activation(name, (rows, blocks.channels))
    zeros = builder.constant(f"{name}_bias", "i32", np.zeros(blocks.channels, np.int64))
    note = f"{reduce.note}: each row's maximum"
    replacement: list[Instruction] = []
    if blocks.pitch > keys:
        replacement.append(Fill(f"{note}: the padding after the scores, the minimum",
                                View(padded, keys, ((Axis(rows, blocks.pitch),),
                                                    (Axis(blocks.pitch - keys, 1),))),
                                minimum=True))
    replacement += [
        AccelLayer(f"{note}, {blocks.channels} at a time by a {blocks.side}×{blocks.side} "
                   "max-pool of its scores as a square of pixels", out, name=name,
                   a=View(padded, 0, ((Axis(rows * blocks.side * blocks.side,
                                            blocks.channels),), (Axis(blocks.channels, 1),))),
                   b=zeros, bias=zeros,
                   multiplier=builder.constant(f"{name}_multiplier", "i32",
                                               np.ones(blocks.channels, np.int64)),
                   commands=builder.commands_placeholder(name), m=rows, k=0,
                   n=blocks.channels, pre=0, post=0, zero_point=0, low=-128, high=127,
                   image=(rows * blocks.side, blocks.side, blocks.channels),
                   kernel=blocks.side, stride=blocks.side, pool=True),
        Reduce(f"{note}: the maximum of its block maxima", maxima, "reduce-max",
               View(out.buffer, 0, ((Axis(rows, blocks.channels),),
                                    (Axis(blocks.channels, 1),))), 1)]
    lowered.instructions[index:index + 1] = replacement
    return added + len(replacement) - 1


def _row_vector(lowered: LoweredProgram, view: View, rows: int) -> View | None:
    """`view` as (rows,) contiguous elements of its buffer, or None."""
    read = view_array(view, np.arange(lowered.buffer_of(view).elements)).reshape(-1)
    if read.size != rows or not np.array_equal(read, read[0] + np.arange(rows)):
        return None
    return View(view.buffer, int(read[0]), ((Axis(rows, 1),),))


def _relaid(lowered: LoweredProgram, name: str, keys: int, pitch: int, target: str
            ) -> dict[int, list[Instruction]] | None:
    """Every instruction that reads or writes the (rows, keys) buffer `name`, reading and
    writing `target`'s rows `pitch` apart instead (each position's replacement): accelerator
    layers that write whole rows of it (an output pitch: attention's heads, written in
    place) or read them (an input pitch), and host instructions whose views move; None
    when one does not."""
    if name == lowered.output:
        return None
    moved: dict[int, list[Instruction]] = {}
    for position, instruction in enumerate(lowered.instructions):
        if name not in instruction.read_buffers and instruction.dst.buffer != name:
            continue
        if isinstance(instruction, AccelLayer):
            layer = _relaid_layer(instruction, name, keys, pitch, target)
            if layer is None:
                return None
            moved[position] = [layer]
            continue
        if not isinstance(instruction, (Fused, Map, Fold, Reduce, Copy)):
            return None
        changed: dict[str, object] = {}
        for field in ("dst", "src"):
            view = getattr(instruction, field, None)
            if isinstance(view, View) and view.buffer == name:
                found = moved_view(view, keys, pitch, 0, target)
                if found is None:
                    return None
                changed[field] = found
        for field in ("leaves", "members"):
            group = getattr(instruction, field, None)
            if group is not None:
                views_moved = tuple(view if view.buffer != name else
                                    moved_view(view, keys, pitch, 0, target)
                                    for view in group)
                if any(view is None for view in views_moved):
                    return None
                changed[field] = views_moved
        moved[position] = [replace(instruction, **changed)]  # type: ignore[arg-type]
    return moved


def _relaid_layer(layer: AccelLayer, name: str, keys: int, pitch: int, target: str
                  ) -> AccelLayer | None:
    """`layer` writing or reading `target`'s rows instead of `name`'s (see _relaid)."""
    if any(view.buffer == name for view in layer.reads()[1:]):
        return None
    changed: dict[str, object] = {}
    if layer.dst.buffer == name:
        if layer.output_pitch or layer.n != keys or layer.pool:
            return None
        dst = moved_view(layer.dst, keys, pitch, 0, target)
        if dst is None:
            return None
        changed.update(dst=dst, output_pitch=pitch)
    if layer.a.buffer == name:
        width = layer.image[-1] if layer.image else layer.k
        if layer.pool or layer.layout is not None or \
                layer.input_pitch not in (0, keys) or \
                (layer.input_pitch == 0 and width != keys) or layer.kernel != 1 or \
                layer.padding or not layer.groups == layer.n > 1:  # commands.with_input_pitch
            return None
        a = moved_view(layer.a, keys, pitch, 0, target)
        if a is None:
            return None
        changed.update(a=a, input_pitch=pitch)
    return replace(layer, **changed)  # type: ignore[arg-type]


# Σe: the exponentials' rows times a column of ones (as accel_row_sums takes Σq).

def sum_exponentials_on_the_array(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with each row sum of the exponentials an exponentials layer writes (the
    i32 Σe softmax·V divides by) an array call of their int8 rows and a column of ones,
    whose i32 sums are exact (a new program)."""
    result = lowered.copy()
    writers = result.writers()
    for index, reduce in enumerate(result.instructions):
        if not (isinstance(reduce, Reduce) and reduce.op == "reduce-sum" and
                reduce.reduce_rank == 1 and result.buffer_of(reduce.src).dtype == "i8" and
                result.buffer_of(reduce.dst).dtype == "i32" and reduce.src.shape):
            continue
        made_by = [result.instructions[position]
                   for position in writers.get(reduce.src.buffer, [])]
        if not any(isinstance(layer, AccelLayer) and layer.table is not None and
                   layer.residual_add is not None and layer.residual_add.rows
                   for layer in made_by):
            continue
        keys = reduce.src.shape[-1]
        rows = int(np.prod(reduce.src.shape[:-1]))
        exponentials = _rows(result, reduce.src, rows, keys)
        sums = _row_vector(result, reduce.dst, rows)
        if exponentials is None or sums is None:
            continue
        ones = LayerBuilder(result).constant(f"{reduce.dst.buffer}_ones", "i8",
                                             np.ones((keys, 1), np.int64))
        result.instructions[index] = ArrayGemm(
            f"{reduce.note}: softmax's Σe, its rows times a column of ones",
            View(sums.buffer, sums.offset, ((Axis(rows, 1),), (Axis(1, 1),))),
            exponentials, ones, rows, keys, 1)
    return result
