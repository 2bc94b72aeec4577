"""Elementwise fusion (glensidec.backend.fuse_elementwise) keeps every value.

Each program is lowered, fused, and both run by the lowered-program interpreter that
`glensidec diff` uses; the fused program's result must equal the unfused one's bit for bit
(f32 too: the steps are the same operations in the same order), with fewer instructions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from glensidec.backend.fuse_elementwise import fuse_elementwise
from glensidec.backend.lower import Fused, lower_program
from glensidec.cosim.diff import lowered_result
from glensidec.lang import data
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CASES = {
    # program: (inputs, how many instructions fusion must at least save)
    "resnet_block.gs": ({"x": ((1, 16, 16, 16), "i8")}, 4),
    "small_cnn.gs": ({"image": ((1, 1, 16, 16), "i8")}, 1),
    "digits_cnn.gs": ({"image": ((1, 1, 8, 8), "f32")}, 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_programs_compute_the_same_values(name: str) -> None:
    program = read_program(EXAMPLES / name)
    lowered = lower_program(program, check_program(program))
    fused = fuse_elementwise(lowered)
    shapes, saved = CASES[name]
    rng = np.random.default_rng(1)
    inputs = {key: (rng.integers(-128, 128, shape).astype(np.int8) if dtype == "i8"
                    else rng.standard_normal(shape).astype(np.float32))
              for key, (shape, dtype) in shapes.items()}
    weights = data.load_weights(program)
    before = lowered_result(lowered, weights, inputs, 16)[-1]
    after = lowered_result(fused, weights, inputs, 16)[-1]
    assert before.dtype == after.dtype and np.array_equal(before, after)
    assert len(fused.instructions) <= len(lowered.instructions) - saved
    assert any(isinstance(instruction, Fused) and len(instruction.steps) > 1
               for instruction in fused.instructions)
    assert fused.output == lowered.output and fused.output in fused.buffers


def test_fusion_keeps_an_input_that_only_shape_of_reads() -> None:
    """Found by the fuzzer: `compile --accel` dropped an input read only through
    `(shape-of x)`, so `model x=… y=…` said "unknown input: x" (without --accel it ran)."""
    from glensidec.backend.lower import INPUT
    from glensidec.lang.syntax import parse_program

    program = parse_program(
        "(input x i8 (shape 2 3))\n(input y i8 (shape 2 3))\n"
        "(compute relu (access-reshape (access-tensor y) (access-shape (shape-of x) (shape))))\n",
        "<test>")
    fused = fuse_elementwise(lower_program(program, check_program(program)))
    inputs = {buffer.tensor for buffer in fused.buffers.values() if buffer.kind == INPUT}
    assert inputs == {"x", "y"}


def test_a_loop_read_through_a_reshape_merges_with_its_reader() -> None:
    """A LayerNorm's result (1, H, W, C) read as a matrix's (H·W, C) rows by its requantize,
    and a GELU's product read so by its own: the producer's loop walks the reader's shape
    and both are one loop, with the same values (a broadcast operand regrouped too)."""
    from glensidec.lang.syntax import parse_program

    program = parse_program(
        "(input x i8 (shape 1 2 3 4))\n(input s i8 (shape 4))\n"
        "(compute (requantize 1073741824 0 31 0)\n"
        " (access (access-reshape\n"
        "  (compute elementwise-mul (access-pair\n"
        "   (compute (cast i32) (access-tensor x))\n"
        "   (compute (cast i32) (access-broadcast (access-reshape (access-tensor s)\n"
        "     (access-shape (shape 1 1 1 4) (shape))) (access-shape (shape 1 2 3 4) (shape))))))\n"
        "  (access-shape (shape 6 4) (shape))) 1))\n", "<test>")
    lowered = lower_program(program, check_program(program))
    fused = fuse_elementwise(lowered)
    loops = [instruction for instruction in fused.instructions
             if isinstance(instruction, Fused)]
    assert len(loops) == 1 and [getattr(step.op, "name", step.op) for step in loops[0].steps] \
        == ["cast", "cast", "elementwise-mul", "requantize"]
    inputs = data.random_inputs(program, 3)
    before = lowered_result(lowered, {}, inputs, 16)[-1]
    after = lowered_result(fused, {}, inputs, 16)[-1]
    assert np.array_equal(before, after)


def test_a_square_reads_its_operand_once() -> None:
    """d·d (a LayerNorm's squared deviations before their mean) loads d once per element:
    one leaf (here d = x − x merges into the square, its x read once too), and the host
    model prices one read per element, with the same values."""
    from glensidec.backend.report import host_cycles
    from glensidec.lang.syntax import parse_program

    program = parse_program(
        "(input x i32 (shape 3 5))\n"
        "(compute reduce-sum (access (compute elementwise-mul (access-pair\n"
        " (compute elementwise-sub (access-pair (access-tensor x) (access-tensor x)))\n"
        " (compute elementwise-sub (access-pair (access-tensor x) (access-tensor x))))) 1))\n",
        "<test>")
    lowered = lower_program(program, check_program(program))
    fused = fuse_elementwise(lowered)
    (loop,) = [instruction for instruction in fused.instructions
               if isinstance(instruction, Fused)]
    assert len(loop.leaves) == 1 and loop.steps[-1].operands == (-1, -1)
    assert host_cycles(loop) == 15
    inputs = data.random_inputs(program, 4)
    before = lowered_result(lowered, {}, inputs, 16)[-1]
    after = lowered_result(fused, {}, inputs, 16)[-1]
    assert np.array_equal(before, after)
