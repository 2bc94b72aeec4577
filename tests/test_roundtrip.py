"""parse → print → parse is the identity on every example, and printing is a fixed point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES

from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program, read_program
from glensidec.lang.typecheck import check_program

PROGRAMS = sorted(EXAMPLES.rglob("*.gs")) + sorted(EXAMPLES.rglob("*.glenside"))


def shapes_for(path: Path) -> Path | None:
    side_file = path.with_suffix(".json")
    return side_file if side_file.exists() else None


def test_examples_exist() -> None:
    assert len(PROGRAMS) >= 4


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_round_trip(path: Path) -> None:
    program = read_program(path, shapes_for(path))
    check_program(program)
    printed = format_program(program)
    # Compatibility-mode inputs are printed as declarations: the output is self-contained.
    again = parse_program(printed, str(path))
    assert again.root == program.root
    assert again.tensors == program.tensors
    assert format_program(again) == printed


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_printed_program_computes_the_same(path: Path) -> None:
    program = read_program(path, shapes_for(path))
    again = parse_program(format_program(program), str(path))
    inputs = random_inputs(program, seed=7)
    first = run_program(program, all_tensors(program, inputs))
    second = run_program(again, all_tensors(again, inputs))
    np.testing.assert_array_equal(first, second)


# Every word of the language in a name's place: declaration keywords, constructs, compute
# types, pad types, dtypes. None is reserved; each is recognised only in its position.
WORDS_AS_NAMES = """\
(input input f32 (shape 2 3))
(input weight f32 (shape 3))
(let let (compute relu (access-tensor input)))
(let relu (access-broadcast (access-insert-axis (access-tensor weight) 0)
                            (access-shape (shape 2 3) (shape))))
(let access (compute elementwise-add (access-pair let relu)))
(let zero-padding (access-pad access zero-padding 1 0 1))
(let i8 (compute reduce-max (access zero-padding 1)))
i8
"""


def test_declaration_keywords_and_construct_names_are_ordinary_names() -> None:
    program = parse_program(WORDS_AS_NAMES, "words.gs")
    assert [d.name for d in program.inputs()] == ["input", "weight"]
    types = check_program(program)
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    w = np.array([1, -1, 0.5], np.float32)
    result = run_program(program, {"input": x, "weight": w}, types)
    expected = np.pad(np.maximum(x, 0) + w, ((0, 0), (1, 0))).max(axis=1)
    np.testing.assert_array_equal(result, expected)
    printed = format_program(program)
    again = parse_program(printed, "words.gs")
    assert again.root == program.root and format_program(again) == printed
    # a compute type or pad type bound by a `let` is a result like any name
    for word in ("relu", "zero-padding"):
        bound = parse_program(f"(input x f32 (shape 2))\n(let {word} (compute relu "
                              f"(access-tensor x)))\n{word}\n", "bound.gs")
        assert bound.root.op == "compute" and bound.names[bound.root] == word
