"""A BERT-style encoder over INT64 token ids (issue 30): token Embedding and position
embedding (Gather of table rows), LayerNormalization, two post-norm encoder layers
(attention, GELU MLP) and a pooled tanh head on the first token, built with onnx.helper
as PyTorch exports one (`torch.nn.Embedding` → Gather of an initializer by the ids).

The ids stay integers everywhere: the program declares them i32, the embedding is a
one-hot product (docs/import.md, "Gather"), and `glensidec quantize` keeps them integers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx_models import OnnxGraph, imported, run_interpreter, run_onnxruntime
from test_transformer import Size, gelu, heads, layer_norm, linear

from glensidec.lang.terms import is_matmul, postorder

VOCABULARY = 50
SIZE = Size(tokens=8, features=32, heads=2, hidden=64)


def attention(g: OnnxGraph, x: str, size: Size) -> str:
    q = heads(g, linear(g, x, size.features, size.features), size)
    k = heads(g, linear(g, x, size.features, size.features), size, key=True)
    v = heads(g, linear(g, x, size.features, size.features), size)
    scale = g.const(f"scale{g.count}", np.array((size.features // size.heads) ** -0.5, "f4"))
    weights = g.node("Softmax", [g.node("Mul", [g.node("MatMul", [q, k]), scale])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [weights, v])], perm=[0, 2, 1, 3])
    merged = g.node("Reshape", [context, g.const(f"merge{g.count}", np.array(
        [1, size.tokens, size.features], np.int64))])
    return linear(g, merged, size.features, size.features)


def token_encoder(seed: int = 0, size: Size = SIZE, layers: int = 2) -> Any:
    g = OnnxGraph(seed)
    g.inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                  [1, size.tokens]))
    words = g.node("Gather", [g.random("word_embeddings", (VOCABULARY, size.features)),
                              "input_ids"])
    positions = g.node("Gather", [g.random("position_embeddings", (16, size.features)),
                                  g.const("position_ids", np.arange(size.tokens)[None])])
    x = layer_norm(g, g.node("Add", [words, positions]), size.features)
    for _ in range(layers):  # post-norm, as torch.nn.TransformerEncoderLayer's default
        x = layer_norm(g, g.node("Add", [x, attention(g, x, size)]), size.features)
        hidden = gelu(g, linear(g, x, size.features, size.hidden))
        x = layer_norm(g, g.node("Add", [x, linear(g, hidden, size.hidden, size.features)]),
                       size.features)
    first = g.node("Gather", [x, g.const("first", np.array(0, np.int64))], axis=1)
    pooled = g.node("Tanh", [g.gemm(first, size.features, size.features)])
    return g.model(pooled, [1, size.features])


def token_ids(seed: int, count: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCABULARY, (1, SIZE.tokens)).astype(np.int64)
            for _ in range(count)]


def test_the_encoder_over_int64_ids_matches_onnxruntime(tmp_path: Path) -> None:
    model = token_encoder()
    program = imported(model, tmp_path)
    (decl,) = program.inputs()
    assert (decl.name, decl.dtype, decl.shape) == ("input_ids", "i32", (1, SIZE.tokens))
    # the word embedding (a one-hot product), 6 projections and 2 attention products per
    # head in each layer, and the pooler
    products = sum(1 for term in postorder(program.root) if is_matmul(term))
    assert products == 1 + 2 * (6 + 2 * SIZE.heads) + 1
    for ids in token_ids(3, 3):
        expected = run_onnxruntime(model, {"input_ids": ids})
        actual = run_interpreter(program, {"input_ids": ids.astype(np.int32)})
        relative = float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
        assert actual.shape == expected.shape and relative <= 1e-5, relative


def calibration(count: int, seed: int = 5) -> dict[str, np.ndarray]:
    return {"input_ids": np.stack([ids[0] for ids in token_ids(seed, count)])}


def test_quantizing_keeps_the_ids_integers(tmp_path: Path) -> None:
    """The quantized program still declares i32 ids (not a quantized float input), its
    one-hot rows are exact i8 (scale 1, zero point 0) into an i8 table, and its result is
    near the float program's."""
    from test_quantize import run_quantized

    from glensidec.frontends.quantize import quantize

    program = imported(token_encoder(), tmp_path)
    quantized = quantize(program, calibration(8), per_channel=True, symmetric_activations=True)
    (decl,) = quantized.program.inputs()
    assert (decl.dtype, decl.quantization) == ("i32", None) and not quantized.inputs
    ids = token_ids(11)[0]
    expected = run_interpreter(program, {"input_ids": ids.astype(np.int32)})
    relative = float(np.linalg.norm(run_quantized(quantized, {"input_ids": ids}) - expected)
                     / np.linalg.norm(expected))
    assert relative <= 0.1, relative


def test_integer_calibration_data_must_fit_the_ids(tmp_path: Path) -> None:
    from glensidec.errors import GlensideError
    from glensidec.frontends.quantize import quantize

    program = imported(token_encoder(), tmp_path)
    with pytest.raises(GlensideError, match="must hold integers of i32"):
        quantize(program, {"input_ids": np.full((2, 1, SIZE.tokens), 2**40)})


@pytest.mark.slow
@pytest.mark.rtl
def test_the_int8_encoder_is_bit_exact_in_interpreter_c_and_rtl(tmp_path: Path,
                                                                 sim_cache: Path) -> None:
    """Interpreter, C and co-simulation give the same integers on the quantized encoder:
    the word embedding's one-hot product, every projection and attention product on the
    array."""
    from test_models_cosim import check_agreement

    from glensidec.frontends.quantize import quantize

    program = imported(token_encoder(), tmp_path)
    quantized = quantize(program, calibration(8), per_channel=True, symmetric_activations=True)
    report = check_agreement(quantized, {"input_ids": token_ids(11)[0]}, "8x8", tmp_path,
                             sim_cache)
    assert len(report["calls"]) == 1 + 2 * (6 + 2 * SIZE.heads) + 1
