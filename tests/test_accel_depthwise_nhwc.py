"""A depthwise convolution whose requantize reads its sums transposed to NHWC (ConvNeXt's
depthwise 7×7, then a permute to channels-last for its LayerNorm) is one grouped
accelerator layer too: the layer's (pixels, channels) rows are that NHWC result, so it
writes it directly, no copy transposing anything (it stayed a host dot-product: 59 % of
convnext_tiny's predicted cycles).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_accel_offload import (
    _accelerated,
    _checked_cosimulation,
    _interpreted,
    _lowered_result,
    _random_inputs,
)

from glensidec.backend.lower import Copy, Dot

# (1, C, 8, 8) padded by 3, 7×7 depthwise, transposed to (1, 8, 8, C), requantized per
# channel (the symmetric quantizer's form: no bias, padding with zeros).
NHWC_DEPTHWISE = """
(input x i8 (shape 1 {c} 8 8))
(weight w i8 (shape {c} 1 7 7) "dw.npz")
(weight mult i32 (shape {c}) "dw.npz")
(compute (requantize-per-channel 0 30 0)
 (access-pair
  (access-transpose
   (compute dot-product
    (access-pair
     (access-windows
      (access (access-pad (access-pad (access-tensor x) zero-padding 2 3 3)
                          zero-padding 3 3 3) 2)
      (shape 7 7) (shape 1 1))
     (access-broadcast
      (access-reshape (access-tensor w) (access-shape (shape 1 {c} 1 1) (shape 7 7)))
      (access-shape (shape 1 {c} 8 8) (shape 7 7)))))
   (list 0 2 3 1))
  (access-broadcast
   (access-reshape (access-tensor mult) (access-shape (shape 1 1 1 {c}) (shape)))
   (access-shape (shape 1 8 8 {c}) (shape)))))
"""


def _nhwc_depthwise(root: Path, channels: int) -> Path:
    rng = np.random.default_rng(7)
    np.savez(root / "dw.npz", w=rng.integers(-128, 128, (channels, 1, 7, 7)).astype(np.int8),
             mult=rng.integers(2**20, 2**22, channels).astype(np.int32))
    path = root / "nhwc_depthwise.gs"
    path.write_text(NHWC_DEPTHWISE.format(c=channels))
    return path


@pytest.mark.parametrize(("channels", "array"), [(20, "4x4"), (6, "8x8")])
def test_a_depthwise_convolution_read_in_nhwc_is_a_grouped_layer_writing_it(
        channels: int, array: str, tmp_path: Path) -> None:
    source = _nhwc_depthwise(tmp_path, channels)
    lowered = _accelerated(source, array)
    assert not any(isinstance(instruction, Dot) for instruction in lowered.instructions)
    grouped = [layer for layer in lowered.accel_layers() if layer.groups > 1]
    assert len(grouped) == 1 and grouped[0].kernel == 7 and grouped[0].n == channels
    position = lowered.instructions.index(grouped[0])
    assert not any(isinstance(instruction, Copy)
                   for instruction in lowered.instructions[position + 1:])
    rows = int(array.split("x")[0])
    for seed in range(2):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, rows)
        assert np.array_equal(got.reshape(expected.shape), expected)
        assert len(np.unique(expected)) > 20  # not all clipped


@pytest.mark.slow
@pytest.mark.rtl
def test_a_depthwise_convolution_read_in_nhwc_cosimulates(tmp_path: Path,
                                                          sim_cache: Path) -> None:
    source = _nhwc_depthwise(tmp_path, 6)
    inputs = _random_inputs(source, 3)
    _checked_cosimulation(source, "4x4", inputs, tmp_path, sim_cache)
