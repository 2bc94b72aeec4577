"""cocotb test of ws_dma_load against accel.dma_load_reference and accel.dma_load_writes.

Python plays the main memory (random bytes, every read answered exactly LATENCY cycles
later, garbage on the bus otherwise) and offers random sequences of strided, im2col,
end-to-end and overlapping (0 < |stride1| <= length) and padded-band (bounds, x_step 0 or 1)
commands back to back (WRITE_ROWS > 1 groups the last three and the im2col ones at
x_step 1). Every
scratchpad write is checked: its cycle, its first row, its row count, every row's bytes.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack

from glensidec.cosim.settings import testbench_settings
from glensidec.hardware.accel import (
    DmaCommand,
    dma_load_cycles,
    dma_load_reference,
    dma_load_writes,
    im2col_command,
)

MEMORY_BYTES = 4096
FIELDS = ("base", "length", "count1", "stride1", "count2", "stride2", "spad_row", "bounds",
          "y0", "y_step", "height", "x0", "x_step", "width", "pad_value")
WIDTH = {"base": 32, "stride1": 32, "stride2": 32, "y0": 16, "x0": 16}


def random_strided(rng: np.random.Generator, row_bytes: int, spad_row: int) -> DmaCommand:
    length = int(rng.integers(1, row_bytes + 1))
    count1, count2 = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    stride1 = int(rng.integers(-40, 80))
    stride2 = int(rng.integers(0, 400))
    base = int(rng.integers(200, 1500))  # keeps every row inside the memory
    return DmaCommand(base=base, length=length, count1=count1, stride1=stride1, count2=count2,
                      stride2=stride2, spad_row=spad_row)


def random_end_to_end(rng: np.random.Generator, row_bytes: int, spad_row: int) -> DmaCommand:
    """Rows that lie end to end, ascending or descending (weights are loaded bottom row
    first): what ws_dma_load issues in groups when a write carries several rows."""
    length = int(rng.choice([row_bytes, int(rng.integers(1, row_bytes + 1))]))
    count1, count2 = int(rng.integers(1, 14)), int(rng.integers(1, 3))
    stride1 = length if rng.random() < 0.5 else -length
    base = int(rng.integers(400, 1500))
    return DmaCommand(base=base, length=length, count1=count1, stride1=stride1, count2=count2,
                      stride2=int(rng.integers(0, 300)), spad_row=spad_row)


def random_overlapping(rng: np.random.Generator, row_bytes: int, spad_row: int
                       ) -> DmaCommand:
    """Rows that overlap (0 < |stride1| < length: an input's packed taps, a byte apart),
    ascending or descending: grouped too when a write carries several rows."""
    length = int(rng.integers(2, row_bytes + 1)) if row_bytes > 1 else 1
    step = int(rng.integers(1, length + 1))
    count1, count2 = int(rng.integers(1, 14)), int(rng.integers(1, 3))
    return DmaCommand(base=int(rng.integers(400, 1500)), length=length, count1=count1,
                      stride1=step if rng.random() < 0.5 else -step, count2=count2,
                      stride2=int(rng.integers(0, 300)), spad_row=spad_row)


def random_band(rng: np.random.Generator, row_bytes: int, spad_row: int) -> DmaCommand:
    """A band of a padded map, a pixel a row (x_step 1, or 0: a column of one pixel) and
    lines outside it: runs of padding and inside rows, grouped apart."""
    width, height = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    length = int(rng.integers(1, row_bytes + 1))
    x_step = int(rng.integers(0, 2))
    x0, y0 = int(rng.integers(-3, 2)), int(rng.integers(-2, 1))
    count1, count2 = int(rng.integers(1, width + 5)), int(rng.integers(1, min(height + 3, 6)))
    stride1 = length * x_step if x_step else int(rng.integers(1, length + 1))
    return DmaCommand(base=int(rng.integers(600, 1200)), length=length, count1=count1,
                      stride1=stride1, count2=count2, stride2=width * length,
                      spad_row=spad_row, bounds=True, y0=y0, y_step=1, height=height,
                      x0=x0, x_step=x_step, width=width,
                      pad_value=int(rng.integers(0, 256)))


def random_im2col(rng: np.random.Generator, row_bytes: int, spad_row: int) -> DmaCommand:
    size, channels = int(rng.integers(3, 7)), int(rng.choice([row_bytes, 2 * row_bytes, 3]))
    kernel, stride = int(rng.choice([1, 3])), int(rng.integers(1, 3))
    padding = int(rng.integers(0, 2)) if kernel == 3 else 0
    tap = (int(rng.integers(0, kernel)), int(rng.integers(0, kernel)))
    channel0 = int(rng.integers(0, max(1, channels - row_bytes + 1)))
    return im2col_command(feature_base=int(rng.integers(0, 2000)), height=size, width=size,
                          channels=channels, kernel=(kernel, kernel), stride=stride,
                          padding=padding, tap=tap, channel0=channel0,
                          length=min(row_bytes, channels - channel0), spad_row=spad_row,
                          zero_point=int(rng.integers(0, 256)))


def check_write(dut: Any, expected_writes: deque[tuple[int, int, int]], cycle: int,
                expected_rows: dict[int, np.ndarray], row_bytes: int, write_rows: int) -> int:
    """The write in this cycle is the next expected one, row for row; returns its rows."""
    first, rows = read(dut.wr_addr), read(dut.wr_rows)
    when, expected_first, expected_count = expected_writes.popleft()
    assert (cycle, first, rows) == (when, expected_first, expected_count), \
        f"write {rows} rows from {first}@{cycle}, expected {expected_count} from " \
        f"{expected_first}@{when}"
    got = unpack(read(dut.wr_data), write_rows * row_bytes, 8, signed=False)
    for j in range(rows):
        row = got[j * row_bytes:(j + 1) * row_bytes]
        assert np.array_equal(row, expected_rows[first + j]), f"row {first + j}: {row}"
    return int(rows)


def write_rows_param() -> int:
    return int(params().get("WRITE_ROWS", 1))


def apply_command(dut: Any, command: DmaCommand) -> None:
    for name in FIELDS:
        value = int(getattr(command, name))
        getattr(dut, f"cmd_{name}").value = value & ((1 << WIDTH.get(name, 32)) - 1)


@cocotb.test()
async def random_sequences(dut: Any) -> None:
    """Sequences of 1-6 commands; each sequence runs from idle to idle."""
    row_bytes, bus, latency = params()["ROW_BYTES"], params()["BUS_BYTES"], params()["LATENCY"]
    write_rows = write_rows_param()
    rng = np.random.default_rng(row_bytes * 100 + bus * 10 + latency + 1000 * write_rows)
    kinds = (random_im2col, random_strided, random_end_to_end, random_overlapping,
             random_band)
    memory = rng.integers(0, 256, MEMORY_BYTES).astype(np.uint8)
    dut.rst.value, dut.cmd_valid.value = 1, 0
    await start_clock(dut)
    await next_cycle(dut)
    dut.rst.value = 0
    rows_checked = grouped_rows = 0
    for sequence in range(12):
        commands = [kinds[int(rng.integers(0, len(kinds)))](rng, row_bytes, 64 * i)
                    for i in range(rng.integers(1, 7))]
        expected_rows: dict[int, np.ndarray] = {}
        for command in commands:
            expected_rows.update(dma_load_reference(memory, command, row_bytes))
        expected_writes = deque(dma_load_writes(commands, bus, latency, write_rows))
        pending = deque(commands)
        responses: deque[tuple[int, np.ndarray]] = deque()
        cycle = 0
        while expected_writes:
            if pending:
                apply_command(dut, pending[0])
            dut.cmd_valid.value = int(bool(pending))
            due = responses[0][1] if responses and responses[0][0] == cycle else None
            if due is not None:
                responses.popleft()
            else:
                due = rng.integers(0, 256, bus)  # garbage between responses
            dut.mem_resp_data.value = pack(due, 8)
            await settle()
            assert cycle < 5000, f"sequence {sequence}: no end"
            if pending and read(dut.cmd_ready):
                pending.popleft()
            if read(dut.mem_req_valid):
                addr = read(dut.mem_req_addr)
                assert addr % bus == 0 and addr + bus <= MEMORY_BYTES, f"request at {addr}"
                responses.append((cycle + latency, memory[addr:addr + bus]))
            if read(dut.wr_en):
                rows = check_write(dut, expected_writes, cycle, expected_rows, row_bytes,
                                   write_rows)
                rows_checked += rows
                grouped_rows += rows * (rows > 1)
            await next_cycle(dut)
            cycle += 1
        assert cycle == dma_load_cycles(commands, bus, latency, write_rows)
        dut.cmd_valid.value = 0
        await settle()
        assert not read(dut.busy), f"sequence {sequence}: busy after its last write"
        await next_cycle(dut)
    assert rows_checked > 200, rows_checked
    assert (grouped_rows > 50) == (write_rows > 1), grouped_rows  # groups were written


@cocotb.test()
async def im2col_layer(dut: Any) -> None:
    """Every im2col fold of one convolution (the `layer` setting), back to back.

    Checks every write like `random_sequences` and writes the simulated cycles to the
    JSON file of the `out` setting (bench/bench_accel.py: bandwidth against the model).
    """
    import json

    row_bytes, bus, latency = params()["ROW_BYTES"], params()["BUS_BYTES"], params()["LATENCY"]
    write_rows = write_rows_param()
    settings = testbench_settings()
    layer = settings["layer"]
    height, width, channels = layer["height"], layer["width"], layer["channels"]
    kernel, stride, padding = layer["kernel"], layer["stride"], layer["padding"]
    rng = np.random.default_rng(0)
    memory = rng.integers(0, 256, height * width * channels + 2 * bus).astype(np.uint8)
    commands, spad_row = [], 0
    for ky in range(kernel):
        for kx in range(kernel):
            for channel0 in range(0, channels, row_bytes):
                command = im2col_command(
                    feature_base=0, height=height, width=width, channels=channels,
                    kernel=(kernel, kernel), stride=stride, padding=padding, tap=(ky, kx),
                    channel0=channel0, length=min(row_bytes, channels - channel0),
                    spad_row=spad_row, zero_point=layer["zero_point"])
                commands.append(command)
                spad_row += command.rows
    expected_rows: dict[int, np.ndarray] = {}
    for command in commands:
        expected_rows.update(dma_load_reference(memory, command, row_bytes))
    expected_writes = deque(dma_load_writes(commands, bus, latency, write_rows))
    dut.rst.value, dut.cmd_valid.value = 1, 0
    await start_clock(dut)
    await next_cycle(dut)
    dut.rst.value = 0
    pending, responses = deque(commands), deque()
    cycle = 0
    while expected_writes:
        if pending:
            apply_command(dut, pending[0])
        dut.cmd_valid.value = int(bool(pending))
        if responses and responses[0][0] == cycle:
            dut.mem_resp_data.value = pack(responses.popleft()[1], 8)
        await settle()
        if pending and read(dut.cmd_ready):
            pending.popleft()
        if read(dut.mem_req_valid):
            addr = read(dut.mem_req_addr)
            responses.append((cycle + latency, memory[addr:addr + bus]))
        if read(dut.wr_en):
            check_write(dut, expected_writes, cycle, expected_rows, row_bytes, write_rows)
        await next_cycle(dut)
        cycle += 1
    assert cycle == dma_load_cycles(commands, bus, latency, write_rows)
    Path(settings["out"]).write_text(json.dumps({"cycles": cycle}))
