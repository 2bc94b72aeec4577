"""pytest entry for ws_ctrl on a few array shapes and accumulator depths."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

CASES = [(2, 2, 2), (4, 8, 16), (16, 16, 1024)]


@pytest.mark.parametrize(("rows", "cols", "depth"), CASES, ids=lambda v: str(v))
def test_ws_ctrl(rows: int, cols: int, depth: int) -> None:
    parameters = {"ROWS": rows, "COLS": cols, "ACC_DEPTH": depth}
    runner = build_module("ws_ctrl", f"ws_ctrl_{rows}_{cols}_{depth}", parameters)
    run_cocotb(runner, "ws_ctrl", "cocotb_ws_ctrl", "random_cycles", params_env(parameters))
