"""A network NAS made, in int8 on the RTL: the digits CNN with c1, c2 and c3 bottlenecked by
2 (the search's pick in bench/results/nas.md, here with inherited weights, no training) is
quantized, compiled for a 16x16 array, built, run and co-simulated. C, RTL and interpreter
give the same integers, every array call takes exactly its predicted cycles, and the
compiler's end-to-end prediction is the search's estimate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import assert_calls_match_the_model, compile_and_cosimulate

from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.nas import transforms as T
from glensidec.nas.cost import compiled_cost, network_cost, write_graph
from glensidec.nas.graph import lift
from glensidec.opt.extract import parse_array_size

pytestmark = [pytest.mark.slow, pytest.mark.rtl]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_bottlenecked_digits_cnn_is_bit_and_cycle_exact_on_the_rtl(
        tmp_path: Path, sim_cache: Path) -> None:
    program = read_program(EXAMPLES / "digits_cnn.gs")
    graph = lift(program, load_weights(program))
    for layer in ("c1", "c2", "c3"):
        graph = T.bottleneck(graph, layer, 2, init=T.INHERIT)
    config = parse_array_size("16x16")
    assert compiled_cost(graph, config) == network_cost(graph, config)
    with np.load(EXAMPLES / "digits_val.npz") as data:
        images = data["x"][:17, None]
    quantized = quantize(write_graph(graph, tmp_path / "picked.gs"), {"image": images[1:]})
    path = save_quantized(quantized, tmp_path / "picked.q.gs")
    inputs = quantized.quantize_inputs({"image": images[0]})
    run = compile_and_cosimulate(path, "16x16", inputs, tmp_path, sim_cache,
                                 options=("--bare-array",))
    saved = read_program(path)
    expected = run_program(saved, {**load_weights(saved), **inputs})
    np.testing.assert_array_equal(run.c, expected)
    np.testing.assert_array_equal(run.sim, expected)
    assert_calls_match_the_model(run.report)
    assert len(run.report["calls"]) >= 4  # three convolutions and the dense layer
