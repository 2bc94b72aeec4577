"""DenseNet's dense blocks on the accelerator: each block's features written once, in
place, and every pre-activation batch-norm + ReLU as an accelerator layer.

A dense layer reads the concatenation of every earlier feature map of its block and
applies batch-norm and ReLU to it (a per-channel affine, then a clip) before its 1×1
convolution; each concatenation is the one before it plus the layer's new channels. As
lowered, every concatenation is a new NCHW buffer that copies the whole previous one
(the copies grow with the block, quadratically), and each batch-norm is a host loop: no
layer produces it, since each of the block's features is read by every later layer with
a batch-norm of its own. The quantizer gives a block's concatenations one scale (the
last one's: `quantize._concatenated_parts`), so the integers of each concatenation are
the first channels of the next. This pass (`compile --accel`, after `fuse_accel_scales`):

1. A host loop that is clip(requantize(a·x + b)) of one int8 tensor x — a per-channel
   affine of the quantizer's (a batch-norm: x widened ×128, per-channel multipliers and
   shifts), or a plain requantize — becomes an accelerator layer when x is an
   accelerator layer's rows (x's channels: a block of columns of them, `input_pitch`
   apart) and the epilogue computes it exactly: a 1×1 sum pool when b is a multiple of
   a (each row through the epilogue, column c plus bias b/a, times a per-column scale a
   or, for a = 2^k, k fewer bits of post shift), else a depthwise 1×1 convolution of
   w·x on the array with a = ±w·2^j (the quantizer's a = 128: w = −128, the multipliers
   negated, the bias ∓b). `_epilogue_form` derives the vectors from the loop's steps
   (`accel_residual.residual_form` checks their structure, `_per_channel` computes them)
   and checks them against the loop's arithmetic on every int8 value.
2. A chain of channel concatenations, each the one before plus layers' rows, is one
   buffer of the block's final width: every layer that makes a part stores its columns
   there (`output_pitch`), and each concatenation becomes one transposing copy of its
   first columns — which step 1, run again, replaces where the readers are batch-norm
   loops, so the copies go too.

Both steps leave everything unchanged where they do not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glensidec.backend.accel_layers import (
    LayerBuilder,
    check_fits,
    drop_dead_code,
    evaluate_buffer,
)
from glensidec.backend.accel_pool import PADDING, trace_layer_rows
from glensidec.backend.accel_residual import FormValue, Linear, residual_form
from glensidec.backend.fuse_elementwise import as_fused, merge_loops
from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    Copy,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
)
from glensidec.backend.views import (
    Axis,
    View,
    co_refinable,
    contiguous,
    regroup,
    store_view,
    transpose,
    view_array,
)
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig, epilogue_reference
from glensidec.hardware.commands import AccelConfig, LayerQuant, depthwise_weight_matrix
from glensidec.lang.dtypes import Array, requantize, wrap_signed

#: The epilogue's per-column scales are int8.
SCALE_LIMIT = 127


def fuse_dense_blocks(lowered: LoweredProgram, weights: dict[str, Array],
                      accel: AccelConfig) -> LoweredProgram:
    """`lowered` with requantized affines of layers' rows as accelerator layers and
    chains of concatenations written in place (a new program)."""
    result = lowered.copy()
    _inline_casts(result)
    _affine_layers(result, weights, accel)
    builder = LayerBuilder(result)
    gone: set[int] = set()  # (removed after all chains: the chains' indices stay valid)
    for chain in _chains(result):
        gone |= _join_chain(result, builder, chain)
    result.instructions = [instruction for index, instruction
                           in enumerate(result.instructions) if index not in gone]
    _affine_layers(result, weights, accel)
    drop_dead_code(result)
    return result


# -- 1. requantized affines as accelerator layers ------------------------------------------


@dataclass(frozen=True)
class _Form:
    """The epilogue vectors that compute a loop: clip(requantize((w·x + bias)·scale))."""

    bias: tuple[int, ...]
    multiplier: tuple[int, ...]
    scale: tuple[int, ...] | None
    epilogue: EpilogueConfig
    weight: int = 1  # ≠ 1: x times it on the array first (a grouped 1×1 layer, not a pool)


@dataclass(frozen=True)
class _Rows:
    """x as `channels` columns of a layer's rows: element (c, p) of x (NCHW) is element
    offset + p·pitch + c of `buffer`."""

    buffer: str
    offset: int
    pitch: int


def _affine_layers(lowered: LoweredProgram, weights: dict[str, Array],
                   accel: AccelConfig) -> None:
    index = 0
    while index < len(lowered.instructions):
        if isinstance(lowered.instructions[index], Fused) and \
                _rewrite_affine(lowered, index, weights, accel):
            index += 1  # past the layer, to the copy of its rows
        index += 1


def _inline_casts(lowered: LoweredProgram) -> None:
    """Each host cast of an int8 tensor to i32 that only elementwise loops read (a block's
    first part, which the quantizer widens once for its requantize and its batch-norm)
    merged into every one of them, so each loop reads the int8 tensor itself."""
    index = 0
    while index < len(lowered.instructions):
        cast = lowered.instructions[index]
        index += 1
        if not (isinstance(cast, Map) and cast.op.name == "cast" and
                lowered.buffer_of(cast.dst).dtype == "i32" and
                lowered.buffer_of(cast.src).dtype == "i8" and lowered.is_whole(cast.dst) and
                lowered.writers().get(cast.dst.buffer) == [index - 1] and
                cast.dst.buffer != lowered.output):
            continue
        producer = as_fused(cast, lowered)
        readers = lowered.readers().get(cast.dst.buffer, [])
        merged: dict[int, Fused] = {}
        for position in readers:
            consumer = as_fused(lowered.instructions[position], lowered)
            leaves = [leaf for leaf, view in enumerate(consumer.leaves if consumer else ())
                      if view.buffer == cast.dst.buffer]
            if consumer is None or producer is None or len(leaves) != 1 or \
                    not lowered.is_whole(consumer.leaves[leaves[0]]) or \
                    consumer.leaves[leaves[0]].shape != cast.dst.shape:
                break
            fused = merge_loops(producer, consumer, leaves[0])
            if not co_refinable([fused.dst.dims, *(leaf.dims for leaf in fused.leaves)]):
                break
            merged[position] = fused
        else:
            if readers:
                for position, fused in merged.items():
                    lowered.instructions[position] = fused


def _rewrite_affine(lowered: LoweredProgram, index: int, weights: dict[str, Array],
                    accel: AccelConfig) -> bool:
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    shape = fused.dst.shape
    if len(shape) != 4 or shape[0] != 1 or lowered.buffer_of(fused.dst).dtype != "i8" or \
            not lowered.is_whole(fused.dst) or lowered.writers().get(fused.dst.buffer) != [index]:
        return False
    _, channels, height, width = shape
    found = _epilogue_form(lowered, index, weights)
    if found is None:
        return False
    leaf, form = found
    x = fused.leaves[leaf]
    rows = _rows_of(lowered, x, index) if lowered.is_whole(x) and x.shape == shape else None
    if rows is None or _pool_folds_it(lowered, x, index):
        return False
    pooled = form.weight == 1
    geometry = ConvLayer(fused.dst.buffer, height, width, channels, channels,
                         groups=1 if pooled else channels)
    quant = LayerQuant(form.epilogue, form.bias, form.multiplier, scale=form.scale)
    try:
        check_fits(accel, geometry, quant, pool=pooled)
    except GlensideError:
        return False  # the host computes it
    final = regroup(fused.dst, (channels, height * width))
    if final is None:
        return False
    builder = LayerBuilder(lowered)
    name = fused.dst.buffer
    m = height * width
    out = builder.activation(f"{name}_rows", (m, channels))
    bias = builder.constant(f"{name}_bias", "i32", np.array(form.bias, np.int64))
    weight = bias  # (a pool has no weights: b is a placeholder)
    if not pooled:  # a depthwise 1×1 convolution: w on the diagonal, packed per N block
        weight = builder.constant(f"{name}_weights", "i8",
                                  depthwise_weight_matrix(geometry, accel.cols, form.weight))
    source = View(rows.buffer, rows.offset, ((Axis(m, rows.pitch),), (Axis(channels, 1),)))
    layer = AccelLayer(
        fused.note, out, name=name, a=source, b=weight, bias=bias,
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(form.multiplier, np.int64)),
        commands=builder.commands_placeholder(name), m=m,
        k=0 if pooled else weight.shape[0], n=channels,
        pre=form.epilogue.pre, post=form.epilogue.post,
        zero_point=form.epilogue.zero_point, low=form.epilogue.low, high=form.epilogue.high,
        image=(height, width, channels), kernel=1, stride=1, pool=pooled, pool_sum=pooled,
        groups=geometry.groups, group_cols=0 if pooled else accel.cols,
        scale=None if form.scale is None else builder.constant(
            f"{name}_scale", "i8", np.array(form.scale, np.int64)),
        input_pitch=rows.pitch if rows.pitch != channels else 0)
    copy = Copy(f"{fused.note}: the accelerator's rows, transposed", final,
                transpose(out, (1, 0)))
    lowered.instructions[index:index + 1] = [layer, copy]
    return True


def _pool_folds_it(lowered: LoweredProgram, x: View, index: int) -> bool:
    """Is x a max-pool's rows that only the loop at `index` reads (through the copy that
    transposes them)? `accel_pool` folds such a requantize into the pool's epilogue."""
    writers = lowered.writers().get(x.buffer, [])
    copy = lowered.instructions[writers[0]] if len(writers) == 1 else None
    if not isinstance(copy, Copy) or lowered.readers().get(x.buffer) != [index]:
        return False
    pools = lowered.writers().get(copy.src.buffer, [])
    pool = lowered.instructions[pools[0]] if len(pools) == 1 else None
    return isinstance(pool, AccelLayer) and pool.pool and not pool.pool_sum and \
        (pool.pre, pool.post, pool.zero_point) == (0, 0, 0) and \
        lowered.readers().get(copy.src.buffer) == [writers[0]]


def _epilogue_form(lowered: LoweredProgram, index: int, weights: dict[str, Array]
                   ) -> tuple[int, _Form] | None:
    """(x's leaf, the epilogue's vectors) when the loop at `index` is
    clip(requantize(a·x + b)) of one run-time int8 leaf x and compile-time constants
    that are the same over each channel's pixels, and a sum-pool layer's epilogue
    computes it exactly for every int8 x; else None."""
    fused = lowered.instructions[index]
    assert isinstance(fused, Fused)
    channels = fused.dst.shape[1]
    runtime, constants = [], {}
    for leaf, view in enumerate(fused.leaves):
        flat = evaluate_buffer(lowered, view.buffer, weights, index)
        if flat is None:
            runtime.append(leaf)
            continue
        spread = view_array(view, flat).reshape(channels, -1)
        if not np.all(spread == spread[:, :1]):
            return None
        constants[leaf] = spread[:, 0]
    if len(runtime) != 1 or lowered.buffer_of(fused.leaves[runtime[0]]).dtype != "i8":
        return None
    x = runtime[0]
    # The steps' structure is the same for every channel (only the constants differ):
    # residual_form checks it on channel 0, `_per_channel` computes every channel's values.
    values: list[FormValue] = [Linear(((x, 1),), 0) if leaf == x else
                               int(constants[leaf][0]) for leaf in range(len(fused.leaves))]
    first = residual_form(fused, values)
    if first is None or len(first.linear.coefficients) != 1:
        return None
    gains, offsets, multipliers = _per_channel(fused, x, constants, channels)
    pre, post, zero_point, low, high = (first.pre, first.post, first.zero_point, first.low,
                                        first.high)
    loop = EpilogueConfig(pre, post, zero_point, low, high)
    for derive in (_vectors, _array_vectors):
        form = derive(gains, offsets, multipliers, loop)
        if form is not None and _exact(gains, offsets, multipliers, loop, form):
            return x, form
    return None


def _per_channel(fused: Fused, x: int, constants: dict[int, Array], channels: int
                 ) -> tuple[Array, Array, Array]:
    """(a, b, multiplier) per channel of the loop clip(requantize(a·x + b)) whose steps
    `residual_form` accepted: its arithmetic (i32, wrapping) on vectors of the channels'
    constants. A value is (a, b), a constant (None, c)."""
    results: list[tuple[Array | None, Array]] = []
    multipliers = np.ones(channels, np.int64)
    zero = np.zeros(channels, np.int64)

    def operand(index: int) -> tuple[Array | None, Array]:
        if index >= 0:
            return (np.ones(channels, np.int64), zero) if index == x else \
                (None, constants[index].astype(np.int64))
        return results[-index - 1]

    for step in fused.steps:
        name = step.name
        args = [operand(index) for index in step.operands]
        gain, offset = args[0]
        if name in ("elementwise-add", "elementwise-sub", "elementwise-mul"):
            (left_gain, left), (right_gain, right) = args
            if name == "elementwise-mul":
                factor, (gain, offset) = (left, args[1]) if left_gain is None else \
                    (right, args[0])
                gain = None if gain is None else wrap_signed(gain * factor, 32)
                offset = wrap_signed(offset * factor, 32)
            else:
                sign = 1 if name == "elementwise-add" else -1
                gains = [zero if g is None else g for g in (left_gain, right_gain)]
                gain = wrap_signed(gains[0] + sign * gains[1], 32)
                offset = wrap_signed(left + sign * right, 32)
        elif name == "requantize":
            assert not isinstance(step.op, str)
            multipliers = np.full(channels, int(step.op.params[0]), np.int64)
        elif name == "requantize-per-channel":
            multipliers = args[1][1]
        results.append((gain, offset))  # (cast, relu and clip keep the value)
    gain, offset = results[-1]
    assert gain is not None
    return gain, offset, multipliers


def _vectors(gains: Array, offsets: Array, multipliers: Array, config: EpilogueConfig
             ) -> _Form | None:
    """The epilogue's bias, multipliers and scales for a·x + b: b/a added to x, then
    times a (a per-column scale, or for one power of two a shorter post shift); None
    when b is not a multiple of a."""
    if np.any(gains == 0) or np.any(offsets % gains):
        return None
    bias = tuple(int(value) for value in offsets // gains)
    multiplier = tuple(int(value) for value in multipliers)
    if np.all(gains == 1):
        return _Form(bias, multiplier, None, config)
    if config.pre:
        return None
    gain = int(gains[0])
    if np.all(gains == gain) and gain > 0 and gain & (gain - 1) == 0 and \
            gain.bit_length() - 1 <= config.post:
        shorter = replace(config, post=config.post - (gain.bit_length() - 1))
        return _Form(bias, multiplier, None, shorter)
    if np.all(np.abs(gains) <= SCALE_LIMIT):
        return _Form(bias, multiplier, tuple(int(value) for value in gains), config)
    return None


def _array_vectors(gains: Array, offsets: Array, multipliers: Array,
                   config: EpilogueConfig) -> _Form | None:
    """The vectors for a·x + b as w·x on the array (w int8) plus a bias, its sign in the
    multipliers: a = ±w·2^j for the fewest j, b a multiple of 2^j, j fewer bits of post
    shift (the quantizer's batch-norm: a = 128, w = −128, any b). None when the gains
    differ or pre shifts."""
    gain = int(gains[0])
    if config.pre or not np.all(gains == gain) or gain == 0:
        return None
    for shift in range(config.post + 1):
        if gain % (1 << shift) or np.any(offsets % (1 << shift)):
            return None
        weight = gain >> shift
        for signed, sign in ((weight, 1), (-weight, -1)):
            if -128 <= signed <= 127:
                return _Form(tuple(int(sign * value) >> shift for value in offsets),
                             tuple(int(sign * value) for value in multipliers), None,
                             replace(config, post=config.post - shift), signed)
    return None


def _exact(gains: Array, offsets: Array, multipliers: Array, loop: EpilogueConfig,
           form: _Form) -> bool:
    """Does the epilogue give the loop's clip(requantize(a·x + b)) (`loop`: its
    requantize and clip) for every int8 x?"""
    x = np.arange(-128, 128, dtype=np.int64)[:, None]
    wanted = np.clip(requantize(wrap_signed(gains * x + offsets, 32), multipliers,
                                loop.pre, loop.post, loop.zero_point).astype(np.int64),
                     loop.low, loop.high)
    got = epilogue_reference(np.broadcast_to(form.weight * x, wanted.shape), np.array(form.bias),
                             np.array(form.multiplier), form.epilogue,
                             scale=None if form.scale is None else np.array(form.scale))
    return bool(np.array_equal(wanted, got))


def _rows_of(lowered: LoweredProgram, x: View, before: int) -> _Rows | None:
    """x (NCHW, whole) as a block of columns of accelerator layers' rows, or None."""
    channels, pixels = x.shape[1], x.shape[2] * x.shape[3]
    traced = trace_layer_rows(lowered, x.buffer, before)
    if traced is not None:
        layer = lowered.instructions[traced[0]]
        assert isinstance(layer, AccelLayer)
        buffer, origin = layer.dst.buffer, traced[1]
    else:
        found = _pitched_copy(lowered, x.buffer, before)
        if found is None:
            return None
        buffer, origin = found
    origin = origin.reshape(channels, pixels)
    if np.any(origin < 0):
        return None
    offset = int(origin[0, 0])
    pitch = int(origin[0, 1] - offset) if pixels > 1 else channels
    expected = offset + np.arange(pixels)[None, :] * pitch + np.arange(channels)[:, None]
    if pitch < channels or not np.array_equal(origin, expected):
        return None
    return _Rows(buffer, offset, pitch)


def _pitched_copy(lowered: LoweredProgram, name: str, before: int
                  ) -> tuple[str, Array] | None:
    """(rows buffer, origin) when one copy before `before` writes all of buffer `name`
    from a buffer that pitched accelerator layers write (a dense block's, whose later
    columns its later layers write), every element it reads written before the copy."""
    writers = lowered.writers().get(name, [])
    if len(writers) != 1 or writers[0] >= before:
        return None
    copy = lowered.instructions[writers[0]]
    if not isinstance(copy, Copy):
        return None
    source = lowered.buffers[copy.src.buffer]
    written = np.zeros(source.elements, np.int64)
    for index in lowered.writers().get(copy.src.buffer, []):
        layer = lowered.instructions[index]
        if not isinstance(layer, AccelLayer) or not layer.output_pitch:
            return None
        if index < writers[0]:
            written += np.bincount(view_array(layer.dst, np.arange(source.elements)).reshape(-1),
                                   minlength=source.elements)
    origin = np.full(lowered.buffers[name].elements, PADDING, np.int64)
    read = view_array(copy.src, np.arange(source.elements))
    store_view(copy.dst, origin, read)
    if np.any(origin == PADDING) or np.any(written[origin] != 1):
        return None
    return copy.src.buffer, origin


# -- 2. a chain of concatenations, written in place ----------------------------------------


@dataclass(frozen=True)
class _Part:
    """Channels first … first + n of a concatenation, copied from a layer's rows."""

    first: int
    layer: int  # the layer's index


@dataclass(frozen=True)
class _Concat:
    """A (1, C, H, W) buffer that copies alone write: an inner concatenation as its first
    `inner_channels` channels (or none), and layers' rows."""

    name: str
    inner: str | None
    inner_channels: int
    parts: tuple[_Part, ...]


def _chains(lowered: LoweredProgram) -> list[list[_Concat]]:
    """The chains of at least two concatenations, innermost first (a single one is
    `accel_layout.join_concatenations`' work)."""
    found = {}
    for name, writers in lowered.writers().items():
        if len(writers) > 1:
            concat = _concat(lowered, name, writers)
            if concat is not None:
                found[name] = concat
    inners = {concat.inner for concat in found.values() if concat.inner is not None}
    chains = []
    for name in sorted(set(found) - inners):
        chain = [found[name]]
        while chain[-1].inner is not None:
            inner = chain[-1].inner
            if inner not in found:
                break
            chain.append(found[inner])
        if chain[-1].inner is None and len(chain) > 1:
            chains.append(chain[::-1])
    return chains


def _concat(lowered: LoweredProgram, name: str, writers: list[int]) -> _Concat | None:
    buffer = lowered.buffers[name]
    if buffer.kind != ACTIVATION or buffer.dtype != "i8" or len(buffer.shape) != 4 or \
            buffer.shape[0] != 1 or name == lowered.output:
        return None
    channels, pixels = buffer.shape[1], buffer.shape[2] * buffer.shape[3]
    inner, inner_channels, parts = None, 0, []
    covered = np.zeros(buffer.elements, np.int64)
    for index in writers:
        copy = lowered.instructions[index]
        if not isinstance(copy, Copy):
            return None
        covered += np.bincount(view_array(copy.dst, np.arange(buffer.elements)).reshape(-1),
                               minlength=buffer.elements)
        first, count = _channel_block(copy.dst, channels, pixels)
        if count < 0:
            return None
        source = lowered.buffers[copy.src.buffer]
        if first == 0 and lowered.is_whole(copy.src) and source.shape[2:] == buffer.shape[2:] \
                and len(source.shape) == 4 and inner is None and \
                len(lowered.writers().get(copy.src.buffer, [])) > 1:
            inner, inner_channels = copy.src.buffer, count
            continue
        layer = _part_layer(lowered, copy, index, count, pixels)
        if layer is None:
            return None
        parts.append(_Part(first, layer))
    if not np.all(covered == 1) or (inner is None and len(parts) < 2):
        return None
    return _Concat(name, inner, inner_channels, tuple(parts))


def _channel_block(view: View, channels: int, pixels: int) -> tuple[int, int]:
    """(first channel, channels) of a (1, C, H, W) buffer's block of whole channels that
    `view` writes in order, or (0, -1)."""
    written = view_array(view, np.arange(channels * pixels)).reshape(-1)
    first = int(written[0]) // pixels
    count = written.size // pixels
    if written.size % pixels or not np.array_equal(
            written, first * pixels + np.arange(written.size)):
        return 0, -1
    return first, count


def _part_layer(lowered: LoweredProgram, copy: Copy, index: int, channels: int,
                pixels: int) -> int | None:
    """The index of the accelerator layer whose own (M, N) rows the copy writes, in NCHW
    order, or None."""
    traced = trace_layer_rows(lowered, copy.src.buffer, index)
    if traced is None:
        return None
    layer = lowered.instructions[traced[0]]
    assert isinstance(layer, AccelLayer)
    rows = lowered.buffer_of(layer.dst)
    writers = lowered.writers().get(layer.dst.buffer, [])
    if layer.output_pitch or layer.layout is not None or layer.dst.offset or \
            writers != [traced[0]] or layer.n != channels or layer.m != pixels or \
            rows.elements != pixels * channels:
        return None
    origin = view_array(copy.src, traced[1]).reshape(-1)
    expected = (np.arange(pixels)[None, :] * channels + np.arange(channels)[:, None])
    return traced[0] if np.array_equal(origin, expected.reshape(-1)) else None


def _join_chain(lowered: LoweredProgram, builder: LayerBuilder, chain: list[_Concat]
                ) -> set[int]:
    """The chain's layers store into one (M, C) buffer of the last concatenation's width,
    each its columns; each concatenation becomes one copy of its first columns (the
    indices of the copies that made it, which the caller removes, returned). Nothing
    changes when a layer's rows are read by anything its new place cannot serve."""
    last = lowered.buffers[chain[-1].name]
    channels, pixels = last.shape[1], last.shape[2] * last.shape[3]
    parts = [part for concat in chain for part in concat.parts]
    readers = lowered.readers()
    target = builder.name(f"{chain[-1].name}_rows")
    moved_reads: dict[int, Instruction] = {}
    for part in parts:
        layer = lowered.instructions[part.layer]
        assert isinstance(layer, AccelLayer)
        for reader in readers.get(layer.dst.buffer, []):
            instruction = moved_reads.get(reader, lowered.instructions[reader])
            moved = _moved_reads(instruction, layer.dst.buffer, layer.n, channels, part.first,
                                 target)
            if moved is None:
                return set()
            moved_reads[reader] = moved
    rows_view = builder.activation(target, (pixels, channels))
    for part in parts:
        layer = lowered.instructions[part.layer]
        assert isinstance(layer, AccelLayer)
        lowered.instructions[part.layer] = replace(
            layer, dst=View(rows_view.buffer, part.first,
                            ((Axis(pixels, channels),), (Axis(layer.n, 1),))),
            output_pitch=channels)
    for position, instruction in moved_reads.items():
        lowered.instructions[position] = instruction
    gone: set[int] = set()
    for concat in chain:
        buffer = lowered.buffers[concat.name]
        width = buffer.shape[1]
        writers = lowered.writers()[concat.name]
        final = regroup(contiguous(concat.name, buffer.shape), (width, pixels))
        assert final is not None
        columns = View(rows_view.buffer, 0, ((Axis(pixels, channels),), (Axis(width, 1),)))
        lowered.instructions[max(writers)] = Copy(
            f"{lowered.instructions[max(writers)].note}: the block's first {width} columns, "
            "which its layers wrote in place, transposed", final, transpose(columns, (1, 0)))
        gone |= set(writers) - {max(writers)}
    return gone


def _moved_reads(instruction: Instruction, rows: str, n: int, pitch: int, column: int,
                 target: str) -> Instruction | None:
    """`instruction` reading from `target` (rows `pitch` apart, its block from `column`)
    what it read from the compact (M, n) `rows`, or None when a read is not whole rows'
    worth of columns that the move keeps in place. (A pool reading the rows, step 1's
    layer, reads the block's columns with the input pitch.)"""
    if isinstance(instruction, Copy) and instruction.src.buffer == rows:
        moved = moved_view(instruction.src, n, pitch, column, target)
        return None if moved is None else replace(instruction, src=moved)
    if isinstance(instruction, AccelLayer) and _pitchable(instruction) and \
            not instruction.input_pitch and instruction.image[-1:] == (n,) and \
            instruction.a.buffer == rows and instruction.a.offset == 0 and \
            rows not in {view.buffer for view in instruction.reads()[1:]}:
        pixels = instruction.a.shape[0]
        return replace(instruction, a=View(target, column, ((Axis(pixels, pitch),),
                                                            (Axis(n, 1),))),
                       input_pitch=pitch)
    return None


def _pitchable(layer: AccelLayer) -> bool:
    """Can the layer read its input with a pitch (`commands.with_input_pitch`: loads of
    whole pixels' channels)? A pool, and step 1's grouped 1×1 convolutions."""
    return layer.pool or (layer.groups == layer.n > 1 and layer.kernel == 1 and
                          layer.stride == 1 and not layer.padding)


def moved_view(view: View, n: int, pitch: int, column: int, target: str) -> View | None:
    """`view` of compact (M, n) rows as the same elements of `target`, whose rows are
    `pitch` apart and hold the n columns from `column`; None when an axis of the view
    neither steps whole rows nor stays inside one."""
    row, first = divmod(view.offset, n)
    reach = first
    dims = []
    for group in view.dims:
        axes = []
        for axis in group:
            if axis.stride % n == 0:
                axes.append(Axis(axis.size, axis.stride // n * pitch))
            elif 0 < axis.stride < n:
                axes.append(axis)
                reach += (axis.size - 1) * axis.stride
            else:
                return None
        dims.append(tuple(axes))
    if reach >= n:
        return None
    return View(target, row * pitch + first + column, tuple(dims))
