"""Helpers for the cycle-by-cycle module testbenches (PE, array, skew, controller, accumulator).

These small modules are driven from Python one clock at a time against a model from
models.py: random inputs are applied after each falling edge, combinational outputs are
compared 1 ns later, registered outputs before the next inputs. (The GEMM-level tests do
not work this way: they move whole tiles per transaction.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, Timer

from glensidec.cosim.rtl_driver import pack_rows, unpack_rows
from glensidec.cosim.settings import settings_env, testbench_settings


def params_env(parameters: dict[str, int], **more: Any) -> dict[str, str]:
    """The settings of a testbench run (glensidec.cosim.settings): the RTL `parameters` the
    design was built with, and any `more` the testbench reads."""
    return settings_env(parameters=parameters, **more)


def params() -> dict[str, int]:
    """Inside a testbench: the RTL parameters it was started with."""
    parameters: dict[str, int] = testbench_settings()["parameters"]
    return parameters


def pack(values: Sequence[int] | np.ndarray, width: int) -> int:
    """Lanes into one bus value, lane 0 in the low bits (the co-simulation driver's packing)."""
    return pack_rows(np.asarray(values, dtype=np.int64).reshape(1, -1), width)[0]


def unpack(word: int, lanes: int, width: int, signed: bool = True) -> np.ndarray:
    """One bus value into its lanes, signed (two's complement) or not."""
    values = unpack_rows([word], lanes, width)[0]
    return values if signed else values & ((1 << width) - 1)


def read(signal: Any) -> int:
    """Unsigned value of a signal (1-bit signals read as Logic, wider as LogicArray)."""
    value = signal.value
    return int(value.to_unsigned()) if hasattr(value, "to_unsigned") else int(value)


async def start_clock(dut: Any) -> None:
    Clock(dut.clk, 10, unit="ns").start()
    await FallingEdge(dut.clk)


async def next_cycle(dut: Any) -> None:
    """From one falling edge (after comparing) to the next one."""
    await FallingEdge(dut.clk)


async def settle() -> None:
    """Let combinational outputs follow inputs written at the falling edge."""
    await Timer(1, unit="ns")
