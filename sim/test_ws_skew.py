"""pytest entry for ws_skew: both directions, one lane and several."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

CASES = [(1, 8, 0), (5, 9, 0), (5, 9, 1), (16, 32, 1)]


@pytest.mark.parametrize(("lanes", "width", "reverse"), CASES, ids=lambda v: str(v))
def test_ws_skew(lanes: int, width: int, reverse: int) -> None:
    parameters = {"LANES": lanes, "WIDTH": width, "REVERSE": reverse}
    runner = build_module("ws_skew", f"ws_skew_{lanes}_{width}_{reverse}", parameters)
    run_cocotb(runner, "ws_skew", "cocotb_ws_skew", "random_cycles", params_env(parameters))
