"""A batch of N ≥ 2 images compiles onto the whole accelerator as batch 1 does (issue 26,
"one machine"): one copy of the network per image (`opt.batch.split_images`), each copy's
layers, pools, residual adds and layouts the accelerator's, the host's share what it is at
batch 1; a program whose images mix stays as it was, and the warning says why."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES
from test_accel_offload import _assert_interpreters_agree, _checked_cosimulation

from glensidec import pipeline
from glensidec.backend.accel_passes import fuse_for_accelerator
from glensidec.backend.lower import AccelLayer, LoweredProgram, LowerOptions, lower_program
from glensidec.backend.report import MachineCycles, machine_cycles
from glensidec.hardware.array import ArrayConfig, gemm_cycles
from glensidec.lang import data
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program
from glensidec.opt.batch import batch_size, split_images, unsplit_reason

# Each example's shapes that carry its batch dimension (1), as written.
BATCH_SHAPES = {
    "small_cnn": [r"\(shape 1 (1|8) 16 16\)", r"\(shape 1\) \(shape 512\)", r"\(shape 1 10\)"],
    "resnet_block": [r"\(shape 1 16 16 16\)"],
}


def _batched(name: str, images: int, folder: Path) -> Path:
    """examples/NAME.gs with its batch dimension `images` (weights beside it)."""
    text = (EXAMPLES / f"{name}.gs").read_text()
    for pattern in BATCH_SHAPES[name]:
        text, count = re.subn(
            pattern, lambda found: found[0].replace("(shape 1", f"(shape {images}", 1), text)
        assert count, pattern
    shutil.copy(EXAMPLES / f"{name}.npz", folder / f"{name}.npz")
    path = folder / f"{name}_batch{images}.gs"
    path.write_text(text)
    return path


def _cycles(source: Path, array: str = "16x16") -> tuple[MachineCycles, pipeline.CompileResult]:
    typed = pipeline.load(source)
    rows, cols = (int(value) for value in array.split("x"))
    target = pipeline.choose_target((ArrayConfig(rows, cols),))
    compiled = pipeline.compile_for(typed, target)
    return pipeline.predicted_machine_cycles(compiled, target), compiled


@pytest.mark.parametrize("name", sorted(BATCH_SHAPES))
def test_a_batch_of_two_takes_the_accelerator_as_one_image_does(name: str,
                                                               tmp_path: Path) -> None:
    """The host does per image what it does at batch 1, the accelerator the rest: its
    share at batch 2 is batch 1's (less what folding the classifier saved), and the whole
    at most twice batch 1's (one copy of each layer per image, each priced as at batch 1,
    small_cnn's classifier one array call of both images' rows). Before: small_cnn at
    batch 2 ran 96.9 % of its cycles on the host, resnet_block 96.3 %."""
    one, _ = _cycles(EXAMPLES / f"{name}.gs")
    two, compiled = _cycles(_batched(name, 2, tmp_path))
    assert two.host == 2 * one.host and two.total <= 2 * one.total
    assert two.host / two.total == pytest.approx(one.host / one.total, abs=1e-3)
    assert one.host / one.total < 0.01  # (and batch 1's is small: the claim is not empty)
    names = set(compiled.program.names.values())
    assert {f"activated_image{i}" if name == "small_cnn" else f"hidden_image{i}"
            for i in range(2)} <= names


def test_the_lowered_batch_computes_what_the_interpreter_does(tmp_path: Path) -> None:
    """The per-image copies, their input slices and the result's concatenation, lowered
    and run through the accelerator passes, give the source program's result."""
    source = _batched("resnet_block", 3, tmp_path)
    lowered = _accelerated_split(source, "8x8")
    one = _accelerated_split(EXAMPLES / "resnet_block.gs", "8x8")
    assert len(lowered.accel_layers()) == 3 * len(one.accel_layers())
    assert machine_cycles(lowered, ArrayConfig(8, 8)).host == \
        3 * machine_cycles(one, ArrayConfig(8, 8)).host
    _assert_interpreters_agree(source, lowered, 8)


def _accelerated_split(source: Path, array: str) -> LoweredProgram:
    """The program as `compile` lowers it on the accelerator (split per image first)."""
    program = read_program(source)
    rows, cols = (int(value) for value in array.split("x"))
    config = ArrayConfig(rows, cols)
    target = pipeline.choose_target((config,))
    compiled = pipeline.compile_for(pipeline.Typed(program, check_program(program)), target)
    lowered = lower_program(compiled.program, compiled.types, LowerOptions(array_dtype="i8"))
    return fuse_for_accelerator(lowered, data.load_weights(program),
                                pipeline.accelerator_for(config))


def _requantized(source: Path) -> Path:
    """`source` (small_cnn) with its logits requantized to int8: the classifier is then an
    accelerator layer (its bias and requantize in the epilogue), not an array call."""
    text = source.read_text()
    last = text.rindex("(compute elementwise-add")
    path = source.with_name(f"{source.stem}_q.gs")
    path.write_text(f"{text[:last]}(compute (requantize 1 0 6 0)\n{text[last:].rstrip()})\n")
    return path


@pytest.mark.parametrize("requantized", [False, True])
def test_a_batch_classifier_is_one_layer_of_every_image_when_that_is_cheaper(
        requantized: bool, tmp_path: Path) -> None:
    """small_cnn's classifier (an array call; requantized, an accelerator layer reading the
    pooled map as one window) waits on its weights: both images' rows in one call load
    them once, which the exact model prices lower than two calls, and the batch computes
    what the interpreter does."""
    source = _batched("small_cnn", 2, tmp_path)
    single = EXAMPLES / "small_cnn.gs"
    if requantized:
        source = _requantized(source)
        shutil.copy(single, tmp_path / "single.gs")
        single = _requantized(tmp_path / "single.gs")
    lowered, one = _accelerated_split(source, "16x16"), _accelerated_split(single, "16x16")
    calls = [call for call in (*lowered.accel_layers(), *lowered.array_calls())
             if call.k == 512]
    (classifier,) = [call for call in (*one.accel_layers(), *one.array_calls())
                     if call.k == 512]
    assert [call.m for call in calls] == [2]
    if requantized:
        assert isinstance(calls[0], AccelLayer) and isinstance(classifier, AccelLayer)
        assert calls[0].cycles < 2 * classifier.cycles
    else:
        config = ArrayConfig(16, 16)
        assert gemm_cycles(config, 2, 512, calls[0].n) < \
            2 * gemm_cycles(config, 1, 512, classifier.n)
    assert machine_cycles(lowered, ArrayConfig(16, 16)).total < \
        2 * machine_cycles(one, ArrayConfig(16, 16)).total
    _assert_interpreters_agree(source, lowered, 16)


def test_a_program_that_mixes_its_images_is_kept_whole_and_the_warning_says_why(
        tmp_path: Path) -> None:
    """small_cnn's dense layer over both images' features at once (one row of 1,024): the
    result reads both images, so the program compiles with its batch folded, and the
    warning about the epilogues left on the host says so (it named constant weights and
    per-column biases, which were not the reason)."""
    source = _batched("small_cnn", 2, tmp_path)
    text = source.read_text().replace("(shape 2) (shape 512)", "(shape 1) (shape 1024)")
    text = text.replace("(shape 2 10)", "(shape 1 10)").replace(
        "(weight dense_w i8 (shape 10 512)", "(weight dense_w i8 (shape 10 1024)")
    np.savez(tmp_path / "small_cnn.npz", **{
        **dict(np.load(EXAMPLES / "small_cnn.npz")),
        "dense_w": np.tile(np.load(EXAMPLES / "small_cnn.npz")["dense_w"], (1, 2))})
    mixed = tmp_path / "mixed.gs"
    mixed.write_text(text)
    program = read_program(mixed)
    types = check_program(program)
    assert batch_size(program) == 2 and split_images(program, types) is program
    reason = unsplit_reason(program, types)
    assert "2 images are compiled together" in reason and "cartesian-product" in reason
    run = subprocess.run([sys.executable, "-m", "glensidec", "compile", str(mixed), "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "stay on the host (the program's 2 images are compiled together" in run.stderr
    # batch 1 or a split batch: nothing to explain
    assert unsplit_reason(read_program(source), check_program(read_program(source))) == ""


@pytest.mark.slow
@pytest.mark.rtl
def test_a_batch_of_two_cosimulates_bit_and_cycle_exactly(tmp_path: Path,
                                                          sim_cache: Path) -> None:
    """small_cnn at batch 2, its logits requantized, on the 8×8 accelerator: interpreter =
    C = ws_accel, every layer in exactly its predicted cycles, the classifier one layer of
    both images."""
    source = _requantized(_batched("small_cnn", 2, tmp_path))
    image = np.random.default_rng(7).integers(-128, 128, (2, 1, 16, 16)).astype(np.int8)
    run = _checked_cosimulation(source, "8x8", {"image": image}, tmp_path, sim_cache)
    # per image: the input's layout, the convolution and the pool; the classifier once
    assert sum("accel" in call for call in run.report["calls"]) == 2 * 3 + 1
