"""ConvNeXt's and ViT's MLP on the accelerator: LayerNorm → linear → GELU → linear → residual.

The LayerNorm's normalisation is a layer in the epilogue's per-row mode
(`accel_layer_norm`); its row sums and per-row arithmetic stay on the host.

PyTorch exports GELU as x · 0.5 · (1 + erf(x / √2)); the quantizer requantizes the first
linear layer's sums twice (x, and x/√2 for the erf), looks the erf up, takes 1 + erf as an
int8 affine, and multiplies x by it. The accelerator runs the linear layer once per
requantization (`accel_recompute`): x's layer, and the erf's layer, whose table is the erf
composed with the affine after it (`accel_tables`) and whose epilogue multiplies its rows
by x's rows and requantizes the product (`accel_residual`, ws_epilogue's product mode).
The quick tests lower the quantized block with the accelerator passes and run the lowered
program in numpy; the slow one co-simulates it on ws_accel (interpreter = C = RTL, every
layer at its predicted cycles).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph
from test_accel_offload import (
    _accelerated,
    _checked_cosimulation,
    _interpreted,
    _lowered_result,
    _random_inputs,
)
from test_quantize import saved_int8
from test_transformer import gelu, layer_norm, linear

from glensidec.backend.accel_layers import host_reason_lines
from glensidec.backend.accel_row_sums import ROW_SUMS
from glensidec.backend.host_reasons import DIVIDES, MOVES, PER_ROW
from glensidec.backend.lower import (
    AccelLayer,
    ArrayGemm,
    Fused,
    LoweredProgram,
    Map,
    Reduce,
    RequantizePerChannel,
    constant_array,
)
from glensidec.backend.report import report_data
from glensidec.hardware.accel_native import EPILOGUE_LOOKUP, EPILOGUE_TABLE, FIELDS
from glensidec.hardware.array import ArrayConfig
from glensidec.lang import data
from glensidec.lang.syntax import read_program

TOKENS, FEATURES, HIDDEN = 8, 16, 32


def mlp_block(seed: int = 0) -> Any:
    """x + linear(GELU(linear(LayerNorm(x)))), x of (1, TOKENS, FEATURES)."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, TOKENS, FEATURES])
    hidden = gelu(g, linear(g, layer_norm(g, x, FEATURES), FEATURES, HIDDEN))
    y = g.node("Add", [x, linear(g, hidden, HIDDEN, FEATURES)])
    return g.model(y, [1, TOKENS, FEATURES])


def _quantized_block(root: Path) -> Path:
    return saved_int8(mlp_block(), root, "block", 4)


def test_the_gelu_runs_in_two_accelerator_layers_and_computes_what_the_program_does(
        tmp_path: Path) -> None:
    """The first linear layer is two accelerator layers (x, and the erf's table composed
    with 1 + erf), reading the same activations with the same weights; no requantize,
    lookup or affine of the GELU is left on the host, no array call outside a layer but
    the LayerNorm's row sums."""
    source = _quantized_block(tmp_path)
    lowered = _accelerated(source, "8x8")
    host_lookups = [instruction.op.params[0] for instruction in lowered.instructions
                    if isinstance(instruction, Map) and instruction.op.name == "lookup"]
    assert "erf" not in host_lookups  # (LayerNorm's sqrt stays: its statistics are)
    assert not any(isinstance(instruction, RequantizePerChannel)
                   for instruction in lowered.instructions)
    # the array calls outside layers are the LayerNorm's row sums, of its input's rows or
    # of the digits of their squares, which two table layers make from those rows
    (normalised,) = [layer for layer in lowered.accel_layers()
                     if layer.residual_add is not None and layer.residual_add.rows]
    row_sums = [layer for layer in lowered.accel_layers() if ROW_SUMS in layer.note]
    assert {layer.a.buffer for layer in row_sums} == {normalised.a.buffer}
    assert {gemm.a.buffer for gemm in lowered.array_calls()} == \
        {normalised.a.buffer, *(layer.dst.buffer for layer in row_sums)}
    layers = [layer for layer in lowered.accel_layers() if layer not in row_sums]
    by_input: dict[tuple[str, int, int, int], list[str]] = {}
    for layer in layers:
        by_input.setdefault((layer.a.buffer, layer.m, layer.k, layer.n), []).append(layer.name)
    twice = [names for names in by_input.values() if len(names) == 2]
    assert len(twice) == 1, by_input
    tables = [layer for layer in layers if layer.table is not None]
    assert len(tables) == 1 and tables[0].name in twice[0]  # the erf's layer, of the pair
    # x·(1 + erf): the erf's layer (the later one) multiplies its rows by x's rows
    (erf,) = tables
    assert erf.residual_add is not None and erf.residual_add.product
    (x,) = [layer for layer in lowered.accel_layers() if layer.name in twice[0]
            and layer is not erf]
    assert erf.residual is not None and erf.residual.buffer == x.dst.buffer
    assert not any(isinstance(instruction, Fused) and any(
        not isinstance(step.op, str) and step.op.name == "requantize"
        for step in instruction.steps) and len(instruction.leaves) == 2
        for instruction in lowered.instructions)  # no host product loop is left
    _assert_computes_the_interpreters(source, lowered, 8, seeds=3)


def test_a_layer_with_a_table_does_not_share_the_commands_of_one_without(
        tmp_path: Path) -> None:
    """x's layer and the erf's have one shape; the commands were programmed once per shape
    (the table's presence was not in the key), so the erf's layer ran without its lookup on
    ws_accel and the C model (found by the co-simulation below)."""
    lowered = _accelerated(_quantized_block(tmp_path), "8x8")
    weights = data.load_weights(read_program(tmp_path / "block.q.gs"))
    epilogue = FIELDS.index("epilogue")
    for layer in lowered.accel_layers():
        commands = constant_array(lowered.buffer_of(layer.commands), weights)
        loads_table = bool(np.any(commands[:, epilogue] == EPILOGUE_TABLE))
        looks_up = bool(np.any(commands[:, epilogue] == EPILOGUE_LOOKUP))
        assert loads_table == looks_up == (layer.table is not None), layer.name


def test_the_report_says_why_each_host_instruction_stays_on_the_host(tmp_path: Path) -> None:
    """What the block leaves on the host is its LayerNorm's statistics: the report names,
    per host instruction, the reason (the copies around its row sums' array calls, its
    per-row divisions for σ and the reciprocal, the steps between them); the layers and
    array calls have none."""
    lowered = _accelerated(_quantized_block(tmp_path), "8x8")
    rows = report_data("block.q.gs", lowered, ArrayConfig(8, 8)).rows
    host = [row for row in rows if row.where == "host"]
    assert host and all(row.why_host for row in host)
    assert all(not row.why_host for row in rows if row.where != "host")
    reasons = {row.kind: row.why_host for row in host}
    assert "reduce" not in reasons  # its row sums are array calls
    assert reasons["copy"] == MOVES  # (the rows transposed for Σx², and the diagonals)
    assert any(row.why_host == DIVIDES and "elementwise-div" in row.op for row in host)
    assert any(row.why_host == PER_ROW for row in host)  # each row's values, packed


def test_layer_norm_normalises_every_element_on_the_accelerator(tmp_path: Path) -> None:
    """The LayerNorm's per-element work is one depthwise layer of x·(−128) in the
    epilogue's per-row mode (each row's mean and reciprocal from its residual row, the
    scale and bias as the column vectors); its two row sums are array calls (Σx: x times a
    column of ones; Σx²: the base-128 digits of x², two table layers, times −128 and 1),
    and the host keeps nothing per element: every host instruction writes one value per
    row, or per row and N block (the packed values)."""
    source = _quantized_block(tmp_path)
    lowered = _accelerated(source, "8x8")
    (normalised,) = [layer for layer in lowered.accel_layers()
                     if layer.residual_add is not None and layer.residual_add.rows]
    assert (normalised.m, normalised.n, normalised.groups) == (TOKENS, FEATURES, FEATURES)
    assert normalised.residual_add is not None and normalised.residual_add.pre == 15
    writes_every_element = [instruction for instruction in lowered.instructions
                            if not isinstance(instruction, AccelLayer) and
                            instruction.dst.shape and
                            math.prod(instruction.dst.shape) >= TOKENS * FEATURES]
    assert writes_every_element == []
    assert not any(isinstance(instruction, Reduce) for instruction in lowered.instructions)
    blocks = FEATURES // 8
    assert all(math.prod(instruction.dst.shape) <= TOKENS * blocks
               for instruction in lowered.instructions
               if not isinstance(instruction, AccelLayer | ArrayGemm))
    _assert_computes_the_interpreters(source, lowered, 8, seeds=3)


def test_layer_norm_stays_on_the_host_on_an_array_of_fewer_than_8_columns(
        tmp_path: Path) -> None:
    """The per-row values take 8 bytes of a residual row: on a 4×4 array the normalisation
    stays a host loop, and the program still computes the interpreter's integers."""
    source = _quantized_block(tmp_path)
    lowered = _accelerated(source, "4x4")
    assert not any(layer.residual_add is not None and layer.residual_add.rows
                   for layer in lowered.accel_layers())
    _assert_computes_the_interpreters(source, lowered, 4, seeds=1)


def test_stats_counts_the_host_instructions_of_each_reason_in_words(tmp_path: Path) -> None:
    """--stats' host lines: one per reason, counting its instructions (\"1 instruction\",
    not \"1 instructions\") and adding up to the report's host rows."""
    lowered = _accelerated(_quantized_block(tmp_path), "8x8")
    lines = list(host_reason_lines(lowered))
    assert lines[0].startswith("host work by why it stays on the host")
    counted = 0
    for line in lines[1:]:
        match = re.fullmatch(r"  (\d+) (instructions?), (\d+) cycles: (.+)", line)
        assert match, line
        count, word = int(match[1]), match[2]
        assert word == ("instruction" if count == 1 else "instructions"), line
        counted += count
    rows = report_data("block.q.gs", lowered, ArrayConfig(8, 8)).rows
    assert counted == sum(1 for row in rows if row.where == "host" and row.host_cycles)


@pytest.mark.slow
@pytest.mark.rtl
def test_the_mlp_block_cosimulates_on_ws_accel(tmp_path: Path, sim_cache: Path) -> None:
    """The block as `glensidec compile` builds it by default: interpreter = C = ws_accel,
    every layer (the two of the GELU's linear layer, the erf's composed table included)
    at its predicted cycles."""
    source = _quantized_block(tmp_path)
    inputs = _random_inputs(source, 4)
    workdir = tmp_path / "compiled"
    workdir.mkdir()
    _checked_cosimulation(source, "8x8", inputs, workdir, sim_cache)


def _assert_computes_the_interpreters(source: Path, lowered: LoweredProgram, columns: int,
                                      seeds: int) -> None:
    """The lowered program's result equals the interpreter's on random inputs of each seed."""
    for seed in range(seeds):
        inputs = _random_inputs(source, seed)
        expected = _interpreted(source, inputs)
        got = _lowered_result(source, lowered, inputs, columns)
        assert np.array_equal(got.reshape(expected.shape), expected), seed
