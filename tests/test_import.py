"""ONNX import: models built here with onnx.helper, compared with onnxruntime.

Every model is executed by each executor in EXECUTORS (the reference interpreter and the
generated C program) and compared with onnxruntime at 1e-4 relative.
"""

from __future__ import annotations

import itertools
import os
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
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from glensidec.cli import import_command
from glensidec.errors import GlensideError
from glensidec.frontends.importer import import_onnx, sanitize
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program
from glensidec.outputs import MANIFEST
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


# -- the four networks -------------------------------------------------------------------------


@pytest.mark.parametrize("executor", EXECUTOR_PARAMS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_network_matches_onnxruntime(name: str, executor: str, tmp_path: Path) -> None:
    check_against_onnxruntime(MODELS[name](), tmp_path, executor)


def test_program_is_readable_and_folds_batch_norm(tmp_path: Path) -> None:
    gs = import_onnx(save(resnet_block(), tmp_path / "block.onnx"), tmp_path / "out")
    text = gs.read_text()
    assert text.startswith("; Imported from block.onnx")
    assert "(input x f32 (shape 1 16 16 16))" in text
    # batch-norms after convolutions are folded away: no multiply, two biased convs
    assert "elementwise-mul" not in text
    assert text.count("(let relu") == 2 and "(let add" in text
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["block.gs", "block.npz",
                                                                   MANIFEST])


def test_import_is_deterministic(tmp_path: Path) -> None:
    model = save(mobilenet_block(), tmp_path / "m.onnx")
    first, second = import_onnx(model, tmp_path / "a"), import_onnx(model, tmp_path / "b")
    for suffix in (".gs", ".npz"):
        assert first.with_suffix(suffix).read_bytes() == second.with_suffix(suffix).read_bytes()


def test_reimport_replaces_the_directory(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    import_onnx(save(mlp(), tmp_path / "a.onnx"), outdir)
    import_onnx(save(mlp(), tmp_path / "b.onnx"), outdir)
    assert sorted(p.name for p in outdir.iterdir()) == sorted(["b.gs", "b.npz", MANIFEST])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "b.onnx", "out"]


# -- single ops --------------------------------------------------------------------------------


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


@pytest.mark.parametrize("executor", EXECUTOR_PARAMS)
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_onnxruntime(name: str, executor: str, tmp_path: Path) -> None:
    build, shape = OPS[name]
    check_against_onnxruntime(single_op_model(build, shape), tmp_path, executor)


@pytest.mark.parametrize("executor", EXECUTOR_PARAMS)
@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization(axis: int, executor: str, tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node("LayerNormalization", [
        x, g.random("scale", (4, 5)[axis:] if axis == -1 else (3, 4, 5)),
        g.random("bias", (5,))], axis=axis, epsilon=1e-3), [2, 3, 4, 5])
    check_against_onnxruntime(model, tmp_path, executor)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_op(approximate: str, tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node("Gelu", [x], approximate=approximate), [3, 7])
    check_against_onnxruntime(model, tmp_path, "interp")


def test_softmax_before_opset_13_coerces_to_2d(tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node("Softmax", [x], axis=1), [2, 3, 4])
    model.opset_import[0].version = 11
    check_against_onnxruntime(model, tmp_path, "interp")


def test_names_are_sanitized() -> None:
    assert sanitize("/layer1/conv/Conv_output_0") == "layer1.conv.Conv"
    assert sanitize("input:0") == "input_0"
    assert sanitize("/fc/Gemm_output_0_w") == "fc.Gemm_w"  # a weight named after its node
    assert sanitize("0") == "t0"
    assert sanitize("a.b-c") == "a.b-c"


def test_awkward_onnx_names_import(tmp_path: Path) -> None:
    g = OnnxGraph()
    x = g.input("input:0", [1, 4])
    y = g.node("Relu", [x], name="/block/relu/Relu_output_0")
    y = g.node("Relu", [y], name="relu")  # a reserved word in the language
    program = imported(g.model(y, [1, 4]), tmp_path)
    assert [d.name for d in program.inputs()] == ["input_0"]
    assert set(program.names.values()) == {"block.relu.Relu", "relu_2"}


# -- bad models --------------------------------------------------------------------------------


def expect_failure(model_path: Path, tmp_path: Path, *words: str) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(GlensideError) as raised:
        import_onnx(model_path, tmp_path / "out")
    for word in words:
        assert word in str(raised.value), (word, str(raised.value))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing left behind


def test_truncated_model(tmp_path: Path) -> None:
    data = mlp().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    expect_failure(path, tmp_path, "cut.onnx", "not a valid ONNX model")


def test_missing_model_file(tmp_path: Path) -> None:
    expect_failure(tmp_path / "nope.onnx", tmp_path, "no such model file")


def test_unsupported_op(tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node("Hardmax", [g.node("Relu", [x])]), [2, 3])
    expect_failure(save(model, tmp_path / "hardmax.onnx"), tmp_path,
                   "node 'Hardmax_2' (Hardmax)", "unsupported op 'Hardmax'")


def test_unsupported_attribute(tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node(
        "Pad", [x, g.const("p", np.array([3, 1, 1, 1], np.int64))], mode="reflect"), [3, 4])
    expect_failure(save(model, tmp_path / "pad.onnx"), tmp_path, "(Pad)",
                   "reflect padding of 3 on an axis of 3 is not supported")


def integer_model(dtype: int) -> Any:
    """Integer arithmetic as ONNX defines it (wrapping, truncating division), pooling and
    padding on an integer input; a float-only op after it would be refused."""
    g = OnnxGraph()
    x = g.input("x", [2, 3, 6])
    g.inputs[0].type.tensor_type.elem_type = dtype
    numpy_type = helper.tensor_dtype_to_np_dtype(dtype)
    k = g.const("k", np.array([3, -7, 5], numpy_type).reshape(3, 1))
    product = g.node("Mul", [g.node("Add", [x, k]), x])
    divisor = g.node("Sub", [g.const("ten", np.array(10, numpy_type)), g.node("Clip", [
        x, g.const("lo", np.array(-9, numpy_type)), g.const("hi", np.array(9, numpy_type))])])
    quotient = g.node("Div", [product, divisor])  # 1 … 19: no division by zero
    if dtype == TensorProto.INT8:  # ONNX's MaxPool takes int8, not int16
        pooled = g.node("MaxPool", [quotient], kernel_shape=[2], strides=[2])
    else:
        pooled = g.node("Slice", [quotient, *(g.const(n, np.array([v], np.int64)) for n, v in
                                              (("st", 1), ("en", 6), ("ax", 2), ("sp", 2)))])
    y = g.node("Pad", [pooled, g.const("p", np.array([0, 1, 2, 0, 0, 1], np.int64)),
                       g.const("v", np.array(-3, numpy_type))])
    model = g.model(y, [2, 4, 6])
    model.graph.output[0].type.tensor_type.elem_type = dtype
    model.opset_import[0].version = 14  # Add, Sub, Mul, Div on int8 and int16
    return model


@pytest.mark.parametrize("executor", EXECUTOR_PARAMS)
@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.INT16, TensorProto.INT32])
def test_integer_inputs_compute_as_onnx_does(dtype: int, executor: str, tmp_path: Path) -> None:
    from onnx.reference import ReferenceEvaluator

    model = integer_model(dtype)
    info = np.iinfo(helper.tensor_dtype_to_np_dtype(dtype))
    x = np.random.default_rng(3).integers(info.min, info.max, (2, 3, 6), endpoint=True)
    x = x.astype(info.dtype)
    x[0, 0, :2] = [info.min, info.max]  # sums and products wrap
    expected = np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    program = imported(model, tmp_path)
    actual = EXECUTORS[executor](program, {"x": x})
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


def test_float_only_op_on_an_integer_input_is_refused(tmp_path: Path) -> None:
    g = OnnxGraph()
    x = g.input("x", [2, 3])
    g.inputs[0].type.tensor_type.elem_type = TensorProto.INT32
    model = g.model(g.node("ReduceMean", [x], axes=[1]), [2, 1])
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    expect_failure(save(model, tmp_path / "mean.onnx"), tmp_path, "(ReduceMean)",
                   "input 'x' is i32: only float inputs for ReduceMean")


def test_training_mode_dropout_is_refused(tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node(
        "Dropout", [x, g.const("r", np.array(0.5, "f4")), g.const("t", np.array(True))]),
        [3, 4])
    expect_failure(save(model, tmp_path / "drop.onnx"), tmp_path, "(Dropout)",
                   "training_mode=true is not supported")


def test_inference_mode_dropout_is_identity(tmp_path: Path) -> None:
    model = single_op_model(lambda g, x: g.node(
        "Dropout", [x, g.const("r", np.array(0.5, "f4")), g.const("t", np.array(False))]),
        [3, 4])
    check_against_onnxruntime(model, tmp_path, "interp")


def test_dynamic_shape(tmp_path: Path) -> None:
    g = OnnxGraph()
    x = g.input("x", ["batch", 4])
    expect_failure(save(g.model(g.node("Relu", [x]), ["batch", 4]), tmp_path / "dyn.onnx"),
                   tmp_path, "input 'x' has a dynamic shape", "dim 0 is 'batch'")


def test_wrong_input_name(tmp_path: Path) -> None:
    g = OnnxGraph()
    g.input("x", [1, 4])
    y = g.node("Relu", ["X"])
    model = g.model(y, [1, 4])
    path = tmp_path / "wrong.onnx"
    path.write_bytes(model.SerializeToString())  # onnx.save would not check; we must
    expect_failure(path, tmp_path, "not a valid ONNX model")
    # and without the checker in the way, the importer's own message
    from glensidec.frontends.importer import build_program

    with pytest.raises(GlensideError, match="input 'X' is not defined by any graph input"):
        build_program(model, "w.npz", "p.gs")


def test_failure_keeps_an_existing_output(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    import_onnx(save(mlp(), tmp_path / "good.onnx"), outdir)
    model = single_op_model(lambda g, x: g.node("Hardmax", [x]), [2, 3])
    with pytest.raises(GlensideError):
        import_onnx(save(model, tmp_path / "bad.onnx"), outdir)
    assert sorted(p.name for p in outdir.iterdir()) == sorted(["good.gs", "good.npz", MANIFEST])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- command line ------------------------------------------------------------------------------


def test_cli_import(tmp_path: Path) -> None:
    model = save(lenet(), tmp_path / "lenet.onnx")
    result = CliRunner().invoke(import_command, [str(model), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "lenet.gs" in result.output
    assert (tmp_path / "out" / "lenet.npz").is_file()


def test_cli_import_error_is_a_glenside_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(import_command, [str(tmp_path / "x.onnx"), "-o",
                                                 str(tmp_path / "o")])
    assert isinstance(result.exception, GlensideError)
    assert not (tmp_path / "o").exists()
    assert os.listdir(tmp_path) == []


def test_onnx_input_names_work_with_run(tmp_path: Path) -> None:
    """PyTorch calls the input `input`, a reserved word: the program says `input_2`, and
    `glensidec run --input input=…` still works; the import prints the mapping."""
    from glensidec.cli import cli as main

    g = OnnxGraph()
    g.input("input", [1, 4])
    model_path = save(g.model(g.node("Relu", ["input"]), [1, 4]), tmp_path / "m.onnx")
    runner = CliRunner()
    result = runner.invoke(import_command, [str(model_path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "input 'input' → input_2 (renamed" in result.output
    program = tmp_path / "out" / "m.gs"
    assert [d.name for d in read_program(program).inputs()] == ["input_2"]
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    for name in ("input", "input_2"):
        out = tmp_path / f"{name}.npy"
        result = runner.invoke(main, ["run", str(program), "--input", f"{name}=" +
                                      str(tmp_path / "x.npy"), "-o", str(out)])
        assert result.exit_code == 0, result.output
        np.testing.assert_array_equal(np.load(out), np.maximum(x, 0))
    result = runner.invoke(main, ["run", str(program), "--input", f"inpt={tmp_path / 'x.npy'}"])
    assert "('input' is input_2)" in str(result.exception)
    both = [f"input={tmp_path / 'x.npy'}", f"input_2={tmp_path / 'x.npy'}"]
    result = runner.invoke(main, ["run", str(program), "--input", both[0], "--input", both[1]])
    assert "given twice" in str(result.exception)
