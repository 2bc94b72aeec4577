"""The torchvision classification zoo through glensidec: export, import, f32 against
onnxruntime, int8 against float, compile onto a 16×16 array.

It needs PyTorch and torchvision, which neither CI nor the project's .venv installs: PyPI's
torchvision does not import beside the CPU-only `torch==2.13.0` of the `nas` extra, so use a
venv of its own outside the repository (x86_64; a CUDA build, about 5.5 GB, that runs on
the CPU; `[dev]` only, since `[nas]` would bring torch 2.13.0 back):

    python3 -m venv ~/zoovenv
    ~/zoovenv/bin/pip install torch==2.14.1 torchvision==0.29.1
    ~/zoovenv/bin/pip install -e '.[dev]'
    ~/zoovenv/bin/python bench/bench_zoo.py            # all 13, about 10 minutes on 2 cores
    ~/zoovenv/bin/python bench/bench_zoo.py --models shufflenet_v2_x1_0

Each run records its rows in bench/results/zoo.json and writes bench/results/zoo.md from
all recorded rows, so a run of a few models (`--models`) replaces just their rows. `make
bench` runs it with the others; without torchvision it prints why and exits 0, leaving the
committed table as it is.

Per model (random weights, `torch.manual_seed(0)`, eval mode, 1×3×224×224, the legacy
TorchScript exporter `dynamo=False` at opset 17, which needs no onnxscript):
import time; f32 max |error| / max |onnxruntime| on one N(0,1) input; int8 (per-channel
weights, symmetric activations, 2 calibration samples) against float: relative L2 of the
logits and top-1 agreement over 20 fresh inputs (`--samples N`; `--models …` for a
subset), and two facts that tell a tie from a wrong answer: how often the float top-1 class
is among the classes tied at the int8 maximum, and the smallest gap between the float
top-1 and top-2 logits in int8 output steps (below 1, int8 cannot order them); compile
time (`pipeline.compile_program`, 16×16), products left on the host, predicted cycles.
Each stage that fails records its one-line error and the model's row says so. Exits 1 when
a model misses a target of issue 17 (imports, f32 ≤ 1e-5, quantizes, every product on the
array, compile ≤ 10 s).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "zoo.md"
RECORD = RESULTS.with_suffix(".json")  # every measured row, so partial runs merge
MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
          "densenet121", "regnet_x_400mf", "alexnet", "vgg11", "squeezenet1_1", "googlenet",
          "mnasnet0_5", "shufflenet_v2_x1_0"]
SAMPLES = 20
CALIBRATION = 2
F32_LIMIT = 1e-5
COMPILE_LIMIT_S = 10.0


def export(name: str, path: Path) -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"weights": None}
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, name)(**kwargs).eval()
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), opset_version=17,
                      dynamo=False, input_names=["input"], output_names=["logits"])


def measure(row: dict[str, Any], workdir: Path, samples: int) -> None:
    """Fill `row` stage by stage (so a failure keeps what was measured before it)."""
    import onnxruntime as ort

    from glensidec.frontends.importer import import_model
    from glensidec.frontends.quantize import quantize
    from glensidec.lang.data import load_weights
    from glensidec.lang.interp import run_program
    from glensidec.lang.syntax import read_program
    from glensidec.lang.typecheck import check_program
    from glensidec.opt.extract import parse_array_size, unmapped_products
    from glensidec.pipeline import compile_program

    name = row["model"]
    path = workdir / f"{name}.onnx"
    row["stage"] = "export"
    export(name, path)
    row["stage"] = "import"
    start = time.perf_counter()
    program_path, names = import_model(path, workdir / name)
    row["import_s"] = time.perf_counter() - start
    program = read_program(program_path)
    weights = load_weights(program)
    (onnx_name, input_name), = names.items()
    rng = np.random.default_rng(0)
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {onnx_name: image})[0]
    actual = run_program(program, {**weights, input_name: image})
    row["f32_error"] = float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
    row["stage"] = "quantize"
    calibration = {input_name: rng.standard_normal((CALIBRATION, 1, 3, 224, 224)).astype(
        np.float32)}
    start = time.perf_counter()
    quantized = quantize(program, calibration, True, True)
    row["quantize_s"] = time.perf_counter() - start
    l2, agree, among_tied, margins = [], 0, 0, []
    q_weights = quantized.weights
    for _ in range(samples):
        sample = {input_name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
        reference = run_program(program, {**weights, **sample}).reshape(-1)
        integers = run_program(quantized.program, {**q_weights,
                                                   **quantized.quantize_inputs(sample)})
        logits = quantized.dequantize_output(integers).reshape(-1)
        l2.append(float(np.linalg.norm(logits - reference) / np.linalg.norm(reference)))
        agree += int(np.argmax(logits) == np.argmax(reference))
        among_tied += int(logits[np.argmax(reference)] == logits.max())
        margins.append(top_margin(reference) / output_step(quantized))
    row["int8_l2"], row["top1"] = max(l2), agree / samples
    row["top1_tied"], row["margin_steps"] = among_tied / samples, min(margins)
    row["stage"] = "compile"
    start = time.perf_counter()
    compiled = compile_program(quantized.program, parse_array_size("16x16"))
    row["compile_s"] = time.perf_counter() - start
    types = check_program(compiled.program)
    row["host_products"] = len(unmapped_products(compiled.program.root, types, "i8"))
    row["cycles"] = compiled.prediction.total
    del row["stage"]


def top_margin(logits: Any) -> float:
    """The float top-1 logit minus the top-2 logit."""
    second, first = np.sort(logits)[-2:]
    return float(first - second)


def output_step(quantized: Any) -> float:
    """One int8 step of the output (an f32 output, dequantized on the host: no step)."""
    return float(quantized.output.scale) if quantized.output is not None else float("nan")


def met(row: dict[str, Any]) -> bool:
    return ("error" not in row and row["f32_error"] <= F32_LIMIT and row["host_products"] == 0
            and row["compile_s"] <= COMPILE_LIMIT_S)


def imported_within(row: dict[str, Any]) -> bool:
    return "f32_error" in row and row["f32_error"] <= F32_LIMIT


def cell(row: dict[str, Any], key: str, form: str) -> str:
    return format(row[key], form) if key in row else "–"


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | import s | f32 error vs onnxruntime | int8 rel. L2 (worst) | "
             "int8 top-1 agreement | float top-1 among int8 ties | float top-1 margin "
             "(int8 steps, least) | compile s | i8 products on host | predicted cycles | "
             "stopped at |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        stopped = f"{row['stage']}: {row['error']}" if "error" in row else ""
        lines.append(f"| {row['model']} | {cell(row, 'import_s', '.1f')} | "
                     f"{cell(row, 'f32_error', '.1e')} | {cell(row, 'int8_l2', '.3f')} | "
                     f"{cell(row, 'top1', '.0%')} | {cell(row, 'top1_tied', '.0%')} | "
                     f"{cell(row, 'margin_steps', '.2f')} | {cell(row, 'compile_s', '.1f')} | "
                     f"{cell(row, 'host_products', 'd')} | {cell(row, 'cycles', ',')} | "
                     f"{stopped} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=SAMPLES,
                        help="fresh inputs for the int8 comparison (the table says how many)")
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    options = parser.parse_args()
    try:
        import torch
        import torchvision
    except ImportError as error:
        print(f"bench_zoo: skipped, {error.name} is not installed (out of CI, in a venv of "
              f"its own: pip install torch==2.14.1 torchvision==0.29.1; see this script's "
              f"docstring); {RESULTS.name} left as it is")
        return 0
    setup = (f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
             f"{platform.machine()}")
    recorded = load_record()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in options.models:
            print(f"-- {name}", flush=True)
            rows.append({"model": name, "setup": setup, "samples": options.samples,
                         "measured": started})
            try:
                measure(rows[-1], Path(tmp), options.samples)
            except Exception as error:  # one model's failure is a row, not the end
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                rows[-1]["error"] = first.removeprefix("error: ")[:200].replace("|", "/")
            print(rows[-1], flush=True)
            recorded[name] = rows[-1]
            write_results(recorded)  # after each model: a long run keeps what it measured
    print(f"wrote {RESULTS}")
    return 0 if sum(met(row) for row in rows) == len(rows) else 1


def load_record() -> dict[str, dict[str, Any]]:
    """The rows of earlier runs, by model (an absent record: none)."""
    if not RECORD.exists():
        return {}
    rows: list[dict[str, Any]] = json.loads(RECORD.read_text(encoding="utf-8"))
    return {row["model"]: row for row in rows}


def write_results(recorded: dict[str, dict[str, Any]]) -> None:
    rows = [recorded[name] for name in MODELS if name in recorded]
    RECORD.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    passed = sum(met(row) for row in rows)
    imported = sum(imported_within(row) for row in rows)
    runs: dict[tuple[str, str, int], list[str]] = {}
    for row in rows:
        runs.setdefault((row["measured"], row["setup"], row["samples"]), []).append(row["model"])
    when = [f"- {', '.join(models)}: {measured}; {setup}; {samples} fresh int8 inputs"
            for (measured, setup, samples), models in sorted(runs.items())]
    RESULTS.write_text("\n".join([
        "# The torchvision zoo (bench/bench_zoo.py)", "",
        "Random weights, 1×3×224×224, opset 17, legacy exporter; int8: per-channel weights, "
        f"symmetric activations, {CALIBRATION} calibration samples; 16×16 array. Each row "
        "comes from the run started at:", "", *when, "", *table(rows), "",
        f"{imported} of {len(rows)} models import and match onnxruntime within "
        f"{F32_LIMIT:g} in f32; "
        f"{passed} of {len(rows)} models meet every target (f32 ≤ {F32_LIMIT:g}, int8, every "
        f"product on the array, compile ≤ {COMPILE_LIMIT_S:g} s).", ""]),
        encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
