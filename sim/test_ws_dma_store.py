"""pytest entry for ws_dma_store: row widths and bus widths."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

CASES = [(16, 8), (4, 8)]


@pytest.mark.parametrize(("row_bytes", "bus_bytes"), CASES, ids=lambda v: str(v))
def test_ws_dma_store(row_bytes: int, bus_bytes: int) -> None:
    parameters = {"ROW_BYTES": row_bytes, "BUS_BYTES": bus_bytes}
    runner = build_module("ws_dma_store", f"ws_dma_store_{row_bytes}_{bus_bytes}", parameters)
    run_cocotb(runner, "ws_dma_store", "cocotb_ws_dma_store", "random_sequences",
               params_env(parameters))
