"""cocotb test of ws_spad: masked writes, three read ports, bank conflicts, every cycle."""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack


@cocotb.test()
async def random_cycles(dut: Any) -> None:
    """Random writes and reads for 2000 cycles against a dictionary of rows.

    Reads return the row as it was before the same cycle's write (1R1W SRAM); port 1 is
    refused when port 0 or port 2 reads the same bank in the same cycle (ports 0 and 2
    never read one bank at once).
    """
    row_bytes, banks, bank_rows = params()["ROW_BYTES"], params()["BANKS"], params()["BANK_ROWS"]
    depth = banks * bank_rows
    write_rows = int(params().get("WRITE_ROWS", 1))  # rows a write carries (sub-banks)
    w_load = int(params().get("W_LOAD", 1))  # rows port 0 reads at once
    rng = np.random.default_rng(row_bytes * 1000 + depth + 7 * write_rows + 11 * w_load)
    memory: dict[int, np.ndarray] = {}
    await start_clock(dut)
    pending: list[tuple[str, np.ndarray]] = []
    conflicts = checked = 0
    for cycle in range(2000):
        wr_en, rd0_en, rd1_en, rd2_en = (bool(rng.random() < p) for p in (0.7, 0.6, 0.6, 0.4))
        wr_addr, rd0_addr, rd1_addr, rd2_addr = (int(a) for a in rng.integers(0, depth, 4))
        if rng.random() < 0.3:  # provoke conflicts: the same bank on two read ports
            source = rd0_addr if rng.random() < 0.5 else rd2_addr
            rd1_addr = source // bank_rows * bank_rows + int(rng.integers(0, bank_rows))
        # only rows written before are read (an SRAM starts with unknown contents); port 0
        # reads w_load rows from rd0_addr (wrapping), in the banks of its first and last
        rd0_rows = [(rd0_addr + k) % depth for k in range(w_load)]
        rd0_banks = {rd0_rows[0] // bank_rows, rd0_rows[-1] // bank_rows}
        rd0_en = rd0_en and all(row in memory for row in rd0_rows)
        rd1_en = rd1_en and rd1_addr in memory
        rd2_en = rd2_en and rd2_addr in memory and not (
            rd0_en and rd2_addr // bank_rows in rd0_banks)
        # rows wr_addr .. wr_addr + wr_rows - 1 (wrapping), row j in wr_data's j-th row
        wr_rows = int(rng.integers(1, write_rows + 1))
        written = [(wr_addr + j) % depth for j in range(wr_rows)]
        data = rng.integers(0, 256, (write_rows, row_bytes))
        # a row's first write is whole, later ones masked: every byte read back is known
        mask = rng.random(row_bytes) < 0.7 if all(row in memory for row in written) \
            else np.ones(row_bytes, bool)
        for name, value in (("wr_en", wr_en), ("wr_addr", wr_addr), ("wr_rows", wr_rows),
                            ("rd0_en", rd0_en),
                            ("rd0_addr", rd0_addr), ("rd1_en", rd1_en), ("rd1_addr", rd1_addr),
                            ("rd2_en", rd2_en), ("rd2_addr", rd2_addr)):
            getattr(dut, name).value = int(value)
        dut.wr_data.value = pack(data.reshape(-1), 8)
        dut.wr_mask.value = pack(mask.astype(int), 1)
        await settle()
        conflict = rd1_en and ((rd0_en and rd1_addr // bank_rows in rd0_banks) or (
            rd2_en and rd2_addr // bank_rows == rd1_addr // bank_rows))
        assert read(dut.rd1_grant) == int(rd1_en and not conflict), f"cycle {cycle}: grant"
        conflicts += int(conflict)
        for port, expected in pending:  # reads issued in the previous cycle
            got = unpack(read(getattr(dut, f"{port}_data")), expected.size, 8, signed=False)
            assert np.array_equal(got, expected), f"cycle {cycle}: {port} {got} != {expected}"
            checked += 1
        pending = []
        if rd0_en:
            pending.append(("rd0", np.concatenate([memory[row] for row in rd0_rows])))
        if rd1_en and not conflict:
            pending.append(("rd1", memory[rd1_addr].copy()))
        if rd2_en:
            pending.append(("rd2", memory[rd2_addr].copy()))
        if wr_en:
            for j, address in enumerate(written):
                row = memory.get(address, np.zeros(row_bytes, np.int64)).copy()
                row[mask] = data[j][mask]
                memory[address] = row
        await next_cycle(dut)
    assert checked > 1000 and conflicts > 100, (checked, conflicts)
