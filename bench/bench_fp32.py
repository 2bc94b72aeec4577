"""The binary32 units against numpy over a million vectors: fp32_mul and fp32_add.

Builds `rtl/tb/tb_fp32_lanes.v` (LANES units side by side) for each operation and runs
sim/cocotb_fp32.py with VECTORS operands per operation (random bit patterns and the edge
classes of sim/fp32_vectors.py: zeros, infinities, NaNs, subnormals, range extremes,
ties, products near overflow and underflow, cancelling sums), every result compared in
bits with numpy's float32 (NaN matches NaN). CI runs the same test on 32,768 vectors
each (sim/test_fp32_*.py). Writes bench/results/fp32.md.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(ROOT / "sim"))  # cocotb imports cocotb_fp32 and its helpers here

from glensidec.cosim import rtl_build  # noqa: E402
from glensidec.cosim.settings import settings_env  # noqa: E402

RESULTS = BENCH_DIR / "results" / "fp32.md"
LANES = 64
VECTORS = 1 << 19  # per operation: 2 x 524,288 = 1,048,576 in all
SEED = 2026


def run_operation(op: int, scratch: Path) -> tuple[int, float, float]:
    """(vectors checked, build seconds, run seconds) for one operation."""
    parameters = {"LANES": LANES, "OP": op}
    started = time.perf_counter()
    runner = rtl_build.build("tb_fp32_lanes", rtl_build.rtl_sources("tb_fp32_lanes"),
                             ROOT / "sim" / "sim_build" / f"bench_fp32_{op}", parameters,
                             public_ports=True)
    built = time.perf_counter()
    report = scratch / f"report_{op}.json"
    tests, failures = rtl_build.run(
        runner, "tb_fp32_lanes", "cocotb_fp32", runner.build_dir, testcase="random_vectors",
        extra_env=settings_env(parameters=parameters, vectors=VECTORS, seed=SEED,
                               report=str(report)))
    if tests != 1 or failures or not report.is_file():
        raise RuntimeError(f"fp32 op {op}: {failures} of {tests} tests failed")
    checked = int(json.loads(report.read_text())["vectors"])
    return checked, built - started, time.perf_counter() - built


def main() -> int:
    lines = [
        "# The binary32 units against numpy float32\n",
        f"Written by `bench/bench_fp32.py`: `tb_fp32_lanes` with {LANES} units per operation, "
        f"random and edge-case operands (`sim/fp32_vectors.py`, seed {SEED}), every result "
        "compared in bits with numpy's float32 (round to nearest even, subnormals kept; a "
        "NaN matches any NaN). A mismatch stops the run, so every row below is zero "
        "mismatches.\n",
        "| unit | vectors checked | mismatches | build | simulation |",
        "|---|---:|---:|---:|---:|",
    ]
    total = 0
    with tempfile.TemporaryDirectory() as scratch:
        for op, name in ((0, "fp32_mul"), (1, "fp32_add")):
            checked, build_s, run_s = run_operation(op, Path(scratch))
            total += checked
            lines.append(f"| `{name}` | {checked:,} | 0 | {build_s:.0f} s | {run_s:.0f} s |")
            print(lines[-1], flush=True)
    lines.append(f"\nIn all: {total:,} vectors.")
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
