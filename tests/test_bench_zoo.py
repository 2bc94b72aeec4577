"""bench/bench_zoo.py's compile stage, which runs without PyTorch: the default compile in a
process of its own, its figures read back, and a compile past the bench's memory bound
stopped with a row that says so (not a hang or a machine out of memory)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def bench_zoo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_zoo", REPO / "bench" / "bench_zoo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_zoo"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_zoo_compile_stage_reports_the_default_compile(tmp_path: Path) -> None:
    """resnet_block on the whole accelerator: every product on it, no host cycles, the peak
    memory the child's own (far below what a torch-laden parent holds)."""
    bench = bench_zoo()
    row: dict[str, Any] = {"model": "resnet_block"}
    bench.compile_default(row, REPO / "examples" / "resnet_block.gs", tmp_path / "out",
                          bench.Limits(1, 8192.0, 600.0))
    assert (tmp_path / "out" / "model.c").is_file()
    assert row["host_products"] == row["host_product_instructions"] == row["host_macs"] == 0
    assert row["host_cycles"] == 0 and row["host_share"] == 0.0
    assert row["cycles"] == row["accel_cycles"] > 0
    assert 0 < row["compile_cpu_s"] <= row["compile_process_cpu_s"]
    assert 50 < row["compile_peak_mib"] < 4096
    assert bench.misses({**row, "import_s": 1.0, "f32_error": 0.0, "int8_l2": 0.0}) == []


def test_the_zoo_compile_stage_stops_a_compile_past_its_memory_bound(tmp_path: Path) -> None:
    bench = bench_zoo()
    row: dict[str, Any] = {"model": "resnet_block"}
    with pytest.raises(RuntimeError, match=r"stopped at [\d,]+ MiB resident") as stopped:
        bench.compile_default(row, REPO / "examples" / "resnet_block.gs", tmp_path / "out",
                              bench.Limits(1, 1.0, 600.0))
    assert row["compile_peak_mib"] > 1.0 and "cycles" not in row
    row["error"] = str(stopped.value)  # as the bench's main loop records it
    assert "compile ≤ 15 s CPU" in bench.misses(row)
