"""The dtype table agrees with numpy, and requantize with the formula in exact integers."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from glensidec.lang.dtypes import DTYPES, INTEGER_NAMES, NAMES, by_bits, requantize


def test_every_row_agrees_with_numpy() -> None:
    for d in DTYPES.values():
        numpy_dtype = np.dtype(d.numpy)
        assert numpy_dtype.itemsize == d.size
        assert np.dtype(d.npy_descr) == numpy_dtype
        info = np.iinfo(numpy_dtype) if d.integer else np.finfo(numpy_dtype)
        assert (d.low, d.high) == (info.min, info.max), d.name
        assert d.c_type == ("float" if not d.integer else f"int{d.bits}_t")
        assert d.accumulator in DTYPES
        c_lowest = np.float32(d.c_min.removesuffix("f")) if not d.integer else None
        assert d.c_min == f"INT{d.bits}_MIN" if d.integer else c_lowest == info.min


def test_names_and_widths() -> None:
    assert NAMES == ("i8", "i16", "i32", "f32")
    assert INTEGER_NAMES == ("i8", "i16", "i32")
    assert [by_bits(bits) for bits in (8, 12, 16, 32)] == ["i8", None, "i16", "i32"]


def _exact(acc: int, multiplier: int, pre: int, post: int, zero_point: int) -> int:
    """The same formula on Python integers, which never overflow."""
    scaled = (acc >> pre) * multiplier
    if post > 0:
        scaled = (scaled + (1 << (post - 1))) >> post
    return max(-128, min(127, scaled + zero_point))


@given(st.lists(st.integers(-(2 ** 31), 2 ** 31 - 1), min_size=1, max_size=8),
       st.integers(-(2 ** 31), 2 ** 31 - 1), st.integers(0, 31), st.integers(0, 62),
       st.integers(-128, 127))
def test_requantize_is_the_exact_formula(accs: list[int], multiplier: int, pre: int, post: int,
                                         zero_point: int) -> None:
    result = requantize(np.array(accs, dtype=np.int32), multiplier, pre, post, zero_point)
    assert result.dtype == np.int8
    assert result.tolist() == [_exact(a, multiplier, pre, post, zero_point) for a in accs]
