"""The generated C on the host CPU against onnxruntime, and compile times of real networks.

Run alone: `.venv/bin/python bench/bench_host.py` (writes bench/results/host.md; `make bench`
runs it with the others). Every model is built here from random weights (no downloads):
an ONNX graph (bench/host_models.py, tests' OnnxGraph) is imported with `glensidec import`,
quantized with `glensidec quantize --per-channel`, compiled with `glensidec compile` for a
16x16 array and built with `make` (default flags, and `make NATIVE=1` for the NATIVE rows).

Each row runs `OUTDIR/model … --repeat 5` and onnxruntime (one thread, the same input)
alternately, ROUNDS times, and keeps the minimum milliseconds per inference of each, in
wall time and in CPU time of the process. The ratio that is checked is the CPU one: on a
machine whose cores are shared with other jobs, a long inference is interrupted more often
than a short one, so a minimum of wall times favours the faster program; CPU time leaves
the waiting out (both programs still share the caches with the other jobs). The
int8 rows compare against onnxruntime running the int8 model onnxruntime's own static
quantizer makes (QDQ, per-channel, the same calibration data), and the f32 rows against the
float model. GFLOP/s counts 2 x the multiply-adds of the Conv and Gemm nodes.

Exits 1 when a row is slower than TARGET_RATIO x onnxruntime or a compile misses its budget
(in CPU seconds: the wall time on a shared machine mostly measures the other jobs).
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import host_models  # noqa: E402
from host_models import OnnxGraph  # noqa: E402

GLENSIDEC = [sys.executable, "-m", "glensidec"]
ARRAY = "16x16"
ROUNDS = 3
REPEAT = 5
TARGET_RATIO = 3.0
COMPILE_BUDGETS = {"ResNet-18": 2.0, "ResNet-50": 3.0, "MobileNet-v1": 5.0}
CALIBRATION_SAMPLES = 2


def conv3x3(seed: int = 0) -> Any:
    """One 3x3 convolution, 64 -> 64 channels at 56x56, pad 1, with bias (ResNet's body)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 64, 56, 56])
    return g.model(g.conv(x, 64, 64, 3, 1, 1), [1, 64, 56, 56])


def mlp(seed: int = 0) -> Any:
    """784-512-512-10 with ReLUs, batch 8."""
    g = OnnxGraph(seed)
    x = g.input("x", [8, 784])
    x = g.node("Relu", [g.gemm(x, 784, 512)])
    x = g.node("Relu", [g.gemm(x, 512, 512)])
    return g.model(g.gemm(x, 512, 10), [8, 10])


def resnet_block(seed: int = 0) -> Any:
    """The layers of examples/resnet_block.gs in float: 3x3 conv + bias, ReLU, 3x3 conv +
    bias, plus the input, ReLU (16 channels at 16x16)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 16, 16, 16])
    y = g.node("Relu", [g.conv(x, 16, 16, 3, 1, 1)])
    y = g.conv(y, 16, 16, 3, 1, 1)
    return g.model(g.node("Relu", [g.node("Add", [y, x])]), [1, 16, 16, 16])


# -- running ---------------------------------------------------------------------------


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{completed.stderr}")
    return completed


def multiply_adds(model: Any) -> int:
    """Multiply-adds of the Conv and Gemm nodes (output elements x reduction length)."""
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.output,
                        *inferred.graph.input]}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            out = int(np.prod(shapes[node.output[0]]))
            weight = weights[node.input[1]]
            total += out * int(np.prod(weight[1:])) if node.op_type == "Conv" else \
                out * weight[1]
    return total


@dataclass
class Built:
    """A model imported, quantized and compiled: the paths and the data to run it on."""

    name: str
    onnx_path: Path
    float_program: Path
    int8_program: Path
    image: np.ndarray
    calibration: np.ndarray
    input_name: str
    input_scale: float
    input_zero_point: int
    macs: int


def front_end(name: str, model: Any, work: Path) -> Built:
    import json

    import onnx
    folder = work / name
    folder.mkdir()
    onnx_path = folder / "model.onnx"
    onnx.save(model, str(onnx_path))
    run([*GLENSIDEC, "import", str(onnx_path), "-o", str(folder / "float")])
    (program,) = (folder / "float").glob("*.gs")
    input_name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(7)
    calibration = rng.standard_normal((CALIBRATION_SAMPLES, *shape)).astype(np.float32)
    np.savez(folder / "calibration.npz", **{input_name: calibration})
    quantized = folder / "int8.gs"
    run([*GLENSIDEC, "quantize", str(program), "--calibrate", str(folder / "calibration.npz"),
         "--per-channel", "-o", str(quantized)])
    params = json.loads(Path(str(quantized) + ".json").read_text())["inputs"][input_name]
    image = rng.standard_normal(shape).astype(np.float32)
    return Built(name, onnx_path, program, quantized, image, calibration, input_name,
                 float(params["scale"]), int(params["zero_point"]), multiply_adds(model))


def compile_c(program: Path, outdir: Path, native: bool = False) -> Path:
    run([*GLENSIDEC, "compile", str(program), "--array", ARRAY, "-o", str(outdir)])
    run(["make", "-s", "-C", str(outdir), *(["NATIVE=1"] if native else [])])
    return outdir / "model"


Times = tuple[float, float]  # (wall ms, CPU ms) of one inference


def time_c(model: Path, args: list[str]) -> Times:
    printed = run([str(model), *args, "--repeat", str(REPEAT)]).stdout
    wall = re.search(r"inference ms: min ([0-9.]+)", printed)
    cpu = re.search(r"inference cpu ms: min ([0-9.]+)", printed)
    assert wall is not None and cpu is not None, printed
    return float(wall.group(1)), float(cpu.group(1))


def ort_session(path: Path) -> Any:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def time_ort(session: Any, feed: dict[str, np.ndarray]) -> Times:
    wall = cpu = float("inf")
    for _ in range(REPEAT):
        start, cpu_start = time.perf_counter(), time.process_time()
        session.run(None, feed)
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - cpu_start)
    return wall * 1000, cpu * 1000


def best_of(c_run: Any, ort_run: Any) -> tuple[Times, Times]:
    """ROUNDS alternating rounds of the generated C and onnxruntime; the minima."""
    c_best, ort_best = (float("inf"),) * 2, (float("inf"),) * 2
    for _ in range(ROUNDS):
        c_times, ort_times = c_run(), ort_run()
        c_best = (min(c_best[0], c_times[0]), min(c_best[1], c_times[1]))
        ort_best = (min(ort_best[0], ort_times[0]), min(ort_best[1], ort_times[1]))
    return c_best, ort_best


def ort_int8(built: Built, work: Path) -> Path:
    """onnxruntime's own static int8 quantization of the model (QDQ, per-channel)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{built.input_name: sample} for sample in built.calibration])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.samples, None)

    path = work / built.name / "ort_int8.onnx"
    quantize_static(str(built.onnx_path), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    return path


@dataclass
class Row:
    model: str
    precision: str
    flags: str
    c: Times
    ort: Times
    gflops: float  # of the generated C, by CPU time
    error: float  # max |C - reference| relative to the reference's range

    @property
    def ratio(self) -> float:
        """By CPU time (see the module docstring)."""
        return self.c[1] / self.ort[1]

    @property
    def wall_ratio(self) -> float:
        return self.c[0] / self.ort[0]


def measure(built: Built, precision: str, native: bool, work: Path) -> Row:
    tag = f"{precision}{'-native' if native else ''}"
    outdir = work / built.name / f"c-{tag}"
    program = built.float_program if precision == "f32" else built.int8_program
    model = compile_c(program, outdir, native)
    if precision == "f32":
        data = built.image
        session = ort_session(built.onnx_path)
    else:
        data = np.clip(np.round(built.image / built.input_scale) + built.input_zero_point,
                       -128, 127).astype(np.int8)
        session = ort_session(ort_int8(built, work) if not native else
                              work / built.name / "ort_int8.onnx")
    np.save(outdir / "input.npy", data)
    args = [f"{built.input_name}={outdir / 'input.npy'}", "-o", str(outdir / "out.npy")]
    feed = {built.input_name: built.image}
    c_times, ort_times = best_of(lambda: time_c(model, args), lambda: time_ort(session, feed))
    reference = ort_session(built.onnx_path).run(None, feed)[0]
    output = np.load(outdir / "out.npy")
    if precision == "int8":
        scale, zero = _output_quantization(built.int8_program)
        output = scale * (output.astype(np.float64) - zero)
    spread = float(np.max(reference) - np.min(reference)) or 1.0
    error = float(np.max(np.abs(output - reference))) / spread
    return Row(built.name, precision, "NATIVE=1" if native else "default", c_times,
               ort_times, 2 * built.macs / (c_times[1] * 1e6), error)


def _output_quantization(program: Path) -> tuple[float, float]:
    found = re.search(r"; output: real = ([0-9.e+-]+) \* \(q ([+-]) (\d+)\)", program.read_text())
    if found is None:  # zero point 0 prints as "(q)"
        plain = re.search(r"; output: real = ([0-9.e+-]+) \* ", program.read_text())
        assert plain is not None
        return float(plain.group(1)), 0.0
    sign = -1.0 if found.group(2) == "+" else 1.0
    return float(found.group(1)), sign * float(found.group(3))


def measure_example(work: Path) -> Row:
    """examples/resnet_block.gs (int8, its own weights) against onnxruntime running the same
    layers in float (random weights: only the time is compared)."""
    outdir = work / "resnet_block_example"
    model = compile_c(REPO / "examples" / "resnet_block.gs", outdir)
    image = np.random.default_rng(3).integers(-128, 128, (1, 16, 16, 16)).astype(np.int8)
    np.save(outdir / "x.npy", image)
    onnx_path = work / "resnet_block_float.onnx"
    import onnx
    graph = resnet_block()
    onnx.save(graph, str(onnx_path))
    session = ort_session(onnx_path)
    feed = {"x": image.astype(np.float32)}
    c_times, ort_times = best_of(lambda: time_c(model, [f"x={outdir / 'x.npy'}"]),
                                 lambda: time_ort(session, feed))
    return Row("examples/resnet_block.gs", "int8 (ORT: f32)", "default", c_times, ort_times,
               2 * multiply_adds(graph) / (c_times[1] * 1e6), float("nan"))


@dataclass
class CompileRow:
    model: str
    wall_s: float
    cpu_s: float
    cycles: int
    instructions: int


def measure_compile(name: str, model: Any, work: Path) -> CompileRow:
    built = front_end("compile_" + name.replace("-", "_"), model, work)  # not timed
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    printed = run([*GLENSIDEC, "compile", str(built.int8_program), "--array", ARRAY, "-o",
                   str(work / f"compile-{name}")]).stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = re.search(r"(\d+) instructions, predicted array cycles (\d+)", printed)
    assert found is not None, printed
    return CompileRow(name, wall, cpu, int(found.group(2)), int(found.group(1)))


# -- report ------------------------------------------------------------------------------


def report(rows: list[Row], compiles: list[CompileRow], load: float) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Host runtime: generated C against onnxruntime",
        "",
        "Generated by `.venv/bin/python bench/bench_host.py` (part of `make bench`). Each "
        "model is built from random weights, imported (`glensidec import`), quantized "
        "(`glensidec quantize --per-channel`), compiled for a 16x16 array and built with "
        "`make` (default flags: -O3, run-time dispatch to AVX2, AVX-512 and VNNI kernels) "
        "or `make NATIVE=1`. "
        f"Times are the minimum of {ROUNDS} x {REPEAT} inferences of `OUTDIR/model --repeat "
        f"{REPEAT}` and of onnxruntime (1 thread, same input), run alternately in one process "
        "tree. int8 rows compare with onnxruntime's own static int8 quantization of the same "
        "model (QDQ, per-channel); `error` is max |C - onnxruntime float| over the output's "
        "range (int8 rows dequantized).",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores, load average {load:.1f} at the start "
        "(other jobs share the cores: absolute times are noisy, the ratios are paired).",
        "",
        "| model | precision | build | C ms (CPU) | ORT ms (CPU) | C / ORT (CPU) | "
        "C ms (wall) | ORT ms (wall) | C / ORT (wall) | C GFLOP/s | error |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        error = "-" if row.error != row.error else f"{row.error:.1e}"
        lines.append(f"| {row.model} | {row.precision} | {row.flags} | {row.c[1]:.2f} | "
                     f"{row.ort[1]:.2f} | **{row.ratio:.2f}x** | {row.c[0]:.2f} | "
                     f"{row.ort[0]:.2f} | {row.wall_ratio:.2f}x | {row.gflops:.1f} | {error} |")
    lines += [
        "",
        f"Target: every row within {TARGET_RATIO:g}x of onnxruntime.",
        "",
        "## Compile times",
        "",
        "`glensidec compile MODEL.q.gs --array 16x16 -o OUTDIR` on the int8 networks (import "
        "and quantization excluded): wall seconds, and CPU seconds of the process (user + "
        "system; on a shared machine the wall time includes waiting for a core). The budget "
        "is checked against the CPU seconds.",
        "",
        "| model | wall s | CPU s | budget s | instructions | predicted array cycles |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in compiles:
        lines.append(f"| {row.model} | {row.wall_s:.2f} | {row.cpu_s:.2f} | "
                     f"{COMPILE_BUDGETS[row.model]:g} | {row.instructions} | {row.cycles} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench_host."))
    try:
        rows: list[Row] = []
        for name, model in (("conv3x3 64@56", conv3x3()), ("MLP 784-512-512-10 x8", mlp()),
                            ("ResNet-18", host_models.resnet18())):
            built = front_end(name.split()[0].replace("-", "_"), model, work)
            built.name = name.split()[0].replace("-", "_")
            for precision in ("f32", "int8"):
                row = measure(built, precision, False, work)
                row.model = name
                rows.append(row)
                print(f"{name} {precision}: C {row.c} ms, ORT {row.ort} ms (wall, CPU)",
                      flush=True)
                if name == "ResNet-18":
                    native = measure(built, precision, True, work)
                    native.model = name
                    rows.append(native)
            if name.startswith("MLP"):
                rows.append(measure_example(work))
        compiles = [measure_compile(name, builder(), work) for name, builder in (
            ("ResNet-18", host_models.resnet18), ("ResNet-50", host_models.resnet50),
            ("MobileNet-v1", host_models.mobilenet_v1))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(rows, compiles, load)
    (REPO / "bench" / "results" / "host.md").write_text(text)
    print(text)
    missed = [f"{r.model} {r.precision} {r.flags}: {r.ratio:.2f}x" for r in rows
              if r.ratio > TARGET_RATIO]
    missed += [f"compile {c.model}: {c.cpu_s:.2f} s of CPU" for c in compiles
               if c.cpu_s > COMPILE_BUDGETS[c.model]]
    for line in missed:
        print(f"target missed: {line}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
