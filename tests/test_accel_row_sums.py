"""A LayerNorm's row sums Σq and Σq² on the accelerator (`backend/accel_row_sums.py`).

Σq is the int8 rows times a column of ones. Σq² is, where a row's channels are whole
blocks of the array's columns, the rows' base-128 digits of q² (two depthwise 1×1 layers
with the digits' tables) times −128 and 1; elsewhere the diagonal of each block of rows
times its transpose (blocks of the array's columns; the last one shorter when the rows do
not divide). The quick tests run the lowered program in numpy against the interpreter;
`test_accel_gelu.py` and `test_accel_stage_end.py` co-simulate blocks with them on
ws_accel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph
from test_accel_offload import _accelerated, _interpreted, _lowered_result, _random_inputs
from test_quantize import saved_int8
from test_transformer import layer_norm, linear

from glensidec.backend.accel_row_sums import SQUARE_DIGITS
from glensidec.backend.lower import CONSTANT, AccelLayer, Copy, Fused, LoweredProgram, Reduce


def normalised_linear(tokens: int, features: int, seed: int = 0) -> Any:
    """linear(LayerNorm(x)), x of (1, tokens, features)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, tokens, features])
    y = linear(g, layer_norm(g, x, features), features, 8)
    return g.model(y, [1, tokens, 8])


def _assert_interpreters_agree(source: Path, lowered: LoweredProgram, rows: int) -> None:
    for seed in range(3):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, rows)
        assert np.array_equal(got.reshape(expected.shape), expected), seed


def test_the_digits_of_a_square_are_int8_and_make_it() -> None:
    """−128·(−h) + l = q² for every int8 q, with −h and l int8."""
    high, low = SQUARE_DIGITS
    squares = np.arange(-128, 128) ** 2
    assert np.array_equal(-128 * high + low, squares)
    assert high.min() >= -128 and high.max() <= 0 and low.min() >= 0 and low.max() <= 127


@pytest.mark.parametrize(("tokens", "array"), [(12, "8x8"), (5, "8x8")])
def test_a_layer_norms_sum_of_squares_is_two_table_layers_and_an_array_call(
        tokens: int, array: str, tmp_path: Path) -> None:
    """No reduction, and no host copy or loop over every element, is left; one call for
    Σq, two depthwise layers with the digits' tables writing [−h | l] rows and one call
    summing them for Σq²; the program computes the interpreter's integers."""
    features = 16
    source = saved_int8(normalised_linear(tokens, features), tmp_path, "ln", 4)
    lowered = _accelerated(source, array)
    assert not any(isinstance(instruction, Reduce) for instruction in lowered.instructions)
    calls = lowered.array_calls()
    assert [(call.m, call.k, call.n) for call in calls] == \
        [(tokens, features, 1), (tokens, 2 * features, 1)]
    assert all(lowered.buffer_of(call.b).kind == CONSTANT for call in calls)
    digits = [layer for layer in lowered.accel_layers() if layer.table is not None]
    assert [(layer.m, layer.n, layer.output_pitch) for layer in digits] == \
        [(tokens, features, 2 * features)] * 2
    assert {layer.dst.buffer for layer in digits} == {calls[1].a.buffer}
    assert not [instruction for instruction in lowered.instructions
                if isinstance(instruction, Copy | Fused) and
                np.prod(instruction.dst.shape) >= tokens * features]
    _assert_interpreters_agree(source, lowered, int(array.split("x")[0]))


@pytest.mark.parametrize(("tokens", "array"), [(12, "8x8"), (8, "8x8"), (5, "4x4")])
def test_without_whole_column_blocks_the_sum_of_squares_is_a_product_per_block(
        tokens: int, array: str, tmp_path: Path) -> None:
    """Channels that are not whole blocks of the array's columns (6 here): one call for
    Σq and one per block of rows for Σq² (the last block shorter when the rows do not
    divide), no table layer; the program computes the interpreter's integers."""
    features = 6
    source = saved_int8(normalised_linear(tokens, features), tmp_path, "ln", 4)
    lowered = _accelerated(source, array)
    columns = int(array.split("x")[1])
    assert not any(isinstance(instruction, Reduce) for instruction in lowered.instructions)
    assert not any(isinstance(layer, AccelLayer) and layer.table is not None
                   for layer in lowered.accel_layers())
    calls = lowered.array_calls()
    ones = [call for call in calls if lowered.buffer_of(call.b).kind == CONSTANT]
    assert [(call.m, call.k, call.n) for call in ones] == [(tokens, features, 1)]
    blocks = [(call.m, call.k, call.n) for call in calls if call not in ones]
    sizes = [min(columns, tokens - start) for start in range(0, tokens, columns)]
    assert blocks == [(size, features, size) for size in sizes]
    _assert_interpreters_agree(source, lowered, int(array.split("x")[0]))


def test_a_layer_norm_whose_last_column_block_cannot_hold_a_rows_values_normalises_on_the_host(
        tmp_path: Path) -> None:
    """The per-row mode reads each row's offset and reciprocal from the first 8 bytes of
    every block of the array's columns: 6 channels on an 8×8 array have no such block, and
    the normalisation layer made for them read past its rows (the numpy model refused to
    run it). The host normalises them; the program computes the interpreter's integers."""
    source = saved_int8(normalised_linear(5, 6), tmp_path, "ln", 4)
    lowered = _accelerated(source, "8x8")
    assert not any(layer.residual_add is not None and layer.residual_add.rows
                   for layer in lowered.accel_layers())
    _assert_interpreters_agree(source, lowered, 8)
