"""Accelerator layers that read the previous layer's rows: no host padding or layout copies.

A convolution on the accelerator reads its input as an NHWC map with the DMA's im2col
addressing (`accel_layers`). As lowered, that map is built by the host: the previous
layer's (M, C) rows are transposed into the program's NCHW tensor, padded (fills and a
copy per padded axis), and copied to NHWC again for the DMA — three copies of every
feature map, work the host model does not price. Yet the rows already are the NHWC map,
and the DMA pads by itself (rows outside the map are `pad_value`, no memory read).

This pass (`compile --accel`, last: after the residual adds moved, a layer's input is
more often an earlier layer's rows) evaluates, element by element, what each
such layer's NHWC input holds in terms of an earlier layer's rows (`trace_layer_rows`:
a row element's index, or a fill's value); when it is exactly those rows padded by p with
one value, the layer reads the rows themselves, its commands `conv_program`'s for the
unpadded map with padding p and that pad value. A matrix layer (a 1×1 convolution) whose
A operand is a copy of exactly an earlier layer's rows reads those rows instead. The
copies that only fed them are then dead and go.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    drop_dead_code,
    layer_geometry,
    layer_quant,
)
from glensidec.backend.accel_pool import (
    PADDING,
    layer_rows,
    padded_rows,
    trace_layer_rows,
    trace_layer_source,
)
from glensidec.backend.lower import ACTIVATION, AccelLayer, Copy, LoweredProgram
from glensidec.backend.views import (
    Axis,
    View,
    contiguous,
    element_range,
    regroup,
    store_view,
    transpose,
    view_array,
)
from glensidec.errors import GlensideError
from glensidec.hardware.commands import AccelConfig, packs_taps
from glensidec.lang.dtypes import Array


def read_layer_rows(lowered: LoweredProgram, weights: dict[str, Array],
                    accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every accelerator convolution whose input map is an earlier layer's
    rows, padded, reading those rows directly (a new program)."""
    result = lowered.copy()
    for index, instruction in enumerate(result.instructions):
        if not isinstance(instruction, AccelLayer) or instruction.pool:
            continue
        if instruction.image:
            layer = _reading_rows(result, index, weights, accel)
        else:
            layer = _reading_matrix(result, index)
        if layer is not None:
            result.instructions[index] = layer
    drop_dead_code(result)
    return result


def _reading_rows(lowered: LoweredProgram, index: int, weights: dict[str, Array],
                  accel: AccelConfig) -> AccelLayer | None:
    """The layer at `index` reading the earlier layer's rows, or None when its input is
    not such rows, padded with one value."""
    layer = lowered.instructions[index]
    assert isinstance(layer, AccelLayer)
    padded_height, padded_width, channels = layer.image
    # the NHWC copy of the padded map, as the layer reads it (its layer first: the
    # element maps only for rows it may read)
    source_index = trace_layer_source(lowered, layer.a.buffer, index)
    if source_index is None:
        return None
    source = lowered.instructions[source_index]
    assert isinstance(source, AccelLayer)
    rows = layer_rows(source)
    window = layer_geometry(layer)
    span_h, span_w = window.span_hw
    # the padding along each axis (a 1×7's only along x, a dilated window's as wide as
    # its span), below the window's extent: the rows' map is what remains
    paddings = [(pad_h, pad_w) for pad_h, pad_w in itertools.product(range(span_h),
                                                                     range(span_w))
                if (padded_height - 2 * pad_h) * (padded_width - 2 * pad_w) == rows.m and
                padded_height - 2 * pad_h >= 1 and padded_width - 2 * pad_w >= 1]
    if rows.n != channels or window.padding_hw != (0, 0) or not paddings:
        return None
    found = trace_layer_rows(lowered, layer.a.buffer, index)
    assert found is not None and found[0] == source_index
    _, origin, fill = found
    for pad_h, pad_w in paddings:
        height, width = padded_height - 2 * pad_h, padded_width - 2 * pad_w
        # the rows in NCHW padded, then transposed to the NHWC the layer reads
        expected = padded_rows(height, width, channels, pad_h, padding_w=pad_w).reshape(
            channels, padded_height, padded_width).transpose(1, 2, 0).reshape(-1)
        if not np.array_equal(origin, expected):
            continue
        values = np.unique(fill[origin == PADDING])
        if values.size > 1:
            return None
        pad_value = int(values[0]) if values.size else 0
        geometry = replace(window, height=height, width=width, padding=pad_h,
                           padding_w=pad_w)
        if (pad_h or pad_w) and packs_taps(geometry, accel.rows):
            # packed rows would straddle the border, which needs a padded map (host
            # copies of the rows, one element a cycle): one tap a row instead, padded by
            # the DMA's bounds (a few more K folds on the array)
            geometry = replace(geometry, pack_taps=False)
        try:
            check_fits(accel, geometry, replace(layer_quant(lowered, layer, weights),
                                                input_zero_point=pad_value))
        except GlensideError:
            return None  # the unpadded map's tiles do not fit: keep the host's copies
        return replace(layer, a=rows.view((height * width, channels)),
                       image=(height, width, channels), padding=geometry.padding,
                       padding_w=geometry.padding_w, pad_value=pad_value,
                       pack_taps=geometry.pack_taps)
    return None


def _reading_matrix(lowered: LoweredProgram, index: int) -> AccelLayer | None:
    """The matrix layer at `index` (a 1×1 convolution: M pixels × K channels) reading an
    earlier layer's (M, C) rows when its A operand is a copy of exactly those, its columns
    past C (K padded to the array's rows: ShuffleNet's 116 channels to 128) zero fills,
    else None. With padding, the layer reads the C columns and the first C weight rows."""
    layer = lowered.instructions[index]
    assert isinstance(layer, AccelLayer)
    buffer = lowered.buffer_of(layer.a)
    if layer.a.offset or buffer.elements < layer.m * layer.k:
        return None
    source_index = trace_layer_source(lowered, layer.a.buffer, index)
    if source_index is None:
        return None
    source = lowered.instructions[source_index]
    assert isinstance(source, AccelLayer)
    rows = layer_rows(source)
    exactly = (rows.m, rows.n) == (layer.m, layer.k) and buffer.elements == layer.m * layer.k
    if not exactly and (rows.m != layer.m or rows.n >= layer.k):
        return None  # (before the element maps)
    found = trace_layer_rows(lowered, layer.a.buffer, index)
    assert found is not None and found[0] == source_index
    if exactly:
        if not np.array_equal(found[1], np.arange(buffer.elements)):
            return None
        return replace(layer, a=rows.view((layer.m, layer.k)))
    width = rows.n
    origin = view_array(layer.a, found[1]).reshape(layer.m, layer.k)
    fill = view_array(layer.a, found[2]).reshape(layer.m, layer.k)
    expected = rows.offset + np.arange(layer.m)[:, None] * width + np.arange(width)
    if not np.array_equal(origin[:, :width], expected) or \
            np.any(origin[:, width:] != PADDING) or np.any(fill[:, width:] != 0):
        return None
    weights = contiguous(layer.b.buffer, (width, layer.n), layer.b.offset)
    whole = np.arange(lowered.buffer_of(layer.b).elements)
    if layer.b.shape != (layer.k, layer.n) or not np.array_equal(
            view_array(layer.b, whole)[:width], view_array(weights, whole)):
        return None
    return replace(layer, a=rows.view((layer.m, width)), k=width, b=weights)




# -- channel concatenations written in place ----------------------------------------------


def join_concatenations(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with every channel concatenation of accelerator layers' results (a fire
    module's or an inception block's branches) written by the layers themselves as the
    concatenation's NHWC rows, each its block of columns `output_pitch` bytes apart (a
    new program). As lowered, each layer's rows are copied to NCHW and then into the
    concatenation (and, for the next layer's DMA, back to NHWC): after this pass one copy
    makes the NCHW map from the joined rows, and it goes too when only layers read it
    (`read_layer_rows` then reads the joined rows)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    candidates = [name for name, writers in result.writers().items()
                  if len(writers) > 1 and all(isinstance(result.instructions[index], Copy)
                                              for index in writers)]
    for name in candidates:
        join_concatenation(result, builder, name)
    drop_dead_code(result)
    return result


def join_concatenation(lowered: LoweredProgram, builder: LayerBuilder, name: str) -> None:
    """Buffer `name`, when it is the (1, C, H, W) or (C, H, W) concatenation of layers'
    rows (each layer's N channels a block), made by one copy of rows the layers write."""
    buffer = lowered.buffers[name]
    writers = lowered.writers().get(name, [])
    shape = buffer.shape[1:] if len(buffer.shape) == 4 and buffer.shape[0] == 1 \
        else buffer.shape
    if buffer.kind != ACTIVATION or buffer.dtype != "i8" or len(shape) != 3 or \
            not all(isinstance(lowered.instructions[index], Copy) for index in writers):
        return
    channels, pixels = shape[0], shape[1] * shape[2]
    # (the layers alone first: the element maps only for layers whose rows it may join)
    copies = [(index, lowered.instructions[index]) for index in writers]
    sources = [trace_layer_source(lowered, copy.src.buffer, index)
               for index, copy in copies if isinstance(copy, Copy)]
    if None in sources:
        return
    # each copy's layer is one the maps below see, unless a later copy overwrites it (or
    # it copies nothing)
    seen = [(element_range(copy.dst), source) for (_, copy), source in zip(
        copies, sources, strict=True) if math.prod(copy.dst.shape) and source is not None]
    spans = sorted(span for span, _ in seen)
    apart = all(low > high for (_, high), (low, _) in itertools.pairwise(spans))
    if not _joinable(lowered, [source for _, source in (seen if apart else seen[-1:])],
                     pixels):
        return
    layer_of = np.full(buffer.elements, -1, np.int64)
    origin = np.full(buffer.elements, PADDING, np.int64)
    for index in writers:
        copy = lowered.instructions[index]
        assert isinstance(copy, Copy)
        found = trace_layer_rows(lowered, copy.src.buffer, index)
        if found is None:
            return
        store_view(copy.dst, layer_of, np.full(copy.dst.shape, found[0]))
        store_view(copy.dst, origin, view_array(copy.src, found[1]))
    channel, pixel = np.divmod(np.arange(buffer.elements), pixels)
    # per rows buffer (a layer's own, or the rows an inner concatenation's layers wrote):
    # its first channel here, and the layers that write it
    blocks: dict[str, tuple[int, list[int]]] = {}
    for position in np.unique(layer_of).tolist():
        layer = lowered.instructions[position] if position >= 0 else None
        if not isinstance(layer, AccelLayer) or layer.layout is not None:
            return
        rows = layer_rows(layer)
        if rows.m != pixels or rows.offset or rows.buffer in blocks or \
                lowered.buffers[rows.buffer].elements != pixels * rows.n:
            return
        mine = layer_of == position
        first = int(channel[mine].min())
        if int(mine.sum()) != pixels * rows.n or not np.array_equal(
                origin[mine], pixel[mine] * rows.n + channel[mine] - first):
            return
        blocks[rows.buffer] = first, lowered.writers()[rows.buffer]
    if not _only_feeds(lowered, list(blocks), name, set(writers)):
        return
    rows_view = builder.activation(f"{name}_rows", (pixels, channels))
    for first, positions in blocks.values():
        for position in positions:
            layer = lowered.instructions[position]
            assert isinstance(layer, AccelLayer)
            column = first + (layer.dst.offset if layer.output_pitch else 0)
            lowered.instructions[position] = replace(
                layer, dst=View(rows_view.buffer, column,
                                ((Axis(pixels, channels),), (Axis(layer.n, 1),))),
                output_pitch=channels)
    final = regroup(contiguous(name, buffer.shape), (channels, pixels))
    assert final is not None
    last = max(writers)
    lowered.instructions[last] = Copy(
        f"{lowered.instructions[last].note}: the concatenation's rows, which its layers "
        "wrote in place, transposed", final, transpose(rows_view, (1, 0)))
    lowered.instructions = [instruction for index, instruction
                            in enumerate(lowered.instructions)
                            if index == last or index not in writers]


def _joinable(lowered: LoweredProgram, positions: list[int], pixels: int) -> bool:
    """Can the layers at `positions` write their rows into a concatenation of `pixels`
    pixels (what join_concatenation asks of each, before its element maps)?"""
    buffers: set[str] = set()
    for position in sorted(set(positions)):
        layer = lowered.instructions[position]
        if not isinstance(layer, AccelLayer) or layer.layout is not None:
            return False
        rows = layer_rows(layer)
        if rows.m != pixels or rows.offset or rows.buffer in buffers or \
                lowered.buffers[rows.buffer].elements != pixels * rows.n:
            return False
        buffers.add(rows.buffer)
    return True


def _only_feeds(lowered: LoweredProgram, sources: list[str], target: str,
                copies: set[int]) -> bool:
    """Do the `sources` (layers' rows) reach nothing but `target`, through copies alone,
    the last of them `copies` (so the layers may write elsewhere)?"""
    readers = lowered.readers()
    seen: set[str] = set()
    pending = list(sources)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name == lowered.output:
            return False
        for index in readers.get(name, []):
            instruction = lowered.instructions[index]
            if not isinstance(instruction, Copy):
                return False
            if instruction.dst.buffer == target:
                if index not in copies:
                    return False
            elif lowered.buffer_of(instruction.dst).kind != ACTIVATION:
                return False
            else:
                pending.append(instruction.dst.buffer)
    return True
