"""cocotb side of bench/bench_array.py: runs the GEMMs listed in a JSON job on the RTL.

The job (a JSON file, the `job` setting of glensidec.cosim.settings) lists GEMM shapes; each
runs on tb_ws_gemm with random int8 operands, is checked bit-exactly against
`reference_gemm`, and its simulated cycles and wall-clock times are written to the JSON
file of the `out` setting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cocotb
import numpy as np

from glensidec.cosim.rtl_build import GemmBenchDepths
from glensidec.cosim.rtl_driver import GemmDriver, config_from_env
from glensidec.cosim.settings import testbench_settings
from glensidec.hardware.array import reference_gemm


@cocotb.test()
async def run_job(dut: Any) -> None:
    settings = testbench_settings()
    job = json.loads(Path(settings["job"]).read_text())
    config = config_from_env()
    driver = GemmDriver(dut, config, GemmBenchDepths(**job["depths"]))
    await driver.reset()
    rng = np.random.default_rng(job["seed"])
    records = []
    for M, K, N in job["shapes"]:
        A = rng.integers(-128, 128, (M, K))
        B = rng.integers(-128, 128, (K, N))
        run = await driver.gemm(A, B)
        records.append(
            {
                "shape": [M, K, N],
                "exact": bool(np.array_equal(run.C, reference_gemm(A, B))),
                "cycles": run.cycles,
                "load_s": run.load_seconds,
                "simulate_s": run.simulate_seconds,
                "read_s": run.read_seconds,
            }
        )
    Path(settings["out"]).write_text(json.dumps(records, indent=1))
