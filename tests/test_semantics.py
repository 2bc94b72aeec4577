"""Every construct against an independent numpy formulation (not the interpreter's code).

Integers must match exactly and in the documented dtype; floats at 1e-5.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from conftest import EXAMPLES, assert_matches, make_program, run_with

from glensidec.frontends import builders as b
from glensidec.lang.data import random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import parse_program, read_program
from glensidec.lang.terms import Symbol
from glensidec.lang.typecheck import check_program, root_type

# -- independent references ------------------------------------------------------------


def wrap32(values: np.ndarray) -> np.ndarray:
    """Two's complement wrap of exact (Python-int / int64) results into int32."""
    return ((values.astype(np.int64) + 2**31) % 2**32 - 2**31).astype(np.int32)


def ref_conv2d_nchw(x: np.ndarray, w: np.ndarray, strides: tuple[int, int],
                    pads: tuple[int, int, int, int]) -> np.ndarray:
    top, left, bottom, right = pads
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    stride_h, stride_w = strides
    _, _, kernel_h, kernel_w = w.shape
    out_h = (padded.shape[2] - kernel_h) // stride_h + 1
    out_w = (padded.shape[3] - kernel_w) // stride_w + 1
    wide = np.float64 if x.dtype == np.float32 else np.int64
    out = np.zeros((x.shape[0], w.shape[0], out_h, out_w), dtype=wide)
    for i in range(kernel_h):
        for j in range(kernel_w):
            patch = padded[:, :, i:i + stride_h * out_h:stride_h, j:j + stride_w * out_w:stride_w]
            out += np.einsum("nchw,oc->nohw", patch.astype(wide), w[:, :, i, j].astype(wide))
    return out.astype(np.float32) if x.dtype == np.float32 else wrap32(out)


def ref_max_pool(x: np.ndarray, kernel: int, stride: int, pads: tuple[int, int, int, int]
                 ) -> np.ndarray:
    top, left, bottom, right = pads
    low = np.iinfo(x.dtype).min if np.issubdtype(x.dtype, np.integer) else np.finfo(x.dtype).min
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=low)
    out_h = (padded.shape[2] - kernel) // stride + 1
    out_w = (padded.shape[3] - kernel) // stride + 1
    out = np.empty(x.shape[:2] + (out_h, out_w), dtype=x.dtype)
    for i in range(out_h):
        for j in range(out_w):
            window = padded[:, :, i * stride:i * stride + kernel, j * stride:j * stride + kernel]
            out[:, :, i, j] = window.max(axis=(2, 3))
    return out


# -- matmul and dense ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["i8", "i16", "i32", "f32"])
def test_matmul(dtype: str) -> None:
    root = b.matmul(b.access(b.tensor("a"), 1), b.access(b.transpose(b.tensor("w"), 1, 0), 1))
    program = make_program(root, {"a": ((32, 64), dtype), "w": ((64, 16), dtype)})
    result, inputs = run_with(program)
    a, w = inputs["a"], inputs["w"]
    if dtype == "f32":
        expected = (a.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    else:
        expected = wrap32(np.array([[sum(int(x) * int(y) for x, y in zip(row, col, strict=True))
                                     for col in w.T] for row in a], dtype=object))
    assert_matches(result, expected)


def test_i32_dot_product_wraps_modulo_2_32() -> None:
    root = b.matmul(b.access(b.tensor("a"), 1), b.access(b.tensor("w"), 1))
    program = make_program(root, {"a": ((1, 2), "i32"), "w": ((1, 2), "i32")})
    big = np.array([[2**31 - 1, 2**31 - 1]], dtype=np.int32)
    result, _ = run_with(program, a=big, w=big)
    exact = 2 * (2**31 - 1) ** 2
    assert result[0, 0] == (exact + 2**31) % 2**32 - 2**31


def test_dense_bias_relu_f32() -> None:
    hidden = b.dense(b.access(b.tensor("x"), 1), b.tensor("w"))
    root = b.compute("relu", b.channel_bias(hidden, b.tensor("bias"), (4, 10), channel_axis=1))
    program = make_program(root, {"x": ((4, 20), "f32"), "w": ((10, 20), "f32"),
                                  "bias": ((10,), "f32")})
    result, inputs = run_with(program)
    expected = np.maximum(inputs["x"].astype(np.float64) @ inputs["w"].T.astype(np.float64)
                          + inputs["bias"], 0)
    assert_matches(result, expected.astype(np.float32))


def test_mlp_784_512_512_10() -> None:
    layer = b.access(b.tensor("x"), 1)
    sizes = [784, 512, 512, 10]
    tensors: dict[str, tuple[tuple[int, ...], str]] = {"x": ((1, 784), "f32")}
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        tensors[f"w{index}"] = ((n_out, n_in), "f32")
        tensors[f"b{index}"] = ((n_out,), "f32")
        out = b.channel_bias(b.dense(layer, b.tensor(f"w{index}")), b.tensor(f"b{index}"),
                             (1, n_out))
        layer = b.access(b.compute("relu", out) if index < 2 else out, 1)
    program = make_program(layer, tensors)
    result, inputs = run_with(program)
    expected = inputs["x"].astype(np.float64)
    for index in range(3):
        expected = expected @ inputs[f"w{index}"].T.astype(np.float64) + inputs[f"b{index}"]
        expected = np.maximum(expected, 0) if index < 2 else expected
    assert_matches(result, expected.astype(np.float32))


# -- convolutions ----------------------------------------------------------------------


CONV_CASES = [
    # (input NCHW, weights OIHW, strides, pads (top, left, bottom, right), expected shape)
    ((1, 3, 32, 32), (8, 3, 3, 3), (2, 3), (1, 2, 3, 4), (1, 8, 17, 12)),
    ((1, 3, 32, 32), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 8, 32, 32)),
    ((2, 4, 9, 7), (5, 4, 3, 2), (1, 2), (0, 0, 0, 0), (2, 5, 7, 3)),
]


@pytest.mark.parametrize("dtype", ["i8", "f32"])
@pytest.mark.parametrize(("x_shape", "w_shape", "strides", "pads", "out_shape"), CONV_CASES)
def test_conv2d_nchw_oihw(dtype: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                          strides: tuple[int, int], pads: tuple[int, int, int, int],
                          out_shape: tuple[int, ...]) -> None:
    root = b.conv2d_nchw(b.tensor("x"), b.tensor("w"), x_shape[1], w_shape[2:], strides, pads)
    program = make_program(root, {"x": (x_shape, dtype), "w": (w_shape, dtype)})
    result_type = root_type(program, check_program(program))
    assert (result_type.shape, result_type.item) == (out_shape, ())
    assert result_type.dtype == ("i32" if dtype == "i8" else "f32")
    result, inputs = run_with(program)
    assert_matches(result, ref_conv2d_nchw(inputs["x"], inputs["w"], strides, pads))


def test_conv2d_nhwc_hwio() -> None:
    strides, pads = (2, 3), (1, 2, 3, 4)
    root = b.conv2d_nhwc(b.tensor("x"), b.tensor("w"), 3, (3, 3), strides, pads)
    program = make_program(root, {"x": ((1, 32, 32, 3), "i8"), "w": ((3, 3, 3, 8), "i8")})
    result, inputs = run_with(program)
    nchw = inputs["x"].transpose(0, 3, 1, 2)
    oihw = inputs["w"].transpose(3, 2, 0, 1)
    expected = ref_conv2d_nchw(nchw, oihw, strides, pads).transpose(0, 2, 3, 1)
    assert result.shape == (1, 17, 12, 8)
    assert_matches(result, expected)


def test_depthwise_conv() -> None:
    channels, pads, strides = 6, (1, 1, 1, 1), (2, 2)
    root = b.depthwise_conv2d_nchw(b.tensor("x"), b.tensor("w"), 1, channels, (5, 5), (3, 3),
                                   strides, pads)
    program = make_program(root, {"x": ((1, channels, 10, 10), "i8"),
                                  "w": ((channels, 1, 3, 3), "i8")})
    result, inputs = run_with(program)
    expected = np.concatenate([
        ref_conv2d_nchw(inputs["x"][:, c:c + 1], inputs["w"][c:c + 1], strides, pads)
        for c in range(channels)], axis=1)
    assert_matches(result, expected)


# -- pooling, reductions, elementwise ----------------------------------------------------


@pytest.mark.parametrize("dtype", ["i8", "f32"])
def test_max_pool_with_min_padding(dtype: str) -> None:
    root = b.max_pool_nchw(b.tensor("x"), (3, 3), (2, 2), (1, 1, 1, 1))
    program = make_program(root, {"x": ((1, 4, 9, 9), dtype)})
    # All-negative data: padding with zeros instead of the minimum would show.
    data = -np.abs(np.random.default_rng(3).integers(1, 100, (1, 4, 9, 9)))
    data = data.astype(np.int8 if dtype == "i8" else np.float32)
    result, _ = run_with(program, x=data)
    assert_matches(result, ref_max_pool(data, 3, 2, (1, 1, 1, 1)))


def test_global_average_pool_dense_softmax() -> None:
    pooled = b.compute("reduce-mean", b.access(b.tensor("x"), 2))  # ((1,16),())
    logits = b.channel_bias(b.dense(b.access(pooled, 1), b.tensor("w")), b.tensor("bias"),
                            (1, 10))
    root = b.compute("softmax", b.access(logits, 1))
    program = make_program(root, {"x": ((1, 16, 7, 7), "f32"), "w": ((10, 16), "f32"),
                                  "bias": ((10,), "f32")})
    result, inputs = run_with(program)
    features = inputs["x"].astype(np.float64).mean(axis=(2, 3))
    scores = features @ inputs["w"].T.astype(np.float64) + inputs["bias"]
    expected = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    assert_matches(result, expected.astype(np.float32))


def test_integer_reduce_mean_rounds_half_away_from_zero() -> None:
    root = b.compute("reduce-mean", b.access(b.tensor("x"), 1))
    program = make_program(root, {"x": ((4, 2), "i8")})
    data = np.array([[1, 2], [-1, -2], [3, 3], [-128, 127]], dtype=np.int8)
    result, _ = run_with(program, x=data)
    # 1.5 → 2, -1.5 → -2, 3 → 3, -0.5 → -1
    np.testing.assert_array_equal(result, np.array([2, -2, 3, -1], dtype=np.int8))


ELEMENTWISE = {
    "elementwise-add": lambda x, y: x + y,
    "elementwise-sub": lambda x, y: x - y,
    "elementwise-mul": lambda x, y: x * y,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@pytest.mark.parametrize("dtype", ["i8", "i32", "f32"])
def test_elementwise_wraps_in_its_dtype(name: str, dtype: str) -> None:
    root = b.compute(name, b.op("access-pair", b.access(b.tensor("x"), 1),
                                b.access(b.tensor("y"), 1)))
    program = make_program(root, {"x": ((3, 5), dtype), "y": ((3, 5), dtype)})
    result, inputs = run_with(program)
    x, y = inputs["x"], inputs["y"]
    if dtype == "f32":
        expected = ELEMENTWISE[name](x, y)  # float32 arithmetic, rounded per operation
    else:
        exact = ELEMENTWISE[name](x.astype(object), y.astype(object))
        bits = {"i8": 8, "i32": 32}[dtype]
        expected = ((exact + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)).astype(x.dtype)
    assert_matches(result, expected)


def test_integer_division_truncates_and_defines_zero_divisor() -> None:
    root = b.compute("elementwise-div", b.op("access-pair", b.access(b.tensor("x"), 1),
                                             b.access(b.tensor("y"), 1)))
    program = make_program(root, {"x": ((1, 5), "i32"), "y": ((1, 5), "i32")})
    x = np.array([[7, -7, 7, -7, 5]], dtype=np.int32)
    y = np.array([[2, 2, -2, -2, 0]], dtype=np.int32)
    result, _ = run_with(program, x=x, y=y)
    np.testing.assert_array_equal(result, [[3, -3, -3, 3, 0]])


def test_relu_negative_sqrt() -> None:
    x = np.array([[-2.0, 0.0, 4.0]], dtype=np.float32)
    for name, expected in [("relu", [[0.0, 0.0, 4.0]]), ("negative", [[2.0, -0.0, -4.0]])]:
        program = make_program(b.compute(name, b.access(b.tensor("x"), 1)),
                               {"x": ((1, 3), "f32")})
        assert_matches(run_with(program, x=x)[0], np.array(expected, dtype=np.float32))
    program = make_program(b.compute("sqrt", b.access(b.tensor("x"), 1)), {"x": ((1, 3), "f32")})
    assert_matches(run_with(program, x=np.abs(x))[0], np.sqrt(np.abs(x)))
    ints = np.array([[-128, 5]], dtype=np.int8)
    program = make_program(b.compute("negative", b.access(b.tensor("x"), 1)),
                           {"x": ((1, 2), "i8")})
    np.testing.assert_array_equal(run_with(program, x=ints)[0], [[-128, -5]])  # -(-128) wraps


# -- integer network glue: clip, cast, requantize ------------------------------------------


def test_clip_and_saturating_cast() -> None:
    x = np.array([[-300, -129, -5, 0, 127, 128, 70000]], dtype=np.int32)
    clip = make_program(b.compute("clip", b.access(b.tensor("x"), 1), -100, 100),
                        {"x": ((1, 7), "i32")})
    np.testing.assert_array_equal(run_with(clip, x=x)[0], np.clip(x, -100, 100))
    cast = make_program(b.compute("cast", b.access(b.tensor("x"), 1), "i8"),
                        {"x": ((1, 7), "i32")})
    out = run_with(cast, x=x)[0]
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [[-128, -128, -5, 0, 127, 127, 127]])
    floats = np.array([[0.5, 1.5, -0.5, -2.5, 300.0, np.nan]], dtype=np.float32)
    cast = make_program(b.compute("cast", b.access(b.tensor("x"), 1), "i8"),
                        {"x": ((1, 6), "f32")})
    np.testing.assert_array_equal(run_with(cast, x=floats)[0], [[0, 2, 0, -2, 127, 0]])


def reference_requantize(x: int, multiplier: int, pre: int, post: int, zero_point: int) -> int:
    """Glow's formula written with Python integers (arbitrary precision, floor shifts)."""
    value = (x >> pre) * multiplier
    if post:
        value = (value + (1 << (post - 1))) >> post
    return max(-128, min(127, value + zero_point))


@pytest.mark.parametrize(("multiplier", "pre", "post", "zero_point"),
                         [(1, 0, 6, 0), (1549, 2, 17, -3), (2**31 - 1, 0, 40, 5),
                          (-7, 1, 0, 0), (113, 0, 13, 127)])
def test_requantize(multiplier: int, pre: int, post: int, zero_point: int) -> None:
    generator = np.random.default_rng(multiplier & 0xFFFF)
    x = generator.integers(-(2**31), 2**31, size=(1, 200)).astype(np.int32)
    x[0, :4] = [-(2**31), 2**31 - 1, 0, -1]
    program = make_program(
        b.compute("requantize", b.access(b.tensor("x"), 1), multiplier, pre, post, zero_point),
        {"x": ((1, 200), "i32")})
    out = run_with(program, x=x)[0]
    assert out.dtype == np.int8
    expected = [reference_requantize(int(v), multiplier, pre, post, zero_point) for v in x[0]]
    np.testing.assert_array_equal(out[0], expected)


# -- access patterns one by one ------------------------------------------------------------


def test_access_pattern_constructs(rng: np.random.Generator) -> None:
    x = rng.integers(-100, 100, size=(2, 3, 4)).astype(np.int32)
    y = rng.integers(-100, 100, size=(2, 3, 4)).astype(np.int32)
    t = b.tensor("x")
    cases = [
        (b.transpose(t, 2, 0, 1), x.transpose(2, 0, 1)),
        (b.op("access-slice", t, 2, 1, 3), x[:, :, 1:3]),
        (b.op("access-concatenate", t, b.tensor("y"), 1), np.concatenate([x, y], axis=1)),
        (b.op("access-flatten", b.access(t, 1)), x.reshape(2, 12)),
        (b.reshape(t, (6,), (4,)), x.reshape(6, 4)),
        (b.op("access-squeeze", b.op("access-insert-axis", t, 1), 1), x),
        (b.op("access-insert-axis", t, 3), x[..., None]),
        (b.op("access-move-axis", t, 0, 2), np.moveaxis(x, 0, 2)),
        (b.pad(t, 1, 2, 1), np.pad(x, ((0, 0), (2, 1), (0, 0)))),
        (b.pad(t, 2, 0, 1, "min-padding"),
         np.pad(x, ((0, 0), (0, 0), (0, 1)), constant_values=-(2**31))),
        (b.op("access-shift-right", t), x),
        (b.broadcast(b.op("access-slice", t, 0, 0, 1), (2, 3, 4), ()),
         np.broadcast_to(x[:1], x.shape)),
        (b.op("access-pair", b.access(t, 1), b.access(b.tensor("y"), 1)), np.stack([x, y], 1)),
    ]
    for root, expected in cases:
        program = make_program(root, {"x": ((2, 3, 4), "i32"), "y": ((2, 3, 4), "i32")})
        result, _ = run_with(program, x=x, y=y)
        assert_matches(result, np.ascontiguousarray(expected).astype(np.int32))


def test_cartesian_product_and_windows(rng: np.random.Generator) -> None:
    a = rng.integers(-9, 9, size=(2, 3)).astype(np.int8)
    c = rng.integers(-9, 9, size=(4, 3)).astype(np.int8)
    root = b.op("access-cartesian-product", b.access(b.tensor("a"), 1), b.access(b.tensor("c"), 1))
    program = make_program(root, {"a": ((2, 3), "i8"), "c": ((4, 3), "i8")})
    result, _ = run_with(program, a=a, c=c)
    expected = np.array([[[a[i], c[j]] for j in range(4)] for i in range(2)])
    assert_matches(result, expected.astype(np.int8))
    image = rng.integers(-9, 9, size=(2, 7, 6)).astype(np.int8)
    root = b.op("access-windows", b.access(b.tensor("m"), 1), b.shape(3, 2), b.shape(2, 3))
    program = make_program(root, {"m": ((2, 7, 6), "i8")})
    result, _ = run_with(program, m=image)
    expected = np.array([[[image[n, 2 * i:2 * i + 3, 3 * j:3 * j + 2] for j in range(2)]
                          for i in range(3)] for n in range(2)])
    assert_matches(result, expected)


def test_literal_broadcast_add() -> None:
    literal = b.op("access-literal", b.op("literal", 0.5))
    spread = b.broadcast(b.op("access-insert-axis", b.op("access-insert-axis", literal, 0), 0),
                         (2, 3), ())
    root = b.compute("elementwise-add", b.op("access-pair", b.tensor("x"), spread))
    program = make_program(root, {"x": ((2, 3), "f32")})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_matches(run_with(program, x=x)[0], x + np.float32(0.5))


def test_shape_helpers_evaluate_statically() -> None:
    sh = b.op("shape-of", Symbol("x"))
    target = b.op("access-shape", b.op("slice-shape", b.op("shape-insert-axis", sh, 0), 2),
                  b.op("shape-remove-axis", b.shape(1, 2, 2), 0))
    root = b.op("access-reshape", b.tensor("x"), target)
    program = make_program(root, {"x": ((4, 3), "i8")})
    result_type = root_type(program, check_program(program))
    assert (result_type.shape, result_type.item) == ((3,), (2, 2))


# -- hardware constructs ---------------------------------------------------------------


@pytest.mark.parametrize("construct", ["systolic-array", "systolic-array-with-blocking"])
def test_systolic_array_is_a_matmul(construct: str) -> None:
    rows, cols = (4, 8) if construct == "systolic-array" else (2, 4)
    weights = b.access(b.tensor("w"), 0)
    root = b.op(construct, rows, cols, b.access(b.tensor("a"), 1), weights)
    program = make_program(root, {"a": ((5, 4), "i8"), "w": ((4, 8), "i8")})
    result, inputs = run_with(program)
    expected = inputs["a"].astype(np.int64) @ inputs["w"].astype(np.int64)
    assert_matches(result, expected.astype(np.int32))


# -- compatibility mode ----------------------------------------------------------------


def test_original_glenside_conv2d_in_compatibility_mode() -> None:
    program = read_program(EXAMPLES / "glenside" / "conv2d.glenside",
                           EXAMPLES / "glenside" / "conv2d.json")
    assert {d.name: (d.shape, d.dtype, d.role) for d in program.tensors.values()} == {
        "activations": ((1, 3, 32, 32), "f32", "input"),
        "weights": ((8, 3, 3, 3), "f32", "input")}
    inputs = random_inputs(program, seed=11)
    result = run_program(program, inputs)
    expected = ref_conv2d_nchw(inputs["activations"], inputs["weights"], (1, 1), (1, 1, 1, 1))
    assert_matches(result, expected)


def test_scalar_result_keeps_its_empty_shape() -> None:
    program = make_program(b.compute("reduce-sum", b.access(b.tensor("x"), 0)),
                           {"x": ((2, 3), "i8")})
    x = np.arange(6, dtype=np.int8).reshape(2, 3)
    result, _ = run_with(program, x=x)
    assert result.shape == () and result.dtype == np.int32 and int(result) == 15


@pytest.mark.parametrize(("text", "expected"), [
    ("(compute softmax (access (access-tensor x) 1))", [[np.nan] * 3, [0.0, 0.5, 0.5]]),
    ("(compute elementwise-sub (access-pair (access-tensor x) (access-tensor x)))",
     [[np.nan, np.nan, 0.0], [np.nan, 0.0, 0.0]]),
    ("(compute reduce-sum (access (access-tensor x) 1))", [np.nan, -np.inf]),
    ("(compute dot-product (access-cartesian-product (access (access-tensor x) 1) "
     "(access (access-tensor x) 1)))", [[np.inf, np.nan], [np.nan, np.inf]]),
])
def test_f32_infinities_give_nan_and_inf_without_warnings(text: str, expected: object) -> None:
    """IEEE arithmetic as the generated C and the frameworks do it (torch.softmax of a row
    holding inf is NaN): inf − inf is NaN, silently. The interpreter used to print numpy's
    RuntimeWarning ('invalid value encountered in subtract') from `glensidec run`."""
    program = parse_program(f"(input x f32 (shape 2 3)) {text}")
    x = np.array([[np.inf, -np.inf, 2.0], [-np.inf, 0.0, 0.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_program(program, {"x": x})
    np.testing.assert_array_equal(got, np.array(expected, np.float32))
