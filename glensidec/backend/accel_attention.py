"""Attention's products on the accelerator: matrix products of two activations.

A transformer's attention multiplies activations by activations: per head, the scores
Q·Kᵀ and the context softmax(·)·V. As lowered for the array, each is an `ArrayGemm` whose
operands the host packs at run time: the head's rows padded to the array (fills and
copies), K's rows transposed into Kᵀ. `accel_layers` leaves such a call alone (it has no
constant operand to hold in the array); this pass (`compile`, after `accel_layers`) makes
it an accelerator layer all the same. The array's stationary operand need not be known at
compile time: the DMA loads it from main memory like any weights, so B becomes the
layer's weights, read where its producer wrote it.

For each int8 array call of two activations whose result the epilogue can take (the
requantize after it, per tensor or per column: `accel_layers.follow_chain`), the pass
evaluates, element by element, what each operand holds (`trace_source`: an element of
the buffer the packing copies read, or a fill's value) and finds

  * A's rows: the leading K′ columns of the block the chain uses are a contiguous run of
    one buffer, row-major (M × K′); the columns past K′ (the lowering's padding) are zero
    fills, or the rows of B they meet are;
  * B: its leading K′ × N block is a contiguous run of one buffer, row-major (the layer
    reads it as weights), or the transpose of one (N × K′ rows, as attention's K is
    written): then a layout layer on the accelerator (`hardware.layout.NchwLayout`: rows
    into columns) writes Bᵀ's rows first, so no host copy makes the operand.

The call, its requantize and clips become one `AccelLayer` of M × K′ × N (per head: each
head's product is a call of its own, so each head is its own accelerator work), priced
by its commands like every layer; the packing copies and fills, now unread, go. Softmax,
LayerNormalization and GELU stay on the host (the report lists them as host rows).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from itertools import pairwise

import numpy as np

from glensidec.backend.accel_boundary import nchw_layer
from glensidec.backend.accel_layers import (
    LayerBuilder,
    _Chain,
    _fusable,
    _known,
    check_fits,
    drop_dead_code,
    follow_chain,
    per_column,
)
from glensidec.backend.accel_pool import PADDING, trace_writers
from glensidec.backend.lower import (
    ACTIVATION,
    OUTPUT,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Copy,
    Fill,
    Instruction,
    LoweredProgram,
)
from glensidec.backend.views import Axis, View, contiguous, element_range, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.accel import CapacityError, ConvLayer, EpilogueConfig, ResidualConfig
from glensidec.hardware.commands import AccelConfig, LayerQuant
from glensidec.hardware.layout import NchwLayout, nchw_channels
from glensidec.lang.dtypes import Array


def fuse_activation_products(lowered: LoweredProgram, weights: dict[str, Array],
                             accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every int8 array call of two activations whose operands are runs of
    buffers (or a transposed run, for B) and whose epilogue fits as an accelerator layer
    (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    # Every match is found in the program as it was (products' chains are disjoint) and
    # the edits applied at once: editing the list per match recomputed who reads what.
    edits: dict[int, list[Instruction]] = {}
    readers = result.readers()
    for index, gemm in enumerate(lowered.instructions):
        if isinstance(gemm, ArrayGemm) and _fusable(result, gemm, accel) and \
                _known(result, gemm.b, weights, index, (gemm.k, gemm.n)) is None and \
                _known(result, gemm.a, weights, index, (gemm.m, gemm.k)) is None:
            chain = follow_chain(result, index, gemm.dst, (gemm.m, gemm.n), weights, readers)
            layer = None if chain is None else _product_layer(result, builder, index, chain,
                                                              accel)
            if layer is not None:
                assert chain is not None
                edits.update({position: [] for position in chain.indices})
                edits[index] = layer
    apply_edits(result, edits)
    drop_dead_code(result)
    return result


def apply_edits(lowered: LoweredProgram, edits: dict[int, list[Instruction]]) -> None:
    """Replace each instruction at a position `edits` names by its list (maybe empty)."""
    if edits:
        lowered.instructions = [new for position, instruction
                                in enumerate(lowered.instructions)
                                for new in edits.get(position, [instruction])]


def trace_source(lowered: LoweredProgram, name: str, before: int, depth: int = 0
                 ) -> tuple[str, np.ndarray, np.ndarray] | None:
    """(source, origin, fill) for buffer `name` as it is before instruction `before`:
    following fills and copies back to one int8 buffer that something else wrote (the
    source), per element (flat) `origin` is the index of the source element it holds, or
    PADDING where a fill wrote it, and `fill` the value written there; None when the
    copies lead to several buffers, to an input or to a buffer still written later."""
    writers = lowered.writers().get(name, [])
    buffer = lowered.buffers[name]
    if not writers or max(writers) >= before or depth > 8 or buffer.kind != ACTIVATION:
        return None
    if all(isinstance(lowered.instructions[index], Fill | Copy) for index in writers):
        return trace_writers(lowered, name, writers, depth, trace_source)
    if buffer.dtype != "i8":
        return None
    return name, *_identity(buffer.elements)


@lru_cache(maxsize=8)
def _identity(elements: int) -> tuple[np.ndarray, np.ndarray]:
    """(origin, fill) of a buffer that is its own source: each element itself, no fill;
    read-only, made once per size (a swin_t's 3,648 operands trace back to a few
    projections' results, each as large as its whole projection)."""
    origin, fill = np.arange(elements), np.zeros(elements, np.int64)
    origin.flags.writeable = fill.flags.writeable = False
    return origin, fill


def _run(origin: Array) -> int | None:
    """The first element when `origin` (a matrix) is one contiguous run, row-major."""
    first = int(origin.flat[0])
    expected = first + np.arange(origin.size).reshape(origin.shape)
    return first if first >= 0 and np.array_equal(origin, expected) else None


def _product_layer(lowered: LoweredProgram, builder: LayerBuilder, index: int,
                   chain: _Chain, accel: AccelConfig,
                   rows_mode: RowsMode | None = None) -> list[Instruction] | None:
    """The layer that replaces the call at `index` and its chain (after a layout layer
    making B's rows, when B is a transposed run); None when the operands are not such
    runs. With `rows_mode`, the layer's epilogue runs in the per-row mode: the residual
    rows `rows_mode.values` the instructions `rows_mode.packing` write first."""
    gemm = lowered.instructions[index]
    assert isinstance(gemm, ArrayGemm)
    if chain.transposed or chain.skip is not None:
        return None
    rows, cols = chain.rows, chain.cols
    traced_a = trace_source(lowered, gemm.a.buffer, index)
    traced_b = trace_source(lowered, gemm.b.buffer, index)
    if traced_a is None or traced_b is None:
        return None
    a_origin = view_array(gemm.a, traced_a[1]).reshape(gemm.m, gemm.k)[:rows]
    a_fill = view_array(gemm.a, traced_a[2]).reshape(gemm.m, gemm.k)[:rows]
    b_origin = view_array(gemm.b, traced_b[1]).reshape(gemm.k, gemm.n)[:, :cols]
    b_fill = view_array(gemm.b, traced_b[2]).reshape(gemm.k, gemm.n)[:, :cols]
    data = np.all(a_origin >= 0, axis=0)
    depth = int(np.argmin(data)) if not data.all() else gemm.k  # K′: A's leading data
    past_a = (a_origin[:, depth:] == PADDING) & (a_fill[:, depth:] == 0)
    past_b = (b_origin[depth:] == PADDING) & (b_fill[depth:] == 0)
    if depth == 0 or not np.all(past_a.all(axis=0) | past_b.all(axis=1)):
        return None  # a product past K′ might not vanish
    a_first = _run(a_origin[:, :depth])
    b_block = b_origin[:depth]
    b_first = _run(b_block)
    b_transposed_first = None if b_first is not None else _run(b_block.T)
    if a_first is None or (b_first is None and b_transposed_first is None):
        return None
    bias = np.zeros((rows, cols), np.int64) if chain.bias is None else chain.bias
    bias_vector, multiplier_vector = per_column(bias), per_column(chain.multiplier)
    if bias_vector is None or multiplier_vector is None:
        return None
    epilogue = EpilogueConfig(chain.pre, chain.post, chain.zero_point, chain.low, chain.high)
    if not _fits(accel, rows, depth, cols, epilogue,
                 None if rows_mode is None else rows_mode.config):
        return None  # too big for the memories: the call stays on the array
    name = chain.dst.buffer
    before: list[Instruction] = []
    if b_first is not None:
        b_view = contiguous(traced_b[0], (depth, cols), b_first)
    else:  # B's rows are the transpose of a run of N × K′: a layout layer writes them
        assert b_transposed_first is not None
        layout = NchwLayout(pixels=cols, channels=depth)
        try:
            nchw_channels(layout, accel)
        except CapacityError:
            return None
        b_view = builder.activation(f"{name}_rhs", (depth, cols))
        before.append(nchw_layer(builder, f"{gemm.note}: the operand's rows transposed, "
                                 "laid out by the accelerator", b_view,
                                 contiguous(traced_b[0], (cols * depth,), b_transposed_first),
                                 layout, accel))
    layer = AccelLayer(
        lowered.instructions[chain.indices[-1]].note, chain.dst, name=name,
        a=contiguous(traced_a[0], (rows, depth), a_first), b=b_view,
        bias=builder.constant(f"{name}_bias", "i32", np.array(bias_vector, np.int64)),
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(multiplier_vector, np.int64)),
        commands=builder.commands_placeholder(name), m=rows, k=depth, n=cols,
        pre=chain.pre, post=chain.post, zero_point=chain.zero_point, low=chain.low,
        high=chain.high)
    if rows_mode is not None:
        layer = replace(layer, residual=rows_mode.values, residual_add=rows_mode.config)
        before = [*rows_mode.packing, *before]
    return [*before, layer]


@lru_cache(maxsize=256)
def _fits(accel: AccelConfig, rows: int, depth: int, cols: int, epilogue: EpilogueConfig,
          residual: ResidualConfig | None) -> bool:
    """Whether a product layer of M = rows, K = depth, N = cols with this epilogue and
    residual add fits the memories and the epilogue's arithmetic (`check_fits`, which reads
    no more of the layer): asked once per shape (a swin_t's 1,824 products have a few)."""
    quant = LayerQuant(epilogue, (0,) * cols, (1,) * cols, residual=residual)
    try:
        check_fits(accel, ConvLayer("", height=rows, width=1, channels=depth,
                                    out_channels=cols), quant)
    except GlensideError:
        return False
    return True


@dataclass(frozen=True)
class RowsMode:
    """A product layer's per-row mode (`accel_softmax`): its residual rows (each row's
    values at the start of every N block) and the host instructions that pack them."""

    values: View
    config: ResidualConfig
    packing: tuple[Instruction, ...]



# -- projections split per head ----------------------------------------------------------


def split_head_projections(lowered: LoweredProgram, weights: dict[str, Array],
                           accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every int8 array call of constant weights whose result several
    chains read, each its own block of columns (attention's Q, K and V projections: one
    requantize per head), as one call per block with those columns of the weights (a new
    program). Each then has one reader, so `accel_layers` makes each its own layer, whose
    rows the head's products read (a call of one reader, or of readers that overlap or read
    across blocks, stays as it is)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    edits: dict[int, list[Instruction]] = {}
    for index, gemm in enumerate(lowered.instructions):
        if isinstance(gemm, ArrayGemm) and _fusable(result, gemm, accel):
            edits.update(_split(result, builder, index, weights))
    apply_edits(result, edits)
    return result


def _column_block(view: View, m: int, n: int) -> tuple[int, int] | None:
    """The columns [first, stop) of an M×N buffer that `view` reads."""
    axes = view.axes()
    if any(axis.size == 0 for axis in axes):
        return None
    # An element's column is (offset + Σ index·stride) mod N: only the axes whose stride
    # is not a whole number of rows move it (indexing the whole buffer to find the
    # columns took most of this pass on a swin_t, 2,800 calls).
    columns = np.array([view.offset % n])
    for axis in axes:
        if axis.stride % n:
            steps = np.arange(axis.size) * (axis.stride % n)
            columns = np.unique((columns[:, None] + steps[None, :]) % n)
    return int(columns.min()), int(columns.max()) + 1


def _narrowed(view: View, n: int, first: int, width: int) -> View | None:
    """`view` of an M×N buffer that reads only columns [first, first + width), as the same
    view of the M × width buffer holding those columns; None when it is not affine."""
    row, column = divmod(view.offset, n)
    dims = []
    for group in view.dims:
        axes = []
        for axis in group:
            rows, columns = divmod(axis.stride, n)
            if columns and rows:
                return None  # a step across rows and columns at once
            axes.append(Axis(axis.size, rows * width + columns))
        dims.append(tuple(axes))
    return View(view.buffer, row * width + column - first, tuple(dims))


def _split(lowered: LoweredProgram, builder: LayerBuilder, index: int,
           weights: dict[str, Array]) -> dict[int, list[Instruction]]:
    """The edits that split the call at `index` per column block its readers read: the
    calls in its place, its readers reading theirs (none: it stays)."""
    gemm = lowered.instructions[index]
    assert isinstance(gemm, ArrayGemm)
    result = gemm.dst.buffer
    readers = lowered.readers().get(result, [])
    if len(readers) < 2 or result == lowered.output or \
            lowered.writers().get(result) != [index] or not lowered.is_whole(gemm.dst):
        return {}
    b_values = _known(lowered, gemm.b, weights, index, (gemm.k, gemm.n))
    if b_values is None:
        return {}
    blocks: dict[int, tuple[int, int]] = {}
    for reader in readers:
        views = [view for view in lowered.instructions[reader].reads()
                 if view.buffer == result]
        found = {_column_block(view, gemm.m, gemm.n) for view in views}
        if len(found) != 1 or None in found:
            return {}
        block = found.pop()
        assert block is not None
        blocks[reader] = block
    ordered = sorted(set(blocks.values()))
    if len(ordered) != len(readers) or any(
            stop > start for (_, stop), (start, _) in pairwise(ordered)):
        return {}  # two readers of one block, or overlapping blocks
    pieces: dict[tuple[int, int], ArrayGemm] = {}
    for first, stop in ordered:
        name = builder.name(f"{result}_columns_{first}")
        lowered.buffers[name] = Buffer(name, "i32", (gemm.m, stop - first), ACTIVATION)
        pieces[(first, stop)] = replace(
            gemm, dst=contiguous(name, (gemm.m, stop - first)), n=stop - first,
            b=builder.constant(f"{name}_weights", "i8", b_values[:, first:stop]))
    edits: dict[int, Instruction] = {}
    for reader, (first, stop) in blocks.items():
        instruction = lowered.instructions[reader]
        target = pieces[(first, stop)].dst.buffer
        moved = _with_reads(instruction, result, target, gemm.m, gemm.n, first, stop - first)
        if moved is None:
            for name in {piece.dst.buffer for piece in pieces.values()} | \
                    {piece.b.buffer for piece in pieces.values()}:
                del lowered.buffers[name]
            return {}
        edits[reader] = moved
    return {**{reader: [moved] for reader, moved in edits.items()},
            index: list(pieces.values())}


def _with_reads(instruction: Instruction, old: str, new: str, m: int, n: int, first: int,
                width: int) -> Instruction | None:
    """`instruction` reading buffer `new` (M × width: columns [first, first + width) of
    the M×N buffer `old`) where it read `old`; None when a view does not carry over."""
    changes: dict[str, object] = {}
    for item in fields(instruction):
        value = getattr(instruction, item.name)
        if item.name == "dst":
            continue
        if isinstance(value, View) and value.buffer == old:
            moved = _moved(value, new, m, n, first, width)
            if moved is None:
                return None
            changes[item.name] = moved
        elif isinstance(value, tuple) and any(
                isinstance(view, View) and view.buffer == old for view in value):
            members = []
            for view in value:
                moved = _moved(view, new, m, n, first, width) \
                    if isinstance(view, View) and view.buffer == old else view
                if moved is None:
                    return None
                members.append(moved)
            changes[item.name] = tuple(members)
    return replace(instruction, **changes)  # type: ignore[arg-type]


def _moved(view: View, new: str, m: int, n: int, first: int, width: int) -> View | None:
    """`view` of the M×N buffer as the same elements of `new` (its columns [first, first
    + width)), checked element by element."""
    narrowed = _narrowed(view, n, first, width)
    if narrowed is None:
        return None
    indices = view_array(view, np.arange(m * n))
    expected = (indices // n) * width + indices % n - first
    moved = View(new, narrowed.offset, narrowed.dims)
    if narrowed.offset < 0 or not np.array_equal(view_array(moved, np.arange(m * width)),
                                                 expected):
        return None
    return moved


# -- results written in place --------------------------------------------------------


def write_in_place(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with the instructions (layers, or the host's computations) whose result
    only a copy reads, whole and in order, into a contiguous run of a buffer that only
    copies write (a concatenation: attention's heads stacked, the importer's nested
    concatenations of them) writing that run themselves (a new program). The copy goes;
    nothing between the first such writer and the copy reads the buffer, and nothing else
    writes that run, so writing it earlier changes nothing."""
    result = lowered.copy()
    # Decided on the program as it is (who reads and writes what, computed once); a nested
    # concatenation's writers move on with each copy of theirs that goes.
    placed: dict[int, tuple[str, int]] = {}  # a moved writer's position → buffer, offset
    moved_into: dict[str, list[int]] = {}  # a buffer → the moved writers that write it
    gone: set[int] = set()
    for index, copy in enumerate(result.instructions):
        if not isinstance(copy, Copy):
            continue
        writers_now = _coalescing_writers(result, index, copy, gone, moved_into)
        if writers_now is None:
            continue
        gone.add(index)
        for position in writers_now:
            writer = result.instructions[position]
            offset = placed[position][1] if position in placed else writer.dst.offset
            placed[position] = copy.dst.buffer, copy.dst.offset + offset
            moved_into.setdefault(copy.dst.buffer, []).append(position)
    edits: dict[int, list[Instruction]] = {position: [] for position in gone}
    for position, (buffer, offset) in placed.items():
        writer = result.instructions[position]
        edits[position] = [replace(writer, dst=View(buffer, offset, writer.dst.dims))]
    apply_edits(result, edits)
    drop_dead_code(result)
    return result


def _coalescing_writers(lowered: LoweredProgram, index: int, copy: Copy, gone: set[int],
                       moved_into: dict[str, list[int]]) -> list[int] | None:
    """The positions of the instructions that (after the copies in `gone`) alone write the
    copy's source, read only by the copy, whole and in order, when they can write the
    copy's contiguous destination run instead (none of them a copy or a fill: those
    stay, as do writers of a buffer the copy does not alone read); else None."""
    source, target = lowered.buffer_of(copy.src), lowered.buffer_of(copy.dst)
    if source.kind != ACTIVATION or target.kind not in (ACTIVATION, OUTPUT) or \
            source.dtype != target.dtype or source.name == target.name or \
            lowered.readers().get(source.name) != [index] or \
            not lowered.is_whole(copy.src) or not copy.dst.is_row_major():
        return None
    writers_now = list(moved_into.get(source.name, []))
    for position in lowered.writers().get(source.name, []):
        if not isinstance(lowered.instructions[position], Copy | Fill):
            writers_now.append(position)
        elif position not in gone:
            return None
    if not writers_now or not all(isinstance(lowered.instructions[position], Copy | AccelLayer)
                             for position in lowered.writers().get(target.name, [])):
        return None  # not a concatenation
    return writers_now if _untouched_between(lowered, min(writers_now), index, copy.dst) else None


def _untouched_between(lowered: LoweredProgram, first: int, last: int, run: View) -> bool:
    """Does no instruction from `first` to before `last` read `run`'s buffer, and no
    instruction but the one at `last` write an element of `run` (a concatenation's parts
    are disjoint; so moving its writes earlier keeps every element's last writer)?"""
    buffer = lowered.buffer_of(run)
    start, stop = run.offset, run.offset + int(np.prod(run.shape))
    if any(first <= position < last for position in lowered.readers().get(run.buffer, [])):
        return False
    elements = None
    for position in lowered.writers().get(run.buffer, []):
        dst = lowered.instructions[position].dst
        low, high = element_range(dst)
        if position == last or high < start or low >= stop:
            continue  # (a concatenation's other parts: nothing in common; no walk needed)
        elements = np.arange(buffer.elements) if elements is None else elements
        written = view_array(dst, elements)
        if np.any((written >= start) & (written < stop)):
            return False
    return True
