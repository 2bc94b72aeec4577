"""The accelerator's reference functions agree with the interpreter and with plain numpy."""

from __future__ import annotations

import numpy as np
import pytest

from glensidec.hardware.accel import (
    CapacityError,
    ConvLayer,
    DmaCommand,
    EpilogueConfig,
    LayerPlan,
    MemoryConfig,
    ResidualConfig,
    dma_load_bytes,
    dma_load_cycles,
    dma_load_reference,
    dma_load_slots,
    dma_rows,
    epilogue_reference,
    im2col_command,
    im2col_load_slots,
    layer_cost,
    plan_layer,
    residual_range_error,
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


# The epilogue's residual multipliers are 16-bit signed, the late sum 24-bit (int8 output).
QUANTIZER_RESIDUAL = ResidualConfig(self_multiplier=2**14, multiplier=-(2**14),
                                    offset=-127 * 2**14 - 128 * 2**14)


@pytest.mark.parametrize(("residual", "problem"), [
    (QUANTIZER_RESIDUAL, None),  # the quantizer's extremes: |sum| ≤ 255·2^15 < 2^23
    (ResidualConfig(self_multiplier=-(2**15), multiplier=2**15 - 1), None),
    (ResidualConfig(self_multiplier=2**15), "self multiplier 32768 does not fit"),
    (ResidualConfig(multiplier=-(2**15) - 1), "multiplier -32769 does not fit"),
    (ResidualConfig(multiplier=2**15, early=True), "multiplier 32768 does not fit"),
    # early, self_multiplier is unused and the sum is the accumulator's 32 bits
    (ResidualConfig(self_multiplier=2**20, multiplier=3, offset=2**31 - 1, early=True), None),
    # y in [-128, 127], r in [-128, 127]: the sum's ends at the 24-bit limits and one past
    (ResidualConfig(self_multiplier=2**14, multiplier=2**14, offset=-(2**23) + 2**22), None),
    (ResidualConfig(self_multiplier=2**14, multiplier=2**14, offset=-(2**23) + 2**22 - 1),
     "spans [-8388609, "),
    (ResidualConfig(self_multiplier=1, multiplier=1, offset=2**23 - 1 - 254), None),
    (ResidualConfig(self_multiplier=1, multiplier=1, offset=2**23 - 254), ", 8388608]"),
])
def test_residual_range_error_is_the_epilogues_widths(residual: ResidualConfig,
                                                      problem: str | None) -> None:
    found = residual_range_error(residual, EpilogueConfig())
    assert found == problem if problem is None else problem in (found or "")


def test_the_residual_sums_range_follows_the_clip_bounds() -> None:
    # y clipped to [0, 3]: a self multiplier of 2^15 − 1 cannot reach the sum's limits
    narrow = ResidualConfig(self_multiplier=2**15 - 1, multiplier=0, offset=2**23 - 1 - 3 * 32767)
    assert residual_range_error(narrow, EpilogueConfig(low=0, high=3)) is None
    assert residual_range_error(narrow, EpilogueConfig(low=0, high=4)) is not None


def test_epilogue_reference_refuses_a_residual_the_epilogue_cannot_compute() -> None:
    acc = np.zeros((1, 4), np.int64)
    wide = ResidualConfig(self_multiplier=2**15)
    with pytest.raises(ValueError, match="does not fit the epilogue's 16-bit"):
        epilogue_reference(acc, acc, np.ones(4, np.int64), EpilogueConfig(), residual=wide,
                           residual_rows=acc)


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


@pytest.mark.parametrize("layer", [ConvLayer("a", 7, 7, 32, 8, 3, 2, 1),
                                   ConvLayer("b", 6, 5, 3, 8, 3, 1, 1),
                                   ConvLayer("c", 4, 4, 16, 8, 1, 1, 0)], ids=lambda v: v.name)
@pytest.mark.parametrize("bus", [16, 8])
def test_layer_load_slots_are_the_dma_commands_slots(layer: ConvLayer, bus: int) -> None:
    """The vectorized count used by the planner equals the DMA's own, command by command."""
    out_h, out_w = layer.out_size
    expected = sum(
        dma_load_slots(im2col_command(
            feature_base=0, height=layer.height, width=layer.width, channels=layer.channels,
            kernel=(layer.kernel, layer.kernel), stride=layer.stride, padding=layer.padding,
            tap=(ky, kx), channel0=c0, length=min(16, layer.channels - c0), spad_row=0,
            zero_point=0), bus)
        for ky in range(layer.kernel) for kx in range(layer.kernel)
        for c0 in range(0, layer.channels, 16))
    assert im2col_load_slots(layer, 16, bus, 0, out_h * out_w) == expected


def test_plans_respect_memory_and_bandwidth() -> None:
    layer = ConvLayer("l", 14, 14, 64, 64, 3, 1, 1)
    fast = plan_layer(16, 16, 1024, MemoryConfig(), layer)
    slow = plan_layer(16, 16, 1024, MemoryConfig(bus_bytes=8), layer)
    assert fast.compute_cycles <= fast.total_cycles <= slow.total_cycles
    assert fast.bytes_loaded >= layer.height * layer.width * layer.channels
    with pytest.raises(CapacityError, match=r"layer l: a tile of 1 activation rows × 36 K folds "
                                            r"and 576 weight rows \(16 B each\) does not fit a "
                                            r"4096-byte buffer"):
        layer_cost(16, 16, 1024, MemoryConfig(scratchpad_bytes=16 * 1024), layer,
                   LayerPlan(m_chunk=1, fold_piece=36))
    with pytest.raises(CapacityError, match="exceed the accumulator's 8 rows"):
        layer_cost(16, 16, 8, MemoryConfig(), layer, LayerPlan(m_chunk=9, fold_piece=1))


def test_a_memory_too_small_for_any_tile_is_an_error_naming_sizes() -> None:
    tiny = MemoryConfig(scratchpad_bytes=256)  # four buffers of 4 rows: no weight tile fits
    with pytest.raises(CapacityError, match=r"16 weight rows .* does not fit a 64-byte buffer "
                                            r"\(a quarter of the 256-byte scratchpad\)"):
        plan_layer(16, 16, 1024, tiny, ConvLayer("l", 4, 4, 16, 16, 1))


def test_conv_reference_adds_the_bias_after_the_per_row_scaling() -> None:
    """In the per-row mode each row's reciprocal scales the sums before the bias; the
    reference once added the bias first (as the other modes allow), so a per-row GEMM's
    commands, run by run_functional as ws_accel runs them, differed from it in a few
    elements (found by sim/test_ws_accel.py's gemm_rows)."""
    from glensidec.hardware.commands import (
        AccelConfig,
        LayerQuant,
        conv_program,
        conv_reference,
        run_functional,
        weight_matrix,
    )

    rng = np.random.default_rng(7)
    config = AccelConfig(4, 8, 32, MemoryConfig(row_bytes=8, scratchpad_bytes=8 * 4 * 128,
                                                banks=4, bus_bytes=4, latency=3))
    layer = ConvLayer("rows", 9, 1, 12, 16)
    feature = rng.integers(-128, 128, (9, 1, 12))
    weights = rng.integers(-128, 128, (1, 1, 12, 16))
    quant = LayerQuant(EpilogueConfig(pre=0, post=34, zero_point=3),
                       tuple(int(v) for v in rng.integers(-3000, 3000, 16)),
                       tuple(int(v) for v in rng.integers(2**20, 2**22, 16)),
                       residual=ResidualConfig(rows=True, pre=15))
    # each row's offset and packed reciprocal at the start of both N blocks of 8 columns
    reciprocal = rng.integers(2**14, 2**16, 9)  # (whole parts 0 to 1: results in range)
    packed = (reciprocal & (2**15 - 1)) * 2**16 + (reciprocal >> 15)
    values = np.stack([rng.integers(-(2**15), 2**15, 9), packed], 1).astype("<i4")
    residual = np.zeros((9, 16), np.int64)
    residual[:, 0:8] = residual[:, 8:16] = values.view(np.int8)
    program = conv_program(config, layer, quant, "best")
    memory = np.zeros(program.memory_bytes, np.uint8)
    image = program.input_image(feature, quant.input_zero_point)
    memory[program.input_base:program.input_base + image.size] = image
    stored = weight_matrix(layer, config.cols, weights).reshape(-1)
    memory[program.weight_base:program.weight_base + stored.size] = stored & 0xFF
    memory[program.residual_base:program.residual_base + residual.size] = \
        residual.reshape(-1) & 0xFF
    out = run_functional(config, program.commands, memory)
    got = out[program.output_base:program.output_base + 9 * 16].astype(np.int64)
    got = np.where(got >= 128, got - 256, got).reshape(9, 16)
    expected = conv_reference(layer, feature, weights, quant, residual)
    assert np.array_equal(got, expected)
    assert len(np.unique(expected)) > 8  # not saturated to a few values
