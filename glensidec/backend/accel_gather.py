"""Channel gathers of a layer's rows on the accelerator: ShuffleNet's shuffle and split.

ShuffleNet-v2 joins each unit's two branches (`access-concatenate`), shuffles the channels
(a reshape to (2, C/2), a transpose, a reshape back: a view) and splits the result
(`access-slice`): the next unit's passthrough half and the input of its branch. As lowered,
every consumer of those halves reads them through host copies of the concatenation's NCHW
map with the shuffled channel strides — the passthrough into the next concatenation, the
branch's input into the 1×1 convolution's matrix, a stage's whole map into the next
stage's padded depthwise input — about two thirds of shufflenet_v2_x1_0's predicted cycles.

This pass takes each host `Copy` of int8 data (or `cast i32 → requantize` loop: a
concatenation's operand brought to the concatenation's scale) that, traced back through
copies (`accel_pool.trace_layer_rows`), reads an accelerator layer's (M, C) rows (the
concatenation's rows, which its layers write in place) as a per-pixel channel gather —
element (c', pixel) is row `pixel`, column σ(c'), the copy in NCHW or already in rows —
and makes that gather a *selection layer*: a 1×1 convolution of the rows by the 0/1 matrix
S (C, n) with S[σ(c'), c'] = 1 and the identity epilogue (bias 0, multiplier 1, no shift:
exact; or the loop's requantize), whose (M, n) rows the copy then reads in their own
order. Downstream the existing passes see layers' rows again: a concatenation of the
selection layer and a branch is written in place (`join_concatenations`), a 1×1
convolution or a padded depthwise map reads the rows (`read_layer_rows`), and the copies
that fed them go.

A matrix layer (a 1×1 convolution) whose A operand is such a gather — ShuffleNet's
branch input, K padded with zeros — needs no selection: it reads the rows themselves, and
its weight matrix becomes the (C, N) one whose row σ(j) is its row j (zero elsewhere): the
same products, one layer fewer. A selection only such a gather reads is folded the same
way (through it, to the rows it selected) and goes. A gather in the rows' own order (σ the
identity) is left to `read_layer_rows`, and one whose layer does not fit the memories
stays a host copy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    drop_dead_code,
    evaluate_buffer,
)
from glensidec.backend.accel_layout import join_concatenation
from glensidec.backend.accel_pool import (
    LayerRows,
    layer_rows,
    trace_layer_rows,
    trace_layer_source,
)
from glensidec.backend.lower import ACTIVATION, AccelLayer, Copy, Fused, LoweredProgram
from glensidec.backend.views import View, regroup, transpose, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.commands import AccelConfig, LayerQuant
from glensidec.lang.dtypes import Array
from glensidec.lang.terms import ComputeOp


def gather_channels(lowered: LoweredProgram, weights: dict[str, Array],
                    accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every host copy that gathers channels of a layer's rows reading the
    rows of a selection layer instead, or, when only a matrix layer reads what it gathers,
    that layer reading the rows with its weight rows gathered (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    # each identity selection layer made: (the rows it reads, σ)
    selections: dict[str, tuple[LayerRows, Array]] = {}
    index = 0
    while index < len(result.instructions):
        instruction = result.instructions[index]
        if isinstance(instruction, AccelLayer):
            folded = _fold_into_weights(result, builder, index, weights, accel,
                                        selections)
            if folded is not None:
                result.instructions[index] = folded
        elif isinstance(instruction, Copy | Fused):
            made = _selection(result, builder, index, accel)
            if made is not None:
                layer, copy, chosen = made
                if isinstance(instruction, Copy):
                    selections[layer.name] = chosen
                result.instructions[index:index + 1] = [layer, copy]
                index += 1
            # a concatenation whose last piece this was: written in place now, so the
            # next unit's gathers trace back to its rows
            writers = result.writers().get(instruction.dst.buffer, [])
            if len(writers) > 1 and index == max(writers):
                before = len(result.instructions)
                join_concatenation(result, builder, instruction.dst.buffer)
                index -= before - len(result.instructions)
        index += 1
    drop_dead_code(result)
    return result


def _requantize(instruction: Copy | Fused) -> tuple[View, tuple[int, int, int, int]] | None:
    """(what it reads, (multiplier, pre, post, zero point)) of a copy (the identity) or of
    a fused `cast i32 → requantize` of one int8 leaf (a concatenation's operand brought to
    its scale), which the selection layer's epilogue computes; None for anything else."""
    if isinstance(instruction, Copy):
        return instruction.src, (1, 0, 0, 0)
    if len(instruction.leaves) != 1 or len(instruction.steps) != 2:
        return None
    cast, scale = instruction.steps
    if not (isinstance(cast.op, ComputeOp) and cast.op == ComputeOp("cast", ("i32",)) and
            cast.operands == (0,) and isinstance(scale.op, ComputeOp) and
            scale.op.name == "requantize" and scale.operands == (-1,) and
            scale.dtype == "i8"):
        return None
    multiplier, pre, post, zero_point = (int(p) for p in scale.op.params)
    return instruction.leaves[0], (multiplier, pre, post, zero_point)


def _selection(lowered: LoweredProgram, builder: LayerBuilder, index: int,
               accel: AccelConfig) -> tuple[AccelLayer, Copy, tuple[LayerRows, Array]] | None:
    """(the selection layer, the copy reading its rows) for the copy (or requantizing
    loop) at `index`, or None when it is not a channel gather of a layer's rows or the
    layer does not fit."""
    instruction = lowered.instructions[index]
    assert isinstance(instruction, Copy | Fused)
    read = _requantize(instruction)
    shape = instruction.dst.shape
    # (M, n) pixel by pixel, as a matrix layer's A; or (n, H, W), (1, n, H, W) channel by
    # channel, as the program's NCHW maps
    by_pixel = len(shape) == 2
    if read is None or lowered.buffer_of(instruction.dst).dtype != "i8" or \
            lowered.buffer_of(read[0]).dtype != "i8" or \
            lowered.buffer_of(read[0]).kind != ACTIVATION or \
            len(shape) not in (2, 3, 4) or (len(shape) == 4 and shape[0] != 1):
        return None
    src, (multiplier, pre, post, zero_point) = read
    # (the layer first: the element maps only for rows of as many pixels)
    source_index = trace_layer_source(lowered, src.buffer, index)
    if source_index is None:
        return None
    source = lowered.instructions[source_index]
    assert isinstance(source, AccelLayer)
    rows = layer_rows(source)
    pixels, channels = shape if by_pixel else (shape[-2] * shape[-1], shape[-3])
    if pixels != rows.m:
        return None  # not the rows' pixels
    found = trace_layer_rows(lowered, src.buffer, index)
    assert found is not None and found[0] == source_index
    element = view_array(src, found[1])
    element = element.reshape(pixels, channels).T if by_pixel else \
        element.reshape(channels, pixels)
    if np.any(element < rows.offset):
        return None  # padding
    pixel, column = np.divmod(element - rows.offset, rows.n)
    if not np.array_equal(pixel, np.broadcast_to(np.arange(pixels), pixel.shape)) or \
            np.any(column != column[:, :1]):
        return None
    sigma = column[:, 0]
    if isinstance(instruction, Copy) and channels == rows.n and \
            np.array_equal(sigma, np.arange(channels)):
        return None  # the rows in their own order: read_layer_rows reads them
    geometry = ConvLayer("", pixels, 1, rows.n, channels)
    epilogue = EpilogueConfig(pre, post, zero_point, -128, 127)
    try:
        check_fits(accel, geometry, LayerQuant(epilogue, (0,) * channels,
                                               (multiplier,) * channels))
    except GlensideError:
        return None  # the host keeps it
    name = builder.name(f"{instruction.dst.buffer}_gathered")
    selection = np.zeros((rows.n, channels), np.int64)
    selection[sigma, np.arange(channels)] = 1
    gathered = builder.activation(f"{name}_rows", (pixels, channels))
    layer = AccelLayer(
        f"{instruction.note}: the channels gathered from a layer's rows on the accelerator",
        gathered, name, rows.view((pixels, rows.n)),
        builder.constant(f"{name}_weights", "i8", selection),
        builder.constant(f"{name}_bias", "i32", np.zeros(channels, np.int64)),
        builder.constant(f"{name}_multiplier", "i32", np.full(channels, multiplier, np.int64)),
        builder.commands_placeholder(name), m=pixels, k=rows.n, n=channels, pre=pre,
        post=post, zero_point=zero_point, low=-128, high=127)
    # the copy reads the gathered rows (pixels, channels), transposed to its shape
    source_view = gathered if by_pixel else regroup(transpose(gathered, (1, 0)), shape)
    assert source_view is not None
    return layer, Copy(instruction.note, instruction.dst, source_view), (rows, sigma)


def _only_reaches(lowered: LoweredProgram, name: str, layer: int) -> bool:
    """Does buffer `name` reach nothing but the A operand of the layer at `layer`, through
    copies (a selection only that layer's gather reads)?"""
    readers = lowered.readers()
    pending, seen = [name], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        if current == lowered.output:
            return False
        for index in readers.get(current, []):
            user = lowered.instructions[index]
            if index == layer:
                assert isinstance(user, AccelLayer)
                if user.a.buffer != current or \
                        any(view.buffer == current for view in user.reads()[1:]):
                    return False
            elif isinstance(user, Copy):
                pending.append(user.dst.buffer)
            else:
                return False
    return True


def _fold_into_weights(lowered: LoweredProgram, builder: LayerBuilder, index: int,
                       weights: dict[str, Array], accel: AccelConfig,
                       selections: dict[str, tuple[LayerRows, Array]]
                       ) -> AccelLayer | None:
    """The matrix layer at `index` reading an earlier layer's (M, C) rows itself, when its
    (M, K) A operand gathers columns σ(j) of them (the rest zero fills: K padded): its
    weights become the (C, N) matrix whose row σ(j) is its row j (zero rows elsewhere), so
    the product is the same and no copy or selection gathers the channels. None when A is
    no such gather."""
    layer = lowered.instructions[index]
    assert isinstance(layer, AccelLayer)
    if layer.image or layer.pool or layer.layout is not None or layer.a.offset or \
            lowered.buffer_of(layer.a).kind != ACTIVATION:
        return None
    source_index = trace_layer_source(lowered, layer.a.buffer, index)
    if source_index is None:
        return None
    source = lowered.instructions[source_index]
    assert isinstance(source, AccelLayer)
    rows = layer_rows(source)
    if rows.m != layer.m:
        return None  # (before the element maps)
    found = trace_layer_rows(lowered, layer.a.buffer, index)
    assert found is not None and found[0] == source_index
    origin = view_array(layer.a, found[1]).reshape(layer.m, layer.k)
    fill = view_array(layer.a, found[2]).reshape(layer.m, layer.k)
    real = origin[0] >= 0
    if np.any((origin >= 0) != real) or np.any(fill[:, ~real] != 0):
        return None  # a column that is data in some rows, padding in others
    pixel, column = np.divmod(origin[:, real] - rows.offset, rows.n)
    if np.any(origin[:, real] < rows.offset) or \
            not np.array_equal(pixel, np.broadcast_to(np.arange(layer.m)[:, None],
                                                      pixel.shape)) or \
            np.any(column != column[:1]) or len(set(column[0].tolist())) != column.shape[1]:
        return None
    sigma = column[0]
    chosen = selections.get(source.name)
    if chosen is not None and not source.output_pitch and \
            _only_reaches(lowered, source.dst.buffer, index):
        # a selection only this gather reads: gather from what it selected instead
        rows, sigma = chosen[0], chosen[1][sigma]
    elif rows.n == layer.k and np.array_equal(sigma, np.arange(layer.k)):
        return None  # the rows themselves: read_layer_rows reads them
    values = evaluate_buffer(lowered, layer.b.buffer, weights, index)
    if values is None:
        return None
    matrix = view_array(layer.b, values).reshape(layer.k, layer.n)
    gathered = np.zeros((rows.n, layer.n), np.int64)
    gathered[sigma] = matrix[real]
    try:
        check_fits(accel, ConvLayer("", layer.m, 1, rows.n, layer.n),
                   LayerQuant(EpilogueConfig(), (0,) * layer.n, (1,) * layer.n))
    except GlensideError:
        return None
    return replace(layer, a=rows.view((layer.m, rows.n)), k=rows.n,
                   b=builder.constant(f"{layer.name}_gathered_weights", "i8", gathered))
