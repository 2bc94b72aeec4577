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
