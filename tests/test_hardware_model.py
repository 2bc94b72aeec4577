"""Unit tests of the systolic-array cycle model and reference (no simulator needed).

Equality of the model with the RTL is tested in sim/ (test_ws_top.py) and measured in
bench/bench_array.py; here the model's own rules and its relation to the bounds are
checked.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from glensidec.hardware.array import (
    ArrayConfig,
    gemm_cycles,
    gemm_tiles,
    m_chunks,
    reference_gemm,
    resource_count,
    result_cycles,
    scalesim_ws_cycles,
    t_min,
    tile_sequence_cycles,
    tile_timings,
)
from glensidec.lang.dtypes import dtype, wrap, wrap_signed

CONFIGS = [ArrayConfig(2, 2), ArrayConfig(4, 8), ArrayConfig(8, 4), ArrayConfig(16, 16)]


def shapes(config: ArrayConfig) -> list[tuple[int, int, int]]:
    """Every combination of dimensions around the array edges."""
    R, C = config.rows, config.cols
    ms = [1, R - 1, R, R + 1, 3 * R + 2]
    ks = [1, R - 1, R, R + 1, 3 * R + 2]
    ns = [1, C - 1 or 1, C, C + 1, 2 * C + 3]
    return list(itertools.product(ms, ks, ns))


def test_formulas_match_their_definitions_on_a_worked_example() -> None:
    config = ArrayConfig(4, 4)
    # K=8, N=8 on 4x4: F = 2 * 2 = 4 folds.
    assert t_min(config, 10, 8, 8) == 4 + 4 * 10 + (4 + 4 - 2)
    assert scalesim_ws_cycles(config, 10, 8, 8) == 4 * (2 * 4 + 4 + 10 - 2)
    # M below R: the bound charges R per fold for loading weights.
    assert t_min(config, 1, 8, 8) == 4 + 4 * 4 + 6


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_gemm_cycles_equal_the_bound_when_m_covers_the_weight_load(config: ArrayConfig) -> None:
    for m, k, n in shapes(config):
        if m >= config.rows:
            assert gemm_cycles(config, m, k, n) == t_min(config, m, k, n), (m, k, n)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_gemm_cycles_never_exceed_the_bound_or_scalesim(config: ArrayConfig) -> None:
    for M, K, N in shapes(config):
        cycles = gemm_cycles(config, M, K, N)
        assert cycles <= t_min(config, M, K, N), (M, K, N)
        assert cycles <= scalesim_ws_cycles(config, M, K, N), (M, K, N)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_single_fold_takes_exactly_scalesim_time(config: ArrayConfig) -> None:
    R, C = config.rows, config.cols
    for M in (1, R, 5 * R + 1):
        assert gemm_cycles(config, M, R, C) == scalesim_ws_cycles(config, M, R, C)


@pytest.mark.parametrize("config", [*CONFIGS, ArrayConfig(4, 4, acc_depth=8)], ids=str)
def test_tiles_cover_every_multiply_accumulate_once(config: ArrayConfig) -> None:
    M, K, N = 3 * config.rows + 5, 2 * config.rows + 1, 2 * config.cols + 1
    covered = np.zeros((M, K, N), dtype=np.int64)
    for tile in gemm_tiles(config, M, K, N, has_d=True):
        assert 1 <= tile.k_len <= config.rows and 1 <= tile.n_len <= config.cols
        covered[
            tile.m0 : tile.m0 + tile.m_len,
            tile.k0 : tile.k0 + tile.k_len,
            tile.n0 : tile.n0 + tile.n_len,
        ] += 1
    assert np.all(covered == 1)


def test_fold_flags_start_accumulate_and_emit_in_order() -> None:
    config = ArrayConfig(4, 4)
    tiles = gemm_tiles(config, 6, 10, 5, has_d=True)  # 3 K folds, 2 N blocks
    per_block = [tiles[i : i + 3] for i in range(0, len(tiles), 3)]
    assert len(per_block) == 2
    for block in per_block:
        assert [(t.use_d, t.add, t.emit) for t in block] == [
            (True, False, False),
            (False, True, False),
            (False, True, True),
        ]
        assert len({t.n0 for t in block}) == 1


def test_m_chunks_are_balanced_and_fit_the_accumulator() -> None:
    config = ArrayConfig(4, 4, acc_depth=10)
    chunks = m_chunks(config, 37, K=9)
    assert sum(length for _, length in chunks) == 37
    assert all(length <= 10 for _, length in chunks)
    assert max(length for _, length in chunks) - min(length for _, length in chunks) <= 1
    starts = [start for start, _ in chunks]
    assert starts == sorted(starts) and starts[0] == 0
    # One K fold needs no accumulator, so M is not split.
    assert m_chunks(config, 37, K=4) == [(0, 37)]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_tile_timings_respect_the_controller_rules(config: ArrayConfig) -> None:
    R = config.rows
    for M, K, N in shapes(config):
        tiles = gemm_tiles(config, M, K, N)
        timings = tile_timings(config, tiles)
        for j, timing in enumerate(timings):
            assert timing.first_row >= timing.commit  # weights committed (or bypassed)
            if j >= 1:
                assert timing.commit - timings[j - 1].commit >= R  # R beats per tile
                assert timing.first_row > timings[j - 1].last_row  # one row per cycle
            if j >= 2:
                assert timing.commit >= timings[j - 2].last_row + R  # bank drained


def test_results_leave_in_order_one_per_cycle_at_most() -> None:
    config = ArrayConfig(8, 4)
    cycles = result_cycles(config, gemm_tiles(config, 20, 30, 9))
    assert len(cycles) == 20 * 3
    assert all(later > earlier for earlier, later in itertools.pairwise(cycles))
    assert tile_sequence_cycles(config, gemm_tiles(config, 20, 30, 9)) == cycles[-1] + 1


def scalar_reference(A: np.ndarray, B: np.ndarray, D: np.ndarray | None, width: int) -> list:
    """Element by element, wrapping after every addition as the hardware does."""
    M, K = A.shape
    N = B.shape[1]
    half, modulus = 1 << (width - 1), 1 << width
    out = []
    for m in range(M):
        row = []
        for n in range(N):
            total = int(D[m, n]) if D is not None else 0
            for k in range(K):
                total = (total + int(A[m, k]) * int(B[k, n]) + half) % modulus - half
            row.append(total)
        out.append(row)
    return out


@pytest.mark.parametrize("width", [16, 24, 32])
def test_reference_gemm_wraps_like_step_by_step_accumulation(width: int) -> None:
    rng = np.random.default_rng(width)
    A = rng.choice(np.array([-128, 127, -1, 0, 55]), (5, 40))
    B = rng.choice(np.array([-128, 127, -1, 0, -77]), (40, 3))
    D = rng.integers(-(1 << (width - 1)), 1 << (width - 1), (5, 3))
    for d in (None, D):
        got = reference_gemm(A, B, d, acc_width=width)
        assert got.dtype == np.int32
        assert got.tolist() == scalar_reference(A, B, d, width)


def test_reference_gemm_int32_extremes_wrap() -> None:
    A = np.full((1, 1), -128)
    B = np.full((1, 1), -128)
    D = np.full((1, 1), 2**31 - 1)
    assert int(reference_gemm(A, B, D)[0, 0]) == int(wrap_signed(np.array(2**31 - 1 + 16384), 32))
    assert int(reference_gemm(A, B, D)[0, 0]) < 0


def test_wrap_signed_agrees_with_the_dtype_casts() -> None:
    """One wrap: at a dtype's width it is numpy's own two's-complement cast."""
    values = np.random.default_rng(0).integers(-(2**40), 2**40, size=1000)
    for name in ("i8", "i16", "i32"):
        expected = wrap(values, name).astype(np.int64)
        assert wrap_signed(values, dtype(name).bits).tolist() == expected.tolist()
    assert int(wrap_signed(2**23, 24)) == -(2**23)


def test_rtl_parameters_round_trip() -> None:
    config = ArrayConfig(8, 4, acc_width=24, acc_depth=96)
    assert config.rtl_parameters() == {"ROWS": 8, "COLS": 4, "IN_W": 8, "ACC_W": 24,
                                       "ACC_DEPTH": 96}
    assert ArrayConfig.from_rtl_parameters({**config.rtl_parameters(), "W_DEPTH": 5}) == config


def test_reference_gemm_rejects_bad_operands() -> None:
    with pytest.raises(ValueError):
        reference_gemm(np.full((2, 2), 128), np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(ValueError):
        reference_gemm(np.zeros((2, 3), dtype=np.int64), np.zeros((2, 2), dtype=np.int64))


def test_array_config_validation() -> None:
    with pytest.raises(ValueError):
        ArrayConfig(1, 4)
    with pytest.raises(ValueError):
        ArrayConfig(4, 4, in_width=8, acc_width=12)
    with pytest.raises(ValueError):
        gemm_cycles(ArrayConfig(4, 4), 0, 4, 4)


def test_resource_count_of_the_smallest_array_by_hand() -> None:
    count = resource_count(ArrayConfig(2, 2))
    # 4 PEs x (a 8 + chain 8 + banks 16 + psum 32 + sel 1); skews with one stage per
    # triangle: activation 9 bits, weight lane 11, D 32, de-skew 32.
    assert count.pe_register_bits == 4 * 65
    assert count.skew_register_bits == 9 + 11 + 32 + 32
    assert (count.multipliers, count.adders) == (4, 6)
    assert count.accumulator_bits == 1024 * 2 * 32


@pytest.mark.parametrize("config", [*CONFIGS, ArrayConfig(4, 4, acc_depth=8)], ids=str)
def test_gemm_cycles_follow_the_tile_schedule_it_summarises(config: ArrayConfig) -> None:
    # gemm_cycles runs the tile recurrence on plain integers (and memoises it); it must
    # agree with the Tile-object definition on every shape, including M chunking.
    R, C = config.rows, config.cols
    for M in (1, R - 1, R, 3 * R + 5, 20):
        for K in (1, R, 2 * R + 1, 5 * R):
            for N in (1, C, 2 * C + 1):
                reference = tile_sequence_cycles(config, gemm_tiles(config, M, K, N))
                assert gemm_cycles(config, M, K, N) == reference, (M, K, N)
