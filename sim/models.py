"""Cycle-level Python models of rtl/ modules, used as references by the testbenches.

These are independent re-statements of the RTL behaviour, one clock edge at a time:
`PeArrayModel` (ws_pe / ws_array), `SkewModel` (ws_skew), `CtrlModel` (ws_ctrl) and
`GemmStreamModel` (ws_top inside tb_ws_gemm, including the wrapper's LFSR gaps), the
last giving the exact cycle of every result under random gaps and back-pressure.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from glensidec.cosim.rtl_driver import StreamGaps
from glensidec.hardware.array import ArrayConfig, Tile
from glensidec.lang.dtypes import wrap_signed

Ints = npt.NDArray[np.int64]


@dataclass
class PeArrayModel:
    """ROWS x COLS grid of ws_pe registers (a single PE is the 1x1 case). The weight
    chains shift `w_load` rows a beat: PE row r takes row r - w_load's chain register, the
    top w_load rows take the beat's rows (its row k at chain row w_load - 1 - k)."""

    rows: int
    cols: int
    in_width: int = 8
    acc_width: int = 32
    w_load: int = 1
    a: Ints = field(init=False)
    sel: Ints = field(init=False)
    psum: Ints = field(init=False)
    chain: Ints = field(init=False)
    bank0: Ints = field(init=False)
    bank1: Ints = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        shape = (self.rows, self.cols)
        for name in ("a", "sel", "psum", "chain", "bank0", "bank1"):
            setattr(self, name, np.zeros(shape, dtype=np.int64))

    def step(
        self,
        en: bool,
        a_in: Ints,  # (rows,) signed
        sel_in: Ints,  # (rows,)
        w_in: Ints,  # (cols,) signed, or (w_load, cols): the beat's rows
        w_shift: Ints,  # (cols,) 0/1
        w_commit: Ints,
        w_bank: Ints,
        psum_top: Ints,  # (cols,)
    ) -> None:
        """One rising clock edge."""
        if not en:
            return
        a_here = np.concatenate([a_in[:, None], self.a[:, :-1]], axis=1)
        sel_here = np.concatenate([sel_in[:, None], self.sel[:, :-1]], axis=1)
        beat = np.reshape(w_in, (self.w_load, self.cols))[::-1]  # row k → chain row L-1-k
        chain_in = np.concatenate([beat, self.chain[:-self.w_load, :]], axis=0)
        shift = np.broadcast_to(w_shift[None, :], self.chain.shape).astype(bool)
        commit = np.broadcast_to(w_commit[None, :], self.chain.shape).astype(bool)
        bank = np.broadcast_to(w_bank[None, :], self.chain.shape)
        chain_next = np.where(shift, chain_in, self.chain)
        bypass = commit & (bank == sel_here)
        weight = np.where(bypass, chain_next, np.where(sel_here == 1, self.bank1, self.bank0))
        psum_here = np.concatenate([psum_top[None, :], self.psum[:-1, :]], axis=0)
        self.psum = wrap_signed(psum_here + a_here * weight, self.acc_width)
        self.a, self.sel, self.chain = a_here, sel_here, chain_next
        self.bank0 = np.where(commit & (bank == 0), chain_next, self.bank0)
        self.bank1 = np.where(commit & (bank == 1), chain_next, self.bank1)

    def psum_bottom(self) -> Ints:
        return self.psum[-1, :].copy()


@dataclass
class SkewModel:
    """ws_skew: lane i delayed by i (or lanes-1-i when reversed) enabled cycles."""

    lanes: int
    reverse: bool = False
    stages: list[deque[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def depth(self, lane: int) -> int:
        return self.lanes - 1 - lane if self.reverse else lane

    def reset(self) -> None:
        self.stages = [deque([0] * self.depth(lane)) for lane in range(self.lanes)]

    def output(self, din: list[int]) -> list[int]:
        return [stage[-1] if stage else din[lane] for lane, stage in enumerate(self.stages)]

    def step(self, en: bool, din: list[int]) -> None:
        if not en:
            return
        for lane, stage in enumerate(self.stages):
            if stage:
                stage.pop()
                stage.appendleft(din[lane])


@dataclass
class CtrlInputs:
    en: bool
    w_valid: bool
    a_valid: bool
    a_last: bool
    a_add: bool
    a_emit: bool
    a_use_d: bool
    d_valid: bool
    a_acc_row: int = 0  # accumulator row of the tile's first row


@dataclass
class CtrlOutputs:
    w_ready: bool
    w_commit: bool
    w_bank: int
    a_ready: bool
    d_ready: bool
    a_sel: int
    d_inject: bool
    acc_valid: bool
    acc_add: bool
    acc_emit: bool
    acc_row: int


@dataclass
class CtrlModel:
    """ws_ctrl, cycle by cycle: handshakes, weight banks and the row tag delay line (a
    tile's weights are rows / w_load beats)."""

    rows: int
    cols: int
    acc_depth: int
    w_load: int = 1
    w_count: int = 0
    w_load_bank: int = 0
    bank_full: list[bool] = field(default_factory=lambda: [False, False])
    drain: list[int] = field(default_factory=lambda: [0, 0])
    a_bank: int = 0
    a_row: int = 0
    tags: deque[tuple[bool, bool, bool, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.w_count, self.w_load_bank, self.a_bank, self.a_row = 0, 0, 0, 0
        self.bank_full, self.drain = [False, False], [0, 0]
        self.tags = deque([(False, False, False, 0)] * (self.rows + self.cols - 1))

    def outputs(self, i: CtrlInputs) -> CtrlOutputs:
        """Combinational outputs for this cycle's inputs."""
        last_beat = self.w_count == self.rows // self.w_load - 1
        bank = self.w_load_bank
        bank_free = not self.bank_full[bank] and self.drain[bank] == 0
        w_ready = i.en and (not last_beat or bank_free)
        w_commit = i.w_valid and w_ready and last_beat
        bank_ready = i.en and (self.bank_full[self.a_bank] or (w_commit and bank == self.a_bank))
        a_ready = bank_ready and (not i.a_use_d or i.d_valid)
        d_ready = bank_ready and i.a_valid and i.a_use_d
        tag_valid, tag_add, tag_emit, tag_row = self.tags[-1]
        return CtrlOutputs(
            w_ready=w_ready,
            w_commit=w_commit,
            w_bank=bank,
            a_ready=a_ready,
            d_ready=d_ready,
            a_sel=self.a_bank,
            d_inject=i.a_valid and a_ready and i.a_use_d,
            acc_valid=tag_valid,
            acc_add=tag_add,
            acc_emit=tag_emit,
            acc_row=tag_row,
        )

    def step(self, i: CtrlInputs) -> CtrlOutputs:
        """One rising clock edge; returns the outputs seen before it."""
        out = self.outputs(i)
        if not i.en:
            return out
        self.drain = [max(value - 1, 0) for value in self.drain]
        if i.w_valid and out.w_ready:
            if self.w_count == self.rows // self.w_load - 1:
                self.w_count = 0
                self.bank_full[self.w_load_bank] = True
                self.w_load_bank ^= 1
            else:
                self.w_count += 1
        a_fire = i.a_valid and out.a_ready
        rows_mask = (1 << max(1, (self.acc_depth - 1).bit_length())) - 1
        self.tags.appendleft((a_fire, i.a_add, i.a_emit, (self.a_row + i.a_acc_row) & rows_mask))
        self.tags.pop()
        if a_fire:
            if i.a_last:
                self.a_row = 0
                self.bank_full[self.a_bank] = False
                self.drain[self.a_bank] = self.rows - 1
                self.a_bank ^= 1
            else:
                self.a_row = (self.a_row + 1) & rows_mask
        return out


def lfsr_step(value: int) -> int:
    """tb_ws_gemm's 16-bit Fibonacci LFSR (taps 16, 14, 13, 11)."""
    feedback = ((value >> 15) ^ (value >> 13) ^ (value >> 12) ^ (value >> 10)) & 1
    return ((value << 1) & 0xFFFF) | feedback


def stream_result_cycles(config: ArrayConfig, tiles: list[Tile], gaps: StreamGaps
                         ) -> list[int]:
    """Exact cycle of every result of `tiles` in tb_ws_gemm with the given LFSR gaps."""
    ctrl = CtrlModel(config.rows, config.cols, config.acc_depth)
    seed = gaps.seed & 0xFFFF or 1
    lfsr = {"w": seed ^ 0x1111, "a": seed ^ 0x2222, "d": seed ^ 0x4444, "r": seed ^ 0x8888}
    threshold = {"w": gaps.weights, "a": gaps.activations, "d": gaps.d, "r": gaps.result_stall}
    held = {"w": False, "a": False, "d": False}
    n_w = config.rows * len(tiles)
    n_d = sum(tile.m_len for tile in tiles if tile.use_d)
    n_r = sum(tile.m_len for tile in tiles if tile.emit)
    w_ptr = d_ptr = tile_index = row = 0
    stamps: list[int] = []
    cycle = 0
    while len(stamps) < n_r:
        if cycle > 1000 * (n_w + n_r + n_d + 100):
            raise RuntimeError("stream model does not finish")
        gate = {name: (value & 0xFF) >= threshold[name] for name, value in lfsr.items()}
        tile = tiles[tile_index] if tile_index < len(tiles) else tiles[-1]
        w_valid = w_ptr < n_w and (held["w"] or gate["w"])
        a_valid = tile_index < len(tiles) and (held["a"] or gate["a"])
        d_valid = d_ptr < n_d and (held["d"] or gate["d"])
        tag_valid, _, tag_emit, _ = ctrl.tags[-1]
        r_valid = tag_valid and tag_emit
        en = not (r_valid and not gate["r"])
        a_last = row + 1 == tile.m_len
        out = ctrl.step(
            CtrlInputs(en, w_valid, a_valid, a_last, tile.add, tile.emit, tile.use_d, d_valid)
        )
        if r_valid and gate["r"]:
            stamps.append(cycle)
        held = {
            "w": w_valid and not out.w_ready,
            "a": a_valid and not out.a_ready,
            "d": d_valid and not out.d_ready,
        }
        w_ptr += int(w_valid and out.w_ready)
        d_ptr += int(d_valid and out.d_ready)
        if a_valid and out.a_ready:
            tile_index, row = (tile_index + 1, 0) if a_last else (tile_index, row + 1)
        lfsr = {name: lfsr_step(value) for name, value in lfsr.items()}
        cycle += 1
    return stamps
