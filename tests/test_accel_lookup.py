"""Element-wise non-linearities in the epilogue: an int8 `lookup` (hardswish, sigmoid …)
after a layer's requantize and clip runs in ws_epilogue's lookup table, not on the host.

The quick tests lower programs with the accelerator passes and run the lowered program
in numpy (each layer as what it declares, its table included); the slow one builds the C
program and co-simulates it on ws_accel: interpreter = C = RTL, cycles as predicted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_accel_layers import depthwise
from test_accel_offload import (
    _accelerated,
    _assert_interpreters_agree,
    _checked_cosimulation,
    _random_inputs,
)

from glensidec.backend.lower import AccelLayer, Map, constant_array
from glensidec.lang import data
from glensidec.lang.dtypes import lookup_table
from glensidec.lang.syntax import read_program

# A matrix product, requantized, through a quantized sigmoid (the output's zero point −128).
GEMM_SIGMOID = """
(input a i8 (shape 12 20))
(weight b i8 (shape 20 8) "gemm.npz")
(compute (lookup sigmoid 0.05 0 0.00390625 -128)
 (compute (requantize 1518500250 0 44 3)
  (compute dot-product
   (access-cartesian-product (access (access-tensor a) 1)
                             (access (access-transpose (access-tensor b) (list 1 0)) 1)))))
"""
HARDSWISH = "(compute (lookup hardswish 0.05 -3 0.04 5)\n"


def _gemm_sigmoid(root: Path) -> Path:
    rng = np.random.default_rng(3)
    np.savez(root / "gemm.npz", b=rng.integers(-128, 128, (20, 8)).astype(np.int8))
    path = root / "gemm_sigmoid.gs"
    path.write_text(GEMM_SIGMOID)
    return path


def _depthwise_hardswish(root: Path, channels: int) -> Path:
    """A depthwise convolution (per-channel requantize, relu) through a hardswish."""
    path = depthwise(root, channels)
    text = path.read_text()
    start = text.index("(compute relu")
    path.write_text(text[:start] + HARDSWISH + text[start:] + ")\n")
    return path


def _tables(source: Path, array: str) -> list[AccelLayer]:
    """The layers of the accelerated program that carry a lookup table; no host lookup
    may be left."""
    lowered = _accelerated(source, array)
    assert not any(isinstance(instruction, Map) and instruction.op.name == "lookup"
                   for instruction in lowered.instructions)
    return [layer for layer in lowered.accel_layers() if layer.table is not None]


SIGMOID_TABLE = lookup_table("sigmoid", 0.05, 0, 0.00390625, -128)
HARDSWISH_TABLE = lookup_table("hardswish", 0.05, -3, 0.04, 5)


@pytest.mark.parametrize(("make", "array", "expected_table"), [
    (_gemm_sigmoid, "4x4", SIGMOID_TABLE),
    (lambda root: _depthwise_hardswish(root, 20), "4x4", HARDSWISH_TABLE),
    (lambda root: _depthwise_hardswish(root, 6), "8x8", HARDSWISH_TABLE)])
def test_a_lookup_after_a_layer_runs_in_its_epilogue(make: object, array: str,
                                                     expected_table: np.ndarray,
                                                     tmp_path: Path) -> None:
    """The lookup joins the layer (a matrix layer, a grouped depthwise one), its table the
    interpreter's, and the lowered program computes what the source does."""
    assert callable(make)
    source = make(tmp_path)
    lowered = _accelerated(source, array)
    (layer,) = _tables(source, array)
    assert layer.table is not None
    weights = data.load_weights(read_program(source))
    table = constant_array(lowered.buffer_of(layer.table), weights)
    assert np.array_equal(table.reshape(-1), expected_table)
    _assert_interpreters_agree(source, lowered, int(array.split("x")[0]))


@pytest.mark.slow
@pytest.mark.rtl
def test_layers_with_lookup_tables_cosimulate_on_ws_accel(tmp_path: Path,
                                                          sim_cache: Path) -> None:
    """The table chunks' commands and the lookup on the RTL: interpreter = C = ws_accel,
    every layer at its predicted cycles."""
    for name, source in (("gemm", _gemm_sigmoid(tmp_path)),
                         ("depthwise", _depthwise_hardswish(tmp_path, 6))):
        workdir = tmp_path / name
        workdir.mkdir()
        inputs = _random_inputs(source, 5)
        _checked_cosimulation(source, "4x4", inputs, workdir, sim_cache)
