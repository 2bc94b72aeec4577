"""Default (whole-accelerator) compile against the bare-array compile, per network: CPU
seconds and peak resident memory of each (issue 26: the default compile fits in 4 GiB and
takes at most 1.5x the `--bare-array` compile's CPU; issue 30: each compile <= 15 s CPU).

Run: .venv/bin/python bench/bench_compile_ratio.py [--only NAME] [--runs N] [--before TREE]
(prints a Markdown table; bench/results/compile_scale.md holds the committed one).
`--before TREE` also times the default compile of another glensidec source tree (e.g. a
`git archive` of an earlier commit), in turn with the two, and prints its CPU and the
ratio of this tree's to it: a speed-up measured side by side on a shared machine.
Each network is built (random weights, as the other benches build them: bench/host_models.py,
bench/bench_compile_scale.py, bench/bench_accel_scale.py), imported and quantized
(`--per-channel --symmetric`, two calibration samples) once, then compiled for a 16x16
array, default and `--bare-array` in turn, each in a fresh process (CPU = user + system and
the peak resident set from `wait4`, the median of `--runs`). The vit_b_16-like network is
the encoder blocks of bench_accel_scale at vit_b_16's size (12 blocks, 197 tokens,
768 features, 12 heads, MLP 3072) after a 16x16/16 patch convolution, a class token and
position embeddings. Quantizing it takes minutes and about 3 GiB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

import bench_accel_scale as encoders  # noqa: E402
import bench_compile_scale as grouped  # noqa: E402
import host_models  # noqa: E402
from onnx_models import OnnxGraph, save  # noqa: E402
from test_transformer import Size  # noqa: E402

GLENSIDEC = [sys.executable, "-m", "glensidec"]
IMAGE = (1, 3, 224, 224)


def vit(blocks: int, size: Size, patch: int = 16, image: int = 224) -> Any:
    g = OnnxGraph(0)
    x = g.conv(g.input("image", list(IMAGE)), 3, size.features, patch, patch)
    pixels = (image // patch) ** 2
    x = g.node("Reshape", [x, g.const("flat", np.array([1, size.features, pixels], np.int64))])
    x = g.node("Transpose", [x], perm=[0, 2, 1])
    x = g.node("Concat", [g.random("cls", (1, 1, size.features), 0.1), x], axis=1)
    x = g.node("Add", [x, g.random("pos", (1, pixels + 1, size.features), 0.1)])
    for _ in range(blocks):
        x = encoders.encoder(g, x, size)
    return g.model(encoders.layer_norm(g, x, size.features), [1, pixels + 1, size.features])


NETWORKS: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "ResNet-18": (host_models.resnet18, IMAGE),
    "ResNet-50": (host_models.resnet50, IMAGE),
    "MobileNet-v1": (host_models.mobilenet_v1, IMAGE),
    "efficientnet-like (SE, sigmoid)": (lambda: grouped.squeeze_excite(False), IMAGE),
    "mobilenet_v3-like (SE, hard-sigmoid)": (lambda: grouped.squeeze_excite(True), IMAGE),
    "encoder x12 (64 tokens, 128 features)": (
        lambda: encoders.network(12, Size(64, 128, 4, 512)), (1, 64, 128)),
    "resnext50_32x4d-like": (grouped.resnext50, IMAGE),
    "vit_b_16-like": (lambda: vit(12, Size(197, 768, 12, 3072)), IMAGE),
}


def quantized(name: str, work: Path) -> Path:
    build, shape = NETWORKS[name]
    model = build()
    onnx_path = save(model, work / "model.onnx")
    calibration = work / "calib.npz"
    np.savez(calibration, **{model.graph.input[0].name: np.random.default_rng(0)
                             .standard_normal((2, *shape)).astype(np.float32)})
    subprocess.run([*GLENSIDEC, "import", str(onnx_path), "-o", str(work / "f32")], check=True,
                   capture_output=True)
    program = work / "q.gs"
    subprocess.run([*GLENSIDEC, "quantize", str(work / "f32" / "model.gs"), "--calibrate",
                    str(calibration), "--per-channel", "--symmetric", "-o", str(program)],
                   check=True, capture_output=True)
    return program


def compile_once(program: Path, outdir: Path, *options: str, tree: str = ""
                 ) -> tuple[float, float]:
    """(CPU seconds, peak resident GiB) of one compile in its own process (of the
    glensidec in source tree `tree`, else this one)."""
    environment = {**os.environ, "PYTHONPATH": tree} if tree else None
    with (outdir.parent / "compile.log").open("w") as log:
        process = subprocess.Popen([*GLENSIDEC, "compile", str(program), "--array", "16x16",
                                    "--force", "-o", str(outdir), *options],
                                   stdout=log, stderr=subprocess.STDOUT, env=environment)
        _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise SystemExit(f"compile {' '.join(options)} of {program} failed")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="a network name's prefix")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default="", help="another glensidec source tree to time")
    options = parser.parse_args()
    before_columns = ("| default CPU before | default / before CPU " if options.before else "",
                      "---:|---:|" if options.before else "")
    print(f"| network {before_columns[0]}| default CPU | bare-array CPU | default / bare CPU "
          f"| default peak RSS | bare-array peak RSS |\n|---|{before_columns[1]}"
          "---:|---:|---:|---:|---:|")
    for name in NETWORKS:
        if not name.startswith(options.only):
            continue
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            program = quantized(name, work)
            default, bare, before = [], [], []
            for _ in range(options.runs):  # in turn, so a drift of the machine hits all
                if options.before:
                    before.append(compile_once(program, work / "before",
                                               tree=options.before))
                default.append(compile_once(program, work / "default"))
                bare.append(compile_once(program, work / "bare", "--bare-array"))
        cpu = statistics.median(run[0] for run in default)
        bare_cpu = statistics.median(run[0] for run in bare)
        earlier = ""
        if before:
            before_cpu = statistics.median(run[0] for run in before)
            earlier = f"{before_cpu:.1f} s | {cpu / before_cpu:.2f} | "
        print(f"| {name} | {earlier}{cpu:.1f} s | {bare_cpu:.1f} s | {cpu / bare_cpu:.2f} | "
              f"{max(run[1] for run in default):.2f} GiB | "
              f"{max(run[1] for run in bare):.2f} GiB |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
