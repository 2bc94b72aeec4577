"""Chained accelerator layers (glensidec.hardware.chain.chain_layers, the compiler's
backend.accel_chain): consecutive layers as one command stream, the result of one in the
next one's scratchpad rows. tests/test_cosim.py co-simulates the examples' chains on
ws_accel (make sim: the predicted cycles, every byte)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_accel_onchip import CONFIG, LAYER, POOL, _quant

from glensidec import pipeline
from glensidec.backend.accel_chain import onchip_buffers
from glensidec.backend.lower import constant_array
from glensidec.backend.plan import plan_memory
from glensidec.hardware.accel_native import FIELDS, unpack_commands
from glensidec.hardware.chain import ChainLayer, chain_layers, chain_stream, relocated
from glensidec.hardware.commands import (
    AccelModel,
    AccelTiming,
    EpilogueConfig,
    conv_program,
    pool_program,
    run_functional,
)
from glensidec.lang import data
from glensidec.opt.extract import parse_array_size

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _price(commands: object, limit: int) -> AccelTiming:
    return AccelModel(CONFIG).run(list(commands), limit=limit)  # type: ignore[call-overload]


def test_a_conv_and_its_pool_chain_on_chip_and_compute_what_they_do_through_memory() -> None:
    conv = conv_program(CONFIG, LAYER, _quant())
    pool = pool_program(CONFIG, POOL, schedule="band")
    link = conv.output_base - pool.input_base
    chained = chain_layers(CONFIG, [ChainLayer(conv.commands), ChainLayer(pool.commands, link)],
                           _price)
    assert chained.how == ["from memory: the first layer", "on chip"]
    assert chained.starts == [True, False]
    stream = chained.stream(0, 2)
    # the chain's timing is its stream's, the first layer's its own alone
    assert AccelModel(CONFIG).run(stream).cycles == chained.timings[1].cycles
    assert chained.timings[0].cycles == AccelModel(CONFIG).run(conv.commands).cycles
    alone = chained.timings[0].cycles + AccelModel(CONFIG).run(pool.commands).cycles
    assert chained.timings[1].cycles < alone
    # the same pool result as the two layers through memory (the pool's input where the
    # conv stores it)
    rng = np.random.default_rng(3)
    offset = chained.offsets[1]
    memory = rng.integers(0, 256, offset + 4096).astype(np.uint8)
    through = run_functional(CONFIG, conv.commands + relocated(CONFIG, pool.commands, link, 0),
                             memory)
    on_chip = run_functional(CONFIG, stream, memory)
    result = slice(pool.output_base, pool.output_base + 4 * 6)
    assert np.array_equal(on_chip[offset + result.start:offset + result.stop],
                          through[link + result.start:link + result.stop])


def test_a_layer_that_may_not_read_the_one_before_on_chip_starts_a_chain_and_says_why() -> None:
    conv = conv_program(CONFIG, LAYER, _quant())
    pool = pool_program(CONFIG, POOL, schedule="band")
    chained = chain_layers(CONFIG, [ChainLayer(conv.commands),
                                    ChainLayer(pool.commands, None, "its reason")], _price)
    assert chained.how == ["from memory: the first layer", "from memory: its reason"]
    assert chained.starts == [True, True]
    assert chained.commands[1] == pool.commands


def test_the_compiler_chains_small_cnn_s_conv_and_pool_and_prices_the_stream() -> None:
    target = pipeline.choose_target((parse_array_size("16x16"),))
    assert target.accel is not None
    compiled = pipeline.compile_for(pipeline.load(EXAMPLES / "small_cnn.gs"), target)
    weights = data.load_weights(compiled.program)
    lowered = pipeline.lower_for(compiled.program, compiled.types, target.config,
                                 target.accel, weights)
    layers = lowered.accel_layers()
    conv, pool = layers[-2:]
    assert conv.chained and not pool.chained and pool.chain == "on chip"
    assert pool.a.buffer == conv.dst.buffer
    # the result on chip has no bytes in the plan
    assert onchip_buffers(lowered) == {conv.dst.buffer}
    plan = plan_memory(lowered)
    assert conv.dst.buffer not in plan.activations.offsets
    # the two tables, moved to their offsets, are one stream: its cycles the layers' sum
    commands = [unpack_commands(
        constant_array(lowered.buffer_of(layer.commands), weights).reshape(-1, len(FIELDS)),
        target.accel.cols, EpilogueConfig(), [0] * layer.n, [0] * layer.n)
        for layer in (conv, pool)]
    stream = chain_stream(commands, [conv.chain_offset, pool.chain_offset])
    assert AccelModel(target.accel).run(stream).cycles == conv.cycles + pool.cycles
