"""Whole-program co-simulation: interpreter == generated C == C with the RTL doing the GEMMs.

Each program is compiled with `glensidec compile -o OUTDIR`, run as `OUTDIR/model` and
co-simulated with `make -C OUTDIR sim`; all three must agree bit for bit, and every array
call's simulated cycles must equal the cycle model's prediction (cosim checks that and
fails otherwise). The Verilator build is shared between programs through
GLENSIDEC_SIM_CACHE.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, Executions, assert_calls_match_the_model, compile_and_cosimulate

from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program


def cosimulate_on_random_inputs(program_path: Path, array: str, workdir: Path, sim_cache: Path,
                                shapes: Path | None = None) -> tuple[np.ndarray, Executions]:
    """(interpreter result, C and co-simulation) of one program on seeded random inputs."""
    program = read_program(program_path, shapes)
    inputs = random_inputs(program, seed=21)
    executions = compile_and_cosimulate(program_path, array, inputs, workdir, sim_cache, shapes)
    return run_program(program, all_tensors(program, inputs)), executions


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize(("example", "array"), [("small_cnn.gs", "8x8"),
                                                ("resnet_block.gs", "8x8"),
                                                ("small_cnn.gs", "4x8")])
def test_example_cosimulates_bit_exactly(example: str, array: str, tmp_path: Path,
                                         sim_cache: Path) -> None:
    expected, run = cosimulate_on_random_inputs(EXAMPLES / example, array, tmp_path, sim_cache)
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)
    assert run.report["calls"]
    assert_calls_match_the_model(run.report)
    total = sum(call["simulated_cycles"] for call in run.report["calls"])
    assert f"simulated array cycles: {total} (predicted {total})" in run.log


@pytest.mark.slow
@pytest.mark.rtl
def test_compatibility_mode_program_cosimulates(tmp_path: Path, sim_cache: Path) -> None:
    folder = EXAMPLES / "glenside"
    expected, run = cosimulate_on_random_inputs(folder / "im2col.glenside", "8x8", tmp_path,
                                                sim_cache, folder / "im2col.json")
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)


@pytest.mark.slow
def test_float_program_says_the_array_cannot_run_it(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "glensidec", "compile", str(EXAMPLES / "matmul.gs"),
                    "--array", "8x8", "-o", str(outdir)], check=True, capture_output=True)
    done = subprocess.run(["make", "-C", str(outdir), "sim", "INPUTS=a=x.npy b=y.npy"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "computes its products in f32" in done.stderr
    assert "cannot run them" in done.stderr
