"""Residual adds in the accelerator's epilogue: the host loop after a layer, folded into it.

A quantized residual add (the quantizer's `add_dynamic`, TFLite's way) reads two int8
tensors, the layer's result y and the skip connection r, and computes

    clip(requantize(y·a + r·b + c))        (i32 products and sums, scalars a, b, c)

and a quantized product of two activations (a GELU's x·Φ(x), its two factors two
layers' results) computes clip(requantize(y·r)), which the residual stage computes too
(`ResidualConfig.product`).

After `fuse_accel_layers` and `fuse_elementwise` it is one `Fused` loop reading y (or
the NCHW copy the layer's result is transposed into) and r. This pass (`compile --accel`)
recognises such a loop by evaluating its steps symbolically — every value a linear form
a·y + b·r + c of the two run-time leaves, then one requantize with a scalar multiplier,
then clips — and gives the loop's work to the layer: ws_epilogue's residual stage
(`hardware.accel.ResidualConfig`) does exactly that arithmetic on each row as it leaves,
reading r's rows through the scratchpad (`commands.conv_program` with a residual). The
layer then writes the loop's destination; r is read in the layer's (M, N) layout: the
other layer's result before its transpose when r is one, else a host copy made for it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    clip_range,
    drop_dead_code,
    layer_geometry,
    layer_quant,
    scalar_value,
)
from glensidec.backend.lower import (
    AccelLayer,
    Copy,
    Fused,
    LoweredProgram,
    Map,
    Step,
)
from glensidec.backend.views import Group, View, contiguous, transpose, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ResidualConfig
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array, wrap_signed


@dataclass(frozen=True)
class Linear:
    """coefficients[leaf]·leaf + constant, modulo 2^32 (an i32 value of the loop)."""

    coefficients: tuple[tuple[int, int], ...]  # (run-time leaf, coefficient)
    constant: int

    def plus(self, other: Linear, sign: int = 1) -> Linear:
        merged = dict(self.coefficients)
        for leaf, coefficient in other.coefficients:
            merged[leaf] = merged.get(leaf, 0) + sign * coefficient
        return Linear(tuple((leaf, int(wrap_signed(value, 32))) for leaf, value
                             in sorted(merged.items())),
                       int(wrap_signed(self.constant + sign * other.constant, 32)))

    def times(self, factor: int) -> Linear:
        return Linear(tuple((leaf, int(wrap_signed(value * factor, 32)))
                             for leaf, value in self.coefficients),
                       int(wrap_signed(self.constant * factor, 32)))


@dataclass(frozen=True)
class _Requantized:
    """clip(requantize(linear)) to int8."""

    linear: Linear
    multiplier: int
    pre: int
    post: int
    zero_point: int
    low: int = -128
    high: int = 127
    product: bool = False  # linear is y + r: the value requantized is y·r instead


@dataclass(frozen=True)
class _Product:
    """y·r of two run-time int8 leaves (each cast to i32): a GELU's x·Φ(x)."""

    leaves: tuple[int, int]


FormValue = int | Linear | _Product | _Requantized  # an int: a scalar constant


def residual_form(fused: Fused, values: list[FormValue]) -> _Requantized | None:
    """The loop's result as clip(requantize(a·y + b·r + c)) of its run-time leaves, or
    clip(requantize(y·r)), or None when a step is anything else (`values`: a scalar or a
    leaf's Linear each)."""
    results: list[FormValue] = []

    def operand(index: int) -> FormValue:
        return values[index] if index >= 0 else results[-index - 1]

    for step in fused.steps:
        name = step.name
        args = [operand(index) for index in step.operands]
        result: FormValue | None = None
        if name == "cast" and step.dtype == "i32" and isinstance(args[0], int | Linear):
            result = args[0]
        elif name in ("elementwise-add", "elementwise-sub", "elementwise-mul") and \
                step.dtype == "i32" and len(args) == 2:
            result = _fold(name, args[0], args[1])
        elif name == "requantize" and step.dtype == "i8" and isinstance(args[0], _Product):
            assert not isinstance(step.op, str)
            multiplier, pre, post, zero_point = (int(value) for value in step.op.params)
            both = Linear(tuple((leaf, 1) for leaf in args[0].leaves), 0)
            result = _Requantized(both, multiplier, pre, post, zero_point, product=True)
        elif name == "requantize" and step.dtype == "i8" and isinstance(args[0], Linear):
            assert not isinstance(step.op, str)
            multiplier, pre, post, zero_point = (int(value) for value in step.op.params)
            result = _Requantized(args[0], multiplier, pre, post, zero_point)
        elif name == "requantize-per-channel" and isinstance(args[0], Linear) and \
                isinstance(args[1], int):
            pre, post, zero_point = step.params
            result = _Requantized(args[0], args[1], pre, post, zero_point)
        elif name in ("relu", "clip") and isinstance(args[0], _Requantized):
            assert not isinstance(step.op, str)
            low, high = clip_range(step.op)
            low, high = max(args[0].low, low), min(args[0].high, high)
            result = replace(args[0], low=low, high=high) if low <= high else None
        if result is None:
            return None
        results.append(result)
    final = results[-1] if results else None
    return final if isinstance(final, _Requantized) else None


def _fold(name: str, left: FormValue, right: FormValue) -> FormValue | None:
    if isinstance(left, _Requantized | _Product) or isinstance(right, _Requantized | _Product):
        return None
    if isinstance(left, int) and isinstance(right, int):
        return None  # constants only: the loop would not be a residual add
    if name == "elementwise-mul":
        if isinstance(left, int) and isinstance(right, Linear):
            return right.times(left)
        if isinstance(right, int) and isinstance(left, Linear):
            return left.times(right)
        if isinstance(left, Linear) and isinstance(right, Linear):
            return _product(left, right)
        return None
    sign = 1 if name == "elementwise-add" else -1
    as_linear = [value if isinstance(value, Linear) else Linear((), value)
                 for value in (left, right)]
    return as_linear[0].plus(as_linear[1], sign)


def _product(left: Linear, right: Linear) -> _Product | None:
    """y·r when each side is one run-time leaf itself (cast, unscaled), the two distinct;
    else None (any other product of run-time values stays on the host)."""
    sides = [value.coefficients for value in (left, right)]
    if left.constant or right.constant or any(len(side) != 1 or side[0][1] != 1
                                              for side in sides):
        return None
    first, second = sides[0][0][0], sides[1][0][0]
    return _Product((first, second)) if first != second else None


@dataclass(frozen=True)
class _Found:
    """A residual add the layer at `layer_index` can take."""

    fused_index: int
    layer_index: int
    copy_index: int | None  # the copy transposing the layer's result into y, if any
    residual: View  # r as the layer's (M, N) rows (a new buffer when `copy_residual`)
    copy_residual: Copy | None  # the host copy that makes it, if needed
    form: _Requantized
    y_leaf: int
    r_leaf: int


def fuse_accel_residuals(lowered: LoweredProgram, weights: dict[str, Array],
                         accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every residual add after an accelerator layer done by its epilogue
    (a new program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        instruction = result.instructions[index]
        found = _find(result, index, weights) if isinstance(instruction, Fused) else None
        if found is None and isinstance(instruction, Fused):
            # r·m may come from a loop of its own (a pre-norm transformer's residual
            # stream, cast and scaled once for its LayerNorm and its add): computed again
            # inside this loop, the add reads r itself
            inlined = _with_scaled_leaf_inlined(result, index, weights)
            if inlined is not None:
                result.instructions[index] = inlined
                found = _find(result, index, weights)
                if found is None:
                    result.instructions[index] = instruction
        requantize = None
        if found is None and isinstance(instruction, Fused):
            # an i32 loop requantized by the next instruction in another order (ConvNeXt's
            # stage-end add, requantized after its permutation back to NHWC): one loop in
            # the requantize's order, which may read both layers' rows as they are
            merged = _requantized_in_its_order(result, index)
            if merged is not None:
                requantize = result.instructions[index + 1]
                result.instructions[index:index + 2] = [merged]
                found = _find(result, index, weights)
        if found is not None and _rewrite(result, found, weights, accel):
            index = found.layer_index  # the loop is gone; look again after the layer
        elif requantize is not None:
            result.instructions[index:index + 1] = [instruction, requantize]
        elif found is not None:
            result.instructions[index] = instruction
        index += 1
    drop_dead_code(result)
    return result


def _with_scaled_leaf_inlined(lowered: LoweredProgram, index: int,
                              weights: dict[str, Array]) -> Fused | None:
    """The loop at `index` with its one i32 leaf that another loop alone writes as
    cast(r)·m or cast(r) (r int8, m a compile-time scalar; the same view, whole) computed
    inside it instead: the same integers, read from r. None when it has no such leaf."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    for leaf, view in enumerate(fused.leaves):
        writers = lowered.writers().get(view.buffer, [])
        producer = lowered.instructions[writers[0]] if len(writers) == 1 else None
        if isinstance(producer, Map) and producer.op.name == "cast":  # a loop of one step
            producer = Fused(producer.note, producer.dst, (producer.src,),
                             (Step(producer.op, (0,), lowered.buffer_of(producer.dst).dtype),))
        if not isinstance(producer, Fused) or producer.dst != view or \
                lowered.buffer_of(view).dtype != "i32" or \
                producer.dst.shape != fused.dst.shape or not lowered.is_whole(view):
            continue
        steps = [step.name for step in producer.steps]
        if steps == ["cast"]:  # widened once for an integer LayerNorm and the add
            if len(producer.leaves) == 1 and lowered.buffer_of(producer.leaves[0]).dtype == "i8":
                return _inline(fused, leaf, producer)
            continue
        scales = [position for position, source in enumerate(producer.leaves)
                  if scalar_value(lowered, source, weights, writers[0]) is not None]
        if steps != ["cast", "elementwise-mul"] or len(producer.leaves) != 2 or \
                len(scales) != 1 or lowered.buffer_of(producer.leaves[1 - scales[0]]).dtype != "i8":
            continue
        return _inline(fused, leaf, producer)
    return None


def _requantized_in_its_order(lowered: LoweredProgram, index: int) -> Fused | None:
    """The i32 loop at `index` and the requantize after it as one loop, when that
    requantize alone reads the loop's whole result, its axes permuted: the loop's steps
    then the requantize, over the leaves read in the requantize's order (element-wise
    steps commute with the permutation); else None."""
    fused = lowered.instructions[index]
    following = lowered.instructions[index + 1] if index + 1 < len(lowered.instructions) \
        else None
    assert isinstance(fused, Fused)
    if not (isinstance(following, Map) and following.op.name == "requantize" and
            following.src.buffer == fused.dst.buffer and fused.steps[-1].dtype == "i32" and
            lowered.is_whole(fused.dst) and following.src.offset == fused.dst.offset and
            lowered.readers().get(fused.dst.buffer) == [index + 1] and
            lowered.writers().get(fused.dst.buffer) == [index]):
        return None
    permutation = _permutation(fused.dst.dims, following.src.dims)
    if permutation is None or any(len(leaf.dims) != len(permutation) for leaf in fused.leaves):
        return None
    requantize = Step(following.op, (-len(fused.steps),),
                      lowered.buffer_of(following.dst).dtype)
    return Fused(following.note, following.dst,
                 tuple(transpose(leaf, permutation) for leaf in fused.leaves),
                 (*fused.steps, requantize))


def _permutation(dims: tuple[Group, ...], permuted: tuple[Group, ...]
                 ) -> list[int] | None:
    """The order of `dims` that `permuted` is (each position once), or None."""
    unused = list(range(len(dims)))
    order = []
    for group in permuted:
        match = next((position for position in unused if dims[position] == group), None)
        if match is None:
            return None
        unused.remove(match)
        order.append(match)
    return order if not unused else None


def _inline(fused: Fused, leaf: int, producer: Fused) -> Fused:
    """`fused` with leaf `leaf` replaced by `producer`'s steps over its leaves."""
    kept = [view for position, view in enumerate(fused.leaves) if position != leaf]
    base, first = len(kept), len(producer.steps)

    def producer_operand(operand: int) -> int:
        return operand + base if operand >= 0 else operand

    def consumer_operand(operand: int) -> int:
        if operand == leaf:
            return -first  # the producer's last step
        if operand >= 0:
            return operand - (operand > leaf)
        return operand - first

    steps = [replace(step, operands=tuple(map(producer_operand, step.operands)))
             for step in producer.steps]
    steps += [replace(step, operands=tuple(map(consumer_operand, step.operands)))
              for step in fused.steps]
    return replace(fused, leaves=(*kept, *producer.leaves), steps=tuple(steps))


def _producer(lowered: LoweredProgram, view: View, pooling: bool = True
              ) -> tuple[int, int | None] | None:
    """(layer index, transposing copy index or None) when `view`'s buffer is an accelerator
    layer's result, directly or through the one copy that transposes it; with `pooling`
    False, not a pooling layer's (as the layer taking an add: ws_accel applies no residual
    to pooled rows, whose window reads hold the scratchpad port the residual stage reads)."""
    writers = lowered.writers().get(view.buffer, [])
    if len(writers) != 1:
        return None
    writer = lowered.instructions[writers[0]]
    if isinstance(writer, AccelLayer):
        return (writers[0], None) if pooling or not writer.pool else None
    if not isinstance(writer, Copy):
        return None
    sources = lowered.writers().get(writer.src.buffer, [])
    if len(sources) != 1 or lowered.readers().get(writer.src.buffer) != [writers[0]]:
        return None
    source = lowered.instructions[sources[0]]
    if isinstance(source, AccelLayer) and (pooling or not source.pool):
        return sources[0], writers[0]
    return None


def two_int8_form(lowered: LoweredProgram, index: int, weights: dict[str, Array]
                  ) -> tuple[_Requantized, list[int]] | None:
    """The residual form of the fused loop at `index` when exactly two of its leaves are
    run-time int8 tensors (the rest constants) and its linear part reads both: the form
    and those two leaves."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    values: list[FormValue] = []
    runtime: list[int] = []
    for leaf, view in enumerate(fused.leaves):
        scalar = scalar_value(lowered, view, weights, index)
        if scalar is not None:
            values.append(scalar)
        else:
            values.append(Linear(((leaf, 1),), 0))
            runtime.append(leaf)
    if len(runtime) != 2 or any(lowered.buffer_of(fused.leaves[leaf]).dtype != "i8"
                                for leaf in runtime):
        return None
    form = residual_form(fused, values)
    if form is None or {leaf for leaf, _ in form.linear.coefficients} != set(runtime):
        return None
    return form, runtime


def _find(lowered: LoweredProgram, index: int, weights: dict[str, Array]) -> _Found | None:
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    pair = two_int8_form(lowered, index, weights)
    if pair is None:
        return None
    form, runtime = pair
    destination = lowered.buffer_of(fused.dst)
    if destination.dtype != "i8" or not lowered.is_whole(fused.dst) or \
            lowered.writers().get(fused.dst.buffer) != [index]:
        return None
    # y: the later layer's result (the other one is then ready when this layer runs)
    candidates = []
    for y_leaf in runtime:
        produced = _producer(lowered, fused.leaves[y_leaf], pooling=False)
        if produced is not None:
            candidates.append((produced[0], y_leaf, produced[1]))
    for layer_index, y_leaf, copy_index in sorted(candidates, reverse=True):
        r_leaf = runtime[0] if runtime[1] == y_leaf else runtime[1]
        found = _residual_rows(lowered, index, layer_index, copy_index, y_leaf, r_leaf)
        if found is not None:
            residual, copy = found
            return _Found(index, layer_index, copy_index, residual, copy, form, y_leaf, r_leaf)
        rows = _rows_in_order(lowered, index, layer_index, y_leaf, r_leaf)
        if rows is not None:  # the layer writes the loop's result (y's copy goes dead)
            return _Found(index, layer_index, None, rows, None, form, y_leaf, r_leaf)
    return None


def _layer_positions(lowered: LoweredProgram, view: View, before: int
                     ) -> tuple[int, np.ndarray] | None:
    """(layer index, positions) when only copies of one accelerator layer's rows make what
    `view` reads before instruction `before`: per element of the view (row-major), its
    index in the layer's (M, N) rows; else None."""
    # (here, not at the top: accel_pool reads this module's residual forms)
    from glensidec.backend.accel_pool import PADDING, trace_layer_rows
    found = trace_layer_rows(lowered, view.buffer, before)
    if found is None:
        return None
    layer_index, origin, _ = found
    layer = lowered.instructions[layer_index]
    positions = view_array(view, origin).reshape(-1)
    if not isinstance(layer, AccelLayer) or layer.output_pitch or \
            bool(np.any(positions == PADDING)):
        return None
    return layer_index, positions


def _earlier_rows_alike(lowered: LoweredProgram, index: int, layer_index: int,
                        y_positions: np.ndarray, r_view: View) -> View | None:
    """The rows of an accelerator layer before the one at `layer_index` when r's elements
    are that layer's rows at `y_positions` (the positions of y's elements in its layer's
    rows: r then is in the layer's row order as it is); else None."""
    layer = lowered.instructions[layer_index]
    assert isinstance(layer, AccelLayer)
    traced = _layer_positions(lowered, r_view, index)
    if traced is None or traced[0] >= layer_index or \
            not np.array_equal(traced[1], y_positions):
        return None
    source = lowered.instructions[traced[0]]
    assert isinstance(source, AccelLayer)
    if source.m * source.n != layer.m * layer.n:
        return None
    return contiguous(source.dst.buffer, (layer.m, layer.n), source.dst.offset)


def _rows_in_order(lowered: LoweredProgram, index: int, layer_index: int, y_leaf: int,
                   r_leaf: int) -> View | None:
    """r's rows when the loop at `index` walks the layer's rows in their order, through
    the copy that transposes them (a loop requantized in the other layout), writes its
    whole result in that order, and reads r as an earlier layer's rows in the same order:
    the layer then writes the loop's result itself; else None."""
    fused = lowered.instructions[index]
    layer = lowered.instructions[layer_index]
    assert isinstance(fused, Fused) and isinstance(layer, AccelLayer)
    y_view = fused.leaves[y_leaf]
    if not lowered.is_whole(fused.dst) or lowered.buffer_of(fused.dst).elements != \
            layer.m * layer.n or lowered.readers().get(y_view.buffer) != [index]:
        return None
    traced = _layer_positions(lowered, y_view, index)
    in_order = np.arange(layer.m * layer.n)
    if traced is None or traced[0] != layer_index or not np.array_equal(traced[1], in_order):
        return None
    return _earlier_rows_alike(lowered, index, layer_index, in_order, fused.leaves[r_leaf])


def _residual_rows(lowered: LoweredProgram, index: int, layer_index: int,
                   copy_index: int | None, y_leaf: int, r_leaf: int
                   ) -> tuple[View, Copy | None] | None:
    """r in the layer's (M, N) row layout, and the host copy that makes it (None: r or
    another layer's result already is), when the loop can move into the layer."""
    fused = lowered.instructions[index]
    layer = lowered.instructions[layer_index]
    assert isinstance(fused, Fused) and isinstance(layer, AccelLayer)
    y_view, r_view = fused.leaves[y_leaf], fused.leaves[r_leaf]
    y_buffer, r_buffer = lowered.buffer_of(y_view), lowered.buffer_of(r_view)
    same_walk = y_view.dims == r_view.dims and y_view.offset == r_view.offset
    if not (same_walk and lowered.is_whole(y_view) and lowered.is_whole(r_view)
            and y_buffer.elements == r_buffer.elements == layer.m * layer.n
            and lowered.readers().get(y_view.buffer) == [index]
            and y_view.shape == fused.dst.shape):
        return None
    # r must be complete when the layer runs (written before it, never after)
    if any(writer >= layer_index for writer in lowered.writers().get(r_view.buffer, [])):
        return None
    if copy_index is None:  # y is the layer's (M, N) result: r has the same layout
        return contiguous(r_view.buffer, (layer.m, layer.n)), None
    transposing = lowered.instructions[copy_index]
    assert isinstance(transposing, Copy)
    produced = _producer(lowered, r_view)
    if produced is not None and produced[1] is not None:
        other = lowered.instructions[produced[1]]
        assert isinstance(other, Copy)
        if _renamed(other.dst, transposing.dst) and _renamed(other.src, transposing.src) and \
                lowered.buffer_of(other.src).elements == layer.m * layer.n:
            return contiguous(other.src.buffer, (layer.m, layer.n)), None
    traced = _layer_positions(lowered, y_view, index)
    if traced is not None and traced[0] == layer_index:
        # r: an earlier layer's rows, copied in the same order as y's (a block's input,
        # a LayerNorm's rows in NCHW): the layer reads those rows themselves
        rows_alike = _earlier_rows_alike(lowered, index, layer_index, traced[1], r_view)
        if rows_alike is not None:
            return rows_alike, None
    builder = LayerBuilder(lowered)
    rows = builder.activation(f"{layer.name}_residual", (layer.m, layer.n))
    copy = Copy(f"{fused.note}: the residual in the accelerator layer's rows",
                replace(transposing.src, buffer=rows.buffer),
                replace(transposing.dst, buffer=r_view.buffer))
    return rows, copy


def _renamed(view: View, other: View) -> bool:
    """The same walk over another buffer."""
    return view.dims == other.dims and view.offset == other.offset


def _rewrite(lowered: LoweredProgram, found: _Found, weights: dict[str, Array],
             accel: AccelConfig) -> bool:
    """Move the loop into the layer; False (nothing changed) when the layer's tiles with
    the residual rows do not fit the scratchpad."""
    layer = lowered.instructions[found.layer_index]
    fused = lowered.instructions[found.fused_index]
    assert isinstance(layer, AccelLayer) and isinstance(fused, Fused)
    form = found.form
    coefficients = dict(form.linear.coefficients)
    added = ResidualConfig(
        self_multiplier=coefficients[found.y_leaf], multiplier=coefficients[found.r_leaf],
        offset=form.linear.constant, requantize_multiplier=form.multiplier, pre=form.pre,
        post=form.post, zero_point=form.zero_point, low=form.low, high=form.high)
    if form.product:  # y·r: neither row scaled, no offset
        added = replace(added, self_multiplier=0, multiplier=0, offset=0, product=True)
    builder = LayerBuilder(lowered)
    name = fused.dst.buffer
    try:
        check_fits(accel, layer_geometry(layer),
                   replace(layer_quant(lowered, layer, weights), residual=added))
    except GlensideError:
        return False
    instructions = lowered.instructions
    if found.copy_index is None:
        dst = fused.dst
    else:  # the layer writes new rows; the copy transposes them into the loop's result
        dst = builder.activation(f"{name}_transposed", (layer.m, layer.n))
        transposing = instructions[found.copy_index]
        assert isinstance(transposing, Copy)
        instructions[found.copy_index] = replace(
            transposing, dst=replace(transposing.dst, buffer=name),
            src=replace(transposing.src, buffer=dst.buffer))
    instructions[found.layer_index] = replace(
        layer, note=fused.note, dst=dst, name=name, residual=found.residual,
        residual_add=added)
    del instructions[found.fused_index]
    if found.copy_residual is not None:
        instructions.insert(found.layer_index, found.copy_residual)
    return True

