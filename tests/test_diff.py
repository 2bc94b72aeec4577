"""`glensidec diff`: the interpreter, the C program and the co-simulation compared per
instruction; a corrupted weight byte is found at the first instruction that reads it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES

import glensidec
from glensidec.backend.lower import ArrayGemm, lower_program
from glensidec.backend.plan import plan_memory
from glensidec.cosim.diff import (
    C_PROGRAM,
    INTERPRETER,
    _execute,
    compare,
    interpret,
    load_compiled,
)
from glensidec.lang import data
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program

GLENSIDE = EXAMPLES / "glenside"


def _glensidec(*words: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", *words], capture_output=True,
                          text=True, timeout=1200, env=env)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """small_cnn compiled for 8x8, with a random image (OUTDIR, the NAME=FILE argument)."""
    root = tmp_path_factory.mktemp("diff")
    outdir = root / "out"
    done = _glensidec("compile", str(EXAMPLES / "small_cnn.gs"), "--array", "8x8",
                      "-o", str(outdir))
    assert done.returncode == 0, done.stderr
    program = read_program(EXAMPLES / "small_cnn.gs")
    np.save(root / "image.npy", data.random_inputs(program, 3)["image"])
    return outdir, f"image={root / 'image.npy'}"


def test_a_missing_input_names_what_diff_takes(compiled_f32: tuple[Path, tuple[str, ...]]
                                               ) -> None:
    """Once "give --input NAME=FILE.npy or --random-inputs SEED": options diff lacks."""
    outdir, inputs = compiled_f32
    done = _glensidec("diff", str(outdir), inputs[0])
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: missing input ")
    assert done.stderr.strip().endswith(": give NAME=FILE.npy after OUTDIR, one for each input")
    done = _glensidec("diff", str(outdir), "a.npy")
    assert done.stderr.strip() == "error: an input takes NAME=FILE.npy, got 'a.npy'"


def test_diff_without_a_compiled_directory_says_so(tmp_path: Path) -> None:
    done = _glensidec("diff", str(tmp_path), "image=x.npy")
    assert done.returncode == 1
    assert "program.gs not found" in done.stderr and "Traceback" not in done.stderr


def test_compare_names_the_first_differing_instruction_and_element() -> None:
    program_path = EXAMPLES / "small_cnn.gs"
    program = read_program(program_path)
    lowered = lower_program(program, check_program(program))
    inputs = data.random_inputs(program, 0)
    reference = [values for _, values in interpret(lowered, data.load_weights(program),
                                                   inputs, main_rows=2)]
    assert compare(lowered, reference, reference, INTERPRETER, C_PROGRAM) is None
    changed = [values.copy() for values in reference]
    later = len(changed) - 1
    changed[later].reshape(-1)[-1] += 1
    changed[later - 1].reshape(-1)[0] += 1  # the earlier instruction is the one named
    divergence = compare(lowered, reference, changed, INTERPRETER, C_PROGRAM)
    assert divergence is not None and divergence.index == later - 1
    assert divergence.element == (0,) * changed[later - 1].ndim
    assert divergence.actual == divergence.expected + 1 and divergence.differing == 1


@pytest.mark.slow
def test_all_agree(compiled: tuple[Path, str]) -> None:
    outdir, image = compiled
    done = _glensidec("diff", str(outdir), image)
    _, lowered = load_compiled(outdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"all {len(lowered.instructions)} instructions agree")
    name, path = image.split("=")
    result = glensidec.diff(outdir, {name: path})  # the Python API says the same
    assert result.agree and result.lines() == done.stdout.splitlines()


@pytest.mark.slow
# On the accelerator (the default target) conv_w is packed into its layer's weight image,
# `activated_weights`: a byte of it is first read by that accelerator layer.
@pytest.mark.parametrize("weight", ["activated_weights", "dense_b"])
def test_a_corrupted_weight_byte_is_found_where_it_is_first_read(
        compiled: tuple[Path, str], tmp_path: Path, weight: str) -> None:
    outdir, image = compiled
    corrupted = tmp_path / "out"
    shutil.copytree(outdir, corrupted)
    _, lowered = load_compiled(corrupted)
    offset = plan_memory(lowered).constants[weight]
    original = (corrupted / "weights.bin").read_bytes()
    blob = bytearray(original)
    blob[offset] ^= 0x40
    (corrupted / "weights.bin").write_bytes(bytes(blob))
    # the C program refuses a weights.bin that fails its checksum (see the next test); a
    # corruption the checksum was updated for stands for any byte the C reads wrongly
    header = corrupted / "model.h"
    header.write_text(header.read_text().replace(f"0x{zlib.crc32(original):08x}u",
                                                 f"0x{zlib.crc32(blob):08x}u"))
    first_reader = next(index for index, instruction in enumerate(lowered.instructions)
                        if any(view.buffer == weight for view in instruction.reads()))
    done = _glensidec("diff", str(corrupted), image)
    assert done.returncode == 1, done.stdout + done.stderr
    buffer = lowered.instructions[first_reader].writes().buffer
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"first divergence: instruction [{first_reader}] ")
    assert lines[0].endswith(f" into {buffer}")
    assert lines[1].startswith("  from: ") and "interpreter" in lines[2]


@pytest.mark.slow
def test_a_corrupt_weights_file_is_named(compiled: tuple[Path, str], tmp_path: Path) -> None:
    outdir, image = compiled
    corrupted = tmp_path / "out"
    shutil.copytree(outdir, corrupted)
    blob = bytearray((corrupted / "weights.bin").read_bytes())
    blob[len(blob) // 2] ^= 0x40
    (corrupted / "weights.bin").write_bytes(bytes(blob))
    done = _glensidec("diff", str(corrupted), image)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"{corrupted / 'weights.bin'}: corrupt weights file (CRC-32" in done.stderr


@pytest.mark.slow
@pytest.mark.rtl
def test_rtl_agrees_instruction_by_instruction(compiled: tuple[Path, str],
                                               sim_cache: Path) -> None:
    outdir, image = compiled
    done = _glensidec("diff", str(outdir), image, "--rtl",
                      env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "instructions agree: interpreter, C program, RTL co-simulation" in done.stdout


@pytest.fixture(scope="module")
def compiled_f32(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[str, ...]]:
    """Glenside's f32 MLP compiled for the 2x2 binary32 array (OUTDIR, the NAME=FILE
    arguments: Glenside's programs take their weights as inputs too)."""
    root = tmp_path_factory.mktemp("diff_f32")
    path, shapes = GLENSIDE / "mlp.glenside", GLENSIDE / "mlp.json"
    done = _glensidec("compile", str(path), "--shapes", str(shapes), "--array", "2x2:f32",
                      "-o", str(root / "out"))
    assert done.returncode == 0, done.stderr
    program = read_program(path, shapes)
    arguments = []
    for name, value in data.random_inputs(program, 4).items():
        np.save(root / f"{name}.npy", value)
        arguments.append(f"{name}={root / f'{name}.npy'}")
    return root / "out", tuple(arguments)


def test_f32_array_products_are_compared_bit_for_bit(
        compiled_f32: tuple[Path, tuple[str, ...]]) -> None:
    """The lowered interpreter sums an f32 array call in the array's order (K folds of 2
    rows), so its bits are the array's; a one-ulp change there is a divergence, while host
    f32 values keep the tolerance."""
    outdir, arguments = compiled_f32
    program, lowered = load_compiled(outdir)
    calls = [i for i, instruction in enumerate(lowered.instructions)
             if isinstance(instruction, ArrayGemm)]
    assert calls and all(getattr(lowered.instructions[i], "rows", 0) == 2 for i in calls)
    gemm = lowered.instructions[calls[0]]
    assert isinstance(gemm, ArrayGemm)
    # ((1e8 + 1) + 0) + ((-1e8 + 1) + 0) = 0 in binary32 with folds of 2; exactly it is 2
    operands = {id(gemm.reads()[0]): np.array([[1e8, 1, -1e8, 1]], np.float32),
                id(gemm.reads()[1]): np.ones((4, 1), np.float32)}
    def summed(call: ArrayGemm, main_rows: int) -> list[list[float]]:
        return _execute(call, lambda view: operands[id(view)], lambda view: "f32",
                        main_rows).tolist()

    assert summed(gemm, main_rows=4) == [[0.0]]  # the call's own 2 rows win
    # a call no systolic-array construct sizes folds by the main array's rows:
    # ((1e8 + 1) + -1e8) + 1 = 1 in one fold of 4
    unsized = replace(gemm, rows=0, cols=0)
    assert summed(unsized, main_rows=4) == [[1.0]]
    assert summed(unsized, main_rows=2) == [[0.0]]

    inputs = data.load_inputs(program, data.parse_input_options(arguments))
    reference = [values for _, values in interpret(lowered, data.load_weights(program),
                                                   inputs, main_rows=2)]
    changed = [values.copy() for values in reference]
    flat = changed[calls[0]].reshape(-1)
    flat[0] = np.nextafter(flat[0], np.float32(np.inf))
    divergence = compare(lowered, reference, changed, INTERPRETER, C_PROGRAM)
    assert divergence is not None and divergence.index == calls[0]
    host = [i for i, instruction in enumerate(lowered.instructions)
            if i not in calls and lowered.buffers[instruction.writes().buffer].dtype == "f32"
            and reference[i].size and np.all(np.isfinite(reference[i]))]
    assert host
    changed = [values.copy() for values in reference]
    flat = changed[host[-1]].reshape(-1)
    flat[0] = np.nextafter(flat[0], np.float32(np.inf))
    assert compare(lowered, reference, changed, INTERPRETER, C_PROGRAM) is None


@pytest.mark.slow
def test_f32_diff_agrees_with_the_c_program(
        compiled_f32: tuple[Path, tuple[str, ...]]) -> None:
    outdir, arguments = compiled_f32
    done = _glensidec("diff", str(outdir), *arguments)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " instructions agree" in done.stdout
