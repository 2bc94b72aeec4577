"""Real models through all three executors: interpreter == generated C == co-simulation.

Each ONNX network of tests/onnx_models.py (MLP, LeNet, ResNet basic block, MobileNet block)
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

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_calls_match_the_model, compile_and_cosimulate
from onnx_models import MODELS, OnnxGraph, imported
from test_quantize import SCHEMES, calibration_for, lut_block, sample_list

from glensidec.frontends.quantize import QuantizedProgram, quantize, save_quantized
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program, compute_name, postorder
from glensidec.lang.typecheck import check_program
from glensidec.opt.extract import parse_array_size, unmapped_products
from glensidec.pipeline import compile_program

Array = np.ndarray[Any, Any]

# Every test here builds C and co-simulates it on the Verilog array.
pytestmark = [pytest.mark.slow, pytest.mark.rtl]


def products(program: Program) -> int:
    """The dot-products (convolutions and dense layers, depthwise too) of a program."""
    return sum(1 for term in postorder(program.root) if compute_name(term) == "dot-product")


def check_mapped(program: Program, array: str) -> int:
    """Compile as the CLI does; no i8 product may stay on the host. Returns the array calls."""
    compiled = compile_program(program, parse_array_size(array))
    types = check_program(compiled.program)
    assert not unmapped_products(compiled.program.root, types, "i8")
    return len(compiled.prediction.invocations)


def check_agreement(quantized: QuantizedProgram, sample: dict[str, Array], array: str,
                    workdir: Path, sim_cache: Path) -> dict[str, Any]:
    """Interpreter, C and co-simulation of the saved int8 program give the same integers;
    returns the co-simulation report."""
    program_path = save_quantized(quantized, workdir / "model.q.gs")
    program = read_program(program_path)
    inputs = quantized.quantize_inputs(sample)
    run = compile_and_cosimulate(program_path, array, inputs, workdir, sim_cache,
                                 options=("--bare-array",))
    expected = run_program(program, {**load_weights(program), **inputs})
    assert expected.dtype == np.int8
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)
    assert_calls_match_the_model(run.report)
    calls = check_mapped(quantized.program, array)
    assert len(run.report["calls"]) == calls >= products(quantized.program) > 0
    return run.report


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


def test_lookup_tables_and_gates_cosimulate_bit_exactly(tmp_path: Path, sim_cache: Path) -> None:
    """SiLU, a squeeze-and-excitation gate, HardSwish, tanh, erf and exp in int8: the
    lookup tables and activation products run on the host, the convolutions on the array;
    the three executors give the same integers."""
    program = imported(lut_block(), tmp_path, "lut")
    calibration = calibration_for(program, 8)
    quantized = quantize(program, calibration, per_channel=True, symmetric_activations=False)
    check_agreement(quantized, sample_list(calibration, 1)[0], "8x8", tmp_path, sim_cache)
