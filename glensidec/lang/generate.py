"""Random well-typed programs, driven by the construct table: the differential fuzzer's
generator (glensidec.cosim.fuzz runs each one three ways).

A program is grown bottom-up. It starts from one or two declared tensors; each step picks a
construct of the registry (`constructs.Group.ACCESS`), and that construct's generator in
`GENERATORS` builds a term of it over earlier terms (the *pool*), choosing arguments the
construct's type rule accepts. `compute` picks a compute type the same way, from
`COMPUTE_GENERATORS`. The shape helpers (`shape`, `shape-of`, `slice-shape`, …),
`literal`, `list` and `construct-tuple` are written as the arguments that need them
(`shape_term`, `access_shape_term`). Every new term is type-checked at once
(`typecheck.infer`); a generator that builds an ill-typed term is a bug of the generator
and raises `GeneratorBug`. The result is the term that holds the most constructs.

Everything is drawn from `random.Random(f"{seed}:{index}")`, so a program is reproducible
from (seed, index) alone. Shapes are small (dims mostly 1..7, at most `max_elements` per
term) and arrays small (2x2 … 4x4), so matrix products are blocked onto the array with
padding (dimensions that are not multiples of its size). `let` names and tensor names are
drawn from a hostile set (C keywords, `main`, `argc`, loop indices, libc and runtime
names), every one the parser accepts as a name (`legal_names`).

A new construct joins the generator with one entry in `GENERATORS` (an access construct)
or `COMPUTE_GENERATORS` (a compute type); tests/test_constructs.py fails for a construct
that has none, and tests/test_fuzz.py for one that a few hundred programs never contain.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from glensidec.errors import GlensideError
from glensidec.lang.constructs import PAD_TYPES, ComputeKind, Group
from glensidec.lang.data import random_tensor
from glensidec.lang.dtypes import LOOKUP_FUNCTIONS, Array, integer_range
from glensidec.lang.syntax import format_program, parse_program
from glensidec.lang.terms import ComputeOp, Program, Symbol, TensorDecl, Term, postorder
from glensidec.lang.typecheck import AccessType, TypeTable, infer

# Names that collide with something in the generated C or its tools: C keywords and
# types, `main` and its arguments, the emitted loops' indices and buffers, libc and the
# runtime's own names, the language's declaration words, names C cannot spell.
HOSTILE_NAMES = (
    "int", "for", "if", "else", "while", "do", "return", "static", "const", "void", "char",
    "float", "double", "long", "short", "signed", "unsigned", "struct", "union", "enum",
    "switch", "case", "default", "break", "continue", "goto", "sizeof", "typedef", "extern",
    "register", "volatile", "auto", "inline", "restrict", "_Bool",
    "main", "argc", "argv", "p0", "p1", "p2", "i", "j", "k", "n", "x", "acc", "sum", "out",
    "printf", "malloc", "free", "memcpy", "memset", "exit", "abs", "expf", "sqrtf", "fabsf",
    "NULL", "errno", "stdin", "stdout", "FILE", "size_t", "int8_t", "int32_t", "float_t",
    "gs_requantize", "gs_array_gemm", "gs_wrap_i8", "model_run", "weights", "arena", "gs_b",
    "input", "weight", "let", "quantized", "a.b", "x-1", "_", "__x", "relu_0", "v1.0",
    "relu", "compute", "access", "shape", "dot-product", "t_x", "t_t_x",
)
PLAIN_NAMES = tuple(f"t{index}" for index in range(64))
# The arrays the programs are written for: small, so the products block with padding.
ARRAY_SIZES = ((2, 2), (2, 3), (3, 2), (3, 3), (4, 4), (4, 3))
FAMILIES = (("i8", 5), ("i32", 2), ("f32", 3))  # a program's main dtype, by weight


class GeneratorBug(Exception):
    """The generator built a term the type checker rejects: a bug here, not in the program."""


@dataclass(frozen=True)
class Options:
    max_steps: int = 10  # constructs applied after the first tensors
    max_elements: int = 768  # per term: keeps the interpreter, C and RTL runs short
    hostile_names: bool = True  # tensor and let names from HOSTILE_NAMES (else t0, t1, …)


@dataclass(frozen=True)
class Generated:
    """One program and the data to run it on, reproducible from (seed, index)."""

    seed: int
    index: int
    program: Program
    weights: dict[str, Array]
    inputs: dict[str, Array]
    array: tuple[int, int]  # the array the hardware constructs are written for

    def text(self) -> str:
        return format_program(self.program)

    def uses(self) -> Counter[str]:
        """How many distinct terms of each construct and compute type the program holds."""
        return construct_counts(self.program.root)

    def needs_accel(self) -> bool:
        return any(term.op in Group.ACCELERATOR for term in postorder(self.program.root))


def construct_counts(root: Term) -> Counter[str]:
    counts: Counter[str] = Counter()
    for term in postorder(root):
        counts[term.op] += 1
        if term.op == "compute" and isinstance(term.args[0], ComputeOp):
            counts[term.args[0].name] += 1
    return counts


@dataclass
class Node:
    """A term of the pool, its type, and whether an f32 value is computed exactly alike by
    every implementation (views and copies of data, max, clip …, not sums or exp), so that
    a cast of it to an integer cannot round differently."""

    term: Term
    type: AccessType
    exact: bool = True
    used: int = 0

    @property
    def full(self) -> tuple[int, ...]:
        return self.type.full

    @property
    def dtype(self) -> str:
        return self.type.dtype


@dataclass
class Builder:
    """The program being grown: its tensors, their data, the pool of terms."""

    rng: random.Random
    options: Options
    family: str
    array: tuple[int, int]
    names: list[str]
    tensors: dict[str, TensorDecl] = field(default_factory=dict)
    data: dict[str, Array] = field(default_factory=dict)
    pool: list[Node] = field(default_factory=list)
    types: TypeTable = field(default_factory=dict)
    data_rng: np.random.Generator = field(default_factory=np.random.default_rng)
    head: Node | None = None  # the last step's result

    # -- names, tensors, terms ---------------------------------------------------------
    def fresh_name(self) -> str:
        taken = set(self.tensors)
        choices = [name for name in self.names if name not in taken]
        name = self.rng.choice(choices) if choices else f"t{len(taken)}"
        while name in taken:
            name += "_"
        return name

    def tensor(self, shape: tuple[int, ...], dtype: str | None = None,
               role: str | None = None) -> Node:
        """A new declared tensor and `(access-tensor NAME)` in the pool."""
        name = self.fresh_name()
        role = role or self.rng.choice(("input", "input", "weight"))
        decl = TensorDecl(name, tuple(shape), dtype or self.family, role,
                          source="weights.npz" if role == "weight" else None,
                          key=name if role == "weight" else None)
        self.tensors[name] = decl
        self.data[name] = random_tensor(decl, self.data_rng)
        return self.add(Term("access-tensor", (Symbol(name),)))

    def weight(self, array: Array, dtype: str) -> Node:
        """A new weight holding exactly `array` (multipliers, biases)."""
        node = self.tensor(array.shape, dtype, "weight")
        self.data[str(node.term.args[0])] = array
        return node

    def add(self, term: Term, exact: bool = True) -> Node:
        """Type `term` and put it in the pool (f32 `exact` as the generator knows it)."""
        try:
            infer(term, self.tensors, self.types)
        except GlensideError as error:
            raise GeneratorBug(f"{error}: {term}") from error
        access = self.types[term]
        assert isinstance(access, AccessType), term
        node = Node(term, access, exact or access.dtype != "f32")
        self.pool.append(node)
        return node

    def small(self, full: tuple[int, ...]) -> bool:
        return math.prod(full) <= self.options.max_elements

    # -- choosing ----------------------------------------------------------------------
    def pick(self, accept: Callable[[Node], bool] = lambda node: True) -> Node | None:
        """A pool term `accept` takes: mostly the last step's result (so steps chain into one
        program), else favouring recent and unused ones."""
        if self.head is not None and accept(self.head) and self.rng.random() < 0.85:
            self.head.used += 1
            return self.head
        found = [(index, node) for index, node in enumerate(self.pool) if accept(node)]
        if not found:
            return None
        weights = [(1 + index) ** 3 * (4 if node.used == 0 else 1) for index, node in found]
        node = self.rng.choices([n for _, n in found], weights)[0]
        node.used += 1
        return node

    def pick_or_new(self, accept: Callable[[Node], bool], shape: Callable[[], tuple[int, ...]],
                    dtype: str | None = None) -> Node:
        node = self.pick(accept) if self.rng.random() < 0.8 else None
        return node if node is not None else self.tensor(shape(), dtype)

    def dims(self, rank: int, low: int = 1, high: int = 6) -> tuple[int, ...]:
        return tuple(self.rng.randint(low, high) for _ in range(rank))

    def shape(self, low_rank: int = 1, high_rank: int = 3) -> tuple[int, ...]:
        return self.dims(self.rng.randint(low_rank, high_rank))

    def split(self, node: Node, axis: int) -> Node:
        """`node` with its access split at `axis` (itself when it is split there)."""
        if len(node.type.shape) == axis:
            return node
        return self.add(Term("access", (node.term, axis)), node.exact)

    def coerce(self, dtype: str) -> Node:
        """A term of `dtype`: mostly the last step's result, cast when it has another dtype
        (and casting it cannot round differently), else one of the pool or a new tensor."""
        head = self.head
        if head is not None and self.rng.random() < 0.85:
            if head.dtype == dtype:
                head.used += 1
                return head
            if head.exact and self.small(head.full):
                head.used += 1
                return self.add(Term("compute", (ComputeOp("cast", (dtype,)), head.term)))
        return self.pick_or_new(lambda n: n.dtype == dtype, lambda: self.shape(), dtype)

    def rows_of(self, dtype: str, depth: int | None = None) -> Node:
        """A term of `dtype` with one-axis items (of `depth` elements, when given): the
        last step's result re-split or reshaped, else one of the pool or a new tensor."""
        node = self.coerce(dtype)
        if depth is None and node.full:
            return self.split(node, len(node.full) - 1)
        size = math.prod(node.full)
        if depth is not None and node.full[-1:] == (depth,):
            return self.split(node, len(node.full) - 1)
        if depth is not None and size % depth == 0 and self.rng.random() < 0.8:
            target = Term("access-shape", (Term("shape", (size // depth,)),
                                           Term("shape", (depth,))))
            return self.add(Term("access-reshape", (node.term, target)), node.exact)
        fresh = self.tensor(self.dims(self.rng.randint(1, 2)) + (depth or self.rng.randint(1, 8),),
                            dtype)
        return self.split(fresh, len(fresh.full) - 1)

    def any_of(self, dtype: str | None = None) -> Node:
        return self.pick_or_new(lambda n: dtype is None or n.dtype == dtype,
                                lambda: self.shape(), dtype)


# -- argument terms: shapes, access shapes ----------------------------------------------


def shape_term(b: Builder, dims: tuple[int, ...], depth: int = 0) -> Term:
    """A term whose value is `dims`: `(shape …)`, or through `shape-of` a declared tensor's
    shape, `slice-shape`, `shape-insert-axis`, `shape-remove-axis`."""
    roll = b.rng.random()
    declared = [name for name, decl in b.tensors.items()
                if len(decl.shape) >= len(dims)
                and decl.shape[len(decl.shape) - len(dims):] == dims]
    if declared and roll < 0.35:
        name = b.rng.choice(declared)
        of = Term("shape-of", (Symbol(name),))
        start = len(b.tensors[name].shape) - len(dims)
        return of if start == 0 and b.rng.random() < 0.5 else Term("slice-shape", (of, start))
    if 1 in dims and roll < 0.55 and depth < 2:
        axis = b.rng.choice([k for k, d in enumerate(dims) if d == 1])
        return Term("shape-insert-axis", (shape_term(b, dims[:axis] + dims[axis + 1:],
                                                     depth + 1), axis))
    if roll < 0.65 and depth < 2:
        axis = b.rng.randint(0, len(dims))
        wider = dims[:axis] + (b.rng.randint(1, 4),) + dims[axis:]
        return Term("shape-remove-axis", (shape_term(b, wider, depth + 1), axis))
    return Term("shape", dims)


def access_shape_term(b: Builder, shape: tuple[int, ...], item: tuple[int, ...]) -> Term:
    """A term whose value is the access shape ((shape),(item)): `(access-shape …)`, or
    `(get-access-shape a)` of a pool term of exactly that shape."""
    same = [node for node in b.pool if (node.type.shape, node.type.item) == (shape, item)]
    if same and b.rng.random() < 0.4:
        return Term("get-access-shape", (b.rng.choice(same).term,))
    return Term("access-shape", (shape_term(b, shape), shape_term(b, item)))


def literal(value: int | float, dtype: str) -> Term:
    return Term("literal", (value, Symbol(dtype)))


# -- the access constructs --------------------------------------------------------------

Generator = Callable[[Builder], Node | None]
G = TypeVar("G", bound=Generator)
GENERATORS: dict[str, Generator] = {}


def generates(*names: str) -> Callable[[G], G]:
    def register(function: G) -> G:
        for name in names:
            GENERATORS[name] = function
        return function
    return register


@generates("access-tensor")
def _access_tensor(b: Builder) -> Node:
    dtype = b.family if b.rng.random() < 0.8 else b.rng.choice(("i8", "i32", "f32"))
    return b.tensor(b.shape(1, 4), dtype)


@generates("access")
def _access(b: Builder) -> Node:
    node = b.any_of()
    return b.add(Term("access", (node.term, b.rng.randint(0, len(node.full)))), node.exact)


@generates("access-transpose")
def _transpose(b: Builder) -> Node:
    node = b.pick_or_new(lambda n: len(n.full) >= 1, b.shape)
    permutation = list(range(len(node.full)))
    b.rng.shuffle(permutation)
    return b.add(Term("access-transpose", (node.term, Term("list", tuple(permutation)))),
                 node.exact)


def _with_item(b: Builder, item: tuple[int, ...], dtype: str, rank: int = 1) -> Node:
    """A term of items `item`: a pool term whose full shape ends in it, re-split, or a new
    tensor with `rank` access axes in front."""
    def fits(node: Node) -> bool:
        return (node.dtype == dtype and len(node.full) > len(item)
                and node.full[len(node.full) - len(item):] == item)
    node = b.pick_or_new(fits, lambda: b.dims(rank) + item, dtype)
    return b.split(node, len(node.full) - len(item))


@generates("access-cartesian-product")
def _cartesian_product(b: Builder) -> Node | None:
    left = b.pick_or_new(lambda n: len(n.full) >= 1, lambda: b.shape(2, 3))
    cut = b.rng.randint(0, len(left.full) - 1) if len(left.full) > 1 else 0
    left = b.split(left, cut)
    right = _with_item(b, left.type.item, left.dtype, b.rng.randint(1, 2))
    full = left.type.shape + right.type.shape + (2,) + left.type.item
    if not b.small(full):
        return None
    return b.add(Term("access-cartesian-product", (left.term, right.term)),
                 left.exact and right.exact)


def _same_shape(b: Builder, node: Node) -> Node:
    """A term of `node`'s access shape and dtype: another of the pool, or a new tensor."""
    def fits(other: Node) -> bool:
        return other is not node and other.dtype == node.dtype and other.full == node.full
    other = b.pick_or_new(fits, lambda: node.full, node.dtype)
    return b.split(other, len(node.type.shape))


@generates("access-pair")
def _pair(b: Builder) -> Node | None:
    left = b.any_of()
    right = _same_shape(b, left)
    if not b.small(left.full + (2,)):
        return None
    return b.add(Term("access-pair", (left.term, right.term)), left.exact and right.exact)


@generates("access-windows")
def _windows(b: Builder) -> Node | None:
    node = b.pick_or_new(lambda n: len(n.full) >= 1, lambda: b.shape(2, 3))
    if not node.type.item:
        node = b.split(node, b.rng.randint(0, len(node.full) - 1))
    window = tuple(b.rng.randint(1, d) for d in node.type.item)
    strides = tuple(b.rng.randint(1, 3) for _ in node.type.item)
    positions = tuple((d - w) // s + 1 for d, w, s in zip(node.type.item, window, strides,
                                                           strict=True))
    if not b.small(node.type.shape + positions + window):
        return None
    return b.add(Term("access-windows", (node.term, shape_term(b, window),
                                         shape_term(b, strides))), node.exact)


@generates("access-squeeze")
def _squeeze(b: Builder) -> Node:
    node = b.pick(lambda n: 1 in n.full)
    if node is None:
        node = _insert_axis(b)
    axis = b.rng.choice([k for k, d in enumerate(node.full) if d == 1])
    return b.add(Term("access-squeeze", (node.term, axis)), node.exact)


@generates("access-insert-axis")
def _insert_axis(b: Builder) -> Node:
    node = b.any_of()
    return b.add(Term("access-insert-axis", (node.term, b.rng.randint(0, len(node.full)))),
                 node.exact)


@generates("access-broadcast")
def _broadcast(b: Builder) -> Node | None:
    node = b.pick(lambda n: 1 in n.full)
    if node is None:
        node = _insert_axis(b)
    target = tuple(b.rng.randint(1, 4) if d == 1 else d for d in node.full)
    if not b.small(target):
        return None
    cut = b.rng.randint(0, len(target))
    return b.add(Term("access-broadcast", (node.term, access_shape_term(b, target[:cut],
                                                                        target[cut:]))),
                 node.exact)


@generates("access-pad")
def _pad(b: Builder) -> Node | None:
    node = b.pick_or_new(lambda n: len(n.full) >= 1, b.shape)
    axis = b.rng.randint(0, len(node.full) - 1)
    before, after = b.rng.randint(0, 3), b.rng.randint(0, 3)
    padded = list(node.full)
    padded[axis] += before + after
    if not b.small(tuple(padded)):
        return None
    return b.add(Term("access-pad", (node.term, Symbol(b.rng.choice(PAD_TYPES)), axis, before,
                                     after)), node.exact)


@generates("access-slice")
def _slice(b: Builder) -> Node:
    node = b.pick_or_new(lambda n: len(n.full) >= 1, b.shape)
    axis = b.rng.randint(0, len(node.full) - 1)
    low = b.rng.randint(0, node.full[axis] - 1)
    high = b.rng.randint(low + 1, node.full[axis])
    return b.add(Term("access-slice", (node.term, axis, low, high)), node.exact)


@generates("access-concatenate")
def _concatenate(b: Builder) -> Node | None:
    left = b.pick_or_new(lambda n: len(n.full) >= 1, b.shape)
    axis = b.rng.randint(0, len(left.full) - 1)

    def fits(node: Node) -> bool:
        return (node.dtype == left.dtype and len(node.full) == len(left.full)
                and all(d == e for k, (d, e) in enumerate(zip(node.full, left.full, strict=True))
                        if k != axis))
    other = list(left.full)
    other[axis] = b.rng.randint(1, 4)
    right = b.split(b.pick_or_new(fits, lambda: tuple(other), left.dtype),
                    len(left.type.shape))
    joined = list(left.full)
    joined[axis] += right.full[axis]
    if not b.small(tuple(joined)):
        return None
    return b.add(Term("access-concatenate", (left.term, right.term, axis)),
                 left.exact and right.exact)


@generates("access-flatten")
def _flatten(b: Builder) -> Node:
    node = b.any_of()
    return b.add(Term("access-flatten", (node.term,)), node.exact)


def _factor(b: Builder, total: int) -> tuple[int, ...]:
    """A random shape of `total` elements, rank 1 to 4."""
    dims = []
    for _ in range(b.rng.randint(0, 3)):
        divisors = [d for d in range(1, total + 1) if total % d == 0]
        dims.append(b.rng.choice(divisors))
        total //= dims[-1]
    dims.append(total)
    b.rng.shuffle(dims)
    return tuple(dims)


@generates("access-reshape")
def _reshape(b: Builder) -> Node:
    node = b.any_of()
    full = _factor(b, math.prod(node.full))
    cut = b.rng.randint(0, len(full))
    return b.add(Term("access-reshape", (node.term, access_shape_term(b, full[:cut],
                                                                      full[cut:]))), node.exact)


@generates("access-shift-right")
def _shift_right(b: Builder) -> Node:
    node = b.any_of()
    return b.add(Term("access-shift-right", (node.term,)), node.exact)


@generates("access-move-axis")
def _move_axis(b: Builder) -> Node:
    node = b.pick_or_new(lambda n: len(n.full) >= 1, b.shape)
    rank = len(node.full)
    return b.add(Term("access-move-axis", (node.term, b.rng.randint(0, rank - 1),
                                           b.rng.randint(0, rank - 1))), node.exact)


def _literal_value(b: Builder, dtype: str) -> int | float:
    if dtype == "f32":
        return round(b.rng.uniform(-4, 4), b.rng.choice((0, 1, 3)))
    low, high = integer_range(dtype)
    return b.rng.choice((0, 1, -1, low, high, b.rng.randint(max(low, -300), min(high, 300))))


@generates("access-literal")
def _access_literal(b: Builder) -> Node:
    """A scalar; usually given a pool term's rank and broadcast to its shape (the idiom
    of docs/language.md), so a later pair can combine it with that term."""
    like = b.any_of()
    scalar = b.add(Term("access-literal", (literal(_literal_value(b, like.dtype),
                                                   like.dtype),)))
    if b.rng.random() < 0.3:
        return scalar
    term = scalar.term
    for _ in like.full:
        term = Term("access-insert-axis", (term, 0))
    cut = len(like.type.shape)
    target = access_shape_term(b, like.full[:cut], like.full[cut:])
    return b.add(Term("access-broadcast", (term, target)))


@generates("compute")
def _compute(b: Builder) -> Node | None:
    return COMPUTE_GENERATORS[b.rng.choice(sorted(COMPUTE_GENERATORS))](b)


# -- hardware --------------------------------------------------------------------------


def _matrix_weights(b: Builder, rows: int, cols: int, dtype: str) -> Node:
    """A ((),(rows,cols)) weights operand: a new weight, or a transposed one."""
    if b.rng.random() < 0.5:
        return b.split(b.tensor((rows, cols), dtype, "weight"), 0)
    flipped = b.tensor((cols, rows), dtype, "weight")
    return b.add(Term("access", (Term("access-transpose", (flipped.term, Term("list", (1, 0)))),
                                 0)))


def _activations(b: Builder, depth: int, dtype: str) -> Node:
    return b.rows_of(dtype, depth)


@generates("systolic-array")
def _systolic_array(b: Builder) -> Node | None:
    rows, cols = b.array
    dtype = b.rng.choice(("i8", "i8", "f32"))
    activations = _activations(b, rows, dtype)
    weights = _matrix_weights(b, rows, cols, dtype)
    if not b.small(activations.type.shape + (cols,)):
        return None
    return b.add(Term("systolic-array", (rows, cols, activations.term, weights.term)), False)


@generates("systolic-array-with-blocking")
def _systolic_array_blocked(b: Builder) -> Node | None:
    rows, cols = b.array
    dtype = b.rng.choice(("i8", "i8", "f32"))
    depth, outputs = rows * b.rng.randint(1, 3), cols * b.rng.randint(1, 3)
    activations = _activations(b, depth, dtype)
    weights = _matrix_weights(b, depth, outputs, dtype)
    if not b.small(activations.type.shape + (outputs,)):
        return None
    return b.add(Term("systolic-array-with-blocking",
                      (rows, cols, activations.term, weights.term)), False)


def _conv2d(mode: str, layout: str) -> Generator:
    def generate(b: Builder) -> Node | None:
        rows, cols = b.array
        blocked = not mode
        channels = rows * b.rng.randint(1, 2) if blocked else b.rng.randint(1, 4)
        filters = cols * b.rng.randint(1, 2) if blocked else b.rng.randint(1, 4)
        kh, kw = b.rng.randint(1, 3), b.rng.randint(1, 3)
        height, width = b.rng.randint(kh, 6), b.rng.randint(kw, 6)
        dtype = b.rng.choice(("i8", "i8", "f32"))
        if layout == "nchw-oihw":
            data, weights = (1, channels, height, width), (filters, channels, kh, kw)
        else:
            data, weights = (1, height, width, channels), (kh, kw, channels, filters)
        data_node = b.pick_or_new(lambda n: n.full == data and n.dtype == dtype,
                                  lambda: data, dtype)
        weight_node = b.tensor(weights, dtype, "weight")
        name = f"systolic-array-conv2d-{mode}{layout}-with-blocking"
        return b.add(Term(name, (rows, cols, weight_node.term, data_node.term, kh, kw,
                                 b.rng.randint(1, 2), b.rng.randint(1, 2))), False)
    return generate


for _mode in ("", "im2col-"):
    for _layout in ("nchw-oihw", "nhwc-hwio"):
        GENERATORS[f"systolic-array-conv2d-{_mode}{_layout}-with-blocking"] = _conv2d(
            _mode, _layout)


def _per_column(b: Builder, shape: tuple[int, ...], low: int, high: int) -> Node:
    """An i32 weight of one value per column (the last axis), broadcast down the rows:
    what the accelerator's epilogue takes as bias or multipliers."""
    column = np.array([b.rng.randint(low, high) for _ in range(shape[-1])], np.int32)
    vector = b.weight(column, "i32")
    term = vector.term
    for _ in shape[:-1]:
        term = Term("access-insert-axis", (term, 0))
    return b.add(Term("access-broadcast", (term, access_shape_term(b, shape, ()))))


def _i8_matmul(b: Builder) -> Node | None:
    """An i8 matrix product: the accumulator an accelerator layer computes."""
    left = b.rows_of("i8")
    depth = left.type.item[0]
    right = b.split(b.tensor((b.rng.randint(1, 7), depth), "i8", "weight"), 1)
    if not b.small(left.type.shape + right.type.shape + (2, depth)):
        return None
    product = b.add(Term("access-cartesian-product", (left.term, right.term)))
    return b.add(Term("compute", (ComputeOp("dot-product"), product.term)))


def _requantize_op(b: Builder, per_channel: bool) -> ComputeOp:
    pre, post, zero_point = b.rng.randint(0, 3), b.rng.randint(0, 24), b.rng.randint(-128, 127)
    if per_channel:
        return ComputeOp("requantize-per-channel", (pre, post, zero_point))
    multiplier = b.rng.choice((1, b.rng.randint(1, 2**15), b.rng.randint(-(2**31), 2**31 - 1)))
    return ComputeOp("requantize", (multiplier, pre, post, zero_point))


def _clip_op(b: Builder, dtype: str) -> ComputeOp:
    if dtype == "f32":
        low = round(b.rng.uniform(-3, 1), 2)
        return ComputeOp("clip", (low, round(low + b.rng.uniform(0, 4), 2)))
    low_end, high_end = integer_range(dtype)
    low = b.rng.randint(max(low_end, -200), min(high_end, 100))
    return ComputeOp("clip", (low, b.rng.randint(low, min(high_end, low + 300))))


@generates("accel-epilogue")
def _accel_epilogue(b: Builder) -> Node | None:
    """Usually over an i8 matrix product (the accelerator fuses it into that layer);
    sometimes over any i32 access (its loops stay on the host)."""
    accumulator = _i8_matmul(b) if b.rng.random() < 0.75 else b.coerce("i32")
    if accumulator is None:
        return None
    shape, item = accumulator.type.shape, accumulator.type.item
    if b.rng.random() < 0.7 and shape and not item:
        bias = _per_column(b, shape, -5000, 5000)
        multipliers = _per_column(b, shape, 1, 2**15)
    else:
        bias, multipliers = _same_shape(b, accumulator), _same_shape(b, accumulator)
    clip = ComputeOp("relu") if b.rng.random() < 0.5 else _clip_op(b, "i8")
    return b.add(Term("accel-epilogue", (_requantize_op(b, True), clip, accumulator.term,
                                         bias.term, multipliers.term)))


@generates("accel-max-pool")
def _accel_max_pool(b: Builder) -> Node | None:
    node = b.coerce("i8")
    if len(node.full) < 2 or b.rng.random() < 0.2:
        node = b.tensor((1, b.rng.randint(1, 3), b.rng.randint(2, 6), b.rng.randint(2, 6)), "i8")
    node = b.split(node, len(node.full))
    kernel = b.rng.randint(1, min(3, min(node.full[-2:]) + 2))
    padding = b.rng.randint(0, kernel - 1)
    if min(node.full[-2:]) + 2 * padding < kernel:
        padding = kernel - 1
    if min(node.full[-2:]) + 2 * padding < kernel:
        return None
    return b.add(Term("accel-max-pool", (kernel, b.rng.randint(1, 2), padding, node.term)))


@generates("tuple-get-item")
def _tuple_get_item(b: Builder) -> Node:
    members = [b.any_of() for _ in range(b.rng.randint(1, 3))]
    index = b.rng.randrange(len(members))
    tuple_term = Term("construct-tuple", tuple(member.term for member in members))
    return b.add(Term("tuple-get-item", (tuple_term, index)), members[index].exact)


# -- the compute types ------------------------------------------------------------------

COMPUTE_GENERATORS: dict[str, Generator] = {}


def generates_compute(*names: str) -> Callable[[G], G]:
    def register(function: G) -> G:
        for name in names:
            COMPUTE_GENERATORS[name] = function
        return function
    return register


def _compute_term(b: Builder, op: ComputeOp, node: Node, exact: bool) -> Node:
    return b.add(Term("compute", (op, node.term)), exact)


def _tuple_operand(b: Builder) -> Node | None:
    """An access with items (t,c…): a pair, a cartesian product, or a re-split term."""
    roll = b.rng.random()
    if roll < 0.3:
        return _pair(b)
    if roll < 0.55:
        return _cartesian_product(b)
    node = b.pick(lambda n: bool(n.type.item)) if roll < 0.8 else None
    if node is None:
        node = b.pick_or_new(lambda n: len(n.full) >= 1, lambda: b.shape(2, 3))
        node = b.split(node, b.rng.randint(0, len(node.full) - 1))
    return node


@generates_compute("dot-product")
def _dot_product(b: Builder) -> Node | None:
    operand = _tuple_operand(b)
    if operand is None:
        return None
    return _compute_term(b, ComputeOp("dot-product"), operand, False)


@generates_compute(*ComputeKind.FOLD)
def _fold(b: Builder) -> Node | None:
    operand = _tuple_operand(b)
    if operand is None:
        return None
    name = b.rng.choice(sorted(ComputeKind.FOLD))
    # f32 sums round at every step, alike in C; a quotient of inexact values need not be
    # close (cancellation in the divisor), so f32 division is kept to exact operands.
    if operand.dtype == "f32" and not operand.exact and name == "elementwise-div":
        name = "elementwise-mul"
    return _compute_term(b, ComputeOp(name), operand, False)


@generates_compute(*ComputeKind.REDUCE)
def _reduce(b: Builder) -> Node:
    node = b.any_of()
    if len(node.full) >= 1 and b.rng.random() < 0.7:
        node = b.split(node, b.rng.randint(0, len(node.full) - 1))
    name = b.rng.choice(sorted(ComputeKind.REDUCE))
    return _compute_term(b, ComputeOp(name), node, name == "reduce-max" and node.exact)


@generates_compute("relu", "negative")
def _sign(b: Builder) -> Node:
    node = b.any_of()
    return _compute_term(b, ComputeOp(b.rng.choice(("relu", "negative"))), node, node.exact)


def _float(b: Builder) -> Node:
    return b.coerce("f32")


@generates_compute("sqrt", "exp", "sigmoid", "tanh", "erf")
def _transcendental(b: Builder) -> Node:
    name = b.rng.choice(("sqrt", "exp", "sigmoid", "tanh", "erf"))
    return _compute_term(b, ComputeOp(name), _float(b), False)


@generates_compute("softmax")
def _softmax(b: Builder) -> Node:
    node = _float(b)
    if not node.full:
        node = b.add(Term("access-insert-axis", (node.term, 0)), node.exact)
    return _compute_term(b, ComputeOp("softmax"), b.split(node, len(node.full) - 1), False)


@generates_compute("clip")
def _clip(b: Builder) -> Node:
    node = b.any_of()
    return _compute_term(b, _clip_op(b, node.dtype), node, node.exact)


@generates_compute("cast")
def _cast(b: Builder) -> Node:
    node = b.any_of()
    targets = ("i8", "i16", "i32", "f32") if node.exact else ("f32",)
    return _compute_term(b, ComputeOp("cast", (b.rng.choice(targets),)), node, True)


def _integer(b: Builder) -> Node:
    head = b.head
    return head if head is not None and head.dtype != "f32" else b.coerce("i32")


@generates_compute("requantize")
def _requantize(b: Builder) -> Node:
    return _compute_term(b, _requantize_op(b, False), _integer(b), True)


@generates_compute("requantize-per-channel")
def _requantize_per_channel(b: Builder) -> Node | None:
    accumulator = b.coerce("i32") if b.rng.random() < 0.6 else _i8_matmul(b)
    if accumulator is None:
        return None
    shape = accumulator.full
    multipliers = (_per_column(b, shape, 1, 2**15) if shape and b.rng.random() < 0.5
                   else _same_shape(b, accumulator))
    multipliers = b.split(multipliers, len(accumulator.type.shape))
    paired = b.add(Term("access-pair", (accumulator.term, multipliers.term)))
    return _compute_term(b, _requantize_op(b, True), paired, True)


@generates_compute("lookup")
def _lookup(b: Builder) -> Node:
    node = b.coerce("i8")
    scales = [round(b.rng.uniform(0.001, 0.2), 4) for _ in range(2)]
    op = ComputeOp("lookup", (b.rng.choice(sorted(LOOKUP_FUNCTIONS)), scales[0],
                              b.rng.randint(-128, 127), scales[1], b.rng.randint(-128, 127)))
    return _compute_term(b, op, node, True)


# -- programs ---------------------------------------------------------------------------

# Each construct is tried equally often, `compute` as often as its kinds need to keep up;
# a bare new tensor less (every other construct makes the tensors it needs).
_WEIGHTS = {"compute": 16, "access-tensor": 0.3}


@functools.cache
def legal_names(hostile: bool) -> tuple[str, ...]:
    """The names to draw from that the parser accepts (a name it reserves is left out until
    it accepts it: the generator writes only programs the language allows)."""
    if not hostile:
        return PLAIN_NAMES
    accepted = []
    for name in HOSTILE_NAMES:
        try:
            parse_program(f"(input {name} i8 (shape 1))\n(access-tensor {name})\n", "<name>")
        except GlensideError:
            continue
        accepted.append(name)
    return tuple(accepted)


def generate(seed: int, index: int, options: Options = Options()) -> Generated:
    """The program number `index` of the sequence `seed`."""
    rng = random.Random(f"{seed}:{index}")
    family = rng.choices([f for f, _ in FAMILIES], [w for _, w in FAMILIES])[0]
    b = Builder(rng, options, family, rng.choice(ARRAY_SIZES),
                list(legal_names(options.hostile_names)),
                data_rng=np.random.default_rng([seed, index]))
    b.tensor(b.shape(1, 3))
    names = sorted(GENERATORS)
    weights = [_WEIGHTS.get(name, 1) for name in names]
    for _ in range(rng.randint(1, options.max_steps)):
        for _attempt in range(4):
            made = GENERATORS[rng.choices(names, weights)[0]](b)
            if made is not None:
                b.head = made
                break
    return _finish(b, seed, index)


def _finish(b: Builder, seed: int, index: int) -> Generated:
    # The term that holds the most of what was built (a step may start afresh from a new
    # tensor, leaving earlier terms unused).
    root = max(reversed(b.pool), key=lambda node: len(postorder(node.term))).term
    used = {str(term.args[0]) for term in postorder(root) if term.op == "access-tensor"}
    used |= {str(term.args[0]) for term in postorder(root) if term.op == "shape-of"}
    tensors = {name: decl for name, decl in b.tensors.items() if name in used}
    program = Program("<generated>", tensors, root, _let_names(b, root, set(tensors)))
    weights = {name: b.data[name] for name, decl in tensors.items() if decl.role == "weight"}
    inputs = {name: b.data[name] for name, decl in tensors.items() if decl.role == "input"}
    return Generated(seed, index, program, weights, inputs, b.array)


def _let_names(b: Builder, root: Term, taken: set[str]) -> dict[Term, str]:
    """`let` names for some access terms, from the same (hostile) names as the tensors."""
    names: dict[Term, str] = {}
    free = [name for name in b.names if name not in taken]
    b.rng.shuffle(free)
    for node in b.pool:
        if free and node.term not in names and node.term.op not in Group.LEAF \
                and b.rng.random() < 0.4:
            names[node.term] = free.pop()
    reachable = set(postorder(root))
    return {term: name for term, name in names.items() if term in reachable}


def with_root(generated: Generated, root: Term,
              tensors: dict[str, TensorDecl] | None = None,
              data: dict[str, Array] | None = None) -> Generated:
    """`generated` with another result term (and tensors): what the shrinker tries. Only
    the tensors and names the new result uses are kept."""
    tensors = dict(generated.program.tensors if tensors is None else tensors)
    data = {**generated.weights, **generated.inputs, **(data or {})}
    used = {str(t.args[0]) for t in postorder(root) if t.op in ("access-tensor", "shape-of")}
    kept = {name: decl for name, decl in tensors.items() if name in used}
    reachable = set(postorder(root))
    names = {t: n for t, n in generated.program.names.items() if t in reachable}
    program = replace(generated.program, tensors=kept, root=root, names=names)
    return replace(generated, program=program,
                   weights={n: data[n] for n, d in kept.items() if d.role == "weight"},
                   inputs={n: data[n] for n, d in kept.items() if d.role == "input"})

