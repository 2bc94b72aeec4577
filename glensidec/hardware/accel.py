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

    def __post_init__(self) -> None:
        for name in ("row_bytes", "banks", "bus_bytes"):
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


def dma_load_slots(command: DmaCommand, bus_bytes: int) -> int:
    """Issue cycles of a load: one per bus beat, one per padding row (no memory access)."""
    return sum(
        1 if row.padding else row_beats(row.addr, command.length, bus_bytes)
        for row in dma_rows(command)
    )


def dma_load_writes(
    commands: Sequence[DmaCommand], bus_bytes: int, latency: int
) -> list[tuple[int, int]]:
    """(cycle, scratchpad row) of every row write of ws_dma_load, in order.

    Commands offered back to back: the first is accepted in cycle 0, issue slots follow
    in cycles 1, 2, … without gaps (the next command is accepted in its predecessor's
    last slot); a row's last slot's data returns `latency` cycles later and the row is
    written one cycle after that.
    """
    writes: list[tuple[int, int]] = []
    slot = 0
    for command in commands:
        for row in dma_rows(command):
            slot += 1 if row.padding else row_beats(row.addr, command.length, bus_bytes)
            writes.append((slot + latency + 1, row.spad_row))
    return writes


def dma_load_cycles(commands: Sequence[DmaCommand], bus_bytes: int, latency: int) -> int:
    """Cycles of ws_dma_load for back-to-back commands, up to and including the last write."""
    slots = sum(dma_load_slots(command, bus_bytes) for command in commands)
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


def dma_load_bytes(command: DmaCommand, bus_bytes: int) -> int:
    """Bytes a load moves over the bus (whole beats, padding rows move none)."""
    return bus_bytes * sum(
        row_beats(row.addr, command.length, bus_bytes)
        for row in dma_rows(command)
        if not row.padding
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

#: Register stages of ws_epilogue: a row accepted in cycle t leaves in cycle t + 2.
EPILOGUE_LATENCY = 2


@dataclass(frozen=True)
class EpilogueConfig:
    """Static settings of ws_epilogue for one store (the quantizer's requantization)."""

    pre: int = 0
    post: int = 0
    zero_point: int = 0
    low: int = -128
    high: int = 127


def epilogue_reference(
    acc: npt.NDArray[np.integer],
    bias: npt.NDArray[np.integer],
    multipliers: npt.NDArray[np.integer],
    config: EpilogueConfig,
    out_width: int = 8,
) -> npt.NDArray[np.int64]:
    """Bit-exact ws_epilogue (without pooling) on rows of int32 accumulators.

    The same arithmetic as `glensidec.lang.interp.requantize` after an i32 bias add:
    ``clip(clip(round((acc + bias) >> pre) * m >> post) + zp, int8), low, high)``.
    """
    biased = acc.astype(np.int64) + bias.astype(np.int64)
    biased = ((biased + 2**31) % 2**32) - 2**31  # the i32 add wraps
    scaled = (biased >> config.pre) * multipliers.astype(np.int64)
    if config.post > 0:
        scaled = (scaled + (np.int64(1) << (config.post - 1))) >> config.post
    type_min, type_max = -(1 << (out_width - 1)), (1 << (out_width - 1)) - 1
    saturated = np.clip(scaled + config.zero_point, type_min, type_max)
    clipped: npt.NDArray[np.int64] = np.clip(saturated, config.low, config.high).astype(np.int64)
    return clipped
