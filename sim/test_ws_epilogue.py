"""pytest entry for ws_epilogue: one and several columns, int8 and a narrower output, every
column its own lane and lanes shared by column groups (a row over several cycles); the
per-row mode where a row has 64 bits (16 and 8 columns of 8 bits)."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

#: (columns, output width, lanes, FIFO rows)
CASES = [(16, 8, 4, 4), (3, 4, 1, 2), (2, 8, 2, 2), (8, 8, 2, 4)]


@pytest.mark.parametrize("case", CASES, ids=lambda v: "-".join(map(str, v)))
def test_ws_epilogue(case: tuple[int, int, int, int]) -> None:
    cols, out_width, lanes, depth = case
    parameters = {"COLS": cols, "OUT_W": out_width, "LANES": lanes, "DEPTH": depth}
    runner = build_module("ws_epilogue", "ws_epilogue_" + "_".join(map(str, case)), parameters)
    run_cocotb(runner, "ws_epilogue", "cocotb_ws_epilogue", "random_rows", params_env(parameters))
