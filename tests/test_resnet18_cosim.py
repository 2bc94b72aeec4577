"""CI co-simulates a real network: the whole quantized ResNet-18 on ws_accel's RTL.

torchvision's ResNet-18 layer for layer (bench/host_models.py, random weights; no
torchvision needed), imported from ONNX, quantized per channel, compiled with --accel for
a 16×16 array at 16 B/cycle and co-simulated with `make sim`: all 23 accelerator layers
(8 M cycles) run on ws_accel with main memory and the command stream inside the
simulation (rtl/tb/tb_ws_accel_mem.v), every output byte checked against the C model and
numpy and every layer's cycles against the prediction; the program's result (the C
program continuing on numbers the RTL reproduced) must be the interpreter's.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import cosimulate, run_checked, save_inputs
from onnx_models import imported
from test_quantize import calibration_for, sample_list

from glensidec.cosim.runner import Manifest
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.rtl]


def host_models() -> Any:
    """bench/host_models.py: the benchmarks' ResNet-18, built with the tests' OnnxGraph."""
    spec = importlib.util.spec_from_file_location("host_models",
                                                  REPO / "bench" / "host_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_whole_quantized_resnet18_cosimulates_bit_and_cycle_exactly(
        tmp_path: Path, sim_cache: Path) -> None:
    program = imported(host_models().resnet18(), tmp_path, "resnet18")
    calibration = calibration_for(program, 1)
    quantized = quantize(program, calibration, per_channel=True)
    program_path = save_quantized(quantized, tmp_path / "resnet18.q.gs")
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(program_path), "--array",
                 "16x16", "--accel", "--dram-bandwidth", "16", "-o", str(outdir)])
    inputs = quantized.quantize_inputs(sample_list(calibration, 1)[0])
    sim = cosimulate(outdir, save_inputs(inputs, tmp_path), tmp_path / "sim.npy", sim_cache)
    assert sim.report["status"] == 0
    layers = sim.report["calls"]
    manifest = json.loads((outdir / "cosim.json").read_text())
    # the input's layout (a layout layer), the stem, 19 convolutions, 2 pools, the classifier
    assert len(layers) == Manifest.read(outdir).accel_layers == 24
    assert all(layer["data_ok"] and layer["cycles_ok"] for layer in layers), \
        [layer for layer in layers if not (layer["data_ok"] and layer["cycles_ok"])]
    # every layer's cycles as the compiler predicted them (cosim.json: m, k, n, cycles)
    assert [layer["simulated_cycles"] for layer in layers] == \
        [entry[3] for entry in manifest["accel_layers"]]
    assert sum(layer["simulated_cycles"] for layer in layers) > 7_000_000
    expected = run_program(read_program(program_path),
                           {**load_weights(read_program(program_path)), **inputs})
    np.testing.assert_array_equal(sim.result, expected)
