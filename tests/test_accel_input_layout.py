"""A program's NCHW input laid out for its layers by the accelerator (issue 26: leave
nothing on the host): glensidec/hardware/layout.py and glensidec/backend/accel_boundary.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph, imported
from test_accel_offload import (
    _accelerated,
    _assert_interpreters_agree,
    _checked_cosimulation,
)
from test_quantize import calibration_for

from glensidec.backend.lower import INPUT, AccelLayer, ArrayGemm, Copy, Fill
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.hardware.accel import MemoryConfig
from glensidec.hardware.accel_native import native_cycles, native_model
from glensidec.hardware.commands import AccelConfig, AccelModel, run_functional
from glensidec.hardware.layout import (
    NchwLayout,
    NhwcLayout,
    layout_group,
    layout_program,
    layout_reference,
    layout_weights,
)
from glensidec.lang.syntax import read_program

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SMALL = AccelConfig(4, 4, 32, MemoryConfig(row_bytes=4, scratchpad_bytes=1024, bus_bytes=4,
                                           latency=2))
WIDE = AccelConfig(4, 8, 32, MemoryConfig(row_bytes=8, scratchpad_bytes=4096, bus_bytes=4,
                                          latency=3))


@pytest.mark.parametrize(("config", "layout"), [
    (AccelConfig(), NhwcLayout(3, 20, 18, 3, -1)),  # an RGB stem's input, 5 pixels a row
    (AccelConfig(), NhwcLayout(1, 16, 16, 1, 0)),  # small_cnn's
    (AccelConfig(), NhwcLayout(16, 8, 8, 0, 0)),  # rows for a residual: one pixel a row
    (SMALL, NhwcLayout(2, 7, 5, 2, 9)),  # several chunks, border wider than a group
    (WIDE, NhwcLayout(3, 6, 9, 1, -3)),
    (AccelConfig(), NhwcLayout(1, 8, 8, 1, -7)),  # the digits CNN's: a row per padded line
    (WIDE, NhwcLayout(2, 3, 2, 1, 5)),  # whole lines of 2 channels
    (SMALL, NhwcLayout(1, 9, 2, 1, 3)),  # whole lines, several chunks
])
def test_the_layout_layer_writes_the_padded_nhwc_map_at_the_models_cycles(
        config: AccelConfig, layout: NhwcLayout) -> None:
    """The commands compute numpy's padded NHWC map from the NCHW one (every byte, the
    border the pad value), and the C model's cycles are AccelModel's, the RTL's model."""
    program = layout_program(config, layout)
    image = np.random.default_rng(1).integers(-128, 128, (layout.channels, layout.height,
                                                          layout.width))
    memory = np.zeros(program.memory_bytes, np.uint8)
    memory[:image.size] = (image.reshape(-1) & 0xFF).astype(np.uint8)
    weights = layout_weights(layout, config)
    memory[program.weight_base:program.weight_base + weights.size] = \
        (weights.reshape(-1) & 0xFF).astype(np.uint8)
    after = run_functional(config, program.commands, memory)
    written = after[program.output_base:program.output_base + layout.elements]
    assert np.array_equal(written.view(np.int8).astype(np.int64),
                          layout_reference(layout, image).reshape(-1))
    timing = AccelModel(config).run(program.commands)
    native = native_model()
    if native is not None:
        assert native_cycles(native, config, program.commands, 10**9).cycles == timing.cycles
    # the array takes one row per channel and group of pixels: far below a cycle an element
    group = layout_group(layout, config)
    assert timing.compute_rows < layout.elements // group + layout.channels * 4 * config.rows


@pytest.mark.parametrize(("config", "layout"), [
    (AccelConfig(), NhwcLayout(1, 8, 8, 1, -7)), (WIDE, NhwcLayout(2, 3, 2, 1, 5))])
def test_a_padded_line_that_fits_a_row_is_one_array_row_per_channel(
        config: AccelConfig, layout: NhwcLayout) -> None:
    """When a padded line's pixels fit the columns and the map's fit the rows, each line is
    one row (the border columns from the epilogue's bias), not a row per border and
    interior segment: the digits CNN's 8x8 image padded by 1 took 30 array rows and 224
    cycles at 16x16, now 10 rows (a small first layout layer is a fixed cost every
    network pays)."""
    timing = AccelModel(config).run(layout_program(config, layout).commands)
    assert timing.compute_rows == layout.channels * layout.padded[0]
    if config == AccelConfig():
        assert timing.cycles < 150


def _digits_int8(folder: Path) -> Path:
    program = read_program(EXAMPLES / "digits_cnn.gs")
    calibration = np.random.default_rng(0).standard_normal((4, 1, 1, 8, 8))
    return save_quantized(quantize(program, {"image": calibration.astype(np.float32)}),
                          folder / "digits.q.gs")


def test_the_digits_cnns_image_is_laid_out_a_padded_line_a_row(tmp_path: Path) -> None:
    """The digits CNN at 16x16: its first layer is the whole-line layout of the 8x8 image
    padded by 1, and the program computes what the interpreter does."""
    source = _digits_int8(tmp_path)
    lowered = _accelerated(source, "16x16")
    layout = lowered.accel_layers()[0]
    assert isinstance(layout.layout, NhwcLayout) and layout.layout.padding == 1
    assert (layout.m, layout.n) == (10, 10)  # a row of 10 padded pixels per line
    _assert_interpreters_agree(source, lowered, 16)


def test_small_cnns_input_is_padded_by_the_accelerator_not_the_host() -> None:
    """small_cnn's 1-channel image was padded by two fills and copies per axis and copied
    to NHWC (936 host cycles), and its pooled rows copied to NCHW for the dense layer
    (512): now a layout layer writes the padded map its convolution reads, the dense
    layer reads the pooled rows, and the program computes the same."""
    source = EXAMPLES / "small_cnn.gs"
    lowered = _accelerated(source, "16x16")
    layout, conv = lowered.accel_layers()[:2]
    assert layout.layout == NhwcLayout(1, 16, 16, 1, 0) and conv.a.buffer == layout.dst.buffer
    host = [instruction for instruction in lowered.instructions
            if isinstance(instruction, Copy | Fill)]
    assert not any(isinstance(instruction, Fill) for instruction in host)  # no padding
    assert not any(lowered.buffer_of(view).kind == INPUT
                   for instruction in host for view in instruction.reads())
    # the dense layer reads the pool's NHWC rows as they are, its weights' rows reordered
    dense = next(i for i in lowered.instructions if isinstance(i, ArrayGemm))
    assert dense.a.buffer == lowered.accel_layers()[-1].dst.buffer
    assert not host  # no copy either: only the dense layer's bias add is left on the host
    _assert_interpreters_agree(source, lowered, 16)


def test_a_residual_blocks_convolution_and_skip_read_one_layout_layers_rows() -> None:
    """resnet_block reads its input twice: padded for the first convolution and as the
    skip connection's rows. One layout layer makes the rows; the convolution pads them
    with the DMA."""
    source = EXAMPLES / "resnet_block.gs"
    lowered = _accelerated(source, "16x16")
    layout, conv1, conv2, result = lowered.accel_layers()
    assert layout.layout == NhwcLayout(16, 16, 16, 0, 0)
    # and the result back to NCHW is a layout layer too: nothing is left on the host
    assert result.layout == NchwLayout(256, 16) and result.a.buffer == conv2.dst.buffer
    assert all(isinstance(instruction, AccelLayer) for instruction in lowered.instructions)
    assert (conv1.a.buffer, conv1.image, conv1.padding) == (layout.dst.buffer, (16, 16, 16), 1)
    assert conv2.residual is not None and conv2.residual.buffer == layout.dst.buffer
    _assert_interpreters_agree(source, lowered, 16, seeds=1)


@pytest.mark.slow
@pytest.mark.rtl
def test_make_sim_runs_the_layout_layer_on_ws_accel(tmp_path: Path, sim_cache: Path) -> None:
    """small_cnn at 16×16: the layout layer, the convolution and the pool on ws_accel, bits
    and cycles as predicted, the result the interpreter's."""
    source = EXAMPLES / "small_cnn.gs"
    image = np.random.default_rng(5).integers(-128, 128, (1, 1, 16, 16)).astype(np.int8)
    ran = _checked_cosimulation(source, "16x16", {"image": image}, tmp_path, sim_cache)
    assert sum("accel" in call for call in ran.report["calls"]) == 3


@pytest.mark.slow
@pytest.mark.rtl
def test_make_sim_runs_the_digits_cnns_whole_line_layout_layer_on_ws_accel(
        tmp_path: Path, sim_cache: Path) -> None:
    """The digits CNN at 16x16 (int8): its image laid out a padded line a row, then every
    layer on ws_accel, bits and cycles as predicted, the result the interpreter's."""
    source = _digits_int8(tmp_path)
    image = np.random.default_rng(5).integers(-128, 128, (1, 1, 8, 8)).astype(np.int8)
    ran = _checked_cosimulation(source, "16x16", {"image": image}, tmp_path, sim_cache)
    assert sum("accel" in call for call in ran.report["calls"]) == 7


def inverted_residuals(seed: int = 0, channels: int = 24, size: int = 8) -> Any:
    """An RGB stem and two MobileNet-v2 inverted residual blocks with skip adds (1×1
    expand ×2, ReLU6, depthwise 3×3, ReLU6, linear 1×1 project, add), 24 channels as in
    its second stage."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 3, size, size])
    lo, hi = g.const("lo", np.array(0, "f4")), g.const("hi", np.array(6, "f4"))
    x = g.node("Clip", [g.bn(g.conv(x, 3, channels, 3, 1, 1, bias=False), channels), lo, hi])
    hidden = 2 * channels
    for _ in range(2):
        y = g.node("Clip", [g.bn(g.conv(x, channels, hidden, 1, bias=False), hidden), lo, hi])
        y = g.node("Clip", [g.bn(g.conv(y, hidden, hidden, 3, 1, 1, group=hidden, bias=False),
                                 hidden), lo, hi])
        x = g.node("Add", [g.bn(g.conv(y, hidden, channels, 1, bias=False), channels), x])
    return g.model(x, [1, channels, size, size])


def _quantized_blocks(tmp_path: Path) -> Path:
    program = imported(inverted_residuals(), tmp_path, "blocks")
    calibration = calibration_for(program, 4)
    return save_quantized(quantize(program, calibration, per_channel=True),
                          tmp_path / "blocks.q.gs")


def test_mobilenet_v2s_residual_blocks_leave_nothing_on_the_host(tmp_path: Path) -> None:
    """MobileNet-v2's projections were requantized twice (the int8 result, and again inside
    the next add) and its adds summed twice, so no projection or add became a layer; its
    24-channel rows were padded to 32 for the next expansion by the host. Computed once,
    every product, add and layout is an accelerator layer, and the program computes the
    interpreter's integers."""
    source = _quantized_blocks(tmp_path)
    lowered = _accelerated(source, "16x16")
    assert all(isinstance(instruction, AccelLayer) for instruction in lowered.instructions)
    layers = [layer for layer in lowered.accel_layers() if layer.layout is None]
    assert len(layers) == 7 and sum(layer.residual is not None for layer in layers) == 2
    assert sum(layer.k == 24 for layer in layers) == 2  # the expansions read 24 channels
    _assert_interpreters_agree(source, lowered, 16)


def pooled_classifier(seed: int = 0) -> Any:
    """ResNet's head in small: a convolution, global average pool, flatten, dense."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 3, 8, 8])
    x = g.node("Relu", [g.conv(x, 3, 32, 3, 1, 1)])
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model(g.gemm(x, 32, 40), [1, 40])


def test_a_classifier_reads_the_pooled_rows_not_a_host_padded_copy(tmp_path: Path) -> None:
    """The classifier's pooled vector was copied to NCHW, padded to the array's 16 rows and
    packed by the host (ResNet-18: 16,896 host cycles) although its layer reads only the
    first row; it reads the pooling layer's row itself, and nothing is left on the host."""
    program = imported(pooled_classifier(), tmp_path, "head")
    source = save_quantized(quantize(program, calibration_for(program, 4), per_channel=True),
                            tmp_path / "head.q.gs")
    lowered = _accelerated(source, "16x16")
    assert all(isinstance(instruction, AccelLayer) for instruction in lowered.instructions)
    pool, dense = lowered.accel_layers()[-2:]
    assert pool.pool_sum and dense.a.buffer == pool.dst.buffer and dense.m == 1
    _assert_interpreters_agree(source, lowered, 16)
