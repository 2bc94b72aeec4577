"""`glensidec compile --accel`: array calls with their epilogue as accelerator layers.

Each program is compiled with --accel, built, and run; its output must equal the
interpreter's bit for bit, `glensidec diff` must find every instruction equal (the lowered
program with the layers, run in numpy, is also checked against the interpreter on the
source), the layers expected to fuse must fuse, and each layer's predicted cycles must be
what AccelModel (the Python model checked against the RTL) gives for its commands.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    assert_calls_match_the_model,
    assert_diff_agrees,
    cosimulate,
    run_checked,
    save_inputs,
)

from glensidec.backend.lower import constant_array
from glensidec.cosim.diff import load_compiled
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.accel_native import FIELDS, pack_commands
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import (
    AccelModel,
    LayerQuant,
    accel_config_for,
    conv_program,
)
from glensidec.hardware.layout import NchwLayout
from glensidec.lang import data
from glensidec.lang.interp import evaluate_result
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# A dense int8 layer: requantize-per-channel, a clip, outputs padded to the array and
# sliced (N = 20 on 8 columns), K padded too (24 on 8 rows).
DENSE = """
(input x i8 (shape {m} {k}))
(weight w i8 (shape {n} {k}) "dense.npz")
(weight b i32 (shape {bias}) "dense.npz")
(weight mult i32 (shape {n}) "dense.npz")
(compute (clip -50 100)
 (compute (requantize-per-channel 1 24 3)
  (access-pair
   (compute elementwise-add
    (access-pair
     (compute dot-product
      (access-cartesian-product (access (access-tensor x) 1) (access (access-tensor w) 1)))
     {bias_access}))
   (access-broadcast (access-insert-axis (access-tensor mult) 0)
                     (access-shape (shape {m} {n}) (shape))))))
"""
PER_CHANNEL = ("{n}", "(access-broadcast (access-insert-axis (access-tensor b) 0) "
                      "(access-shape (shape {m} {n}) (shape)))")
PER_ELEMENT = ("{m} {n}", "(access-tensor b)")  # a bias per output element: not the epilogue's


def _dense(root: Path, bias: tuple[str, str], m: int = 5, k: int = 24, n: int = 20) -> Path:
    """DENSE: x (m, k) times w (n, k)ᵀ, a bias per channel or per element."""
    shape = {"m": m, "k": k, "n": n}
    bias_shape, bias_access = (text.format(**shape) for text in bias)
    rng = np.random.default_rng(7)
    np.savez(root / "dense.npz", w=rng.integers(-128, 128, (n, k)).astype(np.int8),
             b=rng.integers(-4000, 4000, tuple(int(v) for v in bias_shape.split()))
             .astype(np.int32),
             mult=rng.integers(2**14, 2**16, n).astype(np.int32))
    path = root / "dense.gs"
    path.write_text(DENSE.format(bias=bias_shape, bias_access=bias_access, **shape))
    return path


# A quantized 3×3 convolution as `glensidec quantize` writes one: the input is padded with
# 0, and the bias per output element carries the correction −zp·Σ W over the taps inside
# the image (zp = the input's zero point), so it differs at the borders.
CONV = """
(input x i8 (shape 1 4 6 6))
(weight w i8 (shape 8 4 3 3) "conv.npz")
(weight b i32 (shape 8 6 6) "conv.npz")
(weight mult i32 (shape 8) "conv.npz")
(compute relu
 (compute (requantize-per-channel 1 27 -3)
  (access-pair
   (compute elementwise-add
    (access-pair
     (access-transpose
      (compute dot-product
       (access-cartesian-product
        (access (access-tensor w) 1)
        (access
         (access-squeeze
          (access-windows
           (access (access-pad (access-pad (access-tensor x) zero-padding 2 1 1)
                               zero-padding 3 1 1) 1)
           (shape 4 3 3) (shape 1 1 1))
          1)
         3)))
      (list 1 0 2 3))
     (access-reshape (access-tensor b) (access-shape (shape 1 8 6 6) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor mult) (access-shape (shape 1 8 1 1) (shape)))
    (access-shape (shape 1 8 6 6) (shape))))))
"""


def _conv(root: Path, zero_point: int = -37, off_by_one: bool = False) -> Path:
    rng = np.random.default_rng(9)
    weights = rng.integers(-128, 128, (8, 4, 3, 3))
    inside = np.zeros((8, 6, 6), np.int64)  # Σ W over the taps inside the image
    for y in range(6):
        for x in range(6):
            for ky in range(3):
                for kx in range(3):
                    if 0 <= y + ky - 1 < 6 and 0 <= x + kx - 1 < 6:
                        inside[:, y, x] += weights[:, :, ky, kx].sum(axis=1)
    bias = rng.integers(-5000, 5000, (8, 1, 1)) - zero_point * inside
    if off_by_one:  # one border bias no zero point explains: the layer must not fuse
        bias[3, 0, 5] += 1
    np.savez(root / "conv.npz", w=weights.astype(np.int8), b=bias.astype(np.int32),
             mult=rng.integers(2**14, 2**16, 8).astype(np.int32))
    path = root / "conv.gs"
    path.write_text(CONV)
    return path


# A quantized depthwise 3×3 convolution as the importer and `glensidec quantize` write one
# (MobileNet's): the windows of the zero-padded map times the filters broadcast over the
# pixels, a bias per output element carrying −zp·Σ W over the taps inside the image.
DEPTHWISE = """
(input x i8 (shape 1 {c} {h} {w}))
(weight w i8 (shape {c} 1 3 3) "depthwise.npz")
(weight b i32 (shape {c} {oh} {ow}) "depthwise.npz")
(weight mult i32 (shape {c}) "depthwise.npz")
(compute relu
 (compute (requantize-per-channel 1 27 -3)
  (access-pair
   (compute elementwise-add
    (access-pair
     (compute dot-product
      (access-pair
       (access-windows
        (access (access-pad (access-pad (access-tensor x) zero-padding 2 1 1)
                            zero-padding 3 1 1) 2)
        (shape 3 3) (shape {s} {s}))
       (access-broadcast
        (access-reshape (access-tensor w) (access-shape (shape 1 {c} 1 1) (shape 3 3)))
        (access-shape (shape 1 {c} {oh} {ow}) (shape 3 3)))))
     (access-reshape (access-tensor b) (access-shape (shape 1 {c} {oh} {ow}) (shape)))))
   (access-broadcast
    (access-reshape (access-tensor mult) (access-shape (shape 1 {c} 1 1) (shape)))
    (access-shape (shape 1 {c} {oh} {ow}) (shape))))))
"""


def depthwise(root: Path, channels: int = 20, stride: int = 1, zero_point: int = -37,
              off_by_one: bool = False, height: int = 7, width: int = 6) -> Path:
    """DEPTHWISE on a 7×6 map (or height × width) padded by 1 (`off_by_one`: one border
    bias no zero point explains, so the layer must stay on the host)."""
    rng = np.random.default_rng(12)
    filters = rng.integers(-128, 128, (channels, 1, 3, 3))
    out_h, out_w = (height - 1) // stride + 1, (width - 1) // stride + 1
    inside = np.zeros((channels, out_h, out_w), np.int64)  # Σ W over the taps inside
    for y in range(out_h):
        for x in range(out_w):
            for ky in range(3):
                for kx in range(3):
                    if 0 <= y * stride + ky - 1 < height and \
                            0 <= x * stride + kx - 1 < width:
                        inside[:, y, x] += filters[:, 0, ky, kx]
    bias = rng.integers(-5000, 5000, (channels, 1, 1)) - zero_point * inside
    if off_by_one:
        bias[3, 0, 2] += 1
    np.savez(root / "depthwise.npz", w=filters.astype(np.int8), b=bias.astype(np.int32),
             mult=rng.integers(2**14, 2**16, channels).astype(np.int32))
    path = root / "depthwise.gs"
    path.write_text(DEPTHWISE.format(c=channels, s=stride, oh=out_h, ow=out_w, h=height,
                                     w=width))
    return path


def _scalar(value: int, shape: str) -> str:
    """An i32 literal broadcast over a tensor of `shape` (the quantizer's scalar operands)."""
    axes = len(shape.split())
    inner = f"(access-literal (literal {value} i32))"
    for _ in range(axes):
        inner = f"(access-insert-axis {inner} 0)"
    return f"(access-broadcast {inner} (access-shape (shape {shape}) (shape)))"


def _residual_add(y: str, r: str, shape: str) -> str:
    """The quantizer's add_dynamic of two int8 tensors, then relu: i32 scaling of each
    side, a zero-point offset, one requantize (what the epilogue's residual stage does)."""
    scaled = [f"(compute elementwise-mul (access-pair (compute (cast i32) {side}) "
              f"{_scalar(multiplier, shape)}))" for side, multiplier in ((y, 9000), (r, 12000))]
    summed = f"(compute elementwise-add (access-pair {scaled[0]} {scaled[1]}))"
    offset = f"(compute elementwise-add (access-pair {summed} {_scalar(100000, shape)}))"
    return f"(compute relu (compute (requantize 1518500250 0 45 -20) {offset}))"


def _residual(root: Path, case: str) -> Path:
    """A layer followed by a quantized residual add: the dense layer plus an input
    (`dense_residual`), the quantized convolution plus an input (`conv_residual`, r is
    copied into the layer's rows) or plus another such convolution's result
    (`conv_residual_of_a_layer`, r is that layer's rows before their transpose)."""
    if case == "dense_residual":
        layer = _dense(root, PER_CHANNEL).read_text()
        head, body = layer.split("(compute (clip", 1)
        text = (head + "(input r i8 (shape 5 20))\n(let y (compute (clip" + body + ")\n"
                + _residual_add("y", "(access-tensor r)", "5 20"))
    else:
        _conv(root)
        head, body = CONV.split("(compute relu", 1)
        if case == "conv_residual":
            text = (head + "(input r i8 (shape 1 8 6 6))\n(let y (compute relu" + body + ")\n"
                    + _residual_add("y", "(access-tensor r)", "1 8 6 6"))
        else:  # r: the same convolution of another input, requantized with another shift
            other = body.replace("(requantize-per-channel 1 27 -3)",
                                 "(requantize-per-channel 1 26 5)")
            other = other.replace("(access-tensor x)", "(access-tensor x2)")
            text = (head + "(input x2 i8 (shape 1 4 6 6))\n(let y (compute relu" + body
                    + ")\n(let r (compute relu" + other + ")\n"
                    + _residual_add("y", "r", "1 8 6 6"))
    path = root / f"{case}.gs"
    path.write_text(text)
    return path


def _pooled(root: Path) -> Path:
    """The quantized convolution, then ResNet's stem max-pool (3×3, stride 2, padding with
    the minimum) as the importer writes it; the pool runs on the accelerator too."""
    _conv(root)
    head, body = CONV.split("(compute relu", 1)
    text = (head + "(let y (compute relu" + body + ")\n(compute reduce-max (access-windows "
            "(access (access-pad (access-pad y min-padding 2 1 1) min-padding 3 1 1) 2) "
            "(shape 3 3) (shape 2 2)))\n")
    path = root / "conv_maxpool.gs"
    path.write_text(text)
    return path


def _compile(source: Path, outdir: Path, array: str, *extra: str
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", "compile", str(source),
                           "--array", array, "-o", str(outdir), "--accel", "--stats", *extra],
                          capture_output=True, text=True, timeout=600)


def _run(outdir: Path, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, str]:
    """OUTDIR's C program built and run on `inputs` (saved in OUTDIR): its result and what
    it printed."""
    run_checked(["make", "-s", "-C", str(outdir), "OPT=-O1"])
    ran = run_checked([str(outdir / "model"), *save_inputs(inputs, outdir), "-o",
                       str(outdir / "out.npy")])
    return np.load(outdir / "out.npy"), ran.stdout


def _expected(source: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    program = read_program(source)
    result = evaluate_result(program, data.all_tensors(program, inputs), check_program(program))
    assert isinstance(result, np.ndarray)
    return result


CASES = {
    # (source, inputs, array, layers that fuse)
    # both convolutions; conv2 adds the skip connection x·32 in its epilogue (early)
    "resnet_block": (EXAMPLES / "resnet_block.gs", {"x": (1, 16, 16, 16)}, "16x16", 2),
    # its convolution, and the 2×2 max-pool of its result as a pooling layer
    "small_cnn": (EXAMPLES / "small_cnn.gs", {"image": (1, 1, 16, 16)}, "8x8", 2),
    "dense": (None, {"x": (5, 24)}, "8x8", 1),
    "dense_bias_per_element": (None, {"x": (5, 24)}, "8x8", 0),
    "conv_zero_point": (None, {"x": (1, 4, 6, 6)}, "8x8", 1),
    "conv_bias_off_by_one": (None, {"x": (1, 4, 6, 6)}, "8x8", 0),
    # a residual add after the layer moves into its epilogue (layers, residual adds)
    "dense_residual": (None, {"x": (5, 24), "r": (5, 20)}, "8x8", 1),
    "conv_residual": (None, {"x": (1, 4, 6, 6), "r": (1, 8, 6, 6)}, "8x8", 1),
    "conv_residual_of_a_layer": (None, {"x": (1, 4, 6, 6), "x2": (1, 4, 6, 6)}, "8x8", 2),
    # a max-pool of a layer's result: a pooling layer (gathers, pooling stores)
    "conv_maxpool": (None, {"x": (1, 4, 6, 6)}, "8x8", 2),
    # the same on 2×2, whose default scratchpad (256 KiB of 2-byte rows) has 2^17 rows:
    # more than 16-bit command fields address (issue 27: the RTL read the wrong rows)
    "conv_maxpool_2x2": (None, {"x": (1, 4, 6, 6)}, "2x2", 2),
    # a residual block's result max-pooled 2×2/2 without padding: the add in the second
    # layer's epilogue, the pool reading that layer's rows
    "residual_maxpool": (None, {"x": (1, 4, 6, 6), "x2": (1, 4, 6, 6)}, "8x8", 3),
    # a depthwise convolution: one grouped layer (each N block its own channels' folds)
    "depthwise": (None, {"x": (1, 20, 7, 6)}, "8x8", 1),
}


def _residual_pooled(root: Path) -> Path:
    """`conv_residual_of_a_layer`, then an unpadded 2×2 stride-2 max-pool of the residual
    add's result (an ONNX block's conv-relu-conv-add-relu-MaxPool): the add moves into
    the second layer's epilogue, and the pool reads that layer's rows."""
    text = _residual(root, "conv_residual_of_a_layer").read_text().rstrip()
    last = text.rindex("(compute relu (compute (requantize 1518500250")
    text = (text[:last] + "(let added " + text[last:] + ")\n(compute reduce-max "
            "(access-windows (access added 2) (shape 2 2) (shape 2 2)))\n")
    path = root / "residual_maxpool.gs"
    path.write_text(text)
    return path


def _source(case: str, root: Path) -> Path:
    """The program of a CASES entry (written into `root` unless it is an example)."""
    source = CASES[case][0]
    if case.startswith("conv_maxpool"):
        return _pooled(root)
    if case == "residual_maxpool":
        return _residual_pooled(root)
    if case == "depthwise":
        return depthwise(root)
    if "residual" in case:
        return _residual(root, case)
    if case.startswith("conv_"):
        return _conv(root, off_by_one=case == "conv_bias_off_by_one")
    if source is None:
        return _dense(root, PER_ELEMENT if "per_element" in case else PER_CHANNEL)
    return source


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_accelerator_layers_compute_what_the_interpreter_does(case: str, tmp_path: Path) -> None:
    source, shapes, array, fused = CASES[case]
    source = _source(case, tmp_path)
    rng = np.random.default_rng(3)
    inputs = {name: rng.integers(-128, 128, shape).astype(np.int8)
              for name, shape in shapes.items()}
    outdir = tmp_path / "out"
    compiled = _compile(source, outdir, array)
    assert compiled.returncode == 0, compiled.stderr
    got, stdout = _run(outdir, inputs)
    expected = _expected(source, inputs)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert len(np.unique(expected)) > 4  # not a saturated constant
    _, lowered = load_compiled(outdir)
    everything = lowered.accel_layers()  # with the layout layers that lay out an input
    assert f", {len(everything)} accelerator layers:" in compiled.stdout
    layers = [layer for layer in everything if layer.layout is None]
    assert len(layers) == fused
    if fused:
        assert f"accelerator layers: {len(everything)}\n" in stdout
        cycles = sum(layer.cycles for layer in everything)
        assert f"predicted accelerator cycles: {cycles}\n" in stdout
    else:  # no accelerator runtime at all
        assert "predicted accelerator cycles" not in stdout
        assert not (outdir / "accel_runtime.c").exists()
    if case == "conv_zero_point":  # the padding the layer reads is the zero point, laid
        # out by the accelerator's layout layer (no host fill since 85cb012)
        padded = [layer.layout for layer in everything if layer.layout is not None and
                  getattr(layer.layout, "padding", 0)]
        assert [(layout.padding, layout.pad_value) for layout in padded] == [(1, -37)]
        assert not any(type(instruction).__name__ == "Fill"
                       for instruction in lowered.instructions)
    if case == "depthwise":  # no host dot-product is left
        assert layers[0].groups == 20 and not any(
            type(instruction).__name__ == "Dot" for instruction in lowered.instructions)
    if case == "residual_maxpool":  # the pool reads the rows of the layer with the add
        assert layers[-1].pool and layers[-1].a.buffer == layers[-2].dst.buffer
        assert layers[-2].residual_add is not None
        assert not any(type(instruction).__name__ in ("Reduce", "Fused")
                       for instruction in lowered.instructions)
    if case.startswith("conv_maxpool"):  # no host reduce is left; the pool reads the layer's rows
        pool = layers[-1]
        assert pool.pool and (pool.kernel, pool.stride, pool.padding) == (3, 2, 1)
        assert pool.a.buffer == layers[0].dst.buffer and pool.image == (6, 6, 8)
        assert not any(type(instruction).__name__ == "Reduce"
                       for instruction in lowered.instructions)
    if case.endswith("residual") or case in ("resnet_block", "conv_residual_of_a_layer"):
        # the add is in the last layer's epilogue: no host loop is left
        residual = layers[-1].residual
        assert residual is not None and layers[-1].residual_add is not None
        assert not any(type(instruction).__name__ in ("Fused", "Fold")
                       for instruction in lowered.instructions)
        # no host copy of r into the layer's rows (accel_residual's `_residual` buffer):
        # a program input r is laid out for the layer by the accelerator's input layout layer
        assert not residual.buffer.endswith("_residual")
        if case == "conv_residual":
            assert residual.buffer == "r_nhwc"
        if case == "conv_residual_of_a_layer":  # the other layer's rows, before the copy
            assert residual.buffer == layers[0].dst.buffer
    assert_diff_agrees(outdir, [f"{name}={outdir / name}.npy" for name in inputs])


@pytest.mark.slow
def test_n_blocks_side_by_side_run_in_the_c_model(tmp_path: Path) -> None:
    """Issue 28: a 16×512 by 512×64 layer at 4 B/cycle takes its N blocks side by side in
    the accumulator (COMPUTEs naming their accumulator rows); the generated C's model of
    ws_accel computes it bit-exactly (interpreter = C), and `glensidec diff` agrees."""
    source = _dense(tmp_path, PER_CHANNEL, m=16, k=512, n=64)
    outdir = tmp_path / "out"
    compiled = _compile(source, outdir, "16x16", "--dram-bandwidth", "4")
    assert compiled.returncode == 0, compiled.stderr
    _, lowered = load_compiled(outdir)
    (layer,) = lowered.accel_layers()
    table = constant_array(lowered.buffer_of(layer.commands), {})
    assert table[:, FIELDS.index("acc_row")].max() > 0
    inputs = {"x": np.random.default_rng(4).integers(-128, 128, (16, 512)).astype(np.int8)}
    got, _ = _run(outdir, inputs)
    assert np.array_equal(got, _expected(source, inputs))
    assert_diff_agrees(outdir, [f"x={outdir / 'x'}.npy"])


@pytest.mark.slow
def test_layer_cycles_are_the_python_models_for_the_same_commands(tmp_path: Path) -> None:
    """The commands in weights.bin are conv_program's for the layer — resnet_block's first
    convolution as a 3×3 convolution whose im2col rows the DMA reads from an 18×18×16 NHWC
    map; AccelModel, the model the RTL is checked against, gives the cycles the layer
    predicts."""
    outdir = tmp_path / "out"
    assert _compile(EXAMPLES / "resnet_block.gs", outdir, "16x16").returncode == 0
    _, lowered = load_compiled(outdir)
    layout, layer, second, result = lowered.accel_layers()
    assert isinstance(result.layout, NchwLayout) and result.a.buffer == second.dst.buffer
    # conv1 reads the input's NHWC rows, which a layout layer makes, the DMA padding them
    assert (layer.a.buffer, layer.image, layer.kernel, layer.stride, layer.padding) == (
        layout.dst.buffer, (16, 16, 16), 3, 1, 1)
    assert second.residual_add is not None and second.residual_add.early and \
        second.residual_add.multiplier == 32  # conv2 + bias + x·32, then the requantize
    # conv2 reads conv1's rows (16×16 pixels × 16 channels) itself, the DMA padding them
    assert (second.a.buffer, second.image, second.padding, second.pad_value) == (
        layer.dst.buffer, (16, 16, 16), 1, 0)
    accel = accel_config_for(ArrayConfig(16, 16))
    bias = constant_array(lowered.buffer_of(layer.bias), {})
    multiplier = constant_array(lowered.buffer_of(layer.multiplier), {})
    height, width, channels = layer.image
    program = conv_program(
        accel, ConvLayer("hidden", height, width, channels, layer.n, layer.kernel, layer.stride,
                         layer.padding),
        LayerQuant(EpilogueConfig(layer.pre, layer.post, layer.zero_point, layer.low,
                                  layer.high),
                   tuple(int(v) for v in bias), tuple(int(v) for v in multiplier)))
    table = constant_array(lowered.buffer_of(layer.commands), {})
    assert np.array_equal(table, pack_commands(program.commands))
    timing = AccelModel(accel).run(program.commands)
    assert (timing.cycles, timing.load_bytes, timing.store_bytes, timing.compute_rows) == (
        layer.cycles, layer.load_bytes, layer.store_bytes, layer.compute_rows)
    assert layer.cycles > layer.compute_rows >= layer.m * -(-layer.k // 16)


def test_a_scratchpad_too_small_for_a_tile_is_a_clear_error(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    compiled = _compile(EXAMPLES / "resnet_block.gs", outdir, "16x16", "--scratchpad", "512")
    assert compiled.returncode == 1 and "Traceback" not in compiled.stderr
    assert ("error: --scratchpad 512: the weights of one K fold (16 rows of 16 B = 256 B) do "
            "not fit a 128-byte buffer (a quarter of the 512-byte scratchpad)") in compiled.stderr
    assert not outdir.exists()


@pytest.mark.slow
def test_small_memories_tile_the_layer_and_cost_cycles(tmp_path: Path) -> None:
    """A 1 KiB scratchpad and a 2-row accumulator still compute the layer, in more pieces,
    and the prediction says what that costs."""
    cycles = {}
    for name, extra in (("default", ()), ("small", ("--scratchpad", "1KiB",
                                                     "--accumulator", "128"))):
        outdir = tmp_path / name
        compiled = _compile(EXAMPLES / "resnet_block.gs", outdir, "16x16", *extra)
        assert compiled.returncode == 0, compiled.stderr
        x = np.random.default_rng(2).integers(-128, 128, (1, 16, 16, 16)).astype(np.int8)
        got, _ = _run(outdir, {"x": x})
        assert np.array_equal(got, _expected(EXAMPLES / "resnet_block.gs", {"x": x}))
        cycles[name] = sum(layer.cycles for layer in load_compiled(outdir)[1].accel_layers())
    assert cycles["small"] > cycles["default"]


@pytest.mark.slow
def test_compiling_with_accel_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    digests = []
    for name in ("first", "second"):
        outdir = tmp_path / name
        assert _compile(EXAMPLES / "resnet_block.gs", outdir, "16x16").returncode == 0
        digests.append({path.name: hashlib.sha256(path.read_bytes()).hexdigest()
                        for path in sorted(outdir.iterdir())})
    assert digests[0] == digests[1] and "accel_runtime.c" in digests[0]


@pytest.mark.slow
def test_the_runtime_is_clean_under_sanitizers(tmp_path: Path) -> None:
    source = _dense(tmp_path, PER_CHANNEL)
    outdir = tmp_path / "out"
    assert _compile(source, outdir, "8x8").returncode == 0
    subprocess.run(["make", "-s", "-C", str(outdir), "asan", "OPT=-O1"], check=True,
                   capture_output=True, timeout=600)
    np.save(tmp_path / "x.npy", np.random.default_rng(1).integers(-128, 128, (5, 24))
            .astype(np.int8))
    ran = subprocess.run([str(outdir / "model_asan"), f"x={tmp_path / 'x.npy'}", "-o",
                          str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert np.array_equal(np.load(tmp_path / "y.npy"),
                          _expected(source, {"x": np.load(tmp_path / "x.npy")}))


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("case", ["resnet_block", "dense", "conv_residual_of_a_layer",
                                  "conv_maxpool", "conv_maxpool_2x2", "residual_maxpool",
                                  "depthwise"])
def test_make_sim_runs_the_layers_on_ws_accel(case: str, tmp_path: Path,
                                               sim_cache: Path) -> None:
    """`make sim` co-simulates the accelerator layers on ws_accel (resnet_block's array
    call on the array's RTL in a run of its own; a residual add in a layer's epilogue):
    bits and cycles as predicted, and the result the interpreter's."""
    _, shapes, array, fused = CASES[case]
    source = _source(case, tmp_path)
    outdir = tmp_path / "out"
    assert _compile(source, outdir, array).returncode == 0
    rng = np.random.default_rng(11)
    inputs = {name: rng.integers(-128, 128, shape).astype(np.int8)
              for name, shape in shapes.items()}
    sim = cosimulate(outdir, save_inputs(inputs, tmp_path), tmp_path / "sim.npy", sim_cache)
    assert "co-simulation: every result and cycle count matches" in sim.log
    layers = [call for call in sim.report["calls"] if "accel" in call]
    layouts = sum(layer.layout is not None for layer in load_compiled(outdir)[1].accel_layers())
    assert len(layers) == fused + layouts
    assert_calls_match_the_model(sim.report)
    assert np.array_equal(sim.result, _expected(source, inputs))


@pytest.mark.slow
@pytest.mark.rtl
def test_diff_rtl_checks_the_layers_on_ws_accel(tmp_path: Path, sim_cache: Path) -> None:
    source = _dense(tmp_path, PER_CHANNEL)
    outdir = tmp_path / "out"
    assert _compile(source, outdir, "8x8").returncode == 0
    np.save(tmp_path / "x.npy", np.random.default_rng(4).integers(-128, 128, (5, 24))
            .astype(np.int8))
    ran = subprocess.run([sys.executable, "-m", "glensidec", "diff", str(outdir),
                          f"x={tmp_path / 'x.npy'}", "--rtl"], capture_output=True, text=True,
                         timeout=1200, env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "agree: interpreter, C program, RTL co-simulation, RTL (accelerator layers on " \
           "ws_accel)" in ran.stdout


@pytest.mark.slow
def test_stats_report_the_host_data_movement_the_host_model_prices(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    # (resnet_block and small_cnn at 16×16 leave no copy on the host; on an 8×8 array
    # small_cnn's dense layer runs with its activations as the stationary operand, padded
    # to the array and packed by the host)
    compiled = _compile(EXAMPLES / "small_cnn.gs", outdir, "8x8")
    rows = json.loads((outdir / "report.json").read_text())["rows"]
    moves = [row for row in rows if row["kind"] in ("copy", "fill")]
    moved = sum(int(np.prod(row["output"])) for row in moves)
    assert moved > 512  # the padding and packing of the dense layer's activations
    assert f"host data movement (in the host's cycles): {moved} elements" in compiled.stderr
    assert all(row["host_cycles"] == int(np.prod(row["output"])) for row in moves)


@pytest.mark.slow
def test_stats_and_report_show_each_layers_dram_traffic_against_the_compulsory_bytes(
        tmp_path: Path) -> None:
    """Per layer and in total: bytes loaded (by tensor) and stored, the compulsory bytes
    and their ratio, in --stats and report.json/html; the loads sum to what the cycle
    model moved (the op's figure) and the compulsory bytes are the tensors' sizes."""
    outdir = tmp_path / "out"
    compiled = _compile(EXAMPLES / "resnet_block.gs", outdir, "16x16")
    assert compiled.returncode == 0, compiled.stderr
    rows = [row for row in json.loads((outdir / "report.json").read_text())["rows"]
            if row["where"] == "accelerator"]
    # the two convolutions, between the layout layers of the NCHW input and result
    convolutions = [row for row in rows if row["op"].startswith("M=")]
    assert len(rows) == 4 and len(convolutions) == 2
    for row in rows:
        loaded = row["input_load_bytes"] + row["weight_load_bytes"] + row["residual_load_bytes"]
        assert loaded == row["load_bytes"] and f"{loaded} B loaded" in row["op"]
        ratio = (loaded + row["store_bytes"]) / row["compulsory_bytes"]
        assert f"{ratio:.1f}x the compulsory {row['compulsory_bytes']} B" in compiled.stderr
    for row in convolutions:
        # 16 channels in, 16 out, a 3×3 kernel: weights 2304 B, output 4096 B, the input
        # map (padded by the host, or read by the DMA unpadded) at least 16×16×16 B
        assert 2304 + 4096 + 4096 <= row["compulsory_bytes"] <= 2304 + 4096 + 4096 * 3
    total_loaded = sum(row["load_bytes"] for row in rows)
    total_stored = sum(row["store_bytes"] for row in rows)
    compulsory = sum(row["compulsory_bytes"] for row in rows)
    assert (f"DRAM traffic of the layers: {total_loaded} B loaded + {total_stored} B stored = "
            f"{(total_loaded + total_stored) / compulsory:.2f}x the compulsory {compulsory} B"
            in compiled.stderr)
    page = (outdir / "report.html").read_text()
    assert "DRAM traffic of the accelerator layers" in page and f"{compulsory:,}" in page
