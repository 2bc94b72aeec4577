"""An int8 function of one layer's result, whatever its steps, is one lookup table.

After a layer's requantize and clips (and its lookup, if it has one) the quantizer often
goes on with a chain of element-wise steps that read nothing but that int8 result and
compile-time scalars, and end in int8 again: ConvNeXt's and ViT's GELU computes
`requantize(cast(erf(d))·256 + 48383)` (the 1 + erf(d) of x·Φ(x)) after the erf table,
four host passes over every element. Such a chain maps each of the 256 int8 values to one
int8 value, so the interpreter's own arithmetic applied to the 256 inputs is a table the
epilogue applies exactly (`ws_epilogue`'s lookup, composed with the layer's own table).

`unary_tail` follows the chain from a layer's result and returns the composed table and
what it took; `accel_layers.follow_chain` calls it for a layer that takes a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from glensidec.backend.lower import Fold, Instruction, LoweredProgram, Map
from glensidec.backend.views import View
from glensidec.lang.dtypes import DTYPES, Array
from glensidec.lang.interp import COMPUTE_IMPLS
from glensidec.lang.terms import ComputeOp
from glensidec.lang.typecheck import AccessType

#: How far a tail is followed: a GELU's is four steps; a longer chain is rare and stops
#: here rather than walk a whole network's element-wise code.
MAX_TAIL = 16


@dataclass(frozen=True)
class Tail:
    """The steps after a layer's result that one table computes."""

    table: Array  # 256 int8 entries: the result for layer output q at q + 128
    indices: tuple[int, ...]  # the instructions it replaces, in order
    dst: View  # the last one's destination (int8)


def unary_tail(lowered: LoweredProgram, start: View, table: Array | None,
               next_of: Callable[[View], tuple[int, Instruction] | None],
               scalar: Callable[[View], int | None]) -> Tail | None:
    """The longest chain of element-wise steps after `start` (the layer's int8 result, its
    `table` applied already, or None) that reads only the chain's last value and scalars
    and ends in int8, as one table; None when it has no such step.

    `next_of(view)`: the single reader of view's buffer and its index, or None (a buffer
    several instructions read cannot be folded away). `scalar(view)`: the one value a
    compile-time operand holds everywhere, or None."""
    elements = lowered.buffer_of(start).elements
    values: Array = np.arange(-128, 128, dtype=np.int64) if table is None else \
        np.asarray(table, np.int64)
    dtype, current = "i8", start
    taken: list[int] = []
    best: Tail | None = None
    while len(taken) < MAX_TAIL and (found := next_of(current)) is not None:
        index, step = found
        result = lowered.buffer_of(step.dst)
        if not (lowered.is_whole(step.dst) and result.elements == elements
                and DTYPES[result.dtype].integer):
            break
        stepped = _apply(step, current, values, dtype, result.dtype, lowered, scalar)
        if stepped is None:
            break
        values, dtype, current = stepped, result.dtype, step.dst
        taken.append(index)
        if dtype == "i8":
            best = Tail(values.copy(), tuple(taken), current)
    return best


def _reads_whole(view: View, current: View, lowered: LoweredProgram) -> bool:
    return view.buffer == current.buffer and lowered.is_whole(view)


def _apply(step: Instruction, current: View, values: Array, dtype: str, result: str,
           lowered: LoweredProgram, scalar: Callable[[View], int | None]) -> Array | None:
    """`step` applied to the 256 `values` of `current` (of `dtype`), or None when it is not
    a function of them alone."""
    if isinstance(step, Map) and _reads_whole(step.src, current, lowered):
        return _compute(step.op, [values], dtype, result)
    if isinstance(step, Fold) and len(step.members) == 2:
        first, second = step.members
        for mine, other, order in ((first, second, 1), (second, first, -1)):
            if _reads_whole(mine, current, lowered):
                value = scalar(other)
                if value is None or lowered.buffer_of(other).dtype != dtype:
                    return None
                constant = np.full_like(values, value)
                members = [values, constant][::order]
                return _compute(ComputeOp(step.op), members, dtype, result)
    return None


def _compute(op: ComputeOp, members: list[Array], source: str, result: str) -> Array:
    """The interpreter's compute `op` over 256 elements (members stacked as a tuple)."""
    stacked = members[0] if len(members) == 1 else np.stack(members, axis=1)
    access = AccessType((len(members[0]),), tuple(stacked.shape[1:]), source)
    computed = COMPUTE_IMPLS[op.name](op, stacked, access,
                                      AccessType((len(members[0]),), (), result))
    return np.asarray(computed).astype(np.int64)
