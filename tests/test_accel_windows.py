"""Convolutions whose windows are not k×k with adjacent taps run as accelerator layers:
Inception's 1×7 and 7×1 (padded along one axis) and FCN's dilated 3×3 (padding = dilation,
imported as strided taps). Before, the host built their im2col matrices and padded maps
(inception_v3 33 % host, fcn_resnet50 66 %, issues 26 and 30); now the DMA reads each
window from the previous layer's rows, padding by its bounds.
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

from glensidec.backend.lower import AccelLayer, LoweredProgram
from glensidec.backend.report import machine_cycles
from glensidec.hardware.array import ArrayConfig

#: name → (ONNX Conv attributes, the window the layer must have: kernel (h, w), padding
#: (h, w), dilation)
WINDOWS: dict[str, tuple[dict[str, Any], tuple[tuple[int, int], tuple[int, int],
                                               tuple[int, int]]]] = {
    "1x7": ({"kernel_shape": [1, 7], "pads": [0, 3, 0, 3]}, ((1, 7), (0, 3), (1, 1))),
    "7x1": ({"kernel_shape": [7, 1], "pads": [3, 0, 3, 0]}, ((7, 1), (3, 0), (1, 1))),
    "3x3d2": ({"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "dilations": [2, 2]},
              ((3, 3), (2, 2), (2, 2))),
}


def windows_net(channels: int = 8, size: tuple[int, int] = (6, 7)) -> Any:
    """A 1×1 convolution, then the 1×7, the 7×1 and the dilated 3×3, each with a ReLU,
    then a 1×1: every window reads the layer before's rows."""
    g = OnnxGraph(5)
    x = g.input("input", [1, channels, *size])
    x = g.node("Relu", [g.conv(x, channels, channels, 1)])
    for name, (attributes, _) in WINDOWS.items():
        kernel = attributes["kernel_shape"]
        weights = g.random(f"w{name}", (channels, channels, *kernel),
                           (2.0 / (channels * kernel[0] * kernel[1])) ** 0.5)
        x = g.node("Relu", [g.node("Conv", [x, weights, g.random(f"b{name}", (channels,), 0.1)],
                                   name=f"conv{name}", **attributes)])
    return g.model(g.conv(x, channels, channels, 1), [1, channels, *size])


def _quantized(tmp_path: Path) -> Path:
    return saved_int8(windows_net(), tmp_path, "windows", 8)


def _window(layer: AccelLayer) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    from glensidec.backend.accel_layers import layer_geometry

    geometry = layer_geometry(layer)
    return geometry.kernel_hw, geometry.padding_hw, geometry.dilation


def _check_layers(lowered: LoweredProgram, array: str) -> None:
    """Each window is one layer reading the rows before it, padded by the DMA; after the
    program's input (which the host copies into the first layer's rows) the host does
    nothing: no copy, fill or im2col."""
    windows = {_window(layer) for layer in lowered.accel_layers() if layer.image}
    assert {window for _, window in WINDOWS.values()} <= windows
    first = next(index for index, instruction in enumerate(lowered.instructions)
                 if isinstance(instruction, AccelLayer))
    assert all(isinstance(instruction, AccelLayer)
               for instruction in lowered.instructions[first:])
    rows, cols = (int(value) for value in array.split("x"))
    cycles = machine_cycles(lowered, ArrayConfig(rows, cols))
    assert cycles.host <= 8 * 6 * 7, cycles  # at most the copy of the input


@pytest.mark.parametrize("array", ["4x4", "8x8"])
def test_non_square_and_dilated_convolutions_are_accelerator_layers(
        array: str, tmp_path: Path) -> None:
    """Regression (issues 26/30): the 1×7 and 7×1 went through a host im2col matrix and
    the dilated 3×3 through padded copies of every window; now each is one layer with its
    window, host share 0, and the layers compute what the interpreter does."""
    source = _quantized(tmp_path)
    lowered = _accelerated(source, array)
    _check_layers(lowered, array)
    for seed in range(2):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, int(array.split("x")[0]))
        assert np.array_equal(got.reshape(expected.shape), expected)
        assert len(np.unique(expected)) > 10  # not all clipped


@pytest.mark.slow
@pytest.mark.rtl
def test_non_square_and_dilated_convolutions_cosimulate_bit_and_cycle_exactly(
        tmp_path: Path, sim_cache: Path) -> None:
    """The default compile's C program and ws_accel agree with the interpreter bit for
    bit, every layer in its predicted cycles."""
    source = _quantized(tmp_path)
    inputs = _random_inputs(source, 3)
    ran = _checked_cosimulation(source, "4x4", inputs, tmp_path, sim_cache)
    assert len(ran.report["calls"]) >= 5  # the five convolutions at least, on ws_accel
