"""Squeeze-excite on the accelerator: the global average pool of a layer's result that the
channel scale also reads, and the channel scale x·s[c] itself (a 1×1 sum pool whose
epilogue multiplies each column by its run-time scale), both as accelerator layers.

The quick test lowers with the accelerator passes and runs the lowered program in numpy
(each layer as what it declares); the slow one builds the C program and co-simulates it on
ws_accel: interpreter = C = RTL, every layer at its predicted cycles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_accel_layers import depthwise
from test_accel_offload import (
    _accelerated,
    _checked_cosimulation,
    _interpreted,
    _lowered_result,
    _random_inputs,
)

from glensidec.backend.lower import Fused, Reduce

# dw: the depthwise layer's result (1, C, 6, 6); g: its global average (the quantizer's:
# a window sum reshaped to (1, C, 1, 1) and requantized); the result dw·g[c], requantized
# and clipped, as the quantizer writes squeeze-excite's multiply.
SQUEEZE_EXCITE = """
(let dw {x})
(let g
 (compute (requantize 1813257021 0 32 0)
  (access (access-reshape (compute reduce-sum (access dw 2))
                          (access-shape (shape 1 {c} 1 1) (shape)))
          1)))
(compute relu
 (compute (requantize 1083791475 0 {post} -2)
  (access
   (compute elementwise-mul
    (access-pair
     (compute (cast i32) (access-broadcast (access g 4) (access-shape (shape 1 {c} 6 6) (shape))))
     (compute (cast i32) (access dw 4))))
   1)))
"""


def _squeeze_excite(root: Path, channels: int, post: int = 33) -> Path:
    path = depthwise(root, channels, height=6, width=6)
    text = path.read_text()
    start = text.index("(compute relu")
    path.write_text(text[:start] + SQUEEZE_EXCITE.format(x=text[start:], c=channels,
                                                         post=post))
    return path


@pytest.mark.parametrize(("channels", "array"), [(20, "4x4"), (6, "8x8")])
def test_a_channel_scale_and_its_average_pool_run_on_the_accelerator(
        channels: int, array: str, tmp_path: Path) -> None:
    """The pool that the scale's gate comes from and the scale are layers (no Reduce, no
    host loop left), and the lowered program computes what the source does."""
    source = _squeeze_excite(tmp_path, channels)
    lowered = _accelerated(source, array)
    assert not any(isinstance(instruction, Reduce | Fused)
                   for instruction in lowered.instructions)
    layers = lowered.accel_layers()
    (average,) = [layer for layer in layers if layer.pool_sum and layer.scale is None]
    (scaled,) = [layer for layer in layers if layer.scale is not None]
    assert (average.kernel, average.m) == (6, 1) and (scaled.kernel, scaled.m) == (1, 36)
    rows = int(array.split("x")[0])
    for seed in range(3):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, rows)
        assert np.array_equal(got.reshape(expected.shape), expected)
        assert len(np.unique(expected)) > 3  # not all clipped: the scales matter


@pytest.mark.slow
@pytest.mark.rtl
def test_a_channel_scale_cosimulates_on_ws_accel(tmp_path: Path, sim_cache: Path) -> None:
    """The scales commands on the RTL, their values a run-time vector the pooling layer
    wrote: interpreter = C = ws_accel, every layer at its predicted cycles."""
    source = _squeeze_excite(tmp_path, 6)
    inputs = _random_inputs(source, 4)
    _checked_cosimulation(source, "4x4", inputs, tmp_path, sim_cache)
