"""pytest entry for ws_array on every array shape."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import ARRAY_SHAPES, build_module, run_cocotb, shape_id


@pytest.mark.parametrize("shape", ARRAY_SHAPES, ids=shape_id)
def test_ws_array(shape: tuple[int, int]) -> None:
    parameters = {"ROWS": shape[0], "COLS": shape[1]}
    runner = build_module("ws_array", f"ws_array_{shape_id(shape)}", parameters)
    run_cocotb(runner, "ws_array", "cocotb_ws_array", "random_cycles", params_env(parameters))


@pytest.mark.parametrize("shape_load", [(8, 4, 4), (4, 3, 2), (4, 2, 4)], ids=str)
def test_ws_array_weight_rows_a_beat(shape_load: tuple[int, int, int]) -> None:
    """W_LOAD weight rows a beat: each chain takes the row W_LOAD above it."""
    rows, cols, load = shape_load
    parameters = {"ROWS": rows, "COLS": cols, "W_LOAD": load}
    runner = build_module("ws_array", f"ws_array_{rows}x{cols}_l{load}", parameters)
    run_cocotb(runner, "ws_array", "cocotb_ws_array", "random_cycles", params_env(parameters))
