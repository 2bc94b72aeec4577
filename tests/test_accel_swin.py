"""Swin's window attention on the accelerator (glensidec.backend.accel_swin and the view
algebra): a small shifted-window block — LayerNorm, the cyclic shift (Slice + Concat),
the window partition, one qkv projection over every window, per (window, head) Q·Kᵀ plus
the relative-position bias and the shift's mask, softmax, ·V, the heads merged, the
output projection, the window reverse, the shift back and the residual add — quantized,
compiled by default: each head's requantization is one loop (so each head's projection
an accelerator layer), no (window, head) operand is a copy of the whole projection, the
lowered program computes the interpreter's integers, and the C program and ws_accel's
RTL agree with it bit for bit at the predicted cycles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import OnnxGraph, imported
from test_accel_offload import (
    _accelerated,
    _checked_cosimulation,
    _interpreted,
    _lowered_result,
)
from test_quantize import calibration_for, sample_list
from test_transformer import layer_norm

from glensidec.backend.lower import (
    ACTIVATION,
    AccelLayer,
    ArrayGemm,
    Copy,
    Fused,
    RequantizePerChannel,
)
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.hardware.accel import ConvLayer, EpilogueConfig, ResidualConfig
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import (
    LayerQuant,
    accel_config_for,
    accel_cycles,
    conv_program,
    row_runs,
    run_functional,
    with_row_order,
)


@dataclass(frozen=True)
class Window:
    size: int  # the map's height and width
    window: int  # a window's height and width
    features: int
    heads: int
    shift: int  # the cyclic shift (0: a plain window block)
    # LayerNorm's scale 1 and bias 0, as torchvision initialises them (the zoo's swin_t):
    # the normalised rows are requantized where the cyclic shift's slices read them
    plain_norm: bool = False

    @property
    def tokens(self) -> int:
        return self.window * self.window

    @property
    def windows(self) -> int:
        return (self.size // self.window) ** 2


#: 4 windows of 16 tokens, 2 heads of 16 features, shifted by 2
TINY = Window(size=8, window=4, features=32, heads=2, shift=2)
#: 9 windows of 25 tokens, shifted by 2, LayerNorm as initialised: the row maximum's pool
#: pads each row of scores to 28 bytes, so the bias add's layers write (and read) rows
#: with gaps, one per run of windows with the same mask (2, 1, 2, 1, 2, 1 windows)
PADDED = Window(size=15, window=5, features=32, heads=2, shift=2, plain_norm=True)
#: PADDED unshifted: every window has the same bias, one layer of all of them
UNSHIFTED = Window(size=10, window=5, features=32, heads=2, shift=0)


def _roll(g: OnnxGraph, x: str, shift: int, size: int) -> str:
    """torch.roll(x, shift, dims=(1, 2)) as PyTorch exports it: Slice and Concat per axis."""
    for axis in (1, 2):
        cut = (-shift) % size
        parts = [g.node("Slice", [x, g.const(f"s{g.count}", np.array([start], np.int64)),
                                  g.const(f"e{g.count}", np.array([stop], np.int64)),
                                  g.const(f"a{g.count}", np.array([axis], np.int64))])
                 for start, stop in ((cut, size), (0, cut))]
        x = g.node("Concat", parts, axis=axis)
    return x


def _reshape(g: OnnxGraph, x: str, shape: list[int]) -> str:
    return g.node("Reshape", [x, g.const(f"shape{g.count}", np.array(shape, np.int64))])


def _mask(size: Window) -> np.ndarray:
    """The shifted windows' attention mask (nW, 1, N, N): -100 between tokens that came
    from different regions of the map, as torchvision's SwinTransformerBlock builds it."""
    regions = np.zeros((size.size, size.size), np.int64)
    cuts = (slice(0, -size.window), slice(-size.window, -size.shift),
            slice(-size.shift, None))
    label = 0
    for rows in cuts:
        for cols in cuts:
            regions[rows, cols] = label
            label += 1
    count = size.size // size.window
    windows = regions.reshape(count, size.window, count, size.window).transpose(
        0, 2, 1, 3).reshape(size.windows, size.tokens)
    mask = np.where(windows[:, :, None] != windows[:, None, :], -100.0, 0.0)
    return mask[:, None].astype(np.float32)


def swin_block(size: Window, seed: int = 0) -> Any:
    """x + reverse(attention(partition(roll(LN(x))))), rolled back: one Swin attention
    half-block on an NHWC map, exported the way torchvision's swin_t is."""
    g = OnnxGraph(seed)
    n, c, ws, heads = size.size, size.features, size.window, size.heads
    count, width = n // ws, c // heads
    x = g.input("input", [1, n, n, c])
    if size.plain_norm:
        h = g.node("LayerNormalization", [x, g.const("ln_scale", np.ones(c, "f4")),
                                          g.const("ln_bias", np.zeros(c, "f4"))],
                   axis=-1, epsilon=1e-5)
    else:
        h = layer_norm(g, x, c)
    if size.shift:
        h = _roll(g, h, -size.shift, n)
    h = _reshape(g, g.node("Transpose", [_reshape(g, h, [1, count, ws, count, ws, c])],
                           perm=[0, 1, 3, 2, 4, 5]), [size.windows, size.tokens, c])
    w = g.random(f"w{g.count}", (c, 3 * c), (1.0 / c) ** 0.5)
    # torchvision initialises the qkv bias to zero (the zoo's swin_t has no bias add)
    qkv = g.node("Add", [g.node("MatMul", [h, w]), g.const("qkv_bias", np.zeros(3 * c, "f4"))])
    qkv = g.node("Transpose", [_reshape(g, qkv, [size.windows, size.tokens, 3, heads, width])],
                 perm=[2, 0, 3, 1, 4])
    q, k, v = (g.node("Gather", [qkv, g.const(f"i{g.count}", np.array(i, np.int64))], axis=0)
               for i in range(3))
    q = g.node("Mul", [q, g.const(f"scale{g.count}", np.array(width ** -0.5, np.float32))])
    scores = g.node("MatMul", [q, g.node("Transpose", [k], perm=[0, 1, 3, 2])])
    scores = g.node("Add", [scores, g.random("relative_bias", (heads, size.tokens,
                                                                size.tokens), 0.5)])
    if size.shift:
        scores = g.node("Add", [scores, g.const("mask", _mask(size))])
    attention = g.node("Softmax", [scores], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [attention, v])], perm=[0, 2, 1, 3])
    context = _reshape(g, context, [size.windows, size.tokens, c])
    w = g.random(f"w{g.count}", (c, c), (1.0 / c) ** 0.5)
    out = g.node("Add", [g.node("MatMul", [context, w]), g.random(f"b{g.count}", (c,), 0.1)])
    out = _reshape(g, g.node("Transpose", [_reshape(g, out, [1, count, count, ws, ws, c])],
                             perm=[0, 1, 3, 2, 4, 5]), [1, n, n, c])
    if size.shift:
        out = _roll(g, out, size.shift, n)
    return g.model(g.node("Add", [x, out]), [1, n, n, c])


def _quantized(model: Any, root: Path, name: str = "model") -> tuple[Path, dict[str, np.ndarray]]:
    """`model` imported, quantized (per-channel weights, symmetric activations) and saved
    as root/NAME.q.gs, with one sample of its input as int8."""
    program = imported(model, root)
    calibration = calibration_for(program, 4)
    quantized = quantize(program, calibration, per_channel=True, symmetric_activations=True)
    path = save_quantized(quantized, root / f"{name}.q.gs")
    return path, quantized.quantize_inputs(sample_list(calibration, 1)[0])


def _quantized_block(root: Path, size: Window = TINY) -> tuple[Path, dict[str, np.ndarray]]:
    """The block quantized (per-channel weights, symmetric activations) and saved, with
    one sample of its input as int8."""
    return _quantized(swin_block(size), root, "block")


def test_each_heads_requantization_is_one_loop_and_the_block_stays_exact(
        tmp_path: Path) -> None:
    """Before: a requantize-per-channel loop for each (window, head) operand (Q, K, V:
    24 here, 1,824 on swin_t) and the qkv projection an array call. Now one loop per
    head's block of columns, which its projection's layer takes: the host keeps none of
    them, and no copy makes Q, K or V of every (window, head) (`views.slice_view`)."""
    source, inputs = _quantized_block(tmp_path)
    lowered = _accelerated(source, "16x16")
    # (softmax's normalisation, a run-time multiplier per row, is not one of them)
    requantizations = [i for i in lowered.instructions if isinstance(i, RequantizePerChannel)
                       and lowered.buffer_of(i.members[1]).kind != ACTIVATION]
    assert requantizations == []
    heads = [layer for layer in lowered.accel_layers() if "_heads_" in layer.name]
    assert len(heads) == 3 * TINY.heads  # Q, K and V of each head
    assert all(layer.m == TINY.windows * TINY.tokens for layer in heads)
    one_operand_of_every_head = (TINY.windows * TINY.heads, TINY.tokens,
                                 TINY.features // TINY.heads)
    assert not any(isinstance(i, Copy) and i.dst.shape == one_operand_of_every_head
                   for i in lowered.instructions)
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    assert np.array_equal(got.reshape(expected.shape), expected)


def test_the_heads_contexts_are_stored_in_the_output_projections_rows(tmp_path: Path) -> None:
    """Each (window, head) context is a block of columns of the output projection's
    (windows·tokens, features) rows: its layer stores its rows there, `features` bytes
    apart, and no host copy interleaves the heads (`accel_swin.write_heads_in_place`)."""
    source, inputs = _quantized_block(tmp_path)
    lowered = _accelerated(source, "16x16")
    contexts = [layer for layer in lowered.accel_layers()
                if layer.output_pitch == TINY.features]
    assert len(contexts) == TINY.windows * TINY.heads
    assert len({layer.dst.buffer for layer in contexts}) == 1
    (rows,) = {layer.dst.buffer for layer in contexts}
    # the projection alone (a layer, its residual add in its epilogue)
    assert [type(i).__name__ for i in lowered.instructions if rows in
            {view.buffer for view in i.reads()}] == ["AccelLayer"]
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    assert np.array_equal(got.reshape(expected.shape), expected)


def test_a_shifted_blocks_layer_norm_is_a_layer_storing_its_rows_in_window_order(
        tmp_path: Path) -> None:
    """With LayerNorm's initial scale and bias its normalised rows t are requantized by the
    cyclic shift's two slices (a requantize each, no loop after t): the normalisation is
    one layer in the epilogue's per-row mode, its requantize in the epilogue; no host loop
    over every element is left of it (`accel_layer_norm`), and the shift's and the window
    partition's copies of its rows are its stores. The lowered program gives the
    interpreter's integers."""
    source, inputs = _quantized_block(tmp_path, PADDED)
    lowered = _accelerated(source, "16x16")
    pixels = PADDED.size * PADDED.size
    norms = [layer for layer in lowered.accel_layers() if layer.residual_add is not None
             and layer.residual_add.rows and (layer.m, layer.n) == (pixels, PADDED.features)]
    assert len(norms) == 1
    # the cyclic shift and window partition: the layer stores its rows in window order
    # where the qkv projection reads them (`accel_swin.store_rows_in_place`), no copy
    assert np.array_equal(np.argsort(np.array(norms[0].row_order)), _window_order(PADDED))
    readers = [i for i in lowered.instructions
               if norms[0].dst.buffer in {view.buffer for view in i.reads()}]
    assert len(readers) == 3 * PADDED.heads and all(isinstance(i, AccelLayer)
                                                    for i in readers)
    whole = pixels * PADDED.features
    assert not any(isinstance(i, Fused) and int(np.prod(i.dst.shape)) == whole and
                   any(step.name == "elementwise-div" for step in i.steps)
                   for i in lowered.instructions)
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    assert np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.parametrize(("size", "runs"), [(TINY, [1, 1, 1, 1]), (UNSHIFTED, [4]),
                                            (PADDED, [2, 1, 2, 1, 2, 1])],
                         ids=["shifted", "unshifted", "padded"])
def test_the_position_bias_add_is_a_layer_per_run_of_windows(
        tmp_path: Path, size: Window, runs: list[int]) -> None:
    """requantize(256·s + b) of the scores s and the relative-position bias b (with the
    shifted windows' mask: a b per window) is no host loop: one depthwise layer per run of
    windows with the same b, a window's scores one row, b its per-column bias and 256·s
    the array's s plus the early residual 255·s; the lowered program gives the
    interpreter's integers. Unshifted windows share b: one layer of all of them. Of 25
    keys, the rows (and the scores the heads' layers write) are padded for the row
    maximum's pool."""
    source, inputs = _quantized_block(tmp_path, size)
    lowered = _accelerated(source, "16x16")
    added = [layer for layer in lowered.accel_layers()
             if layer.residual_add is not None and layer.residual_add.early]
    assert [layer.m for layer in added] == runs
    width = size.heads * size.tokens * size.tokens
    pitch = -(-size.tokens // 4) * 4  # (16: as they are; 25: 28, row_blocks' padding)
    assert all(layer.n == width // size.tokens * pitch and layer.residual == layer.a and
               layer.residual_add is not None and layer.residual_add.multiplier == 255
               for layer in added)
    assert not any(isinstance(i, Fused) and [step.name for step in i.steps] ==
                   ["cast", "elementwise-mul", "elementwise-add", "requantize"]
                   for i in lowered.instructions)
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    assert np.array_equal(got.reshape(expected.shape), expected)



def _window_order(size: Window) -> np.ndarray:
    """(tokens,): the map row (y·size + x) of each row in window order, the cyclic shift
    applied as the block applies it (its windows partition the map rolled by −shift)."""
    count, ws = size.size // size.window, size.window
    rows = []
    for window in range(size.windows):
        for token in range(size.tokens):
            y = window // count * ws + token // ws
            x = window % count * ws + token % ws
            rows.append((y + size.shift) % size.size * size.size + (x + size.shift) % size.size)
    return np.array(rows)


@pytest.mark.parametrize("size", [TINY, PADDED, UNSHIFTED],
                         ids=["shifted", "padded", "unshifted"])
def test_the_attention_residual_add_is_the_output_projections_epilogue(
        tmp_path: Path, size: Window) -> None:
    """Before: the output projection an array call, its requantization and the residual
    add x + reverse(out) host loops in the map's order (and, shifted, the shift's copies
    of the projection's i32 rows). Now the projection is one layer in window order that
    requantizes, adds x's rows (read in window order) and stores each row at its place in
    the map (`AccelLayer.row_order`: the window reverse, and the shift back): nothing of
    the block is left after the layer, and the lowered program gives the interpreter's
    integers."""
    source, inputs = _quantized_block(tmp_path, size)
    lowered = _accelerated(source, "16x16")
    last = lowered.instructions[-1]
    assert isinstance(last, AccelLayer) and last.residual_add is not None
    assert last.row_order is not None and last.residual_order == last.row_order
    assert np.array_equal(np.array(last.row_order), _window_order(size))
    assert last.dst.buffer == lowered.output
    assert not any(isinstance(i, ArrayGemm) and (i.m, i.n) == (size.size ** 2, size.features)
                   for i in lowered.instructions)
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    assert np.array_equal(got.reshape(expected.shape), expected)


def test_a_window_is_one_dma_pattern_and_the_shift_cuts_it_at_the_border() -> None:
    """commands.row_runs: the 16 rows of a 4×4 window of an 8×8 map are one 2-D pattern
    (4 runs of 4 rows, 8 apart); a window the cyclic shift wraps around the bottom border
    is two (the lines above it, those below), one it wraps around the right border a
    pattern per line (its two runs of 2 rows, 6 back)."""
    size = Window(size=8, window=4, features=4, heads=1, shift=0)
    order = _window_order(size)
    assert row_runs(order[:16]) == [(0, 4, 1, 4, 8)]
    shifted = _window_order(Window(size=8, window=4, features=4, heads=1, shift=2))
    assert row_runs(shifted[:16]) == [(0, 4, 1, 4, 8)]
    assert row_runs(shifted[32:48]) == [(0, 4, 1, 2, 8), (8, 4, 1, 2, 8)]
    assert row_runs(shifted[16:32]) == [(line, 2, 1, 2, -6) for line in (0, 4, 8, 12)]
    assert len(row_runs(shifted[48:64])) == 4
    rows = np.random.default_rng(2).permutation(200)  # any order: the pieces make it
    expanded = [rows[first] + line * stride2 + row * stride1
                for first, count1, stride1, count2, stride2 in row_runs(rows)
                for line in range(count2) for row in range(count1)]
    assert np.array_equal(expanded, rows)


def test_stores_and_residual_loads_in_another_row_order_move_only_rows() -> None:
    """commands.with_row_order cuts the stores and residual loads into row patterns: run
    functionally, row i of the result lands at row order[i], made with residual row
    residual_order[i] — the rows the plain program makes from the residual's rows in that
    order — and the model prices the extra commands."""
    accel = accel_config_for(ArrayConfig(4, 4))
    m, k, n = 64, 8, 6
    layer = ConvLayer("proj", m, 1, k, n)
    quant = LayerQuant(EpilogueConfig(0, 6, 0), tuple(range(n)), (1,) * n,
                       residual=ResidualConfig(self_multiplier=3, multiplier=2,
                                               requantize_multiplier=1, post=2))
    program = conv_program(accel, layer, quant)
    rng = np.random.default_rng(5)
    a, b, residual = (rng.integers(-128, 128, shape) for shape in ((m, k), (k, n), (m, n)))
    order = _window_order(Window(size=8, window=4, features=n, heads=1, shift=2))

    def memory_of(rows: np.ndarray) -> np.ndarray:
        memory = np.zeros(program.memory_bytes, np.uint8)
        memory[program.input_base:program.input_base + m * k] = (a.reshape(-1) & 0xFF)
        memory[program.weight_base:program.weight_base + k * n] = (b.reshape(-1) & 0xFF)
        memory[program.residual_base:program.residual_base + m * n] = \
            (rows.reshape(-1) & 0xFF)
        return memory

    def result(memory: np.ndarray) -> np.ndarray:
        return memory[program.output_base:program.output_base + m * n].reshape(m, n)

    plain = result(run_functional(accel, program.commands, memory_of(residual[order])))
    moved = with_row_order(program, m, n, order, order)
    assert len(moved.commands) > len(program.commands)
    stored = result(run_functional(accel, moved.commands, memory_of(residual)))
    assert np.array_equal(stored[order], plain)
    assert accel_cycles(accel, moved.commands).cycles >= \
        accel_cycles(accel, program.commands).cycles


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("size", [TINY, PADDED, UNSHIFTED],
                         ids=["shifted", "padded", "unshifted"])
def test_a_window_block_cosimulates_bit_exactly(tmp_path: Path, sim_cache: Path,
                                                size: Window) -> None:
    """The block compiled by default: the C program and `make sim` (every layer on
    ws_accel's RTL) give the interpreter's integers, every layer its predicted cycles;
    shifted (TINY) and with the scores' rows padded (PADDED)."""
    source, inputs = _quantized_block(tmp_path, size)
    outdir = tmp_path / "out"
    compiled = subprocess.run([sys.executable, "-m", "glensidec", "compile", str(source),
                               "-o", str(outdir)], capture_output=True, text=True, timeout=600)
    assert compiled.returncode == 0, compiled.stderr
    arguments = []
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        arguments.append(f"{name}={tmp_path / name}.npy")
    expected = _interpreted(source, inputs)
    ran = subprocess.run(["make", "-s", "-C", str(outdir), "sim", f"INPUTS={' '.join(arguments)}",
                          f"OUTPUT={tmp_path / 'sim.npy'}"], capture_output=True, text=True,
                         timeout=1800, env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert np.array_equal(np.load(tmp_path / "sim.npy").reshape(expected.shape), expected)
    report = json.loads((outdir / "cosim_report.json").read_text())
    # each head's Q, K and V projections, and per (window, head) Q·Kᵀ and ·V
    assert len(report["calls"]) >= 3 * size.heads + 2 * size.windows * size.heads
    assert all(call["data_ok"] and call["simulated_cycles"] == call["predicted_cycles"]
               for call in report["calls"])


def patch_merging_after_a_residual_block(features: int = 16, size: int = 4, seed: int = 0
                                         ) -> Any:
    """x + x·W (a block's last residual add, an NHWC map), then Swin's patch merging: the
    four pixels of each 2×2 square as strided slices, concatenated along the channels."""
    g = OnnxGraph(seed)
    x = g.input("input", [1, size, size, features])
    w = g.random("w", (features, features), (1.0 / features) ** 0.5)
    y = g.node("Add", [x, g.node("Add", [g.node("MatMul", [x, w]),
                                         g.random("b", (features,), 0.1)])])
    parts = []
    for start_y, start_x in ((0, 0), (1, 0), (0, 1), (1, 1)):
        parts.append(g.node("Slice", [
            y, g.const(f"s{g.count}", np.array([start_y, start_x], np.int64)),
            g.const(f"e{g.count}", np.array([size, size], np.int64)),
            g.const(f"a{g.count}", np.array([1, 2], np.int64)),
            g.const(f"t{g.count}", np.array([2, 2], np.int64))]))
    merged = g.node("Concat", parts, axis=-1)
    return g.model(merged, [1, size // 2, size // 2, 4 * features])


def test_a_residual_add_that_patch_merging_slices_is_the_layers_epilogue(
        tmp_path: Path) -> None:
    """x + x·W, which only patch merging's strided slices read: the quantizer requantizes
    the i32 sum in each slice (requantizes of parts of it, no loop after the add).
    The add's loop takes that requantize (`accel_swin.requantize_in_loops`), so the
    product's layer adds x in its epilogue; the slices and their concatenation put each
    of its rows, whole, at a row of the merged map's (4·features)-byte pixels, so the layer
    stores them there (`accel_swin.store_rows_in_place`: each image row's pixels two rows
    apart, the next image row one row on) and no host copy is left. The lowered program
    gives the interpreter's integers."""
    features, size = 16, 4
    source, inputs = _quantized(patch_merging_after_a_residual_block(features, size),
                                tmp_path)
    lowered = _accelerated(source, "16x16")
    added = [layer for layer in lowered.accel_layers() if layer.residual_add is not None]
    assert len(added) == 1 and not added[0].residual_add.early  # type: ignore[union-attr]
    assert lowered.instructions == [added[0]] and added[0].dst.buffer == lowered.output
    y, x = np.divmod(np.arange(size * size), size)  # the layer's rows: the map's pixels
    merged_rows = ((y // 2) * (size // 2) + x // 2) * 4 + y % 2 + 2 * (x % 2)
    assert np.array_equal(np.array(added[0].row_order), merged_rows)
    expected = _interpreted(source, inputs)
    got = _lowered_result(source, lowered, inputs, 16)
    assert np.array_equal(got.reshape(expected.shape), expected)


@pytest.mark.slow
@pytest.mark.rtl
def test_patch_merging_stored_by_the_layer_cosimulates_bit_exactly(
        tmp_path: Path, sim_cache: Path) -> None:
    """The layer that stores its rows as patch merging's pixels (each image row's pixels
    two rows apart, `store_rows_in_place`): the C program and ws_accel's RTL give the
    interpreter's integers, the layer its predicted cycles."""
    source, inputs = _quantized(patch_merging_after_a_residual_block(16, 8), tmp_path)
    run = _checked_cosimulation(source, None, inputs, tmp_path, sim_cache)
    assert run.report["calls"]  # (the layer among them: it writes the program's result)
