"""ONNX input names, kept end to end (issue 30 item 1).

PyTorch names a model's input `input`. The importer keeps it (no word of the language is
reserved), so every command that takes per-input data takes that name: `run --input`,
`quantize --calibrate` (the .npz keyed by the ONNX name), `OUTDIR/model NAME=…`, `make sim
INPUTS=…`, `diff` and the Python API. A name the language cannot spell (`input:0`) is
declared as `input_0`, and each of those takes the ONNX name as well: the program's
`; onnx-input` lines go on into the quantized program, OUTDIR/program.gs and the C harness.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_and_cosimulate, run_checked
from onnx_models import OnnxGraph, run_onnxruntime, save

import glensidec
from glensidec.frontends.importer import onnx_input_names

GLENSIDEC = [sys.executable, "-m", "glensidec"]


def _model_with_an_input_named(name: str, tmp_path: Path) -> tuple[object, Path]:
    g = OnnxGraph(5)
    x = g.input(name, [1, 2, 6, 6])
    y = g.node("Relu", [g.conv(x, 2, 4, 3, pad=1)])
    model = g.model(y, [1, 4, 6, 6])
    return model, save(model, tmp_path / "net.onnx")


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize(("onnx_name", "declared"), [("input", "input"),
                                                     ("-input:0", "t-input_0")])
def test_onnx_input_names_work_in_every_command(onnx_name: str, declared: str, tmp_path: Path,
                                                sim_cache: Path) -> None:
    model, model_path = _model_with_an_input_named(onnx_name, tmp_path)
    done = run_checked([*GLENSIDEC, "import", str(model_path), "-o", str(tmp_path / "imported")])
    assert f"input '{onnx_name}' → {declared}" in done.stdout
    program = tmp_path / "imported" / "net.gs"
    assert [d.name for d in glensidec.load(program).inputs()] == [declared]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    given = f"{onnx_name}={tmp_path / 'x.npy'}"

    # run: the float program, as onnxruntime computes it
    run_checked([*GLENSIDEC, "run", str(program), "--input", given,
                 "-o", str(tmp_path / "float.npy")])
    np.testing.assert_allclose(np.load(tmp_path / "float.npy"),
                               run_onnxruntime(model, {onnx_name: x}), rtol=1e-5, atol=1e-6)

    # quantize: calibration data keyed by the ONNX name
    calibration = rng.standard_normal((8, 1, 2, 6, 6)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", **{onnx_name: calibration})
    quantized = tmp_path / "q" / "net.gs"
    run_checked([*GLENSIDEC, "quantize", str(program), "--calibrate", str(tmp_path / "calib.npz"),
                 "-o", str(quantized)])
    run_checked([*GLENSIDEC, "run", str(quantized), "--input", given,
                 "-o", str(tmp_path / "int8.npy")])
    expected = np.load(tmp_path / "int8.npy")
    assert expected.dtype == np.int8

    # OUTDIR/model NAME=… and make sim INPUTS="NAME=…", the float input quantized in C
    # (make sim passes the names to the same C harness: simulated for one of the two)
    outdir = tmp_path / "work" / "out"
    if onnx_name == "input":
        run = compile_and_cosimulate(quantized, "4x4", {onnx_name: x}, tmp_path / "work",
                                     sim_cache)
        np.testing.assert_array_equal(run.sim, expected)
        np.testing.assert_array_equal(run.c, expected)
    else:
        run_checked([*GLENSIDEC, "compile", str(quantized), "--array", "4x4", "-o", str(outdir)])
        run_checked(["make", "-s", "-C", str(outdir), "OPT=-O1"])
        run_checked([str(outdir / "model"), given, "-o", str(tmp_path / "c.npy")])
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), expected)

    # diff, from the command line and from Python
    done = run_checked([*GLENSIDEC, "diff", str(outdir), given])
    assert "instructions agree" in done.stdout
    assert glensidec.diff(outdir, {onnx_name: tmp_path / "x.npy"}).agree

    # the Python API: quantize by the ONNX name, run by it
    glensidec.quantize(program, {onnx_name: calibration}, tmp_path / "api" / "net.gs")
    for path in (tmp_path / "api" / "net.gs", quantized):
        np.testing.assert_array_equal(glensidec.run(path, {onnx_name: x}), expected)


def test_renamed_onnx_input_names_reach_the_quantized_program_and_outdir(
        tmp_path: Path) -> None:
    """(quick) A renamed input's ONNX name: the calibration .npz may be keyed by it, and the
    quantized program, OUTDIR/program.gs and the C harness's table all carry it."""
    from test_outputs import run_cli

    _, model_path = _model_with_an_input_named('in"put?:0', tmp_path)
    assert run_cli("import", model_path, "-o", "imported", cwd=tmp_path) == 0
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz",
             **{'in"put?:0': rng.standard_normal((4, 1, 2, 6, 6)).astype(np.float32)})
    assert run_cli("quantize", "imported/net.gs", "--calibrate", "calib.npz", "-o", "q/net.gs",
                   cwd=tmp_path) == 0
    line = '; onnx-input "in\\"put?:0" in_put__0\n'
    assert line in (tmp_path / "q" / "net.gs").read_text()
    assert run_cli("compile", "q/net.gs", "--array", "4x4", "-o", "out", cwd=tmp_path) == 0
    assert (tmp_path / "out" / "program.gs").read_text().startswith(line)
    # the C string escapes the quote and the question mark (a trigraph could start there)
    assert '{"in_put__0", 0, 0, 4, { 1, 2, 6, 6 }, "<i1", 1, "in\\042put\\077:0"},' in (
        tmp_path / "out" / "model.c").read_text()


def test_an_onnx_name_the_language_spells_is_never_taken_by_a_renamed_input(
        tmp_path: Path) -> None:
    """(quick) `a:b` (renamed) and `a_b` (a name the language spells) in one model: `a_b`
    keeps its name, and each input is calibrated from its own array of the .npz keyed by
    the ONNX names. `a:b` used to take `a_b`, the model's `a_b` became `a_b_2`, and both
    inputs were calibrated from the array `a_b`."""
    from test_outputs import run_cli

    g = OnnxGraph(3)
    first, second = g.input("a:b", [1, 4]), g.input("a_b", [1, 4])
    model = g.model(g.node("Add", [first, second]), [1, 4])
    assert onnx_input_names(model) == {"a:b": "a_b_2", "a_b": "a_b"}
    assert run_cli("import", save(model, tmp_path / "two.onnx"), "-o", "imported",
                   cwd=tmp_path) == 0
    # the ONNX input `a:b` spans ±1, `a_b` ±100: their scales differ by 100x
    ramp = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 1, 4)
    np.savez(tmp_path / "calib.npz", **{"a:b": ramp, "a_b": 100 * ramp})
    assert run_cli("quantize", "imported/two.gs", "--calibrate", "calib.npz", "-o", "q/two.gs",
                   cwd=tmp_path) == 0
    scales = {d.name: d.quantization.scale for d in glensidec.load(tmp_path / "q" / "two.gs")
              .inputs() if d.quantization is not None}
    assert scales["a_b"] == pytest.approx(100 * scales["a_b_2"])


def test_import_prints_each_onnx_name_escaped_on_its_own_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(quick) An ONNX name is any string: `import` printed it raw, so a newline split its
    line in two, and a terminal escape (which click also strips when piped) was lost or
    acted on. Each name is printed quoted, escaped as Python escapes it; the error that
    names an unknown input escapes the aliases too."""
    from test_outputs import run_cli

    g = OnnxGraph(3)
    first, second = g.input("in\nput", [1, 4]), g.input("p'1\x1b[31m\u2028é", [1, 4])
    third = g.input("a=b", [1, 4])
    model = g.model(g.node("Add", [g.node("Add", [first, second]), third]), [1, 4])
    capsys.readouterr()
    assert run_cli("import", save(model, tmp_path / "two.onnx"), "-o", "imported",
                   cwd=tmp_path) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "input 'in\\nput' → in_put (renamed: --input accepts either name)",
        "input 'p\\'1\\x1b[31m\\u2028é' → p_1__31m (renamed: --input accepts either name)",
        # NAME=FILE ends the name at its first '=': only the program's name can be given
        "input 'a=b' → a_b (renamed: give it as a_b: a NAME=FILE ends the name at its first "
        "'=')"]
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    assert run_cli("run", "imported/two.gs", "--input", "in\nput=x.npy", "--input",
                   "nope=x.npy", cwd=tmp_path) == 1
    assert capsys.readouterr().err == (
        "error: 'nope' is not an input of imported/two.gs (inputs: in_put, p_1__31m, a_b "
        "('in\\nput' is in_put) ('p\\'1\\x1b[31m\\u2028é' is p_1__31m) ('a=b' is a_b))\n")


def test_a_newline_in_the_model_or_producer_name_stays_in_the_header_comment(
        tmp_path: Path) -> None:
    """(quick) The imported program's first line names the model file and its producer;
    a newline in either ended the comment, and the rest was read as program text (here a
    second input declaration, or a syntax error)."""
    from test_outputs import run_cli

    g = OnnxGraph(3)
    model = g.model(g.node("Relu", [g.input("x", [1, 4])]), [1, 4])
    model.producer_name = "tool\n(input injected f32 (shape 1))"
    assert run_cli("import", save(model, tmp_path / "we\nird.onnx"), "-o", "imported",
                   cwd=tmp_path) == 0
    program = tmp_path / "imported" / "we_ird.gs"
    assert program.read_text().splitlines()[0] == (
        "; Imported from we\\nird.onnx by glensidec import (ONNX opset 13, producer "
        "tool\\n(input injected f32 (shape 1))).")
    assert [decl.name for decl in glensidec.load(program).inputs()] == ["x"]


def test_an_input_named_like_an_option_is_an_input_of_diff_and_make_sim(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(quick) An ONNX input named "-1" is renamed, and its ONNX name still works: `diff
    OUTDIR -1=x.npy` said "No such option '-1'" (click), and `make sim INPUTS="-1=x.npy"`
    "unrecognized arguments" (argparse). A word with no '=' is still an unknown option.
    (The slow test above runs diff with such a name end to end.)"""
    import shlex
    import subprocess

    from test_outputs import run_cli

    from glensidec.cosim.runner import argument_parser

    program = tmp_path / "p.gs"
    program.write_text("(input x i8 (shape 2 3))\n(compute relu (access (access-tensor x) 0))\n")
    assert run_cli("compile", program, "--bare-array", "-o", "out", cwd=tmp_path) == 0
    capsys.readouterr()
    assert run_cli("diff", "out", "-1=x.npy", cwd=tmp_path) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: '-1' is not an input of ") and "(inputs: x)" in error
    assert run_cli("diff", "out", "--rlt", cwd=tmp_path) == 2
    assert "No such option '--rlt'" in capsys.readouterr().err
    done = subprocess.run(["make", "-n", "-C", str(tmp_path / "out"), "sim", "PYTHON=python",
                           "INPUTS=-1=a.npy x=b.npy", "OUTPUT=o.npy"], capture_output=True,
                          text=True, check=True, timeout=60)
    lines = done.stdout.replace("\\\n", " ").splitlines()  # the recipe's continued lines
    line = next(line for line in lines if "-m glensidec.cosim" in line)
    words = shlex.split(line)
    parsed = argument_parser().parse_args(words[words.index("glensidec.cosim") + 1:])
    assert (parsed.outdir, parsed.inputs, parsed.output) == (Path("."), ["-1=a.npy", "x=b.npy"],
                                                             "o.npy")


def test_fmt_and_the_rewritten_program_keep_the_onnx_names(tmp_path: Path) -> None:
    """(quick) The `; onnx-input` lines are comments that mean something: `fmt -i` and
    `compile --emit rewritten -o` dropped them, and the ONNX names stopped working."""
    from test_outputs import run_cli

    _, model_path = _model_with_an_input_named("input:0", tmp_path)
    assert run_cli("import", model_path, "-o", "imported", cwd=tmp_path) == 0
    np.save(tmp_path / "x.npy", np.zeros((1, 2, 6, 6), np.float32))
    assert run_cli("fmt", "imported/net.gs", "-i", cwd=tmp_path) == 0
    assert run_cli("compile", "imported/net.gs", "--bare-array", "--iterations", "1",
                   "--emit", "rewritten", "-o", "imported/rewritten.gs", cwd=tmp_path) == 0
    for program in ("imported/net.gs", "imported/rewritten.gs"):
        assert '; onnx-input "input:0" input_0\n' in (tmp_path / program).read_text()
        assert run_cli("run", program, "--input", "input:0=x.npy", "-o", "out.npy",
                       cwd=tmp_path) == 0
