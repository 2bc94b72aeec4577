"""pytest entry for ws_mul: the epilogue's product widths, and odd and tiny ones."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

# (A_W, B_W, Y_W): 32×32 and 32×24 (the requantizes: x recoded), 16×8 (the residual
# products), 16×5 (an odd b), 3×3; the low 32 bits only of 32×16, 32×17 (the per-row
# products) and 32×8 (the channel scale), and a truncation inside the first row (5×4 to 3)
CASES = [(32, 32, 64), (32, 24, 56), (16, 8, 24), (16, 5, 21), (3, 3, 6),
         (32, 16, 32), (32, 17, 32), (32, 8, 32), (5, 4, 3)]


@pytest.mark.parametrize(("a_width", "b_width", "y_width"), CASES, ids=lambda v: str(v))
def test_ws_mul(a_width: int, b_width: int, y_width: int) -> None:
    parameters = {"A_W": a_width, "B_W": b_width, "Y_W": y_width}
    runner = build_module("ws_mul", f"ws_mul_{a_width}_{b_width}_{y_width}", parameters)
    run_cocotb(runner, "ws_mul", "cocotb_ws_mul", "random_products", params_env(parameters))
