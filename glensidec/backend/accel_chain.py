"""Chained accelerator layers: a layer's result in the next layer's scratchpad rows.

The last accelerator pass (after `accel_layers.program_accel_layers`). Where an
accelerator layer's result is read by the next instruction alone, that instruction is an
accelerator layer reading it whole as its input, and the result fits the scratchpad, the
two run as one command stream (glensidec.hardware.chain: the producer's STOREs write the
consumer's input rows on chip, the consumer's readers wait only for the rows they read,
its weights load while the producer drains), provided that ends no later than the two run
one after the other. A run of such layers is one chain; every other layer runs alone, as
before, and says why (`AccelLayer.chain`).

Each layer keeps its command table, in its own address space (the generated C calls the
runtime once per layer; the C model's scratchpad holds the chained rows from one call to
the next); its `chain_offset` places that space in its chain's one address space, where
the co-simulation runs the chain's layers as one stream on ws_accel
(cosim.accel_record). A chained layer's cycles are what it adds to its chain's stream, so
the layers' cycles sum to the stream's: the exact model's, as for a layer alone. The
result held on chip has no main-memory buffer (`onchip_buffers`: the plan gives it no
bytes, the C a NULL pointer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from glensidec.backend.accel_layers import layer_quant
from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    ConstantSource,
    LoweredProgram,
    constant_array,
)
from glensidec.backend.views import contiguous
from glensidec.hardware.accel_native import (
    FIELDS,
    native_cycles,
    native_model,
    pack_commands,
    unpack_commands,
)
from glensidec.hardware.chain import ChainLayer, Pricer, chain_layers
from glensidec.hardware.commands import AccelConfig, AccelModel, AccelTiming, Command
from glensidec.lang.dtypes import Array

#: The most commands a layer's table may hold to be chained: matching a table's rows is
#: Python over every command (the digits CNN's and the examples' tables hold 5-165; at
#: 20,000 a ResNet-18 spent 8 s of CPU chaining 2 of its 24 layers).
MAX_CHAIN_COMMANDS = 2_000


def onchip_buffers(lowered: LoweredProgram) -> set[str]:
    """The buffers held in scratchpad rows between two chained layers (no memory)."""
    return {layer.dst.buffer for layer in lowered.accel_layers() if layer.chained}


def _price(accel: AccelConfig) -> Pricer:
    native = native_model()

    def price(commands: Sequence[Command], limit: int) -> AccelTiming:
        if native is not None:
            return native_cycles(native, accel, pack_commands(commands), limit)
        return AccelModel(accel).run(list(commands), limit=limit)
    return price


def _why_not(lowered: LoweredProgram, producer: AccelLayer, consumer: AccelLayer,
             position: int, accel: AccelConfig) -> str:
    """Why the consumer may not read the producer's result on chip ('' if it may)."""
    buffer = producer.dst.buffer
    if consumer.a.buffer != buffer:
        return "its input is not the layer before's result"
    if lowered.buffers[buffer].kind != ACTIVATION:
        return "the layer before's result is the program's output"
    if lowered.readers()[buffer] != [position] or lowered.writers()[buffer] != [position - 1]:
        return "the layer before's result has other readers or writers"
    if (consumer.residual is not None and consumer.residual.buffer == buffer) or \
            (consumer.scale is not None and consumer.scale.buffer == buffer):
        return "it reads the layer before's result twice"
    if not (lowered.is_whole(producer.dst) and lowered.is_whole(consumer.a)):
        return "it reads part of the layer before's result"
    if producer.batch or consumer.batch or producer.output_pitch or consumer.input_pitch \
            or producer.row_order is not None or producer.residual_order is not None \
            or consumer.row_order is not None or consumer.residual_order is not None:
        return "a batched, pitched or reordered layer"
    if producer.groups > 1 or consumer.groups > 1:
        # the reduced DenseNet's grouped 1x1 layers chained ran on ws_accel with other
        # bytes than the C model's (cycles as predicted): not chained until understood
        return "a grouped layer (not chained: its on-chip run is not verified)"
    if _rows_stored(producer, accel) > accel.memory.scratchpad_rows // 2:
        return "the layer before's result does not fit half the scratchpad"
    return ""


def _commands(lowered: LoweredProgram, layer: AccelLayer, weights: dict[str, Array],
              accel: AccelConfig) -> list[Command] | None:
    """The layer's commands, whole (None where its table would not pack back to itself)."""
    table = constant_array(lowered.buffer_of(layer.commands), weights)
    rows = table.reshape(-1, len(FIELDS))
    if rows.shape[0] > MAX_CHAIN_COMMANDS:
        return None
    quant = layer_quant(lowered, layer, weights)
    commands = unpack_commands(rows, accel.cols, quant.epilogue, quant.bias,
                               quant.multiplier, quant.residual, quant.scale)
    if not np.array_equal(pack_commands(commands), rows):
        return None
    return commands


def chain_accel_layers(lowered: LoweredProgram, weights: dict[str, Array],
                       accel: AccelConfig) -> LoweredProgram:
    """Consecutive accelerator layers chained on chip where they can be (module
    docstring; a new program)."""
    result = lowered.copy()
    instructions = result.instructions
    position = 0
    while position < len(instructions):
        end = position
        while end < len(instructions) and isinstance(instructions[end], AccelLayer):
            end += 1
        if end - position >= 2:
            _chain_run(result, list(range(position, end)), weights, accel)
        position = end + 1
    return result


def _chain_run(result: LoweredProgram, positions: list[int], weights: dict[str, Array],
               accel: AccelConfig) -> None:
    """Chain the consecutive layers at `positions` where they can be (in place)."""
    layers = [layer for position in positions
              if isinstance(layer := result.instructions[position], AccelLayer)]
    whys = [""] + [_why_not(result, producer, layer, position, accel)
                   for producer, layer, position in zip(layers, layers[1:], positions[1:],
                                                        strict=False)]
    # (the tables of the layers a link takes, only: unpacking every table cost a ResNet
    # seconds)
    linked = {index for index, why in enumerate(whys) if index and not why}
    commands = {index: _commands(result, layers[index], weights, accel)
                for index in sorted(linked | {index - 1 for index in linked})}
    taken: list[ChainLayer] = []
    for index, layer in enumerate(layers):
        own = commands.get(index)
        why = whys[index] or "the first layer"
        if index in linked and (own is None or commands[index - 1] is None):
            why = "a command table too long to chain"
        link = layers[index - 1].output_base - layer.input_base \
            if index in linked and own is not None and commands[index - 1] is not None \
            else None
        taken.append(ChainLayer(own or [], link, why))
    if all(layer.link is None for layer in taken):
        return
    chained = chain_layers(accel, taken, _price(accel))
    for index, (position, layer) in enumerate(zip(positions, layers, strict=True)):
        onchip_out = index + 1 < len(layers) and not chained.starts[index + 1]
        onchip_in = not chained.starts[index]
        how = chained.how[index]
        if not (onchip_in or onchip_out):
            if how != "from memory: the first layer":
                result.instructions[position] = replace(layer, chain=how)
            continue
        previous = chained.timings[index - 1] if onchip_in else AccelTiming(0)
        timing = chained.timings[index]
        traffic = layer.traffic
        if traffic is not None:
            traffic = replace(
                traffic, stored=0 if onchip_out else traffic.stored,
                input_loaded=0 if onchip_in else traffic.input_loaded,
                compulsory=traffic.compulsory - (layer.m * layer.n if onchip_out else 0)
                - (layer.input_elements if onchip_in else 0))
        table = pack_commands(chained.commands[index]).astype("<i4")
        result.buffers[layer.commands.buffer] = replace(  # (in its place: weights.bin's order)
            result.buffer_of(layer.commands), shape=table.shape,
            source=ConstantSource(data=table.tobytes()))
        result.instructions[position] = replace(
            layer, commands=contiguous(layer.commands.buffer, table.shape),
            cycles=timing.cycles - previous.cycles,
            load_bytes=timing.load_bytes - previous.load_bytes,
            store_bytes=timing.store_bytes - previous.store_bytes,
            compute_rows=timing.compute_rows - previous.compute_rows,
            traffic=traffic, chained=onchip_out, chain_offset=chained.offsets[index],
            chain=how)


def _rows_stored(layer: AccelLayer, accel: AccelConfig) -> int:
    """Scratchpad rows the layer's result takes (a row per stored row of ≤ COLS bytes)."""
    return layer.m * -(-layer.n // accel.cols)
