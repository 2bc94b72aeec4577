"""DenseNet's dense blocks on the accelerator (issue 26, point 2): each block's features
written once, in place, and every pre-activation batch-norm + ReLU as a 1×1 sum-pool
layer (`backend/accel_dense.py`); the quantizer gives a block's concatenations one scale.

The reduced network: a 3×3 stem, a dense block of three layers (BN-ReLU-conv1×1-BN-ReLU-
conv3×3, growth 8, concatenated), a transition (BN-ReLU-conv1×1-average pool 2×2) and a
block of two layers, then BN-ReLU, at 8×8, quantized per channel; its batch-norms shift
by nothing (torchvision's initialisation, which bench/results/zoo.md measures), or, with
`shift`, by random amounts (a trained network's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    assert_calls_match_the_model,
    assert_diff_agrees,
    cosimulate,
    run_checked,
    save_inputs,
)
from onnx_models import OnnxGraph
from test_accel_offload import (
    _accelerated,
    _assert_interpreters_agree,
    _interpreted,
    _random_inputs,
)
from test_quantize import saved_int8

from glensidec.backend.lower import AccelLayer
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import (
    LayerQuant,
    pool_program,
    run_functional,
    with_input_pitch,
)
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import compute_name, postorder
from glensidec.pipeline import accelerator_for


def _bn(g: OnnxGraph, x: str, channels: int, shift: bool) -> str:
    gamma = g.const(f"g{g.count}", g.rng.uniform(0.5, 1.5, channels).astype("f4"))
    zeros = np.zeros(channels, "f4")
    beta = g.random(f"be{g.count}", (channels,), 0.1) if shift else \
        g.const(f"be{g.count}", zeros)
    mean = g.random(f"m{g.count}", (channels,), 0.1) if shift else \
        g.const(f"m{g.count}", zeros)
    var = g.const(f"v{g.count}", g.rng.uniform(0.5, 1.5, channels).astype("f4"))
    return g.node("BatchNormalization", [x, gamma, beta, mean, var], epsilon=1e-5)


def reduced_densenet(shift: bool = False, size: int = 8, stem: int = 16, growth: int = 8,
                     layers: tuple[int, ...] = (3, 2)) -> Any:
    g = OnnxGraph(3)
    x = g.input("x", [1, 3, size, size])
    x = g.node("Relu", [g.conv(x, 3, stem, 3, pad=1)])
    channels = stem
    for block, count in enumerate(layers):
        for _ in range(count):
            y = g.node("Relu", [_bn(g, x, channels, shift)])
            y = g.conv(y, channels, 4 * growth, 1, bias=False)
            y = g.node("Relu", [_bn(g, y, 4 * growth, shift)])
            y = g.conv(y, 4 * growth, growth, 3, pad=1, bias=False)
            x = g.node("Concat", [x, y], axis=1)
            channels += growth
        if block < len(layers) - 1:
            y = g.node("Relu", [_bn(g, x, channels, shift)])
            y = g.conv(y, channels, channels // 2, 1, bias=False)
            x = g.node("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
            channels, size = channels // 2, size // 2
    x = g.node("Relu", [_bn(g, x, channels, shift)])
    return g.model(x, [1, channels, size, size])


def _quantized(tmp_path: Path, shift: bool = False) -> Path:
    return saved_int8(reduced_densenet(shift), tmp_path, "dense", 4)


def test_a_dense_blocks_concatenations_share_one_scale_and_no_part_is_requantized(
        tmp_path: Path) -> None:
    """No part of a concatenation is a requantize of a widened i8 tensor (an earlier
    concatenation, or the stem's output): the quantizer gave each block's chain of
    concatenations the last one's scale and the stem that scale too."""
    program = read_program(_quantized(tmp_path))
    joins = [term for term in postorder(program.root) if term.op == "access-concatenate"]
    assert len(joins) == 5
    for join in joins:
        for part in join.children():
            if compute_name(part) in ("requantize", "requantize-per-channel"):
                assert compute_name(part.children()[0]) != "cast", part


@pytest.mark.parametrize("shift", [False, True])
def test_a_reduced_dense_block_leaves_nothing_on_the_host(shift: bool, tmp_path: Path) -> None:
    """Every batch-norm + ReLU is an accelerator layer — a 1×1 sum pool without shifts, a
    depthwise 1×1 convolution (−128 on the diagonal, the shifts in its bias) with them —
    each block's layers store their columns into one buffer (pitched), the batch-norms
    read their first columns (input pitch), no host loop or copy is left, and the result
    is the interpreter's."""
    source = _quantized(tmp_path, shift)
    lowered = _accelerated(source, "8x8")
    host = [instruction for instruction in lowered.instructions
            if not isinstance(instruction, AccelLayer)]
    assert not host, host
    layers = lowered.accel_layers()
    affine = [layer for layer in layers if layer.kernel == 1 and layer.image and
              (layer.groups == layer.n if shift else layer.pool_sum)]
    assert len(affine) == 7  # 5 dense layers, the transition, the last batch-norm
    assert sum(layer.input_pitch > 0 for layer in affine) == 5  # all but the blocks' last
    blocks = {layer.dst.buffer for layer in layers if layer.output_pitch}
    assert len(blocks) == 2
    _assert_interpreters_agree(source, lowered, 8)


def test_a_batch_norm_of_an_activation_is_widened_128_times(tmp_path: Path) -> None:
    """The quantizer widens an i8 tensor ×128 for a product with a constant (×256 for a
    sum): −128·x is what the array forms, so any shift joins the epilogue's bias."""
    program = read_program(_quantized(tmp_path, shift=True))
    literals = {term.args[0].args[0] for term in postorder(program.root)
                if term.op == "access-literal"}
    assert 128 in literals and 256 not in literals


def test_a_pitched_load_reads_the_same_pixels_pitch_bytes_apart() -> None:
    """commands.with_input_pitch moves only the loads: run functionally on a map whose
    pixels are `pitch` bytes apart (other bytes between them), the sum pool's result is
    the compact program's."""
    accel = accelerator_for(ArrayConfig(4, 4))
    height, width, channels, pitch = 5, 3, 6, 11
    layer = ConvLayer("affine", height, width, channels, channels)
    quant = LayerQuant(EpilogueConfig(0, 4, 0, 0, 127), tuple(range(channels)),
                       (3,) * channels)
    program = pool_program(accel, layer, quant)
    generator = np.random.default_rng(5)
    feature = generator.integers(-128, 128, (height * width, channels))
    memory = np.zeros(program.memory_bytes, np.uint8)
    memory[:feature.size] = (feature.reshape(-1) & 0xFF).astype(np.uint8)
    compact = run_functional(accel, program.commands, memory)
    m = height * width
    rows = compact[program.output_base:program.output_base + m * channels]
    pitched = with_input_pitch(program, m, channels, pitch, accel.memory.bus_bytes)
    wide = np.zeros(pitched.memory_bytes, np.uint8)
    block = generator.integers(-128, 128, (m, pitch))
    block[:, :channels] = feature
    span = (m - 1) * pitch + channels
    wide[pitched.input_base:pitched.input_base + span] = \
        (block.reshape(-1)[:span] & 0xFF).astype(np.uint8)
    wide = run_functional(accel, pitched.commands, wide)
    assert np.array_equal(wide[pitched.output_base:pitched.output_base + m * channels], rows)


@pytest.mark.slow
@pytest.mark.parametrize("shift", [False, True])
def test_the_reduced_densenets_host_share_is_at_most_15_percent(shift: bool,
                                                               tmp_path: Path) -> None:
    """`glensidec compile --stats` (the default target) of the reduced DenseNet prices the
    host at 0 % (target ≤ 15 %), and its C program gives the interpreter's result."""
    source = _quantized(tmp_path, shift)
    outdir = tmp_path / "out"
    compiled = run_checked([sys.executable, "-m", "glensidec", "compile", str(source),
                            "--array", "8x8", "-o", str(outdir), "--stats"])
    line = next(line for line in compiled.stdout.splitlines()
                if line.startswith("predicted cycles:"))
    assert "host 0 = 0.0%" in line, line
    assert_diff_agrees(outdir, save_inputs(_random_inputs(source, 3), tmp_path))


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("shift", [False, True])
def test_the_reduced_densenet_runs_bit_and_cycle_exact_on_ws_accel(
        shift: bool, tmp_path: Path, sim_cache: Path) -> None:
    """Compiled by default, every layer of the reduced DenseNet (the pitched stores, the
    batch-norm layers — sum pools, or with shifts depthwise 1×1 convolutions with negative
    multipliers — reading the blocks' first columns with an input pitch) runs on
    ws_accel's RTL with its predicted cycles and bits, and the result is the
    interpreter's."""
    source = _quantized(tmp_path, shift)
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(source), "--array", "8x8",
                 "-o", str(outdir)])
    inputs = _random_inputs(source, 4)
    sim = cosimulate(outdir, save_inputs(inputs, tmp_path), tmp_path / "sim.npy", sim_cache)
    # every layer, the input-pitched ones too (the recorder once sized their memory image
    # without the input region moved after the output, and dropped them silently)
    layers = json.loads((outdir / "cosim.json").read_text())["accel_layers"]
    assert len(sim.report["calls"]) == len(layers) >= 20
    assert_calls_match_the_model(sim.report)
    assert sum(call["simulated_cycles"] for call in sim.report["calls"]) == \
        sum(layer[-1] for layer in layers)
    assert np.array_equal(sim.result, _interpreted(source, inputs))
