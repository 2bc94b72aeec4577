"""Fills and copies of constants, done once at compile time instead of every inference.

The lowering builds padded and packed forms of weights at run time: a dense layer's
weights padded to the array's columns (a fill and a copy), then packed for the call (a
copy) — small_cnn's classifier re-makes 16,384 elements of constants per inference, more
than all its accelerator layers' cycles. With `compile --accel` this pass (the last
before the layers are programmed) evaluates every activation buffer that only fills and
copies of constants write, all before anything reads it (`accel_layers.evaluate_buffer`),
and makes it a constant of the same name: its bytes go to weights.bin, and the fills and
copies (and the constants only they read) go away.
"""

from __future__ import annotations

import numpy as np

from glensidec.backend.accel_layers import drop_dead_code, evaluate_buffer
from glensidec.backend.lower import ACTIVATION, CONSTANT, Buffer, ConstantSource, LoweredProgram
from glensidec.lang.dtypes import Array

#: The integer dtypes a compiler-made constant can hold (LayerBuilder.constant's).
_LITTLE_ENDIAN = {"i8": "<i1", "i32": "<i4"}


def fold_constant_copies(lowered: LoweredProgram, weights: dict[str, Array]) -> LoweredProgram:
    """`lowered` with every buffer that is known at compile time a constant (a new
    program)."""
    result = lowered.copy()
    writers, readers = result.writers(), result.readers()
    folded: set[str] = set()
    known: dict[str, bool] = {}  # (a buffer folded stays known: its values are the same)
    for name, buffer in lowered.buffers.items():
        if buffer.kind != ACTIVATION or buffer.dtype not in _LITTLE_ENDIAN or \
                name not in writers or name not in readers or \
                max(writers[name]) >= min(readers[name]):
            continue
        values = evaluate_buffer(result, name, weights, min(readers[name]), writers, known)
        if values is None:
            continue
        data = np.ascontiguousarray(values).astype(_LITTLE_ENDIAN[buffer.dtype]).tobytes()
        result.buffers[name] = Buffer(name, buffer.dtype, buffer.shape, CONSTANT,
                                      ConstantSource(data=data))
        folded.add(name)
    if folded:
        result.instructions = [instruction for instruction in result.instructions
                               if instruction.writes().buffer not in folded]
        drop_dead_code(result)
    return result
