"""On-chip rows (glensidec.hardware.chain): a layer's STOREs write the next layer's input
rows into the scratchpad and the next layer's readers wait for the rows they read. The
RTL runs the same streams in sim/test_ws_accel.py (onchip3x3_maxpool: bits and cycles)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from glensidec.hardware.accel import ConvLayer, DmaCommand, EpilogueConfig, MemoryConfig
from glensidec.hardware.accel_native import (
    ROWS_AHEAD,
    TO_SPAD,
    WAIT_ROWS,
    native_cycles,
    native_model,
    pack_commands,
    unpack_commands,
)
from glensidec.hardware.chain import NotChainable, onchip_chain, relocated, unaliased
from glensidec.hardware.commands import (
    AccelConfig,
    AccelModel,
    Compute,
    Config,
    LayerQuant,
    Load,
    Store,
    conv_program,
    encode_command,
    pool_program,
    run_functional,
)

CONFIG = AccelConfig(rows=4, cols=8, acc_depth=32, memory=MemoryConfig(
    row_bytes=8, scratchpad_bytes=8 * 128 * 4, banks=4, bus_bytes=4, latency=3),
    queue_depth=8, out_depth=4, epilogue_lanes=2, epilogue_depth=4)
LAYER = ConvLayer("conv", 4, 4, 5, 6, 3, 1, 1)
POOL = ConvLayer("pool", 4, 4, 6, 6, 2, 2)


def _quant() -> LayerQuant:
    rng = np.random.default_rng(1)
    return LayerQuant(EpilogueConfig(pre=1, post=38, zero_point=3, low=-128, high=127),
                      bias=tuple(int(v) for v in rng.integers(-500, 500, 6)),
                      multiplier=tuple(int(v) for v in rng.integers(1 << 29, 1 << 30, 6)))


def _chained(schedule: str) -> tuple[list, list, slice]:
    conv = conv_program(CONFIG, LAYER, _quant())
    pool = pool_program(CONFIG, POOL, schedule=schedule)
    offset = conv.output_base - pool.input_base
    consumer = relocated(CONFIG, pool.commands, offset, 96)
    output = offset + pool.output_base
    return conv.commands + consumer, onchip_chain(CONFIG, conv.commands, consumer), \
        slice(output, output + 4 * 6)


@pytest.mark.parametrize("schedule", ["band", "gather"])
def test_onchip_chain_computes_what_memory_does(schedule: str) -> None:
    through_memory, chained, output = _chained(schedule)
    conv_output = conv_program(CONFIG, LAYER, _quant()).output_base
    memory = np.random.default_rng(2).integers(0, 256, 4096).astype(np.uint8)
    expected = run_functional(CONFIG, through_memory, memory)[output]
    got = run_functional(CONFIG, chained, memory)
    assert (got[output] == expected).all()
    # nothing of the convolution's result reaches main memory, and the pool loads none
    result = slice(conv_output, conv_output + 16 * 6)  # the convolution's, in memory
    assert (got[result] == memory[result]).all()
    waiting = [c for c in chained if isinstance(c, Store | Compute) and c.wait_rows]
    assert waiting and all(c.rows_ahead >= 0 for c in waiting)


def test_command_words_carry_the_fields() -> None:
    dma = DmaCommand(base=40, length=6, count1=4, stride1=1, count2=2, stride2=6)
    word = encode_command(Store(dma, to_spad=True, wait_rows=True, rows_ahead=5), 8)
    assert word >> 5 & 1 and word >> 2 & 1 and word >> 256 & 0xFFFF == 5
    compute = encode_command(Compute(0, 0, 1, wait_rows=True, rows_ahead=7), 8)
    assert compute >> 5 & 1 and compute >> 160 & 0xFFFF == 7


#: the chains' configuration and variants that make the on-chip writer, the output FIFO
#: and the queues the bottleneck (the commands are the same: only the timing differs)
TIMINGS = {"default": CONFIG,
           "short-queues": dataclasses.replace(CONFIG, queue_depth=2),
           "short-fifos": dataclasses.replace(CONFIG, out_depth=2, epilogue_depth=2),
           "slow-epilogue": dataclasses.replace(CONFIG, epilogue_lanes=1),
           "slow-memory": dataclasses.replace(CONFIG, memory=dataclasses.replace(
               CONFIG.memory, latency=9, bus_bytes=2))}


@pytest.mark.parametrize("timing", sorted(TIMINGS))
@pytest.mark.parametrize("schedule", ["band", "gather"])
def test_the_c_model_prices_onchip_rows_and_tables_keep_them(schedule: str, timing: str
                                                            ) -> None:
    """The C port takes AccelModel's cycles (every AccelTiming field) on an on-chip chain,
    and its packed table (wait_rows, rows_ahead and to_spad in columns those commands do
    not use otherwise) unpacks to the same commands; a table without them is unchanged."""
    native = native_model()
    if native is None:
        pytest.fail("the C cycle model did not build (is a C compiler on PATH?)")
    config = TIMINGS[timing]
    through_memory, chained, _ = _chained(schedule)
    for stream in (chained, through_memory):
        expected = AccelModel(config).run(stream)
        got = native_cycles(native, config, stream, 10**7)
        assert dataclasses.asdict(got) == dataclasses.asdict(expected)
    quant = _quant()  # (a CONFIG's vectors are the layer's: only its place is in the table)
    for stream in (chained, through_memory):
        unpacked = unpack_commands(pack_commands(stream), CONFIG.cols, quant.epilogue,
                                   quant.bias, quant.multiplier)
        assert [c for c in unpacked if not isinstance(c, Config)] == \
            [c for c in stream if not isinstance(c, Config)]
    plain = pack_commands(through_memory)
    onchip_columns = [WAIT_ROWS, ROWS_AHEAD, TO_SPAD]
    assert not plain[plain[:, 0] != 0][:, onchip_columns].any()
    assert pack_commands(chained)[:, onchip_columns].any()


def test_an_im2col_consumer_is_not_chainable() -> None:
    conv = conv_program(CONFIG, LAYER, _quant())
    after = ConvLayer("next", 4, 4, 6, 6, 3, 1, 1)
    im2col = conv_program(CONFIG, after, _quant(), "im2col")
    offset = conv.output_base - im2col.input_base
    with pytest.raises(NotChainable):
        onchip_chain(CONFIG, conv.commands, relocated(CONFIG, im2col.commands, offset, 96))


def test_a_consumer_that_loads_its_buffers_again_chains_from_rows_of_their_own() -> None:
    """On a 2×2 array the band pool loads two chunks' bands into the same rows (a double
    buffer): a stored row's target would be written twice, and the readers would wait for
    rows never made. `unaliased` moves each later band to rows of its own (the readers
    with it), so the pair chains: the pool's output as through memory, none of the
    convolution's result in memory, and the C model's cycles AccelModel's."""
    small = AccelConfig(rows=2, cols=2, acc_depth=16, memory=MemoryConfig(
        row_bytes=2, scratchpad_bytes=2 * 32768 * 4, banks=4, bus_bytes=16, latency=8),
        queue_depth=8, out_depth=1024, epilogue_lanes=1, epilogue_depth=8)
    conv = conv_program(small, LAYER, _quant())
    pool = pool_program(small, POOL, schedule="band")
    offset = conv.output_base - pool.input_base
    consumer = relocated(small, pool.commands, offset, 8192)
    loads_of = [c.dma.spad_row for c in consumer if isinstance(c, Load)]
    assert len(loads_of) > len(set(loads_of))  # the pool loads rows again
    chained = onchip_chain(small, conv.commands, consumer)
    memory = np.random.default_rng(3).integers(0, 256, 8192).astype(np.uint8)
    output = slice(offset + pool.output_base, offset + pool.output_base + 4 * 6)
    expected = run_functional(small, conv.commands + consumer, memory)[output]
    got = run_functional(small, chained, memory)
    assert (got[output] == expected).all()
    result = slice(conv.output_base, conv.output_base + 16 * 6)
    assert (got[result] == memory[result]).all()
    native = native_model()
    assert native is not None
    assert native_cycles(native, small, chained, 10**7) == AccelModel(small).run(chained)


def test_a_tile_over_two_loads_of_the_result_is_not_unaliased() -> None:
    """A COMPUTE that reads rows of a moved load and rows of another cannot follow both."""
    producer = [Store(DmaCommand(base=100, length=2, count1=2, stride1=2))]
    load = Load(DmaCommand(base=100, length=2, count1=2, stride1=2, spad_row=0))
    again = Load(DmaCommand(base=100, length=2, count1=1, stride1=2, spad_row=1))
    with pytest.raises(NotChainable, match="two loads"):
        unaliased(CONFIG, producer, [load, again, Compute(512, 0, 2)])
