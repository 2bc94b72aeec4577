"""LayerNormalization in integers, at the precision of each row rather than the tensor's.

The importer writes LayerNormalization as ONNX's function body: `d = x − mean(x)`,
`var = mean(d·d)`, `d / √(var + ε)` (docs/import.md). Translated step by step, `d`, `var`
and `√(var + ε)` each became i8 at one scale for the whole tensor, so a row far below the
tensor's largest (ViT's class token at its first block: a zero-initialised token plus a
position embedding of about 0.02, where the patch rows reach 4) was a step or two of each,
or none, and its normalised values, which the float LayerNorm lifts to unit variance, came
out as noise (vit_b_16's int8 output: relative L2 1.18). The quotient does not depend on a
row's scale, so this translation keeps every intermediate exact in i32 instead:

1. `d = x − mean(x)`, with |d| < 2^15: for an i8 tensor plus constants (ViT's tokens plus
   the position embedding), or a residual sum with one (`Acc.fine`), from its accumulator,
   where the constants keep their fine steps (shifted to 2^14 at its calibrated peak, and
   clipped); for anything else from the i8 tensor the accelerator writes from a layer's or
   a residual add's epilogue, as `128·q − 128·Σq / N` (the mean to 1/128 of a step);
2. `w = mean(d·d) + ε / s_d²` (< 2^31): the variance exactly (the integer mean rounds), ε
   in d's units;
3. `σ = √w`: a start from the `sqrt` lookup table (never 0), then Newton steps
   `σ ← (σ + w/σ) / 2`, on one value per row;
4. `d·2^15 / σ`: the normalised values, an accumulator at scale 2^-15.

Step 2 on an i8 row reads the row twice, not d: `w = 2^14·(N·Σq² − (Σq)²) / N²` (d's
units are 1/128 of a step, so 128² = 2^14), taken apart so every intermediate fits i32
(`_row_mean_square`): with `a = Σq / N`, `b = Σq − a·N`, `T = Σq² − a·(Σq + b)`
(= `N·var + b²/N`, exact), `w = ⌊T/N⌋·2^14 + ⌊(T mod N)·2^14 / N⌋ − ⌊r² / 2^16⌋` with
`r = ⌊b·2^15 / N⌋` (within 2 of the exact 2^14·var; rows of N < 2^16). So the row's
statistics are two sums of its int8 values and arithmetic on one value per row.

Step 4 on an i8 row divides by a reciprocal per row, `R = ⌊2^30 / σ⌋` taken apart as
`R = h·2^15 + l`: `t = d·h + ⌊d·l / 2^15⌋` (toward zero; `d·R / 2^15 ≈ d·2^15 / σ`, every
product below 2^30). On an i8 row, d is written negated, `e = m − 128·q` (m the row's
mean ×128) with h and l negated too: that is the accelerator epilogue's per-row mode
as it is (docs/hardware.md) on the layer q·(−128) of the tensor's int8 rows, the row's
m and packed reciprocal its residual row, LayerNorm's scale and bias after it the
epilogue's per-column multipliers and bias (`accel_layer_norm`), and the two sums are
array calls (`accel_row_sums`). Only σ's O(rows) work stays on the host (and a copy of the
rows, transposed for Σq²'s products).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from glensidec.frontends import builders as B
from glensidec.frontends.qparams import QParams
from glensidec.frontends.quant_values import (
    DATA_MOVEMENT,
    Q8,
    Acc,
    Const,
    no_raw_zeros,
)
from glensidec.lang.terms import Term, compute_name

if TYPE_CHECKING:
    from glensidec.frontends.quantize import Quantizer
    from glensidec.lang.typecheck import AccessType

DIFFERENCE_BOUND = 1 << 15  # |d| below this: d·d and d·2^15 fit i32
CALIBRATED_PEAK = 1 << 14  # an accumulator read as it is: its calibrated peak, at most
MEAN_FRACTION = 1 << 7  # an i8 row's mean is kept to 1/128 of a step (|d| ≤ 255·128)
QUOTIENT_SHIFT = 1 << 15  # the result's fractional bits
RECIPROCAL_BITS = 30  # R = ⌊2^30 / σ⌋: the quotient d·R / 2^15 at 2^-15
ROW_SUM_LIMIT = 1 << 16  # rows shorter than this: w from Σq and Σq² (_row_mean_square)
# The square root's start: w (< 2^31) to i8 at 2^31/127 per step, its root by the sqrt
# table at SQRT_STEP per step (127·365 ≥ 2^15.5), plus one step so it is never 0; from
# there Newton halves the error while it is large and squares it once small: 8 steps end
# within one of ⌊√w⌋ for every w < 2^31 (checked on every w < 5000 and 200,000 more).
SQRT_STEP = 365
NEWTON_STEPS = 8


@dataclass(frozen=True)
class LayerNormParts:
    """The importer's LayerNormalization division `d / √(var + ε)`, taken apart."""

    x: Term  # the normalised tensor (the float program's term)
    axis: int  # the access axis: every axis from it on is normalised over
    epsilon: float


@dataclass(frozen=True)
class _Centred:
    """A LayerNorm's d (i32, |d| < 2^15) at `scale`, its rows' mean square `mean(d²)`
    (before ε), and d in the accelerator's negated form `m − 128·q` (an i8 input's)."""

    d: Term
    scale: float
    mean_square: Term
    negated: Term | None


def _strip(term: Term) -> Term:
    while term.op in DATA_MOVEMENT:
        term = term.children()[0]
    return term


def _mean_operand(term: Term) -> tuple[Term, int] | None:
    """(t, axis) when `term` re-views `reduce-mean (access t axis)`."""
    mean = _strip(term)
    if compute_name(mean) != "reduce-mean" or mean.children()[0].op != "access":
        return None
    viewed = mean.children()[0]
    axis = viewed.args[1]
    return (viewed.children()[0], axis) if isinstance(axis, int) else None


def layer_norm_parts(q: Quantizer, division: Term) -> LayerNormParts | None:
    """The parts of `division` when it is the importer's LayerNormalization, else None."""
    centred, root = division.children()[0].children()
    if compute_name(centred) != "elementwise-sub":
        return None
    x, mean = centred.children()[0].children()
    first = _mean_operand(mean)
    if first is None or first[0] != x:
        return None
    total = _strip(root)
    if compute_name(total) != "sqrt" or compute_name(total.children()[0]) != "elementwise-add":
        return None
    variance, epsilon = total.children()[0].children()[0].children()
    constant = q.values.get(epsilon)
    square = _mean_operand(variance)
    if not isinstance(constant, Const) or constant.array.size == 0 or square is None:
        return None
    members = square[0].children()[0].children() if compute_name(square[0]) else []
    if (compute_name(square[0]) != "elementwise-mul" or members != [centred, centred]
            or square[1] != first[1]):
        return None
    value = float(constant.array.reshape(-1)[0])
    if not np.all(constant.array == value) or value < 0:
        return None
    if q.ftype(centred).full != q.ftype(division).full:
        return None
    return LayerNormParts(x, first[1], value)


def centred_rows(q: Quantizer, parts: LayerNormParts) -> _Centred | None:
    """`x − mean(x)` over each row in i32 (|d| < 2^15), its scale and its rows' mean
    square, or None (a host value): from the accumulator when it holds fine constants
    (`Acc.fine`), else from the i8 tensor (what the accelerator writes anyway)."""
    value = q.values[parts.x]
    axis = parts.axis
    if isinstance(value, Acc) and value.fine and np.all(value.scale == value.scale.flat[0]) \
            and np.max(np.abs(value.offset), initial=0) < 2 ** 31:
        scale = float(value.scale.flat[0])
        term = value.term
        like = q.qtype(term)
        if np.any(value.offset != 0):
            offset = q.spread(value.offset.astype(np.int32), like, "i32", "row_offset")
            term = B.compute("elementwise-add", B.op("access-pair", term, offset))
        low, high = q.profile.ranges.get(q.keys.get(value.origin, ""), (0.0, 0.0))
        peak = max(abs(low), abs(high)) / abs(scale)
        shift = max(0, math.ceil(math.log2(peak / CALIBRATED_PEAK))) if peak > 0 else 0
        if shift:
            term = B.compute("elementwise-div", B.op("access-pair", term, q.scalar_like(
                1 << shift, "i32", like)))
            scale *= 1 << shift
        v = B.access(term, axis)
        d = B.compute("elementwise-sub", B.op("access-pair", v, over_item(
            q, v, B.compute("reduce-mean", v))))
        # an input beyond the calibrated range saturates rather than overflows
        d = B.compute("clip", d, 1 - DIFFERENCE_BOUND, DIFFERENCE_BOUND - 1)
        mean_square = B.compute("reduce-mean", B.access(_fold("elementwise-mul", d, d), axis))
        return _Centred(d, scale, mean_square, None)
    if isinstance(value, Acc):
        value = q.materialize(value, value.origin)
    if not isinstance(value, Q8):
        return None
    no_raw_zeros(value)
    # 128·q − 128·Σq / N: the zero point cancels
    x = B.access(value.term, axis)
    like = q.qtype(x)
    count = math.prod(like.item)
    wide = _fold("elementwise-mul", B.compute("cast", x, "i32"),
                 q.scalar_like(MEAN_FRACTION, "i32", like))
    total = B.compute("reduce-sum", x)
    rows = q.qtype(total)
    mean = _fold("elementwise-div", _fold("elementwise-mul", total, q.scalar_like(
        MEAN_FRACTION, "i32", rows)), q.scalar_like(count, "i32", rows))
    d = _fold("elementwise-sub", wide, over_item(q, x, mean))
    negated = _fold("elementwise-sub", over_item(q, x, mean), wide)
    if count < ROW_SUM_LIMIT:
        wide_x = B.compute("cast", x, "i32")
        squares = B.compute("reduce-sum", B.access(_fold("elementwise-mul", wide_x, wide_x),
                                                   axis))
        mean_square = _row_mean_square(q, total, squares, count)
    else:
        mean_square = B.compute("reduce-mean", B.access(_fold("elementwise-mul", d, d), axis))
    return _Centred(d, value.params.scale / MEAN_FRACTION, mean_square, negated)


def _fold(name: str, left: Term, right: Term) -> Term:
    return B.compute(name, B.op("access-pair", left, right))


def _row_mean_square(q: Quantizer, total: Term, squares: Term, count: int) -> Term:
    """`2^14·var` of each row from its sum Σq and sum of squares Σq² (i32, rows of
    `count` < 2^16 values): the module's step 2, every intermediate within i32."""
    rows = q.qtype(total)

    def constant(value: int) -> Term:
        return q.scalar_like(value, "i32", rows)

    def times(left: Term, right: Term) -> Term:
        return _fold("elementwise-mul", left, right)

    def over(left: Term, right: Term) -> Term:
        return _fold("elementwise-div", left, right)

    def minus(left: Term, right: Term) -> Term:
        return _fold("elementwise-sub", left, right)

    a = over(total, constant(count))
    b = minus(total, times(a, constant(count)))
    t = minus(squares, times(a, _fold("elementwise-add", total, b)))
    whole = over(t, constant(count))
    fraction = over(times(minus(t, times(whole, constant(count))), constant(1 << 14)),
                    constant(count))
    r = over(times(b, constant(1 << 15)), constant(count))
    estimate = minus(_fold("elementwise-add", times(whole, constant(1 << 14)), fraction),
                     over(times(r, r), constant(1 << 16)))
    return B.compute("clip", estimate, 0, 2 ** 31 - 1)  # (the floors may reach −2)


def over_item(q: Quantizer, like_term: Term, reduced: Term) -> Term:
    """((rows),()) repeated along `like_term`'s item."""
    like = q.qtype(like_term)
    return B.broadcast(B.reshape(reduced, like.shape, (1,) * len(like.item)), like.shape,
                       like.item)


def integer_layer_norm(q: Quantizer, division: Term, parts: LayerNormParts) -> Acc | None:
    """`division` (the normalised values, before LayerNorm's scale and bias) as an i32
    accumulator at scale 2^-15, every row exact up to its integers; None when the input
    is not in integers."""
    found = centred_rows(q, parts)
    if found is None:
        return None
    scale = found.scale
    sign = 1.0 if scale > 0 else -1.0  # a negated accumulator: LN(−x) = −LN(x)
    rows = q.qtype(found.mean_square)
    epsilon = min(round(parts.epsilon / (scale * scale)), 2 ** 30)
    w = _fold("elementwise-add", found.mean_square, q.scalar_like(epsilon, "i32", rows)) \
        if epsilon else found.mean_square

    def per_row(value: int) -> Term:
        return q.scalar_like(value, "i32", rows)

    sigma = square_root(q, w, division, per_row)
    if found.negated is None:  # an i32 input (the host's anyway): d·2^15 / σ
        like = q.qtype(found.d)
        quotient = _fold("elementwise-div", _fold(
            "elementwise-mul", found.d, q.scalar_like(QUOTIENT_SHIFT, "i32", like)),
            over_item(q, found.d, sigma))
    else:  # e = −d of an i8 input: e·(−h) + ⌊e·(−l) / 2^15⌋, the epilogue's per-row mode
        reciprocal = _fold("elementwise-div", per_row(1 << RECIPROCAL_BITS), sigma)
        whole = _fold("elementwise-div", reciprocal, per_row(QUOTIENT_SHIFT))
        part = _fold("elementwise-sub", reciprocal, _fold("elementwise-mul", whole,
                                                          per_row(QUOTIENT_SHIFT)))
        centred = found.negated
        like = q.qtype(centred)
        quotient = _fold("elementwise-add", _fold(
            "elementwise-mul", centred, over_item(q, centred, _negative(q, whole, rows))),
            _fold("elementwise-div", _fold("elementwise-mul", centred, over_item(
                q, centred, _negative(q, part, rows))),
                q.scalar_like(QUOTIENT_SHIFT, "i32", like)))
    if q.qtype(quotient).shape != q.ftype(division).shape:  # the float term's own split
        quotient = B.access(quotient, len(q.ftype(division).shape))
    full = q.qtype(quotient).full
    return Acc(quotient, np.full(full, sign / QUOTIENT_SHIFT), np.zeros(full, dtype=np.int64),
               division)


def _negative(q: Quantizer, term: Term, like: AccessType) -> Term:
    return _fold("elementwise-sub", q.scalar_like(0, "i32", like), term)


def square_root(q: Quantizer, w: Term, origin: Term, per_row: Callable[[int], Term]) -> Term:
    """⌊√w⌋ or within one of it (0 ≤ w < 2^31), in i32: the sqrt table's start, then
    Newton."""
    like = q.qtype(w)
    bound = 2.0 ** 31
    start_params = QParams(bound / 127.0, 0)
    coarse = q.requantize(Acc(w, np.ones(like.full), np.zeros(like.full, dtype=np.int64),
                              origin), start_params)
    table = B.compute("lookup", coarse.term, "sqrt", start_params.scale, 0, float(SQRT_STEP), 0)
    start = B.compute("elementwise-add", B.op("access-pair", B.compute("cast", table, "i32"),
                                               per_row(1)))
    sigma = B.compute("elementwise-mul", B.op("access-pair", start, per_row(SQRT_STEP)))
    for _ in range(NEWTON_STEPS):
        ratio = B.compute("elementwise-div", B.op("access-pair", w, sigma))
        total = B.compute("elementwise-add", B.op("access-pair", sigma, ratio))
        sigma = B.compute("elementwise-div", B.op("access-pair", total, per_row(2)))
    return sigma
