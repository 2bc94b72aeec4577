"""`glensidec compile --scratchpad / --accumulator / --dram-bandwidth`: sizes and errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES

from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.pipeline import accelerator_for

BLOCK = EXAMPLES / "resnet_block.gs"


def glensidec(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_a_scratchpad_too_small_for_one_tile_is_an_error_naming_the_sizes(tmp_path: Path) -> None:
    done = glensidec("compile", BLOCK, "--array", "16x16", "--scratchpad", "128",
                     "-o", tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        "error: --scratchpad 128: the weights of one K fold (16 rows of 16 B = 256 B) do not "
        "fit a 32-byte buffer (a quarter of the 128-byte scratchpad)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "message"), [
    ({"scratchpad": "100000"}, "--scratchpad 100000: the scratchpad holds 4 banks of 16-byte "
                               "rows: 100000 B is not a multiple of 64 B"),
    ({"scratchpad": "96KiB"}, "--scratchpad 96KiB: 98304 B makes banks of 1536 rows; the bank "
                              "rows must be a power of two"),
    ({"dram_bandwidth": 12}, "--dram-bandwidth 12: the DRAM bandwidth must be a power of two "
                             "bytes per cycle, got 12"),
    ({"accumulator": "1000"}, "--accumulator 1000: the accumulator holds rows of 16 int32 "
                              "(64 B) and at least 2 of them"),
    ({"scratchpad": "2x"}, "--scratchpad takes a size in bytes such as 256KiB"),
    # 4 GiB once compiled to C that did not link
    ({"scratchpad": "4294967296"}, "--scratchpad 4294967296: the scratchpad is at most "
                                   "268435456 B (16-byte rows a command addresses with 24 "
                                   "bits, in a static array of the generated C of at most "
                                   "536870912 B)"),
    # once `integer constant is too large` in accel_runtime.c
    ({"accumulator": "99999999999999999999K"}, "--accumulator 99999999999999999999K: the "
                                               "accumulator holds 2 to 65535 rows"),
    ({"accumulator": "4MiB"}, "holds 2 to 65535 rows (a COMPUTE's m_len is 16 bits: no tile "
                              "uses more), got 65536"),
    ({"dram_bandwidth": 2**40}, "--dram-bandwidth 1099511627776: the DRAM bandwidth is at "
                                "most 134217728 bytes per cycle"),
])
def test_sizes_the_rtl_cannot_have_are_errors(options: dict[str, str | int],
                                              message: str) -> None:
    settings: dict[str, str | int | None] = {"scratchpad": "256KiB", "accumulator": None,
                                             "dram_bandwidth": 16, **options}
    with pytest.raises(GlensideError) as error:
        accelerator_for(ArrayConfig(16, 16), settings["scratchpad"], settings["accumulator"],
                     settings["dram_bandwidth"])
    assert message in error.value.message


def test_the_sizes_set_theaccelerator_for() -> None:
    accel = accelerator_for(ArrayConfig(8, 8), "1MiB", "16K", 4)
    assert accel.acc_depth == 512  # 16 KiB of 8 int32 rows
    assert (accel.memory.scratchpad_bytes, accel.memory.row_bytes,
            accel.memory.bus_bytes) == (2**20, 8, 4)
    # the most the command fields address at 16x16, and the most rows m_len counts
    largest = accelerator_for(ArrayConfig(16, 16), "256MiB", str(65535 * 64))
    assert (largest.memory.scratchpad_bytes, largest.acc_depth) == (2**28, 65535)


def test_the_generated_c_bounds_the_memories_where_the_rtl_would_not() -> None:
    """128-byte rows: 2^24 of them are 2 GiB, more static data than the C links."""
    with pytest.raises(GlensideError, match="at most 536870912 B"):
        accelerator_for(ArrayConfig(128, 128), "1024MiB")
    assert accelerator_for(ArrayConfig(128, 128), "512MiB").memory.scratchpad_bytes == 2**29


@pytest.mark.slow
def test_the_largest_memories_build(tmp_path: Path) -> None:
    """At the limits the generated C still links (a 4 GiB scratchpad once did not)."""
    import numpy as np

    outdir = tmp_path / "out"
    done = glensidec("compile", EXAMPLES / "small_cnn.gs", "--array", "32x32", "--accel",
                     "--scratchpad", "512MiB", "--accumulator", str(65535 * 128), "-o", outdir)
    assert done.returncode == 0, done.stderr
    assert "#define GS_ACCEL_ACC_DEPTH 65535" in (outdir / "accel_runtime.h").read_text()
    subprocess.run(["make", "-s", "-C", str(outdir), "OPT=-O0"], check=True, timeout=300)
    image = np.random.default_rng(0).integers(-128, 128, (1, 1, 16, 16)).astype(np.int8)
    np.save(tmp_path / "image.npy", image)
    subprocess.run([str(outdir / "model"), f"image={tmp_path / 'image.npy'}", "-o",
                    str(tmp_path / "c.npy")], check=True, timeout=60, capture_output=True)
    from glensidec import run

    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"),
                                  run(EXAMPLES / "small_cnn.gs", {"image": image}))


def test_stats_report_the_memories_and_the_tiling() -> None:
    done = glensidec("compile", BLOCK, "--array", "16x16", "--stats", "--scratchpad", "4KiB",
                     "--accumulator", "32KiB", "--dram-bandwidth", "8")
    assert done.returncode == 0, done.stderr
    assert ("accelerator memories: scratchpad 4096 B (4 banks of 64 16-byte rows), accumulator "
            "512 rows (32768 B), DRAM 8 B/cycle") in done.stderr
    # K = 144 is 9 folds; a 1 KiB weight buffer holds 64 rows: at most 4 folds a piece
    pieces = re.findall(r"M=16 K=144 N=256: K pieces of (\d+) of 9 folds, M chunks of 16 rows",
                        done.stderr)
    assert pieces and all(1 <= int(piece) <= 4 for piece in pieces)


@pytest.mark.slow
def test_the_defaults_change_nothing(tmp_path: Path) -> None:
    plain = glensidec("compile", BLOCK, "--array", "8x8", "-o", tmp_path / "plain")
    explicit = glensidec("compile", BLOCK, "--array", "8x8", "-o", tmp_path / "explicit",
                         "--scratchpad", "256KiB", "--accumulator", "32KiB",  # 1024 rows of 8
                         "--dram-bandwidth", "16")
    assert plain.returncode == explicit.returncode == 0, plain.stderr + explicit.stderr
    names = sorted(p.name for p in (tmp_path / "plain").iterdir()
                   if p.name not in ("Makefile", "glensidec-manifest.json"))
    assert names
    for name in names:
        assert (tmp_path / "plain" / name).read_bytes() == \
            (tmp_path / "explicit" / name).read_bytes(), name


# -- which machine a program gets, and why (issue 27: `--accel` of a float program said
# "0 accelerator layers" and nothing else)

I8_MATMUL = """\
(input a i8 (shape 4 8))
(input w i8 (shape 3 8))
(compute dot-product
 (access-cartesian-product (access (access-tensor a) 1) (access (access-tensor w) 1)))
"""


@pytest.mark.parametrize(("program", "array", "accel", "line"), [
    (EXAMPLES / "matmul.gs", "16x16", True,
     "f32 program: its products run on the host: the whole accelerator multiplies i8 "
     "operands only (--array 16x16:f32 for the binary32 array)"),
    (EXAMPLES / "matmul.gs", "8x8:f32", False,
     "f32 program: compiled for the bare 8x8 binary32 array"),
    (EXAMPLES / "matmul.gs", "16x16,8x8", False,
     "f32 program: its products run on the host: the bare 16x16,8x8 int8 arrays multiply i8 "
     "operands only (--array 16x16:f32 for the binary32 array)"),
    (BLOCK, "16x16:f32", False,
     "i8 program: its products run on the host: the bare 16x16 binary32 array multiplies f32 "
     "operands only (--array 16x16 for the int8 array)"),
    (BLOCK, "16x16", False, "i8 program: compiled for the bare 16x16 int8 array"),
    (BLOCK, "16x16", True, "i8 program: compiled for the whole accelerator"),
])
def test_compile_target_says_where_the_products_run_and_why(
        program: Path, array: str, accel: bool, line: str) -> None:
    from glensidec.opt.extract import parse_arrays
    from glensidec.pipeline import compile_target, load

    typed = load(program)
    target = compile_target(typed.program, typed.types, parse_arrays(array), accel)
    assert target.line == line
    assert target.takes_all == ("compiled for" in line)


def test_compile_accel_of_a_float_program_says_why_no_layer_is_made(tmp_path: Path) -> None:
    done = glensidec("compile", EXAMPLES / "matmul.gs", "--array", "16x16", "--accel",
                     "--iterations", "2", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ("note: f32 program: its products run on the host: the whole "
                           "accelerator multiplies i8 operands only (--array 16x16:f32 "
                           "for the binary32 array)\n")
    assert "0 accelerator layers" in done.stdout


def test_an_int8_program_on_the_f32_array_makes_no_array_call(tmp_path: Path) -> None:
    """It once lowered the i8 products to binary32 array calls on int8 buffers: C that did
    not build (`passing argument 4 of 'gs_array_gemm' from incompatible pointer type`), and
    `compile` printed array cycles that --stats did not predict."""
    program = tmp_path / "p.gs"
    program.write_text(I8_MATMUL)
    done = glensidec("compile", program, "--array", "4x4:f32", "--stats", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "predicted cycles: " in done.stderr and "(array 0, " in done.stderr
    assert "predicted array cycles 0" in done.stdout
    assert "gs_array_gemm(" not in (tmp_path / "out" / "model.c").read_text()


@pytest.mark.slow
def test_an_int8_program_on_the_f32_array_builds_and_agrees(tmp_path: Path) -> None:
    import numpy as np

    program = tmp_path / "p.gs"
    program.write_text(I8_MATMUL)
    outdir = tmp_path / "out"
    assert glensidec("compile", program, "--array", "4x4:f32", "-o", outdir).returncode == 0
    subprocess.run(["make", "-s", "-C", str(outdir), "OPT=-O0"], check=True, timeout=300)
    generator = np.random.default_rng(5)
    a = generator.integers(-128, 128, (4, 8)).astype(np.int8)
    w = generator.integers(-128, 128, (3, 8)).astype(np.int8)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "w.npy", w)
    subprocess.run([str(outdir / "model"), f"a={tmp_path / 'a.npy'}", f"w={tmp_path / 'w.npy'}",
                    "-o", str(tmp_path / "c.npy")], check=True, timeout=60, capture_output=True)
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"),
                                  a.astype(np.int32) @ w.astype(np.int32).T)
