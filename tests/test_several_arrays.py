"""Several arrays in one program (issue 13 item 3), as far as it is built: `--array
R1xC1,R2xC2`, user-written arrays of several sizes, the extractor's choice per product and
the cycles predicted per array, and the C and the co-simulation of programs on several
arrays.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, assert_calls_match_the_model, compile_and_cosimulate

from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig, gemm_cycles
from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.opt.extract import parse_arrays, validate
from glensidec.pipeline import compile_program

GLENSIDE = EXAMPLES / "glenside"
# not beside the other examples: it needs --array 2x4,4x6,6x2, not one size
WRITTEN = (GLENSIDE / "several" / "mlp_arrays.glenside", GLENSIDE / "several" / "mlp_arrays.json")


def test_array_lists_parse() -> None:
    assert parse_arrays("2x4,4x6, 6x2") == (ArrayConfig(2, 4), ArrayConfig(4, 6),
                                             ArrayConfig(6, 2))
    assert parse_arrays("2x4,4x6:f32") == (ArrayConfig.f32(2, 4), ArrayConfig.f32(4, 6))
    assert parse_arrays("4x4,4x4") == (ArrayConfig(4, 4),)
    for bad, why in (("2x4,", "separated by commas"), ("2x4:f32,4x6:i8", "one element type")):
        with pytest.raises(GlensideError, match=why):
            parse_arrays(bad)


def test_codegen_mlp_runs_on_its_three_arrays_with_cycles_per_array() -> None:
    program = read_program(*WRITTEN)
    configs = parse_arrays("2x4,4x6,6x2")
    compiled = compile_program(program, configs[0], more_arrays=configs[1:])
    calls = compiled.prediction.invocations
    assert [(c.rows, c.cols) for c in calls] == [(2, 4), (4, 6), (6, 2)]
    for call in calls:  # each call costs what its own array takes
        config = ArrayConfig(call.rows, call.cols)
        assert call.cycles == gemm_cycles(config, call.m, call.k, call.n)
    per_array = compiled.prediction.per_array()
    assert per_array == {(c.rows, c.cols): (1, c.cycles) for c in calls}
    validate(program, compiled.program, seeds=(0, 1))
    lines = list(compiled.report_lines(configs[0]))
    assert f"array 4x6: 1 calls, {calls[1].cycles} cycles" in lines


def test_a_written_array_missing_from_the_list_is_a_located_error() -> None:
    program = read_program(*WRITTEN)
    with pytest.raises(GlensideError) as raised:
        compile_program(program, *parse_arrays("2x4,6x2"))
    message = str(raised.value)
    assert "mlp_arrays.glenside:" in message and "a 4x6 array" in message
    assert "--array 2x4" in message


def test_the_extractor_picks_an_array_per_product() -> None:
    """With a small and a large array offered, each layer goes to one of them, and the
    program is predicted no slower than on either array alone."""
    program = read_program(GLENSIDE / "matmul.glenside", GLENSIDE / "matmul.json")
    small, large = parse_arrays("2x2,16x16")
    both = compile_program(program, small, more_arrays=(large,))
    alone = [compile_program(program, config) for config in (small, large)]
    assert both.prediction.array_cycles <= min(c.prediction.array_cycles for c in alone)
    assert {(c.rows, c.cols) for c in both.prediction.invocations} <= {(2, 2), (16, 16)}


def _bits(values: np.ndarray) -> np.ndarray:
    return values.view(np.uint32) if values.dtype == np.float32 else values


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize(("program_path", "shapes", "arrays", "expected_arrays"), [
    # Glenside's codegen_mlp: three f32 layers on a 2x4, a 4x6 and a 6x2 array
    (*WRITTEN, "2x4,4x6,6x2:f32", ["2x4", "4x6", "6x2"]),
    # the int8 CNN, its convolution and its dense layer on arrays of different shapes
    (EXAMPLES / "small_cnn.gs", None, "2x8,8x2", ["2x8", "8x2"]),
], ids=["codegen_mlp-f32", "small_cnn-int8"])
def test_several_arrays_run_three_ways(program_path: Path, shapes: Path | None, arrays: str,
                                       expected_arrays: list[str], tmp_path: Path,
                                       sim_cache: Path) -> None:
    """The C calls each array on its own size and `make sim` runs every call on the RTL of
    its array: interpreter == C == RTL in bits, every call's cycles as predicted, and the
    simulated total is the sum over the arrays."""
    program = read_program(program_path, shapes)
    configs = parse_arrays(arrays)
    compiled = compile_program(program, configs[0], more_arrays=configs[1:])
    inputs = random_inputs(program, seed=5)
    expected = run_program(compiled.program, all_tensors(compiled.program, inputs),
                           compiled.types)
    run = compile_and_cosimulate(program_path, arrays, inputs, tmp_path, sim_cache, shapes)
    assert np.array_equal(_bits(run.c), _bits(expected))
    assert np.array_equal(_bits(run.sim), _bits(expected))
    calls = run.report["calls"]
    assert [call["array"] for call in calls] == expected_arrays
    assert [call["predicted_cycles"] for call in calls] == [
        invocation.cycles for invocation in compiled.prediction.invocations]
    assert_calls_match_the_model(run.report)
    total = sum(invocation.cycles for invocation in compiled.prediction.invocations)
    assert f"simulated cycles of {len(calls)} array calls: {total} (predicted {total})" \
        in run.log
    # glensidec diff --rtl: one co-simulation per array, each traced and compared on its own
    # (the builds above are reused through the cache)
    arguments = [f"{name}={tmp_path / f'{name}.npy'}" for name in inputs]
    diff = subprocess.run([sys.executable, "-m", "glensidec", "diff", str(tmp_path / "out"),
                           *arguments, "--rtl"], capture_output=True, text=True,
                          env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    assert diff.returncode == 0, diff.stdout + diff.stderr
    for array in expected_arrays:
        assert f"RTL co-simulation ({array} array on the RTL)" in diff.stdout
