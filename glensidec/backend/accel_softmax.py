"""softmax·V on the accelerator with the division after the product (issue 26).

The quantizer writes attention's softmax·V as e·V divided row by row
(`frontends.quant_compute.deferred_softmax_product`): e is the exp table's int8 result
(zero point 0), Σe one i32 per row, R = ⌊2^30 / Σe⌋ per row taken apart as h·2^L + l, and
after the product a loop over its sums a,

    t = a·h + trunc(a·l / 2^L),   y = clip(requantize(t)),

h and l each one value per row, broadcast along it. Lowered, the product is an array call
of two activations whose result that loop alone reads, which `fuse_activation_products`
left alone (its epilogue is no per-column requantize). ws_epilogue's per-row mode computes
exactly that loop (docs/hardware.md): each output row's residual row carries an offset
(0 here) and p = l·2^16 + h, which turn the sums into t before the per-column bias and
requantize. So the call and the loop become one product layer (its operands traced as
`accel_attention` traces them) in the per-row mode, and the host only packs each row's
(0, p) at the start of every N block of the residual rows the layer reads: O(rows) work
where the division was O(rows × keys).

A batched product (`builders.batched_matmul`: softmax·V of every window × head as one
host `Dot` of (B, M, N) sums) whose result such a loop alone reads becomes one batched
layer (`accel_batched.batched_layer`) in the per-row mode the same way, its B·M rows'
values packed as one (B·M, N/4) buffer: item g's residual rows in its own slot
(`hardware.batched`).

Runs after `fuse_elementwise` (the loop is one `Fused` by then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from glensidec.backend.accel_attention import RowsMode, _product_layer, apply_edits
from glensidec.backend.accel_batched import batched_layer, batched_operands
from glensidec.backend.accel_layer_norm import per_row_vector
from glensidec.backend.accel_layers import (
    LayerBuilder,
    _block,
    _Chain,
    _fusable,
    _known,
    clip_range,
    drop_dead_code,
)
from glensidec.backend.lower import (
    ACTIVATION,
    ArrayGemm,
    Buffer,
    Copy,
    Dot,
    Fill,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    Step,
)
from glensidec.backend.views import Axis, View, contiguous, view_array
from glensidec.hardware.accel import ROW_VALUE_BYTES, ResidualConfig, holds_row_values
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array

#: p = l·2^16 + h packs a row's reciprocal into one i32 (ws_epilogue's per-row mode).
HALF = 1 << 16


@dataclass(frozen=True)
class _Scaled:
    """What the loop after the product does: t = a·h + trunc(a·l / 2^shift) with per-row
    h (`whole`) and l (`part`), then requantize and clips."""

    whole: View  # (rows,) i32
    part: View  # (rows,) i32
    shift: int
    chain: _Chain
    after: tuple[Instruction, ...] = ()  # after the layer (a copy of its rows reordered)


def fuse_row_scaled_products(lowered: LoweredProgram, weights: dict[str, Array],
                             accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every array call of two activations whose result one per-row scaling
    loop reads (softmax·V divided after the product) as a product layer in the epilogue's
    per-row mode (a new program; unchanged on arrays narrower than the 8 bytes of a row's
    values)."""
    if accel.cols < ROW_VALUE_BYTES or accel.cols % 4:
        return lowered
    result = lowered.copy()
    builder = LayerBuilder(result)
    readers = result.readers()
    edits: dict[int, list[Instruction]] = {}
    for index, gemm in enumerate(lowered.instructions):
        if isinstance(gemm, Dot):  # every item's product at once: one batched layer
            batched = _batched_layer(result, builder, index, weights, readers, accel)
            if batched is not None:  # (where the loop was, as below)
                made, positions = batched
                edits.update({position: [] for position in positions})
                edits[positions[-1]] = made
            continue
        if not (isinstance(gemm, ArrayGemm) and _fusable(result, gemm, accel)
                and _known(result, gemm.a, weights, index, (gemm.m, gemm.k)) is None
                and _known(result, gemm.b, weights, index, (gemm.k, gemm.n)) is None):
            continue
        found = _scaled(result, index, gemm.dst.buffer, gemm.m, gemm.n, weights, readers)
        if found is None or not holds_row_values(found.chain.cols, accel.cols):
            continue
        layer = _product_layer(result, builder, index, found.chain, accel,
                               _rows_mode(result, builder, found, accel))
        if layer is not None:  # where the loop was: after each row's h and l
            edits.update({position: [] for position in found.chain.indices})
            edits[found.chain.indices[-1]] = layer
    apply_edits(result, edits)
    drop_dead_code(result)
    return result


def _batched_layer(lowered: LoweredProgram, builder: LayerBuilder, index: int,
                   weights: dict[str, Array], readers: Mapping[str, list[int]],
                   accel: AccelConfig) -> tuple[list[Instruction], list[int]] | None:
    """(the batched layer of the `Dot` at `index`, a batched product of two int8
    activations, in the per-row mode, with what packs its rows' values; the positions of
    the product and its loop) when one per-row scaling loop alone reads its (B, M, N)
    sums (softmax·V of every window × head); else None."""
    found = batched_operands(lowered, index)
    if found is None:
        return None
    dot = lowered.instructions[index]
    assert isinstance(dot, Dot)
    count, m, n = dot.dst.shape
    scaled = _scaled(lowered, index, dot.dst.buffer, count * m, n, weights, readers, True)
    if scaled is None or not holds_row_values(n, accel.cols):
        return None
    made = batched_layer(lowered, builder, index, found, scaled.chain, accel,
                         _rows_mode(lowered, builder, scaled, accel))
    return None if made is None else ([*made, *scaled.after], scaled.chain.indices)


def _rows_mode(lowered: LoweredProgram, builder: LayerBuilder, found: _Scaled,
               accel: AccelConfig) -> RowsMode:
    """The residual rows of the layer (M × N/4 i32: each row's offset 0 and p = l·2^16 + h
    at the start of every block of COLS columns) and the host instructions packing them."""
    chain = found.chain
    rows, columns = chain.rows, chain.cols
    name = builder.name(f"{chain.dst.buffer}_row_values")
    lowered.buffers[name] = Buffer(name, "i32", (rows, columns // 4), ACTIVATION)
    blocks = -(-columns // accel.cols)
    placed = ((Axis(rows, columns // 4),), (Axis(blocks, accel.cols // 4),))
    spread = ((Axis(rows, 1),), (Axis(blocks, 0),))
    factor = builder.constant(f"{name}_half", "i32", np.array([HALF], np.int64))
    note = "softmax·V: each row's reciprocal"
    packing: tuple[Instruction, ...] = (
        Fill(f"{note}: no offset", View(name, 0, placed), minimum=False, value=0),
        Fused(f"{note} l·2^16 + h, at the start of its N blocks", View(name, 1, placed),
              (View(found.part.buffer, found.part.offset, spread),
               View(factor.buffer, 0, ((Axis(rows, 0),), (Axis(blocks, 0),))),
               View(found.whole.buffer, found.whole.offset, spread)),
              (Step("elementwise-mul", (0, 1), "i32"),
               Step("elementwise-add", (-1, 2), "i32"))))
    return RowsMode(contiguous(name, (rows, columns // 4)),
                    ResidualConfig(rows=True, pre=found.shift), packing)


def _scaled(lowered: LoweredProgram, index: int, sums: str, m: int, n: int,
            weights: dict[str, Array], readers: Mapping[str, list[int]],
            reordered: bool = False) -> _Scaled | None:
    """The per-row scaling loop that alone reads the product's M × N result (buffer
    `sums`), as the layer's parts (with `reordered`, also a loop ending at t whose
    requantize reads t in another order: `_reordered_requantize`); else None."""
    users = readers.get(sums, [])
    fused = lowered.instructions[users[0]] if len(users) == 1 else None
    if not isinstance(fused, Fused) or \
            lowered.buffer_of(fused.dst).dtype not in (("i8", "i32") if reordered else ("i8",)) \
            or fused.dst.buffer == lowered.output:
        return None
    block = None
    for leaf in fused.leaves:
        if leaf.buffer == sums:
            found = _block(leaf, lowered, m, n)
            if found is None or found[2] or block not in (None, found):
                return None
            block = found
    if block is None:
        return None
    rows, cols, _ = block
    dst = _rows_of(lowered, fused.dst, rows, cols)
    if dst is None:
        return None
    leaves: list[tuple[str, object]] = []
    for leaf in fused.leaves:
        if leaf.buffer == sums:
            leaves.append(("a", None))
        elif (constant := _known(lowered, leaf, weights, users[0], (rows, cols))) is not None:
            leaves.append(("const", constant))
        elif (vector := per_row_vector(lowered, leaf, rows, cols)) is not None:
            leaves.append(("row", vector))
        else:
            return None
    values: list[tuple[str, object]] = []
    for step in fused.steps:
        args = [leaves[i] if i >= 0 else values[-i - 1] for i in step.operands]
        value = _step(step, args)
        if value is None:
            return None
        values.append(value)
    indices: list[int] = [index, users[0]]
    after: tuple[Instruction, ...] = ()
    if values and values[-1][0] == "t" and reordered:
        requantized = _reordered_requantize(lowered, users[0], dst, readers)
        if requantized is None:
            return None
        position, step, dst, copy = requantized
        after = (copy,)
        value = _step(step, [values[-1]])
        if value is None:
            return None
        values.append(value)
        indices.append(position)
    if not values or values[-1][0] != "y":
        return None
    y = values[-1][1]
    assert isinstance(y, _Y)
    chain = _Chain(indices, rows, cols, False, dst, None,
                   np.broadcast_to(np.asarray(y.multiplier, np.int64), (rows, cols)),
                   y.pre, y.post, y.zero_point, y.low, y.high)
    return _Scaled(y.whole, y.part, y.shift, chain, after)


def _reordered_requantize(lowered: LoweredProgram, loop: int, sums: View,
                          readers: Mapping[str, list[int]]
                          ) -> tuple[int, Step, View, Copy] | None:
    """(where it is, its step, the layer's rows, the copy that takes its place) when the
    i32 t the loop at `loop` writes (`sums`: all of its buffer, rows × cols row-major) is
    read by one int8 requantize alone, in another order (vit_b_16's batched softmax·V:
    each head's t, read as the heads' concatenation for the output projection): the
    layer requantizes its rows into a buffer of t's layout, which a copy reorders as the
    requantize read t."""
    buffer = lowered.buffer_of(sums)
    users = readers.get(buffer.name, [])
    requantize = lowered.instructions[users[0]] if len(users) == 1 else None
    if not isinstance(requantize, Map) or requantize.op.name != "requantize" or \
            buffer.dtype != "i32" or lowered.buffer_of(requantize.dst).dtype != "i8" or \
            int(np.prod(sums.shape)) != buffer.elements or \
            lowered.writers().get(buffer.name) != [loop]:
        return None
    name = LayerBuilder(lowered).name(f"{requantize.dst.buffer}_rows")
    lowered.buffers[name] = Buffer(name, "i8", buffer.shape, ACTIVATION)
    copy = Copy(f"{requantize.note}: the layer's rows in the requantize's order",
                requantize.dst, View(name, requantize.src.offset, requantize.src.dims))
    return users[0], Step(requantize.op, (-1,), "i8"), \
        View(name, sums.offset, sums.dims), copy


@dataclass(frozen=True)
class _Shifted:
    part: View
    shift: int


@dataclass(frozen=True)
class _T:
    whole: View
    part: View
    shift: int


@dataclass(frozen=True)
class _Y:
    whole: View
    part: View
    shift: int
    multiplier: Array  # per column (cols,) or one
    pre: int
    post: int
    zero_point: int
    low: int = -128
    high: int = 127


def _step(step: Step, args: list[tuple[str, object]]) -> tuple[str, object] | None:
    """A step of the loop on its operands' kinds: "a·row" (the row's vector), "a·row/2^L"
    ((vector, L)), "t", "y"; None for anything else."""
    name = step.name
    kinds = sorted(kind for kind, _ in args)

    def of(kind: str) -> object:
        return next(value for found, value in args if found == kind)

    if name == "elementwise-mul" and kinds == ["a", "row"]:
        return "a·row", of("row")
    if name == "elementwise-div" and [kind for kind, _ in args] == ["a·row", "const"]:
        divisor = _uniform(of("const"))
        if divisor is None or divisor <= 1 or divisor & (divisor - 1) or divisor >= 1 << 31:
            return None
        vector = of("a·row")
        assert isinstance(vector, View)
        return "a·row/2^L", _Shifted(vector, divisor.bit_length() - 1)
    if name == "elementwise-add" and kinds == ["a·row", "a·row/2^L"]:
        shifted, whole = of("a·row/2^L"), of("a·row")
        assert isinstance(whole, View) and isinstance(shifted, _Shifted)
        return "t", _T(whole, shifted.part, shifted.shift)
    if name == "requantize" and kinds == ["t"] and step.dtype == "i8":
        assert not isinstance(step.op, str)
        t = of("t")
        assert isinstance(t, _T)
        multiplier, pre, post, zero_point = (int(v) for v in step.op.params)
        return "y", _Y(t.whole, t.part, t.shift, np.array(multiplier), pre, post, zero_point)
    if name in ("relu", "clip") and kinds == ["y"]:
        assert not isinstance(step.op, str)
        y = of("y")
        assert isinstance(y, _Y)
        low, high = clip_range(step.op)
        low, high = max(y.low, low), min(y.high, high)
        if low > high:
            return None
        return "y", _Y(y.whole, y.part, y.shift, y.multiplier, y.pre, y.post, y.zero_point,
                       low, high)
    return None


def _uniform(values: object) -> int | None:
    if not isinstance(values, np.ndarray) or not values.size or \
            not np.all(values == values.flat[0]):
        return None
    return int(values.flat[0])


def _rows_of(lowered: LoweredProgram, view: View, rows: int, cols: int) -> View | None:
    """`view` as rows × cols contiguous elements of its buffer, row-major (what a layer
    writes), or None."""
    buffer = lowered.buffer_of(view)
    read = view_array(view, np.arange(buffer.elements)).reshape(-1)
    if read.size != rows * cols or not np.array_equal(read, read[0] + np.arange(read.size)):
        return None
    return contiguous(view.buffer, (rows, cols), int(read[0]))
