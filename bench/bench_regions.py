"""Big programs: one e-graph for the whole network against one e-graph per product region.

Run alone: `.venv/bin/python bench/bench_regions.py` (writes bench/results/regions.md).
Two int8 networks (random weights, 224×224, per-channel weights, symmetric activations):
ResNet-18 (bench/bench_import.py) and a MobileNet-v1 (13 depthwise-separable blocks). Each
is compiled for a 16×16 array with the CLI's default limits (30 iterations, 50,000 e-nodes,
10 s) both ways: `pipeline.compile_program` (region by region, what `glensidec compile`
does) and the same rules on the whole program in one e-graph. Exits 1 if the region-wise
program leaves a product on the host or differs from the original in the interpreter.
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
sys.path.insert(0, str(REPO / "bench"))

from host_models import resnet18  # noqa: E402
from onnx_models import OnnxGraph  # noqa: E402

from glensidec import pipeline  # noqa: E402
from glensidec.frontends.importer import import_onnx  # noqa: E402
from glensidec.frontends.quantize import quantize, save_quantized  # noqa: E402
from glensidec.hardware import array as hardware  # noqa: E402
from glensidec.lang.syntax import read_program  # noqa: E402
from glensidec.lang.terms import ComputeOp, Program, postorder  # noqa: E402
from glensidec.lang.typecheck import check_program, infer  # noqa: E402
from glensidec.opt import extract, regions  # noqa: E402
from glensidec.opt.rewrite import RULESETS, Limits  # noqa: E402

ARRAY = hardware.ArrayConfig(16, 16)
CLI_LIMITS = Limits(iterations=30, max_enodes=50_000, timeout=10.0)  # `glensidec compile`
BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1),
          (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))  # (out channels, stride)


def mobilenet_v1(seed: int = 0) -> Any:
    """MobileNet-v1 at 224×224: a 3×3/2 stem, 13 depthwise 3×3 + pointwise 1×1 blocks (each
    conv with batch-norm and ReLU6), global average pool, a 1000-way classifier."""
    g = OnnxGraph(seed)
    x = g.input("image", [1, 3, 224, 224])
    low, high = g.const("lo", np.array(0, "f4")), g.const("hi", np.array(6, "f4"))

    def conv_bn_relu6(x: str, cin: int, cout: int, kernel: int, stride: int, group: int) -> str:
        y = g.conv(x, cin, cout, kernel, stride, kernel // 2, group=group, bias=False)
        return str(g.node("Clip", [g.bn(y, cout), low, high]))

    x = conv_bn_relu6(x, 3, 32, 3, 2, 1)
    channels = 32
    for out, stride in BLOCKS:
        x = conv_bn_relu6(x, channels, channels, 3, stride, channels)
        x = conv_bn_relu6(x, channels, out, 1, 1, 1)
        channels = out
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    return g.model(g.gemm(x, 1024, 1000), [1, 1000])


def int8_program(model: Any, workdir: Path) -> Program:
    import onnx

    onnx.save(model, str(workdir / "model.onnx"))
    program = read_program(import_onnx(workdir / "model.onnx", workdir / "float"))
    images = np.random.default_rng(0).standard_normal((2, 1, 3, 224, 224)).astype(np.float32)
    quantized = quantize(program, {"image": images}, per_channel=True,
                         symmetric_activations=True)
    return read_program(save_quantized(quantized, workdir / "model.q.gs"))


def dot_products(root: Any) -> int:
    """Dot-products left on the host (over cartesian products or depthwise pairs)."""
    return sum(1 for term in postorder(root) if term.op == "compute"
               and isinstance(term.args[0], ComputeOp) and term.args[0].name == "dot-product")


def one_egraph(program: Program) -> dict[str, Any]:
    """The whole program in one e-graph, with the same rules, limits and checks."""
    extract.gemm_cycles.cache_clear()  # both ways pay for the cycle model alike
    start = time.perf_counter()
    types = check_program(program)
    products = [t for t in postorder(program.root) if regions.is_product(t)]
    target = extract.array_target(ARRAY)
    graph = extract.new_graph(program, types, products, target, RULESETS)
    name = graph.add(program.root, types)
    stats = graph.saturate(CLI_LIMITS)
    root, _, _ = extract.extract_checked(graph, name, program.tensors, target)
    prediction = extract.predict(root, infer(root, program.tensors))
    return {"regions": 1, "stop": stats.stop_reason, "iterations": stats.iterations,
            "enodes": stats.enodes, "saturate_s": stats.seconds,
            "total_s": time.perf_counter() - start, "array": prediction.array_cycles,
            "host": prediction.host_cycles, "calls": len(prediction.invocations),
            "left": dot_products(root), "products": len(products)}


def by_region(program: Program) -> dict[str, Any]:
    extract.gemm_cycles.cache_clear()
    start = time.perf_counter()
    compiled = pipeline.compile_program(program, ARRAY, CLI_LIMITS)
    total = time.perf_counter() - start
    extract.validate(program, compiled.program)  # raises on any difference
    stats, prediction = compiled.stats, compiled.prediction
    return {"regions": stats.regions, "stop": stats.stop_reason,
            "iterations": stats.iterations, "enodes": stats.enodes,
            "saturate_s": stats.seconds, "total_s": total, "array": prediction.array_cycles,
            "host": prediction.host_cycles, "calls": len(prediction.invocations),
            "left": dot_products(compiled.program.root), "products": stats.regions}


def row(name: str, way: str, result: dict[str, Any]) -> str:
    return (f"| {name} | {way} | {result['regions']} | {result['stop']} | "
            f"{result['iterations']} | {result['enodes']:,} | {result['saturate_s']:.2f} | "
            f"{result['total_s']:.2f} | {result['array']:,} | {result['host']:,} | "
            f"{result['calls']} | {result['left']} of {result['products']} |")


def main() -> int:
    table = ["| network | saturated as | e-graphs | stop | iterations (largest) | e-nodes "
             "(largest e-graph) | saturation (s) | compile (s) | predicted array cycles | "
             "host cycles | array calls | products left on the host |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    left = 0
    for name, build in (("ResNet-18", resnet18), ("MobileNet-v1", mobilenet_v1)):
        with tempfile.TemporaryDirectory() as tmp:  # the weights live here
            program = int8_program(build(), Path(tmp))
            regions = by_region(program)
            table += [row(name, "one e-graph", one_egraph(program)),
                      row(name, "one e-graph per product", regions)]
        left += regions["left"]
    text = "\n".join([
        "# Big programs: one e-graph against one e-graph per product",
        "",
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; `python bench/bench_regions.py`; array "
        f"{ARRAY.rows}×{ARRAY.cols} int8; the CLI's default limits (30 iterations, 50,000 "
        "e-nodes, 10 s: per region, the time shared). int8 networks at 224×224, random weights, "
        "per-channel weights, symmetric activations. `compile`: rules, encoding, "
        "saturation, extraction and checks (no parsing, no C); the region-wise program was "
        "also run against the original in the interpreter (equal). See docs/rewriting.md, "
        "\"Big programs\".",
        "",
        *table,
        "",
    ])
    out = REPO / "bench" / "results" / "regions.md"
    out.write_text(text, encoding="utf-8")
    print(text)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
