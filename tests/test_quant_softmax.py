"""Attention's softmax in integers (glensidec.frontends.quant_compute.integer_softmax):
e = exp(q − max q) by a lookup table at zero point 0, Σe per row, and the division as one
multiplier per row, so that no step divides element by element (the form the
accelerator's epilogue can take: a per-row multiplier), at the accuracy the per-element
division had."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from onnx_models import OnnxGraph, imported
from test_quantize import calibration_for, run_quantized, sample_list

from glensidec.frontends.quantize import quantize
from glensidec.lang.interp import run_program
from glensidec.lang.terms import compute_name, postorder
from glensidec.lang.typecheck import AccessType, check_program

TOKENS, WIDTH = 12, 8


def attention(seed: int = 0) -> Any:
    """softmax(Q·Kᵀ)·V of three inputs: the scores of two activations, as in a head."""
    g = OnnxGraph(seed)
    q = g.input("q", [1, TOKENS, WIDTH])
    keys = g.input("kt", [1, WIDTH, TOKENS])
    v = g.input("v", [1, TOKENS, WIDTH])
    weights = g.node("Softmax", [g.node("MatMul", [q, keys])], axis=-1)
    return g.model(g.node("MatMul", [weights, v]), [1, TOKENS, WIDTH])


def test_softmax_divides_once_per_row_not_per_element(tmp_path: Path) -> None:
    """Every integer division of the quantized head by a computed value has one value per
    row of the scores (TOKENS of them): the others divide by a constant power of two
    (the per-row reciprocal's fraction, a shift in the epilogue). softmax's p is never
    formed: the product multiplies e, the exp table's result."""
    program = imported(attention(), tmp_path)
    quantized = quantize(program, calibration_for(program, 4), per_channel=True,
                         symmetric_activations=True)
    root = quantized.program.root
    types = check_program(quantized.program)
    runtime = [term for term in postorder(root) if compute_name(term) == "elementwise-div"
               and any(t.op == "compute" for t in postorder(term.children()[0].children()[1]))]
    assert runtime
    for term in runtime:
        result = types[term]
        assert isinstance(result, AccessType)
        assert int(np.prod(result.full)) == TOKENS
    products = [term for term in postorder(root) if compute_name(term) == "dot-product"]
    tables = [term for term in postorder(root) if compute_name(term) == "lookup"]
    assert len(products) == 2 and len(tables) == 1
    assert tables[0] in postorder(products[1])  # e·V: the table's result, not p


def test_integer_softmax_keeps_the_heads_accuracy(tmp_path: Path) -> None:
    """softmax·V in int8 against float on held-out inputs: the per-row multiplier (one
    rounding of e·r, d at the input's step) is at least as accurate as the per-element
    division was (relative L2 0.030–0.071 on these samples; 0.034–0.075 before)."""
    program = imported(attention(), tmp_path)
    quantized = quantize(program, calibration_for(program, 4), per_channel=True,
                         symmetric_activations=True)
    types = check_program(program)
    errors = []
    for sample in sample_list(calibration_for(program, 4, seed=11), 4):
        expected = run_program(program, sample, types)
        actual = run_quantized(quantized, sample)
        errors.append(float(np.linalg.norm(actual - expected) / np.linalg.norm(expected)))
    print(f"attention head int8: relative L2 {', '.join(f'{e:.3f}' for e in errors)}")
    assert max(errors) <= 0.072
