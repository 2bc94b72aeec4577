"""cocotb tests of the binary32 ws_top (FP = 1) inside tb_ws_gemm, whole GEMMs per call.

Result bits are checked against `reference_gemm_f32` (the array's summation order, every
operation rounded to nearest even; a NaN matches any NaN) and the cycle of every result
row against `glensidec.hardware.array`: the binary32 PE takes one cycle like the integer
one, so the same timing model must hold exactly.
"""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np

from glensidec.cosim.rtl_driver import GemmDriver, GemmRun, config_from_env
from glensidec.hardware.array import ArrayConfig, gemm_cycles, reference_gemm_f32, result_cycles


def operands(rng: np.random.Generator, shape: tuple[int, int], edgy: bool) -> np.ndarray:
    """Normal-range values, or (edgy) a mix with zeros of both signs, subnormals, huge
    values that overflow when summed, and the odd infinity."""
    values = rng.standard_normal(shape).astype(np.float32)
    if not edgy:
        return values
    pick = rng.random(shape)
    subnormal = (rng.integers(1, 1 << 23, shape, dtype=np.uint32)
                 | (rng.integers(0, 2, shape, dtype=np.uint32) << np.uint32(31))).view(np.float32)
    values = np.where(pick < 0.15, np.float32(0.0), values)
    values = np.where((pick >= 0.15) & (pick < 0.25), np.float32(-0.0), values)
    values = np.where((pick >= 0.25) & (pick < 0.4), subnormal, values)
    values = np.where((pick >= 0.4) & (pick < 0.45), np.float32(3e38), values)
    values = np.where((pick >= 0.45) & (pick < 0.47), np.float32(np.inf), values)
    tiny = rng.random(shape) < 0.2  # products that underflow into the subnormals
    return np.where(tiny, values * np.float32(1e-20), values).astype(np.float32)


def same_bits(got: np.ndarray, want: np.ndarray) -> int:
    """How many entries differ in bits (NaNs compared as NaN)."""
    bits_differ = got.view(np.uint32) != want.view(np.uint32)
    both_nan = np.isnan(got) & np.isnan(want)
    return int(np.count_nonzero(bits_differ & ~both_nan))


def check(config: ArrayConfig, run: GemmRun, A: np.ndarray, B: np.ndarray,
          D: np.ndarray | None) -> None:
    want = reference_gemm_f32(A, B, D, config.rows)
    wrong = same_bits(run.C, want)
    assert wrong == 0, f"{wrong} of {want.size} differ for {A.shape}x{B.shape}"
    M, K = A.shape
    N = B.shape[1]
    assert run.result_cycles == result_cycles(config, run.tiles), (M, K, N)
    assert run.cycles == gemm_cycles(config, M, K, N), (run.cycles, M, K, N)


async def _driver(dut: Any) -> tuple[ArrayConfig, GemmDriver]:
    config = config_from_env()
    driver = GemmDriver(dut, config)
    await driver.reset()
    return config, driver


@cocotb.test()
async def random_gemms(dut: Any) -> None:
    """Shapes around every fold edge, with and without D, plain and edge-case values."""
    config, driver = await _driver(dut)
    rng = np.random.default_rng(config.rows * 100 + config.cols)
    R, C = config.rows, config.cols
    shapes = [(1, 1, 1), (R, R, C), (R + 1, R - 1, C + 1), (3, 2 * R + 1, 2 * C + 1),
              (config.acc_depth + R + 1, 2 * R + 1, C + 1), (2 * R + 3, 3 * R + 2, 1)]
    for index, (M, K, N) in enumerate(shapes):
        for edgy in (False, True):
            A, B = operands(rng, (M, K), edgy), operands(rng, (K, N), edgy)
            D = operands(rng, (M, N), edgy) if index % 2 else None
            check(config, await driver.gemm(A, B, D), A, B, D)
