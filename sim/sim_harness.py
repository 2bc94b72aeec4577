"""Shared set-up of the cocotb testbenches: simulator choice, build folders, runs.

Every RTL configuration is built once per pytest session (module-scoped fixtures in
the test files; a lock in rtl_build.build when parallel workers meet on one build) and then
runs several cocotb tests, each in its own simulator process and folder.
Environment: SIM=icarus picks Icarus instead of Verilator; WAVES=1 records waveforms
(dump.vcd / dump.fst in each test's folder, sim_build/<build>/runs/<test>/).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from glensidec.cosim import rtl_build
from glensidec.cosim.rtl_driver import config_to_env
from glensidec.hardware.array import ArrayConfig

SIM_DIR = Path(__file__).resolve().parent
SIMULATOR = os.environ.get("SIM", "verilator")
WAVES = os.environ.get("WAVES", "0") == "1"

#: The array shapes every array-level testbench runs on.
ARRAY_SHAPES = [(2, 2), (4, 4), (8, 8), (16, 16), (4, 8), (8, 4)]


def shape_id(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


def build_dir(name: str) -> Path:
    """A build folder per design, simulator and wave setting (waves change the build)."""
    return SIM_DIR / "sim_build" / f"{name}_{SIMULATOR}{'_waves' if WAVES else ''}"


def build_module(
    toplevel: str, name: str, parameters: dict[str, int], *, testbench: str | None = None
) -> Any:
    """Build one RTL module (or testbench wrapper) for cocotb.

    A bare module is driven through its ports (made visible to VPI with public_ports);
    the wrapper marks its own few public signals.
    """
    sources = rtl_build.rtl_sources(*([testbench] if testbench else []))
    return rtl_build.build(
        toplevel,
        sources,
        build_dir(name),
        parameters,
        simulator=SIMULATOR,
        waves=WAVES,
        timing=testbench is not None,
        public_ports=testbench is None,
    )


def run_cocotb(runner: Any, toplevel: str, module: str, testcase: str, env: dict[str, str]) -> None:
    """Run one cocotb test and fail the pytest test unless it ran and passed."""
    # Each test runs in its own folder inside the build (result files, the driver's hex
    # files and waveforms stay there), so tests of one build may run in parallel workers.
    # Test modules import from sim/ through PYTHONPATH.
    run_dir = Path(runner.build_dir) / "runs" / f"{module}.{testcase}"
    tests, failures = rtl_build.run(
        runner, toplevel, module, run_dir, testcase=testcase, extra_env=env, waves=WAVES
    )
    assert tests == 1, f"{module}.{testcase}: expected one cocotb test to run, ran {tests}"
    assert failures == 0, f"{module}.{testcase} failed (see the log above)"


def array_env(config: ArrayConfig) -> dict[str, str]:
    return config_to_env(config)
