"""The construct table drives every stage: no construct may lack a rule in any of them."""

from __future__ import annotations

from glensidec.lang import constructs as K
from glensidec.lang.interp import COMPUTE_IMPLS, IMPLS
from glensidec.lang.typecheck import COMPUTE_RULES, RULES


def test_every_construct_has_a_type_rule() -> None:
    assert set(RULES) == set(K.CONSTRUCTS)


def test_every_access_construct_has_an_interpreter_rule() -> None:
    access_constructs = {name for name, c in K.CONSTRUCTS.items() if c.result == K.ACCESS}
    assert set(IMPLS) == access_constructs


def test_every_compute_type_has_a_type_rule_and_an_interpreter_rule() -> None:
    assert set(COMPUTE_RULES) == set(K.COMPUTE_TYPES)
    assert set(COMPUTE_IMPLS) == set(K.COMPUTE_TYPES)


def test_signatures_read_like_the_syntax() -> None:
    pad = K.CONSTRUCTS["access-pad"]
    assert pad.signature() == "(access-pad access pad-type axis before after)"
    assert K.CONSTRUCTS["shape"].signature() == "(shape nat…)"
    assert K.CONSTRUCTS["literal"].signature() == "(literal value [dtype])"
