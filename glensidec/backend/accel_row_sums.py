"""LayerNorm's row sums Σq and Σq² on the array.

The quantizer's LayerNorm of an int8 tensor q (`frontends/quant_layer_norm.py`) needs two
sums of every row of q, in i32: Σq, and Σq² (`_row_mean_square`). Lowered, they are three
host passes over q: a reduce-sum of q, a loop writing cast(q)², and a reduce-sum of that.
Both are products the array computes exactly (its accumulators are i32):

* Σq = q · 1, an array call of the (rows, C) int8 rows and a (C, 1) column of ones;
* Σq² is the diagonal of q_b · q_bᵀ for each block q_b of B rows (B the array's columns):
  one array call per block, its weights q_bᵀ (C, B), which a host copy writes from q's rows
  (the array's operands are row-major, and q_bᵀ is q's rows read down their columns);
  the host then copies the B diagonal sums of each block out (one value per row).

So the host's three passes over every element become one copy of them (q_bᵀ), and the
array's work is about rows·C/16 cycles for Σq and 2·C cycles per block of 16 rows for Σq²
at 16×16. The pair is taken together, and only where both sums are of one int8 tensor's
rows (a LayerNorm's statistics), so other row sums (softmax's Σe, pools) are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glensidec.backend.accel_layer_norm import _rows, _widened
from glensidec.backend.accel_layers import LayerBuilder, drop_dead_code
from glensidec.backend.lower import (
    ACTIVATION,
    ArrayGemm,
    Buffer,
    Copy,
    Fused,
    Instruction,
    LoweredProgram,
    Reduce,
)
from glensidec.backend.views import Axis, View, contiguous
from glensidec.hardware.commands import AccelConfig

#: What the notes of the array calls this pass makes say (so a reader, or a test, can tell
#: them from the program's own products).
ROW_SUMS = "a LayerNorm's row sums"


@dataclass(frozen=True)
class _RowSums:
    """A LayerNorm's two row-sum reductions of one int8 tensor's (rows, C) rows."""

    total: int  # the Reduce writing Σq
    squares: int  # the loop writing cast(q)²
    sum_of_squares: int  # the Reduce writing Σq²
    x: View  # q's rows, (rows, C) row-major


def sum_rows_on_the_array(lowered: LoweredProgram, accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each LayerNorm's Σq and Σq² computed by array calls (a new
    program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        found = _find(result, index)
        if found is not None:
            index += _rewrite(result, found, accel.cols)
        index += 1
    drop_dead_code(result)
    return result


def _find(lowered: LoweredProgram, index: int) -> _RowSums | None:
    """The pair when the instruction at `index` is the reduce-sum of cast(q)² of an int8
    q whose reduce-sum an earlier instruction also takes; else None."""
    reduce = lowered.instructions[index]
    if not (isinstance(reduce, Reduce) and reduce.op == "reduce-sum" and
            lowered.is_whole(reduce.src) and lowered.is_whole(reduce.dst)):
        return None
    writers = lowered.writers().get(reduce.src.buffer, [])
    if len(writers) != 1 or lowered.readers().get(reduce.src.buffer) != [index]:
        return None
    squares = lowered.instructions[writers[0]]
    x = _squared(lowered, squares, writers[0]) if isinstance(squares, Fused) else None
    if x is None:
        return None
    rows = int(np.prod(reduce.dst.shape))
    columns = int(np.prod(reduce.src.shape)) // rows
    x_rows = _rows(lowered, x, rows, columns)
    if x_rows is None:
        return None
    for total in lowered.readers().get(x.buffer, []):
        other = lowered.instructions[total]
        if total < index and isinstance(other, Reduce) and other.op == "reduce-sum" and \
                lowered.is_whole(other.dst) and other.dst.shape == reduce.dst.shape and \
                _rows(lowered, other.src, rows, columns) == x_rows:
            return _RowSums(total, writers[0], index, x_rows)
    return None


def _squared(lowered: LoweredProgram, loop: Fused, index: int) -> View | None:
    """q's view when `loop` writes cast(q)·cast(q) of an int8 q, whole; else None."""
    if not lowered.is_whole(loop.dst) or len(loop.leaves) != 1:
        return None
    steps = [(step.name, step.operands)
             for step in loop.steps]
    (leaf,) = loop.leaves
    if steps == [("cast", (0,)), ("elementwise-mul", (-1, -1))] and \
            lowered.buffer_of(leaf).dtype == "i8":
        return leaf
    if steps == [("elementwise-mul", (0, 0))] and lowered.buffer_of(leaf).dtype == "i32":
        return _widened(lowered, leaf, index)  # q cast by a host loop of its own
    return None


def _rewrite(lowered: LoweredProgram, found: _RowSums, block: int) -> int:
    """The three instructions become the array calls and copies: the number of
    instructions added at the position of the last of them."""
    builder = LayerBuilder(lowered)
    total = lowered.instructions[found.total]
    squares = lowered.instructions[found.squares]
    reduce = lowered.instructions[found.sum_of_squares]
    assert isinstance(total, Reduce) and isinstance(reduce, Reduce)
    rows, columns = found.x.shape
    ones = builder.constant(f"{total.dst.buffer}_ones", "i8", np.ones((columns, 1), np.int64))
    lowered.instructions[found.total] = ArrayGemm(
        f"{total.note}: {ROW_SUMS}, Σq: its rows times a column of ones",
        contiguous(total.dst.buffer, (rows, 1)), found.x, ones, rows, columns, 1)
    # q_bᵀ of every block of `block` rows (the last may be shorter), one after the other
    name = reduce.dst.buffer
    blocks = [(start, min(block, rows - start)) for start in range(0, rows, block)]
    transposed = builder.name(f"{name}_blocks_transposed")
    lowered.buffers[transposed] = Buffer(transposed, "i8", (rows * columns,), ACTIVATION)
    gram = builder.name(f"{name}_gram")
    lowered.buffers[gram] = Buffer(gram, "i32", (sum(n * n for _, n in blocks),), ACTIVATION)
    full = rows // block
    writes: list[Instruction] = []
    calls: list[Instruction] = []
    reads: list[Instruction] = []
    for first, count, size in _runs(blocks, full):
        at = found.x.offset + first * columns
        writes.append(Copy(f"{squares.note}: blocks of {size} rows transposed for the array",
                           View(transposed, first * columns, (
                               (Axis(count, size * columns),), (Axis(columns, size),),
                               (Axis(size, 1),))),
                           View(found.x.buffer, at, (
                               (Axis(count, size * columns),), (Axis(columns, 1),),
                               (Axis(size, columns),)))))
        corner = first * block  # where the block's products start (full blocks before)
        reads.append(Copy(f"{reduce.note}: each row's sum of squares, a diagonal",
                          View(name, first, ((Axis(count, size), Axis(size, 1)),)),
                          View(gram, corner, ((Axis(count, size * size),
                                               Axis(size, size + 1)),))))
    for number, (start, size) in enumerate(blocks):
        corner = number * block * block
        calls.append(ArrayGemm(
            f"{reduce.note}: {ROW_SUMS}, Σq²: rows {start}..{start + size - 1} times their "
            "transpose",
            contiguous(gram, (size, size), corner),
            contiguous(found.x.buffer, (size, columns), found.x.offset + start * columns),
            contiguous(transposed, (columns, size), start * columns),
            size, columns, size))
    lowered.instructions[found.squares:found.squares + 1] = writes
    shift = len(writes) - 1
    at = found.sum_of_squares + shift
    lowered.instructions[at:at + 1] = [*calls, *reads]
    return shift + len(calls) + len(reads) - 1


def _runs(blocks: list[tuple[int, int]], full: int) -> list[tuple[int, int, int]]:
    """(first row, blocks, rows a block) of the full blocks and of the shorter last one."""
    runs = [(0, full, blocks[0][1])] if full else []
    if len(blocks) > full:
        runs.append((blocks[-1][0], 1, blocks[-1][1]))
    return runs
