"""Batched products of two activations as ONE accelerator layer (issue 30).

`builders.batched_matmul` writes every batch item's product at once (attention's Q·Kᵀ
and softmax·V of each window × head): a dot-product over an access-pair of A (B, M, ·, K)
and B (B, ·, N, K), each broadcast over the other's axis, which lowers to one host `Dot`
of a (B, M, N) i32 result. For such a `Dot` of two int8 activations whose epilogue fits
(the requantize after it, per tensor or per column: `accel_layers.follow_chain`), this
pass makes the `Dot` and its chain one `AccelLayer` with `batch` = B
(`hardware.batched.batched_program`: the items' GEMMs chained in one command stream), when
A's buffer holds (B, M, K) row-major and B's (B, K, N) — or (B, N, K), the transposed
operand Q·Kᵀ reads, which a host copy lays out first (a layout layer is the next step).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from glensidec.backend.accel_attention import RowsMode, _fits, apply_edits
from glensidec.backend.accel_layers import (
    LayerBuilder,
    _Chain,
    drop_dead_code,
    follow_chain,
    per_column,
)
from glensidec.backend.lower import (
    ACTIVATION,
    INPUT,
    AccelLayer,
    Copy,
    Dot,
    Instruction,
    LoweredProgram,
)
from glensidec.backend.views import Axis, Group, View, contiguous
from glensidec.hardware.accel import EpilogueConfig
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array


def fuse_batched_products(lowered: LoweredProgram, weights: dict[str, Array],
                          accel: AccelConfig) -> LoweredProgram:
    """`lowered` with every batched product of two int8 activations, and its epilogue, as
    one batched accelerator layer (a new program)."""
    result = lowered.copy()
    builder = LayerBuilder(result)
    edits: dict[int, list[Instruction]] = {}
    readers = result.readers()
    for index, dot in enumerate(lowered.instructions):
        found = batched_operands(result, index) if isinstance(dot, Dot) else None
        if found is None:
            continue
        assert isinstance(dot, Dot)
        count, m, n = dot.dst.shape
        chain = follow_chain(result, index, contiguous(dot.dst.buffer, (count * m, n)),
                             (count * m, n), weights, readers)
        if chain is None or chain.table is not None:
            continue
        made = batched_layer(result, builder, index, found, chain, accel)
        if made is not None:
            edits.update({position: [] for position in chain.indices})
            edits[index] = made
    apply_edits(result, edits)
    drop_dead_code(result)
    return result


def batched_layer(lowered: LoweredProgram, builder: LayerBuilder, index: int,
                  found: tuple[View, View, bool], chain: _Chain, accel: AccelConfig,
                  rows_mode: RowsMode | None = None) -> list[Instruction] | None:
    """The batched layer of the `Dot` at `index` (its operands `found` by
    `batched_operands`) and its epilogue `chain` over the (B·M, N) sums, after a copy
    transposing B's operand when it is (B, N, K); with `rows_mode`, the epilogue's per-row
    mode (`accel_softmax`: softmax·V), its rows' values packed first. None when the
    chain is no epilogue of the layer or the layer does not fit."""
    dot = lowered.instructions[index]
    assert isinstance(dot, Dot)
    a_view, b_view, b_transposed = found
    count, m, n = dot.dst.shape
    k = a_view.shape[-1]
    if chain.transposed or chain.skip is not None or chain.rows != count * m or \
            chain.cols != n:
        return None
    bias = np.zeros((chain.rows, n), np.int64) if chain.bias is None else chain.bias
    bias_vector, multiplier_vector = per_column(bias), per_column(chain.multiplier)
    epilogue = EpilogueConfig(chain.pre, chain.post, chain.zero_point, chain.low, chain.high)
    if bias_vector is None or multiplier_vector is None or \
            not _fits(accel, m, k, n, epilogue, None if rows_mode is None else
                      rows_mode.config):
        return None
    name = chain.dst.buffer
    before: list[Instruction] = []
    if b_transposed:  # (B, N, K) → (B, K, N): each item's weights row-major
        laid = builder.activation(f"{name}_rhs", (count, k, n))
        before.append(Copy(f"{dot.note}: the operand's rows transposed", _transposed(laid),
                           b_view))
        b_view = laid
    layer = AccelLayer(
        lowered.instructions[chain.indices[-1]].note, chain.dst, name=name,
        a=contiguous(a_view.buffer, (count * m, k)),
        b=contiguous(b_view.buffer, (count * k, n)),
        bias=builder.constant(f"{name}_bias", "i32", np.array(bias_vector, np.int64)),
        multiplier=builder.constant(f"{name}_multiplier", "i32",
                                    np.array(multiplier_vector, np.int64)),
        commands=builder.commands_placeholder(name), m=count * m, k=k, n=n,
        pre=chain.pre, post=chain.post, zero_point=chain.zero_point, low=chain.low,
        high=chain.high, batch=count)
    if rows_mode is not None:
        layer = replace(layer, residual=rows_mode.values, residual_add=rows_mode.config)
        before = [*rows_mode.packing, *before]
    return [*before, layer]


def batched_operands(lowered: LoweredProgram, index: int) -> tuple[View, View, bool] | None:
    """(A as (B, M, K), B's operand as (B, K, N) or, transposed, (B, N, K), whether it is
    transposed) when the `Dot` at `index` is a batched product of two whole int8
    activation buffers: (B, M, N) sums over K of A[b, m, k]·B[b, k, n]; else None."""
    dot = lowered.instructions[index]
    assert isinstance(dot, Dot)
    if dot.reduce_rank != 1 or len(dot.members) != 2 or len(dot.dst.shape) != 3 or \
            lowered.buffer_of(dot.dst).dtype != "i32" or not lowered.is_whole(dot.dst):
        return None
    count, m, n = dot.dst.shape
    for left, right in (dot.members, dot.members[::-1]):
        if len(left.dims) != 4 or left.shape[:3] != (count, m, n) or right.shape != left.shape:
            continue
        k = left.shape[3]
        if not (_readable(lowered, left) and _readable(lowered, right)) or \
                lowered.buffer_of(left).elements != count * m * k or \
                lowered.buffer_of(right).elements != count * k * n:
            continue
        # (from the views' axes: the index arrays of B·M·N·K elements each took swin_t's
        # 24 products 8 s)
        batch, rows, cols, depth = left.dims
        if not _runs_in_order(left, (batch, rows, depth), cols):
            continue
        batch, rows, cols, depth = right.dims
        if _runs_in_order(right, (batch, depth, cols), rows):
            return _stacked(left, (count, m, k)), _stacked(right, (count, k, n)), False
        if _runs_in_order(right, (batch, cols, depth), rows):
            return _stacked(left, (count, m, k)), _stacked(right, (count, n, k)), True
    return None


def _readable(lowered: LoweredProgram, view: View) -> bool:
    """Is `view` of an int8 activation or input: what the layer's DMA reads at run time?"""
    buffer = lowered.buffer_of(view)
    return buffer.dtype == "i8" and buffer.kind in (ACTIVATION, INPUT) and \
        buffer.name != lowered.output


def _runs_in_order(view: View, order: tuple[Group, Group, Group], spread: Group) -> bool:
    """Does `view` read its buffer from its start, element i the i-th, when its index
    runs through the dims `order` (outermost first), whatever the index along `spread`
    (which the view broadcasts: every axis of it a stride of 0)?"""
    return view.offset == 0 and \
        all(axis.stride == 0 or axis.size == 1 for axis in spread) and \
        View(view.buffer, 0, order).is_row_major()


def _stacked(view: View, shape: tuple[int, int, int]) -> View:
    """The whole buffer `view` reads, row-major as `shape`."""
    return contiguous(view.buffer, shape)


def _transposed(laid: View) -> View:
    """`laid`, a (B, K, N) buffer, walked as (B, N, K): where a copy of (B, N, K) rows
    writes them transposed."""
    count, k, n = laid.shape
    return View(laid.buffer, 0, ((Axis(count, k * n),), (Axis(n, 1),), (Axis(k, n),)))
