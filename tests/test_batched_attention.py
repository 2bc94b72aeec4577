"""Batched attention products (issue 30): softmax(Q·Kᵀ)·V of every (window, head) as one
product each (`builders.batched_matmul`: a dot-product over an access-pair of the two
operands broadcast over each other's axis), not one sliced product per batch item. The
interpreter computes it as numpy's batched matmul; the quantizer requantizes each of Q,
K and V once (not each broadcast copy, nor each item) and keeps softmax's division after
the product (e·V, one reciprocal per row); the bare array's lowering and C program give
the interpreter's integers."""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from conftest import make_program, run_c_program, run_checked, save_inputs
from test_quantize import calibration_for, run_quantized, sample_list

from glensidec.frontends import builders as B
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.lang import interp
from glensidec.lang.data import all_tensors, npz_bytes
from glensidec.lang.interp import apply_term, evaluate_all, run_program
from glensidec.lang.syntax import format_program, read_program
from glensidec.lang.terms import Program, TensorDecl, Term, compute_name, postorder
from glensidec.lang.typecheck import AccessType, check_program

COUNT, TOKENS, WIDTH, FEATURES = 6, 9, 8, 12  # (windows × heads) items of 9 tokens


def test_a_batched_product_is_numpys_batched_matmul() -> None:
    """i8 operands of (count, M, K) and (count, K, N), i32 sums: bit for bit einsum's."""
    left, right = B.tensor("a"), B.tensor("b")
    root = B.batched_matmul(left, right, COUNT, TOKENS, WIDTH, TOKENS - 2)
    program = make_program(root, {"a": ((COUNT, TOKENS, WIDTH), "i8"),
                                  "b": ((COUNT, WIDTH, TOKENS - 2), "i8")})
    types = check_program(program)
    result_type = types[program.root]
    assert isinstance(result_type, AccessType)
    assert (result_type.shape, result_type.item, result_type.dtype) == \
        ((COUNT, TOKENS, TOKENS - 2), (), "i32")
    generator = np.random.default_rng(0)
    a = generator.integers(-128, 128, (COUNT, TOKENS, WIDTH), dtype=np.int8)
    b = generator.integers(-128, 128, (COUNT, WIDTH, TOKENS - 2), dtype=np.int8)
    result = run_program(program, {"a": a, "b": b}, types)
    expected = np.einsum("gmk,gkn->gmn", a.astype(np.int64), b.astype(np.int64))
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, expected)


def _pair_program(count: int, m: int, k: int, n: int, dtype: str) -> Program:
    root = B.batched_matmul(B.tensor("a"), B.tensor("b"), count, m, k, n)
    return make_program(root, {"a": ((count, m, k), dtype), "b": ((count, k, n), dtype)})


@pytest.mark.parametrize("dtype", ["i8", "f32"])
def test_a_batched_products_slabs_give_the_whole_pairs_values(
        dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter takes a dot-product's pair of broadcast operands a slab of items at
    a time (interp._dot_of_pair): the same values, bit for bit, as the dot-product of the
    whole stacked pair (f32 too: each element the same products summed in the same
    order), with slabs that do not divide the batch."""
    program = _pair_program(COUNT, TOKENS, WIDTH, TOKENS - 2, dtype)
    types = check_program(program)
    generator = np.random.default_rng(1)
    if dtype == "i8":
        a = generator.integers(-128, 128, (COUNT, TOKENS, WIDTH), dtype=np.int8)
        b = generator.integers(-128, 128, (COUNT, WIDTH, TOKENS - 2), dtype=np.int8)
    else:
        a = generator.standard_normal((COUNT, TOKENS, WIDTH)).astype(np.float32)
        b = generator.standard_normal((COUNT, WIDTH, TOKENS - 2)).astype(np.float32)
    pair = next(t for t in postorder(program.root) if t.op == "access-pair")
    whole = evaluate_all(program.root, types, {"a": a, "b": b})
    assert pair not in whole  # never stacked
    stacked = apply_term(program.root, types, {**whole, pair: apply_term(
        pair, types, whole, {})}, {})  # the dot-product of the materialised pair
    monkeypatch.setattr(interp, "PAIR_SLAB_ELEMENTS", 2 * TOKENS * (TOKENS - 2) * WIDTH * 4)
    slabbed = evaluate_all(program.root, types, {"a": a, "b": b})[program.root]
    assert stacked.dtype == slabbed.dtype == whole[program.root].dtype
    np.testing.assert_array_equal(stacked, whole[program.root])
    np.testing.assert_array_equal(stacked, slabbed)


def test_a_batched_product_never_holds_its_whole_pair() -> None:
    """vit_b_16's Q·Kᵀ pair is 12·197·197·2·64 elements (8 GB as int64 with a batch of
    calibration images): the interpreter's peak stays a few slabs, far below the pair."""
    count, m, k, n = 16, 64, 64, 64
    program = _pair_program(count, m, k, n, "i8")
    types = check_program(program)
    generator = np.random.default_rng(2)
    a = generator.integers(-128, 128, (count, m, k), dtype=np.int8)
    b = generator.integers(-128, 128, (count, k, n), dtype=np.int8)
    tracemalloc.start()
    result = run_program(program, {"a": a, "b": b}, types)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    pair_bytes = count * m * n * 2 * k * 8  # the stacked pair, widened to int64
    assert peak < pair_bytes / 4, (peak, pair_bytes)
    np.testing.assert_array_equal(result, np.einsum("gmk,gkn->gmn", a.astype(np.int64),
                                                    b.astype(np.int64)))


def _attention(root: Path, output_projection: str = "") -> Program:
    """x (count, M, C) projected to Q, K and V (one weight each), softmax(Q·Kᵀ)·V with
    batched products (then, with `output_projection`, each token's context times a weight
    wo: "items", each item's rows on their own; "heads", the items as heads, each token's
    row their contexts side by side as ViT's concatenation), saved (with its weights) and
    read back."""
    generator = np.random.default_rng(3)
    weights = {name: (generator.standard_normal((WIDTH, FEATURES)) / FEATURES ** 0.5
                      ).astype(np.float32) for name in ("wq", "wk", "wv")}
    heads = output_projection == "heads"
    if output_projection:
        width = COUNT * WIDTH if heads else WIDTH
        weights["wo"] = (generator.standard_normal((FEATURES, width)) / width ** 0.5
                         ).astype(np.float32)
    rows = B.access(B.reshape(B.tensor("x"), (COUNT * TOKENS, FEATURES), ()), 1)

    def projected(name: str) -> Term:  # ((count, M, K), ())
        product = B.matmul(rows, B.access(B.tensor(name), 1))
        return B.reshape(product, (COUNT, TOKENS, WIDTH), ())

    q, k, v = (projected(name) for name in ("wq", "wk", "wv"))
    scores = B.batched_matmul(q, B.transpose(k, 0, 2, 1), COUNT, TOKENS, WIDTH, TOKENS)
    p = B.access(B.compute("softmax", B.access(scores, 2)), 3)
    context = B.batched_matmul(p, v, COUNT, TOKENS, TOKENS, WIDTH)
    if heads:  # (heads, tokens, width) → (tokens, heads·width)
        rows = B.reshape(B.transpose(context, 1, 0, 2), (TOKENS, COUNT * WIDTH), ())
        context = B.matmul(B.access(rows, 1), B.access(B.tensor("wo"), 1))
    elif output_projection:
        context = B.matmul(B.access(B.reshape(context, (COUNT * TOKENS, WIDTH), ()), 1),
                           B.access(B.tensor("wo"), 1))
    tensors = {"x": TensorDecl("x", (COUNT, TOKENS, FEATURES), "f32", "input"),
               **{name: TensorDecl(name, weights[name].shape, "f32", "weight", "model.npz")
                  for name in weights}}
    (root / "model.npz").write_bytes(npz_bytes(weights))
    path = root / "model.gs"
    path.write_text(format_program(Program(str(path), tensors, context)))
    return read_program(path)


def _products(program: Program) -> list[Term]:
    return [t for t in postorder(program.root) if compute_name(t) == "dot-product"]


def test_the_quantizer_requantizes_q_k_and_v_once_and_divides_after_the_product(
        tmp_path: Path) -> None:
    """The quantized attention keeps two batched products (and the three projections);
    no requantize writes more elements than one of Q, K, V or the scores (none of a
    broadcast copy, count·M·N·K), and ·V multiplies softmax's e (the table's result), not
    p: the only divisions by computed values are one per row."""
    program = _attention(tmp_path)
    quantized = quantize(program, calibration_for(program, 4), per_channel=True,
                         symmetric_activations=True)
    types = check_program(quantized.program)
    products = _products(quantized.program)
    assert len(products) == 5
    operand_size = COUNT * TOKENS * WIDTH
    requantizes = [t for t in postorder(quantized.program.root)
                   if compute_name(t) in ("requantize", "requantize-per-channel")]
    assert requantizes
    for term in requantizes:
        result = types[term]
        assert isinstance(result, AccessType)
        assert int(np.prod(result.full)) <= max(operand_size, COUNT * TOKENS * TOKENS)
    # softmax's division: once per row of scores (count·M), after e·V, never per element
    runtime = [t for t in postorder(quantized.program.root)
               if compute_name(t) == "elementwise-div" and any(
                   d.op == "compute" for d in postorder(t.children()[0].children()[1]))]
    assert runtime
    for term in runtime:
        result = types[term]
        assert isinstance(result, AccessType)
        assert int(np.prod(result.full)) == COUNT * TOKENS
    e = products[-1].args[1].args[0]  # ·V's left operand, under the batch's views
    while e.op != "compute":
        e = e.args[0]
    assert compute_name(e) == "lookup"  # exp's table: e itself, not p requantized


def test_the_quantized_batched_attention_keeps_the_floats_accuracy(tmp_path: Path) -> None:
    """int8 against float on held-out inputs, relative L2 below 0.1 (0.02–0.04 here)."""
    program = _attention(tmp_path)
    calibration = calibration_for(program, 8)
    quantized = quantize(program, calibration, per_channel=True, symmetric_activations=True)
    float_types = check_program(program)
    weights = {name: np.load(tmp_path / "model.npz")[name] for name in ("wq", "wk", "wv")}
    for sample in sample_list(calibration_for(program, 3, seed=11), 3):
        expected = run_program(program, {**weights, **sample}, float_types)
        got = run_quantized(quantized, sample)
        error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
        assert error < 0.1, error


@pytest.mark.slow
def test_the_bare_arrays_c_program_computes_the_interpreters_integers(tmp_path: Path) -> None:
    """Compiled for the bare array (each batched product a host loop), the C program's
    int8 result equals the interpreter's."""
    program = _attention(tmp_path)
    calibration = calibration_for(program, 4)
    quantized = quantize(program, calibration, per_channel=True, symmetric_activations=True)
    source = save_quantized(quantized, tmp_path / "attention.q.gs")
    inputs = quantized.quantize_inputs(sample_list(calibration, 1)[0])
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(source), "--bare-array",
                 "-o", str(outdir)])
    got = run_c_program(outdir, save_inputs(inputs, tmp_path), tmp_path / "c.npy")
    q_program = read_program(source)
    expected = run_program(q_program, all_tensors(q_program, inputs), check_program(q_program))
    np.testing.assert_array_equal(got, expected)
