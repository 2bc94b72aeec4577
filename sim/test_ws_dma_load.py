"""pytest entry for ws_dma_load: row widths, bus widths (bandwidth), memory latencies and
rows a write carries (WRITE_ROWS: groups of rows that lie end to end)."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

CASES = [(16, 16, 5, 1), (16, 8, 2, 1), (4, 8, 1, 1), (16, 64, 3, 4), (4, 8, 2, 2)]


@pytest.mark.parametrize(("row_bytes", "bus_bytes", "latency", "write_rows"), CASES,
                         ids=lambda v: str(v))
def test_ws_dma_load(row_bytes: int, bus_bytes: int, latency: int, write_rows: int) -> None:
    parameters = {"ROW_BYTES": row_bytes, "BUS_BYTES": bus_bytes, "LATENCY": latency,
                  "SPAD_W": 10, "WRITE_ROWS": write_rows}
    name = f"ws_dma_load_{row_bytes}_{bus_bytes}_{latency}_{write_rows}"
    runner = build_module("ws_dma_load", name, parameters)
    run_cocotb(runner, "ws_dma_load", "cocotb_ws_dma_load", "random_sequences",
               params_env(parameters))
