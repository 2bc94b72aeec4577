"""cocotb driver of the whole accelerator (rtl/ws_accel.v): Python plays main memory.

`run_commands` offers command words back to back from cycle 0 (one per cycle while the
accelerator takes them), answers every read exactly LATENCY cycles after it was asked and
applies the posted, byte-strobed writes, one clock at a time: inputs are written after each
falling edge, outputs read 1 ns later. It returns the cycle of the last memory write + 1,
the count `glensidec.hardware.commands.accel_cycles` predicts. Used by the ws_accel
testbench (sim/cocotb_ws_accel.py) and by the co-simulation of programs compiled with
--accel (glensidec.cosim.cocotb_program).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, Timer

#: A simulation that has run this many cycles without finishing has hung.
CYCLE_LIMIT = 50_000_000


def _read(signal: Any) -> int:
    value = signal.value
    return int(value.to_unsigned()) if hasattr(value, "to_unsigned") else int(value)


def _pack(data: npt.NDArray[np.uint8]) -> int:
    return int.from_bytes(data.tobytes(), "little")


async def start_clock(dut: Any) -> None:
    """A 10 ns clock, started once the simulation is past time 0 with the inputs driven;
    returns at its first falling edge."""
    dut.clk.value, dut.rst.value, dut.cmd_valid.value = 0, 1, 0
    await Timer(10, unit="ns")
    Clock(dut.clk, 10, unit="ns").start(start_high=False)
    await FallingEdge(dut.clk)


async def run_commands(dut: Any, words: Sequence[int], memory: npt.NDArray[np.uint8],
                       writable: range, bus_bytes: int, latency: int) -> int:
    """Reset the accelerator, run `words` against `memory` (changed in place), return the
    simulated cycles. Writes outside `writable` (byte addresses) fail the test."""
    pending = deque(words)
    responses: deque[tuple[int, int]] = deque()
    dut.rst.value, dut.cmd_valid.value = 1, 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    cycle, last_write = 0, -1
    while True:
        if pending:
            dut.cmd_data.value = pending[0]
        dut.cmd_valid.value = int(bool(pending))
        due = 0
        if responses and responses[0][0] == cycle:
            due = responses.popleft()[1]
        dut.mem_rd_data.value = due
        await Timer(1, unit="ns")  # combinational outputs follow the inputs
        if pending and _read(dut.cmd_ready):
            pending.popleft()
        if _read(dut.mem_rd_valid):
            address = _read(dut.mem_rd_addr)
            assert address % bus_bytes == 0 and address + bus_bytes <= memory.size, \
                f"a read at {address}"
            responses.append((cycle + latency, _pack(memory[address:address + bus_bytes])))
        if _read(dut.mem_wr_valid):
            address, data = _read(dut.mem_wr_addr), _read(dut.mem_wr_data)
            strobe = _read(dut.mem_wr_strb)
            assert address % bus_bytes == 0 and address + bus_bytes <= memory.size, \
                f"a write at {address}"
            for byte in range(bus_bytes):
                if strobe >> byte & 1:
                    assert address + byte in writable, f"a write outside the output at " \
                                                       f"{address + byte}"
                    memory[address + byte] = data >> (8 * byte) & 0xFF
            last_write = cycle
        if not pending and _read(dut.idle):
            return last_write + 1
        assert cycle < CYCLE_LIMIT, "the accelerator did not finish"
        await FallingEdge(dut.clk)
        cycle += 1
