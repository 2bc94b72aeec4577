"""Term equality on programs built apart: structure compared, each pair of subterms once."""

from __future__ import annotations

from glensidec.errors import Span
from glensidec.lang.syntax import parse_program
from glensidec.lang.terms import Symbol, Term, postorder


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


def test_a_parsed_program_holds_each_distinct_term_once() -> None:
    # the same broadcast literal written in two lets (as the quantizer writes its constants)
    # is one object: later walks find it by identity, not by comparing the two copies
    constant = ("(access-broadcast (access-literal (literal 3 i32)) "
                "(access-shape (shape 2) (shape)))")
    program = parse_program(f"""
(input x i32 (shape 2))
(let a (compute elementwise-add (access-pair (access-tensor x) {constant})))
(compute elementwise-mul (access-pair a {constant}))
""")
    terms = postorder(program.root)
    objects: dict[int, Term] = {}
    stack = [program.root]
    while stack:
        term = stack.pop()
        if id(term) not in objects:
            objects[id(term)] = term
            stack.extend(term.children())
    assert len(objects) == len(terms)
    assert sum(1 for term in terms if term.op == "access-broadcast") == 1
