"""Random-weight ONNX networks for the host benchmark: ResNet-18, ResNet-50, MobileNet-v1
and -v2.

Layer for layer as torchvision / the MobileNet paper define them (batch 1, 3x224x224),
built with the tests' `OnnxGraph` so no download is needed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the ONNX model builder lives with the tests

from onnx_models import OnnxGraph  # noqa: E402


def _stem(g: OnnxGraph) -> str:
    x = g.input("image", [1, 3, 224, 224])
    x = g.node("Relu", [g.bn(g.conv(x, 3, 64, 7, 2, 3, bias=False), 64)])
    return g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])


def _head(g: OnnxGraph, x: str, channels: int) -> Any:
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model(g.gemm(x, channels, 1000), [1, 1000])


def _basic_block(g: OnnxGraph, x: str, cin: int, cout: int, stride: int) -> str:
    y = g.node("Relu", [g.bn(g.conv(x, cin, cout, 3, stride, 1, bias=False), cout)])
    y = g.bn(g.conv(y, cout, cout, 3, 1, 1, bias=False), cout)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.bn(g.conv(x, cin, cout, 1, stride, 0, bias=False), cout)
    return g.node("Relu", [g.node("Add", [y, shortcut])])


def _bottleneck(g: OnnxGraph, x: str, cin: int, width: int, stride: int) -> str:
    cout = 4 * width
    y = g.node("Relu", [g.bn(g.conv(x, cin, width, 1, 1, 0, bias=False), width)])
    y = g.node("Relu", [g.bn(g.conv(y, width, width, 3, stride, 1, bias=False), width)])
    y = g.bn(g.conv(y, width, cout, 1, 1, 0, bias=False), cout)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.bn(g.conv(x, cin, cout, 1, stride, 0, bias=False), cout)
    return g.node("Relu", [g.node("Add", [y, shortcut])])


def resnet18(seed: int = 0) -> Any:
    """torchvision's ResNet-18: 11.7 M parameters, 1.8 GMAC."""
    g = OnnxGraph(seed)
    x, channels = _stem(g), 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            x = _basic_block(g, x, channels, width, 2 if stage > 0 and block == 0 else 1)
            channels = width
    return _head(g, x, channels)


def resnet50(seed: int = 0) -> Any:
    """torchvision's ResNet-50 (stride on the 3x3 conv): 25.6 M parameters, 4.1 GMAC."""
    g = OnnxGraph(seed)
    x, channels = _stem(g), 64
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for block in range(blocks):
            x = _bottleneck(g, x, channels, width, 2 if stage > 0 and block == 0 else 1)
            channels = 4 * width
    return _head(g, x, channels)


MOBILENET_V1 = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def mobilenet_v1(seed: int = 0) -> Any:
    """MobileNet-v1 1.0/224: 4.2 M parameters, 0.57 GMAC, 13 depthwise-separable blocks."""
    g = OnnxGraph(seed)
    x = g.input("image", [1, 3, 224, 224])
    x = g.node("Relu", [g.bn(g.conv(x, 3, 32, 3, 2, 1, bias=False), 32)])
    channels = 32
    for width, stride in MOBILENET_V1:
        x = g.node("Relu", [g.bn(g.conv(x, channels, channels, 3, stride, 1, group=channels,
                                        bias=False), channels)])
        x = g.node("Relu", [g.bn(g.conv(x, channels, width, 1, 1, 0, bias=False), width)])
        channels = width
    return _head(g, x, channels)


#: torchvision's inverted residual settings: expansion t, channels c, blocks n, stride s
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))


def _relu6(g: OnnxGraph, x: str) -> str:
    return g.node("Clip", [x, g.const(f"lo{g.count}", np.array(0, "f4")),
                           g.const(f"hi{g.count}", np.array(6, "f4"))])


def mobilenet_v2(seed: int = 0) -> Any:
    """torchvision's MobileNet-v2 1.0/224: 3.5 M parameters, 0.3 GMAC, 17 inverted residual
    blocks (1x1 expand, ReLU6, depthwise 3x3, ReLU6, 1x1 project, a skip add where the
    shape stays)."""
    g = OnnxGraph(seed)
    x = g.input("image", [1, 3, 224, 224])
    x = _relu6(g, g.bn(g.conv(x, 3, 32, 3, 2, 1, bias=False), 32))
    channels = 32
    for expansion, width, blocks, first_stride in MOBILENET_V2:
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            hidden = channels * expansion
            y = x
            if expansion != 1:
                y = _relu6(g, g.bn(g.conv(y, channels, hidden, 1, bias=False), hidden))
            y = _relu6(g, g.bn(g.conv(y, hidden, hidden, 3, stride, 1, group=hidden,
                                      bias=False), hidden))
            y = g.bn(g.conv(y, hidden, width, 1, bias=False), width)
            x = g.node("Add", [y, x]) if stride == 1 and channels == width else y
            channels = width
    x = _relu6(g, g.bn(g.conv(x, channels, 1280, 1, bias=False), 1280))
    return _head(g, x, 1280)
