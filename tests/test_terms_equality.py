"""Term equality on programs built apart: structure compared, each pair of subterms once."""

from __future__ import annotations

from glensidec.errors import Span
from glensidec.lang.terms import Symbol, Term


def residual_chain(depth: int, leaf: int = -1) -> Term:
    """A residual network's shape: every add reads the previous term twice, so the DAG has
    `depth` levels but 2^depth paths."""
    term = Term("access", (Term("access-tensor", (Symbol("x"),)), leaf))
    for _ in range(depth):
        term = Term("compute", (Symbol("add"), Term("pair", (term, term))))
    return term


def test_equal_residual_networks_built_apart_compare_equal_once_per_subterm_pair() -> None:
    # 200 levels are 2^200 paths: comparing path by path would never finish.
    assert residual_chain(200) == residual_chain(200)


def test_residual_networks_differing_only_at_the_leaf_compare_unequal() -> None:
    # CPython hashes -1 and -2 alike, so every level's hash agrees and the walk must reach
    # the leaf to tell them apart.
    left, right = residual_chain(200, leaf=-1), residual_chain(200, leaf=-2)
    assert hash(left) == hash(right)
    assert left != right


def test_equality_ignores_where_terms_were_written() -> None:
    here = Term("access-tensor", (Symbol("x"),), span=Span(1, 1))
    there = Term("access-tensor", (Symbol("x"),), span=Span(7, 3))
    assert here == there and hash(here) == hash(there)


def test_terms_with_different_numbers_or_ops_are_unequal() -> None:
    assert Term("access", (Symbol("x"), 1)) != Term("access", (Symbol("x"), 2))
    assert Term("access", (Symbol("x"), 1)) != Term("access-flatten", (Symbol("x"), 1))
    assert Term("access", (Symbol("x"), 1)) != Term("access", (Symbol("x"), 1, 2))
