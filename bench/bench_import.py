"""Import and quantize a ResNet-18-shaped network (random weights, 1×3×224×224 input).

Run alone: `.venv/bin/python bench/bench_import.py` (writes bench/results/import.md).
The compile/map stages come later; this measures the front end only.
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the ONNX model builder lives with the tests

from test_import import OnnxGraph  # noqa: E402

from glensidec.data import load_weights  # noqa: E402
from glensidec.importer import import_onnx  # noqa: E402
from glensidec.interp import run_program  # noqa: E402
from glensidec.quantize import quantize  # noqa: E402
from glensidec.syntax import read_program  # noqa: E402

CALIBRATION_SAMPLES = 2
LIMIT_SECONDS = 60.0


def basic_block(g: OnnxGraph, x: str, cin: int, cout: int, stride: int) -> str:
    y = g.node("Relu", [g.bn(g.conv(x, cin, cout, 3, stride, 1, bias=False), cout)])
    y = g.bn(g.conv(y, cout, cout, 3, 1, 1, bias=False), cout)
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.bn(g.conv(x, cin, cout, 1, stride, 0, bias=False), cout)
    return g.node("Relu", [g.node("Add", [y, shortcut])])


def resnet18(seed: int = 0) -> Any:
    """torchvision's ResNet-18 layer for layer: 11.7 M parameters, 1.8 GMAC."""
    g = OnnxGraph(seed)
    x = g.input("image", [1, 3, 224, 224])
    x = g.node("Relu", [g.bn(g.conv(x, 3, 64, 7, 2, 3, bias=False), 64)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            x = basic_block(g, x, channels, width, stride)
            channels = width
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model(g.gemm(x, 512, 1000), [1, 1000])


def measure(workdir: Path) -> dict[str, float]:
    import onnx

    model_path = workdir / "resnet18.onnx"
    onnx.save(resnet18(), str(model_path))
    start = time.perf_counter()
    program_path = import_onnx(model_path, workdir / "resnet18")
    imported = time.perf_counter() - start
    program = read_program(program_path)
    calibration = {"image": np.random.default_rng(0).standard_normal(
        (CALIBRATION_SAMPLES, 1, 3, 224, 224)).astype(np.float32)}
    start = time.perf_counter()
    quantized = quantize(program, calibration, per_channel=True)
    quantized_time = time.perf_counter() - start
    parameters = sum(int(np.prod(t.shape)) for t in program.weights())
    # One run of each program on a fresh input, to show the quantized network works.
    fresh = {"image": np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(
        np.float32)}
    start = time.perf_counter()
    expected = run_program(program, {**load_weights(program), **fresh})
    float_run = time.perf_counter() - start
    start = time.perf_counter()
    actual = quantized.dequantize_output(run_program(
        quantized.program, {**quantized.weights, **quantized.quantize_inputs(fresh)}))
    int8_run = time.perf_counter() - start
    spread = float(np.max(expected) - np.min(expected))
    return {"import_s": imported, "quantize_s": quantized_time, "float_run_s": float_run,
            "int8_run_s": int8_run,
            "relative_error": float(np.max(np.abs(actual - expected))) / spread,
            "output_lsb": float(np.max(np.abs(actual - expected))) / quantized.output.scale
            if quantized.output else float("nan"),
            "parameters": float(parameters), "layers": float(len(quantized.layers)),
            "program_bytes": float(program_path.stat().st_size)}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp))
    total = result["import_s"] + result["quantize_s"]
    table = "\n".join([
        "# Import and quantize: ResNet-18 (random weights, 1×3×224×224)",
        "",
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; `python bench/bench_import.py`.",
        "",
        "| stage | seconds |",
        "|---|---|",
        f"| import (ONNX → .gs + .npz, batch-norm folded) | {result['import_s']:.2f} |",
        f"| quantize (profile on {CALIBRATION_SAMPLES} samples + int8 rewrite, per-channel) "
        f"| {result['quantize_s']:.2f} |",
        f"| total (limit {LIMIT_SECONDS:.0f} s) | {total:.2f} |",
        f"| (one interpreter run, float program) | {result['float_run_s']:.2f} |",
        f"| (one interpreter run, int8 program) | {result['int8_run_s']:.2f} |",
        "",
        f"int8 against float on a fresh input: max |error| = {result['relative_error']:.4f} "
        f"of the output range ({result['output_lsb']:.1f} output LSB); random weights, "
        f"{CALIBRATION_SAMPLES} calibration samples.",
        "",
        f"{int(result['parameters']):,} float parameters; {int(result['layers'])} quantized "
        f"layers; program text {int(result['program_bytes']):,} bytes.",
        "",
    ])
    out = REPO / "bench" / "results" / "import.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table, encoding="utf-8")
    print(table)
    return 0 if total <= LIMIT_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
