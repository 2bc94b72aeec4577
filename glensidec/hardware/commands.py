"""Commands of the whole accelerator (rtl/ws_accel.v), their encoding and cycle model.

`ws_accel` takes a stream of commands — LOAD (main memory → scratchpad, strided or
im2col), COMPUTE (one array tile), STORE (emitted result rows → epilogue → main memory)
and CONFIG (epilogue settings) — into a load, an execute and a store queue that run
concurrently and synchronise through two token counters (`wait` takes a token, `signal`
gives one). `AccelModel` replays the RTL's control register by register (data values
are not modelled, only when things happen), so its cycle count is the simulation's;
`conv_program` turns one convolution (or GEMM) into a double-buffered command
sequence whose loads, compute and stores overlap.

Cycle 0 is the first cycle a command is offered (commands are offered back to back in
order); the count runs up to and including the last main-memory write.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from glensidec.hardware.accel import (
    CapacityError,
    ConvLayer,
    DmaCommand,
    EpilogueConfig,
    MemoryConfig,
    ResidualConfig,
    dma_groups,
    dma_load_bytes,
    dma_rows,
    group_slots,
    grouped,
    row_beats,
)
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.dtypes import wrap_signed

if TYPE_CHECKING:
    from glensidec.hardware.accel_native import PackBuffer

OP_LOAD, OP_COMPUTE, OP_STORE, OP_CONFIG = 0, 1, 2, 3

#: Width of the scratchpad row fields (spad_row, w_row, a_row) of a command word: a
#: scratchpad of more rows cannot be addressed (AccelConfig refuses it).
SPAD_ROW_BITS = 24

#: Bit positions of the DMA fields in a LOAD/STORE command word: (offset, width).
DMA_FIELDS = {
    "base": (8, 32), "length": (40, 8), "count1": (48, 16), "stride1": (64, 32),
    "count2": (96, 16), "stride2": (112, 32), "spad_row": (144, SPAD_ROW_BITS),
    "bounds": (168, 1), "y0": (176, 16), "y_step": (192, 16), "height": (208, 16),
    "x0": (224, 16), "x_step": (240, 16), "width": (256, 16), "pad_value": (272, 8),
}


@dataclass(frozen=True)
class Load:
    """LOAD: a ws_dma_load transfer into the scratchpad."""

    dma: DmaCommand
    wait: bool = False  # take an exec → load token first (a buffer was freed)
    signal: bool = False  # give a load → exec token once its last row is written
    wait_store: bool = False  # take a store → load token first (residual rows were read)
    signal_store: bool = False  # give a load → store token once its last row is written
    # start only once every Store sent before it has written its last beat to main memory
    # (the fence: a layer's input that the layer before it stored; packed tables keep it
    # in a load's `emit` column, accel_native.FENCE, and the C model prices it)
    fence: bool = False


@dataclass(frozen=True)
class Compute:
    """COMPUTE: one array tile, weights bottom row first at w_row, m_len activation rows
    from a_row in a 2-D pattern: row i = i2·a_count1 + i1 is scratchpad row
    a_row + i2·a_stride2 + i1·a_stride1 (a_count1 = 0: one line, a_row + i·a_stride1). A
    convolution's window (kernel tap, channel chunk) over input rows resident in the
    scratchpad is such a pattern: a line per output row, the stride between pixels."""

    w_row: int
    a_row: int
    m_len: int
    add: bool = False  # add to the accumulator rows (every K fold but the first)
    emit: bool = False  # send the rows to the store path (the last K fold)
    wait: bool = False  # take a load → exec token before its weights start
    signal: bool = False  # give an exec → load token after its last row entered the array
    a_count1: int = 0  # activation rows per line (0: every row on one line)
    a_stride1: int = 1  # scratchpad rows between the rows of a line
    a_stride2: int = 0  # scratchpad rows between the first rows of two lines
    #: the accumulator row of the tile's first row (row i: acc_row + i), so several
    #: tiles' partial sums stay side by side (N blocks of one chunk taken fold by fold)
    acc_row: int = 0
    #: wait for on-chip rows (bit 5): its activation reads start once every row that the
    #: on-chip Stores sent before it promised, but the last `rows_ahead`, is written
    wait_rows: bool = False
    rows_ahead: int = 0

    def activation_rows(self) -> list[int]:
        """The scratchpad rows the tile reads, in order (unwrapped)."""
        if self.a_count1 == 0:
            return [self.a_row + i * self.a_stride1 for i in range(self.m_len)]
        return [self.a_row + (i // self.a_count1) * self.a_stride2
                + (i % self.a_count1) * self.a_stride1 for i in range(self.m_len)]


@dataclass(frozen=True)
class Store:
    """STORE: the next count1·count2 emitted rows, through the epilogue, to memory.

    With a residual add configured, the rows' residual rows are read from the
    scratchpad from dma.spad_row on, one per row. A pooling store (`window` > 0) takes
    its rows from the scratchpad instead of the array: row i is the bytewise signed max
    of rows dma.spad_row + i + t·window_stride, t < window (sent through the epilogue,
    which a Config made the identity), or with `sum` their int32 sum (an average pool:
    the epilogue adds the bias, requantizes by the multiplier and clips it); with
    `window_count1` the window is lines of rows and the pooled rows `pixel_step` apart
    (`window_rows`)."""

    dma: DmaCommand
    signal: bool = False  # give a store → load token once its last row entered the epilogue
    wait: bool = False  # take a load → store token first (the rows to pool are loaded)
    window: int = 0
    window_stride: int = 0
    sum: bool = False
    #: a window of lines (a 2-D pattern): `window_count1` rows window_stride apart per
    #: line (0: one line), lines `window_stride2` apart; pooled rows `pixel_step` apart
    #: (0: consecutive) — a k×k window of resident input rows at the pool's stride
    window_count1: int = 0
    window_stride2: int = 0
    pixel_step: int = 0
    #: on chip (bit 5): the rows go into the scratchpad instead of main memory, row
    #: i = i2·count1 + i1 to scratchpad row dma.base + i2·dma.stride2 + i1·dma.stride1
    #: (the next layer's input layout), bytes from dma.length on 0
    to_spad: bool = False
    #: wait for on-chip rows (bit 2; its pooled or residual rows were made on chip): it
    #: starts once every row promised by the on-chip Stores sent before it, but the last
    #: `rows_ahead`, is written
    wait_rows: bool = False
    rows_ahead: int = 0

    def spad_rows(self) -> list[int]:
        """The scratchpad rows an on-chip store writes, in order (unwrapped)."""
        dma = self.dma
        return [dma.base + i2 * dma.stride2 + i1 * dma.stride1
                for i2 in range(dma.count2) for i1 in range(dma.count1)]

    def window_rows(self, index: int) -> list[int]:
        """The scratchpad rows pooled row `index` reads, in order (unwrapped)."""
        first = self.dma.spad_row + index * (self.pixel_step or 1)
        per_line = self.window_count1 or self.window
        return [first + tap // per_line * self.window_stride2
                + tap % per_line * self.window_stride for tap in range(self.window)]


@dataclass(frozen=True)
class Config:
    """CONFIG: epilogue settings plus per-column bias and multiplier (COLS each), and the
    residual add (None: none)."""

    epilogue: EpilogueConfig
    bias: tuple[int, ...]
    multiplier: tuple[int, ...]
    #: the layer's output column of the first array column (the generated C's runtime
    #: reads bias and multiplier from the layer's vectors there; not part of the RTL word)
    first_column: int = 0
    residual: ResidualConfig | None = None


@dataclass(frozen=True)
class Table:
    """CONFIG with bit 2 (a table chunk): entries [first, first + len(entries)) of the
    epilogue's 256-entry lookup table, which a Config whose epilogue has a table applies
    to every result after the clip (an element-wise non-linearity). A chunk holds up to
    `table_chunk(cols)` entries, where a Config has its bias and multiplier vectors."""

    first: int
    entries: tuple[int, ...]


@dataclass(frozen=True)
class Scale:
    """CONFIG with bits 2 and 5: the epilogue's per-column scales (COLS signed int8), which
    multiply each column's biased sum before the requantize, wrapping in i32: a run-time
    channel scale (squeeze-excite's x·s[c]). Every plain Config resets them to 1. The
    generated C's runtime reads them from the layer's scale vector from `first_column` on
    (a run-time buffer: the layer before wrote it)."""

    first_column: int
    values: tuple[int, ...]


Command = Load | Compute | Store | Config | Table | Scale

#: Where a rows-waiting Compute or Store keeps `rows_ahead` in its command word.
ROWS_AHEAD_COMPUTE = 160
ROWS_AHEAD_STORE = 256

#: Entries of the epilogue's lookup table (int8 results, indexed by an int8 value + 128).
TABLE_ENTRIES = 256


def table_chunk(cols: int) -> int:
    """Table entries one CONFIG word carries: 8 bits each in its 64·cols vector bits."""
    return min(TABLE_ENTRIES, 8 * cols)


def table_commands(epilogue: EpilogueConfig, cols: int) -> list[Command]:
    """The chunks that load the epilogue's lookup table (none without one)."""
    if epilogue.table is None:
        return []
    chunk = table_chunk(cols)
    return [Table(first, tuple(epilogue.table[first:first + chunk]))
            for first in range(0, TABLE_ENTRIES, chunk)]


def scale_commands(quant: LayerQuant, n0: int, block: int, cols: int) -> list[Command]:
    """The Scale of the N block of `block` columns from n0 (none without scales)."""
    if quant.scale is None:
        return []
    padding = (1,) * (cols - block)
    return [Scale(n0, tuple(quant.scale[n0:n0 + block]) + padding)]


def with_table(program: LayerProgram, epilogue: EpilogueConfig | None, cols: int
               ) -> LayerProgram:
    """`program` preceded by the chunks of the epilogue's lookup table, if it has one."""
    if epilogue is None or epilogue.table is None:
        return program
    return replace(program, commands=[*table_commands(epilogue, cols), *program.commands])


@dataclass(frozen=True)
class AccelConfig:
    """Parameters of ws_accel (the array, its memories and the command queues)."""

    rows: int = 16
    cols: int = 16
    acc_depth: int = 1024
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    queue_depth: int = 8
    #: int8 result rows the output FIFO holds between the epilogue and the store DMA (a
    #: power of two). Few: the epilogue's lanes make at most a bus beat of a row per cycle
    #: at the defaults, and rows wait for them in the epilogue's FIFO instead
    out_depth: int = 16
    #: columns the epilogue computes per cycle (a divisor of cols; a row takes cols /
    #: epilogue_lanes cycles); 0: default_epilogue_lanes(cols), 4 of 16
    epilogue_lanes: int = 0
    #: accumulator rows waiting for the epilogue's lanes (a power of two ≥ 2), so a tile's
    #: rows, emitted one per cycle, leave the array while the lanes work through them; 0:
    #: default_epilogue_depth(acc_depth), half the accumulator (512 rows of 1024)
    epilogue_depth: int = 0
    #: weight rows a cycle into the array (a power of two dividing rows): each of
    #: ws_array's column chains shifts that many rows a beat, fed at once from ws_spad's
    #: sub-banks, so a tile's weights take rows / weight_load_rows beats; 1: one row a beat
    #: (today's machine)
    weight_load_rows: int = 1

    def __post_init__(self) -> None:
        if not self.epilogue_lanes:
            object.__setattr__(self, "epilogue_lanes", default_epilogue_lanes(self.cols))
        if not self.epilogue_depth:
            object.__setattr__(self, "epilogue_depth", default_epilogue_depth(self.acc_depth))
        if self.epilogue_lanes < 1 or self.cols % self.epilogue_lanes:
            raise ValueError(f"the epilogue's lanes divide its {self.cols} columns, got "
                             f"{self.epilogue_lanes}")
        if self.epilogue_depth < 2 or self.epilogue_depth & (self.epilogue_depth - 1):
            raise ValueError(f"the epilogue's FIFO holds a power of two ≥ 2 rows, got "
                             f"{self.epilogue_depth}")
        load = self.weight_load_rows
        if load < 1 or load & (load - 1) or self.rows % load:
            raise ValueError(f"the weight rows a cycle into the array are a power of two "
                             f"dividing its {self.rows} rows, got {load}")
        if self.out_depth < 2 or self.out_depth & (self.out_depth - 1):
            raise ValueError(f"the output FIFO holds a power of two ≥ 2 rows, got "
                             f"{self.out_depth}")
        if self.rows < 2 or max(self.rows, self.cols) > self.memory.row_bytes:
            raise ValueError(
                f"a {self.rows}×{self.cols} array needs 2 ≤ rows and scratchpad rows of at "
                f"least max(rows, cols) bytes, got {self.memory.row_bytes}"
            )
        if self.memory.scratchpad_rows > 1 << SPAD_ROW_BITS:
            raise ValueError(
                f"a scratchpad of {self.memory.scratchpad_rows} rows is more than the "
                f"2^{SPAD_ROW_BITS} rows a command can address (at most "
                f"{self.memory.row_bytes << SPAD_ROW_BITS} B of {self.memory.row_bytes}-byte rows)"
            )

    @property
    def command_width(self) -> int:
        return max(296, 216 + 64 * self.cols)  # a fenced LOAD's entry keeps a count at 280

    def rtl_parameters(self) -> dict[str, int]:
        """Verilog parameters of ws_accel."""
        memory = self.memory
        return {
            "ROWS": self.rows, "COLS": self.cols, "ACC_DEPTH": self.acc_depth,
            "ROW_BYTES": memory.row_bytes, "BANKS": memory.banks,
            "BANK_ROWS": memory.bank_rows, "BUS_BYTES": memory.bus_bytes,
            "LATENCY": memory.latency, "QUEUE_DEPTH": self.queue_depth,
            "OUT_DEPTH": self.out_depth, "EPI_LANES": self.epilogue_lanes,
            "EPI_DEPTH": self.epilogue_depth, "WRITE_ROWS": memory.write_rows,
            # (only when not 1: a default machine's parameters, and builds, as they were)
            **({} if self.weight_load_rows == 1 else {"W_LOAD": self.weight_load_rows}),
        }

    @property
    def epilogue_cycles(self) -> int:
        """Cycles the epilogue's lanes take per row (one column group each)."""
        return self.cols // self.epilogue_lanes


#: Column groups of the default epilogue: its lanes compute a row over this many cycles
#: (docs/hardware.md, "The epilogue's lanes", weighs the cycles against the cells).
EPILOGUE_GROUPS = 4


def default_epilogue_lanes(cols: int) -> int:
    """The default lanes of a `cols`-column epilogue: cols / g for the largest g ≤
    EPILOGUE_GROUPS that divides cols (4 lanes at 16 columns)."""
    groups = max(g for g in range(1, EPILOGUE_GROUPS + 1) if cols % g == 0)
    return cols // groups


def default_epilogue_depth(acc_depth: int) -> int:
    """The default rows of the epilogue's FIFO: the largest power of two ≤ half the
    accumulator (at least 2). A tile emits up to acc_depth rows one per cycle while the
    lanes take a row per 4 cycles; half of them waiting costs ResNet-18 and -50 under 1 %
    of their cycles at 16 B/cycle, a quarter over 2 % (docs/hardware.md)."""
    return max(2, 1 << max(1, acc_depth // 2).bit_length() - 1)


def _field(value: int, offset: int, width: int) -> int:
    return (int(value) & ((1 << width) - 1)) << offset


def encode_command(command: Command, cols: int) -> int:
    """The CMD_W-bit command word of rtl/ws_accel.v."""
    if isinstance(command, Load | Store):
        op = OP_LOAD if isinstance(command, Load) else OP_STORE
        word = op | _field(command.wait, 3, 1) | _field(command.signal, 4, 1)
        for name, (offset, width) in DMA_FIELDS.items():
            word |= _field(getattr(command.dma, name), offset, width)
        if isinstance(command, Load):
            return (word | _field(command.wait_store, 5, 1) | _field(command.signal_store, 6, 1)
                    | _field(command.fence, 7, 1))
        if command.window:  # a pooling store: its window where a load has y0, y_step (and
            # height: the stride is a scratchpad row count, as wide as the row fields)
            word &= ~(((1 << (16 + SPAD_ROW_BITS)) - 1) << DMA_FIELDS["y0"][0])
            word |= _field(1, 6, 1) | _field(command.sum, 7, 1)
            word |= _field(command.window, DMA_FIELDS["y0"][0], 16)
            word |= _field(command.window_stride, DMA_FIELDS["y_step"][0], SPAD_ROW_BITS)
            # its window's lines and pixel step from bit 216 on (a load's x0 … pad_value)
            word &= ~(((1 << 64) - 1) << 216)
            word |= _field(command.window_count1, 216, 8)
            word |= _field(command.window_stride2, 224, SPAD_ROW_BITS)
            word |= _field(command.pixel_step, 248, 8)
        word |= _field(command.to_spad, 5, 1) | _field(command.wait_rows, 2, 1)
        if command.wait_rows:  # where a load has `width`
            word &= ~(((1 << 16) - 1) << ROWS_AHEAD_STORE)
            word |= _field(command.rows_ahead, ROWS_AHEAD_STORE, 16)
        return word
    if isinstance(command, Table):
        word = OP_CONFIG | _field(1, 2, 1) | _field(command.first // table_chunk(cols), 8, 8)
        for position, entry in enumerate(command.entries):
            word |= _field(entry, 48 + 8 * position, 8)
        return word
    if isinstance(command, Scale):
        word = OP_CONFIG | _field(1, 2, 1) | _field(1, 5, 1)
        for column, value in enumerate(command.values):
            word |= _field(value, 48 + 8 * column, 8)
        return word
    if isinstance(command, Compute):
        return (OP_COMPUTE | _field(command.wait, 3, 1) | _field(command.signal, 4, 1)
                | _field(command.w_row, 8, SPAD_ROW_BITS)
                | _field(command.a_row, 32, SPAD_ROW_BITS)
                | _field(command.m_len, 56, 16) | _field(command.add, 72, 1)
                | _field(command.emit, 73, 1) | _field(command.a_count1, 80, 16)
                | _field(command.a_stride1, 96, SPAD_ROW_BITS)
                | _field(command.a_stride2, 120, SPAD_ROW_BITS)
                | _field(command.acc_row, 144, 16)
                | _field(command.wait_rows, 5, 1)
                | _field(command.rows_ahead, ROWS_AHEAD_COMPUTE, 16))
    epilogue = command.epilogue
    word = (OP_CONFIG | _field(epilogue.pre, 8, 6) | _field(epilogue.post, 16, 6)
            | _field(epilogue.zero_point, 24, 8) | _field(epilogue.low, 32, 8)
            | _field(epilogue.high, 40, 8) | _field(epilogue.table is not None, 7, 1))
    for column, (bias, multiplier) in enumerate(zip(command.bias, command.multiplier,
                                                    strict=True)):
        word |= _field(bias, 48 + 32 * column, 32)
        word |= _field(multiplier, 48 + 32 * (cols + column), 32)
    residual = command.residual
    if residual is not None:
        start = 48 + 64 * cols
        word |= _field(1, 5, 1) | _field(residual.early, 6, 1)
        for offset, width, value in (
                (0, 32, residual.self_multiplier), (32, 32, residual.multiplier),
                (64, 32, residual.offset), (96, 32, residual.requantize_multiplier),
                (128, 6, residual.pre), (134, 1, residual.product), (135, 1, residual.rows),
                (136, 6, residual.post), (144, 8, residual.zero_point),
                (152, 8, residual.low), (160, 8, residual.high)):
            word |= _field(value, start + offset, width)
    return word


# -- the cycle model ---------------------------------------------------------------------


@dataclass
class AccelTiming:
    """What a command sequence costs on ws_accel (AccelModel.run)."""

    cycles: int  # cycle 0 … the last main-memory write, inclusive
    compute_rows: int = 0  # activation rows the array took (one per busy cycle)
    load_bytes: int = 0  # bytes read from main memory (whole bus beats)
    store_bytes: int = 0  # bytes written (whole bus beats)
    array_stall_cycles: int = 0  # cycles the array was frozen by the store path
    load_busy_cycles: int = 0  # cycles the DMA issued a load slot
    store_busy_cycles: int = 0  # cycles a store beat was written
    #: per cycle (with trace=True): a load slot issued, a row entered the array, a write
    trace: list[tuple[bool, bool, bool]] = field(default_factory=list)


class AccelModel:
    """ws_accel's control, register by register: when every command runs (no data).

    Each `_cycle` evaluates the combinational signals of one clock cycle from the
    current state, in the order they depend on each other, then applies the clock edge.
    Names follow rtl/ws_accel.v and the modules it instantiates.
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = config
        memory = config.memory
        self.lat = config.rows + config.cols - 1  # injection → accumulator (ws_ctrl)
        self.w_beats = config.rows // config.weight_load_rows  # a tile's weight beats
        self.track_depth = 1 << (memory.latency + 2).bit_length()
        self.bank_shift = memory.bank_rows.bit_length() - 1
        # dispatcher and queues
        self.commands: deque[Command] = deque()
        self.lq: deque[Load] = deque()
        self.lq_sent: deque[int] = deque()  # each queued load's count of earlier Stores
        self.st_sent = self.st_written = 0  # Stores dispatched; Stores whose last beat is written
        self.eq: deque[Compute] = deque()
        self.sq: deque[Store | Config | Table | Scale] = deque()
        self.aq: deque[Compute] = deque()
        # rows made on chip: promised by the on-chip Stores dispatched, written so far; the
        # on-chip rows each queued Compute and Store needs (rows-waiting ones)
        self.oc_sent = self.oc_made = 0
        self.eq_need: deque[int] = deque()
        self.aq_need: deque[int] = deque()
        self.sq_need: deque[int] = deque()
        self.oc_active = False  # the on-chip writer (an on-chip Store's rows → scratchpad)
        self.oc_left = 0
        self.s_onchip = False
        self.tok_le = self.tok_el = self.tok_sl = self.tok_ls = 0
        # load unit: ws_dma_load slots (the rows a slot that ends a group writes, else 0),
        # [countdown, rows] of each write due, loads in flight
        self.dma_slots: deque[int] = deque()
        self.writes: deque[list[int]] = deque()
        self.track: deque[tuple[bool, int, bool]] = deque()  # signal, rows, signal_store
        self.track_written = 0
        # execute unit
        self.w_active = self.w_q = False
        self.w_base = self.w_beat = 0
        self.a_active = False
        self.a_addr = self.a_left = self.a_line = self.a_col = 0
        self.a_cmd: Compute | None = None
        self.spad_mask = memory.scratchpad_rows - 1  # row addresses wrap (SPAD_W bits)
        self.q_valid = self.q_last = self.q_emit = self.q_signal = False
        # ws_ctrl
        self.w_count = self.w_load_bank = self.a_bank = 0
        self.bank_full = [False, False]
        self.drain = [0, 0]
        self.tags: deque[tuple[bool, bool]] = deque([(False, False)] * self.lat)
        # store unit, epilogue, ws_dma_store
        self.s_pending: DmaCommand | None = None
        self.s_left = self.epi_rows = 0
        self.s_signal = self.cfg_residual = False
        self.res_addr = 0
        # a pooling store's reads (p_*) and the row read last cycle (q2_*)
        self.s_pool = self.q2_valid = self.q2_first = self.q2_last = False
        self.p_window = self.p_wstride = self.p_t = self.p_pix = self.p_addr = 0
        self.p_wcount1 = self.p_wstride2 = self.p_tx = self.p_line = 0
        self.p_step = 1
        self.p_reads = 0
        self.s1_valid = self.out_valid = False
        self.epi_fifo = self.epi_phase = 0  # rows in the epilogue's FIFO; the lanes' group
        self.epi_phases = config.epilogue_cycles  # cycles per row
        self.out_rows = 0  # rows in the output FIFO (epilogue → ws_dma_store)
        self.st_rows: deque[int] = deque()  # beats of each row of the active store
        self.st_beat = 0
        self.tracing = False
        self.dma_slots_before = 0

    def run(self, commands: Sequence[Command], limit: int = 10**8,
            trace: bool = False) -> AccelTiming:
        """Offer `commands` from cycle 0 and run until every result is in memory."""
        self.commands = deque(commands)
        self.tracing = trace
        timing = AccelTiming(cycles=0)
        last_write = -1
        cycle = 0
        while not self._idle():
            if cycle >= limit:
                raise RuntimeError(f"the command sequence did not finish in {limit} cycles")
            if self._cycle(timing):
                last_write = cycle
            cycle += 1
        timing.cycles = last_write + 1
        return timing

    def _idle(self) -> bool:
        return not (self.commands or self.lq or self.eq or self.sq or self.aq or self.dma_slots
                    or self.writes or self.track or self.w_active or self.w_q or self.a_active
                    or self.q_valid or any(valid for valid, _ in self.tags) or self.s_pending
                    or self.s_left or self.epi_rows or self.st_rows or self.q2_valid
                    or self.p_reads or self.out_rows or self.oc_active)

    def _bank(self, row: int) -> int:
        return row >> self.bank_shift

    def _cycle(self, timing: AccelTiming) -> bool:
        rows, memory = self.config.rows, self.config.memory
        # -- store path: ws_dma_store, epilogue, admission ----------------------------------
        st_active = bool(self.st_rows)
        st_beat_last = st_active and self.st_beat == self.st_rows[0] - 1
        st_in_ready = st_active and st_beat_last
        st_in_valid = self.out_rows > 0  # the output FIFO's oldest row
        st_cmd_last = st_in_ready and st_in_valid and len(self.st_rows) == 1
        st_cmd_ready = not st_active or st_cmd_last
        write = st_active and st_in_valid
        # the on-chip writer, after the load DMA on the scratchpad's write port
        dma_wr_en = bool(self.writes) and self.writes[0][0] == 0
        oc_write = self.oc_active and st_in_valid and not dma_wr_en
        oc_free = not self.oc_active or (oc_write and self.oc_left == 1)
        out_full = self.out_rows == self.config.out_depth
        epi_out_fire = self.out_valid and not out_full  # into the output FIFO
        # the lanes take the epilogue FIFO's oldest row a column group per cycle; its last
        # group waits for the output register
        lane_last = self.epi_phase == self.epi_phases - 1
        lane_step = self.epi_fifo > 0 and (not lane_last or not self.out_valid or not out_full)
        lane_done = lane_step and lane_last
        epi_en = self.epi_fifo + int(self.s1_valid) < self.config.epilogue_depth  # in_ready
        out_pop = (st_in_valid and st_in_ready) or oc_write
        tag_valid, tag_emit = self.tags[-1]
        r_valid = tag_valid and tag_emit
        q2_consume = self.q2_valid and (not self.q2_last or epi_en)
        pool_issue = self.s_pool and self.p_reads > 0 and (not self.q2_valid or q2_consume)
        pool_admit = self.q2_valid and self.q2_last and epi_en
        acc_admit = r_valid and epi_en and self.s_left > 0 and not self.s_pool
        admit = acc_admit or pool_admit
        admit_last = admit and self.s_left == 1
        r_ready = epi_en and self.s_left > 0 and not self.s_pool
        en = not (r_valid and not r_ready)
        s_accept = self.s_pending is not None and st_cmd_ready and oc_free
        head = self.sq[0] if self.sq else None
        store_pop = (isinstance(head, Store) and (self.s_left == 0 or admit_last)
                     and (self.s_pending is None or s_accept)
                     and (not head.wait or self.tok_ls > 0)
                     and (not head.wait_rows or self.oc_made >= self.sq_need[0]))
        res_read = acc_admit and self.cfg_residual  # scratchpad port 2
        rd2 = res_read or pool_issue
        rd2_addr = self.p_addr if pool_issue else self.res_addr
        sl_give = admit_last and self.s_signal
        # a Config waits until every earlier row has left the epilogue (not the FIFO)
        config_pop = isinstance(head, Config | Table | Scale) and self.s_left == 0 and \
            self.epi_rows == 0
        # -- ws_ctrl handshakes ----------------------------------------------------------------
        w_last_beat = self.w_count == self.w_beats - 1
        bank = self.w_load_bank
        load_bank_free = not self.bank_full[bank] and self.drain[bank] == 0
        w_ready = en and (not w_last_beat or load_bank_free)
        w_fire = self.w_q and w_ready
        w_commit = w_fire and w_last_beat
        a_ready = en and (self.bank_full[self.a_bank] or (w_commit and bank == self.a_bank))
        a_fire = self.q_valid and a_ready
        # -- weight streamer -------------------------------------------------------------------
        w_issue = self.w_active and (not self.w_q or w_fire)
        w_issue_last = w_issue and self.w_beat == self.w_beats - 1
        e_head = self.eq[0] if self.eq else None
        w_start = ((not self.w_active or w_issue_last) and e_head is not None
                   and (not e_head.wait or self.tok_le > 0) and len(self.aq) < 4)
        # -- activation streamer ---------------------------------------------------------------
        a_try = self.a_active and (not self.q_valid or a_fire)
        w_row = self.w_base + self.w_beat * self.config.weight_load_rows  # the beat's first
        w_banks = {self._bank(w_row),  # and its last row's (addresses wrap as the RTL's)
                   self._bank((w_row + self.config.weight_load_rows - 1) & self.spad_mask)}
        if w_issue and rd2 and self._bank(rd2_addr) in w_banks:
            raise ValueError(f"a residual or pooled row ({rd2_addr}) and a weight row "
                             f"({w_row}) read from one scratchpad bank")
        conflict = (w_issue and self._bank(self.a_addr) in w_banks) or (
            rd2 and self._bank(rd2_addr) == self._bank(self.a_addr))
        a_issued = a_try and not conflict
        a_issue_last = a_issued and self.a_left == 1
        a_start = ((not self.a_active or a_issue_last) and bool(self.aq)
                   and (not self.aq[0].wait_rows or self.oc_made >= self.aq_need[0]))
        el_give = a_fire and self.q_last and self.q_signal
        a_last, a_emit = self.q_last, self.q_emit  # the row offered to the array now
        # -- load unit -------------------------------------------------------------------------
        l_head = self.lq[0] if self.lq else None
        dma_last = len(self.dma_slots) == 1
        self.dma_slots_before = len(self.dma_slots)
        l_valid = (l_head is not None and (not l_head.wait or self.tok_el > 0)
                   and (not l_head.wait_store or self.tok_sl > 0)
                   and (not l_head.fence or self.st_written >= self.lq_sent[0])
                   and len(self.track) < self.track_depth)
        l_accept = l_valid and (not self.dma_slots or dma_last)
        wr_en = bool(self.writes) and self.writes[0][0] == 0
        wr_rows = self.writes[0][1] if wr_en else 0
        track_done = wr_en and self.track_written + wr_rows == self.track[0][1]
        le_give = track_done and self.track[0][0]
        ls_give = track_done and self.track[0][2]
        # -- dispatcher ------------------------------------------------------------------------
        offered = self.commands[0] if self.commands else None
        queue: deque[Load] | deque[Compute] | deque[Store | Config | Table | Scale] = (
            self.lq if isinstance(offered, Load) else
            self.eq if isinstance(offered, Compute) else self.sq)
        dispatch = offered is not None and len(queue) < self.config.queue_depth

        # ==== clock edge ==========================================================================
        self.tok_le += int(le_give) - int(w_start and e_head is not None and e_head.wait)
        self.tok_el += int(el_give) - int(l_accept and l_head is not None and l_head.wait)
        self.tok_sl += int(sl_give) - int(l_accept and l_head is not None and l_head.wait_store)
        self.tok_ls += int(ls_give) - int(store_pop and isinstance(head, Store) and head.wait)
        # load unit
        self.writes = deque([when - 1, n] for when, n in self.writes if when > 0)
        if self.dma_slots and (ends := self.dma_slots.popleft()):  # a slot that ends a group
            self.writes.append([memory.latency, ends])  # wr_en LATENCY + 1 cycles later
        if track_done:
            self.track.popleft()
            self.track_written = 0
        elif wr_en:
            self.track_written += wr_rows
        if l_accept and l_head is not None:
            self.lq.popleft()
            self.lq_sent.popleft()
            self.track.append((l_head.signal, l_head.dma.rows, l_head.signal_store))
            for group in dma_groups(l_head.dma, memory.write_rows):
                beats = group_slots(group, memory.bus_bytes)
                self.dma_slots.extend([0] * (beats - 1) + [group.rows])
                timing.load_bytes += 0 if group.padding else beats * memory.bus_bytes
        # execute unit
        self.w_q = w_issue or (self.w_q and not w_fire)
        if w_start and e_head is not None:
            self.eq.popleft()
            self.aq.append(e_head)
            self.aq_need.append(self.eq_need.popleft())
            self.w_active, self.w_base, self.w_beat = True, e_head.w_row, 0
        elif w_issue_last:
            self.w_active = False
        elif w_issue:
            self.w_beat += 1
        if a_issued and self.a_cmd is not None:
            self.q_valid, self.q_last = True, self.a_left == 1
            self.q_emit = self.a_cmd.emit
            self.q_signal = self.a_cmd.signal and self.a_left == 1
        elif a_fire:
            self.q_valid = False
        if a_start:
            self.a_cmd = self.aq.popleft()
            self.aq_need.popleft()
            self.a_active, self.a_addr, self.a_left = True, self.a_cmd.a_row, self.a_cmd.m_len
            self.a_line, self.a_col = self.a_cmd.a_row, 0
        elif a_issue_last:
            self.a_active = False
        elif a_issued and self.a_cmd is not None:
            self.a_left -= 1
            count1 = self.a_cmd.a_count1
            if count1 and self.a_col + 1 == count1:  # the next line
                self.a_line = (self.a_line + self.a_cmd.a_stride2) & self.spad_mask
                self.a_addr, self.a_col = self.a_line, 0
            else:
                self.a_addr = (self.a_addr + self.a_cmd.a_stride1) & self.spad_mask
                self.a_col += 1
        # ws_ctrl, frozen with the array when a result waits
        if en:
            self.drain = [max(0, value - 1) for value in self.drain]
            if w_fire:
                self.w_count = 0 if w_last_beat else self.w_count + 1
                if w_last_beat:
                    self.bank_full[bank] = True
                    self.w_load_bank ^= 1
            if a_fire and a_last:
                self.bank_full[self.a_bank] = False
                self.drain[self.a_bank] = rows - 1
                self.a_bank ^= 1
            self.tags.pop()
            self.tags.appendleft((a_fire, a_emit))
            timing.compute_rows += int(a_fire)
        else:
            timing.array_stall_cycles += 1
        # store unit, epilogue, ws_dma_store
        self.epi_rows += int(admit) - int(epi_out_fire)
        self.out_rows += int(epi_out_fire) - int(out_pop)
        self.epi_fifo += int(self.s1_valid) - int(lane_done)
        self.s1_valid = admit
        if lane_step:
            self.epi_phase = 0 if lane_last else self.epi_phase + 1
        self.out_valid = lane_done or (self.out_valid and out_full)
        self.st_written += int(st_cmd_last)
        if write:
            if st_beat_last:
                self.st_rows.popleft()
                self.st_beat = 0
            else:
                self.st_beat += 1
            timing.store_bytes += memory.bus_bytes
        self.oc_made += int(oc_write)
        if s_accept and self.s_pending is not None and self.s_onchip:
            self.oc_active, self.oc_left = True, self.s_pending.rows
            self.s_pending = None
        else:
            if oc_write:
                self.oc_left -= 1
                self.oc_active = self.oc_left > 0
            if s_accept and self.s_pending is not None:
                store = self.s_pending
                self.st_rows = deque(row_beats(row.addr, store.length, memory.bus_bytes)
                                     for row in dma_rows(store))
                self.st_beat = 0
                self.s_pending = None
        if pool_issue:
            self.q2_valid, self.q2_first = True, self.p_t == 0
            self.q2_last = self.p_t == self.p_window - 1
        elif q2_consume:
            self.q2_valid = False
        if store_pop and isinstance(head, Store):
            self.sq.popleft()
            self.sq_need.popleft()
            self.s_pending, self.s_left = head.dma, head.dma.rows
            self.s_onchip = head.to_spad
            self.s_signal, self.res_addr = head.signal, head.dma.spad_row
            self.s_pool, self.p_window, self.p_wstride = bool(head.window), head.window, \
                head.window_stride
            self.p_pix = self.p_addr = self.p_line = head.dma.spad_row
            self.p_t, self.p_tx, self.p_reads = 0, 0, head.dma.rows * head.window
            self.p_wcount1, self.p_wstride2 = head.window_count1, head.window_stride2
            self.p_step = head.pixel_step or 1
        else:
            self.s_left -= int(admit)
            self.res_addr += int(res_read)
            if pool_issue:
                self.p_reads -= 1
                if self.p_t == self.p_window - 1:
                    self.p_t, self.p_tx, self.p_pix = 0, 0, self.p_pix + self.p_step
                    self.p_addr = self.p_line = self.p_pix
                elif self.p_wcount1 and self.p_tx == self.p_wcount1 - 1:  # the next line
                    self.p_t, self.p_tx = self.p_t + 1, 0
                    self.p_line += self.p_wstride2
                    self.p_addr = self.p_line
                else:
                    self.p_t, self.p_tx = self.p_t + 1, self.p_tx + 1
                    self.p_addr += self.p_wstride
        if config_pop and isinstance(head, Config):
            self.sq.popleft()
            self.sq_need.popleft()
            self.cfg_residual = head.residual is not None
        elif config_pop:  # a table chunk or the scales: the epilogue's settings stay
            self.sq.popleft()
            self.sq_need.popleft()
        if dispatch and offered is not None:
            if isinstance(offered, Load):
                self.lq_sent.append(self.st_sent)
            elif isinstance(offered, Compute):
                self.eq_need.append(self.oc_sent - offered.rows_ahead)
            else:
                self.sq_need.append(self.oc_sent - offered.rows_ahead
                                    if isinstance(offered, Store) else 0)
            if isinstance(offered, Store) and offered.to_spad:
                self.oc_sent += offered.dma.rows
            self.st_sent += int(isinstance(offered, Store) and not offered.to_spad)
            queue.append(self.commands.popleft())  # type: ignore[arg-type]
        timing.load_busy_cycles += int(bool(self.dma_slots_before))
        timing.store_busy_cycles += int(write)
        if self.tracing:
            timing.trace.append((bool(self.dma_slots_before), a_fire, write))
        return write


def accel_cycles(config: AccelConfig, commands: Sequence[Command],
                 trace: bool = False, limit: int = 10**9) -> AccelTiming:
    """Cycles and traffic of a command sequence on ws_accel (exactly the RTL's).

    On the C port of AccelModel (accel_native) where it builds, else on AccelModel; a
    trace is only kept by AccelModel.
    """
    from glensidec.hardware.accel_native import native_cycles, native_model

    native = None if trace else native_model()
    if native is not None:
        return native_cycles(native, config, commands, limit)
    return AccelModel(config).run(commands, limit=limit, trace=trace)


def _made(commands: CommandsOf) -> list[Command]:
    return commands_of(list(commands() if callable(commands) else commands))


def table_cycles(config: AccelConfig, commands: CommandsOf, table: npt.NDArray[np.int64],
                 limit: int = 10**9) -> AccelTiming:
    """accel_cycles of `commands` given their pack_commands `table` (the C model reads
    the table: packing a long program costs about as much as pricing it)."""
    from glensidec.hardware.accel_native import native_cycles, native_model

    native = native_model()
    if native is not None:
        return native_cycles(native, config, table, limit)
    return AccelModel(config).run(_made(commands), limit=limit)


def table_cycles_within(config: AccelConfig, commands: CommandsOf,
                        table: npt.NDArray[np.int64], bound: int) -> AccelTiming | None:
    """table_cycles, or None when the commands take more than `bound` cycles (the C model
    stops early when it can tell: `accel_native.native_cycles_within`)."""
    from glensidec.hardware.accel_native import native_cycles_within, native_model

    native = native_model()
    if native is not None:
        return native_cycles_within(native, config, table, bound)
    timing = AccelModel(config).run(_made(commands))
    return timing if timing.cycles <= bound else None


def timing_diagram(timing: AccelTiming, cycles_per_char: int = 1) -> str:
    """Three text lanes of a traced run: load slots, array rows, store beats.

    Each character covers `cycles_per_char` cycles: `#` busy every cycle, `+` busy in
    some of them, `.` idle.
    """
    lines = []
    for lane, name in enumerate(("load ", "array", "store")):
        marks = []
        for start in range(0, len(timing.trace), cycles_per_char):
            busy = sum(step[lane] for step in timing.trace[start:start + cycles_per_char])
            span = len(timing.trace[start:start + cycles_per_char])
            marks.append("#" if busy == span else "+" if busy else ".")
        lines.append(f"{name} |{''.join(marks)}|")
    return "\n".join(lines)


# -- one convolution (or GEMM) as a command sequence ----------------------------------------


@dataclass(frozen=True)
class LayerQuant:
    """Requantization of one layer's int32 results (per output channel), as the epilogue does."""

    epilogue: EpilogueConfig
    bias: tuple[int, ...]  # N int32
    multiplier: tuple[int, ...]  # N int32
    input_zero_point: int = 0  # the im2col padding value
    residual: ResidualConfig | None = None  # a residual add of an (M, N) int8 tensor
    #: per-column int8 scales of the biased sums (N: a run-time channel scale, whose
    #: values the commands carry only for the cycle model and run_functional), or None
    scale: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LayerProgram:
    """The commands of one layer and where its tensors sit in main memory."""

    commands: list[Command]
    input_base: int  # NHWC int8 feature map
    weight_base: int  # (K, N) int8, K ordered (ky, kx, channel)
    output_base: int  # (M, N) int8: NHWC output
    memory_bytes: int
    m_chunk: int  # output pixels (activation rows) per accumulator chunk
    folds: int  # K folds (taps × channel chunks of ROWS)
    piece_folds: int  # K folds on chip at once (a K piece)
    input_padding: int = 0  # the feature map is stored padded by this (packed taps)
    residual_base: int = -1  # (M, N) int8: the residual (NHWC), -1 without one

    def input_image(self, feature: npt.NDArray[np.integer],
                    zero_point: int) -> npt.NDArray[np.uint8]:
        """The bytes of the (H, W, C) feature map to store at input_base."""
        pad = self.input_padding
        height, width, channels = feature.shape
        image = np.full((height + 2 * pad, width + 2 * pad, channels), zero_point, np.int64)
        image[pad:pad + height, pad:pad + width] = feature
        packed: npt.NDArray[np.uint8] = (image.reshape(-1) & 0xFF).astype(np.uint8)
        return packed


def packs_taps(layer: ConvLayer, rows: int) -> bool:
    """Whether a scratchpad row carries several kernel taps (few channels, e.g. RGB).

    Taps next to each other along x read consecutive pixels, which are contiguous in
    an NHWC map, so one DMA row holds them all; a row may then straddle the border,
    which the DMA's per-row bounds cannot express, so such a layer's input is stored
    padded (by the host, with the zero point) and loaded without bounds.
    """
    return layer.pack_taps and layer.kernel > 1 and 2 * layer.channels <= rows and \
        layer.groups == 1 and layer.square


@dataclass(frozen=True)
class GroupBlock:
    """The input channels one N block of a grouped convolution reads: the channels of the
    groups its output columns n0 … n0 + width belong to."""

    n0: int
    width: int
    channel0: int
    span: int


def group_blocks(layer: ConvLayer, cols: int) -> list[GroupBlock]:
    """Per N block of `cols` output channels, the input channels it reads (every channel
    for an ungrouped layer)."""
    blocks = []
    for n0 in range(0, layer.out_channels, cols):
        width = min(cols, layer.out_channels - n0)
        if layer.groups == 1:
            blocks.append(GroupBlock(n0, width, 0, layer.channels))
            continue
        out_per, in_per = layer.out_channels // layer.groups, layer.channels // layer.groups
        first, last = n0 // out_per, (n0 + width - 1) // out_per
        blocks.append(GroupBlock(n0, width, first * in_per, (last - first + 1) * in_per))
    return blocks


def weight_rows(layer: ConvLayer, cols: int) -> int:
    """K of the (K, N) weight matrix in memory: taps × channels, or for a grouped layer
    taps × the most channels an N block reads (each block's rows from its first channel
    on, zero past its span: `weight_matrix`)."""
    span = max(block.span for block in group_blocks(layer, cols))
    return layer.taps * span


def weight_matrix(layer: ConvLayer, cols: int, weights: npt.NDArray[np.integer]
                  ) -> npt.NDArray[np.int64]:
    """The (K, N) weight matrix conv_program reads, from (kh, kw, C, N) weights
    (a grouped layer's zero outside each output channel's group): K ordered (ky, kx,
    channel); for a grouped layer the channels are those of the column's N block, counted
    from its first (`group_blocks`), so only the blocks' own channels are stored."""
    taps = layer.taps
    dense = np.asarray(weights, np.int64).reshape(taps, layer.channels, layer.out_channels)
    if layer.groups == 1:
        return dense.reshape(taps * layer.channels, layer.out_channels)
    span = weight_rows(layer, cols) // taps
    packed = np.zeros((taps, span, layer.out_channels), np.int64)
    for block in group_blocks(layer, cols):
        columns = slice(block.n0, block.n0 + block.width)
        packed[:, :block.span, columns] = \
            dense[:, block.channel0:block.channel0 + block.span, columns]
    return packed.reshape(taps * span, layer.out_channels)


def depthwise_weight_matrix(layer: ConvLayer, cols: int, diagonal: npt.ArrayLike
                            ) -> npt.NDArray[np.int64]:
    """`weight_matrix` of a depthwise 1×1 layer whose channel c is multiplied by diagonal[c]
    (or all by one value), without the (C, C) matrix it would unpack (Swin's rows are
    30,576 wide)."""
    assert layer.groups == layer.channels == layer.out_channels and layer.taps == 1
    packed = np.zeros((weight_rows(layer, cols), layer.out_channels), np.int64)
    channels = np.arange(layer.out_channels)
    packed[channels % cols, channels] = diagonal
    return packed


def unpack_weight_matrix(layer: ConvLayer, cols: int, packed: npt.NDArray[np.integer]
                         ) -> npt.NDArray[np.int64]:
    """The (kh, kw, C, N) weights `weight_matrix` packed (zero outside groups)."""
    taps = layer.taps
    rows = np.asarray(packed, np.int64).reshape(taps, -1, layer.out_channels)
    dense = np.zeros((taps, layer.channels, layer.out_channels), np.int64)
    for block in group_blocks(layer, cols):
        columns = slice(block.n0, block.n0 + block.width)
        dense[:, block.channel0:block.channel0 + block.span, columns] = \
            rows[:, :block.span, columns]
    return dense.reshape(*layer.kernel_hw, layer.channels, layer.out_channels)


def group_mask(layer: ConvLayer) -> npt.NDArray[np.int64]:
    """(C, N): 1 where output channel n reads input channel c (its group), else 0."""
    in_per, out_per = layer.channels // layer.groups, layer.out_channels // layer.groups
    groups_in = np.arange(layer.channels) // in_per
    groups_out = np.arange(layer.out_channels) // out_per
    mask: npt.NDArray[np.int64] = (groups_in[:, None] == groups_out[None, :]).astype(np.int64)
    return mask


def conv_folds(layer: ConvLayer, rows: int, block: GroupBlock | None = None
               ) -> list[tuple[int, int, int, int]]:
    """K folds in order: (ky, kx, first channel, bytes): the channels of a tap (ky, kx
    count taps, not pixels: `tap_offset`) cut into ROWS, or (packs_taps) as many whole
    taps along x as fit a row. For a grouped layer, the folds of one N block (`block`: its
    channels only)."""
    kernel_h, kernel_w = layer.kernel_hw
    if layer.groups > 1:
        assert block is not None, "a grouped layer's folds are per N block"
        return [(ky, kx, block.channel0 + c0, min(rows, block.span - c0))
                for ky in range(kernel_h) for kx in range(kernel_w)
                for c0 in range(0, block.span, rows)]
    if packs_taps(layer, rows):
        group = rows // layer.channels
        return [(ky, kx, 0, min(group, layer.kernel - kx) * layer.channels)
                for ky in range(layer.kernel) for kx in range(0, layer.kernel, group)]
    return [(ky, kx, channel0, min(rows, layer.channels - channel0))
            for ky in range(kernel_h) for kx in range(kernel_w)
            for channel0 in range(0, layer.channels, rows)]


def layer_folds(layer: ConvLayer, config: AccelConfig) -> int:
    """K folds per N block (a grouped layer's blocks: the most any block has)."""
    if layer.groups == 1:
        return len(conv_folds(layer, config.rows))
    return max(len(conv_folds(layer, config.rows, block))
               for block in group_blocks(layer, config.cols))


def _align(value: int, to: int = 64) -> int:
    return -(-value // to) * to


#: layer_tiling trades up to this fraction of estimated cycles for fewer rows loaded.
TRAFFIC_SLACK = 0.02


@dataclass(frozen=True)
class LayerTiling:
    """How a layer is cut to fit the memories: K folds per piece, output rows per chunk."""

    folds: int  # K folds of the layer (taps × channel chunks of ROWS)
    piece_folds: int  # K folds whose weights and activations are on chip at once
    chunk_rows: int  # output rows (of out_w pixels) per accumulator chunk

    @property
    def pieces(self) -> int:
        return -(-self.folds // self.piece_folds)


def layer_tiling(config: AccelConfig, layer: ConvLayer, residual: bool = False
                 ) -> LayerTiling:
    """Tiles that fit and keep the array busy: K pieces in a weight buffer, M chunks in the
    accumulator and an activation buffer (each buffer a quarter of the scratchpad; with a
    `residual` add, an activation buffer also holds the chunk's residual rows); among the
    pieces that fit, the one with the fewest estimated cycles (then rows loaded).

    Raises CapacityError naming the sizes when not even one K fold of one output row fits.
    """
    out_h, out_w = layer.out_size
    folds = layer_folds(layer, config)
    extra = int(residual)  # residual rows per output pixel in an activation buffer
    quarter = config.memory.scratchpad_rows // 4
    row_bytes = config.memory.row_bytes
    buffer = (f"a {quarter * row_bytes}-byte buffer (a quarter of the "
              f"{config.memory.scratchpad_bytes}-byte scratchpad)")
    piece = min(folds, quarter // config.rows)
    if piece < 1:
        raise CapacityError(
            f"layer {layer.name}: the weights of one K fold ({config.rows} rows of {row_bytes} B"
            f" = {config.rows * row_bytes} B) do not fit {buffer}")
    if out_w > config.acc_depth or out_w * (1 + extra) > quarter:
        raise CapacityError(
            f"layer {layer.name}: one output row of {out_w} pixels needs {out_w} accumulator "
            f"rows ({out_w * config.cols * 4} B; the accumulator has {config.acc_depth} rows, "
            f"{config.acc_depth * config.cols * 4} B) and {out_w * (1 + extra) * row_bytes} B "
            f"of im2col {'and residual ' if extra else ''}rows per K fold ({buffer})")
    largest = min(piece, quarter // out_w - extra)
    # Candidates: halvings of the reduction, and the pieces that let an M chunk of r
    # output rows fit (small-M layers: the whole M in one chunk saves reloading weights).
    pieces = {largest} | {-(-folds // parts) for parts in range(1, 9)}
    pieces |= {quarter // (out_w * rows) - extra for rows in range(1, out_h + 1)}
    tilings = [LayerTiling(folds, piece, min(config.acc_depth // out_w,
                                             quarter // (out_w * (piece + extra)), out_h))
               for piece in sorted(pieces) if 1 <= piece <= largest]
    shape = replace(layer, name="")  # equal shapes, equal estimates (one per shape)
    estimates = {tiling: _tiling_estimate(config, shape, tiling, extra) for tiling in tilings}
    # Among the tilings within TRAFFIC_SLACK of the fastest estimate, the one that loads
    # the fewest rows: on a bus with room to spare, several tilings keep the array as busy,
    # and the one that reloads least leaves the bus to everything else (ResNet-18 at
    # 16 B/cycle: 101.8 → 80.7 MB loaded and 710 fewer cycles in all, one layer 1.6 %
    # slower, others faster: the estimate is rough, `accel_cycles` exact).
    fastest = min(cycles for cycles, _ in estimates.values())
    return min((tiling for tiling in tilings
                if estimates[tiling][0] <= fastest * (1 + TRAFFIC_SLACK)),
               key=lambda tiling: (estimates[tiling][1], estimates[tiling][0]))


@functools.lru_cache(maxsize=4096)
def _tiling_estimate(config: AccelConfig, layer: ConvLayer, tiling: LayerTiling,
                     residual: int = 0) -> tuple[int, int]:
    """(cycles, rows loaded) of conv_program's steps, roughly: each step takes the longer
    of its compute (`piece × max(m, weight beats)`: ROWS / weight_load_rows beats a tile)
    and its loads (one bus beat per row, more when rows are wider than the bus). Only for
    choosing tiles; `accel_cycles` is exact."""
    out_h, out_w = layer.out_size
    R, blocks = config.rows, -(-layer.out_channels // config.cols)
    bus = config.memory.bus_bytes
    beats = max(1, config.memory.row_bytes // bus)
    # Activation rows start wherever their pixel does: unless the channels keep them
    # aligned, a row of L bytes spans 1 + (L − 1)/bus beats on average.
    blocks_of = group_blocks(layer, config.cols)
    length = max(fold[3] for block in blocks_of[:1]
                 for fold in conv_folds(layer, R, block))
    aligned = layer.channels % bus == 0 and not packs_taps(layer, R) and \
        all(block.channel0 % bus == 0 for block in blocks_of)
    grouped = layer.groups > 1  # each N block reads its own channels
    act_beats = -(-length // bus) if aligned else 1 + (length - 1) / bus
    # The sum over every (chunk, block, piece) of the loop this replaces, taken per
    # distinct term times how often it occurs: chunks are full but the last, blocks all
    # alike but the first, pieces full but the last. Every term is a multiple of 1/bus
    # (a power of two) well below 2**53·bus, so the floats add exactly in any order and the
    # estimate is the loop's to the bit (a dense layer in pieces of one fold was 400 k
    # iterations).
    piece_count = -(-tiling.folds // tiling.piece_folds)
    last_size = tiling.folds - (piece_count - 1) * tiling.piece_folds
    chunk_count = -(-out_h // tiling.chunk_rows)
    chunk_rows = [(tiling.chunk_rows, chunk_count - 1),
                  (out_h - (chunk_count - 1) * tiling.chunk_rows, 1)]
    cycles, loaded = 0.0, 0
    for rows_here, chunks in chunk_rows:
        m = rows_here * out_w
        for first_block, block_count in ((True, 1), (False, blocks - 1)):
            for last, size, count in ((False, tiling.piece_folds, piece_count - 1),
                                      (True, last_size, 1)):
                times = chunks * block_count * count
                if not times:
                    continue
                act_rows = 0
                if piece_count > 1 or first_block or grouped:
                    act_rows = m * (size if piece_count > 1 else tiling.folds)
                if last:  # the last piece loads the residual
                    act_rows += residual * m
                slots = size * R * beats + act_rows * act_beats
                cycles += times * max(size * max(m, R // config.weight_load_rows), slots)
                loaded += times * (size * R + act_rows)
    return round(cycles), loaded


#: conv_program's schedules: "im2col" (the DMA gathers every window's rows from main
#: memory), "window" (input rows resident, windows read in the scratchpad), "best" (the
#: one of them the exact cycle model prices fastest).
SCHEDULES = ("best", "im2col", "window")


def conv_program(config: AccelConfig, layer: ConvLayer, quant: LayerQuant,
                 schedule: str = "best") -> LayerProgram:
    """The commands of one convolution (or GEMM) in `schedule` (SCHEDULES); "best" prices
    every schedule that fits with `accel_cycles` and keeps the fastest (`best_conv_program`).
    CapacityError naming the sizes when the schedule asked for does not fit."""
    if quant.scale is not None:
        raise ValueError(f"layer {layer.name}: per-column scales are a sum pool's only")
    if schedule == "im2col":
        return im2col_program(config, layer, quant)
    if schedule == "window":
        tilings = window_tilings(config, layer, quant.residual is not None)
        if not tilings:
            raise CapacityError(f"layer {layer.name}: its input rows cannot stay resident "
                                "(a grouped layer, or a band of one output row does not "
                                "fit a quarter of the scratchpad)")
        return window_program(config, layer, quant, tilings[0])
    if schedule != "best":
        raise ValueError(f"unknown schedule {schedule!r}; one of {', '.join(SCHEDULES)}")
    return best_conv_program(config, layer, quant)[0]


def best_conv_program(config: AccelConfig, layer: ConvLayer, quant: LayerQuant
                      ) -> tuple[LayerProgram, AccelTiming]:
    """The schedule of the layer the exact model prices fastest, with its timing: today's
    im2col program (when it fits), every window tiling that fits, and the tilings that
    take N blocks side by side (`interleaved_tilings`: the fastest window tiling's
    variants, and chunks sized for such a group); among those within TRAFFIC_SLACK of the
    fastest, the one that moves the fewest bytes. CapacityError (im2col's, naming the
    sizes) when none fits."""
    program, _, timing = best_conv_table(config, layer, quant)
    return program, timing


def best_conv_table(config: AccelConfig, layer: ConvLayer, quant: LayerQuant,
                    commands: bool = True
                    ) -> tuple[LayerProgram, npt.NDArray[np.int64], AccelTiming]:
    """best_conv_program's choice with its commands packed (pack_commands, the table the
    generated C reads): the compile keeps it. Without `commands` the program's command
    list is empty (a caller that reads only the table: making hundreds of thousands of
    Command objects cost a long layer's search as much as pricing a candidate)."""
    from glensidec.hardware.accel_native import PackBuffer, pack_commands

    if quant.scale is not None:
        raise ValueError(f"layer {layer.name}: per-column scales are a sum pool's only")
    # Each candidate is built as its packed table (a window schedule's straight from its
    # steps, `window_table`; im2col's from a stream whose computes are flat) and priced;
    # its table is kept only while it might still be chosen, and the one chosen alone
    # gets Command objects (with `commands`). (Built as commands, the candidates of a
    # long layer held gigabytes, and making their objects took most of the compile:
    # vgg11's 25088 → 4096 dense layer has five of 400 k commands and more.)
    # Each table is packed into a buffer of its own, taken back when its candidate is
    # ruled out: memory fresh from the system costs the kernel more to hand out (its
    # pages zeroed on first touch) than packing costs, and the one chosen is not packed
    # again. The buffers left over stay for the next layer's search (SPARE_BUFFERS).
    priced: list[tuple[int, AccelTiming]] = []  # (place in the order, timing)
    kept: dict[int, _Candidate] = {}
    spare = _spare_buffers

    def rank(entry: tuple[int, AccelTiming]) -> tuple[int, int, int]:
        place, timing = entry  # the rule's key, ties to the first
        return timing.load_bytes + timing.store_bytes, timing.cycles, place

    def window(tiling: WindowTiling) -> _Candidate:
        buffer = spare.pop() if spare else PackBuffer()
        program, table, others = window_table(config, layer, quant, tiling, buffer)
        return _Candidate(program, table, buffer, lambda: stream_of_table(table, others))

    def im2col() -> _Candidate:
        program, stream = im2col_stream(config, layer, quant)
        buffer = spare.pop() if spare else PackBuffer()
        return _Candidate(program, pack_commands(stream, buffer), buffer, lambda: stream)

    def price(place: int, built: _Candidate) -> AccelTiming | None:
        """The candidate's timing, or None when it is slower than the slack of the
        fastest so far (then it cannot be chosen, and its run stops early)."""
        table, buffer, stream = built.table, built.buffer, built.stream
        if priced:
            bound = min(other.cycles for _, other in priced) * (1 + TRAFFIC_SLACK)
            within = table_cycles_within(config, stream, table, math.floor(bound))
            if within is None:
                spare.append(buffer)
                return None
            timing = within
        else:
            timing = table_cycles(config, stream, table)
        priced.append((place, timing))
        kept[place] = built
        # A candidate slower than the slack of the fastest so far, or beaten on the
        # rule's key by one at most as slow (within the slack whenever it is), cannot be
        # chosen whatever comes later.
        fastest = min(other.cycles for _, other in priced)
        for entry in priced:
            if entry[0] in kept and (
                    entry[1].cycles > fastest * (1 + TRAFFIC_SLACK) or
                    any(other[1].cycles <= entry[1].cycles and rank(other) < rank(entry)
                        for other in priced)):
                spare.append(kept.pop(entry[0]).buffer)
        return timing

    # The order: im2col (place -1), the window tilings, the interleaved ones; im2col is
    # priced last, though, and only when it might be chosen: its load slots
    # (`im2col_load_slots`) bound its cycles from below, and a bound past the slack of
    # the fastest other schedule rules it out unbuilt (vgg11's dense layers).
    error: CapacityError | None = None
    try:
        im2col_slots = im2col_load_slots(config, layer, quant.residual is not None)
    except CapacityError as problem:
        error = problem
    tilings = window_tilings(config, layer, quant.residual is not None)
    if error is not None and not tilings:
        raise error
    # (a window tiling ruled out while priced is not the fastest)
    windows = [getattr(price(place, window(tiling)), "cycles", math.inf)
               for place, tiling in enumerate(tilings)]
    fastest_window = tilings[windows.index(min(windows))] if tilings else None
    for place, tiling in enumerate(interleaved_tilings(config, layer, fastest_window,
                                                       quant.residual is not None),
                                   start=len(tilings)):
        price(place, window(tiling))
    others = min((timing.cycles for _, timing in priced), default=None)
    if error is None and (others is None or im2col_slots <= others * (1 + TRAFFIC_SLACK)):
        price(-1, im2col())
    fastest = min(timing.cycles for _, timing in priced)
    place, timing = min((entry for entry in priced
                         if entry[1].cycles <= fastest * (1 + TRAFFIC_SLACK)), key=rank)
    chosen = kept.pop(place)
    spare += [entry.buffer for entry in kept.values()]
    # Chunks reading one band (a layer the epilogue holds back) replace that choice only
    # when strictly faster: every other layer keeps the schedule it had
    for tiling in one_band_tilings(config, layer, quant.residual is not None):
        if window_weight_beats(config, layer, tiling) >= timing.cycles:
            continue  # not strictly faster, whatever its table (a 1×1's chunks of a pixel)
        built = window(tiling)
        built_timing = table_cycles_within(config, built.stream, built.table,
                                           timing.cycles - 1)
        if built_timing is not None:  # strictly faster
            spare.append(chosen.buffer)
            chosen, timing = built, built_timing
        else:
            spare.append(built.buffer)
    program = chosen.program
    if commands:
        program = replace(program, commands=commands_of(chosen.stream()))
    # the largest few stay (a pool as large as one layer's candidates: their pages stay
    # mapped, where a layer's own buffers had the kernel zero every page of them anew)
    spare.sort(key=lambda buffer: len(buffer.rows))
    del spare[:-SPARE_BUFFERS]
    return program, chosen.table, timing


def window_weight_beats(config: AccelConfig, layer: ConvLayer, tiling: WindowTiling) -> int:
    """A lower bound on the cycles of `tiling`'s window schedule (interleave 1): each of
    its COMPUTEs (a chunk's K folds for each N block) streams its ROWS weight rows into
    the array (weight_load_rows a beat) a beat a cycle, one COMPUTE after another."""
    assert tiling.interleave == 1
    blocks = -(-layer.out_channels // config.cols)
    folds = len(_band_of(layer, config.rows).offsets)
    beats = config.rows // config.weight_load_rows
    return len(tiling.chunks(layer.out_size[0])) * blocks * folds * beats


#: Table buffers best_conv_table keeps from one layer's search for the next's.
SPARE_BUFFERS = 3
_spare_buffers: list[PackBuffer] = []


@dataclass
class _Candidate:
    """A schedule best_conv_table prices: its program (without commands), its packed
    table (in `buffer`'s rows) and how to make its stream (for the Python cycle model,
    and the chosen one's commands)."""

    program: LayerProgram
    table: npt.NDArray[np.int64]
    buffer: PackBuffer
    stream: Callable[[], Stream]


@dataclass(frozen=True)
class WindowTiling:
    """How the window schedule cuts a layer: output rows per chunk (the input band the
    chunk reads stays resident), whether bands alternate between two buffers (several
    chunks) or one band holds the whole layer's, K folds per weight piece, and whether
    the next chunk's band loads during this chunk's second step (`prefetch`) rather
    than before the next chunk's first.

    Where the weights sit: `weight_buffer` = 0 is two buffers of a quarter of the
    scratchpad each (banks 2 and 3), the bands in the half below; else two buffers of
    `weight_buffer` rows at the top of the scratchpad (a piece's rows: the bands get the
    rest), or with `resident` every piece of every N block in rows of its own
    (`weight_buffer` rows in all), loaded with the first chunk and kept for the others.
    `first_rows` (> 0) makes the first chunk that many output rows (a small first band
    starts the array sooner), the others `chunk_rows`.

    `interleave` (> 1): a chunk's first that many N blocks accumulate side by side (block
    b's partial sums from accumulator row b · chunk_rows · out_w on, each COMPUTE naming
    its rows), taking each K fold for every block of the group in turn, so the array works
    on each band plane as it arrives instead of waiting for the whole band before the
    first block can finish; a group's weight piece holds the folds of each of its blocks.
    The chunk's other blocks follow one at a time (their band is in by then)."""

    chunk_rows: int
    double_buffered: bool
    piece_folds: int
    prefetch: bool = False
    weight_buffer: int = 0
    resident: bool = False
    first_rows: int = 0
    interleave: int = 1  # N blocks side by side in the accumulator (1: one at a time)
    # chunks of `chunk_rows` output rows that all read one band of the whole output,
    # loaded chunk by chunk (each chunk the band rows it is the first to read), with the
    # weights resident: a layer of few K folds, whose rows the epilogue takes slower than
    # the array makes them, starts emitting after a chunk's folds, not the whole layer's
    one_band: bool = False

    def chunks(self, out_h: int) -> list[tuple[int, int]]:
        """(first output row, output rows) of each chunk."""
        first = min(self.first_rows or self.chunk_rows, out_h)
        return [(0, first)] + [(oy0, min(self.chunk_rows, out_h - oy0))
                               for oy0 in range(first, out_h, self.chunk_rows)]

    def weight_start(self, total: int) -> int:
        """The first scratchpad row of the weights (the bands are below it)."""
        if self.weight_buffer == 0:
            return total // 2
        return total - self.weight_buffer * (1 if self.resident else 2)

    def band_buffer(self, total: int, bank_rows: int = 0) -> int:
        """Rows of a band buffer: the rows below the weights, or half of them when double
        buffered; below the weights' first bank with `bank_rows` (a residual add's rows
        beside the bands are read while weights are)."""
        start = self.weight_start(total)
        if bank_rows:
            start -= start % bank_rows
        return start // 2 if self.double_buffered else start



@dataclass(frozen=True)
class _Plane:
    """One plane of a band: its rows hold `length` bytes from channel `channel0` of input
    pixel x = x0 + bx·x_step (in the map as stored), and the K folds that read it."""

    channel0: int
    length: int
    x0: int
    folds: tuple[int, ...]  # indices into conv_folds


@dataclass(frozen=True)
class _Band:
    """The resident input rows of a window schedule. Band row by is input row
    y0 + by·y_step (y0 = the chunk's first output row · stride − padding); band pixel
    (by, bx) of plane p is stored at p·plane_rows + by·width + bx. K fold f reads, for
    output pixel (oy, ox) of its chunk, band pixel (oy·stride_y + dy_f, ox·stride_x + dx_f)
    of its plane: a 2-D pattern from offset dy_f·width + dx_f.

    A k×k layer's planes are its channel chunks of ROWS and its band every pixel the
    windows touch (dy, dx = the tap's offset: ky, kx, or times the dilation); along an
    axis the window has one tap (a 1×1, or the 1 of a 1×7), the band holds only the
    pixels the stride samples; a layer with packed taps (few channels) has a plane per
    group of taps along x, each row the group's pixels at the stride's x positions
    (dy = ky, dx = 0)."""

    planes: tuple[_Plane, ...]
    offsets: tuple[tuple[int, int], ...]  # (dy, dx) per K fold
    y_step: int
    x_step: int
    stride_y: int
    stride_x: int
    width: int
    reach: int  # band rows one output row reads
    padded_input: bool  # the map is stored padded (packed taps): no bounds

    def rows(self, out_rows: int) -> int:
        """Band rows `out_rows` output rows read."""
        return (out_rows - 1) * self.stride_y + self.reach


@functools.lru_cache(maxsize=64)
def _band_of(layer: ConvLayer, rows: int) -> _Band:
    # (memoised: a layer's tilings and each of its candidates' streams read its band)
    folds = conv_folds(layer, rows)
    out_w, stride, kernel = layer.out_size[1], layer.stride, layer.kernel
    # the folds of each plane, in order: by their first channel (or tap along x, packed)
    by_key: dict[int, list[int]] = {}
    packed = packs_taps(layer, rows)
    for index, fold in enumerate(folds):
        by_key.setdefault(fold[1] if packed else fold[2], []).append(index)
    if packed:  # plane g: the taps kx = g·group … of every ky (square)
        group = rows // layer.channels
        planes = tuple(_Plane(0, min(group, kernel - x0) * layer.channels, x0,
                              tuple(by_key.get(x0, ())))
                       for x0 in range(0, kernel, group))
        return _Band(planes, tuple((fold[0], 0) for fold in folds), 1, stride, stride, 1,
                     out_w, kernel, True)
    chunks = range(0, layer.channels, rows)
    planes = tuple(_Plane(channel0, min(rows, layer.channels - channel0), 0,
                          tuple(by_key.get(channel0, ())))
                   for channel0 in chunks)
    (kernel_h, kernel_w), (span_h, span_w) = layer.kernel_hw, layer.span_hw
    stride_h, stride_w = layer.stride_hw
    offsets = tuple(layer.tap_offset(fold[0], fold[1]) for fold in folds)
    # per axis: one tap reads only the sampled pixels (band step = the stride, the
    # pattern's step 1); several read every pixel their windows span
    y_step, pattern_y, reach = (stride_h, 1, 1) if kernel_h == 1 else (1, stride_h, span_h)
    x_step, pattern_x, width = (stride_w, 1, out_w) if kernel_w == 1 else \
        (1, stride_w, (out_w - 1) * stride_w + span_w)
    return _Band(planes, offsets, y_step, x_step, pattern_y, pattern_x, width, reach, False)


def _window_chunkings(config: AccelConfig, layer: ConvLayer, band: _Band, residual: bool,
                      start: int) -> list[tuple[int, bool]]:
    """(chunk rows, double buffered) of the band layouts below scratchpad row `start`:
    the whole output in one chunk whose band fills the rows, and chunks of balanced
    output rows whose bands alternate between two halves of them. Each chunk's M rows fit
    the accumulator; a `residual` add's rows (two regions of a chunk's) sit beside the
    bands, in banks without weights (a residual row and a weight row are read in the
    same cycle on two ports, which one bank cannot serve)."""
    out_h, out_w = layer.out_size
    if residual:
        start -= start % config.memory.bank_rows
    planes = len(band.planes)
    chunkings = []
    if out_h * out_w <= config.acc_depth and \
            band.rows(out_h) * band.width * planes + 2 * residual * out_h * out_w <= start:
        chunkings.append((out_h, False))
    fitting = [rows for rows in range(1, out_h + 1)
               if rows * out_w <= config.acc_depth
               and band.rows(rows) * band.width * planes + residual * rows * out_w
               <= start // 2]
    chunks = -(-out_h // max(fitting)) if fitting else 0
    if chunks > 1 or (chunks == 1 and not chunkings):  # (one chunk: the same as the above)
        chunkings.append((-(-out_h // chunks), True))
    return chunkings


def window_tilings(config: AccelConfig, layer: ConvLayer, residual: bool = False
                   ) -> list[WindowTiling]:
    """The window schedules that fit, for the exact model to choose from.

    With weight buffers of a quarter each (banks 2 and 3): the whole output in one chunk
    with its band in the other half, and chunks of balanced output rows whose bands
    alternate between a quarter each; each with K pieces as large as a weight buffer
    holds (balanced) and half that (the next piece loads sooner). Then, where they let
    bands of more output rows fit (fewer chunks: the weights cross the bus once per
    chunk), weight buffers only as large as their piece, for pieces of a quarter down to
    an eighth of that; and where the weights of every N block fit beside two bands, the
    weights resident (loaded once for all chunks, then also with a small first chunk).
    Chunkings of several chunks also come with the next band loaded early (`prefetch`).
    None for a grouped layer (each N block reads its own channels)."""
    R = config.rows
    if layer.groups != 1:
        return []
    out_h = layer.out_size[0]
    band = _band_of(layer, R)
    total = config.memory.scratchpad_rows
    quarter = total // 4
    folds = len(band.offsets)
    most = min(folds, quarter // R)
    if most < 1:
        return []
    blocks = -(-layer.out_channels // config.cols)

    def balanced(limit: int) -> int:
        return -(-folds // -(-folds // limit))

    def variants(rows: int, double: bool, piece: int, weight_buffer: int = 0,
                 resident: bool = False) -> list[WindowTiling]:
        several = double and rows < out_h
        steps = blocks * -(-folds // piece)  # per chunk
        tilings = [WindowTiling(rows, double, piece, prefetch, weight_buffer, resident)
                   for prefetch in ((False, True) if several and steps > 1 else (False,))]
        if several and rows >= 4 and resident:  # a small first band starts sooner
            tilings.append(replace(tilings[-1], first_rows=max(1, rows // 4)))
        return tilings

    tilings: list[WindowTiling] = []
    pieces = sorted({balanced(most), -(-folds // (2 * -(-folds // most)))}, reverse=True)
    today = _window_chunkings(config, layer, band, residual, total // 2)
    for rows, double in today:
        for piece in pieces:
            tilings += variants(rows, double, piece)
    fewest = min((-(-out_h // rows) for rows, _ in today), default=out_h + 1)
    for piece in sorted({balanced(max(1, most // part)) for part in (1, 2, 4, 8)},
                        reverse=True):
        chunkings = _window_chunkings(config, layer, band, residual, total - 2 * piece * R)
        if chunkings and -(-out_h // chunkings[0][0]) < fewest:
            fewest = -(-out_h // chunkings[0][0])
            tilings += variants(*chunkings[0], piece, piece * R)
    resident = blocks * folds * R
    piece = balanced(most)
    for rows, double in _window_chunkings(config, layer, band, residual, total - resident)[-1:]:
        if rows < out_h:  # one chunk loads the weights once anyway
            tilings += variants(rows, double, piece, resident, True)
    return tilings


def one_band_tilings(config: AccelConfig, layer: ConvLayer, residual: bool = False
                     ) -> list[WindowTiling]:
    """Window tilings whose chunks of a few output rows all read one band of the whole
    output (`WindowTiling.one_band`), for a layer whose rows the epilogue takes slower
    than the array makes them (fewer K folds than the epilogue's cycles a row: a first
    convolution of a few input channels). One chunk would emit its rows only after every
    fold of the whole layer, and the epilogue's rows would follow one by one; chunks of
    1, 2, a quarter and half the output rows emit after their own folds, so the epilogue
    works while the array computes the next chunk. Weights resident, the band loaded
    chunk by chunk; none when that does not fit, or with a residual add."""
    R = config.rows
    out_h, out_w = layer.out_size
    band = _band_of(layer, R) if layer.groups == 1 else None
    if band is None or residual or out_h < 2:
        return []
    folds = len(band.offsets)
    quarter = config.memory.scratchpad_rows // 4
    most = min(folds, quarter // R)
    if most < 1 or folds >= config.epilogue_cycles:
        return []
    piece = -(-folds // -(-folds // most))
    resident = -(-layer.out_channels // config.cols) * folds * R
    band_rows = band.rows(out_h) * band.width * len(band.planes)
    if band_rows > config.memory.scratchpad_rows - resident:
        return []
    sizes = sorted({1, 2, out_h // 4, out_h // 2} & set(range(1, out_h)))
    return [WindowTiling(rows, False, piece, weight_buffer=resident, resident=True,
                         one_band=True) for rows in sizes if rows * out_w <= config.acc_depth]


def _covering_blocks(config: AccelConfig, layer: ConvLayer, band: _Band) -> int:
    """N blocks whose computes, side by side, take as long as their band planes take to
    arrive over the bus (each fold computes as many rows as its plane loads; a plane's
    rows take ROW_BYTES / BUS_BYTES cycles each)."""
    memory = config.memory
    return -(-len(band.planes) * memory.row_bytes // (len(band.offsets) * memory.bus_bytes))


def interleaved_tilings(config: AccelConfig, layer: ConvLayer, fastest: WindowTiling | None,
                        residual: bool = False) -> list[WindowTiling]:
    """Window tilings with N blocks side by side in the accumulator (`interleave`), for a
    bus slower than the array: the `fastest` window tiling with as many blocks as the
    accumulator holds its chunks of, and with the blocks whose computes cover their band's
    arrival (`_covering_blocks`); and chunks small enough for that many blocks, with every
    block's weights resident (else weight buffers of a quarter). A group's weight piece
    holds the folds of each of its blocks. None with a residual add or for a grouped layer.
    """
    if residual or layer.groups != 1:
        return []
    R = config.rows
    out_h, out_w = layer.out_size
    blocks = -(-layer.out_channels // config.cols)
    band = _band_of(layer, R)
    folds, planes = len(band.offsets), len(band.planes)
    covering = _covering_blocks(config, layer, band)
    total = config.memory.scratchpad_rows
    quarter = total // 4

    def balanced(limit: int) -> int:
        return -(-folds // -(-folds // limit))

    tilings = []
    if fastest is not None and fastest.interleave == 1:
        most = min(blocks, config.acc_depth // (fastest.chunk_rows * out_w))
        buffer = fastest.weight_buffer or quarter
        for group in sorted({most, min(most, covering)}, reverse=True):
            fit = buffer // (group * R)
            if group < 2 or (not fastest.resident and fit < 1):
                continue
            piece = fastest.piece_folds if fastest.resident else \
                min(fastest.piece_folds, balanced(fit))
            tilings.append(replace(fastest, interleave=group, piece_folds=piece, prefetch=False))
    resident = blocks * folds * R
    for group in sorted({covering, covering + 1}):
        rows = min(out_h, config.acc_depth // (group * out_w))
        if not 2 <= group <= blocks or rows < 1:
            continue
        chunks = -(-out_h // rows)
        rows = -(-out_h // chunks)
        band_rows = band.rows(rows) * band.width * planes * (2 if chunks > 1 else 1)
        if band_rows <= total - resident:
            tilings.append(WindowTiling(rows, chunks > 1, balanced(min(folds, quarter // R)),
                                        weight_buffer=resident, resident=True,
                                        interleave=group))
        elif band_rows <= total // 2 and quarter >= group * R:
            tilings.append(WindowTiling(rows, chunks > 1,
                                        balanced(min(folds, quarter // (group * R))),
                                        interleave=group))
    return tilings


#: A COMPUTE of the window schedule as the packed table's columns (accel_native's
#: _COMPUTE_FIELDS: wait, signal, w_row, a_row, m_len, add, emit, a_count1, a_stride1,
#: a_stride2, acc_row), not a `Compute`: a long layer's candidate schedules are hundreds
#: of thousands of them, and the compile only packs and prices all but the one it keeps.
FlatCompute = tuple[int, ...]
#: A LOAD as the packed table's columns (accel_native's LOAD_COLUMNS: wait, signal, its
#: DMA's fields in DmaCommand's order, wait_store, signal_store). A flat command is told
#: by its width: FLAT_COMPUTE_WIDTH or FLAT_LOAD_WIDTH ints.
FlatLoad = tuple[int, ...]
FLAT_COMPUTE_WIDTH, FLAT_LOAD_WIDTH = 11, 19
#: A command stream whose COMPUTEs and LOADs may be flat (`commands_of` makes them whole).
Stream = list[Command | FlatCompute | FlatLoad]
#: Commands, or what makes them when they are needed (a table's stream, made only for the
#: Python model: the C model reads the table).
CommandsOf = Sequence[Command | FlatCompute] | Callable[[], Sequence[Command | FlatCompute]]
_Computes = TypeVar("_Computes", Compute, FlatCompute)
#: A DmaCommand's fields in order, as a tuple (`dma_fields`).
DmaFields = tuple[int, ...]


def dma_fields(base: int, length: int, count1: int = 1, stride1: int = 0, count2: int = 1,
               stride2: int = 0, spad_row: int = 0, bounds: bool = False, y0: int = 0,
               y_step: int = 0, height: int = 1, x0: int = 0, x_step: int = 0,
               width: int = 1, pad_value: int = 0) -> DmaFields:
    """DmaCommand(…)'s fields as a tuple, in order, with its defaults (a candidate's
    thousands of loads are packed, not made into objects; DmaCommand(*fields) is one)."""
    return (base, length, count1, stride1, count2, stride2, spad_row, bounds, y0, y_step,
            height, x0, x_step, width, pad_value)


#: How many fields a DmaCommand has (`dma_fields`' tuple).
DMA_WIDTH = 15


def dma_command(fields: DmaFields) -> DmaCommand:
    """The DmaCommand of `dma_fields`' tuple."""
    (base, length, count1, stride1, count2, stride2, spad_row, bounds, y0, y_step, height, x0,
     x_step, width, pad_value) = fields
    return DmaCommand(base, length, count1, stride1, count2, stride2, spad_row, bool(bounds),
                      y0, y_step, height, x0, x_step, width, pad_value)


#: A region of the scratchpad a load writes and computes read, numbered (`_band_region`,
#: `_weights_region`, `_residual_region`): the token passes look one up per compute.
_Region = int
_BAND, _WEIGHTS, _RESIDUAL = 0, 1, 2  # the region's kind: its number modulo 3


def _band_region(buffer: int, plane: int) -> _Region:
    """Band buffer `buffer` (0 or 1)'s plane `plane`."""
    return 3 * (2 * plane + buffer) + _BAND


def _weights_region(index: int) -> _Region:
    """Weight buffer `index` (or a resident piece's rows)."""
    return 3 * index + _WEIGHTS


def _residual_region(index: int) -> _Region:
    """Residual region `index` (0 or 1)."""
    return 3 * index + _RESIDUAL


def commands_of(stream: Stream) -> list[Command]:
    """The stream with its flat COMPUTEs and LOADs as `Compute`s and `Load`s."""
    return [item if not isinstance(item, tuple) else
            Compute(item[2], item[3], item[4], bool(item[5]), bool(item[6]), bool(item[0]),
                    bool(item[1]), item[7], item[8], item[9], item[10])
            if len(item) == FLAT_COMPUTE_WIDTH else
            Load(dma_command(item[2:17]), bool(item[0]),
                 bool(item[1]), bool(item[17]), bool(item[18]))
            for item in stream]


@dataclass
class _WindowSteps:
    """The window schedule's steps before their tokens, as columns (`_window_table`): a
    long layer's candidates have hundreds of thousands of computes, each made by numpy
    from what its step shares with them (its piece's folds, its group's blocks), not one
    Python tuple apiece.

    Per load, in stream order (step by step): its fields, the region it writes and its
    step. Per step: its group order (an index into `orders`: per compute, its fold in the
    piece and its block's position in the group), its piece, the chunk's first band row,
    rows per compute, whether it is the blocks' last piece, its chunk, per block position
    the first weight row and the weights' region, and the residual region its last
    compute's Store reads (-1: none). `after`: (step, place of the compute, the Config and
    Store that follow it)."""

    # The loads are kept in two kinds: weight loads, per block of each step (`load_fields`
    # makes their fields at once: a dense layer has hundreds of thousands), and the others
    # (band planes, residual rows) as fields; `load_count` places both in the stream.
    weight_templates: list[list[DmaFields]] = field(default_factory=list)  # per piece
    weight_columns: list[int] = field(default_factory=list)  # per block: its first byte
    weight_widths: list[int] = field(default_factory=list)  # per block
    weight_starts: list[int] = field(default_factory=list)  # per block's loads: place
    weight_pieces: list[int] = field(default_factory=list)
    weight_blocks: list[int] = field(default_factory=list)
    weight_rows: list[int] = field(default_factory=list)  # its first scratchpad row
    weight_regions: list[_Region] = field(default_factory=list)
    other_loads: list[DmaFields] = field(default_factory=list)
    other_regions: list[_Region] = field(default_factory=list)
    step_loads: list[int] = field(default_factory=list)  # per step, its loads
    load_count: int = 0
    loads_before: int = 0  # loads of the steps before the one being made
    orders: list[int] = field(default_factory=list)
    pieces: list[int] = field(default_factory=list)
    a_rows: list[int] = field(default_factory=list)
    m_lens: list[int] = field(default_factory=list)
    last_pieces: list[bool] = field(default_factory=list)
    chunks: list[int] = field(default_factory=list)
    w_rows: list[list[int]] = field(default_factory=list)
    w_keys: list[list[_Region]] = field(default_factory=list)
    residual_reads: list[_Region] = field(default_factory=list)
    after: list[tuple[int, int, list[Command]]] = field(default_factory=list)

    def add_weight_loads(self, piece: int, count: int, blocks: list[int], rows: list[int],
                         regions: list[_Region]) -> None:
        """The step's weight loads: `count` (its piece's template) for each block in
        turn, from scratchpad row rows[i] on, into regions[i]."""
        self.weight_starts += range(self.load_count, self.load_count + len(blocks) * count,
                                    count)
        self.weight_pieces += [piece] * len(blocks)
        self.weight_blocks += blocks
        self.weight_rows += rows
        self.weight_regions += regions
        self.load_count += len(blocks) * count

    def load_fields(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Every load's DMA fields (a row each, in stream order) and its region: a
        template's loads moved to their block's columns (`weight_columns`) and scratchpad
        rows, its width a row."""
        fields = np.zeros((self.load_count, DMA_WIDTH), dtype=np.int64)
        regions = np.zeros(self.load_count, dtype=np.int64)
        weight = np.zeros(self.load_count, dtype=bool)
        starts = np.array(self.weight_starts, dtype=np.int64)
        pieces = np.array(self.weight_pieces, dtype=np.int64)
        blocks = np.array(self.weight_blocks, dtype=np.int64)
        counts = np.array([len(loads) for loads in self.weight_templates], dtype=np.int64)
        for count in np.unique(counts[pieces]).tolist():  # the templates of one length
            ids = np.flatnonzero(counts == count)
            templates = np.zeros((len(counts), count, fields.shape[1]), dtype=np.int64)
            templates[ids] = [self.weight_templates[piece] for piece in ids.tolist()]
            mine = np.flatnonzero(counts[pieces] == count)
            places = starts[mine, None] + np.arange(count)
            made = templates[pieces[mine]]
            made[:, :, 0] += np.array(self.weight_columns, dtype=np.int64)[blocks[mine], None]
            made[:, :, 1] = np.array(self.weight_widths, dtype=np.int64)[blocks[mine], None]
            made[:, :, 6] += np.array(self.weight_rows, dtype=np.int64)[mine, None]
            fields[places] = made
            regions[places] = np.array(self.weight_regions, dtype=np.int64)[mine, None]
            weight[places] = True
        if self.other_loads:
            fields[~weight] = self.other_loads
            regions[~weight] = self.other_regions
        return fields, regions


@dataclass(frozen=True)
class _WindowShape:
    """What every step of a window schedule reads from: per group order (`_group_order`
    of a shape) its folds and block positions; per piece its folds' activation offsets
    and band planes (flat, from `piece_starts`); per chunk and plane the band regions a
    compute reads (padded by repeating the first); each compute's 2-D pattern and the
    accumulator rows between the blocks of a group."""

    order_folds: list[npt.NDArray[np.int64]]
    order_blocks: list[npt.NDArray[np.int64]]
    piece_starts: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    planes: npt.NDArray[np.int64]
    band_regions: npt.NDArray[np.int64]  # chunk × plane × regions
    rows: int
    pattern: tuple[int, int, int]
    acc_stride: int


def _last_loads(keys: npt.NDArray[np.int64], order: npt.NDArray[np.int64],
                regions: npt.NDArray[np.int64], steps: npt.NDArray[np.int64], span: int
                ) -> npt.NDArray[np.int64]:
    """Per (region, step): the place of the last load of the region in that step or one
    before (`keys`: the loads' region · span + step, sorted; `order`: their places)."""
    at = np.searchsorted(keys, regions * span + steps, side="right") - 1
    places = order[at]
    assert (at >= 0).all() and (keys[at] // span == regions).all(), "a read before its load"
    return places


#: Rows of a table `_scatter` writes at a time: a long layer's table is hundreds of
#: megabytes, and written a column at a time it would pass through the caches a column
#: at a time.
SCATTER_ROWS = 4096


def _scatter(table: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
             columns: list[tuple[int, npt.NDArray[np.generic] | int]]) -> None:
    """table[rows, column] = values for each (column, values), the other columns of those
    rows 0 (as they were: a new table's), a block of rows at a time: the block's rows made,
    their columns set, the rows put in place (whole rows move at once: a fancy-indexed
    write per column took eight times as long, most of building a long layer's candidate
    table)."""
    for start in range(0, len(rows), SCATTER_ROWS):
        block = rows[start:start + SCATTER_ROWS]
        written = np.zeros((len(block), table.shape[1]), dtype=table.dtype)
        for place, values in columns:
            written[:, place] = values if isinstance(values, int) else \
                values[start:start + SCATTER_ROWS]
        table[block] = written


def _window_table(steps: _WindowSteps, shape: _WindowShape, prefix: list[Command],
                  buffer: PackBuffer | None = None
                  ) -> tuple[npt.NDArray[np.int64], list[tuple[int, Command]]]:
    """The packed table of the window schedule's steps with their tokens, and its Config,
    Store and Table commands by row.

    Tokens: a load waits for the release of the last step that read the region it
    overwrites (an exec → load token, given by that step's last compute), and a compute
    for the last load of a region it reads (a load → exec token, given by that load) — so
    a compute starts as soon as its band plane and weights are in, not when its whole
    band is — each only when an earlier wait does not already cover it (tokens are
    counters taken in order: a wait past the latest one waited for). A residual region is
    reused only after the Store two before read it (a store → load token, as
    im2col_program).

    Order: each compute after the loads it needs, then up to WINDOW_LEAD more, of this
    step or the next, each overwriting a region whose last reader is a step whose
    computes are all sent (a load of step s + 1 may go beside the computes of step s, as
    `_software_pipeline` sends them, once the step that read its region last is before
    s); a compute's Config and Store right after it; the loads left at the end. A step's
    own loads are not all sent before its first compute: with a band of many planes, the
    in-order dispatcher would hold that compute until all but QUEUE_DEPTH of them had
    started."""
    from glensidec.hardware.accel_native import FIELDS, LOAD_COLUMNS, pack_commands

    step_orders = np.array(steps.orders, dtype=np.int64)
    order_sizes = np.array([len(folds) for folds in shape.order_folds], dtype=np.int64)
    order_starts = np.cumsum(order_sizes) - order_sizes
    order_folds = np.concatenate(shape.order_folds)
    order_blocks = np.concatenate(shape.order_blocks)
    counts = order_sizes[step_orders]  # computes per step
    firsts = np.cumsum(counts) - counts  # each step's first compute
    total = int(counts.sum())
    step_of = np.repeat(np.arange(len(counts)), counts)
    within = np.arange(total) - firsts[step_of]
    at = np.repeat(order_starts[step_orders], counts) + within
    fold, block = order_folds[at], order_blocks[at]
    pieces = np.array(steps.pieces, dtype=np.int64)
    piece = pieces[step_of]
    in_piece = shape.piece_starts[piece] + fold
    group = max(map(len, steps.w_rows))
    w_rows = np.array([rows + [0] * (group - len(rows)) for rows in steps.w_rows],
                      dtype=np.int64)
    w_keys = np.array([keys + [0] * (group - len(keys)) for keys in steps.w_keys],
                      dtype=np.int64)
    last_piece = np.array(steps.last_pieces, dtype=bool)[step_of]
    # (a step's folds: its order's largest fold + 1)
    step_last_fold = np.array([int(folds.max()) for folds in shape.order_folds],
                              dtype=np.int64)[step_orders]

    # what each compute reads: its band plane's regions, its block's weights, and (the
    # step's last compute, whose Store adds them) the residual rows
    band = shape.band_regions[np.array(steps.chunks, dtype=np.int64)[step_of],
                              shape.planes[in_piece]]
    weights = w_keys[step_of, block]
    residual_steps = np.flatnonzero(np.array(steps.residual_reads, dtype=np.int64) >= 0)
    residual_computes = firsts[residual_steps] + counts[residual_steps] - 1
    residual_regions = np.array(steps.residual_reads, dtype=np.int64)[residual_steps]

    dma, load_regions = steps.load_fields()
    load_steps = np.repeat(np.arange(len(steps.step_loads)), steps.step_loads)
    loads = len(load_regions)
    span = len(counts) + 1
    load_keys = load_regions * span + load_steps
    load_order = np.argsort(load_keys, kind="stable")
    sorted_keys = load_keys[load_order]
    need = _last_loads(sorted_keys, load_order, weights, step_of, span)
    for regions in band.T:
        np.maximum(need, _last_loads(sorted_keys, load_order, regions, step_of, span),
                   out=need)
    if residual_computes.size:
        need[residual_computes] = np.maximum(need[residual_computes], _last_loads(
            sorted_keys, load_order, residual_regions, residual_steps, span))
    # per load, the last step before its own that read its region (-1: none)
    read_keys = np.sort(np.concatenate(
        [weights * span + step_of, *(regions * span + step_of for regions in band.T),
         residual_regions * span + residual_steps]))
    earlier = np.searchsorted(read_keys, load_keys, side="left") - 1
    found = read_keys[np.maximum(earlier, 0)]
    release = np.where((earlier >= 0) & (found // span == load_regions), found % span, -1)

    def past_the_latest(values: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Where a value exceeds every one before it (and -1): a wait not yet covered."""
        before = np.maximum.accumulate(np.concatenate([[-1], values[:-1]]))
        return values > before

    compute_waits = past_the_latest(need)
    load_waits = past_the_latest(release)
    # (the computes send a step's loads beside the step before's computes: waiting for
    # that step's release could deadlock)
    assert (release[load_waits] <= load_steps[load_waits] - 2).all(), \
        "a load waits for a step two before at most"
    load_signals = np.zeros(loads, dtype=bool)
    load_signals[need[compute_waits]] = True
    released = np.unique(release[load_waits])
    compute_signals = np.zeros(total, dtype=bool)
    compute_signals[firsts[released] + counts[released] - 1] = True
    residual_loads = np.flatnonzero(load_regions % 3 == _RESIDUAL)
    store_waits = np.zeros(loads, dtype=bool)
    store_waits[residual_loads[2:]] = True

    # loads sent by each compute: first those it needs, then up to WINDOW_LEAD more as
    # far as the first load that may not yet go (its region's last reader is this step or
    # later; loads before it all may: sent ones were free earlier or needed)
    earliest = np.maximum(load_steps - 1, release + 1)
    first_held = np.searchsorted(np.maximum.accumulate(earliest), step_of, side="right")
    sent = np.maximum.accumulate(np.maximum(
        need + 1, np.minimum(np.minimum(need + WINDOW_LEAD + 1, loads), first_held)))

    after_counts = np.zeros(total, dtype=np.int64)
    for step, place, commands in steps.after:
        after_counts[firsts[step] + place] += len(commands)
    afters = np.cumsum(after_counts) - after_counts  # Configs and Stores before a compute
    compute_rows = len(prefix) + np.arange(total) + sent + afters
    after_all = np.append(afters, afters[-1] + after_counts[-1])
    computes_before = np.searchsorted(sent, np.arange(loads), side="right")
    load_rows = len(prefix) + np.arange(loads) + computes_before + after_all[computes_before]
    others: list[tuple[int, Command]] = list(enumerate(prefix))
    for step, place, commands in steps.after:
        row = int(compute_rows[firsts[step] + place])
        others += [(row + 1 + offset, command) for offset, command in enumerate(commands)]

    size = len(prefix) + loads + total + int(after_all[-1])
    table = np.zeros((size, len(FIELDS)), dtype=np.int64) if buffer is None else \
        buffer.table(size)
    column = FIELDS.index
    _scatter(table, compute_rows, [
        (0, 1), (column("wait"), compute_waits), (column("signal"), compute_signals),
        (column("w_row"), w_rows[step_of, block] + fold * shape.rows),
        (column("a_row"), np.array(steps.a_rows, dtype=np.int64)[step_of]
         + shape.offsets[in_piece]),
        (column("m_len"), np.array(steps.m_lens, dtype=np.int64)[step_of]),
        (column("add"), (piece > 0) | (fold > 0)),
        (column("emit"), last_piece & (fold == step_last_fold[step_of])),
        (column("a_count1"), shape.pattern[0]), (column("a_stride1"), shape.pattern[1]),
        (column("a_stride2"), shape.pattern[2]), (column("acc_row"), block * shape.acc_stride)])
    _scatter(table, load_rows, [
        (column("wait"), load_waits), (column("signal"), load_signals),
        *((place, dma[:, index]) for index, place in enumerate(LOAD_COLUMNS[2:-2])),
        (column("wait_store"), store_waits)])
    if others:
        table[[row for row, _ in others]] = pack_commands([command for _, command in others])
    return table, others


#: Loads the window schedule's stream sends ahead of the last one the next compute needs:
#: enough to keep the DMA busy, few enough that a full load queue (QUEUE_DEPTH) does not
#: hold back the computes behind them in the in-order dispatcher.
WINDOW_LEAD = 8


def window_program(config: AccelConfig, layer: ConvLayer, quant: LayerQuant,
                   tiling: WindowTiling) -> LayerProgram:
    """The commands of `window_stream`'s schedule."""
    program, stream = window_stream(config, layer, quant, tiling)
    return replace(program, commands=commands_of(stream))


def window_stream(config: AccelConfig, layer: ConvLayer, quant: LayerQuant,
                  tiling: WindowTiling) -> tuple[LayerProgram, Stream]:
    """`window_table`'s schedule as a stream (its COMPUTEs and LOADs flat)."""
    program, table, others = window_table(config, layer, quant, tiling)
    return program, stream_of_table(table, others)


def stream_of_table(table: npt.NDArray[np.int64], others: list[tuple[int, Command]]
                    ) -> Stream:
    """The stream a packed table was made of: its COMPUTE and LOAD rows flat, and `others`
    (the table's other commands, by row) as they are."""
    from glensidec.hardware.accel_native import COMPUTE_COLUMNS, LOAD_COLUMNS

    objects = dict(others)
    stream: Stream = []
    for row, values in enumerate(table.tolist()):
        command = objects.get(row)
        if command is not None:
            stream.append(command)
        else:
            stream.append(tuple(values[column] for column in
                                (COMPUTE_COLUMNS if values[0] == 1 else LOAD_COLUMNS)))
    return stream


def window_table(config: AccelConfig, layer: ConvLayer, quant: LayerQuant,
                 tiling: WindowTiling, buffer: PackBuffer | None = None
                 ) -> tuple[LayerProgram, npt.NDArray[np.int64], list[tuple[int, Command]]]:
    """Commands of one convolution whose input rows stay in the scratchpad (the window
    schedule), packed (accel_native.pack_commands' rows; into `buffer` when given), with
    the table's Config, Store and Table commands by row: M chunk → N block → K piece → K
    fold, like `im2col_program`, but a chunk's
    input band (`_Band`: the input rows its output rows read, one scratchpad row per pixel
    and plane) is loaded once — padding rows by the DMA's bounds, not from memory — and
    every K fold is a COMPUTE whose 2-D activation pattern reads the fold's shifted view
    of the band: a line per output row. So each input byte crosses the bus once per chunk
    (the bands of two chunks share k − stride rows), not once per tap and N block.

    Bands sit below the weights (`WindowTiling`: one band, or two alternating), weight
    pieces in two alternating buffers above them (or each in rows of its own, loaded
    once: `resident`); partial sums stay in the accumulator over every K fold of an
    (M chunk, N block), or of a group of the chunk's first blocks side by side
    (`interleave`). Step s = (chunk, group of blocks, piece) loads its piece's weights
    (unless resident and loaded), the band planes its folds are the first to read (or the
    whole next band in the chunk before's second step, with `prefetch`) and (last piece)
    the block's residual rows; the tokens (`_window_table`) make a load wait until the
    buffer it overwrites was read, and a compute until what it reads is loaded. A block's
    Config and Store follow its emitting compute.
    """
    program, steps, shape = _window_steps(config, layer, quant, tiling)
    table, others = _window_table(steps, shape, table_commands(quant.epilogue, config.cols),
                                  buffer)
    return program, table, others


def _window_steps(config: AccelConfig, layer: ConvLayer, quant: LayerQuant,
                  tiling: WindowTiling) -> tuple[LayerProgram, _WindowSteps, _WindowShape]:
    """`window_table`'s program (without commands) and its steps before their tokens."""
    if tiling.interleave > 1 and quant.residual is not None:
        raise ValueError("N blocks side by side take no residual add (its rows alternate "
                         "between two regions, a Store's each)")
    R, C = config.rows, config.cols
    M, _, N = layer.gemm
    K = weight_rows(layer, C)
    out_h, out_w = layer.out_size
    residual = quant.residual is not None
    band = _band_of(layer, R)
    total = config.memory.scratchpad_rows
    weight_start = tiling.weight_start(total)
    buffer = tiling.band_buffer(total, config.memory.bank_rows if residual else 0)
    weight_buffer = tiling.weight_buffer or total // 4
    one_band = tiling.one_band
    plane_rows = band.rows(out_h if one_band else tiling.chunk_rows) * band.width
    band_rows = plane_rows * len(band.planes)
    pad = layer.padding if band.padded_input else 0  # the map as stored
    height, width = layer.height + 2 * pad, layer.width + 2 * pad
    input_base = 0
    weight_base = _align(height * width * layer.channels)
    output_base = weight_base + _align(K * N)
    residual_base = output_base + _align(M * N) if residual else -1
    memory_bytes = output_base + _align(M * N) * (1 + residual) + 2 * config.memory.bus_bytes
    folds = conv_folds(layer, R)
    plane_of = {fold: plane for plane, entry in enumerate(band.planes) for fold in entry.folds}
    pieces = -(-len(folds) // tiling.piece_folds)
    chunk_list = tiling.chunks(out_h)
    # plane by plane (a plane's taps in order): the first computes of a chunk need only
    # its first plane, so they start while the others load
    order = sorted(range(len(folds)), key=lambda fold: plane_of[fold])

    def band_buffer_of(chunk: int) -> int:
        return chunk % 2 if tiling.double_buffered else 0

    # one_band: chunk c loads band rows slabs[c] (those no earlier chunk read)
    slabs = [(0 if oy0 == 0 else band.rows(oy0), band.rows(oy0 + rows_here))
             for oy0, rows_here in chunk_list]
    # (their firsts and ends never decrease: the slabs a chunk meets are a run, found by
    # bisection; a scan of every slab per chunk took mobilenet_v2's 12544-row layer in
    # chunks of a row 157 M steps)
    slab_firsts, slab_ends = [first for first, _ in slabs], [end for _, end in slabs]

    buffer_planes: list[list[tuple[_Region, ...]]] = [
        [(_band_region(buffer, plane),) for plane in range(len(band.planes))]
        for buffer in (0, 1)]

    def band_slabs(chunk: int) -> list[tuple[_Region, ...]]:
        """Per plane, the band regions a compute of `chunk` on it reads (one_band: the
        slabs its rows meet, found once for every plane; else the chunk's band buffer's
        plane)."""
        planes = range(len(band.planes))
        if not one_band:  # (the same two lists for every chunk, made once)
            return buffer_planes[band_buffer_of(chunk)]
        oy0, rows_here = chunk_list[chunk]
        low, high = oy0 * band.stride_y, (oy0 + rows_here - 1) * band.stride_y + band.reach
        meeting = range(bisect.bisect_right(slab_ends, low),
                        bisect.bisect_left(slab_firsts, high))
        return [tuple(_band_region(0, index * len(band.planes) + plane) for index in meeting)
                for plane in planes]

    def slab_loads(chunk: int) -> list[tuple[DmaFields, _Region]]:
        first, end = slabs[chunk]
        y0 = -layer.padding_hw[0] + pad + first * band.y_step
        x0 = -layer.padding_hw[1] + pad
        return [(dma_fields(
            base=input_base + (y0 * width + x0 + plane.x0) * layer.channels + plane.channel0,
            length=plane.length, count1=band.width, stride1=band.x_step * layer.channels,
            count2=end - first, stride2=band.y_step * width * layer.channels,
            spad_row=index * plane_rows + first * band.width, bounds=not band.padded_input,
            y0=y0, y_step=band.y_step, height=height, x0=x0, x_step=band.x_step, width=width,
            pad_value=quant.input_zero_point),
            _band_region(0, chunk * len(band.planes) + index))
            for index, plane in enumerate(band.planes)]

    def band_loads(chunk: int) -> list[tuple[DmaFields, _Region]]:
        if one_band:
            return slab_loads(chunk)
        oy0, rows_here = chunk_list[chunk]
        band_base = band_buffer_of(chunk) * buffer
        y0 = oy0 * layer.stride - layer.padding_hw[0] + pad
        x0 = -layer.padding_hw[1] + pad
        return [(dma_fields(
            base=input_base + (y0 * width + x0 + plane.x0) * layer.channels + plane.channel0,
            length=plane.length, count1=band.width, stride1=band.x_step * layer.channels,
            count2=band.rows(rows_here), stride2=band.y_step * width * layer.channels,
            spad_row=band_base + index * plane_rows, bounds=not band.padded_input, y0=y0,
            y_step=band.y_step, height=height, x0=x0, x_step=band.x_step, width=width,
            pad_value=quant.input_zero_point), _band_region(band_buffer_of(chunk), index))
            for index, plane in enumerate(band.planes)]

    steps = _WindowSteps()
    after: dict[tuple[int, int], list[Command]] = {}  # (step, place) → its Config, Store
    block_configured, w_loads, stores = -1, 0, 0
    blocks = group_blocks(layer, C)
    # a chunk of one step has no second step to load the next band with
    prefetch = tiling.prefetch and -(-len(blocks) // tiling.interleave) * pieces > 1
    group_size = tiling.interleave
    acc_stride = tiling.chunk_rows * out_w if group_size > 1 else 0
    # What a piece's steps share in every chunk and block, worked out once (a long layer
    # has hundreds of thousands of steps): its folds, its weight loads up to their base,
    # width and first row (`_WindowSteps.load_fields`), and per fold its activation rows' offset in
    # the band buffer and its plane.
    piece_plans = []
    for piece in range(pieces):
        first = piece * tiling.piece_folds
        indices = order[first:first + tiling.piece_folds]
        piece_folds = [folds[index] for index in indices]
        offsets = []
        for fold in indices:
            dy, dx = band.offsets[fold]
            offsets.append(plane_of[fold] * plane_rows + dy * band.width + dx)
        piece_plans.append((indices, _piece_weight_loads(layer, R, piece_folds, 0, N, 0, 0),
                            offsets, [plane_of[fold] for fold in indices]))
    steps.weight_templates = [plan[1] for plan in piece_plans]
    steps.weight_columns = [weight_base + block.n0 for block in blocks]
    steps.weight_widths = [block.width for block in blocks]
    band_regions: list[list[tuple[_Region, ...]]] = []  # per chunk and plane
    pattern = (out_w, band.stride_x, band.stride_y * band.width)  # every compute's lines
    orders: dict[tuple[int, int, bool], int] = {}  # a shape's group order: its number
    group_orders: list[list[tuple[int, int]]] = []
    emitting: list[dict[int, int]] = []  # per group order: block position → emitting place
    for chunk, (oy0, rows_here) in enumerate(chunk_list):
        m0, m_len = oy0 * out_w, rows_here * out_w
        band_base = band_buffer_of(chunk) * buffer
        # the regions each plane's computes read, and (one band) the chunk's first row in it
        band_regions.append(band_slabs(chunk))
        band_shift = one_band * oy0 * band.stride_y * band.width
        first_step = len(steps.pieces)
        planes_loaded: set[int] = set()
        chunk_band = band_loads(chunk) if chunk == 0 or not prefetch else []
        numbered = list(enumerate(blocks))
        groups = [numbered[:group_size]] + [[entry] for entry in numbered[group_size:]]
        group_ids = [[index for index, _ in group] for group in groups]
        for group_index, group in enumerate(groups):
            for piece, (indices, weight_loads, _, planes) in enumerate(piece_plans):
                first = piece * tiling.piece_folds
                # per block of the group: its piece's first weight row and weight region
                if tiling.resident:
                    w_rows = [weight_start + (block_index * len(folds) + first) * R
                              for block_index, _ in group]
                    w_keys = [_weights_region(block_index * pieces + piece)
                              for block_index, _ in group]
                else:
                    w_buffer = weight_start + w_loads % 2 * weight_buffer
                    w_rows = [w_buffer + position * len(indices) * R
                              for position in range(len(group))]
                    w_keys = [_weights_region(w_loads % 2)] * len(group)
                    w_loads += 1
                if not (tiling.resident and chunk > 0):  # (resident: loaded with chunk 0)
                    steps.add_weight_loads(piece, len(weight_loads), group_ids[group_index],
                                           w_rows, w_keys)
                loads: list[tuple[DmaFields, _Region]] = []
                # the band after the weights, each plane in the first step that reads it
                # (a compute waits only for its own plane; the next step's weights are
                # not queued behind planes no compute needs yet)
                if chunk == 0 or not prefetch:
                    planes_here = set(planes) - planes_loaded
                    loads += [chunk_band[plane] for plane in sorted(planes_here)]
                    planes_loaded |= planes_here
                last_piece = piece == pieces - 1
                residual_row = (stores % 2 * buffer + band_rows if tiling.double_buffered
                                else band_rows + stores % 2 * m_len)
                if residual and last_piece:
                    block = group[0][1]
                    loads.append((dma_fields(base=residual_base + m0 * N + block.n0,
                                             length=block.width,
                                             count1=m_len, stride1=N, spad_row=residual_row),
                                  _residual_region(stores % 2)))
                shape = (len(indices), len(group), last_piece)
                if shape not in orders:
                    orders[shape] = len(group_orders)
                    group_orders.append(_group_order(*shape))
                    # block position → its emitting compute
                    emitting.append({position: place for place, (index, position)
                                     in enumerate(group_orders[-1])
                                     if index == len(indices) - 1} if last_piece else {})
                # the next chunk's band after this step's own loads: its buffer was the
                # chunk before's, read by the step before this one at the latest
                if prefetch and len(steps.pieces) == first_step + 1 and \
                        chunk + 1 < len(chunk_list):
                    loads += band_loads(chunk + 1)
                steps.other_loads += [dma for dma, _ in loads]
                steps.other_regions += [region for _, region in loads]
                steps.step_loads.append(steps.load_count + len(loads) - steps.loads_before)
                steps.load_count += len(loads)
                steps.loads_before = steps.load_count
                steps.orders.append(orders[shape])
                steps.pieces.append(piece)
                steps.a_rows.append(band_base + band_shift)
                steps.m_lens.append(m_len)
                steps.last_pieces.append(last_piece)
                steps.chunks.append(chunk)
                steps.w_rows.append(w_rows)
                steps.w_keys.append(w_keys)
                # (its Store follows the emitting compute)
                steps.residual_reads.append(_residual_region(stores % 2)
                                            if residual and last_piece else -1)
            emits = emitting[steps.orders[-1]]
            for position, (_, block) in enumerate(group):
                # right after its emitting compute: an in-order dispatcher would hold the
                # Store behind the group's later computes, which wait for its rows to leave
                tail = after.setdefault((len(steps.pieces) - 1, emits[position]), [])
                n0, width_n = block.n0, block.width
                if block.n0 != block_configured:
                    tail.append(_block_config(quant, n0, width_n, C))
                    block_configured = block.n0
                tail.append(_block_store(output_base + m0 * N + n0, width_n, m_len, N,
                                         residual_row if residual else None))
                stores += 1
    steps.after = [(step, place, commands) for (step, place), commands in after.items()]
    widest = max(map(len, (regions for chunk in band_regions for regions in chunk)))
    shape_of = _WindowShape(
        [np.array([index for index, _ in entry], dtype=np.int64) for entry in group_orders],
        [np.array([position for _, position in entry], dtype=np.int64)
         for entry in group_orders],
        np.cumsum([0] + [len(plan[0]) for plan in piece_plans[:-1]], dtype=np.int64),
        np.array([offset for plan in piece_plans for offset in plan[2]], dtype=np.int64),
        np.array([plane for plan in piece_plans for plane in plan[3]], dtype=np.int64),
        np.array([[regions + (regions[0],) * (widest - len(regions)) for regions in chunk]
                  for chunk in band_regions], dtype=np.int64),
        R, pattern, acc_stride)
    program = LayerProgram([], input_base, weight_base, output_base, memory_bytes,
                           tiling.chunk_rows * out_w, len(folds), tiling.piece_folds, pad,
                           residual_base)
    return program, steps, shape_of


def _group_order(folds: int, blocks: int, last_piece: bool) -> list[tuple[int, int]]:
    """(fold, block position) of a group's computes in a piece: fold by fold, each fold
    for every block of the group (their partial sums side by side in the accumulator), so
    the blocks share each band plane as it arrives. In the last piece block b runs b folds
    behind block 0: their emitting folds are apart, and a block's rows leave through the
    epilogue (a row per `epilogue_cycles`, the Config between blocks waiting until the
    previous block's rows are out) while the other blocks compute."""
    if not last_piece:
        return [(fold, block) for fold in range(folds) for block in range(blocks)]
    return [(t - block, block) for t in range(folds + blocks - 1) for block in range(blocks)
            if 0 <= t - block < folds]


def _piece_weight_loads(layer: ConvLayer, rows: int, piece_folds: list[tuple[int, int, int, int]],
                        base: int, n: int, width: int, spad_row: int) -> list[DmaFields]:
    """The loads of a piece's weights, fold i's ROWS rows (bottom row first) at spad_row
    + i·ROWS: one 2-D load per run of whole folds whose first rows of K are evenly
    spaced (a plane's taps, or consecutive channel chunks), a load per fold otherwise."""
    k_firsts = [(ky * layer.kernel_hw[1] + kx) * layer.channels + channel0
                for ky, kx, channel0, _ in piece_folds]
    loads, start = [], 0
    while start < len(piece_folds):
        end = start + 1
        if piece_folds[start][3] == rows:
            step = k_firsts[start + 1] - k_firsts[start] if start + 1 < len(k_firsts) else rows
            while end < len(piece_folds) and piece_folds[end][3] == rows and \
                    k_firsts[end] - k_firsts[end - 1] == step and step > 0:
                end += 1
            loads.append(dma_fields(
                base=base + (k_firsts[start] + rows - 1) * n, length=width, count1=rows,
                stride1=-n, count2=end - start, stride2=step * n, spad_row=spad_row + start * rows))
        else:
            loads.append(_weight_row_fields(rows, k_firsts[start], piece_folds[start][3], base,
                                            n, width, spad_row + start * rows))
        start = end
    return loads


def im2col_load_slots(config: AccelConfig, layer: ConvLayer, residual: bool = False) -> int:
    """A lower bound on the cycles of `im2col_stream`'s schedule, from its loads alone:
    the DMA issues one load slot a cycle, a row of L bytes from memory takes at least
    ⌈L / BUS⌉ slots and a padding row one, and the schedule's last step waits for every
    load before its computes emit the rows the last Store writes. Counted per (chunk,
    block) without building anything (the weights of every fold; the im2col rows of
    every fold unless one K piece's are kept for every block; the residual rows).
    CapacityError as im2col_program when the layer does not fit."""
    R, bus = config.rows, config.memory.bus_bytes
    out_h, out_w = layer.out_size
    grouped = layer.groups > 1
    tiling = layer_tiling(config, layer, residual)
    slots = 0
    # (an ungrouped layer's blocks have one list of folds: a dense layer of 25088 inputs
    # has 1568 folds and 256 blocks)
    lengths = [fold[3] for fold in conv_folds(layer, R)] if not grouped else []
    for block, group_block in enumerate(group_blocks(layer, config.cols)):
        if grouped:
            lengths = [fold[3] for fold in conv_folds(layer, R, group_block)]
        width_slots = -(-group_block.width // bus)
        # a fold's ROWS weight rows: `length` from memory, the rest padding
        weights = sum(lengths) * (width_slots - 1) + R * len(lengths)
        loads_rows = tiling.pieces > 1 or block == 0 or grouped
        for oy0 in range(0, out_h, tiling.chunk_rows):
            m_len = min(tiling.chunk_rows, out_h - oy0) * out_w
            slots += weights + (m_len * len(lengths) if loads_rows else 0) + \
                (m_len * width_slots if residual else 0)
    return slots


def im2col_program(config: AccelConfig, layer: ConvLayer, quant: LayerQuant) -> LayerProgram:
    """The commands of `im2col_stream`'s schedule."""
    program, stream = im2col_stream(config, layer, quant)
    return replace(program, commands=commands_of(stream))


def im2col_stream(config: AccelConfig, layer: ConvLayer, quant: LayerQuant
                  ) -> tuple[LayerProgram, Stream]:
    """Double-buffered commands of one convolution: M chunk → N block → K piece → K fold.

    The scratchpad is four quarters: two activation buffers (the im2col rows of an M
    chunk and a K piece, loaded by the DMA from the NHWC feature map; loaded once per
    chunk when one piece holds every K fold) and two weight buffers (a K piece of one N
    block, bottom row of each fold first). Every load goes to the buffer of its kind
    that was loaded last but one. Step s = (chunk, block, piece): its first `Load`
    waits for step s − 2's release token, its last signals the execute unit, its first
    `Compute` waits for that and its last releases its buffers; after a chunk's last
    piece a `Config` (when the N block changes) and a `Store` send its rows out. So step
    s + 1 loads while step s computes and earlier rows are stored.

    With a residual add (`quant.residual`), the last piece of each (chunk, block) also
    loads that block of the residual (an (M, N) int8 tensor at residual_base) into the
    activation buffer's rows after the im2col rows, alternating between the two buffers;
    the Store reads them and signals, and the load that reuses a residual region waits
    for the Store two before it (a store → load token).
    """
    R, C = config.rows, config.cols
    M, _, N = layer.gemm
    K = weight_rows(layer, C)
    out_h, out_w = layer.out_size
    blocks = group_blocks(layer, C)
    grouped = layer.groups > 1  # each N block reads its own channels: loaded per block
    residual = quant.residual is not None
    tiling = layer_tiling(config, layer, residual)
    quarter = config.memory.scratchpad_rows // 4
    input_base = 0
    pad = layer.padding if packs_taps(layer, R) else 0
    weight_base = _align((layer.height + 2 * pad) * (layer.width + 2 * pad) * layer.channels)
    output_base = weight_base + _align(K * N)
    residual_base = output_base + _align(M * N) if residual else -1
    memory_bytes = output_base + _align(M * N) * (1 + residual) + 2 * config.memory.bus_bytes
    steps: list[_Step[FlatCompute]] = []
    block_configured, a_loads, w_loads, stores = -1, 0, 0, 0
    a_buffer = 0
    # What every chunk repeats, made once: each block's folds, and the weight loads of a
    # (block, piece, weight buffer) (a layer of many chunks and blocks has hundreds of
    # thousands of loads)
    block_folds = [conv_folds(layer, R, group_block) for group_block in blocks] if grouped \
        else [conv_folds(layer, R)] * len(blocks)
    taps_along, tap_rows = layer.kernel_hw[1], K // layer.taps
    weight_loads: dict[tuple[int, int, int], list[DmaFields]] = {}
    for oy0 in range(0, out_h, tiling.chunk_rows):
        rows_here = min(tiling.chunk_rows, out_h - oy0)
        m0, m_len = oy0 * out_w, rows_here * out_w
        for block, group_block in enumerate(blocks):
            n0, width = group_block.n0, group_block.width
            folds = block_folds[block]
            pieces = -(-len(folds) // tiling.piece_folds)
            for piece in range(pieces):
                piece_folds = folds[piece * tiling.piece_folds:(piece + 1) * tiling.piece_folds]
                loads: list[DmaFields] = []
                if tiling.pieces > 1 or block == 0 or grouped:
                    a_buffer = a_loads % 2 * quarter
                    a_loads += 1
                    loads += [_im2col_row_fields(layer, fold, oy0, rows_here,
                                           a_buffer + index * m_len, input_base,
                                           quant.input_zero_point, pad > 0)
                              for index, fold in enumerate(piece_folds)]
                w_buffer = (2 + w_loads % 2) * quarter
                w_loads += 1
                key = (block, piece, w_buffer)
                if key not in weight_loads:
                    weight_loads[key] = [
                        _weight_row_fields(R, (ky * taps_along + kx) * tap_rows + channel0
                                           - group_block.channel0, length, weight_base + n0,
                                           N, width, w_buffer + index * R)
                        for index, (ky, kx, channel0, length) in enumerate(piece_folds)]
                loads += weight_loads[key]
                last_piece = piece == pieces - 1
                residual_row = stores % 2 * quarter + tiling.piece_folds * tiling.chunk_rows * out_w
                if residual and last_piece:
                    loads.append(dma_fields(base=residual_base + m0 * N + n0, length=width,
                                            count1=m_len, stride1=N, spad_row=residual_row))
                # (FlatLoads: wait, signal, the DMA's fields, wait_store, signal_store;
                # made inline, as the computes: a long layer has hundreds of thousands)
                late, last_load = len(steps) >= 2, len(loads) - 1
                store_wait = residual and last_piece and stores >= 2
                last_fold = len(piece_folds) - 1
                steps.append(_Step(
                    [(late and index == 0, index == last_load, *dma,
                      store_wait and index == last_load, False)
                     for index, dma in enumerate(loads)],
                    [(index == 0, index == last_fold,  # wait, signal
                      w_buffer + index * R, a_buffer + index * m_len, m_len,
                      piece > 0 or index > 0, last_piece and index == last_fold,
                      0, 1, 0, 0)  # one line of consecutive rows, accumulator row 0
                     for index in range(last_fold + 1)], []))
            tail = steps[-1].tail
            if block != block_configured:
                tail.append(_block_config(quant, n0, width, C))
                block_configured = block
            tail.append(_block_store(output_base + m0 * N + n0, width, m_len, N,
                                     residual_row if residual else None))
            stores += 1
    program = LayerProgram([], input_base, weight_base, output_base, memory_bytes,
                           tiling.chunk_rows * out_w, tiling.folds, tiling.piece_folds, pad,
                           residual_base)
    return program, [*table_commands(quant.epilogue, config.cols), *_software_pipeline(steps)]


#: pool_program's schedules: "gather" (the DMA gathers every window's taps from main
#: memory), "band" (input rows resident, each window a 2-D pattern of them), "best" (the
#: one the exact cycle model prices fastest).
POOL_SCHEDULES = ("best", "gather", "band")


def pool_program(config: AccelConfig, layer: ConvLayer, quant: LayerQuant | None = None,
                 schedule: str = "best", summed: bool = True) -> LayerProgram:
    """Max-pooling of an NHWC int8 map as commands (`layer`: kernel, stride and padding
    of the windows; channels = out_channels; padding reads −128, so it never wins).

    With `quant`, a sum pool instead (an average pool, the quantizer's scaled sum):
    pooling stores send each window's int32 sum through the epilogue of `quant` (its
    bias, multiplier and clip; a Config for each N block whose vectors differ from the
    last one's). Its padding, if any, reads `quant.input_zero_point` (the value the
    program pads with: an average pool that counts its padding). With `quant` and not
    `summed`, a max-pool whose maxima pass through `quant`'s epilogue (a requantize of the
    pool's result, folded into it).

    `schedule` (POOL_SCHEDULES): "gather" (`gather_pool_program`) or "band"
    (`band_pool_program`, each tiling of `pool_band_tilings`), or "best": every one that
    fits, priced by `accel_cycles`, the fastest (then the fewest bytes moved) kept.
    CapacityError naming the sizes when none fits."""
    if schedule not in POOL_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; one of {', '.join(POOL_SCHEDULES)}")
    if not layer.square:
        raise ValueError(f"layer {layer.name}: a pool's windows are square and dense")
    if schedule == "gather":
        return gather_pool_program(config, layer, quant, summed)
    candidates = [band_pool_program(config, layer, quant, rows, first, summed)
                  for rows, first in pool_band_tilings(config, layer)]
    if schedule == "band":
        if not candidates:
            raise CapacityError(f"layer {layer.name}: the input rows of one output row of "
                                "its windows do not fit half the scratchpad")
        return candidates[0]
    try:
        candidates.append(gather_pool_program(config, layer, quant, summed))
    except CapacityError:
        if not candidates:
            raise
    if len(candidates) == 1:
        return candidates[0]
    from glensidec.hardware.accel_native import pack_commands

    # priced on the C model when there is one (a Python run per candidate of a large pool
    # took seconds: Inception-v3's average pools, now on the accelerator)
    priced = [(table_cycles(config, program.commands, pack_commands(program.commands)),
               program) for program in candidates]
    return min(priced, key=lambda choice: (choice[0].cycles,
                                           choice[0].load_bytes + choice[0].store_bytes))[1]


def pool_band_tilings(config: AccelConfig, layer: ConvLayer) -> list[tuple[int, int]]:
    """(output rows per chunk, output rows of the first chunk or 0) of the band pooling
    schedule: as many output rows as half the scratchpad holds the input rows of (a
    chunk's band, for one block of COLS channels), balanced, and the same with a small
    first chunk (the first band loads sooner). None when a window's lines or the stride
    exceed a pooling store's 8-bit fields, or one output row's band does not fit."""
    out_h, out_w = layer.out_size
    if layer.kernel > 255 or layer.stride > 255:
        return []
    width = (out_w - 1) * layer.stride + layer.kernel
    half = config.memory.scratchpad_rows // 2
    fitting = [rows for rows in range(1, out_h + 1)
               if ((rows - 1) * layer.stride + layer.kernel) * width <= half]
    if not fitting:
        return []
    chunks = -(-out_h // max(fitting))
    rows = -(-out_h // chunks)
    return [(rows, 0)] + ([(rows, max(1, rows // 4))] if rows >= 4 else [])


def band_pool_program(config: AccelConfig, layer: ConvLayer, quant: LayerQuant | None,
                      chunk_rows: int, first_rows: int = 0, summed: bool = True
                      ) -> LayerProgram:
    """A pool whose input rows stay in the scratchpad: per chunk of output rows and block
    of COLS channels, the DMA loads the chunk's *band* once — the input rows its windows
    read, one scratchpad row per pixel, padding rows (−128) by its bounds without a memory
    access — into one of two halves of the scratchpad, and per output line a pooling
    `Store` reads each pixel's k×k window as a 2-D pattern of band rows (`window_count1`
    = k taps a row apart per line, lines a band width apart, pixels `stride` rows apart).
    So each input byte crosses the bus once (twice where two chunks' bands share rows),
    not once per window that covers it. The load of the next step overlaps this step's
    stores: its band load waits for the store two steps back (store → load token), and
    the step's first Store for its load (load → store)."""
    out_h, out_w = layer.out_size
    channels, taps, stride = layer.channels, layer.kernel * layer.kernel, layer.stride
    width = (out_w - 1) * stride + layer.kernel
    half = config.memory.scratchpad_rows // 2
    M = out_h * out_w
    input_base = 0
    output_base = _align(layer.height * layer.width * channels)
    memory_bytes = output_base + _align(M * channels) + 2 * config.memory.bus_bytes
    first = min(first_rows or chunk_rows, out_h)
    chunks = [(0, first)] + [(oy0, min(chunk_rows, out_h - oy0))
                             for oy0 in range(first, out_h, chunk_rows)]
    used = min(config.cols, channels)
    commands: list[Command] = [] if quant is not None else [Config(
        EpilogueConfig(), (0,) * config.cols, (1,) * used + (0,) * (config.cols - used))]
    configured: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    tails: list[list[Command]] = []
    for oy0, rows_here in chunks:
        y0, x0 = oy0 * stride - layer.padding, -layer.padding
        for n0 in range(0, channels, config.cols):
            block = min(config.cols, channels - n0)
            buffer = len(tails) % 2 * half
            commands.append(Load(DmaCommand(
                base=input_base + (y0 * layer.width + x0) * channels + n0, length=block,
                count1=width, stride1=channels, count2=(rows_here - 1) * stride + layer.kernel,
                stride2=layer.width * channels, spad_row=buffer, bounds=True, y0=y0, y_step=1,
                height=layer.height, x0=x0, x_step=1, width=layer.width,
                pad_value=-128 if quant is None or not summed else quant.input_zero_point),
                wait_store=len(tails) >= 2, signal_store=True))
            if tails:  # the step before's stores, after this step's load
                commands += tails[-1]
            tail: list[Command] = []
            if quant is not None:
                padded = (0,) * (config.cols - block)
                vectors = (tuple(quant.bias[n0:n0 + block]) + padded,
                           tuple(quant.multiplier[n0:n0 + block]) + padded)
                if vectors != configured:
                    tail.append(Config(quant.epilogue, *vectors, first_column=n0))
                    configured = vectors
                tail += scale_commands(quant, n0, block, config.cols)
            tail += [Store(DmaCommand(base=output_base + (oy0 + line) * out_w * channels + n0,
                                      length=block, count1=out_w, stride1=channels,
                                      spad_row=buffer + line * stride * width),
                           signal=line == rows_here - 1, wait=line == 0, window=taps,
                           window_stride=1, sum=quant is not None and summed,
                           window_count1=layer.kernel, window_stride2=width,
                           pixel_step=stride)
                     for line in range(rows_here)]
            tails.append(tail)
    if tails:
        commands += tails[-1]
    return with_table(LayerProgram(commands, input_base, output_base, output_base,
                                   memory_bytes, chunk_rows * out_w, taps, taps),
                      None if quant is None else quant.epilogue, config.cols)


def gather_pool_program(config: AccelConfig, layer: ConvLayer,
                        quant: LayerQuant | None = None, summed: bool = True) -> LayerProgram:
    """The pool with every window's taps gathered from main memory by the DMA.

    Per M chunk of output rows and block of COLS channels, the DMA gathers the window's
    kernel² taps into an activation buffer (im2col addressing, one tap per load, tap t's
    rows at t·m_len) and a pooling `Store` takes, per output pixel, the max of its taps
    through the identity epilogue. Steps alternate between the two activation buffers:
    the first load of a step waits for the store two steps back (store → load token), the
    last gives the store a load → store token. Loads of the next step overlap the
    current step's pooling.
    """
    out_h, out_w = layer.out_size
    channels, taps = layer.channels, layer.kernel * layer.kernel
    quarter = config.memory.scratchpad_rows // 4
    chunk_rows = pool_tiling(config, layer)
    M = out_h * out_w
    input_base = 0
    output_base = _align(layer.height * layer.width * channels)
    memory_bytes = output_base + _align(M * channels) + 2 * config.memory.bus_bytes
    # padding never wins a max; a sum pool's padding counts as its value (an average pool
    # counting the padding: the zero point)
    pad_value = -128 if quant is None or not summed else quant.input_zero_point
    used = min(config.cols, channels)  # as the layer's vectors (0 bias, 1 multiplier) give it
    identity = Config(EpilogueConfig(), (0,) * config.cols,
                      (1,) * used + (0,) * (config.cols - used))
    steps: list[tuple[list[Load], list[Command]]] = []
    configured: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    for oy0 in range(0, out_h, chunk_rows):
        rows_here = min(chunk_rows, out_h - oy0)
        m0, m_len = oy0 * out_w, rows_here * out_w
        for n0 in range(0, channels, config.cols):
            width = min(config.cols, channels - n0)
            buffer = len(steps) % 2 * quarter
            taps_of = [(ky, kx, n0, width) for ky in range(layer.kernel)
                       for kx in range(layer.kernel)]
            loads = [Load(_im2col_rows(layer, fold, oy0, rows_here, buffer + index * m_len,
                                       input_base, pad_value),
                          wait_store=len(steps) >= 2 and index == 0,
                          signal_store=index == len(taps_of) - 1)
                     for index, fold in enumerate(taps_of)]
            store = Store(DmaCommand(base=output_base + m0 * channels + n0, length=width,
                                     count1=m_len, stride1=channels, spad_row=buffer),
                          signal=True, wait=True, window=taps, window_stride=m_len,
                          sum=quant is not None and summed)
            tail: list[Command] = [store]
            if quant is not None:
                padded = (0,) * (config.cols - width)
                vectors = (tuple(quant.bias[n0:n0 + width]) + padded,
                           tuple(quant.multiplier[n0:n0 + width]) + padded)
                if vectors != configured:
                    tail.insert(0, Config(quant.epilogue, *vectors, first_column=n0))
                    configured = vectors
                tail[-1:-1] = scale_commands(quant, n0, width, config.cols)
            steps.append((loads, tail))
    commands: list[Command] = [] if quant is not None else [identity]
    for index, (loads, _) in enumerate(steps):
        commands += loads
        if index > 0:
            commands += steps[index - 1][1]
    if steps:
        commands += steps[-1][1]
    return with_table(LayerProgram(commands, input_base, output_base, output_base,
                                   memory_bytes, chunk_rows * out_w, taps, taps),
                      None if quant is None else quant.epilogue, config.cols)


def with_output_pitch(program: LayerProgram, m: int, n: int, pitch: int,
                      bus_bytes: int) -> LayerProgram:
    """`program` storing its (M, N) result rows `pitch` bytes apart (a block of N columns
    of a wider row: a channel concatenation the layers write in place), in a region of
    its own after everything else: each store's address and row steps moved from the
    compact N-byte rows to `pitch`-byte ones. The store DMA's strided rows are the same
    commands, so nothing in the hardware changes; CapacityError when a store's pattern is
    not whole rows (a layout layer's)."""
    if pitch == n:
        return program
    output_base = _align(program.memory_bytes)
    span = (m - 1) * pitch + n
    commands: list[Command] = []
    for command in program.commands:
        if isinstance(command, Store):
            dma = command.dma
            if not 0 <= dma.base - program.output_base < m * n or \
                    (dma.base - program.output_base) % n + dma.length > n:
                raise CapacityError("a store across the result's rows")
            command = replace(command, dma=_pitched(dma, program.output_base, output_base, n,
                                                    pitch, "a store", "rows"))
        commands.append(command)
    return replace(program, commands=commands, output_base=output_base,
                   memory_bytes=output_base + _align(span) + 2 * bus_bytes)


def with_input_pitch(program: LayerProgram, pixels: int, channels: int, pitch: int,
                     bus_bytes: int) -> LayerProgram:
    """`program` loading its NHWC input's pixels `pitch` bytes apart (the first `channels`
    bytes of wider rows: a dense block's concatenation, read in place), from a region of
    its own after everything else: each load's address and pixel steps moved from
    compact `channels`-byte pixels to `pitch`-byte ones (`with_output_pitch`'s twin for
    the load DMA, whose strided rows are the same commands). CapacityError when a load
    is not whole steps of pixels (a load across pixels)."""
    if pitch == channels:
        return program
    input_base = _align(program.memory_bytes)
    end = program.input_base + pixels * channels
    commands: list[Command] = []
    for command in program.commands:
        if isinstance(command, Load) and program.input_base - pixels * channels <= \
                command.dma.base < end:
            dma = command.dma
            if (dma.base - program.input_base) % channels + dma.length > channels:
                raise CapacityError("a load across the input's pixels")
            command = replace(command, dma=_pitched(dma, program.input_base, input_base,
                                                    channels, pitch, "a load", "pixels"))
        commands.append(command)
    return replace(program, commands=commands, input_base=input_base,
                   memory_bytes=input_base + _align((pixels - 1) * pitch + channels)
                   + 2 * bus_bytes)


#: The DMA's count fields' limit (COUNT_W bits): a run of rows longer is split.
_MAX_COUNT = (1 << 16) - 1


def row_runs(rows: Sequence[int] | npt.NDArray[np.int64]
             ) -> list[tuple[int, int, int, int, int]]:
    """`rows` (main-memory row numbers, in transfer order) as the fewest 2-D row patterns a
    greedy cut finds: (first index, count1, stride1, count2, stride2) each, row
    i2·count1 + i1 of a piece at rows[first] + i2·stride2 + i1·stride1. A window of a map
    (Swin's 7×7 tokens of a 56×56 grid) is one piece: 7 runs of 7 rows, 56 apart."""
    values = np.asarray(rows, np.int64)
    pieces: list[tuple[int, int, int, int, int]] = []
    first, total = 0, len(values)
    while first < total:
        steps = np.diff(values[first:first + _MAX_COUNT + 1])
        stride1 = int(steps[0]) if steps.size else 0
        count1 = 1 + (int(np.argmax(steps != stride1)) if np.any(steps != stride1)
                      else steps.size)
        line = values[first:first + count1]
        count2, stride2 = 1, 0
        if first + count1 < total:
            stride2 = int(values[first + count1] - values[first])
            lines = min((total - first) // count1, _MAX_COUNT)
            block = values[first:first + lines * count1].reshape(lines, count1)
            expected = line[None, :] + stride2 * np.arange(lines)[:, None]
            matches = np.all(block == expected, axis=1)
            count2 = int(np.argmin(matches)) if not matches.all() else lines
        pieces.append((first, count1, stride1, count2, stride2))
        first += count1 * count2
    return pieces


def with_row_order(program: LayerProgram, m: int, n: int, order: Sequence[int] | None,
                   residual_order: Sequence[int] | None) -> LayerProgram:
    """`program` storing its result's row i at row order[i] of the (M, N) result and
    reading its residual row i from row residual_order[i] of the (M, N) residual (None:
    row i): each store and each load of residual rows cut into the 2-D row patterns of
    `row_runs`, the same rows in the same order through the scratchpad, so nothing in the
    hardware changes (Swin's attention rows in window order, its residual and result in
    the map's order). Only the first piece waits and only the last signals (a fence
    stays on the first). CapacityError when a transfer is not a run of whole rows."""
    commands: list[Command] = []
    for command in program.commands:
        if isinstance(command, Store) and order is not None and not command.window:
            pieces = _reordered(command.dma, program.output_base, m, n, order, "a store")
            commands += [replace(command, dma=dma, wait=command.wait and index == 0,
                                 signal=command.signal and index == len(pieces) - 1)
                         for index, dma in enumerate(pieces)]
        elif isinstance(command, Load) and residual_order is not None and \
                program.residual_base >= 0 and \
                program.residual_base <= command.dma.base < program.residual_base + m * n:
            pieces = _reordered(command.dma, program.residual_base, m, n, residual_order,
                                "a residual load")
            last = len(pieces) - 1
            commands += [replace(command, dma=dma, wait=command.wait and index == 0,
                                 wait_store=command.wait_store and index == 0,
                                 fence=command.fence and index == 0,
                                 signal=command.signal and index == last,
                                 signal_store=command.signal_store and index == last)
                         for index, dma in enumerate(pieces)]
        else:
            commands.append(command)
    return replace(program, commands=commands)


def _reordered(dma: DmaCommand, base: int, m: int, n: int, order: Sequence[int],
               transfer: str) -> list[DmaCommand]:
    """`dma`, a run of consecutive (M, N) rows from `base`, as the transfers of the same
    columns of rows order[…], scratchpad rows in the same order."""
    row, column = divmod(dma.base - base, n)
    lines_apart = dma.count2 > 1 and dma.stride2 != dma.count1 * n
    rows_apart = dma.count1 > 1 and dma.stride1 != n
    if dma.bounds or column + dma.length > n or lines_apart or rows_apart or \
            row + dma.rows > m:
        raise CapacityError(f"{transfer} that is not a run of whole {n}-byte rows")
    targets = np.asarray(order[row:row + dma.rows], np.int64)
    return [replace(dma, base=base + int(targets[first]) * n + column, count1=count1,
                    stride1=stride1 * n, count2=count2, stride2=stride2 * n,
                    spad_row=dma.spad_row + first)
            for first, count1, stride1, count2, stride2 in row_runs(targets)]


def _pitched(dma: DmaCommand, base: int, new_base: int, width: int, pitch: int, transfer: str,
             rows: str) -> DmaCommand:
    """`dma` moved from compact `width`-byte rows at `base` to `pitch`-byte rows at
    `new_base`: its address and its row steps (`with_output_pitch`'s stores and
    `with_input_pitch`'s loads); CapacityError when a step is not whole rows (`transfer`
    and `rows` name them: "a load", "pixels")."""

    def step(stride: int, count: int) -> int:
        if count > 1 and stride % width:
            raise CapacityError(f"{transfer} of {stride}-byte steps: not whole {width}-byte "
                                f"{rows}")
        return stride // width * pitch

    row, column = divmod(dma.base - base, width)
    return replace(dma, base=new_base + row * pitch + column,
                   stride1=step(dma.stride1, dma.count1), stride2=step(dma.stride2, dma.count2))


def pool_tiling(config: AccelConfig, layer: ConvLayer) -> int:
    """Output rows per chunk of a max-pool (its windows' taps fill an activation buffer);
    CapacityError naming the sizes when not even one output row fits."""
    out_h, out_w = layer.out_size
    taps = layer.kernel * layer.kernel
    quarter = config.memory.scratchpad_rows // 4
    chunk_rows = min(out_h, quarter // (out_w * taps))
    if chunk_rows < 1:
        raise CapacityError(
            f"layer {layer.name}: one output row of {out_w} pixels needs {out_w * taps} "
            f"gathered rows of {config.memory.row_bytes} B for its {taps} taps; an activation "
            f"buffer (a quarter of the {config.memory.scratchpad_bytes}-byte scratchpad) "
            f"holds {quarter}")
    return chunk_rows


def sum_pool_reference(layer: ConvLayer, feature: npt.NDArray[np.integer], pad_value: int = 0
                       ) -> npt.NDArray[np.int64]:
    """The int32 sums of a pool's windows, padding counting as `pad_value`: (M, C) of an
    (H, W, C) map (what a sum pool's stores send into the epilogue)."""
    stride, kernel, pad = layer.stride, layer.kernel, layer.padding
    out_h, out_w = layer.out_size
    summed = np.zeros((out_h, out_w, layer.channels), dtype=np.int64)
    end = pad + layer.pad_end
    values = np.pad(np.asarray(feature, np.int64), ((pad, end), (pad, end), (0, 0)),
                    constant_values=pad_value)
    for ky in range(kernel):
        for kx in range(kernel):
            summed += values[ky:ky + stride * (out_h - 1) + 1:stride,
                             kx:kx + stride * (out_w - 1) + 1:stride]
    return summed.reshape(-1, layer.channels)


def pool_reference(layer: ConvLayer, feature: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """Max-pooling in numpy: (M, C) int8 of an (H, W, C) map, padding never winning."""
    pad, stride, kernel = layer.padding, layer.stride, layer.kernel
    out_h, out_w = layer.out_size
    end = pad + layer.pad_end
    padded = np.full((layer.height + pad + end, layer.width + pad + end, layer.channels), -128,
                     dtype=np.int64)
    padded[pad:pad + layer.height, pad:pad + layer.width] = feature
    pooled = np.full((out_h, out_w, layer.channels), -128, dtype=np.int64)
    for ky in range(kernel):
        for kx in range(kernel):
            pooled = np.maximum(pooled, padded[ky:ky + stride * (out_h - 1) + 1:stride,
                                               kx:kx + stride * (out_w - 1) + 1:stride])
    return pooled.reshape(-1, layer.channels)


# -- main-memory traffic of a layer's commands --------------------------------------------


@dataclass(frozen=True)
class LayerTraffic:
    """Main-memory bytes one layer's commands move (whole bus beats, as AccelModel counts
    them: padding rows move none), split by what the loads read, beside the layer's
    compulsory bytes: every weight once, its input (and residual) once, its output once."""

    input_loaded: int  # the feature map (im2col rows) or the M×K matrix
    weights_loaded: int
    residual_loaded: int
    stored: int
    compulsory: int

    @property
    def loaded(self) -> int:
        return self.input_loaded + self.weights_loaded + self.residual_loaded

    @property
    def moved(self) -> int:
        return self.loaded + self.stored

    @property
    def ratio(self) -> float:
        """Bytes moved per compulsory byte (1.0: each byte crosses the bus once)."""
        return self.moved / self.compulsory if self.compulsory else 0.0


def _bus_bytes_of(dma: DmaCommand, bus_bytes: int, write_rows: int = 1) -> int:
    """`accel.dma_load_bytes` (the bytes AccelModel counts for a load or store), in
    O(bus²) at most: a whole network has hundreds of thousands of commands. A load
    ws_dma_load issues in groups (`accel.grouped`) is its groups' rows (`_group_parts`).

    The rows inside the bounds are a rectangle of (i2, i1) (each coordinate is linear in
    its index), and a row's beats depend only on its address modulo the bus, so the sum
    depends on the rectangle's first residue, the strides modulo the bus and its sides:
    equal sums are shared across commands (`_residue_beats`)."""
    if grouped(dma, write_rows) and dma.bounds:  # its runs of padding: group by group
        return dma_load_bytes(dma, bus_bytes, write_rows)
    if grouped(dma, write_rows):
        return sum(_bus_bytes_of(part, bus_bytes) for part in _group_parts(dma, write_rows))
    first2, count2 = _inside(dma.y0, dma.y_step, dma.count2, dma.height, dma.bounds)
    first1, count1 = _inside(dma.x0, dma.x_step, dma.count1, dma.width, dma.bounds)
    if count1 == 0 or count2 == 0:
        return 0
    start = (dma.base + first2 * dma.stride2 + first1 * dma.stride1) % bus_bytes
    return bus_bytes * _residue_beats(start, dma.length, dma.stride1 % bus_bytes, count1,
                                      dma.stride2 % bus_bytes, count2, bus_bytes)


def _group_parts(dma: DmaCommand, write_rows: int) -> list[DmaCommand]:
    """A grouped load without bounds as plain ones whose rows are its groups
    (`accel.dma_groups`): each line's whole groups of write_rows rows, then its last,
    shorter group; a group of n rows spans (n - 1)·|stride1| + length bytes."""
    step, down = abs(dma.stride1), dma.stride1 < 0
    whole, rest = divmod(dma.count1, write_rows)
    parts = []
    if whole:
        parts.append(replace(dma, base=dma.base - (write_rows - 1) * step * down,
                             length=(write_rows - 1) * step + dma.length, count1=whole,
                             stride1=write_rows * dma.stride1))
    if rest:
        parts.append(replace(dma, base=dma.base + whole * write_rows * dma.stride1
                             - (rest - 1) * step * down, length=(rest - 1) * step + dma.length,
                             count1=1, stride1=0))
    return parts


def _inside(start: int, step: int, count: int, limit: int, bounded: bool) -> tuple[int, int]:
    """(first, how many) of the indices i < count with 0 ≤ start + i·step < limit (all of
    them when not `bounded`): an interval, since the coordinate is linear in i."""
    if not bounded:
        return 0, count
    if step == 0:
        return (0, count) if 0 <= start < limit else (0, 0)
    if step > 0:  # i ≥ ⌈−start/step⌉ and i < ⌈(limit − start)/step⌉
        low, high = -(start // step), -((start - limit) // step)
    else:  # i ≤ ⌊start/|step|⌋ and i > ⌊(start − limit)/|step|⌋
        low, high = (start - limit) // -step + 1, start // -step + 1
    low, high = max(low, 0), min(high, count)
    return low, max(high - low, 0)


@functools.lru_cache(maxsize=65536)
def _residue_beats(start: int, length: int, step1: int, count1: int, step2: int, count2: int,
                   bus_bytes: int) -> int:
    """Σ over i2 < count2, i1 < count1 of the beats of a row of `length` bytes at an
    address ≡ start + i2·step2 + i1·step1 (mod bus_bytes): each side's residues repeat
    with a period of at most bus_bytes, so they are counted per residue."""
    def residues(step: int, count: int) -> dict[int, int]:
        period = bus_bytes // math.gcd(step, bus_bytes)
        counts = {}
        for index in range(min(period, count)):
            counts[index * step % bus_bytes] = count // period + int(index < count % period)
        return counts

    beats = 0
    for residue2, times2 in residues(step2, count2).items():
        for residue1, times1 in residues(step1, count1).items():
            residue = (start + residue2 + residue1) % bus_bytes
            beats += times2 * times1 * ((residue + length - 1) // bus_bytes + 1)
    return beats


def compulsory_bytes(layer: ConvLayer, residual: bool = False, pool: bool = False) -> int:
    """A layer's compulsory main-memory bytes (int8): its weights once (a grouped layer's
    k²·C/groups·N, not the zeros its packing adds), its input map once (H·W·C: unpadded;
    for a matrix layer the M×K matrix), a residual's M×N once, its output M×N once."""
    out_h, out_w = layer.out_size
    outputs = out_h * out_w * layer.out_channels
    weights = 0 if pool else (layer.taps * (layer.channels // layer.groups)
                              * layer.out_channels)
    inputs = layer.height * layer.width * layer.channels
    return weights + inputs + outputs * (1 + int(residual))


def layer_traffic(config: AccelConfig, layer: ConvLayer, program: LayerProgram,
                  residual: bool = False, pool: bool = False) -> LayerTraffic:
    """What `program`'s commands (conv_program's or pool_program's for `layer`) move over
    the bus, counted from the commands as AccelModel counts them (its `load_bytes` and
    `store_bytes` are the sums), each load attributed to the tensor its addresses are in;
    and the layer's compulsory bytes."""
    bus, write_rows = config.memory.bus_bytes, config.memory.write_rows
    loaded = {"input": 0, "weights": 0, "residual": 0}
    stored = 0
    for command in program.commands:
        if isinstance(command, Store):
            stored += _bus_bytes_of(command.dma, bus)
        elif isinstance(command, Load):
            base = command.dma.base
            tensor = ("residual" if 0 <= program.residual_base <= base else
                      "weights" if not pool and base >= program.weight_base else "input")
            loaded[tensor] += _bus_bytes_of(command.dma, bus, write_rows)
    return LayerTraffic(loaded["input"], loaded["weights"], loaded["residual"], stored,
                        compulsory_bytes(layer, residual, pool))


def table_traffic(config: AccelConfig, layer: ConvLayer, program: LayerProgram,
                  table: npt.NDArray[np.int64], residual: bool = False) -> LayerTraffic:
    """`layer_traffic` of a convolution's program from its packed table (`program`'s
    bases; its commands may be left out): the same sums, over the table's LOAD and STORE
    rows at once instead of over Command objects (a long layer has hundreds of thousands
    of them). Not for a pool: a pooling store's table row holds its window where a
    DmaCommand has y0."""
    from glensidec.hardware.accel_native import FIELDS

    bus = config.memory.bus_bytes
    dma_columns = [FIELDS.index(name) for name in (
        "base", "length", "count1", "stride1", "count2", "stride2", "bounds", "y0",
        "y_step", "height", "x0", "x_step", "width")]
    op = table[:, FIELDS.index("op")]
    rows = np.flatnonzero((op == 0) | (op == 2))
    (base, length, count1, stride1, count2, stride2, bounds, y0, y_step, height, x0,
     x_step, width) = table[rows][:, dma_columns].T
    if np.any((op[rows] == 2) & (y0 != 0)):
        raise ValueError("table_traffic: a pooling store (layer_traffic counts a pool)")
    if not len(rows):
        return LayerTraffic(0, 0, 0, 0, compulsory_bytes(layer, residual))
    first2, inside2 = _inside_rows(y0, y_step, count2, height, bounds != 0)
    first1, inside1 = _inside_rows(x0, x_step, count1, width, bounds != 0)
    start = (base + first2 * stride2 + first1 * stride1) % bus
    keys = np.stack([start, length, stride1 % bus, inside1, stride2 % bus, inside2], axis=1)
    # equal keys, equal bytes: each distinct one is counted once (`_residue_beats`)
    distinct, which = np.unique(keys, axis=0, return_inverse=True)
    per_key = np.array([bus * _residue_beats(*(int(value) for value in key), bus)
                        if key[3] and key[5] else 0 for key in distinct], dtype=np.int64)
    moved = per_key[which.reshape(-1)]
    write_rows = config.memory.write_rows
    if write_rows > 1:  # grouped loads (`accel.grouped`: few a layer) counted one by one
        for index in np.flatnonzero((op[rows] == 0) & (stride1 != 0)
                                    & (np.abs(stride1) <= length)
                                    & ((bounds == 0) | (x_step == 0) | (x_step == 1))):
            dma = DmaCommand(base=int(base[index]), length=int(length[index]),
                             count1=int(count1[index]), stride1=int(stride1[index]),
                             count2=int(count2[index]), stride2=int(stride2[index]),
                             bounds=bool(bounds[index]), y0=int(y0[index]),
                             y_step=int(y_step[index]), height=int(height[index]),
                             x0=int(x0[index]), x_step=int(x_step[index]),
                             width=int(width[index]))
            moved[index] = _bus_bytes_of(dma, bus, write_rows)
    tensor = np.where(op[rows] == 2, 3,
                      np.where((program.residual_base >= 0) & (base >= program.residual_base),
                               2, np.where(base >= program.weight_base, 1, 0)))
    sums = [int(moved[tensor == kind].sum()) for kind in range(4)]
    return LayerTraffic(sums[0], sums[1], sums[2], sums[3], compulsory_bytes(layer, residual))


def _inside_rows(start: npt.NDArray[np.int64], step: npt.NDArray[np.int64],
                 count: npt.NDArray[np.int64], limit: npt.NDArray[np.int64],
                 bounded: npt.NDArray[np.bool_]
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """`_inside` of each row's (start, step, count, limit, bounded), at once."""
    safe = np.where(step == 0, 1, step)
    low = np.where(step > 0, -(start // safe), (start - limit) // np.where(
        step < 0, -safe, 1) + 1)
    high = np.where(step > 0, -((start - limit) // safe), start // np.where(
        step < 0, -safe, 1) + 1)
    low, high = np.maximum(low, 0), np.minimum(high, count)
    zero_step_inside = (start >= 0) & (start < limit)
    first = np.where(step == 0, 0, low)
    many = np.where(step == 0, np.where(zero_step_inside, count, 0),
                    np.maximum(high - low, 0))
    return np.where(bounded, first, 0), np.where(bounded, many, count)


@dataclass
class _Step(Generic[_Computes]):
    loads: Sequence[Load | _Computes]  # Loads, or (im2col_stream's) flat ones
    computes: list[_Computes]  # Computes, or (im2col_stream's) flat ones
    tail: list[Command]  # Config / Store after the computes


def _block_config(quant: LayerQuant, n0: int, width: int, cols: int) -> Config:
    """The epilogue's Config for the N block of `width` columns from `n0`: its bias and
    multipliers, padded with zeros to the array's `cols` columns."""
    padded = (0,) * (cols - width)
    return Config(quant.epilogue, tuple(quant.bias[n0:n0 + width]) + padded,
                  tuple(quant.multiplier[n0:n0 + width]) + padded, first_column=n0,
                  residual=quant.residual)


def _block_store(base: int, width: int, m_len: int, row_pitch: int,
                 residual_row: int | None) -> Store:
    """The Store of an M chunk's `m_len` rows of one N block to `base`, `row_pitch` apart;
    with `residual_row`, the residual rows it adds from the scratchpad (then it signals
    the Load waiting for their buffer)."""
    return Store(DmaCommand(base=base, length=width, count1=m_len, stride1=row_pitch,
                            spad_row=residual_row if residual_row is not None else 0),
                 signal=residual_row is not None)


def _software_pipeline(steps: Sequence[_Step[_Computes]]) -> list[Command | _Computes]:
    """The command stream: step s + 1's loads interleaved one for one with step s's
    computes, then step s's stores.

    The dispatcher is in order and its queues are short (QUEUE_DEPTH): were a step's
    loads all sent before its computes, a full load queue would hold back the computes
    and the next step's loads could only enter once this step's computes had, which
    serialises load and compute. Interleaved, both queues fill at the rate their units
    drain them. (Step s + 1's loads go to the buffers step s − 1 used, so executing the
    stream in program order — `run_functional` — computes the same.)
    """
    commands: list[Command | _Computes] = list(steps[0].loads) if steps else []
    for index, step in enumerate(steps):
        following = steps[index + 1].loads if index + 1 < len(steps) else []
        pairs = min(len(following), len(step.computes))
        commands += chain.from_iterable(zip(following[:pairs], step.computes[:pairs],
                                            strict=True))
        commands += following[pairs:]  # (one of the two has no more)
        commands += step.computes[pairs:]
        commands += step.tail
    return commands


def _weight_rows(rows: int, k_first: int, length: int, base: int, n: int, width: int,
                 spad_row: int) -> DmaCommand:
    """The load of one K fold's weights: ROWS rows, the bottom one (k_first + ROWS − 1)
    first. Rows past the fold's `length` reduction indices are zero: the im2col bounds
    make them padding rows of value 0 (the activations there are 0 too, but an
    unwritten scratchpad row would be unknown, X in a 4-state simulator)."""
    return dma_command(_weight_row_fields(rows, k_first, length, base, n, width, spad_row))


def _weight_row_fields(rows: int, k_first: int, length: int, base: int, n: int, width: int,
                       spad_row: int) -> DmaFields:
    """_weight_rows' fields (`dma_fields`)."""
    return dma_fields(
        base=base + (k_first + rows - 1) * n, length=width, count1=rows, stride1=-n,
        spad_row=spad_row, bounds=length < rows, x0=length - rows, x_step=1, width=rows,
        pad_value=0)


def _im2col_rows(layer: ConvLayer, fold: tuple[int, int, int, int], oy0: int, out_rows: int,
                 spad_row: int, feature_base: int, zero_point: int,
                 padded_input: bool = False) -> DmaCommand:
    """The im2col load of one K fold for output rows oy0 … oy0 + out_rows (all columns),
    from the map as stored: with bounds and zero-point padding rows, or (padded_input)
    from a map stored with its padding, every row inside it."""
    return dma_command(_im2col_row_fields(layer, fold, oy0, out_rows, spad_row, feature_base,
                                          zero_point, padded_input))


def _im2col_row_fields(layer: ConvLayer, fold: tuple[int, int, int, int], oy0: int,
                       out_rows: int, spad_row: int, feature_base: int, zero_point: int,
                       padded_input: bool = False) -> DmaFields:
    """_im2col_rows' fields (`dma_fields`)."""
    ky, kx, channel0, length = fold
    stride, channels = layer.stride, layer.channels
    if padded_input:  # (packed taps: a square, dense window)
        width = layer.width + 2 * layer.padding
        return dma_fields(
            base=feature_base + ((oy0 * stride + ky) * width + kx) * channels + channel0,
            length=length, count1=layer.out_size[1], stride1=stride * channels,
            count2=out_rows, stride2=stride * width * channels, spad_row=spad_row)
    (dy, dx), (stride_h, stride_w) = layer.tap_offset(ky, kx), layer.stride_hw
    pad_h, pad_w = layer.padding_hw
    y0, x0 = oy0 * stride_h + dy - pad_h, dx - pad_w
    return dma_fields(
        base=feature_base + (y0 * layer.width + x0) * channels + channel0, length=length,
        count1=layer.out_size[1], stride1=stride_w * channels, count2=out_rows,
        stride2=stride_h * layer.width * channels, spad_row=spad_row, bounds=True, y0=y0,
        y_step=stride_h, height=layer.height, x0=x0, x_step=stride_w, width=layer.width,
        pad_value=zero_point)


def conv_reference(layer: ConvLayer, feature: npt.NDArray[np.integer],
                   weights: npt.NDArray[np.integer], quant: LayerQuant,
                   residual: npt.NDArray[np.integer] | None = None) -> npt.NDArray[np.int64]:
    """The layer in numpy and the interpreter's requantize: (M, N) int8 results.

    `feature` is (H, W, C) int8, `weights` (kh, kw, C, N) int8; padding reads
    the input zero point; the accumulation is int32 (wrapping), then bias (i32 add),
    per-channel requantize and the clip; with quant.residual, the residual add of
    `residual` ((M, N) int8) as the epilogue does it.
    """
    from glensidec.hardware.accel import epilogue_reference

    (pad_h, pad_w), (stride_h, stride_w) = layer.padding_hw, layer.stride_hw
    out_h, out_w = layer.out_size
    padded = np.full((layer.height + 2 * pad_h, layer.width + 2 * pad_w, layer.channels),
                     quant.input_zero_point, dtype=np.int64)
    padded[pad_h:pad_h + layer.height, pad_w:pad_w + layer.width] = feature
    acc = np.zeros((out_h, out_w, layer.out_channels), dtype=np.int64)
    for ky in range(layer.kernel_hw[0]):
        for kx in range(layer.kernel_hw[1]):
            dy, dx = layer.tap_offset(ky, kx)
            window = padded[dy:dy + stride_h * (out_h - 1) + 1:stride_h,
                            dx:dx + stride_w * (out_w - 1) + 1:stride_w]
            acc += window @ weights[ky, kx].astype(np.int64)
    # (the bias inside the epilogue: the per-row mode scales the sums before it)
    return epilogue_reference(wrap_signed(acc.reshape(-1, layer.out_channels), 32),
                              np.asarray(quant.bias, np.int64)[None, :],
                              np.asarray(quant.multiplier, np.int64), quant.epilogue,
                              residual=quant.residual, residual_rows=residual)


def _signed_bytes(row: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    values = row.astype(np.int64)
    return np.where(values >= 128, values - 256, values)


def run_functional(config: AccelConfig, commands: Sequence[Command],
                   memory: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Main memory after `commands`, executed one after the other (the data, no timing).

    The bits ws_accel computes when the tokens order the units as the program order
    does (conv_program's do): loads fill scratchpad rows, a COMPUTE multiplies ROWS
    weight rows (bottom row first) with m_len activation rows into the accumulator,
    emitted rows wait for a STORE, which sends them through the epilogue.
    """
    from glensidec.hardware.accel import dma_load_reference, dma_store_reference, epilogue_reference

    R, C, row_bytes = config.rows, config.cols, config.memory.row_bytes
    memory = memory.copy()
    spad: dict[int, npt.NDArray[np.uint8]] = {}
    zero_row = np.zeros(row_bytes, dtype=np.uint8)
    acc = np.zeros((config.acc_depth, C), dtype=np.int64)
    emitted: deque[npt.NDArray[np.int64]] = deque()
    config_now = Config(EpilogueConfig(), (0,) * C, (0,) * C)
    table = [0] * TABLE_ENTRIES  # the epilogue's lookup table, as the Table chunks wrote it
    scale = np.ones(C, np.int64)  # its per-column scales (a Config resets them)
    for command in commands:
        if isinstance(command, Load):
            spad.update(dma_load_reference(memory, command.dma, row_bytes))
        elif isinstance(command, Compute):
            weights = np.stack([_signed_bytes(spad.get(command.w_row + R - 1 - r, zero_row)[:C])
                                for r in range(R)])
            mask = config.memory.scratchpad_rows - 1
            rows = np.stack([_signed_bytes(spad.get(row & mask, zero_row)[:R])
                             for row in command.activation_rows()])
            kept = slice(command.acc_row, command.acc_row + command.m_len)
            result = rows @ weights + (acc[kept] if command.add else 0)
            result = (result + 2**31) % 2**32 - 2**31  # the array's int32 wrap
            if command.emit:
                emitted.extend(result)
            else:
                acc[kept] = result
        elif isinstance(command, Config):
            config_now = command
            scale = np.ones(C, np.int64)
        elif isinstance(command, Scale):
            scale = np.asarray(command.values, np.int64)
        elif isinstance(command, Table):
            table[command.first:command.first + len(command.entries)] = command.entries
        else:
            rows_out = []
            for index in range(command.dma.rows):
                residual_row = _signed_bytes(spad.get(command.dma.spad_row + index,
                                                      zero_row)[:C])
                if command.window:  # a pooling store: the max (or sum) of its rows
                    mask = config.memory.scratchpad_rows - 1
                    taps = [_signed_bytes(spad.get(row & mask, zero_row)[:C])
                            for row in command.window_rows(index)]
                    emitted.appendleft(np.sum(taps, axis=0) if command.sum
                                       else np.max(taps, axis=0))
                epilogue = config_now.epilogue
                if epilogue.table is not None:  # the table as loaded, not as configured
                    epilogue = replace(epilogue, table=tuple(table))
                out = epilogue_reference(emitted.popleft()[None, :],
                                         np.asarray(config_now.bias)[None, :],
                                         np.asarray(config_now.multiplier), epilogue,
                                         residual=config_now.residual,
                                         residual_rows=residual_row[None, :], scale=scale)
                row = np.zeros(row_bytes, dtype=np.uint8)
                row[:C] = out[0] & 0xFF
                rows_out.append(row)
            if command.to_spad:  # the next layer's input rows, bytes from length on 0
                mask = config.memory.scratchpad_rows - 1
                for target, out_row in zip(command.spad_rows(), rows_out, strict=True):
                    made = out_row.copy()
                    made[command.dma.length:] = 0
                    spad[target & mask] = made
            else:
                memory = dma_store_reference(memory, command.dma, rows_out)
    return memory


# -- the accelerator a compile targets -------------------------------------------------------

#: Defaults of `glensidec compile`: a 256 KiB scratchpad, the array's 1024 accumulator
#: rows (64 KiB at 16×16) and a 16 B/cycle main-memory bus with 8 cycles of latency.
DEFAULT_SCRATCHPAD_BYTES = 256 * 1024
DEFAULT_DRAM_BANDWIDTH = 16
DEFAULT_DRAM_LATENCY = 8


#: COMPUTE's m_len field: the most rows one tile accumulates, so the most accumulator rows
#: a tiling uses (more would only cost memory: the generated C's static arrays).
M_LEN_BITS = 16
MAX_ACC_DEPTH = (1 << M_LEN_BITS) - 1
#: ws_dma_load's read data port is BUS_BYTES·8 bits: a 32-bit Verilog integer.
MAX_BUS_BYTES = 1 << 27
#: The generated C (accel_runtime.c) holds the scratchpad, and the accumulator twice (it
#: and the queue of emitted rows), as static arrays: x86-64's default code model links at
#: most 2 GiB of static data, so each gets at most a quarter of it.
MAX_C_STATIC_BYTES = 1 << 29


#: Scratchpad rows one DMA write may carry (ws_spad's interleaved sub-banks; 1: today's
#: single-row write port).
WRITE_ROWS_CHOICES = (1, 2, 4, 8)


def accel_config_for(array: ArrayConfig, scratchpad_bytes: int = DEFAULT_SCRATCHPAD_BYTES,
                     bus_bytes: int = DEFAULT_DRAM_BANDWIDTH,
                     latency: int = DEFAULT_DRAM_LATENCY,
                     acc_depth: int | None = None, epilogue_lanes: int = 0,
                     write_rows: int = 1, weight_load_rows: int = 1) -> AccelConfig:
    """ws_accel around `array`: scratchpad rows of the next power of two ≥ max(rows, cols)
    bytes in four banks; `acc_depth` accumulator rows of COLS int32 (the array's by default);
    `epilogue_lanes` columns requantized a cycle (0: default_epilogue_lanes); `write_rows`
    scratchpad rows a DMA write may carry (ws_dma_load's groups, a power of two);
    `weight_load_rows` weight rows a cycle into the array (at most `write_rows`: read from
    ws_spad's sub-banks).

    Raises ValueError with a message for sizes the RTL cannot have, or the generated C
    cannot link (the limits: SPAD_ROW_BITS in AccelConfig, MAX_ACC_DEPTH, MAX_BUS_BYTES,
    MAX_C_STATIC_BYTES); every size compile takes passes here (pipeline.accelerator_for).
    """
    row_bytes = 1 << (max(array.rows, array.cols) - 1).bit_length()
    banks = 4
    if scratchpad_bytes % (row_bytes * banks) or scratchpad_bytes < row_bytes * banks:
        raise ValueError(f"the scratchpad holds {banks} banks of {row_bytes}-byte rows: "
                         f"{scratchpad_bytes} B is not a multiple of {row_bytes * banks} B")
    bank_rows = scratchpad_bytes // (row_bytes * banks)
    if bank_rows & (bank_rows - 1):
        raise ValueError(f"{scratchpad_bytes} B makes banks of {bank_rows} rows; the bank "
                         f"rows must be a power of two (e.g. {banks * row_bytes * 1024} B)")
    most = min(row_bytes << SPAD_ROW_BITS, MAX_C_STATIC_BYTES)
    if scratchpad_bytes > most:
        raise ValueError(f"the scratchpad is at most {most} B ({row_bytes}-byte rows a command "
                         f"addresses with {SPAD_ROW_BITS} bits, in a static array of the "
                         f"generated C of at most {MAX_C_STATIC_BYTES} B), got "
                         f"{scratchpad_bytes} B")
    depth = acc_depth or array.acc_depth
    if not 2 <= depth <= MAX_ACC_DEPTH:
        raise ValueError(f"the accumulator holds 2 to {MAX_ACC_DEPTH} rows (a COMPUTE's m_len "
                         f"is {M_LEN_BITS} bits: no tile uses more), got {depth}")
    if 2 * depth * array.cols * 4 > MAX_C_STATIC_BYTES:
        raise ValueError(f"the accumulator is at most {MAX_C_STATIC_BYTES // 2} B (twice a "
                         f"static array of the generated C, which must link), got "
                         f"{depth * array.cols * 4} B")
    if bus_bytes < 1 or bus_bytes & (bus_bytes - 1):
        raise ValueError(f"the DRAM bandwidth must be a power of two bytes per cycle, "
                         f"got {bus_bytes}")
    if bus_bytes > MAX_BUS_BYTES:
        raise ValueError(f"the DRAM bandwidth is at most {MAX_BUS_BYTES} bytes per cycle (the "
                         f"read port is 8·B bits wide, a Verilog integer), got {bus_bytes}")
    if epilogue_lanes < 0 or (epilogue_lanes and array.cols % epilogue_lanes):
        raise ValueError(f"the epilogue's lanes divide the array's {array.cols} columns, got "
                         f"{epilogue_lanes}")
    if write_rows not in WRITE_ROWS_CHOICES:
        raise ValueError(f"a DMA write carries {', '.join(map(str, WRITE_ROWS_CHOICES))} "
                         f"scratchpad rows, got {write_rows}")
    memory = MemoryConfig(row_bytes=row_bytes, scratchpad_bytes=scratchpad_bytes, banks=banks,
                          bus_bytes=bus_bytes, latency=latency, write_rows=write_rows)
    return AccelConfig(array.rows, array.cols, depth, memory, epilogue_lanes=epilogue_lanes,
                       weight_load_rows=weight_load_rows)


def gemm_tiling(config: AccelConfig, m: int, k: int, n: int, name: str) -> LayerTiling:
    """The tiling of an M×K×N matrix product (a 1×1 convolution of M pixels); raises
    CapacityError naming the sizes when its tiles cannot fit the memories."""
    return layer_tiling(config, ConvLayer(name, height=m, width=1, channels=k, out_channels=n))
