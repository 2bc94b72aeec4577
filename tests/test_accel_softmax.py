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
import pytest
from test_accel_attention import TINY, _quantized_block
from test_accel_offload import _accelerated, _checked_cosimulation, _interpreted, _lowered_result
from test_transformer import Size

from glensidec.backend.accel_row_sums import ROW_SUMS
from glensidec.backend.accel_softmax_exp import _Blocks, row_blocks
from glensidec.backend.lower import ArrayGemm, Fused, Map, Reduce


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
    assert not any(isinstance(instruction, ArrayGemm) and ROW_SUMS not in instruction.note
                   for instruction in lowered.instructions)  # (LayerNorm's: accel_row_sums)
    # what the host computes for the division: each row's (offset, reciprocal), per block
    packing = [instruction for instruction in lowered.instructions
               if isinstance(instruction, Fused) and "softmax·V" in instruction.note]
    assert len(packing) == TINY.heads
    assert all(int(np.prod(instruction.dst.shape)) == tokens * -(-width // 16)
               for instruction in packing)
    expected = _interpreted(source, inputs)
    actual = _lowered_result(source, lowered, inputs, 16)
    np.testing.assert_array_equal(actual.reshape(expected.shape), expected)


@pytest.mark.parametrize("tokens", [21, 24])
def test_softmaxs_exponentials_and_maxima_are_layers(tmp_path: Path,
                                                               tokens: int) -> None:
    """e = exp_table[requantize(q − max q)] of every head is one depthwise layer in the
    per-row mode (offset −max per row) with the exp table: of 21 keys the whole block of
    16 on the accelerator (rows 21 bytes apart) and the other 5 on the host; of 24 (a
    last block of 8, room for a row's values) all of them. No host loop over every score
    subtracts or looks up; the lowered program gives the interpreter's integers.

    Each row's maximum is a 2×2 max-pool of its scores as 4 pixels of 6 channels (21 keys
    padded to 24 with the minimum, the score layers writing rows 24 bytes apart; 24 keys
    as they are), the host's maximum over the 6 block maxima."""
    size = Size(tokens, TINY.features, TINY.heads, TINY.hidden)
    source, inputs = _quantized_block(tmp_path, pre_norm=True, size=size)
    lowered = _accelerated(source, "16x16")
    scores = TINY.heads * tokens
    exponentials = [layer for layer in lowered.accel_layers() if layer.table is not None
                    and layer.residual_add is not None and layer.residual_add.rows]
    assert [(layer.m, layer.n, layer.groups) for layer in exponentials] == \
        [(scores, 16, 16)] if tokens == 21 else [(scores, 24, 24)]
    # 21 keys: the scores re-laid 24 bytes apart for the row maximum's pool (below)
    assert (exponentials[0].input_pitch, exponentials[0].output_pitch) == \
        ((24, 21) if tokens == 21 else (0, 0))
    pools = [layer for layer in lowered.accel_layers() if layer.pool]
    assert [(layer.m, layer.n, layer.image, layer.kernel, layer.stride) for layer in pools] \
        == [(scores, 6, (scores * 2, 2, 6), 2, 2)]
    scoring = [layer for layer in lowered.accel_layers() if layer.multiplies and
               (layer.m, layer.k, layer.n) == (tokens, TINY.features // TINY.heads, tokens)]
    assert len(scoring) == TINY.heads
    assert all(layer.output_pitch == (24 if tokens == 21 else 0) for layer in scoring)
    maxima = [instruction for instruction in lowered.instructions
              if isinstance(instruction, Reduce) and instruction.op == "reduce-max"]
    assert [instruction.src.shape for instruction in maxima] == [(scores, 6)]
    # the host's loops over scores: only the 5 columns after the layer's
    host = [instruction.dst.shape for instruction in lowered.instructions
            if isinstance(instruction, (Map, Fused)) and
            instruction.dst.shape[:-1] == (1, TINY.heads, tokens)]
    assert host == ([(1, TINY.heads, tokens, 5)] * 2 if tokens == 21 else []), host
    # Σe: the exponentials' rows times a column of ones, one array call
    assert [(gemm.m, gemm.k, gemm.n) for gemm in lowered.instructions
            if isinstance(gemm, ArrayGemm) and "Σe" in gemm.note] == [(scores, tokens, 1)]
    expected = _interpreted(source, inputs)
    actual = _lowered_result(source, lowered, inputs, 16)
    np.testing.assert_array_equal(actual.reshape(expected.shape), expected)


@pytest.mark.slow
@pytest.mark.rtl
def test_softmaxs_exponential_layer_cosimulates_bit_exactly(tmp_path: Path,
                                                            sim_cache: Path) -> None:
    """The pre-norm block of 21 tokens compiled by default: its exponentials layer (input
    and output pitch 21, the per-row offsets, the exp table) and the host's last 5
    columns give the interpreter's integers in the C program and on ws_accel's RTL, every
    layer at its predicted cycles."""
    size = Size(21, TINY.features, TINY.heads, TINY.hidden)
    source, inputs = _quantized_block(tmp_path, pre_norm=True, size=size)
    run = _checked_cosimulation(source, None, inputs, tmp_path, sim_cache)
    # the exponentials: both heads' rows, the block of 16 keys
    assert [(call["m"], call["k"], call["n"]) for call in run.report["calls"]].count(
        (TINY.heads * 21, 16, 16)) == 1


def test_a_rows_maximum_takes_the_cheapest_square_of_pixels() -> None:
    """The squares a row of keys is laid out as for its pool: vit_b_16's 197 keys as 5×5
    pixels of 8 (3 bytes of padding), Swin's 49 as 2×2 of 13; a row of 2 keys stays on
    the host (no square beats its 2 cycles)."""
    assert (row_blocks(197, 16), row_blocks(49, 16), row_blocks(2, 16)) == \
        (_Blocks(8, 5), _Blocks(13, 2), None)
    assert _Blocks(8, 5).pitch == 200
