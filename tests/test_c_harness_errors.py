"""The generated C harness on bad data (issue 27): a corrupt or foreign weights.bin is
refused by its size and CRC-32 before anything runs, and every error exit — bad inputs,
bad weights, a command table the accelerator runtime rejects — frees what it allocated
(LeakSanitizer under `make asan` reports nothing)."""

from __future__ import annotations

import re
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES
from test_outputs import run_cli

from glensidec.hardware.accel_native import FIELDS


def test_model_h_holds_the_crc32_of_weights_bin(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    assert run_cli("compile", EXAMPLES / "small_cnn.gs", "--array", "8x8", "-o", outdir,
                   cwd=tmp_path) == 0
    weights = (outdir / "weights.bin").read_bytes()
    assert f"#define MODEL_CONSTANTS_CRC32 0x{zlib.crc32(weights):08x}u" in (
        outdir / "model.h").read_text()


def _table_offset(model_c: str) -> int:
    """Where the first accelerator layer's command table starts in weights.bin."""
    found = re.search(r"_commands = \(const int32_t \*\)\(constants \+ (\d+)\)", model_c)
    assert found is not None
    return int(found.group(1))


@pytest.mark.slow
def test_every_error_exit_is_one_line_and_leaks_nothing_under_asan(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    assert run_cli("compile", EXAMPLES / "small_cnn.gs", "--array", "8x8", "--accel", "-o",
                   outdir, cwd=tmp_path) == 0
    weights = (outdir / "weights.bin").read_bytes()
    # A command table the runtime must reject, in a weights.bin whose checksum model.h
    # agrees with: the backend-error exit (a compiler bug's symptom) must not leak either.
    table = bytearray(weights)
    op = _table_offset((outdir / "model.c").read_text()) + 4 * FIELDS.index("op")
    table[op:op + 4] = (7).to_bytes(4, "little")
    (outdir / "weights.bin").write_bytes(table)
    header = (outdir / "model.h").read_text()
    (outdir / "model.h").write_text(header.replace(f"0x{zlib.crc32(weights):08x}u",
                                                   f"0x{zlib.crc32(table):08x}u"))
    # the default -O3: at -O0 a leaked block is still on the stack, and LeakSanitizer
    # counts it as reachable
    subprocess.run(["make", "-s", "-C", str(outdir), "asan"], check=True, timeout=600,
                   capture_output=True)
    image, scalar = tmp_path / "image.npy", tmp_path / "scalar.npy"
    np.save(image, np.zeros((1, 1, 16, 16), np.int8))
    np.save(scalar, np.float32(1.5))
    np.save(tmp_path / "wrong.npy", np.zeros((1, 1, 16, 15), np.int8))
    flipped = bytearray(weights)
    flipped[len(flipped) // 2] ^= 0x10
    (tmp_path / "flipped.bin").write_bytes(flipped)
    (tmp_path / "short.bin").write_bytes(weights[:-1])
    crc = f"{zlib.crc32(flipped):08x}"
    cases = [
        ([f"image={tmp_path / 'wrong.npy'}"], 1,
         f"model: input 'image': {tmp_path / 'wrong.npy'} has shape (1, 1, 16, 15), "
         "expected (1, 1, 16, 16)"),
        ([f"image={scalar}"], 1, "has dtype '<f4', expected '<i1'"),
        ([f"image={image}", "--weights", tmp_path / "flipped.bin"], 1,
         f"model: {tmp_path / 'flipped.bin'}: corrupt weights file (CRC-32 {crc}, expected "
         f"{zlib.crc32(table):08x}); compile the program again to rewrite it"),
        ([f"image={image}", "--weights", tmp_path / "short.bin"], 1,
         f"model: {tmp_path / 'short.bin'}: {len(weights) - 1} bytes, expected {len(weights)}: "
         "not this model's weights file, or a truncated one"),
        ([f"image={image}"], 2, "model: accelerator layer image_nhwc: command 0 of its table in "
                                "weights.bin: an unknown command"),
    ]
    for args, code, message in cases:
        done = subprocess.run([str(outdir / "model_asan"), *map(str, args), "-o",
                               str(tmp_path / "o.npy")], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == code, (args, done.stderr)
        assert message in done.stderr.splitlines()[0], (args, done.stderr)
        assert "Sanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr
        assert not (tmp_path / "o.npy").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("program", "name", "shape", "dtype"),
                         [("small_cnn.gs", "image", (1, 1, 16, 16), np.int8),
                          ("matmul.gs", "a", (32, 64), np.float32)])
def test_a_fortran_order_npy_is_read_as_the_interpreter_reads_it(
        program: str, name: str, shape: tuple[int, ...], dtype: type, tmp_path: Path) -> None:
    """numpy saves a transposed array in Fortran order; `glensidec run` took such a .npy and
    the C harness refused it ("only C-order arrays are supported"), so diff and make sim did
    too."""
    import glensidec

    outdir = tmp_path / "out"
    assert run_cli("compile", EXAMPLES / program, "-o", outdir, cwd=tmp_path) == 0
    subprocess.run(["make", "-s", "-C", str(outdir)], check=True, timeout=600,
                   capture_output=True)
    rng = np.random.default_rng(3)
    given = {decl.name: rng.integers(-100, 100, decl.shape).astype(dtype)
             for decl in glensidec.load(EXAMPLES / program).inputs()}
    assert given[name].shape == shape
    for each, array in given.items():
        np.save(tmp_path / f"{each}.npy", np.asfortranarray(array))
    assert np.load(tmp_path / f"{name}.npy").flags.f_contiguous
    done = subprocess.run([str(outdir / "model"), *(f"{n}={tmp_path / n}.npy" for n in given),
                           "-o", str(tmp_path / "c.npy")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"),
                                  glensidec.run(EXAMPLES / program, given))


@pytest.mark.slow
def test_an_integer_input_takes_integers_of_another_width_as_run_does(tmp_path: Path) -> None:
    """INT64 token ids (what PyTorch and numpy give) for an i32 input: `glensidec run` took
    them (each value must fit), the C harness refused the dtype ('<i8', expected '<i4'), so
    the compiled token encoder's program, make sim and diff could not be given its ids."""
    import glensidec

    program = tmp_path / "ids.gs"
    program.write_text("(input ids i32 (shape 2 3))\n"
                       "(compute relu (access (access-tensor ids) 0))\n")
    outdir = tmp_path / "out"
    assert run_cli("compile", program, "--bare-array", "-o", outdir, cwd=tmp_path) == 0
    subprocess.run(["make", "-s", "-C", str(outdir)], check=True, timeout=600,
                   capture_output=True)
    values = np.array([[-7, 0, 3], [2**31 - 1, -(2**31), 11]])

    def model(array: np.ndarray) -> subprocess.CompletedProcess[str]:
        np.save(tmp_path / "ids.npy", array)
        (tmp_path / "c.npy").unlink(missing_ok=True)
        return subprocess.run([str(outdir / "model"), f"ids={tmp_path / 'ids.npy'}", "-o",
                               str(tmp_path / "c.npy")], capture_output=True, text=True,
                              timeout=120)

    for dtype in ("<i8", ">i8", ">i4"):
        done = model(values.astype(dtype))
        assert done.returncode == 0, (dtype, done.stderr)
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"),
                                      glensidec.run(program, {"ids": values.astype(dtype)}))
    for dtype in ("<i2", "|u1", "<u8"):
        small = np.abs(values % 100).astype(dtype)
        assert model(small).returncode == 0, dtype
        np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), small.astype(np.int32))
    for array, shown in [(np.full((2, 3), 2**40, np.int64), "1099511627776 at element 0"),
                         (np.full((2, 3), -(2**31) - 1, np.int64), "-2147483649 at element 0"),
                         (np.full((2, 3), 2**32 - 1, np.uint32), "4294967295 at element 0")]:
        done = model(array)
        assert done.returncode == 1 and not (tmp_path / "c.npy").exists()
        assert done.stderr == (f"model: input 'ids': {tmp_path / 'ids.npy'} holds {shown}, "
                               "outside '<i4' (-2147483648..2147483647)\n"), done.stderr
    done = model(values.astype("<f8"))
    assert done.returncode == 1
    assert "has dtype '<f8', expected '<i4' (or integers of another width" in done.stderr
