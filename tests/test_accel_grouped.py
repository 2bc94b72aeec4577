"""Grouped convolutions and ShuffleNet's channel split and shuffle on the accelerator
(issue 26: "depthwise and grouped convolutions … each group its own accelerator work, or
block-diagonal packing"): an imported, quantized grouped block is one grouped accelerator
layer (backend/accel_grouped.py) with no host copies, joins or epilogues left, and it
co-simulates on ws_accel bit- and cycle-exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph, imported
from test_accel_offload import _checked_cosimulation
from test_quantize import calibration_for, sample_list

import glensidec
from glensidec.cosim.diff import load_compiled
from glensidec.frontends.quantize import quantize, save_quantized

Array = np.ndarray[Any, Any]
CHANNELS, SIZE = 16, 8


def grouped_block(groups: int, seed: int = 0) -> Any:
    """ResNeXt's bottleneck, reduced: 1×1, grouped 3×3, 1×1 (each with batch-norm), the
    identity added, ReLU."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, CHANNELS, SIZE, SIZE])
    y = g.node("Relu", [g.bn(g.conv(x, CHANNELS, CHANNELS, 1, bias=False), CHANNELS)])
    y = g.conv(y, CHANNELS, CHANNELS, 3, pad=1, group=groups, bias=False)
    y = g.node("Relu", [g.bn(y, CHANNELS)])
    y = g.bn(g.conv(y, CHANNELS, CHANNELS, 1, bias=False), CHANNELS)
    out = g.node("Relu", [g.node("Add", [y, x])])
    return g.model(out, [1, CHANNELS, SIZE, SIZE])


def shuffle_units(seed: int = 0) -> Any:
    """ShuffleNet-v2, reduced: a 1×1 stem, two units (split the channels in halves; the
    second half through 1×1, depthwise 3×3, 1×1; join the halves; shuffle the channels in
    2 groups), a 1×1 head. The second unit splits the first's shuffled rows."""
    g = OnnxGraph(seed)
    half = CHANNELS // 2
    x = g.input("x", [1, CHANNELS, SIZE, SIZE])
    y = g.node("Relu", [g.bn(g.conv(x, CHANNELS, CHANNELS, 1, bias=False), CHANNELS)])
    for unit in range(2):
        kept, branch = g.nodes_out("Split", [y, g.const(f"halves{unit}", np.array(
            [half, half], np.int64))], 2, axis=1)
        branch = g.node("Relu", [g.bn(g.conv(branch, half, half, 1, bias=False), half)])
        branch = g.bn(g.conv(branch, half, half, 3, pad=1, group=half, bias=False), half)
        branch = g.node("Relu", [g.bn(g.conv(branch, half, half, 1, bias=False), half)])
        joined = g.node("Concat", [kept, branch], axis=1)
        grouped = g.node("Reshape", [joined, g.const(f"groups{unit}", np.array(
            [1, 2, half, SIZE, SIZE], np.int64))])
        swapped = g.node("Transpose", [grouped], perm=[0, 2, 1, 3, 4])
        y = g.node("Reshape", [swapped, g.const(f"flat{unit}", np.array(
            [1, CHANNELS, SIZE, SIZE], np.int64))])
    y = g.node("Relu", [g.bn(g.conv(y, CHANNELS, CHANNELS, 1, bias=False), CHANNELS)])
    return g.model(y, [1, CHANNELS, SIZE, SIZE])


def quantized_source(model: Any, tmp_path: Path, name: str) -> tuple[Path, dict[str, Array]]:
    """The model imported and quantized (per channel, symmetric) as `name`/model.q.gs,
    with one int8 input sample."""
    program = imported(model, tmp_path, name)
    calibration = calibration_for(program, 4)
    quantized = quantize(program, calibration, True, True)
    path = save_quantized(quantized, tmp_path / name / "model.q.gs")
    return path, quantized.quantize_inputs(sample_list(calibration, 1)[0])


@pytest.mark.parametrize("groups", [2, 8])
def test_a_grouped_block_is_one_grouped_layer_with_no_host_work(groups: int,
                                                               tmp_path: Path) -> None:
    source, _ = quantized_source(grouped_block(groups), tmp_path, f"g{groups}")
    compiled = glensidec.compile(source, "16x16", tmp_path / "out")
    assert compiled.host_cycles == 0 and compiled.accel_cycles
    layers = load_compiled(tmp_path / "out")[1].accel_layers()
    assert [(layer.groups, layer.n) for layer in layers if layer.groups > 1] == \
        [(groups, CHANNELS)]


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("groups", [2, 8])
def test_a_grouped_block_cosimulates_bit_and_cycle_exactly(groups: int, tmp_path: Path,
                                                          sim_cache: Path) -> None:
    """On an 8×8 array: 2 groups of 8 are one group per N block, 8 groups of 2 four per
    block (block-diagonal packing)."""
    source, inputs = quantized_source(grouped_block(groups), tmp_path, f"g{groups}")
    run, layers = _cosimulated_exactly(source, inputs, tmp_path, sim_cache)
    assert any(layer.groups == groups for layer in layers)
    assert len([call for call in run.report["calls"] if "accel" in call]) == len(layers)


def test_shufflenets_split_and_shuffle_are_selection_layers_with_no_host_work(
        tmp_path: Path) -> None:
    """The halves of a shuffled join are channel gathers of the join's rows
    (backend/accel_gather.py): the passthrough a 1×1 selection layer writing its half of
    the next join in place, the branch's input folded into the branch's 1×1 weights, so
    no host copy is left."""
    source, _ = quantized_source(shuffle_units(), tmp_path, "shuffle")
    compiled = glensidec.compile(source, "16x16", tmp_path / "out")
    assert compiled.host_cycles == 0 and compiled.accel_cycles
    layers = load_compiled(tmp_path / "out")[1].accel_layers()
    assert sum(layer.name.endswith("_gathered") for layer in layers) == 2  # passthroughs
    folded = [layer for layer in layers if layer.b.buffer.endswith("_gathered_weights")]
    # each unit's branch input and the head's input read the joins' rows themselves
    assert {"relu7", "relu20", "relu32"} <= {layer.name for layer in folded}


@pytest.mark.slow
@pytest.mark.rtl
def test_shuffle_units_cosimulate_bit_and_cycle_exactly(tmp_path: Path,
                                                       sim_cache: Path) -> None:
    source, inputs = quantized_source(shuffle_units(), tmp_path, "shuffle")
    run, layers = _cosimulated_exactly(source, inputs, tmp_path, sim_cache)
    assert any(layer.name.endswith("_gathered") for layer in layers)
    assert any(layer.b.buffer.endswith("_gathered_weights") for layer in layers)
    assert len([call for call in run.report["calls"] if "accel" in call]) == len(layers)


def test_a_depthwise_layer_of_few_channels_reads_the_previous_layers_rows(
        tmp_path: Path) -> None:
    """A depthwise 3×3 of 8 channels after a 1×1 layer, on 16×16: the layer reads the 1×1
    layer's rows, padded by the DMA. Its geometry used to lose its groups when
    `read_layer_rows` checked it, so 8 channels looked like an RGB stem's packed taps
    (which need a padded map) and the host kept the pads and the NHWC copy."""
    g = OnnxGraph(3)
    x = g.input("x", [1, 8, SIZE, SIZE])
    y = g.node("Relu", [g.bn(g.conv(x, 8, 8, 1, bias=False), 8)])
    y = g.node("Relu", [g.bn(g.conv(y, 8, 8, 3, pad=1, group=8, bias=False), 8)])
    source, _ = quantized_source(g.model(y, [1, 8, SIZE, SIZE]), tmp_path, "depthwise8")
    glensidec.compile(source, "16x16", tmp_path / "out")
    layers = load_compiled(tmp_path / "out")[1].accel_layers()
    (depthwise,) = [layer for layer in layers if layer.groups == 8]
    (pointwise,) = [layer for layer in layers if layer.groups == 1 and layer.n == 8 and
                    layer.layout is None and not layer.image]
    assert depthwise.padding == 1 and depthwise.a.buffer == pointwise.dst.buffer


def _cosimulated_exactly(source: Path, inputs: dict[str, Any], tmp_path: Path,
                         sim_cache: Path) -> tuple[Any, list[Any]]:
    """The co-simulation of `source` on an 8×8 ws_accel, checked: C and RTL equal the
    interpreter, every call its predicted cycles; (the run, the compiled layers)."""
    run = _checked_cosimulation(source, "8x8", inputs, tmp_path, sim_cache)
    return run, load_compiled(tmp_path / "out")[1].accel_layers()
