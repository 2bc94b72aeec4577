"""The abstract syntax every stage shares: terms, their arguments, and whole programs.

A term is `op` applied to arguments, exactly as written in the s-expression syntax; which
ops exist and what their arguments are is the construct table's business
(`glensidec.lang.constructs`). Terms are immutable and hashable, and compare by structure
(source positions are carried along but never compared), so a program with shared
subterms is a DAG and every stage can memoise per term.
"""

from __future__ import annotations

import os
from collections.abc import Container
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeAlias

from glensidec.errors import Span
from glensidec.lang.quantization import Quantization


@dataclass(frozen=True)
class Symbol:
    """A bare name in argument position: a tensor, a padding type, a dtype, a compute type."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ComputeOp:
    """What `compute` maps over every item: `relu`, or a parameterised `(clip -128 127)`."""

    name: str
    params: tuple[int | float | str, ...] = ()


@dataclass(frozen=True, eq=False)
class Term:
    op: str
    args: tuple[Arg, ...]
    span: Span | None = field(default=None, repr=False)
    # Where each argument was written, for errors that point at one argument.
    arg_spans: tuple[Span | None, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        # Hash once: programs are DAGs with heavy sharing, and a recursive hash per lookup
        # would be exponential in the depth of a residual network.
        object.__setattr__(self, "_hash", hash((self.op, self.args)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Term) or hash(self) != hash(other):
            return False
        return _same_structure(self, other)

    def arg_span(self, index: int) -> Span | None:
        """Where argument `index` was written, else where the term was."""
        if index < len(self.arg_spans) and self.arg_spans[index] is not None:
            return self.arg_spans[index]
        return self.span

    def children(self) -> list[Term]:
        return [arg for arg in self.args if isinstance(arg, Term)]


Arg: TypeAlias = Term | int | float | Symbol | ComputeOp


def _same_structure(left: Term, right: Term) -> bool:
    """Whether two distinct terms of equal hash are built alike. Each pair of subterms is
    compared once: comparing the argument tuples recursively would visit a shared subterm
    once per path to it, exponential in the depth of two equal but separately built
    residual networks."""
    compared: set[tuple[int, int]] = set()
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if a is b or (id(a), id(b)) in compared:
            continue
        compared.add((id(a), id(b)))
        if a._hash != b._hash or a.op != b.op or len(a.args) != len(b.args):  # type: ignore[attr-defined]
            return False
        for x, y in zip(a.args, b.args, strict=True):
            if isinstance(x, Term) and isinstance(y, Term):
                pending.append((x, y))
            elif isinstance(x, Term) or isinstance(y, Term) or x != y:
                return False
    return True


def compute_name(term: Arg) -> str | None:
    """The compute type of a `compute` term (`relu`, `dot-product`, …), else None."""
    if isinstance(term, Term) and term.op == "compute" and isinstance(term.args[0], ComputeOp):
        return term.args[0].name
    return None


def is_matmul(term: Arg) -> bool:
    """A dot-product over a cartesian product: a matrix product (a dense layer, an im2col
    convolution), which the systolic array runs."""
    return (compute_name(term) == "dot-product" and isinstance(term, Term)
            and isinstance(term.args[1], Term) and term.args[1].op == "access-cartesian-product")


def postorder(root: Term, known: Container[Term] = ()) -> list[Term]:
    """Every distinct subterm once, children before parents (iterative: nets are deep);
    a subterm in `known` is left out with everything below it that only it reaches."""
    order: list[Term] = []
    seen: set[Term] = set()
    stack: list[tuple[Term, bool]] = [(root, False)]
    while stack:
        term, expanded = stack.pop()
        if expanded:
            order.append(term)
            continue
        if term in seen or term in known:
            continue
        seen.add(term)
        stack.append((term, True))
        stack.extend((child, False) for child in reversed(term.children()) if child not in seen)
    return order


ROLES = ("input", "weight")


@dataclass(frozen=True)
class TensorDecl:
    """A named tensor: a runtime input, or a weight whose data comes from a file."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str
    source: str | None = None  # weights: the .npy/.npz path as written, relative to the program
    key: str | None = None  # weights from an .npz: the array's name inside it (default: name)
    span: Span | None = field(default=None, compare=False)
    # An i8 input of a quantized program: how a float32 array given for it is quantized.
    quantization: Quantization | None = None


@dataclass(frozen=True)
class Program:
    """A whole program: its tensors, its result expression, and the names the user gave."""

    path: str
    tensors: dict[str, TensorDecl]
    root: Term
    # Subterms the user named with `let`, so the printer can give them their names back.
    names: dict[Term, str] = field(default_factory=dict)
    # `(quantized-output SCALE ZERO_POINT)`: what the i8 result means as real numbers.
    output_quantization: Quantization | None = None
    # Where the text writes a term again after its first time (equal terms are one object,
    # which carries the first one's place): a type error in it names these places too.
    repeated: dict[Term, list[Span]] = field(default_factory=dict, compare=False)

    def inputs(self) -> list[TensorDecl]:
        return [t for t in self.tensors.values() if t.role == "input"]

    def weights(self) -> list[TensorDecl]:
        return [t for t in self.tensors.values() if t.role == "weight"]

    def weight_path(self, decl: TensorDecl) -> Path:
        """Where a weight's data file is: its path is relative to the program's folder."""
        assert decl.source is not None
        return Path(self.path).parent / decl.source

    def moved_to(self, path: str | Path) -> Program:
        """The same program saved as `path`: weight paths re-pointed from its new folder."""
        folder = Path(path).resolve().parent
        tensors = {
            name: replace(decl, source=os.path.relpath(self.weight_path(decl).resolve(), folder))
            if decl.role == "weight" else decl
            for name, decl in self.tensors.items()
        }
        return replace(self, path=str(path), tensors=tensors)
