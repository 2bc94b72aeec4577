"""cocotb tests of ws_top inside tb_ws_gemm, whole GEMMs per transaction.

Every test checks the result bits against `reference_gemm` and the cycle of every result
row against a model: `glensidec.hardware.array` for gap-free streaming, `models.py`'s
cycle-level stream model when the wrapper inserts random gaps and back-pressure.
"""

from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles
from models import stream_result_cycles

from glensidec.cosim.rtl_driver import (
    GemmDriver,
    GemmRun,
    StreamGaps,
    build_images,
    config_from_env,
)
from glensidec.hardware.array import (
    ArrayConfig,
    gemm_cycles,
    gemm_tiles,
    reference_gemm,
    result_cycles,
    tile_timings,
)

INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def edge_sizes(size: int) -> list[int]:
    """Dimensions around one array edge: 1, size-1, size, size+1, more than two folds."""
    return sorted({1, max(size - 1, 1), size, size + 1, 2 * size + 3})


def random_shapes(config: ArrayConfig, rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Shapes that hit every fold edge, plus M chunks beyond the accumulator depth."""
    shapes = [
        (int(rng.choice(edge_sizes(config.rows))), k, n)
        for k in edge_sizes(config.rows)
        for n in edge_sizes(config.cols)
    ]
    picked = [shapes[i] for i in rng.choice(len(shapes), size=6, replace=False)]
    picked.append((config.acc_depth + 2 * config.rows + 1, 2 * config.rows + 1, config.cols + 1))
    picked.append((3 * config.rows, 3 * config.rows + 2, 3 * config.cols - 1))
    return picked


def random_operands(
    rng: np.random.Generator, M: int, K: int, N: int, with_d: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    A = rng.integers(INT8_MIN, INT8_MAX + 1, (M, K))
    B = rng.integers(INT8_MIN, INT8_MAX + 1, (K, N))
    D = rng.integers(INT32_MIN, INT32_MAX + 1, (M, N)) if with_d else None
    return A, B, D


def check_data(run: GemmRun, A: np.ndarray, B: np.ndarray, D: np.ndarray | None) -> None:
    expected = reference_gemm(A, B, D)
    mismatches = int(np.count_nonzero(expected != run.C))
    assert mismatches == 0, f"{mismatches} of {expected.size} differ for {A.shape}x{B.shape}"


def check_gap_free_timing(config: ArrayConfig, run: GemmRun, M: int, K: int, N: int) -> None:
    predicted = result_cycles(config, run.tiles)
    assert run.result_cycles == predicted, f"result cycles differ from the model for {(M, K, N)}"
    assert run.cycles == gemm_cycles(config, M, K, N)
    assert run.stall_cycles == 0


async def new_driver(dut: object, transfer: str = "files") -> tuple[ArrayConfig, GemmDriver]:
    config = config_from_env()
    driver = GemmDriver(dut, config, transfer=transfer)
    await driver.reset()
    return config, driver


@cocotb.test()
async def random_exact_timing(dut: object) -> None:
    """Random int8 GEMMs, back-to-back tiles, with and without D: bits and every cycle."""
    config, driver = await new_driver(dut)
    rng = np.random.default_rng(config.rows * 100 + config.cols)
    for M, K, N in random_shapes(config, rng):
        for with_d in (False, True):
            A, B, D = random_operands(rng, M, K, N, with_d)
            run = await driver.gemm(A, B, D)
            check_data(run, A, B, D)
            check_gap_free_timing(config, run, M, K, N)


def extreme_cases(M: int, K: int, N: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Operand patterns at the int8 and int32 limits; D pushes the sums past wrap-around."""
    full = np.full
    checker = np.where(np.indices((M, K)).sum(axis=0) % 2 == 0, INT8_MIN, INT8_MAX)
    return [
        ("min*min+max", full((M, K), INT8_MIN), full((K, N), INT8_MIN), full((M, N), INT32_MAX)),
        ("max*min+min", full((M, K), INT8_MAX), full((K, N), INT8_MIN), full((M, N), INT32_MIN)),
        ("all-ones", full((M, K), -1), full((K, N), -1), full((M, N), -1)),
        ("zeros", np.zeros((M, K), int), np.zeros((K, N), int), np.zeros((M, N), int)),
        ("max*max", full((M, K), INT8_MAX), full((K, N), INT8_MAX), full((M, N), INT32_MAX)),
        ("checker", checker, full((K, N), INT8_MIN), full((M, N), INT32_MIN)),
    ]


@cocotb.test()
async def extreme_values(dut: object) -> None:
    """-128, 127, all-ones (-1) and zeros, with D at the int32 limits (wraps)."""
    config, driver = await new_driver(dut)
    M, K, N = 2 * config.rows + 1, 3 * config.rows + 1, 2 * config.cols + 1
    for name, A, B, D in extreme_cases(M, K, N):
        for d in (None, D):
            run = await driver.gemm(A, B, d)
            expected = reference_gemm(A, B, d)
            assert np.array_equal(run.C, expected), f"pattern {name} (D={d is not None})"
            check_gap_free_timing(config, run, M, K, N)


GAP_SETTINGS = [
    StreamGaps(weights=64, activations=64, d=64, result_stall=64, seed=3),
    StreamGaps(weights=200, activations=30, d=120, result_stall=0, seed=7),
    StreamGaps(weights=0, activations=0, d=0, result_stall=180, seed=11),
    StreamGaps(weights=128, activations=128, d=128, result_stall=128, seed=0xBEEF),
]


@cocotb.test()
async def gaps_and_backpressure(dut: object) -> None:
    """Random gaps on every valid, random back-pressure on ready: bits and every cycle."""
    config, driver = await new_driver(dut)
    rng = np.random.default_rng(config.rows * 7 + config.cols)
    shapes = [(2 * config.rows + 3, 2 * config.rows + 1, config.cols + 2), (3, config.rows, 1)]
    for gaps in GAP_SETTINGS:
        for M, K, N in shapes:
            A, B, D = random_operands(rng, M, K, N, with_d=True)
            run = await driver.gemm(A, B, D, gaps)
            check_data(run, A, B, D)
            tiles = gemm_tiles(config, M, K, N, has_d=True)
            assert run.result_cycles == stream_result_cycles(config, tiles, gaps)
            assert run.cycles >= gemm_cycles(config, M, K, N)


@cocotb.test()
async def reset_mid_tile(dut: object) -> None:
    """Reset while a tile streams; the next GEMM must be exact in bits and cycles."""
    config, driver = await new_driver(dut)
    rng = np.random.default_rng(5)
    M, K, N = 2 * config.rows + 1, 3 * config.rows, 2 * config.cols
    A, B, D = random_operands(rng, M, K, N, with_d=True)
    tiles = gemm_tiles(config, M, K, N, has_d=True)
    middle_of_second_tile = tile_timings(config, tiles)[1].first_row + M // 2
    driver.load(build_images(config, A, B, D), StreamGaps(result_stall=40, seed=9))
    await driver.start()
    await ClockCycles(dut.clk, middle_of_second_tile)  # type: ignore[attr-defined]
    assert not int(dut.done.value)  # type: ignore[attr-defined]
    await driver.reset()
    for with_d in (True, False):
        A, B, D = random_operands(rng, M, K, N, with_d)
        run = await driver.gemm(A, B, D)
        check_data(run, A, B, D)
        check_gap_free_timing(config, run, M, K, N)


@cocotb.test()
async def vpi_transfer(dut: object) -> None:
    """The driver's word-by-word VPI transfer gives the same bits and cycles as files."""
    config, driver = await new_driver(dut, transfer="vpi")
    rng = np.random.default_rng(17)
    for M, K, N in [(config.rows + 2, 2 * config.rows + 1, config.cols + 3), (1, 1, 1)]:
        A, B, D = random_operands(rng, M, K, N, with_d=True)
        run = await driver.gemm(A, B, D)
        check_data(run, A, B, D)
        check_gap_free_timing(config, run, M, K, N)
