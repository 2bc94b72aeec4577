"""Stage 2, typecheck: the access shape and dtype of every term, with located errors.

One rule per construct in `RULES` (keyed by the construct's name) and one per compute type
in `COMPUTE_RULES`. A rule receives the term and its arguments already typed: access
arguments as `AccessType`, shape-valued ones as tuples, numbers as numbers, names as
strings. A rule raises `Mistake(message, argument_index)`; `check_program` turns that into
`file:line:col: error: construct: message`, located at the argument when there is one.

Integer arithmetic, exactly (hardware can implement every rule; docs/language.md):
  * i8/i16/i32 values are two's complement; every sum and product wraps modulo 2^32 in the
    i32 accumulator type (`dtypes.accumulator`), as the systolic array's adders do.
  * dot-product, reduce-sum and the systolic array accumulate i8/i16/i32 in i32.
  * elementwise ops keep their dtype and wrap at its width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from glensidec.errors import GlensideError, Span
from glensidec.lang import constructs as K
from glensidec.lang.dtypes import (
    F32_MAX,
    INTEGER_NAMES,
    LOOKUP_FUNCTIONS,
    accumulator,
    integer_range,
)
from glensidec.lang.terms import ComputeOp, Program, Symbol, TensorDecl, Term, postorder

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Every access (declared, computed or a virtual view such as a cartesian product) holds at
# most MAX_ELEMENTS elements, and no dimension exceeds MAX_DIM: far beyond any network this
# accelerator runs, and small enough that sizes, offsets and cycle counts stay in int64.
MAX_ELEMENTS = 2**32
MAX_DIM = 2**31 - 1


def size_problem(full: tuple[int, ...]) -> str | None:
    """Why a shape is too large to handle, or None."""
    for dim in full:
        if dim > MAX_DIM:
            return f"dimension {dim} exceeds the limit of {MAX_DIM:,} (2^31 - 1)"
    elements = math.prod(full)
    if elements > MAX_ELEMENTS:
        return (f"shape {_dims(full)} has {elements:,} elements, more than the limit of "
                f"{MAX_ELEMENTS:,} (2^32)")
    return None


def _dims(dims: tuple[int, ...]) -> str:
    return "(" + ",".join(str(d) for d in dims) + ")"


@dataclass(frozen=True)
class AccessType:
    """An access pattern ((shape), (item)) of a dtype: a `shape` grid of `item` tensors."""

    shape: tuple[int, ...]
    item: tuple[int, ...]
    dtype: str

    @property
    def full(self) -> tuple[int, ...]:
        return self.shape + self.item

    def split_at(self, full: tuple[int, ...], access_rank: int) -> AccessType:
        return AccessType(full[:access_rank], full[access_rank:], self.dtype)

    def __str__(self) -> str:
        return f"({_dims(self.shape)},{_dims(self.item)})"


@dataclass(frozen=True)
class AccessShape:
    """The value of `(access-shape …)` / `(get-access-shape …)`."""

    shape: tuple[int, ...]
    item: tuple[int, ...]

    def __str__(self) -> str:
        return f"({_dims(self.shape)},{_dims(self.item)})"


@dataclass(frozen=True)
class LiteralValue:
    value: int | float
    dtype: str


@dataclass(frozen=True)
class TupleType:
    """The value of `(construct-tuple …)`: the types of its members."""

    members: tuple[AccessType, ...]

    def __str__(self) -> str:
        return "(tuple " + " ".join(f"{m} {m.dtype}" for m in self.members) + ")"


TypeValue = AccessType | AccessShape | LiteralValue | TupleType | tuple[int, ...]
ArgValue = TypeValue | int | float | str | ComputeOp


class Mistake(Exception):
    """A type error found by a rule, before it is given its location."""

    def __init__(self, message: str, argument: int | None = None):
        super().__init__(message)
        self.message = message
        self.argument = argument


@dataclass
class Context:
    tensors: dict[str, TensorDecl]


Rule = Callable[[Context, list[ArgValue]], TypeValue]
RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    assert name in K.CONSTRUCTS, name

    def register(function: Rule) -> Rule:
        RULES[name] = function
        return function

    return register


def _access(value: ArgValue) -> AccessType:
    assert isinstance(value, AccessType)
    return value


def _ints(value: ArgValue) -> tuple[int, ...]:
    assert isinstance(value, tuple)
    return value


def _int(value: ArgValue) -> int:
    assert isinstance(value, int)
    return value


def _axis(access: AccessType, axis: int, argument: int, inclusive: bool = False) -> None:
    limit = len(access.full) + (1 if inclusive else 0)
    if axis >= limit:
        raise Mistake(f"axis {axis} is out of range for {access} (rank {len(access.full)})",
                      argument)


def _same_dtype(left: AccessType, right: AccessType) -> None:
    if left.dtype != right.dtype:
        raise Mistake(f"dtypes {left.dtype} and {right.dtype} differ", 1)


# -- access patterns ----------------------------------------------------------------------


@rule("access-tensor")
def _access_tensor(ctx: Context, args: list[ArgValue]) -> TypeValue:
    decl = ctx.tensors[str(args[0])]
    return AccessType(decl.shape, (), decl.dtype)


@rule("access")
def _access_rule(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, axis = _access(args[0]), _int(args[1])
    _axis(access, axis, 1, inclusive=True)
    return access.split_at(access.full, axis)


@rule("access-transpose")
def _transpose(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, permutation = _access(args[0]), _ints(args[1])
    if sorted(permutation) != list(range(len(access.full))):
        raise Mistake(f"{_dims(permutation)} is not a permutation of the "
                      f"{len(access.full)} axes of {access}", 1)
    full = tuple(access.full[axis] for axis in permutation)
    return access.split_at(full, len(access.shape))


@rule("access-cartesian-product")
def _cartesian_product(ctx: Context, args: list[ArgValue]) -> TypeValue:
    left, right = _access(args[0]), _access(args[1])
    if left.item != right.item:
        raise Mistake(f"item shapes {_dims(left.item)} and {_dims(right.item)} differ", 1)
    _same_dtype(left, right)
    return AccessType(left.shape + right.shape, (2, *left.item), left.dtype)


@rule("access-pair")
def _pair(ctx: Context, args: list[ArgValue]) -> TypeValue:
    left, right = _access(args[0]), _access(args[1])
    if (left.shape, left.item) != (right.shape, right.item):
        raise Mistake(f"accesses {left} and {right} differ", 1)
    _same_dtype(left, right)
    return AccessType(left.shape, (2, *left.item), left.dtype)


@rule("access-windows")
def _windows(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, window, strides = _access(args[0]), _ints(args[1]), _ints(args[2])
    if len(window) != len(access.item):
        raise Mistake(f"window {_dims(window)} needs one dim per item axis of {access}", 1)
    if len(strides) != len(window):
        raise Mistake(f"strides {_dims(strides)} and window {_dims(window)} differ in rank", 2)
    if any(s < 1 for s in strides):
        raise Mistake(f"strides {_dims(strides)} must be positive", 2)
    if any(w < 1 or w > i for w, i in zip(window, access.item, strict=True)):
        raise Mistake(f"window {_dims(window)} does not fit in item {_dims(access.item)}", 1)
    positions = tuple((i - w) // s + 1
                      for i, w, s in zip(access.item, window, strides, strict=True))
    return AccessType(access.shape + positions, window, access.dtype)


@rule("access-squeeze")
def _squeeze(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, axis = _access(args[0]), _int(args[1])
    _axis(access, axis, 1)
    if access.full[axis] != 1:
        raise Mistake(f"axis {axis} of {access} has size {access.full[axis]}, not 1", 1)
    full = access.full[:axis] + access.full[axis + 1:]
    return access.split_at(full, len(access.shape) - (1 if axis < len(access.shape) else 0))


@rule("access-insert-axis")
def _insert_axis(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, axis = _access(args[0]), _int(args[1])
    _axis(access, axis, 1, inclusive=True)
    full = access.full[:axis] + (1,) + access.full[axis:]
    return access.split_at(full, len(access.shape) + (1 if axis <= len(access.shape) else 0))


@rule("access-broadcast")
def _broadcast(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, target = _access(args[0]), args[1]
    assert isinstance(target, AccessShape)
    target_full = target.shape + target.item
    if len(target_full) != len(access.full) or any(
            d not in (1, t) for d, t in zip(access.full, target_full, strict=True)):
        raise Mistake(f"cannot broadcast {access} to {target}", 1)
    # The operand's split is kept, as in the original (language.rs, AccessBroadcast): the
    # target gives only the full shape.
    return access.split_at(target_full, len(access.shape))


@rule("access-pad")
def _pad(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, axis, before, after = _access(args[0]), _int(args[2]), _int(args[3]), _int(args[4])
    _axis(access, axis, 2)
    full = list(access.full)
    full[axis] += before + after
    return access.split_at(tuple(full), len(access.shape))


@rule("access-slice")
def _slice(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, axis, low, high = _access(args[0]), _int(args[1]), _int(args[2]), _int(args[3])
    _axis(access, axis, 1)
    if not low < high <= access.full[axis]:
        raise Mistake(f"slice [{low}, {high}) is empty or outside axis {axis} of {access}", 2)
    full = list(access.full)
    full[axis] = high - low
    return access.split_at(tuple(full), len(access.shape))


@rule("access-concatenate")
def _concatenate(ctx: Context, args: list[ArgValue]) -> TypeValue:
    left, right, axis = _access(args[0]), _access(args[1]), _int(args[2])
    _axis(left, axis, 2)
    mismatch = len(left.shape) != len(right.shape) or len(left.full) != len(right.full) or any(
        a != b for i, (a, b) in enumerate(zip(left.full, right.full, strict=True)) if i != axis)
    if mismatch:
        raise Mistake(f"{left} and {right} differ outside axis {axis}", 1)
    _same_dtype(left, right)
    full = list(left.full)
    full[axis] += right.full[axis]
    return left.split_at(tuple(full), len(left.shape))


@rule("access-flatten")
def _flatten(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access = _access(args[0])
    shape = (math.prod(access.shape),) if access.shape else ()
    item = (math.prod(access.item),) if access.item else ()
    return AccessType(shape, item, access.dtype)


@rule("access-reshape")
def _reshape(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, target = _access(args[0]), args[1]
    assert isinstance(target, AccessShape)
    have, want = math.prod(access.full), math.prod(target.shape + target.item)
    if have != want:
        raise Mistake(f"cannot reshape {access} ({have} elements) to {target} ({want} elements)",
                      1)
    return AccessType(target.shape, target.item, access.dtype)


@rule("access-shift-right")
def _shift_right(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access = _access(args[0])
    # With no access axis it is a no-op, as in the original (saturating_sub in language.rs).
    return access.split_at(access.full, max(len(access.shape) - 1, 0))


@rule("access-move-axis")
def _move_axis(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access, source, destination = _access(args[0]), _int(args[1]), _int(args[2])
    _axis(access, source, 1)
    _axis(access, destination, 2)
    full = list(access.full)
    full.insert(destination, full.pop(source))
    return access.split_at(tuple(full), len(access.shape))


@rule("access-literal")
def _access_literal(ctx: Context, args: list[ArgValue]) -> TypeValue:
    literal = args[0]
    assert isinstance(literal, LiteralValue)
    return AccessType((), (), literal.dtype)


@rule("literal")
def _literal(ctx: Context, args: list[ArgValue]) -> TypeValue:
    value = args[0]
    assert isinstance(value, (int, float))
    dtype = str(args[1]) if len(args) > 1 else ("i32" if isinstance(value, int) else "f32")
    if dtype in INTEGER_NAMES:
        low, high = integer_range(dtype)
        if not (float(value).is_integer() and low <= value <= high):
            raise Mistake(f"{value} is not a value of {dtype}", 0)
        value = int(value)
    elif abs(value) > F32_MAX:
        raise Mistake(f"{value} is outside the range of f32", 0)
    return LiteralValue(value, dtype)


# -- compute --------------------------------------------------------------------------


ComputeRule = Callable[[ComputeOp, AccessType], AccessType]
COMPUTE_RULES: dict[str, ComputeRule] = {}


def compute_rule(*names: str) -> Callable[[ComputeRule], ComputeRule]:
    def register(function: ComputeRule) -> ComputeRule:
        for name in names:
            assert name in K.COMPUTE_TYPES, name
            COMPUTE_RULES[name] = function
        return function

    return register


@rule("compute")
def _compute(ctx: Context, args: list[ArgValue]) -> TypeValue:
    op, access = args[0], _access(args[1])
    assert isinstance(op, ComputeOp)
    return COMPUTE_RULES[op.name](op, access)


def _needs_tuple(op: ComputeOp, access: AccessType) -> None:
    if not access.item:
        raise Mistake(f"{op.name} needs items of shape (t,c…), got {access}", 1)


def _fits(value: int, dtype: str) -> bool:
    low, high = integer_range(dtype)
    return low <= value <= high


def _needs_float(op: ComputeOp, access: AccessType) -> None:
    if access.dtype != "f32":
        raise Mistake(f"{op.name} is defined on f32 only, got {access.dtype}", 1)


@compute_rule("dot-product")
def _dot_product(op: ComputeOp, access: AccessType) -> AccessType:
    _needs_tuple(op, access)
    return AccessType(access.shape, (), accumulator(access.dtype))


@compute_rule("reduce-sum")
def _reduce_sum(op: ComputeOp, access: AccessType) -> AccessType:
    return AccessType(access.shape, (), accumulator(access.dtype))


@compute_rule("reduce-max", "reduce-mean")
def _reduce_keep(op: ComputeOp, access: AccessType) -> AccessType:
    return AccessType(access.shape, (), access.dtype)


@compute_rule("relu", "negative")
def _elementwise_unary(op: ComputeOp, access: AccessType) -> AccessType:
    return access


@compute_rule("sqrt", "exp", "sigmoid", "tanh", "erf")
def _sqrt(op: ComputeOp, access: AccessType) -> AccessType:
    _needs_float(op, access)
    return access


@compute_rule("elementwise-add", "elementwise-sub", "elementwise-mul", "elementwise-div")
def _elementwise_fold(op: ComputeOp, access: AccessType) -> AccessType:
    _needs_tuple(op, access)
    return AccessType(access.shape, access.item[1:], access.dtype)


@compute_rule("softmax")
def _softmax(op: ComputeOp, access: AccessType) -> AccessType:
    _needs_float(op, access)
    if len(access.item) != 1:
        raise Mistake(f"softmax needs a one-axis item, got {access}", 1)
    return access


@compute_rule("clip")
def _clip(op: ComputeOp, access: AccessType) -> AccessType:
    low, high = op.params
    assert isinstance(low, (int, float)) and isinstance(high, (int, float))
    if low > high:
        raise Mistake(f"clip bounds [{low}, {high}] are empty", 0)
    if access.dtype in INTEGER_NAMES:
        dtype_low, dtype_high = integer_range(access.dtype)
        if not (isinstance(low, int) and isinstance(high, int)
                and dtype_low <= low and high <= dtype_high):
            raise Mistake(f"clip bounds [{low}, {high}] must be {access.dtype} integers", 0)
    elif max(abs(low), abs(high)) > F32_MAX:
        raise Mistake(f"clip bounds [{low}, {high}] are outside the range of f32", 0)
    return access


@compute_rule("cast")
def _cast(op: ComputeOp, access: AccessType) -> AccessType:
    return AccessType(access.shape, access.item, str(op.params[0]))


@compute_rule("requantize")
def _requantize(op: ComputeOp, access: AccessType) -> AccessType:
    multiplier, pre, post, zero_point = (int(p) for p in op.params)
    if access.dtype not in INTEGER_NAMES:
        raise Mistake(f"requantize takes an integer accumulator, got {access.dtype}", 1)
    if not _fits(multiplier, "i32"):
        raise Mistake(f"requantize multiplier {multiplier} does not fit in i32", 0)
    if pre > 31 or post > 62:
        raise Mistake(f"requantize shifts pre={pre} (at most 31), post={post} (at most 62)", 0)
    if not _fits(zero_point, "i8"):
        raise Mistake(f"requantize zero point {zero_point} is not an i8", 0)
    return AccessType(access.shape, access.item, "i8")


@compute_rule("lookup")
def _lookup(op: ComputeOp, access: AccessType) -> AccessType:
    function, in_scale, in_zero_point, out_scale, out_zero_point = op.params
    if str(function) not in LOOKUP_FUNCTIONS:
        raise Mistake(f"lookup has no table for '{function}' (one of "
                      f"{', '.join(LOOKUP_FUNCTIONS)})", 0)
    if access.dtype != "i8":
        raise Mistake(f"lookup takes i8 values, got {access.dtype}", 1)
    for scale in (in_scale, out_scale):
        assert isinstance(scale, (int, float))
        if not (math.isfinite(scale) and scale > 0):
            raise Mistake(f"lookup scales must be positive numbers, got {scale}", 0)
    for zero_point in (in_zero_point, out_zero_point):
        assert isinstance(zero_point, int)
        if not -128 <= zero_point <= 127:
            raise Mistake(f"lookup zero point {zero_point} is not an i8", 0)
    return access


@compute_rule("requantize-per-channel")
def _requantize_per_channel(op: ComputeOp, access: AccessType) -> AccessType:
    # Per-channel requantization: each accumulator is paired with its own multiplier (an
    # i32 tensor broadcast along the channel axis); shifts and zero point are shared.
    pre, post, zero_point = (int(p) for p in op.params)
    if access.dtype != "i32" or not access.item or access.item[0] != 2:
        raise Mistake(f"requantize-per-channel takes i32 items (2,c…) pairing accumulators "
                      f"with multipliers, got {access} {access.dtype}", 1)
    if pre > 31 or post > 62:
        raise Mistake(f"requantize-per-channel shifts pre={pre} (at most 31), post={post} "
                      f"(at most 62)", 0)
    if not _fits(zero_point, "i8"):
        raise Mistake(f"requantize-per-channel zero point {zero_point} is not an i8", 0)
    return AccessType(access.shape, access.item[1:], "i8")


# -- hardware -------------------------------------------------------------------------


@rule("accel-max-pool")
def _accel_max_pool(ctx: Context, args: list[ArgValue]) -> TypeValue:
    kernel, stride, padding = (_int(arg) for arg in args[:3])
    pooled = _access(args[3])
    if len(pooled.shape) < 2 or pooled.item or pooled.dtype != "i8":
        raise Mistake(f"pools an i8 access with two or more access axes and no item axes "
                      f"((…,H,W),()), got {pooled} {pooled.dtype}", 3)
    if kernel < 1 or stride < 1 or padding >= kernel:
        raise Mistake(f"kernel {kernel} and stride {stride} must be positive and padding "
                      f"{padding} smaller than the kernel", 0)
    height, width = (size + 2 * padding for size in pooled.shape[-2:])
    if min(height, width) < kernel:
        raise Mistake(f"a {kernel}x{kernel} window does not fit the padded {height}x{width}",
                      0)
    out = tuple((size - kernel) // stride + 1 for size in (height, width))
    return AccessType((*pooled.shape[:-2], *out), (), "i8")


@rule("accel-epilogue")
def _accel_epilogue(ctx: Context, args: list[ArgValue]) -> TypeValue:
    requantize, clip = args[0], args[1]
    assert isinstance(requantize, ComputeOp) and isinstance(clip, ComputeOp)
    accumulator = _access(args[2])
    if requantize.name != "requantize-per-channel":
        raise Mistake(f"the requantize must be (requantize-per-channel pre post zero-point), "
                      f"got {requantize.name}", 0)
    if clip.name not in ("relu", "clip"):
        raise Mistake(f"the clip must be relu or (clip low high), got {clip.name}", 1)
    for index, what in ((2, "accumulator"), (3, "bias"), (4, "multipliers")):
        operand = _access(args[index])
        if operand.dtype != "i32":
            raise Mistake(f"{what} must be i32, got {operand} {operand.dtype}", index)
        if (operand.shape, operand.item) != (accumulator.shape, accumulator.item):
            raise Mistake(f"{what} {operand} must have the accumulator's access shape "
                          f"{accumulator}", index)
    paired = AccessType(accumulator.shape, (2, *accumulator.item), "i32")
    requantized = COMPUTE_RULES[requantize.name](requantize, paired)
    try:
        return COMPUTE_RULES[clip.name](clip, requantized)
    except Mistake as mistake:  # the clip's own argument 0 is accel-epilogue's 1
        raise Mistake(mistake.message, 1) from None


def _systolic_operands(args: list[ArgValue]) -> tuple[int, int, AccessType, AccessType]:
    rows, cols = _int(args[0]), _int(args[1])
    activations, weights = _access(args[2]), _access(args[3])
    if rows < 1 or cols < 1:
        raise Mistake(f"array size {rows}x{cols} must be positive", 0)
    if len(activations.item) != 1:
        raise Mistake(f"activations must have one-axis items (N), got {activations}", 2)
    if weights.shape or len(weights.item) != 2:
        raise Mistake(f"weights must be a single (N,O) item ((),(N,O)), got {weights}", 3)
    if weights.item[0] != activations.item[0]:
        raise Mistake(f"activations {activations} and weights {weights} disagree on N", 3)
    if activations.dtype != weights.dtype:
        raise Mistake(f"dtypes {activations.dtype} and {weights.dtype} differ", 3)
    return rows, cols, activations, weights


@rule("systolic-array")
def _systolic_array(ctx: Context, args: list[ArgValue]) -> TypeValue:
    rows, cols, activations, weights = _systolic_operands(args)
    if weights.item != (rows, cols):
        raise Mistake(f"weights {weights} must be ((),({rows},{cols})) on a {rows}x{cols} array",
                      3)
    return AccessType((*activations.shape, cols), (), accumulator(activations.dtype))


@rule("systolic-array-with-blocking")
def _systolic_array_blocked(ctx: Context, args: list[ArgValue]) -> TypeValue:
    rows, cols, activations, weights = _systolic_operands(args)
    reduction, outputs = weights.item
    if reduction % rows or outputs % cols:
        raise Mistake(f"weights {weights} do not block onto a {rows}x{cols} array "
                      f"({reduction} % {rows}, {outputs} % {cols} must be 0)", 3)
    return AccessType((*activations.shape, outputs), (), accumulator(activations.dtype))


def _conv2d_blocked(layout: str, divisible: bool) -> Rule:
    """The original's systolic-array-conv2d-… rules (language.rs): no padding, output
    NCHW or NHWC; the blocked modes need C % rows == 0 and O % cols == 0."""

    def conv(ctx: Context, args: list[ArgValue]) -> TypeValue:
        rows, cols, weights, data = _int(args[0]), _int(args[1]), _access(args[2]), _access(args[3])
        kh, kw, stride_h, stride_w = (_int(a) for a in args[4:8])
        if rows < 1 or cols < 1:
            raise Mistake(f"array size {rows}x{cols} must be positive", 0)
        for index, access in ((2, weights), (3, data)):
            if len(access.full) != 4:
                raise Mistake(f"{access} must have rank 4", index)
        _same_dtype(data, weights)
        if layout == "nchw-oihw":
            (n, c, h, w), (o, wc, wkh, wkw) = data.full, weights.full
        else:
            (n, h, w, c), (wkh, wkw, wc, o) = data.full, weights.full
        if (wc, wkh, wkw) != (c, kh, kw):
            raise Mistake(f"weights {weights} do not fit data {data} with a {kh}x{kw} kernel "
                          f"({layout})", 2)
        if stride_h < 1 or stride_w < 1:
            raise Mistake(f"strides {stride_h}, {stride_w} must be positive", 6)
        if kh > h or kw > w:
            raise Mistake(f"a {kh}x{kw} kernel does not fit in {h}x{w}", 4)
        if divisible and (c % rows or o % cols):
            raise Mistake(f"{c} channels and {o} filters do not block onto a {rows}x{cols} "
                          f"array ({c} % {rows}, {o} % {cols} must be 0)", 0)
        out_h, out_w = (h - kh) // stride_h + 1, (w - kw) // stride_w + 1
        full = (n, o, out_h, out_w) if layout == "nchw-oihw" else (n, out_h, out_w, o)
        return AccessType(full, (), accumulator(data.dtype))

    return conv


for _mode in ("", "im2col-"):
    for _layout in ("nchw-oihw", "nhwc-hwio"):
        RULES[f"systolic-array-conv2d-{_mode}{_layout}-with-blocking"] = _conv2d_blocked(
            _layout, divisible=not _mode)


# -- tuples ---------------------------------------------------------------------------


@rule("construct-tuple")
def _construct_tuple(ctx: Context, args: list[ArgValue]) -> TypeValue:
    return TupleType(tuple(_access(a) for a in args))


@rule("tuple-get-item")
def _tuple_get_item(ctx: Context, args: list[ArgValue]) -> TypeValue:
    members, index = args[0], _int(args[1])
    assert isinstance(members, TupleType)
    if index >= len(members.members):
        raise Mistake(f"index {index} is out of range for a tuple of "
                      f"{len(members.members)}", 1)
    return members.members[index]


# -- shapes ---------------------------------------------------------------------------


@rule("shape")
def _shape(ctx: Context, args: list[ArgValue]) -> TypeValue:
    dims = tuple(_int(a) for a in args)
    for index, dim in enumerate(dims):
        if dim < 1:  # an empty tensor has no item to reduce and no hardware meaning
            raise Mistake(f"shape dims must be positive, got {_dims(dims)}", index)
    return dims


@rule("list")
def _list(ctx: Context, args: list[ArgValue]) -> TypeValue:
    return tuple(_int(a) for a in args)


@rule("shape-of")
def _shape_of(ctx: Context, args: list[ArgValue]) -> TypeValue:
    return ctx.tensors[str(args[0])].shape


@rule("slice-shape")
def _slice_shape(ctx: Context, args: list[ArgValue]) -> TypeValue:
    shape, start = _ints(args[0]), _int(args[1])
    if start > len(shape):
        raise Mistake(f"start {start} is past the end of {_dims(shape)}", 1)
    return shape[start:]


@rule("shape-insert-axis")
def _shape_insert_axis(ctx: Context, args: list[ArgValue]) -> TypeValue:
    shape, axis = _ints(args[0]), _int(args[1])
    if axis > len(shape):
        raise Mistake(f"axis {axis} is out of range for {_dims(shape)}", 1)
    return shape[:axis] + (1,) + shape[axis:]


@rule("shape-remove-axis")
def _shape_remove_axis(ctx: Context, args: list[ArgValue]) -> TypeValue:
    shape, axis = _ints(args[0]), _int(args[1])
    if axis >= len(shape):
        raise Mistake(f"axis {axis} is out of range for {_dims(shape)}", 1)
    return shape[:axis] + shape[axis + 1:]


@rule("access-shape")
def _access_shape(ctx: Context, args: list[ArgValue]) -> TypeValue:
    return AccessShape(_ints(args[0]), _ints(args[1]))


@rule("get-access-shape")
def _get_access_shape(ctx: Context, args: list[ArgValue]) -> TypeValue:
    access = _access(args[0])
    return AccessShape(access.shape, access.item)


# -- driver ---------------------------------------------------------------------------


TypeTable = dict[Term, TypeValue]


def _argument_value(arg: object, types: TypeTable) -> ArgValue:
    if isinstance(arg, Term):
        return types[arg]
    if isinstance(arg, Symbol):
        return arg.name
    assert isinstance(arg, (int, float, ComputeOp))
    return arg


def infer(root: Term, tensors: dict[str, TensorDecl], types: TypeTable | None = None,
          repeated: dict[Term, list[Span]] | None = None) -> TypeTable:
    """Type every subterm of `root` (extending `types`); raises a located GlensideError.
    The error names the term's first place in the text; `repeated`: its other places."""
    types = {} if types is None else types
    ctx = Context(tensors)
    # typed terms are not walked again: the importer types each node's new term against
    # everything typed before it, and walking the whole program each time was quadratic
    # (swin_t: 2,500 nodes, 92 % of its import)
    for term in postorder(root, types):
        args = [_argument_value(arg, types) for arg in term.args]
        try:
            types[term] = RULES[term.op](ctx, args)
            result = types[term]
            if isinstance(result, AccessType):
                problem = size_problem(result.full)
                if problem:
                    raise Mistake(problem)
        except Mistake as mistake:
            span = term.arg_span(mistake.argument) if mistake.argument is not None else term.span
            # the first place may be a `let` nothing reads (one that is not checked)
            again = (repeated or {}).get(term, [])
            also = f" (written again at {', '.join(map(str, again))})" if again else ""
            raise GlensideError(f"{term.op}: {mistake.message}{also}", span) from None
    return types


def check_program(program: Program) -> TypeTable:
    """Type a whole program; errors name the program's file."""
    try:
        types = infer(program.root, program.tensors, repeated=program.repeated)
    except GlensideError as error:
        raise error.located(program.path) from None
    if program.output_quantization is not None:
        result = types[program.root]
        if not (isinstance(result, AccessType) and result.dtype == "i8"):
            raise GlensideError(f"quantized-output describes an i8 result; this program's "
                                f"result is {describe_value(result)}",
                                program.output_quantization.span, program.path)
    return types


def access_type(types: TypeTable, term: object) -> AccessType:
    """The type of an access-valued term (one whose construct makes an access)."""
    assert isinstance(term, Term), term
    value = types[term]
    assert isinstance(value, AccessType), (term.op, value)
    return value


def infer_access(term: Term, tensors: dict[str, TensorDecl], types: TypeTable) -> AccessType:
    """Type `term` (extending `types`) and return its access type: for stages that build
    new terms and need the type of each as they go."""
    infer(term, tensors, types)
    return access_type(types, term)


def root_type(program: Program, types: TypeTable) -> AccessType:
    return access_type(types, program.root)



def describe_value(value: TypeValue) -> str:
    """What `glensidec check` prints for a result: an access's type, or the value itself
    for results known while type checking (shapes), `(tuple …)` for tuples."""
    if isinstance(value, AccessType):
        return f"{value} {value.dtype}"
    if isinstance(value, LiteralValue):
        return f"(literal) {value.dtype}"
    if isinstance(value, AccessShape):
        return f"(access-shape (shape{_words(value.shape)}) (shape{_words(value.item)}))"
    if isinstance(value, TupleType):
        return str(value)
    return f"(shape{_words(value)})"


def _words(dims: tuple[int, ...]) -> str:
    return "".join(f" {d}" for d in dims)


def require_access_result(program: Program, types: TypeTable, command: str) -> AccessType:
    """The result's access type; a located error if `command` cannot take this result."""
    result = types[program.root]
    if not isinstance(result, AccessType):
        kind = K.CONSTRUCTS[program.root.op].result
        raise GlensideError(f"{command} needs an access-valued result; this program's result "
                            f"is a {kind}: {describe_value(result)}",
                            program.root.span, program.path)
    return result
