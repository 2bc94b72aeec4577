"""ConvNeXt's stage end on the accelerator: a block's residual add, requantized after the
permutation to channels-last that the next stage's LayerNorm2d makes.

In a ConvNeXt block the second linear layer's result, scaled by the layer scale, goes back
to NCHW and is added to the block's input; the last block of a stage hands that sum to
the downsampling LayerNorm2d, which permutes it to NHWC first. The quantizer then
requantizes the add after that permutation, so the add (an i32 loop over NCHW copies of
two layers' rows) and its requantize (a loop of its own, in NHWC order) stayed on the
host: convnext_tiny's three stage ends were 3.7 M of its 9.5 M host cycles (with the
copies to NCHW and back). `accel_residual` reads the two loops as one in NHWC order, which
walks both layers' rows as they are, and the linear layer's epilogue takes the add.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph
from test_accel_offload import (
    _accelerated,
    _assert_interpreters_agree,
    _checked_cosimulation,
    _random_inputs,
)
from test_quantize import saved_int8

from glensidec.backend.lower import AccelLayer, Copy, Fused, Map

CHANNELS, SIDE = 16, 4


def _layer_norm_2d(g: OnnxGraph, x: str) -> str:
    """LayerNorm over the channels of an NCHW map (permuted to NHWC and back)."""
    last = g.node("Transpose", [x], perm=[0, 2, 3, 1])
    scale = g.const(f"ln_scale{g.count}", np.ones(CHANNELS, "f4"))
    bias = g.const(f"ln_bias{g.count}", np.zeros(CHANNELS, "f4"))
    normalised = g.node("LayerNormalization", [last, scale, bias], axis=-1, epsilon=1e-6)
    return g.node("Transpose", [normalised], perm=[0, 3, 1, 2])


def _block(g: OnnxGraph, block_input: str) -> str:
    """ConvNeXt's block (its depthwise convolution 3×3, one linear layer, no GELU):
    block_input + permute back(s·linear(LayerNorm(permute(dwconv(block_input)))))."""
    depthwise = g.conv(block_input, CHANNELS, CHANNELS, 3, pad=1, group=CHANNELS)
    channels_last = g.node("Transpose", [depthwise], perm=[0, 2, 3, 1])
    normalised = g.node("LayerNormalization", [
        channels_last, g.const(f"ln_scale{g.count}", np.ones(CHANNELS, "f4")),
        g.const(f"ln_bias{g.count}", np.zeros(CHANNELS, "f4"))], axis=-1, epsilon=1e-6)
    linear = g.node("MatMul", [normalised, g.random(f"linear{g.count}", (CHANNELS, CHANNELS),
                                                    CHANNELS ** -0.5)])
    scaled = g.node("Mul", [linear, g.const(f"scale{g.count}", np.full(CHANNELS, 0.5, "f4"))])
    return g.node("Add", [g.node("Transpose", [scaled], perm=[0, 3, 1, 2]), block_input])


def stage_end(seed: int = 0) -> Any:
    """conv1×1(LayerNorm2d(block(block(LayerNorm2d(conv1×1(x)))))): a stem, a stage of
    two blocks and the downsampling LayerNorm2d after it (its convolution 1×1 here)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 8, SIDE, SIDE])
    stem = _layer_norm_2d(g, g.conv(x, 8, CHANNELS, 1))
    y = g.conv(_layer_norm_2d(g, _block(g, _block(g, stem))), CHANNELS, 8, 1)
    return g.model(y, [1, 8, SIDE, SIDE])


def test_a_residual_add_requantized_after_its_permutation_is_in_the_layers_epilogue(
        tmp_path: Path) -> None:
    """Each block's linear layer adds the block's input (an earlier layer's rows, read as
    they are: the stem's LayerNorm, the first block's sum), the last one writing the
    requantized sum in NHWC; no host loop or copy touches every element of a sum, and the
    program computes the interpreter's integers."""
    source = saved_int8(stage_end(), tmp_path, "stage_end", 4)
    lowered = _accelerated(source, "8x8")
    layers = lowered.accel_layers()
    added = [layer for layer in layers
             if layer.residual_add is not None and not layer.residual_add.rows]
    assert len(added) == 2
    for layer in added:
        assert layer.residual is not None
        assert [earlier.dst.buffer for earlier in layers[:layers.index(layer)]
                if earlier.dst.buffer == layer.residual.buffer]
    elements = SIDE * SIDE * CHANNELS
    host = [instruction for instruction in lowered.instructions
            if not isinstance(instruction, AccelLayer)]
    assert not [instruction for instruction in host
                if isinstance(instruction, Fused | Map | Copy) and
                np.prod(instruction.dst.shape) == elements and
                lowered.buffer_of(instruction.dst).dtype in ("i8", "i32") and
                instruction.dst.buffer != lowered.output]
    _assert_interpreters_agree(source, lowered, 8, seeds=3)


@pytest.mark.slow
@pytest.mark.rtl
def test_the_stage_end_cosimulates_on_ws_accel(tmp_path: Path, sim_cache: Path) -> None:
    """As `glensidec compile` builds it: interpreter = C = ws_accel, every layer at its
    predicted cycles."""
    source = saved_int8(stage_end(), tmp_path, "stage_end", 4)
    inputs = _random_inputs(source, 4)
    workdir = tmp_path / "compiled"
    workdir.mkdir()
    _checked_cosimulation(source, "8x8", inputs, workdir, sim_cache)
