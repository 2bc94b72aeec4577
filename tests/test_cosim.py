"""Whole-program co-simulation: interpreter == generated C == C with the RTL doing the GEMMs.

Each program is compiled with `glensidec compile -o OUTDIR`, run as `OUTDIR/model` and
co-simulated with `make -C OUTDIR sim`; all three must agree bit for bit, and every array
call's simulated cycles must equal the cycle model's prediction (cosim checks that and
fails otherwise). The Verilator build is shared between programs through
GLENSIDEC_SIM_CACHE.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, Executions, assert_calls_match_the_model, compile_and_cosimulate

from glensidec.backend.report import simulated_work
from glensidec.cosim.runner import CosimResult, Manifest, host_products_note, print_report
from glensidec.cosim.runner import main as runner_main
from glensidec.hardware.array import ArrayConfig
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
    calls = run.report["calls"]
    total = sum(call["simulated_cycles"] for call in calls)
    layers = sum(1 for call in calls if "accel" in call)
    assert f"simulated cycles of {simulated_work(layers, len(calls) - layers)}: {total} " \
           f"(predicted {total})" in run.log


@pytest.mark.slow
@pytest.mark.rtl
def test_compatibility_mode_program_cosimulates(tmp_path: Path, sim_cache: Path) -> None:
    folder = EXAMPLES / "glenside"
    expected, run = cosimulate_on_random_inputs(folder / "im2col.glenside", "8x8", tmp_path,
                                                sim_cache, folder / "im2col.json")
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)


# The fuzzer's program 4000, shrunk: an f32 program that writes the array construct itself.
F32_ARRAY_CONSTRUCT = """\
(input shrunk f32 (shape 12 4))
(input shrunk_ f32 (shape 1 1 12))

(systolic-array-with-blocking 4 4
 (access (access-tensor shrunk_) 2)
 (access (access-tensor shrunk) 0))
"""


@pytest.mark.slow
@pytest.mark.rtl
def test_sim_of_f32_products_compiled_for_the_int8_array_cosimulates_what_compile_put_there(
        tmp_path: Path, sim_cache: Path) -> None:
    """Compile runs an f32 program's products on the host (and says why); `make sim` used to
    refuse that OUTDIR. It co-simulates what compile put on the array, here nothing, and
    says so: the C program's result is the interpreter's."""
    program_path = tmp_path / "f32_array.gs"
    program_path.write_text(F32_ARRAY_CONSTRUCT)
    expected, run = cosimulate_on_random_inputs(program_path, "4x4", tmp_path, sim_cache)
    assert run.report["calls"] == []
    assert ("note: f32_array.gs computes 1 f32 product on the host, as compile said: the "
            "int8 array (int8 x int8 -> int32) cannot run it; nothing runs on the array"
            in run.log)
    np.testing.assert_array_equal(run.sim, run.c)
    np.testing.assert_allclose(run.sim, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_sim_note_names_f32_products_beside_int8_array_calls() -> None:
    """A program with int8 and f32 products: the int8 ones are the array calls, the note
    says the f32 ones stay on the host; an int8-only or binary32-array program gets none."""
    int8 = ArrayConfig(4, 4)
    mixed = Manifest(int8, [(2, 3, 4)], 2, "mixed.gs", (int8,), (0,))
    note = host_products_note(mixed)
    assert note is not None
    assert note.startswith("note: mixed.gs computes 2 f32 products on the host")
    assert "its other products are the array calls below" in note
    assert host_products_note(Manifest(int8, [(2, 3, 4)], 0, "int8.gs", (int8,), (0,))) is None
    f32 = ArrayConfig.f32(4, 4)
    assert host_products_note(Manifest(f32, [(2, 3, 4)], 1, "f32.gs", (f32,), (0,))) is None


@pytest.mark.slow
@pytest.mark.rtl
def test_make_sim_runs_with_the_python_on_path_and_names_one_without_glensidec(
        tmp_path: Path, sim_cache: Path) -> None:
    """OUTDIR's Makefile co-simulates with `python3` on PATH (glensidec's venv activated),
    not with a recorded path of the compiling Python; a Python that cannot import glensidec
    is refused with one line saying what to pass."""
    outdir = tmp_path / "out"
    source = tmp_path / "relu.gs"
    source.write_text("(input a i8 (shape 4 4))\n\n(compute relu (access (access-tensor a) 1))\n")
    subprocess.run([sys.executable, "-m", "glensidec", "compile", str(source), "--array", "4x4",
                    "-o", str(outdir)], check=True, capture_output=True)
    a = np.arange(-8, 8, dtype=np.int8).reshape(4, 4)
    np.save(tmp_path / "a.npy", a)
    venv = os.path.dirname(sys.executable)
    env = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    env.update(PATH=f"{venv}{os.pathsep}{env['PATH']}", GLENSIDEC_SIM_CACHE=str(sim_cache))
    arguments = [f"INPUTS=a={tmp_path / 'a.npy'}", f"OUTPUT={tmp_path / 'sim.npy'}"]
    lacking = tmp_path / "python-without-glensidec"
    lacking.write_text("#!/bin/sh\nexit 1\n")
    lacking.chmod(0o755)
    refused = subprocess.run(["make", "-s", "-C", str(outdir), "sim", f"PYTHON={lacking}",
                              *arguments], capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode != 0
    assert refused.stderr.splitlines()[0] == (
        f"error: {lacking} cannot import glensidec: activate the environment glensidec is "
        "installed in, or give its Python: make sim PYTHON=/path/to/venv/bin/python")
    assert not (tmp_path / "sim.npy").exists()
    ran = subprocess.run(["make", "-s", "-C", str(outdir), "sim", *arguments],
                         capture_output=True, text=True, env=env, timeout=600)
    assert ran.returncode == 0, ran.stderr
    assert "co-simulation: every result and cycle count matches" in ran.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "sim.npy"), np.maximum(a, 0))


def test_the_summary_says_what_was_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    """An accelerator-only program's summary read "simulated array cycles: 3003 …; 0 array
    calls, 6 accelerator layers" and "… s in array calls": it names what ran instead."""
    def call(cycles: int, layer: str | None) -> dict[str, int | bool | float | str]:
        return {"call": 0, "m": 4, "k": 4, "n": 4, "predicted_cycles": cycles,
                "simulated_cycles": cycles, "data_ok": True, "cycles_ok": True,
                "rtl_seconds": 0.5, **({"accel": layer} if layer else {})}

    for calls, what in [([call(100, "conv"), call(35, "pool")], "2 accelerator layers"),
                        ([call(135, None)], "1 array call"),
                        ([call(100, None), call(35, "pool")],
                         "1 accelerator layer and 1 array call")]:
        print_report(CosimResult(calls, 0, 3.0))  # type: ignore[arg-type]
        out = capsys.readouterr().out
        assert f"simulated cycles of {what}: 135 (predicted 135)\n" in out
        assert f"{0.5 * len(calls):.3f} s simulating them (" in out
        assert "array cycles" not in out and ("array call" in what) == ("array call" in out)


def test_a_relative_input_missing_in_outdir_is_refused_before_any_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`make -C out sim INPUTS="x=x.npy"` runs in out/, where x.npy is not: one line that says
    so and how to give it, before the simulator is built (the C program said only "cannot
    open out/x.npy", after the build)."""
    monkeypatch.chdir(tmp_path)  # OUTDIR, as make -C makes it
    assert runner_main(["-o", "sim.npy", "--", ".", "x=x.npy"]) == 1
    assert capsys.readouterr().err == (
        f"error: INPUTS: x=x.npy: no file {tmp_path / 'x.npy'}; make -C OUTDIR runs in "
        "OUTDIR, so a relative path is taken from there: give an absolute one "
        "(e.g. x=$PWD/x.npy)\n")
    assert list(tmp_path.iterdir()) == []
