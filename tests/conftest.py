"""Shared helpers: build a program from terms, run it through text, compare with numpy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings

from glensidec.lang.data import random_tensor
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program
from glensidec.lang.terms import Program, TensorDecl, Term
from glensidec.lang.typecheck import check_program, root_type

# CI runs the fuzz tests on a fixed sequence of examples (a landing must not depend on luck);
# developers' runs keep exploring new random programs.
# Neither profile has a per-example deadline: hypothesis's default 200 ms fails examples on a
# loaded or slow machine, which says nothing about the code under test.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


def make_program(root: Term, tensors: dict[str, tuple[tuple[int, ...], str]]) -> Program:
    """A program over runtime inputs, taken through text so the parser is exercised too."""
    decls = {name: TensorDecl(name, shape, dtype, "input") for name, (shape, dtype) in
             tensors.items()}
    direct = Program("<test>", decls, root)
    reparsed = parse_program(format_program(direct), "<test>")
    assert reparsed.root == root
    return reparsed


def run_with(program: Program, seed: int = 0, **given: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Run on `given` arrays, random data for the other inputs; returns (result, inputs)."""
    generator = np.random.default_rng(seed)
    inputs = {decl.name: given.get(decl.name, random_tensor(decl, generator))
              for decl in program.inputs()}
    types = check_program(program)
    result = run_program(program, inputs, types)
    assert result.shape == root_type(program, types).full
    return result, inputs


def assert_matches(actual: np.ndarray, expected: np.ndarray) -> None:
    """Integers exactly (and in the same dtype); floats at 1e-5 relative."""
    assert actual.shape == expected.shape
    if np.issubdtype(actual.dtype, np.integer):
        assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
        np.testing.assert_array_equal(actual, expected)
    else:
        # Infinities (min-padding) must match exactly and must not set the tolerance.
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(actual[~finite], expected[~finite])
        magnitudes = np.abs(expected[finite])
        scale = max(1.0, float(magnitudes.max()) if magnitudes.size else 1.0)
        np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-5,
                                   atol=1e-5 * scale)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
