"""Each value computed once, not twice (the accelerator's first pass).

Extraction can write the same epilogue of one array call twice: MobileNet-v2's linear
bottleneck projections, whose int8 result both feeds the next block and is added to that
block's result, come out of the rewrite as two `accel-epilogue`s of the same accumulators
(one over `(access acc 1)`, one over `acc`), each with its own copy of the bias and
multiplier constants. Lowered, that is a bias add and a requantize-per-channel twice over
one accumulator; with two readers the array call fuses into no layer, and both epilogues
and the residual add that reads the second stay on the host (MobileNet-v2: 3.5 M host
cycles, 55 % of its total).

Residual adds repeat themselves the same way: MobileNet-v2's next add reads the i32 sum
of the previous one and requantizes it again, beside the requantize that made the block's
int8 result, so the sum has two readers and no add moves into a layer's epilogue.

This pass runs before the layers are formed: each elementwise instruction (a fold, a map,
a requantize-per-channel) that alone writes its whole result is keyed by its kind and
parameters, its run-time operands' views and its constants' values; a later one with
the same key computes the same bytes, so its readers read the first one's result
instead, and the dead copy goes.
"""

from __future__ import annotations

import numpy as np

from glensidec.backend.accel_layers import drop_dead_code
from glensidec.backend.lower import (
    CONSTANT,
    Fold,
    LoweredProgram,
    Map,
    RequantizePerChannel,
    Users,
    constant_array,
    rename_buffers,
)
from glensidec.backend.views import View, view_array
from glensidec.lang.dtypes import Array

#: What makes two instructions' results equal: the kind and its parameters, the operands
#: (run-time ones by their views, constants by their values) and the result's shapes.
_Key = tuple[object, ...]


def share_requantizations(lowered: LoweredProgram, weights: dict[str, Array]
                          ) -> LoweredProgram:
    """`lowered` with every value computed twice — an elementwise instruction (a fold, a
    map, a requantize-per-channel) of the same operands, constants compared by value —
    read from its first computation (a new program)."""
    result = lowered.copy()
    # Per key with each constant as its shape and dtype alone, the instructions of that
    # key so far (index, result buffer), and per full key (constants by value) its first
    # result: a constant's values are read only when another instruction has its coarse
    # key (ResNet-50's bias adds are unique, and their (M, N) biases as bytes took most
    # of this pass).
    coarse_seen: dict[_Key, list[tuple[int, str]]] = {}
    first: dict[_Key, str] = {}
    renamed: dict[str, str] = {}
    # Renaming what an instruction reads changes no buffer's writers (a renamed buffer's
    # one writer comes before its readers), so the program's writers hold throughout;
    # asking for them after each renaming compared the whole program each time (10 s on a
    # swin_t). (Nor does it change a constant: an earlier instruction's full key is the
    # same whenever it is made.)
    writers = result.writers()
    for index, instruction in enumerate(result.instructions):
        if renamed:  # (a renamed buffer maps to a first computation, never renamed itself)
            instruction = rename_buffers(instruction, renamed)
        result.instructions[index] = instruction
        coarse = _key(result, index, weights, writers, by_value=False)
        if coarse is None:
            continue
        earlier = coarse_seen.setdefault(coarse, [])
        earlier.append((index, instruction.dst.buffer))
        if len(earlier) == 1:
            continue  # no other instruction can compute the same values
        if len(earlier) == 2:  # the first of this coarse key, by value now
            first_index, first_result = earlier[0]
            first_key = _key(result, first_index, weights, writers)
            assert first_key is not None
            first.setdefault(first_key, first_result)
        key = _key(result, index, weights, writers)
        assert key is not None
        if key in first and instruction.dst.buffer != result.output:
            renamed[instruction.dst.buffer] = first[key]
        else:
            first.setdefault(key, instruction.dst.buffer)
    if renamed:
        drop_dead_code(result)
    return result


def _key(lowered: LoweredProgram, index: int, weights: dict[str, Array], writers: Users,
         by_value: bool = True) -> _Key | None:
    """The elementwise instruction at `index` as a key, when it alone writes its whole
    result buffer (without `by_value`, its constants as their shapes and dtypes alone)."""
    instruction = lowered.instructions[index]
    if isinstance(instruction, Fold):
        what: tuple[object, ...] = ("fold", instruction.op)
    elif isinstance(instruction, Map):
        what = ("map", instruction.op.name, instruction.op.params)
    elif isinstance(instruction, RequantizePerChannel):
        what = ("requantize", instruction.pre, instruction.post, instruction.zero_point)
    else:
        return None
    dst = lowered.buffer_of(instruction.dst)
    if writers.get(instruction.dst.buffer) != [index] or \
            not lowered.is_whole(instruction.dst):
        return None
    operands = tuple(_operand(lowered, view, weights, by_value)
                     for view in instruction.reads())
    return (*what, operands, instruction.dst.shape, dst.shape, dst.dtype)


def _operand(lowered: LoweredProgram, view: View, weights: dict[str, Array],
             by_value: bool) -> object:
    """A run-time operand as its view; a constant as its values (its copies are equal), or
    without `by_value` as its shape and dtype."""
    buffer = lowered.buffer_of(view)
    if buffer.kind != CONSTANT:
        return view
    if not by_value:
        return tuple(view.shape), buffer.dtype
    values = view_array(view, constant_array(buffer, weights).reshape(-1))
    return tuple(view.shape), buffer.dtype, np.ascontiguousarray(values, np.int64).tobytes()
