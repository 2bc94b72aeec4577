"""Attention's products on the accelerator (glensidec.backend.accel_attention): a quantized
encoder block (tests/test_transformer.py's, small) compiles with every int8 product — the
Q, K, V and output projections split per head, Q·Kᵀ and softmax·V per head — as an
accelerator layer, Kᵀ's rows written by a layout layer, each head's result written in
place into the heads' concatenation; the lowered program computes the
interpreter's integers, and the C program and ws_accel's RTL agree bit for bit at the
predicted cycles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph, imported
from test_accel_offload import _accelerated, _checked_cosimulation, _interpreted, _lowered_result
from test_quantize import calibration_for, sample_list
from test_transformer import Size, encoder_block, gelu, heads, layer_norm, linear

from glensidec.backend.accel_attention import write_in_place
from glensidec.backend.accel_row_sums import ROW_SUMS
from glensidec.backend.lower import (
    ACTIVATION,
    INPUT,
    OUTPUT,
    AccelLayer,
    ArrayGemm,
    Buffer,
    Copy,
    Instruction,
    LoweredProgram,
    Map,
)
from glensidec.backend.views import View, contiguous
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.hardware.layout import NchwLayout
from glensidec.lang.terms import ComputeOp

#: 10 tokens (not a multiple of the array: the lowering pads every product), 2 heads of 16
TINY = Size(10, 32, 2, 64)


def pre_norm_block(size: Size) -> Any:
    """ViT's encoder block (bench/bench_accel_scale.py's): x + attention(LN(x)), then the
    sum + MLP(LN(sum)); LayerNorm and each residual add read the same x."""
    g = OnnxGraph(0)
    x = g.input("input", [1, size.tokens, size.features])
    h = layer_norm(g, x, size.features)
    q = heads(g, linear(g, h, size.features, size.features), size)
    k = heads(g, linear(g, h, size.features, size.features), size, key=True)
    v = heads(g, linear(g, h, size.features, size.features), size)
    attention = g.node("Softmax", [g.node("MatMul", [q, k])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [attention, v])], perm=[0, 2, 1, 3])
    context = g.node("Reshape", [context, g.const("merge", np.array(
        [1, size.tokens, size.features], np.int64))])
    x = g.node("Add", [x, linear(g, context, size.features, size.features)])
    hidden = gelu(g, linear(g, layer_norm(g, x, size.features), size.features, size.hidden))
    x = g.node("Add", [x, linear(g, hidden, size.hidden, size.features)])
    return g.model(x, [1, size.tokens, size.features])


def _quantized_block(root: Path, pre_norm: bool = False, size: Size = TINY
                     ) -> tuple[Path, dict[str, np.ndarray]]:
    """The block quantized (per-channel weights, symmetric activations) and saved, with
    one sample of its input as int8."""
    model = pre_norm_block(size) if pre_norm else encoder_block(size=size)
    program = imported(model, root)
    calibration = calibration_for(program, 4)
    quantized = quantize(program, calibration, per_channel=True, symmetric_activations=True)
    path = save_quantized(quantized, root / "block.q.gs")
    return path, quantized.quantize_inputs(sample_list(calibration, 1)[0])


def _products(layers: list[AccelLayer]) -> list[AccelLayer]:
    return [layer for layer in layers if layer.multiplies]


def test_every_attention_product_is_an_accelerator_layer(tmp_path: Path) -> None:
    """Per head: Q, K and V projections (one layer each, its weights' columns), Kᵀ's
    layout layer, Q·Kᵀ and softmax·V with the runtime operand as weights; then the output
    projection and the MLP's second layer. The lowered program gives the interpreter's
    integers."""
    source, inputs = _quantized_block(tmp_path)
    lowered = _accelerated(source, "16x16")
    layers = lowered.accel_layers()
    heads, tokens, width = TINY.heads, TINY.tokens, TINY.features // TINY.heads
    scores = [layer for layer in _products(layers) if (layer.m, layer.k, layer.n) ==
              (tokens, width, tokens)]
    contexts = [layer for layer in _products(layers) if (layer.m, layer.k, layer.n) ==
                (tokens, tokens, width)]
    projections = [layer for layer in _products(layers) if (layer.m, layer.k, layer.n) ==
                   (tokens, TINY.features, width)]
    transposes = [layer for layer in layers if isinstance(layer.layout, NchwLayout)
                  and layer.layout == NchwLayout(tokens, width)]
    assert (len(scores), len(contexts), len(projections), len(transposes)) == \
        (heads, heads, 3 * heads, heads)
    weights = {layer.b.buffer for layer in scores + contexts}
    # each head's scores and context written in place into the heads' concatenation
    assert len({layer.dst.buffer for layer in scores}) == 1
    assert len({layer.dst.buffer for layer in contexts}) == 1
    assert all(lowered.buffers[name].kind == "activation" for name in weights)
    # the output projection, a matrix layer, reads the contexts as the heads stored them:
    # each head its block of columns of the projection's rows (accel_heads; the compiled
    # program reads them interleaved, a copy of every element on the host before)
    (projection,) = [layer for layer in _products(layers) if (layer.m, layer.k) ==
                     (tokens, TINY.features) and layer.a.buffer in
                     {context.dst.buffer for context in contexts}]
    assert not projection.image
    assert sorted((context.dst.offset, context.output_pitch) for context in contexts) == \
        [(head * width, TINY.features) for head in range(heads)]
    assert not any(isinstance(instruction, Copy) and
                   (instruction.src.buffer == projection.a.buffer or
                    instruction.dst.buffer == projection.a.buffer)
                   for instruction in lowered.instructions)
    # No array call multiplies two activations any more (the MLP's first layer, whose
    # result GELU reads twice, may stay an array call: it has constant weights), but a
    # LayerNorm's row sums (accel_row_sums).
    assert all(lowered.buffers[gemm.b.buffer].kind == "constant" or
               lowered.buffers[gemm.a.buffer].kind == "constant" or ROW_SUMS in gemm.note
               for gemm in lowered.instructions if isinstance(gemm, ArrayGemm))
    expected = _interpreted(source, inputs)
    actual = _lowered_result(source, lowered, inputs, 16)
    np.testing.assert_array_equal(actual.reshape(expected.shape), expected)


def test_a_pre_norm_blocks_residual_adds_run_in_their_layers(tmp_path: Path) -> None:
    """ViT's pre-norm block scales its residual stream x once for LayerNorm and the add:
    the add still moves into the output projection's and the MLP's epilogue (the scaling
    computed in the add's loop), reading x's int8 rows; the lowered program gives the
    interpreter's integers."""
    source, inputs = _quantized_block(tmp_path, pre_norm=True)
    lowered = _accelerated(source, "16x16")
    added = [layer for layer in lowered.accel_layers() if layer.residual is not None
             and layer.residual_add is not None and not layer.residual_add.product
             and not layer.residual_add.rows]
    assert [(layer.m, layer.k, layer.n) for layer in added] == \
        [(TINY.tokens, TINY.features, TINY.features), (TINY.tokens, TINY.hidden, TINY.features)]
    # both LayerNorms normalise x's rows in the epilogue's per-row mode (accel_layer_norm;
    # each head's softmax·V is a per-row product layer too, test_accel_softmax)
    normalised = [layer for layer in lowered.accel_layers() if layer.residual_add is not None
                  and layer.residual_add.rows and layer.groups > 1]
    assert [(layer.m, layer.n, layer.groups) for layer in normalised] == \
        [(TINY.tokens, TINY.features, TINY.features)] * 2
    # (the GELU's product x·(1 + erf) is the MLP's first layer's epilogue, test_accel_gelu)
    expected = _interpreted(source, inputs)
    actual = _lowered_result(source, lowered, inputs, 16)
    np.testing.assert_array_equal(actual.reshape(expected.shape), expected)


@pytest.mark.slow
@pytest.mark.rtl
def test_an_attention_block_on_the_accelerator_cosimulates_bit_exactly(
        tmp_path: Path, sim_cache: Path) -> None:
    """ViT's pre-norm block compiled by default (the whole accelerator: attention's
    products and the residual adds in the layers): the C program and `make sim` (every
    layer on ws_accel's RTL) give the interpreter's integers, every layer its predicted
    cycles."""
    source, inputs = _quantized_block(tmp_path, pre_norm=True)
    run = _checked_cosimulation(source, None, inputs, tmp_path, sim_cache)
    # 2 heads: 3 projections, a layout layer and 2 products each; the output projection
    # and the MLP's layers (at least the second)
    assert len(run.report["calls"]) >= 6 * TINY.heads + 2


def _negation(dst: View, src: View) -> Map:
    return Map("negative", dst, ComputeOp("negative", ()), src)


def _concatenation(parts: int, overlap: bool = False) -> LoweredProgram:
    """x (2 elements) negated into `parts` buffers of 2, each copied into its run of one
    buffer (the last run shifted by one onto its neighbour's with `overlap`)."""
    buffers = {"x": Buffer("x", "i8", (2,), INPUT),
               "out": Buffer("out", "i8", (2 * parts,), OUTPUT)}
    instructions: list[Instruction] = []
    for part in range(parts):
        name = f"part{part}"
        buffers[name] = Buffer(name, "i8", (2,), ACTIVATION)
        instructions.append(_negation(contiguous(name, (2,)), contiguous("x", (2,))))
    for part in range(parts):
        start = 2 * part - (1 if overlap and part == parts - 1 else 0)
        instructions.append(Copy("concatenate", contiguous("out", (2,), start),
                                 contiguous(f"part{part}", (2,))))
    return LoweredProgram(buffers, instructions, "out", (2 * parts,))


def test_a_concatenations_parts_are_written_in_place() -> None:
    """Each part's writer writes its run of the concatenation; the copies go."""
    placed = write_in_place(_concatenation(3))
    assert all(isinstance(instruction, Map) and instruction.dst.buffer == "out"
               for instruction in placed.instructions)
    assert [instruction.dst.offset for instruction in placed.instructions] == [0, 2, 4]


def test_parts_that_overlap_are_not_written_in_place() -> None:
    """Regression guard: moving a write earlier must keep every element's last writer;
    runs that overlap (no concatenation) keep their copies."""
    placed = write_in_place(_concatenation(3, overlap=True))
    assert sum(isinstance(instruction, Copy) for instruction in placed.instructions) == 2


def test_column_block_finds_the_columns_a_view_reads_without_indexing_the_buffer() -> None:
    """`split_head_projections` asks which columns of an M×N result each reader reads;
    the answer comes from the strides (indexing the whole buffer per reader took most of
    that pass on a swin_t) and must equal the columns of the elements the view reads, for
    views with negative, zero and row-crossing strides."""
    import random

    from glensidec.backend.accel_attention import _column_block
    from glensidec.backend.views import Axis, View, view_array

    rng = random.Random(30)
    checked = 0
    while checked < 2000:
        m, n = rng.randint(1, 12), rng.randint(1, 40)
        dims = tuple(tuple(Axis(rng.randint(0, 5), rng.randint(-2 * n, 2 * n))
                           for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(1, 3)))
        offset = rng.randrange(m * n)
        axes = [axis for group in dims for axis in group if axis.size]
        low = offset + sum(min(0, (a.size - 1) * a.stride) for a in axes)
        high = offset + sum(max(0, (a.size - 1) * a.stride) for a in axes)
        if low < 0 or high >= m * n:
            continue  # (outside the buffer: not a view the lowering makes)
        view = View("x", offset, dims)
        columns = view_array(view, np.arange(m * n)).reshape(-1) % n
        expected = None if columns.size == 0 else (int(columns.min()), int(columns.max()) + 1)
        assert _column_block(view, m, n) == expected, view
        checked += 1
