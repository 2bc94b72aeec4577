"""The C port of the accelerator's cycle model gives AccelModel's counts, to the cycle.

AccelModel (Python) is the specification, checked against the RTL in sim/; the C port
(glensidec/hardware/accel_model.c) is what compiles and benches use because it is fast.
Every field of the timing is compared on the layer programs of test_accel_commands, at
several memory configurations (small queues, narrow buses, long latency, one-row banks
that make the weight and activation streamers collide), on hand-written sequences that
stress the store path, and on a 16×16 layer with the compile's default memories.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools

import numpy as np
import pytest
from test_accel_commands import LAYERS, POOLS, SMALL, random_layer_data, random_residual

from glensidec.hardware import accel_native
from glensidec.hardware.accel import ConvLayer, DmaCommand, EpilogueConfig, MemoryConfig
from glensidec.hardware.accel_native import (
    native_cycles,
    native_model,
    pack_commands,
    unpack_commands,
)
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import (
    AccelConfig,
    AccelModel,
    AccelTiming,
    Command,
    Compute,
    Config,
    LayerQuant,
    Load,
    Store,
    accel_config_for,
    conv_program,
    interleaved_tilings,
    pool_program,
    window_program,
    window_tilings,
)

CONFIGS = {
    "small": SMALL,
    "narrow-bus": AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=2048,
                                                      banks=4, bus_bytes=2, latency=5)),
    "wide-bus-short-queues": AccelConfig(4, 4, 16, MemoryConfig(
        row_bytes=4, scratchpad_bytes=1024, banks=4, bus_bytes=8, latency=1), queue_depth=2),
    "tall": AccelConfig(6, 3, 32, MemoryConfig(row_bytes=8, scratchpad_bytes=4096, banks=4,
                                                bus_bytes=4, latency=3)),
    # the epilogue: a lane per column behind a 2-row FIFO, or 4 lanes for 8 columns (a row
    # over two cycles) behind 8 rows
    "epilogue-every-column": AccelConfig(4, 4, 16, MemoryConfig(
        row_bytes=4, scratchpad_bytes=2048, banks=4, bus_bytes=4, latency=2),
        epilogue_lanes=4, epilogue_depth=2),
    "epilogue-two-groups": AccelConfig(4, 8, 16, MemoryConfig(
        row_bytes=8, scratchpad_bytes=4096, banks=4, bus_bytes=16, latency=2),
        epilogue_lanes=4, epilogue_depth=8),
    # ws_dma_load's groups: rows end to end written 4 at once from a bus of 4 rows a beat
    "four-rows-a-write": AccelConfig(4, 8, 16, MemoryConfig(
        row_bytes=8, scratchpad_bytes=4096, banks=4, bus_bytes=32, latency=2, write_rows=4)),
    # 4 weight rows a cycle into an 8-row array (a tile's weights in 2 beats)
    "four-weight-rows-a-cycle": AccelConfig(8, 4, 32, MemoryConfig(
        row_bytes=8, scratchpad_bytes=4096, banks=4, bus_bytes=16, latency=2, write_rows=2),
        weight_load_rows=4),
}


def _native() -> ctypes.CDLL:
    native = native_model()
    if native is None:
        pytest.fail("the C cycle model did not build (is a C compiler on PATH?)")
    return native


def _compare(config: AccelConfig, commands: list[Command]) -> AccelTiming:
    expected = AccelModel(config).run(commands)
    got = native_cycles(_native(), config, commands, limit=10**8)
    assert dataclasses.asdict(got) == dataclasses.asdict(expected)
    return got


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_layer_programs_take_the_python_models_cycles(layer: ConvLayer, config_name: str,
                                                      residual: bool) -> None:
    config = CONFIGS[config_name]
    quant = random_layer_data(layer, 0)[2]
    if residual:  # residual rows through the scratchpad, store → load tokens
        quant = dataclasses.replace(quant, residual=random_residual(1))
    program = conv_program(config, layer, quant)
    timing = _compare(config, program.commands)
    assert timing.cycles > 0 and timing.load_busy_cycles > 0 and timing.store_busy_cycles > 0


def test_a_store_path_that_backs_up_freezes_the_array_in_both_models() -> None:
    """Single rows stored one byte apart at a 1-byte bus: the epilogue waits on the store
    once the 2-row output FIFO is full, the array waits on the epilogue
    (array_stall_cycles > 0)."""
    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=1024, banks=4,
                                                 bus_bytes=1, latency=2), out_depth=2)
    loads = [Load(DmaCommand(base=0, length=4, count1=4, stride1=4, spad_row=0)),
             Load(DmaCommand(base=64, length=4, count1=12, stride1=4, spad_row=64),
                  signal=True)]
    computes = [Compute(w_row=0, a_row=64, m_len=12, emit=True, wait=True, signal=True)]
    tail: list[Command] = [Config(EpilogueConfig(), (0,) * 4, (1,) * 4),
                           Store(DmaCommand(base=512, length=4, count1=6, stride1=7)),
                           Store(DmaCommand(base=700, length=3, count1=2, stride1=5,
                                            count2=3, stride2=40))]
    timing = _compare(config, loads + computes + tail)
    assert timing.array_stall_cycles > 0


def test_a_16x16_layer_with_the_default_memories() -> None:
    config = accel_config_for(ArrayConfig(16, 16))
    layer = ConvLayer("conv3x3", 8, 8, 32, 48, kernel=3, stride=1, padding=1)
    quant = LayerQuant(EpilogueConfig(), (0,) * 48, (1,) * 48)
    _compare(config, conv_program(config, layer, quant).commands)


def test_the_limit_is_an_error_in_both_models() -> None:
    program = conv_program(SMALL, LAYERS[0], random_layer_data(LAYERS[0], 0)[2])
    with pytest.raises(RuntimeError, match="did not finish in 50 cycles"):
        AccelModel(SMALL).run(program.commands, limit=50)
    with pytest.raises(RuntimeError, match="did not finish in 50 cycles"):
        native_cycles(_native(), SMALL, program.commands, limit=50)


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: layer.name)
def test_window_programs_take_the_python_models_cycles(layer: ConvLayer, config_name: str,
                                                       residual: bool) -> None:
    """Every window tiling that fits (2-D activation patterns over resident rows), and
    those with N blocks side by side in the accumulator; their tables unpack to the same
    commands (a COMPUTE's accumulator row included)."""
    config = CONFIGS[config_name]
    quant = random_layer_data(layer, 0)[2]
    if residual:
        quant = dataclasses.replace(quant, residual=random_residual(1))
    tilings = window_tilings(config, layer, residual)
    for tiling in [*tilings, *(variant for base in [None, *tilings]
                               for variant in interleaved_tilings(config, layer, base, residual))]:
        commands = window_program(config, layer, quant, tiling).commands
        _compare(config, commands)
        if tiling.interleave > 1:
            assert unpack_commands(pack_commands(commands).astype(np.int32), config.cols,
                                   quant.epilogue, quant.bias, quant.multiplier) == commands


@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize(("layer", "schedule"), [
    *((layer, "im2col") for layer in LAYERS),
    *((layer, "window") for layer in LAYERS if window_tilings(SMALL, layer, True))],
    ids=lambda value: getattr(value, "name", value))
def test_a_packed_table_unpacks_to_the_same_commands(layer: ConvLayer, residual: bool,
                                                     schedule: str) -> None:
    """The generated C keeps commands as table rows; the co-simulation turns them back into
    the commands (and RTL words) the compiler made."""
    quant = random_layer_data(layer, 2)[2]
    if residual:
        quant = dataclasses.replace(quant, residual=random_residual(3))
    program = conv_program(SMALL, layer, quant, schedule)
    table = pack_commands(program.commands).astype(np.int32)
    unpacked = unpack_commands(table, SMALL.cols, quant.epilogue, quant.bias,
                               quant.multiplier, quant.residual)
    assert unpacked == program.commands


@pytest.mark.parametrize("schedule", ["gather", "band"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("layer", POOLS, ids=lambda layer: layer.name)
def test_pool_programs_take_the_python_models_cycles(layer: ConvLayer, config_name: str,
                                                     schedule: str) -> None:
    """Pooling stores read the scratchpad window by window (gathered taps, or a 2-D
    window of resident input rows); load → store tokens."""
    config = CONFIGS[config_name]
    program = pool_program(config, layer, schedule=schedule)  # every configuration fits
    _compare(config, program.commands)
    unpacked = unpack_commands(pack_commands(program.commands).astype(np.int32), config.cols,
                               EpilogueConfig(), (0,) * layer.channels, (1,) * layer.channels)
    assert unpacked == program.commands


@pytest.mark.parametrize("schedule", ["gather", "band"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_sum_pool_programs_take_the_python_models_cycles_and_round_trip(config_name: str,
                                                                         schedule: str) -> None:
    """An average pool: sum stores (their flag in the table's height column) and a Config
    per N block whose vectors differ."""
    config = CONFIGS[config_name]
    layer = ConvLayer("avgpool", 6, 6, 11, 11, kernel=2, stride=2)
    quant = random_layer_data(layer, 3)[2]
    program = pool_program(config, layer, quant, schedule)
    _compare(config, program.commands)
    unpacked = unpack_commands(pack_commands(program.commands).astype(np.int32), config.cols,
                               quant.epilogue, quant.bias, quant.multiplier)
    assert unpacked == program.commands


@pytest.mark.parametrize("patterns", [False, True], ids=["im2col", "window"])
def test_long_tiles_taken_in_stretches_take_the_python_models_cycles(patterns: bool) -> None:
    """Tiles of up to a few hundred rows, which the C model takes in stretches of plain
    cycles (the array taking rows, nothing else moving) rather than cycle by cycle: with
    the weight streamer's last beat held while its bank drains, and (window) 2-D patterns
    whose stretches cross lines; every field of the timing as the Python model steps it."""
    config = AccelConfig(4, 4, 512, MemoryConfig(row_bytes=4, scratchpad_bytes=65536,
                                                 banks=4, bus_bytes=4, latency=3))
    layer = ConvLayer("long", 14, 18, 6, 8, kernel=3, stride=1, padding=1)
    quant = random_layer_data(layer, 0)[2]
    if patterns:
        tilings = window_tilings(config, layer)
        programs = [window_program(config, layer, quant, tiling) for tiling in tilings[:2]]
    else:
        programs = [conv_program(config, layer, quant, "im2col")]
    for program in programs:
        assert max(command.m_len for command in program.commands
                   if isinstance(command, Compute)) >= 100
        _compare(config, program.commands)


def test_the_built_library_is_named_by_its_compiler_and_flags(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A library built with other flags (or another compiler) is not taken for this one:
    its cached file's name changed only with the source before."""
    name = accel_native._library_name("cc")
    assert accel_native._library_name("gcc") != name
    monkeypatch.setattr(accel_native, "CFLAGS", (*accel_native.CFLAGS, "-O3"))
    assert accel_native._library_name("cc") != name


@pytest.mark.parametrize("load", [1, 2])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_stretches_end_where_held_weights_collide_with_patterned_rows(stride: int,
                                                                       load: int) -> None:
    """Banks of one row, tiles whose 2-D patterns cross lines and wrap around the
    scratchpad into the weights' rows, and a third tile's weights held until the first's
    bank drains: the stretch of plain cycles taken at once ends where that beat goes, and
    the rows after it collide with the weight streamer exactly where stepping puts them
    (every first row and line step, so some collide); with 2 weight rows a beat, a beat
    reads two banks and collides with either."""
    config = AccelConfig(4, 4, 64, MemoryConfig(row_bytes=4, scratchpad_bytes=64, banks=16,
                                                bus_bytes=4, latency=2), weight_load_rows=load)
    loads = [Load(DmaCommand(base=0, length=4, count1=16, stride1=4, spad_row=0), signal=True)]
    tail: list[Command] = [Config(EpilogueConfig(), (0,) * 4, (1,) * 4),
                           Store(DmaCommand(base=256, length=4, count1=49, stride1=4))]
    stalls = 0
    for first, line in itertools.product(range(16), range(1, 8)):
        computes = [Compute(w_row=4 * (tile % 2), a_row=(first + 5 * tile) % 16,
                            m_len=40 + 3 * tile, add=tile > 0, emit=tile == 3,
                            wait=tile == 0, a_count1=3 + tile % 2, a_stride1=stride,
                            a_stride2=line + tile)
                    for tile in range(4)]
        timing = _compare(config, [*loads, *computes, *tail])
        stalls += timing.cycles - timing.compute_rows
    assert stalls > 0


def _chained(first: list[Command], second: list[Command]) -> list[Command]:
    """`second` queued behind `first` in one stream, its first LOAD fenced (it starts once
    every STORE of `first` has written its last beat), as sim/cocotb_ws_accel.py's
    chain3x3_maxpool runs a convolution and a pool of its result on the RTL."""
    at = next(i for i, command in enumerate(second) if isinstance(command, Load))
    fenced = dataclasses.replace(second[at], fence=True)  # type: ignore[arg-type]
    return [*first, *second[:at], fenced, *second[at + 1:]]


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("pool", POOLS[:3], ids=lambda layer: layer.name)
def test_a_fenced_load_takes_the_python_models_cycles_and_round_trips(
        pool: ConvLayer, config_name: str) -> None:
    """The C port and the packed tables take the fenced LOAD (issue 26: layers chained in
    one stream; the table's `emit` column, unused by loads, holds it): a convolution, then
    a max-pool queued behind it (and the reverse), the pool's first load fenced."""
    config = CONFIGS[config_name]
    conv = LAYERS[0]
    commands = conv_program(config, conv, random_layer_data(conv, 0)[2]).commands
    pooled = pool_program(config, pool).commands
    for stream in (_chained(commands, pooled), _chained(pooled, commands)):
        assert sum(isinstance(c, Load) and c.fence for c in stream) == 1
        _compare(config, stream)
        table = pack_commands(stream)
        assert np.count_nonzero((table[:, 0] == 0) & (table[:, accel_native.FENCE] == 1)) == 1
        assert native_cycles(_native(), config, table, 10**8).cycles == \
            AccelModel(config).run(stream).cycles


def test_a_table_without_fences_is_unchanged_by_the_fence_column() -> None:
    """Loads keep 0 in the fence's column unless fenced: every table compiled before the
    fence existed packs to the same rows."""
    program = conv_program(SMALL, LAYERS[0], random_layer_data(LAYERS[0], 0)[2])
    table = pack_commands(program.commands)
    assert not table[table[:, 0] == 0, accel_native.FENCE].any()
    quant = random_layer_data(LAYERS[0], 0)[2]
    fenced = _chained(program.commands, program.commands)
    unpacked = unpack_commands(pack_commands(fenced).astype(np.int32), SMALL.cols,
                               quant.epilogue, quant.bias, quant.multiplier)
    assert unpacked == fenced


@pytest.mark.parametrize("layer", [
    ConvLayer("dense", 1, 1, 96, 24, kernel=1),  # one activation row: weight beats
    ConvLayer("emitting", 9, 11, 5, 16, kernel=1),  # one fold a tile: the epilogue drains
    ConvLayer("banded", 10, 12, 12, 16, kernel=3, padding=1),
], ids=lambda layer: layer.name)
@pytest.mark.parametrize("load", [1, 4])
def test_weight_beats_and_draining_epilogue_stretches_take_the_python_models_cycles(
        layer: ConvLayer, load: int) -> None:
    """Stretches of plain cycles in which the weight streamer issues beats (a tile's
    weights loading while the array takes the last tile's rows, or a dense layer of one
    activation row whose cycles are nearly all weight beats) and in which the epilogue's
    lanes and ws_dma_store go on with rows already admitted: on an 8×8 array whose
    epilogue takes a row in four cycles, every field of the timing as the Python model
    steps it, for each window tiling, the interleaved ones and im2col; and with 4 weight
    rows a cycle (a tile's weights in 2 beats)."""
    config = AccelConfig(8, 8, 128, MemoryConfig(row_bytes=8, scratchpad_bytes=8192,
                                                 banks=4, bus_bytes=8, latency=3),
                         epilogue_lanes=2, epilogue_depth=16, weight_load_rows=load)
    quant = random_layer_data(layer, 1)[2]
    tilings = window_tilings(config, layer)
    programs = [conv_program(config, layer, quant, "im2col")]
    programs += [window_program(config, layer, quant, tiling)
                 for tiling in [*tilings, *interleaved_tilings(config, layer, tilings[0])]]
    for program in programs:
        _compare(config, program.commands)


def _skipped(config: AccelConfig, table: np.ndarray, limit: int = 10**8) -> int:
    """How many of the table's commands the C model took in repeated periods."""
    status, timing = accel_native._run(_native(), config, table, limit)
    assert status == 0
    return int(timing.skipped)


@pytest.mark.parametrize(("layer", "skipping"), [
    (ConvLayer("dense", 1, 1, 1024, 8, kernel=1), "all"),  # a fold's LOAD and COMPUTE
    (ConvLayer("deep", 8, 8, 128, 8, kernel=1), "some"),  # im2col's folds
], ids=["dense", "deep"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
@pytest.mark.parametrize("load_rows", [1, 2], ids=["one-row-beats", "two-row-beats"])
def test_repeated_periods_taken_at_once_take_the_python_models_cycles(
        layer: ConvLayer, skipping: str, residual: bool, load_rows: int) -> None:
    """The C model takes periods of commands at once when the machine's state repeats
    the one a period before and the commands repeat theirs (skip_periods): programs of
    long repetitive layers (each window tiling, the interleaved ones and im2col, with and
    without a residual add; banks of 128 rows, some programs reading weights and
    activations from one bank) skip commands (every program of the dense layer does), and
    every field of the timing is the Python model's as it steps them (also with two
    weight rows a beat); stopped at a bound of one cycle less, the run says so."""
    config = AccelConfig(4, 4, 64, MemoryConfig(row_bytes=4, scratchpad_bytes=2048,
                                                banks=4, bus_bytes=4, latency=3),
                         weight_load_rows=load_rows)
    quant = random_layer_data(layer, 2)[2]
    if residual:
        quant = dataclasses.replace(quant, residual=random_residual(2))
    tilings = window_tilings(config, layer, residual)
    tilings += interleaved_tilings(config, layer, tilings[0], residual) if tilings else []
    programs = [conv_program(config, layer, quant, "im2col")]
    programs += [window_program(config, layer, quant, tiling) for tiling in tilings]
    skipped = []
    for program in programs:
        table = pack_commands(program.commands)
        timing = _compare(config, program.commands)
        skipped.append(_skipped(config, table))
        assert accel_native.native_cycles_within(_native(), config, table,
                                                 timing.cycles - 1) is None
        assert accel_native.native_cycles_within(_native(), config, table,
                                                 timing.cycles) == timing
    assert (min if skipping == "all" else max)(skipped) > 0, skipped
