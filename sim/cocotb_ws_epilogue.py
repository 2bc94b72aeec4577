"""cocotb test of ws_epilogue: every output every cycle against accel.epilogue_reference.

Random accumulators (with the extremes), biases, per-column multipliers and shifts as
the quantizer makes them, random pooling merges, input gaps and back-pressure; the
two-stage pipeline is modelled here (a row accepted in cycle t leaves in t + 2, a
waiting result freezes both stages).
"""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack

from glensidec.hardware.accel import EPILOGUE_LATENCY, EpilogueConfig, epilogue_reference

ACC_W = 32


def random_config(rng: np.random.Generator, out_width: int) -> EpilogueConfig:
    low_limit, high_limit = -(1 << (out_width - 1)), (1 << (out_width - 1)) - 1
    zero_point = int(rng.integers(low_limit, high_limit + 1))
    low, high = sorted(int(v) for v in rng.integers(low_limit, high_limit + 1, 2))
    if rng.random() < 0.3:  # ReLU as the quantizer writes it: clip at the zero point
        low, high = zero_point, high_limit
    return EpilogueConfig(pre=int(rng.integers(0, 4)), post=int(rng.integers(0, 63)),
                          zero_point=zero_point, low=low, high=high)


def apply_config(dut: Any, config: EpilogueConfig, out_width: int) -> None:
    mask = (1 << out_width) - 1
    dut.cfg_pre.value, dut.cfg_post.value = config.pre, config.post
    dut.cfg_zero_point.value = config.zero_point & mask
    dut.cfg_low.value, dut.cfg_high.value = config.low & mask, config.high & mask


@cocotb.test()
async def random_rows(dut: Any) -> None:
    """Random rows, configurations, gaps and stalls for 2000 cycles."""
    cols, out_width = params()["COLS"], params()["OUT_W"]
    rng = np.random.default_rng(cols * 100 + out_width)
    pipeline: list[tuple[bool, np.ndarray]] = [(False, np.zeros(cols, np.int64))] * 2
    config = random_config(rng, out_width)
    apply_config(dut, config, out_width)
    dut.rst.value = 1
    await start_clock(dut)
    await next_cycle(dut)
    dut.rst.value = 0
    delivered = 0
    for cycle in range(2000):
        draining = cycle % 400 < EPILOGUE_LATENCY  # a new store starts after the drain
        if cycle % 400 == EPILOGUE_LATENCY:  # configuration changes only between stores
            config = random_config(rng, out_width)
            apply_config(dut, config, out_width)
        acc = rng.integers(-(2**31), 2**31, cols)
        acc = np.where(rng.random(cols) < 0.1, rng.choice([-(2**31), 2**31 - 1], cols), acc)
        bias = rng.integers(-(2**20), 2**20, cols)
        mult = rng.integers(-(2**31) + 1, 2**31, cols)
        prev = rng.integers(-(1 << (out_width - 1)), 1 << (out_width - 1), cols)
        valid, pool, ready = rng.random() < 0.8, rng.random() < 0.3, rng.random() < 0.8
        valid, ready = valid and not draining, ready or draining
        dut.in_valid.value, dut.in_pool.value = int(valid), int(pool)
        dut.out_ready.value = int(ready)
        dut.in_data.value, dut.in_bias.value = pack(acc, ACC_W), pack(bias, ACC_W)
        dut.in_mult.value, dut.in_prev.value = pack(mult, 32), pack(prev, out_width)
        await settle()
        out_valid, expected = pipeline[1]
        enable = not (out_valid and not ready)
        assert read(dut.in_ready) == int(enable), f"cycle {cycle}: in_ready"
        assert read(dut.out_valid) == int(out_valid), f"cycle {cycle}: out_valid"
        if out_valid:
            got = unpack(read(dut.out_data), cols, out_width)
            assert np.array_equal(got, expected), f"cycle {cycle}: {got} != {expected}"
            delivered += int(ready)
        await next_cycle(dut)
        if enable:
            row = epilogue_reference(acc, bias, mult, config, out_width)
            if pool:
                row = np.maximum(row, prev)
            pipeline = [(valid, row), pipeline[0]]
    assert delivered > 800
