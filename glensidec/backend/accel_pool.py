"""Max-pools on the accelerator: a reduce-max over windows of a layer's result.

ResNet's stem max-pools its first convolution's result: the lowered program transposes
the layer's (M, N) rows into NCHW, pads the map with the int8 minimum (fills and copies)
and reduces 3×3 windows at stride 2 (`Reduce` "reduce-max" over a windowed view). This
pass (`compile --accel`) recognises that shape — by evaluating, element by element, what
the padded map holds in terms of the layer's rows (a row index, or padding) — and runs
the pool on ws_accel instead (`commands.pool_program`): the DMA gathers each window's
taps from the layer's NHWC rows with its im2col addressing, padding reading −128, and
pooling stores take their max. The pool becomes an `AccelLayer` with `pool` set (no
weights; its epilogue the identity) writing (M, C) rows, and a copy transposes them into
the reduce's NCHW destination, as for any layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    drop_dead_code,
    scalar_value,
)
from glensidec.backend.accel_residual import FormValue, Linear, residual_form
from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    Copy,
    Fill,
    Fused,
    LoweredProgram,
    Map,
    Reduce,
    Step,
)
from glensidec.backend.views import (
    View,
    contiguous,
    fill_view,
    regroup,
    store_view,
    transpose,
    view_array,
)
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.commands import AccelConfig, LayerQuant
from glensidec.lang.dtypes import Array, integer_range

#: what trace_writers follows a buffer back to: a layer's index, or a program input's name
Source = TypeVar("Source", int, str)

#: A padding element in `trace_layer_rows`'s evaluation (rows hold their index).
PADDING = -1


@dataclass(frozen=True)
class _Pool:
    """A max-pool over an accelerator layer's result."""

    reduce_index: int
    layer_index: int
    geometry: ConvLayer  # height, width, channels of the map; kernel, stride, padding
    pad_value: int = -128  # what the padding holds (a sum pool's: its one fill value)


def fuse_accel_pools(lowered: LoweredProgram, weights: dict[str, Array],
                     accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every max-pool over an accelerator layer's result, and every
    average pool (a window sum requantized), on the accelerator (a new program)."""
    result = lowered.copy()
    for index, instruction in enumerate(result.instructions):
        if isinstance(instruction, Reduce) and instruction.op == "reduce-max":
            pool = _find(result, index)
            if pool is not None:
                _rewrite(result, pool, accel)
    index = 0
    while index < len(result.instructions):
        instruction = result.instructions[index]
        if isinstance(instruction, Reduce) and instruction.op == "reduce-sum":
            pool = _find(result, index, summed=True)
            scaled = None if pool is None else _scaled_sum(result, index, weights)
            if pool is not None and scaled is not None and \
                    _rewrite_sum(result, pool, scaled, accel):
                continue  # the same index now holds the pooling layer
        index += 1
    _fold_requantizes(result, weights)
    drop_dead_code(result)
    return result


def _fold_requantizes(lowered: LoweredProgram, weights: dict[str, Array]) -> None:
    """A max-pool whose result only a requantize reads (Inception's pool branch of a
    concatenation, requantized to the concatenation's scale) takes the requantize into its
    epilogue: the pooling stores send each maximum through it, so the transposing copy
    writes the requantize's destination and the host loop goes."""
    builder = LayerBuilder(lowered)
    folded: set[int] = set()  # the requantizing loops, gone
    for index, pool in enumerate(lowered.instructions):
        if not isinstance(pool, AccelLayer) or not pool.pool or pool.pool_sum or \
                pool.output_pitch or (pool.pre, pool.post, pool.zero_point) != (0, 0, 0):
            continue
        readers = lowered.readers().get(pool.dst.buffer, [])
        copy = lowered.instructions[readers[0]] if len(readers) == 1 else None
        if not isinstance(copy, Copy) or copy.src.buffer != pool.dst.buffer or \
                lowered.writers().get(copy.dst.buffer) != [readers[0]]:
            continue
        scaled = _scaled_sum(lowered, readers[0], weights)
        if scaled is None:
            continue
        loop = lowered.instructions[scaled.loop_index]
        final = regroup(loop.dst, copy.dst.shape)
        if final is None:
            continue
        epilogue = scaled.epilogue
        bias = builder.constant(f"{pool.name}_requantized_bias", "i32",
                                np.full(pool.n, scaled.bias, np.int64))
        lowered.instructions[index] = replace(
            pool, b=bias, bias=bias,  # (a pool has no weights: b is a placeholder)
            multiplier=builder.constant(f"{pool.name}_requantized_multiplier", "i32",
                                        np.full(pool.n, scaled.multiplier, np.int64)),
            pre=epilogue.pre, post=epilogue.post, zero_point=epilogue.zero_point,
            low=epilogue.low, high=epilogue.high)
        lowered.instructions[readers[0]] = Copy(f"{copy.note}, requantized by the pool",
                                                final, copy.src)
        folded.add(scaled.loop_index)
    lowered.instructions = [instruction for position, instruction
                            in enumerate(lowered.instructions) if position not in folded]


def trace_layer_rows(lowered: LoweredProgram, name: str, before: int, depth: int = 0
                     ) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(layer index, origin, fill) for buffer `name` as it is before instruction `before`,
    when only fills and copies, back to one accelerator layer's result, write it: per
    element (flat) `origin` is the index of the layer's result element it holds, or
    PADDING where a fill wrote it, and `fill` the value written there (the int8 minimum
    for a minimum fill); else None."""
    step = _rows_step(lowered, name, before, depth)
    if step is None:
        return None
    writers, themselves = step
    if themselves:
        elements = lowered.buffers[name].elements
        return max(writers), np.arange(elements), np.zeros(elements, np.int64)
    return trace_writers(lowered, name, writers, depth, trace_layer_rows)


def trace_layer_source(lowered: LoweredProgram, name: str, before: int, depth: int = 0
                       ) -> int | None:
    """The layer index `trace_layer_rows` gives for buffer `name` before instruction
    `before` (None where it gives None), without its element maps: a caller checks what
    the layer alone tells first (most traces that ResNet-50's channel gathers ask for
    follow rows of another pixel count, and the maps are as large as the buffers)."""
    step = _rows_step(lowered, name, before, depth)
    if step is None:
        return None
    writers, themselves = step
    if themselves:
        return max(writers)
    return writers_source(lowered, writers, depth, trace_layer_source)


def _rows_step(lowered: LoweredProgram, name: str, before: int, depth: int
               ) -> tuple[list[int], bool] | None:
    """One step of `trace_layer_rows` back from buffer `name`: (its writers, whether they
    are a layer's rows themselves, else fills and copies to trace further), or None."""
    writers = lowered.writers().get(name, [])
    if not writers or max(writers) >= before or depth > 8:
        return None
    only = lowered.instructions[writers[0]] if len(writers) == 1 else None
    if isinstance(only, AccelLayer) and only.row_order is not None:
        return None  # its rows are not its result's order
    if isinstance(only, AccelLayer) or joined_rows(lowered, name, writers):
        return writers, True
    if lowered.buffers[name].kind != ACTIVATION:
        return None
    return writers, False


@dataclass(frozen=True)
class LayerRows:
    """The (M, N) rows, row-major from `offset` of `buffer`, that a layer's result is
    part of: its own rows, or a concatenation's wider rows of which it writes a block of
    columns (`output_pitch`)."""

    buffer: str
    offset: int
    m: int
    n: int

    def view(self, shape: tuple[int, ...]) -> View:
        return contiguous(self.buffer, shape, self.offset)


def layer_rows(layer: AccelLayer) -> LayerRows:
    """The rows `layer`'s result is part of (the index trace_layer_rows gives)."""
    if layer.output_pitch:
        return LayerRows(layer.dst.buffer, 0, layer.m, layer.output_pitch)
    return LayerRows(layer.dst.buffer, layer.dst.offset, layer.m, layer.n)


def joined_rows(lowered: LoweredProgram, name: str, writers: list[int]) -> bool:
    """Do accelerator layers alone write buffer `name`, each a block of columns of its
    rows, together every element once (a concatenation written in place)?"""
    buffer = lowered.buffers[name]
    layers = [lowered.instructions[index] for index in writers]
    if not all(isinstance(layer, AccelLayer) and layer.output_pitch and
               layer.output_pitch * layer.m == buffer.elements for layer in layers):
        return False  # (before counting the elements: most buffers asked about fail here)
    written = np.zeros(buffer.elements, np.int64)
    for layer in layers:
        assert isinstance(layer, AccelLayer)
        # (a count per element: np.add.at's unbuffered adds took most of this)
        written += np.bincount(view_array(layer.dst, np.arange(buffer.elements)).reshape(-1),
                               minlength=buffer.elements)
    return bool(np.all(written == 1))


def trace_writers(lowered: LoweredProgram, name: str, writers: list[int], depth: int,
                  trace: Callable[[LoweredProgram, str, int, int],
                                  tuple[Source, np.ndarray, np.ndarray] | None]
                  ) -> tuple[Source, np.ndarray, np.ndarray] | None:
    """(source, origin, fill) of buffer `name` when its `writers` (in program order) are
    fills and copies of what `trace` follows back to one source (trace_layer_rows: a
    layer's rows; the input boundary's trace_input: a program input); else None. `trace`
    depends on its `before` only by refusing a buffer written at or after it."""
    # The sources first, the element maps only for a trace that succeeds: most traces a
    # pass asks for fail, and the maps are as large as the buffers (a swin_t's passes
    # spent a third of their time filling maps of traces that then failed).
    instructions = [lowered.instructions[index] for index in writers]
    if not all(isinstance(writer, Fill | Copy) for writer in instructions):
        return None
    # per buffer copied from, its trace before its first copy here: the same before any
    # later one (a window partition copies one buffer many times; `writers_source`
    # follows the same ones)
    traced: dict[str, tuple[Source, np.ndarray, np.ndarray]] = {}
    source: Source | None = None
    for index, writer in zip(writers, instructions, strict=True):
        if isinstance(writer, Copy) and writer.src.buffer not in traced:
            found = trace(lowered, writer.src.buffer, index, depth + 1)
            if found is None or (source is not None and found[0] != source):
                return None
            source, traced[writer.src.buffer] = found[0], found
    if source is None:
        return None
    buffer = lowered.buffers[name]
    # (the maps of the buffers copied: a fill map of zeros alone, the common case, is not
    # copied into this one's, which starts as zeros)
    zero_fills = {src: not found[2].any() for src, found in traced.items()}
    only = instructions[0]
    if len(instructions) == 1 and isinstance(only, Copy) and only.dst.offset == 0 and \
            math.prod(only.dst.shape) == buffer.elements and only.dst.is_row_major():
        # one copy of the whole buffer in order: its maps are the source's, re-viewed
        _, origins, fills = traced[only.src.buffer]
        return source, view_array(only.src, origins).reshape(-1).astype(np.int64, copy=False), \
            np.zeros(buffer.elements, dtype=np.int64) if zero_fills[only.src.buffer] else \
            view_array(only.src, fills).reshape(-1).astype(np.int64, copy=False)
    origin = np.full(buffer.elements, PADDING - 1, dtype=np.int64)  # unwritten: not padding
    fill = np.zeros(buffer.elements, dtype=np.int64)
    filled = False  # whether `fill` holds anything but zeros yet
    for writer in instructions:
        if isinstance(writer, Fill):
            value = integer_range(buffer.dtype)[0] if writer.minimum else writer.value
            fill_view(writer.dst, origin, PADDING)
            if value or filled:
                fill_view(writer.dst, fill, value)
                filled = filled or value != 0
        else:
            assert isinstance(writer, Copy)
            _, origins, fills = traced[writer.src.buffer]
            store_view(writer.dst, origin, view_array(writer.src, origins))
            if filled or not zero_fills[writer.src.buffer]:
                store_view(writer.dst, fill, view_array(writer.src, fills))
                filled = filled or not zero_fills[writer.src.buffer]
    return source, origin, fill


def writers_source(lowered: LoweredProgram, writers: list[int], depth: int,
                   trace: Callable[[LoweredProgram, str, int, int], Source | None]
                   ) -> Source | None:
    """The source `trace_writers` gives for these `writers` (None where it gives None),
    `trace` giving the sources alone (`trace_layer_source`): no element maps."""
    instructions = [lowered.instructions[index] for index in writers]
    if not all(isinstance(writer, Fill | Copy) for writer in instructions):
        return None
    followed: set[str] = set()
    source: Source | None = None
    for index, writer in zip(writers, instructions, strict=True):
        if isinstance(writer, Copy) and writer.src.buffer not in followed:
            found = trace(lowered, writer.src.buffer, index, depth + 1)
            if found is None or (source is not None and found != source):
                return None
            source = found
            followed.add(writer.src.buffer)
    return source


def padded_rows(height: int, width: int, channels: int, padding: int, end: int = 0,
                padding_w: int | None = None) -> np.ndarray:
    """What a (C, H + 2p + e, W + 2p + e) map holds when it is a layer's (H·W, C) rows in
    NCHW, padded by p (and by e more below and right; by `padding_w` along x when given):
    the rows' element indices, PADDING on the border (flat)."""
    rows = np.arange(height * width * channels).reshape(height, width, channels)
    pad_w = padding if padding_w is None else padding_w
    padded = np.pad(rows.transpose(2, 0, 1),
                    ((0, 0), (padding, padding + end), (pad_w, pad_w + end)),
                    constant_values=PADDING)
    return padded.reshape(-1)


def _find(lowered: LoweredProgram, index: int, summed: bool = False) -> _Pool | None:
    """The pool the reduce at `index` computes over a layer's rows (`summed`: a
    reduce-sum, whose padding must be one value, which the DMA reads it as; a (1, C)
    result is a global pool)."""
    reduce = lowered.instructions[index]
    assert isinstance(reduce, Reduce)
    source = lowered.buffer_of(reduce.src)
    if reduce.reduce_rank != 2 or source.dtype != "i8" or not lowered.is_whole(reduce.dst):
        return None
    # (what the layer alone rules out first: the element maps only for a pool it may be;
    # fuse_accel_pools runs three times, over the same reduces)
    layer_index = trace_layer_source(lowered, reduce.src.buffer, index)
    if layer_index is None:
        return None
    layer = lowered.instructions[layer_index]
    assert isinstance(layer, AccelLayer)
    rows = layer_rows(layer)
    shape = source.shape[1:] if len(source.shape) == 4 and source.shape[0] == 1 \
        else source.shape
    out_shape = reduce.dst.shape[1:] if len(reduce.dst.shape) == 4 else reduce.dst.shape
    if len(reduce.dst.shape) == 2 and reduce.dst.shape[0] == 1:  # a global pool: (1, C)
        out_shape = (reduce.dst.shape[1], 1, 1)
    if len(shape) != 3 or len(out_shape) != 3 or reduce.src.shape[-2] != reduce.src.shape[-1]:
        return None
    channels, padded_h, padded_w = shape
    kernel = reduce.src.shape[-1]
    # padding p on every side, and a ceil-mode pool's extra padding below and right
    paddings = [(p, e) for p in range(kernel) for e in range(kernel)
                if (padded_h - 2 * p - e) * (padded_w - 2 * p - e) == rows.m and
                padded_h - 2 * p - e >= 1 and padded_w - 2 * p - e >= 1]
    if channels != rows.n or not paddings:
        return None
    found = trace_layer_rows(lowered, reduce.src.buffer, index)
    assert found is not None and found[0] == layer_index
    _, padded, fill = found
    pad_values = np.unique(fill[padded == PADDING])
    if (not summed and np.any(pad_values != -128)) or pad_values.size > 1:
        return None  # padding that could win the max, or a sum's of several values
    pad_value = int(pad_values[0]) if pad_values.size else -128
    for padding, end in paddings:
        height, width = padded_h - 2 * padding - end, padded_w - 2 * padding - end
        # the padded map the reduce should see: the layer's rows (index y·W + x, channel c
        # at row·N + c) in NCHW, padded with the minimum
        expected = padded_rows(height, width, channels, padding, end)
        if not np.array_equal(padded, expected):
            continue
        expected = expected.reshape(channels, padded_h, padded_w)
        for stride in range(1, max(kernel, padded_h, padded_w) + 1):  # any the map allows
            geometry = ConvLayer("", height, width, channels, channels, kernel, stride, padding,
                                 pad_end=end)
            if geometry.out_size != tuple(out_shape[1:]):
                continue
            windows = view_array(reduce.src, expected.reshape(-1)).reshape(-1)
            if np.array_equal(windows, map_windows(expected, kernel, stride)):
                return _Pool(index, layer_index, geometry, pad_value)
    return None


def map_windows(padded: np.ndarray, kernel: int, stride: int, dilation: int = 1) -> np.ndarray:
    """The (C, OH, OW, k, k) windows of a padded (C, H, W) map, flat, as the reduce reads
    them (its batch axis, if any, has size 1); taps `dilation` pixels apart."""
    _, height, width = padded.shape
    span = (kernel - 1) * dilation + 1
    out_h, out_w = (height - span) // stride + 1, (width - span) // stride + 1
    taps = np.arange(kernel) * dilation
    y = (np.arange(out_h) * stride)[:, None, None, None] + taps[None, None, :, None]
    x = (np.arange(out_w) * stride)[None, :, None, None] + taps[None, None, None, :]
    gathered: np.ndarray = padded[:, y, x]
    return gathered.reshape(-1)


def _rewrite(lowered: LoweredProgram, pool: _Pool, accel: AccelConfig) -> None:
    reduce = lowered.instructions[pool.reduce_index]
    layer = lowered.instructions[pool.layer_index]
    assert isinstance(reduce, Reduce) and isinstance(layer, AccelLayer)
    geometry = pool.geometry
    name = reduce.dst.buffer
    m = geometry.out_size[0] * geometry.out_size[1]
    n = geometry.channels
    builder = LayerBuilder(lowered)
    try:
        check_fits(accel, geometry, _identity(n), pool=True)
    except GlensideError:
        return  # the windows do not fit the scratchpad: the host pools
    rows = builder.activation(f"{name}_rows", (m, n))
    final = regroup(reduce.dst, (n, m))
    if final is None:
        return
    bias = builder.constant(f"{name}_bias", "i32", np.zeros(n, np.int64))
    pooled = AccelLayer(
        reduce.note, rows, name=name,
        a=layer_rows(layer).view((geometry.height * geometry.width, n)),
        b=bias, bias=bias,
        multiplier=builder.constant(f"{name}_multiplier", "i32", np.ones(n, np.int64)),
        commands=builder.commands_placeholder(name), m=m, k=0, n=n,
        pre=0, post=0, zero_point=0, low=-128, high=127,
        image=(geometry.height, geometry.width, n), kernel=geometry.kernel,
        stride=geometry.stride, pool=True, padding=geometry.padding, pad_end=geometry.pad_end)
    copy = Copy(f"{reduce.note}: the accelerator's pooled rows, transposed", final,
                transpose(rows, (1, 0)))
    lowered.instructions[pool.reduce_index:pool.reduce_index + 1] = [pooled, copy]


@dataclass(frozen=True)
class _ScaledSum:
    """What the host does with a window sum s: clip(requantize(s + bias)), one loop."""

    loop_index: int
    bias: int
    multiplier: int
    epilogue: EpilogueConfig


def _scaled_sum(lowered: LoweredProgram, index: int, weights: dict[str, Array]
                ) -> _ScaledSum | None:
    """The requantize of the sum at `index` (the quantizer's average pool: the sum plus a
    scalar, one requantize with a scalar multiplier, clips), as the loop that alone reads
    it, element for element, does it; None when the loop does anything else."""
    reduce = lowered.instructions[index]
    readers = lowered.readers().get(reduce.dst.buffer, [])
    if len(readers) != 1 or lowered.writers().get(reduce.dst.buffer) != [index]:
        return None
    loop = lowered.instructions[readers[0]]
    if isinstance(loop, Map):  # a requantize alone (nothing to fuse it with)
        leaves: tuple[View, ...] = (loop.src,)
        loop = Fused(loop.note, loop.dst, leaves, (Step(loop.op, (0,), "i8"),))
    if not isinstance(loop, Fused) or lowered.buffer_of(loop.dst).dtype != "i8" or \
            not lowered.is_whole(loop.dst) or len(lowered.writers()[loop.dst.buffer]) != 1:
        return None
    values: list[FormValue] = []
    for leaf, view in enumerate(loop.leaves):
        if view.buffer == reduce.dst.buffer:
            # element for element: both walk the sums row-major from the start (a
            # reshape between them, as the quantizer's (1, C) → (1, C, 1, 1), changes none)
            if not (lowered.is_whole(view) and lowered.is_whole(reduce.dst)
                    and math.prod(view.shape) == math.prod(loop.dst.shape)
                    == math.prod(reduce.dst.shape)):
                return None
            values.append(Linear(((leaf, 1),), 0))
        else:
            scalar = scalar_value(lowered, view, weights, readers[0])
            if scalar is None:
                return None
            values.append(scalar)
    form = residual_form(loop, values)
    if form is None or len(form.linear.coefficients) != 1 or \
            form.linear.coefficients[0][1] != 1:
        return None  # the sum scaled before the requantize: not the epilogue's bias add
    return _ScaledSum(readers[0], form.linear.constant, form.multiplier,
                      EpilogueConfig(form.pre, form.post, form.zero_point, form.low,
                                     form.high))


def _rewrite_sum(lowered: LoweredProgram, pool: _Pool, scaled: _ScaledSum,
                 accel: AccelConfig) -> bool:
    """The reduce and its loop as a sum-pooling layer and the copy of its rows into the
    loop's destination; False (nothing changed) when its windows do not fit."""
    reduce = lowered.instructions[pool.reduce_index]
    layer = lowered.instructions[pool.layer_index]
    loop = lowered.instructions[scaled.loop_index]
    assert isinstance(reduce, Reduce) and isinstance(layer, AccelLayer)
    geometry = pool.geometry
    m = geometry.out_size[0] * geometry.out_size[1]
    n = geometry.channels
    quant = LayerQuant(scaled.epilogue, (scaled.bias,) * n, (scaled.multiplier,) * n,
                       input_zero_point=pool.pad_value)
    try:
        check_fits(accel, geometry, quant, pool=True)
    except GlensideError:
        return False
    final = regroup(loop.dst, (n, m))
    if final is None:
        return False
    name = loop.dst.buffer
    builder = LayerBuilder(lowered)
    rows = builder.activation(f"{name}_rows", (m, n))
    bias = builder.constant(f"{name}_bias", "i32", np.full(n, scaled.bias, np.int64))
    pooled = AccelLayer(
        loop.note, rows, name=name,
        a=layer_rows(layer).view((geometry.height * geometry.width, n)), b=bias,
        bias=bias, multiplier=builder.constant(f"{name}_multiplier", "i32",
                                               np.full(n, scaled.multiplier, np.int64)),
        commands=builder.commands_placeholder(name), m=m, k=0, n=n,
        pre=scaled.epilogue.pre, post=scaled.epilogue.post,
        zero_point=scaled.epilogue.zero_point, low=scaled.epilogue.low,
        high=scaled.epilogue.high, image=(geometry.height, geometry.width, n),
        kernel=geometry.kernel, stride=geometry.stride, pool=True, pool_sum=True,
        padding=geometry.padding, pad_end=geometry.pad_end,
        pad_value=pool.pad_value if geometry.padding or geometry.pad_end else 0)
    copy = Copy(f"{loop.note}: the accelerator's pooled rows, transposed", final,
                transpose(rows, (1, 0)))
    kept = [instruction for position, instruction in enumerate(lowered.instructions)
            if position not in (pool.reduce_index, scaled.loop_index)]
    kept[pool.reduce_index:pool.reduce_index] = [pooled, copy]
    lowered.instructions = kept
    return True


def _identity(channels: int) -> LayerQuant:
    """The epilogue a pool's rows pass through unchanged: bias 0, multiplier 1, no shift."""
    return LayerQuant(EpilogueConfig(), (0,) * channels, (1,) * channels)
