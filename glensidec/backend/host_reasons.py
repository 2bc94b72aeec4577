"""Why an instruction stays on the host: one line per kind of work the accelerator lacks.

The accelerator passes move onto ws_accel what its epilogue computes exactly (per-column
bias, multiplier and channel scale, requantize, clip, an int8 table, a residual add or a
product of two layers' rows). What is left is named here, so the report can say, instruction
by instruction, why the host keeps it (issue 26): LayerNorm's statistics and
normalisation and softmax's maximum, sum and divide are row-wise and divide, which the
epilogue cannot do exactly. The reasons are read off the instruction itself (its
operation, and whether a run-time operand is one value per row broadcast along it), not
off the model's names.
"""

from __future__ import annotations

from collections.abc import Mapping

from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    ArrayGemm,
    Copy,
    Dot,
    Fill,
    Fold,
    Fused,
    Instruction,
    LoweredProgram,
    Reduce,
    Softmax,
)
from glensidec.backend.views import View

DIVIDES = ("an integer division (LayerNorm's normalisation by the deviation, softmax's by "
           "its sum): the epilogue multiplies by fixed multipliers and has no divider")
REDUCES = ("a reduction along each row (LayerNorm's mean and variance, softmax's maximum "
           "and sum): the epilogue sees one element per column, and the accumulator's sums "
           "of a row's columns never leave it")
PER_ROW = ("a run-time value per row (LayerNorm's mean or deviation, softmax's maximum): "
           "the epilogue's bias, multiplier and scales are per column and fixed for a layer")
OF_HOST = ("element-wise steps of values the host computed (inside a LayerNorm or a "
           "softmax): no layer produces their operands")
MOVES = "data movement (padding, layout, concatenation) that no layer writes"
PRODUCT = "a product on the host (no array call or layer takes it)"
SOFTMAX = "softmax in float: the accelerator is an int8 machine"
LEFT = "no accelerator pass takes it"


def host_reason(instruction: Instruction, lowered: LoweredProgram,
                writers: Mapping[str, list[int]]) -> str:
    """Why `instruction` (a host instruction of `lowered`) is not accelerator work; "" for
    array calls and layers. `writers`: the program's `writers()`."""
    if isinstance(instruction, AccelLayer | ArrayGemm):
        return ""
    if isinstance(instruction, Copy | Fill):
        return MOVES
    if isinstance(instruction, Dot):
        return PRODUCT
    if isinstance(instruction, Softmax):
        return SOFTMAX
    if isinstance(instruction, Reduce):
        return REDUCES
    if _divides(instruction):
        return DIVIDES
    runtime = [view for view in instruction.reads()
               if lowered.buffer_of(view).kind == ACTIVATION]
    if any(_per_row(view) for view in runtime):
        return PER_ROW
    if runtime and not any(_made_by_layer(view, lowered, writers) for view in runtime):
        return OF_HOST
    return LEFT


def _divides(instruction: Instruction) -> bool:
    if isinstance(instruction, Fold):
        return instruction.op == "elementwise-div"
    if isinstance(instruction, Fused):
        return any(step.op == "elementwise-div" for step in instruction.steps)
    return False


def _per_row(view: View) -> bool:
    """A value broadcast along the innermost dim (one per row), the view not a scalar."""
    axes = view.axes()
    if not axes or all(axis.stride == 0 for axis in axes):
        return False
    return axes[-1].stride == 0 and axes[-1].size > 1


def _made_by_layer(view: View, lowered: LoweredProgram,
                   writers: Mapping[str, list[int]]) -> bool:
    return any(isinstance(lowered.instructions[index], AccelLayer | ArrayGemm | Copy)
               for index in writers.get(view.buffer, []))

