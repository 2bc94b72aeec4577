"""pytest entry for ws_accum."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb


@pytest.mark.parametrize(("cols", "depth"), [(4, 8), (16, 64)], ids=lambda v: str(v))
def test_ws_accum(cols: int, depth: int) -> None:
    parameters = {"COLS": cols, "ACC_DEPTH": depth}
    runner = build_module("ws_accum", f"ws_accum_{cols}_{depth}", parameters)
    run_cocotb(runner, "ws_accum", "cocotb_ws_accum", "random_cycles", params_env(parameters))
