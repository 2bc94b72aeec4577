"""Accelerator layers: an array call and the epilogue after it, run on the whole accelerator.

`glensidec compile --accel` lowers as usual, then this pass looks at every int8 array call
(`ArrayGemm`) and the instructions that consume its result one after the other:

    gemm (i32)  [→ elementwise-add of a constant bias]  [→ elementwise-add of a skip
                connection: an int8 tensor cast to i32, times a scalar]  → requantize (i8)
                [→ relu / clip …]

When each intermediate buffer has that single reader, the bias and the requantize
multiplier are the same down every output column (per output channel), and one operand is a
constant (the weights), the chain becomes one `AccelLayer`: ws_accel's DMA loads the
activations and the weights into the scratchpad, the array multiplies, and the epilogue adds
the bias, requantizes and clips as the rows leave for memory, so none of the chain's
elementwise passes run on the host. Its commands (`hardware.commands.conv_program` in GEMM
form: an M×K matrix as an M-pixel, K-channel 1×1 convolution, or for the im2col matrix of
a square convolution the k×k convolution itself, the DMA reading the rows from an NHWC copy
of the map) are a constant table in weights.bin; their cycles (`commands.accel_cycles`, the
RTL's count) are the layer's prediction. A bias that is per output element only because
the quantizer padded with 0 becomes per channel by padding with the input's zero point.

The array's weights are the stationary operand and its epilogue works per column, so the
weights must be the call's B operand (K×N, output channels along N). A call whose constant
is A (M×K: im2col convolutions, where the program's layout puts channels first) runs
transposed, Cᵀ = Bᵀ·Aᵀ: Aᵀ is packed at compile time, the copy that packed B for the call
writes Bᵀ instead (or a host copy transposes it), and a host copy transposes Cᵀ back into
the program's layout.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from glensidec.backend.accel_tables import unary_tail
from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    INPUT,
    OUTPUT,
    AccelLayer,
    ArrayGemm,
    Buffer,
    ConstantSource,
    Copy,
    Fill,
    Fold,
    Instruction,
    LoweredProgram,
    Map,
    RequantizePerChannel,
    constant_array,
)
from glensidec.backend.views import (
    Axis,
    View,
    canonical,
    contiguous,
    regroup,
    slice_view,
    store_view,
    transpose,
    view_array,
)
from glensidec.errors import GlensideError
from glensidec.hardware.accel import (
    CapacityError,
    ConvLayer,
    EpilogueConfig,
    ResidualConfig,
    residual_range_error,
)
from glensidec.hardware.accel_native import FIELDS, native_cycles, native_model, pack_commands
from glensidec.hardware.array import ArrayConfig, ideal_cycles
from glensidec.hardware.batched import batched_program
from glensidec.hardware.commands import (
    AccelConfig,
    AccelTiming,
    LayerProgram,
    LayerQuant,
    LayerTraffic,
    Store,
    accel_cycles,
    best_conv_table,
    conv_program,
    layer_tiling,
    layer_traffic,
    pool_program,
    pool_tiling,
    table_traffic,
    with_input_pitch,
    with_output_pitch,
    with_row_order,
)
from glensidec.hardware.layout import NchwLayout, NhwcLayout, layout_program, nchw_program
from glensidec.lang.dtypes import DTYPES, Array, integer_range, lookup_table, wrap_signed
from glensidec.lang.terms import ComputeOp


@dataclass
class _Chain:
    """What the instructions after one array call do to its result."""

    indices: list[int]  # the array call and the instructions folded into the epilogue
    rows: int  # the chain's values are rows × cols: a leading block of the call's M×N
    cols: int  # result (smaller where the lowering padded the product to the array) …
    transposed: bool  # … or of its transpose (the chain reads the block column by column)
    dst: View  # the last one's destination: rows × cols, row by row
    bias: Array | None  # rows × cols int64, or None (no bias add)
    multiplier: Array  # rows × cols int64
    pre: int
    post: int
    zero_point: int
    low: int = -128
    high: int = 127
    skip: View | None = None  # an int8 tensor, whole, in the chain's element order …
    skip_multiplier: int = 1  # … added times this before the requantize
    table: Array | None = None  # 256 int8 entries: a lookup after the clips (hardswish …)


def _whole(view: View, lowered: LoweredProgram, elements: int) -> bool:
    """Does `view` walk its whole buffer of `elements`, row-major, from the start?"""
    return lowered.is_whole(view) and lowered.buffer_of(view).elements == elements


def _block(view: View, lowered: LoweredProgram, m: int, n: int
           ) -> tuple[int, int, bool] | None:
    """(rows, cols, transposed) when `view` reads the leading block of an M×N buffer row
    by row (rows × cols of it), or column by column (transposed: rows × cols of its
    transpose); else None."""
    if lowered.buffer_of(view).elements != m * n or not math.prod(view.shape):
        return None
    if view.offset == 0 and math.prod(view.shape) == m * n and view.is_row_major():
        return m, n, False  # the whole buffer in order (what the loop below finds)
    order = view_array(view, np.arange(m * n)).reshape(-1)
    for transposed, step, limit in ((False, 1, n), (True, n, m)):
        run = 1  # the elements of the first row the chain reads
        while run < order.size and run < limit and order[run] == run * step:
            run += 1
        rows = order.size // run
        if transposed:  # the chain's row i is column i of the block
            expected = np.arange(rows)[:, None] + n * np.arange(run)[None, :]
        else:
            expected = n * np.arange(rows)[:, None] + np.arange(run)[None, :]
        if rows * run == order.size and rows <= (n if transposed else m) and \
                np.array_equal(order, expected.reshape(-1)):
            return rows, run, transposed
    return None


def evaluate_buffer(lowered: LoweredProgram, name: str, weights: dict[str, Array],
                    before: int, all_writers: Mapping[str, list[int]] | None = None,
                    known: dict[str, bool] | None = None) -> Array | None:
    """The elements of buffer `name` (flat) when they are known at compile time: a
    constant, or an activation only fills and copies of such make before instruction
    `before` (the lowering pads weights at run time); else None. (`all_writers`: the
    program's `writers()`, handed down the copies: asking again for each copy compared
    the whole instruction list each time, seconds on a vit_b_16. `known`: what
    `_made_of_constants` found, for a caller that asks about many buffers of one
    program.)"""
    buffer = lowered.buffers[name]
    if buffer.kind == CONSTANT:
        return constant_array(buffer, weights).reshape(-1)
    if all_writers is None:
        all_writers = lowered.writers()
    known = {} if known is None else known
    # Whether it is known, before anything is made: most activations are not (a compute
    # writes them), and zeroing the elements of each copy of one down a chain of copies
    # first took most of fold_constants' time on a swin_t.
    if not _evaluable(lowered, name, before, all_writers, known):
        return None
    flat = np.zeros(buffer.elements, dtype=np.int64)
    for index in all_writers[name]:
        writer = lowered.instructions[index]
        if isinstance(writer, Fill):
            low = integer_range(buffer.dtype)[0] if writer.minimum else writer.value
            store_view(writer.dst, flat, np.full(writer.dst.shape, low))
        else:
            assert isinstance(writer, Copy)
            source = evaluate_buffer(lowered, writer.src.buffer, weights, index,
                                     all_writers, known)
            assert source is not None  # (_evaluable said so)
            store_view(writer.dst, flat, view_array(writer.src, source))
    return flat


def _evaluable(lowered: LoweredProgram, name: str, before: int,
               all_writers: Mapping[str, list[int]], known: dict[str, bool]) -> bool:
    """Whether `evaluate_buffer` knows buffer `name` before instruction `before`."""
    buffer = lowered.buffers[name]
    if buffer.kind == CONSTANT:
        return True
    writers = all_writers.get(name, [])
    # Only integers are evaluated (into int64): the layers take no float data.
    return buffer.kind == ACTIVATION and bool(writers) and max(writers) < before and \
        DTYPES[buffer.dtype].integer and _made_of_constants(lowered, name, all_writers, known)


def _made_of_constants(lowered: LoweredProgram, name: str,
                       all_writers: Mapping[str, list[int]], known: dict[str, bool]) -> bool:
    """Whether every writer of activation `name` is a fill, or a copy of an evaluable
    buffer (remembered in `known`)."""
    answer = known.get(name)
    if answer is None:
        answer = known[name] = all(
            isinstance(writer, Fill) or (isinstance(writer, Copy) and _evaluable(
                lowered, writer.src.buffer, index, all_writers, known))
            for index, writer in ((index, lowered.instructions[index])
                                  for index in all_writers[name]))
    return answer


def _known(lowered: LoweredProgram, view: View, weights: dict[str, Array], before: int,
           shape: tuple[int, int], widen: bool = True) -> Array | None:
    """A compile-time operand's values as int64 of `shape` (None: known only at run time);
    without `widen`, in the integers they are stored in (a caller that only reads and
    copies them: a classifier's int8 weights are tens of millions of elements, and
    widening them took most of this pass on alexnet and vgg11)."""
    flat = evaluate_buffer(lowered, view.buffer, weights, before)
    if flat is None:
        return None
    values: Array = view_array(view, flat).reshape(shape)
    if widen or not np.issubdtype(values.dtype, np.integer):
        values = values.astype(np.int64)
    return values


def _follow(lowered: LoweredProgram, gemm_index: int, weights: dict[str, Array],
            readers: Mapping[str, list[int]]) -> _Chain | None:
    """The chain after the array call at `gemm_index`, or None when it does not fuse."""
    gemm = lowered.instructions[gemm_index]
    assert isinstance(gemm, ArrayGemm)
    return follow_chain(lowered, gemm_index, gemm.dst, (gemm.m, gemm.n), weights, readers,
                        lookup=True)


def follow_chain(lowered: LoweredProgram, gemm_index: int, result: View,
                 shape: tuple[int, int], weights: dict[str, Array],
                 readers: Mapping[str, list[int]], lookup: bool = False) -> _Chain | None:
    """The epilogue chain after the instruction at `gemm_index`, whose i32 `result` is an
    M×N (`shape`) buffer, or None when it does not fuse. With `lookup` (a caller whose
    layer takes the chain's `table`), an int8 lookup after the clips joins it too."""
    instructions = lowered.instructions
    block: tuple[int, int, bool] | None = None

    def next_of(view: View) -> tuple[int, Instruction] | None:
        users = readers.get(view.buffer, [])
        if len(users) != 1 or view.buffer == lowered.output:
            return None
        return users[0], instructions[users[0]]

    def reads(view: View, current: View) -> bool:
        """Does `view` read what the chain has so far, in its element order?"""
        nonlocal block
        if view.buffer != current.buffer:
            return False
        if block is None:  # the call's result: maybe a leading block of it
            block = _block(view, lowered, *shape)
            return block is not None
        return _whole(view, lowered, block[0] * block[1])

    def other(members: Sequence[View], current: View) -> View | None:
        """The member besides the one reading `current`, for two-member instructions."""
        if len(members) == 2:
            for first, second in (members, members[::-1]):
                if reads(first, current):
                    return second
        return None

    def known(view: View) -> Array | None:
        assert block is not None
        return _known(lowered, view, weights, gemm_index, block[:2])

    current, indices = result, [gemm_index]
    bias: Array | None = None
    skip: tuple[View, int] | None = None
    found = next_of(current)
    while found is not None and isinstance(found[1], Fold) and \
            found[1].op == "elementwise-add":  # the bias, and a skip connection
        operand = other(found[1].members, current)
        if operand is None or block is None or \
                not _whole(found[1].dst, lowered, block[0] * block[1]):
            return None
        value = known(operand)
        if value is not None and bias is None:
            bias = value
        elif value is None and skip is None:
            skip = _skip_connection(lowered, operand, weights, gemm_index, block[0] * block[1])
            if skip is None:
                return None
        else:
            return None
        indices.append(found[0])
        current = found[1].dst
        found = next_of(current)
    if found is None:
        return None
    index, step = found
    if isinstance(step, Map) and step.op.name == "requantize" and reads(step.src, current):
        assert block is not None
        factor, pre, post, zero_point = (int(value) for value in step.op.params)
        multiplier = np.full(block[:2], factor, np.int64)
    elif isinstance(step, RequantizePerChannel):
        operand = other(step.members, current)
        found_multiplier = None if operand is None else known(operand)
        if found_multiplier is None:
            return None
        multiplier, pre, post, zero_point = (found_multiplier, step.pre, step.post,
                                             step.zero_point)
    else:
        return None
    assert block is not None
    rows, cols, transposed = block
    if lowered.buffer_of(step.dst).dtype != "i8" or not _whole(step.dst, lowered, rows * cols):
        return None
    chain = _Chain(indices + [index], rows, cols, transposed, step.dst, bias, multiplier, pre,
                   post, zero_point)
    if skip is not None:
        chain.skip, chain.skip_multiplier = skip
    while (found := next_of(chain.dst)) is not None:  # relu and clips: the epilogue's range
        index, step = found
        if not (isinstance(step, Map) and step.op.name in ("relu", "clip")
                and _whole(step.src, lowered, rows * cols)
                and _whole(step.dst, lowered, rows * cols)):
            break
        low, high = clip_range(step.op)
        low, high = max(chain.low, low), min(chain.high, high)
        if low > high:
            break
        chain.indices.append(index)
        chain.dst, chain.low, chain.high = step.dst, low, high
    found = next_of(chain.dst)
    if lookup and found is not None and isinstance(found[1], Map) and \
            found[1].op.name == "lookup" and _whole(found[1].src, lowered, rows * cols) and \
            _whole(found[1].dst, lowered, rows * cols) and \
            lowered.buffer_of(found[1].dst).dtype == "i8":
        chain.table = lookup_values(found[1].op)
        chain.indices.append(found[0])
        chain.dst = found[1].dst
    if lookup:  # int8 steps of the result alone (GELU's 1 + erf): one table
        tail = unary_tail(lowered, chain.dst, chain.table, next_of,
                          lambda view: _scalar(known(view)))
        if tail is not None:
            chain.table = tail.table
            chain.indices.extend(tail.indices)
            chain.dst = tail.dst
    return chain


def _scalar(values: Array | None) -> int | None:
    """The one value a compile-time operand holds everywhere, or None."""
    if values is None or values.size == 0 or not np.all(values == values.flat[0]):
        return None
    return int(values.flat[0])


def lookup_values(op: ComputeOp) -> Array:
    """An int8 `lookup`'s 256 results (entry q + 128), as the interpreter computes them."""
    function, in_scale, in_zero_point, out_scale, out_zero_point = op.params
    return lookup_table(str(function), float(in_scale), int(in_zero_point), float(out_scale),
                        int(out_zero_point)).astype(np.int64)


def _skip_connection(lowered: LoweredProgram, view: View, weights: dict[str, Array],
                     before: int, elements: int) -> tuple[View, int] | None:
    """(r, m) when `view` reads, whole, `cast(r) · m` — r an int8 tensor complete before
    instruction `before` (the array call), read whole, m a scalar known at compile time —
    or `cast(r)` (m = 1); else None."""
    def single_writer(target: View) -> Instruction | None:
        writers = lowered.writers().get(target.buffer, [])
        if len(writers) != 1 or not _whole(target, lowered, elements):
            return None
        return lowered.instructions[writers[0]]

    multiplier = 1
    writer = single_writer(view)
    if isinstance(writer, Fold) and writer.op == "elementwise-mul" and len(writer.members) == 2:
        for scaled, scale in (writer.members, writer.members[::-1]):
            value = scalar_value(lowered, scale, weights, before)
            if value is not None:
                multiplier, writer = value, single_writer(scaled)
                break
        else:
            return None
    if not (isinstance(writer, Map) and writer.op.name == "cast"
            and lowered.buffer_of(writer.dst).dtype == "i32"):
        return None
    source = writer.src
    # (whole, or one image of a batch: a row-major run of the elements at an offset)
    if lowered.buffer_of(source).dtype != "i8" or not source.is_row_major() or \
            math.prod(source.shape) != elements or \
            any(index >= before for index in lowered.writers().get(source.buffer, [])):
        return None
    multiplier = int(wrap_signed(multiplier, 32))
    if residual_range_error(ResidualConfig(multiplier=multiplier, early=True),
                            EpilogueConfig()) is not None:
        return None  # wider than the epilogue's residual multiplier: the host adds it
    return source, multiplier


def clip_range(op: ComputeOp) -> tuple[int, int]:
    """The int8 range a relu or a clip keeps (its float bounds rounded inward)."""
    if op.name == "relu":
        return 0, 127
    return math.ceil(float(op.params[0])), math.floor(float(op.params[1]))


def scalar_value(lowered: LoweredProgram, view: View, weights: dict[str, Array],
                 before: int) -> int | None:
    """The one value every element of a buffer known at compile time holds (before
    instruction `before`), else None."""
    flat = evaluate_buffer(lowered, view.buffer, weights, before)
    if flat is None or flat.size == 0 or not np.all(flat == flat[0]):
        return None
    return int(flat[0])


def per_column(values: Array) -> list[int] | None:
    """The values of a layer-shaped array that is the same down each column, or None."""
    if not np.all(values == values[:1]):
        return None
    return [int(value) for value in values[0]]


@dataclass
class LayerBuilder:
    """New buffers and names while the pass rewrites one program."""

    lowered: LoweredProgram

    def name(self, base: str) -> str:
        candidate, number = base, 1
        while candidate in self.lowered.buffers:
            candidate, number = f"{base}_{number}", number + 1
        return candidate

    def constant(self, base: str, dtype: str, values: Array) -> View:
        name = self.name(base)
        little = {"i8": "<i1", "i32": "<i4"}[dtype]
        data = np.ascontiguousarray(values).astype(little).tobytes()
        self.lowered.buffers[name] = Buffer(name, dtype, tuple(values.shape), CONSTANT,
                                            ConstantSource(data=data))
        return contiguous(name, values.shape)

    def commands_placeholder(self, layer: str) -> View:
        """An empty command table for a layer `program_accel_layers` programs later."""
        return self.constant(f"{layer}_commands_unprogrammed", "i32",
                             np.zeros((0, len(FIELDS)), np.int64))

    def activation(self, base: str, shape: tuple[int, ...]) -> View:
        name = self.name(base)
        self.lowered.buffers[name] = Buffer(name, "i8", shape, ACTIVATION)
        return contiguous(name, shape)


def fuse_accel_layers(lowered: LoweredProgram, weights: dict[str, Array],
                      accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every fusable array call chain as an AccelLayer (a new program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        instruction = result.instructions[index]
        if isinstance(instruction, ArrayGemm) and _fusable(result, instruction, accel):
            chain = _follow(result, index, weights, result.readers())
            if chain is not None and _rewrite(result, index, chain, weights, accel):
                continue  # the same index now holds the layer's first new instruction
        index += 1
    drop_dead_code(result)
    return result


def drop_dead_code(lowered: LoweredProgram) -> None:
    """Remove what the layers made unneeded: instructions writing activations no one reads
    (the run-time padding of weights now packed at compile time), and unused buffers."""
    # Per buffer, how many live instructions read it; an activation buffer that none
    # reads (not the output) takes its writers with it, which may leave the buffers they
    # read unread in turn. (One walk of the program: removing one round of dead writers
    # at a time walked it once per round, and the passes call this after each rewrite.)
    instructions = lowered.instructions
    reads = [instruction.read_buffers for instruction in instructions]
    written = [instruction.dst.buffer for instruction in instructions]
    readers = Counter(itertools.chain.from_iterable(reads))
    writers: dict[str, list[int]] = {}
    for index, name in enumerate(written):
        writers.setdefault(name, []).append(index)

    def unread(name: str) -> bool:
        return not readers.get(name) and name != lowered.output and \
            lowered.buffers[name].kind == ACTIVATION

    dead: set[int] = set()
    pending = [name for name in writers if unread(name)]
    while pending:
        for index in writers[pending.pop()]:
            dead.add(index)
            for name in reads[index]:
                readers[name] -= 1
                if name in writers and unread(name):
                    pending.append(name)
    live: Sequence[int] = range(len(instructions))
    if dead:
        live = [index for index in live if index not in dead]
        lowered.instructions = [instructions[index] for index in live]
    used = set(map(written.__getitem__, live)).union(*map(reads.__getitem__, live))
    lowered.buffers = {name: buffer for name, buffer in lowered.buffers.items()
                       if name in used or buffer.kind in (INPUT, OUTPUT)}


def chain_of_call(lowered: LoweredProgram, gemm_index: int, weights: dict[str, Array]
                  ) -> _Chain | None:
    """The epilogue chain `fuse_accel_layers` would make a layer of, after the array call
    at `gemm_index`; None when it does not fuse."""
    return _follow(lowered, gemm_index, weights, lowered.readers())


def fusable_call(lowered: LoweredProgram, gemm: ArrayGemm, accel: AccelConfig) -> bool:
    """Whether `fuse_accel_layers` looks at array call `gemm` (an int8 call on the
    accelerator's array)."""
    return _fusable(lowered, gemm, accel)


def _fusable(lowered: LoweredProgram, gemm: ArrayGemm, accel: AccelConfig) -> bool:
    """An int8 call on the accelerator's array (not another size of several)."""
    on_main = gemm.rows in (0, accel.rows) and gemm.cols in (0, accel.cols)
    return on_main and lowered.buffer_of(gemm.a).dtype == "i8" and \
        _whole(gemm.dst, lowered, gemm.m * gemm.n)


def _rewrite(lowered: LoweredProgram, index: int, chain: _Chain, weights: dict[str, Array],
             accel: AccelConfig) -> bool:
    """Replace the chain by the layer (and its transposing copies); False: it does not fit
    the epilogue (bias or multiplier not per output channel, no constant operand)."""
    gemm = lowered.instructions[index]
    assert isinstance(gemm, ArrayGemm)
    # the block of the call's result the chain uses
    rows, cols = (chain.cols, chain.rows) if chain.transposed else (chain.rows, chain.cols)
    # (only read and copied below: kept in their own integers)
    b_values = _known(lowered, gemm.b, weights, index, (gemm.k, gemm.n), widen=False)
    a_values = _known(lowered, gemm.a, weights, index, (gemm.m, gemm.k), widen=False)
    # The layer computes the block (weights B) or its transpose (weights Aᵀ); the one the
    # chain reads needs no copy back.
    options = [option for option in (chain.transposed, not chain.transposed)
               if (a_values if option else b_values) is not None]
    if not options:
        return False  # two activations: no weights to hold in the array
    flipped = options[0]  # the layer computes the block's transpose
    reoriented = flipped != chain.transposed  # … and the chain reads the other one
    bias = np.zeros((chain.rows, chain.cols), np.int64) if chain.bias is None else chain.bias
    layer_bias = bias.T if reoriented else bias
    bias_vector = per_column(layer_bias)
    multiplier_vector = per_column(chain.multiplier.T if reoriented else chain.multiplier)
    if multiplier_vector is None:
        return False
    padding_fills: list[int] = []
    if bias_vector is None:  # maybe the quantizer's corrections for zero padding
        if flipped:
            assert a_values is not None
            activations, layer_weights = gemm.b, a_values[:rows].T
        else:
            assert b_values is not None
            activations, layer_weights = gemm.a, b_values[:, :cols]
        found = _pad_with_zero_point(lowered, activations, index, flipped, (rows, cols),
                                     layer_bias, layer_weights)
        if found is None:
            return False
        bias_vector, zero_point, padding_fills = found
        for position in padding_fills:
            fill = lowered.instructions[position]
            assert isinstance(fill, Fill)
            lowered.instructions[position] = replace(fill, value=zero_point)
    builder = LayerBuilder(lowered)
    name = chain.dst.buffer
    before: list[Instruction] = []
    after: list[Instruction] = []
    replaced = set(chain.indices)
    geometry = None
    # The chain's pixels: the call's N (or M) unless the lowering padded the pixels to the
    # array's columns (N < cols on a wider array), the padded ones sliced away.
    if flipped and cols <= gemm.n:  # B is the im2col matrix, A the weights
        geometry = _im2col_geometry(lowered, gemm, "b", cols)
    elif not flipped and rows <= gemm.m:  # A is the im2col matrix, B the weights
        geometry = _im2col_geometry(lowered, gemm, "a", rows)
    if geometry is not None:  # K past the taps (the lowering's padding) must add nothing
        taps = geometry[0].channels * geometry[0].taps
        k_by_n = b_values if not flipped else \
            (None if a_values is None else a_values[:rows].T)
        if k_by_n is None or np.any(k_by_n[taps:, :rows if flipped else cols]):
            geometry = None
    if geometry is not None:
        try:  # whole output rows must fit; else the host's im2col matrix, tiled freely
            layer_tiling(accel, replace(geometry[0], out_channels=rows if flipped else cols),
                         chain.skip is not None)
        except CapacityError:
            geometry = None
    layer = ConvLayer(name, height=0, width=1, channels=gemm.k, out_channels=0)
    if geometry is not None:  # the DMA reads the im2col rows from an NHWC copy of the map
        layer, source = geometry
        m, n = (cols, rows) if flipped else (rows, cols)
        layer = replace(layer, name=name, out_channels=n)
        channels = layer.channels
        known = a_values if flipped else b_values
        assert known is not None
        known_weights = known[:rows].T if flipped else known
        taps = channels * layer.taps  # K past them (the lowering's padding) is zero
        weights_kcn = known_weights[:taps, :n].reshape(channels, *layer.kernel_hw, n)
        b_view = builder.constant(f"{name}_weights", "i8",  # K ordered (ky, kx, channel)
                                  weights_kcn.transpose(1, 2, 0, 3).reshape(-1, n))
        image = builder.activation(f"{name}_nhwc", (layer.height, layer.width, channels))
        a_view = image
        before.append(Copy(f"{gemm.note}: the feature map in NHWC for the DMA's im2col",
                           image, transpose(source, (1, 2, 0))))
    elif flipped:  # Cᵀ = Bᵀ·Aᵀ
        assert a_values is not None
        m, n = cols, rows
        b_view = builder.constant(f"{name}_weights", "i8", a_values[:rows].T)
        rows_view = builder.activation(f"{name}_rows", (gemm.n, gemm.k))
        a_view = contiguous(rows_view.buffer, (m, gemm.k))
        transposing = transpose(rows_view, (1, 0))  # K×N, as the call's B
        packer = _only_writer(lowered, gemm.b)
        if packer is not None:  # the copy that packed B writes Bᵀ instead
            copy = lowered.instructions[packer]
            target = regroup(transposing, copy.dst.shape)
            if isinstance(copy, Copy) and target is not None:
                lowered.instructions[packer] = replace(copy, dst=target)
            else:
                packer = None
        if packer is None:
            before.append(Copy(f"{gemm.note}: rows of Bᵀ for the accelerator",
                               transposing, gemm.b))
    else:
        assert b_values is not None
        m, n = rows, cols
        b_view = builder.constant(f"{name}_weights", "i8", b_values[:, :cols])
        a_view = contiguous(gemm.a.buffer, (m, gemm.k), gemm.a.offset)
    if reoriented:  # the layer's result, transposed into the chain's destination
        dst = builder.activation(f"{name}_transposed", (m, n))
        final = regroup(chain.dst, (chain.rows, chain.cols))
        assert final is not None
        after.append(Copy(f"{gemm.note}: the accelerator's result, transposed",
                          final, transpose(dst, (1, 0))))
    else:
        dst = chain.dst
    if geometry is None:  # a matrix: M pixels of K channels, a 1×1 convolution
        layer = ConvLayer(name, height=m, width=1, channels=gemm.k, out_channels=n)
    epilogue = chain_epilogue(chain)
    residual, added = None, None
    if chain.skip is not None:  # the skip connection joins the bias in the epilogue
        added = ResidualConfig(multiplier=chain.skip_multiplier, early=True)
        residual = contiguous(chain.skip.buffer, (m, n), chain.skip.offset)
        if reoriented:  # its rows in the layer's orientation: a host copy
            residual = builder.activation(f"{name}_skip", (m, n))
            before.append(Copy(f"{gemm.note}: the skip connection in the layer's rows",
                               transpose(residual, (1, 0)),
                               contiguous(chain.skip.buffer, (n, m), chain.skip.offset)))
    quant = LayerQuant(epilogue, tuple(bias_vector), tuple(multiplier_vector),
                       residual=added)
    check_fits(accel, layer, quant)
    fused = AccelLayer(
        lowered.instructions[chain.indices[-1]].note, dst, name=name,
        a=a_view, b=b_view,
        bias=builder.constant(f"{name}_bias", "i32", np.array(bias_vector, np.int64)),
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(multiplier_vector, np.int64)),
        commands=builder.commands_placeholder(name),
        m=m, k=b_view.shape[0], n=n, pre=chain.pre, post=chain.post,
        zero_point=chain.zero_point,
        low=chain.low, high=chain.high,
        image=(layer.height, layer.width, layer.channels) if geometry is not None else (),
        kernel=layer.kernel, stride=layer.stride, kernel_w=layer.kernel_w,
        stride_w=layer.stride_w, dilation=layer.dilation, residual=residual,
        residual_add=added,
        table=chain_table(builder, name, chain))
    # Edited in place, not rebuilt: a copy of the whole list per layer made the pass
    # quadratic, and the list's edits tell `readers` what changed (`InstructionList`).
    instructions = lowered.instructions
    for position in sorted(replaced, reverse=True):
        del instructions[position]
    instructions[index:index] = [*before, fused, *after]  # where the array call was
    return True


def chain_epilogue(chain: _Chain) -> EpilogueConfig:
    """The epilogue settings a chain's layer runs with (its lookup table included)."""
    table = None if chain.table is None else tuple(int(value) for value in chain.table)
    return EpilogueConfig(chain.pre, chain.post, chain.zero_point, chain.low, chain.high,
                          table)


def chain_table(builder: LayerBuilder, name: str, chain: _Chain) -> View | None:
    """The chain's lookup table as a constant of the layer (None without one)."""
    if chain.table is None:
        return None
    return builder.constant(f"{name}_table", "i8", chain.table)


def constant_vector(lowered: LoweredProgram, view: View, weights: dict[str, Array]
                    ) -> tuple[int, ...]:
    """A constant buffer's values (a layer's bias or multiplier vector)."""
    buffer = lowered.buffer_of(view)
    assert buffer.kind == CONSTANT
    # (tolist: Python ints at once; a swin_t's 3,359 layers' keys read 2.5 M values)
    return tuple(constant_array(buffer, weights).reshape(-1).astype(np.int64).tolist())


def check_fits(accel: AccelConfig, layer: ConvLayer, quant: LayerQuant,
               pool: bool = False) -> None:
    """GlensideError naming the sizes when the layer's tiles do not fit the memories, or
    the ranges when its residual add does not fit the epilogue's arithmetic."""
    if quant.residual is not None:
        problem = residual_range_error(quant.residual, quant.epilogue)
        if problem is not None:
            raise GlensideError(f"--accel: layer {layer.name}: {problem}")
    try:
        if pool:
            pool_tiling(accel, layer)
        else:
            layer_tiling(accel, layer, quant.residual is not None)
    except CapacityError as error:
        raise GlensideError(f"--accel: {error}") from None


def layer_geometry(layer: AccelLayer) -> ConvLayer:
    """The convolution (an M-pixel 1×1 convolution for a matrix, or a max-pool) the
    layer's commands compute."""
    if isinstance(layer.layout, NchwLayout):  # read the rows once, write the NCHW map
        return ConvLayer(layer.name, layer.layout.pixels, 1, layer.layout.channels,
                         layer.layout.channels)
    if layer.layout is not None:  # read the NCHW map once, write the padded NHWC map
        layout = layer.layout
        return ConvLayer(layer.name, layout.height, layout.width, layout.channels,
                         layout.channels, padding=layout.padding)
    if layer.image:
        height, width, channels = layer.image
        return ConvLayer(layer.name, height, width, channels, layer.n, layer.kernel,
                         layer.stride, layer.padding, layer.groups, layer.pad_end,
                         layer.kernel_w, layer.stride_w, layer.padding_w, layer.dilation,
                         pack_taps=layer.pack_taps)
    return ConvLayer(layer.name, height=layer.m, width=1, channels=layer.k,
                     out_channels=layer.n)


def layer_quant(lowered: LoweredProgram, layer: AccelLayer, weights: dict[str, Array]
                ) -> LayerQuant:
    """The layer's epilogue, vectors, padding value and residual add, as conv_program
    takes them."""
    table = None if layer.table is None else constant_vector(lowered, layer.table, weights)
    return LayerQuant(
        EpilogueConfig(layer.pre, layer.post, layer.zero_point, layer.low, layer.high, table),
        constant_vector(lowered, layer.bias, weights),
        constant_vector(lowered, layer.multiplier, weights),
        input_zero_point=layer.pad_value, residual=layer.residual_add,
        # run-time scales: their count says there are some (the values come at run time)
        scale=None if layer.scale is None else (1,) * layer.n)


def program_accel_layers(lowered: LoweredProgram, weights: dict[str, Array],
                         accel: AccelConfig) -> LoweredProgram:
    """Every accelerator layer's commands (weights.bin's table, `<name>_commands`) and the
    figures they give: the last pass, once the layers' shapes are final (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    # Layers of one shape have one command table, timing and traffic (the bias and
    # multiplier vectors are the layer's, not the table's): a network repeats its shapes
    # (ResNet-50: 56 layers, 30 shapes; ResNeXt-50: 552, 31), so each is programmed once.
    programmed: dict[tuple[object, ...], tuple[LayerProgram, Array, AccelTiming,
                                               LayerTraffic]] = {}
    # A concatenation's layers store their rows pitched (`output_pitch`): each pitch is
    # the same schedule with its stores moved, so the schedule is chosen once per shape
    # and kept (commands and all) for the shapes some layer stores pitched.
    keys = {index: _layer_key(result, layer, weights)
            for index, layer in enumerate(result.instructions)
            if isinstance(layer, AccelLayer)}
    pitched_shapes = {key[:-1] for key in keys.values() if key[-1]}
    schedules: dict[tuple[object, ...], tuple[LayerProgram, Array, AccelTiming]] = {}
    for index, key in keys.items():
        layer = result.instructions[index]
        assert isinstance(layer, AccelLayer)
        geometry = layer_geometry(layer)
        if key not in programmed and layer.batch:
            item = replace(geometry, height=layer.m // layer.batch)
            batched = batched_program(accel, item, layer_quant(result, layer, weights),
                                      layer.batch)
            if reordered(layer):  # (store_rows_in_place: its rows stored reordered)
                batched = with_row_order(batched, layer.m, layer.n, layer.row_order,
                                         layer.residual_order)
            program, table, timing = _timed(accel, batched)
            traffic = table_traffic(accel, geometry, program, table, False)
            # every item multiplies by weights of its own (B's batch·K·N bytes), where
            # compulsory_bytes counts one layer's K·N
            item_weights = geometry.channels * geometry.out_channels
            programmed[key] = (replace(program, commands=[]), table, timing, replace(
                traffic, compulsory=traffic.compulsory + (layer.batch - 1) * item_weights))
        if key not in programmed:
            chosen = schedules.get(key[:-1])
            if chosen is None:
                # (a convolution's Command objects only where its loads or stores move)
                chosen = program_layer(accel, geometry, layer_quant(result, layer, weights),
                                       pool=layer.pool, pool_sum=layer.pool_sum,
                                       layout=layer.layout,
                                       commands=bool(layer.input_pitch)
                                       or key[:-1] in pitched_shapes
                                       or reordered(layer))
                if layer.input_pitch:
                    chosen = input_pitched_program(accel, geometry, chosen[0],
                                                   layer.input_pitch,
                                                   layer_quant(result, layer, weights))
                if key[:-1] in pitched_shapes:
                    schedules[key[:-1]] = chosen
            program, table, timing = chosen if not layer.output_pitch else \
                pitched_program(accel, geometry, chosen[0], layer.output_pitch)
            if reordered(layer):
                program, table, timing = _timed(accel, with_row_order(
                    program, layer.m, layer.n, layer.row_order, layer.residual_order))
            traffic = layer_traffic(accel, geometry, program, layer.residual is not None,
                                    layer.pool) if program.commands else \
                table_traffic(accel, geometry, program, table, layer.residual is not None)
            # (its bases; the commands, the bulk, are in the table)
            programmed[key] = replace(program, commands=[]), table, timing, traffic
        program, table, timing, traffic = programmed[key]
        del result.buffers[layer.commands.buffer]  # the placeholder
        result.instructions[index] = replace(
            layer, commands=builder.constant(f"{layer.name}_commands", "i32", table),
            input_base=program.input_base, weight_base=program.weight_base,
            output_base=program.output_base, residual_base=program.residual_base,
            cycles=timing.cycles, load_bytes=timing.load_bytes,
            store_bytes=timing.store_bytes, compute_rows=timing.compute_rows,
            traffic=traffic)
    return result


def _layer_key(lowered: LoweredProgram, layer: AccelLayer, weights: dict[str, Array]
               ) -> tuple[object, ...]:
    """What a layer's commands depend on (the layers of one key share a table), its
    output pitch last. A lookup table and run-time scales are commands of their own (the
    CONFIG chunks that load them, timed): a layer with a table and one without of the same
    shape shared the first one's commands, so ws_accel skipped the second one's table."""
    quant = layer_quant(lowered, layer, weights)
    return (replace(layer_geometry(layer), name=""), layer.pool, layer.pool_sum,
            layer.layout, quant.input_zero_point, quant.residual is not None,
            layer.residual is not None, layer.pool and requantized_pool(quant),
            layer.table is not None, layer.scale is not None,
            layer.input_pitch, layer.row_order, layer.residual_order, layer.batch,
            layer.output_pitch)


def reordered(layer: AccelLayer) -> bool:
    """Does the layer store or read its residual rows in another order (`row_order`)?"""
    return layer.row_order is not None or layer.residual_order is not None


def pitched_program(accel: AccelConfig, layer: ConvLayer, program: LayerProgram, pitch: int
                    ) -> tuple[LayerProgram, Array, AccelTiming]:
    """`program` with its result rows stored `pitch` bytes apart
    (commands.with_output_pitch), packed and timed again (the stores moved)."""
    out_h, out_w = layer.out_size
    try:
        program = with_output_pitch(program, out_h * out_w, layer.out_channels, pitch,
                                    accel.memory.bus_bytes)
    except CapacityError as error:
        raise GlensideError(f"--accel: {error}") from None
    return _timed(accel, program)


def input_pitched_program(accel: AccelConfig, layer: ConvLayer, program: LayerProgram,
                          pitch: int, quant: LayerQuant
                          ) -> tuple[LayerProgram, Array, AccelTiming]:
    """`program` loading its input's pixels `pitch` bytes apart
    (commands.with_input_pitch), packed and timed again (the loads moved). A convolution
    whose chosen schedule loads across pixels (a band of resident rows) takes the im2col
    schedule, whose loads are each pixel's channels."""
    pixels = layer.height * layer.width
    try:
        try:
            program = with_input_pitch(program, pixels, layer.channels, pitch,
                                       accel.memory.bus_bytes)
        except CapacityError:
            if program_is_pool(program):
                raise
            program = with_input_pitch(conv_program(accel, layer, quant, "im2col"), pixels,
                                       layer.channels, pitch, accel.memory.bus_bytes)
    except CapacityError as error:
        raise GlensideError(f"--accel: {error}") from None
    return _timed(accel, program)


def program_is_pool(program: LayerProgram) -> bool:
    """Does the program pool (its stores read windows) rather than multiply?"""
    return any(isinstance(command, Store) and command.window for command in program.commands)


def _timed(accel: AccelConfig, program: LayerProgram
           ) -> tuple[LayerProgram, Array, AccelTiming]:
    table = pack_commands(program.commands)
    native = native_model()
    timing = (native_cycles(native, accel, table, 10**12) if native is not None
              else accel_cycles(accel, program.commands))
    return program, table, timing


def requantized_pool(quant: LayerQuant) -> bool:
    """Does a max-pool's epilogue do more than pass its maxima through (a requantize of
    the pool's result folded into it)?"""
    channels = len(quant.bias)
    return quant != LayerQuant(EpilogueConfig(), (0,) * channels, (1,) * channels)


def program_layer(accel: AccelConfig, layer: ConvLayer, quant: LayerQuant, pool: bool = False,
                  pool_sum: bool = False, layout: NhwcLayout | NchwLayout | None = None,
                  commands: bool = True) -> tuple[LayerProgram, Array, AccelTiming]:
    """The layer's commands (best_conv_table, or pool_program for a max-pool or,
    `pool_sum`, an average pool through `quant`'s epilogue, or layout_program for a
    `layout` change), as the packed table the C reads, and their cycles on ws_accel;
    GlensideError when the layer does not fit the accelerator. Without `commands`, a
    convolution's program has none (its table has them: `table_traffic` counts it)."""
    timing: AccelTiming | None = None
    table: Array | None = None
    try:
        if isinstance(layout, NchwLayout):
            program = nchw_program(accel, layout)
        elif layout is not None:
            program = layout_program(accel, layout)
        elif pool:
            program = pool_program(
                accel, layer, quant if pool_sum or requantized_pool(quant) else None,
                summed=pool_sum)
        else:  # the schedule the exact model prices fastest, its table and timing
            program, table, timing = best_conv_table(accel, layer, quant, commands)
    except CapacityError as error:
        raise GlensideError(f"--accel: {error}") from None
    if table is None:
        table = pack_commands(program.commands)
    if timing is None:
        native = native_model()
        timing = (native_cycles(native, accel, table, 10**12) if native is not None
                  else accel_cycles(accel, program.commands))
    if table.size and (table.min() < -2**31 or table.max() >= 2**31):
        raise GlensideError(f"--accel: layer {layer.name} needs addresses beyond 32 bits")
    return program, table, timing


def zero_padding_mask(lowered: LoweredProgram, name: str, before: int,
                      fills: list[int]) -> Array | None:
    """1 where buffer `name` (flat) holds zero padding (a `Fill` wrote it, or a copy of
    such), 0 where it holds run-time data; the fills go to `fills`. None when the padding
    could not be changed without changing what another instruction reads (a buffer on the
    way that holds padding has other readers) or is not zero padding."""
    buffer = lowered.buffers[name]
    mask = np.zeros(buffer.elements, dtype=np.int64)
    writers = lowered.writers().get(name, [])
    if buffer.kind != ACTIVATION or not writers or max(writers) >= before or not all(
            isinstance(lowered.instructions[index], Fill | Copy) for index in writers):
        return mask  # data
    found: list[int] = []
    for index in writers:
        writer = lowered.instructions[index]
        if isinstance(writer, Fill):
            if writer.minimum or writer.value != 0:
                return None
            store_view(writer.dst, mask, np.ones(writer.dst.shape, np.int64))
            found.append(index)
        else:
            assert isinstance(writer, Copy)
            source = zero_padding_mask(lowered, writer.src.buffer, index, found)
            if source is None:
                return None
            store_view(writer.dst, mask, view_array(writer.src, source))
    # Other readers see the fills' values too; a buffer of data alone (a layer's result
    # copied back to NCHW, which a residual add reads as well) changes for no one.
    if found and len(lowered.readers().get(name, [])) != 1:
        return None
    fills.extend(found)
    return mask


def _pad_with_zero_point(lowered: LoweredProgram, activations: View, index: int,
                         flipped: bool, block: tuple[int, int], layer_bias: Array,
                         layer_weights: Array) -> tuple[list[int], int, list[int]] | None:
    """A bias that differs across the rows of a column only by what zero padding of the
    activations leaves out: B[p, c] = b[c] + zp · Σ_k pad[p, k] · W[k, c] (the quantizer's
    correction −zp·Σ W over the taps inside the image). Padding with zp instead (the
    fills that write it) makes the bias b, per column. Returns (b, zp, those fills)."""
    fills: list[int] = []
    flat = zero_padding_mask(lowered, activations.buffer, index, fills)
    if flat is None or not fills:
        return None
    rows, cols = block
    if flipped:  # the layer's rows are the activation operand's first `cols` columns
        pad = view_array(activations, flat).reshape(-1, activations.shape[-1])[:, :cols].T
    else:
        pad = view_array(activations, flat).reshape(activations.shape[0], -1)[:rows]
    # Σ pad · W, in float64: exact (|sums| ≤ K · 128 < 2^53) and far faster than int64
    padded_weight = np.rint(pad.astype(np.float64) @ layer_weights.astype(np.float64)
                            ).astype(np.int64)
    found = zero_point_bias(layer_bias, padded_weight, lowered.buffer_of(activations).dtype)
    return None if found is None else (found[0], found[1], fills)


def zero_point_bias(layer_bias: Array, padded_weight: Array, dtype: str
                    ) -> tuple[list[int], int] | None:
    """(b, zp) when the layer's bias B (rows × columns) is b[c] + zp · P[p, c], P = Σ of
    the weights over the zero padding each output reads, for one zp in `dtype`'s range."""
    varying = np.flatnonzero(np.any(padded_weight != padded_weight[:1], axis=0))
    if varying.size == 0:
        return None
    column = padded_weight[:, varying[0]]
    other = int(np.flatnonzero(column != column[0])[0])
    step = int(column[other] - column[0])
    difference = int(layer_bias[other, varying[0]] - layer_bias[0, varying[0]])
    if difference % step:
        return None
    zero_point = difference // step
    low, high = integer_range(dtype)
    if not low <= zero_point <= high:
        return None
    corrected = wrap_signed(layer_bias - zero_point * padded_weight, 32)
    vector = per_column(corrected)
    return None if vector is None else (vector, zero_point)


def _im2col_geometry(lowered: LoweredProgram, gemm: ArrayGemm, operand: str = "b",
                     pixels: int | None = None) -> tuple[ConvLayer, View] | None:
    """When the call's B operand is the im2col matrix of a square convolution — one copy
    of the windows (channel, ky, kx) × (oy, ox) of a padded (1, C, H, W) map, read only
    by the call, K = C·k·k exactly — the layer (no padding left: the map is padded) and a
    (C, H, W) view of the map; else None. With `operand` "a", the same for an A operand
    holding the windows' transpose, (oy, ox) × (channel, ky, kx). `pixels`: the output
    positions the chain uses, the first of the operand's (default: all of them; fewer
    when the lowering padded them to the array's columns)."""
    view = gemm.b if operand == "b" else gemm.a
    every = gemm.n if operand == "b" else gemm.m
    pixels = every if pixels is None else pixels
    packer = _only_writer(lowered, view)
    copy = None if packer is None else lowered.instructions[packer]
    if not isinstance(copy, Copy):
        if not lowered.is_whole(view):
            return None
        # no packing copy: the windows' copy and the K padding's fills write the operand
        # itself (a first convolution without padding, its map the program's input)
        return _padded_im2col(lowered, gemm, Copy("", view, view), operand, pixels)
    padded = _padded_im2col(lowered, gemm, copy, operand, pixels)
    if padded is not None or pixels != every:
        return padded
    source = copy.src
    buffer = lowered.buffer_of(source)
    shape = buffer.shape[1:] if len(buffer.shape) == 4 and buffer.shape[0] == 1 \
        else buffer.shape
    if len(shape) != 3 or source.offset != 0 or len(source.dims) != 2 or \
            copy.dst.shape != ((gemm.k, pixels) if operand == "b" else (pixels, gemm.k)):
        return None
    k_dims, p_dims = source.dims if operand == "b" else source.dims[::-1]
    channels, height, width = shape
    if gemm.k % channels:
        return None
    kernel = math.isqrt(gemm.k // channels)
    expected_k = canonical([Axis(channels, height * width), Axis(kernel, width),
                            Axis(kernel, 1)])
    for stride in range(1, kernel + 2) if channels * kernel * kernel == gemm.k else ():
        out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        expected_p = canonical([Axis(out_h, stride * width), Axis(out_w, stride)])
        if out_h * out_w == pixels and canonical(k_dims) == expected_k and \
                canonical(p_dims) == expected_p:
            layer = ConvLayer("", height, width, channels, 0, kernel, stride)
            return layer, contiguous(source.buffer, (channels, height, width))
    # not a k×k window at one stride over the whole map: what each element of the
    # matrix reads, (channel, ky, kx) × (oy, ox), tells any other window
    reads = view_array(source, np.arange(buffer.elements)).reshape(
        (gemm.k, pixels) if operand == "b" else (pixels, gemm.k))
    return _window_of(reads if operand == "b" else reads.T, source.buffer,
                      (channels, height, width))


def _window_of(reads: Array, name: str, shape: tuple[int, int, int]
               ) -> tuple[ConvLayer, View] | None:
    """The convolution whose im2col matrix (K ordered (channel, ky, kx), by output
    pixel) reads the elements `reads` (flat indices) of buffer `name`, a (C, H, W) map
    padded already: a kh×kw window with a stride per axis and dilated taps, from the
    map's first pixel; the layer over the part of the map its windows reach (the
    importer pads a dilated map d − 1 pixels further than its taps read), and a view of
    that part. None when `reads` is not such a matrix."""
    channels, height, width = shape
    taps, pixels = reads.shape[0] // channels, reads.shape[1]
    y, x = np.divmod(reads % (height * width), width)
    if reads[0, 0] != 0 or taps * channels != reads.shape[0]:
        return None
    # the first channel's taps at the first pixel: rows of kw taps, kh rows
    kernel_w = int(np.argmax(y[:taps, 0] != y[0, 0])) or taps
    kernel_h = taps // kernel_w
    # the first tap at each pixel: lines of out_w pixels
    out_w = int(np.argmax(y[0] != y[0, 0])) or pixels
    out_h = pixels // out_w
    if kernel_h * kernel_w != taps or out_h * out_w != pixels:
        return None
    dilation = (int(y[kernel_w, 0]) if kernel_h > 1 else 1,
                int(x[1, 0]) if kernel_w > 1 else 1)
    stride_h = int(y[0, out_w]) if out_h > 1 else 1
    stride_w = int(x[0, 1]) if out_w > 1 else 1
    if min(*dilation, stride_h, stride_w) < 1:
        return None
    layer = ConvLayer("", height, width, channels, 0, kernel_h, stride_h, kernel_w=kernel_w,
                      stride_w=stride_w, dilation=dilation)
    if layer.out_size != (out_h, out_w):  # the map reaches further than the windows
        span_h, span_w = layer.span_hw
        layer = replace(layer, height=(out_h - 1) * stride_h + span_h,
                        width=(out_w - 1) * stride_w + span_w)
        if layer.height > height or layer.width > width:
            return None
    maps = (np.arange(height * width).reshape(height, width)[:layer.height, :layer.width]
            + height * width * np.arange(channels)[:, None, None])
    if not np.array_equal(reads, map_windows_kp(maps, layer)):
        return None
    return layer, crop_map(contiguous(name, shape), layer.height, layer.width)


def crop_map(view: View, height: int, width: int) -> View:
    """The first `height` rows and `width` columns of a (C, H, W) view."""
    rows = slice_view(view, 1, 0, height)
    part = None if rows is None else slice_view(rows, 2, 0, width)
    assert part is not None, "a contiguous map's corner is a view"
    return part


def _matrix_origin(lowered: LoweredProgram, name: str, depth: int = 0
                   ) -> tuple[str, Array] | None:
    """(map, origin) when buffer `name` — an activation matrix one reader reads — is
    written by one copy and zero fills, the copy reading a (1, C, H, W) or (C, H, W) map,
    or such a matrix again (the lowering pads an im2col matrix once per axis: K to the
    array's rows, the pixels to its columns): per element the map element it holds, or
    -1 (a fill)."""
    copy = _matrix_copy(lowered, name, depth)
    if copy is None:
        return None
    source = lowered.buffer_of(copy.src)
    if _map_shape(source) is not None:
        map_name, source_origin = copy.src.buffer, np.arange(source.elements)
    else:
        inner = _matrix_origin(lowered, copy.src.buffer, depth + 1)
        if inner is None:
            return None
        map_name, source_origin = inner
    origin = np.full(lowered.buffers[name].elements, -1, dtype=np.int64)  # -1: a zero fill
    store_view(copy.dst, origin, view_array(copy.src, source_origin))
    return map_name, origin


def _matrix_map(lowered: LoweredProgram, name: str, depth: int = 0) -> str | None:
    """The map `_matrix_origin` gives for buffer `name` (None where it gives None),
    without the element maps."""
    copy = _matrix_copy(lowered, name, depth)
    if copy is None:
        return None
    if _map_shape(lowered.buffer_of(copy.src)) is not None:
        return copy.src.buffer
    return _matrix_map(lowered, copy.src.buffer, depth + 1)


def _matrix_copy(lowered: LoweredProgram, name: str, depth: int) -> Copy | None:
    """The one copy writing buffer `name` when `_matrix_origin` follows it: the rest of
    its writers zero fills, one reader, and the copy reading a map or (an activation)
    a matrix."""
    matrix = lowered.buffers[name]
    writers = [lowered.instructions[index] for index in lowered.writers().get(name, [])]
    copies = [writer for writer in writers if isinstance(writer, Copy)]
    if matrix.kind != ACTIVATION or len(copies) != 1 or depth > 4 or \
            len(lowered.readers().get(name, [])) != 1 or not all(
            isinstance(writer, Fill) and not writer.minimum
            for writer in writers if writer is not copies[0]):
        return None
    source = lowered.buffer_of(copies[0].src)
    if _map_shape(source) is None and \
            not (len(source.shape) == 2 and source.kind == ACTIVATION):
        return None
    return copies[0]


def _map_shape(buffer: Buffer) -> tuple[int, ...] | None:
    """A (1, C, H, W) or (C, H, W) buffer's (C, H, W), else None."""
    shape = buffer.shape[1:] if len(buffer.shape) == 4 and buffer.shape[0] == 1 \
        else buffer.shape
    return shape if len(shape) == 3 else None


def _padded_im2col(lowered: LoweredProgram, gemm: ArrayGemm, packer: Copy, operand: str,
                   pixels: int) -> tuple[ConvLayer, View] | None:
    """The same for an im2col matrix the lowering padded to the array: K (a first
    convolution's few channels: K = C·k·k < gemm.k) or the pixels (`pixels` of the
    operand's used, the rest sliced away), one fill-and-copy per padded axis after the
    copy of the windows. Evaluated element by element: what each element of the operand
    holds, a map element's index or padding. The layer reads the first C·k·k rows of K
    (the caller checks that the weights' rows past them are zero: the fill, zero or the
    zero point, adds nothing) and the first `pixels` positions."""
    map_name = _matrix_map(lowered, packer.src.buffer)
    if map_name is None:
        return None
    source = lowered.buffers[map_name]
    shape = _map_shape(source)
    assert shape is not None
    channels, height, width = shape
    # (a window that gives `pixels` positions first: the element maps only for one)
    if not any(((height - kernel) // stride + 1) * ((width - kernel) // stride + 1) == pixels
               for kernel in range(2, math.isqrt(gemm.k // channels) + 1)
               if channels * kernel * kernel <= gemm.k for stride in range(1, kernel + 2)):
        return None
    found = _matrix_origin(lowered, packer.src.buffer)
    assert found is not None and found[0] == map_name
    origin = found[1]
    every = gemm.n if operand == "b" else gemm.m
    operand_origin = np.full(gemm.k * every, -2, np.int64)
    store_view(packer.dst, operand_origin, view_array(packer.src, origin))
    by_k = operand_origin.reshape(gemm.k, every) if operand == "b" else \
        operand_origin.reshape(every, gemm.k).T
    by_k = by_k[:, :pixels]
    maps = np.arange(source.elements).reshape(channels, height, width)
    for kernel in range(2, math.isqrt(gemm.k // channels) + 1):
        taps = channels * kernel * kernel
        if taps > gemm.k or np.any(by_k[taps:] != -1):
            continue  # the rows past the taps must be the lowering's zero padding
        for stride in range(1, kernel + 2):
            out_h, out_w = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            # (channel, ky, kx) × (oy, ox), as conv2d_nchw's im2col orders them
            if out_h * out_w == pixels and np.array_equal(
                    by_k[:taps], map_windows_kp(maps, ConvLayer("", height, width, channels,
                                                                0, kernel, stride))):
                layer = ConvLayer("", height, width, channels, 0, kernel, stride)
                return layer, contiguous(map_name, (channels, height, width))
    return None


def map_windows_kp(maps: Array, layer: ConvLayer) -> Array:
    """The im2col matrix of a (C, H, W) array, unpadded, for `layer`'s window (its
    kernel, strides and dilation; its padding is not read): (C·kh·kw, OH·OW), K ordered
    (channel, ky, kx)."""
    channels, height, width = maps.shape
    layer = replace(layer, height=height, width=width, padding=0, padding_w=None)
    (kernel_h, kernel_w), (stride_h, stride_w) = layer.kernel_hw, layer.stride_hw
    (out_h, out_w), (dy, dx) = layer.out_size, layer.dilation
    y = (dy * np.arange(kernel_h)[:, None, None, None]
         + stride_h * np.arange(out_h)[None, None, :, None])
    x = (dx * np.arange(kernel_w)[None, :, None, None]
         + stride_w * np.arange(out_w)[None, None, None, :])
    gathered: Array = maps[:, y, x]  # (C, kh, kw, OH, OW)
    return gathered.reshape(channels * kernel_h * kernel_w, out_h * out_w)


def _only_writer(lowered: LoweredProgram, view: View) -> int | None:
    """The copy that alone writes `view`'s whole buffer, which only the call reads."""
    writers = lowered.writers().get(view.buffer, [])
    readers = lowered.readers().get(view.buffer, [])
    if len(writers) != 1 or len(readers) != 1:
        return None
    writer = lowered.instructions[writers[0]]
    buffer = lowered.buffer_of(view)
    if not isinstance(writer, Copy) or buffer.kind != ACTIVATION or buffer.kind == OUTPUT:
        return None
    return writers[0] if _whole(writer.dst, lowered, buffer.elements) else None


def accel_layer_lines(lowered: LoweredProgram, config: ArrayConfig) -> Iterator[str]:
    """--stats: per accelerator layer its cycles, how busy the array was, the bytes moved;
    then the program's total with the host's share (the report's host model)."""
    from glensidec.backend.report import layout_text, machine_cycles

    layers = lowered.accel_layers()
    yield (f"accelerator layers: {len(layers)} (cycles = ws_accel's, DMA and epilogue "
           "included; array = cycles a row entered the array; wait = the rest)")
    for layer in layers:
        if layer.pool:  # no product: no T_min, no array rows
            kind = "average pool (window sums)" if layer.pool_sum else "max-pool"
            yield (f"  {layer.name}: {kind} {layer.kernel}x{layer.kernel} stride "
                   f"{layer.stride} to M={layer.m} N={layer.n}: {layer.cycles} cycles, "
                   f"{traffic_text(layer)}")
            continue
        if layer.layout is not None:  # no product either
            yield (f"  {layer.name}: {layout_text(layer.layout)}: {layer.cycles} cycles "
                   f"(array {layer.compute_rows}), {traffic_text(layer)}")
            continue
        ideal = ideal_cycles(config, layer.m, layer.k, layer.n)
        utilization = layer.m * layer.k * layer.n / (config.rows * config.cols * layer.cycles)
        yield (f"  {layer.name}: M={layer.m} K={layer.k} N={layer.n}: {layer.cycles} "
               f"cycles (T_min {ideal}, array {layer.compute_rows}, wait "
               f"{layer.cycles - layer.compute_rows}), {traffic_text(layer)}, "
               f"utilization {utilization:.0%}")
    yield total_traffic_line(layers)
    yield machine_cycles(lowered, config).line()
    yield (f"host data movement (in the host's cycles): {host_data_movement(lowered)} elements "
           "copied or filled (padding, im2col matrices, layout)")
    yield from host_reason_lines(lowered)


def host_reason_lines(lowered: LoweredProgram) -> Iterator[str]:
    """--stats: the host's cycles by why the accelerator does not take the work (the
    report says it per instruction), most cycles first."""
    from glensidec.backend.host_reasons import host_reason
    from glensidec.backend.report import host_cycles

    writers = lowered.writers()
    cycles: dict[str, list[int]] = {}
    for instruction in lowered.instructions:
        if cost := host_cycles(instruction):
            cycles.setdefault(host_reason(instruction, lowered, writers), []).append(cost)
    if cycles:
        yield "host work by why it stays on the host (instructions, cycles):"
    for reason, costs in sorted(cycles.items(), key=lambda item: (-sum(item[1]), item[0])):
        count = f"{len(costs)} instruction" + ("s" if len(costs) != 1 else "")
        yield f"  {count}, {sum(costs)} cycles: {reason}"


def host_data_movement(lowered: LoweredProgram) -> int:
    """Elements the host's copies and fills write (padding, im2col matrices, transposes);
    the host model prices each (glensidec.hardware.host.HOST_MOVE)."""
    return sum(math.prod(instruction.dst.shape) for instruction in lowered.instructions
               if isinstance(instruction, Copy | Fill))


def traffic_text(layer: AccelLayer) -> str:
    """A layer's DRAM traffic as --stats prints it: bytes loaded (by tensor) and stored,
    the compulsory bytes and the ratio."""
    traffic = layer.traffic
    if traffic is None:  # not programmed yet
        return f"{layer.load_bytes} B loaded, {layer.store_bytes} B stored"
    parts = [f"input {traffic.input_loaded}"]
    if traffic.weights_loaded or not layer.pool:
        parts.append(f"weights {traffic.weights_loaded}")
    if traffic.residual_loaded:
        parts.append(f"residual {traffic.residual_loaded}")
    return (f"{traffic.loaded} B loaded ({', '.join(parts)}), {traffic.stored} B stored, "
            f"{traffic.ratio:.1f}x the compulsory {traffic.compulsory} B")


def total_traffic_line(layers: Sequence[AccelLayer]) -> str:
    """The layers' DRAM traffic together against their compulsory bytes."""
    traffics = [layer.traffic for layer in layers if layer.traffic is not None]
    loaded = sum(traffic.loaded for traffic in traffics)
    stored = sum(traffic.stored for traffic in traffics)
    compulsory = sum(traffic.compulsory for traffic in traffics)
    ratio = (loaded + stored) / compulsory if compulsory else 0.0
    return (f"DRAM traffic of the layers: {loaded} B loaded + {stored} B stored = "
            f"{ratio:.2f}x the compulsory {compulsory} B (each weight, input, residual and "
            "output once)")
