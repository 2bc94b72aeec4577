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


def bilinear_head(seed: int = 0) -> Any:
    """A stride-2 convolution with ReLU (8 channels of 4×4), then a bilinear Resize to 16×16
    (half-pixel, as F.interpolate(mode="bilinear") exports): the imported Resize is one
    product along the rows (moved last and back) and one along the columns."""
    g = OnnxGraph(seed)
    x = g.input("input", [1, 3, 8, 8])
    x = g.node("Relu", [g.conv(x, 3, 8, 3, stride=2, pad=1)])
    y = g.node("Resize", [x, "", "", g.const("sizes", np.array([1, 8, 16, 16], np.int64))],
               mode="linear", coordinate_transformation_mode="half_pixel")
    return g.model(y, [1, 8, 16, 16])


def _quantized_bilinear_head(tmp_path: Path, name: str) -> Path:
    from test_quantize import saved_int8

    return saved_int8(bilinear_head(), tmp_path, name, 8)


@pytest.mark.parametrize("array", ["4x4", "16x16"])
def test_a_bilinear_resize_requantizes_its_row_product_in_the_epilogue(
        array: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (issue 26, lraspp 16.3 % host): the row product's accumulator was moved
    back (`access-move-axis`) before its requantize, so the multipliers (one per output row)
    lay on an axis the epilogue does not scale and the host requantized every element.
    Requantized before the move, both products are accelerator layers with their epilogues,
    the host only moves data, its cycles fall, and the integers are the same as before."""
    from test_accel_offload import _accelerated, _interpreted, _lowered_result, _random_inputs

    from glensidec.backend.lower import AccelLayer, Copy, Fill
    from glensidec.backend.report import machine_cycles
    from glensidec.frontends import quantize as quantize_module
    from glensidec.hardware.array import ArrayConfig

    rows, cols = (int(value) for value in array.split("x"))
    now = _quantized_bilinear_head(tmp_path, "now")
    with monkeypatch.context() as patched:  # the quantizer's form before the fix
        patched.setattr(quantize_module, "_product_moved", lambda term, acc: False)
        before = _quantized_bilinear_head(tmp_path, "before")
    lowered, lowered_before = _accelerated(now, array), _accelerated(before, array)
    assert all(isinstance(instruction, (AccelLayer, Copy, Fill))
               for instruction in lowered.instructions)
    assert len(lowered.accel_layers()) >= 3  # the convolution and the two products
    host = machine_cycles(lowered, ArrayConfig(rows, cols)).host
    assert host < machine_cycles(lowered_before, ArrayConfig(rows, cols)).host
    for seed in range(2):
        inputs = _random_inputs(now, seed)
        expected = _interpreted(now, inputs)
        assert np.array_equal(expected, _interpreted(before, inputs))
        got = _lowered_result(now, lowered, inputs, rows)
        assert np.array_equal(got.reshape(expected.shape), expected)
        assert len(np.unique(expected)) > 10  # not all clipped


@pytest.mark.slow
@pytest.mark.rtl
def test_a_bilinear_resize_cosimulates_bit_and_cycle_exactly(tmp_path: Path,
                                                             sim_cache: Path) -> None:
    """The default compile's C program and ws_accel run both resize products with their
    epilogues bit for bit as the interpreter, every layer in its predicted cycles."""
    from test_accel_offload import _checked_cosimulation, _random_inputs

    source = _quantized_bilinear_head(tmp_path, "head")
    inputs = _random_inputs(source, 3)
    ran = _checked_cosimulation(source, "4x4", inputs, tmp_path, sim_cache)
    assert len(ran.report["calls"]) >= 3  # the convolution and the two products
