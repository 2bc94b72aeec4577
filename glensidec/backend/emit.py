"""Stage 7, emit: a lowered, planned program as a standalone C program in a directory.

`emit_directory(program, lowered, plan, outdir, config, weights)` writes, through the Jinja2
templates in `templates/`:

    model.c / model.h          model_run(constants, mutable_io, activations) and the layout
    array_runtime.c / .h       gs_array_gemm(): the one seam every array call goes through
    main.c, Makefile           `make` builds ./model; ./model NAME=FILE.npy … -o OUT.npy
    weights.bin                the constants region
    report.html, report.json   per-instruction cycles, MACs and utilization, with plots
    program.gs, program.npz    the program compiled and its weights (what `glensidec diff` runs)

The directory appears atomically (glensidec.outputs): everything is written into a temporary
sibling that is renamed at the end, so a failure never leaves a half-written OUTDIR, and
OUTDIR must be new, empty or glensidec's own earlier output (recorded in its manifest). Output is
deterministic: compiling the same program twice gives byte-identical files.
"""

from __future__ import annotations

import functools
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import jinja2
import numpy as np

from glensidec.backend.lower import (
    ACTIVATION,
    CONSTANT,
    INPUT,
    OUTPUT,
    AccelLayer,
    ArrayGemm,
    Copy,
    Dot,
    Fill,
    Fold,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    Reduce,
    RequantizePerChannel,
    Softmax,
    constant_array,
)
from glensidec.backend.plan import MemoryPlan
from glensidec.backend.report import ReportData, layout_text, report_data
from glensidec.backend.report import render_files as report_files
from glensidec.backend.views import Axis, View, canonical, refine
from glensidec.hardware.accel import ResidualConfig
from glensidec.hardware.accel_native import FIELDS
from glensidec.hardware.array import ArrayConfig, array_for, gemm_cycles
from glensidec.hardware.commands import AccelConfig, default_epilogue_lanes
from glensidec.lang.constructs import ComputeKind
from glensidec.lang.data import aliases_text, input_aliases, npz_bytes
from glensidec.lang.dtypes import DTYPES, Array, integer_range, lookup_table
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import ComputeOp, Program
from glensidec.outputs import write_directory
from glensidec.resources import resource_dir

PROGRAM_FILE = "program.gs"
PROGRAM_WEIGHTS = "program.npz"  # the weights program.gs declares
TEMPLATES = ("model.c", "model.h", "array_runtime.c", "array_runtime.h", "host_gemm.c",
             "host_gemm.h", "main.c", "Makefile")
ACCEL_TEMPLATES = ("accel_runtime.c", "accel_runtime.h")  # when the program has accel layers


def predicted_cycles(lowered: LoweredProgram, config: ArrayConfig,
                     more_arrays: tuple[ArrayConfig, ...] = ()) -> int:
    """Σ cycles of the array calls, each on its own array (`config` first, then
    `more_arrays`: a program may use several sizes)."""
    arrays = (config, *more_arrays)
    return sum(gemm_cycles(array_for(call.rows, call.cols, arrays), call.m, call.k, call.n)
               for call in lowered.array_calls())


# -- names ----------------------------------------------------------------------------

# Every buffer in the C code is `t_` + its name. No identifier the code generator, the
# templates, the runtimes or the headers they include declares starts with `t_` (loop
# indices are i0…, k0…, p0…; locals x, t0…, acc, g; functions and macros gs_*, GS_*,
# model_*, MODEL_*), so a user's name can meet none of them: `main`, `int`, `p1`, `printf`
# and `gs_b` are buffers t_main, t_int, t_p1, t_printf and t_gs_b.
BUFFER_PREFIX = "t_"


def printable(text: str) -> str:
    """`text` for a comment line of the C files and the Makefile: a file name may hold a
    newline, which would end the comment (and break the Makefile)."""
    return "".join(char if char.isprintable() else "?" for char in text)


def c_string(text: str) -> str:
    """`text` as a C string literal: printable ASCII as is, every other byte (and the quote,
    backslash and question mark, which could start a trigraph) as an octal escape."""
    plain = set(range(0x20, 0x7F)) - {ord('"'), ord("\\"), ord("?")}
    return '"' + "".join(chr(b) if b in plain else f"\\{b:03o}"
                         for b in text.encode("utf-8")) + '"'


def c_name(buffer: str) -> str:
    """The C identifier of the buffer named `buffer` (its name is already C characters)."""
    return BUFFER_PREFIX + buffer


# -- loop nests -----------------------------------------------------------------------

Loop = tuple[str, int]  # (index variable, trip count)


# Below this many iterations an OpenMP fork/join costs more than the loop itself.
PARALLEL_MIN_TRIPS = 1 << 14


@dataclass
class Nest:
    """Loops walking several views in lockstep, and each view's element index in C."""

    loops: list[Loop]
    indices: list[str]
    first_writes: bool = False  # the outermost loop moves the first view (the destination)

    def parallel(self, work: int) -> bool:
        """Whether the outermost loop may run as `omp parallel for`: it writes a distinct
        slice of the destination per iteration, and the nest does enough work."""
        return self.first_writes and bool(self.loops) and self.loops[0][1] > 1 \
            and work >= PARALLEL_MIN_TRIPS


def nest(views: Sequence[View], first: int, count: int, prefix: str,
         with_offset: bool = True) -> Nest:
    """Loops over logical dims [first, first+count) of every view (the lowerer made sure
    their axes refine into one nest); an inner nest leaves the offset to the outer one."""
    loops: list[Loop] = []
    terms: list[list[tuple[str, int]]] = [[] for _ in views]
    for dim in range(first, first + count):
        refined = refine([view.dims[dim] for view in views])
        assert refined is not None, "operands the lowerer should have copied"
        for position, axis in enumerate(refined[0]):
            var = f"{prefix}{len(loops)}"
            loops.append((var, axis.size))
            for operand, pieces in enumerate(refined):
                if pieces[position].stride:
                    terms[operand].append((var, pieces[position].stride))
    indices = [_index(view.offset if with_offset else 0, operand_terms) for view, operand_terms in
               zip(views, terms, strict=True)]
    first_writes = bool(loops) and any(var == loops[0][0] for var, _ in terms[0])
    return Nest(loops, indices, first_writes)


def _wrap_nest(loops: Nest, body: list[str]) -> list[str]:
    """An elementwise nest: parallel over its outer loop when that is safe and worth it."""
    return _wrap(loops.loops, body, parallel=loops.parallel(_trips(loops.loops)))


def _trips(loops: list[Loop]) -> int:
    return math.prod(size for _, size in loops)


def _index(offset: int, terms: list[tuple[str, int]]) -> str:
    parts = [str(offset)] if offset else []
    parts += [var if stride == 1 else f"{var} * {stride}" for var, stride in terms]
    return " + ".join(parts) or "0"


def _wrap(loops: list[Loop], body: list[str], indent: int = 2,
          parallel: bool = False) -> list[str]:
    """`for` loops around body lines; a bare block when there are no loops. `parallel`
    marks the outermost loop GS_PARALLEL_FOR (omp parallel for under make THREADS=N)."""
    if not loops:
        return [" " * indent + "{", *(" " * (indent + 2) + line for line in body),
                " " * indent + "}"]
    lines = [" " * indent + "GS_PARALLEL_FOR"] if parallel else []
    for depth, (var, size) in enumerate(loops):
        loop = f"for (long {var} = 0; {var} < {size}; ++{var}) {{"
        lines.append(" " * (indent + 2 * depth) + loop)
    inner = indent + 2 * len(loops)
    lines += [" " * inner + line for line in body]
    lines += [" " * (indent + 2 * depth) + "}" for depth in reversed(range(len(loops)))]
    return lines


# -- instructions ---------------------------------------------------------------------


class _Renderer:
    def __init__(self, lowered: LoweredProgram, arrays: tuple[ArrayConfig, ...]):
        self.lowered = lowered
        self.arrays = arrays  # the program's arrays, the main one first

    def dtype(self, view: View) -> str:
        return self.lowered.buffer_of(view).dtype

    def at(self, view: View, index: str) -> str:
        return f"{c_name(view.buffer)}[{index}]"

    def load(self, name: str, view: View, index: str) -> str:
        return f"const {DTYPES[self.dtype(view)].c_type} {name} = {self.at(view, index)};"

    def render(self, position: int, instruction: Instruction) -> str:
        method = getattr(self, "_" + type(instruction).__name__.lower())
        what, lines = method(instruction)
        header = f"  /* [{position}] {what}: {instruction.note} */"
        dst = instruction.writes().buffer
        buffer = self.lowered.buffers[dst]
        trace = (f"  GS_TRACE_BUFFER({position}, \"{dst}\", {c_name(dst)}, {buffer.nbytes}, "
                 f"\"{DTYPES[buffer.dtype].npy_descr}\", \"{_shape_text(buffer.shape)}\");")
        return "\n".join([header, *lines, trace])

    def _copy(self, copy: Copy) -> tuple[str, list[str]]:
        loops = nest([copy.dst, copy.src], 0, len(copy.dst.dims), "i")
        body = [f"{self.at(copy.dst, loops.indices[0])} = {self.at(copy.src, loops.indices[1])};"]
        return f"copy into {copy.dst.buffer}", _wrap_nest(loops, body)

    def _fill(self, fill: Fill) -> tuple[str, list[str]]:
        dtype = self.dtype(fill.dst)
        value = str(fill.value) if dtype != "f32" else "0.0f"
        if fill.minimum:
            value = DTYPES[dtype].c_min
        loops = nest([fill.dst], 0, len(fill.dst.dims), "i")
        body = [f"{self.at(fill.dst, loops.indices[0])} = {value};"]
        what = f"fill {fill.dst.buffer}" + (
            f" with {fill.value}, the zero point an accelerator layer pads with"
            if fill.value else "")
        return what, _wrap_nest(loops, body)

    def _map(self, instruction: Map) -> tuple[str, list[str]]:
        loops = nest([instruction.dst, instruction.src], 0, len(instruction.dst.dims), "i")
        expression = map_expression(instruction.op.name, instruction.op.params, "x",
                                    self.dtype(instruction.src), self.dtype(instruction.dst))
        body = [self.load("x", instruction.src, loops.indices[1]),
                f"{self.at(instruction.dst, loops.indices[0])} = {expression};"]
        lines = _wrap_nest(loops, body)
        if instruction.op.name == "lookup":  # the table, in a block of its own
            lines = ["{", *lookup_declaration(instruction.op.params),
                     *("  " + line for line in lines), "}"]
        return f"{instruction.dst.buffer} = {instruction.op.name}", lines

    def _fused(self, fused: Fused) -> tuple[str, list[str]]:
        loops = nest([fused.dst, *fused.leaves], 0, len(fused.dst.dims), "i")
        body = [self.load(f"x{leaf}", view, index) for leaf, (view, index)
                in enumerate(zip(fused.leaves, loops.indices[1:], strict=True))]
        dtypes = [self.dtype(view) for view in fused.leaves]

        def value(operand: int) -> tuple[str, str]:  # (C name, dtype)
            if operand >= 0:
                return f"x{operand}", dtypes[operand]
            step = -operand - 1
            return f"t{step}", fused.steps[step].dtype

        for position, step in enumerate(fused.steps):
            operands = [value(operand) for operand in step.operands]
            if isinstance(step.op, ComputeOp):
                (name, source), = operands
                expression = map_expression(step.op.name, step.op.params, name, source,
                                            step.dtype)
            elif step.op == "requantize-per-channel":
                pre, post, zero_point = step.params
                expression = (f"gs_requantize((int64_t){operands[0][0]}, "
                              f"(int64_t){operands[1][0]}, {pre}, {post}, {zero_point})")
            else:
                expression = operands[0][0]
                for name, _ in operands[1:]:
                    expression = fold_expression(step.op, expression, name, step.dtype)
            body.append(f"const {DTYPES[step.dtype].c_type} t{position} = {expression};")
        body.append(f"{self.at(fused.dst, loops.indices[0])} = t{len(fused.steps) - 1};")
        names = " -> ".join(step.op.name if isinstance(step.op, ComputeOp) else step.op
                            for step in fused.steps)
        return f"{fused.dst.buffer} = {names}, fused in one loop", _wrap_nest(loops, body)

    def _fold(self, fold: Fold) -> tuple[str, list[str]]:
        loops = nest([fold.dst, *fold.members], 0, len(fold.dst.dims), "i")
        dtype = self.dtype(fold.dst)
        loads = [self.load(f"x{i}", m, index) for i, (m, index) in
                 enumerate(zip(fold.members, loops.indices[1:], strict=True))]
        expression = "x0"
        for position in range(1, len(fold.members)):
            expression = fold_expression(fold.op, expression, f"x{position}", dtype)
        body = [*loads, f"{self.at(fold.dst, loops.indices[0])} = {expression};"]
        return f"{fold.dst.buffer} = {fold.op}", _wrap_nest(loops, body)

    def _requantizeperchannel(self, instruction: RequantizePerChannel) -> tuple[str, list[str]]:
        dst, members = instruction.dst, instruction.members
        loops = nest([dst, *members], 0, len(dst.dims), "i")
        expression = (f"gs_requantize((int64_t)x0, (int64_t)x1, {instruction.pre}, "
                      f"{instruction.post}, {instruction.zero_point})")
        body = [self.load("x0", members[0], loops.indices[1]),
                self.load("x1", members[1], loops.indices[2]),
                f"{self.at(dst, loops.indices[0])} = {expression};"]
        return f"{dst.buffer} = requantize-per-channel", _wrap_nest(loops, body)

    def _reduction(self, dst: View, sources: Sequence[View], reduce_rank: int,
                   accumulate: str, setup: str, finish: str) -> list[str]:
        """Outer loops over dst, an accumulator, inner loops over the reduced dims.
        `accumulate` uses {0}, {1}… for the sources' elements; `finish` uses `acc`."""
        outer = nest([dst, *sources], 0, len(dst.dims), "i")
        inner = nest(sources, len(dst.dims), reduce_rank, "k", with_offset=False)
        update = [self.load(f"x{i}", s, _join(outer_index, inner_index))
                  for i, (s, outer_index, inner_index) in enumerate(
                      zip(sources, outer.indices[1:], inner.indices, strict=True))]
        update.append(accumulate.format(*(f"x{i}" for i in range(len(sources)))))
        accumulation = _wrap(inner.loops, update, 0) if inner.loops else update
        body = [setup, *accumulation, f"{self.at(dst, outer.indices[0])} = {finish};"]
        work = _trips(outer.loops) * _trips(inner.loops)
        return _wrap(outer.loops, body, parallel=outer.parallel(work))

    def _reduce(self, reduce: Reduce) -> tuple[str, list[str]]:
        source, result = self.dtype(reduce.src), self.dtype(reduce.dst)
        count = int(np.prod(reduce.src.shape[len(reduce.dst.dims):]))
        setup, accumulate, finish = reduce_parts(reduce.op, source, result, count)
        lines = self._reduction(reduce.dst, [reduce.src], reduce.reduce_rank, accumulate, setup,
                                finish)
        return f"{reduce.dst.buffer} = {reduce.op}", lines

    def _dot(self, dot: Dot) -> tuple[str, list[str]]:
        dtype = self.dtype(dot.members[0])
        gemm = host_gemm(dot) if dtype == "f32" else None
        if gemm is not None:
            first = gemm.dot.members[1 if gemm.swapped else 0]
            constant = self.lowered.buffer_of(first).kind == CONSTANT
            return (f"{dot.dst.buffer} = dot-product on the host, as a GEMM (M={gemm.m} "
                    f"N={gemm.n} K={gemm.k}{f' x{gemm.batch}' if gemm.batch > 1 else ''})",
                    gemm.lines(constant))
        if dtype == "f32":
            product = " * ".join(f"(double){{{i}}}" for i in range(len(dot.members)))
            setup, finish = "double acc = 0.0;", "(float)acc"
        else:
            # Products and sums modulo 2^32: unsigned arithmetic wraps without UB.
            product = " * ".join(f"(uint32_t){{{i}}}" for i in range(len(dot.members)))
            setup, finish = "uint32_t acc = 0u;", "gs_wrap_i32((int64_t)acc)"
        lines = self._reduction(dot.dst, dot.members, dot.reduce_rank, f"acc += {product};",
                                setup, finish)
        return f"{dot.dst.buffer} = dot-product on the host", lines

    def _softmax(self, softmax: Softmax) -> tuple[str, list[str]]:
        rank = len(softmax.dst.dims)
        outer = nest([softmax.dst, softmax.src], 0, rank - 1, "i")
        inner = nest([softmax.dst, softmax.src], rank - 1, 1, "k", with_offset=False)
        dst_at, src_at = (self.at(view, _join(o, i)) for view, o, i in
                          zip((softmax.dst, softmax.src), outer.indices, inner.indices,
                              strict=True))
        load = f"const double x = (double){src_at};"
        body = ["double top = -INFINITY, total = 0.0;",
                *_wrap(inner.loops, [load, "if (x > top || isnan(x)) top = x;"], 0),
                *_wrap(inner.loops, [load, "total += exp(x - top);"], 0),
                *_wrap(inner.loops, [load, f"{dst_at} = (float)(exp(x - top) / total);"], 0)]
        work = _trips(outer.loops) * _trips(inner.loops)
        return f"{softmax.dst.buffer} = softmax", _wrap(outer.loops, body,
                                                        parallel=outer.parallel(work))

    def _accellayer(self, layer: AccelLayer) -> tuple[str, list[str]]:
        commands = self.lowered.buffer_of(layer.commands).shape[0]
        added = layer.residual_add or ResidualConfig()
        fields = (f'"{layer.name}", {layer.m}, {layer.k}, {layer.n}, {layer.input_base}, '
                  f"{layer.weight_base}, {layer.output_base}, {layer.pre}, {layer.post}, "
                  f"{layer.zero_point}, {layer.low}, {layer.high}, {commands}, {layer.cycles}LL, "
                  f"{layer.input_elements}, {layer.residual_base}, {added.self_multiplier}, "
                  f"{added.multiplier}, {added.offset}, {added.requantize_multiplier}, "
                  f"{added.pre}, {added.post}, {added.zero_point}, {added.low}, {added.high}, "
                  f"{int(added.early)}, {int(added.product)}, {int(added.rows)}, "
                  f"{layer.output_pitch or layer.n}, "
                  f"{int(layer.row_order is not None or layer.residual_order is not None)}, "
                  f"{layer.batch}")
        residual = "NULL" if layer.residual is None else pointer(layer.residual)
        if layer.residual is not None and self.lowered.buffer_of(layer.residual).dtype != "i8":
            residual = f"(const int8_t *)({residual})"  # per-row values: the rows' bytes
        weights = "NULL" if layer.pool else pointer(layer.b)
        table = "NULL" if layer.table is None else pointer(layer.table)
        scale = "NULL" if layer.scale is None else pointer(layer.scale)
        call = (f"gs_accel_run(&layer, {pointer(layer.commands)}, {pointer(layer.a)}, "
                f"{weights}, {pointer(layer.bias)}, {pointer(layer.multiplier)}, {table}, "
                f"{scale}, {residual}, {pointer(layer.dst)})")
        product = f"clip(requantize({layer.a.buffer} . {layer.b.buffer} + bias))"
        if layer.pool:
            product = (f"{'sum' if layer.pool_sum else 'max'}-pool {layer.kernel}x"
                       f"{layer.kernel} stride {layer.stride} of {layer.a.buffer}")
            if layer.pool_sum:
                scaled = "" if layer.scale is None else f" * {layer.scale.buffer}[channel]"
                product = f"clip(requantize(({product} + bias){scaled}))"
        if layer.layout is not None:
            product = f"{layer.a.buffer}: {layout_text(layer.layout)}, {layer.n}-byte rows"
        if layer.table is not None:
            product = f"{layer.table.buffer}[{product}]"
        if layer.residual is not None and layer.residual_add is not None and \
                layer.residual_add.rows:
            product = f"{product}, each row scaled by its values in {layer.residual.buffer}"
        elif layer.residual is not None:
            product = f"clip(requantize({product} * a + {layer.residual.buffer} * b + c))"
        what = (f"{layer.name} = {product} on the accelerator (M={layer.m} K={layer.k} "
                f"N={layer.n}, {commands} commands, {layer.cycles} cycles)")
        return what, ["  {", f"    static const gs_accel_layer layer = {{{fields}}};",
                      f"    if ({call} != 0)", "      return 1;", "  }"]

    def _arraygemm(self, gemm: ArrayGemm) -> tuple[str, list[str]]:
        call = (f"if (gs_array_gemm({gemm.m}, {gemm.k}, {gemm.n}, {pointer(gemm.a)}, "
                f"{pointer(gemm.b)}, NULL, {pointer(gemm.dst)}) != 0)")
        what = (f"{gemm.dst.buffer} = {gemm.a.buffer} . {gemm.b.buffer} on the systolic array "
                f"(M={gemm.m} K={gemm.k} N={gemm.n})")
        if len(self.arrays) == 1:
            return what, ["  " + call, "    return 1;"]
        array = array_for(gemm.rows, gemm.cols, self.arrays)
        what = what.replace("the systolic array", f"the {array.rows}x{array.cols} array")
        return what, [f"  gs_array_use(GS_ARRAY_{array.rows}X{array.cols});", "  " + call,
                      "    return 1;"]


def pointer(view: View) -> str:
    """A contiguous operand as a C pointer expression."""
    name = c_name(view.buffer)
    return name if not view.offset else f"{name} + {view.offset}"


def _shape_text(shape: tuple[int, ...]) -> str:
    """numpy's spelling of a shape, for a .npy header: (2, 3), (4,) or ()."""
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _join(first: str, second: str) -> str:
    if first == "0":
        return second
    return first if second == "0" else f"{first} + {second}"


# -- f32 products through the host GEMM (host_gemm.c) --------------------------------

# Below this many multiply-adds the plain loop nest is as fast and builds faster.
GEMM_MIN_WORK = 1 << 15

# An axis of the GEMM's iteration space: its size and its stride in each operand.
GemmAxis = tuple[int, int, int, int]  # size, dst stride, A stride, B stride


@dataclass
class HostGemm:
    """A two-member f32 dot-product as ``batch`` GEMMs C (M x N) = A (M x K) . B (K x N).

    Outer axes that only A walks are M (weights: output channels), those only B walks are
    N (im2col columns: output pixels), the rest are batch axes; the reduced axes are K.
    Operands that are already row-major matrices are used in place; the others are packed
    (im2col) into scratch buffers first, and C is copied out when dst is not row-major."""

    dot: Dot
    swapped: bool  # C^T = B^T . A^T: the second member is A (a thin N becomes the wide M)
    m_axes: list[GemmAxis]
    n_axes: list[GemmAxis]
    k_axes: list[GemmAxis]
    batch_axes: list[GemmAxis]

    @property
    def m(self) -> int:
        return math.prod(axis[0] for axis in self.m_axes)

    @property
    def n(self) -> int:
        return math.prod(axis[0] for axis in self.n_axes)

    @property
    def k(self) -> int:
        return math.prod(axis[0] for axis in self.k_axes)

    @property
    def batch(self) -> int:
        return math.prod(axis[0] for axis in self.batch_axes)

    def cost(self) -> int:
        """Rough work of this orientation, in multiply-adds: the products the 16-wide
        micro-tile computes (a thin N pads it) plus the elements packed or copied out (a
        packing pass is memory-bound: an element costs tens of vectorized multiply-adds)."""
        dst, (a, b) = self.dot.dst, self.dot.members
        which_a, which_b = (3, 2) if self.swapped else (2, 3)
        a, b = (b, a) if self.swapped else (a, b)
        packed = 0
        if self._in_place(a, which_a, self.m_axes, self.k_axes)[0] is None:
            packed += self.m * self.k
        if self._in_place(b, which_b, self.k_axes, self.n_axes)[0] is None:
            packed += self.k * self.n
        if self._in_place(dst, 1, self.m_axes, self.n_axes)[0] is None:
            packed += self.m * self.n
        padded_n = -(-self.n // 16) * 16
        return self.batch * (self.m * self.k * padded_n + 40 * packed)

    def lines(self, a_is_constant: bool) -> list[str]:
        """The C block; `a_is_constant`: A is a weight, packed once if used in place."""
        dst, (a, b) = self.dot.dst, self.dot.members
        which_a, which_b = 2, 3
        if self.swapped:
            a, b, which_a, which_b = b, a, 3, 2
        m, n, k, batch = self.m, self.n, self.k, self.batch
        body: list[str] = []
        a_ptr, lda = self._in_place(a, which_a, self.m_axes, self.k_axes)
        b_ptr, ldb = self._in_place(b, which_b, self.k_axes, self.n_axes)
        c_ptr, ldc = self._in_place(dst, 1, self.m_axes, self.n_axes)
        if a_ptr is None:
            body.append(f"float *const gs_a = gs_host_buffer(0, {batch * m * k});")
            a_ptr, lda = "gs_a", k
        if b_ptr is None:
            body.append(f"float *const gs_b = gs_host_buffer(1, {batch * k * n});")
            b_ptr, ldb = "gs_b", n
        if c_ptr is None:
            body.append(f"float *const gs_c = gs_host_buffer(2, {batch * m * n});")
            c_ptr, ldc = "gs_c", n
        missing = [name for name in ("gs_a", "gs_b", "gs_c") if any(
            line.startswith(f"float *const {name} ") for line in body)]
        if missing:
            body.append(f"if ({' || '.join(f'{name} == NULL' for name in missing)})")
            body.append("  return 1;")
        if a_ptr == "gs_a":
            body += _pack(self.batch_axes + self.m_axes + self.k_axes, "gs_a", a, which_a)
        if b_ptr == "gs_b":
            body += _pack(self.batch_axes + self.k_axes + self.n_axes, "gs_b", b, which_b)
        constant = int(a_is_constant and a_ptr != "gs_a")
        call = (f"gs_gemm_f32({m}, {n}, {k}, {a_ptr}, {lda}, {b_ptr}, {ldb}, {c_ptr}, {ldc}, "
                f"{constant})")
        if batch > 1:
            call = call.replace(f"{a_ptr}, ", f"{a_ptr} + g * {m * k}, ", 1)
            call = call.replace(f"{b_ptr}, ", f"{b_ptr} + g * {k * n}, ", 1)
            call = call.replace(f"{c_ptr}, ", f"{c_ptr} + g * {m * n}, ", 1)
            body += [f"for (long g = 0; g < {batch}; ++g)", f"  if ({call} != 0)",
                     "    return 1;"]
        else:
            body += [f"if ({call} != 0)", "  return 1;"]
        if c_ptr == "gs_c":
            body += _unpack(self.batch_axes + self.m_axes + self.n_axes, dst)
        return _wrap([], body)

    def _in_place(self, view: View, which: int, rows: list[GemmAxis], columns: list[GemmAxis]
                  ) -> tuple[str | None, int]:
        """(pointer, leading dimension) when `view` already is a row-major rows x columns
        matrix with unit column stride; (None, 0) when it must be packed."""
        if self.batch > 1:
            return None, 0
        row_axes = canonical(Axis(axis[0], axis[which]) for axis in rows)
        column_axes = canonical(Axis(axis[0], axis[which]) for axis in columns)
        if len(row_axes) > 1 or len(column_axes) > 1:
            return None, 0
        if column_axes and column_axes[0].stride != 1:
            return None, 0
        if column_axes and row_axes and row_axes[0].stride < column_axes[0].size:
            return None, 0
        leading = row_axes[0].stride if row_axes else max(1, math.prod(a[0] for a in columns))
        return pointer(view), leading


def host_gemm(dot: Dot) -> HostGemm | None:
    """`dot` as GEMMs when it is a product of two f32 operands worth a GEMM, else None."""
    if len(dot.members) != 2:
        return None
    dst, (a, b) = dot.dst, dot.members
    outer: list[GemmAxis] = []
    for dim in range(len(dst.dims)):
        refined = refine([dst.dims[dim], a.dims[dim], b.dims[dim]])
        if refined is None:
            return None
        outer += [(d.size, d.stride, x.stride, y.stride) for d, x, y in zip(*refined, strict=True)]
    k_axes: list[GemmAxis] = []
    for dim in range(len(dst.dims), len(dst.dims) + dot.reduce_rank):
        refined = refine([a.dims[dim], b.dims[dim]])
        if refined is None:
            return None
        k_axes += [(x.size, 0, x.stride, y.stride) for x, y in zip(*refined, strict=True)]
    m_axes = [axis for axis in outer if axis[2] and not axis[3]]
    n_axes = [axis for axis in outer if axis[3] and not axis[2]]
    batch_axes = [axis for axis in outer if axis not in m_axes and axis not in n_axes]
    # The orientation that packs less and pads the 4 x 16 micro-tile less: a dense layer's
    # weights (N x K as written) are used in place as A when C is computed transposed.
    gemm = min((HostGemm(dot, False, m_axes, n_axes, k_axes, batch_axes),
                HostGemm(dot, True, n_axes, m_axes, k_axes, batch_axes)),
               key=HostGemm.cost)
    if gemm.k < 4 or gemm.m * gemm.n * gemm.k * gemm.batch < GEMM_MIN_WORK:
        return None
    return gemm


def _pack(axes: list[GemmAxis], packed: str, view: View, which: int) -> list[str]:
    """Copy `view` into the row-major buffer `packed` in the order of `axes` (im2col)."""
    loops, view_terms, packed_terms = _gemm_loops(axes, which)
    source = f"{c_name(view.buffer)}[{_index(view.offset, view_terms)}]"
    body = [f"{packed}[{_index(0, packed_terms)}] = {source};"]
    return _wrap(loops, body, 0)


def _unpack(axes: list[GemmAxis], dst: View) -> list[str]:
    """Copy the row-major result gs_c (in the order of `axes`) into `dst`."""
    loops, dst_terms, packed_terms = _gemm_loops(axes, 1)
    body = [f"{c_name(dst.buffer)}[{_index(dst.offset, dst_terms)}] = "
            f"gs_c[{_index(0, packed_terms)}];"]
    return _wrap(loops, body, 0)


def _gemm_loops(axes: list[GemmAxis], which: int
                ) -> tuple[list[Loop], list[tuple[str, int]], list[tuple[str, int]]]:
    loops: list[Loop] = []
    view_terms: list[tuple[str, int]] = []
    packed_terms: list[tuple[str, int]] = []
    inner = math.prod(axis[0] for axis in axes)
    for position, axis in enumerate(axes):
        inner //= axis[0]
        if axis[0] == 1:
            continue
        var = f"p{position}"
        loops.append((var, axis[0]))
        if axis[which]:
            view_terms.append((var, axis[which]))
        packed_terms.append((var, inner))
    return loops, view_terms, packed_terms


# -- per-dtype expressions ------------------------------------------------------------


def _float(value: int | float | str) -> str:
    return f"((float){float(value)!r})"


def map_expression(op: str, params: Sequence[int | float | str], x: str, source: str,
                   result: str) -> str:
    """The C expression for one element of an elementwise unary compute."""
    integer = source != "f32"
    if op == "relu":
        return f"({x} > 0 ? {x} : 0)" if integer else f"({x} < 0.0f ? 0.0f : {x})"
    if op == "negative":
        return f"gs_wrap_{source}(-(int64_t){x})" if integer else f"(-{x})"
    if op == "sqrt":
        return f"sqrtf({x})"
    if op in ("exp", "tanh", "erf"):
        return f"{op}f({x})"
    if op == "sigmoid":
        return f"(1.0f / (1.0f + expf(-{x})))"
    if op == "clip":
        return clip_expression(x, params, source)
    if op == "cast":
        return cast_expression(x, source, result)
    if op == "lookup":  # `table`: declared by lookup_declaration around the loops
        return f"table[(int){x} + 128]"
    assert op == "requantize", op
    multiplier, pre, post, zero_point = (int(p) for p in params)
    return f"gs_requantize((int64_t){x}, {multiplier}, {pre}, {post}, {zero_point})"


def lookup_declaration(params: Sequence[int | float | str]) -> list[str]:
    """`static const int8_t table[256]`, written from dtypes.lookup_table itself (so C and
    the interpreter index the same integers), 16 entries a line."""
    function, in_scale, in_zero_point, out_scale, out_zero_point = params
    table = lookup_table(str(function), float(in_scale), int(in_zero_point), float(out_scale),
                         int(out_zero_point))
    rows = [", ".join(str(int(v)) for v in table[i:i + 16]) for i in range(0, 256, 16)]
    return [f"  /* {function}: entry q + 128 = round({function}({in_scale!r} * (q - "
            f"{in_zero_point})) / {out_scale!r}) + {out_zero_point}, saturated */",
            "  static const int8_t table[256] = {",
            *(f"    {row}," for row in rows[:-1]), f"    {rows[-1]}", "  };"]


def clip_expression(x: str, params: Sequence[int | float | str], dtype: str) -> str:
    """Clamp to [low, high]; a bound at the dtype's own limit is no comparison at all
    (gcc rejects an always-false `x > 127` on an int8_t under -Wextra -Werror)."""
    if dtype == "f32":
        low, high = (_float(p) for p in params)
        return f"({x} < {low} ? {low} : ({x} > {high} ? {high} : {x}))"
    low_value, high_value = (int(p) for p in params)
    dtype_low, dtype_high = integer_range(dtype)
    expression = x
    if high_value < dtype_high:
        expression = f"({expression} > {high_value} ? {high_value} : {expression})"
    if low_value > dtype_low:
        expression = f"({x} < {low_value} ? {low_value} : {expression})"
    return expression


def cast_expression(x: str, source: str, result: str) -> str:
    if source == result:
        return x
    if result == "f32":
        return f"(float){x}"
    if source == "f32":
        return f"gs_sat_{result}(gs_round_f32({x}))"
    return f"gs_sat_{result}((int64_t){x})"


def fold_expression(op: str, left: str, right: str, dtype: str) -> str:
    """One fold step, rounded (f32: exact in double, then to float) or wrapped (ints)."""
    operator = ComputeKind.FOLD[op]
    if dtype == "f32":
        return f"(float)((double){left} {operator} (double){right})"
    if op == "elementwise-div":
        return f"gs_wrap_{dtype}(gs_div_i64({left}, {right}))"
    # int64 holds every i32 sum, difference and product exactly; then wrap to the dtype.
    return f"gs_wrap_{dtype}((int64_t){left} {operator} (int64_t){right})"


def reduce_parts(op: str, source: str, result: str, count: int) -> tuple[str, str, str]:
    """(accumulator set-up, per-element update using {0}, final value from acc)."""
    if op == "reduce-sum":
        if source == "f32":
            return "double acc = 0.0;", "acc += (double){0};", "(float)acc"
        return "uint32_t acc = 0u;", "acc += (uint32_t){0};", "gs_wrap_i32((int64_t)acc)"
    if op == "reduce-max":
        if source == "f32":
            return ("float acc = -INFINITY;", "if ({0} > acc || isnan({0})) acc = {0};", "acc")
        setup = f"{DTYPES[source].c_type} acc = {DTYPES[source].c_min};"
        return setup, "if ({0} > acc) acc = {0};", "acc"
    assert op == "reduce-mean", op
    if source == "f32":
        return "double acc = 0.0;", "acc += (double){0};", f"(float)(acc / {count}.0)"
    return ("int64_t acc = 0;", "acc += {0};", f"gs_wrap_{result}(gs_mean_i64(acc, {count}))")


# -- files ----------------------------------------------------------------------------


def _declarations(lowered: LoweredProgram, plan: MemoryPlan) -> list[dict[str, object]]:
    used = {view.buffer for instruction in lowered.instructions
            for view in (instruction.writes(), *instruction.reads())}
    intervals = {interval.name: interval for interval in plan.intervals}
    sections: list[dict[str, object]] = []
    regions = ((CONSTANT, "constants (weights.bin)", "constants", plan.constants),
               (INPUT, "inputs (placeholders)", "mutable_io", plan.mutable),
               (OUTPUT, "the output (placeholder)", "mutable_io", plan.mutable),
               (ACTIVATION, "activations (offsets from the memory planner)", "activations",
                plan.activations.offsets))
    for kind, title, region, offsets in regions:
        lines = []
        for buffer in lowered.buffers.values():
            if buffer.kind != kind or buffer.name not in used:
                continue
            const = "const " if kind in (CONSTANT, INPUT) else ""
            ctype = DTYPES[buffer.dtype].c_type
            line = (f"{const}{ctype} *const {c_name(buffer.name)} = ({const}{ctype} *)({region} + "
                    f"{offsets[buffer.name]});")
            shape = "x".join(map(str, buffer.shape)) or "scalar"
            note = f" /* {buffer.dtype} {shape}"
            if buffer.name in intervals:
                live = intervals[buffer.name]
                note += f", live [{live.start}, {live.end}]"
            lines.append(line + note + " */")
        if lines:
            sections.append({"title": title, "lines": lines})
    return sections


def _placeholders(lowered: LoweredProgram, plan: MemoryPlan) -> list[dict[str, object]]:
    rows = []
    for name, offset in plan.mutable.items():
        buffer = lowered.buffers[name]
        rows.append({"name": name, "tensor": buffer.tensor or name, "offset": offset,
                     "role": "output" if buffer.kind == OUTPUT else "input",
                     "shape": list(buffer.shape), "descr": DTYPES[buffer.dtype].npy_descr,
                     "dtype": buffer.dtype,
                     "element_size": DTYPES[buffer.dtype].size})
    return rows


def _quantization_rows(program: Program, lowered: LoweredProgram,
                       placeholders: list[dict[str, object]]) -> list[dict[str, object]] | None:
    """Per placeholder, the program's (quantized …) of an input or (quantized-output …) of
    the result as C literals (scale "0.0": none); None when the program declares none (its
    main.c then has no float path at all)."""
    rows: list[dict[str, object]] = []
    for row in placeholders:
        buffer = lowered.buffers[str(row["name"])]
        if buffer.kind == OUTPUT:
            quantization = program.output_quantization
        else:
            tensor = program.tensors.get(buffer.tensor or "")
            quantization = tensor.quantization if tensor is not None else None
        rows.append({"tensor": row["tensor"],
                     "scale": "0.0" if quantization is None else repr(float(quantization.scale)),
                     "zero_point": 0 if quantization is None else quantization.zero_point})
    return rows if any(row["scale"] != "0.0" for row in rows) else None


def weights_blob(lowered: LoweredProgram, plan: MemoryPlan, weights: dict[str, Array]) -> bytes:
    """The constants region: every constant at its planned offset, little-endian."""
    blob = bytearray(plan.constants_size)
    for name, offset in plan.constants.items():
        array = constant_array(lowered.buffers[name], weights)
        raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
        blob[offset:offset + len(raw)] = raw
    return bytes(blob)


def render_files(program: Program, lowered: LoweredProgram, plan: MemoryPlan,
                 config: ArrayConfig, weights: dict[str, Array],
                 more_arrays: tuple[ArrayConfig, ...] = (),
                 accel: AccelConfig | None = None,
                 report: ReportData | None = None) -> dict[str, bytes]:
    """OUTDIR's files but the compiled program's (`report`: the report's rows, when the
    caller has made them: `report_data` of `program`'s name)."""
    arrays = (config, *more_arrays)
    runtime = accel if lowered.accel_layers() else None  # the accelerator's C runtime
    renderer = _Renderer(lowered, arrays)
    blocks = [renderer.render(index, instruction)
              for index, instruction in enumerate(lowered.instructions)]
    placeholders = _placeholders(lowered, plan)
    renamed = {name: original for original, name in input_aliases(program).items()
               if original not in program.tensors}  # (load_inputs' rule: a name wins)
    for row in placeholders:  # OUTDIR/model takes an input's ONNX name too
        original = renamed.get(str(row["tensor"])) if row["role"] == "input" else None
        row["onnx_name"] = "NULL" if original is None else c_string(original)
    constants = weights_blob(lowered, plan, weights)
    context = {
        "source": printable(Path(program.path).name), **asdict(config),
        "f32": config.is_float,
        "arrays": [asdict(array) for array in arrays],
        "constants_size": plan.constants_size, "mutable_size": plan.mutable_size,
        # main.c refuses a weights.bin of another size or checksum (a corrupt file)
        "constants_crc32": f"0x{zlib.crc32(constants):08x}",
        "activations_size": plan.activations.used, "lower_bound": plan.activations.lower_bound,
        "efficiency": plan.activations.efficiency, "strategy": plan.activations.strategy,
        "naive": plan.naive_activations,
        "predicted_cycles": predicted_cycles(lowered, config, more_arrays),
        "array_calls": len(lowered.array_calls()),
        "instruction_count": len(lowered.instructions),
        "placeholders": placeholders, "output_name": lowered.output,
        "quantization": _quantization_rows(program, lowered, placeholders),
        "max_rank": max([1, *(len(lowered.buffers[name].shape) for name in plan.mutable)]),
        "declarations": _declarations(lowered, plan), "blocks": blocks,
        "accel": runtime, "fields": FIELDS,
    }
    environment = _c_templates()
    names = TEMPLATES + (ACCEL_TEMPLATES if runtime is not None else ())
    files = {name: environment.get_template(name + ".j2").render(context).encode()
             for name in names}
    files["weights.bin"] = constants
    files["cosim.json"] = cosim_manifest(program, lowered, arrays, accel).encode()
    if report is None:
        report = report_data(Path(program.path).name, lowered, config, more_arrays)
    files.update(report_files(report))
    return files


@functools.cache
def _c_templates() -> jinja2.Environment:
    """One environment per process: it keeps the compiled templates (compiling them took
    a quarter of a second, as long as the rest of emitting a small program)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False)


def manifest_array(config: ArrayConfig) -> dict[str, int | str]:
    """The array's fields for cosim.json; `element` only for the binary32 array, so int8
    programs' manifests stay as they were (ArrayConfig defaults it to "int")."""
    fields = asdict(config)
    if not config.is_float:
        del fields["element"]
    return fields


def cosim_manifest(program: Program, lowered: LoweredProgram,
                   arrays: tuple[ArrayConfig, ...], accel: AccelConfig | None = None) -> str:
    """What `make sim` needs to know: the array, and every call the program makes to it.

    Float products cannot run on the int8 array; they are listed so co-simulation can say
    so instead of silently simulating nothing. ("element" appears for the binary32 array.)
    A program on several arrays lists them all under "arrays" (the main one is "array")
    and each call's array (its index there) as a fourth number.
    """
    float_products = sum(
        1 for instruction in lowered.instructions
        if isinstance(instruction, Dot)
        and lowered.buffer_of(instruction.dst).dtype == "f32")
    manifest = {
        "source": Path(program.path).name,
        "array": manifest_array(arrays[0]),
        "array_calls": [[call.m, call.k, call.n] for call in lowered.array_calls()],
        "float_products": float_products,
        "inputs": [decl.name for decl in program.inputs()],
    }
    if len(arrays) > 1:
        manifest["arrays"] = [manifest_array(array) for array in arrays]
        manifest["array_calls"] = [
            [call.m, call.k, call.n, arrays.index(array_for(call.rows, call.cols, arrays))]
            for call in lowered.array_calls()]
    if accel is not None:  # compile --accel: `glensidec diff` lowers again the same way
        manifest["accelerator"] = accel_manifest(accel)
        manifest["accel_layers"] = [[layer.m, layer.k, layer.n, layer.cycles]
                                    for layer in lowered.accel_layers()]
    return json.dumps(manifest, indent=2) + "\n"


def accel_manifest(accel: AccelConfig) -> dict[str, int]:
    """The accelerator's sizes, as `accel_config_for` takes them (the epilogue's lanes, the
    rows a DMA write carries and the weight rows a cycle only when not the default: a
    default compile's manifest is what it was)."""
    lanes = accel.epilogue_lanes
    return {"rows": accel.rows, "cols": accel.cols, "acc_depth": accel.acc_depth,
            "scratchpad_bytes": accel.memory.scratchpad_bytes,
            "bus_bytes": accel.memory.bus_bytes, "latency": accel.memory.latency,
            **({} if lanes == default_epilogue_lanes(accel.cols) else
               {"epilogue_lanes": lanes}),
            **({} if accel.memory.write_rows == 1 else
               {"write_rows": accel.memory.write_rows}),
            **({} if accel.weight_load_rows == 1 else
               {"weight_load_rows": accel.weight_load_rows})}


# What `make` and `make sim` create in OUTDIR: ours too, so compiling again into a built
# directory is allowed (see glensidec.outputs).
TRACE_LIBRARY = "libmodel_cosim_trace.so"  # the traced co-simulation (glensidec diff --rtl)
BUILD_PRODUCTS = ("model", "model_asan", "model_trace", "libmodel_cosim.so", TRACE_LIBRARY,
                  ".build-flags",
                  "sim_build",
                  "sim_output.npy", "cosim_report.json", "cosim_build.log", "cosim_run.log")


def write_directory_atomically(outdir: Path, files: dict[str, bytes],
                               force: bool = False) -> None:
    """Write OUTDIR whole or not at all, only where glensidec.outputs allows it."""
    write_directory(outdir, files, force=force, products=BUILD_PRODUCTS)


def emit_directory(program: Program, lowered: LoweredProgram, plan: MemoryPlan, outdir: Path,
                   config: ArrayConfig, weights: dict[str, Array], force: bool = False,
                   more_arrays: tuple[ArrayConfig, ...] = (),
                   accel: AccelConfig | None = None,
                   report: ReportData | None = None) -> None:
    """Write the C program of a lowered, planned `program` to `outdir` (see the module
    docstring); `force`: replace glensidec's own files in an OUTDIR that also holds others;
    `more_arrays`: the program's further arrays, when it uses several; `report`: the
    report's rows, when the caller has them."""
    files = render_files(program, lowered, plan, config, weights, more_arrays, accel, report)
    files.update(program_files(program, weights))
    write_directory_atomically(outdir, files, force)


def program_files(program: Program, weights: dict[str, Array]) -> dict[str, bytes]:
    """program.gs, the program compiled, and program.npz, a copy of its weights, which
    program.gs names: `glensidec diff` lowers the program again and runs it on them (the
    reference for weights.bin). Copied rather than pointed to, so that OUTDIR's bytes do not
    depend on where OUTDIR, the program or the working directory are, and a moved OUTDIR
    still diffs."""
    declared = program.weights()
    if not all(decl.name in weights for decl in declared):
        return {}
    tensors = {name: replace(decl, source=PROGRAM_WEIGHTS, key=None)
               if decl.role == "weight" else decl for name, decl in program.tensors.items()}
    text = aliases_text(program) + format_program(replace(program, tensors=tensors))
    files = {PROGRAM_FILE: text.encode()}
    if declared:
        files[PROGRAM_WEIGHTS] = npz_bytes({decl.name: weights[decl.name] for decl in declared})
    return files
