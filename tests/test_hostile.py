"""Regression tests for the defects a hostile new user found (issue 14, C–M).

Every bad input is one line on stderr, exit 1 (2 for click's usage errors), no traceback,
and located at the offending text where there is one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES
from hypothesis import given
from hypothesis import strategies as st
from test_outputs import make_sources, run_cli

from glensidec.cli import RECURSION_LIMIT
from glensidec.hardware.array import ArrayConfig, gemm_cycles, gemm_tiles, tile_sequence_cycles
from glensidec.lang.syntax import format_program, parse_program

Captured = pytest.CaptureFixture[str]


def one_line_error(capsys: Captured) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def write(tmp_path: Path, text: str | bytes, name: str = "p.gs") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# -- C, D: sizes and integers beyond what can be handled ---------------------------------------


@pytest.mark.parametrize(("text", "where", "message"), [
    ("(input a f32 (shape 1000000 1000000))\n(compute relu (access-tensor a))\n", ":1:14:",
     "shape (1000000,1000000) has 1,000,000,000,000 elements, more than the limit of "
     "4,294,967,296"),
    ("(input a f32 (shape 99999999999999999999999 2))\n(access-tensor a)\n", ":1:21:",
     "integer 99999999999999999999999 does not fit in 64 bits"),
    ("(input a f32 (shape 3000000000 1))\n(access-tensor a)\n", ":1:14:",
     "dimension 3000000000 exceeds the limit of 2,147,483,647"),
    ("(input a i8 (shape 60000 60000))\n(input b i8 (shape 60000 60000))\n"
     "(compute dot-product (access-cartesian-product (access (access-tensor a) 1)"
     " (access (access-tensor b) 1)))\n", ":3:22:",
     "access-cartesian-product: shape (60000,60000,2,60000) has 432,000,000,000,000 elements"),
])
def test_too_large_is_a_located_error(text: str, where: str, message: str, tmp_path: Path,
                                      capsys: Captured) -> None:
    program = write(tmp_path, text)
    for command in (["check"], ["run", "--random-inputs", "0"], ["compile", "--array", "4x4"]):
        assert run_cli(command[0], program, *command[1:], cwd=tmp_path) == 1
        err = one_line_error(capsys)
        assert err.startswith(f"{program}{where} error:") and message in err, err


@pytest.mark.parametrize(("array", "message"), [
    ("9223372036854775807x16", "the array is at most 4096x4096, got 9223372036854775807x16"),
    ("0x0", "the array needs rows >= 2 and cols >= 1, got 0x0"),
])
def test_absurd_arrays_are_refused_plainly(array: str, message: str, tmp_path: Path,
                                           capsys: Captured) -> None:
    assert run_cli("compile", EXAMPLES / "matmul.gs", "--array", array, cwd=tmp_path) == 1
    assert one_line_error(capsys) == f"error: --array {array}: {message}"


@given(rows=st.integers(2, 9), cols=st.integers(1, 9), depth=st.integers(2, 12),
       m=st.integers(1, 60), k=st.integers(1, 60), n=st.integers(1, 30))
def test_gemm_cycles_skips_periods_exactly(rows: int, cols: int, depth: int, m: int, k: int,
                                           n: int) -> None:
    config = ArrayConfig(rows, cols, acc_depth=depth)
    assert gemm_cycles(config, m, k, n) == tile_sequence_cycles(config,
                                                                gemm_tiles(config, m, k, n))


def test_gemm_cycles_of_a_huge_gemm_is_immediate() -> None:
    # 2^21 cubed on a 2x1 array is ~10^18 tiles: only a closed form answers at all.
    config = ArrayConfig(2, 1, acc_depth=2)
    cycles = gemm_cycles(config, 2**21, 2**21, 2**21)
    assert cycles > 2**21 * 2**20 * 2**21  # every tile takes at least its M rows of cycles


# -- E, K: command-line values -----------------------------------------------------------------


def test_negative_seed_and_nan_timeout_are_usage_errors(tmp_path: Path,
                                                       capsys: Captured) -> None:
    assert run_cli("run", EXAMPLES / "matmul.gs", "--random-inputs", "-1", cwd=tmp_path) == 2
    assert "-1 is not in the range" in capsys.readouterr().err
    assert run_cli("compile", EXAMPLES / "matmul.gs", "--array", "4x4", "--timeout", "nan",
                   cwd=tmp_path) == 2
    assert "nan is not a finite number of seconds" in capsys.readouterr().err


def test_invalid_utf8_is_located_and_a_bom_is_accepted(tmp_path: Path, capsys: Captured) -> None:
    bad = write(tmp_path, b"(input x f32 (shape 2))\n; caf\xe9\n(access-tensor x)\n")
    assert run_cli("check", bad, cwd=tmp_path) == 1
    assert one_line_error(capsys) == (f"{bad}:2:6: error: invalid UTF-8 (byte 0xe9); "
                                      "programs are UTF-8 text")
    bom = write(tmp_path, b"\xef\xbb\xbf(input x f32 (shape 2))\n(access-tensor x)\n", "b.gs")
    assert run_cli("check", bom, cwd=tmp_path) == 0
    assert capsys.readouterr().out == "((2),()) f32\n"


def test_data_file_messages(tmp_path: Path, capsys: Captured) -> None:
    (tmp_path / "zeros.npy").write_bytes(bytes(200))
    np.savez(tmp_path / "one.npz", anything=np.zeros((32, 64), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((64, 16), np.float32))
    matmul = EXAMPLES / "matmul.gs"
    b = f"b={tmp_path / 'b.npy'}"
    assert run_cli("run", matmul, "--input", f"a={tmp_path / 'zeros.npy'}", "--input", b,
                   cwd=tmp_path) == 1
    assert "is not a .npy file (it does not start with the NumPy header)" in one_line_error(
        capsys)
    assert run_cli("run", matmul, "--input", f"a={tmp_path}", "--input", b, cwd=tmp_path) == 1
    assert one_line_error(capsys) == f"error: {tmp_path} is a directory, not a .npy file"
    # an .npz holding one array stands for that array
    assert run_cli("run", matmul, "--input", f"a={tmp_path / 'one.npz'}", "--input", b,
                   "-o", tmp_path / "out.npy", cwd=tmp_path) == 0
    # a weight whose file holds the wrong array: its name once
    program = write(tmp_path, '(weight w f32 (shape 2) "w.npy")\n(access-tensor w)\n')
    np.save(tmp_path / "w.npy", np.zeros(3, np.float32))
    assert run_cli("run", program, cwd=tmp_path) == 1
    assert one_line_error(capsys).count("weight 'w'") == 1


# -- F: names from a --shapes file --------------------------------------------------------------


@pytest.mark.parametrize("name", ['b")(', "1x", "-x", "a b", ""])
def test_shapes_file_names_must_be_names(name: str, tmp_path: Path, capsys: Captured) -> None:
    program = write(tmp_path, "(access-tensor a)\n", "p.glenside")
    shapes = write(tmp_path, json.dumps({"a": [2], name: [3]}), "s.json")
    assert run_cli("check", program, "--shapes", shapes, cwd=tmp_path) == 1
    err = one_line_error(capsys)
    assert err.startswith(f"{shapes}: error: tensor name {json.dumps(name)} is not a name"), err


@pytest.mark.parametrize("name", ["input", "weight", "let", "compute", "relu", "shape"])
def test_shapes_file_names_may_be_language_words(name: str, tmp_path: Path,
                                                 capsys: Captured) -> None:
    """No word is reserved (Glenside's own asplos-demo MLP names a tensor `input`)."""
    program = write(tmp_path, f"(compute relu (access-tensor {name}))\n", "p.glenside")
    shapes = write(tmp_path, json.dumps({name: [3]}), "s.json")
    assert run_cli("check", program, "--shapes", shapes, cwd=tmp_path) == 0
    assert capsys.readouterr().out == "((3),()) f32\n"


# -- H: non-finite values in quantization --------------------------------------------------------


def test_quantize_rejects_non_finite_weights_and_calibration(tmp_path: Path,
                                                             capsys: Captured) -> None:
    sources = make_sources(tmp_path)
    weights = dict(np.load(sources["tiny.npz"]))
    weights["w"][1, 2] = np.nan
    np.savez(tmp_path / "tiny.npz", **weights)
    assert run_cli("quantize", sources["tiny.gs"], "--calibrate", sources["calib.npz"], "-o",
                   "q.gs", cwd=tmp_path) == 1
    assert one_line_error(capsys) == ("error: weight 'w' holds nan at index [1, 2]: "
                                      "quantization needs finite values")
    weights["w"][1, 2] = 0
    np.savez(tmp_path / "tiny.npz", **weights)
    calibration = np.load(sources["calib.npz"])["x"]
    calibration[2, 3, 1] = -np.inf
    np.savez(tmp_path / "calib.npz", x=calibration)
    assert run_cli("quantize", sources["tiny.gs"], "--calibrate", sources["calib.npz"], "-o",
                   "q.gs", cwd=tmp_path) == 1
    assert one_line_error(capsys) == ("error: calibration array 'x' holds -inf at index "
                                      "[2, 3, 1]: quantization needs finite values")
    assert not (tmp_path / "q.gs").exists()


# -- I: printing deep programs ------------------------------------------------------------------

@pytest.mark.slow
def test_printing_a_6000_deep_program_round_trips() -> None:
    """Printing used to be cubic in depth (> 200 s at 6,000); bench/bench_depth.py times it."""
    depth = 6000
    text = ("(input x i8 (shape 4 4))\n" + "(compute relu " * depth + "(access-tensor x)"
            + ")" * depth + "\n")
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(max(saved, RECURSION_LIMIT))
    try:
        program = parse_program(text, "<deep>")
        printed = format_program(program)
        assert parse_program(printed, "<deep>").root == program.root
        lines = printed.splitlines()
        assert len(lines) == 2 + depth + 1  # declaration, blank, one construct a line
        assert lines[-1].strip() == "(access-tensor x)" + ")" * depth
    finally:
        sys.setrecursionlimit(saved)


# -- J: the generated C harness -----------------------------------------------------------------


def npy_with_header(header: bytes) -> bytes:
    """A version-1 .npy whose header text is exactly `header` (no data)."""
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header


def test_c_harness_rejects_hostile_inputs(tmp_path: Path, capsys: Captured) -> None:
    import subprocess

    outdir = tmp_path / "out"
    assert run_cli("compile", EXAMPLES / "matmul.gs", "--array", "4x4", "--iterations", "2",
                   "-o", outdir, cwd=tmp_path) == 0
    subprocess.run(["make", "-s", "-C", str(outdir), "asan", "OPT=-O0"], check=True,
                   timeout=300)
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, np.zeros((32, 64), np.float32))
    np.save(b, np.zeros((64, 16), np.float32))
    (tmp_path / "descr.npy").write_bytes(npy_with_header(
        b"{'fortran_order': False, 'shape': (32, 64), 'descr'"))
    cases = [([f"a={tmp_path / 'descr.npy'}", f"b={b}"], "malformed .npy header"),
             ([f"a={tmp_path}", f"b={b}"], "cannot read (is it a directory?)"),
             ([f"a={a}", f"b={b}", "--weights", str(tmp_path)], "is it a directory?"),
             ([f"a={a}", f"a={a}", f"b={b}"], "input given twice: a")]
    for args, message in cases:
        done = subprocess.run([str(outdir / "model_asan"), *args, "-o", str(tmp_path / "o.npy")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and message in done.stderr, (args, done.stderr)
        assert "AddressSanitizer" not in done.stderr and "runtime error" not in done.stderr
    done = subprocess.run([str(outdir / "model_asan"), f"a={a}", f"b={b}", "-o",
                           str(tmp_path / "o.npy")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# -- L: make sim with a bad input -----------------------------------------------------------------

I8_MATMUL = """\
(input a i8 (shape 4 8))
(input b i8 (shape 4 8))
(compute dot-product
 (access-cartesian-product (access (access-tensor a) 1) (access (access-tensor b) 1)))
"""


def test_program_error_is_found_in_the_simulator_log(tmp_path: Path) -> None:
    from glensidec.cosim.runner import program_error

    log = tmp_path / "cosim_run.log"
    log.write_text("     0.00ns INFO     cocotb running\nmodel: input 'a': a.npy has dtype "
                   "'<f4', expected '<i1'\nTraceback (most recent call last):\n")
    assert program_error(log) == "input 'a': a.npy has dtype '<f4', expected '<i1'"
    log.write_text("model: accelerator layer c: command 3 of its table in weights.bin: an "
                   "unknown command\nmodel: model_run failed: the array or accelerator backend "
                   "reported the error above\n")
    assert program_error(log) == ("accelerator layer c: command 3 of its table in weights.bin: "
                                  "an unknown command")
    log.write_text("nothing from the program\n")
    assert program_error(log) is None
    assert program_error(tmp_path / "missing.log") is None


@pytest.mark.slow
@pytest.mark.rtl
def test_make_sim_with_a_bad_input_prints_the_cause(tmp_path: Path, sim_cache: Path) -> None:
    import os
    import subprocess

    program = write(tmp_path, I8_MATMUL)
    outdir = tmp_path / "out"
    assert run_cli("compile", program, "--array", "4x4", "-o", outdir, cwd=tmp_path) == 0
    np.save(tmp_path / "a.npy", np.zeros((4, 8), np.float32))  # should be int8
    np.save(tmp_path / "b.npy", np.zeros((4, 8), np.int8))
    done = subprocess.run(["make", "-s", "-C", str(outdir), "sim", "OPT=-O0",
                           f"INPUTS=a={tmp_path / 'a.npy'} b={tmp_path / 'b.npy'}"],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert (f"error: the program stopped: input 'a': {tmp_path / 'a.npy'} has dtype '<f4', "
            "expected '<i1'") in done.stderr, done.stderr


# -- G: ONNX models onnxruntime would refuse ------------------------------------------------------


def onnx_model(nodes: list[object], inputs: list[object], output_shape: list[int],
               initializers: tuple[object, ...] = ()) -> object:
    import onnx
    from onnx import TensorProto, helper

    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)
    graph = helper.make_graph(nodes, "g", inputs, [out], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert isinstance(model, onnx.ModelProto)
    return model


def invalid_onnx_models() -> dict[str, tuple[object, str]]:
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.DOUBLE, [1, 4])
    shape = numpy_helper.from_array(np.array([0, 0, 0], np.int64), "s")
    return {
        "flatten": (onnx_model([helper.make_node("Flatten", ["x"], ["y"], axis=7, name="flat")],
                               [x], [1, 4]),
                    "(op_type:Flatten, node name: flat): [ShapeInferenceError] Invalid value(7) "
                    "for attribute 'axis'"),
        "concat": (onnx_model([helper.make_node("Concat", ["x", "x"], ["y"], axis=5,
                                                name="cat")], [x], [2, 4]),
                   "(op_type:Concat, node name: cat)"),
        "mixed": (onnx_model([helper.make_node("Add", ["x", "z"], ["y"], name="add")], [x, z],
                             [1, 4]),
                  "(op_type:Add, node name: add): B has inconsistent type tensor(double)"),
        "reshape": (onnx_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="resh")],
                               [x], [1, 4, 1], (shape,)),
                    "(op_type:Reshape, node name: resh)"),
    }


@pytest.mark.parametrize("case", ["flatten", "concat", "mixed", "reshape"])
def test_invalid_onnx_models_are_refused_naming_the_node(case: str, tmp_path: Path,
                                                         capsys: Captured) -> None:
    import onnx

    model, message = invalid_onnx_models()[case]
    assert isinstance(model, onnx.ModelProto)
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert run_cli("import", tmp_path / "m.onnx", "-o", "out", cwd=tmp_path) == 1
    err = one_line_error(capsys)
    assert err.startswith(f"error: {tmp_path / 'm.onnx'}: the model is inconsistent") and \
        message in err, err
    assert not (tmp_path / "out").exists()


def test_a_static_zero_dim_is_not_called_dynamic(tmp_path: Path, capsys: Captured) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4])
    model = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [x], [0, 4])
    assert isinstance(model, onnx.ModelProto)
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert run_cli("import", tmp_path / "m.onnx", "-o", "out", cwd=tmp_path) == 1
    assert one_line_error(capsys) == ("error: input 'x' has dim 0 = 0: an empty tensor (a "
                                      "program's tensors have no zero dims)")
