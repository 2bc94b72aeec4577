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
    weight_scales,
)
from glensidec.lang import constructs as K
from glensidec.lang.data import load_weights
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
    compute_name,
    postorder,
)
from glensidec.lang.typecheck import (
    AccessType,
    TypeTable,
    access_type,
    check_program,
    infer,
    infer_access,
    require_access_result,
)
from glensidec.outputs import (
    check_sibling_files,
    check_writable_file,
    file_digests,
    write_file,
)

Array = np.ndarray[Any, Any]

# Constructs that only move data: the same op applies to a quantized tensor unchanged
# (padding too: where its raw zeros matter, `no_raw_zeros` says so) ...
DATA_MOVEMENT = K.Group.VIEW | {"access-pad"}
# ... and those an accumulator can go through with its scale and offset arrays alongside.
ACC_MOVEMENT = K.Group.VIEW - {"access-windows"}


# -- evaluating any term, with overrides ---------------------------------------------------


def substitute(root: Term, replacements: dict[Term, Term]) -> Term:
    """`root` with every occurrence of a key replaced by its value."""
    rebuilt: dict[Term, Term] = {}
    for term in postorder(root):
        if term in replacements:
            rebuilt[term] = replacements[term]
            continue
        args = tuple(rebuilt[a] if isinstance(a, Term) else a for a in term.args)
        rebuilt[term] = Term(term.op, args)
    return rebuilt[root]


def _plus(params: QParams) -> str:
    return f"{'-' if params.zero_point < 0 else '+'} {abs(params.zero_point)}"


def _minus(params: QParams) -> str:
    return f"{'+' if params.zero_point < 0 else '-'} {abs(params.zero_point)}"


# -- quantized values --------------------------------------------------------------------------


@dataclass
class Q8:
    term: Term
    params: QParams
    base: Term  # the i8 term this one re-views (the probe point for zero-point corrections)
    raw_zeros: bool = False  # zero-padding inserted q = 0, which is not real 0 when zp ≠ 0
    min_padded: bool = False


@dataclass
class Acc:
    term: Term  # i32
    scale: Array  # full shape, float64
    offset: Array  # full shape, int64
    origin: Term  # the float term whose profile describes this value


@dataclass
class Const:
    array: Array  # full shape
    term: Term  # the float term (a chain over weights and literals)


@dataclass
class Host:
    term: Term  # f32, computed on dequantized values
    origin: Term | None = None  # the float compute whose profile an i8 copy of it takes


@dataclass
class Pair:
    op: str
    left: Value
    right: Value


Value = Q8 | Acc | Const | Host | Pair


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

    def quantize_inputs(self, inputs: dict[str, Array]) -> dict[str, Array]:
        return {name: self.inputs[name].quantize(array) for name, array in inputs.items()}

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
        return "\n".join(lines) + "\n"


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
            except _Unsupported as error:
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
            except _Unsupported as error:
                raise GlensideError(f"quantize: the result: {error}") from None
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
        translate = TRANSLATORS.get(term.op)
        if translate is None:
            raise _Unsupported(f"{term.op} is not supported")
        return translate(self, term, children)

    def leaf(self, term: Term) -> Value:
        decl = self.program.tensors[str(term.args[0])]
        if decl.role == "weight":
            return Const(self.float_weights[decl.name], term)
        params = self.params_of(term)
        # The program itself says how a float input is quantized (`run` and the C accept
        # float32 for it).
        self.tensors[decl.name] = TensorDecl(decl.name, decl.shape, "i8", "input",
                                             quantization=params)
        self.inputs[decl.name] = params
        q = Q8(term, params, term)
        self.record(term, q)
        return q

    # -- data movement ------------------------------------------------------------------
    def rebuild(self, term: Term, *children: Term) -> Term:
        replacements = iter(children)
        args = tuple(next(replacements) if isinstance(a, Term) and
                     K.CONSTRUCTS[a.op].result == K.ACCESS else a for a in term.args)
        return Term(term.op, args)

    def move(self, term: Term, child: Value) -> Value:
        if isinstance(child, Acc) and term.op in ACC_MOVEMENT:
            return Acc(self.rebuild(term, child.term), self.move_array(term, child.scale),
                       self.move_array(term, child.offset), child.origin)
        if isinstance(child, Acc):
            child = self.materialize(child, child.origin)
        if isinstance(child, Host):
            return Host(self.rebuild(term, child.term), child.origin)
        if not isinstance(child, Q8):
            raise _Unsupported(f"{term.op} of {type(child).__name__}")
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
        raise _Unsupported(f"cannot requantize a {type(value).__name__}")

    # -- compute ------------------------------------------------------------------------
    def compute(self, term: Term, operand: Value) -> Value:
        op = term.args[0]
        assert isinstance(op, ComputeOp)
        if op.name in K.ComputeKind.FOLD:
            if not isinstance(operand, Pair):
                raise _Unsupported(f"{op.name} of more than two members")
        elif isinstance(operand, Pair) and op.name not in K.ComputeKind.DOT:
            raise _Unsupported(f"{op.name} of a pair")
        return COMPUTE_TRANSLATORS[op.name](self, term, op, operand)

    def on_integers(self, term: Term, operand: Value,
                    translate: Callable[[Q8], Value]) -> Value:
        """`translate` an i8 operand; a host (float) operand stays on the host."""
        if isinstance(operand, Host):
            return Host(self.rebuild(term, operand.term), term)
        if isinstance(operand, Acc):
            operand = self.materialize(operand, operand.origin)
        assert isinstance(operand, Q8)
        return translate(operand)

    def keep_scale(self, term: Term, operand: Q8) -> Value:
        """reduce-max: the same op on the integers, with the same parameters."""
        no_raw_zeros(operand)
        new = self.rebuild(term, operand.term)
        return Q8(new, operand.params, new)

    def lookup(self, term: Term, op: ComputeOp, operand: Q8) -> Value:
        """A non-linear function as a table of its 256 i8 results (Glow's approach): the
        input's parameters say which real each q stands for, the output's profile which q
        each result becomes."""
        no_raw_zeros(operand)
        if operand.min_padded:
            raise _Unsupported(f"{op.name} of min-padding")
        return self.table(term, op.name, operand)

    def table(self, term: Term, function: str, operand: Q8) -> Q8:
        """`function` of the i8 `operand` as one lookup table onto `term`'s profile."""
        out = self.params_of(term)
        table = B.compute("lookup", operand.term, function, operand.params.scale,
                          operand.params.zero_point, out.scale, out.zero_point)
        return Q8(table, out, table)

    def own_gate(self, term: Term) -> tuple[str, int] | None:
        """x·g(x) with g x's own gate: `sigmoid(x)` (SiLU) or HardSwish's `clip(x·(1/6) +
        1/2, 0, 1)` as the importer writes both. The function of the fused table and the
        side of the pair that is x, or None."""
        sides = term.children()[0].children()
        for index in (0, 1):
            function = self.gate_function(sides[index], sides[1 - index])
            if function is not None:
                return function, index
        return None

    def gate_function(self, x: Term, gate: Term) -> str | None:
        if compute_name(gate) == "sigmoid" and gate.children()[0] == x:
            return "silu"
        op = gate.args[0]
        if not (isinstance(op, ComputeOp) and op.name == "clip"
                and tuple(map(float, op.params)) == (0.0, 1.0)):
            return None
        line = gate.children()[0]
        if compute_name(line) != "elementwise-add":
            return None
        scaled, half = line.children()[0].children()
        if compute_name(scaled) != "elementwise-mul" or not self.constant_is(half, 0.5):
            return None
        source, sixth = scaled.children()[0].children()
        return "hardswish" if source == x and self.constant_is(sixth, 1.0 / 6.0) else None

    def constant_is(self, term: Term, value: float) -> bool:
        """Whether `term` is a constant with every element `value` (to f32 precision)."""
        constant = self.values.get(term)
        return isinstance(constant, Const) and bool(
            np.allclose(constant.array, value, rtol=1e-6, atol=0.0))

    def negate(self, term: Term, operand: Q8) -> Value:
        acc = self.widen(operand, operand.term)
        return Acc(acc.term, -acc.scale, acc.offset, term)

    def dequantized(self, value: Value) -> Term:
        if isinstance(value, Host):
            return value.term
        if isinstance(value, Acc):
            value = self.materialize(value, value.origin)
        if not isinstance(value, Q8):
            raise _Unsupported(f"cannot dequantize a {type(value).__name__}")
        no_raw_zeros(value)
        like = self.qtype(value.term)
        real = B.compute("cast", value.term, "f32")
        if value.params.zero_point:
            zero = self.scalar_like(float(-value.params.zero_point), "f32", like)
            real = B.compute("elementwise-add", B.op("access-pair", real, zero))
        scale = self.scalar_like(value.params.scale, "f32", like)
        return B.compute("elementwise-mul", B.op("access-pair", real, scale))

    def clamp(self, term: Term, op: ComputeOp, operand: Value) -> Value:
        if isinstance(operand, Host):
            return Host(self.rebuild(term, operand.term), term)
        if isinstance(operand, Acc):
            # Requantize straight to the clamp's own (narrower) range: one bit more.
            operand = self.materialize(operand, term, record=False)
        if not isinstance(operand, Q8):
            raise _Unsupported(f"{op.name} of {type(operand).__name__}")
        no_raw_zeros(operand)
        clipped = self.clip_q8(op, operand)
        if clipped is not operand.term:
            self.name(operand.term, term, "_q")
        return Q8(clipped, operand.params, clipped)

    def clip_q8(self, op: ComputeOp, operand: Q8) -> Term:
        """relu/clip in the integer domain; nothing when the i8 range already ensures it."""
        low, high = (0.0, math.inf) if op.name == "relu" else (float(op.params[0]),
                                                                 float(op.params[1]))
        params = operand.params
        q_low = -128 if math.isinf(low) else int(np.clip(
            round(low / params.scale) + params.zero_point, -128, 127))
        q_high = 127 if math.isinf(high) else int(np.clip(
            round(high / params.scale) + params.zero_point, -128, 127))
        if (q_low, q_high) == (-128, 127):
            return operand.term
        if (q_low, q_high) == (0, 127):  # zero point 0: plainly a relu
            return B.compute("relu", operand.term)
        return B.compute("clip", operand.term, q_low, q_high)

    def integer_sum(self, term: Term, operand: Q8) -> Value:
        return self.sum_of_steps(term, self.rebuild(term, operand.term), operand,
                                 operand.params.scale)

    def sum_of_steps(self, term: Term, summed: Term, operand: Q8, scale: float) -> Acc:
        """`summed` (a sum over `operand`'s integers) as an i32 accumulator of `scale`, its
        zero points' contribution taken off."""
        like = self.qtype(summed)
        offset = -self.probe(summed, operand)
        return Acc(summed, np.full(like.full, scale), offset, term)

    def integer_mean(self, term: Term, operand: Q8) -> Value:
        """reduce-mean as the exact i32 sum at scale s/N, requantized (by its consumer) to
        the mean's own profile: a mean spans far fewer steps than its operand (a global
        pool of a feature map), and rounding it to the operand's step loses them."""
        no_raw_zeros(operand)
        if operand.min_padded:
            raise _Unsupported("reduce-mean over min-padding")
        count = math.prod(self.qtype(operand.term).item)
        if 128 * count >= MEAN_SUM_LIMIT:  # the i32 sum could wrap: the mean of the integers
            new = self.rebuild(term, operand.term)  # at the operand's step, as before
            return Q8(new, operand.params, new)
        return self.sum_of_steps(term, B.compute("reduce-sum", operand.term), operand,
                                 operand.params.scale / count)

    def probe(self, term: Term, operand: Q8) -> Array:
        """`term` evaluated with `operand`'s base filled with its zero point: Σ zp·w etc."""
        if operand.params.zero_point == 0:
            return np.zeros(self.qtype(term).full, dtype=np.int64)
        base_type = self.qtype(operand.base)
        name = self.fresh("zero_point_probe")
        probe_decl = TensorDecl(name, base_type.full, "i8", "input")
        tensors = {**self.tensors, name: probe_decl}
        probe = B.tensor(name)
        probed = substitute(term, {operand.base: B.access(probe, len(base_type.shape))}
                            if base_type.shape != base_type.full else {operand.base: probe})
        types = infer(probed, tensors, {})
        fill = np.full(base_type.full, operand.params.zero_point, dtype=np.int8)
        values = evaluate_all(probed, types, {**self.weights, name: fill})
        self.taken.discard(name)
        return values[probed].astype(np.int64)

    # -- matrix products ----------------------------------------------------------------
    def dot_product(self, term: Term, operand: Value) -> Value:
        if not isinstance(operand, Pair):
            raise _Unsupported("dot-product of anything but a pair or cartesian product")
        sides = [operand.left, operand.right]
        constant = [isinstance(s, Const) for s in sides]
        if constant.count(True) == 0:
            return self.activation_product(term, operand)
        if constant.count(True) != 1:
            raise _Unsupported("dot-product needs exactly one constant (weight) operand")
        weight_index = constant.index(True)
        weight = sides[weight_index]
        activation = sides[1 - weight_index]
        assert isinstance(weight, Const)
        if isinstance(activation, Acc):
            activation = self.materialize(activation, activation.origin)
        if isinstance(activation, Host) and activation.origin is not None:
            # back from the host (after a LayerNormalization): i8 at its own profile
            activation = self.host_to_q8(activation, self.params_of(activation.origin))
        if not isinstance(activation, Q8) or activation.min_padded:
            raise _Unsupported("dot-product of an activation that is not an i8 tensor")
        chain, item_scales = self.quantized_weight_chain(weight.term)
        members = [chain, activation.term] if weight_index == 0 else [activation.term, chain]
        product = self.float_product(term)
        dot = self.rebuild(term, Term(product.op, tuple(members)))
        result = self.qtype(dot)
        left_type, right_type = (self.ftype(c) for c in product.children())
        if operand.op == "access-cartesian-product":
            shape = (left_type.shape + (1,) * len(right_type.shape) if weight_index == 0
                     else (1,) * len(left_type.shape) + right_type.shape)
            item_scales = item_scales.reshape(shape)
        scale = np.broadcast_to(item_scales * activation.params.scale, result.full)
        offset = -self.probe(dot, activation)
        return Acc(dot, np.array(scale), offset, term)

    def activation_product(self, term: Term, operand: Pair) -> Value:
        """A matrix product of two activations (attention's Q·Kᵀ, softmax·V): both sides
        to i8 with symmetric parameters from their profiles (zero point 0, so the integer
        product needs no correction terms), one i8 dot-product in i32 at scale s_a·s_b."""
        members, scale = [], 1.0
        for side in (operand.left, operand.right):
            q8 = self.symmetric_q8(side)
            members.append(q8.term)
            scale *= q8.params.scale
        dot = self.rebuild(term, Term(self.float_product(term).op, tuple(members)))
        full = self.qtype(dot).full
        return Acc(dot, np.full(full, scale), np.zeros(full, dtype=np.int64), term)

    def symmetric_q8(self, value: Value) -> Q8:
        """An activation as i8 with zero point 0, the scale from its profile."""
        origin = value.origin if isinstance(value, (Acc, Host)) else None
        if isinstance(value, Q8):
            no_raw_zeros(value)
            if value.min_padded:
                raise _Unsupported("a matrix product of min-padding")
            if value.params.zero_point == 0:
                return value
            origin = value.base
        if origin is None or self.keys.get(origin) not in self.profile.ranges:
            raise _Unsupported(f"a matrix product of a {type(value).__name__} with no profile")
        low, high = self.profile.ranges[self.keys[origin]]
        target = activation_params(low, high, True)
        if isinstance(value, Host):
            return self.host_to_q8(value, target)
        term = self.to_params(value, target, origin)
        return Q8(term, target, term)

    def host_to_q8(self, value: Host, target: QParams) -> Q8:
        """An f32 host tensor to i8: q = cast_i8(x·(1/s) + zp), the cast rounding half to
        even and saturating (as `QParams.quantize` up to the f32 rounding of x·(1/s))."""
        like = self.qtype(value.term)
        term = B.compute("elementwise-mul", B.op("access-pair", value.term, self.scalar_like(
            float(np.float32(1.0 / target.scale)), "f32", like)))
        if target.zero_point:
            term = B.compute("elementwise-add", B.op("access-pair", term, self.scalar_like(
                float(target.zero_point), "f32", like)))
        q = B.compute("cast", term, "i8")
        return Q8(q, target, q)

    def float_product(self, term: Term) -> Term:
        product = term.args[1]
        assert isinstance(product, Term)
        return product

    def quantized_weight_chain(self, chain: Term) -> tuple[Term, Array]:
        """The weight operand over i8 weights, and the scale of each of its items."""
        leaves = [t for t in postorder(chain) if t.op == "access-tensor"]
        if len(leaves) != 1:
            raise _Unsupported("a weight operand must view exactly one weight tensor")
        leaf = leaves[0]
        name = str(leaf.args[0])
        if name not in self.quantized_weights:
            array = self.float_weights[name]
            scales = weight_scales(array, self.per_channel)
            spread = scales.reshape((-1,) + (1,) * (array.ndim - 1)) if array.ndim else scales
            q = np.clip(np.rint(array / spread), -127, 127).astype(np.int8)
            q_leaf = self.add_weight(name, q, "i8")
            self.quantized_weights[name] = (q_leaf, np.broadcast_to(spread, array.shape))
            self.weight_scales[str(q_leaf.args[0])] = spread
        q_leaf, full_scales = self.quantized_weights[name]
        operand = self.ftype(chain)
        scales_view = _apply_chain(chain, leaf, np.array(full_scales), self.float_types)
        items = scales_view.reshape(operand.shape + (-1,))
        if not np.all(items == items[..., :1]):
            raise _Unsupported("per-channel weight scales vary within a dot-product item")
        return substitute(chain, {leaf: q_leaf}), items[..., 0]

    # -- elementwise --------------------------------------------------------------------
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

    def elementwise(self, term: Term, name: str, pair: Pair) -> Value:
        left, right = pair.left, pair.right
        if isinstance(left, Host) or isinstance(right, Host):
            terms = [self.dequantized(v) if not isinstance(v, Const) else
                     self.spread(v.array, self.ftype(v.term), "f32", "constant")
                     for v in (left, right)]
            return Host(self.rebuild(term, Term(pair.op, tuple(terms))), term)
        if isinstance(right, Const):
            return self.with_constant(term, name, left, right.array, constant_first=False)
        if name == "elementwise-div":
            self.check_divisor(term)
        if isinstance(left, Const) and name == "elementwise-div":
            return self.divide_constant(term, left.array, right)
        if isinstance(left, Const):
            return self.with_constant(term, name, right, left.array, constant_first=True)
        if name in ("elementwise-add", "elementwise-sub"):
            return self.add_dynamic(term, name, left, right)
        if name == "elementwise-mul":
            fused = self.own_gate(term)
            if fused is not None:  # SiLU, HardSwish: one table of x
                function, side = fused
                return self.table(term, function,
                                  self.i8_activation((left, right)[side], function))
            return self.multiply_dynamic(term, left, right)
        return self.divide_dynamic(term, left, right)

    def i8_activation(self, value: Value, name: str) -> Q8:
        """`value` as an i8 activation (an accumulator is requantized first), or the reason
        `name` cannot take it."""
        if isinstance(value, Acc):
            value = self.materialize(value, value.origin)
        if not isinstance(value, Q8):
            raise _Unsupported(f"{name} of a {type(value).__name__}")
        no_raw_zeros(value)
        if value.min_padded:
            raise _Unsupported(f"{name} of min-padding")
        return value

    def centred(self, value: Value, name: str) -> tuple[Term, float]:
        """An activation as i32 `q − zp` (|q − zp| ≤ 255) and its scale."""
        value = self.i8_activation(value, name)
        wide = B.compute("cast", value.term, "i32")
        if value.params.zero_point:
            shift = self.scalar_like(-value.params.zero_point, "i32", self.qtype(wide))
            wide = B.compute("elementwise-add", B.op("access-pair", wide, shift))
        return wide, value.params.scale

    def multiply_dynamic(self, term: Term, left: Value, right: Value) -> Value:
        """x·y of two activations (gates, SiLU, HardSwish, GELU): both to i8, centred in i32,
        multiplied; |q − zp| ≤ 255 keeps the product below 2^16. The result is an
        accumulator at scale s_x·s_y, requantized like any other."""
        (x, x_scale), (y, y_scale) = (self.centred(side, "elementwise-mul")
                                      for side in (left, right))
        product = B.compute("elementwise-mul", B.op("access-pair", x, y))
        full = self.qtype(product).full
        return Acc(product, np.full(full, x_scale * y_scale), np.zeros(full, dtype=np.int64),
                   term)

    def divide_dynamic(self, term: Term, left: Value, right: Value) -> Value:
        """x / y of two activations (LayerNormalization's x / √(var + ε)): both centred in
        i32, the numerator times 2^16 (|x − zp|·2^16 < 2^24), an integer division truncated
        toward zero; an accumulator at scale s_x / (s_y·2^16). A divisor that rounds to zero
        gives 0, in the interpreter and in C alike."""
        (x, x_scale), (y, y_scale) = (self.centred(side, "elementwise-div")
                                      for side in (left, right))
        like = self.qtype(x)
        numerator = B.compute("elementwise-mul", B.op(
            "access-pair", x, self.scalar_like(DIVISION_SHIFT, "i32", like)))
        quotient = B.compute("elementwise-div", B.op("access-pair", numerator, y))
        full = self.qtype(quotient).full
        return Acc(quotient, np.full(full, x_scale / (y_scale * DIVISION_SHIFT)),
                   np.zeros(full, dtype=np.int64), term)

    def check_divisor(self, term: Term) -> None:
        """Refuse a division whose divisor comes within one int8 step of zero in the
        profile: its i8 value would be 0 there and the quotient unbounded (1/|x|), a silent
        wrong answer. LayerNormalization's √(var + ε) stays well away from zero."""
        divisor = term.children()[0].children()[1]
        while divisor.op in DATA_MOVEMENT:
            divisor = divisor.children()[0]
        low, high = self.profile.ranges.get(self.keys.get(divisor, ""), (0.0, 0.0))
        step = activation_params(low, high, self.symmetric).scale
        if low <= step and high >= -step:
            raise _Unsupported(f"the divisor's profiled range [{low:.3g}, {high:.3g}] comes "
                               f"within one int8 step ({step:.3g}) of zero")

    def divide_constant(self, term: Term, constant: Array, value: Value) -> Value:
        """c / y (Reciprocal, Pow −1): 2^16 / (y − zp) in integers (0 where y rounds to its
        zero point), an accumulator at scale c / (s_y·2^16)."""
        y, y_scale = self.centred(value, "elementwise-div")
        like = self.qtype(y)
        quotient = B.compute("elementwise-div", B.op(
            "access-pair", self.scalar_like(DIVISION_SHIFT, "i32", like), y))
        full = self.qtype(quotient).full
        scale = np.broadcast_to(constant.astype(np.float64) / (y_scale * DIVISION_SHIFT), full)
        if np.any(scale == 0):
            raise _Unsupported("dividing a constant zero by a computed tensor")
        return Acc(quotient, np.array(scale), np.zeros(full, dtype=np.int64), term)

    def softmax(self, term: Term, operand: Value) -> Value:
        """The network's final softmax stays on the host in f32 (its probabilities are the
        output); one inside the program (attention) is computed in integers, so the
        products after it stay i8 and every executor computes the same numbers."""
        if term in self.host_tail or isinstance(operand, Host):
            return Host(self.rebuild(term, self.dequantized(operand)), term)
        return self.integer_softmax(term, self.i8_activation(operand, "softmax"))

    def integer_softmax(self, term: Term, operand: Q8) -> Acc:
        """softmax over the item in integers: d = q − max(q) ∈ [−255, 0] steps, to i8 at
        twice the step, e = exp(d) by a lookup table onto 255 steps of (0, 1], then
        p = e·2^16 / Σe (integer division; Σe ≥ 255, from the maximum's e = 1)."""
        x = operand.term
        like = self.qtype(x)
        shape, item = like.shape, like.item

        def over_item(reduced: Term) -> Term:  # ((S),()) repeated along the item
            return B.broadcast(B.reshape(reduced, shape, (1,) * len(item)), shape, item)

        wide_x = B.compute("cast", x, "i32")
        peak = B.compute("cast", over_item(B.compute("reduce-max", x)), "i32")
        steps = B.compute("elementwise-sub", B.op("access-pair", wide_x, peak))
        d_params = QParams(2.0 * operand.params.scale, 127)
        d = self.requantize(Acc(steps, np.full(like.full, operand.params.scale),
                                np.zeros(like.full, dtype=np.int64), term), d_params)
        e_params = QParams(1.0 / 255.0, -128)
        e = B.compute("lookup", d.term, "exp", d_params.scale, d_params.zero_point,
                      e_params.scale, e_params.zero_point)
        e_wide, _ = self.centred(Q8(e, e_params, e), "softmax")
        total = over_item(B.compute("reduce-sum", e_wide))
        numerator = B.compute("elementwise-mul", B.op(
            "access-pair", e_wide, self.scalar_like(DIVISION_SHIFT, "i32", like)))
        quotient = B.compute("elementwise-div", B.op("access-pair", numerator, total))
        return Acc(quotient, np.full(like.full, 1.0 / DIVISION_SHIFT),
                   np.zeros(like.full, dtype=np.int64), term)

    def with_constant(self, term: Term, name: str, value: Value, constant: Array,
                      constant_first: bool, retried: bool = False) -> Value:
        if isinstance(value, Q8):
            # ×256 so that added constants are rounded to 1/256 of an input step.
            value = self.widen(value, term, boost=256)
        if not isinstance(value, Acc):
            raise _Unsupported(f"{name} of a {type(value).__name__}")
        constant = constant.astype(np.float64)
        scale, offset = value.scale, value.offset
        if name == "elementwise-mul":
            scale = scale * constant
        elif name == "elementwise-div":
            if constant_first:
                raise _Unsupported("dividing a constant by a computed tensor")
            scale = scale / constant
        else:
            if name == "elementwise-sub" and constant_first:  # c − x
                scale = -scale
            sign = -1.0 if name == "elementwise-sub" and not constant_first else 1.0
            with np.errstate(divide="ignore", invalid="ignore"):
                steps = np.rint(sign * constant / scale)
            if not np.all(np.isfinite(steps)) or np.max(np.abs(steps), initial=0) > 2 ** 31:
                if retried:
                    raise _Unsupported("the constant does not fit the accumulator's scale")
                # The computed part is far below the constant (googlenet's random-weight
                # logits: activations near 1e-12 under a bias of 0.01): requantize it to
                # the sum's own profile first, where the constant fits, then add.
                q = self.requantize(value, self.params_of(term))
                return self.with_constant(term, name, q, constant, constant_first, True)
            offset = offset + steps.astype(np.int64)
        if np.any(scale == 0):
            raise _Unsupported("multiplying by a constant zero loses the tensor")
        return Acc(value.term, np.array(scale), offset, term)

    def add_dynamic(self, term: Term, name: str, left: Value, right: Value) -> Value:
        """Residual add: both sides to i8, then a common fine scale in i32 (TFLite's way)."""
        sides = []
        for side in (left, right):
            if isinstance(side, Acc):
                side = self.materialize(side, side.origin)
            if not isinstance(side, Q8):
                raise _Unsupported(f"{name} of a {type(side).__name__}")
            no_raw_zeros(side)
            sides.append(side)
        # |q − zp| ≤ 255 and multipliers ≤ 2^14 keep the sum below 2^23: no i32 overflow.
        common = max(s.params.scale for s in sides) / 2 ** 14
        terms, offset = [], 0
        like = self.qtype(sides[0].term)
        for index, side in enumerate(sides):
            multiplier = round(side.params.scale / common)
            wide = B.compute("cast", side.term, "i32")
            terms.append(B.compute("elementwise-mul", B.op(
                "access-pair", wide, self.scalar_like(multiplier, "i32", like))))
            sign = -1 if index == 1 and name == "elementwise-sub" else 1
            offset -= sign * side.params.zero_point * multiplier
        summed = B.compute(name, B.op("access-pair", terms[0], terms[1]))
        full = self.qtype(summed).full
        return Acc(summed, np.full(full, common), np.full(full, offset, dtype=np.int64), term)

    # -- accumulators to i8 ---------------------------------------------------------------
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
                raise _Unsupported("a bias or zero-point correction does not fit in i32")
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
NOT_QUANTIZED = K.Group.HARDWARE


def _no_integer_form(q: Quantizer, term: Term, op: ComputeOp, operand: Value) -> Value:
    def refuse(value: Q8) -> Value:
        raise _Unsupported(f"compute {op.name} has no integer form")
    return q.on_integers(term, operand, refuse)


def _fold(q: Quantizer, term: Term, op: ComputeOp, operand: Value) -> Value:
    assert isinstance(operand, Pair)  # Quantizer.compute checked
    return q.elementwise(term, op.name, operand)


ComputeTranslator = Callable[[Quantizer, Term, ComputeOp, Value], Value]
COMPUTE_TRANSLATORS: dict[str, ComputeTranslator] = {
    "dot-product": lambda q, term, op, operand: q.dot_product(term, operand),
    **{name: _fold for name in K.ComputeKind.FOLD},
    "relu": lambda q, term, op, operand: q.clamp(term, op, operand),
    "clip": lambda q, term, op, operand: q.clamp(term, op, operand),
    "softmax": lambda q, term, op, operand: q.softmax(term, operand),
    "reduce-max": lambda q, term, op, operand: q.on_integers(
        term, operand, lambda value: q.keep_scale(term, value)),
    "reduce-mean": lambda q, term, op, operand: q.on_integers(
        term, operand, lambda value: q.integer_mean(term, value)),
    "reduce-sum": lambda q, term, op, operand: q.on_integers(
        term, operand, lambda value: q.integer_sum(term, value)),
    "negative": lambda q, term, op, operand: q.on_integers(
        term, operand, lambda value: q.negate(term, value)),
    # Glow's int8 lookup tables: one 256-entry table per use, from both sides' parameters.
    **{name: lambda q, term, op, operand: q.on_integers(
        term, operand, lambda value: q.lookup(term, op, value))
       for name in ("exp", "sigmoid", "tanh", "erf", "sqrt")},
    # Computed on floats only: quantized programs keep them on the host side of a cast.
    **{name: _no_integer_form for name in ("cast", "requantize", "requantize-per-channel",
                                           "lookup")},
}


# A mean is an i32 sum of its operand's steps (|q| ≤ 128 each) only while 128·N stays below this.
MEAN_SUM_LIMIT = 2 ** 31


# Integer divisions (x / y of activations, softmax's e / Σe) scale the numerator by this
# first: 16 fractional bits, and |x| ≤ 255 keeps the numerator below 2^24.
DIVISION_SHIFT = 1 << 16


class _Unsupported(Exception):
    """Something the quantizer has no integer form for; reported with the term's name."""


def no_raw_zeros(value: Q8) -> None:
    """Zero padding writes q = 0, which is real 0 only when the zero point is 0; only
    dot-products and sums correct for it (exactly, by probing)."""
    if value.raw_zeros:
        raise _Unsupported(f"zero padding of an i8 tensor whose zero point is "
                           f"{value.params.zero_point}, not 0, is only supported right before "
                           f"a convolution (quantize with --symmetric)")


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


def _apply_chain(chain: Term, leaf: Term, array: Array, types: TypeTable) -> Array:
    return evaluate_all(chain, types, {}, given={leaf: array})[chain]


# -- entry points --------------------------------------------------------------------------------


def quantize(program: Program, calibration: dict[str, Array] | str | Path | Profile,
             per_channel: bool = False, symmetric_activations: bool = False,
             weights_file: str | None = None) -> QuantizedProgram:
    """Quantize a float program; `calibration` is data (dict or .npz) or a saved Profile.

    A Program holds no weight data, so the result carries the program together with its
    weight arrays (`save_quantized` writes both). `weights_file` is the .npz name the
    program's weight declarations refer to (default: `<program stem>.q.npz`).
    """
    check_program(program)
    for decl in program.tensors.values():
        if decl.dtype != "f32":
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
                            {n: a for n, a in quantizer.weight_scales.items() if n in used})


def save_quantized(quantized: QuantizedProgram, path: str | Path, force: bool = False) -> Path:
    """Write PATH (.gs), its weights (.npz beside it) and PATH.json (parameters); each file
    appears whole or not at all, and an existing one is replaced only if an earlier run
    wrote it (PATH.json records their hashes) or with `force`."""
    from glensidec.frontends.importer import npz_bytes

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
