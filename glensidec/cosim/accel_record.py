"""Record a compiled program's accelerator layers, for the RTL to run them afterwards.

`python -m glensidec.cosim.accel_record OUTDIR LIBRARY LAYER_DIR ARG…` loads the
program's co-simulation library (`libmodel_cosim.so`), runs its `main` with ARG… with the
accelerator layers on the accelerator's C model, and writes, per layer, main memory before
it and its command words (glensidec.cosim.accel_sim.write_layer: the files
rtl/tb/tb_ws_accel_mem.v loads), the C model's result and numpy's. A separate process,
because a C program's error ends the process that runs it.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.cosim.accel_sim import (
    LAYERS_FILE,
    LayerFiles,
    command_capacity,
    output_rows,
    write_layer,
)
from glensidec.cosim.runner import Manifest
from glensidec.hardware.accel import EpilogueConfig, ResidualConfig, epilogue_reference
from glensidec.hardware.accel_native import FIELDS, unpack_commands
from glensidec.hardware.array import reference_gemm
from glensidec.hardware.commands import TABLE_ENTRIES, AccelConfig, encode_command

#: gs_accel_layer's residual fields, in ResidualConfig's order.
RESIDUAL_FIELDS = ("res_self", "res_mult", "res_offset", "res_multiplier", "res_pre",
                   "res_post", "res_zero_point", "res_low", "res_high", "res_early",
                   "res_product", "res_rows")


class AccelLayerStruct(ctypes.Structure):
    """gs_accel_layer of accel_runtime.h."""

    _fields_ = [("name", ctypes.c_char_p), ("m", ctypes.c_long), ("k", ctypes.c_long),
                ("n", ctypes.c_long), ("input_base", ctypes.c_long),
                ("weight_base", ctypes.c_long), ("output_base", ctypes.c_long),
                ("pre", ctypes.c_int), ("post", ctypes.c_int), ("zero_point", ctypes.c_int),
                ("low", ctypes.c_int), ("high", ctypes.c_int), ("commands", ctypes.c_long),
                ("predicted_cycles", ctypes.c_longlong), ("input_bytes", ctypes.c_long),
                ("residual_base", ctypes.c_long),
                *((name, ctypes.c_int) for name in RESIDUAL_FIELDS),
                ("output_pitch", ctypes.c_long), ("reordered", ctypes.c_int),
                ("batch", ctypes.c_long)]

    def residual_add(self) -> ResidualConfig | None:
        """The layer's residual add, or None."""
        if self.residual_base < 0:
            return None
        (self_multiplier, multiplier, offset, requantize_multiplier, pre, post, zero_point,
         low, high, early, product, rows) = (int(getattr(self, name))
                                             for name in RESIDUAL_FIELDS)
        return ResidualConfig(self_multiplier, multiplier, offset, requantize_multiplier, pre,
                              post, zero_point, low, high, bool(early), bool(product),
                              bool(rows))


# int (*)(const gs_accel_layer *, const int32_t *commands, const int8_t *A, const int8_t *B,
#         const int32_t *bias, const int32_t *multiplier, const int8_t *table,
#         const int8_t *scale, const int8_t *R, int8_t *C): gs_accel_backend_fn
ACCEL_BACKEND_ARGS = (ctypes.POINTER(AccelLayerStruct), ctypes.POINTER(ctypes.c_int32),
                      ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int8),
                      ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                      ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int8),
                      ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_int8))
ACCEL_BACKEND = ctypes.CFUNCTYPE(ctypes.c_int, *ACCEL_BACKEND_ARGS)


def _matrix(pointer: Any, rows: int, cols: int) -> np.ndarray[Any, Any]:
    return np.ctypeslib.as_array(pointer, shape=(rows, cols))


def _layer_files(accel: AccelConfig, index: int, layer: AccelLayerStruct, commands_ptr: Any,
                 a_ptr: Any, b_ptr: Any, bias_ptr: Any, multiplier_ptr: Any, table_ptr: Any,
                 scale_ptr: Any, r_ptr: Any, c_ptr: Any, directory: Path) -> LayerFiles:
    """One layer the C model just ran: main memory before it, its commands, its results."""
    m, k, n = int(layer.m), int(layer.k), int(layer.n)
    table = np.ctypeslib.as_array(commands_ptr, shape=(layer.commands, len(FIELDS)))
    image = int(layer.input_bytes) != m * k  # an NHWC map the DMA reads as im2col
    a = np.ctypeslib.as_array(a_ptr, shape=(int(layer.input_bytes),)).astype(np.int64)
    batch = int(layer.batch) or 1  # a batch's B: batch K x N matrices, one per product
    b = _matrix(b_ptr, batch * k, n).astype(np.int64) if k else np.zeros((0, n), np.int64)
    bias = np.ctypeslib.as_array(bias_ptr, shape=(n,)).astype(np.int64)
    multiplier = np.ctypeslib.as_array(multiplier_ptr, shape=(n,)).astype(np.int64)
    table_values = None if not table_ptr else tuple(
        int(value) for value in np.ctypeslib.as_array(table_ptr, shape=(TABLE_ENTRIES,)))
    epilogue = EpilogueConfig(layer.pre, layer.post, layer.zero_point, layer.low, layer.high,
                              table_values)
    added = layer.residual_add()
    scale = None if not scale_ptr else np.ctypeslib.as_array(scale_ptr, shape=(n,)).astype(
        np.int64)
    commands = unpack_commands(table, accel.cols, epilogue, bias.tolist(),
                               multiplier.tolist(), added,
                               None if scale is None else scale.tolist())
    pitch = int(layer.output_pitch)  # C's rows, pitch bytes apart (a concatenation's block)
    output = range(layer.output_base, layer.output_base + (m - 1) * pitch + n)
    # (a layer reading wider rows has its input region after everything else:
    # commands.with_input_pitch)
    end = max(output.stop, layer.residual_base + m * n, layer.input_base + a.size)
    memory = np.zeros(end + 2 * accel.memory.bus_bytes, dtype=np.uint8)
    memory[layer.input_base:layer.input_base + a.size] = a & 0xFF
    memory[layer.weight_base:layer.weight_base + b.size] = (b & 0xFF).reshape(-1)
    residual = None
    if added is not None:
        residual = _matrix(r_ptr, m, n).astype(np.int64)
        memory[layer.residual_base:layer.residual_base + m * n] = (residual & 0xFF).reshape(-1)
    c_model = np.ctypeslib.as_array(c_ptr, shape=(output.stop - output.start,))[
        output_rows(m, n, pitch)].copy()
    # numpy's product for a matrix; for an im2col layer, or one whose commands store its
    # rows in another order, the C model (which glensidec diff checks against numpy's
    # convolution and the layer's row order) is the reference
    expected = c_model
    if not (image or layer.reordered):
        products = np.concatenate([
            reference_gemm(a_item, b_item, None, 32, 8) for a_item, b_item in zip(
                a.reshape(batch, m // batch, k), b.reshape(batch, k, n), strict=True)])
        expected = epilogue_reference(products, bias[None, :], multiplier, epilogue,
                                      residual=added, residual_rows=residual, scale=scale)
    return write_layer(directory, index, layer.name.decode(), (m, k, n),
                       int(layer.predicted_cycles),
                       [encode_command(command, accel.cols) for command in commands],
                       memory, output, c_model, np.asarray(expected), accel.memory.bus_bytes,
                       command_capacity(accel.cols), pitch)


def record(outdir: Path, library_path: Path, directory: Path, argv: list[str]) -> int:
    """Run the program, writing every accelerator layer into `directory`; its status."""
    accel = Manifest.read(outdir).accel_config()
    if accel is None:
        raise SystemExit(f"{outdir}: not a program compiled with --accel")
    directory.mkdir(parents=True, exist_ok=True)
    library = ctypes.CDLL(str(library_path))
    library.gs_accel_model.argtypes = ACCEL_BACKEND_ARGS
    layers: list[LayerFiles] = []
    failures: list[str] = []

    def backend(layer_ptr: Any, commands_ptr: Any, a_ptr: Any, b_ptr: Any, bias_ptr: Any,
                multiplier_ptr: Any, table_ptr: Any, scale_ptr: Any, r_ptr: Any,
                c_ptr: Any) -> int:
        status = int(library.gs_accel_model(layer_ptr, commands_ptr, a_ptr, b_ptr, bias_ptr,
                                            multiplier_ptr, table_ptr, scale_ptr, r_ptr,
                                            c_ptr))
        try:
            layers.append(_layer_files(accel, len(layers), layer_ptr.contents, commands_ptr,
                                       a_ptr, b_ptr, bias_ptr, multiplier_ptr, table_ptr,
                                       scale_ptr, r_ptr, c_ptr, directory))
        except Exception as error:  # ctypes ignores a callback's exception: stop the program
            failures.append(f"layer {layer_ptr.contents.name.decode()}: "
                            f"{type(error).__name__}: {error}")
            return 1
        return status

    callback = ACCEL_BACKEND(backend)  # alive until the end
    library.gs_accel_set_backend(callback)
    argv_c = (ctypes.c_char_p * len(argv))(*(arg.encode() for arg in argv))
    library.gs_model_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    status = int(library.gs_model_main(len(argv), argv_c))
    if failures:  # no layers file: the co-simulation stops, naming the layer
        raise SystemExit(f"recording an accelerator layer failed: {failures[0]}")
    (directory / LAYERS_FILE).write_text(json.dumps(
        {"status": status, "layers": [layer.to_json() for layer in layers]}, indent=1))
    return status


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        print("usage: python -m glensidec.cosim.accel_record OUTDIR LIBRARY LAYER_DIR ARG…",
              file=sys.stderr)
        return 2
    outdir, library, directory, *program_args = args
    record(Path(outdir), Path(library), Path(directory), program_args)
    return 0  # the program's status is in LAYER_DIR/layers.json


if __name__ == "__main__":
    sys.exit(main())
