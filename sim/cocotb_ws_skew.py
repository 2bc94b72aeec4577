"""cocotb test of ws_skew, cycle by cycle against models.SkewModel."""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack
from models import SkewModel


@cocotb.test()
async def random_cycles(dut: Any) -> None:
    """Random data, enable and reset for 1000 cycles; every lane checked every cycle."""
    lanes, width, reverse = params()["LANES"], params()["WIDTH"], params()["REVERSE"]
    model = SkewModel(lanes, bool(reverse))
    rng = np.random.default_rng(lanes * 2 + reverse)
    dut.rst.value = 1
    await start_clock(dut)
    await next_cycle(dut)
    for cycle in range(1000):
        din = [int(v) for v in rng.integers(0, 1 << width, lanes)]
        en, rst = rng.random() < 0.8, rng.random() < 0.01
        dut.din.value = pack(din, width)
        dut.en.value, dut.rst.value = int(en), int(rst)
        await settle()
        got = unpack(read(dut.dout), lanes, width, signed=False).tolist()
        assert got == model.output(din), f"cycle {cycle}: {got} != {model.output(din)}"
        await next_cycle(dut)
        if rst:
            model.reset()
        else:
            model.step(en, din)
