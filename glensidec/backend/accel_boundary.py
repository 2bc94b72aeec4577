"""The program's NCHW input in the layout its layers read, made by the accelerator.

As lowered, a layer that reads the program's input reads a host-built copy of it: the
NCHW image padded (a fill and a copy per padded axis) and copied to NHWC for the DMA's
im2col (ResNet's stem: three copies of the image, 460 k host cycles), or, for a
residual add or a 1×1 convolution, its NHWC rows. This pass (the accelerator, after
`accel_layout`) evaluates element by element what such an operand holds in terms of an
input (`trace_input`: an input element's index, or a fill's value); when it is exactly
the NCHW input in NHWC, padded by p with one value, a layout layer
(`glensidec.hardware.layout`) makes it on the accelerator instead, and the host's fills
and copies become dead and go. Operands that need the same rows share one layout layer;
a convolution whose taps are not packed reads the unpadded rows and pads with the DMA
(as `accel_layout` does for an earlier layer's rows), so a residual block's first
convolution and its skip connection read the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    drop_dead_code,
    layer_geometry,
    layer_quant,
)
from glensidec.backend.accel_pool import PADDING, layer_rows, trace_layer_rows, trace_writers
from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    INPUT,
    AccelLayer,
    ArrayGemm,
    Copy,
    LoweredProgram,
    constant_array,
)
from glensidec.backend.views import View, contiguous, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import CapacityError
from glensidec.hardware.commands import AccelConfig, packs_taps
from glensidec.hardware.layout import (
    NchwLayout,
    NhwcLayout,
    layout_bias,
    layout_group,
    layout_lines,
    layout_weights,
    nchw_channels,
    nchw_group,
    nchw_weights,
)
from glensidec.lang.dtypes import Array

NOTE = "the program's NCHW input in NHWC for the DMA, laid out by the accelerator"


@dataclass(frozen=True)
class _Found:
    """An operand that holds an input in NHWC: `layout` (its NCHW geometry, padding and
    pad value)."""

    input: str
    layout: NhwcLayout
    image: int = 0  # which image of a batched input (N, C, H, W)


#: absorb_input_layouts' `rows_of`: the rows of the layout layer that makes a found operand
_RowsOf = Callable[[_Found], View | None]


def absorb_input_layouts(lowered: LoweredProgram, weights: dict[str, Array],
                         accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every layer operand that is an NCHW input in NHWC (padded) made by a
    layout layer on the accelerator instead of the host (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    made: dict[tuple[str, int, NhwcLayout], View] = {}  # layout layers' rows, by what they hold
    new_layers: list[AccelLayer] = []

    def rows_of(found: _Found) -> View | None:
        key = (found.input, found.image, found.layout)
        if key not in made:
            layer = _layout_layer(result, builder, found, accel)
            if layer is None:
                return None
            new_layers.append(layer)
            made[key] = layer.dst
        return made[key]

    for index, layer in enumerate(result.instructions):
        if isinstance(layer, AccelLayer) and layer.multiplies:
            changed = _absorb(result, index, layer, rows_of, weights, accel)
            if changed is not None:
                result.instructions[index] = changed
    result.instructions[:0] = new_layers  # they read only inputs and constants
    drop_dead_code(result)
    return result


def absorb_result_layouts(lowered: LoweredProgram, weights: dict[str, Array],
                          accel: AccelConfig) -> LoweredProgram:
    """`lowered` (its constants folded) with the program's result, when it is a layer's
    rows copied to NCHW, written by a layout layer, and a dense layer that reads a layer's
    rows through a reordering copy reading them directly, its weights reordered (a new
    program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    _absorb_output_layout(result, builder, accel)
    _read_rows_in_their_order(result, builder, weights)
    _read_rows_unpadded(result, builder, weights)
    _read_rows_of_a_block(result)
    drop_dead_code(result)
    return result


def _read_rows_of_a_block(lowered: LoweredProgram) -> None:
    """A matrix layer whose A is a block of a buffer the host built from an earlier
    layer's rows (a classifier: the pooled vector padded to the array's rows and packed,
    of which the layer reads the first row) reads the rows when the block holds exactly
    them, in order."""
    for index, layer in enumerate(lowered.instructions):
        if not isinstance(layer, AccelLayer) or not layer.multiplies or layer.image or \
                lowered.is_whole(layer.a):
            continue
        traced = trace_layer_rows(lowered, layer.a.buffer, index)
        if traced is None:
            continue
        source = lowered.instructions[traced[0]]
        assert isinstance(source, AccelLayer)
        rows = layer_rows(source)
        elements = layer.m * layer.k
        if lowered.buffers[rows.buffer].elements != elements or \
                not np.array_equal(view_array(layer.a, traced[1]).reshape(-1),
                                   np.arange(elements)):
            continue
        lowered.instructions[index] = replace(layer, a=rows.view((layer.m, layer.k)))


def _read_rows_unpadded(lowered: LoweredProgram, builder: LayerBuilder,
                        weights: dict[str, Array]) -> None:
    """A matrix layer (a 1×1 convolution) whose A is an earlier layer's (M, C) rows with
    their K padded by zeros to the array (MobileNet-v2's 24 channels to 32: a fill and two
    copies per inference) reads the rows themselves, K = C: the padding's zeros multiply
    nothing, so its weights' first C rows give the same sums."""
    for index, layer in enumerate(lowered.instructions):
        if not isinstance(layer, AccelLayer) or not layer.multiplies or layer.image or \
                not lowered.is_whole(layer.a) or \
                lowered.buffer_of(layer.b).kind != CONSTANT:
            continue
        traced = trace_layer_rows(lowered, layer.a.buffer, index)
        if traced is None:
            continue
        source = lowered.instructions[traced[0]]
        assert isinstance(source, AccelLayer)
        rows = layer_rows(source)
        channels, (_, origin, fill) = rows.n, traced
        if rows.m != layer.m or channels >= layer.k or \
                lowered.buffers[rows.buffer].elements != rows.m * channels:
            continue
        expected = np.full((layer.m, layer.k), PADDING, np.int64)
        expected[:, :channels] = np.arange(layer.m * channels).reshape(layer.m, channels)
        if not np.array_equal(origin, expected.reshape(-1)) or np.any(fill[origin == PADDING]):
            continue
        values = view_array(layer.b, constant_array(lowered.buffer_of(layer.b),
                                                    weights).reshape(-1))
        lowered.instructions[index] = replace(
            layer, a=rows.view((layer.m, channels)),
            b=builder.constant(f"{layer.name}_unpadded_weights", "i8", values[:channels]),
            k=channels)


def _absorb_output_layout(lowered: LoweredProgram, builder: LayerBuilder,
                          accel: AccelConfig) -> None:
    """The program's result, when it is a layer's (P, C) rows copied to NCHW, written by a
    layout layer (NchwLayout) instead of the host's copy; a batch's result, one image's
    rows copied to each block of it (`opt.batch`), by one layout layer per image."""
    output = lowered.buffers[lowered.output]
    if output.dtype != "i8":
        return
    _copy_parts_into_the_output(lowered)
    writers = lowered.writers().get(lowered.output, [])
    copies = [index for index in writers if isinstance(lowered.instructions[index], Copy)]
    if len(copies) != len(writers):
        return
    dropped = 0  # (a copy a layer makes unneeded goes: the later ones move up)
    for index in copies:
        dropped += _absorb_output_copy(lowered, builder, accel, index - dropped)


def _copy_parts_into_the_output(lowered: LoweredProgram) -> None:
    """A copy into the program's result of a buffer that only copies write and only it
    reads (a batch's concatenation of three or more images' results, nested: the first
    images' concatenated, then copied in) becomes those copies, each into its run of the
    result, so that each image's part is a copy from its layer's rows."""
    for index, copy in enumerate(lowered.instructions):
        if not (isinstance(copy, Copy) and copy.dst.buffer == lowered.output and
                copy.dst.is_row_major() and lowered.is_whole(copy.src)):
            continue
        source = lowered.buffer_of(copy.src)
        parts = lowered.writers().get(source.name, [])
        if source.kind != ACTIVATION or lowered.readers().get(source.name) != [index] or \
                not parts or not all(isinstance(lowered.instructions[part], Copy)
                                     for part in parts):
            continue
        if any(parts[0] < reader < index for reader in
               lowered.readers().get(lowered.output, [])):
            continue  # (the result read in between: its run written earlier would show)
        for part in parts:  # the buffer's element e is the result's copy.dst.offset + e
            written = lowered.instructions[part]
            lowered.instructions[part] = replace(written, dst=View(
                lowered.output, copy.dst.offset + written.dst.offset, written.dst.dims))
        del lowered.instructions[index]
        _copy_parts_into_the_output(lowered)  # (the indices moved: start again)
        return


def _absorb_output_copy(lowered: LoweredProgram, builder: LayerBuilder, accel: AccelConfig,
                        index: int) -> bool:
    """`_absorb_output_layout` for the copy at `index` into the program's result: the
    whole result, or a row-major block of it (one image of a batch). True when the copy
    was dropped (the layer writes the result itself)."""
    copy = lowered.instructions[index]
    assert isinstance(copy, Copy)
    if not copy.dst.is_row_major():
        return False
    traced = trace_layer_rows(lowered, copy.src.buffer, index)
    if traced is None:
        return False
    source = lowered.instructions[traced[0]]
    assert isinstance(source, AccelLayer)
    rows = layer_rows(source)
    pixels, channels = rows.m, rows.n
    origin = view_array(copy.src, traced[1]).reshape(-1)
    expected = np.arange(pixels * channels).reshape(pixels, channels).T.reshape(-1)
    if math.prod(copy.dst.shape) != pixels * channels or \
            not np.array_equal(origin, expected) or \
            lowered.buffers[rows.buffer].elements != pixels * channels:
        return False
    if pixels == 1 or channels == 1:  # the same bytes: the layer writes the result itself
        if lowered.readers().get(source.dst.buffer) == [index] and \
                lowered.is_whole(source.dst) and not source.output_pitch:
            lowered.instructions[traced[0]] = replace(
                source, dst=contiguous(lowered.output, source.dst.shape, copy.dst.offset))
            del lowered.instructions[index]
            return True
        return False
    layout = NchwLayout(pixels, channels)
    try:
        nchw_channels(layout, accel)
    except CapacityError:
        return False
    lowered.instructions[index] = nchw_layer(
        builder, "the result in NCHW, laid out by the accelerator",
        contiguous(lowered.output, (channels, pixels), copy.dst.offset),
        rows.view((pixels * channels,)), layout, accel)
    return False


def nchw_layer(builder: LayerBuilder, note: str, dst: View, rows: View, layout: NchwLayout,
               accel: AccelConfig) -> AccelLayer:
    """The layout layer that writes `rows` (P × C, row-major) as the (C, P) map `dst`
    (a whole contiguous buffer): the rows' transpose."""
    group = nchw_group(layout, accel)
    pixels, channels = layout.pixels, layout.channels
    name = builder.name(f"{dst.buffer}_nchw")
    number = 1
    while f"{name}_weights" in builder.lowered.buffers:  # a batch's images: one layer each
        name, number = builder.name(f"{dst.buffer}_nchw_{number}"), number + 1
    return AccelLayer(
        note, contiguous(dst.buffer, (channels * pixels // group, group), dst.offset), name,
        rows, builder.constant(f"{name}_weights", "i8", nchw_weights(layout, accel)),
        builder.constant(f"{name}_bias", "i32", np.zeros(group, np.int64)),
        builder.constant(f"{name}_multiplier", "i32", np.ones(group, np.int64)),
        builder.commands_placeholder(name), m=channels * pixels // group,
        k=group * accel.rows, n=group, pre=0, post=0, zero_point=0, low=-128, high=127,
        layout=layout)


def _read_rows_in_their_order(lowered: LoweredProgram, builder: LayerBuilder,
                              weights: dict[str, Array]) -> None:
    """An array call of one row (a dense layer) whose A is a layer's rows in another order
    (small_cnn's pooled NHWC rows copied to the NCHW order its flatten reads) reads the
    rows as they are, its constant B's rows permuted to match at compile time."""
    for index, gemm in enumerate(lowered.instructions):
        # an array call, or a dense layer already on the accelerator (its epilogue fused)
        if not isinstance(gemm, ArrayGemm | AccelLayer) or (isinstance(gemm, AccelLayer) and (
                not gemm.multiplies or gemm.image)):
            continue
        if gemm.m != 1 or not lowered.is_whole(gemm.a):
            continue
        b_buffer = lowered.buffer_of(gemm.b)
        if b_buffer.kind != CONSTANT or lowered.buffer_of(gemm.a).kind != ACTIVATION:
            continue
        traced = trace_layer_rows(lowered, gemm.a.buffer, index)
        if traced is None:
            continue
        source = lowered.instructions[traced[0]]
        assert isinstance(source, AccelLayer)
        rows = layer_rows(source)
        origin = traced[1]
        if rows.m * rows.n != gemm.k or \
                not np.array_equal(np.sort(origin), np.arange(gemm.k)):
            continue  # padding, or not each row element once
        values = view_array(gemm.b, constant_array(b_buffer, weights).reshape(-1))
        if values.shape[0] != gemm.k:
            continue
        permuted = np.zeros_like(values)
        permuted[origin] = values  # B's row k now meets the row element A's k held
        lowered.instructions[index] = replace(
            gemm, a=rows.view((1, gemm.k)),
            b=builder.constant(f"{gemm.b.buffer}_row_order", b_buffer.dtype, permuted))


def _absorb(lowered: LoweredProgram, index: int, layer: AccelLayer,
            rows_of: _RowsOf, weights: dict[str, Array], accel: AccelConfig
            ) -> AccelLayer | None:
    """The layer at `index` reading layout layers' rows for its input and its residual,
    where they are an input in NHWC; None when neither is."""
    changed = layer
    if layer.residual is not None:
        found = _operand(lowered, layer.residual, index, (layer.m, 1, layer.n), 0)
        rows = None if found is None else rows_of(found)
        if rows is not None:
            changed = replace(changed, residual=contiguous(rows.buffer, (layer.m, layer.n)))
    if layer.image and not layer.padding:
        height, width, channels = layer.image
        found = _operand(lowered, layer.a, index, (height, width, channels), None)
        if found is not None:
            unpadded = _dma_padded(lowered, layer, found, rows_of, weights, accel)
            if unpadded is not None:
                return replace(unpadded, residual=changed.residual)
            rows = rows_of(found)
            if rows is not None:
                changed = replace(changed, a=contiguous(rows.buffer, layer.a.shape))
    elif not layer.image:
        found = _operand(lowered, layer.a, index, (layer.m, 1, layer.k), 0)
        rows = None if found is None else rows_of(found)
        if rows is not None:
            changed = replace(changed, a=contiguous(rows.buffer, (layer.m, layer.k)))
    return None if changed is layer else changed


def _dma_padded(lowered: LoweredProgram, layer: AccelLayer, found: _Found, rows_of: _RowsOf,
                weights: dict[str, Array], accel: AccelConfig) -> AccelLayer | None:
    """A convolution whose taps are not packed reading the input's unpadded rows, the DMA
    padding them (so its rows can serve a skip connection too); None when it cannot."""
    layout = found.layout
    geometry = replace(layer_geometry(layer), height=layout.height, width=layout.width,
                       channels=layout.channels, padding=layout.padding, padding_w=None)
    if not layout.padding or packs_taps(geometry, accel.rows):
        return None  # already unpadded, or rows that straddle the border need the padding
    try:
        check_fits(accel, geometry, replace(layer_quant(lowered, layer, weights),
                                            input_zero_point=layout.pad_value))
    except GlensideError:
        return None
    rows = rows_of(replace(found, layout=replace(layout, padding=0, pad_value=0)))
    if rows is None:
        return None
    pixels = layout.height * layout.width
    return replace(layer, a=contiguous(rows.buffer, (pixels, layout.channels)),
                   image=(layout.height, layout.width, layout.channels),
                   padding=layout.padding, pad_value=layout.pad_value)


def _operand(lowered: LoweredProgram, view: View, index: int, nhwc: tuple[int, int, int],
             padding: int | None) -> _Found | None:
    """What the operand `view` of the layer at `index` holds when it is exactly an NCHW
    input in NHWC (`nhwc`: its padded height, width and channels), padded with one value
    (by `padding`, or by whatever p fits when None), and no one else reads it."""
    buffer = lowered.buffer_of(view)
    height, width, channels = nhwc
    if view.offset or buffer.elements != height * width * channels or buffer.dtype != "i8" \
            or lowered.readers().get(view.buffer) != [index]:
        return None
    traced = trace_input(lowered, view.buffer, index)
    if traced is None:
        return None
    name, origin, fill = traced
    shape = lowered.buffers[name].shape
    if len(shape) != 4 or shape[1] != channels:
        return None
    # Of a batch (N, C, H, W), one image: its elements are those of image 0 moved by
    # C·H·W each (the per-image copies of `opt.batch`).
    image_elements = channels * shape[2] * shape[3]
    held = origin[origin != PADDING]
    image = int(held.min()) // image_elements if held.size else 0
    origin = np.where(origin == PADDING, PADDING, origin - image * image_elements)
    rows, cols = shape[2], shape[3]
    if padding is None:  # an image: its height and width tell the padding
        pad = (height - rows) // 2
        if pad < 0 or (rows + 2 * pad, cols + 2 * pad) != (height, width):
            return None
    elif (rows + 2 * padding) * (cols + 2 * padding) != height * width:
        return None
    else:
        pad = padding
    expected = np.pad(np.arange(channels * rows * cols).reshape(channels, rows, cols),
                      ((0, 0), (pad, pad), (pad, pad)), constant_values=PADDING)
    if not np.array_equal(origin, expected.transpose(1, 2, 0).reshape(-1)):
        return None
    values = np.unique(fill[origin == PADDING])
    if values.size > 1:
        return None
    return _Found(name, NhwcLayout(channels, rows, cols, pad,
                                   int(values[0]) if values.size else 0), image)


def trace_input(lowered: LoweredProgram, name: str, before: int, depth: int = 0
                ) -> tuple[str, np.ndarray, np.ndarray] | None:
    """(input, origin, fill) for buffer `name` as it is before instruction `before`, when
    only fills and copies, back to one int8 program input, write it: per element (flat)
    `origin` is the index of the input element it holds, or PADDING where a fill wrote
    it, and `fill` the value written there; else None (as accel_pool.trace_layer_rows
    does for a layer's rows)."""
    buffer = lowered.buffers[name]
    if buffer.kind == INPUT:
        return (name, np.arange(buffer.elements), np.zeros(buffer.elements, np.int64)) \
            if buffer.dtype == "i8" else None
    writers = lowered.writers().get(name, [])
    if buffer.kind != ACTIVATION or not writers or max(writers) >= before or depth > 8:
        return None
    return trace_writers(lowered, name, writers, depth, trace_input)


def _layout_layer(lowered: LoweredProgram, builder: LayerBuilder, found: _Found,
                  accel: AccelConfig) -> AccelLayer | None:
    """The layout layer that writes `found`'s NHWC map from its input; None when it does
    not fit the accelerator (more channels than columns, a line too long)."""
    layout = found.layout
    group = layout_group(layout, accel)
    try:
        layout_lines(layout, accel)
    except CapacityError:
        return None
    height, width = layout.padded
    m, n = height * width // group, group * layout.channels
    name = builder.name(f"{found.input}_nhwc")
    dst = builder.activation(name, (m, n))
    return AccelLayer(
        NOTE, dst, name, contiguous(found.input, (1, *lowered.buffers[found.input].shape[1:]),
                                    found.image * layout.channels * layout.height * layout.width),
        builder.constant(f"{name}_weights", "i8", layout_weights(layout, accel)),
        builder.constant(f"{name}_bias", "i32", layout_bias(layout, accel)),
        builder.constant(f"{name}_multiplier", "i32", np.ones(n, np.int64)),
        builder.commands_placeholder(name), m=m, k=layout.channels * accel.rows, n=n,
        pre=0, post=0, zero_point=0, low=-128, high=127, layout=layout)
