"""The schedule search (commands.best_conv_table) is fast and chooses as the exhaustive one.

The search builds each candidate as a stream whose computes are flat tuples, packs and
prices it, and builds commands only for the one it keeps; it prices im2col only when its
load slots (a lower bound on its cycles) leave it a chance. These tests hold that to the
rule the search implements: price every candidate's commands and take, among those within
TRAFFIC_SLACK of the fastest, the one that moves the fewest bytes (then the fewest cycles,
then the first), replaced by a tiling of chunks reading one band (a layer of few K folds)
only when that is strictly faster.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

import numpy as np
import pytest
from test_accel_commands import LAYERS as COMMAND_LAYERS
from test_accel_commands import SMALL

from glensidec.hardware.accel import (
    CapacityError,
    ConvLayer,
    EpilogueConfig,
    ResidualConfig,
)
from glensidec.hardware.accel_native import pack_commands
from glensidec.hardware.commands import (
    TRAFFIC_SLACK,
    AccelConfig,
    AccelTiming,
    LayerProgram,
    LayerQuant,
    accel_cycles,
    best_conv_table,
    commands_of,
    im2col_load_slots,
    im2col_program,
    im2col_stream,
    interleaved_tilings,
    layer_traffic,
    one_band_tilings,
    table_cycles,
    table_cycles_within,
    table_traffic,
    window_program,
    window_stream,
    window_tilings,
)

# test_accel_commands' array, and the same with a 1-byte bus
SLOW = replace(SMALL, memory=replace(SMALL.memory, bus_bytes=1))
LAYERS = [
    *COMMAND_LAYERS,
    # a dense layer of many channels (vgg11's classifier, small): its weights stream once
    # in every schedule, and im2col's rows come on top (the bound rules it out)
    ConvLayer("dense", 1, 1, 256, 32),
]


def _quant(layer: ConvLayer, residual: bool) -> LayerQuant:
    channels = layer.out_channels
    return LayerQuant(EpilogueConfig(), tuple(range(channels)), (1,) * channels,
                      input_zero_point=3,
                      residual=ResidualConfig(multiplier=1, early=True) if residual else None)


def _exhaustive(config: AccelConfig, layer: ConvLayer, quant: LayerQuant
                ) -> tuple[LayerProgram, AccelTiming]:
    """Every candidate built as commands and priced; the rule applied to all of them."""
    residual = quant.residual is not None
    candidates: list[LayerProgram] = []
    with contextlib.suppress(CapacityError):
        candidates.append(im2col_program(config, layer, quant))
    tilings = window_tilings(config, layer, residual)
    windows = [window_program(config, layer, quant, tiling) for tiling in tilings]
    window_cycles = [accel_cycles(config, program.commands).cycles for program in windows]
    fastest_window = tilings[window_cycles.index(min(window_cycles))] if tilings else None
    candidates += windows + [window_program(config, layer, quant, tiling) for tiling in
                             interleaved_tilings(config, layer, fastest_window, residual)]
    priced = [(program, accel_cycles(config, program.commands)) for program in candidates]
    fastest = min(timing.cycles for _, timing in priced)
    chosen = min((choice for choice in priced
                  if choice[1].cycles <= fastest * (1 + TRAFFIC_SLACK)),
                 key=lambda choice: (choice[1].load_bytes + choice[1].store_bytes,
                                     choice[1].cycles))
    for tiling in one_band_tilings(config, layer, residual):
        program = window_program(config, layer, quant, tiling)
        timing = accel_cycles(config, program.commands)
        if timing.cycles < chosen[1].cycles:
            chosen = program, timing
    return chosen


CASES = [(config, layer, residual) for config in (SMALL, SLOW) for layer in LAYERS
         for residual in (False, True)]


@pytest.mark.parametrize("config, layer, residual", CASES,
                         ids=lambda value: getattr(value, "name", None) or
                         (f"bus{value.memory.bus_bytes}" if isinstance(value, AccelConfig)
                          else f"residual{int(value)}"))
def test_best_conv_table_keeps_the_exhaustive_choice(config: AccelConfig, layer: ConvLayer,
                                                    residual: bool) -> None:
    quant = _quant(layer, residual)
    program, table, timing = best_conv_table(config, layer, quant)
    expected, expected_timing = _exhaustive(config, layer, quant)
    assert program == expected
    assert timing == expected_timing
    assert np.array_equal(table, pack_commands(expected.commands))


def test_the_im2col_bound_prunes_a_dense_layer() -> None:
    """The case the bound is for: im2col's load slots exceed the fastest window
    schedule's cycles by more than the slack, so it is never built (and the choice is
    the exhaustive one: the test above)."""
    layer, quant = LAYERS[-1], _quant(LAYERS[-1], False)
    _, _, timing = best_conv_table(SMALL, layer, quant)
    assert im2col_load_slots(SMALL, layer) > timing.cycles * (1 + TRAFFIC_SLACK)


@pytest.mark.parametrize("config", [SMALL, SLOW], ids=["bus4", "bus1"])
def test_im2col_load_slots_bound_its_cycles(config: AccelConfig) -> None:
    """The bound is one: never more than the load slots the exact model issues, which
    all come before the last write."""
    for layer in LAYERS:
        for residual in (False, True):
            quant = _quant(layer, residual)
            timing = accel_cycles(config, im2col_program(config, layer, quant).commands)
            slots = im2col_load_slots(config, layer, residual)
            assert slots <= timing.load_busy_cycles < timing.cycles


def test_a_stream_packs_as_its_commands() -> None:
    """Flat computes pack to the rows their Computes do, and the streams' commands are
    the programs'."""
    for layer in LAYERS[:5]:
        quant = _quant(layer, False)
        streams = [im2col_stream(SMALL, layer, quant)] + [
            window_stream(SMALL, layer, quant, tiling)
            for tiling in window_tilings(SMALL, layer)]
        for _, stream in streams:
            assert any(isinstance(item, tuple) for item in stream)
            assert np.array_equal(pack_commands(stream), pack_commands(commands_of(stream)))
        program = im2col_program(SMALL, layer, quant)
        assert program.commands == commands_of(streams[0][1])


def test_pack_commands_refuses_a_flat_command_of_another_width() -> None:
    """A flat command is told by its width: one of neither width is an error, not a row
    of zeros the cycle model would price as an empty load."""
    with pytest.raises(ValueError, match="FlatCompute or a FlatLoad"):
        pack_commands([(0, 1, 2)])


@pytest.mark.parametrize("config", [SMALL, SLOW], ids=["bus4", "bus1"])
def test_the_table_alone_gives_the_choice_and_its_traffic(config: AccelConfig) -> None:
    """best_conv_table without Command objects chooses the same table and timing, and
    table_traffic counts from that table what layer_traffic counts from the commands
    (the compile keeps only the table), im2col's table too."""
    for layer in LAYERS:
        for residual in (False, True):
            quant = _quant(layer, residual)
            program, table, timing = best_conv_table(config, layer, quant)
            bare, bare_table, bare_timing = best_conv_table(config, layer, quant,
                                                            commands=False)
            assert bare == replace(program, commands=[])
            assert bare_timing == timing and np.array_equal(bare_table, table)
            assert table_traffic(config, layer, bare, bare_table, residual) == \
                layer_traffic(config, layer, program, residual)
            im2col = im2col_program(config, layer, quant)
            assert table_traffic(config, layer, im2col, pack_commands(im2col.commands),
                                 residual) == layer_traffic(config, layer, im2col, residual)


@pytest.mark.parametrize("config", [SMALL, SLOW], ids=["bus4", "bus1"])
def test_table_cycles_within_is_none_exactly_when_slower_than_the_bound(
        config: AccelConfig) -> None:
    """The early stop the search prices with: the exact timing at or under the bound,
    None over it (a run that ends in the bound's own cycle once passed for one under it:
    regnet_x_400mf's first layers took a slower one-band tiling)."""
    for layer in LAYERS:
        quant = _quant(layer, False)
        streams = [window_stream(config, layer, quant, tiling)[1] for tiling in
                   window_tilings(config, layer) + one_band_tilings(config, layer)]
        with contextlib.suppress(CapacityError):
            streams.append(im2col_stream(config, layer, quant)[1])
        for stream in streams:
            table = pack_commands(stream)
            timing = table_cycles(config, stream, table)
            for bound in (timing.cycles // 2, timing.cycles - 1, timing.cycles,
                          timing.cycles + 1):
                within = table_cycles_within(config, stream, table, bound)
                assert within == (timing if timing.cycles <= bound else None)
