"""The GEMM driver's memory layout and word formats, checked without a simulator."""

from __future__ import annotations

import numpy as np
import pytest

from glensidec.cosim.rtl_driver import (
    build_images,
    hex_lines,
    pack_rows,
    parse_hex_lines,
    unpack_rows,
)
from glensidec.hardware.array import ArrayConfig, gemm_tiles


@pytest.mark.parametrize("width", [8, 12, 32])
def test_words_round_trip_through_ints_and_hex(width: int) -> None:
    rng = np.random.default_rng(width)
    values = rng.integers(-(1 << (width - 1)), 1 << (width - 1), (40, 5))
    words = pack_rows(values, width)
    assert np.array_equal(unpack_rows(words, 5, width), values)
    assert parse_hex_lines(hex_lines(values, width)) == words
    # lane 0 sits in the least significant bits
    assert words[0] & ((1 << width) - 1) == int(values[0, 0]) & ((1 << width) - 1)


def test_images_follow_the_tile_schedule() -> None:
    config = ArrayConfig(4, 4, acc_depth=8)
    rng = np.random.default_rng(0)
    M, K, N = 19, 9, 6
    A = rng.integers(-128, 128, (M, K))
    B = rng.integers(-128, 128, (K, N))
    D = rng.integers(-1000, 1000, (M, N))
    images = build_images(config, A, B, D)
    tiles = gemm_tiles(config, M, K, N, has_d=True)
    assert len(images.weights) == config.rows * len(tiles)
    # first weight beat of the first tile is the bottom row of B's first block (row 3)
    assert np.array_equal(images.weights[0], B[3, :4])
    # each (M chunk, K fold) activation block is stored once, not once per N block
    blocks = {(t.m0, t.k0) for t in tiles}
    assert len(images.activations) == sum(t.m_len for t in tiles if t.n0 == 0)
    assert len(images.tiles) == len(tiles)
    a_bases = {word & 0xFFFFFFFF for word in images.tiles}
    assert len(a_bases) == len(blocks)
    assert len(images.d_rows) == sum(t.m_len for t in tiles if t.use_d)
    assert [slot[0] for slot in images.result_slots[: M // 3]] == list(range(M // 3))
