"""Random binary32 operands with the edge cases weighted in, and numpy's float32 results.

Shared by the fp32_mul / fp32_add testbenches (sim/) and bench/bench_fp32.py. Operands are
drawn per lane from a mix of classes: uniformly random bit patterns (every class, rarely
subnormal), signed zeros, infinities, NaNs, subnormals, the extremes of the normal range,
numbers near 1 (rounding ties and cancellation when added), and exponent-matched pairs
(products near overflow and underflow, sums that cancel to a subnormal or zero).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Bits = npt.NDArray[np.uint32]

SPECIALS = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                     0x7F800001, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x80800000,
                     0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F800001, 0x33800000,
                     0x34000000, 0x3F7FFFFF], dtype=np.uint32)


def _with_exponent(rng: np.random.Generator, exponents: npt.NDArray[np.int64]) -> Bits:
    """Random sign and fraction with the given biased exponents."""
    size = exponents.shape
    sign = rng.integers(0, 2, size, dtype=np.uint32) << np.uint32(31)
    fraction = rng.integers(0, 1 << 23, size, dtype=np.uint32)
    # Short fractions make exact ties (the rounding's even rule) common.
    short = rng.random(size) < 0.25
    fraction = np.where(short, fraction & np.uint32(0x7FC000), fraction)
    return sign | (exponents.astype(np.uint32) << np.uint32(23)) | fraction


def operands(rng: np.random.Generator, count: int) -> tuple[Bits, Bits]:
    """`count` pairs (a, b) as uint32 bit patterns."""
    kind = rng.integers(0, 6, count)
    random_bits = rng.integers(0, 1 << 32, (2, count), dtype=np.uint32)
    specials = SPECIALS[rng.integers(0, len(SPECIALS), (2, count))]
    subnormal = (rng.integers(0, 1 << 23, (2, count), dtype=np.uint32)
                 | (rng.integers(0, 2, (2, count), dtype=np.uint32) << np.uint32(31)))
    near_one = _with_exponent(rng, rng.integers(120, 135, (2, count)))
    # Products near the ends of the range: exponents summing to ~127 ± 127 ± 24.
    ea = rng.integers(1, 255, count)
    eb = np.clip(rng.integers(-24, 25, count) + rng.choice([0, 254], count) + 127 - ea, 1, 254)
    edge_pair = np.stack([_with_exponent(rng, ea), _with_exponent(rng, eb)])
    # Sums that (nearly) cancel: b = -a with a few low bits changed, or close exponents.
    close = _with_exponent(rng, rng.integers(0, 255, count))
    jitter = rng.integers(0, 8, count, dtype=np.uint32)
    cancel = np.stack([close, (close ^ np.uint32(0x80000000)) ^ jitter])
    choices = [random_bits, specials, subnormal, near_one, edge_pair, cancel]
    a = np.select([kind == k for k in range(6)], [c[0] for c in choices])
    b = np.select([kind == k for k in range(6)], [c[1] for c in choices])
    # Mix classes across the two operands too (a subnormal times a special, ...).
    mix = rng.random(count) < 0.2
    b = np.where(mix, random_bits[1], b)
    return a.astype(np.uint32), b.astype(np.uint32)


def expected(op: str, a: Bits, b: Bits) -> Bits:
    """numpy's float32 result bits (IEEE, round to nearest even, no flush to zero)."""
    x, y = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        result = x * y if op == "mul" else x + y
    return result.astype(np.float32).view(np.uint32)


def mismatches(got: Bits, want: Bits) -> npt.NDArray[np.bool_]:
    """Lanes whose bits differ; a NaN matches any NaN (IEEE leaves the payload open)."""
    def is_nan(v: Bits) -> npt.NDArray[np.bool_]:
        return ((v & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & \
            ((v & np.uint32(0x007FFFFF)) != 0)
    return (got != want) & ~(is_nan(got) & is_nan(want))
