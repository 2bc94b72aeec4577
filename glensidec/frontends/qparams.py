"""Quantization parameters: scales and zero points of i8 values, and the integer
multipliers that requantize i32 accumulators to them (Glow's scheme, docs/import.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.lang.quantization import Quantization

Array = np.ndarray[Any, Any]


# -- quantization parameters -------------------------------------------------------------------


# The quantizer's parameters are the language's: one definition of the arithmetic, which
# `glensidec run` and the generated C apply to float inputs (glensidec/lang/quantization.py).
QParams = Quantization


def activation_params(low: float, high: float, symmetric: bool) -> QParams:
    """Glow's parameters: widen [min, max] to include 0; symmetric or asymmetric int8."""
    low, high = min(low, 0.0), max(high, 0.0)
    if high - low <= 0.0 or not math.isfinite(high - low):
        return QParams(1.0, 0)
    if symmetric:
        return QParams(max(-low, high) / 127.0, 0)
    scale = (high - low) / 255.0
    return QParams(scale, int(np.clip(round(-128 - low / scale), -128, 127)))


def weight_scales(weights: Array, per_channel: bool) -> Array:
    """Symmetric weight scales max|w|/127: one, or one per output channel (axis 0)."""
    magnitude = np.abs(weights.astype(np.float64))
    if per_channel and weights.ndim >= 1:
        peaks = magnitude.reshape(weights.shape[0], -1).max(axis=1)
    else:
        peaks = np.array([magnitude.max() if magnitude.size else 0.0])
    return np.where(peaks > 0, peaks / 127.0, 1.0)


@dataclass(frozen=True)
class Multipliers:
    """Integer requantization: `(pre, post, m)` with real multiplier ≈ m / 2^post, pre = 0."""

    values: Array  # int64, each fits in i32
    post: int
    pre: int = 0


def integer_multipliers(real: Array) -> Multipliers:
    """m = round(r·2^post) with the largest post ≤ 62 keeping every |m| < 2^31."""
    peak = float(np.max(np.abs(real))) if real.size else 0.0
    limit = 2.0 ** 31 - 1
    if not math.isfinite(peak) or peak > limit:
        raise GlensideError(f"cannot requantize: a real multiplier of {peak:g} does not fit "
                            f"the i32 multiplier")
    post = 62 if peak == 0.0 else max(0, min(62, math.floor(math.log2(limit / peak))))
    values = np.rint(real.astype(np.float64) * 2.0 ** post)
    values = np.clip(values, -limit, limit).astype(np.int64)
    return Multipliers(values, post)
