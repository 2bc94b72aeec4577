"""ws_accel's fence (LOAD bit 7): a load that waits until every STORE sent before it has
written its last beat, so a layer queued behind another reads that layer's result from
memory. The RTL against AccelModel, data and cycles, is sim/test_ws_accel.py's
chain3x3_maxpool; here the model's ordering, the command word, the packed table and the C model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_accel_commands import SMALL, random_layer_data

from glensidec.hardware.accel import ConvLayer
from glensidec.hardware.accel_native import FENCE, native_cycles, native_model, pack_commands
from glensidec.hardware.commands import (
    AccelModel,
    Command,
    Load,
    Store,
    conv_program,
    conv_reference,
    encode_command,
    pool_program,
    pool_reference,
    run_functional,
    weight_matrix,
)

CONV = ConvLayer("conv3x3", 4, 4, 5, 6, kernel=3, stride=1, padding=1)
POOL = ConvLayer("pool", 4, 4, 6, 6, kernel=2, stride=2)


def chained(fence: bool) -> tuple[list[Command], int, int]:
    """The convolution's commands, then the pool's reading its output in place (every pool
    address moved by the conv's output base), the pool's first load fenced when `fence`;
    and the number of the conv's loads and the conv's store beats."""
    quant = random_layer_data(CONV, 0)[2]
    conv, pool = conv_program(SMALL, CONV, quant), pool_program(SMALL, POOL)
    offset = conv.output_base - pool.input_base
    moved: list[Command] = []
    for command in pool.commands:
        if isinstance(command, Load | Store):
            command = dataclasses.replace(command, dma=dataclasses.replace(
                command.dma, base=command.dma.base + offset))
        if isinstance(command, Load) and not any(isinstance(c, Load) for c in moved):
            command = dataclasses.replace(command, fence=fence)
        moved.append(command)
    alone = AccelModel(SMALL).run(conv.commands)
    return conv.commands + moved, alone.load_busy_cycles, alone.store_busy_cycles


def first_pool_slot_and_last_conv_write(commands: list[Command], conv_slots: int,
                                        conv_writes: int) -> tuple[int, int]:
    trace = AccelModel(SMALL).run(commands, trace=True).trace
    slots = np.cumsum([load for load, _, _ in trace])
    writes = np.cumsum([write for _, _, write in trace])
    return int(np.argmax(slots > conv_slots)), int(np.argmax(writes >= conv_writes))


def test_a_fenced_load_starts_after_the_earlier_stores_are_written() -> None:
    fenced = first_pool_slot_and_last_conv_write(*chained(True))
    assert fenced[0] > fenced[1]


def test_without_the_fence_the_load_reads_before_the_stores_are_written() -> None:
    """The hazard the fence is for: the pool's load goes as soon as the conv's loads
    are done, while the conv still computes."""
    unfenced = first_pool_slot_and_last_conv_write(*chained(False))
    assert unfenced[0] < unfenced[1]


def test_the_fenced_chain_computes_the_pooled_convolution() -> None:
    """run_functional executes commands one after the other: what the fence guarantees."""
    feature, weights, quant = random_layer_data(CONV, 0)
    conv, pool = conv_program(SMALL, CONV, quant), pool_program(SMALL, POOL)
    commands, _, _ = chained(True)
    offset = conv.output_base - pool.input_base
    memory = np.zeros(max(conv.memory_bytes, offset + pool.memory_bytes), np.uint8)
    image = conv.input_image(feature, quant.input_zero_point)
    memory[conv.input_base:conv.input_base + image.size] = image
    stored = weight_matrix(CONV, SMALL.cols, weights).reshape(-1) & 0xFF
    memory[conv.weight_base:conv.weight_base + stored.size] = stored
    expected = pool_reference(POOL, conv_reference(CONV, feature, weights, quant)
                              .reshape(4, 4, 6))
    start = offset + pool.output_base
    got = run_functional(SMALL, commands, memory)[start:start + expected.size]
    assert np.array_equal(got.view(np.int8).reshape(expected.shape), expected)


def test_the_fence_is_bit_7_of_a_load_word() -> None:
    load = next(c for c in chained(True)[0] if isinstance(c, Load))
    word = encode_command(load, SMALL.cols)
    assert word >> 7 & 1 == 0
    assert encode_command(dataclasses.replace(load, fence=True), SMALL.cols) == word | 1 << 7


def test_the_packed_table_keeps_a_fenced_load_and_the_c_model_prices_it() -> None:
    """The C port of the model reads packed tables: the fence is a load's `emit` column
    (was: pack_commands refused a fenced load), and the C model's cycles with it are
    AccelModel's — later than the same stream without the fence."""
    native = native_model()
    if native is None:
        pytest.fail("the C cycle model did not build (is a C compiler on PATH?)")
    fenced, plain = chained(True)[0], chained(False)[0]
    table = pack_commands(fenced)
    loads = [command for command in fenced if isinstance(command, Load)]
    assert table[table[:, 0] == 0, FENCE].tolist() == [int(load.fence) for load in loads]
    cycles = native_cycles(native, SMALL, table, 10**8).cycles
    assert cycles == AccelModel(SMALL).run(fenced).cycles
    assert cycles > native_cycles(native, SMALL, pack_commands(plain), 10**8).cycles
