"""pytest entry for ws_top (through tb_ws_gemm) on every array shape, built once each."""

from __future__ import annotations

from typing import Any

import pytest
from sim_harness import ARRAY_SHAPES, array_env, build_module, run_cocotb, shape_id

from glensidec.cosim.rtl_build import GEMM_TESTBENCH, GemmBenchDepths
from glensidec.hardware.array import ArrayConfig

#: A small accumulator so the tests also cover M chunks (M > acc_depth with K folds).
ACC_DEPTH = 32
DEPTHS = GemmBenchDepths(
    weight_beats=4096, activation_rows=4096, tiles=1024, d_rows=4096, result_rows=4096
)
CASES = [
    "random_exact_timing",
    "extreme_values",
    "gaps_and_backpressure",
    "reset_mid_tile",
    "vpi_transfer",
]


@pytest.fixture(scope="module", params=ARRAY_SHAPES, ids=shape_id)
def gemm_bench(request: pytest.FixtureRequest) -> tuple[ArrayConfig, Any]:
    rows, cols = request.param
    config = ArrayConfig(rows, cols, acc_depth=ACC_DEPTH)
    runner = build_module(
        GEMM_TESTBENCH,
        f"{GEMM_TESTBENCH}_{rows}x{cols}",
        DEPTHS.parameters(config),
        testbench=GEMM_TESTBENCH,
    )
    return config, runner


@pytest.mark.parametrize("case", CASES)
def test_ws_top(gemm_bench: tuple[ArrayConfig, Any], case: str) -> None:
    config, runner = gemm_bench
    run_cocotb(runner, GEMM_TESTBENCH, "cocotb_ws_top", case, array_env(config))
