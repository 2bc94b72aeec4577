"""pytest entry for ws_dma_load: row widths, bus widths (bandwidth) and memory latencies."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

CASES = [(16, 16, 5), (16, 8, 2), (4, 8, 1)]


@pytest.mark.parametrize(("row_bytes", "bus_bytes", "latency"), CASES, ids=lambda v: str(v))
def test_ws_dma_load(row_bytes: int, bus_bytes: int, latency: int) -> None:
    parameters = {"ROW_BYTES": row_bytes, "BUS_BYTES": bus_bytes, "LATENCY": latency,
                  "SPAD_W": 10}
    name = f"ws_dma_load_{row_bytes}_{bus_bytes}_{latency}"
    runner = build_module("ws_dma_load", name, parameters)
    run_cocotb(runner, "ws_dma_load", "cocotb_ws_dma_load", "random_sequences",
               params_env(parameters))
