"""pytest entry for ws_mul: the epilogue's product widths, and odd and tiny ones."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

# 32×32 and 24×32 (the requantizes), 16×8 (the residual products), 16×5 (an odd b), 3×3
CASES = [(32, 32), (24, 32), (16, 8), (16, 5), (3, 3)]


@pytest.mark.parametrize(("a_width", "b_width"), CASES, ids=lambda v: str(v))
def test_ws_mul(a_width: int, b_width: int) -> None:
    parameters = {"A_W": a_width, "B_W": b_width}
    runner = build_module("ws_mul", f"ws_mul_{a_width}_{b_width}", parameters)
    run_cocotb(runner, "ws_mul", "cocotb_ws_mul", "random_products", params_env(parameters))
