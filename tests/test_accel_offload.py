"""`compile --accel` leaves nothing on the host that the accelerator can do, and what it
moves onto the accelerator means what the host's loops meant.

The quick tests lower a program with the accelerator passes and run the lowered program in
numpy (`glensidec.cosim.diff`'s interpreter, which executes each accelerator layer as
what it declares: products or pooled windows, then every epilogue stage); its result must
be the interpreter's on the source. The slow ones build the C program and run it too.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    Executions,
    assert_calls_match_the_model,
    assert_diff_agrees,
    compile_and_cosimulate,
    cosimulate,
    run_c_program,
    run_checked,
    save_inputs,
)
from onnx_models import OnnxGraph, imported
from test_accel_layers import depthwise

from glensidec import pipeline
from glensidec.backend.accel_layers import check_fits, evaluate_buffer
from glensidec.backend.accel_passes import fuse_for_accelerator
from glensidec.backend.lower import (
    AccelLayer,
    LoweredProgram,
    LowerOptions,
    constant_array,
    lower_program,
)
from glensidec.cosim.diff import lowered_output, lowered_result
from glensidec.errors import GlensideError
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.hardware.accel import ConvLayer, EpilogueConfig, ResidualConfig
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import LayerQuant
from glensidec.hardware.layout import NchwLayout
from glensidec.lang import data
from glensidec.lang.interp import evaluate_result
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program

# Issue 27's program: a 1×1 convolution of 2 channels, requantized, max-pooled 2×2, then a
# quantized add of another input r and a requantize.
POOL_THEN_ADD = """
(input a i8 (shape 1 1 {size} {size}))
(input r i8 (shape 1 2 {half} {half}))
(weight w i8 (shape 2 1 1 1) "w.npz")
(let conv
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor w) 1)
    (access (access-squeeze (access-windows (access (access-tensor a) 1)
                                            (shape 1 1 1) (shape 1 1 1)) 1) 3)))
  (list 1 0 2 3)))
(let q (compute (requantize 1 0 2 0) conv))
(let p (compute reduce-max (access-windows (access q 2) (shape 2 2) (shape 2 2))))
(compute (requantize 3 0 1 5)
 (compute elementwise-add (access-pair (compute (cast i32) p)
                                       (compute (cast i32) (access-tensor r)))))
"""


def _pool_then_add(root: Path, size: int) -> Path:
    np.savez(root / "w.npz", w=np.array([3, -2], np.int8).reshape(2, 1, 1, 1))
    path = root / f"pool_then_add_{size}.gs"
    path.write_text(POOL_THEN_ADD.format(size=size, half=size // 2))
    return path


def _accelerated(source: Path, array: str) -> LoweredProgram:
    """The program as `compile --accel` lowers it (rewritten, epilogues fused, lowered,
    the accelerator passes run)."""
    program = read_program(source)
    rows, cols = (int(v) for v in array.split("x"))
    config = ArrayConfig(rows, cols)
    compiled = pipeline.fuse_epilogues(
        pipeline.compile_program(program, config, types=check_program(program),
                                 rulesets=pipeline.ACCEL_RULESETS), config)
    lowered = lower_program(compiled.program, compiled.types, LowerOptions(array_dtype="i8"))
    return fuse_for_accelerator(lowered, data.load_weights(program),
                                pipeline.accelerator_for(config))


def _random_inputs(source: Path, seed: int) -> dict[str, np.ndarray]:
    return data.random_inputs(read_program(source), seed)


def _interpreted(source: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    program = read_program(source)
    result = evaluate_result(program, data.all_tensors(program, inputs), check_program(program))
    assert isinstance(result, np.ndarray)
    return result


def _lowered_result(source: Path, lowered: LoweredProgram,
                    inputs: dict[str, np.ndarray], rows: int) -> np.ndarray:
    weights = data.load_weights(read_program(source))
    values = lowered_output(lowered, lowered_result(lowered, weights, inputs, rows))
    assert values is not None
    return values


def _checked_cosimulation(source: Path, array: str | None, inputs: dict[str, np.ndarray],
                          workdir: Path, sim_cache: Path) -> Executions:
    """`compile_and_cosimulate`, checked: the C program and ws_accel give the interpreter's
    result, every call its predicted cycles and bits."""
    run = compile_and_cosimulate(source, array, inputs, workdir, sim_cache)
    assert_calls_match_the_model(run.report)
    expected = _interpreted(source, inputs)
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)
    return run


def _assert_interpreters_agree(source: Path, lowered: LoweredProgram, rows: int,
                               seeds: int = 2) -> None:
    """`lowered` (run in numpy on an array of `rows` rows) gives the interpreter's result on
    `source` for the random inputs of each of the first `seeds` seeds."""
    for seed in range(seeds):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, rows)
        assert np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize("size", [2, 4, 6])
def test_a_residual_add_after_an_accelerator_max_pool_is_not_dropped(
        size: int, tmp_path: Path) -> None:
    """Issue 27: the residual pass gave the add to the pooling layer, whose pooled rows
    skip the residual stage, so the program returned the max-pool itself."""
    source = _pool_then_add(tmp_path, size)
    lowered = _accelerated(source, "4x4")
    pools = [layer for layer in lowered.accel_layers() if layer.pool]
    assert len(pools) == 1 and pools[0].residual_add is None  # the pool is still on ws_accel
    _assert_interpreters_agree(source, lowered, 4, seeds=3)


def test_diff_runs_a_pooling_layer_through_its_whole_epilogue(tmp_path: Path) -> None:
    """`glensidec diff`'s interpreter executes a layer as what it declares, so a pass that
    gives a pooling layer a residual its commands do not apply diverges at that layer
    instead of every instruction agreeing."""
    source = _pool_then_add(tmp_path, 4)
    lowered = _accelerated(source, "4x4")
    index, pool = next((i, layer) for i, layer in enumerate(lowered.instructions)
                       if isinstance(layer, AccelLayer) and layer.pool)
    inputs = _random_inputs(source, 0)
    weights = data.load_weights(read_program(source))
    plain = lowered_result(lowered, weights, inputs, 4)[index]
    doubled = ResidualConfig(self_multiplier=2, multiplier=0, offset=0,
                             requantize_multiplier=1, pre=0, post=0, zero_point=0)
    lowered.instructions[index] = replace(pool, residual=pool.dst, residual_add=doubled)  # r·0
    changed = lowered_result(lowered, weights, inputs, 4)[index]
    assert np.array_equal(changed, np.clip(plain.astype(np.int64) * 2, -128, 127))


@pytest.mark.slow
def test_a_residual_add_after_an_accelerator_max_pool_runs_as_c(tmp_path: Path) -> None:
    """The same program through `glensidec compile --accel`, `make` and the C program, and
    `glensidec diff` agreeing on every instruction and on the result."""
    source = _pool_then_add(tmp_path, 4)
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(source), "--array", "4x4",
                 "--accel", "-o", str(outdir)])
    inputs = _random_inputs(source, 1)
    arguments = save_inputs(inputs, tmp_path)
    c_result = run_c_program(outdir, arguments, tmp_path / "out.npy")
    assert np.array_equal(c_result, _interpreted(source, inputs))
    assert_diff_agrees(outdir, arguments)


# A 1×1 convolution of 4 channels to 8 (an accelerator layer), requantized and ReLU'd: q
# (its weights written by `_save_conv_weights`).
CONV_LAYER = """
(input a i8 (shape 1 4 {size} {size}))
(weight w i8 (shape 8 4 1 1) "w.npz")
(let conv
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor w) 1)
    (access (access-squeeze (access-windows (access (access-tensor a) 1)
                                            (shape 4 1 1) (shape 1 1 1)) 1) 3)))
  (list 1 0 2 3)))
(let q (compute relu (compute (requantize 1 0 6 -3) conv)))
"""
# CONV_LAYER, then a max-pool of its result as the importer writes one: padded with the
# int8 minimum when `padding` > 0.
CONV_THEN_POOL = CONV_LAYER + """\
(compute reduce-max (access-windows (access {padded} 2) (shape {kernel} {kernel})
                                    (shape {stride} {stride})))
"""


def _save_conv_weights(root: Path) -> None:
    """CONV_LAYER's weights, ROOT/w.npz."""
    np.savez(root / "w.npz", w=np.random.default_rng(4).integers(-128, 128, (8, 4, 1, 1))
             .astype(np.int8))


def _conv_then_pool(root: Path, size: int, kernel: int, stride: int, padding: int) -> Path:
    _save_conv_weights(root)
    padded = "q" if not padding else \
        f"(access-pad (access-pad q min-padding 2 {padding} {padding}) min-padding 3 " \
        f"{padding} {padding})"
    path = root / "conv_then_pool.gs"
    path.write_text(CONV_THEN_POOL.format(size=size, kernel=kernel, stride=stride,
                                          padded=padded))
    return path


#: (map size, kernel, stride, padding): unpadded 2×2/2 (odd and even maps), ResNet's
#: 3×3/2 padded 1, stride 1 with and without padding, a stride beyond the kernel, 5×5
#: padded 2, a 1×1 subsampling, a window as large as the map.
POOLS = [(8, 2, 2, 0), (7, 2, 2, 0), (9, 3, 2, 1), (6, 3, 1, 1), (6, 2, 1, 0), (9, 2, 3, 0),
         (9, 5, 2, 2), (6, 1, 2, 0), (5, 5, 1, 0)]


@pytest.mark.parametrize("size,kernel,stride,padding", POOLS)
def test_every_max_pool_of_a_layer_runs_on_the_accelerator(
        size: int, kernel: int, stride: int, padding: int, tmp_path: Path) -> None:
    source = _conv_then_pool(tmp_path, size, kernel, stride, padding)
    lowered = _accelerated(source, "4x4")
    pools = [layer for layer in lowered.accel_layers() if layer.pool]
    assert len(pools) == 1 and pools[0].kernel == kernel and pools[0].padding == padding
    assert not any(type(instruction).__name__ == "Reduce"
                   for instruction in lowered.instructions)
    _assert_interpreters_agree(source, lowered, 4)


@pytest.mark.parametrize("channels,stride", [(20, 1), (20, 2), (6, 1)])
def test_a_depthwise_convolution_is_one_grouped_accelerator_layer(
        channels: int, stride: int, tmp_path: Path) -> None:
    """MobileNet's depthwise layers: the host dot-product over windows and its epilogue
    (per-element bias of the zero-point corrections, per-channel requantize, relu) become
    one grouped layer reading the map's NHWC rows; its result is the interpreter's."""
    source = depthwise(tmp_path, channels, stride)
    lowered = _accelerated(source, "4x4")
    (layer,) = [layer for layer in lowered.accel_layers() if layer.layout is None]
    assert (layer.groups, layer.kernel, layer.stride, layer.n) == (channels, 3, stride,
                                                                    channels)
    # the result back to NCHW is a layout layer too (the input has more channels than the
    # 4×4 array's columns: its padding stays on the host)
    assert isinstance(lowered.accel_layers()[-1].layout, NchwLayout)
    fills = [instruction for instruction in lowered.instructions
             if type(instruction).__name__ == "Fill"]
    assert fills and all(fill.value == -37 for fill in fills)  # padding: the zero point
    assert not any(type(instruction).__name__ in ("Dot", "Fold", "Fused",
                                                  "RequantizePerChannel", "Map")
                   for instruction in lowered.instructions)
    _assert_interpreters_agree(source, lowered, 4)


def test_a_depthwise_bias_no_zero_point_explains_stays_on_the_host(tmp_path: Path) -> None:
    source = depthwise(tmp_path, off_by_one=True)
    lowered = _accelerated(source, "4x4")
    assert not lowered.accel_layers()
    _assert_interpreters_agree(source, lowered, 4, seeds=1)


# CONV_LAYER, then an average pool as the quantizer writes one: the window sum in i32, plus
# a scalar (zero-point correction), one requantize.
CONV_THEN_AVERAGE = CONV_LAYER + """\
(let summed {summed})
(compute (requantize 1431655765 0 {post} -5)
 (compute elementwise-add
  (access-pair summed (access-broadcast {literal} (access-shape (shape {shape}) (shape))))))
"""


def _conv_then_average(root: Path, size: int, kernel: int) -> Path:
    """kernel = size: a global average pool (reduce-sum over the map, (1, C)); else a
    kernel × kernel pool at stride kernel."""
    _save_conv_weights(root)
    if kernel == size:
        summed, shape, rank = "(compute reduce-sum (access q 2))", "1 8", 2
    else:
        out = size // kernel
        summed = (f"(compute reduce-sum (access-windows (access q 2) (shape {kernel} {kernel})"
                  f" (shape {kernel} {kernel})))")
        shape, rank = f"1 8 {out} {out}", 4
    literal = "(access-literal (literal 300 i32))"
    for _ in range(rank):
        literal = f"(access-insert-axis {literal} 0)"
    path = root / "conv_then_average.gs"
    path.write_text(CONV_THEN_AVERAGE.format(size=size, summed=summed, shape=shape,
                                             literal=literal, post=31 + kernel))
    return path


@pytest.mark.parametrize("size,kernel", [(6, 6), (7, 7), (8, 2), (9, 3)])
def test_an_average_pool_of_a_layer_is_a_sum_pooling_layer(size: int, kernel: int,
                                                           tmp_path: Path) -> None:
    """Global and windowed average pools: the window sums, the scalar add and the
    requantize become one pooling layer (sum stores through the epilogue)."""
    source = _conv_then_average(tmp_path, size, kernel)
    lowered = _accelerated(source, "4x4")
    pools = [layer for layer in lowered.accel_layers() if layer.pool]
    assert len(pools) == 1 and pools[0].pool_sum and pools[0].kernel == kernel
    assert not any(type(instruction).__name__ in ("Reduce", "Fused", "Map", "Fold")
                   for instruction in lowered.instructions)
    for seed in range(2):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        assert len(np.unique(expected)) > 3  # not saturated
        got = _lowered_result(source, lowered, inputs, 4)
        assert np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.slow
@pytest.mark.rtl
def test_an_average_pool_runs_three_ways_and_on_ws_accel(tmp_path: Path,
                                                          sim_cache: Path) -> None:
    """A global average pool of a layer: the C program and `make sim` (every layer on
    ws_accel's RTL, bits and cycles as predicted) give the interpreter's result, and
    `glensidec diff` finds every instruction equal."""
    source = _conv_then_average(tmp_path, 7, 7)
    outdir = tmp_path / "out"
    compiled = run_checked([sys.executable, "-m", "glensidec", "compile", str(source),
                            "--array", "4x4", "--accel", "-o", str(outdir)])
    # the NCHW input's layout layer, the convolution and the average pool
    assert ", 3 accelerator layers:" in compiled.stdout
    inputs = _random_inputs(source, 2)
    arguments = save_inputs(inputs, tmp_path)
    expected = _interpreted(source, inputs)
    sim = cosimulate(outdir, arguments, tmp_path / "sim.npy", sim_cache)
    assert len(sim.report["calls"]) == 3
    assert_calls_match_the_model(sim.report)
    assert np.array_equal(sim.result, expected)
    assert_diff_agrees(outdir, arguments)


@pytest.mark.parametrize(("example", "array", "copies"), [
    ("small_cnn.gs", "16x16", False), ("resnet_block.gs", "16x16", False),
    ("small_cnn.gs", "8x8", True)])  # 8×8: the dense layer's activations padded, packed
def test_no_host_copy_remakes_a_constant_every_inference(example: str, array: str,
                                                         copies: bool) -> None:
    """Weights the lowering pads and packs at run time are constants after --accel: every
    fill and copy left writes a buffer that depends on the program's inputs (at 16×16 the
    examples leave none: their inputs' and results' layouts are layout layers)."""
    source = Path(__file__).resolve().parent.parent / "examples" / example
    lowered = _accelerated(source, array)
    weights = data.load_weights(read_program(source))
    moved = [index for index, instruction in enumerate(lowered.instructions)
             if type(instruction).__name__ in ("Fill", "Copy")]
    assert bool(moved) == copies
    for index in moved:
        name = lowered.instructions[index].writes().buffer
        readers = lowered.readers().get(name, [len(lowered.instructions)])
        assert evaluate_buffer(lowered, name, weights, min(readers)) is None, name


def test_a_first_convolution_whose_k_the_lowering_padded_reads_the_map_by_dma() -> None:
    """small_cnn's 1-channel 3×3 convolution: the lowering pads its K (9) to the array
    (16), so the im2col matrix is a copy of the windows and a fill; the layer reads the
    padded map's NHWC rows with the DMA's im2col instead of a host-built matrix."""
    source = Path(__file__).resolve().parent.parent / "examples" / "small_cnn.gs"
    lowered = _accelerated(source, "16x16")
    conv = next(layer for layer in lowered.accel_layers() if layer.multiplies)
    assert conv.image == (18, 18, 1) and (conv.kernel, conv.k, conv.n) == (3, 9, 8)
    assert all(math.prod(instruction.writes().shape) < 256 * 9
               for instruction in lowered.instructions
               if type(instruction).__name__ in ("Fill", "Copy"))  # no im2col matrix
    _assert_interpreters_agree(source, lowered, 16)


def _quantized_lraspp(tmp_path: Path) -> Path:
    """tests/test_segmentation's LR-ASPP head (a dilated depthwise 3×3), int8."""
    from test_quantize import saved_int8
    from test_segmentation import lraspp_head

    return saved_int8(lraspp_head(), tmp_path, "lraspp", 8)


def test_a_dilated_depthwise_convolution_is_a_grouped_layer_of_dilated_taps(
        tmp_path: Path) -> None:
    """A dilated depthwise 3×3 (MobileNetV3's segmentation blocks: dilation 2) stayed a host
    dot-product under the accelerator (its windows are gathered from a wider span, not a
    k×k kernel's); it runs as a grouped layer of its 3×3 taps 2 pixels apart (not a 5×5
    kernel with zeros between the taps: 9 taps' work, not 25), and computes the same."""
    source = _quantized_lraspp(tmp_path)
    lowered = _accelerated(source, "8x8")
    assert not any(type(instruction).__name__ == "Dot" for instruction in lowered.instructions)
    (dilated,) = [layer for layer in lowered.accel_layers() if layer.groups > 1]
    assert (dilated.groups, dilated.kernel, dilated.stride, dilated.dilation) == \
        (8, 3, 1, (2, 2))
    assert constant_array(lowered.buffer_of(dilated.b), {}).shape[0] == 3 * 3 * 8
    _assert_interpreters_agree(source, lowered, 8)


@pytest.mark.slow
@pytest.mark.rtl
def test_a_dilated_depthwise_layer_cosimulates_on_ws_accel(tmp_path: Path,
                                                           sim_cache: Path) -> None:
    """The dilated depthwise layer's commands on the RTL: bits and cycles as predicted."""
    source = _quantized_lraspp(tmp_path)
    inputs = _random_inputs(source, 3)
    _checked_cosimulation(source, "8x8", inputs, tmp_path, sim_cache)


# A 1×1 convolution of 2 channels and a quantized add of r·SCALE to it: after the
# requantize (late, the residual pass's form) or to the accumulator before it (early, a
# skip connection). ws_epilogue's residual multipliers are 16-bit: SCALE = 40000 does not
# fit them, so the add stays on the host and the result is still the interpreter's.
SCALED = ("(access-broadcast (access-insert-axis (access-insert-axis (access-insert-axis "
          "(access-insert-axis (access-literal (literal {scale} i32)) 0) 0) 0) 0) "
          "(access-shape (shape 1 2 4 4) (shape)))")
CONV_AND_SCALED_R = """
(input a i8 (shape 1 1 4 4))
(input r i8 (shape 1 2 4 4))
(weight w i8 (shape 2 1 1 1) "w.npz")
(let conv
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor w) 1)
    (access (access-squeeze (access-windows (access (access-tensor a) 1)
                                            (shape 1 1 1) (shape 1 1 1)) 1) 3)))
  (list 1 0 2 3)))
(let scaled_r (compute elementwise-mul (access-pair (compute (cast i32) (access-tensor r))
                                                   {scaled})))
"""
LATE_ADD = """(let q (compute (requantize 1 0 2 0) conv))
(compute (requantize 3 0 {post} 5)
 (compute elementwise-add
  (access-pair (compute elementwise-mul (access-pair (compute (cast i32) q) {scaled}))
               scaled_r)))"""
EARLY_ADD = ("(compute (requantize 1 0 {post} 0) "
             "(compute elementwise-add (access-pair conv scaled_r)))")


@pytest.mark.parametrize("form", ["late", "early"])
@pytest.mark.parametrize(("scale", "post", "fused"), [(3, 5, True), (40000, 19, False)])
def test_a_residual_add_wider_than_the_epilogues_multipliers_stays_on_the_host(
        form: str, scale: int, post: int, fused: bool, tmp_path: Path) -> None:
    np.savez(tmp_path / "w.npz", w=np.array([3, -2], np.int8).reshape(2, 1, 1, 1))
    scaled = SCALED.format(scale=scale)
    body = (LATE_ADD if form == "late" else EARLY_ADD).format(post=post, scaled=scaled)
    source = tmp_path / f"{form}_{scale}.gs"
    source.write_text(CONV_AND_SCALED_R.format(scaled=scaled) + body)
    lowered = _accelerated(source, "4x4")
    added = [layer.residual_add for layer in lowered.accel_layers()
             if layer.residual_add is not None]
    assert [(r.multiplier, r.early) for r in added] == ([(scale, form == "early")] if fused
                                                         else [])
    for seed in range(3):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, 4)
        assert np.array_equal(got.reshape(expected.shape), expected)
        assert len(np.unique(expected)) > 10  # not a saturated constant


def test_check_fits_refuses_a_residual_add_beyond_the_epilogues_sum() -> None:
    layer = ConvLayer("block", 4, 4, 16, 16)
    wide = ResidualConfig(self_multiplier=2**14, multiplier=2**14, offset=2**23)
    with pytest.raises(GlensideError) as raised:
        check_fits(pipeline.accelerator_for(ArrayConfig(4, 4)), layer,
                   LayerQuant(EpilogueConfig(), (0,) * 16, (1,) * 16, residual=wide))
    assert str(raised.value) == (
        "error: --accel: layer block: the residual add's sum spans [4194304, 12550144], beyond the "
        "epilogue's 24-bit signed sum")


def _residual_after_relu(order: str, bias: bool) -> Any:
    """A stem conv and ReLU x, then conv-ReLU-conv and a residual add of x in `order`
    (torch's relu(c2(relu(c1(x)))) + x and its variants), a 2×2 max-pool and a classifier:
    the next convolution reads x, which the add reads too."""
    g = OnnxGraph(3)
    image = g.input("input", [1, 1, 8, 8])
    x = g.node("Relu", [g.conv(image, 1, 8, 3, pad=1, bias=bias)])
    y = g.conv(g.node("Relu", [g.conv(x, 8, 8, 3, pad=1, bias=bias)]), 8, 8, 3, pad=1,
               bias=bias)
    y = {"relu_add": lambda: g.node("Add", [g.node("Relu", [y]), x]),
         "add_relu": lambda: g.node("Relu", [g.node("Add", [y, x])])}[order]()
    y = g.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    return g.model(g.gemm(g.node("Flatten", [y], axis=1), 128, 10), [1, 10])


@pytest.mark.parametrize(("order", "bias"), [("relu_add", True), ("add_relu", False)])
def test_a_convolution_reading_a_residual_blocks_input_is_an_accelerator_layer(
        order: str, bias: bool, tmp_path: Path) -> None:
    """A convolution whose input the block's residual add reads too (x in
    relu(c2(relu(c1(x)))) + x), quantized with asymmetric activations (the zero padding's
    bias corrections): its padding takes the zero point only if no one else reads the
    fills, and x, the stem layer's result copied back to NCHW, holds none. The check
    refused any buffer on the way with two readers, so c1 stayed a host im2col, array
    call and requantize (88 % of the predicted cycles on the host); now nothing does."""
    from test_quantize import calibration_for

    program = imported(_residual_after_relu(order, bias), tmp_path, order)
    source = save_quantized(quantize(program, calibration_for(program, 8)),
                            tmp_path / f"{order}.q.gs")
    lowered = _accelerated(source, "16x16")
    assert [type(i).__name__ for i in lowered.instructions
            if not isinstance(i, AccelLayer)] == []
    assert len(lowered.accel_layers()) == 6  # input layout, 3 convolutions, pool, dense
    _assert_interpreters_agree(source, lowered, 16)
