"""The int8 quantization of a program's inputs and output: `real = scale·(q − zero_point)`.

A quantized program declares it (`(input x i8 (shape …) (quantized SCALE ZERO_POINT))` and
`(quantized-output SCALE ZERO_POINT)`, docs/language.md#quantized-inputs-and-output), so a
float32 array can be given for such an input and the result read back as float32.

This module is the one definition of the arithmetic: the quantizer
(`glensidec.frontends.qparams.QParams` is this class), `glensidec run` and the checks of the
generated C all use `quantize`/`dequantize`, and the C harness's `gs_quantize_f32` is their
twin (templates/main.c): the division in double, rounding half to even, adding the zero
point, saturating to i8. NaN has no int8 value: `check_float_input` rejects it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glensidec.errors import GlensideError, Span

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Quantization:
    """`real = scale·(q − zero_point)` for q in i8."""

    scale: float
    zero_point: int
    span: Span | None = field(default=None, compare=False, repr=False)

    def problem(self) -> str | None:
        """Why these parameters cannot describe i8 values, or None."""
        if not (math.isfinite(self.scale) and self.scale > 0):
            return f"the scale must be a positive finite number, got {self.scale!r}"
        if not -128 <= self.zero_point <= 127:
            return f"the zero point must be in -128…127 (i8), got {self.zero_point}"
        return None

    def quantize(self, real: Array) -> Array:
        """q = clip(round_half_even(real / scale) + zero_point, −128, 127), in float64."""
        q = np.rint(np.asarray(real, dtype=np.float64) / self.scale) + self.zero_point
        clipped: Array = np.clip(q, -128, 127).astype(np.int8)
        return clipped

    def dequantize(self, q: Array) -> Array:
        """scale·(q − zero_point), computed in float64 and rounded once to float32."""
        return ((np.asarray(q, dtype=np.float64) - self.zero_point) * self.scale).astype(
            np.float32)

    def text(self) -> str:
        """The parameters as the language writes them (the scale round-trips exactly)."""
        return f"{float(self.scale)!r} {int(self.zero_point)}"


def check_float_input(name: str, array: Array, origin: str) -> None:
    """A float input must not hold NaN (±inf saturates to −128/127 like any large value)."""
    nans = int(np.count_nonzero(np.isnan(array)))
    if nans:
        raise GlensideError(f"input '{name}': {origin} holds {nans} NaN value(s), which have "
                            "no int8 quantization")
