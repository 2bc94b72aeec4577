"""pytest entry for the binary32 ws_top (FP = 1) through tb_ws_gemm, on two small shapes
(a binary32 PE is a lot of logic for Verilator to build: bigger arrays live in bench/)."""

from __future__ import annotations

import pytest
from sim_harness import array_env, build_module, run_cocotb, shape_id

from glensidec.cosim.rtl_build import GEMM_TESTBENCH, GemmBenchDepths
from glensidec.hardware.array import ArrayConfig

DEPTHS = GemmBenchDepths(
    weight_beats=1024, activation_rows=1024, tiles=256, d_rows=1024, result_rows=1024
)


@pytest.mark.parametrize("shape", [(2, 2), (4, 3)], ids=shape_id)
def test_ws_top_f32(shape: tuple[int, int]) -> None:
    config = ArrayConfig.f32(*shape, acc_depth=8)
    runner = build_module(GEMM_TESTBENCH, f"{GEMM_TESTBENCH}_f32_{shape_id(shape)}",
                          DEPTHS.parameters(config), testbench=GEMM_TESTBENCH)
    run_cocotb(runner, GEMM_TESTBENCH, "cocotb_ws_top_f32", "random_gemms", array_env(config))
