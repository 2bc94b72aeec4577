"""Glenside's own tests, translated case by case, with the original's expected values.

Each case names where it comes from in the original repository (github.com/gussmith23/glenside,
`src/language/interpreter.rs` for the interpreter's tests, `src/language/language.rs` for the
type analysis's). Programs are run as the original runs them: a bare expression whose tensors
are given separately (glensidec's compatibility mode). The values are the original's; the
only translation is from Rust's `array![…]` to numpy and from its `Value::Access(tensor,
access_axis)` to glensidec's type `((S),(I))` with `len(S) == access_axis`.

Where glensidec deliberately differs, the case says so and `docs/language.md` ("Differences
from the original") gives the reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from glensidec.backend.emit import compile_to_directory
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.dtypes import DTYPES
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import parse_program
from glensidec.lang.terms import Program, TensorDecl
from glensidec.lang.typecheck import AccessType, check_program

F32_MIN = float(np.finfo(np.float32).min)  # Rust's f32::MIN: the lowest finite f32


def _dtype_of(array: np.ndarray) -> str:
    for name, dtype in DTYPES.items():
        if array.dtype == dtype.numpy:
            return name
    raise AssertionError(array.dtype)


def program(text: str, tensors: dict[str, np.ndarray]) -> Program:
    """A bare original-Glenside expression over the given tensors (compatibility mode)."""
    shapes = {name: TensorDecl(name, tuple(array.shape), _dtype_of(array), "input")
              for name, array in tensors.items()}
    return parse_program(text, "<glenside>", shapes)


def interpret(text: str, **tensors: np.ndarray) -> tuple[np.ndarray, AccessType]:
    """The value and type of `text`, as the original's `interpret` gives them."""
    parsed = program(text, tensors)
    types = check_program(parsed)
    result = types[parsed.root]
    assert isinstance(result, AccessType)
    return run_program(parsed, tensors, types), result


def typed(text: str, **shapes: tuple[int, ...]) -> AccessType:
    """The type of `text`: the original's analysis (`MyAnalysisData::AccessPattern`)."""
    tensors = {name: np.zeros(shape, np.float32) for name, shape in shapes.items()}
    parsed = program(text, tensors)
    result = check_program(parsed)[parsed.root]
    assert isinstance(result, AccessType)
    return result


def run_c(text: str, tmp_path: Path, **tensors: np.ndarray) -> np.ndarray:
    """The same program compiled to C and run on the same tensors."""
    parsed = program(text, tensors)
    outdir = tmp_path / "c"
    compile_to_directory(parsed, check_program(parsed), outdir, ArrayConfig(4, 4))
    subprocess.run(["make", "-s", "-C", str(outdir), "model"], check=True, capture_output=True)
    args = []
    for name, array in tensors.items():
        np.save(tmp_path / f"{name}.npy", array)
        args.append(f"{name}={tmp_path / f'{name}.npy'}")
    subprocess.run([str(outdir / "model"), *args, "-o", str(tmp_path / "out.npy")], check=True,
                   capture_output=True)
    return np.load(tmp_path / "out.npy")


def split(access: AccessType) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return access.shape, access.item


# -- the three semantic differences the original fixes ------------------------------------


def test_access_broadcast_keeps_the_operands_split() -> None:
    # interpreter.rs, test access_broadcast: the result's access_axis is the operand's (0).
    value, result = interpret(
        "(access-broadcast (access (access-tensor t) 0) (access-shape (shape 2 2) (shape)))",
        t=np.array([[1, 2]], np.int32))
    np.testing.assert_array_equal(value, [[1, 2], [1, 2]])
    assert split(result) == ((), (2, 2))
    # language.rs, test access_broadcast: shape [2], item_shape [2, 3, 4].
    assert split(typed("(access-broadcast (access (access-tensor t) 1) "
                       "(access-shape (shape 2 2 3 4) (shape)))", t=(1, 2, 3, 4))) == \
        ((2,), (2, 3, 4))


def test_reduce_sum_over_a_broadcast_sums_the_operands_items() -> None:
    # The consequence of interpreter.rs access_broadcast + compute_reduce_sum: with the
    # operand's split (1), each broadcast row is one item, so the sums are [6, 6].
    value, result = interpret(
        "(compute reduce-sum (access-broadcast (access (access-tensor t) 1) "
        "(access-shape (shape 2 3) (shape))))", t=np.array([[1, 2, 3]], np.int32))
    np.testing.assert_array_equal(value, [6, 6])
    assert split(result) == ((2,), ())


@pytest.mark.parametrize(("axis", "expected"), [
    (2, ((32,), (32,))),  # language.rs, access_shift_right_0
    (1, ((), (32, 32))),  # language.rs, access_shift_right_1
    (0, ((), (32, 32))),  # language.rs, access_shift_right_2: no access axis, a no-op
])
def test_access_shift_right(axis: int, expected: tuple[tuple[int, ...], tuple[int, ...]]
                            ) -> None:
    text = f"(access-shift-right (access (access-tensor t) {axis}))"
    assert split(typed(text, t=(32, 32))) == expected


def test_access_shift_right_without_access_axis_keeps_the_data() -> None:
    # language.rs access_shift_right_2 (the original's interpreter has no rule for it:
    # `todo!()`); the value is the operand's, unchanged.
    t = np.arange(6, dtype=np.int32).reshape(2, 3)
    value, result = interpret("(access-shift-right (access (access-tensor t) 0))", t=t)
    np.testing.assert_array_equal(value, t)
    assert split(result) == ((), (2, 3))


def test_min_padding_is_the_lowest_finite_value() -> None:
    # interpreter.rs, test access_pad_min_padding (run there on f64, padding with f64::MIN;
    # on f32 the original's `DataType::min_value()` is f32::MIN = -3.4028235e38, not -inf).
    value, result = interpret("(access-pad (access-tensor t) min-padding 0 2 4)",
                              t=np.array([[1., 2.], [3., 4.]], np.float32))
    low = [F32_MIN, F32_MIN]
    np.testing.assert_array_equal(value, np.array([low, low, [1., 2.], [3., 4.], low, low, low,
                                                   low], np.float32))
    assert np.isfinite(value).all()
    assert split(result) == ((8, 2), ())  # access-tensor is ((shape),()) here (see docs)


MAX_POOL_OVER_PADDING = """
(compute reduce-max
 (access-windows (access (access-pad (access-tensor t) min-padding 1 2 0) 1)
                 (shape 2) (shape 2)))
"""


def test_max_pool_over_an_all_padding_window(tmp_path: Path) -> None:
    # A window holding only padding gives f32::MIN in the original (interpreter.rs:
    # access-pad min-padding fills with DataType::min_value(), compute reduce-max folds
    # from it); the interpreter and the generated C agree.
    t = np.array([[5., -1.], [-7., 2.]], np.float32)
    value, _ = interpret(MAX_POOL_OVER_PADDING, t=t)
    expected = np.array([[F32_MIN, 5.], [F32_MIN, 2.]], np.float32)
    np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(run_c(MAX_POOL_OVER_PADDING, tmp_path, t=t), expected)
