"""cocotb test of ws_accum, cycle by cycle against a dictionary of accumulator rows."""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack

from glensidec.lang.dtypes import wrap_signed

ACC_W = 32


@cocotb.test()
async def random_cycles(dut: Any) -> None:
    """Stores, adds and emits in random order; outputs checked every cycle."""
    cols, depth = params()["COLS"], params()["ACC_DEPTH"]
    rng = np.random.default_rng(cols * 10 + depth)
    stored: dict[int, np.ndarray] = {}
    await start_clock(dut)
    emitted = 0
    for cycle in range(3000):
        row = int(rng.integers(0, depth))
        data = rng.integers(-(2**31), 2**31, cols)
        data = np.where(rng.random(cols) < 0.3, rng.choice([-(2**31), 2**31 - 1, -1], cols), data)
        valid, emit, en = rng.random() < 0.8, rng.random() < 0.4, rng.random() < 0.9
        add = row in stored and rng.random() < 0.7  # the memory is read only after a write
        for name, value in (("in_valid", valid), ("in_emit", emit), ("en", en), ("in_add", add)):
            getattr(dut, name).value = int(value)
        dut.in_row.value, dut.in_data.value = row, pack(data, ACC_W)
        await settle()
        total = wrap_signed(data + (stored[row] if add else 0), ACC_W)
        assert read(dut.r_valid) == int(valid and emit), f"cycle {cycle}: r_valid"
        if valid and emit:
            got = unpack(read(dut.r_data), cols, ACC_W)
            assert np.array_equal(got, total), f"cycle {cycle}: {got} != {total}"
            emitted += 1
        await next_cycle(dut)
        if en and valid and not emit:
            stored[row] = total
    assert emitted > 500
