"""LayerNorm's row sums Σq and Σq² on the accelerator.

The quantizer's LayerNorm of an int8 tensor q (`frontends/quant_layer_norm.py`) needs two
sums of every row of q, in i32: Σq, and Σq² (`_row_mean_square`). Lowered, they are three
host passes over q: a reduce-sum of q, a loop writing cast(q)², and a reduce-sum of that.

* Σq = q · 1, an array call of the (rows, C) int8 rows and a (C, 1) column of ones.
* Σq²: q² (0 … 16384) is two int8 digits in base 128, q² = 128·h + l with h = q² >> 7
  (0 … 128) and l = q² & 127, and each digit is a 256-entry table of q. Two depthwise 1×1
  layers of q·1 (identity epilogue) map q through the tables −h and l (−128 … 0 and
  0 … 127: int8) and write them side by side, rows of [−h | l]; one array call then sums
  each row with the weights −128 (for −h) and 1 (for l): Σq² = Σ(−128·−h + l), exactly.
  The host does nothing for every element.

  Before (and still where a row's C channels are not whole blocks of the array's columns,
  which the depthwise layers need): Σq² as the diagonal of q_b · q_bᵀ for each block q_b
  of B rows (B the array's columns), one array call per block whose weights q_bᵀ a host
  copy wrote (the array's operands are row-major; q_bᵀ is q's rows read down their
  columns), and a host copy of the diagonals out: the host's copy of every element
  (convnext_tiny 3.0 M cycles, vit_b_16 3.5 M) against the two layers' epilogues, about
  half a cycle an element at four lanes.

The pair is taken together, and only where both sums are of one int8 tensor's rows (a
LayerNorm's statistics), so other row sums (softmax's Σe, pools) are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glensidec.backend.accel_layer_norm import _rows, _widened
from glensidec.backend.accel_layers import LayerBuilder, check_fits, drop_dead_code
from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Copy,
    Fused,
    Instruction,
    LoweredProgram,
    Reduce,
)
from glensidec.backend.views import Axis, View, contiguous
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.commands import (
    AccelConfig,
    LayerQuant,
    depthwise_weight_matrix,
)

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
            index += _rewrite(result, found, accel)
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


def _rewrite(lowered: LoweredProgram, found: _RowSums, accel: AccelConfig) -> int:
    """The three instructions become the array calls, and the layers or copies: the number
    of instructions added at the position of the last of them."""
    builder = LayerBuilder(lowered)
    total = lowered.instructions[found.total]
    reduce = lowered.instructions[found.sum_of_squares]
    assert isinstance(total, Reduce) and isinstance(reduce, Reduce)
    rows, columns = found.x.shape
    ones = builder.constant(f"{total.dst.buffer}_ones", "i8", np.ones((columns, 1), np.int64))
    lowered.instructions[found.total] = ArrayGemm(
        f"{total.note}: {ROW_SUMS}, Σq: its rows times a column of ones",
        contiguous(total.dst.buffer, (rows, 1)), found.x, ones, rows, columns, 1)
    digits = _digit_layers(lowered, found, accel)
    if digits is None:
        return _rewrite_by_blocks(lowered, found, accel.cols)
    name = reduce.dst.buffer
    weights = np.concatenate([np.full(columns, -128), np.ones(columns, np.int64)])
    sums = ArrayGemm(f"{reduce.note}: {ROW_SUMS}, Σq²: each row's digits −h and l times "
                     "−128 and 1", contiguous(name, (rows, 1)), digits[0].dst.with_dims(
                         ((Axis(rows, 2 * columns),), (Axis(2 * columns, 1),)), 0),
                     builder.constant(f"{name}_weights", "i8", weights.reshape(-1, 1)),
                     rows, 2 * columns, 1)
    lowered.instructions[found.squares:found.squares + 1] = list(digits)
    at = found.sum_of_squares + len(digits) - 1
    lowered.instructions[at:at + 1] = [sums]
    return len(digits) - 1


#: The base-128 digits of q² (q = −128 … 127, in that order: a table's index is q + 128):
#: −h = −(q² >> 7) and l = q² & 127, both int8.
_SQUARES = np.arange(-128, 128, dtype=np.int64) ** 2
SQUARE_DIGITS = (-(_SQUARES >> 7), _SQUARES & 127)


def _digit_layers(lowered: LoweredProgram, found: _RowSums, accel: AccelConfig
                  ) -> tuple[AccelLayer, AccelLayer] | None:
    """The two depthwise 1×1 layers of q·1 that write each row's digits of q², rows of
    [−h | l] (2C bytes, each layer its C columns at that pitch); None when C is not whole
    blocks of the array's columns or the layers do not fit."""
    rows, columns = found.x.shape
    if columns % accel.cols:
        return None
    geometry = ConvLayer("digits", rows, 1, columns, columns, groups=columns)
    quants = [LayerQuant(EpilogueConfig(table=tuple(int(v) for v in table)), (0,) * columns,
                         (1,) * columns) for table in SQUARE_DIGITS]
    try:
        for quant in quants:
            check_fits(accel, geometry, quant)
    except GlensideError:
        return None
    layers = []
    builder = LayerBuilder(lowered)
    squares = lowered.instructions[found.squares]
    name = builder.name(f"{lowered.instructions[found.sum_of_squares].dst.buffer}_digits")
    lowered.buffers[name] = Buffer(name, "i8", (rows, 2 * columns), ACTIVATION)
    weights = builder.constant(f"{name}_weights", "i8",
                               depthwise_weight_matrix(geometry, accel.cols, 1))
    for number, (digit, table) in enumerate(zip(("−h = −(q² >> 7)", "l = q² & 127"),
                                                SQUARE_DIGITS, strict=True)):
        layer_name = f"{name}_{'hl'[number]}"
        layers.append(AccelLayer(
            f"{squares.note}: {ROW_SUMS}, Σq²'s digit {digit} of each element, a table",
            View(name, number * columns, ((Axis(rows, 2 * columns),), (Axis(columns, 1),))),
            name=layer_name, a=found.x, b=weights,
            bias=builder.constant(f"{layer_name}_bias", "i32", np.zeros(columns, np.int64)),
            multiplier=builder.constant(f"{layer_name}_multiplier", "i32",
                                        np.ones(columns, np.int64)),
            commands=builder.commands_placeholder(layer_name), m=rows, k=weights.shape[0],
            n=columns,
            pre=0, post=0, zero_point=0, low=-128, high=127, image=(rows, 1, columns),
            kernel=1, stride=1, groups=columns, group_cols=accel.cols,
            table=builder.constant(f"{layer_name}_table", "i8", table),
            output_pitch=2 * columns))
    return layers[0], layers[1]


def _rewrite_by_blocks(lowered: LoweredProgram, found: _RowSums, block: int) -> int:
    """Σq² as the diagonals of the blocks' products with their transposes (the host copying
    the transposes in and the diagonals out): the number of instructions added."""
    builder = LayerBuilder(lowered)
    squares = lowered.instructions[found.squares]
    reduce = lowered.instructions[found.sum_of_squares]
    assert isinstance(reduce, Reduce)
    rows, columns = found.x.shape
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
