"""Grouped convolutions on the accelerator: one grouped layer, no host slices or joins.

The importer writes a grouped convolution (ResNeXt, RegNet; `group` between 1 and the
channels) as one product (`builders.grouped_conv2d_nchw`): the padded (1, G·Cg, H, W) map
viewed as G groups of Cg channels, each pixel's (Cg, k, k) window of its group paired with
each of the group's Og filters. It lowers to one `Dot` (three reduced axes) over two
broadcast views, which this pass takes as `accel_depthwise` takes a depthwise one: it
evaluates both operands element by element (the windows' indices into the map, the
filters' values), finds the geometry whose windows read exactly those elements, follows
the epilogue chain (bias, requantize, clips, a lookup table) and makes the whole one
grouped `AccelLayer` (`accel_depthwise.rewrite_grouped`).

`commands.conv_program` then runs each N block of COLS output channels over only the input
channels of the groups its columns belong to (`commands.group_blocks`): block-diagonal
packing of several small groups into one weight tile (RegNet-Y's groups of 8: two per
16-column block), one group per block when a group is as wide as the array, and a group
wider than it over several blocks. The exact model prices that below one layer per group
(bench/results/grouped.md); the DMA reads each block's channels as a column window of
the NHWC map's rows, which `accel_layout` turns into a read of the producer's rows.
"""

from __future__ import annotations

import numpy as np

from glensidec.backend.accel_depthwise import GroupedConv, fuse_found_convs, gathered_maps
from glensidec.backend.accel_layers import evaluate_buffer
from glensidec.backend.lower import Dot, LoweredProgram
from glensidec.backend.views import View, view_array
from glensidec.hardware.accel import ConvLayer
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array


def fuse_accel_grouped(lowered: LoweredProgram, weights: dict[str, Array],
                       accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every grouped convolution and its epilogue as a grouped accelerator
    layer (a new program)."""
    return fuse_found_convs(lowered, weights, accel, grouped_conv)


def grouped_conv(lowered: LoweredProgram, index: int, weights: dict[str, Array]
                 ) -> GroupedConv | None:
    """The grouped convolution the instruction at `index` computes, or None: a `Dot` of
    (1, G, Og, H', W') sums over (Cg, k, k) items of an i8 map's windows and filters."""
    dot = lowered.instructions[index]
    if not (isinstance(dot, Dot) and dot.reduce_rank == 3 and len(dot.members) == 2):
        return None
    shape = dot.dst.shape
    if lowered.buffer_of(dot.dst).dtype != "i32" or not lowered.is_whole(dot.dst) or \
            len(shape) != 5 or shape[0] != 1:
        return None
    for windows, filters in (dot.members, dot.members[::-1]):
        # The windows of one group are the same for each of its Og filters (a broadcast:
        # stride 0): their elements are traced for one filter a group, Og times fewer
        # (ResNeXt-50's were 14 M elements a layer, most of its compile)
        one_filter = _without_broadcast(windows, (2,))
        for name, order in gathered_maps(lowered, one_filter or windows, index):
            found = _matching(lowered, index, windows, filters, name, order, weights,
                              one_filter is not None)
            if found is not None:
                return found
    return None


def _without_broadcast(view: View, dims: tuple[int, ...]) -> View | None:
    """`view` with its logical `dims` of size one when they broadcast (stride 0: every
    index reads the same elements), else None. (An eight-dim window view's alone.)"""
    if len(view.dims) != 8 or \
            not all(axis.stride == 0 for dim in dims for axis in view.dims[dim]):
        return None
    return view.with_dims(() if dim in dims else group for dim, group in enumerate(view.dims))


def _matching(lowered: LoweredProgram, index: int, windows: View, filters: View, name: str,
              order: Array, weights: dict[str, Array], one_filter: bool
              ) -> GroupedConv | None:
    """The grouped convolution when `windows` reads the map `name` (`order`: the element
    each window element reads; with `one_filter`, for one filter of each group, the
    windows the same for the others) as one and `filters` is constant over the pixels."""
    dot = lowered.instructions[index]
    assert isinstance(dot, Dot)
    _, groups, out_per, out_h, out_w = dot.dst.shape
    source = lowered.buffers[name]
    per, kernel, kernel_x = windows.shape[-3:]
    channels, out_channels = groups * per, groups * out_per
    if source.dtype != "i8" or kernel != kernel_x or len(source.shape) < 2 or \
            windows.shape != (*dot.dst.shape, per, kernel, kernel):
        return None
    height, width = source.shape[-2:]
    if source.elements != channels * height * width:
        return None
    values = evaluate_buffer(lowered, filters.buffer, weights, index)
    if values is None:
        return None
    # (filters broadcast over the pixels are read at one pixel)
    one_pixel = _without_broadcast(filters, (3, 4))
    taps = view_array(one_pixel or filters, values).reshape(
        out_channels, 1 if one_pixel else out_h * out_w, -1)
    if np.any(taps != taps[:, :1]):
        return None  # a filter that changes across the pixels
    for stride in range(1, kernel + 1):
        geometry = ConvLayer("", height, width, channels, out_channels, kernel, stride,
                             groups=groups)
        if kernel <= min(height, width) and geometry.out_size == (out_h, out_w) and \
                np.array_equal(order, _window_order(groups,
                                                    1 if one_filter else out_per,
                                                    geometry)):
            filters_flat = taps[:, 0]
            return GroupedConv(index, windows, filters_flat,
                               _dense_weights(filters_flat, groups, per, kernel), geometry,
                               name, (height, width))
    return None


def _window_order(groups: int, out_per: int, geometry: ConvLayer) -> Array:
    """The map element each element of a (1, G, `out_per`, H', W', Cg, k, k) window view
    reads (`out_per` filters of each group, the windows the same for each)."""
    out_h, out_w = geometry.out_size
    kernel, stride = geometry.kernel, geometry.stride
    per = geometry.channels // groups
    height, width = geometry.height, geometry.width
    channel = (np.arange(groups)[:, None] * per + np.arange(per)[None, :])  # (G, Cg)
    y = np.arange(out_h)[:, None] * stride + np.arange(kernel)[None, :]  # (H', k)
    x = np.arange(out_w)[:, None] * stride + np.arange(kernel)[None, :]  # (W', k)
    # the element (c, y, x) of the (C, H, W) map, its flat index (each one inside the map:
    # the windows fit it), summed rather than gathered from an index map (that gather was
    # a third of ResNeXt-50's pass)
    gathered = (channel * (height * width))[:, None, None, :, None, None] + \
        (y * width)[None, :, None, None, :, None] + x[None, None, :, None, None, :]
    # (G, H', W', Cg, k, k) → the same for each of a group's Og filters
    spread = np.broadcast_to(gathered[:, None], (groups, out_per, *gathered.shape[1:]))
    return spread.reshape(-1)


def _dense_weights(filters: Array, groups: int, per: int, kernel: int) -> Array:
    """(k, k, C, O) weights from each output channel's (Cg, k, k) taps, zero outside its
    group (what `commands.weight_matrix` packs)."""
    out_channels = filters.shape[0]
    out_per = out_channels // groups
    dense = np.zeros((kernel, kernel, groups * per, out_channels), np.int64)
    taps = filters.reshape(out_channels, per, kernel, kernel).transpose(2, 3, 1, 0)
    for group in range(groups):
        columns = slice(group * out_per, (group + 1) * out_per)
        dense[:, :, group * per:(group + 1) * per, columns] = taps[:, :, :, columns]
    return dense

