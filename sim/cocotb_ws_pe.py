"""cocotb test of ws_pe, cycle by cycle against models.PeArrayModel (1x1)."""

from __future__ import annotations

from typing import Any

import cocotb
import numpy as np
from cycle_bench import next_cycle, pack, params, read, start_clock, unpack
from models import PeArrayModel


def random_inputs(rng: np.random.Generator, in_w: int, acc_w: int) -> dict[str, int]:
    """One cycle of stimulus; extremes are drawn often, not only uniformly."""
    lo, hi = -(1 << (in_w - 1)), (1 << (in_w - 1)) - 1
    pick = [lo, hi, -1, 0, int(rng.integers(lo, hi + 1))]
    psum_lo, psum_hi = -(1 << (acc_w - 1)), (1 << (acc_w - 1)) - 1
    return {
        "en": int(rng.random() < 0.9),
        "rst": int(rng.random() < 0.02),
        "a_in": int(rng.choice(pick)),
        "sel_in": int(rng.integers(0, 2)),
        "w_in": int(rng.choice(pick)),
        "w_shift": int(rng.integers(0, 2)),
        "w_commit": int(rng.random() < 0.3),
        "w_bank": int(rng.integers(0, 2)),
        "psum_in": int(rng.choice([psum_lo, psum_hi, 0, int(rng.integers(psum_lo, psum_hi))])),
    }


def check_outputs(dut: Any, model: PeArrayModel, in_w: int, acc_w: int, cycle: int) -> None:
    got = {
        "a_out": unpack(read(dut.a_out), 1, in_w)[0],
        "sel_out": read(dut.sel_out),
        "psum_out": unpack(read(dut.psum_out), 1, acc_w)[0],
        "w_chain": unpack(read(dut.w_chain), 1, in_w)[0],
    }
    want = {
        "a_out": model.a[0, 0],
        "sel_out": model.sel[0, 0],
        "psum_out": model.psum[0, 0],
        "w_chain": model.chain[0, 0],
    }
    assert got == want, f"cycle {cycle}: got {got}, model {want}"


@cocotb.test()
async def random_cycles(dut: Any) -> None:
    """5000 random cycles including resets, disabled cycles, commits and bypasses."""
    in_w, acc_w = params()["IN_W"], params()["ACC_W"]
    model = PeArrayModel(1, 1, in_w, acc_w)
    rng = np.random.default_rng(in_w * 1000 + acc_w)
    dut.rst.value = 1
    await start_clock(dut)
    await next_cycle(dut)
    model.reset()
    for cycle in range(5000):
        check_outputs(dut, model, in_w, acc_w, cycle)
        stimulus = random_inputs(rng, in_w, acc_w)
        for name, value in stimulus.items():
            width = in_w if name in ("a_in", "w_in") else acc_w if name == "psum_in" else 1
            getattr(dut, name).value = pack([value], width)
        await next_cycle(dut)
        if stimulus["rst"]:
            model.reset()
            continue
        vector = {key: np.array([value]) for key, value in stimulus.items()}
        model.step(
            bool(stimulus["en"]),
            vector["a_in"],
            vector["sel_in"],
            vector["w_in"],
            vector["w_shift"],
            vector["w_commit"],
            vector["w_bank"],
            vector["psum_in"],
        )
