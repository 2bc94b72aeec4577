"""What the quantizer (glensidec.frontends.quantize) gives each float term: an i8 tensor
(`Q8`), an i32 accumulator (`Acc`), a constant folded from weights (`Const`), an f32
value left to the host (`Host`) or a pair of them (`Pair`); and the small helpers the
quantizer's translators share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from glensidec.frontends.qparams import QParams
from glensidec.lang import constructs as K
from glensidec.lang.interp import evaluate_all
from glensidec.lang.terms import (
    Term,
    postorder,
)
from glensidec.lang.typecheck import TypeTable

Array = np.ndarray[Any, Any]

# Constructs that only move data: the same op applies to a quantized tensor unchanged
# (padding too: where its raw zeros matter, `no_raw_zeros` says so) ...
DATA_MOVEMENT = K.Group.VIEW | {"access-pad"}
# ... and those an accumulator can go through with its scale and offset arrays alongside.
ACC_MOVEMENT = K.Group.VIEW - {"access-windows"}


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


@dataclass
class Q8:
    term: Term
    params: QParams
    base: Term  # the i8 term this one re-views (the probe point for zero-point corrections)
    raw_zeros: bool = False  # zero-padding inserted q = 0, which is not real 0 when zp ≠ 0
    min_padded: bool = False


# What an accumulator's integers hold beyond its i8 form (`Acc.fine`): constants added
# to an i8 tensor at 1/256 of its step (ViT's position embedding on its class token, a row
# far below the tensor's step), which a residual add takes as they are; or such a sum,
# which LayerNorm takes as it is (quant_layer_norm).
FINE_CONSTANTS, FINE_SUM = "constants", "sum"


@dataclass
class Acc:
    term: Term  # i32
    scale: Array  # full shape, float64
    offset: Array  # full shape, int64
    origin: Term  # the float term whose profile describes this value
    fine: str = ""  # "", FINE_CONSTANTS or FINE_SUM


@dataclass
class Const:
    array: Array  # full shape
    term: Term  # the float term (a chain over weights and literals)


@dataclass
class Host:
    term: Term  # f32, computed on dequantized values
    origin: Term | None = None  # the float compute whose profile an i8 copy of it takes


@dataclass
class Int:
    term: Term  # an integer tensor (token ids and what is computed from them), kept as is


@dataclass
class Pair:
    op: str
    left: Value
    right: Value


Value = Q8 | Acc | Const | Host | Int | Pair


class Unsupported(Exception):
    """Something the quantizer has no integer form for; reported with the term's name."""


def no_raw_zeros(value: Q8) -> None:
    """Zero padding writes q = 0, which is real 0 only when the zero point is 0; only
    dot-products and sums correct for it (exactly, by probing)."""
    if value.raw_zeros:
        raise Unsupported(f"zero padding of an i8 tensor whose zero point is "
                           f"{value.params.zero_point}, not 0, is only supported right before "
                           f"a convolution (quantize with --symmetric)")


def apply_chain(chain: Term, leaf: Term, array: Array, types: TypeTable) -> Array:
    return evaluate_all(chain, types, {}, given={leaf: array})[chain]
