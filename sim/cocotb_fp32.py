"""cocotb test of fp32_mul / fp32_add through tb_fp32_lanes, against numpy's float32.

LANES vectors are checked per write/read. The count and seed come from the `vectors` and
`seed` settings (glensidec.cosim.settings): pytest runs a few tens of thousands,
bench/bench_fp32.py over a million.
"""

from __future__ import annotations

import json
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import Timer
from cycle_bench import params
from fp32_vectors import expected, mismatches, operands

from glensidec.cosim.settings import testbench_settings


def _pack(values: np.ndarray) -> int:
    return int.from_bytes(values.astype("<u4").tobytes(), "little")


def _unpack(word: int, lanes: int) -> np.ndarray:
    return np.frombuffer(word.to_bytes(4 * lanes, "little"), dtype="<u4").astype(np.uint32)


@cocotb.test()
async def random_vectors(dut: Any) -> None:
    lanes, op = params()["LANES"], "mul" if params()["OP"] == 0 else "add"
    settings = testbench_settings()  # `vectors`, `seed`, `report`: bench/bench_fp32.py
    count = int(settings.get("vectors", 32768))
    rng = np.random.default_rng(int(settings.get("seed", 1)))
    steps = -(-count // lanes)
    a_all, b_all = operands(rng, steps * lanes)
    want_all = expected(op, a_all, b_all)
    checked = 0
    for step in range(steps):
        window = slice(step * lanes, (step + 1) * lanes)
        dut.a.value = _pack(a_all[window])
        dut.b.value = _pack(b_all[window])
        await Timer(1, unit="ns")
        got = _unpack(int(dut.y.value.to_unsigned()), lanes)
        bad = mismatches(got, want_all[window])
        if bad.any():
            lane = int(np.flatnonzero(bad)[0])
            raise AssertionError(
                f"{op} {a_all[window][lane]:08x} {b_all[window][lane]:08x}: RTL "
                f"{got[lane]:08x}, numpy {want_all[window][lane]:08x}")
        checked += lanes
    report = settings.get("report")
    if report:
        with open(report, "w") as handle:
            json.dump({"op": op, "vectors": checked}, handle)
    assert checked >= count
