"""softmax·V with the division after the product (glensidec.backend.accel_softmax): the
quantizer's e·V, each row then scaled by its own reciprocal of Σe, is one product layer in
ws_epilogue's per-row mode, the host packing one (offset, reciprocal) pair per row and N
block. The quick test lowers an encoder block with the accelerator passes and runs the
lowered program in numpy against the interpreter; test_accel_attention's slow test
co-simulates the same block on ws_accel (C = RTL = interpreter, every layer at its
predicted cycles), these layers included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_accel_attention import TINY, _quantized_block
from test_accel_offload import _accelerated, _interpreted, _lowered_result

from glensidec.backend.lower import ArrayGemm, Fused


def test_each_heads_softmax_v_is_a_layer_that_divides_its_rows(tmp_path: Path) -> None:
    """Per head, e·V is a product layer (tokens × tokens × width) in the per-row mode; no
    array call and no host loop of tokens × width is left of it, the host's work on the
    division is per row; the lowered program gives the interpreter's integers."""
    source, inputs = _quantized_block(tmp_path, pre_norm=True)
    lowered = _accelerated(source, "16x16")
    tokens, width = TINY.tokens, TINY.features // TINY.heads
    contexts = [layer for layer in lowered.accel_layers() if layer.multiplies and
                (layer.m, layer.k, layer.n) == (tokens, tokens, width)]
    assert len(contexts) == TINY.heads
    assert all(layer.residual_add is not None and layer.residual_add.rows
               for layer in contexts)
    assert not any(isinstance(instruction, ArrayGemm) for instruction in lowered.instructions)
    # what the host computes for the division: each row's (offset, reciprocal), per block
    packing = [instruction for instruction in lowered.instructions
               if isinstance(instruction, Fused) and "softmax·V" in instruction.note]
    assert len(packing) == TINY.heads
    assert all(int(np.prod(instruction.dst.shape)) == tokens * -(-width // 16)
               for instruction in packing)
    expected = _interpreted(source, inputs)
    actual = _lowered_result(source, lowered, inputs, 16)
    np.testing.assert_array_equal(actual.reshape(expected.shape), expected)
