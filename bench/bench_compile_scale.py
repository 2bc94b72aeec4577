"""Compile time that scales: grouped and squeeze-excite networks at full size (issue 30).

Run alone: `.venv/bin/python bench/bench_compile_scale.py [--label L] [--only NAME]`
(appends to bench/results/compile_scale.md's table). Synthetic ONNX networks built like
tests/onnx_models.py (random weights, 224×224), shaped like the torchvision models whose
compile times exploded: a ResNeXt-50 (32×4d: 16 bottleneck blocks, every 3×3 conv
grouped in 32) and an EfficientNet/MobileNetV3-style stack of MBConv blocks (1×1 expand,
depthwise 3×3, squeeze-excite with a global average pool, two 1×1 convs and a sigmoid or
hard-sigmoid, multiply, 1×1 project). Each stage is a fresh `glensidec` process
(`import`, `quantize --calibrate --per-channel --symmetric`, `compile --accel --array
16x16 -o DIR`); the table gives each stage's CPU seconds (user + system, the machine is
shared) and peak resident memory, and the predicted cycles `compile --stats` reports.
Targets: import ≤ 15 s, compile ≤ 15 s CPU, ≤ 4 GiB.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the ONNX model builder lives with the tests

from onnx_models import OnnxGraph, save  # noqa: E402

RESULTS = REPO / "bench" / "results" / "compile_scale.md"
SIZE = 224


def resnext50(seed: int = 0) -> Any:
    """ResNeXt-50 32×4d: a 7×7/2 stem, a max-pool, 3+4+6+3 bottlenecks (1×1, 3×3 grouped
    in 32, 1×1; batch-norm and ReLU; a projected shortcut where the shape changes)."""
    g = OnnxGraph(seed)
    x = g.input("image", [1, 3, SIZE, SIZE])
    x = g.node("Relu", [g.bn(g.conv(x, 3, 64, 7, 2, 3, bias=False), 64)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    channels = 64
    for blocks, width, out, stride in ((3, 128, 256, 1), (4, 256, 512, 2), (6, 512, 1024, 2),
                                       (3, 1024, 2048, 2)):
        for block in range(blocks):
            step = stride if block == 0 else 1
            y = g.node("Relu", [g.bn(g.conv(x, channels, width, 1, bias=False), width)])
            y = g.conv(y, width, width, 3, step, 1, group=32, bias=False)
            y = g.node("Relu", [g.bn(y, width)])
            y = g.bn(g.conv(y, width, out, 1, bias=False), out)
            shortcut = x if block else g.bn(g.conv(x, channels, out, 1, step, bias=False), out)
            x = g.node("Relu", [g.node("Add", [y, shortcut])])
            channels = out
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model(g.gemm(x, channels, 1000), [1, 1000])


# (expansion, output channels, repeats, stride): MobileNetV3/EfficientNet-B0-like stages
MBCONV = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 40, 2, 2), (6, 80, 3, 2), (6, 112, 3, 1),
          (6, 192, 4, 2), (6, 320, 1, 1))


def squeeze_excite(hard: bool, seed: int = 1) -> Any:
    """MBConv blocks with squeeze-excite (`hard`: MobileNetV3's hard-sigmoid and
    hard-swish; else EfficientNet's sigmoid and ReLU)."""
    g = OnnxGraph(seed)
    x = g.input("image", [1, 3, SIZE, SIZE])

    def act(y: str) -> str:
        return g.node("HardSwish", [y]) if hard else g.node("Relu", [y])

    x = act(g.bn(g.conv(x, 3, 32, 3, 2, 1, bias=False), 32))
    channels = 32
    for expansion, out, repeats, stride in MBCONV:
        for block in range(repeats):
            step = stride if block == 0 else 1
            mid = channels * expansion
            y = act(g.bn(g.conv(x, channels, mid, 1, bias=False), mid)) if expansion > 1 else x
            y = act(g.bn(g.conv(y, mid, mid, 3, step, 1, group=mid, bias=False), mid))
            squeezed = max(8, channels // 4)
            s = g.node("GlobalAveragePool", [y])
            s = g.node("Relu", [g.conv(s, mid, squeezed, 1)])
            s = g.conv(s, squeezed, mid, 1)
            s = (g.node("HardSigmoid", [s], alpha=1 / 6, beta=0.5) if hard
                 else g.node("Sigmoid", [s]))
            y = g.bn(g.conv(g.node("Mul", [y, s]), mid, out, 1, bias=False), out)
            x = g.node("Add", [y, x]) if channels == out and step == 1 else y
            channels = out
    x = act(g.bn(g.conv(x, channels, 1280, 1, bias=False), 1280))
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model(g.gemm(x, 1280, 1000), [1, 1000])


NETWORKS: dict[str, Callable[[], Any]] = {
    "resnext50_32x4d-like": resnext50,
    "efficientnet-like (SE, sigmoid)": lambda: squeeze_excite(False),
    "mobilenet_v3-like (SE, hard-sigmoid)": lambda: squeeze_excite(True),
}


def run_stage(words: list[str], log: Path) -> tuple[float, float]:
    """Run `glensidec WORDS` in a fresh process: (CPU seconds, peak resident MiB). It runs
    in the log's directory: `python -m` puts the working directory first on the path, and
    the glensidec measured is the one on PYTHONPATH (or installed)."""
    command = [sys.executable, "-m", "glensidec", *words]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   cwd=log.parent)
        _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(words)} failed: see {log}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(name: str, build: Callable[[], Any], workdir: Path) -> dict[str, Any]:
    model = save(build(), workdir / "model.onnx")
    rng = np.random.default_rng(0)
    np.savez(workdir / "calib.npz",
             image=rng.standard_normal((2, 1, 3, SIZE, SIZE)).astype(np.float32))
    row: dict[str, Any] = {"network": name}
    row["import_s"], row["import_mib"] = run_stage(
        ["import", str(model), "-o", str(workdir / "f32")], workdir / "import.log")
    row["quantize_s"], row["quantize_mib"] = run_stage(
        ["quantize", str(workdir / "f32" / "model.gs"), "--calibrate",
         str(workdir / "calib.npz"), "--per-channel", "--symmetric", "-o",
         str(workdir / "q.gs")], workdir / "quantize.log")
    log = workdir / "compile.log"
    row["compile_s"], row["compile_mib"] = run_stage(
        ["compile", str(workdir / "q.gs"), "--array", "16x16", "--accel", "--stats", "-o",
         str(workdir / "out")], log)
    text = log.read_text()
    row["products"] = len(re.findall(r"\(compute dot-product", (workdir / "q.gs").read_text()))
    regions = re.search(r"regions: (\d+) \(one e-graph each, (\d+) reused", text)
    row["regions"] = f"{regions.group(1)} ({regions.group(2)} reused)" if regions else "1"
    total = re.search(r"predicted (?:total: (\d+) cycles|cycles: (\d+) \(accelerator)", text)
    row["cycles"] = int(total.group(1) or total.group(2)) if total else 0
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="", help="what this run measures (before/after)")
    parser.add_argument("--only", default="", help="a network name's prefix")
    options = parser.parse_args()
    rows = []
    for name, build in NETWORKS.items():
        if not name.startswith(options.only):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(measure(name, build, Path(tmp)))
        print(rows[-1], flush=True)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Compile time at full size: grouped and squeeze-excite networks\n\n"
            f"Machine: {platform.machine()}, CPython {platform.python_version()}; "
            "`python bench/bench_compile_scale.py`. Synthetic 224×224 int8 networks "
            "(bench/bench_compile_scale.py says how they are built); each stage a fresh "
            "process; CPU = user + system seconds of that process (the machine is shared, "
            "wall time means little); memory = its peak resident set. `compile` is "
            "`compile --accel --array 16x16 --stats -o DIR` (parse, regions, epilogues, "
            "accelerator passes, C emission); cycles: its predicted total. Targets: "
            "import ≤ 15 s, compile ≤ 15 s CPU, ≤ 4 GiB.\n\n"
            "| run | network | products | regions saturated (reused) | import CPU s | "
            "import MiB | quantize CPU s | compile CPU s | compile MiB | predicted cycles |\n"
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|\n")
    with RESULTS.open("a") as table:
        for row in rows:
            table.write(f"| {options.label or time.strftime('%Y-%m-%d')} | {row['network']} | "
                        f"{row['products']} | {row['regions']} | {row['import_s']:.1f} | "
                        f"{row['import_mib']:.0f} | {row['quantize_s']:.1f} | "
                        f"{row['compile_s']:.1f} | {row['compile_mib']:.0f} | "
                        f"{row['cycles']:,} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
