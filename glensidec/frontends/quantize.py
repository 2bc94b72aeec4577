"""Profile-guided post-training int8 quantization, in Glow's style (docs/import.md).

1. **Profile**: run the float program in the interpreter over calibration data and record the
   min/max of every computed tensor (keyed by the term's position in the program), with a
   hash of the program so a profile is never applied to a changed one.
2. **Quantize**: walk the float program once, children first, and give every term an integer
   counterpart:
   - `Q8`: an i8 tensor with `real = scale·(q − zero_point)`;
   - `Acc`: an i32 accumulator with `real = scale·(acc + offset)`, where `scale` and `offset`
     are arrays of the tensor's full shape (per-channel scales, biases and zero-point
     corrections are all just entries of them); data movement applies to them as to the
     tensor, a constant add changes `offset`, a constant multiply changes `scale`;
   - `Const`: a value computed from weights only (folded at quantization time);
   - `Host`: an f32 tensor computed after dequantization (softmax).
   An `Acc` becomes `Q8` ("materialized") where something needs i8: one integer add of its
   `offset` (bias and zero-point corrections, i32) and one requantization, with a single
   multiplier (`requantize`) or one per channel (`requantize-per-channel`).
The result is an ordinary integer program: matmuls and convolutions stay dot-products over
cartesian products (or pairs, depthwise) of i8 operands, accumulating in i32.

This module holds the walk (`Quantizer`: state, data movement, accumulators to i8 and back)
and the entry points; the values are defined in `quant_values`, and the integer form of each
compute kind is a function in `quant_compute` (the `COMPUTE_TRANSLATORS` table).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.frontends import builders as B
from glensidec.frontends.calibration import (
    Profile,
    check_profile,
    load_profile,
    profile,
    require_finite,
    save_profile,
    term_keys,
)
from glensidec.frontends.qparams import (
    QParams,
    activation_params,
    integer_multipliers,
)
from glensidec.frontends.quant_compute import COMPUTE_TRANSLATORS, SoftmaxRows
from glensidec.frontends.quant_values import (
    ACC_MOVEMENT,
    DATA_MOVEMENT,
    Q8,
    Acc,
    Array,
    Const,
    Host,
    Int,
    Pair,
    Unsupported,
    Value,
    no_raw_zeros,
)
from glensidec.lang import constructs as K
from glensidec.lang.data import aliases_text, input_array, load_weights, npz_bytes
from glensidec.lang.dtypes import DTYPES
from glensidec.lang.expand import expand_program
from glensidec.lang.interp import apply_term, evaluate_all
from glensidec.lang.syntax import format_program, read_program
from glensidec.lang.terms import (
    ComputeOp,
    Program,
    Symbol,
    TensorDecl,
    Term,
    postorder,
)
from glensidec.lang.typecheck import (
    AccessType,
    TypeTable,
    access_type,
    check_program,
    infer_access,
    require_access_result,
)
from glensidec.outputs import (
    check_can_create,
    check_sibling_files,
    check_writable_file,
    file_digests,
    write_file,
)

# -- how the program's header writes a zero point ----------------------------------------------


def _plus(params: QParams) -> str:
    return f"{'-' if params.zero_point < 0 else '+'} {abs(params.zero_point)}"


def _minus(params: QParams) -> str:
    return f"{'+' if params.zero_point < 0 else '-'} {abs(params.zero_point)}"


# -- quantized values --------------------------------------------------------------------------


@dataclass
class Layer:
    """A float term and the i8 term that stands for it in the quantized program."""

    name: str
    float_term: Term
    quant_term: Term
    params: QParams


@dataclass
class QuantizedProgram:
    """The integer program, its weight arrays and what a user needs to feed and read it."""

    program: Program
    weights: dict[str, Array]
    inputs: dict[str, QParams]
    output: QParams | None  # None: the output is f32 (computed on the host)
    layers: list[Layer]
    profile: Profile
    options: dict[str, bool]
    weight_scales: dict[str, Array] = field(default_factory=dict)  # i8 weight → its scales
    aliases: str = ""  # the float program's `; onnx-input` lines: its inputs' ONNX names

    def quantize_inputs(self, inputs: dict[str, Array]) -> dict[str, Array]:
        """Float inputs quantized; integer inputs (token ids) as the program declares them."""
        tensors = self.program.tensors
        return {name: self.inputs[name].quantize(array) if name in self.inputs else
                input_array(tensors[name], np.asarray(array), f"input '{name}'")
                for name, array in inputs.items()}

    def dequantize_output(self, output: Array) -> Array:
        return self.output.dequantize(output) if self.output is not None else output

    def metadata(self) -> dict[str, Any]:
        def params(p: QParams) -> dict[str, float | int]:
            return {"scale": p.scale, "zero_point": p.zero_point}

        return {
            "format": "glensidec-quantized", "version": 1,
            "float_program_sha256": self.profile.program_sha256,
            "options": self.options,
            "inputs": {name: params(p) for name, p in self.inputs.items()},
            "output": params(self.output) if self.output else {"dtype": "f32"},
            "layers": [{"name": layer.name, **params(layer.params)} for layer in self.layers],
        }

    def header(self) -> str:
        lines = ["; int8 program made by glensidec quantize (Glow-style post-training, "
                 f"{'per-channel' if self.options['per_channel'] else 'per-tensor'} weights, "
                 f"{'symmetric' if self.options['symmetric'] else 'asymmetric'} activations)."]
        for name, p in self.inputs.items():
            lines.append(f"; input {name}: q = clip(round(x / {p.scale!r}) {_plus(p)}, "
                         f"-128, 127)")
        if self.output is not None:
            lines.append(f"; output: real = {self.output.scale!r} * (q {_minus(self.output)})")
        else:
            lines.append("; output: f32 (dequantized on the host before softmax)")
        lines.append("; (declared below with (quantized …) and (quantized-output …): run, the "
                     "C model and make sim take float32 inputs; --dequantize gives float32)")
        return "\n".join(lines) + "\n" + self.aliases


# -- the quantizer -------------------------------------------------------------------------------


class Quantizer:
    def __init__(self, program: Program, weights: dict[str, Array], prof: Profile,
                 per_channel: bool, symmetric: bool, weights_file: str):
        self.program = program
        self.float_types = check_program(program)
        self.float_weights = weights
        self.keys = term_keys(program)
        self.profile = prof
        self.per_channel = per_channel
        self.symmetric = symmetric
        self.weights_file = weights_file
        self.tensors: dict[str, TensorDecl] = {}
        self.weights: dict[str, Array] = {}
        self.types: TypeTable = {}
        self.values: dict[Term, Value] = {}
        self.names: dict[Term, str] = {}
        self.taken: set[str] = {d.name for d in program.inputs()}
        self.layers: dict[Term, Layer] = {}
        self.inputs: dict[str, QParams] = {}
        self.quantized_weights: dict[str, tuple[Term, Array]] = {}
        self.weight_scales: dict[str, Array] = {}
        self.host_tail = output_tail(program.root)
        self.materialized: dict[tuple[Term, Term, bytes, bytes], Q8] = {}
        self.joined_into = _concatenated_parts(program.root)
        # softmax's p → its e and Σe, for a product that divides after it (quant_compute)
        self.softmax_rows: dict[Term, SoftmaxRows] = {}

    # -- helpers --------------------------------------------------------------------------
    def qtype(self, term: Term) -> AccessType:
        return infer_access(term, self.tensors, self.types)

    def ftype(self, term: Term) -> AccessType:
        return access_type(self.float_types, term)

    def label(self, term: Term) -> str:
        if term.op == "access-tensor":
            return str(term.args[0])
        return self.program.names.get(term, f"{term.op} {self.keys[term]}")

    def fresh(self, wanted: str) -> str:
        name, counter = wanted, 2
        while name in self.taken or name in K.CONSTRUCTS or name in K.COMPUTE_TYPES:
            name, counter = f"{wanted}_{counter}", counter + 1
        self.taken.add(name)
        return name

    def params_of(self, term: Term) -> QParams:
        # A tensor only a concatenation reads takes the concatenation's parameters, so the
        # layer that makes it requantizes straight to them (one rounding) and the
        # concatenation is copies alone, which the accelerator writes in place.
        while term in self.joined_into:
            term = self.joined_into[term]
        key = self.keys[term]
        if key not in self.profile.ranges:
            raise GlensideError(f"the profile has no range for {self.label(term)}")
        return activation_params(*self.profile.ranges[key], self.symmetric)

    def add_weight(self, wanted: str, array: Array, dtype: str) -> Term:
        name = self.fresh(wanted)
        self.tensors[name] = TensorDecl(name, tuple(array.shape), dtype, "weight",
                                        self.weights_file)
        self.weights[name] = np.ascontiguousarray(array, dtype=DTYPES[dtype].numpy)
        return B.tensor(name)

    def spread(self, array: Array, like: AccessType, dtype: str, wanted: str) -> Term:
        """A constant of `like`'s full shape, stored at its smallest broadcastable shape."""
        reduced = minimal_broadcast(array).astype(DTYPES[dtype].numpy)
        reduced = reduced.reshape((1,) * (len(like.full) - reduced.ndim) + reduced.shape)
        kept = tuple(d for d in reduced.shape if d > 1)
        if not kept:
            value = reduced.reshape(()).item()
            source = B.op("access-literal", B.op("literal", value, Symbol(dtype)))
        else:
            source = self.add_weight(wanted, reduced.reshape(kept), dtype)
        rank = len(like.shape)
        shaped = B.reshape(source, reduced.shape[:rank], reduced.shape[rank:])
        if reduced.shape == like.full:
            return shaped
        return B.broadcast(shaped, like.shape, like.item)

    def scalar_like(self, value: int | float, dtype: str, like: AccessType) -> Term:
        return self.spread(np.array(value), like, dtype, "scalar")

    def name(self, term: Term, float_term: Term, suffix: str = "") -> None:
        if float_term in self.program.names and term not in self.names and term.op not in (
                "access-tensor", "access-literal"):
            self.names[term] = self.fresh(self.program.names[float_term] + suffix)

    def record(self, float_term: Term, q: Q8) -> None:
        if float_term not in self.layers:
            self.layers[float_term] = Layer(self.label(float_term), float_term, q.term,
                                            q.params)

    # -- the walk -----------------------------------------------------------------------
    def run(self) -> tuple[Term, Q8 | Host]:
        for term in postorder(self.program.root):
            if K.CONSTRUCTS[term.op].result != K.ACCESS:
                continue
            try:
                value = self.quantize_term(term)
            except Unsupported as error:
                raise GlensideError(f"quantize: {self.label(term)}: {error}") from None
            self.values[term] = value
            if isinstance(value, Q8):
                self.name(value.term, term)
                if term.op == "compute":
                    self.record(term, value)
        root = self.values[self.program.root]
        if isinstance(root, Acc):
            root = self.materialize(root, root.origin)
        if isinstance(root, Q8):
            try:
                no_raw_zeros(root)
            except Unsupported as error:
                raise GlensideError(f"quantize: the result: {error}") from None
        if isinstance(root, Int):  # nothing in float to quantize
            raise GlensideError("quantize: the program's result is computed from integer "
                                "inputs alone: it has nothing to quantize (compile or run "
                                "it as it is)")
        if not isinstance(root, (Q8, Host)):
            raise GlensideError("quantize: the program's result does not depend on an input")
        return root.term, root

    def quantize_term(self, term: Term) -> Value:
        children = [self.values[c] for c in term.children() if c in self.values]
        if term.op == "access-tensor":
            return self.leaf(term)
        if all(isinstance(c, Const) for c in children):
            values = {c.term: c.array for c in children if isinstance(c, Const)}
            return Const(apply_term(term, self.float_types, values, self.float_weights), term)
        if any(isinstance(c, Int) for c in children):
            return self.on_integers(term, children)
        translate = TRANSLATORS.get(term.op)
        if translate is None:
            raise Unsupported(f"{term.op} is not supported")
        return translate(self, term, children)

    def leaf(self, term: Term) -> Value:
        decl = self.program.tensors[str(term.args[0])]
        if decl.role == "weight":
            return Const(self.float_weights[decl.name], term)
        if decl.dtype != "f32":  # integer ids stay integers
            self.tensors[decl.name] = decl
            return Int(term)
        params = self.params_of(term)
        # The program itself says how a float input is quantized (`run` and the C accept
        # float32 for it).
        self.tensors[decl.name] = TensorDecl(decl.name, decl.shape, "i8", "input",
                                             quantization=params)
        self.inputs[decl.name] = params
        q = Q8(term, params, term)
        self.record(term, q)
        return q

    def on_integers(self, term: Term, children: list[Value]) -> Value:
        """A term over integer tensors (ids) computes what it computed in the float program;
        its constants become integer weights. Cast to f32, an integer tensor whose
        calibrated values fit i8 is exactly the i8 tensor of scale 1 and zero point 0 (the
        embedding's one-hot rows, docs/import.md)."""
        op = term.args[0] if term.op == "compute" else None
        if isinstance(op, ComputeOp) and op.name == "cast" and op.params == ("f32",):
            low, high = self.profile.ranges.get(self.keys[term], (math.inf, -math.inf))
            if not -128 <= low <= high <= 127:
                raise Unsupported(f"an integer tensor cast to f32 takes values {low}..{high} "
                                  "on the calibration data; only -128..127 (exact in i8)")
            (operand,) = children
            assert isinstance(operand, Int)
            cast = B.compute("cast", operand.term, "i8")
            return Q8(cast, QParams(1.0, 0), cast)
        rebuilt = []
        for child in term.children():
            if K.CONSTRUCTS[child.op].result != K.ACCESS:
                continue
            value = self.values.get(child)
            if isinstance(value, Const):
                kind = self.ftype(child)
                if kind.dtype == "f32":
                    raise Unsupported(f"{term.op} of integers and floats")
                wanted = self.program.names.get(child, "integers")
                rebuilt.append(self.spread(value.array, kind, kind.dtype, wanted))
            elif isinstance(value, Int):
                rebuilt.append(value.term)
            else:
                raise Unsupported(f"{term.op} of integers and {type(value).__name__}")
        return Int(self.rebuild(term, *rebuilt))

    # -- data movement ------------------------------------------------------------------
    def rebuild(self, term: Term, *children: Term) -> Term:
        replacements = iter(children)
        args = tuple(next(replacements) if isinstance(a, Term) and
                     K.CONSTRUCTS[a.op].result == K.ACCESS else a for a in term.args)
        return Term(term.op, args)

    def move(self, term: Term, child: Value) -> Value:
        if isinstance(child, Acc) and term.op in ACC_MOVEMENT and not _product_moved(term, child):
            return Acc(self.rebuild(term, child.term), self.move_array(term, child.scale),
                       self.move_array(term, child.offset), child.origin, child.fine)
        if isinstance(child, Acc):
            child = self.materialize(child, child.origin)
        if isinstance(child, Host):
            return Host(self.rebuild(term, child.term), child.origin)
        if not isinstance(child, Q8):
            raise Unsupported(f"{term.op} of {type(child).__name__}")
        pad_kind = str(term.args[1]) if term.op == "access-pad" else ""
        return Q8(self.rebuild(term, child.term), child.params, child.base,
                  child.raw_zeros or (pad_kind == "zero-padding" and child.params.zero_point != 0),
                  child.min_padded or pad_kind == "min-padding")

    def move_array(self, term: Term, array: Array) -> Array:
        """Apply a data-movement term to a parameter array of its operand's full shape."""
        child = term.children()[0]
        return apply_term(term, self.float_types, {child: array}, {})

    def concatenate(self, term: Term, left: Value, right: Value) -> Value:
        if isinstance(left, Host) and isinstance(right, Host):
            return Host(self.rebuild(term, left.term, right.term), term)
        target = self.params_of(term)
        if (isinstance(left, Q8) and isinstance(right, Q8) and left.params == right.params
                and not (left.raw_zeros or right.raw_zeros)):
            target = left.params
        parts = [self.to_params(part, target, term) for part in (left, right)]
        joined = self.rebuild(term, parts[0], parts[1])
        return Q8(joined, target, joined)

    def to_params(self, value: Value, target: QParams, origin: Term) -> Term:
        """An i8 term for `value` with exactly the parameters `target`."""
        if isinstance(value, Const):
            return self.add_weight(f"{self.label(origin)}_const", target.quantize(value.array),
                                   "i8")
        if isinstance(value, Q8):
            no_raw_zeros(value)
        if isinstance(value, Q8) and value.params == target:
            return value.term
        if isinstance(value, (Q8, Acc)):
            acc = value if isinstance(value, Acc) else self.widen(value, origin)
            return self.requantize(acc, target).term
        raise Unsupported(f"cannot requantize a {type(value).__name__}")

    # -- compute: the kind's translator (glensidec.frontends.quant_compute) -------------
    def compute(self, term: Term, operand: Value) -> Value:
        op = term.args[0]
        assert isinstance(op, ComputeOp)
        if op.name in K.ComputeKind.FOLD:
            if not isinstance(operand, Pair):
                raise Unsupported(f"{op.name} of more than two members")
        elif isinstance(operand, Pair) and op.name not in K.ComputeKind.DOT:
            raise Unsupported(f"{op.name} of a pair")
        return COMPUTE_TRANSLATORS[op.name](self, term, op, operand)

    def dequantized(self, value: Value) -> Term:
        if isinstance(value, Host):
            return value.term
        if isinstance(value, Acc):
            value = self.materialize(value, value.origin)
        if not isinstance(value, Q8):
            raise Unsupported(f"cannot dequantize a {type(value).__name__}")
        no_raw_zeros(value)
        like = self.qtype(value.term)
        real = B.compute("cast", value.term, "f32")
        if value.params.zero_point:
            zero = self.scalar_like(float(-value.params.zero_point), "f32", like)
            real = B.compute("elementwise-add", B.op("access-pair", real, zero))
        scale = self.scalar_like(value.params.scale, "f32", like)
        return B.compute("elementwise-mul", B.op("access-pair", real, scale))

    # -- i8 to accumulators and back -----------------------------------------------------
    def widen(self, value: Q8, term: Term, boost: int = 1) -> Acc:
        """An i8 tensor as an i32 accumulator, times `boost` (headroom for added constants)."""
        no_raw_zeros(value)
        wide = B.compute("cast", value.term, "i32")
        like = self.qtype(wide)
        if boost != 1:
            wide = B.compute("elementwise-mul", B.op("access-pair", wide,
                                                     self.scalar_like(boost, "i32", like)))
        scale = np.full(like.full, value.params.scale / boost)
        offset = np.full(like.full, -value.params.zero_point * boost, dtype=np.int64)
        return Acc(wide, scale, offset, term)

    def materialize(self, acc: Acc, origin: Term, record: bool = True) -> Q8:
        # An accumulator read by several consumers (SiLU's x and sigmoid(x)) is requantized
        # once: the same term, scale and offset to the same profile give the same i8 value.
        key = (acc.term, origin, acc.scale.tobytes(), acc.offset.tobytes())
        if key not in self.materialized:
            self.materialized[key] = self.requantize(acc, self.params_of(origin))
        q = self.materialized[key]
        if record:
            self.name(q.term, origin)
            self.record(origin, q)
        return q

    def requantize(self, acc: Acc, target: QParams) -> Q8:
        like = self.qtype(acc.term)
        label = self.program.names.get(acc.origin) or f"layer_{self.keys.get(acc.origin, 'x')}"
        term = acc.term
        offset = acc.offset
        if np.any(offset != 0):
            if np.max(np.abs(offset)) >= 2 ** 31:
                raise Unsupported("a bias or zero-point correction does not fit in i32")
            spread = self.spread(offset.astype(np.int32), like, "i32", f"{label}_bias")
            term = B.compute("elementwise-add", B.op("access-pair", term, spread))
        real = minimal_broadcast(acc.scale / target.scale)
        multipliers = integer_multipliers(real)
        if real.size == 1:
            result = B.compute("requantize", term, int(multipliers.values.reshape(-1)[0]),
                               multipliers.pre, multipliers.post, target.zero_point)
        else:
            spread = self.spread(np.broadcast_to(multipliers.values.astype(np.int32),
                                                 like.full), like, "i32",
                                 f"{label}_multiplier")
            result = B.compute("requantize-per-channel", B.op("access-pair", term, spread),
                               multipliers.pre, multipliers.post, target.zero_point)
        self.qtype(result)
        return Q8(result, target, result)


def _product_moved(term: Term, acc: Acc) -> bool:
    """Whether `term` moves an axis of a matrix product's accumulator (Resize's product
    along a middle axis, moved last and back): requantized before the move, its multipliers
    stay on the product's output axis, where the accelerator's epilogue applies them."""
    op = acc.term.args[0] if acc.term.op == "compute" else None
    return (term.op == "access-move-axis" and isinstance(op, ComputeOp)
            and op.name == "dot-product")


def _concatenated_parts(root: Term) -> dict[Term, Term]:
    """Each computed term or concatenation that exactly one concatenation reads (whatever
    else reads it) → that concatenation.

    A part others read too is a dense block's (DenseNet's): each layer concatenates its
    new channels to all the earlier ones, and each concatenation is also read by its own
    layer (a transition's average pool likewise by the next block's first layer). One
    scale for the whole chain (the last one's, whose range holds every earlier one's
    values) makes each concatenation the first channels of the next, so no part is
    requantized and the accelerator writes the block once, in place."""
    readers: dict[Term, set[Term]] = {}
    for term in postorder(root):
        for child in term.children():
            readers.setdefault(child, set()).add(term)
    parts: dict[Term, Term] = {}
    for term, parents in readers.items():
        joins = [parent for parent in parents if parent.op == "access-concatenate"]
        if len(joins) == 1 and term.op in ("compute", "access-concatenate"):
            parts[term] = joins[0]
    return parts


# -- the rewrite walk's translator tables -----------------------------------------------------
# One entry per construct and compute type (tests/test_constructs.py checks none is missing).

Translator = Callable[[Quantizer, Term, list[Value]], Value]
TRANSLATORS: dict[str, Translator] = {
    **{name: lambda q, term, children: Pair(term.op, children[0], children[1])
       for name in K.Group.TUPLE},
    **{name: lambda q, term, children: q.move(term, children[0]) for name in DATA_MOVEMENT},
    "access-concatenate": lambda q, term, children: q.concatenate(term, children[0],
                                                                  children[1]),
    "compute": lambda q, term, children: q.compute(term, children[0]),
}
# Leaves: a tensor is an input (`Quantizer.leaf`) or a weight; a literal is a constant, as is
# every term over constants only.
FROM_CONSTANTS = K.Group.LEAF
# A float program has no array calls yet: the quantized program gets them when compiled.
NOT_QUANTIZED = K.Group.HARDWARE | K.Group.ACCELERATOR


def output_tail(root: Term) -> set[Term]:
    """The program's result and the compute its data movement leads back to: a softmax
    there (a classifier's probabilities) is the output itself and stays in f32."""
    tail, term = {root}, root
    while term.op in DATA_MOVEMENT:
        term = term.children()[0]
        tail.add(term)
    return tail


def minimal_broadcast(array: Array) -> Array:
    """`array` with every axis along which it is constant reduced to size 1."""
    reduced = np.asarray(array)
    for axis in range(reduced.ndim):
        first = reduced.take([0], axis=axis)
        if reduced.shape[axis] > 1 and np.all(reduced == first):
            reduced = first
    return np.ascontiguousarray(reduced)


# -- entry points --------------------------------------------------------------------------------


def quantize(program: Program, calibration: dict[str, Array] | str | Path | Profile,
             per_channel: bool = False, symmetric_activations: bool = False,
             weights_file: str | None = None) -> QuantizedProgram:
    """Quantize a float program; `calibration` is data (dict or .npz) or a saved Profile.

    A Program holds no weight data, so the result carries the program together with its
    weight arrays (`save_quantized` writes both). `weights_file` is the .npz name the
    program's weight declarations refer to (default: `<program stem>.q.npz`).
    """
    require_access_result(program, check_program(program), "quantize")
    program = expand_program(program)  # tuples and conv2d modes become what it knows
    for decl in program.tensors.values():
        # i16/i32 tensors are token ids and their row numbers; i8 means already quantized
        if decl.dtype not in ("f32", "i16", "i32"):
            raise GlensideError(f"quantize takes a float program; {decl.role} '{decl.name}' "
                                f"is {decl.dtype}")
    weights = load_weights(program)
    for name, array in weights.items():
        require_finite(array, f"weight '{name}'")
    if isinstance(calibration, Profile):
        prof = calibration
        check_profile(prof, program, weights)
    else:
        prof = profile(program, calibration)
    stem = Path(program.path).stem
    weights_file = weights_file or f"{stem}.q.npz"
    quantizer = Quantizer(program, weights, prof, per_channel, symmetric_activations,
                          weights_file)
    root, result = quantizer.run()
    # A fused table (SiLU, HardSwish) leaves its gate's table, and any weight only the gate
    # read, out of the program: keep what the result reaches.
    kept = set(postorder(root))
    used = {str(t.args[0]) for t in kept if t.op == "access-tensor"}
    weights_used = {n: d for n, d in quantizer.tensors.items() if d.role == "weight" and n in used}
    tensors = {**{d.name: quantizer.tensors[d.name] for d in program.inputs()}, **weights_used}
    path = str(Path(program.path).with_name(f"{stem}.q.gs"))
    names = {term: name for term, name in quantizer.names.items()}
    output = result.params if isinstance(result, Q8) else None
    quantized = Program(path, tensors, root, names, output)
    check_program(quantized)
    layers = [layer for layer in quantizer.layers.values() if layer.quant_term in kept]
    return QuantizedProgram(quantized, {n: quantizer.weights[n] for n in weights_used},
                            quantizer.inputs, output, layers, prof,
                            {"per_channel": per_channel, "symmetric": symmetric_activations},
                            {n: a for n, a in quantizer.weight_scales.items() if n in used},
                            aliases_text(program))


def save_quantized(quantized: QuantizedProgram, path: str | Path, force: bool = False) -> Path:
    """Write PATH (.gs), its weights (.npz beside it) and PATH.json (parameters); each file
    appears whole or not at all, and an existing one is replaced only if an earlier run
    wrote it (PATH.json records their hashes) or with `force`."""
    path = Path(path)
    program = quantized.program
    weights_file = path.with_name(f"{path.stem}.npz")
    record = path.with_name(path.name + ".json")
    check_sibling_files([path, weights_file, record], record, force)
    relocated = {name: replace(d, source=weights_file.name, key=None)
                 if d.role == "weight" else d for name, d in program.tensors.items()}
    text = quantized.header() + format_program(replace(program, path=str(path),
                                                       tensors=relocated))
    files = {path.name: text.encode(), weights_file.name: npz_bytes(quantized.weights)}
    metadata = {**quantized.metadata(), "files": file_digests(files)}
    check_can_create(path)
    # The record goes first and the program last: a program on disk always has its weights
    # and parameters beside it.
    write_file(record, json.dumps(metadata, indent=1, sort_keys=True) + "\n")
    write_file(weights_file, files[weights_file.name])
    write_file(path, files[path.name])
    return path


def layer_values(quantized: QuantizedProgram, inputs: dict[str, Array]) -> Iterator[
        tuple[Layer, Array]]:
    """Each recorded layer's i8 value when the quantized program runs on float `inputs`."""
    program = quantized.program
    types = check_program(program)
    tensors = {**quantized.weights, **quantized.quantize_inputs(inputs)}
    values = evaluate_all(program.root, types, tensors)
    for layer in quantized.layers:
        term = layer.quant_term
        if term.op == "access-tensor":
            yield layer, tensors[str(term.args[0])]
        else:
            yield layer, values[term]


def quantize_files(program: Path, calibration: Path | None, profile_path: Path | None,
                   output: Path, per_channel: bool, symmetric: bool, force: bool) -> Path:
    """`glensidec quantize`: the float program at `program` quantized with calibration data
    or a saved profile, written to `output` (.gs, with .npz weights and a .json record)."""
    check_writable_file(output)
    parsed = read_program(program)
    require_access_result(parsed, check_program(parsed), "quantize")
    parsed = expand_program(parsed)  # tuples and conv2d modes become what the quantizer knows
    float_files = {program.resolve(), *(parsed.weight_path(d).resolve() for d in
                                        parsed.weights())}
    if {output.resolve(), output.with_suffix(".npz").resolve()} & float_files:
        raise GlensideError(f"-o {output} would overwrite the float program or its weights")
    record = output.with_name(output.name + ".json")
    check_sibling_files([output, output.with_name(f"{output.stem}.npz"), record], record, force)
    source: Profile | Path
    if calibration is not None:
        source = calibration
        if profile_path is not None:
            prof = profile(parsed, calibration)
            save_profile(prof, profile_path)
            source = prof
    elif profile_path is not None:
        source = load_profile(profile_path, parsed)
    else:
        raise GlensideError("give --calibrate DATA.npz or --profile PROFILE.json")
    quantized = quantize(parsed, source, per_channel, symmetric)
    return save_quantized(quantized, output, force)
