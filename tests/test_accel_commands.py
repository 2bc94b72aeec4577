"""ws_accel's command programs: bits (functional model vs numpy) and the cycle model.

The RTL itself is checked in sim/test_ws_accel.py (bits and cycles, to the cycle);
these tests are the quick ones: the commands of a layer compute the layer, a memory
too small is a clear error, and the cycle model shows overlap and bandwidth.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import glensidec.hardware.commands as commands_module
from glensidec.hardware.accel import (
    CapacityError,
    ConvLayer,
    DmaCommand,
    EpilogueConfig,
    MemoryConfig,
    ResidualConfig,
    dma_load_slots,
    epilogue_reference,
)
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import (
    SPAD_ROW_BITS,
    AccelConfig,
    AccelModel,
    Command,
    Compute,
    Config,
    LayerProgram,
    LayerQuant,
    Load,
    Store,
    accel_config_for,
    accel_cycles,
    best_conv_table,
    conv_program,
    conv_reference,
    depthwise_weight_matrix,
    encode_command,
    group_mask,
    interleaved_tilings,
    one_band_tilings,
    pool_program,
    run_functional,
    sum_pool_reference,
    weight_matrix,
    window_program,
    window_tilings,
)

SMALL = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=4 * 4 * 128, banks=4,
                                            bus_bytes=4, latency=2))
LAYERS = [
    ConvLayer("conv3x3", 5, 5, 6, 6, kernel=3, stride=1, padding=1),
    ConvLayer("conv3x3s2", 7, 6, 4, 9, kernel=3, stride=2, padding=1),
    ConvLayer("conv1x1s2", 6, 6, 8, 11, kernel=1, stride=2),
    ConvLayer("gemm", 9, 1, 12, 5),
    ConvLayer("rgb5x5s2", 9, 8, 1, 3, kernel=5, stride=2, padding=2),  # taps packed in rows
    # depthwise (each N block of 4 channels reads its own 4), and 2 groups of 5 → 3
    # channels (N blocks straddle the groups: a block reads the channels of both)
    ConvLayer("depthwise3x3", 6, 5, 10, 10, kernel=3, stride=1, padding=1, groups=10),
    ConvLayer("grouped3x3s2", 7, 6, 10, 6, kernel=3, stride=2, padding=1, groups=2),
]


def random_layer_data(layer: ConvLayer, seed: int) -> tuple[np.ndarray, np.ndarray, LayerQuant]:
    rng = np.random.default_rng(seed)
    feature = rng.integers(-128, 128, (layer.height, layer.width, layer.channels))
    weights = rng.integers(-128, 128, (*layer.kernel_hw, layer.channels,
                                       layer.out_channels)) * group_mask(layer)
    zero_point = int(rng.integers(-20, 20))
    quant = LayerQuant(EpilogueConfig(pre=1, post=int(rng.integers(36, 40)),
                                      zero_point=zero_point, low=zero_point),
                       tuple(int(v) for v in rng.integers(-3000, 3000, layer.out_channels)),
                       tuple(int(v) for v in rng.integers(2**29, 2**31 - 1, layer.out_channels)),
                       input_zero_point=int(rng.integers(-128, 128)))
    return feature, weights, quant


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_layer_program_computes_the_layer(layer: ConvLayer) -> None:
    feature, weights, quant = random_layer_data(layer, 1)
    program = conv_program(SMALL, layer, quant)
    got = run_layer(program, layer, feature, weights, quant, None)
    expected = conv_reference(layer, feature, weights, quant)
    assert np.array_equal(got, expected)
    assert len({value for value in expected.reshape(-1)}) > 3  # not a saturated constant


def test_a_layer_the_epilogue_holds_back_emits_chunk_by_chunk_from_one_band() -> None:
    """Regression (issue 26): the digits CNN's first layer (1 channel, a 3×3 with packed
    taps: 3 K folds, 64 output rows) emitted its rows only after all 3 folds of all 64,
    then the epilogue took them at 4 cycles a row: 569 cycles at 16×16. Its chunks of a few
    output rows now read one band (loaded chunk by chunk, the weights resident), so the
    epilogue works while the array computes: faster than every other schedule, and the
    same result."""
    config = accel_config_for(ArrayConfig(16, 16))
    layer = ConvLayer("c1", 10, 10, 1, 16, kernel=3, stride=1, padding=0)
    feature, weights, quant = random_layer_data(layer, 3)
    tilings = one_band_tilings(config, layer)
    assert tilings and all(t.one_band and t.chunk_rows < 8 for t in tilings)
    _, _, chosen = best_conv_table(config, layer, quant)
    others = [accel_cycles(config, window_program(config, layer, quant, t).commands).cycles
              for t in window_tilings(config, layer)]
    others.append(accel_cycles(config, conv_program(config, layer, quant, "im2col").commands
                               ).cycles)
    assert chosen.cycles < min(others) - 100, (chosen.cycles, others)
    expected = conv_reference(layer, feature, weights, quant)
    for tiling in tilings:
        program = window_program(config, layer, quant, tiling)
        assert np.array_equal(run_layer(program, layer, feature, weights, quant, None, config),
                              expected), tiling
    # a layer of as many K folds as the epilogue's cycles a row gets none
    assert one_band_tilings(config, ConvLayer("c2", 8, 8, 16, 16, kernel=3, padding=1)) == []


def random_residual(seed: int) -> ResidualConfig:
    """A residual add like the quantizer's add_dynamic: multipliers below 2^14."""
    rng = np.random.default_rng(seed)
    return ResidualConfig(self_multiplier=int(rng.integers(2**12, 2**14)),
                          multiplier=int(rng.integers(2**12, 2**14)),
                          offset=int(rng.integers(-(2**21), 2**21)),
                          requantize_multiplier=int(rng.integers(2**29, 2**31 - 1)),
                          post=int(rng.integers(42, 45)), zero_point=int(rng.integers(-128, 0)),
                          low=-100, high=120)


def _accumulators(layer: ConvLayer, feature: np.ndarray, weights: np.ndarray,
                  zero_point: int) -> np.ndarray:
    """The layer's (M, N) int32 sums, a direct convolution (padding reads zero_point)."""
    pad, stride, kernel = layer.padding, layer.stride, layer.kernel
    out_h, out_w = layer.out_size
    padded = np.full((layer.height + 2 * pad, layer.width + 2 * pad, layer.channels),
                     zero_point, dtype=np.int64)
    padded[pad:pad + layer.height, pad:pad + layer.width] = feature
    sums = np.zeros((out_h, out_w, layer.out_channels), dtype=np.int64)
    for y in range(out_h):
        for x in range(out_w):
            window = padded[y * stride:y * stride + kernel, x * stride:x * stride + kernel]
            sums[y, x] = np.einsum("abc,abcn->n", window, weights.astype(np.int64))
    return sums.reshape(-1, layer.out_channels)


@pytest.mark.parametrize("early", [False, True], ids=["after", "early"])
@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_a_residual_add_in_the_epilogue_computes_the_quantized_add(layer: ConvLayer,
                                                                   early: bool) -> None:
    """The layer's int8 result y and a residual r leave as clip(requantize(y·a + r·b + c)),
    or (early) r·b + c joins the accumulator and bias before the layer's requantize:
    checked against the requantize arithmetic directly, not the epilogue's reference."""
    from glensidec.lang.dtypes import requantize, wrap_signed

    feature, weights, quant = random_layer_data(layer, 4)
    added = random_residual(5)
    if early:
        added = ResidualConfig(multiplier=int(added.multiplier % 64) - 32,
                               offset=added.offset % 5000, early=True)
    with_residual = LayerQuant(quant.epilogue, quant.bias, quant.multiplier,
                               quant.input_zero_point, added)
    program = conv_program(SMALL, layer, with_residual)
    M, _, N = layer.gemm
    residual = np.random.default_rng(6).integers(-128, 128, (M, N))
    got = run_layer(program, layer, feature, weights, quant, residual)
    epilogue = quant.epilogue
    if early:
        summed = wrap_signed(_accumulators(layer, feature, weights, quant.input_zero_point)
                             + np.asarray(quant.bias) + residual * added.multiplier
                             + added.offset, 32)
        expected = np.clip(requantize(summed, np.asarray(quant.multiplier), epilogue.pre,
                                      epilogue.post, epilogue.zero_point),
                           epilogue.low, epilogue.high)
    else:
        y = conv_reference(layer, feature, weights, quant)
        summed = wrap_signed(y * added.self_multiplier + residual * added.multiplier
                             + added.offset, 32)
        expected = np.clip(requantize(summed, added.requantize_multiplier, added.pre,
                                      added.post, added.zero_point), added.low, added.high)
    assert np.array_equal(got, expected)
    assert len(set(expected.reshape(-1).tolist())) > 3
    # the residual rows go through the scratchpad: one load per store, tokens between them
    stores = [command for command in program.commands if isinstance(command, Store)]
    waiting = [command for command in program.commands
               if isinstance(command, Load) and command.wait_store]
    assert all(store.signal for store in stores) and len(waiting) == max(0, len(stores) - 2)


def test_program_uses_several_chunks_and_blocks() -> None:
    program = conv_program(SMALL, LAYERS[0], random_layer_data(LAYERS[0], 0)[2])
    stores = [command for command in program.commands if isinstance(command, Store)]
    M = LAYERS[0].gemm[0]
    assert program.m_chunk < M and program.folds == 18
    assert len(stores) == -(-M // program.m_chunk) * 2  # every chunk, two N blocks of 4


def test_too_small_memories_name_the_sizes() -> None:
    quant = random_layer_data(LAYERS[0], 0)[2]
    tiny = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=32, banks=4,
                                               bus_bytes=4))
    with pytest.raises(CapacityError, match=r"one K fold \(4 rows of 4 B = 16 B\) do not fit a "
                                            r"8-byte buffer \(a quarter of the 32-byte"):
        conv_program(tiny, LAYERS[0], quant)
    short_accumulator = AccelConfig(4, 4, 4, SMALL.memory)
    with pytest.raises(CapacityError, match=r"5 pixels needs 5 accumulator rows.*has 4 rows"):
        conv_program(short_accumulator, LAYERS[0], quant)


@pytest.mark.parametrize("layer", LAYERS[:2], ids=lambda layer: layer.name)
def test_small_scratchpads_cut_k_into_pieces(layer: ConvLayer) -> None:
    """A 64-byte buffer holds a few K folds: the reduction is cut into pieces that
    accumulate on chip, and the result is still the layer."""
    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=256, banks=4,
                                                 bus_bytes=4, latency=2))
    feature, weights, quant = random_layer_data(layer, 3)
    program = conv_program(config, layer, quant)
    assert program.piece_folds < program.folds
    got = run_layer(program, layer, feature, weights, quant, None, config)
    assert np.array_equal(got, conv_reference(layer, feature, weights, quant))
    assert accel_cycles(config, program.commands).compute_rows == sum(
        command.m_len for command in program.commands if isinstance(command, Compute))


def test_load_compute_and_store_overlap() -> None:
    """The total is below the serial sum of the three units' busy times, above each."""
    for layer in LAYERS:
        program = conv_program(SMALL, layer, random_layer_data(layer, 0)[2])
        timing = accel_cycles(SMALL, program.commands)
        load = sum(dma_load_slots(command.dma, SMALL.memory.bus_bytes)
                   for command in program.commands if isinstance(command, Load))
        compute = sum(command.m_len for command in program.commands
                      if isinstance(command, Compute))
        store = timing.store_bytes // SMALL.memory.bus_bytes
        assert timing.compute_rows == compute
        assert max(load, compute, store) < timing.cycles
        if layer.name == "conv3x3":  # enough steps for the double buffering to matter
            assert timing.cycles < load + compute + store


def test_halving_the_bandwidth_costs_cycles_on_a_load_bound_layer() -> None:
    layer = LAYERS[0]
    quant = random_layer_data(layer, 0)[2]
    cycles = {}
    for bus in (4, 2):
        config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=2048,
                                                     banks=4, bus_bytes=bus, latency=2))
        cycles[bus] = accel_cycles(config, conv_program(config, layer, quant).commands).cycles
    assert cycles[2] > cycles[4]


def test_the_timing_diagram_in_the_docs_is_the_models() -> None:
    from pathlib import Path

    from glensidec.hardware.commands import timing_diagram

    config = AccelConfig(4, 4, 8, MemoryConfig(row_bytes=4, scratchpad_bytes=2048, banks=4,
                                                bus_bytes=4, latency=2), epilogue_lanes=4)
    layer = ConvLayer("c1", 6, 6, 4, 8)
    quant = LayerQuant(EpilogueConfig(), (0,) * 8, (1,) * 8)
    timing = accel_cycles(config, conv_program(config, layer, quant, "im2col").commands,
                          trace=True)
    docs = (Path(__file__).parent.parent / "docs" / "hardware.md").read_text()
    quoted = " ".join(docs.split())  # the figures the text quotes, across line breaks
    assert (f"takes {timing.cycles} cycles for {timing.compute_rows} array rows "
            f"({timing.load_bytes} bytes loaded, {timing.store_bytes} stored)") in quoted
    best = accel_cycles(config, conv_program(config, layer, quant).commands)
    assert f"the window schedule, which `conv_program` picks here, takes {best.cycles} " \
        "cycles" in quoted
    for line in timing_diagram(timing, 2).splitlines():
        assert f"    {line}\n" in docs


def test_few_channels_pack_several_taps_into_a_row() -> None:
    """Two taps of 2 channels per 4-byte row: a 5×5 kernel is 5 × 3 folds, not 25."""
    layer = ConvLayer("packed", 9, 8, 2, 3, kernel=5, stride=2, padding=2)
    program = conv_program(SMALL, layer, random_layer_data(layer, 0)[2])
    assert program.folds == 5 * 3 and program.input_padding == 2


POOLS = [ConvLayer("maxpool3x3s2", 9, 8, 6, 6, kernel=3, stride=2, padding=1),
         ConvLayer("maxpool2x2", 6, 6, 11, 11, kernel=2, stride=2),
         ConvLayer("maxpool2x2_odd", 7, 5, 6, 6, kernel=2, stride=2),
         ConvLayer("maxpool3x3s1", 5, 6, 5, 5, kernel=3, stride=1, padding=1),
         ConvLayer("maxpool2x2s3", 8, 8, 4, 4, kernel=2, stride=3),
         ConvLayer("maxpool5x5s2", 9, 3, 3, 3, kernel=5, stride=2, padding=2)]


@pytest.mark.parametrize("schedule", ["gather", "band"])
@pytest.mark.parametrize("layer", POOLS, ids=lambda layer: layer.name)
def test_a_pool_program_computes_the_max_pool(layer: ConvLayer, schedule: str) -> None:
    """The DMA gathers each window's taps, or loads the input rows once and each window
    is a 2-D pattern of them; pooling stores take their max: numpy's max-pool (padding
    never wins), the loads and stores ordered by tokens."""
    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=4096, banks=4,
                                                 bus_bytes=4, latency=2))
    feature = np.random.default_rng(8).integers(-128, 128, (layer.height, layer.width,
                                                            layer.channels))
    program = pool_program(config, layer, schedule=schedule)
    M, C = layer.out_size[0] * layer.out_size[1], layer.channels
    got = _run_pool(config, program, feature, M, C)
    windows = [feature[max(0, y * layer.stride - layer.padding):
                       y * layer.stride - layer.padding + layer.kernel,
                       max(0, x * layer.stride - layer.padding):
                       x * layer.stride - layer.padding + layer.kernel].max(axis=(0, 1))
               for y in range(layer.out_size[0]) for x in range(layer.out_size[1])]
    assert np.array_equal(got, np.array(windows))
    stores = [command for command in program.commands if isinstance(command, Store)]
    assert all(store.window == layer.kernel ** 2 for store in stores)
    if schedule == "gather":
        assert all(store.wait and store.signal for store in stores)
        assert len(stores) == -(-C // 4) * -(-M // program.m_chunk)
    else:  # a store per output line, a k×k window at the stride
        assert all(store.window_count1 == layer.kernel and store.pixel_step == layer.stride
                   for store in stores)
        assert len(stores) == -(-C // 4) * layer.out_size[0]
    assert accel_cycles(config, program.commands).cycles > M * -(-C // 4) * layer.kernel ** 2


@pytest.mark.parametrize("layer", [ConvLayer("avgpool2x2", 7, 6, 6, 6, kernel=2, stride=2),
                                   ConvLayer("globalavgpool", 3, 3, 9, 9, kernel=3)],
                         ids=lambda layer: layer.name)
@pytest.mark.parametrize("schedule", ["gather", "band"])
def test_a_sum_pool_program_computes_the_scaled_window_sums(layer: ConvLayer,
                                                            schedule: str) -> None:
    """An average pool: pooling stores send each window's int32 sum through the epilogue
    (per-channel bias and multiplier, a Config per N block)."""
    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=4096, banks=4,
                                                 bus_bytes=4, latency=2))
    feature, _, quant = random_layer_data(layer, 5)
    program = pool_program(config, layer, quant, schedule)
    M, C = layer.out_size[0] * layer.out_size[1], layer.channels
    got = _run_pool(config, program, feature, M, C)
    windows = np.array([feature[y * layer.stride:y * layer.stride + layer.kernel,
                                x * layer.stride:x * layer.stride + layer.kernel].sum(axis=(0, 1))
                        for y in range(layer.out_size[0]) for x in range(layer.out_size[1])])
    expected = epilogue_reference(windows, np.array(quant.bias)[None, :],
                                  np.array(quant.multiplier), quant.epilogue)
    assert np.array_equal(got, expected) and len(np.unique(expected)) > 3
    stores = [command for command in program.commands if isinstance(command, Store)]
    assert all(store.sum for store in stores)
    assert sum(isinstance(command, Config) for command in program.commands) == -(-C // 4)
    # padded (an average pool that counts its padding): the padding reads the
    # quantization's input_zero_point, the value the program pads with
    padded = dataclasses.replace(layer, padding=1)
    quant = dataclasses.replace(quant, input_zero_point=3)
    program = pool_program(config, padded, quant, schedule)
    M = padded.out_size[0] * padded.out_size[1]
    got = _run_pool(config, program, feature, M, C)
    expected = epilogue_reference(sum_pool_reference(padded, feature, 3),
                                  np.array(quant.bias)[None, :], np.array(quant.multiplier),
                                  quant.epilogue)
    assert np.array_equal(got, expected)


def test_a_pool_whose_window_rows_do_not_fit_names_the_sizes() -> None:
    """Gathered, one output row's windows need 36 rows where a quarter has 32; its band
    (3 input rows of 9 pixels) fits half, so the best schedule takes the band."""
    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=512, banks=4,
                                                bus_bytes=4, latency=2))
    layer = ConvLayer("wide", 7, 8, 4, 4, kernel=3, stride=2, padding=1)
    with pytest.raises(CapacityError, match="needs 36 gathered rows of 4 B for its 9 taps"):
        pool_program(config, layer, schedule="gather")
    assert any(isinstance(command, Store) and command.window_count1 == 3
               for command in pool_program(config, layer).commands)
    with pytest.raises(CapacityError, match="do not fit half the scratchpad"):
        pool_program(config, dataclasses.replace(layer, width=80), schedule="band")


def test_the_stem_max_pool_reads_its_input_once() -> None:
    """Issue 28: ResNet's 3×3/2 max-pool of the 112×112×64 stem map gathered its nine
    taps from DRAM: 1.78 MB loaded for a 0.8 MB map, 451,616 cycles at 4 B/cycle. With
    the map's rows resident and each window a 2-D pattern of them, it loads the map
    about once and takes about the bus time of that."""
    from glensidec.hardware.array import ArrayConfig
    from glensidec.hardware.commands import accel_config_for, layer_traffic

    config = accel_config_for(ArrayConfig(16, 16), bus_bytes=4)
    layer = ConvLayer("maxpool", 112, 112, 64, 64, kernel=3, stride=2, padding=1)
    program = pool_program(config, layer)
    traffic = layer_traffic(config, layer, program, pool=True)
    assert traffic.input_loaded <= 1.02 * 112 * 112 * 64
    assert accel_cycles(config, program.commands).cycles < 0.5 * 451_616


def test_command_words_address_scratchpad_rows_past_16_bits() -> None:
    """A 2×2 accelerator's default scratchpad has 2^17 rows (issue 27: 16-bit row fields
    made the RTL read and write the wrong rows): every row field keeps a row ≥ 2^16, and
    a pooling store's window_stride does too, without touching its neighbours."""
    row = (1 << 16) + 5

    def bits(word: int, offset: int, width: int) -> int:
        return (word >> offset) & ((1 << width) - 1)

    compute = encode_command(Compute(w_row=row, a_row=row + 1, m_len=3, add=True,
                                     a_count1=7, a_stride1=row + 2, a_stride2=row + 3,
                                     acc_row=1000), cols=2)
    assert (bits(compute, 8, SPAD_ROW_BITS), bits(compute, 32, SPAD_ROW_BITS)) == (row, row + 1)
    assert (bits(compute, 56, 16), bits(compute, 72, 1), bits(compute, 73, 1)) == (3, 1, 0)
    assert (bits(compute, 80, 16), bits(compute, 96, SPAD_ROW_BITS),
            bits(compute, 120, SPAD_ROW_BITS)) == (7, row + 2, row + 3)
    assert bits(compute, 144, 16) == 1000  # the accumulator row of its first row
    dma = DmaCommand(base=64, length=2, count1=4, spad_row=row, height=9)
    load = encode_command(Load(dma), cols=2)
    assert bits(load, 144, SPAD_ROW_BITS) == row and bits(load, 208, 16) == 9
    pool = encode_command(Store(dma, window=9, window_stride=row), cols=2)
    assert (bits(pool, 176, 16), bits(pool, 192, SPAD_ROW_BITS)) == (9, row)


def test_a_scratchpad_of_more_rows_than_commands_address_is_refused() -> None:
    memory = MemoryConfig(row_bytes=2, scratchpad_bytes=2 << (SPAD_ROW_BITS + 1), banks=4,
                          bus_bytes=16, latency=8)
    with pytest.raises(ValueError, match="more than the 2\\^24 rows a command can address"):
        AccelConfig(2, 2, 16, memory)


@pytest.mark.parametrize("bus", [4, 1])
@pytest.mark.parametrize("layer", [*LAYERS, *POOLS], ids=lambda layer: layer.name)
def test_layer_traffic_is_what_the_cycle_model_moves(layer: ConvLayer, bus: int) -> None:
    """The traffic the reports show, split by tensor, sums to the bytes AccelModel counts
    for the same commands (padded, packed-tap, grouped, residual and pooling layers, at a
    bus narrower than a row), and the compulsory bytes are the layer's tensors once."""
    from glensidec.hardware.commands import layer_traffic

    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=4096, banks=4,
                                                 bus_bytes=bus, latency=2))
    pool = layer in POOLS
    for residual in ([False] if pool else [False, True]):
        _, _, quant = random_layer_data(layer, 2)
        if residual:
            quant = LayerQuant(quant.epilogue, quant.bias, quant.multiplier,
                               quant.input_zero_point, random_residual(3))
        program = pool_program(config, layer) if pool else conv_program(config, layer, quant)
        timing = accel_cycles(config, program.commands)
        traffic = layer_traffic(config, layer, program, residual, pool)
        assert (traffic.loaded, traffic.stored) == (timing.load_bytes, timing.store_bytes)
        M, _, N = layer.gemm
        assert bool(traffic.residual_loaded) == residual
        assert traffic.residual_loaded >= M * N * residual
        assert bool(traffic.weights_loaded) != pool
        weights = 0 if pool else (layer.kernel ** 2 * layer.channels // layer.groups * N)
        image = layer.height * layer.width * layer.channels
        assert traffic.compulsory == weights + image + M * N * (1 + residual)
        assert traffic.weights_loaded >= weights and traffic.stored >= M * N


def test_the_tiling_loads_least_among_those_as_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """ResNet-18's 56×56 3×3 64→64 convolution at the compile defaults: several tilings
    keep the array as busy at 16 B/cycle, and layer_tiling takes the one that reloads
    least (before, the estimate's fastest loaded each input row once per tap and per N
    block: 7.3 MB for a 0.2 MB map), for at most TRAFFIC_SLACK more cycles (measured:
    472,534 against 465,026, 1.6 %)."""
    import glensidec.hardware.commands as commands
    from glensidec.hardware.array import ArrayConfig

    config = commands.accel_config_for(ArrayConfig(16, 16))
    layer = ConvLayer("layer1", 56, 56, 64, 64, kernel=3, stride=1, padding=1)
    quant = LayerQuant(EpilogueConfig(), (0,) * 64, (1,) * 64)
    chosen = conv_program(config, layer, quant, "im2col")
    monkeypatch.setattr(commands, "TRAFFIC_SLACK", 0.0)  # the fastest estimate alone
    fastest = conv_program(config, layer, quant, "im2col")
    chosen_bytes = commands.layer_traffic(config, layer, chosen).loaded
    assert chosen_bytes < 3_000_000
    assert commands.layer_traffic(config, layer, fastest).loaded > 2 * chosen_bytes
    assert accel_cycles(config, chosen.commands).cycles <= \
        accel_cycles(config, fastest.commands).cycles * 1.02


def _estimate_step_by_step(config: AccelConfig, layer: ConvLayer,
                           tiling: commands_module.LayerTiling, residual: int
                           ) -> tuple[int, int]:
    """_tiling_estimate as its docstring says it, a term per (chunk, block, piece)."""
    out_h, out_w = layer.out_size
    R, bus = config.rows, config.memory.bus_bytes
    beats = max(1, config.memory.row_bytes // bus)
    blocks_of = commands_module.group_blocks(layer, config.cols)
    length = max(fold[3] for fold in commands_module.conv_folds(layer, R, blocks_of[0]))
    aligned = layer.channels % bus == 0 and not commands_module.packs_taps(layer, R) and \
        all(block.channel0 % bus == 0 for block in blocks_of)
    act_beats = -(-length // bus) if aligned else 1 + (length - 1) / bus
    sizes = [min(tiling.piece_folds, tiling.folds - start)
             for start in range(0, tiling.folds, tiling.piece_folds)]
    cycles, loaded = 0.0, 0
    for oy0 in range(0, out_h, tiling.chunk_rows):
        m = min(tiling.chunk_rows, out_h - oy0) * out_w
        for block in range(-(-layer.out_channels // config.cols)):
            for position, piece in enumerate(sizes):
                act_rows = m * (piece if len(sizes) > 1 else tiling.folds) \
                    if len(sizes) > 1 or block == 0 or layer.groups > 1 else 0
                act_rows += residual * m if position == len(sizes) - 1 else 0
                cycles += max(piece * max(m, R), piece * R * beats + act_rows * act_beats)
                loaded += piece * R + act_rows
    return round(cycles), loaded


@pytest.mark.parametrize("bus", [4, 16, 64])
def test_the_tiling_estimate_is_its_sum_over_every_step(bus: int) -> None:
    """_tiling_estimate adds each distinct term times how often it occurs (a dense layer
    in pieces of one fold was 400 k terms): the floats are multiples of 1/bus, so the sum
    is the step-by-step one to the bit, whatever the order."""
    config = commands_module.accel_config_for(ArrayConfig(16, 16))
    config = dataclasses.replace(config, memory=dataclasses.replace(config.memory,
                                                                    bus_bytes=bus))
    layers = [ConvLayer("dense", 1, 1, 1000, 300), ConvLayer("rgb", 30, 30, 3, 40, kernel=3),
              ConvLayer("c3", 13, 11, 40, 70, kernel=3, stride=2, padding=1),
              ConvLayer("dw", 9, 9, 24, 24, kernel=3, padding=1, groups=24)]
    for layer in layers:
        folds = commands_module.layer_folds(layer, config)
        out_h = layer.out_size[0]
        for piece in {1, 2, folds, max(1, folds // 3)}:
            for chunk in {1, 2, out_h, max(1, out_h // 3)}:
                tiling = commands_module.LayerTiling(folds, piece, chunk)
                for residual in (0, 1):
                    assert commands_module._tiling_estimate(config, layer, tiling, residual) \
                        == _estimate_step_by_step(config, layer, tiling, residual)


#: Layers the window schedule takes (not grouped): padded 3×3, strided 3×3 over two N
#: blocks, strided 1×1, a GEMM, a 5×5 with packed taps (a plane per group of taps).
WINDOW_LAYERS = [layer for layer in LAYERS if window_tilings(SMALL, layer)]


def test_a_compute_reads_its_activation_rows_in_a_2d_pattern() -> None:
    """a_count1 rows a_stride1 apart per line, lines a_stride2 apart; a_count1 = 0 is
    the old contiguous tile."""
    window = Compute(w_row=0, a_row=10, m_len=5, a_count1=2, a_stride1=3, a_stride2=20)
    assert window.activation_rows() == [10, 13, 30, 33, 50]
    assert Compute(w_row=0, a_row=4, m_len=3).activation_rows() == [4, 5, 6]


@pytest.mark.parametrize("residual", ["", "after", "early"])
@pytest.mark.parametrize("layer", WINDOW_LAYERS, ids=lambda layer: layer.name)
def test_the_window_schedule_computes_the_layer(layer: ConvLayer, residual: str) -> None:
    """Every window tiling (one band over half the scratchpad, or bands alternating
    between two quarters; K pieces; a residual add's rows beside the bands) computes
    what numpy does."""
    feature, weights, quant = random_layer_data(layer, 4)
    M, _, N = layer.gemm
    added = np.random.default_rng(5).integers(-128, 128, (M, N)) if residual else None
    if residual:
        quant = dataclasses.replace(quant, residual=dataclasses.replace(
            random_residual(6), early=residual == "early"))
    tilings = window_tilings(SMALL, layer, bool(residual))
    assert tilings
    for tiling in tilings:
        program = window_program(SMALL, layer, quant, tiling)
        assert np.array_equal(run_layer(program, layer, feature, weights, quant, added),
                              conv_reference(layer, feature, weights, quant, added)), tiling


def run_layer(program: LayerProgram, layer: ConvLayer, feature: np.ndarray,
              weights: np.ndarray, quant: LayerQuant, added: np.ndarray | None,
              config: AccelConfig = SMALL) -> np.ndarray:
    """The (M, N) int8 output of a layer's program on `config`, executed for its data (the
    image, the weights and the residual rows `added` put where the program reads them)."""
    M, _, N = layer.gemm
    memory = np.zeros(program.memory_bytes, dtype=np.uint8)
    image = program.input_image(feature, quant.input_zero_point)
    memory[:image.size] = image
    stored = weight_matrix(layer, config.cols, weights).reshape(-1)
    memory[program.weight_base:program.weight_base + stored.size] = stored & 0xFF
    if added is not None:
        memory[program.residual_base:program.residual_base + M * N] = added.reshape(-1) & 0xFF
    after = run_functional(config, program.commands, memory).astype(np.int64)
    got = after[program.output_base:program.output_base + M * N]
    return np.where(got >= 128, got - 256, got).reshape(M, N)


def _run_pool(config: AccelConfig, program: LayerProgram, feature: np.ndarray, m: int,
              c: int) -> np.ndarray:
    """The (M, C) int8 output of a pooling program on `config`, executed for `feature` (its
    HWC bytes at address 0)."""
    memory = np.zeros(program.memory_bytes, dtype=np.uint8)
    memory[:feature.size] = feature.reshape(-1) & 0xFF
    after = run_functional(config, program.commands, memory).astype(np.int64)
    got = after[program.output_base:program.output_base + m * c]
    return np.where(got >= 128, got - 256, got).reshape(m, c)


#: Layers whose window tilings on SMALL include every layout: bands below weight buffers
#: only as large as their piece (one band larger than half the scratchpad: gemm16x80),
#: weights resident over several chunks (with a residual add beside the bands), and a
#: small first chunk.
LAYOUT_LAYERS = [ConvLayer("gemm40x12", 40, 1, 12, 8), ConvLayer("gemm16x80", 16, 1, 80, 8),
                 ConvLayer("conv3x3_9x6", 9, 6, 6, 8, kernel=3, stride=1, padding=1)]


@pytest.mark.parametrize("residual", ["", "after"])
@pytest.mark.parametrize("layer", LAYOUT_LAYERS, ids=lambda layer: layer.name)
def test_every_window_layout_computes_the_layer(layer: ConvLayer, residual: str) -> None:
    """Issue 28: the layouts that keep weights on chip across chunks, or give the bands
    more than half the scratchpad, and their tokens (a compute waits for its own band
    plane) compute what numpy does."""
    feature, weights, quant = random_layer_data(layer, 7)
    M, _, N = layer.gemm
    added = np.random.default_rng(8).integers(-128, 128, (M, N)) if residual else None
    if residual:
        quant = dataclasses.replace(quant, residual=random_residual(9))
    tilings = window_tilings(SMALL, layer, bool(residual))
    for tiling in tilings:
        program = window_program(SMALL, layer, quant, tiling)
        assert np.array_equal(run_layer(program, layer, feature, weights, quant, added),
                              conv_reference(layer, feature, weights, quant, added)), tiling


#: Windows that are not k×k, one stride, adjacent taps (Inception's 1×7 and 7×1, FCN's
#: dilated 3×3, and a strided, dilated 2×3 whose strides and dilations differ by axis).
WINDOW_SHAPES = [
    ConvLayer("conv1x7", 5, 9, 6, 5, kernel=1, kernel_w=7, padding=0, padding_w=3),
    ConvLayer("conv7x1", 9, 5, 6, 5, kernel=7, kernel_w=1, padding=3, padding_w=0),
    ConvLayer("conv3x3d2", 7, 6, 6, 5, kernel=3, padding=2, dilation=(2, 2)),
    ConvLayer("conv2x3s21d13", 8, 9, 5, 6, kernel=2, kernel_w=3, stride=2, stride_w=1,
              padding=1, padding_w=2, dilation=(1, 3)),
]


@pytest.mark.parametrize("layer", WINDOW_SHAPES, ids=lambda layer: layer.name)
def test_non_square_and_dilated_windows_compute_the_layer_in_every_schedule(
        layer: ConvLayer) -> None:
    """Issues 26/30: a kh×kw window with a stride and padding per axis and dilated taps
    runs on the accelerator as it is (the DMA's im2col bounds, the window schedule's 2-D
    patterns), no host im2col or zero-stuffed kernel: every schedule computes what numpy
    does, and the C pricer counts the cycles the Python model does."""
    from glensidec.hardware.accel_native import native_cycles, native_model

    feature, weights, quant = random_layer_data(layer, 11)
    tilings = window_tilings(SMALL, layer)
    assert tilings
    interleaved = interleaved_tilings(SMALL, layer, tilings[0])
    programs = [conv_program(SMALL, layer, quant, "im2col")] + \
        [window_program(SMALL, layer, quant, tiling) for tiling in tilings + interleaved]
    expected = conv_reference(layer, feature, weights, quant)
    assert len(set(expected.reshape(-1).tolist())) > 3  # not a saturated constant
    native = native_model()
    for program in programs:
        assert np.array_equal(run_layer(program, layer, feature, weights, quant, None),
                              expected)
        if native is not None:
            python = AccelModel(SMALL).run(program.commands)
            assert native_cycles(native, SMALL, program.commands, 10**9).cycles == \
                python.cycles


def test_a_dilated_window_reads_each_input_byte_about_once() -> None:
    """A dilated 3×3 (d = 2) in the window schedule loads its band once per chunk, not
    the 9 taps' rows each (what a zero-stuffed 5×5 or a host im2col would move)."""
    config = AccelConfig(16, 16, 1024, MemoryConfig(row_bytes=16, scratchpad_bytes=256 * 1024))
    layer = ConvLayer("d2", 28, 28, 64, 64, kernel=3, padding=2, dilation=(2, 2))
    _, _, quant = random_layer_data(layer, 3)
    window = accel_cycles(config, conv_program(config, layer, quant, "window").commands)
    im2col = accel_cycles(config, conv_program(config, layer, quant, "im2col").commands)
    inputs = layer.height * layer.width * layer.channels
    weights = layer.taps * layer.channels * layer.out_channels
    assert window.load_bytes <= 1.2 * (inputs + weights) < im2col.load_bytes


def test_computes_that_name_their_accumulator_rows_keep_their_sums_apart() -> None:
    """Two tiles of two rows accumulate side by side (rows 0–1 and 2–3), each over two
    folds, the folds of one taken between those of the other; then each emits its own
    sums (tile 1 with weights twice tile 0's: a tile that lost its rows to the other
    would emit a mix)."""
    config = AccelConfig(2, 2, 4, MemoryConfig(row_bytes=2, scratchpad_bytes=2 * 4 * 4,
                                               banks=4, bus_bytes=2, latency=1))
    # A rows 0–3, then the identity and twice it (each tile's rows bottom first)
    spad_rows = [[1, 2], [3, 4], [5, 6], [7, 8], [0, 1], [1, 0], [0, 2], [2, 0]]
    memory = np.zeros(64, np.uint8)
    memory[:16] = np.array(spad_rows, np.uint8).reshape(-1)
    commands: list[Command] = [Load(DmaCommand(base=0, length=2, count1=8, stride1=2))]
    # fold k (k = 0, 1) of tile t reads A rows 2k, 2k + 1
    for fold, tile in ((0, 0), (0, 1), (1, 1), (1, 0)):
        commands.append(Compute(w_row=4 + 2 * tile, a_row=2 * fold, m_len=2, add=fold == 1,
                                emit=fold == 1, acc_row=2 * tile))
    commands.append(Config(EpilogueConfig(post=0), (0, 0), (1, 1)))
    commands += [Store(DmaCommand(base=32 + 4 * tile, length=2, count1=2, stride1=2))
                 for tile in (1, 0)]  # tile 1 emitted first
    after = run_functional(config, commands, memory)
    # A rows 0–1 plus rows 2–3: [6, 8], [10, 12] at 32; tile 1 (stored at 36) twice that
    assert after[32:40].tolist() == [6, 8, 10, 12, 12, 16, 20, 24]
    assert Compute(w_row=0, a_row=0, m_len=2).acc_row == 0  # a bare tile: rows from 0


#: Layers whose N blocks can accumulate side by side on SMALL (several blocks each).
INTERLEAVE_LAYERS = [
    *(layer for layer in [*WINDOW_LAYERS, *LAYOUT_LAYERS] if layer.out_channels > SMALL.cols),
    ConvLayer("gemm24x20", 24, 1, 20, 20),
    ConvLayer("conv3x3_20", 6, 4, 6, 20, kernel=3, stride=1, padding=1)]


@pytest.mark.parametrize("layer", INTERLEAVE_LAYERS, ids=lambda layer: layer.name)
def test_n_blocks_side_by_side_compute_the_layer(layer: ConvLayer) -> None:
    """Issue 28: the tilings whose first N blocks accumulate side by side (each COMPUTE
    naming its accumulator rows, folds taken for every block of the group while the band
    arrives, the last piece's emits staggered) compute what numpy does, for the variants
    of every window tiling and the chunks sized for them."""
    feature, weights, quant = random_layer_data(layer, 11)
    tilings = list(dict.fromkeys(
        variant for base in [None, *window_tilings(SMALL, layer)]
        for variant in interleaved_tilings(SMALL, layer, base)))
    assert tilings and all(tiling.interleave > 1 for tiling in tilings)
    for tiling in tilings:
        program = window_program(SMALL, layer, quant, tiling)
        assert max(command.acc_row for command in program.commands
                   if isinstance(command, Compute)) > 0
        assert np.array_equal(run_layer(program, layer, feature, weights, quant, None),
                              conv_reference(layer, feature, weights, quant, None)), tiling


def test_resnet50_1x1_layers_take_n_blocks_side_by_side_at_4_bytes_per_cycle() -> None:
    """Issue 28: at 4 B/cycle ResNet-50's 14×14 1024 → 256 layer waited for its whole
    200 KB band (50 k cycles) before its first N block could emit, the array idle for
    most of it (247,406 cycles on main at 307691a, T_min 200,704). With four or five N
    blocks taking each band plane as it arrives, their partial sums side by side in the
    accumulator, the array computes while the band loads."""
    from glensidec.hardware.array import ArrayConfig
    from glensidec.hardware.commands import accel_config_for, best_conv_program

    config = accel_config_for(ArrayConfig(16, 16), bus_bytes=4)
    layer = ConvLayer("bottleneck_reduce14", 196, 1, 1024, 256)
    quant = LayerQuant(EpilogueConfig(), (0,) * 256, (1,) * 256)
    program, timing = best_conv_program(config, layer, quant)
    assert max(command.acc_row for command in program.commands
               if isinstance(command, Compute)) >= 3 * 196
    assert timing.cycles < 0.9 * 247_406


def test_interleaved_tilings_refuse_a_residual_add_and_a_grouped_layer() -> None:
    """A residual add's rows alternate between two regions per Store, and a grouped
    layer's N blocks read different bands: neither is taken side by side."""
    layer = INTERLEAVE_LAYERS[-2]
    assert interleaved_tilings(SMALL, layer, None)
    assert interleaved_tilings(SMALL, layer, None, residual=True) == []
    assert interleaved_tilings(SMALL, LAYERS[5], None) == []  # depthwise


def test_the_window_layouts_are_offered() -> None:
    """Each layout of the window schedule is among the tilings the model chooses from."""
    offered = [tiling for layer in LAYOUT_LAYERS for residual in (False, True)
               for tiling in window_tilings(SMALL, layer, residual)]
    assert any(tiling.resident and tiling.double_buffered for tiling in offered)
    assert any(tiling.weight_buffer and not tiling.resident and not tiling.double_buffered
               and tiling.weight_start(SMALL.memory.scratchpad_rows)
               > SMALL.memory.scratchpad_rows // 2 for tiling in offered)
    assert any(tiling.first_rows for tiling in offered)


def test_a_3x3_layer_reads_its_input_about_once() -> None:
    """Issue 28: ResNet-18's 56×56 3×3 64→64 convolution read its 0.2 MB input 35 times
    (7.05 MB: every tap and N block gathered again from DRAM). With the input rows
    resident and each window read in the scratchpad, the schedule the model picks reads
    it once per chunk plus the rows two chunks share (≤ 1.15×), and is faster than the
    im2col schedule at 16 and 4 B/cycle."""
    from glensidec.hardware.array import ArrayConfig
    from glensidec.hardware.commands import accel_config_for, best_conv_program, layer_traffic

    layer = ConvLayer("layer1", 56, 56, 64, 64, kernel=3, stride=1, padding=1)
    quant = LayerQuant(EpilogueConfig(), (0,) * 64, (1,) * 64)
    for bus in (16, 4):
        config = accel_config_for(ArrayConfig(16, 16), bus_bytes=bus)
        program, timing = best_conv_program(config, layer, quant)
        traffic = layer_traffic(config, layer, program)
        assert traffic.input_loaded <= 1.15 * 56 * 56 * 64
        im2col = accel_cycles(config, conv_program(config, layer, quant, "im2col").commands)
        assert timing.cycles < im2col.cycles
        assert timing.load_bytes < im2col.load_bytes / 4


@pytest.mark.parametrize("layer, cycles_before", [
    (ConvLayer("bottleneck_reduce", 3136, 1, 256, 64), 335_135),
    (ConvLayer("bottleneck_reduce14", 196, 1, 1024, 256), 313_362)],
    ids=lambda value: getattr(value, "name", str(value)))
def test_resnet50_1x1_layers_load_their_weights_once(layer: ConvLayer,
                                                     cycles_before: int) -> None:
    """Issue 28: at 4 B/cycle ResNet-50's 1×1 layers reloaded their weights per M chunk:
    56×56 256 → 64 (M = 3136, its weights 16 KB) loaded 213 KB of them, since each of 13
    chunks streamed them again; 14×14 1024 → 256 (a 200 KB input, more than the half of
    the scratchpad a band had) 1 MB of its 256 KB. With the weights resident across
    chunks, or a band over the rows the weight buffers leave, each crosses the bus once
    and the layers run faster (cycles before: the exact model's on main)."""
    from glensidec.hardware.array import ArrayConfig
    from glensidec.hardware.commands import accel_config_for, best_conv_program, layer_traffic

    config = accel_config_for(ArrayConfig(16, 16), bus_bytes=4)
    M, K, N = layer.gemm
    quant = LayerQuant(EpilogueConfig(), (0,) * N, (1,) * N)
    program, timing = best_conv_program(config, layer, quant)
    traffic = layer_traffic(config, layer, program)
    assert traffic.weights_loaded == K * N
    assert traffic.input_loaded == M * K
    assert timing.cycles < 0.85 * cycles_before


def test_a_schedule_that_does_not_fit_names_it() -> None:
    with pytest.raises(CapacityError, match="cannot stay resident"):
        conv_program(SMALL, LAYERS[5], random_layer_data(LAYERS[5], 0)[2], "window")
    with pytest.raises(ValueError, match="unknown schedule 'fast'"):
        conv_program(SMALL, LAYERS[0], random_layer_data(LAYERS[0], 0)[2], "fast")


def test_the_output_fifo_stores_while_the_array_computes() -> None:
    """At 1 B/cycle a 4-byte result row takes four store beats: without room for the
    epilogue's rows every emitted row froze the array for three cycles; an output FIFO
    of a chunk's rows lets the store DMA drain them while the next block computes."""
    layer = ConvLayer("c3", 8, 8, 4, 8, kernel=3, stride=1, padding=1)
    quant = LayerQuant(EpilogueConfig(), (0,) * 8, (1,) * 8)
    memory = MemoryConfig(row_bytes=4, scratchpad_bytes=4096, banks=4, bus_bytes=1, latency=2)
    timings = {}
    for depth in (2, 64):  # the epilogue a lane per column, behind a FIFO of 2 rows
        config = AccelConfig(4, 4, 64, memory, out_depth=depth, epilogue_lanes=4,
                             epilogue_depth=2)
        timings[depth] = accel_cycles(config, conv_program(config, layer, quant).commands)
    assert timings[64].array_stall_cycles < timings[2].array_stall_cycles / 2
    assert timings[64].cycles < timings[2].cycles
    with pytest.raises(ValueError, match="power of two"):
        AccelConfig(4, 4, 8, memory, out_depth=3)


def test_the_epilogue_fifo_keeps_the_array_running_while_the_lanes_work() -> None:
    """One lane for 4 columns takes a row per 4 cycles while a tile emits a row per cycle:
    behind a FIFO of 2 rows the array freezes for 3 cycles of most emitted rows; behind
    one of a tile's 64 rows, the lanes work through them while the next tiles compute (nine
    folds each): the array never freezes, and the layer ends at most 3 cycles per row of
    its last tile later than with a lane per column."""
    layer = ConvLayer("c3", 8, 8, 4, 8, kernel=3, stride=1, padding=1)
    quant = LayerQuant(EpilogueConfig(), (0,) * 8, (1,) * 8)
    memory = MemoryConfig(row_bytes=4, scratchpad_bytes=4096, banks=4, bus_bytes=4, latency=2)
    timings = {}
    for lanes, depth in ((1, 2), (1, 64), (4, 64)):
        config = AccelConfig(4, 4, 64, memory, epilogue_lanes=lanes, epilogue_depth=depth)
        assert config.epilogue_cycles == 4 // lanes
        program = conv_program(config, layer, quant, "im2col")
        timings[lanes, depth] = accel_cycles(config, program.commands)
    assert timings[1, 2].array_stall_cycles > 2 * 2 * 64  # two tiles of 64 rows
    assert timings[1, 64].array_stall_cycles == timings[4, 64].array_stall_cycles == 0
    assert timings[4, 64].cycles < timings[1, 64].cycles <= timings[4, 64].cycles + 3 * 64
    assert timings[1, 64].cycles < timings[1, 2].cycles


def test_the_default_epilogue_takes_a_row_over_four_cycles() -> None:
    """4 lanes for 16 columns behind half an accumulator of rows (the RTL parameters
    say so); lanes that do not divide the columns, or a FIFO of 3 rows, are errors."""
    config = AccelConfig()
    assert (config.epilogue_lanes, config.epilogue_cycles, config.epilogue_depth) == (4, 4, 512)
    assert config.rtl_parameters()["EPI_LANES"] == 4
    assert config.rtl_parameters()["EPI_DEPTH"] == 512
    assert AccelConfig(4, 6, 100, MemoryConfig(row_bytes=8)).epilogue_lanes == 2
    assert AccelConfig(4, 6, 100, MemoryConfig(row_bytes=8)).epilogue_depth == 32
    with pytest.raises(ValueError, match="lanes divide its 16 columns, got 3"):
        AccelConfig(epilogue_lanes=3)
    with pytest.raises(ValueError, match="epilogue's FIFO holds a power of two"):
        AccelConfig(epilogue_depth=3)


def test_the_traffic_count_of_a_dma_is_dma_load_bytes_over_every_kind_of_row_pattern() -> None:
    """layer_traffic counts a command's bytes from residues of its addresses (a whole
    network's commands row by row took most of a ResNet compile): equal, row by row, to
    accel.dma_load_bytes over negative, zero and unaligned strides and steps, bounds that
    cut either side, empty rectangles and buses of 1 to 64 bytes."""
    import random

    from glensidec.hardware.accel import dma_load_bytes
    from glensidec.hardware.commands import _bus_bytes_of

    rng = random.Random(26)
    for _ in range(3000):
        dma = DmaCommand(
            base=rng.randrange(0, 5000), length=rng.randrange(1, 70),
            count1=rng.randrange(0, 12), stride1=rng.randrange(-70, 70),
            count2=rng.randrange(0, 9), stride2=rng.randrange(-400, 400),
            bounds=rng.random() < 0.7, y0=rng.randrange(-6, 6), y_step=rng.randrange(-3, 4),
            height=rng.randrange(0, 9), x0=rng.randrange(-6, 6), x_step=rng.randrange(-3, 4),
            width=rng.randrange(0, 9))
        bus = rng.choice([1, 2, 4, 8, 16, 64])
        assert _bus_bytes_of(dma, bus) == dma_load_bytes(dma, bus), (dma, bus)


def test_the_traffic_of_a_grouped_load_is_its_groups_bytes() -> None:
    """A load ws_dma_load issues in groups (rows that overlap or lie end to end, a write
    port of several rows; with bounds at x_step 0 or 1) moves its groups' beats:
    `_bus_bytes_of` (per part, by residues) equals accel.dma_load_bytes group by group,
    ascending and descending, over every remainder; a group is all padding or all inside,
    and its span holds its rows."""
    import random

    from glensidec.hardware.accel import dma_groups, dma_load_bytes, dma_rows, grouped
    from glensidec.hardware.commands import _bus_bytes_of

    rng = random.Random(31)
    seen = padded = 0
    for _ in range(3000):
        length = rng.randrange(1, 40)
        step = rng.choice([length, rng.randrange(1, length + 1)])
        bounds = rng.random() < 0.4
        dma = DmaCommand(base=rng.randrange(500, 5000), length=length,
                         count1=rng.randrange(1, 20), stride1=rng.choice([step, -step]),
                         count2=rng.randrange(1, 5), stride2=rng.randrange(-400, 400),
                         bounds=bounds, y0=rng.randrange(-2, 2), y_step=1,
                         height=rng.randrange(1, 5), x0=rng.randrange(-4, 3),
                         x_step=rng.randrange(0, 2), width=rng.randrange(1, 12))
        bus, write_rows = rng.choice([1, 4, 16, 64]), rng.choice([2, 4, 8])
        assert grouped(dma, write_rows)
        groups = list(dma_groups(dma, write_rows))
        rows = iter(dma_rows(dma))
        for group in groups:
            members = [next(rows) for _ in range(group.rows)]
            assert {row.padding for row in members} == {group.padding}
            assert group.padding or all(
                group.addr <= row.addr and row.addr + length <= group.addr + group.length
                for row in members)
        assert next(rows, None) is None
        seen += any(group.rows > 1 for group in groups)
        padded += any(group.rows > 1 and group.padding for group in groups)
        assert _bus_bytes_of(dma, bus, write_rows) == dma_load_bytes(dma, bus, write_rows)
    assert seen > 2000 and padded > 300, (seen, padded)


@pytest.mark.parametrize("channels", [1, 5, 8, 16, 21, 40])
@pytest.mark.parametrize("cols", [4, 8, 16])
def test_the_depthwise_weight_matrix_is_weight_matrix_of_the_diagonal(channels: int,
                                                                      cols: int) -> None:
    """The passes pack a depthwise 1×1 layer's diagonal without its (C, C) matrix."""
    layer = ConvLayer("depthwise", 3, 1, channels, channels, groups=channels)
    values = np.random.default_rng(channels * cols).integers(-128, 128, channels)
    dense = np.zeros((1, 1, channels, channels), np.int64)
    dense[0, 0, np.arange(channels), np.arange(channels)] = values
    assert np.array_equal(depthwise_weight_matrix(layer, cols, values),
                          weight_matrix(layer, cols, dense))
    dense[0, 0, np.arange(channels), np.arange(channels)] = -7
    assert np.array_equal(depthwise_weight_matrix(layer, cols, -7),
                          weight_matrix(layer, cols, dense))
