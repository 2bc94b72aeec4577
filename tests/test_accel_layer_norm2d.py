"""ConvNeXt's LayerNorm2d on the accelerator: conv → permute to channels-last → LayerNorm →
permute back → conv.

With LayerNorm's default scale and bias (1 and 0, as torchvision initialises ConvNeXt's),
the quantizer's normalisation loop ends at t = e·h + ⌊e·l / 2^15⌋ and its requantize
reads t through the permutation back to NCHW, a host instruction of its own (convnext_tiny's
stem and three downsampling LayerNorms: 7 % of its predicted cycles in that loop).
`accel_layer_norm` takes the requantize into the per-row layer too, and the permutation
becomes a copy of the layer's rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph
from test_accel_offload import (
    _accelerated,
    _checked_cosimulation,
    _interpreted,
    _lowered_result,
    _random_inputs,
)
from test_quantize import saved_int8

from glensidec.backend.lower import AccelLayer, Fused, Map

CHANNELS, SIDE = 16, 4


def layer_norm_2d_block(seed: int = 0) -> Any:
    """conv1×1(permute back(LayerNorm(permute(conv1×1(x))))), x of (1, 8, SIDE, SIDE)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 8, SIDE, SIDE])
    last = g.node("Transpose", [g.conv(x, 8, CHANNELS, 1)], perm=[0, 2, 3, 1])
    scale = g.const("ln_scale", np.ones(CHANNELS, "f4"))
    bias = g.const("ln_bias", np.zeros(CHANNELS, "f4"))
    normalised = g.node("LayerNormalization", [last, scale, bias], axis=-1, epsilon=1e-6)
    y = g.conv(g.node("Transpose", [normalised], perm=[0, 3, 1, 2]), CHANNELS, 8, 1)
    return g.model(y, [1, 8, SIDE, SIDE])


def test_a_layer_norm_whose_requantize_reads_it_permuted_is_a_per_row_layer(
        tmp_path: Path) -> None:
    """The normalisation and its requantize are one per-row layer; no host instruction
    requantizes every element, and none computes e or t for every element any more."""
    source = saved_int8(layer_norm_2d_block(), tmp_path, "ln2d", 4)
    lowered = _accelerated(source, "8x8")
    (normalised,) = [layer for layer in lowered.accel_layers()
                     if layer.residual_add is not None and layer.residual_add.rows]
    assert (normalised.m, normalised.n) == (SIDE * SIDE, CHANNELS)
    host = [instruction for instruction in lowered.instructions
            if not isinstance(instruction, AccelLayer)]
    assert not any(isinstance(instruction, Map) and instruction.op.name == "requantize" and
                   np.prod(instruction.dst.shape) == SIDE * SIDE * CHANNELS
                   for instruction in host)  # (σ's start, one value per row, stays)
    assert not any(isinstance(instruction, Fused) and len(instruction.steps) >= 3 and
                   instruction.dst.shape[-1:] == (CHANNELS,) and
                   np.prod(instruction.dst.shape) == SIDE * SIDE * CHANNELS
                   for instruction in host)
    for seed in range(3):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, 8)
        assert np.array_equal(got.reshape(expected.shape), expected), seed
        assert len(np.unique(expected)) > 20  # not all clipped


@pytest.mark.slow
@pytest.mark.rtl
def test_the_layer_norm_2d_block_cosimulates_on_ws_accel(tmp_path: Path,
                                                         sim_cache: Path) -> None:
    """As `glensidec compile` builds it: interpreter = C = ws_accel, every layer at its
    predicted cycles."""
    source = saved_int8(layer_norm_2d_block(), tmp_path, "ln2d", 4)
    inputs = _random_inputs(source, 4)
    workdir = tmp_path / "compiled"
    workdir.mkdir()
    _checked_cosimulation(source, "8x8", inputs, workdir, sim_cache)
