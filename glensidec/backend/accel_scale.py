"""Squeeze-excite's channel scale on the accelerator: x·s[c], requantized, in an epilogue.

A squeeze-excite block (MobileNetV3, EfficientNet, RegNetY) scales every channel of a
feature map x by a gate s computed from x itself (average pool, two small dense layers, a
sigmoid): the quantizer writes it as one loop over x, cast(x)·cast(s) in i32 then one
requantize with a scalar multiplier (and clips), s broadcast over the pixels. After
`fuse_elementwise` it is one `Fused` loop, and it is an int8 product of two activations
that the host would do element by element.

x is an accelerator layer's result (its (M, C) rows, transposed into the program's NCHW
tensor), and s a run-time vector of C int8 values. ws_epilogue multiplies each column's
biased sum by a per-column int8 scale before the requantize (`commands.Scale`, the C
runtime's `scale` vector, read at run time like the bias and multiplier vectors), so the
loop becomes a sum pool of 1×1 windows over x's rows — each row through the epilogue, its
column c times s[c], requantized by the loop's multiplier and clipped — writing (M, C)
rows that the next layer reads as they are (`accel_layout`). The loop's multiplier cannot
carry s[c] itself: s[c]·m exceeds the epilogue's 32-bit multiplier, and rounding it would
not be the interpreter's arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    clip_range,
    drop_dead_code,
)
from glensidec.backend.accel_pool import padded_rows, trace_layer_rows
from glensidec.backend.lower import AccelLayer, Copy, Fused, LoweredProgram
from glensidec.backend.views import View, contiguous, regroup, transpose, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.commands import AccelConfig, LayerQuant
from glensidec.lang.dtypes import Array


@dataclass(frozen=True)
class _ScaleLoop:
    """clip(requantize(cast(x)·cast(s))) of a loop's two leaves: the requantize."""

    multiplier: int
    epilogue: EpilogueConfig


@dataclass(frozen=True)
class _Found:
    """A channel scale the accelerator can take: x's layer, its geometry, s's vector."""

    loop: _ScaleLoop
    layer_index: int
    geometry: ConvLayer  # x's (H, W, C), a 1×1 window at stride 1
    scale: View  # the C values of s, contiguous


def fuse_accel_scales(lowered: LoweredProgram, accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every channel scale of an accelerator layer's result done by a
    1×1 sum-pool layer with per-column scales (a new program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        if isinstance(result.instructions[index], Fused):
            found = _find(result, index)
            if found is not None and _rewrite(result, index, found, accel):
                index += 1  # past the layer, to the copy of its rows
        index += 1
    drop_dead_code(result)
    return result


def scale_loop(fused: Fused, leaf_dtypes: list[str]) -> _ScaleLoop | None:
    """The loop as clip(requantize(cast(x)·cast(s))) of its two int8 leaves, or None when
    it computes anything else. (A step's operand i ≥ 0 is leaf i, −k the k-th step's
    result.)"""
    casts: dict[int, int] = {}  # the step that casts, and its leaf
    product: int | None = None
    requantize: tuple[int, int, int, int] | None = None
    low, high = -128, 127
    for position, step in enumerate(fused.steps):
        name, operands = step.name, step.operands
        previous = -position  # the step just before this one, as an operand
        if name == "cast" and step.dtype == "i32" and product is None and \
                len(operands) == 1 and operands[0] >= 0 and leaf_dtypes[operands[0]] == "i8":
            casts[position] = operands[0]
        elif name == "elementwise-mul" and step.dtype == "i32" and product is None and \
                len(operands) == 2 and all(operand < 0 and -operand - 1 in casts
                                           for operand in operands):
            if {casts[-operand - 1] for operand in operands} != {0, 1}:
                return None  # a square, or a leaf twice
            product = position
        elif name == "requantize" and step.dtype == "i8" and product is not None and \
                requantize is None and operands == (-product - 1,):
            assert not isinstance(step.op, str)
            multiplier, pre, post, zero_point = (int(value) for value in step.op.params)
            requantize = multiplier, pre, post, zero_point
        elif name in ("relu", "clip") and requantize is not None and operands == (previous,):
            assert not isinstance(step.op, str)
            bounds = clip_range(step.op)
            low, high = max(low, bounds[0]), min(high, bounds[1])
            if low > high:
                return None
        else:
            return None
    if requantize is None or len(fused.leaves) != 2:
        return None
    multiplier, pre, post, zero_point = requantize
    return _ScaleLoop(multiplier, EpilogueConfig(pre, post, zero_point, low, high))


def _find(lowered: LoweredProgram, index: int) -> _Found | None:
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    dtypes = [lowered.buffer_of(leaf).dtype for leaf in fused.leaves]
    loop = scale_loop(fused, dtypes)
    shape = fused.dst.shape
    if loop is None or len(shape) != 4 or shape[0] != 1 or \
            lowered.buffer_of(fused.dst).dtype != "i8" or not lowered.is_whole(fused.dst) or \
            lowered.writers().get(fused.dst.buffer) != [index]:
        return None
    _, channels, height, width = shape
    for x, s in (fused.leaves, fused.leaves[::-1]):
        if not (lowered.is_whole(x) and x.shape == shape):
            continue
        traced = trace_layer_rows(lowered, x.buffer, index)
        if traced is None:
            continue
        layer_index, origin, _ = traced
        layer = lowered.instructions[layer_index]
        assert isinstance(layer, AccelLayer)
        if (layer.m, layer.n) != (height * width, channels) or \
                not np.array_equal(origin, padded_rows(height, width, channels, 0)):
            continue  # x is not exactly the layer's rows in NCHW
        scale = _channel_vector(lowered, s, channels)
        if scale is None:
            continue
        geometry = ConvLayer(fused.dst.buffer, height, width, channels, channels)
        return _Found(loop, layer_index, geometry, scale)
    return None


def _channel_vector(lowered: LoweredProgram, view: View, channels: int) -> View | None:
    """s as C contiguous values when `view` reads, for every element (1, c, y, x), the
    element c of one run of its buffer (s broadcast over the pixels); else None."""
    buffer = lowered.buffer_of(view)
    read: Array = view_array(view, np.arange(buffer.elements)).reshape(channels, -1)
    first = int(read[0, 0])
    if not np.array_equal(read, np.broadcast_to(first + np.arange(channels)[:, None],
                                                read.shape)):
        return None
    return contiguous(view.buffer, (channels,), first)


def _rewrite(lowered: LoweredProgram, index: int, found: _Found, accel: AccelConfig) -> bool:
    """The loop at `index` becomes the scaling layer and a copy of its rows into the
    loop's NCHW destination; False (nothing changed) when the layer does not fit."""
    fused = lowered.instructions[index]
    source = lowered.instructions[found.layer_index]
    assert isinstance(fused, Fused) and isinstance(source, AccelLayer)
    geometry = found.geometry
    m, n = geometry.height * geometry.width, geometry.channels
    epilogue = found.loop.epilogue
    multipliers = (found.loop.multiplier,) * n
    try:
        check_fits(accel, geometry, LayerQuant(epilogue, (0,) * n, multipliers,
                                               scale=(1,) * n), pool=True)
    except GlensideError:
        return False  # the host scales
    final = regroup(fused.dst, (n, m))
    if final is None:
        return False
    builder = LayerBuilder(lowered)
    name = fused.dst.buffer
    rows = builder.activation(f"{name}_rows", (m, n))
    bias = builder.constant(f"{name}_bias", "i32", np.zeros(n, np.int64))
    scaled = AccelLayer(
        fused.note, rows, name=name,
        a=contiguous(source.dst.buffer, (m, n), source.dst.offset), b=bias, bias=bias,
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(multipliers, np.int64)),
        commands=builder.commands_placeholder(name), m=m, k=0, n=n,
        pre=epilogue.pre, post=epilogue.post, zero_point=epilogue.zero_point,
        low=epilogue.low, high=epilogue.high, image=(geometry.height, geometry.width, n),
        kernel=1, stride=1, pool=True, pool_sum=True, scale=found.scale)
    copy = Copy(f"{fused.note}: the accelerator's scaled rows, transposed", final,
                transpose(rows, (1, 0)))
    lowered.instructions[index:index + 1] = [scaled, copy]
    return True
