"""A batched product as one accelerator command stream (glensidec.hardware.batched):
`count` GEMMs of one shape, each its own activations and weights, chained item after
item. The stream computes every item's `conv_reference` (run_functional), the C port of
the cycle model prices it as AccelModel does, and it takes fewer cycles than the items
as separate layers (the next item's loads overlap this one's stores). Its bits and
cycles on ws_accel: sim/test_ws_accel.py's batched layers. And a program's batched
product of two int8 activations with its requantize (`builders.batched_matmul`) is ONE
such layer (glensidec.backend.accel_batched), computing the interpreter's integers in
the lowered program, the C program and the RTL, in its predicted cycles; so is
softmax·V divided row by row (accel_softmax: the epilogue's per-row mode, each item's
rows' values in its own slot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_accel_offload import (
    _accelerated,
    _assert_interpreters_agree,
    _checked_cosimulation,
    _interpreted,
    _lowered_result,
    _random_inputs,
)
from test_batched_attention import COUNT as ATTENTION_COUNT
from test_batched_attention import TOKENS, WIDTH, _attention
from test_quantize import calibration_for

from glensidec.backend.lower import AccelLayer, Copy, Dot
from glensidec.frontends import builders as B
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.hardware.accel import ConvLayer, EpilogueConfig, ResidualConfig
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.batched import batched_program
from glensidec.hardware.commands import (
    AccelModel,
    Compute,
    LayerQuant,
    Load,
    accel_config_for,
    accel_cycles,
    conv_program,
    conv_reference,
    run_functional,
)
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, TensorDecl


@pytest.mark.parametrize(("array", "gemm", "count"), [
    ((16, 16), (49, 32, 49), 3),  # a Swin window's Q·Kᵀ: N past the array, a short block
    ((16, 16), (49, 49, 32), 2),  # its softmax·V: a short K fold
    ((4, 4), (9, 12, 5), 3),
    ((8, 8), (7, 3, 10), 4),  # one item's program signals releases nobody takes
])
def test_a_batch_computes_each_items_product_in_the_models_cycles(
        array: tuple[int, int], gemm: tuple[int, int, int], count: int) -> None:
    config = accel_config_for(ArrayConfig(*array))
    m, k, n = gemm
    item = ConvLayer("item", m, 1, k, n)
    rng = np.random.default_rng(sum(gemm))
    quant = LayerQuant(EpilogueConfig(pre=0, post=12, zero_point=3, low=-120, high=127),
                       tuple(int(v) for v in rng.integers(-500, 500, n)),
                       tuple(int(v) for v in rng.integers(1, 1 << 10, n)))
    program = batched_program(config, item, quant, count)
    features = rng.integers(-128, 128, (count, m, k))
    weights = rng.integers(-128, 128, (count, k, n))
    memory = rng.integers(0, 256, program.memory_bytes).astype(np.uint8)
    memory[program.input_base:program.input_base + features.size] = features.reshape(-1) & 0xFF
    memory[program.weight_base:program.weight_base + weights.size] = weights.reshape(-1) & 0xFF
    after = run_functional(config, program.commands, memory)
    stored = after[program.output_base:program.output_base + count * m * n].astype(np.int64)
    got = np.where(stored >= 128, stored - 256, stored).reshape(count, m, n)
    for g in range(count):
        expected = conv_reference(item, features[g].reshape(m, 1, k),
                                  weights[g].reshape(1, 1, k, n), quant)
        np.testing.assert_array_equal(got[g], expected)
    cycles = accel_cycles(config, program.commands).cycles
    assert cycles == AccelModel(config).run(program.commands).cycles
    alone = accel_cycles(config, conv_program(config, item, quant).commands).cycles
    assert cycles < count * alone
    # each later item's first load waits for the token of the previous one's last compute
    loads = [c for c in program.commands if isinstance(c, Load)]
    computes = [c for c in program.commands if isinstance(c, Compute)]
    assert sum(c.signal for c in computes) == sum(c.wait for c in loads)
    assert sum(c.signal for c in loads) == sum(c.wait for c in computes)


@pytest.mark.parametrize(("array", "gemm", "count"), [
    ((16, 16), (49, 49, 32), 3),  # a Swin window's softmax·V
    ((8, 8), (9, 12, 16), 4),
])
def test_a_batch_divides_each_items_rows_by_its_own_values(
        array: tuple[int, int], gemm: tuple[int, int, int], count: int) -> None:
    """softmax·V's per-row mode in a batch: each item's residual rows (its rows' offset
    and reciprocal, ws_epilogue's row values) read from its own slot, each item's rows
    divided by its own values, in the model's cycles."""
    config = accel_config_for(ArrayConfig(*array))
    m, k, n = gemm
    item = ConvLayer("item", m, 1, k, n)
    rng = np.random.default_rng(sum(gemm) + 1)
    quant = LayerQuant(EpilogueConfig(pre=0, post=24, zero_point=0, low=-128, high=127),
                       (0,) * n, tuple(int(v) for v in rng.integers(1 << 8, 1 << 12, n)),
                       residual=ResidualConfig(rows=True, pre=16))
    program = batched_program(config, item, quant, count)
    features = rng.integers(-128, 128, (count, m, k))
    weights = rng.integers(-128, 128, (count, k, n))
    # i32 words: a row's (offset, p = l·2^16 + h) at the start of each of its N blocks
    values = np.zeros((count, m, n // 4), np.int64)
    offsets = rng.integers(-3, 4, (count, m, 1))
    reciprocals = rng.integers(0, 1 << 16, (count, m, 1)) * (1 << 16) + \
        rng.integers(1, 5, (count, m, 1))
    values[:, :, 0::config.cols // 4] = offsets
    values[:, :, 1::config.cols // 4] = reciprocals
    residual = values.astype("<i4").view(np.uint8).reshape(count, m, n)
    memory = rng.integers(0, 256, program.memory_bytes).astype(np.uint8)
    memory[program.input_base:program.input_base + features.size] = features.reshape(-1) & 0xFF
    memory[program.weight_base:program.weight_base + weights.size] = weights.reshape(-1) & 0xFF
    memory[program.residual_base:program.residual_base + residual.size] = residual.reshape(-1)
    after = run_functional(config, program.commands, memory)
    stored = after[program.output_base:program.output_base + count * m * n].astype(np.int64)
    got = np.where(stored >= 128, stored - 256, stored).reshape(count, m, n)
    signed = np.where(residual >= 128, residual.astype(np.int64) - 256, residual)
    for g in range(count):
        expected = conv_reference(item, features[g].reshape(m, 1, k),
                                  weights[g].reshape(1, 1, k, n), quant, signed[g])
        np.testing.assert_array_equal(got[g], expected)
    assert len(np.unique(got)) > 20  # (rows divided into a spread of values, not clipped)
    cycles = accel_cycles(config, program.commands).cycles
    assert cycles == AccelModel(config).run(program.commands).cycles


COUNT, M, K, N = 6, 9, 20, 7


def _batched_program(root: Path, transposed: bool) -> Path:
    """requantize(A·B) of int8 inputs A (COUNT, M, K) and B (COUNT, K, N), or B given as
    (COUNT, N, K) and transposed (as attention's K is), saved as a program."""
    a = B.tensor("a")
    b = B.transpose(B.tensor("bt"), 0, 2, 1) if transposed else B.tensor("b")
    product = B.batched_matmul(a, b, COUNT, M, K, N)
    tensors = {"a": TensorDecl("a", (COUNT, M, K), "i8", "input"),
               "bt": TensorDecl("bt", (COUNT, N, K), "i8", "input"),
               "b": TensorDecl("b", (COUNT, K, N), "i8", "input")}
    del tensors["b" if transposed else "bt"]
    path = root / f"batched{'_transposed' if transposed else ''}.gs"
    root_term = B.compute("requantize", product, 1707063284, 0, 40, 3)
    path.write_text(format_program(Program(str(path), tensors, root_term)))
    return path


@pytest.mark.parametrize("transposed", [False, True])
def test_a_batched_product_and_its_requantize_are_one_layer(tmp_path: Path,
                                                          transposed: bool) -> None:
    """Every item's product in one layer of batch COUNT (B transposed by one host copy
    first), the lowered program computing the interpreter's integers."""
    source = _batched_program(tmp_path, transposed)
    lowered = _accelerated(source, "16x16")
    layers = [i for i in lowered.instructions if isinstance(i, AccelLayer)]
    assert [(layer.batch, layer.m, layer.k, layer.n) for layer in layers] == \
        [(COUNT, COUNT * M, K, N)]
    # every item's A, its own weights B and its result, each once
    assert layers[0].traffic is not None
    assert layers[0].traffic.compulsory == COUNT * (M * K + K * N + M * N)
    copies = [i for i in lowered.instructions if isinstance(i, Copy)]
    assert len(copies) == int(transposed) and len(lowered.instructions) == 1 + len(copies)
    inputs = _random_inputs(source, 0)
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


@pytest.mark.slow
@pytest.mark.rtl
def test_a_batched_layer_cosimulates_bit_exactly(tmp_path: Path, sim_cache: Path) -> None:
    """The C program and ws_accel compute the interpreter's result, the layer in its
    predicted cycles."""
    source = _batched_program(tmp_path, True)
    _checked_cosimulation(source, None, _random_inputs(source, 1), tmp_path / "run",
                          sim_cache)


def _quantized_attention(root: Path, output_projection: str = "items") -> Path:
    """test_batched_attention's softmax(Q·Kᵀ)·V of batched products, then an output
    projection (the context is no program result: a layer writes it), quantized."""
    program = _attention(root, output_projection)
    quantized = quantize(program, calibration_for(program, 4), per_channel=True,
                         symmetric_activations=True)
    return save_quantized(quantized, root / "attention.q.gs")


@pytest.mark.parametrize("output_projection", ["items", "heads"])
def test_softmax_v_is_one_batched_layer_dividing_each_row(tmp_path: Path,
                                                         output_projection: str) -> None:
    """Both attention products are batched layers of every item; softmax·V's division by
    each row's Σe (e·V, then each row times its reciprocal) in the epilogue's per-row mode,
    the host packing one (offset, reciprocal) per row, no host product left; the lowered
    program computes the interpreter's integers. With the items as heads whose contexts
    the output projection reads side by side (ViT's concatenation), the requantize reads
    t in the heads' order: the layer requantizes, and the copy that reorders its rows
    goes too (accel_heads: the projection reads the heads' stack)."""
    source = _quantized_attention(tmp_path, output_projection)
    lowered = _accelerated(source, "16x16")
    batched = [layer for layer in lowered.accel_layers() if layer.batch]
    assert [(layer.batch, layer.m, layer.k, layer.n) for layer in batched] == \
        [(ATTENTION_COUNT, ATTENTION_COUNT * TOKENS, WIDTH, TOKENS),
         (ATTENTION_COUNT, ATTENTION_COUNT * TOKENS, TOKENS, WIDTH)]
    scores, context = batched
    assert scores.residual_add is None
    assert context.residual_add is not None and context.residual_add.rows
    assert context.residual is not None
    assert lowered.buffer_of(context.residual).shape == (ATTENTION_COUNT * TOKENS, WIDTH // 4)
    assert not any(isinstance(i, Dot) for i in lowered.instructions)  # (host products)
    # (heads: the layer requantizes into t's layout, `<requantize>_rows`; the copy that
    # reordered its rows went too: the output projection reads the heads' stack)
    assert context.name.endswith("_rows") == (output_projection == "heads")
    assert not any(isinstance(i, Copy) and i.src.buffer == context.name
                   for i in lowered.instructions)
    _assert_interpreters_agree(source, lowered, 16)


@pytest.mark.slow
@pytest.mark.rtl
def test_batched_attention_cosimulates_bit_exactly(tmp_path: Path, sim_cache: Path) -> None:
    """The C program and ws_accel compute the interpreter's result, every layer (the
    per-row batched softmax·V among them) in its predicted cycles."""
    source = _quantized_attention(tmp_path, "heads")
    _checked_cosimulation(source, "16x16", _random_inputs(source, 1), tmp_path / "run",
                          sim_cache)
