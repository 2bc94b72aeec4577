"""The whole accelerator (rtl/ws_accel.v) on ResNet-18's convolutions: cycles to the cycle.

Writes bench/results/accel_top.md. Every layer is compiled to a ws_accel command
program (`glensidec.hardware.commands.conv_program`: double-buffered, software-
pipelined, tiles chosen by `layer_tiling`) and its cycles predicted by `accel_cycles`,
the control model that equals the RTL's simulated cycles (sim/test_ws_accel.py). At
16×16 with the default memories (256 KiB scratchpad, 1024 accumulator rows = 64 KiB,
16 B/cycle, latency 8) and at half the bandwidth. One layer also runs on the RTL
itself at both bandwidths (cocotb + Verilator, every output byte checked) beside its
prediction. Host work (residual adds, pooling, the classifier's bias) is not counted;
the target of issue 11 is ≤ 1.3× Σ T_min with the host included.

Run: .venv/bin/python bench/bench_accel_top.py   (~10 min on one core: the model steps
every cycle in Python, ~35 k cycles/s; repeated layer shapes are modelled once)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from bench_accel import ARRAY, TARGET_RATIO, bound, resnet18

from glensidec.cosim import rtl_build
from glensidec.cosim.settings import settings_env
from glensidec.hardware.accel import ConvLayer, EpilogueConfig
from glensidec.hardware.commands import (
    AccelConfig,
    AccelTiming,
    LayerQuant,
    accel_config_for,
    accel_cycles,
    conv_program,
    layer_tiling,
)

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results" / "accel_top.md"
SIM_DIR = BENCH_DIR.parent / "sim"
#: Run on the RTL at both bandwidths (a ResNet-18 layer4-like 3×3 conv on a small map).
RTL_LAYER = ConvLayer("3x3 64->64 @8x8", 8, 8, 64, 64, 3, 1, 1)


def model_layer(config: AccelConfig, layer: ConvLayer) -> AccelTiming:
    N = layer.out_channels
    quant = LayerQuant(EpilogueConfig(), (0,) * N, (1,) * N)  # timing does not see values
    return accel_cycles(config, conv_program(config, layer, quant).commands)


def simulate(config: AccelConfig, layer: ConvLayer) -> tuple[int, float]:
    """Simulated cycles and wall seconds of `layer` on ws_accel (outputs checked)."""
    parameters = config.rtl_parameters()
    build_dir = SIM_DIR / "sim_build" / f"bench_accel_{config.memory.bus_bytes}"
    runner = rtl_build.build("ws_accel", rtl_build.rtl_sources(), build_dir, parameters,
                             public_ports=True, log_file=build_dir.with_suffix(".log"))
    spec = {"name": layer.name, "height": layer.height, "width": layer.width,
            "channels": layer.channels, "out_channels": layer.out_channels,
            "kernel": layer.kernel, "stride": layer.stride, "padding": layer.padding}
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "out.json"
        env = {**settings_env(parameters=parameters, layers=[spec], out=str(out)),
               "PYTHONPATH": str(SIM_DIR)}
        tests, failures = rtl_build.run(runner, "ws_accel", "cocotb_ws_accel", SIM_DIR,
                                        testcase="layers", extra_env=env,
                                        log_file=build_dir.with_suffix(".run.log"))
        if tests != 1 or failures:
            raise RuntimeError(f"ws_accel on {layer.name} failed (see {build_dir}.run.log)")
        result = json.loads(out.read_text())[0]
        return int(result["cycles"]), float(result["seconds"])


def rtl_section() -> tuple[list[str], bool]:
    """The table and whether every simulated count equalled its prediction."""
    lines = [
        "\n## On the RTL: halving the DRAM bandwidth\n",
        f"`{RTL_LAYER.name}` (M×K×N = {'×'.join(map(str, RTL_LAYER.gemm))}) as a command "
        "program on `ws_accel` 16×16 with the default memories, Python playing main memory "
        "(latency 8); every output byte checked against numpy + the interpreter's "
        "requantize.\n",
        "| bus (B/cycle) | T_min | simulated cycles | predicted | equal | sim wall time |",
        "|---:|---:|---:|---:|---|---:|",
    ]
    equal = True
    for bus in (16, 8):
        config = accel_config_for(ARRAY, bus_bytes=bus)
        cycles, seconds = simulate(config, RTL_LAYER)
        predicted = model_layer(config, RTL_LAYER).cycles
        lines.append(f"| {bus} | {bound(RTL_LAYER):,} | {cycles:,} | {predicted:,} | "
                     f"{'yes' if cycles == predicted else '**no**'} | {seconds:.1f} s |")
        print(lines[-1], flush=True)
        equal = equal and cycles == predicted
    return lines, equal


def model_section() -> tuple[list[str], float]:
    """The tables and predicted / Σ T_min of the whole network at 16 B/cycle."""
    layers = resnet18()
    shapes: dict[tuple[int, ...], list[ConvLayer]] = {}
    for layer in layers:
        key = (layer.height, layer.width, layer.channels, layer.out_channels, layer.kernel,
               layer.stride, layer.padding)
        shapes.setdefault(key, []).append(layer)
    lines = [
        "\n## ResNet-18 (224×224, batch 1), 16×16, per distinct layer shape\n",
        "| layers | M×K×N | K piece / folds | M chunk | bus | T_min | array busy | predicted "
        "| / T_min | MB loaded | MB stored |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    totals = {16: [0, 0, 0, 0.0, 0.0, 0.0], 8: [0, 0, 0, 0.0, 0.0, 0.0]}
    for group in shapes.values():
        layer, count = group[0], len(group)
        for bus in (16, 8):
            config = accel_config_for(ARRAY, bus_bytes=bus)
            start = time.perf_counter()
            timing = model_layer(config, layer)
            tiling = layer_tiling(config, layer)
            total = totals[bus]
            total[0] += count * bound(layer)
            total[1] += count * timing.compute_rows
            total[2] += count * timing.cycles
            total[3] += count * timing.load_bytes / 1e6
            total[4] += count * timing.store_bytes / 1e6
            total[5] += time.perf_counter() - start
            names = ", ".join(member.name for member in group)
            lines.append(
                f"| {names} | {'×'.join(map(str, layer.gemm))} | {tiling.piece_folds} / "
                f"{tiling.folds} | {tiling.chunk_rows * layer.out_size[1]} | {bus} | "
                f"{bound(layer):,} | {timing.compute_rows:,} | {timing.cycles:,} | "
                f"{timing.cycles / bound(layer):.2f} | {timing.load_bytes / 1e6:.2f} | "
                f"{timing.store_bytes / 1e6:.2f} |")
            print(lines[-1], flush=True)
    summary = [
        "\n## Totals (every layer, repeated shapes counted each time)\n",
        "| network | bus (B/cycle) | Σ T_min | array busy | predicted | predicted / Σ T_min "
        "| MB loaded | MB stored | model time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for bus, (t_min_sum, busy, cycles, loaded, stored, seconds) in totals.items():
        summary.append(f"| ResNet-18 convolutions + fc | {bus} | {t_min_sum:,} | {busy:,} | "
                       f"{cycles:,} | {cycles / t_min_sum:.2f} | {loaded:.1f} | {stored:.1f} | "
                       f"{seconds:.0f} s |")
        print(summary[-1], flush=True)
    ratio = totals[16][2] / totals[16][0]
    return summary + lines, ratio


def main() -> int:
    header = [
        "# The whole accelerator, ws_accel, on ResNet-18 (16×16)\n",
        "Written by `bench/bench_accel_top.py`. Cycles of the command programs "
        "(`conv_program`) from `accel_cycles`, the control model equal to the RTL's "
        "simulated cycles (checked in sim/test_ws_accel.py and below). Host work (residual "
        "adds, pooling) is not counted. Target of issue 11: ≤ "
        f"{TARGET_RATIO}× Σ T_min end to end, host included.\n",
    ]
    rtl_lines, equal = rtl_section()
    model_lines, ratio = model_section()
    RESULTS.write_text("\n".join(header + rtl_lines + model_lines) + "\n")
    print(f"wrote {RESULTS}")
    if not equal:
        print("simulated cycles differ from the prediction", file=sys.stderr)
    if ratio > TARGET_RATIO:
        print(f"target missed: ResNet-18 at {ratio:.2f}× Σ T_min (target {TARGET_RATIO}×, "
              "host not counted)", file=sys.stderr)
    return 0 if equal and ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
