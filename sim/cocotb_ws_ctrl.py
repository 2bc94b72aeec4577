"""cocotb test of ws_ctrl, cycle by cycle against models.CtrlModel.

Valids, flags and the enable are random every cycle, so weight beats, commits waiting
for a busy bank, the commit bypass, D joins and stalls all occur; every output is
compared every cycle.
"""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, params, read, settle, start_clock
from models import CtrlInputs, CtrlModel, CtrlOutputs

PORTS = {
    "w_ready": "w_ready",
    "w_commit": "w_commit",
    "w_bank": "w_bank",
    "a_ready": "a_ready",
    "d_ready": "d_ready",
    "a_sel": "a_sel",
    "d_inject": "d_inject",
    "acc_valid": "acc_valid",
    "acc_add": "acc_add",
    "acc_emit": "acc_emit",
    "acc_row": "acc_row",
}


def random_inputs(rng: np.random.Generator, depth: int) -> CtrlInputs:
    def bit(p: float) -> bool:
        return bool(rng.random() < p)

    return CtrlInputs(
        en=bit(0.9),
        w_valid=bit(0.7),
        a_valid=bit(0.7),
        a_last=bit(0.15),
        a_add=bit(0.5),
        a_emit=bit(0.5),
        a_use_d=bit(0.3),
        d_valid=bit(0.6),
        # a tile's first accumulator row (the tag adds it to the row's index, modulo the
        # address width): 0 for half the rows, as bare GEMMs have it
        a_acc_row=int(rng.integers(0, 1 << max(1, (depth - 1).bit_length()))) if bit(0.5) else 0,
    )


def observed(dut: Any) -> dict[str, int]:
    return {name: read(getattr(dut, port)) for name, port in PORTS.items()}


def expected(outputs: CtrlOutputs) -> dict[str, int]:
    return {name: int(getattr(outputs, name)) for name in PORTS}


@cocotb.test()
async def random_cycles(dut: Any) -> None:
    """4000 random cycles with occasional resets."""
    rows, cols, depth = params()["ROWS"], params()["COLS"], params()["ACC_DEPTH"]
    w_load = int(params().get("W_LOAD", 1))  # weight rows a beat
    model = CtrlModel(rows, cols, depth, w_load)
    rng = np.random.default_rng(rows * 100 + cols * 10 + depth + 7 * (w_load - 1))
    dut.rst.value = 1
    await start_clock(dut)
    await next_cycle(dut)
    commits = 0
    for cycle in range(4000):
        inputs = random_inputs(rng, depth)
        rst = rng.random() < 0.003
        for name, value in vars(inputs).items():
            getattr(dut, name).value = int(value)
        dut.rst.value = int(rst)
        await settle()
        want = expected(model.outputs(inputs))
        got = observed(dut)
        assert got == want, f"cycle {cycle}: got {got}, model {want}"
        commits += want["w_commit"]
        await next_cycle(dut)
        if rst:
            model.reset()
        else:
            model.step(inputs)
    assert commits > 50, "the random stimulus should commit many weight tiles"
