"""The epilogue's per-row mode only where a layer's rows can carry their values.

A per-row layer (LayerNorm's normalisation, softmax·V's division, softmax's exponentials)
reads each row's offset and reciprocal from the first 8 bytes of the residual row of every
N block of the array's columns. The passes write those values as i32, `columns / 4` per
row: a LayerNorm over 5, 15, 17, 20 or 36 features on the 16×16 accelerator (a row not a
multiple of 4 bytes, or a last block of 4 columns) gave the C program values from the
wrong rows (an imported `nn.MultiheadAttention(15, 3)` + `nn.LayerNorm(15)`: 90 of 105
int8 outputs differed from the interpreter) and made `glensidec diff` crash. Such rows
stay on the host now (`glensidec.hardware.accel.holds_row_values`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_c_program, save_inputs
from onnx_models import OnnxGraph
from test_accel_offload import _accelerated, _interpreted, _random_inputs
from test_quantize import saved_int8
from test_transformer import layer_norm, linear

from glensidec.hardware.accel import holds_row_values

TOKENS = 3


def linear_layer_norm(features: int, seed: int = 0) -> Any:
    """LayerNorm(x @ W + b) over `features`, x of (1, TOKENS, features)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, TOKENS, features])
    return g.model(layer_norm(g, linear(g, x, features, features), features),
                   [1, TOKENS, features])


def _per_row_layers(features: int, tmp_path: Path, array: str) -> int:
    source = saved_int8(linear_layer_norm(features), tmp_path, f"ln{features}", 4)
    lowered = _accelerated(source, array)
    return sum(1 for layer in lowered.accel_layers()
               if layer.residual_add is not None and layer.residual_add.rows)


def test_holds_row_values_needs_whole_i32_rows_and_8_bytes_in_the_last_block() -> None:
    assert [c for c in range(1, 41) if holds_row_values(c, 16)] == [8, 12, 16, 24, 28, 32, 40]
    assert [c for c in range(1, 21) if holds_row_values(c, 8)] == [8, 16]


@pytest.mark.parametrize(("features", "array", "layers"),
                         [(24, "16x16", 1), (16, "8x8", 1),
                          (15, "16x16", 0), (20, "16x16", 0), (20, "8x8", 0), (5, "16x16", 0)])
def test_layer_norm_rows_that_cannot_carry_their_values_stay_on_the_host(
        features: int, array: str, layers: int, tmp_path: Path) -> None:
    assert _per_row_layers(features, tmp_path, array) == layers


@pytest.mark.slow
@pytest.mark.parametrize("features", [15, 20])
def test_a_layer_norm_over_features_the_per_row_mode_cannot_take_runs_alike_in_c(
        features: int, tmp_path: Path) -> None:
    """`glensidec compile` (the whole accelerator, 16×16) and the C program: the
    interpreter's int8 result, bit for bit."""
    source = saved_int8(linear_layer_norm(features), tmp_path, f"ln{features}", 4)
    outdir = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "glensidec", "compile", str(source), "-o",
                    str(outdir)], check=True, capture_output=True)
    for seed in range(2):
        inputs = _random_inputs(source, seed)
        got = run_c_program(outdir, save_inputs(inputs, tmp_path), tmp_path / "c.npy")
        np.testing.assert_array_equal(got, _interpreted(source, inputs))
