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

from dataclasses import replace

import numpy as np

from glensidec.backend.accel_layers import check_fits, drop_dead_code, layer_quant
from glensidec.backend.accel_pool import PADDING, padded_rows, trace_layer_rows
from glensidec.backend.lower import AccelLayer, LoweredProgram
from glensidec.backend.views import contiguous
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer
from glensidec.hardware.commands import AccelConfig, packs_taps
from glensidec.lang.dtypes import Array


def read_layer_rows(lowered: LoweredProgram, weights: dict[str, Array],
                    accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every accelerator convolution whose input map is an earlier layer's
    rows, padded, reading those rows directly (a new program)."""
    result = LoweredProgram(dict(lowered.buffers), list(lowered.instructions), lowered.output,
                            lowered.output_shape)
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
    # the NHWC copy of the padded map, as the layer reads it
    found = trace_layer_rows(lowered, layer.a.buffer, index)
    if found is None:
        return None
    source_index, origin, fill = found
    source = lowered.instructions[source_index]
    assert isinstance(source, AccelLayer)
    if source.n != channels or layer.padding:
        return None
    for padding in range(layer.kernel):
        height, width = padded_height - 2 * padding, padded_width - 2 * padding
        if height * width != source.m or height < 1 or width < 1:
            continue
        # the rows in NCHW padded, then transposed to the NHWC the layer reads
        expected = padded_rows(height, width, channels, padding).reshape(
            channels, padded_height, padded_width).transpose(1, 2, 0).reshape(-1)
        if not np.array_equal(origin, expected):
            continue
        values = np.unique(fill[origin == PADDING])
        if values.size > 1:
            return None
        pad_value = int(values[0]) if values.size else 0
        geometry = ConvLayer(layer.name, height, width, channels, layer.n, layer.kernel,
                             layer.stride, padding)
        if padding and packs_taps(geometry, accel.rows):
            return None  # rows that straddle the border need a padded map
        try:
            check_fits(accel, geometry, replace(layer_quant(lowered, layer, weights),
                                                input_zero_point=pad_value))
        except GlensideError:
            return None  # the unpadded map's tiles do not fit: keep the host's copies
        return replace(layer, a=contiguous(source.dst.buffer, (height * width, channels),
                                           source.dst.offset),
                       image=(height, width, channels), padding=padding, pad_value=pad_value)
    return None


def _reading_matrix(lowered: LoweredProgram, index: int) -> AccelLayer | None:
    """The matrix layer at `index` (a 1×1 convolution: M pixels × K channels) reading an
    earlier layer's (M, K) rows when its A operand is a copy of exactly those, else None."""
    layer = lowered.instructions[index]
    assert isinstance(layer, AccelLayer)
    buffer = lowered.buffer_of(layer.a)
    if layer.a.offset or buffer.elements != layer.m * layer.k:
        return None
    found = trace_layer_rows(lowered, layer.a.buffer, index)
    if found is None:
        return None
    source = lowered.instructions[found[0]]
    assert isinstance(source, AccelLayer)
    if (source.m, source.n) != (layer.m, layer.k) or \
            not np.array_equal(found[1], np.arange(buffer.elements)):
        return None
    return replace(layer, a=contiguous(source.dst.buffer, (layer.m, layer.k),
                                       source.dst.offset))


