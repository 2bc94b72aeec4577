"""Shared helpers: build a program from terms, run it through text, compare with numpy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings

from glensidec.lang.data import random_tensor
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program
from glensidec.lang.terms import Program, TensorDecl, Term
from glensidec.lang.typecheck import check_program, root_type

# CI runs the fuzz tests on a fixed sequence of examples (a landing must not depend on luck);
# developers' runs keep exploring new random programs.
# Neither profile has a per-example deadline: hypothesis's default 200 ms fails examples on a
# loaded or slow machine, which says nothing about the code under test.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

# `make -C OUTDIR sim` co-simulates with $(PYTHON), python3 on PATH unless given: the tests'
# own Python (the venv `make test` runs, which it does not activate), as a user would pass it.
os.environ.setdefault("PYTHON", sys.executable)


def make_program(root: Term, tensors: dict[str, tuple[tuple[int, ...], str]]) -> Program:
    """A program over runtime inputs, taken through text so the parser is exercised too."""
    decls = {name: TensorDecl(name, shape, dtype, "input") for name, (shape, dtype) in
             tensors.items()}
    direct = Program("<test>", decls, root)
    reparsed = parse_program(format_program(direct), "<test>")
    assert reparsed.root == root
    return reparsed


def run_with(program: Program, seed: int = 0, **given: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Run on `given` arrays, random data for the other inputs; returns (result, inputs)."""
    generator = np.random.default_rng(seed)
    inputs = {decl.name: given.get(decl.name, random_tensor(decl, generator))
              for decl in program.inputs()}
    types = check_program(program)
    result = run_program(program, inputs, types)
    assert result.shape == root_type(program, types).full
    return result, inputs


def assert_matches(actual: np.ndarray, expected: np.ndarray) -> None:
    """Integers exactly (and in the same dtype); floats at 1e-5 relative."""
    assert actual.shape == expected.shape
    if np.issubdtype(actual.dtype, np.integer):
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        np.testing.assert_array_equal(actual, expected)
    else:
        # Infinities (min-padding) must match exactly and must not set the tolerance.
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(actual[~finite], expected[~finite])
        magnitudes = np.abs(expected[finite])
        scale = max(1.0, float(magnitudes.max()) if magnitudes.size else 1.0)
        np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-5,
                                   atol=1e-5 * scale)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# -- compile, build, run and co-simulate -----------------------------------------------


@pytest.fixture(scope="session")
def sim_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One simulator build folder for the whole session: co-simulations of the same array
    shape reuse one Verilator build (GLENSIDEC_SIM_CACHE; runner.py keys builds by shape).
    Parallel workers (pytest-xdist) share it too; rtl_build.build locks each build folder."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder all workers' temporary folders live in
    cache = base / "sim_cache"
    cache.mkdir(exist_ok=True)
    return cache


def run_checked(words: Sequence[str | Path], timeout: int = 900,
                **options: Any) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure shows the end of its output."""
    done = subprocess.run(words, capture_output=True, text=True, timeout=timeout, check=False,
                          **options)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def save_inputs(inputs: dict[str, Any], workdir: Path) -> list[str]:
    """Each input saved as WORKDIR/NAME.npy; the NAME=PATH arguments OUTDIR/model, `make sim`
    and `glensidec diff` take."""
    arguments = []
    for name, value in inputs.items():
        np.save(workdir / f"{name}.npy", value)
        arguments.append(f"{name}={workdir / f'{name}.npy'}")
    return arguments


# The tests build OUTDIR's C program and its co-simulation library at -O1: the default -O3
# takes about twice the compile time (tests/test_emit.py builds the examples as `make`
# does), and `make sim` at the same level as `make` keeps OUTDIR's recorded flags.
C_OPT = "OPT=-O1"


def run_c_program(outdir: Path, arguments: list[str], output: Path) -> np.ndarray[Any, Any]:
    """`make` OUTDIR's C program and run it on `arguments`: its result."""
    run_checked(["make", "-s", "-C", str(outdir), C_OPT])
    run_checked([str(outdir / "model"), *arguments, "-o", str(output)])
    return np.load(output)


@dataclass
class Cosimulation:
    """What `make sim` computed and said."""

    result: np.ndarray[Any, Any]
    report: dict[str, Any]  # OUTDIR/cosim_report.json
    log: str  # its standard output


def cosimulate(outdir: Path, arguments: list[str], output: Path, sim_cache: Path,
               *options: str) -> Cosimulation:
    """`make -C OUTDIR sim` on `arguments` (`options`: more make variables, e.g.
    `DEQUANTIZE=1`), its result written to `output`. The library it loads is built at the
    tests' C_OPT (as `make sim OPT=...` would by hand), and the accelerator layers run in
    one simulator process (JOBS=1): each further process (the default is one per core)
    starts Python, cocotb and the model again, about 2 CPU-s, while the test suites keep
    both cores busy anyway. Each layer is checked alike either way (it runs from its own
    recorded memory image); the default JOBS is co-simulated by test_packaging and
    test_accel_swin, which run `make sim` themselves."""
    done = run_checked(["make", "-C", str(outdir), "sim", f"INPUTS={' '.join(arguments)}",
                        f"OUTPUT={output}", C_OPT, "JOBS=1", *options], timeout=1800,
                       env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    report = json.loads((outdir / "cosim_report.json").read_text())
    return Cosimulation(np.load(output), report, done.stdout)


@dataclass
class Executions:
    """What the generated C program and its co-simulation computed, and what they said."""

    c: np.ndarray[Any, Any]
    sim: np.ndarray[Any, Any]
    report: dict[str, Any]  # OUTDIR/cosim_report.json
    log: str  # the co-simulation's standard output


def compile_and_cosimulate(program_path: Path, array: str | None, inputs: dict[str, Any],
                           workdir: Path, sim_cache: Path,
                           shapes: Path | None = None,
                           options: tuple[str, ...] = ()) -> Executions:
    """`glensidec compile [--array ARRAY] -o OUTDIR [OPTIONS]` (no `array`: the default one),
    `make`, run `OUTDIR/model` on `inputs` and `make sim` with the same inputs: the flow a
    user follows, in `workdir` (`options`: e.g. `--bare-array` for a test about the bare
    array)."""
    outdir = workdir / "out"
    chosen = ["--array", array] if array is not None else []
    command = [sys.executable, "-m", "glensidec", "compile", str(program_path), *chosen,
               "-o", str(outdir), *options]
    run_checked(command + (["--shapes", str(shapes)] if shapes is not None else []))
    arguments = save_inputs(inputs, workdir)
    c = run_c_program(outdir, arguments, workdir / "c.npy")
    sim = cosimulate(outdir, arguments, workdir / "sim.npy", sim_cache)
    return Executions(c, sim.result, sim.report, sim.log)


def assert_diff_agrees(outdir: Path, arguments: list[str]) -> None:
    """`glensidec diff OUTDIR ARGUMENTS` finds the interpreter and the C program equal at
    every instruction."""
    diff = subprocess.run([sys.executable, "-m", "glensidec", "diff", str(outdir), *arguments],
                          capture_output=True, text=True, timeout=600, check=False)
    assert diff.returncode == 0 and "agree: interpreter, C program" in diff.stdout, diff.stdout


def assert_calls_match_the_model(report: dict[str, Any]) -> None:
    """Every array call's data was right and took exactly its predicted cycles."""
    assert report["status"] == 0
    for call in report["calls"]:
        assert call["data_ok"] and call["simulated_cycles"] == call["predicted_cycles"]


# -- order ----------------------------------------------------------------------------------


def _weight(item: pytest.Item) -> int:
    """0: builds and runs the RTL, 1: otherwise slow, 2: quick."""
    if item.get_closest_marker("rtl"):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that co-simulate run first, then the other slow ones, then the quick ones,
    each module's tests together and in their order (module-scoped fixtures are set up
    once). pytest-xdist (`--dist worksteal`) hands the first half to one worker and the
    second to the other, and an idle worker takes tests from the end of the other's queue:
    a co-simulation of minutes that started last would leave one core idle meanwhile."""
    weights: dict[Path, int] = {}
    for item in items:
        weights[item.path] = min(weights.get(item.path, 2), _weight(item))
    items.sort(key=lambda item: weights[item.path])  # stable: each module's order kept
