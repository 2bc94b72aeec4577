"""Channel concatenations written in place by the layers that produce them (a row pitch),
ceil-mode max-pools and first convolutions without padding on the accelerator (issue 26)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    assert_calls_match_the_model,
    assert_diff_agrees,
    cosimulate,
    run_checked,
    save_inputs,
)
from test_accel_offload import (
    CONV_THEN_AVERAGE,
    _accelerated,
    _assert_interpreters_agree,
    _conv_then_pool,
    _interpreted,
    _random_inputs,
    _save_conv_weights,
)

from glensidec.backend.lower import AccelLayer, Copy, Fill, Reduce
from glensidec.hardware.accel import ConvLayer
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import pool_program, run_functional, with_output_pitch
from glensidec.pipeline import accelerator_for


def _conv(operand: str, weight: str, channels: int) -> str:
    """A 1×1 convolution of the (1, C, H, W) `operand`, as the importer writes one."""
    return f"""(access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor {weight}) 1)
    (access (access-squeeze (access-windows (access {operand} 1)
                                            (shape {channels} 1 1) (shape 1 1 1)) 1) 3)))
  (list 1 0 2 3))"""


def _fire(root: Path, size: int, tail: str) -> Path:
    """A fire module's shape: two layers of one input (3 and 5 channels) concatenated,
    then `tail` ("conv": a 1×1 layer of the joined map; "pool": a 3×3/2 ceil-mode max-pool
    of it, padded below and right with the minimum)."""
    rng = np.random.default_rng(7)
    np.savez(root / "w.npz", **{name: rng.integers(-128, 128, shape).astype(np.int8)
                                for name, shape in (("w1", (3, 4, 1, 1)), ("w2", (5, 4, 1, 1)),
                                                    ("w3", (6, 8, 1, 1)))})
    joined = "(access-concatenate q1 q2 1)"
    if tail == "conv":
        result = f"(compute relu (compute (requantize 5 0 8 0) {_conv('j', 'w3', 8)}))"
    else:
        padded = "(access-pad (access-pad j min-padding 2 0 1) min-padding 3 0 1)"
        result = f"(compute reduce-max (access-windows (access {padded} 2) (shape 3 3) " \
                 "(shape 2 2)))"
    text = f"""(input a i8 (shape 1 4 {size} {size}))
(weight w1 i8 (shape 3 4 1 1) "w.npz")
(weight w2 i8 (shape 5 4 1 1) "w.npz")
(weight w3 i8 (shape 6 8 1 1) "w.npz")
(let q1 (compute relu (compute (requantize 3 0 7 -2) {_conv('(access-tensor a)', 'w1', 4)})))
(let q2 (compute relu (compute (requantize 1 0 6 0) {_conv('(access-tensor a)', 'w2', 4)})))
(let j {joined})
{result}
"""
    path = root / f"fire_{tail}.gs"
    path.write_text(text)
    return path


@pytest.mark.parametrize("tail", ["conv", "pool"])
def test_a_concatenation_of_layers_is_written_in_place_as_their_rows(
        tail: str, tmp_path: Path) -> None:
    """Both layers store their columns into the joined rows (pitch 8), the next layer or
    the ceil-mode pool reads those rows: no host copy, fill or reduce is left between
    them, and the lowered program still computes the interpreter's result."""
    source = _fire(tmp_path, 6, tail)
    lowered = _accelerated(source, "4x4")
    pitched = [layer for layer in lowered.accel_layers() if layer.output_pitch]
    assert sorted(layer.n for layer in pitched) == [3, 5]
    assert all(layer.output_pitch == 8 and layer.dst.buffer == pitched[0].dst.buffer
               for layer in pitched)
    readers = [layer for layer in lowered.accel_layers()
               if layer.a.buffer == pitched[0].dst.buffer]
    assert len(readers) == 1 and readers[0].pool == (tail == "pool")
    if tail == "pool":
        assert readers[0].pad_end == 1 and readers[0].padding == 0
    host = [instruction for instruction in lowered.instructions
            if isinstance(instruction, (Copy, Fill, Reduce))
            and instruction.dst.buffer != lowered.output]
    assert not host, host
    _assert_interpreters_agree(source, lowered, 4, seeds=3)


def test_a_pitched_store_writes_the_same_rows_pitch_bytes_apart() -> None:
    """commands.with_output_pitch moves only the stores: run functionally, the pitched
    program's rows are the compact program's, each `pitch` bytes after the last, and the
    bytes between them are untouched."""
    accel = accelerator_for(ArrayConfig(4, 4))
    layer = ConvLayer("pool", 6, 6, 5, 5, kernel=3, stride=2, pad_end=1)
    program = pool_program(accel, layer)
    feature = np.random.default_rng(3).integers(-128, 128, (6, 6, 5))
    memory = np.zeros(program.memory_bytes, np.uint8)
    memory[:feature.size] = (feature.reshape(-1) & 0xFF).astype(np.uint8)
    m, n, pitch = 9, 5, 13
    compact = run_functional(accel, program.commands, memory.copy())
    rows = compact[program.output_base:program.output_base + m * n].reshape(m, n)
    pitched = with_output_pitch(program, m, n, pitch, accel.memory.bus_bytes)
    wide = np.zeros(pitched.memory_bytes, np.uint8)
    wide[:memory.size] = memory
    wide = run_functional(accel, pitched.commands, wide)
    block = wide[pitched.output_base:pitched.output_base + m * pitch].reshape(m, pitch)
    assert np.array_equal(block[:, :n], rows)
    assert not block[:, n:].any()


FIRST_CONV = """(input a i8 (shape 1 3 9 9))
(weight w i8 (shape 4 3 3 3) "w.npz")
(compute relu (compute (requantize 3 0 9 0)
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor w) 1)
    (access (access-squeeze (access-windows (access (access-tensor a) 1)
                                            (shape 3 3 3) (shape 1 2 2)) 1) 3)))
  (list 1 0 2 3))))
"""


def test_an_unpadded_first_convolution_reads_the_input_by_dma(tmp_path: Path) -> None:
    """squeezenet's and AlexNet's first layers: a 3-channel convolution without padding
    whose im2col matrix the lowering copies from the program's input straight into the
    operand, its K padded by a fill (no packing copy). The layer reads the map's NHWC rows
    with the DMA's im2col, not a host-built matrix of every window."""
    np.savez(tmp_path / "w.npz", w=np.random.default_rng(5).integers(
        -128, 128, (4, 3, 3, 3)).astype(np.int8))
    source = tmp_path / "first_conv.gs"
    source.write_text(FIRST_CONV)
    lowered = _accelerated(source, "4x4")
    conv = next(layer for layer in lowered.accel_layers() if layer.multiplies)
    assert conv.image == (9, 9, 3) and (conv.kernel, conv.stride, conv.k) == (3, 2, 27)
    assert not [instruction for instruction in lowered.instructions
                if isinstance(instruction, (Copy, Fill)) and instruction.dst.buffer !=
                lowered.output]
    _assert_interpreters_agree(source, lowered, 4)


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("program", ["fire", "padded_average", "requantized_pool"])
def test_the_new_layer_forms_run_three_ways_and_on_ws_accel(
        program: str, tmp_path: Path, sim_cache: Path) -> None:
    """The fire module with its ceil-mode pool (two pitched stores, the pool reading the
    joined rows), and a padded average pool: through the C program and `make sim` every
    layer runs on ws_accel's RTL with its predicted cycles and bits, the result is the
    interpreter's, and `glensidec diff` finds every instruction equal."""
    source = _fire(tmp_path, 6, "pool") if program == "fire" else \
        _padded_average(tmp_path, 6, 3, 1) if program == "padded_average" else \
        _requantized_pool(tmp_path)
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(source), "--array", "4x4",
                 "-o", str(outdir)])
    inputs = _random_inputs(source, 4)
    arguments = save_inputs(inputs, tmp_path)
    expected = _interpreted(source, inputs)
    sim = cosimulate(outdir, arguments, tmp_path / "sim.npy", sim_cache)
    assert len(sim.report["calls"]) >= 3
    assert_calls_match_the_model(sim.report)
    assert np.array_equal(sim.result, expected)
    assert_diff_agrees(outdir, arguments)


def _padded_average(root: Path, size: int, kernel: int, stride: int) -> Path:
    """A layer, then a kernel × kernel average pool at `stride` of its result padded by 1
    with zeros, counting the padding (a window sum, requantized)."""
    _save_conv_weights(root)
    padded = "(access-pad (access-pad q zero-padding 2 1 1) zero-padding 3 1 1)"
    out = (size + 2 - kernel) // stride + 1
    summed = (f"(compute reduce-sum (access-windows (access {padded} 2) "
              f"(shape {kernel} {kernel}) (shape {stride} {stride})))")
    literal = "(access-literal (literal 300 i32))"
    for _ in range(4):
        literal = f"(access-insert-axis {literal} 0)"
    source = root / "padded_average.gs"
    source.write_text(CONV_THEN_AVERAGE.format(size=size, summed=summed, shape=f"1 8 {out} {out}",
                                               literal=literal, post=34))
    return source


@pytest.mark.parametrize("size,kernel,stride", [(6, 3, 1), (7, 3, 2), (5, 2, 1)])
def test_an_average_pool_counting_its_padding_is_a_padded_sum_pooling_layer(
        size: int, kernel: int, stride: int, tmp_path: Path) -> None:
    """Inception's branch pool (3×3/1, padded 1, count_include_pad): a window sum over a
    zero-padded map. The DMA reads the padding as that value, so the sum pool takes the
    layer's rows themselves: no host fill, copy or reduce."""
    source = _padded_average(tmp_path, size, kernel, stride)
    lowered = _accelerated(source, "4x4")
    pools = [layer for layer in lowered.accel_layers() if layer.pool]
    assert len(pools) == 1 and pools[0].pool_sum and pools[0].padding == 1
    assert not [instruction for instruction in lowered.instructions
                if isinstance(instruction, (Fill, Reduce))]
    _assert_interpreters_agree(source, lowered, 4, seeds=3)


def _requantized_pool(root: Path) -> Path:
    """A layer's 3×3/2 max-pool (padded 1), then a requantize of the pooled map (as the
    quantizer writes a pool joining a concatenation of another scale)."""
    source = _conv_then_pool(root, 7, 3, 2, 1)
    pool = source.read_text().strip().splitlines()
    pool[-2] = "(compute (requantize 1234567890 0 31 4) (compute (cast i32) " + pool[-2]
    pool[-1] += "))"
    source.write_text("\n".join(pool) + "\n")
    return source


def test_a_requantize_of_a_max_pool_runs_in_the_pool_epilogue(tmp_path: Path) -> None:
    """Inception's pool branch of a concatenation of another scale: the pooling stores
    send each maximum through the requantize (the epilogue after the max), so no host
    loop reads the pool's result."""
    source = _requantized_pool(tmp_path)
    lowered = _accelerated(source, "4x4")
    pools = [layer for layer in lowered.accel_layers() if layer.pool]
    assert len(pools) == 1 and not pools[0].pool_sum and pools[0].post == 31
    assert all(isinstance(instruction, (AccelLayer, Copy))  # (the NCHW result's copy)
               for instruction in lowered.instructions)
    _assert_interpreters_agree(source, lowered, 4, seeds=3)
