"""cocotb side of `bench/bench_nas_chain.py --rtl`: runs recorded command streams on ws_accel.

The job (the `job` setting of glensidec.cosim.settings, a JSON file) lists streams, each an
.npz of its command words, main memory before it and main memory after it as
`run_functional` computes it. Each runs from reset against that memory (any byte may be
written); its simulated cycles and the count of memory bytes that differ from the
expected memory go to the JSON file of the `out` setting.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cocotb
import numpy as np

from glensidec.cosim.accel_driver import run_commands, start_clock
from glensidec.cosim.settings import testbench_settings


@cocotb.test()
async def run_streams(dut: Any) -> None:
    settings = testbench_settings()
    job = json.loads(Path(settings["job"]).read_text())
    await start_clock(dut)
    results = {}
    for name, path in job["streams"].items():
        data = np.load(path)
        memory = data["memory"].copy()
        cycles = await run_commands(dut, [int(word) for word in data["words"]], memory,
                                    range(memory.size), job["bus_bytes"], job["latency"])
        results[name] = {"cycles": cycles,
                         "bytes_differ": int(np.count_nonzero(memory != data["expected"]))}
        dut._log.info(f"{name}: {results[name]}")
    Path(settings["out"]).write_text(json.dumps(results))
