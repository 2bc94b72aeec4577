"""The Python API (glensidec.load/check/run/compile/import_onnx/quantize) agrees with the
commands it mirrors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_outputs import make_sources, run_cli

import glensidec
from glensidec.errors import GlensideError


def test_api_mirrors_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sources = make_sources(tmp_path)
    program = glensidec.load(sources["tiny.gs"])
    assert str(glensidec.check(program)) == "((4,6),())"
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert run_cli("run", sources["tiny.gs"], "--input", f"x={tmp_path / 'x.npy'}", "-o",
                   tmp_path / "cli.npy", cwd=tmp_path) == 0
    np.testing.assert_array_equal(glensidec.run(program, {"x": x}), np.load(tmp_path / "cli.npy"))
    w = np.load(sources["tiny.npz"])["w"]
    np.testing.assert_allclose(glensidec.run(sources["tiny.gs"], {"x": x}), x @ w.T, rtol=1e-5)
    with pytest.raises(GlensideError, match="missing input x"):
        glensidec.run(program, {})

    compiled = glensidec.compile(program, "4x4", tmp_path / "c", iterations=2)
    assert compiled.outdir is not None and (compiled.outdir / "model.c").is_file()
    assert compiled.instructions and compiled.predicted_cycles >= compiled.array_cycles >= 0
    assert any(line.startswith("predicted cycles:") for line in compiled.report)
    assert compiled.report_data is not None
    assert len(compiled.report_data.rows) == compiled.instructions
    assert compiled.report_data.array_cycles == compiled.array_cycles

    imported = glensidec.import_onnx(sources["tiny.onnx"], tmp_path / "imported")
    assert str(glensidec.check(imported)) == "((4,6),())"

    quantized = glensidec.quantize(program, sources["calib.npz"], tmp_path / "q" / "tiny.gs")
    assert (tmp_path / "q" / "tiny.gs").is_file()
    assert glensidec.check(quantized.program).dtype in ("i8", "i32")
    assert run_cli("quantize", sources["tiny.gs"], "--calibrate", sources["calib.npz"], "-o",
                   tmp_path / "cliq" / "tiny.gs", cwd=tmp_path) == 0
    assert ((tmp_path / "q" / "tiny.gs").read_text()
            == (tmp_path / "cliq" / "tiny.gs").read_text())


@pytest.mark.slow
def test_compile_accel_writes_what_the_command_writes(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "resnet_block.gs"
    compiled = glensidec.compile(example, "16x16", tmp_path / "api", accel=True,
                                 scratchpad="64KiB", dram_bandwidth=8)
    assert run_cli("compile", example, "--array", "16x16", "--accel", "--scratchpad", "64KiB",
                   "--dram-bandwidth", "8", "-o", tmp_path / "cli", cwd=tmp_path) == 0
    files = sorted(path.name for path in (tmp_path / "cli").iterdir())
    assert files == sorted(path.name for path in (tmp_path / "api").iterdir())
    for name in files:
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    assert "accel_runtime.c" in files
    assert compiled.accel_cycles is not None and compiled.accel_cycles > 0
    # the two convolutions and the layout layers of the NCHW input and result
    assert f"4 accelerator layers: {compiled.accel_cycles} cycles" in capsys.readouterr().out
    assert "(accel-epilogue" in (tmp_path / "api" / "program.gs").read_text()
    with pytest.raises(GlensideError, match="--scratchpad 128: "):
        glensidec.compile(example, "16x16", accel=True, scratchpad="128")


# -- the boundary (issue 27): arguments of the wrong kind or value are a TypeError naming the
# argument or a GlensideError, never an AttributeError or ValueError from deep inside

SMALL_CNN = Path(__file__).resolve().parent.parent / "examples" / "small_cnn.gs"
MATMUL = SMALL_CNN.with_name("matmul.gs")
BLOCK = SMALL_CNN.with_name("resnet_block.gs")


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: glensidec.check(b"(input a f32 (shape 2))\n(access-tensor a)\n"), TypeError,
     "program: expected a Program (glensidec.load) or the path of a .gs file (str or "
     "pathlib.Path), got bytes"),
    (lambda: glensidec.load(3), TypeError, "path: expected a path"),
    (lambda: glensidec.run(MATMUL, seed=-1), GlensideError,
     "seed must be from 0 to 9223372036854775807, got -1"),
    (lambda: glensidec.run(MATMUL, seed="1"), TypeError, "seed: expected an int, got str"),
    (lambda: glensidec.run(MATMUL, {"a": 1}, seed=1), GlensideError,
     "give inputs or seed, not both"),
    (lambda: glensidec.run(SMALL_CNN, "image.npy"), TypeError,
     "inputs: expected a dict of input name → numpy array or .npy path"),
    (lambda: glensidec.run(SMALL_CNN, [np.zeros(3), np.zeros(3)]), GlensideError,
     "inputs: 2 given for the program's 1 inputs (image), in that order"),
    (lambda: glensidec.run(SMALL_CNN, {"image": object()}), TypeError,
     "inputs['image']: expected a numpy array or the path of a .npy file, got object"),
    (lambda: glensidec.run(SMALL_CNN, {"img": np.zeros(3)}), GlensideError,
     "'img' is not an input of"),
    (lambda: glensidec.run(SMALL_CNN, {}), GlensideError,
     "missing input image: give inputs={name: array or .npy path} or seed=N"),
    (lambda: glensidec.compile(MATMUL, 16), TypeError,
     "array: expected a size such as \"16x16\" or \"16x16:f32\", or a (rows, cols) pair"),
    (lambda: glensidec.compile(MATMUL, "16x16", scratchpad=1.5), TypeError,
     "scratchpad: expected an int, got float"),
    (lambda: glensidec.compile(MATMUL, "16x16", scratchpad=100), GlensideError,
     "--scratchpad 100: the scratchpad holds 4 banks of 16-byte rows"),
    (lambda: glensidec.compile(MATMUL, "16x16", dram_bandwidth="16"), TypeError,
     "dram_bandwidth: expected an int, got str"),
    (lambda: glensidec.compile(MATMUL, "16x16", iterations=-1), GlensideError,
     "iterations must be from 0"),
    (lambda: glensidec.compile(MATMUL, "16x16", timeout=float("nan")), GlensideError,
     "timeout must be a finite number of seconds"),
    (lambda: glensidec.compile(MATMUL, "16x16", outdir=7), TypeError,
     "outdir: expected a path (str or pathlib.Path), got int"),
    (lambda: glensidec.diff(7, {}), TypeError, "outdir: expected a path"),
    (lambda: glensidec.diff("out", 7), TypeError,
     "inputs: expected a dict of input name → .npy path or numpy array"),
    (lambda: glensidec.quantize(MATMUL, 7), TypeError, "calibration: expected a path"),
])
def test_the_api_names_the_argument_that_is_wrong(call: Callable[[], object],
                                                  error: type[Exception], message: str) -> None:
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value)


def test_run_takes_npy_paths_and_inputs_in_declared_order(tmp_path: Path) -> None:
    image = np.random.default_rng(0).integers(-128, 128, (1, 1, 16, 16)).astype(np.int8)
    np.save(tmp_path / "img.npy", image)
    expected = glensidec.run(SMALL_CNN, {"image": image})
    np.testing.assert_array_equal(glensidec.run(SMALL_CNN, {"image": tmp_path / "img.npy"}),
                                  expected)
    np.testing.assert_array_equal(glensidec.run(SMALL_CNN, {"image": str(tmp_path / "img.npy")}),
                                  expected)
    np.testing.assert_array_equal(glensidec.run(SMALL_CNN, [image]), expected)
    np.testing.assert_array_equal(glensidec.run(SMALL_CNN, seed=np.int64(3)),
                                  glensidec.run(SMALL_CNN, seed=3))
    with pytest.raises(GlensideError, match=r"missing\.npy"):
        glensidec.run(SMALL_CNN, {"image": tmp_path / "missing.npy"})


def test_compile_takes_a_size_pair_and_sizes_in_bytes() -> None:
    assert glensidec.compile(BLOCK, (16, 16)).predicted_cycles == glensidec.compile(
        BLOCK, "16x16").predicted_cycles > 0
    compiled = glensidec.compile(BLOCK, "16x16", accel=True, scratchpad=65536)
    assert compiled.target == "i8 program: compiled for the whole accelerator"


@pytest.mark.slow
def test_diff_takes_name_equals_file_words_and_arrays(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    glensidec.compile(MATMUL, "4x4", outdir, iterations=2)
    a = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    words = [f"a={tmp_path / 'a.npy'}", f"b={tmp_path / 'b.npy'}"]
    assert glensidec.diff(outdir, words).agree
    assert glensidec.diff(outdir, {"a": a, "b": tmp_path / "b.npy"}).agree
    with pytest.raises(GlensideError, match="'x' is not an input of"):
        glensidec.diff(outdir, "x=x.npy")


@pytest.mark.parametrize(("text", "kind", "checked"), [
    ("(shape 1 2 3)", "shape", (1, 2, 3)),
    ("(literal 3.5)", "literal", "LiteralValue(value=3.5, dtype='f32')"),
    ("(input a f32 (shape 2 3))\n(construct-tuple (access-tensor a) (access-tensor a))",
     "tuple", "(tuple ((2,3),()) f32 ((2,3),()) f32)"),
])
def test_the_api_takes_a_result_that_is_not_a_tensor_as_the_commands_do(
        text: str, kind: str, checked: object, tmp_path: Path) -> None:
    """`glensidec check` and `run` print such a result, `compile` and `quantize` refuse it
    with one located line; the API's check and run raised AssertionError and compile a
    KeyError or TypeError."""
    source = tmp_path / "p.gs"
    source.write_text(text + "\n")
    typed = glensidec.check(source)
    assert (typed if isinstance(typed, tuple) else str(typed) if kind == "tuple"
            else repr(typed)) == checked
    value = glensidec.run(source, seed=0)
    if kind == "shape":
        assert value == (1, 2, 3)
    elif kind == "literal":
        assert float(value) == 3.5
    else:
        assert isinstance(value, tuple) and len(value) == 2
        np.testing.assert_array_equal(value[0], value[1])
    samples = {"a": np.zeros((4, 2, 3), np.float32)}
    for call, command in ((lambda: glensidec.compile(source), "compile"),
                          (lambda: glensidec.quantize(source, samples), "quantize")):
        with pytest.raises(GlensideError, match=f"{command} needs an access-valued result; "
                                                f"this program's result is a {kind}"):
            call()


def test_the_api_quantizes_a_tuple_get_item_program_as_the_command_does(
        tmp_path: Path) -> None:
    """`glensidec quantize` expands tuples (and conv2d modes) first; the API's quantize
    did not and raised a KeyError."""
    source = tmp_path / "p.gs"
    source.write_text("(input a f32 (shape 2 3))\n(tuple-get-item (construct-tuple "
                      "(access-tensor a) (compute relu (access-tensor a))) 1)\n")
    samples = {"a": np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)}
    glensidec.quantize(source, samples, tmp_path / "q" / "q.gs")
    got = glensidec.run(tmp_path / "q" / "q.gs", {"a": samples["a"][0]}, dequantize=True)
    np.testing.assert_allclose(got, np.maximum(samples["a"][0], 0), atol=0.02)
