"""The cocotb tests that co-simulate a compiled program (started by glensidec.cosim.runner).

Run inside the simulator and load the program's `libmodel_cosim.so`.
`run_compiled_program` (tb_ws_gemm) routes the array backend to the RTL and runs `main` in
a bridge thread, so the C code blocks while the simulator executes each GEMM.
`run_accel_layers` (programs compiled with --accel) checks accelerator layers that
tb_ws_accel_mem runs on its own (glensidec.cosim.accel_sim).
"""

from __future__ import annotations

import ctypes
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from cocotb import test
from cocotb.task import bridge, resume
from cocotb.triggers import ValueChange

from glensidec.cosim.accel_sim import JOB_REPORT, LayerFiles, check_layers
from glensidec.cosim.rtl_driver import GemmDriver, GemmRun
from glensidec.cosim.runner import Manifest, testbench_depths
from glensidec.cosim.settings import testbench_settings
from glensidec.hardware.array import gemm_cycles, reference_gemm, reference_gemm_f32

# int (*)(long M, long K, long N, const int8_t *A, const int8_t *B, const int32_t *D,
#         int32_t *C), as array_runtime.h declares gs_array_backend_fn.
BACKEND_ARGS = (ctypes.c_long, ctypes.c_long, ctypes.c_long,
                ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int8),
                ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32))
BACKEND = ctypes.CFUNCTYPE(ctypes.c_int, *BACKEND_ARGS)
# The binary32 array's: (long, long, long, const float *A, const float *B, const float *D,
# float *C).
BACKEND_F32_ARGS = (ctypes.c_long, ctypes.c_long, ctypes.c_long,
                    ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float),
                    ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float))
BACKEND_F32 = ctypes.CFUNCTYPE(ctypes.c_int, *BACKEND_F32_ARGS)


def same_bits(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> bool:
    """Equal integers, or float32 equal in bits (a NaN matches any NaN: the RTL makes the
    canonical 0x7FC00000 where x86 would keep an operand's payload)."""
    if got.dtype != np.float32:
        return bool(np.array_equal(got, want))
    differ = got.view(np.uint32) != want.view(np.uint32)
    return not bool(np.any(differ & ~(np.isnan(got) & np.isnan(want))))


def _matrix(pointer: Any, rows: int, cols: int) -> np.ndarray[Any, Any]:
    return np.ctypeslib.as_array(pointer, shape=(rows, cols))


@test()
async def run_compiled_program(dut: Any) -> None:
    settings = testbench_settings()  # from glensidec.cosim.runner
    manifest = Manifest.read(Path(settings["manifest"]).parent)
    live = int(settings["array"])  # the array on the RTL in this run
    config = manifest.configs[live]
    several = len(manifest.configs) > 1
    driver = GemmDriver(dut, config, testbench_depths(manifest, live))
    await driver.reset()
    library = ctypes.CDLL(settings["library"])
    current_array = ctypes.c_int.in_dll(library, "gs_array_current")
    gemm_on_rtl = resume(driver.gemm)
    calls: list[dict[str, int | bool | float | str]] = []
    progress_path = settings["progress"]
    made = [0]  # array calls the program has made so far, on any array
    failures: list[str] = []  # an exception in a call, which ctypes would swallow

    def backend(m: int, k: int, n: int, a_ptr: Any, b_ptr: Any, d_ptr: Any,
                c_ptr: Any) -> int:
        try:
            return call_rtl(m, k, n, a_ptr, b_ptr, d_ptr, c_ptr)
        except Exception as error:  # ctypes would print and ignore it: stop the program
            failures.append(f"array call {made[0] - 1} ({m}x{k}x{n}): "
                            f"{type(error).__name__}: {error}")
            return 1

    def call_rtl(m: int, k: int, n: int, a_ptr: Any, b_ptr: Any, d_ptr: Any,
                 c_ptr: Any) -> int:
        index = made[0]
        made[0] += 1
        if current_array.value != live:  # another array's call: this run has not its RTL
            return int(library.gs_array_gemm_model(m, k, n, a_ptr, b_ptr, d_ptr, c_ptr))
        a = _matrix(a_ptr, m, k).copy()
        b = _matrix(b_ptr, k, n).copy()
        d = _matrix(d_ptr, m, n).copy() if d_ptr else None
        started = time.perf_counter()
        run: GemmRun = gemm_on_rtl(a, b, d)
        rtl_seconds = time.perf_counter() - started
        expected: np.ndarray[Any, Any] = (
            reference_gemm_f32(a, b, d, config.rows) if config.is_float
            else reference_gemm(a, b, d, config.acc_width, config.in_width))
        predicted = gemm_cycles(config, m, k, n)
        _matrix(c_ptr, m, n)[:] = run.C  # the program continues with the RTL's numbers
        calls.append({"call": index, "m": m, "k": k, "n": n, "predicted_cycles": predicted,
                      "simulated_cycles": run.cycles,
                      "data_ok": same_bits(run.C, expected),
                      "cycles_ok": run.cycles == predicted, "rtl_seconds": rtl_seconds,
                      **({"array": f"{config.rows}x{config.cols}"} if several else {})})
        if progress_path:  # for the progress bar of the process that started the simulator
            with open(progress_path, "a") as progress:
                progress.write(f"{run.cycles} {rtl_seconds}\n")
        return 0

    callback = (BACKEND_F32 if config.is_float else BACKEND)(backend)  # alive until the end
    library.gs_array_gemm_model.argtypes = BACKEND_F32_ARGS if config.is_float else BACKEND_ARGS
    library.gs_array_set_backend(callback)
    argv = settings["args"]
    argv_c = (ctypes.c_char_p * len(argv))(*(arg.encode() for arg in argv))
    library.gs_model_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def run_main() -> int:
        return int(library.gs_model_main(len(argv), argv_c))

    status = await bridge(run_main)()
    with open(settings["report"], "w") as report:
        json.dump({"status": int(status), "calls": calls}, report, indent=1)
    assert not failures, f"co-simulating an array call failed: {failures[0]}"
    assert status == 0, f"the program returned {status}"
    assert all(call["data_ok"] and call["cycles_ok"] for call in calls), calls


@test()
async def run_accel_layers(dut: Any) -> None:
    """Accelerator layers on tb_ws_accel_mem (ws_accel with main memory and the command
    stream inside the simulation, glensidec.cosim.accel_sim): the simulation runs the
    layers of its +glensidec_list on its own; this test only waits for each one to finish
    (one await per layer, for its wall time), then checks every byte of every output
    against the C model's and numpy's and every cycle count against the prediction."""
    settings = testbench_settings()
    layers = [LayerFiles(**layer) for layer in settings["layers"]]
    seconds: list[float] = []
    cpu_seconds: list[float] = []  # this process's: Verilator's model runs in it
    started, cpu_started = time.perf_counter(), time.process_time()
    while int(dut.layers_done.value) < len(layers) and not int(dut.done.value):
        await ValueChange(dut.layers_done)
        now, cpu_now = time.perf_counter(), time.process_time()
        seconds.append(now - started)
        cpu_seconds.append(cpu_now - cpu_started)
        started, cpu_started = now, cpu_now
    job_dir = Path(settings["job_dir"])
    entries = check_layers(Path(settings["layer_dir"]), job_dir, layers, seconds)
    for entry, cpu in zip(entries, cpu_seconds, strict=False):
        entry["rtl_cpu_seconds"] = cpu
    (job_dir / JOB_REPORT).write_text(json.dumps(entries, indent=1))
    assert all(entry["data_ok"] and entry["cycles_ok"] for entry in entries), \
        [entry for entry in entries if not (entry["data_ok"] and entry["cycles_ok"])][:3]
