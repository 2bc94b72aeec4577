"""The memory system and output path around the array: scratchpad, DMA, epilogue.

Bit-exact references and cycle models of the RTL modules `ws_spad`, `ws_dma_load`,
`ws_dma_store` and `ws_epilogue` (docs/hardware.md, "The accelerator around the array").
Pure Python and numpy like `array`, so the compiler's cost model can import it; the
testbenches in sim/ check the RTL against every function here.

A DMA command moves rows: row (i2, i1), for i2 < count2 and i1 < count1, is `length`
contiguous bytes of main memory at ``base + i2·stride2 + i1·stride1``, into scratchpad
row ``spad_row + i2·count1 + i1`` (bytes from `length` on are 0). With bounds (im2col),
the row is padding — `length` copies of `pad_value`, the input's zero point, and no
memory access — when ``y = y0 + i2·y_step`` is outside ``[0, height)`` or
``x = x0 + i1·x_step`` outside ``[0, width)``. So one command loads one K fold of a
convolution's im2col matrix straight from an NHWC feature map, and a strided command
loads a weight block or a plain matrix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from glensidec.lang.dtypes import requantize_to_width, wrap_signed

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class MemoryConfig:
    """Sizes and timing of the memory system (RTL parameters of the accelerator modules).

    Defaults for a 16×16 array: 256 KiB scratchpad in 4 banks, 64 KiB accumulator
    (`ArrayConfig.acc_depth` rows of COLS int32), a 16 B/cycle main-memory bus.
    """

    row_bytes: int = 16  # one scratchpad row: an operand row of the array (ROWS int8)
    scratchpad_bytes: int = 256 * 1024
    banks: int = 4
    bus_bytes: int = 16  # main-memory bandwidth, bytes per cycle
    latency: int = 8  # cycles from a read request to its data
    #: rows one DMA write may carry (ws_dma_load's groups, ws_spad's interleaved sub-banks):
    #: rows that overlap or lie end to end in memory (`grouped`) go into the scratchpad up
    #: to this many a write
    write_rows: int = 1

    def __post_init__(self) -> None:
        for name in ("row_bytes", "banks", "bus_bytes", "write_rows"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, got {value}")
        if self.latency < 1:
            raise ValueError(f"latency must be at least 1 cycle, got {self.latency}")
        rows = self.scratchpad_bytes // self.row_bytes
        if rows * self.row_bytes != self.scratchpad_bytes or rows % self.banks:
            raise ValueError(
                f"a {self.scratchpad_bytes}-byte scratchpad is not {self.banks} banks of "
                f"{self.row_bytes}-byte rows"
            )
        if self.bank_rows & (self.bank_rows - 1):
            raise ValueError(f"bank rows must be a power of two, got {self.bank_rows}")
        if self.write_rows > self.scratchpad_rows:
            raise ValueError(f"{self.write_rows} rows a write is more than the scratchpad's "
                             f"{self.scratchpad_rows} rows")

    @property
    def scratchpad_rows(self) -> int:
        return self.scratchpad_bytes // self.row_bytes

    @property
    def bank_rows(self) -> int:
        return self.scratchpad_rows // self.banks


# -- DMA ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DmaCommand:
    """One DMA transfer of count2 × count1 rows (see the module docstring)."""

    base: int
    length: int
    count1: int = 1
    stride1: int = 0
    count2: int = 1
    stride2: int = 0
    spad_row: int = 0
    bounds: bool = False
    y0: int = 0
    y_step: int = 0
    height: int = 1
    x0: int = 0
    x_step: int = 0
    width: int = 1
    pad_value: int = 0

    @property
    def rows(self) -> int:
        return self.count1 * self.count2


@dataclass(frozen=True)
class DmaRow:
    """One row of a transfer: its main-memory address (meaningless for padding)."""

    addr: int
    spad_row: int
    padding: bool


def dma_rows(command: DmaCommand) -> Iterator[DmaRow]:
    """The rows of a command in issue order (i2 outer, i1 inner)."""
    for i2 in range(command.count2):
        y = command.y0 + i2 * command.y_step
        for i1 in range(command.count1):
            x = command.x0 + i1 * command.x_step
            padding = command.bounds and not (0 <= y < command.height and 0 <= x < command.width)
            addr = command.base + i2 * command.stride2 + i1 * command.stride1
            yield DmaRow(addr, command.spad_row + i2 * command.count1 + i1, padding)


def row_beats(addr: int, length: int, bus_bytes: int) -> int:
    """Bus beats a row of `length` bytes at `addr` spans (aligned beats of bus_bytes)."""
    return (addr + length - 1) // bus_bytes - addr // bus_bytes + 1


@dataclass(frozen=True)
class DmaGroup:
    """Rows ws_dma_load issues and writes together: `rows` rows from `spad_row` on, whose
    bytes are the `length` bytes from `addr` (a single row: its own)."""

    addr: int
    length: int
    spad_row: int
    rows: int
    padding: bool


def grouped(command: DmaCommand, write_rows: int) -> bool:
    """Does ws_dma_load issue this load in groups of rows? With a write port of several
    rows, when its rows overlap or lie end to end (0 < |stride1| <= length: weight
    blocks, whole lines of a map, an input's packed taps one byte apart), so a group's
    bytes are one span of memory; with bounds, only when x moves by at most a pixel a row
    (x_step 0 or 1), so a line is at most three runs: padding, inside, padding."""
    return (write_rows > 1 and 0 < abs(command.stride1) <= command.length
            and (not command.bounds or command.x_step in (0, 1)))


def run_left(command: DmaCommand, y: int, x: int, left: int) -> int:
    """Rows of a line from the one at (y, x) on whose padding is that row's (at most
    `left`, the rows the line has left): with x_step 1 a run ends where x enters or
    leaves [0, width)."""
    if not command.bounds or command.x_step == 0 or not 0 <= y < command.height:
        return left
    end = -x if x < 0 else command.width - x if x < command.width else left
    return min(end, left)


def dma_groups(command: DmaCommand, write_rows: int = 1) -> Iterator[DmaGroup]:
    """The groups of a load in issue order: each row alone, or (`grouped`) each line's rows
    min(write_rows, rows left in the line, rows left in its run of padding or inside rows)
    at a time. A group of rows inside spans the bytes from its lowest row's address (the
    last row's when stride1 < 0) to its highest row's end, (n - 1)·|stride1| + length; a
    group of padding rows takes one issue slot and no memory access."""
    if not grouped(command, write_rows):
        for row in dma_rows(command):
            yield DmaGroup(row.addr, command.length, row.spad_row, 1, row.padding)
        return
    length, step = command.length, abs(command.stride1)
    for i2 in range(command.count2):
        y = command.y0 + i2 * command.y_step
        i1 = 0
        while i1 < command.count1:
            x = command.x0 + i1 * command.x_step
            rows = min(write_rows, run_left(command, y, x, command.count1 - i1))
            padding = command.bounds and not (0 <= y < command.height and 0 <= x < command.width)
            addr = command.base + i2 * command.stride2 + i1 * command.stride1
            low = addr if command.stride1 > 0 else addr - (rows - 1) * step
            yield DmaGroup(low, (rows - 1) * step + length,
                           command.spad_row + i2 * command.count1 + i1, rows, padding)
            i1 += rows


def group_slots(group: DmaGroup, bus_bytes: int) -> int:
    """Issue slots of a group: a bus beat each, one for a padding row."""
    return 1 if group.padding else row_beats(group.addr, group.length, bus_bytes)


def dma_load_slots(command: DmaCommand, bus_bytes: int, write_rows: int = 1) -> int:
    """Issue cycles of a load: one per bus beat, one per padding row (no memory access)."""
    return sum(group_slots(group, bus_bytes) for group in dma_groups(command, write_rows))


def dma_load_writes(
    commands: Sequence[DmaCommand], bus_bytes: int, latency: int, write_rows: int = 1
) -> list[tuple[int, int, int]]:
    """(cycle, first scratchpad row, rows) of every write of ws_dma_load, in order.

    Commands offered back to back: the first is accepted in cycle 0, issue slots follow
    in cycles 1, 2, … without gaps (the next command is accepted in its predecessor's
    last slot); a group's last slot's data returns `latency` cycles later and its rows
    are written one cycle after that.
    """
    writes: list[tuple[int, int, int]] = []
    slot = 0
    for command in commands:
        for group in dma_groups(command, write_rows):
            slot += group_slots(group, bus_bytes)
            writes.append((slot + latency + 1, group.spad_row, group.rows))
    return writes


def dma_load_cycles(commands: Sequence[DmaCommand], bus_bytes: int, latency: int,
                    write_rows: int = 1) -> int:
    """Cycles of ws_dma_load for back-to-back commands, up to and including the last write."""
    slots = sum(dma_load_slots(command, bus_bytes, write_rows) for command in commands)
    return slots + latency + 2


def dma_load_reference(
    memory: npt.NDArray[np.uint8], command: DmaCommand, row_bytes: int
) -> dict[int, npt.NDArray[np.uint8]]:
    """Scratchpad rows a load writes: {scratchpad row: ROW_BYTES bytes}."""
    written: dict[int, npt.NDArray[np.uint8]] = {}
    for row in dma_rows(command):
        data = np.zeros(row_bytes, dtype=np.uint8)
        if row.padding:
            data[: command.length] = command.pad_value & 0xFF
        else:
            data[: command.length] = memory[row.addr : row.addr + command.length]
        written[row.spad_row] = data
    return written


def dma_load_bytes(command: DmaCommand, bus_bytes: int, write_rows: int = 1) -> int:
    """Bytes a load moves over the bus (whole beats, padding rows move none)."""
    return bus_bytes * sum(
        group_slots(group, bus_bytes)
        for group in dma_groups(command, write_rows)
        if not group.padding
    )


def dma_store_cycles(commands: Sequence[DmaCommand], bus_bytes: int) -> int:
    """Cycles of ws_dma_store with every row offered at once: accept + one per beat.

    A command is accepted in the last beat of its predecessor, so commands chain
    without gaps; the count runs up to and including the last write beat.
    """
    beats = sum(
        row_beats(row.addr, command.length, bus_bytes)
        for command in commands
        for row in dma_rows(command)
    )
    return beats + 1


def dma_store_reference(
    memory: npt.NDArray[np.uint8], command: DmaCommand, rows: Sequence[npt.NDArray[np.uint8]]
) -> npt.NDArray[np.uint8]:
    """Main memory after a store of `rows` (the first `length` bytes of each)."""
    result = memory.copy()
    for row, data in zip(dma_rows(command), rows, strict=True):
        result[row.addr : row.addr + command.length] = data[: command.length]
    return result


def im2col_command(
    *,
    feature_base: int,
    height: int,
    width: int,
    channels: int,
    kernel: tuple[int, int],
    stride: int,
    padding: int,
    tap: tuple[int, int],
    channel0: int,
    length: int,
    spad_row: int,
    zero_point: int,
) -> DmaCommand:
    """The load of one im2col K fold: kernel tap (ky, kx), channels channel0 … +length.

    The feature map is NHWC (one image) at `feature_base`; output pixel (oy, ox) reads
    input pixel (oy·stride + ky − padding, ox·stride + kx − padding).
    """
    out_h = (height + 2 * padding - kernel[0]) // stride + 1
    out_w = (width + 2 * padding - kernel[1]) // stride + 1
    ky, kx = tap
    y0, x0 = ky - padding, kx - padding
    return DmaCommand(
        base=feature_base + (y0 * width + x0) * channels + channel0,
        length=length,
        count1=out_w,
        stride1=stride * channels,
        count2=out_h,
        stride2=stride * width * channels,
        spad_row=spad_row,
        bounds=True,
        y0=y0,
        y_step=stride,
        height=height,
        x0=x0,
        x_step=stride,
        width=width,
        pad_value=zero_point,
    )


# -- epilogue -------------------------------------------------------------------------

#: plan_layer's epilogue latency: a row accepted in cycle t leaves ws_epilogue in cycle
#: t + 2 + COLS / LANES; this analytic model counts a lane per column (AccelModel is exact).
EPILOGUE_LATENCY = 3


@dataclass(frozen=True)
class EpilogueConfig:
    """Static settings of ws_epilogue for one store (the quantizer's requantization).

    `table`: an element-wise non-linearity after the clip (a quantized hardswish, sigmoid,
    SiLU …: the IR's `lookup`), its 256 int8 results indexed by the clipped value + 128;
    None: none. ws_epilogue holds it in a register file a CONFIG's table chunks write."""

    pre: int = 0
    post: int = 0
    zero_point: int = 0
    low: int = -128
    high: int = 127
    table: tuple[int, ...] | None = None

    def output_range(self, out_width: int = 8) -> tuple[int, int]:
        """The values the layer's own result takes (before a late residual add)."""
        low, high = min(self.low, self.high), max(self.low, self.high)
        if self.table is None:
            return low, high
        half = 1 << (out_width - 1)
        reached = self.table[low + half:high + half + 1]
        return min(reached), max(reached)


@dataclass(frozen=True)
class ResidualConfig:
    """ws_epilogue's residual add (a quantized residual add fused into the layer before it):
    ``clip(requantize(y·self_multiplier + r·multiplier + offset), low, high)`` of the
    requantized row y and the int8 residual row r, every sum and product i32 (wrapping).

    `early`: r·multiplier + offset is added to the accumulator with the bias instead,
    before the layer's own requantize (the other fields are then unused): a skip
    connection added in i32 before requantizing.

    `product`: y·r takes the place of y·self_multiplier (which is then unused), an
    element-wise product of the two int8 rows requantized with a scalar multiplier: the
    quantizer's product of two activations (a GELU's x·Φ(x)).

    `rows` (the per-row mode): the residual row is no addend but two run-time values of its
    output row, little-endian i32 in its first 8 bytes (`row_values`): an offset o and a
    fixed-point reciprocal p = l·2^16 + h (h, l signed 16-bit), which turn the accumulator,
    before the bias, into ``t = (acc + o)·h + trunc((acc + o)·l / 2^pre)`` (`pre` < 32, each
    product wrapping in i32); the other fields are unused and nothing is added after. A
    division of every row by its own run-time value (LayerNorm's deviation, softmax's sum)
    as a reciprocal the host computes once per row."""

    self_multiplier: int = 1
    multiplier: int = 1
    offset: int = 0
    requantize_multiplier: int = 1
    pre: int = 0
    post: int = 0
    zero_point: int = 0
    low: int = -128
    high: int = 127
    early: bool = False
    product: bool = False
    rows: bool = False


#: Bytes of a residual row that carry the per-row mode's offset and multiplier (two i32).
ROW_VALUE_BYTES = 8


def holds_row_values(columns: int, cols: int) -> bool:
    """Whether a per-row layer of `columns` int8 output columns on an array of `cols` can
    carry each row's values: its residual rows, `columns` bytes apart, are written as i32
    (so a multiple of 4 columns), and ws_epilogue reads the values from the first 8 bytes
    of every N block's own residual row, the last block's too (whole, or 8 columns)."""
    last = columns % cols
    return columns % 4 == 0 and (last == 0 or last >= ROW_VALUE_BYTES)


def row_reciprocal(packed: npt.NDArray[np.integer]) -> tuple[npt.NDArray[np.int64],
                                                             npt.NDArray[np.int64]]:
    """(h, l) of the per-row mode's reciprocal p = l·2^16 + h (i32): h its low 16 bits,
    signed, and l = (p − h) / 2^16, 17 bits (ws_epilogue decodes p the same way)."""
    value = np.asarray(packed, np.int64)
    whole = wrap_signed(value % (1 << 16), 16)
    return whole, (value - whole) >> 16


def row_scaled(acc: npt.NDArray[np.integer], offsets: npt.NDArray[np.integer],
               packed: npt.NDArray[np.integer], shift: int) -> npt.NDArray[np.int64]:
    """The per-row mode's t = (acc + o)·h + trunc((acc + o)·l / 2^shift), every step i32
    (wrapping), of rows `acc` with each row's offset and packed reciprocal."""
    whole, part = row_reciprocal(packed)
    x = wrap_signed(np.asarray(acc, np.int64) + np.asarray(offsets, np.int64)[:, None], 32)
    product = wrap_signed(x * part[:, None], 32)
    divided = np.where(product < 0, -((-product) >> shift), product >> shift)
    return wrap_signed(wrap_signed(x * whole[:, None], 32) + divided, 32)


def row_values(residual_rows: npt.NDArray[np.integer],
               out_width: int = 8) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The per-row mode's (offset, multiplier) of each row of `residual_rows` ((rows,
    columns) of signed out_width-bit values, as ws_epilogue's residual row: column c at bits
    c·out_width …): the row's low 64 bits as two little-endian signed 32-bit numbers."""
    rows, columns = residual_rows.shape
    if columns * out_width < 64:
        raise ValueError(f"the per-row mode needs 64 bits of residual row; {columns} "
                         f"columns of {out_width} bits have {columns * out_width}")
    used = -(-64 // out_width)  # the columns that hold the low 64 bits
    fields = np.asarray(residual_rows[:, :used], np.int64) & ((1 << out_width) - 1)
    bits = np.zeros(rows, np.uint64)
    for column in range(used):  # (bits beyond 64 fall off the top, as the RTL's slice)
        bits |= fields[:, column].astype(np.uint64) << np.uint64(column * out_width)
    low = wrap_signed((bits & np.uint64(0xFFFFFFFF)).astype(np.int64), 32)
    high = wrap_signed((bits >> np.uint64(32)).astype(np.int64), 32)
    return low, high


#: Signed width of ws_epilogue's residual multipliers (its RES_W): the quantizer's
#: add_dynamic makes them at most 2^14.
RESIDUAL_MULTIPLIER_BITS = 16


def residual_range_error(residual: ResidualConfig, config: EpilogueConfig,
                         out_width: int = 8) -> str | None:
    """Why ws_epilogue cannot compute `residual` exactly, or None when it can.

    The epilogue's residual products are out_width × RESIDUAL_MULTIPLIER_BITS and the late
    form's sum y·self_multiplier + r·multiplier + offset is out_width +
    RESIDUAL_MULTIPLIER_BITS bits wide (Z_W in rtl/ws_epilogue.v): exact, as the i32
    arithmetic, when the multipliers fit their width and the sum's range — y within the
    layer's clip bounds, r any int8 — fits Z_W bits (nothing wraps). The quantizer's
    residual adds always do (multipliers ≤ 2^14, |sum| < 2^23)."""
    if residual.rows:  # the residual row's values: only its shift is checked
        return None if 0 <= residual.pre < 32 else \
            f"the per-row mode's shift {residual.pre} is not below 32"
    bits = RESIDUAL_MULTIPLIER_BITS
    limit = 1 << (bits - 1)
    used = [("multiplier", residual.multiplier)]
    if not (residual.early or residual.product):
        used.insert(0, ("self multiplier", residual.self_multiplier))
    for name, value in used:
        if not -limit <= value < limit:
            return (f"the residual add's {name} {value} does not fit the epilogue's "
                    f"{bits}-bit signed multiplier")
    if residual.early:
        return None
    sum_bits = out_width + bits
    type_low, type_high = -(1 << (out_width - 1)), (1 << (out_width - 1)) - 1
    y_range = config.output_range(out_width)
    r_range = (type_low, type_high)
    if residual.product:  # y·r + r·multiplier = r·(y + multiplier): at r's and y's ends
        terms = [r * (y + residual.multiplier) for y in y_range for r in r_range]
        low, high = residual.offset + min(terms), residual.offset + max(terms)
    else:
        y_terms = [residual.self_multiplier * y for y in y_range]
        r_terms = [residual.multiplier * r for r in r_range]
        low = residual.offset + min(y_terms) + min(r_terms)
        high = residual.offset + max(y_terms) + max(r_terms)
    if low < -(1 << (sum_bits - 1)) or high >= 1 << (sum_bits - 1):
        return (f"the residual add's sum spans [{low}, {high}], beyond the epilogue's "
                f"{sum_bits}-bit signed sum")
    return None


def epilogue_reference(
    acc: npt.NDArray[np.integer],
    bias: npt.NDArray[np.integer],
    multipliers: npt.NDArray[np.integer],
    config: EpilogueConfig,
    out_width: int = 8,
    residual: ResidualConfig | None = None,
    residual_rows: npt.NDArray[np.integer] | None = None,
    scale: npt.NDArray[np.integer] | None = None,
) -> npt.NDArray[np.int64]:
    """Bit-exact ws_epilogue (without pooling) on rows of int32 accumulators.

    The same arithmetic as `glensidec.lang.interp.requantize` after an i32 bias add:
    ``clip(clip(round((acc + bias) >> pre) * m >> post) + zp, int8), low, high)``, through
    the config's lookup table when it has one; with a `residual`, then the residual add of
    `residual_rows` (same shape, int8). `scale` (per column, int8: a run-time channel
    scale) multiplies the biased sum before the requantize, wrapping in i32. A residual add
    ws_epilogue cannot compute exactly (`residual_range_error`) is a ValueError. In the
    per-row mode (`residual.rows`) each residual row holds its row's offset and reciprocal,
    which scale the accumulator before the bias (`row_scaled`).
    """
    if residual is not None:
        problem = residual_range_error(residual, config, out_width)
        if problem is not None:
            raise ValueError(problem)
    per_row = residual is not None and residual.rows
    if per_row:
        assert residual is not None and residual_rows is not None
        offsets, packed = row_values(np.asarray(residual_rows), out_width)
        acc = row_scaled(acc, offsets, packed, residual.pre)
    biased = wrap_signed(acc.astype(np.int64) + bias.astype(np.int64), 32)  # the i32 add wraps
    if residual is not None and residual.early:
        assert residual_rows is not None
        biased = wrap_signed(biased + residual_rows.astype(np.int64) * residual.multiplier
                             + residual.offset, 32)
    if scale is not None:
        biased = wrap_signed(biased * np.asarray(scale, np.int64), 32)
    saturated = requantize_to_width(biased, multipliers, config.pre, config.post,
                                    config.zero_point, out_width)
    clipped: npt.NDArray[np.int64] = np.clip(saturated, config.low, config.high).astype(np.int64)
    if config.table is not None:  # the non-linearity, after the clip
        clipped = np.asarray(config.table, np.int64)[clipped + (1 << (out_width - 1))]
    if residual is None or residual.early or per_row:
        return clipped
    assert residual_rows is not None
    y_factor = residual_rows.astype(np.int64) if residual.product else \
        residual.self_multiplier
    summed = wrap_signed(clipped * y_factor
                         + residual_rows.astype(np.int64) * residual.multiplier
                         + residual.offset, 32)
    requantized = requantize_to_width(summed, residual.requantize_multiplier, residual.pre,
                                      residual.post, residual.zero_point, out_width)
    added: npt.NDArray[np.int64] = np.clip(requantized, residual.low,
                                           residual.high).astype(np.int64)
    return added


# -- layer schedule (the planned top: a model, not yet checked against RTL) ---------------


class CapacityError(ValueError):
    """A layer's tile does not fit the scratchpad or accumulator (the message names sizes)."""


@dataclass(frozen=True)
class ConvLayer:
    """A convolution (or, with 1×1 everything, a dense layer) on an NHWC int8 feature map."""

    name: str
    height: int
    width: int
    channels: int
    out_channels: int
    kernel: int = 1
    stride: int = 1
    padding: int = 0
    # A grouped convolution: output channel n reads only the channels of its group,
    # n // (out_channels / groups); depthwise when groups = channels = out_channels.
    groups: int = 1
    # A ceil-mode pool's extra padding after the map (below and right of it): the DMA's
    # bounds read it as padding like the rest (pools only).
    pad_end: int = 0
    # A convolution's window that is not square or not dense: `kernel`, `stride` and
    # `padding` above are along y, these along x where they differ (None: the same as
    # along y; a 1×7 is kernel 1, kernel_w 7), and `dilation` (dy, dx) spaces the taps
    # (a dilated convolution read as strided taps, not as a zero-stuffed kernel). The
    # DMA's im2col addressing and the window schedule's 2-D patterns take any of these;
    # pools and packed taps are square and dense.
    kernel_w: int | None = None
    stride_w: int | None = None
    padding_w: int | None = None
    dilation: tuple[int, int] = (1, 1)
    # Whether a layer of few channels may pack kernel taps into a row (commands.packs_taps).
    # False: one tap a row, so a padded layer reads its unpadded map with the DMA's bounds
    # (an earlier layer's rows as they are) instead of a padded copy of it.
    pack_taps: bool = True

    def __post_init__(self) -> None:
        # one spelling per window: a square one never names its width (equal layers,
        # equal keys: layers of one shape share a command table)
        for name, along_y in (("kernel_w", self.kernel), ("stride_w", self.stride),
                              ("padding_w", self.padding)):
            if getattr(self, name) == along_y:
                object.__setattr__(self, name, None)

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return self.kernel, self.kernel if self.kernel_w is None else self.kernel_w

    @property
    def stride_hw(self) -> tuple[int, int]:
        return self.stride, self.stride if self.stride_w is None else self.stride_w

    @property
    def padding_hw(self) -> tuple[int, int]:
        return self.padding, self.padding if self.padding_w is None else self.padding_w

    @property
    def span_hw(self) -> tuple[int, int]:
        """The window's extent in input pixels: (k − 1)·d + 1 per axis."""
        (kh, kw), (dy, dx) = self.kernel_hw, self.dilation
        return (kh - 1) * dy + 1, (kw - 1) * dx + 1

    @property
    def taps(self) -> int:
        kh, kw = self.kernel_hw
        return kh * kw

    @property
    def square(self) -> bool:
        """A k×k window, one stride and one padding, its taps adjacent."""
        return self.kernel_w is None and self.stride_w is None and \
            self.padding_w is None and self.dilation == (1, 1)

    def tap_offset(self, ky: int, kx: int) -> tuple[int, int]:
        """Where tap (ky, kx) sits in the window, in input pixels (dy, dx)."""
        return ky * self.dilation[0], kx * self.dilation[1]

    @property
    def out_size(self) -> tuple[int, int]:
        (span_h, span_w), (stride_h, stride_w) = self.span_hw, self.stride_hw
        pad_h, pad_w = self.padding_hw
        return (
            (self.height + 2 * pad_h + self.pad_end - span_h) // stride_h + 1,
            (self.width + 2 * pad_w + self.pad_end - span_w) // stride_w + 1,
        )

    @property
    def gemm(self) -> tuple[int, int, int]:
        """(M, K, N) of the layer's matrix product (K unpadded)."""
        out_h, out_w = self.out_size
        return out_h * out_w, self.taps * self.channels, self.out_channels


@dataclass(frozen=True)
class LayerCost:
    """Predicted cycles and traffic of one layer under the planned schedule."""

    layer: ConvLayer
    m_chunk: int  # activation rows per chunk (accumulator and scratchpad limited)
    folds: int  # K folds: taps × channel chunks of ROWS
    compute_cycles: int  # array busy time, no memory stalls
    total_cycles: int  # with DMA waits, pipeline fill/drain, epilogue and store tail
    bytes_loaded: int
    bytes_stored: int

    @property
    def stall_cycles(self) -> int:
        return self.total_cycles - self.compute_cycles


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def im2col_load_slots(layer: ConvLayer, rows: int, bus_bytes: int, m0: int, m_len: int) -> int:
    """Issue slots of the im2col loads of output rows m0 … m0+m_len (all K folds).

    Exactly `dma_load_slots` of the `im2col_command`s restricted to those output pixels
    (feature map at address 0), computed with numpy instead of row by row.
    """
    out_w = layer.out_size[1]
    pixels = np.arange(m0, m0 + m_len)
    oy, ox = pixels // out_w, pixels % out_w
    slots = 0
    (stride_h, stride_w), (pad_h, pad_w) = layer.stride_hw, layer.padding_hw
    for ky in range(layer.kernel_hw[0]):
        for kx in range(layer.kernel_hw[1]):
            dy, dx = layer.tap_offset(ky, kx)
            y = oy * stride_h + dy - pad_h
            x = ox * stride_w + dx - pad_w
            inside = (y >= 0) & (y < layer.height) & (x >= 0) & (x < layer.width)
            slots += int(np.count_nonzero(~inside)) * _ceil(layer.channels, rows)
            for channel0 in range(0, layer.channels, rows):
                length = min(rows, layer.channels - channel0)
                addr = (y[inside] * layer.width + x[inside]) * layer.channels + channel0
                beats = (addr + length - 1) // bus_bytes - addr // bus_bytes + 1
                slots += int(beats.sum())
    return slots


@dataclass(frozen=True)
class LayerPlan:
    """Tile sizes of one layer: activation rows per chunk and K folds per piece."""

    m_chunk: int
    fold_piece: int


def _plan_steps(layer: ConvLayer, rows: int, cols: int, plan: LayerPlan) -> Iterator[
        tuple[int, int, int, int, int]]:
    """Steps in order (M chunk, N block, K piece): (chunk, block, piece, m0, m_len)."""
    M, _, N = layer.gemm
    pieces = _ceil(layer.taps * _ceil(layer.channels, rows), plan.fold_piece)
    for chunk, m0 in enumerate(range(0, M, plan.m_chunk)):
        for block in range(_ceil(N, cols)):
            for piece in range(pieces):
                yield chunk, block, piece, m0, min(plan.m_chunk, M - m0)


def layer_cost(
    array_rows: int,
    array_cols: int,
    acc_depth: int,
    memory: MemoryConfig,
    layer: ConvLayer,
    plan: LayerPlan,
) -> LayerCost:
    """Cycles and traffic of one layer under `plan` (the schedule of docs/hardware.md).

    The scratchpad is four buffers of a quarter each: two for activations (im2col rows:
    an M chunk × a K piece), two for weights (a K piece of one N block); the load of the
    next buffer overlaps compute on the other. Steps run M chunk, N block, K piece; the
    activations of a chunk stay for every N block when one piece holds all K folds, the
    weights stay for every chunk when all of them fit the two weight buffers. Results
    leave through the epilogue and the store DMA while the array computes.

    A schedule model composed from module timings that are checked against RTL (DMA
    slots, array steady state); it is not the schedule rtl/ws_accel.v runs (that one is
    `glensidec.hardware.commands`, exact), so these totals are not checked against
    simulation.
    """
    R, C = array_rows, array_cols
    M, _, N = layer.gemm
    folds = layer.taps * _ceil(layer.channels, R)
    buffer_rows = memory.scratchpad_rows // 4
    piece_folds = min(plan.fold_piece, folds)
    if piece_folds * R > buffer_rows or plan.m_chunk * piece_folds > buffer_rows:
        raise CapacityError(
            f"layer {layer.name}: a tile of {plan.m_chunk} activation rows × {piece_folds} K "
            f"folds and {piece_folds * R} weight rows ({memory.row_bytes} B each) does not fit "
            f"a {buffer_rows * memory.row_bytes}-byte buffer (a quarter of the "
            f"{memory.scratchpad_bytes}-byte scratchpad)"
        )
    if plan.m_chunk > acc_depth:
        raise CapacityError(
            f"layer {layer.name}: {plan.m_chunk} rows per chunk exceed the accumulator's "
            f"{acc_depth} rows ({acc_depth * C * 4} B)"
        )
    pieces = _ceil(folds, piece_folds)
    weights_resident = 2 * buffer_rows >= folds * R * _ceil(N, C)
    activations_resident = pieces == 1
    store_beats = _ceil(min(C, N), memory.bus_bytes)  # per result row

    read_free = compute_end = store_end = compute = loaded = 0
    a_uses: list[int] = []  # the step index each activation load serves first
    w_uses: list[int] = []
    step_ends: list[int] = []
    a_ready = w_ready = 0
    chunk_slots: dict[tuple[int, int], int] = {}
    for index, (_, block, piece, m0, m_len) in enumerate(_plan_steps(layer, R, C, plan)):
        kf = min(piece_folds, folds - piece * piece_folds)
        if not activations_resident or block == 0:
            # im2col of this chunk's rows; one load per (chunk, piece) or per chunk
            if (m0, m_len) not in chunk_slots:
                chunk_slots[m0, m_len] = im2col_load_slots(layer, R, memory.bus_bytes, m0, m_len)
            # a piece of kf folds costs kf/folds of the chunk's im2col (exact when the
            # channel count is a multiple of ROWS: every fold is alike)
            slots = _ceil(chunk_slots[m0, m_len] * kf, folds)
            free = step_ends[a_uses[-2]] if len(a_uses) >= 2 else 0
            read_free = max(read_free, free) + slots
            a_ready = read_free + memory.latency + 1
            a_uses.append(index)
            loaded += slots * memory.bus_bytes
        if not weights_resident or m0 == 0:
            beats = kf * R * _ceil(C, memory.bus_bytes)
            free = step_ends[w_uses[-2]] if len(w_uses) >= 2 else 0
            read_free = max(read_free, free) + beats
            w_ready = read_free + memory.latency + 1
            w_uses.append(index)
            loaded += beats * memory.bus_bytes
        busy = kf * max(m_len, R)
        compute += busy
        start = max(compute_end, a_ready, w_ready)
        if start > compute_end or index == 0:
            start += R  # a stalled array refills: the first weights commit before rows flow
        compute_end = start + busy
        step_ends.append(compute_end)
        if piece == pieces - 1:  # the last K piece emits its rows through the epilogue
            emit = compute_end - m_len + R + C - 1 + EPILOGUE_LATENCY
            store_end = max(store_end, emit) + m_len * store_beats
    total = max(compute_end + R + C - 1 + EPILOGUE_LATENCY, store_end) + 1
    return LayerCost(
        layer=layer,
        m_chunk=plan.m_chunk,
        folds=folds,
        compute_cycles=compute,
        total_cycles=total,
        bytes_loaded=loaded,
        bytes_stored=M * _ceil(N, C) * store_beats * memory.bus_bytes,
    )


def plan_layer(
    array_rows: int, array_cols: int, acc_depth: int, memory: MemoryConfig, layer: ConvLayer
) -> LayerCost:
    """The fastest plan among a few tile sizes (fewest bytes moved on a tie).

    K pieces of all folds, or halves down to one fold; the M chunk as large as the
    accumulator and an activation buffer allow. A layer no plan fits raises
    CapacityError naming the sizes.
    """
    R = array_rows
    M, _, _ = layer.gemm
    folds = layer.taps * _ceil(layer.channels, R)
    buffer_rows = memory.scratchpad_rows // 4
    best: LayerCost | None = None
    error: CapacityError | None = None
    piece = folds
    while True:
        m_chunk = min(M, acc_depth, buffer_rows // max(1, piece))
        try:
            cost = layer_cost(array_rows, array_cols, acc_depth, memory, layer,
                              LayerPlan(max(1, m_chunk), piece))
        except CapacityError as problem:
            error = error or problem
        else:
            key = (cost.total_cycles, cost.bytes_loaded)
            if best is None or key < (best.total_cycles, best.bytes_loaded):
                best = cost
        if piece == 1:
            break
        piece = _ceil(piece, 2)
    if best is None:
        assert error is not None
        raise error
    return best
