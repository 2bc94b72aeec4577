"""The accelerator's reference functions agree with the interpreter and with plain numpy."""

from __future__ import annotations

import numpy as np
import pytest

from glensidec.hardware.accel import (
    DmaCommand,
    EpilogueConfig,
    MemoryConfig,
    dma_load_bytes,
    dma_load_cycles,
    dma_load_reference,
    dma_rows,
    epilogue_reference,
    im2col_command,
    row_beats,
)
from glensidec.lang.interp import requantize


@pytest.mark.parametrize("seed", range(5))
def test_epilogue_is_the_interpreters_requantize(seed: int) -> None:
    rng = np.random.default_rng(seed)
    acc = rng.integers(-(2**31), 2**31, (50, 16))
    bias = rng.integers(-(2**31), 2**31, 16)
    multiplier, pre, post, zero_point = int(rng.integers(1, 2**31)), 1, int(rng.integers(0, 62)), -7
    config = EpilogueConfig(pre=pre, post=post, zero_point=zero_point)
    got = epilogue_reference(acc, np.broadcast_to(bias, acc.shape), np.full(16, multiplier), config)
    biased = (acc + bias + 2**31) % 2**32 - 2**31  # the program's i32 add
    expected = requantize(biased.astype(np.int32), multiplier, pre, post, zero_point)
    assert np.array_equal(got, expected.astype(np.int64))
    relu = epilogue_reference(acc, bias[None, :], np.full(16, multiplier),
                              EpilogueConfig(pre=pre, post=post, zero_point=zero_point, low=-7))
    assert np.array_equal(relu, np.maximum(expected, -7))


def numpy_im2col(feature: np.ndarray, kernel: int, stride: int, padding: int,
                 zero_point: int) -> np.ndarray:
    height, width, channels = feature.shape
    padded = np.full((height + 2 * padding, width + 2 * padding, channels), zero_point, np.int64)
    padded[padding:padding + height, padding:padding + width] = feature
    out_h = (height + 2 * padding - kernel) // stride + 1
    out_w = (width + 2 * padding - kernel) // stride + 1
    patches = [padded[y:y + kernel, x:x + kernel].reshape(-1)
               for y in range(0, out_h * stride, stride) for x in range(0, out_w * stride, stride)]
    return np.array(patches)


@pytest.mark.parametrize(("size", "channels", "kernel", "stride", "padding"),
                         [(6, 8, 3, 1, 1), (7, 4, 3, 2, 1), (5, 16, 1, 1, 0), (9, 8, 7, 2, 3)])
def test_im2col_commands_build_the_im2col_matrix(size: int, channels: int, kernel: int,
                                                 stride: int, padding: int) -> None:
    """One command per (tap, channel chunk) fills one K fold; together they are im2col."""
    rng = np.random.default_rng(size)
    row_bytes, zero_point, base = 4, 0x85, 40
    feature = rng.integers(0, 256, (size, size, channels))
    memory = np.zeros(base + feature.size + 64, np.uint8)
    memory[base:base + feature.size] = feature.reshape(-1)
    expected = numpy_im2col(feature, kernel, stride, padding, zero_point)
    folds = []
    for ky in range(kernel):
        for kx in range(kernel):
            for channel0 in range(0, channels, row_bytes):
                command = im2col_command(
                    feature_base=base, height=size, width=size, channels=channels,
                    kernel=(kernel, kernel), stride=stride, padding=padding, tap=(ky, kx),
                    channel0=channel0, length=row_bytes, spad_row=100, zero_point=zero_point)
                rows = dma_load_reference(memory, command, row_bytes)
                assert sorted(rows) == list(range(100, 100 + expected.shape[0]))
                folds.append(np.array([rows[r] for r in sorted(rows)]))
    assert np.array_equal(np.concatenate(folds, axis=1), expected)


def test_strided_load_and_its_cycles() -> None:
    memory = np.arange(256, dtype=np.uint8)
    command = DmaCommand(base=3, length=5, count1=3, stride1=20, count2=2, stride2=100, spad_row=7)
    rows = dma_load_reference(memory, command, 8)
    assert list(rows[7][:6]) == [3, 4, 5, 6, 7, 0]
    assert list(rows[12][:5]) == list(range(143, 148))
    # rows at 3, 23, 43, 103, 123, 143 of 5 bytes: 143..147 crosses a 16-byte beat
    assert [row_beats(r.addr, 5, 16) for r in dma_rows(command)] == [1, 1, 1, 1, 1, 2]
    assert dma_load_cycles([command], bus_bytes=16, latency=10) == 7 + 10 + 2
    assert dma_load_bytes(command, 16) == 7 * 16


def test_memory_config_defaults_and_errors() -> None:
    config = MemoryConfig()
    assert (config.scratchpad_rows, config.bank_rows) == (16384, 4096)
    with pytest.raises(ValueError, match="bus_bytes must be a power of two, got 12"):
        MemoryConfig(bus_bytes=12)
    with pytest.raises(ValueError, match="1000-byte scratchpad"):
        MemoryConfig(scratchpad_bytes=1000)
