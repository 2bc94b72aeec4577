"""pytest entry for ws_ctrl on a few array shapes and accumulator depths."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

#: (rows, cols, accumulator rows, weight rows a beat)
CASES = [(2, 2, 2, 1), (4, 8, 16, 1), (16, 16, 1024, 1), (16, 16, 64, 4), (4, 4, 16, 4),
         (8, 4, 16, 2)]


@pytest.mark.parametrize(("rows", "cols", "depth", "load"), CASES, ids=lambda v: str(v))
def test_ws_ctrl(rows: int, cols: int, depth: int, load: int) -> None:
    parameters = {"ROWS": rows, "COLS": cols, "ACC_DEPTH": depth,
                  **({"W_LOAD": load} if load > 1 else {})}
    runner = build_module("ws_ctrl", f"ws_ctrl_{rows}_{cols}_{depth}_{load}", parameters)
    run_cocotb(runner, "ws_ctrl", "cocotb_ws_ctrl", "random_cycles", params_env(parameters))
