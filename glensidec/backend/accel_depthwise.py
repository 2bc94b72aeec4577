"""Depthwise convolutions on the accelerator: one grouped layer instead of host work.

A depthwise convolution (MobileNet's; the importer writes one for `group` = channels)
lowers to a `Dot` over an access-pair: the k×k windows of a padded (1, C, H, W) map and
the filters broadcast over the pixels, reduced over the two window axes. The bare array
runs it through the `depthwise` rewrites as block-diagonal array calls on host-built
im2col matrices, concatenated, with the bias, requantize and clip after the concatenation
on the host (MobileNet-v1: 63 % host). `compile --accel` leaves those rewrites out
(`pipeline.ACCEL_RULESETS`) and this pass takes the `Dot` instead: it evaluates both
operands element by element (the windows' indices into the map, the filters' values),
follows the epilogue chain after it (`follow_chain`: bias, requantize, clips), and makes
the whole one grouped `AccelLayer` (groups = C). `commands.conv_program` then runs each N
block of COLS channels over just its own COLS input channels: per block k² folds of
diagonal weights (block-diagonal packing, the exact model's cheaper choice: one group per
array call would use one of COLS columns), the DMA reading the im2col rows from an NHWC
copy of the map, which `accel_layout` turns into a read of the previous layer's rows.

A bias per output element that zero padding explains (the quantizer's corrections) becomes
per channel by padding with the input's zero point, as for any layer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    chain_epilogue,
    chain_table,
    check_fits,
    crop_map,
    drop_dead_code,
    evaluate_buffer,
    follow_chain,
    per_column,
    zero_padding_mask,
    zero_point_bias,
)
from glensidec.backend.accel_pool import map_windows
from glensidec.backend.lower import ACTIVATION, AccelLayer, Copy, Dot, Fill, LoweredProgram
from glensidec.backend.views import View, contiguous, regroup, store_view, transpose, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer
from glensidec.hardware.commands import AccelConfig, LayerQuant, weight_matrix
from glensidec.lang.dtypes import Array


@dataclass(frozen=True)
class GroupedConv:
    """A depthwise or grouped convolution the `Dot` at `index` computes."""

    index: int
    windows: View  # the member reading the map's windows
    filters: Array  # (O, taps) int64: each output channel's taps, in the windows' item order
    dense: Array  # (k, k, C, O) int64: the weights, zero outside each channel's group
    # of the padded map (padding 0; its part the windows reach), with its groups, the
    # taps `dilation` pixels apart
    geometry: ConvLayer
    map: str  # the padded (C, H, W) map: the windows' buffer, or what they gather from
    map_size: tuple[int, int]  # its (H, W)


# finds the convolution an instruction computes: (program, its index, weights) -> it or None
FindConv = Callable[[LoweredProgram, int, dict[str, Array]], GroupedConv | None]


def fuse_accel_depthwise(lowered: LoweredProgram, weights: dict[str, Array],
                         accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every depthwise convolution and its epilogue as a grouped
    accelerator layer (a new program)."""
    return fuse_found_convs(lowered, weights, accel, _depthwise)


def fuse_found_convs(lowered: LoweredProgram, weights: dict[str, Array], accel: AccelConfig,
                     find: FindConv) -> LoweredProgram:
    """`lowered` with every convolution `find` recognises and its epilogue as a grouped
    accelerator layer (a new program): the depthwise and the grouped passes."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        found = find(result, index, weights)
        if found is not None and rewrite_grouped(result, found, weights, accel):
            continue  # the same index now holds the layer's input copy
        index += 1
    drop_dead_code(result)
    return result


def _depthwise(lowered: LoweredProgram, index: int, weights: dict[str, Array]
               ) -> GroupedConv | None:
    dot = lowered.instructions[index]
    if not (isinstance(dot, Dot) and dot.reduce_rank == 2 and len(dot.members) == 2):
        return None
    shape = dot.dst.shape
    if lowered.buffer_of(dot.dst).dtype != "i32" or not lowered.is_whole(dot.dst) or \
            len(shape) != 4 or shape[0] != 1:
        return None
    _, channels, out_h, out_w = shape
    for (windows, filters), (name, order) in (
            (pair, found) for pair in (dot.members, dot.members[::-1])
            for found in gathered_maps(lowered, pair[0], index)):
        source = lowered.buffers[name]
        values = evaluate_buffer(lowered, filters.buffer, weights, index)
        kernel = windows.shape[-1]
        if values is None or source.dtype != "i8" or \
                windows.shape != (*shape, kernel, kernel) or len(source.shape) < 2:
            continue
        height, width = source.shape[-2:]
        if source.elements != channels * height * width:
            continue
        taps = view_array(filters, values).reshape(channels, out_h * out_w, kernel * kernel)
        if np.any(taps != taps[:, :1]):
            continue  # a filter that changes across the pixels
        whole = np.arange(source.elements).reshape(channels, height, width)
        for stride, dilation in itertools.product(range(1, kernel + 1), range(1, height)):
            geometry = ConvLayer("", height, width, channels, channels, kernel, stride,
                                 groups=channels, dilation=(dilation, dilation))
            span = geometry.span_hw[0]
            if geometry.out_size != (out_h, out_w):  # the map reaches past the windows
                # (the importer pads a dilated map d − 1 further than its taps read)
                geometry = replace(geometry, height=(out_h - 1) * stride + span,
                                   width=(out_w - 1) * stride + span)
            if span <= min(geometry.height, geometry.width) and \
                    geometry.height <= height and geometry.width <= width and np.array_equal(
                        order, map_windows(whole[:, :geometry.height, :geometry.width],
                                           kernel, stride, dilation)):
                own = taps[:, 0]  # (C, k·k): each channel's filter
                dense = np.zeros((kernel, kernel, channels, channels), np.int64)
                dense[:, :, np.arange(channels), np.arange(channels)] = \
                    own.reshape(channels, kernel, kernel).transpose(1, 2, 0)
                return GroupedConv(index, windows, own, dense, geometry, name, (height, width))
    return None


def gathered_maps(lowered: LoweredProgram, windows: View, before: int
                  ) -> Iterator[tuple[str, Array]]:
    """(buffer, the element of it each window element reads), for the buffer the windows
    view reads and, back through the copies that gathered it (a dilated window is built
    by windowing a wider span and slicing every d-th tap), each buffer they copy from,
    while the windows read only copied elements."""
    name = windows.buffer
    origin = np.arange(lowered.buffers[name].elements)
    for _ in range(8):
        order = view_array(windows, origin).reshape(-1)
        if np.any(order < 0):
            return  # the windows read a fill here: no map before it
        yield name, order
        writers = lowered.writers().get(name, [])
        copies = [lowered.instructions[i] for i in writers]
        if not writers or max(writers) >= before or \
                lowered.buffers[name].kind != ACTIVATION or \
                not all(isinstance(writer, Copy | Fill) for writer in copies):
            return
        sources = {writer.src.buffer for writer in copies if isinstance(writer, Copy)}
        if len(sources) != 1:
            return
        (source,) = sources
        inner = np.full(lowered.buffers[name].elements, -1, np.int64)
        for writer in copies:
            if isinstance(writer, Copy):
                store_view(writer.dst, inner, view_array(
                    writer.src, np.arange(lowered.buffers[source].elements)))
        origin = np.where(origin >= 0, inner[np.maximum(origin, 0)], -1)
        name, before = source, min(writers)


def rewrite_grouped(lowered: LoweredProgram, found: GroupedConv, weights: dict[str, Array],
                    accel: AccelConfig) -> bool:
    """Replace the Dot and its epilogue chain by the grouped layer and its copies; False
    (nothing changed) when the chain does not fuse or the layer does not fit."""
    geometry = found.geometry
    channels, out_channels = geometry.channels, geometry.out_channels
    pixels = geometry.out_size[0] * geometry.out_size[1]
    dot = lowered.instructions[found.index]
    chain = follow_chain(lowered, found.index, dot.dst, (out_channels, pixels), weights,
                         lowered.readers(), lookup=True)
    # The chain reads the (O, pixels) sums channel by channel (the program's NCHW), or
    # transposed, pixel by pixel (ConvNeXt's permute to NHWC after its depthwise 7×7):
    # then its rows are the layer's own and no copy transposes them.
    nhwc = chain is not None and chain.transposed
    if chain is None or chain.skip is not None or (chain.rows, chain.cols) != (
            (pixels, out_channels) if nhwc else (out_channels, pixels)):
        return False
    bias = np.zeros((chain.rows, chain.cols), np.int64) if chain.bias is None else chain.bias
    layer_bias = bias if nhwc else bias.T  # the layer's rows: pixels × channels
    bias_vector = per_column(layer_bias)
    multiplier_vector = per_column(chain.multiplier if nhwc else chain.multiplier.T)
    if multiplier_vector is None:
        return False
    fills: list[int] = []
    zero_point = 0
    if bias_vector is None:  # the quantizer's corrections for zero padding
        mask = zero_padding_mask(lowered, found.windows.buffer, found.index, fills)
        if mask is None or not fills:
            return False
        taps = found.filters.shape[1]
        padding = view_array(found.windows, mask).reshape(out_channels, pixels, taps)
        padded_weight = np.einsum("opt,ot->po", padding, found.filters)
        solved = zero_point_bias(layer_bias, padded_weight,
                                 lowered.buffer_of(found.windows).dtype)
        if solved is None:
            return False
        bias_vector, zero_point = solved
    name = chain.dst.buffer
    geometry = replace(geometry, name=name)
    epilogue = chain_epilogue(chain)
    try:
        check_fits(accel, geometry, LayerQuant(epilogue, tuple(bias_vector),
                                               tuple(multiplier_vector)))
    except GlensideError:
        return False  # the host keeps it
    for position in fills:  # now the padding is the zero point
        fill = lowered.instructions[position]
        assert isinstance(fill, Fill)
        lowered.instructions[position] = replace(fill, value=zero_point)
    packed = weight_matrix(geometry, accel.cols, found.dense)
    builder = LayerBuilder(lowered)
    height, width = geometry.height, geometry.width
    image = builder.activation(f"{name}_nhwc", (height, width, channels))
    final: View | None = None  # the chain's result, when a copy transposes the rows into it
    if nhwc:  # the layer writes the chain's result itself
        rows = contiguous(chain.dst.buffer, (pixels, out_channels), chain.dst.offset)
    else:
        rows = builder.activation(f"{name}_transposed", (pixels, out_channels))
        final = regroup(chain.dst, (out_channels, pixels))
        assert final is not None
    last = lowered.instructions[chain.indices[-1]]
    layer = AccelLayer(
        last.note, rows, name=name, a=image,
        b=builder.constant(f"{name}_weights", "i8", packed),
        bias=builder.constant(f"{name}_bias", "i32", np.array(bias_vector, np.int64)),
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(multiplier_vector, np.int64)),
        commands=builder.commands_placeholder(name), m=pixels, k=packed.shape[0],
        n=out_channels, pre=chain.pre, post=chain.post, zero_point=chain.zero_point,
        low=chain.low, high=chain.high, image=(height, width, channels),
        kernel=geometry.kernel, stride=geometry.stride, dilation=geometry.dilation,
        groups=geometry.groups, group_cols=accel.cols, table=chain_table(builder, name, chain))
    source = crop_map(contiguous(found.map, (channels, *found.map_size)), height, width)
    replaced = set(chain.indices)
    kept = [instruction for position, instruction in enumerate(lowered.instructions)
            if position not in replaced]
    kept[found.index:found.index] = [
        Copy(f"{dot.note}: the feature map in NHWC for the DMA's im2col", image,
             transpose(source, (1, 2, 0))),
        layer]
    if final is not None:
        kept.insert(found.index + 2, Copy(f"{dot.note}: the accelerator's result, transposed",
                                          final, transpose(rows, (1, 0))))
    lowered.instructions = kept
    return True
