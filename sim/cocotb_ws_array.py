"""cocotb test of ws_array, cycle by cycle against models.PeArrayModel.

Every input is random every cycle (activations, bank selects, weight chain, shifts,
commits, top partial sums, enable, reset), so this checks the grid wiring for any
stimulus, not only what ws_ctrl would produce.
"""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, start_clock, unpack
from models import PeArrayModel

IN_W, ACC_W = 8, 32


def random_vector(rng: np.random.Generator, count: int, width: int) -> np.ndarray:
    """Signed values, a third of them at the extremes."""
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    values = rng.integers(lo, hi, count, endpoint=True)
    extremes = rng.choice(np.array([lo, hi, -1, 0]), count)
    return np.where(rng.random(count) < 0.33, extremes, values)


def random_bits(rng: np.random.Generator, count: int, p_one: float = 0.5) -> np.ndarray:
    return (rng.random(count) < p_one).astype(np.int64)


@cocotb.test()
async def random_cycles(dut: Any) -> None:
    """Random stimulus for 600 cycles; psum_bottom checked every cycle."""
    rows, cols = params()["ROWS"], params()["COLS"]
    w_load = int(params().get("W_LOAD", 1))  # weight rows a beat
    model = PeArrayModel(rows, cols, IN_W, ACC_W, w_load)
    rng = np.random.default_rng(rows * 31 + cols + 1000 * (w_load - 1))
    dut.rst.value = 1
    await start_clock(dut)
    await next_cycle(dut)
    for cycle in range(600):
        got = unpack(read(dut.psum_bottom), cols, ACC_W)
        want = model.psum_bottom()
        assert np.array_equal(got, want), f"cycle {cycle}: {got} != {want}"
        inputs = {
            "a_in": random_vector(rng, rows, IN_W),
            "sel_in": random_bits(rng, rows),
            "w_in": random_vector(rng, w_load * cols, IN_W),  # row k at k*cols
            "w_shift": random_bits(rng, cols),
            "w_commit": random_bits(rng, cols, 0.3),
            "w_bank": random_bits(rng, cols),
            "psum_top": random_vector(rng, cols, ACC_W),
        }
        widths = {"a_in": IN_W, "w_in": IN_W, "psum_top": ACC_W}
        for name, values in inputs.items():
            getattr(dut, name).value = pack(values, widths.get(name, 1))
        en, rst = rng.random() < 0.9, rng.random() < 0.01
        dut.en.value, dut.rst.value = int(en), int(rst)
        await next_cycle(dut)
        if rst:
            model.reset()
        else:
            model.step(en, **inputs)
