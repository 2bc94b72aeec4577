"""pytest entry for ws_epilogue: one and several columns, int8 and a narrower output."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

CASES = [(16, 8), (3, 4)]


@pytest.mark.parametrize(("cols", "out_width"), CASES, ids=lambda v: str(v))
def test_ws_epilogue(cols: int, out_width: int) -> None:
    parameters = {"COLS": cols, "OUT_W": out_width}
    runner = build_module("ws_epilogue", f"ws_epilogue_{cols}_{out_width}", parameters)
    run_cocotb(runner, "ws_epilogue", "cocotb_ws_epilogue", "random_rows", params_env(parameters))
