"""`glensidec diff OUTDIR NAME=FILE.npy… [--rtl]`: the first instruction where executions differ.

Glow dumps every instruction to diff two runs; here three executions of one compiled program
are compared instruction by instruction of its lowered program (backend/lower.py):

* the **interpreter**: the lowered program run in numpy, each instruction with the reference
  interpreter's semantics (glensidec.lang.interp), on the program's own weights (the copy
  OUTDIR/program.gs names, OUTDIR/program.npz, not OUTDIR/weights.bin);
* the **C program**: `OUTDIR/model_trace --trace DIR` writes every instruction's destination
  buffer as DIR/NNNN.npy;
* with `--rtl`, the **co-simulation**: the same traced C program with its array calls on the
  Verilog array (`libmodel_cosim_trace.so`, glensidec.cosim.runner); a program on several
  arrays is co-simulated once per array (that array's calls on its RTL), each run traced
  and compared on its own.

Only the elements an instruction writes are compared (the memory planner lets a buffer hold
other values before and after): integers bit for bit, and f32 products on the binary32 array
too (`hardware.array.reference_gemm_f32` sums them in the order of the array that runs the
call: its own rows, or the main array's where no systolic-array construct names one); other f32
values to a relative 1e-4 (transcendental functions and summation order differ in the last
bits). The interpreter's lowered result is
also checked against the interpreter run on the program itself, so a lowering bug (which the
C program would share) is not mistaken for agreement.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from glensidec.backend.accel_layers import layer_geometry
from glensidec.backend.accel_passes import fuse_for_accelerator
from glensidec.backend.emit import PROGRAM_FILE as PROGRAM
from glensidec.backend.emit import TRACE_LIBRARY
from glensidec.backend.lower import (
    CONSTANT,
    INPUT,
    AccelLayer,
    ArrayGemm,
    Copy,
    Dot,
    Fill,
    Fold,
    Fused,
    Instruction,
    LoweredProgram,
    LowerOptions,
    Map,
    Reduce,
    RequantizePerChannel,
    Softmax,
    c_identifier,
    constant_array,
    lower_program,
)
from glensidec.backend.views import View, store_view
from glensidec.cosim.runner import Manifest, cosimulate, program_error
from glensidec.errors import GlensideError
from glensidec.hardware.accel import ConvLayer, EpilogueConfig, epilogue_reference
from glensidec.hardware.array import reference_gemm_f32
from glensidec.hardware.commands import (
    pool_reference,
    sum_pool_reference,
    unpack_weight_matrix,
)
from glensidec.hardware.layout import NchwLayout, layout_reference, nchw_reference
from glensidec.lang import data
from glensidec.lang.dtypes import DTYPES, Array, requantize
from glensidec.lang.interp import (
    COMPUTE_IMPLS,
    evaluate_result,
    matmul,
    minimum_value,
)
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import ComputeOp, Program
from glensidec.lang.typecheck import AccessType, check_program

INTERPRETER, C_PROGRAM, RTL = "interpreter", "C program", "RTL co-simulation"
F32_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Divergence:
    """The first element, of the first instruction, on which two executions disagree."""

    index: int
    instruction: Instruction
    buffer: str
    element: tuple[int, ...]  # in the instruction's destination (its logical shape)
    expected: object  # the first execution's value
    actual: object
    expected_by: str
    actual_by: str
    differing: int  # how many elements of the destination differ
    let: str | None = None  # the program's `let` naming the value the buffer holds

    def lines(self) -> list[str]:
        kind = type(self.instruction).__name__.lower()
        where = ", ".join(map(str, self.element))
        origin = f"the buffer of (let {self.let} …): " if self.let else ""
        return [f"first divergence: instruction [{self.index}] {kind} into {self.buffer}",
                f"  from: {origin}{self.instruction.note}",
                f"  element ({where}) of {self.buffer}: {self.expected_by} {self.expected}, "
                f"{self.actual_by} {self.actual} ({self.differing} of "
                f"{math.prod(self.instruction.writes().shape)} elements differ)"]


# -- the interpreter, one instruction at a time ------------------------------------------


def _load(view: View, flat: Array) -> Array:
    axes = view.axes()
    if not axes:
        return np.array(flat[view.offset]).reshape(view.shape)
    item = flat.itemsize
    strided = np.lib.stride_tricks.as_strided(
        flat[view.offset:], shape=[a.size for a in axes],
        strides=[a.stride * item for a in axes], writeable=False)
    return np.array(strided).reshape(view.shape)


def _compute(name: str, op: ComputeOp, members: list[Array], dst: View, source: str,
             result: str) -> Array:
    """A compute of the interpreter over the lowered operands: `members` stacked on the
    tuple axis when there are several (folds, dot-products)."""
    rank = len(dst.shape)
    stacked = members[0] if len(members) == 1 else np.stack(members, axis=rank)
    access = AccessType(dst.shape, tuple(stacked.shape[rank:]), source)
    return COMPUTE_IMPLS[name](op, stacked, access, AccessType(dst.shape, (), result))


def _execute(instruction: Instruction, read: Callable[[View], Array],
             dtype: Callable[[View], str], main_rows: int) -> Array:
    """The values `instruction` writes to its destination view (`main_rows`: the main
    array's rows, which fold the f32 sums of calls no systolic-array construct sizes)."""
    dst = instruction.writes()
    if isinstance(instruction, Copy):
        return read(instruction.src)
    if isinstance(instruction, Fill):
        value = minimum_value(dtype(dst)) if instruction.minimum else instruction.value
        return np.full(dst.shape, value)
    if isinstance(instruction, ArrayGemm):
        if dtype(instruction.a) == "f32":
            rows = instruction.rows or main_rows
            return reference_gemm_f32(read(instruction.a), read(instruction.b), None, rows)
        return matmul(read(instruction.a), read(instruction.b), dtype(instruction.a))
    if isinstance(instruction, AccelLayer):
        return _accel_layer(instruction, read)
    if isinstance(instruction, Fused):
        leaves = [read(leaf) for leaf in instruction.leaves]
        kinds = [dtype(leaf) for leaf in instruction.leaves]
        values: list[Array] = []
        for step in instruction.steps:
            operands = [leaves[o] if o >= 0 else values[-o - 1] for o in step.operands]
            sources = [kinds[o] if o >= 0 else instruction.steps[-o - 1].dtype
                       for o in step.operands]
            if isinstance(step.op, ComputeOp):
                values.append(_compute(step.op.name, step.op, operands, dst, sources[0],
                                       step.dtype))
            elif step.op == "requantize-per-channel":
                values.append(requantize(operands[0], operands[1], *step.params))
            else:
                values.append(_compute(step.op, ComputeOp(step.op), operands, dst,
                                       sources[0], step.dtype))
        return values[-1]
    if isinstance(instruction, RequantizePerChannel):
        accumulators, multipliers = (read(member) for member in instruction.members)
        return requantize(accumulators, multipliers, instruction.pre, instruction.post,
                          instruction.zero_point)
    if isinstance(instruction, Map):
        return _compute(instruction.op.name, instruction.op, [read(instruction.src)], dst,
                        dtype(instruction.src), dtype(dst))
    if isinstance(instruction, (Fold, Dot)):
        name = instruction.op if isinstance(instruction, Fold) else "dot-product"
        members = [read(member) for member in instruction.members]
        return _compute(name, ComputeOp(name), members, dst, dtype(instruction.members[0]),
                        dtype(dst))
    if isinstance(instruction, Reduce):
        return _compute(instruction.op, ComputeOp(instruction.op), [read(instruction.src)],
                        dst, dtype(instruction.src), dtype(dst))
    assert isinstance(instruction, Softmax), instruction
    return _compute("softmax", ComputeOp("softmax"), [read(instruction.src)], dst,
                    dtype(instruction.src), dtype(dst))


def _accel_layer(layer: AccelLayer, read: Callable[[View], Array]) -> Array:
    """What the layer declares it computes: its products (or, pooling, the max or the
    sum of each window), then every stage of its epilogue, the residual add included. A pass that
    gives a layer work its commands do not do thus shows as a divergence at the layer."""
    if isinstance(layer.layout, NchwLayout):  # the rows as the NCHW map
        return nchw_reference(layer.layout, read(layer.a)).reshape(layer.m, layer.n)
    if layer.layout is not None:  # the NCHW map as the padded NHWC map, in its rows
        return layout_reference(layer.layout, read(layer.a)).reshape(layer.m, layer.n)
    if layer.pool:
        height, width, channels = layer.image
        geometry = ConvLayer("", height, width, channels, channels, layer.kernel,
                             layer.stride, layer.padding, pad_end=layer.pad_end)
        feature = read(layer.a).reshape(layer.image)
        products = sum_pool_reference(geometry, feature, layer.pad_value) if layer.pool_sum \
            else pool_reference(geometry, feature)
    else:
        activations = read(layer.a)
        geometry = layer_geometry(layer)
        if layer.image:  # the im2col rows the DMA reads, (ky, kx, channel) order
            pad_h, pad_w = geometry.padding_hw
            image = np.pad(activations.reshape(layer.image),
                           ((pad_h, pad_h), (pad_w, pad_w), (0, 0)),
                           constant_values=layer.pad_value)
            activations = im2col_rows(image, geometry)
        weights = read(layer.b)
        if layer.groups > 1:  # packed per N block: the dense (K, N) matrix it stands for
            weights = unpack_weight_matrix(geometry, layer.group_cols, weights).reshape(
                -1, layer.n)
        if layer.batch:  # one product per item: (batch, M, K) times (batch, K, N)
            items = layer.batch
            products = np.concatenate([matmul(a, b, "i8") for a, b in zip(
                activations.reshape(items, -1, layer.k),
                weights.reshape(items, layer.k, layer.n), strict=True)])
        else:
            products = matmul(activations, weights, "i8")
    table = None if layer.table is None else tuple(int(v) for v in read(layer.table))
    epilogue = EpilogueConfig(layer.pre, layer.post, layer.zero_point, layer.low, layer.high,
                              table)
    residual = None if layer.residual is None else read(layer.residual)
    if residual is not None and residual.dtype != np.int8 and layer.residual_add is not None \
            and layer.residual_add.rows:  # the per-row values: the rows' bytes
        residual = np.asarray(residual, "<i4").view(np.int8).reshape(layer.m, -1)
    if residual is not None and layer.residual_order is not None:  # read in that order
        residual = residual.reshape(layer.m, -1)[list(layer.residual_order)]
    scale = None if layer.scale is None else read(layer.scale)
    rows = epilogue_reference(products, read(layer.bias)[None, :], read(layer.multiplier),
                              epilogue, residual=layer.residual_add, residual_rows=residual,
                              scale=scale)
    if layer.row_order is None:
        return rows
    stored = np.empty_like(rows)  # row i stored at row row_order[i]
    stored[list(layer.row_order)] = rows
    return stored


def im2col_rows(image: Array, layer: ConvLayer) -> Array:
    """(output pixels, kh·kw·channels): each output pixel's window of an (H, W, C) map
    (padded already), `layer`'s kernel, strides and dilation, taps in (ky, kx) order and
    channels innermost."""
    height, width, channels = image.shape
    layer = replace(layer, height=height, width=width, padding=0, padding_w=None)
    (out_h, out_w), (stride_h, stride_w) = layer.out_size, layer.stride_hw
    taps = [image[dy:dy + stride_h * (out_h - 1) + 1:stride_h,
                  dx:dx + stride_w * (out_w - 1) + 1:stride_w]
            for dy, dx in (layer.tap_offset(ky, kx) for ky in range(layer.kernel_hw[0])
                           for kx in range(layer.kernel_hw[1]))]
    stacked: Array = np.stack(taps, axis=2).reshape(out_h * out_w, layer.taps * channels)
    return stacked


def interpret(lowered: LoweredProgram, weights: dict[str, Array], inputs: dict[str, Array],
              main_rows: int) -> Iterator[tuple[int, Array]]:
    """Run the lowered program; after each instruction, its index and the values it wrote
    (`main_rows`: the main array's rows, see _execute)."""
    buffers: dict[str, Array] = {}
    for name, buffer in lowered.buffers.items():
        numpy_type = DTYPES[buffer.dtype].numpy
        if buffer.kind == CONSTANT:
            buffers[name] = np.ascontiguousarray(constant_array(buffer, weights)).reshape(-1)
        elif buffer.kind == INPUT:
            assert buffer.tensor is not None
            buffers[name] = np.ascontiguousarray(inputs[buffer.tensor], numpy_type).reshape(-1)
        else:
            buffers[name] = np.zeros(buffer.elements, numpy_type)

    def read(view: View) -> Array:
        return _load(view, buffers[view.buffer])

    def dtype(view: View) -> str:
        return lowered.buffers[view.buffer].dtype

    for index, instruction in enumerate(lowered.instructions):
        dst = instruction.writes()
        store_view(dst, buffers[dst.buffer], _execute(instruction, read, dtype, main_rows))
        yield index, read(dst)


def lowered_result(lowered: LoweredProgram, weights: dict[str, Array],
                   inputs: dict[str, Array], main_rows: int) -> list[Array]:
    """Every instruction's written values, in order (the interpreter's trace)."""
    return [values for _, values in interpret(lowered, weights, inputs, main_rows)]


def lowered_output(lowered: LoweredProgram, reference: list[Array]) -> Array | None:
    """The program's result (flat) from the interpreter's trace of `lowered`, or None when
    no instruction writes it (the result is an input or a constant as it is)."""
    writers = [i for i, instruction in enumerate(lowered.instructions)
               if instruction.writes().buffer == lowered.output]
    if not writers:
        return None
    output = lowered.buffers[lowered.output]
    flat = np.zeros(output.elements, DTYPES[output.dtype].numpy)
    for index in writers:
        store_view(lowered.instructions[index].writes(), flat, reference[index])
    return flat


# -- comparing ---------------------------------------------------------------------------


def _differences(expected: Array, actual: Array, dtype: str, exact: bool = False) -> Array:
    """Where actual differs from expected: f32 within the tolerance unless `exact` (then
    bit for bit, any NaN equal to any NaN)."""
    if dtype == "f32" and exact:
        both_nan = np.isnan(expected) & np.isnan(actual)
        different_bits = (np.asarray(expected, np.float32).view(np.uint32)
                          != np.asarray(actual, np.float32).view(np.uint32))
        return np.asarray(different_bits & ~both_nan)
    if dtype == "f32":
        close = np.isclose(actual, expected, rtol=F32_TOLERANCE, atol=F32_TOLERANCE,
                           equal_nan=True)
        return np.asarray(~close)
    return np.asarray(expected != actual)


def compare(lowered: LoweredProgram, expected: list[Array], actual: list[Array],
            expected_by: str, actual_by: str) -> Divergence | None:
    for index, instruction in enumerate(lowered.instructions):
        dst = instruction.writes()
        dtype = lowered.buffers[dst.buffer].dtype
        wrong = _differences(expected[index], actual[index], dtype,
                             exact=isinstance(instruction, ArrayGemm))
        if wrong.any():
            element = tuple(int(i) for i in np.argwhere(wrong)[0])
            return Divergence(index, instruction, dst.buffer, element,
                              expected[index][element].item(), actual[index][element].item(),
                              expected_by, actual_by, int(wrong.sum()))
    return None


def read_trace(lowered: LoweredProgram, trace: Path, who: str) -> list[Array]:
    """The values each instruction wrote, from a --trace directory of whole buffers."""
    values = []
    for index, instruction in enumerate(lowered.instructions):
        dst = instruction.writes()
        path = trace / f"{index:04d}.npy"
        try:
            whole = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            raise GlensideError(f"the {who} wrote no trace for instruction [{index}] "
                                f"({path}): is OUTDIR/{PROGRAM} the program compiled there?"
                                ) from None
        buffer = lowered.buffers[dst.buffer]
        if whole.shape != buffer.shape or whole.dtype != DTYPES[buffer.dtype].numpy:
            raise GlensideError(f"the {who}'s trace of instruction [{index}] is not buffer "
                                f"{dst.buffer} ({buffer.dtype} {buffer.shape}): "
                                f"OUTDIR/{PROGRAM} no longer lowers to the compiled program")
        values.append(_load(dst, whole.reshape(-1)))
    return values


# -- running the three -------------------------------------------------------------------


@dataclass
class DiffResult:
    instructions: int
    compared: list[str]  # the executions compared with the interpreter
    divergence: Divergence | None
    lowering_error: str | None = None  # the lowered result against the program's result

    @property
    def agree(self) -> bool:
        return self.divergence is None and self.lowering_error is None

    def lines(self) -> list[str]:
        if self.divergence is not None:
            return self.divergence.lines()
        if self.lowering_error is not None:
            return [f"every instruction agrees ({', '.join([INTERPRETER, *self.compared])}), "
                    f"but the lowered program's result differs from the interpreter's on "
                    f"the program itself: {self.lowering_error}"]
        plural = "s" if self.instructions != 1 else ""
        return [f"all {self.instructions} instruction{plural} agree: "
                f"{', '.join([INTERPRETER, *self.compared])}"]


def load_compiled(outdir: Path) -> tuple[Program, LoweredProgram]:
    path = outdir / PROGRAM
    if not path.is_file():
        raise GlensideError(f"{path} not found: is {outdir} a `glensidec compile` output "
                            "directory (compiled by this version)?")
    program = read_program(path)
    # lowered as the compiler did: the binary32 array takes the f32 products, the int8 one i8
    manifest = Manifest.read(outdir)
    options = LowerOptions(array_dtype="f32" if manifest.config.is_float else "i8")
    lowered = lower_program(program, check_program(program), options)
    accel = manifest.accel_config()
    if accel is not None:  # compiled with --accel: the same layers on the accelerator
        lowered = fuse_for_accelerator(lowered, data.load_weights(program), accel)
    return program, lowered


def _run_c(outdir: Path, inputs: tuple[str, ...], trace: Path) -> None:
    make = subprocess.run(["make", "-s", "-C", str(outdir), "model_trace"],
                          capture_output=True, text=True)
    if make.returncode != 0:
        raise GlensideError(f"building {outdir}/model_trace failed:\n{make.stderr.strip()}")
    trace.mkdir()
    run = subprocess.run([str(outdir / "model_trace"), *inputs, "--trace", str(trace),
                          "-o", str(trace / "output.npy")], capture_output=True, text=True)
    if run.returncode != 0:
        errors = [line.removeprefix("model: ") for line in run.stderr.splitlines()
                  if line.startswith("model: ")]
        raise GlensideError(f"{outdir}/model_trace failed: "  # the first says why
                            f"{errors[0] if errors else run.stderr.strip()}")


def rtl_runs(outdir: Path) -> list[str]:
    """The co-simulation runs' names: one run, or with several arrays one run per array
    (each has its own array's calls on the RTL, the others' on the C model)."""
    configs = Manifest.read(outdir).configs
    if len(configs) == 1:
        return [RTL]
    return [f"{RTL} ({config.rows}x{config.cols} array on the RTL)" for config in configs]


ACCEL_RTL = "RTL (accelerator layers on ws_accel)"


def _check_accel_rtl(outdir: Path, inputs: tuple[str, ...], trace: Path) -> None:
    """The accelerator layers' run (glensidec.cosim.cocotb_program): the program on the
    accelerator's C model, traced, and each layer again on ws_accel from the same memory;
    an error names the first layer whose RTL bytes or cycles differ."""
    trace.mkdir()
    args = [f"{name}={Path(path).resolve()}" if equals else name
            for name, equals, path in (item.partition("=") for item in inputs)]
    result = cosimulate(outdir, [*args, "--trace", str(trace), "-o",
                                 str(trace / "output.npy")], library=TRACE_LIBRARY,
                        arrays=[], accel=True)
    for layer in result.calls:
        if not (layer["data_ok"] and layer["cycles_ok"]):
            what = "other bytes than the C model" if not layer["data_ok"] else "other cycles"
            raise GlensideError(
                f"accelerator layer {layer['accel']}: ws_accel's RTL gives {what} "
                f"({layer['simulated_cycles']} cycles, predicted {layer['predicted_cycles']})")
    if result.status != 0:
        cause = program_error(outdir / "cosim_run.log")
        raise GlensideError(f"the co-simulated program failed: {cause or result.status}")


def _run_rtl(outdir: Path, inputs: tuple[str, ...], trace: Path, array: int) -> None:
    trace.mkdir()
    args = [f"{name}={Path(path).resolve()}" if equals else name
            for name, equals, path in (item.partition("=") for item in inputs)]
    result = cosimulate(outdir, [*args, "--trace", str(trace), "-o",
                                 str(trace / "output.npy")], library=TRACE_LIBRARY,
                        arrays=[array])
    if result.status != 0:
        cause = program_error(outdir / "cosim_run.log")
        raise GlensideError(f"the co-simulated program failed: {cause or result.status}")


def diff(outdir: Path, inputs: tuple[str, ...], rtl: bool = False) -> DiffResult:
    """Run the interpreter, the C program and (`rtl`) the co-simulation; compare."""
    outdir = outdir.resolve()
    program, lowered = load_compiled(outdir)
    weights = data.load_weights(program)
    given = data.load_inputs(program, data.parse_input_options(inputs, "an input"),
                             data.DIFF_INPUTS)
    main_rows = Manifest.read(outdir).config.rows
    reference = lowered_result(lowered, weights, given, main_rows)
    runs = rtl_runs(outdir) if rtl else []
    compared = [C_PROGRAM, *runs]
    with tempfile.TemporaryDirectory(prefix="glensidec-diff-") as scratch:
        _run_c(outdir, inputs, Path(scratch) / "c")
        traces = {C_PROGRAM: read_trace(lowered, Path(scratch) / "c", C_PROGRAM)}
        # every run traced apart: one trace would keep only the last run's RTL calls
        for array, run in enumerate(runs):
            _run_rtl(outdir, inputs, Path(scratch) / f"rtl{array}", array)
            traces[run] = read_trace(lowered, Path(scratch) / f"rtl{array}", run)
        if rtl and lowered.accel_layers():  # each layer on ws_accel = the C model's bytes
            _check_accel_rtl(outdir, inputs, Path(scratch) / "accel")
            traces[ACCEL_RTL] = read_trace(lowered, Path(scratch) / "accel", ACCEL_RTL)
            compared.append(ACCEL_RTL)
    divergences = [d for who, trace in traces.items()
                   if (d := compare(lowered, reference, trace, INTERPRETER, who)) is not None]
    if divergences:
        first = min(divergences, key=lambda d: d.index)
        lets = {c_identifier(name): name for name in program.names.values()}
        return DiffResult(len(lowered.instructions), compared,
                          replace(first, let=lets.get(first.buffer)))
    return DiffResult(len(lowered.instructions), compared, None,
                      _lowering_error(program, lowered, weights, given, reference))


def _lowering_error(program: Program, lowered: LoweredProgram, weights: dict[str, Array],
                    inputs: dict[str, Array], reference: list[Array]) -> str | None:
    """Whether the lowered program's result is the program's (None) or how it differs."""
    expected = evaluate_result(program, data.all_tensors(program, inputs),
                               check_program(program))
    assert isinstance(expected, np.ndarray)
    actual = lowered_output(lowered, reference)
    if actual is None:  # the result is an input or a constant as it is
        return None
    actual = actual.reshape(expected.shape)
    wrong = _differences(expected, actual, lowered.buffers[lowered.output].dtype)
    if not wrong.any():
        return None
    element = tuple(int(i) for i in np.argwhere(wrong)[0])
    return (f"element {element}: program {expected[element].item()}, "
            f"lowered {actual[element].item()}")
