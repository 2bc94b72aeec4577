"""A LayerNorm's row sums Σq and Σq² as array calls (`backend/accel_row_sums.py`).

Σq is the int8 rows times a column of ones; Σq² the diagonal of each block of rows times
its transpose (blocks of the array's columns; the last one shorter when the rows do not
divide). The quick tests run the lowered program in numpy against the interpreter;
`test_accel_gelu.py` co-simulates a block with them on the array's RTL.
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

from glensidec.backend.lower import CONSTANT, Reduce

FEATURES = 16


def normalised_linear(tokens: int, seed: int = 0) -> Any:
    """linear(LayerNorm(x)), x of (1, tokens, FEATURES)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, tokens, FEATURES])
    y = linear(g, layer_norm(g, x, FEATURES), FEATURES, 8)
    return g.model(y, [1, tokens, 8])


@pytest.mark.parametrize(("tokens", "array"), [(12, "8x8"), (8, "8x8"), (5, "4x4")])
def test_a_layer_norms_row_sums_are_array_calls(tokens: int, array: str,
                                                  tmp_path: Path) -> None:
    """No reduction is left on the host; one call for Σq and one per block of rows for
    Σq² (the last block shorter when the rows do not divide); the program computes the
    interpreter's integers (the LayerNorm's normalisation on the host too, on 4 columns)."""
    source = saved_int8(normalised_linear(tokens), tmp_path, "ln", 4)
    lowered = _accelerated(source, array)
    columns = int(array.split("x")[1])
    assert not any(isinstance(instruction, Reduce) for instruction in lowered.instructions)
    calls = lowered.array_calls()
    ones = [call for call in calls if lowered.buffer_of(call.b).kind == CONSTANT]
    assert [(call.m, call.k, call.n) for call in ones] == [(tokens, FEATURES, 1)]
    blocks = [(call.m, call.k, call.n) for call in calls if call not in ones]
    sizes = [min(columns, tokens - start) for start in range(0, tokens, columns)]
    assert blocks == [(size, FEATURES, size) for size in sizes]
    for seed in range(3):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, int(array.split("x")[0]))
        assert np.array_equal(got.reshape(expected.shape), expected), seed
