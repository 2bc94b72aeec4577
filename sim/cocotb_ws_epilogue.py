"""cocotb test of ws_epilogue: every output every cycle against accel.epilogue_reference.

Random accumulators (with the extremes), biases, per-column multipliers and shifts as
the quantizer makes them, random lookup tables (an element-wise non-linearity after the
clip), random per-column scales of the biased sums, random residual adds within the
epilogue's ranges (the residual row presented the cycle after its row, as the
scratchpad delivers it), input gaps and back-pressure. The time-multiplexed pipeline
is modelled here (EpiloguePipeline: stage 1, the FIFO of DEPTH rows, COLS / LANES
cycles per row in the lanes, the output register), so in_ready and out_valid are checked
every cycle too. Configurations change only once every row has left, as ws_accel's
CONFIG waits for.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack

from glensidec.hardware.accel import (
    RESIDUAL_MULTIPLIER_BITS,
    EpilogueConfig,
    ResidualConfig,
    epilogue_reference,
    residual_range_error,
)

ACC_W = 32


def random_config(rng: np.random.Generator, out_width: int) -> EpilogueConfig:
    low_limit, high_limit = -(1 << (out_width - 1)), (1 << (out_width - 1)) - 1
    zero_point = int(rng.integers(low_limit, high_limit + 1))
    low, high = sorted(int(v) for v in rng.integers(low_limit, high_limit + 1, 2))
    if rng.random() < 0.3:  # ReLU as the quantizer writes it: clip at the zero point
        low, high = zero_point, high_limit
    table = None
    if rng.random() < 0.4:  # an element-wise non-linearity after the clip
        table = tuple(int(v) for v in rng.integers(low_limit, high_limit + 1, 1 << out_width))
    return EpilogueConfig(pre=int(rng.integers(0, 4)), post=int(rng.integers(0, 63)),
                          zero_point=zero_point, low=low, high=high, table=table)


def random_residual(rng: np.random.Generator, config: EpilogueConfig,
                    out_width: int, cols: int) -> ResidualConfig | None:
    """None (no residual) or a residual add the epilogue computes exactly
    (residual_range_error): multipliers up to 2^14 as the quantizer's, sometimes up to the
    epilogue's 16-bit limits; the late form's offset anywhere that keeps its sum in range
    (sometimes at either end), the early form's any i32 (the i32 sum wraps); or, where a
    row has 64 bits, the per-row mode."""
    if rng.random() < 0.4:
        return None
    low_limit, high_limit = -(1 << (out_width - 1)), (1 << (out_width - 1)) - 1
    if cols * out_width >= 64 and rng.random() < 0.3:
        # the per-row mode: each residual row's low 64 bits are its row's offset and
        # packed reciprocal (random rows: any i32 of each), any shift below 32
        return ResidualConfig(rows=True, pre=int(rng.integers(0, 32)))
    low, high = sorted(int(v) for v in rng.integers(low_limit, high_limit + 1, 2))
    half = 1 << (RESIDUAL_MULTIPLIER_BITS - 1)
    bound = half if rng.random() < 0.4 else 2**14
    self_multiplier, multiplier = (int(v) for v in rng.integers(-bound, bound, 2))
    early = bool(rng.random() < 0.4)
    product = not early and bool(rng.random() < 0.4)  # y·r instead of y·self_multiplier
    if early:
        offset = int(rng.integers(-(2**31), 2**31) if rng.random() < 0.3
                     else rng.integers(-(2**22), 2**22))
    else:  # the sum's range without the offset, and the offsets that keep it in Z_W bits
        sum_half = 1 << (out_width + RESIDUAL_MULTIPLIER_BITS - 1)
        if product:  # r·(y + multiplier), at the ends of both ranges
            terms = [r * (y + multiplier) for y in config.output_range(out_width)
                     for r in (low_limit, high_limit)]
            lowest, highest = -sum_half - min(terms), sum_half - 1 - max(terms)
        else:
            ys = [self_multiplier * y for y in config.output_range(out_width)]
            rs = [multiplier * r for r in (low_limit, high_limit)]
            lowest, highest = -sum_half - min(ys) - min(rs), sum_half - 1 - max(ys) - max(rs)
        choice = rng.random()
        offset = (lowest if choice < 0.2 else highest if choice < 0.4
                  else int(rng.integers(lowest, highest + 1)))
    added = ResidualConfig(
        self_multiplier=self_multiplier, multiplier=multiplier, offset=offset,
        requantize_multiplier=int(rng.integers(-(2**31) + 1, 2**31)),
        pre=int(rng.integers(0, 4)), post=int(rng.integers(0, 63)),
        zero_point=int(rng.integers(low_limit, high_limit + 1)), low=low, high=high,
        early=early, product=product)
    assert residual_range_error(added, config, out_width) is None, added
    return added


def random_scale(rng: np.random.Generator, cols: int, out_width: int) -> np.ndarray:
    """Per-column scales: 1 (none) or any signed out_width-bit values."""
    if rng.random() < 0.5:
        return np.ones(cols, np.int64)
    return rng.integers(-(1 << (out_width - 1)), 1 << (out_width - 1), cols)


def apply_config(dut: Any, config: EpilogueConfig, residual: ResidualConfig | None,
                 out_width: int) -> None:
    mask = (1 << out_width) - 1
    dut.cfg_pre.value, dut.cfg_post.value = config.pre, config.post
    dut.cfg_zero_point.value = config.zero_point & mask
    dut.cfg_low.value, dut.cfg_high.value = config.low & mask, config.high & mask
    dut.cfg_lookup.value = int(config.table is not None)
    dut.cfg_table.value = pack(np.asarray(config.table or (0,) * (1 << out_width)), out_width)
    dut.cfg_residual.value = int(residual is not None)
    dut.cfg_res_early.value = int(residual is not None and residual.early)
    dut.cfg_res_product.value = int(residual is not None and residual.product)
    dut.cfg_res_rows.value = int(residual is not None and residual.rows)
    res = residual or ResidualConfig()
    word = (1 << 32) - 1
    dut.cfg_res_self.value = res.self_multiplier & word
    dut.cfg_res_mult.value = res.multiplier & word
    dut.cfg_res_offset.value = res.offset & word
    dut.cfg_res_multiplier.value = res.requantize_multiplier & word
    dut.cfg_res_pre.value, dut.cfg_res_post.value = res.pre, res.post
    dut.cfg_res_zero_point.value = res.zero_point & mask
    dut.cfg_res_low.value, dut.cfg_res_high.value = res.low & mask, res.high & mask


class EpiloguePipeline:
    """ws_epilogue's handshakes and data, cycle by cycle (rtl/ws_epilogue.v)."""

    def __init__(self, groups: int, depth: int) -> None:
        self.groups, self.depth = groups, depth
        self.s1: np.ndarray | None = None  # the row accepted last cycle
        self.fifo: deque[tuple[np.ndarray, np.ndarray]] = deque()  # (row, its residual)
        self.phase = 0
        self.out: np.ndarray | None = None  # the output register's row, while valid

    @property
    def in_ready(self) -> bool:
        return len(self.fifo) + (self.s1 is not None) < self.depth

    @property
    def empty(self) -> bool:
        return self.s1 is None and not self.fifo and self.out is None

    def clock(self, row: np.ndarray | None, residual_now: np.ndarray, ready: bool,
              finish: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        """One edge: `row` accepted (or None), `residual_now` on res_data, out_ready."""
        last = self.phase == self.groups - 1
        step = bool(self.fifo) and (not last or self.out is None or ready)
        if step and last:
            self.out = finish(*self.fifo.popleft())
        elif ready:
            self.out = None
        if step:
            self.phase = 0 if last else self.phase + 1
        if self.s1 is not None:
            self.fifo.append((self.s1, residual_now))
        self.s1 = row


@cocotb.test()
async def random_rows(dut: Any) -> None:
    """Random rows, configurations, gaps and stalls for 3000 cycles."""
    p = params()
    cols, out_width = p["COLS"], p["OUT_W"]
    lanes, depth = p.get("LANES", cols), p.get("DEPTH", 2)
    rng = np.random.default_rng(cols * 100 + out_width + lanes)
    pipeline = EpiloguePipeline(cols // lanes, depth)
    config = random_config(rng, out_width)
    residual = random_residual(rng, config, out_width, cols)
    apply_config(dut, config, residual, out_width)
    bias = rng.integers(-(2**20), 2**20, cols)
    mult = rng.integers(-(2**31) + 1, 2**31, cols)
    scale = random_scale(rng, cols, out_width)
    low_limit, high_limit = -(1 << (out_width - 1)), 1 << (out_width - 1)
    residual_row = np.zeros(cols, np.int64)  # the residual of the row in stage 1
    residuals = per_row = 0
    dut.rst.value = 1
    await start_clock(dut)
    await next_cycle(dut)
    dut.rst.value = 0
    delivered = 0
    draining = False
    for cycle in range(3000):
        if cycle % 150 == 0:  # a new store: every row leaves first
            draining = True
        if draining and pipeline.empty:  # configuration changes only between stores
            config = random_config(rng, out_width)
            residual = random_residual(rng, config, out_width, cols)
            apply_config(dut, config, residual, out_width)
            bias = rng.integers(-(2**20), 2**20, cols)
            mult = rng.integers(-(2**31) + 1, 2**31, cols)
            scale = random_scale(rng, cols, out_width)
            draining = False
        acc = rng.integers(-(2**31), 2**31, cols)
        acc = np.where(rng.random(cols) < 0.1, rng.choice([-(2**31), 2**31 - 1], cols), acc)
        valid, ready = rng.random() < 0.8, rng.random() < 0.6
        valid, ready = valid and not draining, ready or draining
        dut.in_valid.value = int(valid)
        dut.out_ready.value = int(ready)
        dut.in_data.value, dut.in_bias.value = pack(acc, ACC_W), pack(bias, ACC_W)
        dut.in_mult.value = pack(mult, 32)
        dut.in_scale.value = pack(scale, out_width)
        dut.res_data.value = pack(residual_row, out_width)
        incoming = rng.integers(low_limit, high_limit, cols)  # this row's residual
        await settle()
        assert read(dut.in_ready) == int(pipeline.in_ready), f"cycle {cycle}: in_ready"
        assert read(dut.out_valid) == int(pipeline.out is not None), f"cycle {cycle}: out_valid"
        if pipeline.out is not None:
            got = unpack(read(dut.out_data), cols, out_width)
            assert np.array_equal(got, pipeline.out), f"cycle {cycle}: {got} != {pipeline.out}"
            delivered += int(ready)
        await next_cycle(dut)
        accepted = valid and pipeline.in_ready

        def finish(row: np.ndarray, res: np.ndarray, config: EpilogueConfig = config,
                   residual: ResidualConfig | None = residual, bias: np.ndarray = bias,
                   mult: np.ndarray = mult, scale: np.ndarray = scale) -> np.ndarray:
            return epilogue_reference(row[None, :], bias[None, :], mult, config, out_width,
                                      residual, res[None, :], scale)[0]

        pipeline.clock(acc if accepted else None, residual_row, ready, finish)
        residual_row = incoming
        residuals += int(accepted and residual is not None)
        per_row += int(accepted and residual is not None and residual.rows)
    groups = cols // lanes
    assert delivered > 1000 // groups and residuals > 300 // groups, (delivered, residuals)
    assert per_row > 0 or cols * out_width < 64, "the per-row mode never ran"
