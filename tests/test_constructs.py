"""The construct table drives every stage: no construct may lack a rule in any of them.

Adding an access construct or a compute type means: a row in glensidec/lang/constructs.py,
its name in one group (`Group`, `ComputeKind`), and then exactly the rules these tests ask
for — types, interpreter, lowering, C rendering (through a checked example in
docs/language.md), quantization, an e-graph type rule if a rewrite can create it, and a
generator for the differential fuzzer (glensidec/lang/generate.py).
docs/architecture.md walks through one such addition.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from glensidec.backend.emit import render_files
from glensidec.backend.lower import LOWERINGS, lower_program
from glensidec.backend.plan import plan_memory
from glensidec.frontends import quantize
from glensidec.hardware.array import ArrayConfig
from glensidec.lang import constructs as K
from glensidec.lang import generate
from glensidec.lang.constructs import ComputeKind, Group
from glensidec.lang.expand import expand_program, needs_expansion
from glensidec.lang.interp import COMPUTE_IMPLS, IMPLS
from glensidec.lang.syntax import parse_program
from glensidec.lang.terms import Term, compute_name, postorder
from glensidec.lang.typecheck import (
    COMPUTE_RULES,
    RULES,
    AccessType,
    TypeTable,
    access_type,
    check_program,
)
from glensidec.opt.rewrite import ArrayTarget, EGraph, Profile, all_rules

ACCESS_CONSTRUCTS = {name for name, c in K.CONSTRUCTS.items() if c.result == K.ACCESS}
DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"


def test_every_construct_has_a_type_rule() -> None:
    assert set(RULES) == set(K.CONSTRUCTS)


def test_every_access_construct_has_an_interpreter_rule() -> None:
    assert set(IMPLS) == ACCESS_CONSTRUCTS


def test_every_compute_type_has_a_type_rule_and_an_interpreter_rule() -> None:
    assert set(COMPUTE_RULES) == set(K.COMPUTE_TYPES)
    assert set(COMPUTE_IMPLS) == set(K.COMPUTE_TYPES)


def test_every_construct_is_in_exactly_one_group() -> None:
    groups = [Group.LEAF, Group.VIEW, Group.COPY, Group.TUPLE, Group.COMPUTE, Group.HARDWARE,
              Group.ACCELERATOR, Group.STATIC, Group.EXPANDED]
    assert sum(len(group) for group in groups) == len(K.CONSTRUCTS)
    assert set().union(*groups) == set(K.CONSTRUCTS)
    assert Group.ACCESS == ACCESS_CONSTRUCTS


def test_every_compute_type_is_of_exactly_one_kind() -> None:
    kinds = [ComputeKind.MAP, set(ComputeKind.FOLD), ComputeKind.REDUCE, ComputeKind.DOT,
             ComputeKind.HOST_ONLY]
    assert sum(len(kind) for kind in kinds) == len(K.COMPUTE_TYPES)
    assert set(K.COMPUTE_TYPES) == ComputeKind.ALL
    assert ComputeKind.ACCUMULATING <= ComputeKind.ALL
    assert set(ComputeKind.FOLD.values()) <= {"+", "-", "*", "/"}  # C's binary operators


def test_every_access_construct_has_a_lowering_rule() -> None:
    # Lowering dispatches on the construct's name through `LOWERINGS`. Expanded constructs
    # are lowered as what they expand to (glensidec.lang.expand), so they have none.
    assert set(LOWERINGS) == ACCESS_CONSTRUCTS - Group.EXPANDED


def _checked_examples() -> list[str]:
    """The runnable ```glenside blocks of docs/language.md (not errors, no --shapes)."""
    doc = DOC.read_text(encoding="utf-8")
    blocks = re.finditer(r"^```glenside[ \t]*\n(.*?)^```[ \t]*\n((?:<!-- .*? -->[ \t]*\n)*)",
                         doc, re.MULTILINE | re.DOTALL)
    return [block.group(1) for block in blocks
            if "<!-- error:" not in block.group(2) and "<!-- shapes:" not in block.group(2)]


def test_every_construct_and_compute_type_lowers_and_renders_to_c() -> None:
    """Lowering and C rendering of the doc's examples together use every access construct
    and every compute type: a new one without a rule (or without an example) fails here."""
    lowered_ops: set[str] = set()
    computed: set[str] = set()
    for text in _checked_examples():
        program = parse_program(text, "docs")
        if any(decl.role == "weight" for decl in program.tensors.values()):
            continue
        types = check_program(program)
        if not isinstance(types[program.root], AccessType):  # shapes, tuples: nothing to run
            continue
        lowered = lower_program(program, types)
        files = render_files(program, lowered, plan_memory(lowered), ArrayConfig(8, 8), {})
        assert files["model.c"]
        for term in postorder(program.root):
            lowered_ops.add(term.op)
            computed.add(compute_name(term) or "")
    assert ACCESS_CONSTRUCTS - lowered_ops == set()
    assert set(K.COMPUTE_TYPES) - computed == set()


def test_every_access_construct_and_compute_type_has_a_quantization_rule() -> None:
    handled = set(quantize.TRANSLATORS) | quantize.FROM_CONSTANTS | quantize.NOT_QUANTIZED
    # Expanded constructs reach the quantizer expanded (quantize_command).
    assert handled == ACCESS_CONSTRUCTS - Group.EXPANDED
    assert set(quantize.COMPUTE_TRANSLATORS) == set(K.COMPUTE_TYPES)


def test_every_access_construct_and_compute_type_has_a_generator() -> None:
    """The fuzzer's generator builds every construct from its own entry; the shape helpers,
    literals and tuples come as the arguments that need them (tests/test_fuzz.py checks that
    generated programs hold every construct of the table)."""
    assert set(generate.GENERATORS) == ACCESS_CONSTRUCTS
    assert set(generate.COMPUTE_GENERATORS) == set(K.COMPUTE_TYPES)


def _heads(text: str) -> set[str]:
    """Construct names applied in egglog text, with compute types as `compute:NAME`."""
    found = {name for name in re.findall(r"\(([a-z][a-z-]*)", text) if name in K.CONSTRUCTS}
    found |= {f"compute:{name}" for name in re.findall(r'\(compute "([a-z-]+)"', text)}
    return found


def _test_profile(rank: int) -> Profile:
    return Profile(rank + 2, frozenset({(rank, 1), (1, 1)}), frozenset({(rank, 1)}),
                   frozenset({(rank, rank)}), rank, frozenset({(rank, 1, 0)}))


def _created_heads(rank: int) -> set[str]:
    """Every construct (and compute type) in the actions of a rewrite rule."""
    rules = all_rules(ArrayTarget(8, 8), _test_profile(rank))
    return set().union(*(_heads(rule.split("\n")[1]) for name, texts in rules.items()
                         if name != "types" for rule in texts))


@pytest.mark.parametrize("rank", [2, 4])
def test_every_construct_a_rewrite_creates_has_an_egraph_type_rule(rank: int) -> None:
    """The `types` ruleset types what rewrites create (the program's own terms are typed by
    typecheck when added): each construct in a rule's actions has a rule typing it."""
    rules = all_rules(ArrayTarget(8, 8), _test_profile(rank))
    created = _created_heads(rank)
    typed: set[str] = set()
    for rule in rules["types"]:
        typed |= _heads(rule.split("\n")[0])
    # Shape-valued arguments are not typed: they are values in the e-graph, not accesses.
    assert {h for h in created - typed if h.split(":")[0] not in Group.STATIC} == set()


def _head(term: Term) -> str:
    return f"compute:{compute_name(term)}" if term.op == "compute" else term.op


def _union(profiles: list[Profile]) -> Profile:
    """One profile covering every program's ranks (one e-graph checks them all)."""
    return Profile(max(p.max_rank for p in profiles),
                   frozenset().union(*(p.transposes for p in profiles)),
                   frozenset().union(*(p.accesses for p in profiles)),
                   frozenset().union(*(p.products for p in profiles)),
                   max(p.pair_rank for p in profiles),
                   frozenset().union(*(p.pairs for p in profiles)),
                   max(p.pair_extent for p in profiles))


LITERAL_SHAPES = {"shape", "list", "access-shape"}


def _rewrite_form(term: Term, types: TypeTable, untyped: set[Term]) -> bool:
    """Whether a rewrite could create `term` as it is written: the rules only ever build
    literal shapes (no `shape-of`, `get-access-shape`, …), broadcasts to a target split
    like their operand, and terms over operands the `types` ruleset types."""
    if any(isinstance(arg, Term) and arg in untyped for arg in term.args):
        return False
    for arg in term.args:
        if isinstance(arg, Term) and arg.op in Group.STATIC and any(
                part.op not in LITERAL_SHAPES for part in postorder(arg)):
            return False
    if term.op == "access-broadcast":  # its target's split is the operand's
        operand, target = term.args[0], term.args[1]
        assert isinstance(operand, Term) and isinstance(target, Term)
        shape = target.args[0]
        return (target.op == "access-shape" and isinstance(shape, Term)
                and len(shape.args) == len(access_type(types, operand).shape))
    return True


def test_the_egraph_type_rules_agree_with_typecheck_on_every_construct_a_rewrite_creates(
        ) -> None:
    """The `types` ruleset is a second statement of the type rules, in egglog: every docs
    example is added to an e-graph with the types of the constructs the ruleset types left
    out, and the ruleset must derive exactly the types `typecheck` gives them (it may leave
    forms no rewrite creates untyped: `_rewrite_form`). Together the examples must exercise
    the rule of every construct a rewrite can create."""
    programs = [parse_program(text, "docs") for text in _checked_examples()]
    # The e-graph holds programs as compiling does: expanded (tuples, conv2d modes).
    programs = [expand_program(p) if needs_expansion(p.root) else p for p in programs]
    checked = [(p, check_program(p)) for p in programs]
    checked = [(p, t) for p, t in checked if isinstance(t[p.root], AccessType)]
    profile = _union([Profile.of(p.root, t) for p, t in checked])
    typed_by_rules = set().union(*(_heads(rule.split("\n")[0])
                                   for rule in all_rules(ArrayTarget(8, 8), profile)["types"]))
    graph = EGraph((), ArrayTarget(8, 8), profile)
    compared: set[str] = set()
    disagreements = []
    for program, types in checked:
        given = {term: value for term, value in types.items()
                 if not isinstance(term, Term) or _head(term) not in typed_by_rules}
        graph.run("(push)")
        graph.add(program.root, given)
        graph.run_ruleset("types", saturate=True)
        classes = graph.classes(program.root)
        untyped: set[Term] = set()  # program-only forms the rules leave to typecheck
        for term in postorder(program.root):
            expected = types[term]
            if _head(term) not in typed_by_rules or not isinstance(expected, AccessType):
                continue
            derived = graph.type_of(classes[term])
            if derived is None and not _rewrite_form(term, types, untyped):
                untyped.add(term)
                continue
            compared.add(_head(term))
            if derived != expected:
                disagreements.append(f"{_head(term)}: {derived} != {expected}")
        graph.run("(pop)")
    assert disagreements == [], "\n".join(disagreements)
    created = set().union(*(_created_heads(rank) for rank in (2, 4)))
    # (a compute is compared as `compute:NAME`, its compute type)
    assert {h for h in created - {"compute"}
            if h.split(":")[0] not in Group.STATIC} - compared == set()
