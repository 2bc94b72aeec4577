"""pytest entry for ws_pe: default widths and the narrowest legal accumulator."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

WIDTHS = [(8, 32), (8, 16), (4, 12)]


@pytest.mark.parametrize(("in_w", "acc_w"), WIDTHS, ids=lambda v: str(v))
def test_ws_pe(in_w: int, acc_w: int) -> None:
    parameters = {"IN_W": in_w, "ACC_W": acc_w}
    runner = build_module("ws_pe", f"ws_pe_{in_w}_{acc_w}", parameters)
    run_cocotb(runner, "ws_pe", "cocotb_ws_pe", "random_cycles", params_env(parameters))
