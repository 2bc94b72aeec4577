"""ResNet-18 (random weights, 1×3×224×224 input) from ONNX to a built C program.

Run alone: `.venv/bin/python bench/bench_import.py` (writes bench/results/import.md).
Measures import, quantization, each compile stage (encode + saturate, extract, C
emission, C build) and `glensidec compile` end to end on a 16×16 array, and the predicted
array cycles of every layer against T_min and SCALE-Sim WS. Exits 1 when import +
quantize + compile take more than 60 s, a product is left on the host, or the C program
differs from the interpreter.
"""

from __future__ import annotations

import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))  # the benchmark networks (host_models.py)

from host_models import resnet18  # noqa: E402

from glensidec.frontends.importer import import_onnx  # noqa: E402
from glensidec.frontends.quant_report import LayerError, layer_errors  # noqa: E402
from glensidec.frontends.quantize import (  # noqa: E402
    QuantizedProgram,
    quantize,
    save_quantized,
)
from glensidec.hardware import array as hardware  # noqa: E402
from glensidec.lang.data import load_weights  # noqa: E402
from glensidec.lang.interp import run_program  # noqa: E402
from glensidec.lang.syntax import read_program  # noqa: E402
from glensidec.lang.terms import ComputeOp, Program, Symbol, Term, postorder  # noqa: E402
from glensidec.lang.typecheck import AccessType, check_program  # noqa: E402
from glensidec.opt.extract import (  # noqa: E402
    ARRAYS,
    Compiled,
    Matmul,
    best_orientation,
    invocation,
    unmapped_products,
)
from glensidec.pipeline import compile_program, compile_to_directory  # noqa: E402

CALIBRATION_SAMPLES = 2
LIMIT_SECONDS = 60.0
ARRAY = hardware.ArrayConfig(16, 16)


def weight_names(operands: tuple[object, ...], program: Program) -> list[str]:
    """The weights read by these operands through views (not through computes)."""
    names, stack = [], [arg for arg in operands if isinstance(arg, Term)]
    while stack:
        term = stack.pop()
        if term.op == "access-tensor":
            symbol = term.args[0]
            assert isinstance(symbol, Symbol)
            if program.tensors[symbol.name].role == "weight":
                names.append(symbol.name)
        elif term.op != "compute" and term.op not in ARRAYS:
            stack.extend(term.children())
    return names


def products_by_layer(program: Program) -> dict[str, Matmul]:
    """Each i8 dot-product over a cartesian product, by the weight it multiplies."""
    types = check_program(program)
    found = {}
    for term in postorder(program.root):
        operand = term.args[1] if term.op == "compute" else None
        if (isinstance(operand, Term) and operand.op == "access-cartesian-product"
                and isinstance(term.args[0], ComputeOp) and term.args[0].name == "dot-product"):
            left, right = (types[arg] for arg in operand.args if isinstance(arg, Term))
            assert isinstance(left, AccessType) and isinstance(right, AccessType)
            (name,) = weight_names(operand.args, program)
            found[name] = Matmul(math.prod(left.shape), math.prod(left.item),
                                 math.prod(right.shape))
    return found


def layer_rows(compiled: Compiled) -> list[dict[str, Any]]:
    """Per array call: its layer, the product as written, the call, its cycles and bounds."""
    products = products_by_layer(compiled.original)
    program = compiled.program
    types = check_program(program)
    rows = []
    for term in postorder(program.root):
        if term.op not in ARRAYS:
            continue
        call = invocation(term, types)
        (name,) = weight_names(term.args[2:], program)
        product = products[name]
        rows.append({"layer": name, "product": product, "call": call,
                     "t_min": best_orientation(hardware.t_min, ARRAY, product),
                     "scalesim": best_orientation(hardware.scalesim_ws_cycles, ARRAY, product)})
    return rows


def timed(work: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = work(*args, **kwargs)
    return result, time.perf_counter() - start


def front_end(workdir: Path) -> tuple[Program, QuantizedProgram, dict[str, Any]]:
    import onnx

    model_path = workdir / "resnet18.onnx"
    onnx.save(resnet18(), str(model_path))
    program_path, import_s = timed(import_onnx, model_path, workdir / "resnet18")
    program = read_program(program_path)
    calibration = {"image": np.random.default_rng(0).standard_normal(
        (CALIBRATION_SAMPLES, 1, 3, 224, 224)).astype(np.float32)}
    quantized, quantize_s = timed(quantize, program, calibration, per_channel=True)
    return program, quantized, {
        "import_s": import_s, "quantize_s": quantize_s,
        "parameters": sum(int(np.prod(t.shape)) for t in program.weights()),
        "layers": len(quantized.layers), "program_bytes": program_path.stat().st_size}


def back_end(quantized: QuantizedProgram, workdir: Path) -> dict[str, Any]:
    """Each compile stage through the API, then `glensidec compile` end to end."""
    saved = read_program(save_quantized(quantized, workdir / "resnet18.q.gs"))
    compiled = compile_program(saved, ARRAY)
    types = check_program(compiled.program)
    _, emit_s = timed(compile_to_directory, compiled.program, types, workdir / "c", ARRAY)
    _, build_s = timed(subprocess.run, ["make", "-s", "-C", str(workdir / "c")], check=True,
                       capture_output=True)
    command = [sys.executable, "-m", "glensidec", "compile", str(workdir / "resnet18.q.gs"),
               "--array", f"{ARRAY.rows}x{ARRAY.cols}", "-o", str(workdir / "cli")]
    _, cli_s = timed(subprocess.run, command, check=True, capture_output=True)
    return {"encode_s": compiled.seconds["encode"], "saturate_s": compiled.seconds["saturate"],
            "extract_s": compiled.seconds["extract"], "emit_s": emit_s, "build_s": build_s,
            "cli_compile_s": cli_s, "enodes": compiled.stats.enodes,
            "weight_bytes": (workdir / "c" / "weights.bin").stat().st_size,
            "iterations": compiled.stats.iterations, "stop": compiled.stats.stop_reason,
            "regions": compiled.stats.regions,
            "unmapped": len(unmapped_products(compiled.program.root, types, "i8")),
            "products": len(products_by_layer(saved)), "rows": layer_rows(compiled),
            "saved": saved}


def executors(program: Program, quantized: QuantizedProgram, saved: Program,
              workdir: Path) -> dict[str, Any]:
    """One fresh input through the float and int8 interpreter runs and the built C program."""
    fresh = {"image": np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(
        np.float32)}
    expected, float_run_s = timed(run_program, program, {**load_weights(program), **fresh})
    image = quantized.quantize_inputs(fresh)
    integers, int8_run_s = timed(run_program, saved, {**load_weights(saved), **image})
    np.save(workdir / "image.npy", image["image"])
    subprocess.run([str(workdir / "c" / "model"), f"image={workdir / 'image.npy'}", "-o",
                    str(workdir / "c.npy")], check=True, capture_output=True)
    actual = quantized.dequantize_output(integers)
    error = float(np.max(np.abs(actual - expected)))
    assert quantized.output is not None
    return {"float_run_s": float_run_s, "int8_run_s": int8_run_s,
            "c_equals_interpreter": bool(np.array_equal(np.load(workdir / "c.npy"), integers)),
            "relative_error": error / float(np.max(expected) - np.min(expected)),
            "output_lsb": error / quantized.output.scale}


ERROR_SAMPLES = 4  # calibration = evaluation samples for the per-layer errors
ERROR_SCHEMES = {"per-channel, symmetric": (True, True), "per-channel, asymmetric": (True, False)}


def layer_error_rows(program: Program) -> dict[str, list[LayerError]]:
    """Per-layer errors (`quant_report.layer_errors`) in LSB, for each scheme, on the samples
    the profile was made from (inside its range)."""
    images = np.random.default_rng(2).standard_normal((ERROR_SAMPLES, 1, 3, 224, 224))
    calibration = {"image": images.astype(np.float32)}
    samples = [{"image": calibration["image"][i]} for i in range(ERROR_SAMPLES)]
    return {scheme: layer_errors(quantize(program, calibration, per_channel, symmetric),
                                 program, samples)
            for scheme, (per_channel, symmetric) in ERROR_SCHEMES.items()}


def measure(workdir: Path, errors: bool = False) -> dict[str, Any]:
    program, quantized, result = front_end(workdir)
    result.update(back_end(quantized, workdir))
    result.update(executors(program, quantized, result.pop("saved"), workdir))
    if errors:
        result["errors"] = layer_error_rows(program)
    result["total_s"] = result["import_s"] + result["quantize_s"] + result["cli_compile_s"]
    return result


def stage_table(result: dict[str, Any]) -> list[str]:
    stages = [
        ("import (ONNX → .gs + .npz, batch-norm folded)", "import_s"),
        (f"quantize (profile on {CALIBRATION_SAMPLES} samples + int8 rewrite, per-channel)",
         "quantize_s"),
        ("compile: encode (rules and program into egglog)", "encode_s"),
        (f"compile: saturate ({result['regions']} regions, one e-graph each: at most "
         f"{result['iterations']} iterations and {result['enodes']:,} e-nodes; {result['stop']})",
         "saturate_s"),
        ("compile: extract (costs, extraction, checks)", "extract_s"),
        (f"C emission (lower, plan memory, write OUTDIR: {result['weight_bytes'] / 1e6:.1f} "
         "MB of weights)", "emit_s"),
        ("C build (`make -C OUTDIR`, gcc -O2)", "build_s"),
        (f"`glensidec compile … --array {ARRAY.rows}x{ARRAY.cols} -o OUTDIR` end to end "
         "(process start, read, compile, emit)", "cli_compile_s"),
    ]
    lines = ["| stage | seconds |", "|---|---:|"]
    lines += [f"| {label} | {result[key]:.2f} |" for label, key in stages]
    lines.append(f"| **import + quantize + `glensidec compile`** (limit {LIMIT_SECONDS:.0f} s) "
                 f"| **{result['total_s']:.2f}** |")
    lines.append(f"| (one interpreter run, float program) | {result['float_run_s']:.2f} |")
    lines.append(f"| (one interpreter run, int8 program) | {result['int8_run_s']:.2f} |")
    return lines


def cycle_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| layer (weights) | product M×K×N as written | array call M×K×N | predicted "
             "cycles | T_min | predicted / T_min | SCALE-Sim WS | predicted / SCALE-Sim |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        p, c = row["product"], row["call"]
        lines.append(f"| {row['layer']} | {p.m}×{p.k}×{p.n} | {c.m}×{c.k}×{c.n} | "
                     f"{c.cycles:,} | {row['t_min']:,} | {c.cycles / row['t_min']:.4f} | "
                     f"{row['scalesim']:,} | {c.cycles / row['scalesim']:.3f} |")
    cycles = sum(row["call"].cycles for row in rows)
    t_min = sum(row["t_min"] for row in rows)
    scalesim = sum(row["scalesim"] for row in rows)
    lines.append(f"| **total ({len(rows)} layers)** | | | **{cycles:,}** | **{t_min:,}** | "
                 f"**{cycles / t_min:.4f}** | **{scalesim:,}** | **{cycles / scalesim:.3f}** |")
    return lines


def error_table(errors: dict[str, list[LayerError]]) -> list[str]:
    schemes = list(errors)
    lines = [f"## Per-layer error of the int8 program ({ERROR_SAMPLES} samples)", "",
             "Worst |error| over the samples in output LSBs of each layer (its own step), "
             "`quant_report.layer_errors`: **end-to-end** (the int8 program against the float "
             "program), **isolated** (the layer alone, fed the dequantized int8 values of the "
             "layers before it), **arithmetic** (as isolated, with the dequantized int8 "
             "weights), **in range** (arithmetic over the elements whose float value the "
             "layer's i8 range can represent: above 0.5 LSB, arithmetic is saturation). The "
             "interpreter, the C program and the RTL compute the same integers "
             "(tests/test_models_cosim.py), so these are the errors of all three.", "",
             "| layer | " + " | ".join(f"{s}: end-to-end / isolated / arithmetic / in range"
                                      for s in schemes) + " |",
             "|---|" + "---|" * len(schemes)]
    for index, first in enumerate(errors[schemes[0]]):
        cells = [f"{e.end_to_end:.2f} / {e.isolated:.2f} / {e.arithmetic:.2f} / "
                 f"{e.arithmetic_in_range:.2f}"
                 for e in (errors[s][index] for s in schemes)]
        lines.append(f"| {first.name} | " + " | ".join(cells) + " |")
    for scheme in schemes:
        layers = errors[scheme][1:]  # the input is rounding only
        within = sum(1 for e in layers if e.isolated <= 2.0)
        lines.append("")
        lines.append(f"{scheme}: isolated ≤ 2 LSB in {within} of {len(layers)} layers (worst "
                     f"{max(e.isolated for e in layers):.2f}); end-to-end worst "
                     f"{max(e.end_to_end for e in layers):.2f}; arithmetic worst "
                     f"{max(e.arithmetic for e in layers):.2f}, inside the i8 range "
                     f"{max(e.arithmetic_in_range for e in layers):.2f}.")
    return [*lines, ""]


def report(result: dict[str, Any]) -> str:
    return "\n".join([
        "# ResNet-18 from ONNX to C (random weights, 1×3×224×224)",
        "",
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; `python bench/bench_import.py`; array "
        f"{ARRAY.rows}×{ARRAY.cols} int8. Compile stages are measured through the API "
        "(`pipeline.compile_program`, `pipeline.compile_to_directory`); the total uses the "
        "CLI run.",
        "",
        *stage_table(result),
        "",
        f"Mapping: {result['products']} int8 products (every convolution and the classifier), "
        f"{len(result['rows'])} array calls, {result['unmapped']} products left on the host. "
        f"C program (`OUTDIR/model`) equal to the int8 interpreter on a fresh input: "
        f"{'yes' if result['c_equals_interpreter'] else 'NO'}.",
        "",
        f"int8 against float on a fresh input: max |error| = {result['relative_error']:.4f} "
        f"of the output range ({result['output_lsb']:.1f} output LSB); random weights, "
        f"{CALIBRATION_SAMPLES} calibration samples.",
        "",
        f"{int(result['parameters']):,} float parameters; {int(result['layers'])} quantized "
        f"layers; program text {int(result['program_bytes']):,} bytes.",
        "",
        f"## Predicted array cycles per layer ({ARRAY.rows}×{ARRAY.cols})",
        "",
        "`predicted` is `hardware.gemm_cycles` of the call the compiled program makes (exact "
        "against the RTL, bench/results/array.md); T_min (double-buffered bound) and "
        "SCALE-Sim WS are for the product as written, in its better operand orientation, "
        "unpadded. The stem's K = 147 is padded to 160 and the classifier's single column "
        "to 16 (it streams the 1000 weight rows through the held activations).",
        "",
        *cycle_table(result["rows"]),
        "",
        *(error_table(result["errors"]) if "errors" in result else []),
    ])


def failures(result: dict[str, Any]) -> list[str]:
    found = []
    if result["total_s"] > LIMIT_SECONDS:
        found.append(f"import + quantize + compile took {result['total_s']:.1f} s")
    if result["unmapped"] or len(result["rows"]) < result["products"]:
        found.append("a product is left on the host")
    if not result["c_equals_interpreter"]:
        found.append("the C program differs from the interpreter")
    return found


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), errors=True)
    text = report(result)
    out = REPO / "bench" / "results" / "import.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(text)
    problems = failures(result)
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
