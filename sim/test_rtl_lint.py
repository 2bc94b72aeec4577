"""The RTL is lint-clean under `verilator --lint-only -Wall` and parses under Icarus."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from sim_harness import ARRAY_SHAPES, shape_id

from glensidec.cosim import rtl_build

MODULES = list(rtl_build.RTL_MODULES)


def verilator_lint(top: str, parameters: dict[str, int], *extra: str) -> None:
    rtl_build.prepare_verilator_environment()
    sources = rtl_build.rtl_sources(*([top] if top.startswith("tb_") else []))
    command = ["verilator", "--lint-only", "-Wall", "--top-module", top, *extra]
    command += [f"-G{name}={value}" for name, value in parameters.items()]
    result = subprocess.run(
        command + [str(path) for path in sources], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "%Warning" not in result.stderr, result.stderr


@pytest.mark.parametrize("module", MODULES)
def test_module_lints_clean_with_defaults(module: str) -> None:
    verilator_lint(module, {})


@pytest.mark.parametrize("shape", [*ARRAY_SHAPES, (3, 5), (2, 1)], ids=shape_id)
def test_top_lints_clean_for_every_shape(shape: tuple[int, int]) -> None:
    verilator_lint("ws_top", {"ROWS": shape[0], "COLS": shape[1], "ACC_DEPTH": 48})


@pytest.mark.parametrize("shape", [(2, 2), (4, 3)], ids=shape_id)
def test_binary32_top_lints_clean(shape: tuple[int, int]) -> None:
    verilator_lint("ws_top", {"ROWS": shape[0], "COLS": shape[1], "IN_W": 32, "ACC_W": 32,
                              "FP": 1, "ACC_DEPTH": 48})


def test_fp32_lane_wrapper_lints_clean() -> None:
    for op in (0, 1):
        verilator_lint("tb_fp32_lanes", {"LANES": 3, "OP": op})


MEMORY_SYSTEM_SIZES = [
    ("ws_dma_load", {"ROW_BYTES": 4, "BUS_BYTES": 8, "LATENCY": 1}),
    ("ws_dma_load", {"ROW_BYTES": 16, "BUS_BYTES": 1, "LATENCY": 3}),
    ("ws_dma_load", {"ROW_BYTES": 16, "BUS_BYTES": 64, "LATENCY": 8, "WRITE_ROWS": 4}),
    ("ws_dma_store", {"ROW_BYTES": 4, "BUS_BYTES": 8}),
    ("ws_dma_store", {"ROW_BYTES": 32, "BUS_BYTES": 1}),
    ("ws_spad", {"ROW_BYTES": 4, "BANKS": 1, "BANK_ROWS": 8}),
    ("ws_spad", {"ROW_BYTES": 4, "BANKS": 1, "BANK_ROWS": 8, "WRITE_ROWS": 2}),
    ("ws_spad", {"ROW_BYTES": 4, "BANKS": 2, "BANK_ROWS": 8, "WRITE_ROWS": 1, "W_LOAD": 4}),
    ("ws_spad", {"ROW_BYTES": 4, "BANKS": 2, "BANK_ROWS": 8, "WRITE_ROWS": 4, "W_LOAD": 2}),
    ("ws_top", {"ROWS": 8, "COLS": 4, "ACC_DEPTH": 48, "W_LOAD": 4}),
    ("ws_top", {"ROWS": 4, "COLS": 3, "ACC_DEPTH": 48, "W_LOAD": 4}),
    ("ws_epilogue", {"COLS": 1, "OUT_W": 4}),
    ("ws_epilogue", {"COLS": 6, "LANES": 2, "DEPTH": 8}),
    ("ws_epilogue", {"COLS": 16, "LANES": 4, "DEPTH": 256}),
    ("ws_fifo", {"WIDTH": 3, "DEPTH": 2}),
    ("ws_accel", {"ROWS": 4, "COLS": 8, "ROW_BYTES": 8, "BUS_BYTES": 4, "LATENCY": 3}),
    ("ws_accel", {"ROWS": 8, "COLS": 4, "ROW_BYTES": 8, "BUS_BYTES": 16, "LATENCY": 5}),
    ("ws_accel", {"ROWS": 16, "COLS": 16, "ROW_BYTES": 16, "BUS_BYTES": 16, "LATENCY": 8,
                  "BANK_ROWS": 4096, "ACC_DEPTH": 1024, "EPI_LANES": 4, "EPI_DEPTH": 512}),
    ("ws_accel", {"ROWS": 16, "COLS": 32, "ROW_BYTES": 32, "BUS_BYTES": 64, "LATENCY": 8,
                  "BANK_ROWS": 128, "ACC_DEPTH": 256, "EPI_LANES": 16, "EPI_DEPTH": 128,
                  "WRITE_ROWS": 4}),
    ("ws_accel", {"ROWS": 16, "COLS": 16, "ROW_BYTES": 16, "BUS_BYTES": 64, "LATENCY": 8,
                  "BANK_ROWS": 64, "ACC_DEPTH": 256, "EPI_LANES": 16, "EPI_DEPTH": 128,
                  "WRITE_ROWS": 4, "W_LOAD": 4}),
    ("ws_accel", {"ROWS": 4, "COLS": 8, "ROW_BYTES": 8, "BUS_BYTES": 4, "LATENCY": 3,
                  "W_LOAD": 2}),
]


@pytest.mark.parametrize(("module", "parameters"), MEMORY_SYSTEM_SIZES,
                         ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
def test_memory_system_lints_clean_for_other_sizes(module: str, parameters: dict[str, int]) -> None:
    verilator_lint(module, parameters)


def test_gemm_wrapper_lints_clean() -> None:
    # the same timescale the simulation build passes
    timescale = "/".join(rtl_build.TIMESCALE)
    verilator_lint(
        rtl_build.GEMM_TESTBENCH, {"ROWS": 4, "COLS": 8}, "--timing", "--timescale", timescale
    )


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog not installed")
def test_icarus_compiles_everything(tmp_path: object) -> None:
    sources = rtl_build.rtl_sources(rtl_build.GEMM_TESTBENCH, "tb_fp32_lanes")
    result = subprocess.run(
        ["iverilog", "-g2012", "-o", "/dev/null", "-s", rtl_build.GEMM_TESTBENCH,
         "-s", "tb_fp32_lanes"] + [str(path) for path in sources],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_accel_memory_top_lints_clean() -> None:
    """tb_ws_accel_mem (ws_accel with main memory and the command stream inside the
    simulation: make sim of --accel programs, the raw harness), as it is built."""
    timescale = "/".join(rtl_build.TIMESCALE)
    verilator_lint("tb_ws_accel_mem", {"ROWS": 4, "COLS": 4, "BUS_BYTES": 4, "LATENCY": 2},
                   "--timing", "--timescale", timescale)
