"""Does compiling for the accelerator scale? Issue 26: the default compile of a big network
fits in 4 GiB and takes at most 1.5x the `--bare-array` compile.

torchvision is not in the venv, so the network is synthetic and transformer-like: N encoder
blocks (LayerNorm, Q/K/V projections, attention products of two activations, softmax, an
output projection and a residual add, then LayerNorm, an MLP with GELU and a residual add),
built with the ONNX helpers of tests/test_transformer.py as PyTorch exports them, imported,
quantized per channel with symmetric activations on two random samples, then compiled for
a 16x16 array with `--bare-array` and for the accelerator (the default). Each compile runs
in its own process: its CPU seconds and peak resident memory come from `wait4`.

Before this change the accelerator's epilogue rules ran over the whole program: the
12-block network reached 12 GB of resident memory (a quantized vit_b_16 or swin_t was
killed on a 24 GiB machine, issue 26).

Writes bench/results/accel_scale.md. Run: .venv/bin/python bench/bench_accel_scale.py
(~10 min: most of it quantizing).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO / "tests"))

from onnx_models import OnnxGraph, save  # noqa: E402
from test_transformer import Size, gelu, heads, layer_norm, linear  # noqa: E402

RESULTS = BENCH_DIR / "results" / "accel_scale.md"
GLENSIDEC = [sys.executable, "-m", "glensidec"]
MEMORY_LIMIT_GIB, TIME_RATIO = 4.0, 1.5
# (blocks, tokens, features, heads, hidden): the 12 blocks of vit_b_16 at a smaller width
NETWORKS = [(4, 64, 128, 4, 512), (12, 64, 128, 4, 512)]


def encoder(g: OnnxGraph, x: str, size: Size) -> str:
    """A pre-LayerNorm encoder block (as ViT's): x + attention(LN(x)), then + MLP(LN(·))."""
    tokens, features = size.tokens, size.features
    h = layer_norm(g, x, features)
    q = heads(g, linear(g, h, features, features), size)
    k = heads(g, linear(g, h, features, features), size, key=True)
    v = heads(g, linear(g, h, features, features), size)
    scale = g.const(f"scale{g.count}", np.array(1.0 / math.sqrt(features // size.heads), "f4"))
    attention = g.node("Softmax", [g.node("Mul", [g.node("MatMul", [q, k]), scale])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [attention, v])], perm=[0, 2, 1, 3])
    context = g.node("Reshape", [context, g.const(f"merge{g.count}", np.array(
        [1, tokens, features], np.int64))])
    x = g.node("Add", [x, linear(g, context, features, features)])
    hidden = gelu(g, linear(g, layer_norm(g, x, features), features, size.hidden))
    return g.node("Add", [x, linear(g, hidden, size.hidden, features)])


def network(blocks: int, size: Size) -> Any:
    g = OnnxGraph(0)
    x = g.input("input", [1, size.tokens, size.features])
    for _ in range(blocks):
        x = encoder(g, x, size)
    return g.model(layer_norm(g, x, size.features), [1, size.tokens, size.features])


@dataclass
class Measured:
    cpu: float  # seconds
    rss_gib: float
    products: int  # accelerator layers + array calls of the compiled program
    host_share: str


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for blocks, tokens, features, nheads, hidden in NETWORKS:
            size = Size(tokens, features, nheads, hidden)
            name = f"encoder x{blocks} ({tokens} tokens, {features} features, {hidden} MLP)"
            model = save(network(blocks, size), work / f"enc{blocks}.onnx")
            subprocess.run([*GLENSIDEC, "import", str(model), "-o", str(work / f"f{blocks}")],
                           check=True, capture_output=True)
            program = work / f"f{blocks}" / f"enc{blocks}.gs"
            calibration = work / f"calib{blocks}.npz"
            np.savez(calibration, input=np.random.default_rng(7).standard_normal(
                (2, 1, tokens, features)).astype(np.float32))
            quantized = work / f"q{blocks}" / "model.gs"
            subprocess.run([*GLENSIDEC, "quantize", str(program), "--calibrate",
                            str(calibration), "--per-channel", "--symmetric", "-o",
                            str(quantized)], check=True, capture_output=True)
            bare = measure(quantized, work / f"bare{blocks}", "--bare-array")
            accel = measure(quantized, work / f"accel{blocks}")
            rows.append((name, bare, accel))
            print(f"{name}: bare {bare}, accelerator {accel}", flush=True)
    RESULTS.write_text(report(rows))
    print(f"wrote {RESULTS}")
    return 0


def measure(program: Path, outdir: Path, *options: str) -> Measured:
    """One compile in its own process (output to files: a pipe could fill while we wait)."""
    out, err = outdir.with_suffix(".out"), outdir.with_suffix(".err")
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen([*GLENSIDEC, "compile", str(program), "--array", "16x16",
                                    "-o", str(outdir), *options], stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise SystemExit(f"compile failed: {err.read_text()[-2000:]}")
    lines = out.read_text().splitlines()
    total = next(line for line in lines if line.startswith("predicted cycles:"))
    layers = 0
    for part in lines[0].split(", "):
        if " accelerator layers" in part:
            layers = int(part.split()[0])
    return Measured(usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, layers,
                    total.split(" = ")[1].split(";")[0])


def report(rows: list[tuple[str, Measured, Measured]]) -> str:
    lines = [
        "# Compiling big networks for the accelerator\n",
        "Written by `bench/bench_accel_scale.py`: a synthetic transformer-like network "
        "(pre-LayerNorm encoder blocks as ViT's, built from ONNX, quantized per channel), "
        "compiled for a 16×16 array with `--bare-array` and for the accelerator (the "
        "default). Each compile is its own process (CPU and peak resident memory from "
        f"`wait4`; a machine with load {os.getloadavg()[0]:.1f}). Issue 26's targets: the "
        f"default compile fits in {MEMORY_LIMIT_GIB:g} GiB and takes at most {TIME_RATIO}× "
        "the bare-array compile. Before the epilogue rules ran one layer neighbourhood at a "
        "time, the 12-block network's accelerator compile reached 12 GB resident.\n",
        "| network | bare-array CPU | bare-array peak memory | accelerator CPU | "
        "accelerator peak memory | CPU ratio | accelerator layers | host share (copies "
        "priced) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, bare, accel in rows:
        lines.append(f"| {name} | {bare.cpu:.1f} s | {bare.rss_gib:.2f} GiB | "
                     f"{accel.cpu:.1f} s | {accel.rss_gib:.2f} GiB | "
                     f"{accel.cpu / bare.cpu:.2f} | {accel.products} | {accel.host_share} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
