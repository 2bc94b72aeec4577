"""A transformer encoder block, built with onnx.helper as PyTorch exports one, imported and
compared with onnxruntime: multi-head self-attention (Q/K/V/O projections, scaled
Q·Kᵀ per head, softmax, ·V), residuals, LayerNormalization and a GELU MLP (the Erf form
PyTorch exports). 64 tokens × 128 features, 4 heads of 32, MLP 512.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import (
    EXECUTOR_PARAMS,
    EXECUTORS,
    OnnxGraph,
    imported,
    onnx_inputs,
    program_inputs,
    run_onnxruntime,
)

from glensidec.lang.terms import is_matmul, postorder

TOKENS, FEATURES, HEADS, HIDDEN = 64, 128, 4, 512


def linear(g: OnnxGraph, x: str, fan_in: int, units: int) -> str:
    """x @ W + b as PyTorch exports nn.Linear on a 3-D input: MatMul then Add."""
    w = g.random(f"w{g.count}", (fan_in, units), (1.0 / fan_in) ** 0.5)
    return g.node("Add", [g.node("MatMul", [x, w]), g.random(f"b{g.count}", (units,), 0.1)])


def heads(g: OnnxGraph, x: str, key: bool = False) -> str:
    """(1, T, F) → (1, H, T, F/H), or (1, H, F/H, T) for the keys."""
    split = g.node("Reshape", [x, g.const(f"s{g.count}", np.array(
        [1, TOKENS, HEADS, FEATURES // HEADS], np.int64))])
    return g.node("Transpose", [split], perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])


def layer_norm(g: OnnxGraph, x: str) -> str:
    scale = g.const(f"ln_scale{g.count}", g.rng.uniform(0.5, 1.5, FEATURES).astype("f4"))
    return g.node("LayerNormalization", [x, scale, g.random(f"ln_bias{g.count}", (FEATURES,),
                                                            0.1)], axis=-1, epsilon=1e-5)


def gelu(g: OnnxGraph, x: str) -> str:
    """PyTorch's export of nn.GELU(): x · 0.5 · (1 + erf(x / √2))."""
    root2 = g.const(f"root2_{g.count}", np.array(math.sqrt(2.0), "f4"))
    erf = g.node("Erf", [g.node("Div", [x, root2])])
    one = g.const(f"one{g.count}", np.array(1.0, "f4"))
    half = g.const(f"half{g.count}", np.array(0.5, "f4"))
    return g.node("Mul", [g.node("Mul", [x, g.node("Add", [erf, one])]), half])


def encoder_block(seed: int = 0) -> Any:
    g = OnnxGraph(seed)
    x = g.input("input", [1, TOKENS, FEATURES])
    q = heads(g, linear(g, x, FEATURES, FEATURES))
    k = heads(g, linear(g, x, FEATURES, FEATURES), key=True)
    v = heads(g, linear(g, x, FEATURES, FEATURES))
    scores = g.node("MatMul", [q, k])  # (1, H, T, T)
    scale = g.const("scale", np.array(1.0 / math.sqrt(FEATURES // HEADS), "f4"))
    attention = g.node("Softmax", [g.node("Mul", [scores, scale])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [attention, v])], perm=[0, 2, 1, 3])
    context = g.node("Reshape", [context, g.const("merge", np.array([1, TOKENS, FEATURES],
                                                                    np.int64))])
    x = layer_norm(g, g.node("Add", [x, linear(g, context, FEATURES, FEATURES)]))
    hidden = gelu(g, linear(g, x, FEATURES, HIDDEN))
    x = layer_norm(g, g.node("Add", [x, linear(g, hidden, HIDDEN, FEATURES)]))
    return g.model(x, [1, TOKENS, FEATURES])


@pytest.mark.parametrize("executor", EXECUTOR_PARAMS)
def test_encoder_block_matches_onnxruntime(executor: str, tmp_path: Path) -> None:
    model = encoder_block()
    program = imported(model, tmp_path)
    # Six projections, and one Q·Kᵀ and one softmax·V product per head.
    assert sum(1 for term in postorder(program.root) if is_matmul(term)) == 6 + 2 * HEADS
    inputs = onnx_inputs(model)
    actual = EXECUTORS[executor](program, program_inputs(program, inputs))
    expected = run_onnxruntime(model, inputs)
    relative = float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
    print(f"encoder block, {executor}: max |error| / max |expected| = {relative:.2e}")
    assert actual.shape == expected.shape and relative <= 1e-5
