"""Float in, float out for quantized programs (issue 14 feature 1): the program declares its
inputs' and output's scale and zero point, `run` quantizes a float32 input exactly as the
quantizer does, and `--dequantize` gives float32 results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import (
    assert_calls_match_the_model,
    cosimulate,
    run_c_program,
    run_checked,
    save_inputs,
)
from onnx_models import MODELS, imported, run_onnxruntime

import glensidec
from glensidec.cli import cli
from glensidec.errors import GlensideError
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.lang.quantization import Quantization
from glensidec.lang.syntax import format_program, parse_program, read_program

Array = np.ndarray[Any, Any]

QUANTIZED = """\
(input x i8 (shape 2 3) (quantized 0.05 -3))
(quantized-output 0.1 2)

(compute relu (access-tensor x))
"""


def gs(*args: str | Path) -> tuple[int, str]:
    """`glensidec ARGS` in process: exit code and what the user sees (main prints a
    GlensideError as its one-line message and exits 1)."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if isinstance(result.exception, GlensideError):
        return 1, str(result.exception)
    return result.exit_code, result.output


def by_hand(x: Array, scale: float, zero_point: int) -> Array:
    """The quantizer's formula written out independently: round half to even, saturate."""
    q = np.rint(x.astype(np.float64) / scale) + zero_point
    return np.clip(q, -128, 127).astype(np.int8)


# -- the language ------------------------------------------------------------------------


def test_quantized_declarations_parse_print_and_round_trip() -> None:
    program = parse_program(QUANTIZED, "q.gs")
    assert program.tensors["x"].quantization == Quantization(0.05, -3)
    assert program.output_quantization == Quantization(0.1, 2)
    assert format_program(program) == QUANTIZED
    assert parse_program(format_program(program), "q.gs") == program


def test_a_scale_round_trips_exactly() -> None:
    scale = 0.1 + 0.2  # 0.30000000000000004: needs all 17 digits
    text = QUANTIZED.replace("0.05", repr(scale))
    printed = format_program(parse_program(text, "q.gs"))
    assert parse_program(printed, "q.gs").tensors["x"].quantization == Quantization(scale, -3)


@pytest.mark.parametrize(("text", "location", "message"), [
    ("(input x i16 (shape 2) (quantized 0.5 0))\n(access-tensor x)", "1:24",
     "only an i8 input can be (quantized …), not i16"),
    ("(input x i8 (shape 2) (quantized 0 0))\n(access-tensor x)", "1:34",
     "input 'x': the scale must be a positive finite number, got 0.0"),
    ("(input x i8 (shape 2) (quantized -1.5 0))\n(access-tensor x)", "1:34",
     "the scale must be a positive finite number"),
    ("(input x i8 (shape 2) (quantized 1e999 0))\n(access-tensor x)", "1:34",
     "the scale must be a positive finite number, got inf"),
    ("(input x i8 (shape 2) (quantized 0.5 128))\n(access-tensor x)", "1:38",
     "the zero point must be in -128…127 (i8), got 128"),
    ("(input x i8 (shape 2) (quantized 0.5 1.0))\n(access-tensor x)", "1:38",
     "the zero point must be an integer"),
    ("(input x i8 (shape 2) (scale 0.5 1))\n(access-tensor x)", "1:23",
     "expected (quantized SCALE ZERO_POINT)"),
    ("(input x i8 (shape 2) (quantized 0.5 1) 3)\n(access-tensor x)", "1:1",
     "input takes (input name dtype (shape d…) [(quantized scale zero-point)])"),
    ("(input x i8 (shape 2))\n(quantized-output 0.5)\n(access-tensor x)", "2:1",
     "quantized-output takes a scale and a zero point"),
    ("(input x i8 (shape 2))\n(quantized-output 0.5 1)\n(quantized-output 0.5 1)\n"
     "(access-tensor x)", "3:1", "quantized-output is declared twice"),
    ("(input x i8 (shape 2))\n(quantized-output 0.5 1)\n(compute (cast i32) (access-tensor x))",
     "2:1", "quantized-output describes an i8 result; this program's result is ((2),()) i32"),
])
def test_bad_quantization_declarations_are_located(tmp_path: Path, text: str, location: str,
                                                   message: str) -> None:
    path = tmp_path / "bad.gs"
    path.write_text(text + "\n")
    code, text = gs("check", path)
    assert code == 1
    assert f"{path}:{location}: error: " in text and message in text, text


def test_quantized_is_not_a_reserved_name() -> None:
    """Programs that name a let `quantized` or `quantized-output` keep parsing."""
    program = parse_program("(input quantized i8 (shape 2))\n(let quantized-output "
                            "(access-tensor quantized))\nquantized-output\n", "n.gs")
    assert program.output_quantization is None


# -- run ---------------------------------------------------------------------------------


def test_run_quantizes_a_float_input_and_dequantizes_the_result(tmp_path: Path) -> None:
    program = tmp_path / "q.gs"
    program.write_text(QUANTIZED)
    # Halves (0.025/0.05 = 0.5, 0.075/0.05 = 1.5) round to even; ±inf and 1e9 saturate.
    x = np.array([[0.1, -0.2, 0.025], [0.075, 1e9, -np.inf]], np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "xq.npy", by_hand(x, 0.05, -3))
    outputs = {}
    for name, extra in (("float", ["--input", f"x={tmp_path / 'x.npy'}"]),
                        ("int8", ["--input", f"x={tmp_path / 'xq.npy'}"]),
                        ("real", ["--input", f"x={tmp_path / 'x.npy'}", "--dequantize"])):
        out = tmp_path / f"{name}.npy"
        code, text = gs("run", program, *extra, "-o", out)
        assert code == 0, text
        outputs[name] = np.load(out)
    assert outputs["float"].dtype == np.int8
    np.testing.assert_array_equal(outputs["float"], outputs["int8"])
    np.testing.assert_array_equal(outputs["float"], [[0, 0, 0], [0, 127, 0]])
    assert outputs["real"].dtype == np.float32
    expected = ((outputs["int8"].astype(np.float64) - 2) * 0.1).astype(np.float32)
    np.testing.assert_array_equal(outputs["real"], expected)


def test_run_refuses_nan_other_dtypes_and_dequantize_without_an_output_scale(
        tmp_path: Path) -> None:
    program = tmp_path / "q.gs"
    program.write_text(QUANTIZED)
    np.save(tmp_path / "nan.npy", np.array([[0, np.nan, 0], [0, 0, 0]], np.float32))
    np.save(tmp_path / "f64.npy", np.zeros((2, 3)))
    code, text = gs("run", program, "--input", f"x={tmp_path / 'nan.npy'}")
    assert code == 1 and "input 'x'" in text and "holds 1 NaN value(s)" in text, text
    code, text = gs("run", program, "--input", f"x={tmp_path / 'f64.npy'}")
    assert code == 1 and "holds float64 (2,3), expected int8 or float32 (quantized" in text
    plain = tmp_path / "plain.gs"
    plain.write_text("(input x i8 (shape 2))\n(access-tensor x)\n")
    code, text = gs("run", plain, "--random-inputs", "1", "--dequantize")
    assert code == 1 and "declares no (quantized-output" in text, text
    with pytest.raises(GlensideError, match="declares no"):
        glensidec.run(str(plain), seed=1, dequantize=True)


# -- a quantized network ----------------------------------------------------------------


@pytest.fixture(scope="module")
def quantized_mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    """The onnx MLP, its float program and its quantized program (saved)."""
    tmp_path = tmp_path_factory.mktemp("mlp")
    model = MODELS["mlp"]()
    program = imported(model, tmp_path, "mlp")
    calibration = {"x": np.random.default_rng(7).standard_normal((16, 1, 32)).astype(
        np.float32)}
    saved = save_quantized(quantize(program, calibration), tmp_path / "mlp.q.gs")
    return model, Path(program.path), saved


def test_the_quantizer_writes_the_parameters_into_the_program(
        quantized_mlp: tuple[Any, Path, Path]) -> None:
    _, _, saved = quantized_mlp
    program = read_program(saved)
    record = json.loads(saved.with_name(saved.name + ".json").read_text())
    x = program.tensors["x"].quantization
    assert x is not None and program.output_quantization is not None
    assert (x.scale, x.zero_point) == (record["inputs"]["x"]["scale"],
                                       record["inputs"]["x"]["zero_point"])
    assert (program.output_quantization.scale, program.output_quantization.zero_point) == (
        record["output"]["scale"], record["output"]["zero_point"])


def test_a_float_input_gives_what_the_hand_quantized_input_gives(
        quantized_mlp: tuple[Any, Path, Path]) -> None:
    model, float_program, saved = quantized_mlp
    program = read_program(saved)
    x_params = program.tensors["x"].quantization
    out_params = program.output_quantization
    assert x_params is not None and out_params is not None
    generator = np.random.default_rng(99)  # fresh data, outside the calibration set
    worst = 0.0
    for _ in range(4):
        x = generator.standard_normal((1, 32)).astype(np.float32)
        from_float = glensidec.run(program, {"x": x})
        from_int8 = glensidec.run(program, {"x": by_hand(x, x_params.scale,
                                                         x_params.zero_point)})
        np.testing.assert_array_equal(from_float, from_int8)
        real = glensidec.run(program, {"x": x}, dequantize=True)
        assert real.dtype == np.float32
        reference = glensidec.run(str(float_program), {"x": x})
        np.testing.assert_allclose(reference, run_onnxruntime(model, {"x": x}), rtol=1e-4,
                                   atol=1e-4)
        # Quantization error: a few output steps (three layers of rounding and the
        # input's) — measured 1.69 steps at most on these inputs.
        worst = max(worst, float(np.max(np.abs(real - reference))) / out_params.scale)
    print(f"worst dequantized error: {worst:.2f} output steps")
    assert worst <= 4.0, worst


# -- the generated C and the co-simulation ------------------------------------------------

C_SCALES = [(0.05, -3), (0.1 + 0.2, 0), (1e-5, 127), (3.7e3, -128), (2.0 ** -7, 5)]


def adversarial_floats(scale: float, zero_point: int, count: int = 200) -> Array:
    """Values where a different rounding or saturation would show: (k + ½)·scale and its
    float32 neighbours, the saturation edges, ±inf, ±0, subnormals, huge, random."""
    generator = np.random.default_rng(int(scale * 1e6) % 2**32)
    halves = (np.arange(-140, 140) + 0.5) * scale
    near = np.concatenate([np.nextafter(halves.astype(np.float32), np.float32(np.inf)),
                           np.nextafter(halves.astype(np.float32), np.float32(-np.inf))])
    edges = np.array([(127.5 - zero_point) * scale, (-128.5 - zero_point) * scale, np.inf,
                      -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38])
    spread = generator.standard_normal(count) * 64 * scale
    return np.concatenate([halves, near, edges, spread]).astype(np.float32)


def c_quantization_program(tmp_path: Path) -> tuple[Path, dict[str, Array]]:
    """One input per (scale, zero point), concatenated: the output is every quantized input."""
    inputs = {f"x{i}": adversarial_floats(s, z) for i, (s, z) in enumerate(C_SCALES)}
    lines = [f"(input {name} i8 (shape {len(values)}) (quantized {s!r} {z}))"
             for (name, values), (s, z) in zip(inputs.items(), C_SCALES, strict=True)]
    lines.append("(quantized-output 0.0625 -7)")
    result = "(access-tensor x0)"
    for name in list(inputs)[1:]:
        result = f"(access-concatenate {result} (access-tensor {name}) 0)"
    path = tmp_path / "quantized_inputs.gs"
    path.write_text("\n".join([*lines, result]) + "\n")
    return path, inputs


@pytest.mark.slow
def test_the_c_model_quantizes_and_dequantizes_bit_exactly_as_python(tmp_path: Path) -> None:
    """1,900 adversarial floats over five scales: the C harness's quantization equals
    Quantization.quantize and the interpreter's; --dequantize equals Quantization.dequantize
    bit for bit; NaN and a wrong dtype are refused with the input's name."""
    program_path, inputs = c_quantization_program(tmp_path)
    program = read_program(program_path)
    declared = {name: program.tensors[name].quantization for name in inputs}
    expected = np.concatenate([q.quantize(inputs[name]) for name, q in declared.items()
                               if q is not None])
    assert len(expected) == sum(len(values) for values in inputs.values())
    np.testing.assert_array_equal(np.concatenate([by_hand(v, s, z) for v, (s, z) in zip(
        inputs.values(), C_SCALES, strict=True)]), expected)
    np.testing.assert_array_equal(glensidec.run(program, inputs), expected)
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", program_path,
                 "--array", "8x8", "-o", outdir])
    run_checked(["make", "-s", "-C", outdir, "OPT=-O2"])
    arguments = save_inputs(inputs, tmp_path)
    run_checked([outdir / "model", *arguments, "-o", tmp_path / "c.npy"])
    run_checked([outdir / "model", *arguments, "--dequantize", "-o", tmp_path / "real.npy"])
    c = np.load(tmp_path / "c.npy")
    assert c.dtype == np.int8
    np.testing.assert_array_equal(c, expected)
    real = np.load(tmp_path / "real.npy")
    assert real.dtype == np.float32
    reference = Quantization(0.0625, -7).dequantize(expected)
    np.testing.assert_array_equal(real.view(np.uint32), reference.view(np.uint32))
    np.save(tmp_path / "nan.npy", np.where(np.arange(len(inputs["x0"])) == 3, np.nan,
                                           inputs["x0"]).astype(np.float32))
    np.save(tmp_path / "f64.npy", inputs["x0"].astype(np.float64))
    for bad, messages in (("nan.npy", ["input 'x0': ", "holds NaN"]),
                          ("f64.npy", ["input 'x0': ", "expected '<i1' or '<f4'"])):
        done = subprocess.run([str(outdir / "model"), f"x0={tmp_path / bad}", *arguments[1:]],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stderr
        assert all(message in done.stderr for message in messages), done.stderr


@pytest.mark.slow
@pytest.mark.rtl
def test_a_float_input_agrees_in_interpreter_c_and_rtl(
        quantized_mlp: tuple[Any, Path, Path], tmp_path: Path, sim_cache: Path) -> None:
    """The quantized MLP fed one float32 input: the interpreter, OUTDIR/model and
    `make sim` give the same int8 result as the hand-quantized input does, and
    --dequantize / DEQUANTIZE=1 the same float32 bits as Quantization.dequantize."""
    _, _, saved = quantized_mlp
    program = read_program(saved)
    x_params, out_params = program.tensors["x"].quantization, program.output_quantization
    assert x_params is not None and out_params is not None
    x = np.random.default_rng(5).standard_normal((1, 32)).astype(np.float32)
    expected = glensidec.run(program, {"x": by_hand(x, x_params.scale, x_params.zero_point)})
    np.testing.assert_array_equal(glensidec.run(program, {"x": x}), expected)
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", saved, "--array", "8x8",
                 "-o", outdir])
    arguments = save_inputs({"x": x}, tmp_path)
    np.testing.assert_array_equal(run_c_program(outdir, arguments, tmp_path / "c.npy"), expected)
    reference = out_params.dequantize(expected).view(np.uint32)
    run_checked([outdir / "model", *arguments, "--dequantize", "-o", tmp_path / "c_real.npy"])
    np.testing.assert_array_equal(np.load(tmp_path / "c_real.npy").view(np.uint32), reference)
    sim = cosimulate(outdir, arguments, tmp_path / "sim_real.npy", sim_cache, "DEQUANTIZE=1")
    assert sim.result.dtype == np.float32
    np.testing.assert_array_equal(sim.result.view(np.uint32), reference)
    assert_calls_match_the_model(sim.report)
    assert len(sim.report["calls"]) == 3  # the three dense layers ran on the RTL array
