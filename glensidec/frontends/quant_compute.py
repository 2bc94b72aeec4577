"""The quantizer's compute translators: the integer form of every compute kind, one function
per kind in COMPUTE_TRANSLATORS (the table `Quantizer.compute` dispatches on), each
taking the quantizer `q` whose state (weights, names, profile) it adds to."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from glensidec.frontends import builders as B
from glensidec.frontends.qparams import (
    QParams,
    activation_params,
    weight_scales,
)
from glensidec.frontends.quant_layer_norm import integer_layer_norm, layer_norm_parts
from glensidec.frontends.quant_values import (
    DATA_MOVEMENT,
    FINE_CONSTANTS,
    FINE_SUM,
    Q8,
    Acc,
    Array,
    Const,
    Host,
    Pair,
    Unsupported,
    Value,
    apply_chain,
    no_raw_zeros,
    substitute,
)
from glensidec.lang import constructs as K
from glensidec.lang.interp import apply_term, evaluate_all
from glensidec.lang.terms import (
    ComputeOp,
    TensorDecl,
    Term,
    compute_name,
    postorder,
)
from glensidec.lang.typecheck import infer

if TYPE_CHECKING:
    from glensidec.frontends.quantize import Quantizer

# A mean is an i32 sum of its operand's steps (|q| ≤ 128 each) only while 128·N stays below this.
MEAN_SUM_LIMIT = 2 ** 31


# Integer divisions (x / y of activations, LayerNorm's) scale the numerator by this
# first: 16 fractional bits, and |x| ≤ 255 keeps the numerator below 2^24.
DIVISION_SHIFT = 1 << 16

# softmax's e = exp(d) in SOFTMAX_LEVELS steps of (0, 1] at zero point 0 (integer_softmax).
SOFTMAX_LEVELS = 127
# softmax·V divided after the product (deferred_softmax_product): each row's reciprocal
# 2^(RECIPROCAL_BITS + ROW_SHIFT) / Σe = 2^30 / Σe as h·2^ROW_SHIFT + l, so h < 2^15
# (Σe ≥ 127) and a·l < 2^31 for rows of up to 260 keys (|a| ≤ 127·Σe ≤ 127²·keys).
RECIPROCAL_BITS = 21
ROW_SHIFT = 9


def on_integers(q: Quantizer, term: Term, operand: Value,
                translate: Callable[[Q8], Value]) -> Value:
    """`translate` an i8 operand; a host (float) operand stays on the host."""
    if isinstance(operand, Host):
        return Host(q.rebuild(term, operand.term), term)
    if isinstance(operand, Acc):
        operand = q.materialize(operand, operand.origin)
    assert isinstance(operand, Q8)
    return translate(operand)


def keep_scale(q: Quantizer, term: Term, operand: Q8) -> Value:
    """reduce-max: the same op on the integers, with the same parameters."""
    no_raw_zeros(operand)
    new = q.rebuild(term, operand.term)
    return Q8(new, operand.params, new)


def lookup(q: Quantizer, term: Term, op: ComputeOp, operand: Q8) -> Value:
    """A non-linear function as a table of its 256 i8 results (Glow's approach): the
    input's parameters say which real each q stands for, the output's profile which q
    each result becomes."""
    no_raw_zeros(operand)
    if operand.min_padded:
        raise Unsupported(f"{op.name} of min-padding")
    return table(q, term, op.name, operand)


def table(q: Quantizer, term: Term, function: str, operand: Q8) -> Q8:
    """`function` of the i8 `operand` as one lookup table onto `term`'s profile."""
    out = q.params_of(term)
    table = B.compute("lookup", operand.term, function, operand.params.scale,
                      operand.params.zero_point, out.scale, out.zero_point)
    return Q8(table, out, table)


def own_gate(q: Quantizer, term: Term) -> tuple[str, int] | None:
    """x·g(x) with g x's own gate: `sigmoid(x)` (SiLU) or HardSwish's `clip(x·(1/6) +
    1/2, 0, 1)` as the importer writes both. The function of the fused table and the
    side of the pair that is x, or None."""
    sides = term.children()[0].children()
    for index in (0, 1):
        function = gate_function(q, sides[index], sides[1 - index])
        if function is not None:
            return function, index
    return None


def gate_function(q: Quantizer, x: Term, gate: Term) -> str | None:
    if compute_name(gate) == "sigmoid" and gate.children()[0] == x:
        return "silu"
    op = gate.args[0]
    if not (isinstance(op, ComputeOp) and op.name == "clip"
            and tuple(map(float, op.params)) == (0.0, 1.0)):
        return None
    line = gate.children()[0]
    if compute_name(line) != "elementwise-add":
        return None
    scaled, half = line.children()[0].children()
    if compute_name(scaled) != "elementwise-mul" or not constant_is(q, half, 0.5):
        return None
    source, sixth = scaled.children()[0].children()
    return "hardswish" if source == x and constant_is(q, sixth, 1.0 / 6.0) else None


def constant_is(q: Quantizer, term: Term, value: float) -> bool:
    """Whether `term` is a constant with every element `value` (to f32 precision)."""
    constant = q.values.get(term)
    return isinstance(constant, Const) and bool(
        np.allclose(constant.array, value, rtol=1e-6, atol=0.0))


def negate(q: Quantizer, term: Term, operand: Q8) -> Value:
    acc = q.widen(operand, operand.term)
    return Acc(acc.term, -acc.scale, acc.offset, term, acc.fine)


def clamp(q: Quantizer, term: Term, op: ComputeOp, operand: Value) -> Value:
    if isinstance(operand, Host):
        return Host(q.rebuild(term, operand.term), term)
    if isinstance(operand, Acc):
        # Requantize straight to the clamp's own (narrower) range: one bit more.
        operand = q.materialize(operand, term, record=False)
    if not isinstance(operand, Q8):
        raise Unsupported(f"{op.name} of {type(operand).__name__}")
    no_raw_zeros(operand)
    clipped = clip_q8(q, op, operand)
    if clipped is not operand.term:
        q.name(operand.term, term, "_q")
    return Q8(clipped, operand.params, clipped)


def clip_q8(q: Quantizer, op: ComputeOp, operand: Q8) -> Term:
    """relu/clip in the integer domain; nothing when the i8 range already ensures it."""
    low, high = (0.0, math.inf) if op.name == "relu" else (float(op.params[0]),
                                                             float(op.params[1]))
    params = operand.params
    q_low = -128 if math.isinf(low) else int(np.clip(
        round(low / params.scale) + params.zero_point, -128, 127))
    q_high = 127 if math.isinf(high) else int(np.clip(
        round(high / params.scale) + params.zero_point, -128, 127))
    if (q_low, q_high) == (-128, 127):
        return operand.term
    if (q_low, q_high) == (0, 127):  # zero point 0: plainly a relu
        return B.compute("relu", operand.term)
    return B.compute("clip", operand.term, q_low, q_high)


def integer_sum(q: Quantizer, term: Term, operand: Q8) -> Value:
    return sum_of_steps(q, term, q.rebuild(term, operand.term), operand,
                        operand.params.scale)


def sum_of_steps(q: Quantizer, term: Term, summed: Term, operand: Q8, scale: float) -> Acc:
    """`summed` (a sum over `operand`'s integers) as an i32 accumulator of `scale`, its
    zero points' contribution taken off."""
    like = q.qtype(summed)
    offset = -probe(q, summed, operand)
    return Acc(summed, np.full(like.full, scale), offset, term)


def integer_mean(q: Quantizer, term: Term, operand: Q8) -> Value:
    """reduce-mean as the exact i32 sum at scale s/N, requantized (by its consumer) to
    the mean's own profile: a mean spans far fewer steps than its operand (a global
    pool of a feature map), and rounding it to the operand's step loses them."""
    no_raw_zeros(operand)
    if operand.min_padded:
        raise Unsupported("reduce-mean over min-padding")
    count = math.prod(q.qtype(operand.term).item)
    if 128 * count >= MEAN_SUM_LIMIT:  # the i32 sum could wrap: the mean of the integers
        new = q.rebuild(term, operand.term)  # at the operand's step, as before
        return Q8(new, operand.params, new)
    return sum_of_steps(q, term, B.compute("reduce-sum", operand.term), operand,
                        operand.params.scale / count)


def probe(q: Quantizer, term: Term, operand: Q8) -> Array:
    """`term` evaluated with `operand`'s base filled with its zero point: Σ zp·w etc."""
    if operand.params.zero_point == 0:
        return np.zeros(q.qtype(term).full, dtype=np.int64)
    base_type = q.qtype(operand.base)
    name = q.fresh("zero_point_probe")
    probe_decl = TensorDecl(name, base_type.full, "i8", "input")
    tensors = {**q.tensors, name: probe_decl}
    probe = B.tensor(name)
    probed = substitute(term, {operand.base: B.access(probe, len(base_type.shape))}
                        if base_type.shape != base_type.full else {operand.base: probe})
    types = infer(probed, tensors, {})
    fill = np.full(base_type.full, operand.params.zero_point, dtype=np.int8)
    values = evaluate_all(probed, types, {**q.weights, name: fill})
    q.taken.discard(name)
    return values[probed].astype(np.int64)


def dot_product(q: Quantizer, term: Term, operand: Value) -> Value:
    if not isinstance(operand, Pair):
        raise Unsupported("dot-product of anything but a pair or cartesian product")
    sides = [operand.left, operand.right]
    constant = [isinstance(s, Const) for s in sides]
    if constant.count(True) == 0:
        return activation_product(q, term, operand)
    if constant.count(True) != 1:
        raise Unsupported("dot-product needs exactly one constant (weight) operand")
    weight_index = constant.index(True)
    weight = sides[weight_index]
    activation = sides[1 - weight_index]
    assert isinstance(weight, Const)
    if isinstance(activation, Acc):
        activation = q.materialize(activation, activation.origin)
    if isinstance(activation, Host) and activation.origin is not None:
        # back from the host (after a LayerNormalization): i8 at its own profile
        activation = host_to_q8(q, activation, q.params_of(activation.origin))
    if not isinstance(activation, Q8) or activation.min_padded:
        raise Unsupported("dot-product of an activation that is not an i8 tensor")
    chain, item_scales = quantized_weight_chain(q, weight.term)
    members = [chain, activation.term] if weight_index == 0 else [activation.term, chain]
    product = float_product(q, term)
    dot = q.rebuild(term, Term(product.op, tuple(members)))
    result = q.qtype(dot)
    left_type, right_type = (q.ftype(c) for c in product.children())
    if operand.op == "access-cartesian-product":
        shape = (left_type.shape + (1,) * len(right_type.shape) if weight_index == 0
                 else (1,) * len(left_type.shape) + right_type.shape)
        item_scales = item_scales.reshape(shape)
    scale = np.broadcast_to(item_scales * activation.params.scale, result.full)
    offset = -probe(q, dot, activation)
    return Acc(dot, np.array(scale), offset, term)


def activation_product(q: Quantizer, term: Term, operand: Pair) -> Value:
    """A matrix product of two activations (attention's Q·Kᵀ, softmax·V): both sides
    to i8 with symmetric parameters from their profiles (zero point 0, so the integer
    product needs no correction terms), one i8 dot-product in i32 at scale s_a·s_b
    (softmax·V: e·V divided per row after it, `deferred_softmax_product`)."""
    deferred = deferred_softmax_product(q, term, operand)
    if deferred is not None:
        return deferred
    members, scale = [], 1.0
    for side, side_term in zip((operand.left, operand.right),
                               float_product(q, term).children(), strict=True):
        q8 = batched_q8(q, side_term, side)
        members.append(q8.term)
        scale *= q8.params.scale
    dot = q.rebuild(term, Term(float_product(q, term).op, tuple(members)))
    full = q.qtype(dot).full
    return Acc(dot, np.full(full, scale), np.zeros(full, dtype=np.int64), term)


# The views `builders.batched_matmul` spreads each operand of a batched product with
BATCH_SPREAD = ("access-broadcast", "access-insert-axis")


def batched_q8(q: Quantizer, side: Term, value: Value) -> Q8:
    """`symmetric_q8` of one side of a product: for a batched product's side (an operand
    broadcast over the other's axis), the operand requantized once and then spread, not
    each broadcast copy requantized (Q·Kᵀ of 64 windows × 3 heads would requantize
    every Q row 49 times)."""
    spread = []
    while side.op in BATCH_SPREAD:
        inner = side.args[0]
        if not isinstance(inner, Term) or inner not in q.values:
            break
        spread.append(side)
        side = inner
    if not spread:
        return symmetric_q8(q, value)
    operand = symmetric_q8(q, q.values[side])
    return Q8(viewed_over(spread, operand.term), operand.params, operand.base)


def symmetric_q8(q: Quantizer, value: Value) -> Q8:
    """An activation as i8 with zero point 0, the scale from its profile."""
    origin = value.origin if isinstance(value, (Acc, Host)) else None
    if isinstance(value, Q8):
        no_raw_zeros(value)
        if value.min_padded:
            raise Unsupported("a matrix product of min-padding")
        if value.params.zero_point == 0:
            return value
        origin = value.base
    if origin is None or q.keys.get(origin) not in q.profile.ranges:
        raise Unsupported(f"a matrix product of a {type(value).__name__} with no profile")
    low, high = q.profile.ranges[q.keys[origin]]
    target = activation_params(low, high, True)
    if isinstance(value, Host):
        return host_to_q8(q, value, target)
    term = q.to_params(value, target, origin)
    return Q8(term, target, term)


def host_to_q8(q: Quantizer, value: Host, target: QParams) -> Q8:
    """An f32 host tensor to i8: q = cast_i8(x·(1/s) + zp), the cast rounding half to
    even and saturating (as `QParams.quantize` up to the f32 rounding of x·(1/s))."""
    like = q.qtype(value.term)
    term = B.compute("elementwise-mul", B.op("access-pair", value.term, q.scalar_like(
        float(np.float32(1.0 / target.scale)), "f32", like)))
    if target.zero_point:
        term = B.compute("elementwise-add", B.op("access-pair", term, q.scalar_like(
            float(target.zero_point), "f32", like)))
    cast = B.compute("cast", term, "i8")
    return Q8(cast, target, cast)


def float_product(q: Quantizer, term: Term) -> Term:
    product = term.args[1]
    assert isinstance(product, Term)
    return product


def quantized_weight_chain(q: Quantizer, chain: Term) -> tuple[Term, Array]:
    """The weight operand over i8 weights, and the scale of each of its items."""
    leaves = [t for t in postorder(chain) if t.op == "access-tensor"]
    if len(leaves) != 1:
        raise Unsupported("a weight operand must view exactly one weight tensor")
    leaf = leaves[0]
    name = str(leaf.args[0])
    if name not in q.quantized_weights:
        array = q.float_weights[name]
        scales = weight_scales(array, q.per_channel)
        spread = scales.reshape((-1,) + (1,) * (array.ndim - 1)) if array.ndim else scales
        integers = np.clip(np.rint(array / spread), -127, 127).astype(np.int8)
        q_leaf = q.add_weight(name, integers, "i8")
        q.quantized_weights[name] = (q_leaf, np.broadcast_to(spread, array.shape))
        q.weight_scales[str(q_leaf.args[0])] = spread
    q_leaf, full_scales = q.quantized_weights[name]
    operand = q.ftype(chain)
    scales_view = apply_chain(chain, leaf, np.array(full_scales), q.float_types)
    items = scales_view.reshape(operand.shape + (-1,))
    if not np.all(items == items[..., :1]):
        raise Unsupported("per-channel weight scales vary within a dot-product item")
    return substitute(chain, {leaf: q_leaf}), items[..., 0]


def elementwise(q: Quantizer, term: Term, name: str, pair: Pair) -> Value:
    left, right = pair.left, pair.right
    if isinstance(left, Host) or isinstance(right, Host):
        terms = [q.dequantized(v) if not isinstance(v, Const) else
                 q.spread(v.array, q.ftype(v.term), "f32", "constant")
                 for v in (left, right)]
        return Host(q.rebuild(term, Term(pair.op, tuple(terms))), term)
    if isinstance(right, Const):
        return with_constant(q, term, name, left, right.array, constant_first=False)
    if name == "elementwise-div":
        parts = layer_norm_parts(q, term)
        normalised = integer_layer_norm(q, term, parts) if parts is not None else None
        if normalised is not None:  # each row at full precision (quant_layer_norm)
            return normalised
        check_divisor(q, term)
    if isinstance(left, Const) and name == "elementwise-div":
        return divide_constant(q, term, left.array, right)
    if isinstance(left, Const):
        return with_constant(q, term, name, right, left.array, constant_first=True)
    if name in ("elementwise-add", "elementwise-sub"):
        return add_dynamic(q, term, name, left, right)
    if name == "elementwise-mul":
        fused = own_gate(q, term)
        if fused is not None:  # SiLU, HardSwish: one table of x
            function, side = fused
            return table(q, term, function,
                         i8_activation(q, (left, right)[side], function))
        return multiply_dynamic(q, term, left, right)
    return divide_dynamic(q, term, left, right)


def i8_activation(q: Quantizer, value: Value, name: str) -> Q8:
    """`value` as an i8 activation (an accumulator is requantized first), or the reason
    `name` cannot take it."""
    if isinstance(value, Acc):
        value = q.materialize(value, value.origin)
    if not isinstance(value, Q8):
        raise Unsupported(f"{name} of a {type(value).__name__}")
    no_raw_zeros(value)
    if value.min_padded:
        raise Unsupported(f"{name} of min-padding")
    return value


def centred(q: Quantizer, value: Value, name: str) -> tuple[Term, float]:
    """An activation as i32 `q − zp` (|q − zp| ≤ 255) and its scale."""
    value = i8_activation(q, value, name)
    wide = B.compute("cast", value.term, "i32")
    if value.params.zero_point:
        shift = q.scalar_like(-value.params.zero_point, "i32", q.qtype(wide))
        wide = B.compute("elementwise-add", B.op("access-pair", wide, shift))
    return wide, value.params.scale


def multiply_dynamic(q: Quantizer, term: Term, left: Value, right: Value) -> Value:
    """x·y of two activations (gates, SiLU, HardSwish, GELU): both to i8, centred in i32,
    multiplied; |q − zp| ≤ 255 keeps the product below 2^16. The result is an
    accumulator at scale s_x·s_y, requantized like any other."""
    (x, x_scale), (y, y_scale) = (centred(q, side, "elementwise-mul")
                                  for side in (left, right))
    product = B.compute("elementwise-mul", B.op("access-pair", x, y))
    full = q.qtype(product).full
    return Acc(product, np.full(full, x_scale * y_scale), np.zeros(full, dtype=np.int64),
               term)


def divide_dynamic(q: Quantizer, term: Term, left: Value, right: Value) -> Value:
    """x / y of two activations (LayerNormalization's x / √(var + ε)): both centred in
    i32, the numerator times 2^16 (|x − zp|·2^16 < 2^24), an integer division truncated
    toward zero; an accumulator at scale s_x / (s_y·2^16). A divisor that rounds to zero
    gives 0, in the interpreter and in C alike."""
    (x, x_scale), (y, y_scale) = (centred(q, side, "elementwise-div")
                                  for side in (left, right))
    like = q.qtype(x)
    numerator = B.compute("elementwise-mul", B.op(
        "access-pair", x, q.scalar_like(DIVISION_SHIFT, "i32", like)))
    quotient = B.compute("elementwise-div", B.op("access-pair", numerator, y))
    full = q.qtype(quotient).full
    return Acc(quotient, np.full(full, x_scale / (y_scale * DIVISION_SHIFT)),
               np.zeros(full, dtype=np.int64), term)


def check_divisor(q: Quantizer, term: Term) -> None:
    """Refuse a division whose divisor comes within one int8 step of zero in the
    profile: its i8 value would be 0 there and the quotient unbounded (1/|x|), a silent
    wrong answer. LayerNormalization's √(var + ε) stays well away from zero."""
    divisor = term.children()[0].children()[1]
    while divisor.op in DATA_MOVEMENT:
        divisor = divisor.children()[0]
    low, high = q.profile.ranges.get(q.keys.get(divisor, ""), (0.0, 0.0))
    step = activation_params(low, high, q.symmetric).scale
    if low <= step and high >= -step:
        raise Unsupported(f"the divisor's profiled range [{low:.3g}, {high:.3g}] comes "
                           f"within one int8 step ({step:.3g}) of zero")


def divide_constant(q: Quantizer, term: Term, constant: Array, value: Value) -> Value:
    """c / y (Reciprocal, Pow −1): 2^16 / (y − zp) in integers (0 where y rounds to its
    zero point), an accumulator at scale c / (s_y·2^16)."""
    y, y_scale = centred(q, value, "elementwise-div")
    like = q.qtype(y)
    quotient = B.compute("elementwise-div", B.op(
        "access-pair", q.scalar_like(DIVISION_SHIFT, "i32", like), y))
    full = q.qtype(quotient).full
    scale = np.broadcast_to(constant.astype(np.float64) / (y_scale * DIVISION_SHIFT), full)
    if np.any(scale == 0):
        raise Unsupported("dividing a constant zero by a computed tensor")
    return Acc(quotient, np.array(scale), np.zeros(full, dtype=np.int64), term)


def softmax(q: Quantizer, term: Term, operand: Value) -> Value:
    """The network's final softmax stays on the host in f32 (its probabilities are the
    output); one inside the program (attention) is computed in integers, so the
    products after it stay i8 and every executor computes the same numbers."""
    if term in q.host_tail or isinstance(operand, Host):
        return Host(q.rebuild(term, q.dequantized(operand)), term)
    return integer_softmax(q, term, i8_activation(q, operand, "softmax"))


def integer_softmax(q: Quantizer, term: Term, operand: Q8) -> Q8:
    """softmax over the item in integers: d = q − max(q) ∈ [−255, 0] steps, to i8 at the
    step with zero point 127 (exact), e = exp(d) by a lookup table onto 127 steps of
    (0, 1] at zero point 0
    (so that a product of e with V needs no correction), Σe per row (≥ 127, from the
    maximum's e = 1), then per row one multiplier r = ⌊C / Σe⌋ (C = 2^post / s_p: O(rows)
    divisions) and p = requantize(e·r) at 2^−post, to p's profiled symmetric parameters
    (attention's softmax·V reads them as they are)."""
    x = operand.term
    like = q.qtype(x)
    shape, item = like.shape, like.item

    def over_item(reduced: Term) -> Term:  # ((S),()) repeated along the item
        return B.broadcast(B.reshape(reduced, shape, (1,) * len(item)), shape, item)

    wide_x = B.compute("cast", x, "i32")
    peak = B.compute("cast", over_item(B.compute("reduce-max", x)), "i32")
    steps = B.compute("elementwise-sub", B.op("access-pair", wide_x, peak))
    d_params = QParams(operand.params.scale, 127)
    d = q.requantize(Acc(steps, np.full(like.full, operand.params.scale),
                         np.zeros(like.full, dtype=np.int64), term), d_params)
    e = B.compute("lookup", d.term, "exp", d_params.scale, d_params.zero_point,
                  1.0 / SOFTMAX_LEVELS, 0)
    e_wide = B.compute("cast", e, "i32")
    total = B.compute("reduce-sum", e)  # (in i32, the accumulator's dtype)
    params = symmetric_params(q, term)
    post = max(0, math.floor(math.log2((2 ** 31 - 1) * params.scale)))
    dividend = round(2.0 ** post / params.scale)
    if not 2 ** 15 <= dividend < 2 ** 31:
        raise Unsupported(f"softmax's output scale {params.scale:g} leaves no i32 multiplier")
    multiplier = B.compute("elementwise-div", B.op(
        "access-pair", q.scalar_like(dividend, "i32", q.qtype(total)), total))
    p = B.compute("requantize-per-channel", B.op("access-pair", e_wide, over_item(multiplier)),
                  0, post, 0)
    q.softmax_rows[p] = SoftmaxRows(e, total, shape, item)
    return Q8(p, params, p)


@dataclass(frozen=True)
class SoftmaxRows:
    """What a product of a softmax's p needs to divide after it instead
    (`deferred_softmax_product`): e (i8 at zero point 0, p's shape) and Σe (one i32 per
    row)."""

    e: Term
    total: Term
    shape: tuple[int, ...]
    item: tuple[int, ...]

    def over_item(self, reduced: Term) -> Term:
        """One value per row (p's shape without the item) repeated along the item."""
        return B.broadcast(B.reshape(reduced, self.shape, (1,) * len(self.item)), self.shape,
                           self.item)


def deferred_softmax_product(q: Quantizer, term: Term, operand: Pair) -> Acc | None:
    """softmax(x)·V with the division after the product: e·V, then each row times its own
    reciprocal R = ⌊2^30 / Σe⌋ (O(rows) divisions) taken apart as R = h·2^L + l (L = 9),
    t = a·h + trunc(a·l / 2^L) ≈ a·2^21 / Σe (a the row's sums; every product below 2^31:
    |a| ≤ 127·Σe, Σe ≤ 127·keys), and t requantized to the product's profile. p = e / Σe is
    never formed (nor rounded): the array multiplies e (zero point 0) by V, and t is
    ws_epilogue's per-row mode (each row's h and l from its residual row). None when the
    left side is not a softmax's p viewed row by row (each row of the product in one row of
    the softmax), or its rows are longer than 260 keys."""
    left = operand.left
    if not (isinstance(left, Q8) and left.base in q.softmax_rows):
        return None
    parts = q.softmax_rows[left.base]
    shift = ROW_SHIFT
    levels = view_levels(left.term, left.base)
    if levels is None or 127 * 127 * math.prod(parts.item) << shift >= 2 ** 31 or \
            not reads_whole_rows(q, levels, parts):
        return None
    value = batched_q8(q, float_product(q, term).children()[1], operand.right)
    dot = q.rebuild(term, Term(float_product(q, term).op,
                               (viewed_over(levels, parts.e), value.term)))
    result = q.qtype(dot)
    if len(result.shape) not in (2, 3) or result.item:  # (M, N), or batched (B, M, N)
        return None
    dividend = 1 << (RECIPROCAL_BITS + shift)  # 2^30
    rows = q.qtype(parts.total)
    reciprocal = B.compute("elementwise-div", B.op(
        "access-pair", q.scalar_like(dividend, "i32", rows), parts.total))
    whole = B.compute("elementwise-div", B.op(
        "access-pair", reciprocal, q.scalar_like(1 << shift, "i32", rows)))
    fraction = B.compute("elementwise-sub", B.op("access-pair", reciprocal, B.compute(
        "elementwise-mul", B.op("access-pair", whole, q.scalar_like(1 << shift, "i32", rows)))))

    def per_row(values: Term) -> Term:  # the row's value, along the product's row
        viewed = viewed_over(levels, parts.over_item(values))
        rows = q.qtype(viewed).shape  # (M), or (B, M, N) already spread along N
        first = B.op("access-slice", viewed, len(rows), 0, 1)
        spread = B.reshape(first, (*rows, *(1,) * (len(result.shape) - len(rows))), ())
        return spread if len(rows) == len(result.shape) else \
            B.broadcast(spread, result.shape, ())

    def fold(name: str, left_term: Term, right_term: Term) -> Term:
        return B.compute(name, B.op("access-pair", left_term, right_term))

    scaled = fold("elementwise-add", fold("elementwise-mul", dot, per_row(whole)), fold(
        "elementwise-div", fold("elementwise-mul", dot, per_row(fraction)),
        q.scalar_like(1 << shift, "i32", result)))
    # t ≈ a·2^21 / Σe, and the product's real value is a·s_V / Σe: an accumulator its
    # reader requantizes once, to its own parameters (a concatenation's)
    full = result.full
    return Acc(scaled, np.full(full, value.params.scale / (1 << RECIPROCAL_BITS)),
               np.zeros(full, dtype=np.int64), term)


def view_levels(view: Term, base: Term) -> list[Term] | None:
    """The data-movement terms from `view` down to `base` (each over the next), or None
    when `view` is not such a chain of one-operand views."""
    levels = []
    while view != base:
        inner = view.args[0] if view.args else None
        if view.op not in DATA_MOVEMENT or not isinstance(inner, Term) or any(
                K.CONSTRUCTS[arg.op].result == K.ACCESS
                for arg in view.args[1:] if isinstance(arg, Term)):
            return None
        levels.append(view)
        view = inner
    return levels


def viewed_over(levels: list[Term], replacement: Term) -> Term:
    """The views `levels` (outermost first) applied to `replacement` instead of their
    base (walking the chain only: the base's own subterms are the whole network)."""
    term = replacement
    for level in reversed(levels):
        term = Term(level.op, (term, *level.args[1:]))
    return term


def reads_whole_rows(q: Quantizer, levels: list[Term], parts: SoftmaxRows) -> bool:
    """Whether the views `levels` over a softmax's p make a matrix each of whose rows lies
    in one row of p: the views applied to each element's row number."""
    count = int(np.prod(parts.shape, dtype=np.int64))
    value = np.broadcast_to(np.arange(count).reshape(
        parts.shape + (1,) * len(parts.item)), parts.shape + parts.item)
    for level in reversed(levels):
        q.qtype(level)
        inner = level.args[0]
        assert isinstance(inner, Term)
        value = apply_term(level, q.types, {inner: value}, {})
    return value.ndim >= 2 and bool(np.all(value == value[..., :1]))


def symmetric_params(q: Quantizer, term: Term) -> QParams:
    """`term`'s profiled range as symmetric int8 parameters (zero point 0)."""
    key = q.keys.get(term)
    if key not in q.profile.ranges:
        raise Unsupported("softmax with no profile")
    return activation_params(*q.profile.ranges[key], True)


def with_constant(q: Quantizer, term: Term, name: str, value: Value, constant: Array,
                  constant_first: bool, retried: bool = False) -> Value:
    if isinstance(value, Acc) and value.origin in q.joined_into:
        # A concatenation's part that a constant also scales (a transition's average pool
        # that the next dense block's first batch-norm reads): the concatenation holds its
        # i8 values anyway, so this reads them too, and the sum is requantized once.
        value = q.materialize(value, value.origin)
    widened = isinstance(value, Q8)
    if isinstance(value, Q8):
        # ×256 so that added constants are rounded to 1/256 of an input step; a product
        # (a batch-norm's scale, its shift added next) ×128 instead: 1/128 of a step is
        # as precise (a dense block's int8 error unchanged), and −128·x is a product the
        # accelerator's array forms, so the shift joins the epilogue's bias whatever its
        # value (backend/accel_dense.py).
        value = q.widen(value, term, boost=128 if name == "elementwise-mul" else 256)
    if not isinstance(value, Acc):
        raise Unsupported(f"{name} of a {type(value).__name__}")
    constant = constant.astype(np.float64)
    scale, offset = value.scale, value.offset
    if name == "elementwise-mul":
        scale = scale * constant
    elif name == "elementwise-div":
        if constant_first:
            raise Unsupported("dividing a constant by a computed tensor")
        scale = scale / constant
    else:
        if name == "elementwise-sub" and constant_first:  # c − x
            scale = -scale
        sign = -1.0 if name == "elementwise-sub" and not constant_first else 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            steps = np.rint(sign * constant / scale)
        if not np.all(np.isfinite(steps)) or np.max(np.abs(steps), initial=0) > 2 ** 31:
            if retried:
                raise Unsupported("the constant does not fit the accumulator's scale")
            # The computed part is far below the constant (googlenet's random-weight
            # logits: activations near 1e-12 under a bias of 0.01): requantize it to
            # the sum's own profile first, where the constant fits, then add.
            requantized = q.requantize(value, q.params_of(term))
            return with_constant(q, term, name, requantized, constant, constant_first, True)
        offset = offset + steps.astype(np.int64)
    if np.any(scale == 0):
        raise Unsupported("multiplying by a constant zero loses the tensor")
    added = widened and name in ("elementwise-add", "elementwise-sub")
    return Acc(value.term, np.array(scale), offset, term,
               FINE_CONSTANTS if added else value.fine)


def add_dynamic(q: Quantizer, term: Term, name: str, left: Value, right: Value) -> Value:
    """Residual add: both sides to i8, then a common fine scale in i32 (TFLite's way);
    an i8 tensor plus constants joins as its accumulator (`add_fine`)."""
    fine = add_fine(q, term, name, left, right)
    if fine is not None:
        return fine
    sides = []
    for side in (left, right):
        if isinstance(side, Acc):
            side = q.materialize(side, side.origin)
        if not isinstance(side, Q8):
            raise Unsupported(f"{name} of a {type(side).__name__}")
        no_raw_zeros(side)
        sides.append(side)
    # |q − zp| ≤ 255 and multipliers ≤ 2^14 keep the sum below 2^23: no i32 overflow.
    common = max(s.params.scale for s in sides) / 2 ** 14
    terms, offset = [], 0
    like = q.qtype(sides[0].term)
    for index, side in enumerate(sides):
        multiplier = round(side.params.scale / common)
        wide = B.compute("cast", side.term, "i32")
        terms.append(B.compute("elementwise-mul", B.op(
            "access-pair", wide, q.scalar_like(multiplier, "i32", like))))
        sign = -1 if index == 1 and name == "elementwise-sub" else 1
        offset -= sign * side.params.zero_point * multiplier
    summed = B.compute(name, B.op("access-pair", terms[0], terms[1]))
    full = q.qtype(summed).full
    return Acc(summed, np.full(full, common), np.full(full, offset, dtype=np.int64), term)


# An i8 side's multiplier onto a fine sum's step is at least this (0.05 % from rounding) ...
FINE_MULTIPLIER = 1 << 10
# ... and every integer of the sum, at the calibrated peaks, stays below this.
FINE_SUM_LIMIT = 1 << 29


def add_fine(q: Quantizer, term: Term, name: str, left: Value, right: Value) -> Acc | None:
    """x + y where x is an i8 tensor plus constants (FINE_CONSTANTS, one scale): x's own
    integers, times 2^k, plus y's i8 times its multiplier onto x's step / 2^k, so a row
    of x far below its i8 step (ViT's class token) keeps its value. No such side, or
    integers that might pass FINE_SUM_LIMIT: None (both sides to i8)."""
    sides = (left, right)
    fine = [isinstance(s, Acc) and s.fine == FINE_CONSTANTS and np.all(s.scale == s.scale.flat[0])
            and np.max(np.abs(s.offset), initial=0) < 2 ** 31 for s in sides]
    if fine.count(True) != 1:
        return None
    index = fine.index(True)
    accumulator, other = sides[index], sides[1 - index]
    assert isinstance(accumulator, Acc)
    if isinstance(other, Acc):
        other = q.materialize(other, other.origin)
    if not isinstance(other, Q8):
        return None
    no_raw_zeros(other)
    step = abs(float(accumulator.scale.flat[0]))
    shift = max(0, math.ceil(math.log2(FINE_MULTIPLIER * step / other.params.scale)))
    common = step / 2 ** shift
    multiplier = round(other.params.scale / common)
    low, high = q.profile.ranges.get(q.keys.get(accumulator.origin, ""), (0.0, 0.0))
    peak = max(abs(low), abs(high)) / step * 2 ** shift
    if peak + 255 * multiplier >= FINE_SUM_LIMIT:
        return None
    like = q.qtype(accumulator.term)
    integers = accumulator.term
    if np.any(accumulator.offset != 0):
        integers = B.compute("elementwise-add", B.op("access-pair", integers, q.spread(
            accumulator.offset.astype(np.int32), like, "i32", f"{q.label(term)}_constants")))
    sign = 1 if accumulator.scale.flat[0] > 0 else -1
    terms = [B.compute("elementwise-mul", B.op("access-pair", integers, q.scalar_like(
                 sign * 2 ** shift, "i32", like))),
             B.compute("elementwise-mul", B.op("access-pair", B.compute(
                 "cast", other.term, "i32"), q.scalar_like(multiplier, "i32", like)))]
    offset = -other.params.zero_point * multiplier
    if name == "elementwise-sub" and index == 0:  # x − y: y's zero point adds
        offset = -offset
    first, second = (terms[0], terms[1]) if index == 0 else (terms[1], terms[0])
    summed = B.compute(name, B.op("access-pair", first, second))
    full = q.qtype(summed).full
    return Acc(summed, np.full(full, common), np.full(full, offset, dtype=np.int64), term,
               FINE_SUM)


def _no_integer_form(q: Quantizer, term: Term, op: ComputeOp, operand: Value) -> Value:
    def refuse(value: Q8) -> Value:
        raise Unsupported(f"compute {op.name} has no integer form")
    return on_integers(q, term, operand, refuse)
def _fold(q: Quantizer, term: Term, op: ComputeOp, operand: Value) -> Value:
    assert isinstance(operand, Pair)  # Quantizer.compute checked
    return elementwise(q, term, op.name, operand)
ComputeTranslator = Callable[["Quantizer", Term, ComputeOp, Value], Value]
COMPUTE_TRANSLATORS: dict[str, ComputeTranslator] = {
    "dot-product": lambda q, term, op, operand: dot_product(q, term, operand),
    **{name: _fold for name in K.ComputeKind.FOLD},
    "relu": lambda q, term, op, operand: clamp(q, term, op, operand),
    "clip": lambda q, term, op, operand: clamp(q, term, op, operand),
    "softmax": lambda q, term, op, operand: softmax(q, term, operand),
    "reduce-max": lambda q, term, op, operand: on_integers(q,
        term, operand, lambda value: keep_scale(q, term, value)),
    "reduce-mean": lambda q, term, op, operand: on_integers(q,
        term, operand, lambda value: integer_mean(q, term, value)),
    "reduce-sum": lambda q, term, op, operand: on_integers(q,
        term, operand, lambda value: integer_sum(q, term, value)),
    "negative": lambda q, term, op, operand: on_integers(q,
        term, operand, lambda value: negate(q, term, value)),
    # Glow's int8 lookup tables: one 256-entry table per use, from both sides' parameters.
    **{name: lambda q, term, op, operand: on_integers(q,
        term, operand, lambda value: lookup(q, term, op, value))
       for name in ("exp", "sigmoid", "tanh", "erf", "sqrt")},
    # Computed on floats only: quantized programs keep them on the host side of a cast.
    **{name: _no_integer_form for name in ("cast", "requantize", "requantize-per-channel",
                                           "lookup")},
}
