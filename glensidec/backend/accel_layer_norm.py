"""LayerNorm's normalisation on the accelerator: the epilogue's per-row mode.

The quantizer writes a LayerNorm of an int8 tensor q (`frontends/quant_layer_norm.py`) as
per-row statistics — two sums of each row, its deviation σ and a reciprocal of it, one
value per row — and one element-wise pass over q: e = m − 128·q (m the row's mean ×128),
t = e·h + trunc(e·l / 2^L) (h and l the reciprocal's whole part and fraction), then
LayerNorm's scale and bias as a per-column bias and requantize, and clips. Lowered, that
pass is two host loops over every element: the one that writes e, and the one that reads
it twice and writes the int8 result.

ws_epilogue's per-row mode computes exactly that (docs/hardware.md, "Per-row offset and
reciprocal"): a depthwise 1×1 layer multiplies q by −128 on the array, and each row's
residual row carries m (the offset) and p = l·2^16 + h, which turn the sums into t before
the per-column bias, multipliers and clip. So the two loops become that layer, and the
host only packs each row's (m, p) at the start of every N block of the residual rows the
layer reads (a copy and a loop of rows × blocks values). A loop that ends at t, its
requantize a host instruction of its own reading t through a view (ConvNeXt's LayerNorm2d
with scale 1 and bias 0: permuted back to NCHW), is the layer with that requantize, and
the requantize a copy of the layer's rows through the same view; so is a loop whose t
several equal requantizes read, each a part of it (Swin's shifted blocks: the cyclic
shift's slices), each then a copy of its part of the rows. A loop of any other
shape, or on an array narrower than the 8 bytes the values take, stays on the host.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    clip_range,
    drop_dead_code,
    evaluate_buffer,
)
from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    Buffer,
    Copy,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    Step,
)
from glensidec.backend.views import Axis, View, contiguous, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import (
    ROW_VALUE_BYTES,
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

#: The quantizer's mean fraction: e = m − 128·q, so q times −128 on the array.
MEAN_FRACTION = 128
#: p = l·2^16 + h packs the reciprocal's two halves into one i32.
HALF = 1 << 16


@dataclass(frozen=True)
class _Normalisation:
    """The two loops as the layer's parts: the int8 rows q (M, C), the per-row vectors
    (each (M,), i32) and the epilogue after t."""

    centring: int  # the loop that writes e
    x: View
    mean: View
    whole: View
    part: View
    shift: int
    bias: tuple[int, ...]
    multiplier: tuple[int, ...]
    epilogue: EpilogueConfig
    # the host requantizes that read t (when the loop ends at t, ConvNeXt's LayerNorm2d:
    # its requantize reads t through the permutation back to NCHW; Swin's shifted blocks:
    # one per slice of the cyclic shift); () when the loop requantizes itself
    requantize: tuple[int, ...] = ()


def fuse_layer_norms(lowered: LoweredProgram, weights: dict[str, Array],
                     accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every LayerNorm normalisation loop on an accelerator layer in the
    epilogue's per-row mode (a new program; unchanged on arrays of fewer than 8 columns)."""
    def rewrite_at(result: LoweredProgram, index: int) -> int:
        found = _find(result, index, weights)
        return 0 if found is None else _rewrite(result, index, found, accel)

    return rewrite_per_row_loops(lowered, accel, rewrite_at)


def rewrite_per_row_loops(lowered: LoweredProgram, accel: AccelConfig,
                          rewrite_at: Callable[[LoweredProgram, int], int]) -> LoweredProgram:
    """A copy of `lowered` in which `rewrite_at(copy, index)` has been tried on every fused
    loop in turn; it returns the number of instructions it added (0 when it changed
    nothing). Unchanged on arrays whose rows cannot hold a row's per-row values (fewer
    than 8 bytes, or not a multiple of 4 columns), where the epilogue has no per-row mode."""
    if accel.cols < ROW_VALUE_BYTES or accel.cols % 4:
        return lowered
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        if isinstance(result.instructions[index], Fused):
            index += rewrite_at(result, index)
        index += 1
    drop_dead_code(result)
    return result


def per_row_vector(lowered: LoweredProgram, view: View, rows: int, columns: int
                   ) -> View | None:
    """The (rows,) vector an i32 run-time leaf reads, one value per row broadcast along
    it, as a contiguous view; else None (LayerNorm's means and reciprocals, softmax's
    reciprocals of Σe: the per-row mode's values)."""
    buffer = lowered.buffer_of(view)
    if buffer.kind != ACTIVATION or buffer.dtype != "i32":
        return None
    read = view_array(view, np.arange(buffer.elements)).reshape(rows, columns)
    first = int(read[0, 0])
    if not np.array_equal(read, np.broadcast_to(first + np.arange(rows)[:, None], read.shape)):
        return None
    return contiguous(view.buffer, (rows,), first)


def _rows(lowered: LoweredProgram, view: View, rows: int, columns: int) -> View | None:
    """`view` as (rows, columns) contiguous row-major elements of its buffer, or None."""
    buffer = lowered.buffer_of(view)
    read = view_array(view, np.arange(buffer.elements)).reshape(rows, columns)
    first = int(read[0, 0])
    if not np.array_equal(read, first + np.arange(rows * columns).reshape(rows, columns)):
        return None
    return contiguous(view.buffer, (rows, columns), first)


def _constant(lowered: LoweredProgram, view: View, weights: dict[str, Array], index: int,
              rows: int, columns: int) -> Array | None:
    """A compile-time leaf's values as (rows, columns), or None for a run-time one."""
    flat = evaluate_buffer(lowered, view.buffer, weights, index)
    return None if flat is None else view_array(view, flat).reshape(rows, columns)


def _per_column(values: Array) -> Array | None:
    return values[0] if np.all(values == values[:1]) else None


def _uniform(values: Array) -> int | None:
    return int(values.flat[0]) if np.all(values == values.flat[0]) else None


@dataclass(frozen=True)
class _Value:
    """A leaf's or step's value in the second loop: its kind ("e", "row", "const", "e·row",
    "e·row/2^L", "t", "t+b", "y") and what the layer needs of it."""

    kind: str
    vector: View | None = None  # "row", "e·row", "e·row/2^L": the per-row vector
    values: Array | None = None  # "const": (rows, columns); "y": the column multipliers
    shift: int = 0  # "e·row/2^L", "t": L
    whole: View | None = None  # "t": h's vector, and `vector` l's
    epilogue: EpilogueConfig | None = None  # "y"


def _find(lowered: LoweredProgram, index: int, weights: dict[str, Array]
          ) -> _Normalisation | None:
    """The loop at `index` as the normalisation's second loop (reading e), with its first
    loop (writing e) before it; else None."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    shape = fused.dst.shape
    if not shape or lowered.buffer_of(fused.dst).dtype not in ("i8", "i32"):
        return None  # (i32: t, which a requantize after the loop reads)
    columns = shape[-1]
    rows = int(np.prod(shape[:-1]))
    values: list[_Value] = []
    centring: int | None = None
    for leaf in fused.leaves:
        constant = _constant(lowered, leaf, weights, index, rows, columns)
        if constant is not None:
            values.append(_Value("const", values=constant))
            continue
        vector = per_row_vector(lowered, leaf, rows, columns)
        writers = lowered.writers().get(leaf.buffer, [])
        if vector is not None:
            values.append(_Value("row", vector))
        elif lowered.buffer_of(leaf).dtype == "i32" and lowered.is_whole(leaf) and \
                leaf.shape == shape and len(writers) == 1 and writers[0] < index and \
                lowered.readers().get(leaf.buffer) == [index] and \
                centring in (None, writers[0]):
            centring = writers[0]
            values.append(_Value("e"))
        else:
            return None
    steps: list[_Value] = []
    bias = np.zeros(columns, np.int64)
    t: _Value | None = None
    for step in fused.steps:
        value = _step(step, [values[i] if i >= 0 else steps[-i - 1] for i in step.operands],
                      columns)
        if value is None:
            return None
        if value.kind == "t":
            t = value
        if value.kind == "t+b" and value.values is not None:
            bias = value.values
        steps.append(value)
    result = steps[-1] if steps else None
    requantize: tuple[int, ...] = ()
    if result is not None and result.kind in ("t", "t+b"):
        after = _requantize_after(lowered, index, result, columns)
        if after is None:
            return None
        requantize, result = after
    if t is None or result is None or result.kind != "y" or centring is None:
        return None
    centred = _centring(lowered, centring, weights, rows, columns)
    if centred is None:
        return None
    assert t.whole is not None and t.vector is not None and result.values is not None
    assert result.epilogue is not None
    return _Normalisation(centring, centred[0], centred[1], t.whole, t.vector, t.shift,
                          tuple(int(v) for v in bias),
                          tuple(int(v) for v in result.values), result.epilogue, requantize)


def _requantize_after(lowered: LoweredProgram, index: int, t: _Value, columns: int
                      ) -> tuple[tuple[int, ...], _Value] | None:
    """(their indices, y) when the loop at `index` writes t (or t plus a bias) whole and
    row-major, and its readers are equal requantizes to i8 that together read each of its
    elements once, through any views (LayerNorm2d's permutation back to NCHW, a cyclic
    shift's slices); else None."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    readers = lowered.readers().get(fused.dst.buffer, [])
    if not readers or not lowered.is_whole(fused.dst):
        return None
    followers = [lowered.instructions[reader] for reader in readers]
    elements = lowered.buffer_of(fused.dst).elements
    first = followers[0]
    if not all(isinstance(follower, Map) and follower.op == first.op and  # type: ignore
               follower.op.name == "requantize" and
               lowered.buffer_of(follower.dst).dtype == "i8" and
               follower.src.buffer == fused.dst.buffer for follower in followers):
        return None
    if len(followers) > 1:  # (one reader of all of t: a permutation, read once)
        read = np.concatenate([view_array(follower.src, np.arange(elements)).reshape(-1)
                               for follower in followers if isinstance(follower, Map)])
        if read.size != elements or np.unique(read).size != elements:
            return None
    elif math.prod(first.src.shape) != elements:  # type: ignore[attr-defined]
        return None
    assert isinstance(first, Map)
    y = _step(Step(first.op, (0,), "i8"), [t], columns)
    return None if y is None else (tuple(readers), y)


def _step(step: Step, args: list[_Value], columns: int) -> _Value | None:
    """A step of the second loop on its operands' values, or None when it is not the
    normalisation's (see _Value)."""
    name = step.name
    kinds = sorted(arg.kind for arg in args)
    first = args[0] if args else _Value("")

    def of(kind: str) -> _Value:
        return next(arg for arg in args if arg.kind == kind)

    if name == "elementwise-mul" and kinds == ["e", "row"]:
        return _Value("e·row", of("row").vector)
    if name == "elementwise-div" and [arg.kind for arg in args] == ["e·row", "const"]:
        assert args[1].values is not None
        divisor = _uniform(args[1].values)
        if divisor is None or divisor <= 0 or divisor & (divisor - 1) or divisor >= 1 << 31:
            return None
        return _Value("e·row/2^L", first.vector, shift=divisor.bit_length() - 1)
    if name == "elementwise-add" and kinds == ["e·row", "e·row/2^L"]:
        part = of("e·row/2^L")
        return _Value("t", part.vector, shift=part.shift, whole=of("e·row").vector)
    if name == "elementwise-add" and kinds == ["const", "t"]:
        assert of("const").values is not None
        bias = _per_column(of("const").values)  # type: ignore[arg-type]
        return None if bias is None else _Value("t+b", values=bias.astype(np.int64))
    if name in ("requantize", "requantize-per-channel") and first.kind in ("t", "t+b") and \
            step.dtype == "i8":
        if name == "requantize":
            assert not isinstance(step.op, str) and len(args) == 1
            multiplier, pre, post, zero_point = (int(v) for v in step.op.params)
            return _Value("y", values=np.full(columns, multiplier, np.int64),
                          epilogue=EpilogueConfig(pre, post, zero_point))
        pre, post, zero_point = (int(v) for v in step.params)
        found = None
        if len(args) == 2 and args[1].kind == "const" and args[1].values is not None:
            found = _per_column(args[1].values)
        return None if found is None else _Value(
            "y", values=found.astype(np.int64), epilogue=EpilogueConfig(pre, post, zero_point))
    if name in ("relu", "clip") and [arg.kind for arg in args] == ["y"]:
        assert not isinstance(step.op, str) and first.epilogue is not None
        low, high = clip_range(step.op)
        config = first.epilogue
        low, high = max(config.low, low), min(config.high, high)
        return None if low > high else _Value("y", values=first.values, epilogue=EpilogueConfig(
            config.pre, config.post, config.zero_point, low, high))
    return None


def _centring(lowered: LoweredProgram, index: int, weights: dict[str, Array], rows: int,
              columns: int) -> tuple[View, View] | None:
    """(q's rows, m) when the loop at `index` is e = m − 128·cast(q) of an int8 q, whole
    and row-major, and a per-row m; else None."""
    fused = lowered.instructions[index]
    if not isinstance(fused, Fused) or not lowered.is_whole(fused.dst):
        return None
    x: View | None = None
    mean: View | None = None
    kinds: list[str] = []
    for leaf in fused.leaves:
        constant = _constant(lowered, leaf, weights, index, rows, columns)
        if constant is not None:
            kinds.append("128" if _uniform(constant) == MEAN_FRACTION else "const")
            continue
        vector = per_row_vector(lowered, leaf, rows, columns)
        if vector is not None and mean is None:
            mean = vector
            kinds.append("m")
        elif lowered.buffer_of(leaf).dtype == "i8" and x is None:
            x = _rows(lowered, leaf, rows, columns)
            kinds.append("q")
        elif x is None and (widened := _widened(lowered, leaf, index)) is not None:
            x = _rows(lowered, widened, rows, columns)  # cast(q), shared with Σq²'s loop
            kinds.append("wide")
        else:
            return None
    steps: list[str] = []
    for step in fused.steps:
        name = step.name
        args = [kinds[position] if position >= 0 else steps[-position - 1]
                for position in step.operands]
        if name == "cast" and args == ["q"] and step.dtype == "i32":
            steps.append("wide")
        elif name == "elementwise-mul" and sorted(args) == ["128", "wide"]:
            steps.append("wide·128")
        elif name == "elementwise-sub" and args == ["m", "wide·128"]:
            steps.append("e")
        else:
            return None
    if steps[-1:] != ["e"] or x is None or mean is None:
        return None
    return x, mean


def _widened(lowered: LoweredProgram, leaf: View, before: int) -> View | None:
    """q's view when `leaf` reads all of a buffer that one host cast of an int8 q to i32
    writes before `before` (the same elements, as `leaf` reads them); else None."""
    writers = lowered.writers().get(leaf.buffer, [])
    cast = lowered.instructions[writers[0]] if len(writers) == 1 else None
    if not (isinstance(cast, Map) and cast.op.name == "cast" and writers[0] < before and
            lowered.buffer_of(cast.dst).dtype == "i32" and
            lowered.buffer_of(cast.src).dtype == "i8" and lowered.is_whole(cast.dst) and
            cast.dst.shape == leaf.shape):
        return None
    # element i of the leaf is element j of the cast's dst: read the same j of its src
    dst = view_array(cast.dst, np.arange(lowered.buffer_of(cast.dst).elements))
    src = view_array(cast.src, np.arange(lowered.buffer_of(cast.src).elements))
    at = np.empty(lowered.buffer_of(cast.dst).elements, np.int64)
    at[dst.reshape(-1)] = src.reshape(-1)
    read = at[view_array(leaf, np.arange(lowered.buffer_of(leaf).elements)).reshape(-1)]
    first = int(read[0])
    if not np.array_equal(read, first + np.arange(read.size)):
        return None
    return contiguous(cast.src.buffer, leaf.shape, first)


def _rewrite(lowered: LoweredProgram, index: int, found: _Normalisation,
             accel: AccelConfig) -> int:
    """The loop at `index` becomes the per-row values' packing and the layer (and a copy
    of its rows into the loop's destination when that is not row-major): the number of
    instructions added; 0 (nothing changed) when the layer does not fit."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    rows, columns = found.x.shape
    if not holds_row_values(columns, accel.cols):
        return 0  # the host normalises: the rows cannot carry their values
    name = fused.dst.buffer
    geometry = ConvLayer(name, rows, 1, columns, columns, groups=columns)
    added = ResidualConfig(rows=True, pre=found.shift)
    quant = LayerQuant(found.epilogue, found.bias, found.multiplier, residual=added)
    try:
        check_fits(accel, geometry, quant)
    except GlensideError:
        return 0  # the host normalises
    builder = LayerBuilder(lowered)
    # the per-row values: (m, l·2^16 + h) at the start of every block of COLS columns
    values_name = builder.name(f"{name}_row_values")
    lowered.buffers[values_name] = Buffer(values_name, "i32", (rows, columns // 4), ACTIVATION)
    blocks = -(-columns // accel.cols)
    placed = ((Axis(rows, columns // 4),), (Axis(blocks, accel.cols // 4),))
    spread = ((Axis(rows, 1),), (Axis(blocks, 0),))
    factor = builder.constant(f"{name}_row_half", "i32", np.array([HALF], np.int64))
    pack = [Copy(f"{fused.note}: each row's mean, the offset of its N blocks",
                 View(values_name, 0, placed), View(found.mean.buffer, found.mean.offset, spread)),
            Fused(f"{fused.note}: each row's reciprocal l·2^16 + h, for its N blocks",
                  View(values_name, 1, placed),
                  (View(found.part.buffer, found.part.offset, spread),
                   View(factor.buffer, 0, ((Axis(rows, 0),), (Axis(blocks, 0),))),
                   View(found.whole.buffer, found.whole.offset, spread)),
                  (Step("elementwise-mul", (0, 1), "i32"),
                   Step("elementwise-add", (-1, 2), "i32")))]
    direct = _rows(lowered, fused.dst, rows, columns) \
        if lowered.is_whole(fused.dst) and not found.requantize else None
    out = direct if direct is not None else builder.activation(f"{name}_rows", (rows, columns))
    bias = builder.constant(f"{name}_bias", "i32", np.array(found.bias, np.int64))
    weights = builder.constant(f"{name}_weights", "i8",
                               depthwise_weight_matrix(geometry, accel.cols, -MEAN_FRACTION))
    layer = AccelLayer(
        f"{fused.note}: each row normalised in the epilogue's per-row mode", out, name=name,
        a=found.x, b=weights, bias=bias, multiplier=builder.constant(f"{name}_multiplier", "i32",
                                               np.array(found.multiplier, np.int64)),
        commands=builder.commands_placeholder(name), m=rows, k=weights.shape[0], n=columns,
        pre=found.epilogue.pre, post=found.epilogue.post,
        zero_point=found.epilogue.zero_point, low=found.epilogue.low,
        high=found.epilogue.high, image=(rows, 1, columns), kernel=1, stride=1,
        groups=columns, group_cols=accel.cols,
        residual=contiguous(values_name, (rows, columns // 4)), residual_add=added)
    replacement: list[Instruction] = [*pack, layer]
    for position in found.requantize:  # each reader reads the rows through its view
        requantize = lowered.instructions[position]
        assert isinstance(requantize, Map)
        lowered.instructions[position] = Copy(
            f"{requantize.note}: the accelerator's normalised rows", requantize.dst,
            View(out.buffer, requantize.src.offset, requantize.src.dims))
    if direct is None and not found.requantize:
        replacement.append(Copy(f"{fused.note}: the accelerator's rows", fused.dst,
                                contiguous(out.buffer, fused.dst.shape)))
    lowered.instructions[index:index + 1] = replacement
    return len(replacement) - 1
