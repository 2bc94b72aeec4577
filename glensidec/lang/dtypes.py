"""The element types: every fact about i8, i16, i32 and f32 lives in this one table.

The parser's list of dtype names, the type checker's ranges, the interpreter's numpy types,
the C code's types, limits and .npy descriptors, and the accumulator a dot product sums in
are all read from here. Adding a dtype is one row (and the C helpers it needs in
templates/model.c).

`requantize` and `lookup_table` are here too: the integer arithmetic the interpreter, the
quantizer and its tests must agree on bit for bit (the C template's `gs_requantize` is
requantize's twin; C gets lookup tables written out from `lookup_table` itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]

F32_MAX = 3.4028234663852886e38  # float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class DType:
    name: str  # as the language spells it: i8
    numpy: type[np.generic]  # np.int8
    c_type: str  # int8_t
    c_min: str  # the C expression for the lowest finite value: INT8_MIN, -FLT_MAX
    npy_descr: str  # the .npy header's descr: <i1
    size: int  # bytes per element
    low: int | float  # smallest and largest finite value
    high: int | float
    integer: bool
    accumulator: str  # the dtype a sum of products of this dtype is kept in

    @property
    def bits(self) -> int:
        return 8 * self.size


def _integer(bits: int) -> DType:
    return DType(f"i{bits}", np.dtype(f"int{bits}").type, f"int{bits}_t", f"INT{bits}_MIN",
                 f"<i{bits // 8}", bits // 8, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, True,
                 "i32")


DTYPES: dict[str, DType] = {
    "i8": _integer(8),
    "i16": _integer(16),
    "i32": _integer(32),
    "f32": DType("f32", np.float32, "float", "-3.40282347e+38f", "<f4", 4, -F32_MAX, F32_MAX,
                 False, "f32"),
}

NAMES = tuple(DTYPES)
INTEGER_NAMES = tuple(name for name, d in DTYPES.items() if d.integer)


def dtype(name: str) -> DType:
    return DTYPES[name]


def integer_range(name: str) -> tuple[int, int]:
    """[low, high] of an integer dtype."""
    d = DTYPES[name]
    assert d.integer, name
    return int(d.low), int(d.high)


def accumulator(name: str) -> str:
    """The dtype a sum of products of `name` is kept in (i32 for every integer, as the
    systolic array's adders do)."""
    return DTYPES[name].accumulator


def by_bits(bits: int) -> str | None:
    """The integer dtype `bits` wide (the array's input width), or None."""
    return next((d.name for d in DTYPES.values() if d.integer and d.bits == bits), None)


def wrap(values: Array, name: str) -> Array:
    """Integers reduced modulo 2^width into `name` (two's complement), floats rounded."""
    return values.astype(DTYPES[name].numpy)


def wrap_signed(values: Array | int, width: int) -> Array:
    """Two's-complement wrap of integers to any `width` bits (an accumulator of ACC_W bits,
    say), as int64; `wrap` is the same for a named dtype's width."""
    half = 1 << (width - 1)
    return ((np.asarray(values, dtype=np.int64) + half) % (1 << width)) - half


def requantize(acc: Array, multiplier: Array | int, pre: int, post: int,
               zero_point: int) -> Array:
    """Glow's integer requantization of accumulators to i8:
    saturate(((((acc >> pre) · m) + 2^(post-1)) >> post) + zero_point).

    The product is formed in int64 and cannot overflow (acc, m in i32, pre ≥ 0); `multiplier`
    is one integer or an array broadcast against `acc` (per channel).
    """
    return wrap(requantize_to_width(acc, multiplier, pre, post, zero_point, 8), "i8")


def requantize_to_width(acc: Array, multiplier: Array | int, pre: int, post: int,
                        zero_point: int, width: int) -> Array:
    """`requantize`'s arithmetic saturating to a signed `width`-bit range, as int64 (the
    accelerator's epilogue has the output width as a parameter)."""
    scaled = (acc.astype(np.int64) >> pre) * np.asarray(multiplier, dtype=np.int64)
    if post > 0:
        scaled = (scaled + (np.int64(1) << (post - 1))) >> post
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    saturated: Array = np.clip(scaled + zero_point, low, high)
    return saturated


def _erf(values: Array) -> Array:
    return np.array([math.erf(v) for v in values.reshape(-1)]).reshape(values.shape)


def _sigmoid(values: Array) -> Array:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-values))


def _exp(values: Array) -> Array:
    with np.errstate(over="ignore"):
        return np.exp(values)


def _hardswish(values: Array) -> Array:
    result: Array = values * np.clip(values / 6.0 + 0.5, 0.0, 1.0)
    return result


# The functions an int8 lookup table can hold, in float64 (the table is built once, in
# Python, for the interpreter and for the C code alike).
LOOKUP_FUNCTIONS: dict[str, Callable[[Array], Array]] = {
    "sigmoid": _sigmoid, "tanh": np.tanh, "exp": _exp, "erf": _erf,
    "sqrt": lambda values: np.sqrt(np.maximum(values, 0.0)),  # a negative input reads 0
    # x·sigmoid(x) and x·clip(x/6 + 1/2, 0, 1) in one table: the quantizer fuses the product
    # of an activation and its own gate, one rounding instead of a table, a product and a
    # requantization (and no i8 step lost on the gate).
    "silu": lambda values: values * _sigmoid(values),
    "hardswish": _hardswish,
}


def lookup_table(function: str, in_scale: float, in_zero_point: int, out_scale: float,
                 out_zero_point: int) -> Array:
    """Glow's int8 lookup table: entry q + 128 holds
    clip(round_half_even(f(in_scale·(q − in_zp)) / out_scale) + out_zp, −128, 127).

    The interpreter indexes it and the C back end writes it out as a `static const int8_t`
    array, so both compute the same integers (there is no float arithmetic at run time)."""
    q = np.arange(-128, 128, dtype=np.float64)
    real = LOOKUP_FUNCTIONS[function](float(in_scale) * (q - int(in_zero_point)))
    steps = np.clip(np.rint(np.clip(real / float(out_scale), -1e6, 1e6)) + int(out_zero_point),
                    -128, 127)
    table: Array = steps.astype(np.int8)
    return table
