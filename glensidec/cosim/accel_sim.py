"""Accelerator layers on ws_accel with main memory and the commands inside the simulation.

A program compiled with --accel is co-simulated in two steps:

1. glensidec.cosim.accel_record runs the C program (its layers on the accelerator's C
   model) and writes every layer into a folder: main memory before it and its command
   words as hex files, the C model's result and numpy's (`write_layer`, `layers.json`);
2. rtl/tb/tb_ws_accel_mem.v, a simulation-only top around ws_accel with a behavioural
   main memory (the latency and bus width the cycle model assumes) and a command
   streamer, loads each layer once, runs it, and dumps its output region and cycles.
   Nothing crosses into Python per cycle: the cocotb test
   (glensidec.cosim.cocotb_program.run_accel_layers) only waits for each layer to finish
   and then checks every byte and the cycle count (`check_layers`).

The layers are independent once recorded, so several simulator processes can run them
(`run_jobs`: local threads, each starting a simulator, or a Dask cluster). The same top
built with `verilator --binary` (`build_raw_harness`, no cocotb) is the raw speed the
co-simulation is measured against (bench/bench_cosim_speed.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.cosim.rtl_build import (
    FAST_BUILD_ARGS,
    TIMESCALE,
    build_makeflags,
    make_runner,
    prepare_verilator_environment,
    rtl_sources,
)
from glensidec.cosim.settings import settings_env
from glensidec.errors import GlensideError
from glensidec.hardware.commands import AccelConfig

MEM_TOP = "tb_ws_accel_mem"  # rtl/tb/tb_ws_accel_mem.v
LAYERS_FILE = "layers.json"  # the recorded layers, in program order
LIST_FILE = "layers.txt"  # the layers one simulator run takes (tb_ws_accel_mem's format)
RESULTS_FILE = "results.txt"  # tb_ws_accel_mem's: per layer, its cycles and any error
JOB_REPORT = "job_report.json"  # the cocotb test's checked results of one run
TEST_MODULE = "glensidec.cosim.cocotb_program"
TESTCASE = "run_accel_layers"
ERROR_KINDS = {1: "a misaligned or out-of-range read", 2: "a misaligned or out-of-range write",
               3: "a write outside the layer's output", 4: "the cycle limit"}


@dataclass(frozen=True)
class LayerFiles:
    """One recorded layer: what tb_ws_accel_mem needs and what its result must be."""

    index: int
    name: str
    m: int
    k: int
    n: int
    predicted_cycles: int
    commands: int
    memory_words: int
    output_base: int  # bytes
    bus_bytes: int
    pitch: int = 0  # bytes between the output's rows (0: n, compact)

    @property
    def output_end(self) -> int:
        """The byte after the output's last row."""
        return self.output_base + (self.m - 1) * (self.pitch or self.n) + self.n

    @property
    def output_words(self) -> tuple[int, int]:
        """The first and last memory word the output touches."""
        return self.output_base // self.bus_bytes, (self.output_end - 1) // self.bus_bytes

    def list_line(self) -> str:
        """This layer's line of tb_ws_accel_mem's +glensidec_list file."""
        first, last = self.output_words
        return (f"{self.index} {self.commands} {self.memory_words} {first} {last} "
                f"{self.output_base} {self.output_end}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def hex_words(memory: np.ndarray[Any, Any], bus_bytes: int) -> bytes:
    """Memory bytes as $readmemh lines, one little-endian bus word each."""
    words = memory.reshape(-1, bus_bytes)[:, ::-1]
    lines = np.empty((words.shape[0], 2 * bus_bytes + 1), dtype=np.uint8)
    lines[:, 0:-1:2] = _HEX[words >> 4]
    lines[:, 1:-1:2] = _HEX[words & 0xF]
    lines[:, -1] = ord("\n")
    return lines.tobytes()


def read_hex_words(path: Path, bus_bytes: int) -> np.ndarray[Any, Any]:
    """$writememh's lines (comments skipped) back to memory bytes."""
    digits = "".join(line.strip() for line in path.read_text().splitlines()
                     if line.strip() and not line.startswith(("//", "@")))
    words = np.frombuffer(bytes.fromhex(digits), dtype=np.uint8).reshape(-1, bus_bytes)
    return np.ascontiguousarray(words[:, ::-1]).reshape(-1)


def output_rows(m: int, n: int, pitch: int) -> np.ndarray[Any, Any]:
    """The (M, N) byte offsets of a layer's result rows `pitch` bytes apart."""
    return np.arange(m)[:, None] * pitch + np.arange(n)[None, :]


def write_layer(directory: Path, index: int, name: str, mkn: tuple[int, int, int],
                predicted_cycles: int, words: Sequence[int], memory: np.ndarray[Any, Any],
                output: range, c_model: np.ndarray[Any, Any], expected: np.ndarray[Any, Any],
                bus_bytes: int, capacity: int, pitch: int = 0) -> LayerFiles:
    """Write layer `index`'s memory image, command words (at most `capacity` bits each)
    and expected results."""
    too_wide = [word for word in words if word.bit_length() > capacity]
    if too_wide:
        raise ValueError(f"a command word of {too_wide[0].bit_length()} bits: "
                         f"tb_ws_accel_mem keeps {capacity} (accel_sim.command_capacity)")
    padded = np.zeros(-(-memory.size // bus_bytes) * bus_bytes, dtype=np.uint8)
    padded[:memory.size] = memory
    (directory / f"layer_{index}.mem.hex").write_bytes(hex_words(padded, bus_bytes))
    # the words as they are: tb_ws_accel_mem does not know the command set
    (directory / f"layer_{index}.cmd.hex").write_text(
        "".join(f"{word:x}\n" for word in words))
    np.save(directory / f"layer_{index}.c_model.npy", c_model.astype(np.int8))
    np.save(directory / f"layer_{index}.expected.npy", expected.astype(np.int8))
    m, k, n = mkn
    return LayerFiles(index, name, m, k, n, predicted_cycles, len(words),
                      padded.size // bus_bytes, output.start, bus_bytes,
                      0 if pitch == n else pitch)


def read_layers(directory: Path) -> tuple[int, list[LayerFiles]]:
    """The program's status and its recorded layers."""
    raw = json.loads((directory / LAYERS_FILE).read_text())
    return int(raw["status"]), [LayerFiles(**layer) for layer in raw["layers"]]


def _power_of_two(count: int, least: int) -> int:
    return max(least, 1 << max(count - 1, 0).bit_length())


def command_capacity(cols: int) -> int:
    """The bits tb_ws_accel_mem keeps of a command word (its CMD_MAX): room for the
    per-column vectors of a CONFIG (bias and multiplier, 64 bits a column) and 512 bits
    of fields, more than ws_accel's words need, so a new field needs no change here."""
    return 512 + 64 * cols


def sim_parameters(accel: AccelConfig, layers: Sequence[LayerFiles]) -> dict[str, int]:
    """tb_ws_accel_mem's parameters: ws_accel's, and memories big enough for every layer:
    powers of two, at least a ResNet-18's (4 MiB at 16 B/cycle, 65,536 commands), so most
    programs for one accelerator share one build (a 16×16 build takes a minute)."""
    return {**accel.rtl_parameters(), "CMD_MAX": command_capacity(accel.cols),
            "MEM_WORDS": _power_of_two(max((layer.memory_words for layer in layers),
                                           default=1), 1 << 18),
            "CMD_DEPTH": _power_of_two(max((layer.commands for layer in layers), default=1),
                                       1 << 16)}


def plusargs(layer_dir: Path, job_dir: Path) -> list[str]:
    return [f"+glensidec_dir={layer_dir}", f"+glensidec_list={job_dir / LIST_FILE}",
            f"+glensidec_out={job_dir}"]


def write_list(job_dir: Path, layers: Sequence[LayerFiles]) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / LIST_FILE).write_text("".join(layer.list_line() + "\n" for layer in layers))


def _first_difference(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> str:
    row, col = (int(v) for v in np.argwhere(got != want)[0])
    return f"[{row}, {col}]: RTL {int(got[row, col])}, expected {int(want[row, col])}"


def check_layers(layer_dir: Path, job_dir: Path, layers: Sequence[LayerFiles],
                 seconds: Sequence[float],
                 unfinished: str = "the simulation did not finish this layer",
                 ) -> list[dict[str, Any]]:
    """Every layer of a finished run against the C model, numpy and the cycle model: the
    report's entries (a layer the run did not reach counts as failed)."""
    results: dict[int, list[int]] = {}
    results_path = job_dir / RESULTS_FILE
    if results_path.is_file():
        for line in results_path.read_text().splitlines():
            index, cycles, errors, address, kind = (int(field) for field in line.split())
            results[index] = [cycles, errors, address, kind]
    entries = []
    for layer, spent in zip(layers, [*seconds, *[0.0] * len(layers)], strict=False):
        entry: dict[str, Any] = {"call": layer.index, "accel": layer.name, "m": layer.m,
                                 "k": layer.k, "n": layer.n,
                                 "predicted_cycles": layer.predicted_cycles,
                                 "simulated_cycles": 0, "data_ok": False, "cycles_ok": False,
                                 "rtl_seconds": spent}
        entries.append(entry)
        if layer.index not in results:
            entry["error"] = unfinished
            continue
        cycles, errors, address, kind = results[layer.index]
        entry["simulated_cycles"] = cycles
        entry["cycles_ok"] = cycles == layer.predicted_cycles
        if errors:
            entry["error"] = f"{errors} bad memory accesses, the first {ERROR_KINDS[kind]} " \
                             f"at {address}"
            continue
        first, _ = layer.output_words
        words = read_hex_words(job_dir / f"layer_{layer.index}.out.hex", layer.bus_bytes)
        offset = layer.output_base - first * layer.bus_bytes
        got = words[offset + output_rows(layer.m, layer.n, layer.pitch or layer.n)].view(np.int8)
        for what in ("c_model", "expected"):
            want = np.load(layer_dir / f"layer_{layer.index}.{what}.npy")
            if not np.array_equal(got, want):
                entry["first_difference"] = \
                    f"{'C model' if what == 'c_model' else 'numpy'} {_first_difference(got, want)}"
                break
        else:
            entry["data_ok"] = True
    return entries


@dataclass(frozen=True)
class SimJob:
    """One simulator run: these layers, in this order, on a built tb_ws_accel_mem."""

    build_dir: str
    layer_dir: str
    job_dir: str
    layers: tuple[LayerFiles, ...]
    log_file: str


def run_job(job: SimJob) -> list[dict[str, Any]]:
    """Run one job under cocotb (in this process's thread or on a Dask worker); its layers'
    checked report entries. A fresh runner object per job: runners keep per-run state."""
    job_dir = Path(job.job_dir)
    write_list(job_dir, job.layers)
    (job_dir / JOB_REPORT).unlink(missing_ok=True)
    (job_dir / RESULTS_FILE).unlink(missing_ok=True)
    runner = make_runner("verilator")
    failure = "the simulation did not finish this layer"
    try:
        runner.test(test_module=TEST_MODULE, hdl_toplevel=MEM_TOP, hdl_toplevel_lang="verilog",
                    testcase=TESTCASE,
                    build_dir=job.build_dir, test_dir=str(job_dir),
                    plusargs=plusargs(Path(job.layer_dir), job_dir),
                    extra_env=settings_env(layer_dir=job.layer_dir, job_dir=str(job_dir),
                                           layers=[layer.to_json() for layer in job.layers]),
                    timescale=TIMESCALE, log_file=job.log_file,
                    results_xml=str((job_dir / f"results_{MEM_TOP}.xml").resolve()))
    except (Exception, SystemExit) as error:  # the test failed, or the simulator died
        failure = f"the simulator stopped ({error}; log: {job.log_file})"
    report = job_dir / JOB_REPORT
    if report.is_file():
        entries: list[dict[str, Any]] = json.loads(report.read_text())
        return entries
    return check_layers(Path(job.layer_dir), job_dir, job.layers, [], failure)


def partition(layers: Sequence[LayerFiles], jobs: int) -> list[list[LayerFiles]]:
    """`jobs` groups of about equal predicted cycles (longest first onto the least loaded),
    each in program order."""
    groups: list[list[LayerFiles]] = [[] for _ in range(max(1, min(jobs, len(layers))))]
    loads = [0] * len(groups)
    for layer in sorted(layers, key=lambda layer: -layer.predicted_cycles):
        lightest = loads.index(min(loads))
        groups[lightest].append(layer)
        loads[lightest] += layer.predicted_cycles
    return [sorted(group, key=lambda layer: layer.index) for group in groups if group]


def run_jobs(jobs: Sequence[SimJob], client: Any = None,
             workers: int | None = None) -> list[dict[str, Any]]:
    """Run the jobs concurrently: on a Dask cluster through `client`, else in `workers`
    local threads (each waits on its own simulator process). Entries in layer order."""
    if client is not None:
        futures = [client.submit(run_job, job, pure=False) for job in jobs]
        done: list[list[dict[str, Any]]] = client.gather(futures)
    else:
        with ThreadPoolExecutor(max_workers=workers or len(jobs) or 1) as pool:
            done = list(pool.map(run_job, jobs))
    return sorted((entry for entries in done for entry in entries),
                  key=lambda entry: int(entry["call"]))


def dask_client(scheduler: str) -> Any:
    """A client of the existing Dask cluster at `scheduler` (its workers must see this
    machine's files: the layers and the simulator build are read where they are)."""
    try:
        from dask.distributed import Client
    except ImportError:
        raise GlensideError("SCHEDULER needs Dask: pip install 'glensidec[nas]'") from None
    try:
        return Client(scheduler, timeout=10)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as error:
        raise GlensideError(f"SCHEDULER={scheduler}: cannot connect: {error}") from None


# ---- the raw harness: the same top, no cocotb -------------------------------------------------

def build_raw_harness(parameters: dict[str, int], build_dir: Path,
                      log_file: Path | None = None) -> Path:
    """tb_ws_accel_mem as a plain Verilator binary (`--binary`), built with the same flags
    as the cocotb build; returns the executable."""
    prepare_verilator_environment()
    build_dir.mkdir(parents=True, exist_ok=True)
    command = ["verilator", "--binary", "--timing", *FAST_BUILD_ARGS,
               "--timescale", "/".join(TIMESCALE), "--top-module", MEM_TOP,
               "-Mdir", str(build_dir), "-o", MEM_TOP,
               *(f"-G{name}={value}" for name, value in parameters.items()),
               *(str(path) for path in rtl_sources(MEM_TOP))]
    with build_makeflags():
        done = subprocess.run(command, capture_output=True, text=True)
    if log_file is not None:
        log_file.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"building the raw harness failed:\n{done.stderr[-3000:]}")
    return build_dir / MEM_TOP


def run_raw_harness(binary: Path, layer_dir: Path, job_dir: Path,
                    layers: Sequence[LayerFiles]) -> tuple[float, list[dict[str, Any]]]:
    """Run `layers` on the raw harness; its wall seconds and the checked entries."""
    write_list(job_dir, layers)
    started = time.perf_counter()
    ran = subprocess.run([str(binary), *plusargs(layer_dir, job_dir), "+glensidec_finish"],
                         capture_output=True, text=True)
    wall = time.perf_counter() - started
    if ran.returncode != 0:
        raise RuntimeError(f"the raw harness failed:\n{ran.stdout[-2000:]}{ran.stderr[-2000:]}")
    return wall, check_layers(layer_dir, job_dir, layers, [])


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
