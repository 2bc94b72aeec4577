"""Code generation benchmark: every example program compiled to C and run on the host.

Per example: C build time (`make`, -O2), host run time of ./model (best of several runs,
process start included), the predicted array cycles it prints, the co-simulation (every
array call on the RTL: simulated cycles, wall time, simulated cycles/s), and the activation
memory of the static plan against naive allocation (every buffer its own bytes) and against
the lower bound (peak live bytes). Writes bench/results/codegen.md.

    .venv/bin/python bench/bench_codegen.py [--array 16x16] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glensidec.cosim.runner import CosimResult, cosimulate
from glensidec.hardware.array import ArrayConfig
from glensidec.lang import data
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program
from glensidec.pipeline import compile_to_directory

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "codegen.md"


@dataclass(frozen=True)
class Row:
    name: str
    instructions: int
    array_calls: int
    build_seconds: float
    run_seconds: float
    predicted_cycles: int
    activations: int
    naive: int
    lower_bound: int
    matches: bool
    cosim: CosimResult | None  # None: no array calls (float programs run on the host)
    cosim_matches: bool


def example_programs(config: ArrayConfig) -> list[tuple[str, Program]]:
    """Every example as written, then as equality saturation extracts it for `config`
    (when the rewriter is available): the same program with its products mapped."""
    examples = REPO / "examples"
    programs = [(p.name, read_program(p)) for p in sorted(examples.glob("*.gs"))]
    programs += [(f"glenside/{p.name}", read_program(p, p.with_suffix(".json")))
                 for p in sorted((examples / "glenside").glob("*.glenside"))]
    try:
        from glensidec.pipeline import compile_program
    except ImportError:  # pragma: no cover
        return programs
    extracted = [(f"{name} (extracted)", compile_program(program, config).program)
                 for name, program in programs]
    return programs + extracted


def measure(name: str, program: Program, config: ArrayConfig, runs: int, work: Path) -> Row:
    types = check_program(program)
    outdir = work / name.replace("/", "_")
    result = compile_to_directory(program, types, outdir, config)
    start = time.perf_counter()
    subprocess.run(["make", "-s", "-C", str(outdir)], check=True)
    build = time.perf_counter() - start
    inputs = data.random_inputs(program, 0)
    args = []
    for tensor, array in inputs.items():
        path = outdir / f"input_{tensor}.npy"
        np.save(path, array)
        args.append(f"{tensor}={path}")
    timings, stdout = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        completed = subprocess.run([str(outdir / "model"), *args, "-o", str(outdir / "out.npy")],
                                   check=True, capture_output=True, text=True)
        timings.append(time.perf_counter() - start)
        stdout = completed.stdout
    cycles = int(stdout.split("predicted array cycles:")[1].split()[0])
    expected = run_program(program, data.all_tensors(program, inputs), types)
    got = np.load(outdir / "out.npy")
    matches = bool(np.array_equal(got, expected) if got.dtype.kind == "i"
                   else np.allclose(got, expected, rtol=1e-5, atol=1e-5))
    cosim, cosim_matches = None, True
    if result.lowered.array_calls():
        cosim = cosimulate(outdir, [*args, "-o", str(outdir / "sim.npy")])
        cosim_matches = cosim.ok and bool(np.array_equal(np.load(outdir / "sim.npy"), expected))
    plan = result.plan
    return Row(name, len(result.lowered.instructions), len(result.lowered.array_calls()), build,
               min(timings), cycles, plan.activations.used, plan.naive_activations,
               plan.activations.lower_bound, matches, cosim, cosim_matches)


def report(rows: list[Row], config: ArrayConfig, runs: int) -> str:
    lines = [
        "# Code generation benchmark",
        "",
        f"`bench/bench_codegen.py`: every example compiled for a {config.rows}x{config.cols} "
        f"array, built with `make` (gcc -O2), run on the host (best of {runs} runs, process "
        "start included) on seeded random inputs, and checked against the interpreter. "
        "\"(extracted)\": the program `glensidec.pipeline.compile_program` extracts for the "
        "same array (products mapped by equality saturation); without it, i8 dot-products "
        "over cartesian products go to the array as written.",
        f"Host: {platform.machine()}, {platform.system()}, Python {platform.python_version()}.",
        "",
        "| example | instr. | array calls | build s | run ms | predicted cycles | "
        "simulated cycles | co-sim s | sim cycles/s | activations B | naive B | "
        "lower bound B | used / naive | efficiency | C = interp. | RTL = interp. |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|:-:|",
    ]
    for row in rows:
        saving = row.activations / row.naive if row.naive else 1.0
        efficiency = row.lower_bound / row.activations if row.activations else 1.0
        simulated, wall, rate, agrees = "–", "–", "–", "–"
        if row.cosim is not None:
            simulated, wall = str(row.cosim.simulated_cycles), f"{row.cosim.wall_seconds:.2f}"
            rate = f"{row.cosim.simulated_cycles / row.cosim.rtl_seconds:,.0f}"
            agrees = "yes" if row.cosim_matches else "NO"
        lines.append(
            f"| {row.name} | {row.instructions} | {row.array_calls} | {row.build_seconds:.2f} | "
            f"{row.run_seconds * 1000:.1f} | {row.predicted_cycles} | {simulated} | {wall} | "
            f"{rate} | {row.activations} | {row.naive} | {row.lower_bound} | {saving:.2f} | "
            f"{efficiency:.3f} | {'yes' if row.matches else 'NO'} | {agrees} |")
    lines += ["", "Efficiency = lower bound / used (1.000: the planner reached the peak-live "
              "lower bound). Naive: every activation buffer in its own bytes. Co-sim s: the "
              "simulator run (start-up included, Verilator build excluded); sim cycles/s: "
              "simulated array cycles per second spent inside array calls. Programs without "
              "array calls (f32) run on the host only: the int8 array cannot run them.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--array", default="16x16", help="array size RxC (default 16x16)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("-o", "--output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    rows_text, cols_text = options.array.lower().split("x")
    config = ArrayConfig(int(rows_text), int(cols_text))
    with tempfile.TemporaryDirectory(prefix="bench_codegen.") as work:
        # One Verilator build serves every program (same array and testbench).
        os.environ.setdefault("GLENSIDEC_SIM_CACHE", str(Path(work) / "sim_cache"))
        rows = [measure(name, program, config, options.runs, Path(work))
                for name, program in example_programs(config)]
    text = report(rows, config, options.runs)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(text)
    print(text)
    return 0 if all(row.matches and row.cosim_matches for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
