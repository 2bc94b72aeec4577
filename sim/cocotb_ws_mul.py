"""cocotb test of ws_mul (combinational): every product (or its low Y_W bits) against
Python's exact one.

Random operands of every magnitude (shifted down to short ones too) and the extremes —
the most negative value, −1, 0, the largest — of each operand against each other.
"""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import params, read, settle


def _signed(value: int, width: int) -> int:
    return value - (1 << width) if value >> (width - 1) else value


def _extremes(width: int) -> list[int]:
    return [-(1 << (width - 1)), -(1 << (width - 1)) + 1, -1, 0, 1, (1 << (width - 1)) - 1]


@cocotb.test()
async def random_products(dut: Any) -> None:
    """The extremes pairwise, then 3000 random pairs; with Y_W < A_W + B_W the product's
    low Y_W bits (the product modulo 2^Y_W, read as signed)."""
    a_width, b_width, y_width = params()["A_W"], params()["B_W"], params()["Y_W"]
    rng = np.random.default_rng(a_width * 64 + b_width)
    pairs = [(a, b) for a in _extremes(a_width) for b in _extremes(b_width)]
    for _ in range(3000):
        a = int(rng.integers(0, 1 << a_width, dtype=np.uint64)) >> int(rng.integers(0, a_width))
        b = int(rng.integers(0, 1 << b_width, dtype=np.uint64)) >> int(rng.integers(0, b_width))
        pairs.append((_signed(a, a_width) if rng.random() < 0.5 else -a >> 1,
                      _signed(b, b_width) if rng.random() < 0.5 else -b >> 1))
    for a, b in pairs:
        dut.a.value = a & ((1 << a_width) - 1)
        dut.b.value = b & ((1 << b_width) - 1)
        await settle()
        got = _signed(read(dut.y), y_width)
        want = _signed((a * b) & ((1 << y_width) - 1), y_width)
        assert got == want, f"{a} · {b}: {got} != {want} (low {y_width} bits)"
