"""ONNX input names, kept end to end (issue 30 item 1).

PyTorch names a model's input `input`. The importer keeps it (no word of the language is
reserved), so every command that takes per-input data takes that name: `run --input`,
`quantize --calibrate` (the .npz keyed by the ONNX name), `OUTDIR/model NAME=…`, `make sim
INPUTS=…`, `diff` and the Python API.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_and_cosimulate, run_checked
from onnx_models import OnnxGraph, run_onnxruntime, save

import glensidec

GLENSIDEC = [sys.executable, "-m", "glensidec"]


def _model_with_input_named_input(tmp_path: Path) -> tuple[object, Path]:
    g = OnnxGraph(5)
    x = g.input("input", [1, 2, 6, 6])
    y = g.node("Relu", [g.conv(x, 2, 4, 3, pad=1)])
    model = g.model(y, [1, 4, 6, 6])
    return model, save(model, tmp_path / "net.onnx")


@pytest.mark.slow
@pytest.mark.rtl
def test_onnx_input_named_input_works_in_every_command(tmp_path: Path, sim_cache: Path) -> None:
    model, model_path = _model_with_input_named_input(tmp_path)
    done = run_checked([*GLENSIDEC, "import", str(model_path), "-o", str(tmp_path / "imported")])
    assert "input 'input' → input\n" in done.stdout
    program = tmp_path / "imported" / "net.gs"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)

    # run: the float program, as onnxruntime computes it
    run_checked([*GLENSIDEC, "run", str(program), "--input", f"input={tmp_path / 'x.npy'}",
                 "-o", str(tmp_path / "float.npy")])
    np.testing.assert_allclose(np.load(tmp_path / "float.npy"),
                               run_onnxruntime(model, {"input": x}), rtol=1e-5, atol=1e-6)

    # quantize: calibration data keyed by the ONNX name
    np.savez(tmp_path / "calib.npz",
             input=rng.standard_normal((8, 1, 2, 6, 6)).astype(np.float32))
    quantized = tmp_path / "q" / "net.gs"
    run_checked([*GLENSIDEC, "quantize", str(program), "--calibrate", str(tmp_path / "calib.npz"),
                 "-o", str(quantized)])
    run_checked([*GLENSIDEC, "run", str(quantized), "--input", f"input={tmp_path / 'x.npy'}",
                 "-o", str(tmp_path / "int8.npy")])
    expected = np.load(tmp_path / "int8.npy")
    assert expected.dtype == np.int8

    # OUTDIR/model input=… and make sim INPUTS="input=…", the float input quantized in C
    run = compile_and_cosimulate(quantized, "4x4", {"input": x}, tmp_path / "work", sim_cache)
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)

    # diff, from the command line and from Python
    outdir = tmp_path / "work" / "out"
    done = run_checked([*GLENSIDEC, "diff", str(outdir), f"input={tmp_path / 'x.npy'}"])
    assert "instructions agree" in done.stdout
    assert glensidec.diff(outdir, {"input": tmp_path / "x.npy"}).agree

    # the Python API: quantize by the ONNX name, run by it
    glensidec.quantize(program, {"input": np.load(tmp_path / "calib.npz")["input"]},
                       tmp_path / "api" / "net.gs")
    np.testing.assert_array_equal(glensidec.run(tmp_path / "api" / "net.gs", {"input": x}),
                                  expected)
    np.testing.assert_array_equal(glensidec.run(quantized, {"input": x}), expected)
