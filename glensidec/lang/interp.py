"""The reference interpreter: numpy semantics for every construct, the ground truth.

Every stage after this one (rewriting, C, RTL) is checked against what this module computes.
A value is the full tensor (`AccessType.full` shaped) of its term; how it is split into
access and item axes comes from the type table. One function per construct in `IMPLS` and one
per compute type in `COMPUTE_IMPLS`, keyed by name like the type rules.

Integer results are exact (two's complement, wrapping as typecheck.py documents). f32 sums of
products are formed in f64 and rounded once to f32, so the reference is at least as accurate
as any f32 implementation it is compared with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from glensidec.lang import constructs as K
from glensidec.lang.dtypes import DTYPES, Array, integer_range, lookup_table, requantize, wrap
from glensidec.lang.terms import ComputeOp, Program, Term, compute_name, postorder
from glensidec.lang.typecheck import (
    AccessShape,
    AccessType,
    ArgValue,
    LiteralValue,
    TupleType,
    TypeTable,
    access_type,
    check_program,
)


@dataclass
class Call:
    """One construct application: argument values (arrays for accesses) and types."""

    values: list[Any]
    types: list[ArgValue]
    result: AccessType

    def access_type(self, index: int) -> AccessType:
        value = self.types[index]
        assert isinstance(value, AccessType)
        return value


Impl = Callable[[Call], Array]
IMPLS: dict[str, Impl] = {}


def impl(name: str) -> Callable[[Impl], Impl]:
    assert name in K.CONSTRUCTS, name

    def register(function: Impl) -> Impl:
        IMPLS[name] = function
        return function

    return register


def _item_axes(access: AccessType) -> tuple[int, ...]:
    return tuple(range(len(access.shape), len(access.full)))


# -- matrix products ------------------------------------------------------------------


def matmul(left: Array, right: Array, dtype: str) -> Array:
    """left (…, K) times right (K, N), accumulated as `dtype`'s dot product is.

    i8/i16 products summed in f64 are exact (|sum| < 2^53 for any realistic K), so BLAS
    gives the exact integer; i32 operands use int64, whose wrap-around is harmless modulo
    2^32. The result is wrapped into the i32 accumulator.
    """
    if dtype == "f32":
        return (left.astype(np.float64) @ right.astype(np.float64)).astype(np.float32)
    bound = int(DTYPES[dtype].low) ** 2 * max(left.shape[-1], 1)
    if DTYPES[dtype].bits <= 16 and bound < 2 ** 53:
        exact = left.astype(np.float64) @ right.astype(np.float64)
        return wrap(exact.astype(np.int64), "i32")
    return wrap(left.astype(np.int64) @ right.astype(np.int64), "i32")


def array_matmul_f32(left: Array, right: Array, rows: int, bias: Array | None = None) -> Array:
    """left (…, K) times right (K, N) in binary32 exactly as a `rows`-row systolic array sums.

    Every multiply and add is one float32 operation rounded to nearest even, in the array's
    order: per K fold of `rows` indices a column starts from `bias` (first fold) or +0 and
    adds the products one by one, then +0 for padding rows of a partial fold (a -0 sum
    becomes +0, as in the zero-padded PEs); the first fold's sums are kept, each later
    fold's are added to them (fold + kept). glensidec.hardware.array.reference_gemm_f32,
    the generated C and the RTL (`ws_top` with FP = 1) compute the same bits.
    """
    lead = left.shape[:-1]
    a = left.reshape(-1, left.shape[-1]).astype(np.float32)
    b = right.astype(np.float32)
    K = a.shape[1]
    total = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    with np.errstate(all="ignore"):
        for k0 in range(0, K, rows):
            column = np.zeros_like(total)
            if k0 == 0 and bias is not None:
                column = np.array(bias, dtype=np.float32).reshape(total.shape)
            for k in range(k0, min(k0 + rows, K)):
                column = column + a[:, k:k + 1] * b[k:k + 1, :]
            if K - k0 < rows:
                column = column + np.float32(0.0)
            total = column if k0 == 0 else column + total
    return total.reshape(*lead, b.shape[1])


def _dot_of_cartesian_product(left: Array, right: Array, left_type: AccessType,
                              right_type: AccessType) -> Array:
    """dot-product over a cartesian product of two items: one matrix product."""
    item_size = math.prod(left_type.item)
    left_rows = left.reshape(math.prod(left_type.shape), item_size)
    right_rows = right.reshape(math.prod(right_type.shape), item_size)
    product = matmul(left_rows, right_rows.T, left_type.dtype)
    return product.reshape(left_type.shape + right_type.shape)


# -- access patterns ------------------------------------------------------------------


@impl("access-tensor")
def _access_tensor(call: Call) -> Array:
    return np.asarray(call.values[0])


@impl("access")
def _access(call: Call) -> Array:
    return np.asarray(call.values[0])


@impl("access-reshape")
def _reshape(call: Call) -> Array:
    return np.reshape(call.values[0], call.result.full)


IMPLS["access-flatten"] = _reshape
IMPLS["access-shift-right"] = _reshape


@impl("access-transpose")
def _transpose(call: Call) -> Array:
    return np.transpose(call.values[0], call.values[1])


@impl("access-cartesian-product")
def _cartesian_product(call: Call) -> Array:
    left, right = call.values
    left_type, right_type = call.access_type(0), call.access_type(1)
    a_rank, b_rank = len(left_type.shape), len(right_type.shape)
    item = left_type.item
    left_view = left.reshape(left_type.shape + (1,) * b_rank + item)
    right_view = right.reshape((1,) * a_rank + right_type.shape + item)
    grid = left_type.shape + right_type.shape + item
    return np.stack([np.broadcast_to(left_view, grid), np.broadcast_to(right_view, grid)],
                    axis=a_rank + b_rank)


@impl("access-pair")
def _pair(call: Call) -> Array:
    return np.stack(call.values, axis=len(call.access_type(0).shape))


@impl("access-windows")
def _windows(call: Call) -> Array:
    data, window, strides = call.values
    access = call.access_type(0)
    item_axes = _item_axes(access)
    views = np.lib.stride_tricks.sliding_window_view(data, tuple(window), axis=item_axes)
    step = tuple(slice(None) for _ in access.shape) + tuple(slice(None, None, s) for s in strides)
    windows: Array = views[step]
    return windows


@impl("access-squeeze")
def _squeeze(call: Call) -> Array:
    squeezed: Array = np.squeeze(call.values[0], axis=call.values[1])
    return squeezed


@impl("access-insert-axis")
def _insert_axis(call: Call) -> Array:
    return np.expand_dims(call.values[0], axis=call.values[1])


@impl("access-broadcast")
def _broadcast(call: Call) -> Array:
    target = call.values[1]
    assert isinstance(target, AccessShape)
    return np.broadcast_to(call.values[0], target.shape + target.item)


def minimum_value(dtype: str) -> float | int:
    """What min-padding pads with: the dtype's lowest finite value, as the original's
    `DataType::min_value()` (f32::MIN = -3.4028235e38 for f32, not -inf)."""
    return DTYPES[dtype].low


@impl("access-pad")
def _pad(call: Call) -> Array:
    data, pad_type, axis, before, after = call.values
    access = call.access_type(0)
    widths = [(0, 0)] * len(access.full)
    widths[axis] = (before, after)
    fill = 0 if pad_type == "zero-padding" else minimum_value(access.dtype)
    return np.pad(data, widths, constant_values=fill)


@impl("access-slice")
def _slice(call: Call) -> Array:
    data, axis, low, high = call.values
    index = [slice(None)] * data.ndim
    index[axis] = slice(low, high)
    return np.asarray(data[tuple(index)])


@impl("access-concatenate")
def _concatenate(call: Call) -> Array:
    return np.concatenate([call.values[0], call.values[1]], axis=call.values[2])


@impl("access-move-axis")
def _move_axis(call: Call) -> Array:
    return np.asarray(np.moveaxis(call.values[0], call.values[1], call.values[2]))


@impl("access-literal")
def _access_literal(call: Call) -> Array:
    literal = call.values[0]
    assert isinstance(literal, LiteralValue)
    return np.array(literal.value, dtype=DTYPES[literal.dtype].numpy)


# -- compute --------------------------------------------------------------------------


ComputeImpl = Callable[[ComputeOp, Array, AccessType, AccessType], Array]
COMPUTE_IMPLS: dict[str, ComputeImpl] = {}


def compute_impl(*names: str) -> Callable[[ComputeImpl], ComputeImpl]:
    def register(function: ComputeImpl) -> ComputeImpl:
        for name in names:
            assert name in K.COMPUTE_TYPES, name
            COMPUTE_IMPLS[name] = function
        return function

    return register


@impl("compute")
def _compute(call: Call) -> Array:
    op = call.values[0]
    assert isinstance(op, ComputeOp)
    return COMPUTE_IMPLS[op.name](op, call.values[1], call.access_type(1), call.result)


def _wide(data: Array, dtype: str) -> Array:
    """Values in a type wide enough that the operation itself cannot overflow."""
    return data.astype(np.float64 if dtype == "f32" else np.int64)


@compute_impl("dot-product")
def _dot_product(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    tuple_axis = len(access.shape)
    products = np.prod(_wide(data, access.dtype), axis=tuple_axis)
    sums = products.sum(axis=tuple(range(tuple_axis, products.ndim)))
    return wrap(sums, result.dtype)


@compute_impl("reduce-sum")
def _reduce_sum(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    return wrap(_wide(data, access.dtype).sum(axis=_item_axes(access)), result.dtype)


@compute_impl("reduce-max")
def _reduce_max(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    if not access.item:
        return data
    return np.asarray(data.max(axis=_item_axes(access)))


@compute_impl("reduce-mean")
def _reduce_mean(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    count = math.prod(access.item)
    if access.dtype == "f32":
        return wrap(_wide(data, "f32").sum(axis=_item_axes(access)) / count, "f32")
    # Integers: the exact sum, divided with rounding half away from zero.
    sums = _wide(data, access.dtype).sum(axis=_item_axes(access))
    magnitude = (np.abs(sums) + count // 2) // count
    return wrap(np.sign(sums) * magnitude, result.dtype)


@compute_impl("relu")
def _relu(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    return np.maximum(data, np.zeros((), dtype=data.dtype))


@compute_impl("negative")
def _negative(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    return wrap(-_wide(data, access.dtype), access.dtype)


@compute_impl("sqrt")
def _sqrt(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    with np.errstate(invalid="ignore"):  # sqrt of a negative is NaN, as in C
        return np.sqrt(data)


# The transcendental functions in f32, as C's expf/tanhf/erff compute them: the interpreter
# evaluates in f64 and rounds once, so it and C agree to an ulp or two (not bit for bit).
@compute_impl("exp")
def _exp(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    with np.errstate(over="ignore"):
        return np.exp(data.astype(np.float64)).astype(np.float32)


@compute_impl("lookup")
def _lookup(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    function, in_scale, in_zero_point, out_scale, out_zero_point = op.params
    table = lookup_table(str(function), float(in_scale), int(in_zero_point), float(out_scale),
                         int(out_zero_point))
    return table[data.astype(np.int64) + 128]


@compute_impl("sigmoid")
def _sigmoid(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-data.astype(np.float64)))).astype(np.float32)


@compute_impl("tanh")
def _tanh(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    return np.tanh(data.astype(np.float64)).astype(np.float32)


_ERF = np.frompyfunc(math.erf, 1, 1)  # numpy has no erf; math.erf is C's erf in f64


@compute_impl("erf")
def _erf(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    return np.asarray(_ERF(data.astype(np.float64)), dtype=np.float64).astype(np.float32)


def _divide(numerator: Array, denominator: Array, dtype: str) -> Array:
    if dtype == "f32":
        with np.errstate(divide="ignore", invalid="ignore"):
            return numerator / denominator
    # C semantics: truncate toward zero; x / 0 is defined as 0.
    safe = np.where(denominator == 0, 1, denominator)
    quotient = np.abs(numerator) // np.abs(safe) * np.sign(numerator) * np.sign(safe)
    return np.where(denominator == 0, 0, quotient)


_FOLDS: dict[str, Callable[[Array, Array, str], Array]] = {
    "elementwise-add": lambda a, b, dtype: a + b,
    "elementwise-sub": lambda a, b, dtype: a - b,
    "elementwise-mul": lambda a, b, dtype: a * b,
    "elementwise-div": _divide,
}


@compute_impl(*_FOLDS)
def _elementwise(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    # Each step rounds (floats) or wraps (ints) to the dtype, as C computing in that type does.
    members = np.moveaxis(data, len(access.shape), 0)
    folded = members[0]
    for member in members[1:]:
        step = _FOLDS[op.name](_wide(folded, access.dtype), _wide(member, access.dtype),
                               access.dtype)
        folded = wrap(step, access.dtype)
    return np.asarray(folded)


@compute_impl("softmax")
def _softmax(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    wide = _wide(data, "f32")
    exponent = np.exp(wide - wide.max(axis=-1, keepdims=True))
    return wrap(exponent / exponent.sum(axis=-1, keepdims=True), "f32")


@compute_impl("clip")
def _clip(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    low, high = op.params
    return np.clip(data, low, high).astype(data.dtype)


def saturate(data: Array, source: str, target: str) -> Array:
    """Convert with saturation: floats round half to even, NaN becomes 0."""
    if target == "f32":
        return wrap(data, "f32")
    low, high = integer_range(target)
    if source == "f32":
        rounded = np.rint(np.nan_to_num(data.astype(np.float64), nan=0.0))
        return wrap(np.clip(rounded, low, high).astype(np.int64), target)
    return wrap(np.clip(data.astype(np.int64), low, high), target)


@compute_impl("cast")
def _cast(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    return saturate(data, access.dtype, result.dtype)


@compute_impl("requantize")
def _requantize(op: ComputeOp, data: Array, access: AccessType, result: AccessType) -> Array:
    multiplier, pre, post, zero_point = (int(p) for p in op.params)
    return requantize(data, multiplier, pre, post, zero_point)


@compute_impl("requantize-per-channel")
def _requantize_per_channel(op: ComputeOp, data: Array, access: AccessType,
                            result: AccessType) -> Array:
    pre, post, zero_point = (int(p) for p in op.params)
    members = np.moveaxis(data, len(access.shape), 0)
    return requantize(members[0], members[1], pre, post, zero_point)


# -- hardware -------------------------------------------------------------------------


@impl("accel-max-pool")
def _accel_max_pool(call: Call) -> Array:
    kernel, stride, padding, data = call.values
    widths = [(0, 0)] * (data.ndim - 2) + [(padding, padding)] * 2
    padded = np.pad(data, widths, constant_values=minimum_value(call.access_type(3).dtype))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kernel, kernel), axis=(-2, -1))
    return np.asarray(windows[..., ::stride, ::stride, :, :].max(axis=(-2, -1)))


@impl("accel-epilogue")
def _accel_epilogue(call: Call) -> Array:
    requantize_op, clip_op = call.values[0], call.values[1]
    assert isinstance(requantize_op, ComputeOp) and isinstance(clip_op, ComputeOp)
    accumulator, bias, multipliers = call.values[2:5]
    biased = wrap(_wide(accumulator, "i32") + _wide(bias, "i32"), "i32")  # i32 wraps, as C
    pre, post, zero_point = (int(p) for p in requantize_op.params)
    requantized = requantize(biased, multipliers, pre, post, zero_point)
    return COMPUTE_IMPLS[clip_op.name](clip_op, requantized, call.result, call.result)


@impl("systolic-array")
def _systolic_array(call: Call) -> Array:
    activations, weights = call.values[2], call.values[3]
    if call.access_type(2).dtype == "f32":  # the binary32 array's own summation order
        return array_matmul_f32(activations, weights, call.values[0])
    return matmul(activations, weights, call.access_type(2).dtype)


IMPLS["systolic-array-with-blocking"] = _systolic_array


def conv2d_im2col(data: Array, weights: Array, layout: str, kernel: tuple[int, int],
                  strides: tuple[int, int]) -> tuple[Array, Array]:
    """The im2col matrix ((N,H',W'),(K)) and the weights as (K,O) of an unpadded conv2d, the
    K axis ordered as the layout stores a filter (c,kh,kw for OIHW, kh,kw,c for HWIO)."""
    if layout == "nchw-oihw":
        data = np.moveaxis(data, 1, 3)  # NHWC, windows below then come out (c, kh, kw)
    windows = np.lib.stride_tricks.sliding_window_view(data, kernel, axis=(1, 2))
    windows = windows[:, ::strides[0], ::strides[1]]  # (N,H',W',C,kh,kw)
    if layout == "nhwc-hwio":
        windows = np.moveaxis(windows, 3, 5)  # (N,H',W',kh,kw,C)
    columns = windows.reshape(*windows.shape[:3], -1)
    outputs = weights.shape[0] if layout == "nchw-oihw" else weights.shape[3]
    matrix = (weights.reshape(outputs, -1).T if layout == "nchw-oihw"
              else weights.reshape(-1, outputs))
    return columns, matrix


def _conv2d_blocked(layout: str) -> Impl:
    def conv(call: Call) -> Array:
        weights, data = call.values[2], call.values[3]
        kh, kw, stride_h, stride_w = call.values[4:8]
        columns, matrix = conv2d_im2col(data, weights, layout, (kh, kw), (stride_h, stride_w))
        dtype = call.access_type(3).dtype
        product = (array_matmul_f32(columns, matrix, call.values[0]) if dtype == "f32"
                   else matmul(columns, matrix, dtype))  # (N,H',W',O)
        return product if layout == "nhwc-hwio" else np.moveaxis(product, 3, 1)

    return conv


for _mode in ("", "im2col-"):
    for _layout in ("nchw-oihw", "nhwc-hwio"):
        IMPLS[f"systolic-array-conv2d-{_mode}{_layout}-with-blocking"] = _conv2d_blocked(_layout)


@impl("tuple-get-item")
def _tuple_get_item(call: Call) -> Array:
    members, index = call.values
    return np.asarray(members[index])


# -- driver ---------------------------------------------------------------------------


def _lazy_products(root: Term) -> set[Term]:
    """Cartesian products and pairs only ever consumed by dot-product: never materialise
    them (a batched product's pair of broadcast operands is B·M·N·2·K elements; its
    dot-product takes them a slab at a time)."""
    consumers: dict[Term, list[Term]] = {}
    for term in postorder(root):
        for child in term.children():
            consumers.setdefault(child, []).append(term)
    return {
        term for term, users in consumers.items()
        if term.op in ("access-cartesian-product", "access-pair")
        and all(compute_name(user) == "dot-product" for user in users)
    }


#: The most elements of a pair (both members) one slab of a lazy pair's dot-product
#: stacks at once.
PAIR_SLAB_ELEMENTS = 1 << 20


def _dot_of_pair(op: ComputeOp, left: Array, right: Array, access: AccessType,
                 result: AccessType) -> Array:
    """dot-product over access-pair(left, right), a slab of the pair's first axis at a
    time: each slab is what `_dot_product` computes on the stacked pair, element for
    element (the same products summed over the same items in the same order), without
    stacking (and widening) the whole pair, which broadcast operands make B·M·N·2·K."""
    axis = len(access.shape)
    if not axis:
        return _dot_product(op, np.stack([left, right]), access, result)
    per_row = 2 * max(1, math.prod(left.shape[1:]))
    step = max(1, PAIR_SLAB_ELEMENTS // per_row)
    parts = [_dot_product(op, np.stack([left[start:start + step], right[start:start + step]],
                                       axis=axis), access, result)
             for start in range(0, left.shape[0], step)]
    return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


def evaluate_all(root: Term, types: TypeTable, tensors: dict[str, Array],
                 given: dict[Term, Array] | None = None,
                 visit: Callable[[Term, Array], None] | None = None) -> dict[Term, Array]:
    """The value of every access subterm of `root`, given every tensor it names.

    `given` terms take the value given instead of being computed (the quantizer replays a
    layer on chosen inputs); `visit(term, value)` sees each computed value (profiling).
    """
    given = given or {}
    values: dict[Term, Array] = {}
    lazy = _lazy_products(root)
    for term in postorder(root):
        if K.CONSTRUCTS[term.op].result != K.ACCESS or term in lazy:
            continue
        if term in given:
            values[term] = given[term]
            continue
        values[term] = apply_term(term, types, values, tensors, lazy)
        if visit is not None:
            visit(term, values[term])
    return values


def apply_term(term: Term, types: TypeTable, values: dict[Term, Array],
               tensors: dict[str, Array], lazy: Set[Term] = frozenset()) -> Array:
    """One construct applied to its arguments' values (`values` holds the access ones);
    `lazy` cartesian products were never materialised and are fused into their dot-product.

    f32 is IEEE arithmetic, as in the generated C and the frameworks: inf − inf and 0·inf
    are NaN, an overflow is inf, silently (softmax of a row holding inf is NaN, not a
    RuntimeWarning); integers never reach numpy's checks (they wrap in int64, x/0 is 0)."""
    with np.errstate(all="ignore"):
        return _apply_term(term, types, values, tensors, lazy)


def _apply_term(term: Term, types: TypeTable, values: dict[Term, Array],
                tensors: dict[str, Array], lazy: Set[Term]) -> Array:
    result = access_type(types, term)
    product = term.args[1] if term.op == "compute" else None
    if isinstance(product, Term) and product in lazy and product.op == "access-pair":
        left, right = product.children()
        return _dot_of_pair(term.args[0], values[left], values[right],  # type: ignore[arg-type]
                            access_type(types, product), result)
    if isinstance(product, Term) and product in lazy:
        left, right = product.children()
        return _dot_of_cartesian_product(values[left], values[right], access_type(types, left),
                                         access_type(types, right))
    call_values: list[Any] = []
    for arg in term.args:
        if isinstance(arg, Term):
            kind = K.CONSTRUCTS[arg.op].result
            if kind == K.TUPLE:  # a tuple's value is its members' values
                call_values.append([values[member] for member in arg.children()])
                continue
            call_values.append(values[arg] if kind == K.ACCESS else types[arg])
        elif term.op == "access-tensor":
            call_values.append(tensors[str(arg)])
        else:
            call_values.append(arg if isinstance(arg, (int, float, ComputeOp)) else str(arg))
    arg_types = [types[a] if isinstance(a, Term) else a for a in term.args]
    value = IMPLS[term.op](Call(call_values, arg_types, result))  # type: ignore[arg-type]
    assert value.shape == result.full, (term.op, value.shape, result.full)
    return value


def evaluate(root: Term, types: TypeTable, tensors: dict[str, Array]) -> Array:
    """The value of `root`, given every tensor it names."""
    root_type = access_type(types, root)
    value = evaluate_all(root, types, tensors)[root]
    # ascontiguousarray would turn a scalar result into shape (1,): keep the typed shape.
    return np.ascontiguousarray(value).reshape(root_type.full)


def evaluate_result(program: Program, tensors: dict[str, Array], types: TypeTable
                    ) -> Array | tuple[Array, ...] | None:
    """The value of any result: an array (accesses, literals), one per member (tuples), or
    None for results that are known from the types alone (shapes)."""
    result = types[program.root]
    if isinstance(result, AccessType):
        return evaluate(program.root, types, tensors)
    if isinstance(result, LiteralValue):
        return np.array(result.value, dtype=DTYPES[result.dtype].numpy)
    if isinstance(result, TupleType):
        values = evaluate_all(program.root, types, tensors)
        return tuple(np.ascontiguousarray(values[member]) for member in program.root.children())
    return None


def run_program(program: Program, tensors: dict[str, Array],
                types: TypeTable | None = None) -> Array:
    """Run a whole program on its inputs and weights (validated by glensidec.lang.data)."""
    types = check_program(program) if types is None else types
    return evaluate(program.root, types, tensors)
