"""ONNX test models shared by the test modules: a small onnx.helper builder (`OnnxGraph`),
four networks (`MODELS`), single-operator models (`OPS`, `single_op_model`), and the
executors that run an imported program (`EXECUTORS`: the interpreter, the generated C)
against onnxruntime.
"""

from __future__ import annotations

import itertools
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from glensidec.frontends.importer import import_onnx
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program
from glensidec.pipeline import compile_to_directory

Array = np.ndarray[Any, Any]


# -- building models -------------------------------------------------------------------------


NEWER_OPS = {"HardSwish": 14, "LayerNormalization": 17, "Gelu": 20}


@dataclass
class OnnxGraph:
    """A little builder over onnx.helper: seeded random weights, auto-named outputs."""

    seed: int = 0
    nodes: list[Any] = field(default_factory=list)
    initializers: list[Any] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)
    count: int = 0

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def input(self, name: str, shape: Sequence[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def const(self, name: str, array: Array) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def random(self, name: str, shape: tuple[int, ...], scale: float = 1.0) -> str:
        values = self.rng.standard_normal(shape) * scale
        return self.const(name, values.astype(np.float32))

    def node(self, op: str, inputs: list[str], name: str | None = None, **attrs: Any) -> str:
        self.count += 1
        output = name or f"{op.lower()}{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [output], name=f"{op}_{self.count}",
                                           **attrs))
        return output

    def nodes_out(self, op: str, inputs: list[str], count: int, **attrs: Any) -> list[str]:
        """A node with several outputs (Split)."""
        self.count += 1
        outputs = [f"{op.lower()}{self.count}_{i}" for i in range(count)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=f"{op}_{self.count}",
                                           **attrs))
        return outputs

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0,
             group: int = 1, bias: bool = True, name: str | None = None) -> str:
        fan_in = cin // group * k * k
        w = self.random(f"w{self.count}", (cout, cin // group, k, k), (2.0 / fan_in) ** 0.5)
        inputs = [x, w] + ([self.random(f"b{self.count}", (cout,), 0.1)] if bias else [])
        return self.node("Conv", inputs, name, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=group)

    def bn(self, x: str, channels: int) -> str:
        gamma = self.const(f"g{self.count}", self.rng.uniform(0.5, 1.5, channels).astype("f4"))
        beta = self.random(f"be{self.count}", (channels,), 0.1)
        mean = self.random(f"m{self.count}", (channels,), 0.1)
        var = self.const(f"v{self.count}", self.rng.uniform(0.5, 1.5, channels).astype("f4"))
        return self.node("BatchNormalization", [x, gamma, beta, mean, var], epsilon=1e-5)

    def gemm(self, x: str, fan_in: int, units: int, **attrs: Any) -> str:
        w = self.random(f"w{self.count}", (units, fan_in), (2.0 / fan_in) ** 0.5)
        b = self.random(f"b{self.count}", (units,), 0.1)
        return self.node("Gemm", [x, w, b], transB=1, **attrs)

    def model(self, output: str, shape: Sequence[int | str]) -> Any:
        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)
        graph = helper.make_graph(self.nodes, "test", self.inputs, [out], self.initializers)
        # opset 13, or the first opset that has every op used (HardSwish, Gelu, …)
        opset = max([13, *(NEWER_OPS.get(node.op_type, 13) for node in self.nodes)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8  # what this onnxruntime loads
        return model


def channel_shuffle(g: OnnxGraph, x: str, groups: int) -> str:
    """PyTorch's channel shuffle as exported: the shape is computed (Shape → Gather → …)."""
    shape = g.node("Shape", [x])
    dims = [g.node("Gather", [shape, g.const(f"i{i}", np.array(i, np.int64))], axis=0)
            for i in range(4)]
    per_group = g.node("Div", [dims[1], g.const("groups", np.array(groups, np.int64))])
    parts = [g.node("Unsqueeze", [d, g.const(f"u{i}", np.array([0], np.int64))])
             for i, d in enumerate([dims[0], g.const("g", np.array(groups, np.int64)),
                                    per_group, dims[2], dims[3]])]
    grouped = g.node("Reshape", [x, g.node("Concat", parts, axis=0)])
    swapped = g.node("Transpose", [grouped], perm=[0, 2, 1, 3, 4])
    flat = g.node("Concat", [parts[0], g.const("minus1", np.array([-1], np.int64)), parts[3],
                             parts[4]], axis=0)
    return g.node("Reshape", [swapped, flat])


def mlp(seed: int = 0, sizes: tuple[int, ...] = (32, 64, 48, 10), batch: int = 1) -> Any:
    g = OnnxGraph(seed)
    x = g.input("x", [batch, sizes[0]])
    for index, (fan_in, units) in enumerate(itertools.pairwise(sizes)):
        x = g.gemm(x, fan_in, units)
        if index < len(sizes) - 2:
            x = g.node("Relu", [x])
    return g.model(x, [batch, sizes[-1]])


def lenet(seed: int = 0) -> Any:
    g = OnnxGraph(seed)
    x = g.input("image", [1, 1, 28, 28])
    x = g.node("Relu", [g.conv(x, 1, 6, 5, pad=2)])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Relu", [g.conv(x, 6, 16, 5)])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Flatten", [x], axis=1)
    x = g.node("Relu", [g.gemm(x, 400, 120)])
    x = g.node("Relu", [g.gemm(x, 120, 84)])
    return g.model(g.gemm(x, 84, 10), [1, 10])


def resnet_block(seed: int = 0, channels: int = 16, size: int = 16) -> Any:
    """ResNet basic block: conv-BN-relu-conv-BN + identity, relu."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, channels, size, size])
    y = g.node("Relu", [g.bn(g.conv(x, channels, channels, 3, pad=1, bias=False), channels)])
    y = g.bn(g.conv(y, channels, channels, 3, pad=1, bias=False), channels)
    out = g.node("Relu", [g.node("Add", [y, x])])
    return g.model(out, [1, channels, size, size])


def mobilenet_block(seed: int = 0, channels: int = 16, out: int = 32, size: int = 16) -> Any:
    """MobileNet-v1: depthwise 3x3 (stride 2) - BN - ReLU6, pointwise 1x1 - BN - ReLU6."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, channels, size, size])
    lo, hi = g.const("lo", np.array(0, "f4")), g.const("hi", np.array(6, "f4"))
    y = g.conv(x, channels, channels, 3, stride=2, pad=1, group=channels, bias=False)
    y = g.node("Clip", [g.bn(y, channels), lo, hi])
    y = g.node("Clip", [g.bn(g.conv(y, channels, out, 1, bias=False), out), lo, hi])
    return g.model(y, [1, out, size // 2, size // 2])


MODELS: dict[str, Callable[[], Any]] = {
    "mlp": mlp, "lenet": lenet, "resnet_block": resnet_block, "mobilenet_block": mobilenet_block,
}


# -- running -----------------------------------------------------------------------------------


def save(model: Any, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def run_onnxruntime(model: Any, inputs: dict[str, Array]) -> Array:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, inputs)[0])


def run_interpreter(program: Program, inputs: dict[str, Array]) -> Array:
    return run_program(program, {**load_weights(program), **inputs})


def run_generated_c(program: Program, inputs: dict[str, Array]) -> Array:
    """Compile with the C back end (glensidec.backend.emit), build with make, run on `inputs`."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        compile_to_directory(program, check_program(program), root / "c", ArrayConfig(8, 8))
        command(["make", "-s", "-C", str(root / "c"), "model"])
        arguments = []
        for index, (name, array) in enumerate(inputs.items()):
            np.save(root / f"input{index}.npy", array)
            arguments.append(f"{name}={root / f'input{index}.npy'}")
        command([str(root / "c" / "model"), *arguments, "-o", str(root / "out.npy")])
        result: Array = np.load(root / "out.npy")
        return result


def command(words: list[str]) -> None:
    completed = subprocess.run(words, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]


# Each executor runs an imported program on named inputs.
EXECUTORS: dict[str, Callable[[Program, dict[str, Array]], Array]] = {
    "interp": run_interpreter,
    "c": run_generated_c,
}


def imported(model: Any, tmp_path: Path, name: str = "model") -> Program:
    gs = import_onnx(save(model, tmp_path / f"{name}.onnx"), tmp_path / f"{name}_out")
    return read_program(gs)


# The generated-C executor builds a program per case: only in the full run.
EXECUTOR_PARAMS = [pytest.param(name, marks=[pytest.mark.slow] if name == "c" else [])
                   for name in sorted(EXECUTORS)]


def onnx_inputs(model: Any, seed: int = 1) -> dict[str, Array]:
    generator = np.random.default_rng(seed)
    inputs = {}
    for value in model.graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        inputs[value.name] = generator.standard_normal(dims).astype(np.float32)
    return inputs


def program_inputs(program: Program, given: dict[str, Array]) -> dict[str, Array]:
    """ONNX input names → the program's (sanitized) input names, in declaration order."""
    return {decl.name: array for decl, array in zip(program.inputs(), given.values(),
                                                    strict=True)}


def assert_close(actual: Array, expected: Array, rtol: float = 1e-4) -> None:
    scale = float(np.max(np.abs(expected)))
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def check_against_onnxruntime(model: Any, tmp_path: Path, executor: str, seed: int = 1) -> None:
    program = imported(model, tmp_path)
    inputs = onnx_inputs(model, seed)
    actual = EXECUTORS[executor](program, program_inputs(program, inputs))
    assert_close(actual, run_onnxruntime(model, inputs))


# -- single-operator models ---------------------------------------------------------------


def single_op_model(build: Callable[[OnnxGraph, str], str], shape: list[int],
                    seed: int = 0) -> Any:
    g = OnnxGraph(seed)
    out = build(g, g.input("x", shape))
    model = g.model(out, [])
    model.graph.output[0].type.tensor_type.ClearField("shape")
    model = onnx.shape_inference.infer_shapes(model)  # onnx works out the output shape
    output = model.graph.output[0].type.tensor_type
    if not output.HasField("shape"):  # a computed Reshape target: ask onnxruntime
        dims = run_onnxruntime(model, onnx_inputs(model)).shape
        output.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in dims)
    return model


OPS: dict[str, tuple[Callable[[OnnxGraph, str], str], list[int]]] = {
    "conv_stride_asymmetric_pads": (lambda g, x: g.node(
        "Conv", [x, g.random("w", (5, 3, 3, 2)), g.random("b", (5,))],
        strides=[2, 1], pads=[1, 0, 2, 1]), [2, 3, 9, 8]),
    "conv_groups": (lambda g, x: g.conv(x, 4, 6, 3, pad=1, group=2), [1, 4, 7, 7]),
    "conv_depthwise_multiplier": (lambda g, x: g.conv(x, 3, 6, 3, group=3), [1, 3, 6, 6]),
    "conv_same_upper": (lambda g, x: g.node(
        "Conv", [x, g.random("w", (4, 2, 3, 3))], strides=[2, 2], auto_pad="SAME_UPPER"),
        [1, 2, 8, 7]),
    "gemm_trans_alpha_beta": (lambda g, x: g.node(
        "Gemm", [x, g.random("w", (6, 5)), g.random("c", (4, 5))], transA=1, alpha=0.5,
        beta=2.0), [6, 4]),
    "gemm_no_bias_scalar_c": (lambda g, x: g.node(
        "Gemm", [x, g.random("w", (6, 5)), g.const("c", np.array(0.25, "f4"))]), [3, 6]),
    "matmul_3d": (lambda g, x: g.node("MatMul", [x, g.random("w", (6, 5))]), [2, 3, 6]),
    "matmul_two_inputs": (lambda g, x: g.node(
        "MatMul", [x, g.node("Transpose", [x], perm=[1, 0])]), [3, 4]),
    "maxpool_pads_strides": (lambda g, x: g.node(
        "MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [1, 2, 9, 9]),
    "averagepool_include_pad": (lambda g, x: g.node(
        "AveragePool", [x], kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 0],
        count_include_pad=1), [1, 2, 6, 6]),
    "conv_dilations": (lambda g, x: g.node(
        "Conv", [x, g.random("w", (4, 2, 3, 2))], dilations=[2, 3], pads=[2, 1, 1, 2]),
        [1, 2, 9, 10]),
    "conv_dilations_strides_depthwise": (lambda g, x: g.node(
        "Conv", [x, g.random("w", (3, 1, 3, 3)), g.random("b", (3,))], group=3,
        dilations=[2, 2], strides=[2, 1], pads=[2, 2, 1, 2]), [1, 3, 11, 9]),
    "conv_dilations_groups": (lambda g, x: g.node(
        "Conv", [x, g.random("w", (4, 2, 3, 3))], group=2, dilations=[3, 2],
        pads=[3, 2, 3, 2]), [2, 4, 8, 9]),
    # torchvision's segmentation heads: F.interpolate(scale_factor=2, mode="nearest") and
    # (size=…, mode="bilinear", align_corners=False / True)
    "resize_nearest_x2": (lambda g, x: g.node(
        "Resize", [x, "", g.const("scales", np.array([1, 1, 2, 2], "f4"))], mode="nearest",
        coordinate_transformation_mode="asymmetric", nearest_mode="floor"), [1, 3, 5, 4]),
    "resize_nearest_sizes": (lambda g, x: g.node(
        "Resize", [x, "", "", g.const("sizes", np.array([1, 2, 7, 3], np.int64))],
        mode="nearest"), [1, 2, 5, 6]),
    "resize_bilinear_sizes": (lambda g, x: g.node(
        "Resize", [x, "", "", g.const("sizes", np.array([1, 2, 11, 13], np.int64))],
        mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), [1, 2, 5, 6]),
    "resize_bilinear_align_corners": (lambda g, x: g.node(
        "Resize", [x, g.const("roi", np.zeros(0, "f4")),
                   g.const("scales", np.array([1, 1, 2, 3], "f4"))], mode="linear",
        coordinate_transformation_mode="align_corners"), [2, 1, 4, 3]),
    "maxpool_ceil_mode": (lambda g, x: g.node(
        "MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), [1, 2, 10, 9]),
    "maxpool_dilations_pads": (lambda g, x: g.node(
        "MaxPool", [x], kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 2],
        pads=[1, 0, 0, 1]), [1, 2, 8, 9]),
    "averagepool_exclude_pad_ceil": (lambda g, x: g.node(
        "AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
        ceil_mode=1), [1, 2, 8, 7]),
    "averagepool_include_pad_ceil": (lambda g, x: g.node(
        "AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0],
        ceil_mode=1, count_include_pad=1), [1, 2, 8, 8]),
    "pad_nonzero_constant": (lambda g, x: g.node(
        "Pad", [x, g.const("p", np.array([1, 0, 0, 2], np.int64)),
                g.const("v", np.array(-1.5, "f4"))]), [3, 4]),
    "slice_steps": (lambda g, x: g.node("Slice", [
        x, g.const("st", np.array([1, 0], np.int64)), g.const("en", np.array([9, 100], np.int64)),
        g.const("ax", np.array([2, -1], np.int64)), g.const("sp", np.array([3, 2], np.int64))]),
        [2, 3, 10, 7]),
    "split_then_sub": (lambda g, x: g.node("Sub", [
        g.nodes_out("Split", [x, g.const("sz", np.array([1, 3], np.int64))], 2, axis=1)[0],
        g.nodes_out("Split", [x], 2, axis=1)[1]]), [2, 4, 3]),
    "expand_tile": (lambda g, x: g.node("Tile", [
        g.node("Expand", [x, g.const("s", np.array([2, 1, 3], np.int64))]),
        g.const("r", np.array([1, 2, 2], np.int64))]), [4, 1]),
    "gather_squeeze_unsqueeze": (lambda g, x: g.node("Unsqueeze", [
        g.node("Squeeze", [g.node("Gather", [x, g.const("i", np.array([[2], [0]], np.int64))],
                                  axis=1), g.const("a", np.array([2], np.int64))]),
        g.const("b", np.array([0, -1], np.int64))]), [2, 3, 4]),
    "reduce_mean_spatial": (lambda g, x: g.node(
        "ReduceMean", [x], axes=[2, 3], keepdims=0), [2, 3, 4, 5]),
    "reduce_sum_max_min": (lambda g, x: g.node("Add", [
        g.node("ReduceSum", [x, g.const("ax", np.array([0, 2], np.int64))], keepdims=1),
        g.node("Sub", [g.node("ReduceMax", [x], axes=[-1]), g.node("ReduceMin", [x], axes=[-1])
                       ])]), [2, 3, 4]),
    "channel_shuffle_from_shape": (lambda g, x: channel_shuffle(g, x, 2), [1, 6, 3, 3]),
    "silu_tanh_exp": (lambda g, x: g.node("Add", [
        g.node("Mul", [x, g.node("Sigmoid", [x])]),
        g.node("Tanh", [g.node("Exp", [x])])]), [2, 3, 4]),
    "gelu_as_exported": (lambda g, x: g.node("Mul", [g.node("Mul", [x, g.node("Add", [
        g.node("Erf", [g.node("Div", [x, g.const("r2", np.array(1.4142135, "f4"))])]),
        g.const("one", np.array(1.0, "f4"))])]), g.const("half", np.array(0.5, "f4"))]),
        [3, 5]),
    "sqrt_reciprocal_neg_pow": (lambda g, x: g.node("Add", [
        g.node("Reciprocal", [g.node("Sqrt", [g.node("Pow", [
            x, g.const("two", np.array(2.0, "f4"))])])]),
        g.node("Neg", [g.node("Pow", [x, g.const("three", np.array(3.0, "f4"))])])]), [2, 5]),
    "hardswish_hardsigmoid": (lambda g, x: g.node("Add", [
        g.node("HardSwish", [x]), g.node("HardSigmoid", [x], alpha=0.3, beta=0.4)]),
        [2, 3, 4]),
    "matmul_batched_two_inputs": (lambda g, x: g.node(
        "MatMul", [x, g.node("Transpose", [x], perm=[0, 2, 1])]), [2, 3, 4]),
    "matmul_batched_constant_broadcast": (lambda g, x: g.node(
        "MatMul", [x, g.random("w", (2, 1, 4, 5))]), [3, 3, 4]),
    "matmul_vector": (lambda g, x: g.node("MatMul", [x, g.random("v", (4,))]), [2, 3, 4]),
    "global_average_pool": (lambda g, x: g.node("GlobalAveragePool", [x]), [2, 3, 5, 4]),
    "add_mul_broadcast": (lambda g, x: g.node("Mul", [
        g.node("Add", [x, g.random("c", (3, 1, 1))]), g.random("s", (4,))]), [2, 3, 5, 4]),
    "sub_div_scalar": (lambda g, x: g.node("Div", [
        g.node("Sub", [g.const("k", np.array(1.5, "f4")), x]),
        g.const("d", np.array([2.0], "f4"))]), [2, 3]),
    "add_both_broadcast": (lambda g, x: g.node(
        "Add", [x, g.node("Transpose", [x], perm=[0, 2, 1])]), [2, 3, 1]),
    "flatten_axis2": (lambda g, x: g.node("Flatten", [x], axis=2), [2, 3, 4, 5]),
    "flatten_negative_axis": (lambda g, x: g.node("Flatten", [x], axis=-1), [2, 3, 4, 5]),
    "flatten_axis_minus_rank": (lambda g, x: g.node("Flatten", [x], axis=-4), [2, 3, 4, 5]),
    "reshape_zero_minus_one": (lambda g, x: g.node(
        "Reshape", [x, g.const("shape", np.array([0, -1, 2], np.int64))]), [2, 3, 4]),
    "transpose_default": (lambda g, x: g.node("Transpose", [x]), [2, 3, 4]),
    "concat_three": (lambda g, x: g.node(
        "Concat", [x, g.node("Relu", [x]), g.random("c", (2, 1, 4))], axis=-2), [2, 3, 4]),
    "pad_constant": (lambda g, x: g.node(
        "Pad", [x, g.const("p", np.array([0, 1, 2, 0, 3, 0], np.int64))]), [2, 3, 4]),
    "softmax_last": (lambda g, x: g.node("Softmax", [x]), [2, 7]),
    "softmax_then_add": (lambda g, x: g.node(
        "Add", [g.node("Softmax", [x]), g.random("c", (7,))]), [2, 7]),
    "softmax_middle": (lambda g, x: g.node("Softmax", [x], axis=1), [2, 5, 3]),
    "batchnorm_alone": (lambda g, x: g.bn(x, 3), [2, 3, 4, 4]),
    "clip_only_max": (lambda g, x: g.node(
        "Clip", [x, "", g.const("hi", np.array(0.5, "f4"))]), [3, 4]),
    "identity_dropout": (lambda g, x: g.node("Dropout", [g.node("Identity", [x])]), [3, 4]),
    "maxpool_1d": (lambda g, x: g.node(
        "MaxPool", [x], kernel_shape=[3], strides=[2], pads=[1, 1]), [2, 3, 9]),
    "averagepool_3d_exclude_pad": (lambda g, x: g.node(
        "AveragePool", [x], kernel_shape=[2, 3, 2], strides=[1, 2, 1],
        pads=[1, 0, 1, 0, 1, 1]), [1, 2, 4, 5, 4]),
    "pad_reflect_edge": (lambda g, x: g.node("Pad", [
        g.node("Pad", [x, g.const("p", np.array([0, 2, 1, 0, 1, 2], np.int64))],
               mode="reflect"),
        g.const("q", np.array([1, 0, 3, 2, 1, 0], np.int64))], mode="edge"), [2, 3, 4]),
    "gemm_beta_computed_c": (lambda g, x: g.node("Gemm", [
        x, g.random("w", (6, 5)), g.node("Slice", [
            x, *(g.const(n, np.array([v], np.int64))
                 for n, v in (("s", 1), ("e", 6), ("a", 1)))])],
        alpha=0.75, beta=0.5), [3, 6]),
}
