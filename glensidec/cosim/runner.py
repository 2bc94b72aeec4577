"""After the pipeline, simulate: run a compiled program, its array calls on the RTL.

`make -C OUTDIR sim INPUTS="x=x.npy" OUTPUT=out.npy` runs `python -m glensidec.cosim`. The
compiled C program (main.c, model.c, array_runtime.c, built as `libmodel_cosim.so`) runs
unchanged inside the simulator process: glensidec.cosim.cocotb_program loads it with ctypes,
replaces its array backend (`gs_array_set_backend`, the one seam every array call goes
through) with a callback, and calls its `main`. Each callback runs the GEMM on the
Verilog array through glensidec.cosim.rtl_driver (cocotb `bridge`/`resume` let the blocking C
call await the simulator), hands the RTL's result back to the C program, and records the
simulated cycles beside the cycle model's prediction. Any difference in data (against the
bit-exact reference) or in cycles fails the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glensidec import progress
from glensidec.backend.report import DATA as REPORT_DATA
from glensidec.backend.report import HTML as REPORT_HTML
from glensidec.backend.report import (
    ReportData,
    Simulation,
    counted,
    render_html,
    simulated_work,
)
from glensidec.cosim.accel_sim import (
    LAYERS_FILE,
    MEM_TOP,
    SimJob,
    cpu_count,
    dask_client,
    partition,
    read_layers,
    run_jobs,
    sim_parameters,
)
from glensidec.cosim.rtl_build import (
    GEMM_TESTBENCH,
    GemmBenchDepths,
    build,
    build_gemm_testbench,
    rtl_sources,
    run,
)
from glensidec.cosim.settings import settings_env
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig, gemm_tiles
from glensidec.hardware.commands import AccelConfig, accel_config_for
from glensidec.outputs import update_own_file

LIBRARY = "libmodel_cosim.so"
MANIFEST = "cosim.json"
REPORT = "cosim_report.json"
BUILD_LOG = "cosim_build.log"
RUN_LOG = "cosim_run.log"
TEST_MODULE = "glensidec.cosim.cocotb_program"


@dataclass(frozen=True)
class Manifest:
    config: ArrayConfig  # the main array
    array_calls: list[tuple[int, int, int]]
    float_products: int
    source: str
    configs: tuple[ArrayConfig, ...] = ()  # every array of the program, the main one first
    call_arrays: tuple[int, ...] = ()  # per call, its array's index in `configs`
    accelerator: dict[str, int] | None = None  # compile --accel: accel_config_for's sizes
    accel_layers: int = 0

    @staticmethod
    def read(outdir: Path) -> Manifest:
        path = outdir / MANIFEST
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise GlensideError(f"{path} not found: is {outdir} a `glensidec compile` "
                                "output directory?") from None
        config = ArrayConfig(**raw["array"])
        configs = tuple(ArrayConfig(**array) for array in raw.get("arrays", [raw["array"]]))
        calls = [(int(call[0]), int(call[1]), int(call[2])) for call in raw["array_calls"]]
        call_arrays = tuple(int(call[3]) if len(call) > 3 else 0 for call in raw["array_calls"])
        return Manifest(config, calls, int(raw["float_products"]), str(raw["source"]),
                        configs, call_arrays, raw.get("accelerator"),
                        len(raw.get("accel_layers", [])))

    def accel_config(self) -> AccelConfig | None:
        """The accelerator a `compile --accel` targeted, or None."""
        if self.accelerator is None:
            return None
        sizes = self.accelerator
        return accel_config_for(ArrayConfig(sizes["rows"], sizes["cols"],
                                            acc_depth=sizes["acc_depth"]),
                                sizes["scratchpad_bytes"], sizes["bus_bytes"],
                                sizes["latency"], sizes["acc_depth"],
                                sizes.get("epilogue_lanes", 0), sizes.get("write_rows", 1),
                                sizes.get("weight_load_rows", 1))

    def calls_on(self, array: int) -> list[tuple[int, int, int]]:
        """The calls that run on array `array` (an index into `configs`)."""
        return [call for call, on in zip(self.array_calls, self.call_arrays, strict=True)
                if on == array]


def _power_of_two(count: int) -> int:
    return 1 << max(4, math.ceil(math.log2(max(count, 1))))


def testbench_depths(manifest: Manifest, array: int = 0) -> GemmBenchDepths:
    """Memories big enough for the largest call on array `array`: the default depths unless
    a call needs more (then powers of two), so most programs share one build per array."""
    defaults = GemmBenchDepths()
    needs = {name: getattr(defaults, name) for name in
             ("weight_beats", "activation_rows", "tiles", "d_rows", "result_rows")}
    config = manifest.configs[array]
    rows = config.rows
    for m, k, n in manifest.calls_on(array):
        tiles = gemm_tiles(config, m, k, n)
        distinct_a_blocks = {(tile.m0, tile.k0): tile.m_len for tile in tiles}
        needs["weight_beats"] = max(needs["weight_beats"], len(tiles) * rows)
        needs["activation_rows"] = max(needs["activation_rows"],
                                       sum(distinct_a_blocks.values()))
        needs["tiles"] = max(needs["tiles"], len(tiles))
        needs["result_rows"] = max(needs["result_rows"],
                                   sum(tile.m_len for tile in tiles if tile.emit))
    return GemmBenchDepths(**{name: _power_of_two(count) for name, count in needs.items()})


def build_directory(outdir: Path, config: ArrayConfig, depths: GemmBenchDepths,
                    simulator: str, waves: bool, several: bool = False) -> Path:
    """Where the simulator is built. With GLENSIDEC_SIM_CACHE set, builds are shared by
    every program with the same array, depths, simulator and RTL sources (a Verilator
    build takes tens of seconds); otherwise OUTDIR/sim_build, or for a program on
    `several` arrays OUTDIR/sim_build/RxC, one per array."""
    cache = os.environ.get("GLENSIDEC_SIM_CACHE")
    if not cache:
        return outdir / "sim_build" / (f"{config.rows}x{config.cols}" if several else "")
    key = hashlib.sha256()
    key.update(repr((config, depths, simulator, waves)).encode())
    for source in rtl_sources(GEMM_TESTBENCH):
        key.update(source.read_bytes())
    return Path(cache) / f"{GEMM_TESTBENCH}_{config.rows}x{config.cols}_{key.hexdigest()[:16]}"


@dataclass
class CosimResult:
    calls: list[dict[str, int | bool | float]]
    status: int
    wall_seconds: float  # the whole simulator run, start-up included

    @property
    def rtl_seconds(self) -> float:
        """Wall time spent inside the array calls (driver and simulator)."""
        return sum(float(call["rtl_seconds"]) for call in self.calls)

    @property
    def simulated_cycles(self) -> int:
        return sum(int(call["simulated_cycles"]) for call in self.calls)

    @property
    def predicted_cycles(self) -> int:
        return sum(int(call["predicted_cycles"]) for call in self.calls)

    @property
    def ok(self) -> bool:
        return self.status == 0 and all(call["data_ok"] and call["cycles_ok"]
                                        for call in self.calls)


def host_products_note(manifest: Manifest) -> str | None:
    """The line `make sim` prints when compile ran some products on the host: an f32
    program (or its f32 part) compiled for the int8 array. Compile said so already; the
    co-simulation runs exactly what compile put on the array (the int8 products, or
    nothing), so the C program's host products are checked against nothing but the
    interpreter."""
    if not manifest.float_products or manifest.config.is_float:
        return None
    config = manifest.config
    array = (f"the int{config.in_width} array (int{config.in_width} x int{config.in_width} "
             f"-> int{config.acc_width})")
    rest = ("its other products are the array calls below" if manifest.array_calls
            else "nothing runs on the array")
    count = manifest.float_products
    products, them = ("1 f32 product", "it") if count == 1 else (f"{count} f32 products",
                                                                   "them")
    return (f"note: {manifest.source} computes {products} on the host, as compile said: "
            f"{array} cannot run {them}; {rest} (compile with --array "
            f"{config.rows}x{config.cols}:f32 to put {them} on the binary32 array)")


def cosimulate(outdir: Path, program_args: list[str], *, waves: bool = False,
               simulator: str = "verilator", library: str = LIBRARY,
               arrays: Sequence[int] | None = None,
               accel: bool | None = None, how: AccelRun | None = None) -> CosimResult:
    """Build the RTL and the C library for `outdir`, run the program, return the report.

    `library`: the build of the program to run (the traced one for `glensidec diff --rtl`).
    A program on arrays of several sizes runs once per array, with that array's RTL
    instantiated and its calls on it (the other arrays' calls on the bit-exact C model),
    so every call runs once on the RTL of its own size; the report lists them in program
    order. `arrays`: only the runs with these arrays (indices into the manifest's) on the
    RTL (`glensidec diff --rtl` traces each run on its own). A program compiled with
    --accel has one more run, its accelerator layers on ws_accel (`accel`: whether to
    make it; by default when `arrays` is not given), run as `how` says."""
    outdir = outdir.resolve()
    manifest = Manifest.read(outdir)
    note = host_products_note(manifest)
    if note:  # what compile left on the host is not co-simulated: say so, then run the rest
        print(note, flush=True)
    if library != LIBRARY or not (outdir / library).is_file():
        built = subprocess.run(["make", "-s", "-C", str(outdir), library],
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise GlensideError(f"building {outdir / library} failed:\n{built.stderr.strip()}")
    accel_run = bool(manifest.accel_layers) and (arrays is None if accel is None else accel)
    if arrays is None:  # every array that has calls, or the main one when nothing does
        arrays = [array for array in range(len(manifest.configs)) if manifest.calls_on(array)]
        arrays = arrays or ([] if accel_run else [0])
    how = how or AccelRun()
    if accel_run and simulator != "verilator":
        raise GlensideError("the accelerator layers co-simulate on Verilator only "
                            "(tb_ws_accel_mem reads its layers with SystemVerilog file I/O)")
    # reach the cluster before anything runs: a wrong address leaves nothing written
    client = dask_client(how.scheduler) if accel_run and how.scheduler else None
    try:
        runs = [_cosimulate_array(outdir, manifest, array, program_args, waves, simulator,
                                  library)
                for array in arrays]
        if accel_run:  # the accelerator layers on ws_accel (glensidec diff --rtl: arrays only)
            runs.append(_cosimulate_accel(outdir, manifest, program_args, waves, library,
                                          how, client))
    finally:
        if client is not None:
            client.close()
    if len(runs) == 1:
        return runs[0]
    # array calls in program order, then the accelerator layers in theirs
    calls = sorted((call for result in runs for call in result.calls),
                   key=lambda call: ("accel" in call, int(call["call"])))
    status = next((result.status for result in runs if result.status != 0), 0)
    with open(outdir / REPORT, "w") as report:  # the runs' reports, merged
        json.dump({"status": status, "calls": calls}, report, indent=1)
    return CosimResult(calls, status, sum(result.wall_seconds for result in runs))


def _cosimulate_array(outdir: Path, manifest: Manifest, array: int, program_args: list[str],
                      waves: bool, simulator: str, library: str) -> CosimResult:
    """One simulator run of the program with array `array` (an index into the manifest's
    arrays) on the RTL."""
    config = manifest.configs[array]
    several = len(manifest.configs) > 1
    depths = testbench_depths(manifest, array)
    # sim_build/RxC when other builds share sim_build/ (the accelerator's is sim_build/accel:
    # a Verilator build folder inside another one breaks the inner one's runs)
    build_dir = build_directory(outdir, config, depths, simulator, waves,
                                several or bool(manifest.accel_layers))
    build_log, run_log = outdir / BUILD_LOG, outdir / RUN_LOG
    print(f"building the {config.rows}x{config.cols} array testbench "
          f"with {simulator} (log: {build_log})", flush=True)
    try:
        runner = build_gemm_testbench(config, build_dir, depths, simulator=simulator,
                                      waves=waves, log_file=build_log)
    except (Exception, SystemExit):
        raise GlensideError(f"the simulator build failed:\n{_tail(build_log)}") from None
    calls_here = len(manifest.calls_on(array))
    print(f"co-simulating {manifest.source}: {counted(calls_here, 'array call')}"
          f"{f' on the {config.rows}x{config.cols} array' if several else ''} "
          f"(log: {run_log})", flush=True)
    # The run's files (results, hex files, waveforms) stay in OUTDIR even when the build
    # is shared (GLENSIDEC_SIM_CACHE). The cocotb test's settings: which array is on the RTL.
    return _run_program(outdir, manifest, runner, GEMM_TESTBENCH, "run_compiled_program",
                        outdir / "sim_build", calls_here, program_args, waves, library,
                        array=array)


@dataclass(frozen=True)
class AccelRun:
    """How to co-simulate the accelerator layers: `jobs` simulator processes at once (the
    layers split by predicted cycles), or all of them in one process in program order
    (`whole`), on this machine or on the Dask cluster at `scheduler`."""

    jobs: int = 0  # 0: one per core
    whole: bool = False
    scheduler: str | None = None


def _cosimulate_accel(outdir: Path, manifest: Manifest, program_args: list[str],
                      waves: bool, library: str, how: AccelRun, client: Any) -> CosimResult:
    """The program's accelerator layers on ws_accel: the program runs on the accelerator's
    C model, recording every layer (glensidec.cosim.accel_record); then tb_ws_accel_mem
    runs each layer from the same memory image, memory and commands inside the simulation
    (glensidec.cosim.accel_sim), and cocotb checks every byte and cycle count. The runs
    go to the Dask cluster of `client` when given."""
    accel = manifest.accel_config()
    assert accel is not None
    started = time.perf_counter()
    run_dir = outdir / "sim_build" / "accel"
    layer_dir, jobs_dir = run_dir / "layers", run_dir / "jobs"
    for scratch in (layer_dir, jobs_dir):
        if scratch.is_dir():
            shutil.rmtree(scratch)
    build_log, run_log = outdir / BUILD_LOG, outdir / RUN_LOG
    print(f"co-simulating {manifest.source}: running the program on the accelerator's C "
          f"model, recording its {counted(manifest.accel_layers, 'layer')} (log: {run_log})",
          flush=True)
    with open(run_log, "w") as log:
        subprocess.run([sys.executable, "-m", "glensidec.cosim.accel_record", str(outdir),
                        str(outdir / library), str(layer_dir), str(outdir / "model"),
                        *program_args], stdout=log, stderr=subprocess.STDOUT)
    if not (layer_dir / LAYERS_FILE).is_file():
        cause = program_error(run_log)
        if cause is not None:
            raise GlensideError(f"the program stopped: {cause} (log: {run_log})")
        raise GlensideError(f"recording the accelerator layers failed:\n{_tail(run_log)}")
    status, layers = read_layers(layer_dir)
    cause = program_error(run_log) if status != 0 else None
    if cause is not None:  # the program failed on its own: no layer to simulate for it
        raise GlensideError(f"the program stopped: {cause} (log: {run_log})")
    parameters = sim_parameters(accel, layers)
    build_dir = run_dir / "build"
    cache = os.environ.get("GLENSIDEC_SIM_CACHE")
    if cache:
        key = hashlib.sha256(repr((parameters, "verilator", waves)).encode())
        for source in rtl_sources(MEM_TOP):
            key.update(source.read_bytes())
        build_dir = Path(cache) / f"{MEM_TOP}_{accel.rows}x{accel.cols}_{key.hexdigest()[:16]}"
    print(f"building the {accel.rows}x{accel.cols} accelerator (ws_accel in {MEM_TOP}) with "
          f"verilator (log: {build_log})", flush=True)
    try:
        build(MEM_TOP, rtl_sources(MEM_TOP), build_dir, parameters, waves=waves, timing=True,
              log_file=build_log)
    except (Exception, SystemExit):
        raise GlensideError(f"the simulator build failed:\n{_tail(build_log)}") from None
    groups = [list(layers)] if how.whole else partition(layers, how.jobs or cpu_count())
    where = f"the Dask cluster at {how.scheduler}" if client is not None else "this machine"
    print(f"co-simulating {counted(len(layers), 'accelerator layer')} on ws_accel in "
          f"{len(groups)} simulator process{'es' if len(groups) > 1 else ''} on {where} "
          f"(logs: {jobs_dir}/*/sim.log)", flush=True)
    jobs = [SimJob(str(build_dir), str(layer_dir), str(jobs_dir / f"job{number}"),
                   tuple(group), str(jobs_dir / f"job{number}" / "sim.log"))
            for number, group in enumerate(groups)]
    for job in jobs:
        Path(job.job_dir).mkdir(parents=True, exist_ok=True)
    calls = run_jobs(jobs, client, len(jobs))
    with open(outdir / REPORT, "w") as report:
        json.dump({"status": status, "calls": calls}, report, indent=1)
    return CosimResult(calls, status, time.perf_counter() - started)


def _run_program(outdir: Path, manifest: Manifest, runner: Any, toplevel: str, testcase: str,
                 run_dir: Path, calls: int, program_args: list[str], waves: bool,
                 library: str, **settings: Any) -> CosimResult:
    """Run one cocotb test of glensidec.cosim.cocotb_program on a built simulator: the
    program's library and arguments, its manifest, where to write the report and (for
    the progress bar) each finished call, and any further `settings`."""
    report, run_log = outdir / REPORT, outdir / RUN_LOG
    report.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="glensidec-cosim-") as scratch, \
                _watch_calls(Path(scratch) / "calls", calls) as calls_log:
            run(runner, toplevel, TEST_MODULE, run_dir, waves=waves, testcase=testcase,
                log_file=run_log,
                extra_env=settings_env(
                    library=str(outdir / library), args=[str(outdir / "model"), *program_args],
                    report=str(report), manifest=str(outdir / MANIFEST),
                    progress=str(calls_log) if calls_log else None, **settings))
    except (Exception, SystemExit):
        # cocotb's runner raises when the simulator dies (the program's own error exits the
        # whole process): the report's absence and the log say what happened, below.
        if report.is_file():
            raise
    wall = time.perf_counter() - started
    if not report.is_file():
        cause = program_error(run_log)
        if cause is not None:
            raise GlensideError(f"the program stopped: {cause} (log: {run_log})")
        raise GlensideError(f"co-simulation stopped before it finished:\n{_tail(run_log)}")
    raw = json.loads(report.read_text())
    return CosimResult(raw["calls"], int(raw["status"]), wall)


@contextmanager
def _watch_calls(calls_log: Path, total: int) -> Iterator[Path | None]:
    """A progress bar (on a terminal only, glensidec.progress) of the array calls done and
    the simulated cycles per second, read from the file the simulator appends to."""
    if not progress.shown():
        yield None
        return
    stop = threading.Event()
    with progress.bar(total, "co-simulating", "call") as calls:
        watcher = threading.Thread(target=_follow, args=(calls_log, calls, stop), daemon=True)
        watcher.start()
        try:
            yield calls_log
        finally:
            stop.set()
            watcher.join()


def _follow(calls_log: Path, calls: Any, stop: threading.Event) -> None:
    """Each line of `calls_log` is one finished call: its simulated cycles and the wall
    seconds it took (the rate is the final report's: cycles over time spent in calls)."""
    while not stop.wait(0.25):
        try:
            done = [line.split() for line in calls_log.read_text().splitlines()]
            cycles = sum(int(fields[0]) for fields in done)
            seconds = sum(float(fields[1]) for fields in done)
        except (OSError, ValueError, IndexError):  # not there yet, or a line half-written
            continue
        calls.update(len(done) - calls.n)
        if seconds > 0:
            calls.set_postfix_str(f"{cycles / seconds:,.0f} simulated cycles/s")


def program_error(log: Path) -> str | None:
    """The compiled program's own error message (`model: …`) in a simulator log, if any:
    the first, which says why (a backend error is followed by main's `model_run failed`)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    messages = [line.removeprefix("model: ") for line in text.splitlines()
                if line.startswith("model: ")]
    return messages[0] if messages else None


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"


def print_report(result: CosimResult) -> None:
    print(f"{'call':>4} {'M':>6} {'K':>6} {'N':>6} {'predicted':>10} {'simulated':>10}  data")
    for index, call in enumerate(result.calls):
        on = f"  on {call['array']}" if "array" in call else ""  # several arrays
        on = f"  accelerator layer {call['accel']}" if "accel" in call else on
        print(f"{index:>4} {call['m']:>6} {call['k']:>6} {call['n']:>6} "
              f"{call['predicted_cycles']:>10} {call['simulated_cycles']:>10}  "
              f"{'ok' if call['data_ok'] else 'MISMATCH'}{on}")
    for index, call in enumerate(result.calls):  # what went wrong, per call
        for what in ("error", "first_difference"):
            if what in call:
                print(f"call {index}: {what.replace('_', ' ')} {call[what]}")
                break
    rate = result.simulated_cycles / result.rtl_seconds if result.rtl_seconds else 0.0
    layers = sum(1 for call in result.calls if "accel" in call)
    print(f"simulated cycles of {simulated_work(layers, len(result.calls) - layers)}: "
          f"{result.simulated_cycles} (predicted {result.predicted_cycles})")
    print(f"wall time: {result.wall_seconds:.2f} s in the simulator, "
          f"{result.rtl_seconds:.3f} s simulating them ({rate:,.0f} simulated cycles/s)")


def add_to_report(outdir: Path, result: CosimResult) -> Path | None:
    """Add the simulated cycles and wall time to OUTDIR/report.html (from report.json);
    None when the directory has no report of ours to update (older, or edited by hand)."""
    try:
        data = ReportData.from_json((outdir / REPORT_DATA).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # the report's rows on hardware, in program order: array calls and accelerator layers
    by_kind = {kind: iter([call for call in result.calls if ("accel" in call) == accel])
               for kind, accel in (("array", False), ("accelerator", True))}
    calls = [next(by_kind[row.where], None) for row in data.rows if row.where in by_kind]
    simulation = Simulation([int(call["simulated_cycles"]) for call in calls if call],
                            [int(call["predicted_cycles"]) for call in calls if call],
                            result.wall_seconds, result.rtl_seconds)
    page = render_html(data, simulation).encode()
    return outdir / REPORT_HTML if update_own_file(outdir, REPORT_HTML, page) else None


def argument_parser() -> argparse.ArgumentParser:
    """`make sim`'s command line (OUTDIR's Makefile puts OUTDIR and the inputs after `--`:
    an input's name may start with '-')."""
    parser = argparse.ArgumentParser(
        prog="python -m glensidec.cosim",
        description="Co-simulate a compiled program: its array calls run on the RTL.")
    parser.add_argument("outdir", type=Path, help="a `glensidec compile -o` directory")
    parser.add_argument("inputs", nargs="*", metavar="NAME=FILE.npy")
    parser.add_argument("-o", "--output", default="sim_output.npy", help="result .npy")
    parser.add_argument("--waves", default="0", help="1: record waveforms (sim_build/)")
    parser.add_argument("--simulator", default="verilator", choices=["verilator", "icarus"])
    parser.add_argument("--dequantize", default="0",
                        help="1: write a quantized program's result as float32")
    parser.add_argument("--jobs", default="auto",
                        help="accelerator layers: simulator processes at once (auto: one "
                             "per core)")
    parser.add_argument("--whole", default="0",
                        help="1: every accelerator layer in one process, in program order")
    parser.add_argument("--scheduler", default="",
                        help="accelerator layers: run on this Dask scheduler (ADDRESS)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    if args.jobs not in ("", "auto") and not args.jobs.isdigit():
        parser.error(f"--jobs: a number or auto, not {args.jobs!r}")
    how = AccelRun(int(args.jobs) if args.jobs.isdigit() else 0, args.whole == "1",
                   args.scheduler or None)
    # The simulator runs in sim_build/: hand the program absolute paths.
    program_args = []
    for item in args.inputs:
        name, equals, path = item.partition("=")
        if equals and not Path(path).is_absolute() and not Path(path).exists():
            # (found before anything is built; the C program would say only "cannot open")
            print(f"error: INPUTS: {item}: no file {Path(path).resolve()}; make -C OUTDIR "
                  "runs in OUTDIR, so a relative path is taken from there: give an absolute "
                  f"one (e.g. {name}=$PWD/{path})", file=sys.stderr)
            return 1
        program_args.append(f"{name}={Path(path).resolve()}" if equals else item)
    program_args += ["-o", str(Path(args.output).resolve())]
    if args.dequantize == "1":  # the C program's own flag (quantized programs only)
        program_args.append("--dequantize")
    try:
        result = cosimulate(args.outdir, program_args, waves=args.waves == "1",
                            simulator=args.simulator, how=how)
    except GlensideError as error:
        print(error, file=sys.stderr)
        return 1
    print_report(result)
    updated = add_to_report(args.outdir.resolve(), result)
    if updated is not None:
        print(f"added the co-simulation to {updated}")
    if result.status != 0:
        print(f"error: the program failed (status {result.status})", file=sys.stderr)
    elif not result.ok:
        print("error: the RTL disagrees with the model (data or cycles); see above",
              file=sys.stderr)
    else:
        print("co-simulation: every result and cycle count matches")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
