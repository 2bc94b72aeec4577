"""A batch's per-image matrix layers as one, where the exact model prices that lower.

A batch compiles as one copy of the network per image (`opt.batch.split_images`): every
layer runs once per image, and loads its weights once per image. For a convolution that
is the only choice (the DMA's im2col reads one image's map), but a matrix layer — a
classifier, a 1×1 layer of M rows — can take the images' rows together: one layer of
M₀ + M₁ rows, its weights loaded once. This pass (the accelerator, before the layers are
programmed) finds two matrix layers (or two int8 array calls) with the same weights and
epilogue whose results do not feed each other, prices both forms with the exact cycle
model (`program_layer`, the RTL's count; `gemm_cycles` for an array call), and where
the folded one is cheaper makes it one: the two operands' rows become one buffer (the
first image's rows, then the second's: every view of either buffer moves into it at its
offset), so do the two results, and the first image's instructions that read its result
move after the folded layer. A classifier is DMA-bound (ResNet-18's: 48 k cycles a
image, 46 k of them waiting for its 512 k weights); a layer the array bounds gains
nothing and stays per image.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import replace

import numpy as np

from glensidec.backend.accel_layers import (
    drop_dead_code,
    layer_geometry,
    layer_quant,
    program_layer,
)
from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    OUTPUT,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Instruction,
    LoweredProgram,
    constant_array,
)
from glensidec.backend.views import View, contiguous, element_range, view_array
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig, gemm_cycles
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array

Call = AccelLayer | ArrayGemm


def fold_image_layers(lowered: LoweredProgram, weights: dict[str, Array],
                      accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each pair of equal matrix layers (or array calls) of a batch's
    images that the exact model prices lower folded as one (a new program)."""
    result = lowered.copy()
    digests: dict[str, bytes] = {}  # a constant operand's values, hashed once a pass
    while _fold_one(result, weights, accel, digests):
        pass
    drop_dead_code(result)
    return result


def _fold_one(lowered: LoweredProgram, weights: dict[str, Array], accel: AccelConfig,
              digests: dict[str, bytes]) -> bool:
    """Fold the first pair that folds; False when none does."""
    seen: dict[tuple[object, ...], int] = {}
    for index, call in enumerate(lowered.instructions):
        key = _key(lowered, call, weights, digests)
        if key is None:
            continue
        first = seen.get(key)
        if first is not None and _fold(lowered, first, index, weights, accel):
            return True
        seen[key] = index
    return False


def _key(lowered: LoweredProgram, call: Instruction, weights: dict[str, Array],
         digests: dict[str, bytes]) -> tuple[object, ...] | None:
    """What two calls must share to fold (their weights' and epilogue's values), or None
    for an instruction that is not a foldable matrix call."""
    if isinstance(call, ArrayGemm):
        if lowered.buffer_of(call.a).dtype != "i8":
            return None
        return ("array call", call.k, call.n, call.rows, call.cols,
                _values(lowered, call.b, weights, digests))
    if not isinstance(call, AccelLayer) or not call.multiplies or \
            call.residual is not None or call.scale is not None or call.output_pitch or \
            call.input_pitch or call.groups != 1 or (call.image and not _one_row(call)):
        return None
    return ("layer", call.k, call.n, call.pre, call.post, call.zero_point, call.low,
            call.high, call.image[1:], call.kernel, call.kernel_w, call.stride_w,
            *(_values(lowered, view, weights, digests) for view in
              (call.b, call.bias, call.multiplier, call.table)))


def _one_row(layer: AccelLayer) -> bool:
    """A convolution whose windows span its map's height, unpadded (a classifier reading
    a flattened map: one row of windows): two maps stacked, the windows a map's height
    apart, are one map whose windows are each image's."""
    return layer.kernel == layer.image[0] and not layer.padding and \
        not layer.pad_end and not layer.padding_w and layer.dilation == (1, 1)


def _values(lowered: LoweredProgram, view: View | None, weights: dict[str, Array],
            digests: dict[str, bytes]) -> bytes | None:
    """A digest of a constant operand's values (None: no operand); a run-time operand is
    its own key. (Hashed once per view: every layer is looked at after each fold.)"""
    if view is None:
        return None
    buffer = lowered.buffer_of(view)
    if buffer.kind != CONSTANT:
        return f"{view}".encode()
    digest = digests.get(str(view))
    if digest is None:
        values = view_array(view, constant_array(buffer, weights).reshape(-1))
        digest = digests[str(view)] = hashlib.blake2b(
            np.ascontiguousarray(values).tobytes() + str(values.dtype).encode(),
            digest_size=16).digest()
    return digest


def _cycles(lowered: LoweredProgram, call: Call, weights: dict[str, Array],
            accel: AccelConfig) -> int | None:
    """The call's cycles by the exact model (None: it does not fit)."""
    if isinstance(call, ArrayGemm):
        return gemm_cycles(ArrayConfig(accel.rows, accel.cols), call.m, call.k, call.n)
    try:
        _, _, timing = program_layer(accel, layer_geometry(call),
                                     layer_quant(lowered, call, weights), commands=False)
    except GlensideError:
        return None
    return timing.cycles


def _fold(lowered: LoweredProgram, first: int, second: int, weights: dict[str, Array],
          accel: AccelConfig) -> bool:
    """Fold the calls at `first` and `second` into one at `second`'s place when the model
    prices it lower and the program allows it; False (nothing changed) otherwise."""
    instructions = lowered.instructions
    one, two = instructions[first], instructions[second]
    assert isinstance(one, AccelLayer | ArrayGemm) and isinstance(two, AccelLayer | ArrayGemm)
    m = one.m + two.m
    operand = _joined(lowered, one.a, two.a)
    result = _joined(lowered, one.dst, two.dst)
    if operand is None or result is None:
        return False
    moved = _dependents(lowered, first, second)
    if moved is None:
        return False
    if isinstance(one, AccelLayer):  # (a map's images stacked: one window each)
        assert isinstance(two, AccelLayer)
        image = (one.image[0] + two.image[0], *one.image[1:]) if one.image else ()
        # (stride = kernel = one map's height: each window one image's map)
        stride = one.kernel if one.image else one.stride
        folded: Call = replace(one, m=m, name=_folded_name(one.name), image=image,
                               stride=stride)
    else:
        folded = replace(one, m=m)
    apart = [_cycles(lowered, call, weights, accel) for call in (one, two)]
    together = _cycles(lowered, folded, weights, accel)
    if together is None or None in apart or together >= sum(c for c in apart if c):
        return False
    (a_view, a_moves), (dst_view, dst_moves) = operand, result
    folded = replace(folded, a=a_view, dst=dst_view)
    between = [index for index in range(first + 1, second) if index not in moved]
    order = [*range(first), *between, -1, *sorted(moved), *range(second + 1,
                                                                 len(instructions))]
    rebased = [folded if index == -1 else instructions[index] for index in order]
    moves = {**a_moves, **dst_moves}
    for name, (new, _) in moves.items():
        old = lowered.buffers[name]
        if new not in lowered.buffers:
            size = sum(lowered.buffers[other].elements for other, (target, _) in moves.items()
                       if target == new)
            lowered.buffers[new] = Buffer(new, old.dtype, (size,), ACTIVATION)
    lowered.instructions[:] = [_rebased(instruction, moves) for instruction in rebased]
    return True


def _folded_name(name: str) -> str:
    """A per-image layer's name for the images' layer (`out_image0` → `out_images`)."""
    return re.sub(r"_image\d+$", "_images", name)


def _joined(lowered: LoweredProgram, one: View, two: View
            ) -> tuple[View, dict[str, tuple[str, int]]] | None:
    """One row-major view of the two calls' rows (`one` then `two`: their first axes
    joined), with the buffers that must move into a new one for it (name → (new,
    offset)); None when they are neither adjacent in one buffer nor two whole activations
    of their own."""
    trailing = one.shape[1:]
    shape = (one.shape[0] + two.shape[0], *trailing)
    if two.shape[1:] != trailing or not (one.is_row_major() and two.is_row_major()):
        return None
    if one.buffer == two.buffer:
        if two.offset != one.offset + math.prod(one.shape):
            return None
        return contiguous(one.buffer, shape, one.offset), {}
    first, second = lowered.buffer_of(one), lowered.buffer_of(two)
    if first.kind != ACTIVATION or second.kind != ACTIVATION or \
            first.dtype != second.dtype or not lowered.is_whole(one) or \
            not lowered.is_whole(two):
        return None
    folded = _folded_name(first.name)
    name = _fresh(lowered, folded if folded != first.name else f"{first.name}_images")
    return contiguous(name, shape), {first.name: (name, 0),
                                     second.name: (name, first.elements)}


def _fresh(lowered: LoweredProgram, base: str) -> str:
    name, number = base, 1
    while name in lowered.buffers:
        name, number = f"{base}_{number}", number + 1
    return name


def _dependents(lowered: LoweredProgram, first: int, second: int) -> set[int] | None:
    """The instructions between the calls that use the first call's result (directly or
    through others), which move after the folded call; None when the second call is one
    of them or moving them would change what anything reads."""
    instructions = lowered.instructions
    tainted = {instructions[first].dst.buffer}
    moved: set[int] = set()
    for index in range(first + 1, second + 1):
        instruction = instructions[index]
        if any(view.buffer in tainted for view in instruction.reads()):
            if index == second:
                return None  # the second image's rows depend on the first's result
            moved.add(index)
            tainted.add(instruction.dst.buffer)
    touched = [view for index in moved for view in
               (*instructions[index].reads(), instructions[index].dst)]
    for index in range(first + 1, second + 1):
        if index in moved:
            continue
        written = instructions[index].dst
        for view in touched:  # what stays must not write what moves reads or writes
            if view.buffer == written.buffer and _overlap(lowered, view, written):
                return None
    return moved


def _overlap(lowered: LoweredProgram, one: View, two: View) -> bool:
    """Whether two views of a buffer may share an element (by their element ranges; a
    batch's result is written image by image in disjoint runs)."""
    if lowered.buffer_of(one).kind != OUTPUT:
        return True
    low, high = element_range(one)
    other_low, other_high = element_range(two)
    return not (high < other_low or other_high < low)


def _rebased(instruction: Instruction, moves: dict[str, tuple[str, int]]) -> Instruction:
    """`instruction` with its views of each moved buffer in the new one, at its offset."""
    if not moves:
        return instruction
    changes: dict[str, object] = {}
    for field, current in vars(instruction).items():
        if isinstance(current, View) and current.buffer in moves:
            changes[field] = _moved(current, moves)
        elif isinstance(current, tuple) and current and isinstance(current[0], View) and \
                any(view.buffer in moves for view in current):
            changes[field] = tuple(_moved(view, moves) for view in current)
    return replace(instruction, **changes) if changes else instruction  # type: ignore[arg-type]


def _moved(view: View, moves: dict[str, tuple[str, int]]) -> View:
    if view.buffer not in moves:
        return view
    name, offset = moves[view.buffer]
    return View(name, view.offset + offset, view.dims)
