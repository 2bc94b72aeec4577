"""Segmentation heads in small (issue 30): a dilated-convolution head upsampled by a
bilinear Resize (FCN/DeepLabV3's shape) and a head upsampled by a nearest Resize (as
LRASPP's), built with onnx.helper as torchvision exports them; each matches onnxruntime in
f32, and quantized runs bit-exactly in the interpreter, the C program and the RTL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph, imported, onnx_inputs, run_interpreter, run_onnxruntime


def fcn_head(seed: int = 0) -> Any:
    """A stride-2 stem, a 3×3 convolution of dilation 2 (ResNet's replace_stride_with_dilation),
    a 1×1 classifier, and F.interpolate(size=input, mode="bilinear", align_corners=False)."""
    g = OnnxGraph(seed)
    x = g.input("input", [1, 3, 16, 16])
    x = g.node("Relu", [g.conv(x, 3, 8, 3, stride=2, pad=1)])
    x = g.node("Relu", [g.node("Conv", [x, g.random("wd", (8, 8, 3, 3), 0.2),
                                       g.random("bd", (8,), 0.1)], dilations=[2, 2],
                               pads=[2, 2, 2, 2])])
    x = g.conv(x, 8, 4, 1)
    y = g.node("Resize", [x, "", "", g.const("sizes", np.array([1, 4, 16, 16], np.int64))],
               mode="linear", coordinate_transformation_mode="pytorch_half_pixel")
    return g.model(y, [1, 4, 16, 16])


def lraspp_head(seed: int = 0) -> Any:
    """A stride-2 stem, a dilated depthwise 3×3 (MobileNetV3's dilated blocks), a 1×1
    classifier, and F.interpolate(scale_factor=2, mode="nearest")."""
    g = OnnxGraph(seed)
    x = g.input("input", [1, 4, 12, 12])
    x = g.node("Relu", [g.conv(x, 4, 8, 3, stride=2, pad=1)])
    x = g.node("Relu", [g.node("Conv", [x, g.random("wd", (8, 1, 3, 3), 0.3)], group=8,
                               dilations=[2, 2], pads=[2, 2, 2, 2])])
    x = g.conv(x, 8, 3, 1)
    y = g.node("Resize", [x, "", g.const("scales", np.array([1, 1, 2, 2], "f4"))],
               mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    return g.model(y, [1, 3, 12, 12])


HEADS = {"fcn": fcn_head, "lraspp": lraspp_head}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_the_head_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    model = HEADS[name]()
    program = imported(model, tmp_path)
    inputs = onnx_inputs(model)
    expected = run_onnxruntime(model, inputs)
    actual = run_interpreter(program, {"input": inputs["input"]})
    relative = float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
    assert actual.shape == expected.shape and relative <= 1e-5, relative


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("name", sorted(HEADS))
def test_the_int8_head_is_bit_exact_in_interpreter_c_and_rtl(name: str, tmp_path: Path,
                                                             sim_cache: Path) -> None:
    from test_models_cosim import check_agreement
    from test_quantize import calibration_for, run_quantized, sample_list

    from glensidec.frontends.quantize import quantize

    program = imported(HEADS[name](), tmp_path)
    calibration = calibration_for(program, 8)
    quantized = quantize(program, calibration, per_channel=True, symmetric_activations=True)
    sample = sample_list(calibration, 1)[0]
    expected = run_interpreter(program, sample)
    relative = float(np.linalg.norm(run_quantized(quantized, sample) - expected)
                     / np.linalg.norm(expected))
    assert relative <= 0.05, relative
    check_agreement(quantized, sample, "8x8", tmp_path, sim_cache)
