"""The layer graph: a program seen as layers, and the way back to a program.

`lift(program, weights)` recognises the builders' idioms (glensidec.frontends.builders, as
written by hand or by `glensidec import`) and gives each one a `Layer`: conv (with groups,
stride, padding), dense, a per-channel bias or scale, an elementwise activation, pools, add,
concat, reshape. `lower(graph)` writes the layers back with the same builders.

Every idiom is recognised by taking its parameters out of the term and building it again:
a match counts only when the rebuilt term equals the original, so `lower(lift(p))` is `p`
(the same terms, hence the same outputs) and nothing is ever lifted by a guess. A term that
is no idiom is a located error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.frontends import builders as B
from glensidec.frontends.importer import broadcast_to
from glensidec.lang.terms import ComputeOp, Program, Symbol, TensorDecl, Term, postorder
from glensidec.lang.typecheck import TypeTable, infer, infer_access

Array = np.ndarray[Any, Any]

# -- the layers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """A runtime input of the program."""


@dataclass(frozen=True)
class Conv:
    """NCHW × OIHW weights `weight` ((O, C/groups, KH, KW)), as builders write it."""

    weight: str
    groups: int = 1
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right


@dataclass(frozen=True)
class Dense:
    """((M),(K)) × `weight` [units, K]; `wrap`: the input is ((M,K),()) and gets `(access x 1)`."""

    weight: str
    wrap: bool = True


@dataclass(frozen=True)
class ChannelOp:
    """A per-channel vector `weight` added (bias) or multiplied (scale) along `axis`.

    `style` says how the vector is spread: "insert-axis" (builders.channel_bias) or
    "reshape" (the importer's channel_op).
    """

    compute: str
    weight: str
    axis: int
    style: str


@dataclass(frozen=True)
class Pointwise:
    """An elementwise compute of one value: relu, clip, cast, requantize, …"""

    op: ComputeOp


@dataclass(frozen=True)
class ScalarOp:
    """An elementwise compute of a value and a broadcast constant (`source`, no tensors)."""

    compute: str
    source: Term
    constant_first: bool = False


@dataclass(frozen=True)
class Pool:
    reduce: str  # reduce-max (min-padding) or reduce-mean (zero-padding)
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True)
class GlobalPool:
    """The mean over H and W, kept as (N, C, 1, 1) (the importer's GlobalAveragePool)."""


@dataclass(frozen=True)
class Binary:
    """An elementwise compute of two values of one shape: the residual add."""

    compute: str


@dataclass(frozen=True)
class Concat:
    axis: int


@dataclass(frozen=True)
class Reshape:
    dims: tuple[int, ...]
    items: tuple[int, ...] = ()


@dataclass(frozen=True)
class Slice:
    axis: int
    low: int
    high: int


@dataclass(frozen=True)
class Pad:
    axis: int
    before: int
    after: int
    kind: str = "zero-padding"


@dataclass(frozen=True)
class Transpose:
    """access-transpose: the axes in the order `permutation` (the importer's Transpose)."""

    permutation: tuple[int, ...]


# -- the transformer's idioms (the importer's MatMul, Add, Softmax, LayerNormalization) --------


@dataclass(frozen=True)
class TokenDense:
    """x (…, K) × `weight` [units, K] over the last axis: the importer's MatMul of a 3-D
    activation and a constant, (T, K) rows flattened, multiplied and reshaped back."""

    weight: str


@dataclass(frozen=True)
class Attention:
    """Multi-head scaled dot-product attention of projected q, k, v (each (1, T, H·dh)):
    split into `heads` heads, Q·Kᵀ per head (one matrix product each) times `scale` (a
    constant term), softmax over the keys, ·V per head, heads merged back to (1, T, H·dh).
    The projections around it are TokenDense layers."""

    heads: int
    scale: Term


@dataclass(frozen=True)
class LayerNorm:
    """(x − mean)/√(var + ε) over the last axis, ε the constant term `epsilon` (ONNX's
    function body, as the importer writes it); the scale and shift are ChannelOps after it."""

    epsilon: Term


@dataclass(frozen=True)
class WeightOp:
    """An elementwise compute of a value and a weight of the same shape (a position
    embedding added to the tokens)."""

    compute: str
    weight: str
    weight_first: bool = False


Op = Input | Conv | Dense | ChannelOp | Pointwise | ScalarOp | Pool | GlobalPool | Binary | \
    Concat | Reshape | Slice | Pad | Transpose | TokenDense | Attention | LayerNorm | WeightOp

# ops whose `weight` names one weight of the graph
WEIGHTED = (Conv, Dense, ChannelOp, TokenDense, WeightOp)
# the matrix products a transformation can shrink
PRODUCTS = (Conv, Dense, TokenDense)

POINTWISE = {"relu", "clip", "cast", "requantize", "negative", "sqrt", "erf", "tanh", "exp",
             "sigmoid"}
ELEMENTWISE = {"elementwise-add", "elementwise-sub", "elementwise-mul", "elementwise-div"}


def kind_of(op: Op) -> str:
    if isinstance(op, Conv):
        return "conv"
    if isinstance(op, Pointwise):
        return op.op.name
    if isinstance(op, ChannelOp):
        return "bias" if op.compute == "elementwise-add" else "scale"
    if isinstance(op, Pool):
        return "maxpool" if op.reduce == "reduce-max" else "avgpool"
    if isinstance(op, (TokenDense, Dense)):
        return "dense"
    if isinstance(op, LayerNorm):
        return "layernorm"
    return type(op).__name__.lower()


@dataclass(frozen=True)
class Layer:
    name: str
    op: Op
    inputs: tuple[str, ...] = ()
    span: Any = field(default=None, compare=False)


@dataclass
class Graph:
    """Layers in topological order; `lets` gives the program's `let` names back."""

    path: str
    inputs: dict[str, TensorDecl]
    layers: dict[str, Layer]
    output: str
    weights: dict[str, Array]
    weight_decls: dict[str, TensorDecl]
    lets: dict[str, str] = field(default_factory=dict)  # layer name → its let name

    def consumers(self, name: str) -> list[str]:
        return [layer.name for layer in self.layers.values() if name in layer.inputs]

    def weight(self, name: str) -> Array:
        return self.weights[name]

    def dtype(self) -> str:
        dtypes = {d.dtype for d in (*self.inputs.values(), *self.weight_decls.values())}
        return "f32" if dtypes == {"f32"} else "/".join(sorted(dtypes))

    def with_layers(self, layers: dict[str, Layer], weights: dict[str, Array],
                    lets: dict[str, str] | None = None) -> Graph:
        """A new graph (the transformations' result): weight declarations follow `weights`."""
        decls = {}
        sources = [d.source for d in self.weight_decls.values() if d.source]
        default = sources[0] if sources else "weights.npz"
        for name, array in weights.items():
            old = self.weight_decls.get(name)
            dtype = old.dtype if old is not None else "f32"
            decls[name] = TensorDecl(name, tuple(array.shape), dtype, "weight",
                                     old.source if old and old.source else default,
                                     old.key if old else None)
        return replace(self, layers=layers, weights=weights, weight_decls=decls,
                       lets=dict(self.lets if lets is None else lets))


# -- building terms (lowering) ----------------------------------------------------------------


def conv_out_hw(in_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                pads: tuple[int, int, int, int]) -> tuple[int, int]:
    top, left, bottom, right = pads
    return ((in_hw[0] + top + bottom - kernel[0]) // stride[0] + 1,
            (in_hw[1] + left + right - kernel[1]) // stride[1] + 1)


class Builder:
    """Builds layers' terms, typing them as it goes (shapes decide some idioms)."""

    def __init__(self, tensors: dict[str, TensorDecl], weights: dict[str, Array]):
        self.tensors = tensors
        self.weights = weights
        self.types: TypeTable = {}

    def full(self, term: Term) -> tuple[int, ...]:
        return infer_access(term, self.tensors, self.types).full

    def build(self, op: Op, operands: list[Term], name: str) -> Term:
        if isinstance(op, Input):
            return B.tensor(name)
        if isinstance(op, Conv):
            return self.conv(op, operands[0])
        if isinstance(op, Dense):
            x = B.access(operands[0], 1) if op.wrap else operands[0]
            return B.dense(x, B.tensor(op.weight))
        if isinstance(op, ChannelOp):
            return self.channel_op(op, operands[0])
        if isinstance(op, Pointwise):
            return B.op("compute", op.op, operands[0])
        if isinstance(op, ScalarOp):
            spread = B.broadcast(op.source, self.full(operands[0]), ())
            pair = (spread, operands[0]) if op.constant_first else (operands[0], spread)
            return B.compute(op.compute, B.op("access-pair", *pair))
        if isinstance(op, Pool):
            return pool(operands[0], op)
        if isinstance(op, GlobalPool):
            dims = self.full(operands[0])
            mean = B.compute("reduce-mean", B.access(operands[0], 2))
            return B.reshape(mean, (*dims[:2], *(1 for _ in dims[2:])), ())
        if isinstance(op, Binary):
            return B.compute(op.compute, B.op("access-pair", *operands))
        if isinstance(op, Concat):
            return B.op("access-concatenate", operands[0], operands[1], op.axis)
        if isinstance(op, Slice):
            return B.op("access-slice", operands[0], op.axis, op.low, op.high)
        if isinstance(op, Transpose):
            return B.transpose(operands[0], *op.permutation)
        if isinstance(op, TokenDense):
            return self.token_dense(op, operands[0])
        if isinstance(op, Attention):
            return self.attention(op, *operands)
        if isinstance(op, LayerNorm):
            return self.layer_norm(op, operands[0])
        if isinstance(op, WeightOp):
            pair = (B.tensor(op.weight), operands[0]) if op.weight_first else \
                (operands[0], B.tensor(op.weight))
            return B.compute(op.compute, B.op("access-pair", *pair))
        if isinstance(op, Pad):
            return B.op("access-pad", operands[0], Symbol(op.kind), op.axis, op.before,
                        op.after)
        assert isinstance(op, Reshape)
        return B.reshape(operands[0], op.dims, op.items)

    def conv(self, op: Conv, x: Term) -> Term:
        out_channels, per_group, kh, kw = (int(d) for d in self.weights[op.weight].shape)
        weights = B.tensor(op.weight)
        channels = per_group * op.groups
        if op.groups == 1:
            return B.conv2d_nchw(x, weights, channels, (kh, kw), op.stride, op.pads)
        if op.groups == channels == out_channels:
            batch, _, height, width = self.full(x)
            out_hw = conv_out_hw((height, width), (kh, kw), op.stride, op.pads)
            return B.depthwise_conv2d_nchw(x, weights, batch, channels, out_hw, (kh, kw),
                                           op.stride, op.pads)
        batch, _, height, width = self.full(x)
        return B.grouped_conv2d_nchw(x, weights, op.groups, per_group,
                                     out_channels // op.groups, (kh, kw), op.stride, op.pads,
                                     batch, (height, width))

    def channel_op(self, op: ChannelOp, x: Term) -> Term:
        dims = self.full(x)
        if op.style == "insert-axis" and op.compute == "elementwise-add":
            return B.channel_bias(x, B.tensor(op.weight), dims, op.axis)
        vector: Term = B.tensor(op.weight)
        if op.style == "insert-axis":
            for axis in range(len(dims)):
                if axis != op.axis:
                    vector = B.op("access-insert-axis", vector, axis)
        else:
            vector = B.reshape(vector, tuple(d if a == op.axis else 1 for a, d in
                                             enumerate(dims)), ())
        return B.compute(op.compute, B.op("access-pair", x, B.broadcast(vector, dims, ())))


    # The transformer idioms, built exactly as glensidec.frontends.importer builds them.
    def token_dense(self, op: TokenDense, x: Term) -> Term:
        dims = self.full(x)
        units = int(self.weights[op.weight].shape[0])
        flat = B.reshape(x, (math.prod(dims[:-1]), dims[-1]), ())
        product = B.matmul(B.access(flat, 1), B.access(B.tensor(op.weight), 1))
        return B.reshape(product, (*dims[:-1], units), ())

    def attention(self, op: Attention, q: Term, k: Term, v: Term) -> Term:
        batch, tokens, width = self.full(q)
        head = width // op.heads

        def split(x: Term, key: bool = False) -> Term:  # (1, T, H·dh) → (1, H, T, dh)
            parted = B.reshape(x, (batch, tokens, op.heads, head), ())
            return B.transpose(parted, 0, 2, 3, 1) if key else B.transpose(parted, 0, 2, 1, 3)

        scores = self.batched_matmul(split(q), split(k, key=True))
        dims = self.full(scores)
        scaled = B.compute("elementwise-mul", B.op("access-pair", scores, broadcast_to(
            op.scale, self.full(op.scale), dims)))
        weights = B.access(B.compute("softmax", B.access(scaled, len(dims) - 1)), len(dims))
        context = self.batched_matmul(weights, split(v))
        return B.reshape(B.transpose(context, 0, 2, 1, 3), (batch, tokens, width), ())

    def batched_matmul(self, a: Term, b: Term) -> Term:
        """The importer's batched MatMul of two activations of one batch shape: one matrix
        product per batch index, stacked with access-concatenate."""
        a_shape, b_shape = self.full(a), self.full(b)
        batch, m, n = a_shape[:-2], a_shape[-2], b_shape[-1]
        count = math.prod(batch)
        flat_a = B.reshape(a, (count, *a_shape[-2:]), ())
        flat_b = B.reshape(b, (count, *b_shape[-2:]), ())
        result: Term | None = None
        for index in range(count):
            left = B.reshape(B.op("access-slice", flat_a, 0, index, index + 1), a_shape[-2:], ())
            right = B.reshape(B.op("access-slice", flat_b, 0, index, index + 1), b_shape[-2:],
                              ())
            product = B.matmul(B.access(left, 1), B.access(B.transpose(right, 1, 0), 1))
            part = B.reshape(product, (1, m, n), ())
            result = part if result is None else B.op("access-concatenate", result, part, 0)
        assert result is not None
        return B.reshape(result, (*batch, m, n), ())

    def layer_norm(self, op: LayerNorm, x: Term) -> Term:
        dims = self.full(x)
        axis = len(dims) - 1
        kept = (*dims[:axis], 1)

        def mean(term: Term) -> Term:
            return B.reshape(B.compute("reduce-mean", B.access(term, axis)), kept, ())

        centred = B.compute("elementwise-sub", B.op("access-pair", x, B.broadcast(mean(x), dims,
                                                                                  ())))
        variance = mean(B.compute("elementwise-mul", B.op("access-pair", centred, centred)))
        epsilon = broadcast_to(op.epsilon, self.full(op.epsilon), kept)
        deviation = B.compute("sqrt", B.compute("elementwise-add",
                                                B.op("access-pair", variance, epsilon)))
        return B.compute("elementwise-div", B.op("access-pair", centred,
                                                 B.broadcast(deviation, dims, ())))


def literal(value: float) -> Term:
    """A constant as the importer writes a scalar: (access-literal (literal value))."""
    return B.op("access-literal", B.op("literal", float(value)))


def pool(x: Term, op: Pool) -> Term:
    kind = "min-padding" if op.reduce == "reduce-max" else "zero-padding"
    top, left, bottom, right = op.pads
    padded = B.pad(B.pad(x, 2, top, bottom, kind), 3, left, right, kind)
    windows = B.op("access-windows", B.access(padded, 2), B.shape(*op.kernel),
                   B.shape(*op.stride))
    return B.compute(op.reduce, windows)


def lower(graph: Graph, weights_file: str | None = None, path: str | None = None) -> Program:
    """The graph as a program: `let` for every named layer, weights from `weights_file`."""
    decls = {name: replace(decl, source=weights_file or decl.source, key=None)
             if weights_file else decl for name, decl in graph.weight_decls.items()}
    tensors = {**graph.inputs, **decls}
    builder = Builder(tensors, graph.weights)
    terms: dict[str, Term] = {}
    names: dict[Term, str] = {}
    for layer in graph.layers.values():
        term = builder.build(layer.op, [terms[i] for i in layer.inputs], layer.name)
        terms[layer.name] = term
        if layer.name in graph.lets and term.op != "access-tensor":
            names.setdefault(term, graph.lets[layer.name])
    used = {t.args[0].name for t in postorder(terms[graph.output])
            if t.op == "access-tensor" and isinstance(t.args[0], Symbol)}
    tensors = {name: decl for name, decl in tensors.items()
               if decl.role == "input" or name in used}
    return Program(path or graph.path, tensors, terms[graph.output], names)


# -- recognising idioms (lifting) -------------------------------------------------------------


def _unpad(term: Term, kind: str) -> tuple[Term, tuple[int, int, int, int]]:
    """builders.pad(pad(x, 2, top, bottom), 3, left, right) → (x, pads)."""
    top = left = bottom = right = 0
    if term.op == "access-pad" and term.args[2] == 3 and term.args[1] == Symbol(kind):
        left, right = _int(term.args[3]), _int(term.args[4])
        term = _child(term, 0)
    if term.op == "access-pad" and term.args[2] == 2 and term.args[1] == Symbol(kind):
        top, bottom = _int(term.args[3]), _int(term.args[4])
        term = _child(term, 0)
    return term, (top, left, bottom, right)


def _int(arg: object) -> int:
    if not isinstance(arg, int):
        raise _NoMatch
    return arg


def _child(term: Term, index: int) -> Term:
    arg = term.args[index] if index < len(term.args) else None
    if not isinstance(arg, Term):
        raise _NoMatch
    return arg


def _ints(term: Term) -> tuple[int, ...]:
    return tuple(_int(a) for a in term.args)


def _tensor_name(term: Term) -> str:
    if term.op != "access-tensor" or not isinstance(term.args[0], Symbol):
        raise _NoMatch
    return term.args[0].name


def _split_source(term: Term) -> Term:
    """x of the attention's head split transpose(reshape(x, (1, T, H, dh)), …)."""
    if term.op != "access-transpose":
        raise _NoMatch
    return _child(_child(term, 0), 0)


def _spread_sources(spread: Term) -> list[Term]:
    """What a broadcast constant may have been before broadcast_to: the broadcast's operand,
    or that operand before the reshape broadcast_to adds (the rebuild decides which)."""
    if spread.op != "access-broadcast":
        return [spread]
    inner = _child(spread, 0)
    found = [inner]
    if inner.op == "access-reshape":
        found.append(_child(inner, 0))
    return [t for t in found if not any(s.op == "access-tensor" for s in postorder(t))]


class _NoMatch(Exception):
    """This term is not the idiom being tried."""


class Lifter:
    def __init__(self, program: Program, weights: dict[str, Array], types: TypeTable):
        self.program = program
        self.weights = weights
        self.types = types
        self.builder = Builder(program.tensors, weights)
        self.builder.types = types
        self.layers: dict[str, Layer] = {}
        self.by_term: dict[Term, str] = {}
        self.lets: dict[str, str] = {}
        self.group_of: dict[str, str] = {}  # layer → the let it was written in
        self.taken = set(program.names.values()) | set(program.tensors)

    def is_weight(self, name: str) -> bool:
        decl = self.program.tensors.get(name)
        return decl is not None and decl.role == "weight"

    def full(self, term: Term) -> tuple[int, ...]:
        return self.builder.full(term)

    # Each matcher returns (op, operand terms) or raises _NoMatch.
    def match(self, term: Term) -> tuple[Op, list[Term]]:
        for matcher in (self.input, self.conv, self.grouped_conv, self.depthwise,
                        self.token_dense, self.attention, self.layer_norm, self.dense,
                        self.channel_op, self.scalar_op, self.weight_op, self.binary,
                        self.pointwise, self.pool, self.global_pool, self.concat, self.reshape,
                        self.slice, self.pad, self.transpose):
            try:
                op, operands = matcher(term)
            except _NoMatch:
                continue
            if matcher == self.input or self.builder.build(op, operands, "") == term:
                return op, operands
        raise GlensideError(f"not a layer the NAS layer graph knows: ({term.op} …) is not "
                            f"one of the builders' idioms (conv, dense, bias, relu/clip, "
                            f"pools, add, concat, reshape, attention, layer norm)", term.span,
                            self.program.path)

    def input(self, term: Term) -> tuple[Op, list[Term]]:
        name = _tensor_name(term)
        if self.is_weight(name):
            raise GlensideError(f"weight '{name}' is used outside a layer idiom", term.span,
                                self.program.path)
        return Input(), []

    def conv_parts(self, term: Term) -> tuple[Term, Term, Conv]:
        """builders.conv2d_nchw → (activations, weights term, params without the weight)."""
        if term.op != "access-transpose" or _child(term, 1) != B.op("list", 1, 0, 2, 3):
            raise _NoMatch
        product = _child(term, 0)
        pairs = _child(product, 1)
        if product.op != "compute" or pairs.op != "access-cartesian-product":
            raise _NoMatch
        weights = _child(_child(pairs, 0), 0)
        windows = _child(_child(_child(pairs, 1), 0), 0)
        if windows.op != "access-windows":
            raise _NoMatch
        x, pads = _unpad(_child(_child(windows, 0), 0), "zero-padding")
        stride = _ints(_child(windows, 2))[1:]
        return x, weights, Conv("", 1, (stride[0], stride[1]), pads)

    def conv(self, term: Term) -> tuple[Op, list[Term]]:
        x, weights, op = self.conv_parts(term)
        return replace(op, weight=self.weight_of(weights, 4)), [x]

    def weight_of(self, term: Term, rank: int) -> str:
        name = _tensor_name(term)
        if not self.is_weight(name) or len(self.program.tensors[name].shape) != rank:
            raise _NoMatch
        return name

    def grouped_conv(self, term: Term) -> tuple[Op, list[Term]]:
        """builders.grouped_conv2d_nchw: a reshape of one dot-product over the pair of the
        group-split windows and the filters, both broadcast."""
        product = _child(term, 0)
        pair = _child(product, 1)
        if term.op != "access-reshape" or product.op != "compute" or \
                product.args[0] != ComputeOp("dot-product") or pair.op != "access-pair":
            raise _NoMatch
        spread, pixels = _child(pair, 0), _child(pair, 1)
        windows, filters = _child(spread, 0), _child(pixels, 0)
        if windows.op != "access-windows" or filters.op != "access-reshape":
            raise _NoMatch
        split = _child(_child(windows, 0), 0)
        if split.op != "access-reshape":
            raise _NoMatch
        x, pads = _unpad(_child(split, 0), "zero-padding")
        weight = self.weight_of(_child(filters, 0), 4)
        groups = self.full(x)[1] // self.program.tensors[weight].shape[1]
        stride = _ints(_child(windows, 2))[1:]
        return Conv(weight, groups, (stride[0], stride[1]), pads), [x]

    def depthwise(self, term: Term) -> tuple[Op, list[Term]]:
        pair = _child(term, 1)
        if term.op != "compute" or term.args[0] != ComputeOp("dot-product") or \
                pair.op != "access-pair":
            raise _NoMatch
        windows, spread = _child(pair, 0), _child(pair, 1)
        if windows.op != "access-windows" or spread.op != "access-broadcast":
            raise _NoMatch
        x, pads = _unpad(_child(_child(windows, 0), 0), "zero-padding")
        weight = self.weight_of(_child(_child(spread, 0), 0), 4)
        stride = _ints(_child(windows, 2))
        channels = self.program.tensors[weight].shape[0]
        return Conv(weight, channels, (stride[0], stride[1]), pads), [x]

    def dense(self, term: Term) -> tuple[Op, list[Term]]:
        pairs = _child(term, 1)
        if term.op != "compute" or term.args[0] != ComputeOp("dot-product") or \
                pairs.op != "access-cartesian-product":
            raise _NoMatch
        left, right = _child(pairs, 0), _child(pairs, 1)
        if right.op != "access" or right.args[1] != 1:
            raise _NoMatch
        weight = self.weight_of(_child(right, 0), 2)
        if left.op == "access" and left.args[1] == 1 and len(self.full(_child(left, 0))) == 2:
            return Dense(weight, True), [_child(left, 0)]
        return Dense(weight, False), [left]

    def channel_op(self, term: Term) -> tuple[Op, list[Term]]:
        x, spread, compute = self._pair_with_spread(term)
        source = _child(spread, 0)
        style = "reshape" if source.op == "access-reshape" else "insert-axis"
        leaf = source
        while leaf.op in ("access-insert-axis", "access-reshape"):
            leaf = _child(leaf, 0)
        weight = self.weight_of(leaf, 1)
        dims = self.full(x)
        length = self.program.tensors[weight].shape[0]
        axes = [a for a, d in enumerate(dims) if d == length]
        for axis in axes:
            op = ChannelOp(compute, weight, axis, style)
            if self.builder.build(op, [x], "") == term:
                return op, [x]
        raise _NoMatch

    def _pair_with_spread(self, term: Term) -> tuple[Term, Term, str]:
        pair = _child(term, 1)
        if term.op != "compute" or not isinstance(term.args[0], ComputeOp) or \
                term.args[0].name not in ELEMENTWISE or pair.op != "access-pair":
            raise _NoMatch
        spread = _child(pair, 1)
        if spread.op != "access-broadcast":
            raise _NoMatch
        return _child(pair, 0), spread, term.args[0].name

    def scalar_op(self, term: Term) -> tuple[Op, list[Term]]:
        pair = _child(term, 1)
        if term.op != "compute" or not isinstance(term.args[0], ComputeOp) or \
                term.args[0].name not in ELEMENTWISE or pair.op != "access-pair":
            raise _NoMatch
        for first in (False, True):
            spread, x = (_child(pair, 0), _child(pair, 1)) if first else \
                (_child(pair, 1), _child(pair, 0))
            if spread.op == "access-broadcast" and not any(
                    t.op == "access-tensor" for t in postorder(_child(spread, 0))):
                return ScalarOp(term.args[0].name, _child(spread, 0), first), [x]
        raise _NoMatch

    def binary(self, term: Term) -> tuple[Op, list[Term]]:
        pair = _child(term, 1)
        if term.op != "compute" or not isinstance(term.args[0], ComputeOp) or \
                term.args[0].name not in ELEMENTWISE or pair.op != "access-pair":
            raise _NoMatch
        left, right = _child(pair, 0), _child(pair, 1)
        if self.full(left) != self.full(right) or "access-broadcast" in (left.op, right.op):
            raise _NoMatch
        return Binary(term.args[0].name), [left, right]

    def pointwise(self, term: Term) -> tuple[Op, list[Term]]:
        if term.op != "compute" or not isinstance(term.args[0], ComputeOp) or \
                term.args[0].name not in POINTWISE:
            raise _NoMatch
        return Pointwise(term.args[0]), [_child(term, 1)]

    def pool(self, term: Term) -> tuple[Op, list[Term]]:
        windows = _child(term, 1)
        if term.op != "compute" or term.args[0] not in (ComputeOp("reduce-max"),
                                                        ComputeOp("reduce-mean")) \
                or windows.op != "access-windows":
            raise _NoMatch
        reduce = str(term.args[0].name)  # type: ignore[union-attr]
        kind = "min-padding" if reduce == "reduce-max" else "zero-padding"
        x, pads = _unpad(_child(_child(windows, 0), 0), kind)
        kernel, stride = _ints(_child(windows, 1)), _ints(_child(windows, 2))
        if len(kernel) != 2 or len(stride) != 2:
            raise _NoMatch
        return Pool(reduce, (kernel[0], kernel[1]), (stride[0], stride[1]), pads), [x]

    def global_pool(self, term: Term) -> tuple[Op, list[Term]]:
        mean = _child(term, 0)
        if term.op != "access-reshape" or mean.op != "compute" or \
                mean.args[0] != ComputeOp("reduce-mean"):
            raise _NoMatch
        return GlobalPool(), [_child(_child(mean, 1), 0)]

    def concat(self, term: Term) -> tuple[Op, list[Term]]:
        if term.op != "access-concatenate":
            raise _NoMatch
        return Concat(_int(term.args[2])), [_child(term, 0), _child(term, 1)]

    def reshape(self, term: Term) -> tuple[Op, list[Term]]:
        if term.op != "access-reshape":
            raise _NoMatch
        target = _child(term, 1)
        return Reshape(_ints(_child(target, 0)), _ints(_child(target, 1))), [_child(term, 0)]

    def slice(self, term: Term) -> tuple[Op, list[Term]]:
        if term.op != "access-slice":
            raise _NoMatch
        return Slice(*(_int(a) for a in term.args[1:])), [_child(term, 0)]

    def transpose(self, term: Term) -> tuple[Op, list[Term]]:
        if term.op != "access-transpose":
            raise _NoMatch
        return Transpose(_ints(_child(term, 1))), [_child(term, 0)]

    def token_dense(self, term: Term) -> tuple[Op, list[Term]]:
        """reshape(matmul(access(reshape(x, (rows, K)), 1), access(W, 1)), (…, units))."""
        product = _child(term, 0)
        if term.op != "access-reshape" or product.op != "compute":
            raise _NoMatch
        op, operands = self.dense(product)
        flat = operands[0]
        if not isinstance(op, Dense) or not op.wrap or flat.op != "access-reshape":
            raise _NoMatch
        x = _child(flat, 0)
        if len(self.full(x)) < 3:
            raise _NoMatch
        return TokenDense(op.weight), [x]

    def attention(self, term: Term) -> tuple[Op, list[Term]]:
        """The merged context: reshape(transpose(context, 0 2 1 3)); q, k and v are found
        inside (the first head's products) and the whole rebuilt to compare."""
        context = _child(_child(term, 0), 0)
        if term.op != "access-reshape" or context.op != "access-reshape":
            raise _NoMatch
        heads = _ints(_child(_child(context, 1), 0))
        if len(heads) != 4:
            raise _NoMatch
        weights, v = self._first_product(context)
        scaled = _child(_child(_child(weights, 0), 1), 0)
        if scaled.op != "compute" or scaled.args[0] != ComputeOp("elementwise-mul"):
            raise _NoMatch
        scores, spread = _child(_child(scaled, 1), 0), _child(_child(scaled, 1), 1)
        q, k = self._first_product(scores)
        operands = [_split_source(q), _split_source(k), _split_source(v)]
        for scale in _spread_sources(spread):
            op = Attention(heads[1], scale)
            if self.builder.build(op, operands, "") == term:
                return op, operands
        raise _NoMatch

    def _first_product(self, stacked: Term) -> tuple[Term, Term]:
        """The operands a, b of the first per-head product of batched_matmul(a, b)."""
        part = _child(stacked, 0)
        while part.op == "access-concatenate":
            part = _child(part, 0)
        pairs = _child(_child(part, 0), 1)
        if pairs.op != "access-cartesian-product":
            raise _NoMatch
        left = _child(_child(_child(_child(pairs, 0), 0), 0), 0)  # access(reshape(slice(…)))
        right = _child(_child(_child(_child(_child(pairs, 1), 0), 0), 0), 0)
        return _child(left, 0), _child(right, 0)

    def layer_norm(self, term: Term) -> tuple[Op, list[Term]]:
        pair = _child(term, 1)
        if term.op != "compute" or term.args[0] != ComputeOp("elementwise-div") or \
                pair.op != "access-pair":
            raise _NoMatch
        centred, spread = _child(pair, 0), _child(pair, 1)
        if centred.op != "compute" or centred.args[0] != ComputeOp("elementwise-sub"):
            raise _NoMatch
        x = _child(_child(centred, 1), 0)
        variance_plus = _child(_child(spread, 0), 1)  # sqrt(add(variance, ε))
        if variance_plus.op != "compute":
            raise _NoMatch
        for epsilon in _spread_sources(_child(_child(variance_plus, 1), 1)):
            op = LayerNorm(epsilon)
            if self.builder.build(op, [x], "") == term:
                return op, [x]
        raise _NoMatch

    def weight_op(self, term: Term) -> tuple[Op, list[Term]]:
        pair = _child(term, 1)
        if term.op != "compute" or not isinstance(term.args[0], ComputeOp) or \
                term.args[0].name not in ELEMENTWISE or pair.op != "access-pair":
            raise _NoMatch
        for first in (False, True):
            weight, x = (_child(pair, 0), _child(pair, 1)) if first else \
                (_child(pair, 1), _child(pair, 0))
            try:
                name = _tensor_name(weight)
            except _NoMatch:
                continue
            if self.is_weight(name) and self.full(weight) == self.full(x):
                return WeightOp(term.args[0].name, name, first), [x]
        raise _NoMatch

    def pad(self, term: Term) -> tuple[Op, list[Term]]:
        if term.op != "access-pad" or not isinstance(term.args[1], Symbol):
            raise _NoMatch
        axis, before, after = (_int(a) for a in term.args[2:])
        return Pad(axis, before, after, term.args[1].name), [_child(term, 0)]

    # -- the walk -----------------------------------------------------------------------------
    def lift(self, root: Term) -> str:
        """Lift every term the root depends on, operands first (iteratively: nets are deep)."""
        stack: list[tuple[Term, str, bool]] = [(root, self.program.names.get(root, "out"),
                                                False)]
        pending: dict[Term, tuple[Op, list[Term], str]] = {}
        while stack:
            term, let, ready = stack.pop()
            if term in self.by_term:
                continue
            if not ready:
                op, operands = self.match(term)
                group = self.program.names.get(term, let)
                pending[term] = (op, operands, group)
                stack.append((term, let, True))
                stack.extend((o, group, False) for o in reversed(operands)
                             if o not in self.by_term)
                continue
            op, operands, group = pending.pop(term)
            self.add(term, op, [self.by_term[o] for o in operands], group)
        return self.by_term[root]

    def add(self, term: Term, op: Op, inputs: list[str], group: str) -> None:
        if isinstance(op, Input):
            name = _tensor_name(term)
        elif term in self.program.names:
            name = self.program.names[term]
            self.lets[name] = name
        else:
            name = self.fresh(f"{group}.{kind_of(op)}")
        self.layers[name] = Layer(name, op, tuple(inputs), term.span)
        self.by_term[term] = name
        self.group_of[name] = name if name in self.lets else group

    def fresh(self, wanted: str) -> str:
        name, counter = wanted, 2
        while name in self.taken:
            name, counter = f"{wanted}{counter}", counter + 1
        self.taken.add(name)
        return name


def lift(program: Program, weights: dict[str, Array], types: TypeTable | None = None) -> Graph:
    """The program as a layer graph; a term outside the idioms is a located error."""
    types = infer(program.root, program.tensors) if types is None else types
    lifter = Lifter(program, weights, types)
    output = lifter.lift(program.root)
    graph = Graph(program.path, {d.name: d for d in program.inputs()}, lifter.layers, output,
                  {d.name: weights[d.name] for d in program.weights()},
                  {d.name: d for d in program.weights()}, lifter.lets)
    return name_layers_by_let(graph, lifter.group_of)


def name_layers_by_let(graph: Graph, group_of: dict[str, str]) -> Graph:
    """A let holding one conv or dense (plus bias, activation…) names that conv or dense.

    `conv1 = relu(bias(conv(x)))` lifts to layers conv1.relu… ; the user calls the conv
    `conv1`, so the conv takes the let's name and the let's top layer keeps the let.
    """
    groups: dict[str, list[str]] = {}
    for name, layer in graph.layers.items():
        if not isinstance(layer.op, Input):
            groups.setdefault(group_of[name], []).append(name)
    renames: dict[str, str] = {}
    for group, members in groups.items():
        products = [m for m in members if isinstance(graph.layers[m].op, PRODUCTS)]
        if len(products) == 1 and products[0] != group and group in graph.lets:
            renames[products[0]] = group
            renames[group] = graph_fresh(graph, f"{group}.{kind_of(graph.layers[group].op)}")
    if not renames:
        return graph
    return rename(graph, renames)


def graph_fresh(graph: Graph, wanted: str) -> str:
    name, counter = wanted, 2
    while name in graph.layers or name in graph.inputs or name in graph.weights:
        name, counter = f"{wanted}{counter}", counter + 1
    return name


def rename(graph: Graph, renames: dict[str, str]) -> Graph:
    def new(name: str) -> str:
        return renames.get(name, name)

    layers = {new(n): replace(layer, name=new(n), inputs=tuple(new(i) for i in layer.inputs))
              for n, layer in graph.layers.items()}
    lets = {new(n): let for n, let in graph.lets.items()}
    return replace(graph, layers=layers, output=new(graph.output), lets=lets)


# -- shapes --------------------------------------------------------------------------------


def shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    """Every layer's output shape (full), by building and typing the graph's terms."""
    tensors = {**graph.inputs, **graph.weight_decls}
    builder = Builder(tensors, graph.weights)
    terms: dict[str, Term] = {}
    result = {}
    for layer in graph.layers.values():
        terms[layer.name] = builder.build(layer.op, [terms[i] for i in layer.inputs],
                                          layer.name)
        result[layer.name] = builder.full(terms[layer.name])
    return result


def conv_dims(graph: Graph, layer: Layer) -> tuple[int, int, tuple[int, int]]:
    """(in channels, out channels, kernel) of a conv layer."""
    assert isinstance(layer.op, Conv)
    out_channels, per_group, kh, kw = graph.weights[layer.op.weight].shape
    return int(per_group) * layer.op.groups, int(out_channels), (int(kh), int(kw))


def params_and_macs(graph: Graph, layer: Layer,
                    shape_of: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    """Weights (parameters) and multiply-accumulates of one conv or dense layer."""
    if isinstance(layer.op, Conv):
        weights = graph.weights[layer.op.weight]
        out = shape_of[layer.name]
        return int(weights.size), int(weights.size) * out[0] * out[2] * out[3]
    if isinstance(layer.op, Dense):
        weights = graph.weights[layer.op.weight]
        return int(weights.size), int(weights.size) * math.prod(shape_of[layer.name][:-1])
    return 0, 0
