"""Bad programs: each gives one located message, never a traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glensidec.errors import GlensideError
from glensidec.lang.constructs import COMPUTE_TYPES, CONSTRUCTS
from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, parse_program
from glensidec.lang.typecheck import check_program

DECLS = """(input x i8 (shape 1 3 8 8))
(input w i8 (shape 4 3 3 3))
(input v i8 (shape 4 3 3 4))
(input f f32 (shape 8 8))
"""

# (program text after DECLS, line, column, message fragment); lines count DECLS (4 lines).
BAD_PROGRAMS = [
    ("(access (access-tensor x) 1", 5, 1, "'(' is never closed"),
    ("(access (access-tensor x) 1))", 5, 29, "unmatched ')'"),
    ("(access (access-tensor x) 1) #", 5, 30, "unexpected character '#'"),
    ("(acess (access-tensor x) 1)", 5, 2, "unknown construct 'acess' (did you mean 'access'?)"),
    ("(relu (access-tensor x))", 5, 2, "unknown construct 'relu' (did you mean (compute relu"),
    ("(access (access-tensor y) 1)", 5, 24, "unknown tensor 'y'"),
    ("(compute relu z)", 5, 15, "unknown name 'z'"),
    ("(compute relu x)", 5, 15, "'x' is a tensor: write (access-tensor x)"),
    ("(access (access-tensor x) 5)", 5, 27,
     "access: axis 5 is out of range for ((1,3,8,8),()) (rank 4)"),
    ("(access (access-tensor x))", 5, 1, "access takes 2 arguments (access access axis), got 1"),
    ("(access (access-tensor x) -1)", 5, 27,
     "access: argument 'axis' must be a non-negative integer, got -1"),
    ("(access (access-tensor x) (shape 1))", 5, 27,
     "argument 'axis' must be a non-negative integer, got a list"),
    ("(compute dot-product (access-cartesian-product (access (access-tensor w) 1) "
     "(access (access-tensor v) 1)))", 5, 77,
     "access-cartesian-product: item shapes (3,3,3) and (3,3,4) differ"),
    ("(access-pair (access (access-tensor w) 1) (access (access-tensor w) 2))", 5, 43,
     "access-pair: accesses ((4),(3,3,3)) and ((4,3),(3,3)) differ"),
    ("(access-reshape (access-tensor x) (access-shape (shape 3) (shape 8 9)))", 5, 35,
     "access-reshape: cannot reshape ((1,3,8,8),()) (192 elements) to ((3),(8,9)) (216 elements)"),
    ("(access-transpose (access-tensor x) (list 0 1 2))", 5, 37,
     "(0,1,2) is not a permutation of the 4 axes"),
    ("(access-transpose (access-tensor x) (shape 0 1 2 3))", 5, 37,
     "argument 'permutation' must be a (list …), got a (shape …)"),
    ("(access-windows (access (access-tensor x) 1) (shape 3 3) (shape 1 1))", 5, 46,
     "window (3,3) needs one dim per item axis of ((1),(3,8,8))"),
    ("(access-windows (access (access-tensor x) 1) (shape 3 9 3) (shape 1 1 1))", 5, 46,
     "window (3,9,3) does not fit in item (3,8,8)"),
    ("(access-squeeze (access-tensor x) 1)", 5, 35, "axis 1 of ((1,3,8,8),()) has size 3, not 1"),
    ("(access-pad (access-tensor x) some-padding 2 1 1)", 5, 31, "unknown pad-type 'some-padding'"),
    ("(access-slice (access-tensor x) 2 5 3)", 5, 35, "slice [5, 3) is empty or outside axis 2"),
    ("(access-concatenate (access-tensor x) (access-tensor w) 0)", 5, 39,
     "((1,3,8,8),()) and ((4,3,3,3),()) differ outside axis 0"),
    ("(compute (clip 0) (access-tensor x))", 5, 10, "compute type clip takes 2 parameters"),
    ("(compute softmax (access (access-tensor x) 2))", 5, 18, "softmax is defined on f32 only"),
    ("(compute sqrt (access-tensor x))", 5, 15, "sqrt is defined on f32 only, got i8"),
    ("(compute frobnicate (access-tensor x))", 5, 10, "unknown compute type 'frobnicate'"),
    ("(access-cartesian-product (access (access-tensor f) 1) (access (access-tensor x) 3))", 5,
     56, "dtypes f32 and i8 differ"),
    ("(systolic-array 4 4 (access (access-tensor f) 1) (access (access-tensor f) 0))", 5, 50,
     "weights ((),(8,8)) must be ((),(4,4)) on a 4x4 array"),
    ("(systolic-array-with-blocking 3 4 (access (access-tensor f) 1) "
     "(access (access-tensor f) 0))", 5, 64, "do not block onto a 3x4 array"),
    ("(let y (access-tensor x))\n(let y (access-tensor x))\ny", 6, 6,
     "'y' is already declared at 5:6"),
    ("(access-tensor x)\n(access-tensor x)", 6, 1, "exactly one result expression"),
    ("zero-padding", 5, 1, "'zero-padding' alone is an argument, not a program result"),
    ("(relay-operator-call relay-relu (access-tensor x))", 5, 2,
     "'relay-operator-call' of the original Glenside is not supported"),
    ("(tuple-get-item (construct-tuple (access-tensor x)) 1)", 5, 53,
     "tuple-get-item: index 1 is out of range for a tuple of 1"),
    ("(compute (requantize 1 0 70 0) (access-tensor x))", 5, 10, "post=70 (at most 62)"),
    ("(compute (clip -200 200) (access-tensor x))", 5, 10, "clip bounds [-200, 200] must be i8"),
    ("(access-tensor x) (input q i9 (shape 2))", 5, 28, "unknown dtype 'i9'"),
    ("(access-tensor x) (input q i8 (shape 2 0))", 5, 40, "shape dims must be positive integers"),
    ("(access-literal (literal 1.5 i8))", 5, 26, "literal: 1.5 is not a value of i8"),
    ("(access-literal (literal 1e40))", 5, 26, "literal: 1e+40 is outside the range of f32"),
    ("(access-broadcast (access-tensor f) (access-shape (shape) (shape 0 8)))", 5, 66,
     "shape: shape dims must be positive, got (0,8)"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), BAD_PROGRAMS)
def test_bad_program(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(GlensideError) as caught:
        program = parse_program(DECLS + text, "prog.gs")
        check_program(program)
    rendered = str(caught.value)
    assert rendered.startswith(f"prog.gs:{line}:{column}: error: "), rendered
    assert message in rendered, rendered


def test_there_are_at_least_25_bad_programs() -> None:
    assert len(BAD_PROGRAMS) >= 25


def weight_program(tmp_path: Path, source: str, shape: str = "2 3", dtype: str = "i8") -> Path:
    path = tmp_path / "prog.gs"
    path.write_text(f"(weight w {dtype} (shape {shape}) \"{source}\")\n(access-tensor w)\n")
    return path


def load(path: Path) -> None:
    program = parse_program(path.read_text(), str(path))
    check_program(program)
    load_weights(program)


def test_missing_weight_file_names_the_path(tmp_path: Path) -> None:
    path = weight_program(tmp_path, "nowhere/w.npy")
    with pytest.raises(GlensideError) as caught:
        load(path)
    assert str(caught.value) == (
        f"{path}:1:9: error: weight 'w': file not found: {tmp_path / 'nowhere' / 'w.npy'}")


def test_weight_with_wrong_shape_or_dtype(tmp_path: Path) -> None:
    np.save(tmp_path / "w.npy", np.zeros((3, 2), dtype=np.int8))
    with pytest.raises(GlensideError, match=r"prog.gs:1:9: error: weight 'w': .*w.npy holds "
                       r"int8 \(3,2\), expected int8 \(2,3\) \(i8\)"):
        load(weight_program(tmp_path, "w.npy"))
    np.save(tmp_path / "w.npy", np.zeros((2, 3), dtype=np.float64))
    with pytest.raises(GlensideError, match=r"holds float64 \(2,3\), expected int8"):
        load(weight_program(tmp_path, "w.npy"))


def test_weight_from_npz_by_key(tmp_path: Path) -> None:
    np.savez(tmp_path / "all.npz", w=np.ones((2, 3), dtype=np.int8))
    load(weight_program(tmp_path, "all.npz"))
    np.savez(tmp_path / "all.npz", other=np.ones((2, 3), dtype=np.int8))
    with pytest.raises(GlensideError, match=r"no array 'w' \(it has: other\)"):
        load(weight_program(tmp_path, "all.npz"))


def test_corrupt_weight_file(tmp_path: Path) -> None:
    (tmp_path / "w.npy").write_bytes(b"not a numpy file")
    with pytest.raises(GlensideError,
                       match=r"prog.gs:1:9: error: weight 'w': \S*w.npy is not a \.npy file"):
        load(weight_program(tmp_path, "w.npy"))


# -- random text never makes a traceback ------------------------------------------------

ATOMS = st.one_of(
    st.sampled_from(sorted(CONSTRUCTS) + sorted(COMPUTE_TYPES)
                    + ["x", "w", "f", "zero-padding", "min-padding", "i8", "f32", "let"]),
    st.integers(-3, 12).map(str),
    st.sampled_from(["0.5", '"w.npy"', "-1"]),
)
SEXPRS = st.recursive(ATOMS, lambda inner: st.lists(inner, max_size=6).map(
    lambda items: "(" + " ".join(items) + ")"), max_leaves=30)


def parse_and_check(text: str) -> None:
    """A clean located error, or a program that also survives printing and re-parsing."""
    try:
        program = parse_program(text, "fuzz.gs")
        check_program(program)
    except GlensideError as error:
        assert str(error).startswith("fuzz.gs"), str(error)
        return
    printed = format_program(program)
    again = parse_program(printed, "fuzz.gs")
    assert (again.root, again.tensors) == (program.root, program.tensors)
    assert format_program(again) == printed


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SEXPRS)
def test_random_sexpressions_give_a_result_or_a_clean_error(text: str) -> None:
    parse_and_check(DECLS + text)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('()"; \n\\abcdeklstx-.0123456789'), max_size=80))
def test_random_text_gives_a_result_or_a_clean_error(text: str) -> None:
    parse_and_check(DECLS + text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_unicode_gives_a_clean_error(text: str) -> None:
    parse_and_check(text)


def test_an_undeclared_tensor_in_a_bare_glenside_expression_points_to_shapes() -> None:
    """Glenside's own glenside-programs/ examples are bare expressions: run without
    --shapes, the error said only "unknown tensor 'weights'"; it now says how to declare
    it. A program that declares tensors keeps the short message."""
    with pytest.raises(GlensideError, match=r"unknown tensor 'w': declare it with \(input …\), "
                                            r"or .* with --shapes FILE.json"):
        parse_program("(access (access-tensor w) 1)")
    with pytest.raises(GlensideError, match=r"unknown tensor 'w'$"):
        parse_program("(input a f32 (shape 2))\n(access (access-tensor w) 1)")


def test_an_error_in_a_term_written_twice_names_both_places() -> None:
    """Parsing makes equal terms one object, which carries its first place: an error in a
    term written twice was reported at the first, here a `let` nothing reads (so it is not
    checked otherwise), without a word of the place that made the program fail."""
    text = ("(input a i8 (shape 2 3))\n"
            "(let unused (compute relu (access (access-tensor a) 7)))\n"
            "(compute relu (access (access-tensor a) 7))\n")
    with pytest.raises(GlensideError) as caught:
        check_program(parse_program(text, "p.gs"))
    assert str(caught.value) == ("p.gs:2:53: error: access: axis 7 is out of range for "
                                 "((2,3),()) (rank 2) (written again at 3:15)")
    # a `let` nothing reads is not checked: alone it is no error
    check_program(parse_program(text.replace("\n(compute relu (access (access-tensor a) 7))",
                                             "\n(compute relu (access (access-tensor a) 0))"),
                                "p.gs"))
