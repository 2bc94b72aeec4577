"""ONNX import: models built here with onnx.helper, compared with onnxruntime.

Every model is executed by each executor in EXECUTORS (the reference interpreter and the
generated C program) and compared with onnxruntime at 1e-4 relative.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from onnx_models import (
    EXECUTOR_PARAMS,
    EXECUTORS,
    MODELS,
    OPS,
    OnnxGraph,
    check_against_onnxruntime,
    imported,
    lenet,
    mlp,
    mobilenet_block,
    resnet_block,
    save,
    single_op_model,
)

from glensidec.cli import import_command
from glensidec.errors import GlensideError
from glensidec.frontends.importer import import_onnx, sanitize
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import compute_name, is_matmul, postorder
from glensidec.lang.typecheck import access_type, check_program
from glensidec.outputs import MANIFEST

Array = np.ndarray[Any, Any]


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
    y = g.node("Relu", [y], name="relu")  # a compute type's name: a name like any other
    y = g.node("Relu", [y], name="input")  # and a declaration keyword
    program = imported(g.model(y, [1, 4]), tmp_path)
    assert [d.name for d in program.inputs()] == ["input_0"]
    assert set(program.names.values()) == {"block.relu.Relu", "relu", "input"}


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


def large_weight_model(weight_shape: tuple[int, int]) -> Any:
    """x (1, 80) · a weight of `weight_shape` (more elements than the importer's outline
    keeps: a graph input of its type and shape for the checker and shape inference)."""
    g = OnnxGraph()
    x = g.input("x", [1, 80])
    y = g.node("MatMul", [x, g.random("w", weight_shape)])
    return g.model(y, [1, weight_shape[1]])


def test_a_weight_left_out_of_the_checked_outline_is_still_shape_checked(
        tmp_path: Path) -> None:
    from glensidec.frontends.importer import OUTLINE_ELEMENTS

    assert OUTLINE_ELEMENTS < 81 * 64
    path = tmp_path / "bad.onnx"
    path.write_bytes(large_weight_model((81, 64)).SerializeToString())  # 80 ≠ 81
    expect_failure(path, tmp_path, "the model is inconsistent (ONNX shape inference)",
                   "MatMul")


def test_a_corrupt_weight_left_out_of_the_checked_outline_is_refused(tmp_path: Path) -> None:
    model = large_weight_model((80, 64))
    weight, = model.graph.initializer
    weight.raw_data = weight.raw_data[:-4]  # one float short of its dims
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(model.SerializeToString())
    expect_failure(path, tmp_path, "corrupt.onnx", "not a valid ONNX model")
    assert import_onnx(save(large_weight_model((80, 64)), tmp_path / "good.onnx"),
                       tmp_path / "good").is_file()


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


def _imported_relu(tmp_path: Path, input_name: str) -> tuple[Path, str]:
    """A ReLU of the (1, 4) input ONNX names `input_name`, imported into TMP_PATH/out:
    (the program, what the import printed)."""
    g = OnnxGraph()
    g.input(input_name, [1, 4])
    model_path = save(g.model(g.node("Relu", [input_name]), [1, 4]), tmp_path / "m.onnx")
    result = CliRunner().invoke(import_command, [str(model_path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return tmp_path / "out" / "m.gs", result.output


def test_onnx_input_named_input_keeps_its_name(tmp_path: Path) -> None:
    """PyTorch calls the input `input`: no word is reserved, so the program declares
    `input` too, with no alias line, and `glensidec run --input input=…` works."""
    from glensidec.cli import cli as main

    program, printed = _imported_relu(tmp_path, "input")
    assert "input 'input' → input\n" in printed
    assert [d.name for d in read_program(program).inputs()] == ["input"]
    assert "onnx-input" not in program.read_text()
    runner = CliRunner()
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    result = runner.invoke(main, ["run", str(program), "--input", f"input={tmp_path / 'x.npy'}",
                                  "-o", str(out)])
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(out), np.maximum(x, 0))


def test_renamed_onnx_input_names_work_with_run(tmp_path: Path) -> None:
    """An ONNX name the language cannot spell (`input:0`) becomes `input_0`, and
    `glensidec run --input input:0=…` still works; the import prints the mapping."""
    from glensidec.cli import cli as main

    program, printed = _imported_relu(tmp_path, "input:0")
    assert "input 'input:0' → input_0 (renamed" in printed
    assert [d.name for d in read_program(program).inputs()] == ["input_0"]
    runner = CliRunner()
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    for name in ("input:0", "input_0"):
        out = tmp_path / f"{name.replace(':', '_')}.npy"
        result = runner.invoke(main, ["run", str(program), "--input", f"{name}=" +
                                      str(tmp_path / "x.npy"), "-o", str(out)])
        assert result.exit_code == 0, result.output
        np.testing.assert_array_equal(np.load(out), np.maximum(x, 0))
    result = runner.invoke(main, ["run", str(program), "--input", f"inpt={tmp_path / 'x.npy'}"])
    assert "('input:0' is input_0)" in str(result.exception)
    both = [f"input:0={tmp_path / 'x.npy'}", f"input_0={tmp_path / 'x.npy'}"]
    result = runner.invoke(main, ["run", str(program), "--input", both[0], "--input", both[1]])
    assert "given twice" in str(result.exception)


@pytest.mark.parametrize("name", ["conv_dilations", "conv_dilations_strides_depthwise",
                                  "conv_dilations_groups"])
def test_dilated_convolutions_multiply_only_the_kernel_taps(name: str, tmp_path: Path) -> None:
    """Dilations are dilated windows (every d-th tap, as MaxPool's), not a kernel spread
    with zeros (issue 30: fcn_resnet50's zero-stuffed kernels overflowed the im2col
    limit): the weights keep the kernel's shape and each product reduces over C·k_h·k_w."""
    build, shape = OPS[name]
    model = single_op_model(build, shape)
    program = imported(model, tmp_path)
    weight = next(d for d in program.tensors.values() if d.role == "weight" and len(d.shape) == 4)
    kernel = tuple(int(d) for d in numpy_helper.to_array(model.graph.initializer[0]).shape)
    assert weight.shape == kernel
    types = check_program(program)
    products = [term for term in postorder(program.root)
                if is_matmul(term) or compute_name(term) == "dot-product"]
    assert products
    for term in products:
        reduced = access_type(types, term.args[1]).item
        assert math.prod(reduced[1:]) == kernel[1] * kernel[2] * kernel[3]


def test_typing_a_growing_program_walks_only_its_new_terms(monkeypatch: Any) -> None:
    """The importer types each node's term against everything typed before it: `infer`
    walked the whole program each time (quadratic; swin_t's 2,500 nodes took 62 s CPU to
    import). A chain of 400 ReLUs typed one link at a time now visits each term once."""
    from glensidec.frontends import builders as B
    from glensidec.lang import terms
    from glensidec.lang.terms import TensorDecl, Term
    from glensidec.lang.typecheck import infer

    tensors = {"x": TensorDecl("x", (4,), "f32", "input")}
    visits = []
    original = Term.children
    monkeypatch.setattr(terms.Term, "children", lambda self: visits.append(1) or original(self))
    types: dict[Any, Any] = {}
    term = B.tensor("x")
    for _ in range(400):
        term = B.compute("relu", term)
        infer(term, tensors, types)
    assert len(types) == 401  # every link typed ...
    assert len(visits) <= 3 * 401  # ... and walked about once, not 400·401/2 times
