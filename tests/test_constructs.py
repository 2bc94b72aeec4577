"""The construct table drives every stage: no construct may lack a rule in any of them.

Adding an access construct or a compute type means: a row in glensidec/lang/constructs.py,
its name in one group (`Group`, `ComputeKind`), and then exactly the rules these tests ask
for — types, interpreter, lowering, C rendering (through a checked example in
docs/language.md), quantization, and an e-graph type rule if a rewrite can create it.
docs/architecture.md walks through one such addition.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from glensidec.backend.emit import render_files
from glensidec.backend.lower import _Lowerer, lower_program
from glensidec.backend.plan import plan_memory
from glensidec.frontends import quantize
from glensidec.hardware.array import ArrayConfig
from glensidec.lang import constructs as K
from glensidec.lang.constructs import ComputeKind, Group
from glensidec.lang.interp import COMPUTE_IMPLS, IMPLS
from glensidec.lang.syntax import parse_program
from glensidec.lang.terms import compute_name, postorder
from glensidec.lang.typecheck import COMPUTE_RULES, RULES, AccessType, check_program
from glensidec.opt.rewrite import ArrayTarget, Profile, all_rules

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
              Group.STATIC, Group.EXPANDED]
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
    # _Lowerer dispatches on the construct's name: `access-pad` → `_access_pad`.
    # Expanded constructs are lowered as what they expand to (glensidec.lang.expand).
    missing = [name for name in ACCESS_CONSTRUCTS - Group.EXPANDED
               if not callable(getattr(_Lowerer, "_" + name.replace("-", "_"), None))]
    assert missing == []


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


def _heads(text: str) -> set[str]:
    """Construct names applied in egglog text, with compute types as `compute:NAME`."""
    found = {name for name in re.findall(r"\(([a-z][a-z-]*)", text) if name in K.CONSTRUCTS}
    found |= {f"compute:{name}" for name in re.findall(r'\(compute "([a-z-]+)"', text)}
    return found


@pytest.mark.parametrize("rank", [2, 4])
def test_every_construct_a_rewrite_creates_has_an_egraph_type_rule(rank: int) -> None:
    """The `types` ruleset types what rewrites create (the program's own terms are typed by
    typecheck when added): each construct in a rule's actions has a rule typing it."""
    profile = Profile(rank + 2, frozenset({(rank, 1), (1, 1)}), frozenset({(rank, 1)}),
                      frozenset({(rank, rank)}), rank, frozenset({(rank, 1, 0)}))
    rules = all_rules(ArrayTarget(8, 8), profile)
    created: set[str] = set()
    for name, texts in rules.items():
        if name != "types":
            for rule in texts:
                actions = rule.split("\n")[1]
                created |= _heads(actions)
    typed: set[str] = set()
    for rule in rules["types"]:
        typed |= _heads(rule.split("\n")[0])
    # Shape-valued arguments are not typed: they are values in the e-graph, not accesses.
    assert {h for h in created - typed if h.split(":")[0] not in Group.STATIC} == set()
