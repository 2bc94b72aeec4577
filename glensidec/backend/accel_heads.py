"""Attention heads read by the output projection in the order they are written.

vit_b_16's attention ends in each head's softmax·V layer writing its (tokens, width) rows
into the heads' stack (`accel_attention.write_in_place`), and the output projection
reading them as one NHWC map whose pixels are the head's columns and whose channels are
the heads (a 1 × width window of `heads` channels: column d·heads + h of its rows). So a
host copy interleaved every element of the stack into that map (12 copies of 151 k
elements, 1.8 M host cycles), and the projection ran as a convolution of width taps of
12 channels, each tap a K fold of its own (605 k array cycles a layer, where the 768
channels of a matrix make 48 folds: 454 k).

The projection's sum over its K columns does not depend on their order: permuting its
constant weights' rows with them, it may read the heads in their stack's order, column
h·width + d. This pass (after `write_in_place`) makes the copy write that order and the
layer a matrix layer of those rows with its weight rows permuted; then
`accel_swin.write_heads_in_place` has each head store its rows there itself, a block of
columns at the rows' pitch, and the copy goes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    drop_dead_code,
    layer_geometry,
    layer_quant,
)
from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    AccelLayer,
    Copy,
    LoweredProgram,
    constant_array,
)
from glensidec.backend.views import Axis, View, contiguous, store_view, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array


def read_heads_in_stack_order(lowered: LoweredProgram, weights: dict[str, Array],
                              accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each matrix product whose rows a copy interleaves from a stack of
    layers' results reading them in the stack's order, its weights' rows permuted to match
    (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    for index, layer in enumerate(result.instructions):
        if isinstance(layer, AccelLayer):
            changed = _in_stack_order(result, index, layer, builder, weights, accel)
            if changed is not None:
                copy_index, copy, reordered = changed
                result.instructions[copy_index] = copy
                result.instructions[index] = reordered
    drop_dead_code(result)
    return result


def _reads_rows(layer: AccelLayer) -> bool:
    """Does the layer's im2col read its input map's (M, K) rows as they are (a matrix, or a
    convolution whose one window per row is a whole line of the map)?"""
    if not layer.image:
        return True
    height, width, channels = layer.image
    return (height == layer.m and width * channels == layer.k and layer.kernel == 1 and
            layer.stride == 1 and (layer.kernel_w or 1) == width and not layer.padding and
            not layer.padding_w and not layer.pad_end and layer.dilation == (1, 1))


def _in_stack_order(lowered: LoweredProgram, index: int, layer: AccelLayer,
                    builder: LayerBuilder, weights: dict[str, Array], accel: AccelConfig
                    ) -> tuple[int, Copy, AccelLayer] | None:
    """(the copy's position, the copy writing the stack's order, the layer reading it);
    None when the layer's rows are not a copy of a stack of equal layers' rows whose
    columns only the copy reorders."""
    if not layer.multiplies or layer.groups != 1 or layer.pool or layer.layout is not None \
            or layer.input_pitch or lowered.buffer_of(layer.b).kind != CONSTANT or \
            not lowered.is_whole(layer.a) or not _reads_rows(layer):
        return None
    target = lowered.buffer_of(layer.a)
    writers = lowered.writers().get(target.name, [])
    copy = lowered.instructions[writers[0]] if len(writers) == 1 else None
    if not isinstance(copy, Copy) or target.kind != ACTIVATION or \
            target.elements != layer.m * layer.k or lowered.readers().get(target.name) != [index] \
            or not lowered.is_whole(copy.dst):
        return None
    stack = lowered.buffer_of(copy.src)
    parts = lowered.writers().get(stack.name, [])
    layers = [part for part in (lowered.instructions[position] for position in parts)
              if isinstance(part, AccelLayer)]
    if stack.kind != ACTIVATION or stack.elements != target.elements or \
            lowered.readers().get(stack.name) != [writers[0]] or not layers or \
            len(layers) != len(parts) or \
            not all(not part.output_pitch and part.dst.is_row_major() and part.m == layer.m
                    and part.n == layers[0].n for part in layers):
        return None
    width = layers[0].n
    heads = layer.k // width
    offsets = sorted(part.dst.offset for part in layers)
    if offsets != [head * layer.m * width for head in range(heads)]:
        return None  # not a stack of (M, width) runs in order
    # where each element of the target comes from: the stack's (head, row, column)
    origin = np.empty(target.elements, np.int64)
    store_view(copy.dst, origin, view_array(copy.src, np.arange(stack.elements)))
    head, rest = np.divmod(origin.reshape(layer.m, layer.k), layer.m * width)
    row, column = np.divmod(rest, width)
    stacked = head * width + column  # the column the stack's order gives it
    if not np.array_equal(row, np.broadcast_to(np.arange(layer.m)[:, None], row.shape)) or \
            not np.array_equal(stacked, np.broadcast_to(stacked[0], stacked.shape)) or \
            np.array_equal(stacked[0], np.arange(layer.k)):
        return None  # a row from several rows, or not one reordering of the columns
    values = view_array(layer.b, constant_array(lowered.buffer_of(layer.b), weights)
                        .reshape(-1)).reshape(layer.k, -1)
    permuted = np.zeros_like(values)
    permuted[stacked[0]] = values  # weight row k meets the column that held k's element
    reordered = replace(layer, a=contiguous(target.name, (layer.m, layer.k)),
                        b=builder.constant(f"{layer.name}_stack_order", "i8", permuted),
                        image=(), kernel=1, stride=1, kernel_w=None, stride_w=None,
                        padding=0, padding_w=None, dilation=(1, 1))
    try:
        check_fits(accel, layer_geometry(reordered), layer_quant(lowered, reordered, weights))
    except GlensideError:
        return None
    in_order = Copy(copy.note, contiguous(target.name, (layer.m, heads, width)),
                    View(stack.name, 0, ((Axis(layer.m, width),), (Axis(heads, layer.m * width),),
                                         (Axis(width, 1),))))
    return writers[0], in_order, reordered
