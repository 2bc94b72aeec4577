"""Real models through all three executors: interpreter == generated C == co-simulation.

Each ONNX network of tests/test_import.py (MLP, LeNet, ResNet basic block, MobileNet block)
is imported, quantized on synthetic calibration data, compiled with `glensidec compile
--array 8x8 -o OUTDIR`, built with `make -C OUTDIR`, run as `OUTDIR/model` and
co-simulated with `make -C OUTDIR sim`. The three results must be the same integers, every
convolution and dense layer must run on the array (no i8 dot-product left on the host in
the extracted program, array calls in the co-simulation report) and every array call must
take exactly its predicted cycles. One ResNet-18 layer (layer4's 3×3 512→512 convolution
with batch-norm and ReLU, 7×7) goes the same way on a 16×16 array. The Verilator builds
are shared through GLENSIDEC_SIM_CACHE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_import import MODELS, OnnxGraph, imported
from test_quantize import SCHEMES, calibration_for, sample_list

from glensidec.frontends.quantize import QuantizedProgram, quantize, save_quantized
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import ComputeOp, Program, postorder
from glensidec.lang.typecheck import check_program
from glensidec.opt.extract import compile_program, parse_array_size, unmapped_products

Array = np.ndarray[Any, Any]


@pytest.fixture(scope="module")
def sim_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim_cache")


def run(words: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(words, capture_output=True, text=True, timeout=900, check=False,
                          **options)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def products(program: Program) -> int:
    """The dot-products (convolutions and dense layers, depthwise too) of a program."""
    return sum(1 for term in postorder(program.root) if term.op == "compute"
               and isinstance(term.args[0], ComputeOp) and term.args[0].name == "dot-product")


def check_mapped(program: Program, array: str) -> int:
    """Compile as the CLI does; no i8 product may stay on the host. Returns the array calls."""
    compiled = compile_program(program, parse_array_size(array))
    types = check_program(compiled.program)
    assert not unmapped_products(compiled.program.root, types, "i8")
    return len(compiled.prediction.invocations)


def three_executors(quantized: QuantizedProgram, sample: dict[str, Array], array: str,
                    workdir: Path, sim_cache: Path) -> tuple[Array, Array, Array, dict[str, Any]]:
    """(interpreter, C, co-simulation) results of the saved int8 program, and the report."""
    program_path = save_quantized(quantized, workdir / "model.q.gs")
    program = read_program(program_path)
    outdir = workdir / "out"
    run([sys.executable, "-m", "glensidec", "compile", str(program_path), "--array", array,
         "-o", str(outdir)])
    inputs = quantized.quantize_inputs(sample)
    arguments = []
    for name, value in inputs.items():
        np.save(workdir / f"{name}.npy", value)
        arguments.append(f"{name}={workdir / f'{name}.npy'}")
    run(["make", "-s", "-C", str(outdir), "OPT=-O1"])
    run([str(outdir / "model"), *arguments, "-o", str(workdir / "c.npy")])
    run(["make", "-C", str(outdir), "sim", f"INPUTS={' '.join(arguments)}",
         f"OUTPUT={workdir / 'sim.npy'}"],
        env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    expected = run_program(program, {**load_weights(program), **inputs})
    report = json.loads((outdir / "cosim_report.json").read_text())
    return expected, np.load(workdir / "c.npy"), np.load(workdir / "sim.npy"), report


def check_agreement(quantized: QuantizedProgram, sample: dict[str, Array], array: str,
                    workdir: Path, sim_cache: Path) -> dict[str, Any]:
    expected, c_result, sim_result, report = three_executors(quantized, sample, array, workdir,
                                                             sim_cache)
    assert expected.dtype == np.int8
    np.testing.assert_array_equal(c_result, expected)
    np.testing.assert_array_equal(sim_result, expected)
    assert report["status"] == 0
    for call in report["calls"]:
        assert call["data_ok"] and call["simulated_cycles"] == call["predicted_cycles"]
    calls = check_mapped(quantized.program, array)
    assert len(report["calls"]) == calls >= products(quantized.program) > 0
    return report


@pytest.mark.parametrize("scheme", ["per-channel-symmetric", "per-tensor-asymmetric"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantized_network_is_bit_exact_in_all_three_executors(name: str, scheme: str,
                                                               tmp_path: Path,
                                                               sim_cache: Path) -> None:
    per_channel, symmetric = SCHEMES[scheme]
    program = imported(MODELS[name](), tmp_path, name)
    calibration = calibration_for(program, 8)
    quantized = quantize(program, calibration, per_channel, symmetric)
    check_agreement(quantized, sample_list(calibration, 1)[0], "8x8", tmp_path, sim_cache)


def resnet18_layer4_conv(seed: int = 3) -> Any:
    """ResNet-18's layer4 3×3 convolution (512→512, pad 1, 7×7) with batch-norm and ReLU,
    built as bench/bench_import.py builds it (random weights)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 512, 7, 7])
    y = g.node("Relu", [g.bn(g.conv(x, 512, 512, 3, 1, 1, bias=False), 512)])
    return g.model(y, [1, 512, 7, 7])


def test_a_resnet18_layer_cosimulates_bit_exactly(tmp_path: Path, sim_cache: Path) -> None:
    program = imported(resnet18_layer4_conv(), tmp_path, "layer4")
    calibration = calibration_for(program, 4)
    quantized = quantize(program, calibration, per_channel=True)
    report = check_agreement(quantized, sample_list(calibration, 1)[0], "16x16", tmp_path,
                             sim_cache)
    (call,) = report["calls"]
    # The im2col matrix of the layer: 7·7 positions, 512·3·3 taps, 512 filters.
    assert (call["m"], call["k"], call["n"]) == (49, 4608, 512), call
