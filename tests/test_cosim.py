"""Whole-program co-simulation: interpreter == generated C == C with the RTL doing the GEMMs.

Each program is compiled with `glensidec compile -o OUTDIR`, run as `OUTDIR/model` and
co-simulated with `make -C OUTDIR sim`; all three must agree bit for bit, and every array
call's simulated cycles must equal the cycle model's prediction (cosim checks that and
fails otherwise). The Verilator build is shared between programs through
GLENSIDEC_SIM_CACHE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES

from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program


@pytest.fixture(scope="module")
def sim_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim_cache")


def compile_and_cosimulate(program_path: Path, array: str, workdir: Path, sim_cache: Path,
                           shapes: Path | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray, str]:
    """(interpreter, C, co-simulation) results of one program on seeded random inputs."""
    program = read_program(program_path, shapes)
    outdir = workdir / "out"
    command = [sys.executable, "-m", "glensidec", "compile", str(program_path), "--array", array,
               "-o", str(outdir)]
    if shapes is not None:
        command += ["--shapes", str(shapes)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    inputs = random_inputs(program, seed=21)
    arguments = []
    for name, value in inputs.items():
        np.save(workdir / f"{name}.npy", value)
        arguments.append(f"{name}={workdir / f'{name}.npy'}")
    subprocess.run(["make", "-s", "-C", str(outdir), "OPT=-O1"], check=True, timeout=300)
    subprocess.run([str(outdir / "model"), *arguments, "-o", str(workdir / "c.npy")],
                   check=True, capture_output=True, timeout=120)
    sim = subprocess.run(["make", "-C", str(outdir), "sim", f"INPUTS={' '.join(arguments)}",
                          f"OUTPUT={workdir / 'sim.npy'}"], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    assert sim.returncode == 0, sim.stdout[-3000:] + sim.stderr[-3000:]
    expected = run_program(program, all_tensors(program, inputs))
    return expected, np.load(workdir / "c.npy"), np.load(workdir / "sim.npy"), sim.stdout


@pytest.mark.parametrize(("example", "array"), [("small_cnn.gs", "8x8"),
                                                ("resnet_block.gs", "8x8"),
                                                ("small_cnn.gs", "4x8")])
def test_example_cosimulates_bit_exactly(example: str, array: str, tmp_path: Path,
                                         sim_cache: Path) -> None:
    expected, c_result, sim_result, log = compile_and_cosimulate(
        EXAMPLES / example, array, tmp_path, sim_cache)
    np.testing.assert_array_equal(c_result, expected)
    np.testing.assert_array_equal(sim_result, expected)
    report = json.loads((tmp_path / "out" / "cosim_report.json").read_text())
    assert report["status"] == 0 and report["calls"]
    for call in report["calls"]:
        assert call["data_ok"] and call["simulated_cycles"] == call["predicted_cycles"]
    total = sum(call["simulated_cycles"] for call in report["calls"])
    assert f"simulated array cycles: {total} (predicted {total})" in log


def test_compatibility_mode_program_cosimulates(tmp_path: Path, sim_cache: Path) -> None:
    folder = EXAMPLES / "glenside"
    expected, c_result, sim_result, _ = compile_and_cosimulate(
        folder / "im2col.glenside", "8x8", tmp_path, sim_cache, folder / "im2col.json")
    np.testing.assert_array_equal(c_result, expected)
    np.testing.assert_array_equal(sim_result, expected)


def test_float_program_says_the_array_cannot_run_it(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "glensidec", "compile", str(EXAMPLES / "matmul.gs"),
                    "--array", "8x8", "-o", str(outdir)], check=True, capture_output=True)
    done = subprocess.run(["make", "-C", str(outdir), "sim", "INPUTS=a=x.npy b=y.npy"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "computes its products in f32" in done.stderr
    assert "cannot run them" in done.stderr
