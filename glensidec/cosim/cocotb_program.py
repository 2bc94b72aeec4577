"""The cocotb tests that co-simulate a compiled program (started by glensidec.cosim.runner).

Run inside the simulator and load the program's `libmodel_cosim.so`.
`run_compiled_program` (tb_ws_gemm) routes the array backend to the RTL and runs `main` in
a bridge thread, so the C code blocks while the simulator executes each GEMM.
`run_compiled_program_on_accel` (ws_accel, programs compiled with --accel) runs `main` on
the accelerator's C model, recording each layer, then runs every layer on the RTL.
"""

from __future__ import annotations

import ctypes
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from cocotb import test
from cocotb.task import bridge, resume

from glensidec.cosim.accel_driver import run_commands, start_clock
from glensidec.cosim.rtl_driver import GemmDriver, GemmRun
from glensidec.cosim.runner import Manifest, testbench_depths
from glensidec.cosim.settings import testbench_settings
from glensidec.hardware.accel import EpilogueConfig, ResidualConfig, epilogue_reference
from glensidec.hardware.accel_native import FIELDS, unpack_commands
from glensidec.hardware.array import gemm_cycles, reference_gemm, reference_gemm_f32
from glensidec.hardware.commands import encode_command

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

    def backend(m: int, k: int, n: int, a_ptr: Any, b_ptr: Any, d_ptr: Any,
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
    assert status == 0, f"the program returned {status}"
    assert all(call["data_ok"] and call["cycles_ok"] for call in calls), calls


#: gs_accel_layer's residual fields, in ResidualConfig's order.
RESIDUAL_FIELDS = ("res_self", "res_mult", "res_offset", "res_multiplier", "res_pre",
                   "res_post", "res_zero_point", "res_low", "res_high", "res_early")


class AccelLayerStruct(ctypes.Structure):
    """gs_accel_layer of accel_runtime.h."""

    _fields_ = [("name", ctypes.c_char_p), ("m", ctypes.c_long), ("k", ctypes.c_long),
                ("n", ctypes.c_long), ("input_base", ctypes.c_long),
                ("weight_base", ctypes.c_long), ("output_base", ctypes.c_long),
                ("pre", ctypes.c_int), ("post", ctypes.c_int), ("zero_point", ctypes.c_int),
                ("low", ctypes.c_int), ("high", ctypes.c_int), ("commands", ctypes.c_long),
                ("predicted_cycles", ctypes.c_longlong), ("input_bytes", ctypes.c_long),
                ("residual_base", ctypes.c_long),
                *((name, ctypes.c_int) for name in RESIDUAL_FIELDS)]

    def residual_add(self) -> ResidualConfig | None:
        """The layer's residual add, or None."""
        if self.residual_base < 0:
            return None
        (self_multiplier, multiplier, offset, requantize_multiplier, pre, post, zero_point,
         low, high, early) = (int(getattr(self, name)) for name in RESIDUAL_FIELDS)
        return ResidualConfig(self_multiplier, multiplier, offset, requantize_multiplier, pre,
                              post, zero_point, low, high, bool(early))


# int (*)(const gs_accel_layer *, const int32_t *commands, const int8_t *A, const int8_t *B,
#         const int32_t *bias, const int32_t *multiplier, const int8_t *R, int8_t *C):
# gs_accel_backend_fn
ACCEL_BACKEND_ARGS = (ctypes.POINTER(AccelLayerStruct), ctypes.POINTER(ctypes.c_int32),
                      ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int8),
                      ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                      ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int8))
ACCEL_BACKEND = ctypes.CFUNCTYPE(ctypes.c_int, *ACCEL_BACKEND_ARGS)


@dataclass
class _LayerRun:
    """One accelerator layer as the program ran it: its inputs and the C model's output."""

    name: str
    m: int
    k: int
    n: int
    predicted_cycles: int
    words: list[int]
    memory: np.ndarray[Any, Any]  # main memory before the layer: A and B at their bases
    output: range  # where the layer's result goes
    c_model: np.ndarray[Any, Any]  # the C model's result (int8 M×N)
    expected: np.ndarray[Any, Any]  # numpy + the epilogue's reference


@test()
async def run_compiled_program_on_accel(dut: Any) -> None:
    """The program's accelerator layers on ws_accel (its array calls on the C model).

    The program runs first, on the C model of the accelerator, and each layer's command
    table, operands and result are recorded; then every layer runs on the RTL from the
    same main memory (the table turned back into RTL command words, Python playing the
    memory). The RTL's bytes must equal the C model's (so the program's output is the one
    the RTL would give) and numpy + the epilogue's reference, and its cycles the layer's
    prediction. (Running the RTL inside the program's call, as the array's co-simulation
    does, would need the clock to stop while the host code runs.)"""
    settings = testbench_settings()
    manifest = Manifest.read(Path(settings["manifest"]).parent)
    accel = manifest.accel_config()
    assert accel is not None, "not a program compiled with --accel"
    memory_config = accel.memory
    library = ctypes.CDLL(settings["library"])
    library.gs_accel_model.argtypes = ACCEL_BACKEND_ARGS
    recorded: list[_LayerRun] = []

    def backend(layer_ptr: Any, commands_ptr: Any, a_ptr: Any, b_ptr: Any, bias_ptr: Any,
                multiplier_ptr: Any, r_ptr: Any, c_ptr: Any) -> int:
        status = int(library.gs_accel_model(layer_ptr, commands_ptr, a_ptr, b_ptr, bias_ptr,
                                            multiplier_ptr, r_ptr, c_ptr))
        layer = layer_ptr.contents
        m, k, n = int(layer.m), int(layer.k), int(layer.n)
        table = np.ctypeslib.as_array(commands_ptr, shape=(layer.commands, len(FIELDS)))
        image = int(layer.input_bytes) != m * k  # an NHWC map the DMA reads as im2col
        a = np.ctypeslib.as_array(a_ptr, shape=(int(layer.input_bytes),)).astype(np.int64)
        b = _matrix(b_ptr, k, n).astype(np.int64) if k else np.zeros((0, n), np.int64)
        bias = np.ctypeslib.as_array(bias_ptr, shape=(n,)).astype(np.int64)
        multiplier = np.ctypeslib.as_array(multiplier_ptr, shape=(n,)).astype(np.int64)
        epilogue = EpilogueConfig(layer.pre, layer.post, layer.zero_point, layer.low,
                                  layer.high)
        added = layer.residual_add()
        commands = unpack_commands(table, accel.cols, epilogue, bias.tolist(),
                                   multiplier.tolist(), added)
        output = range(layer.output_base, layer.output_base + m * n)
        end = max(output.stop, layer.residual_base + m * n)
        memory = np.zeros(end + 2 * memory_config.bus_bytes, dtype=np.uint8)
        memory[layer.input_base:layer.input_base + a.size] = a & 0xFF
        memory[layer.weight_base:layer.weight_base + k * n] = (b & 0xFF).reshape(-1)
        residual = None
        if added is not None:
            residual = _matrix(r_ptr, m, n).astype(np.int64)
            memory[layer.residual_base:layer.residual_base + m * n] = \
                (residual & 0xFF).reshape(-1)
        # numpy's product for a matrix; for an im2col layer the C model (which glensidec
        # diff checks against numpy's convolution) is the reference
        expected = _matrix(c_ptr, m, n).copy() if image else epilogue_reference(
            reference_gemm(a.reshape(m, k), b, None, 32, 8), bias[None, :], multiplier,
            epilogue, residual=added, residual_rows=residual)
        recorded.append(_LayerRun(
            layer.name.decode(), m, k, n, int(layer.predicted_cycles),
            [encode_command(command, accel.cols) for command in commands], memory, output,
            _matrix(c_ptr, m, n).copy(), expected))
        return status

    callback = ACCEL_BACKEND(backend)  # alive until the end
    library.gs_accel_set_backend(callback)
    argv = settings["args"]
    argv_c = (ctypes.c_char_p * len(argv))(*(arg.encode() for arg in argv))
    library.gs_model_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    status = int(library.gs_model_main(len(argv), argv_c))  # no RTL yet: no bridge needed
    await start_clock(dut)
    layers: list[dict[str, int | bool | float | str]] = []
    progress_path = settings["progress"]
    for index, run in enumerate(recorded):
        started = time.perf_counter()
        cycles = await run_commands(dut, run.words, run.memory, run.output,
                                    memory_config.bus_bytes, memory_config.latency)
        rtl_seconds = time.perf_counter() - started
        got = run.memory[run.output.start:run.output.stop].view(np.int8).reshape(run.m, run.n)
        layers.append({"call": index, "accel": run.name, "m": run.m, "k": run.k, "n": run.n,
                       "predicted_cycles": run.predicted_cycles, "simulated_cycles": cycles,
                       "data_ok": bool(np.array_equal(got, run.c_model)
                                       and np.array_equal(got, run.expected)),
                       "cycles_ok": cycles == run.predicted_cycles,
                       "rtl_seconds": rtl_seconds})
        if progress_path:
            with open(progress_path, "a") as progress:
                progress.write(f"{cycles} {rtl_seconds}\n")
    with open(settings["report"], "w") as report:
        json.dump({"status": status, "calls": layers}, report, indent=1)
    assert status == 0, f"the program returned {status}"
    assert all(layer["data_ok"] and layer["cycles_ok"] for layer in layers), layers
