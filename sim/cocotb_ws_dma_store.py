"""cocotb test of ws_dma_store against accel.dma_store_reference and accel.dma_store_cycles.

Python plays the main memory (applies every strobed write beat) and the row source.
Sequences with rows always offered check the exact cycle count; sequences with random
gaps in the row stream check that each beat still moves exactly once.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import cocotb
import numpy as np
from cocotb_ws_dma_load import random_strided
from cycle_bench import next_cycle, pack, params, read, settle, start_clock, unpack

from glensidec.hardware.accel import (
    DmaCommand,
    dma_rows,
    dma_store_cycles,
    dma_store_reference,
    row_beats,
)

MEMORY_BYTES = 4096


def apply_command(dut: Any, command: DmaCommand) -> None:
    for name in ("base", "length", "count1", "stride1", "count2", "stride2"):
        getattr(dut, f"cmd_{name}").value = int(getattr(command, name)) & 0xFFFFFFFF


@cocotb.test()
async def random_sequences(dut: Any) -> None:
    """Sequences of 1-5 strided stores, back to back; memory compared after each."""
    row_bytes, bus = params()["ROW_BYTES"], params()["BUS_BYTES"]
    rng = np.random.default_rng(row_bytes * 10 + bus)
    memory = rng.integers(0, 256, MEMORY_BYTES).astype(np.uint8)
    dut.rst.value, dut.cmd_valid.value, dut.in_valid.value = 1, 0, 0
    await start_clock(dut)
    await next_cycle(dut)
    dut.rst.value = 0
    for sequence in range(16):
        gaps = sequence % 2 == 1
        commands = [random_strided(rng, row_bytes, 0) for _ in range(rng.integers(1, 6))]
        expected = memory
        rows: deque[np.ndarray] = deque()
        for command in commands:
            data = [rng.integers(0, 256, row_bytes).astype(np.uint8) for _ in range(command.rows)]
            expected = dma_store_reference(expected, command, data)
            rows.extend(data)
        beats = sum(row_beats(r.addr, c.length, bus) for c in commands for r in dma_rows(c))
        pending, cycle, written = deque(commands), 0, 0
        while pending or rows:
            if pending:
                apply_command(dut, pending[0])
            dut.cmd_valid.value = int(bool(pending))
            offer = bool(rows) and (not gaps or rng.random() < 0.6)
            dut.in_valid.value = int(offer)
            dut.in_data.value = pack(rows[0] if rows else np.zeros(row_bytes, np.uint8), 8)
            await settle()
            assert cycle < 5000, f"sequence {sequence}: no end"
            if pending and read(dut.cmd_ready):
                pending.popleft()
            if read(dut.mem_wr_valid):
                addr, strobes = read(dut.mem_wr_addr), read(dut.mem_wr_strb)
                assert addr % bus == 0 and addr + bus <= MEMORY_BYTES, f"write at {addr}"
                data = unpack(read(dut.mem_wr_data), bus, 8, signed=False)
                for j in range(bus):
                    if strobes >> j & 1:
                        memory[addr + j] = data[j]
                written += 1
            if offer and read(dut.in_ready):
                rows.popleft()
            await next_cycle(dut)
            cycle += 1
        assert written == beats, f"sequence {sequence}: {written} beats, expected {beats}"
        if not gaps:
            predicted = dma_store_cycles(commands, bus)
            assert cycle == predicted, f"sequence {sequence}: {cycle} cycles, predicted {predicted}"
        assert np.array_equal(memory, expected), f"sequence {sequence}: memory differs"
        dut.cmd_valid.value, dut.in_valid.value = 0, 0
        await settle()
        assert not read(dut.busy)
        await next_cycle(dut)
