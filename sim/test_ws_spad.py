"""pytest entry for ws_spad: a few row widths, bank counts, depths and rows a write
carries (WRITE_ROWS: interleaved sub-banks)."""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

#: (row bytes, banks, bank rows, rows a write, rows port 0 reads at once)
CASES = [(4, 4, 8, 1, 1), (16, 2, 32, 1, 1), (4, 4, 8, 4, 1), (16, 2, 32, 2, 1),
         (4, 4, 8, 4, 4), (4, 4, 8, 1, 4), (8, 2, 16, 4, 2)]


@pytest.mark.parametrize(("row_bytes", "banks", "bank_rows", "write_rows", "load"), CASES,
                         ids=lambda v: str(v))
def test_ws_spad(row_bytes: int, banks: int, bank_rows: int, write_rows: int,
                 load: int) -> None:
    parameters = {"ROW_BYTES": row_bytes, "BANKS": banks, "BANK_ROWS": bank_rows,
                  "WRITE_ROWS": write_rows, **({"W_LOAD": load} if load > 1 else {})}
    name = f"ws_spad_{row_bytes}_{banks}_{bank_rows}_{write_rows}_{load}"
    runner = build_module("ws_spad", name, parameters)
    run_cocotb(runner, "ws_spad", "cocotb_ws_spad", "random_cycles", params_env(parameters))
