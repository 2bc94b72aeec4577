"""The command line as a user meets it: exit codes, messages, files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES

from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program


def glensidec(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_check_prints_shape_and_dtype() -> None:
    done = glensidec("check", EXAMPLES / "small_cnn.gs")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "((1,10),()) i32\n"


def test_check_compatibility_mode() -> None:
    done = glensidec("check", EXAMPLES / "glenside" / "conv2d.glenside",
                     "--shapes", EXAMPLES / "glenside" / "conv2d.json")
    assert (done.returncode, done.stdout) == (0, "((1,8,32,32),()) f32\n"), done.stderr


def test_run_with_inputs_matches_the_interpreter(tmp_path: Path) -> None:
    program = read_program(EXAMPLES / "small_cnn.gs")
    image = random_inputs(program, seed=3)["image"]
    np.save(tmp_path / "image.npy", image)
    image_option = f"image={tmp_path / 'image.npy'}"
    done = glensidec("run", EXAMPLES / "small_cnn.gs", "--input", image_option,
                     "-o", tmp_path / "out.npy")
    assert done.returncode == 0, done.stderr
    expected = run_program(program, all_tensors(program, {"image": image}))
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


@pytest.mark.slow
def test_run_random_inputs_is_deterministic(tmp_path: Path) -> None:
    outputs = []
    for name in ("a.npy", "b.npy"):
        done = glensidec("run", EXAMPLES / "matmul.gs", "--random-inputs", "5",
                         "-o", tmp_path / name)
        assert done.returncode == 0, done.stderr
        outputs.append(np.load(tmp_path / name))
    np.testing.assert_array_equal(*outputs)


def test_missing_input_is_an_error() -> None:
    done = glensidec("run", EXAMPLES / "small_cnn.gs")
    assert done.returncode == 1
    assert done.stderr.startswith("error: missing input image: give --input NAME=FILE.npy")
    assert "Traceback" not in done.stderr


def test_wrong_input_shape_is_an_error(tmp_path: Path) -> None:
    np.save(tmp_path / "image.npy", np.zeros((1, 1, 8, 8), dtype=np.int8))
    done = glensidec("run", EXAMPLES / "small_cnn.gs", "--input", f"image={tmp_path / 'image.npy'}")
    assert done.returncode == 1
    assert "input 'image'" in done.stderr and "expected int8 (1,1,16,16)" in done.stderr


def test_missing_program_file_names_the_path(tmp_path: Path) -> None:
    done = glensidec("check", tmp_path / "absent.gs")
    assert done.returncode == 1
    assert done.stderr == f"error: no such file: {tmp_path / 'absent.gs'}\n"


def test_type_error_is_located(tmp_path: Path) -> None:
    (tmp_path / "bad.gs").write_text("(input x i8 (shape 2 2))\n(access (access-tensor x) 3)\n")
    done = glensidec("check", tmp_path / "bad.gs")
    assert done.returncode == 1
    assert done.stderr == (f"{tmp_path / 'bad.gs'}:2:27: error: access: axis 3 is out of range "
                           "for ((2,2),()) (rank 2)\n")


def test_usage_errors_exit_2() -> None:
    assert glensidec("check").returncode == 2
    assert glensidec("frobnicate").returncode == 2
    assert glensidec("run", EXAMPLES / "matmul.gs", "--random-inputs", "x").returncode == 2


def test_help_everywhere() -> None:
    for command in ([], ["check"], ["run"], ["fmt"]):
        done = glensidec(*command, "--help")
        assert done.returncode == 0 and "Usage:" in done.stdout


def test_fmt_prints_canonical_text(tmp_path: Path) -> None:
    messy = tmp_path / "messy.gs"
    messy.write_text("(input a f32 (shape 2 3))   ; comment\n(compute   relu\n(access-tensor a))")
    done = glensidec("fmt", messy)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "(input a f32 (shape 2 3))\n\n(compute relu (access-tensor a))\n"


def test_failed_run_leaves_no_output(tmp_path: Path) -> None:
    done = glensidec("run", EXAMPLES / "small_cnn.gs", "-o", tmp_path / "out.npy")
    assert done.returncode == 1
    assert list(tmp_path.iterdir()) == []


def test_input_given_twice_is_an_error(tmp_path: Path) -> None:
    np.save(tmp_path / "image.npy", np.zeros((1, 1, 16, 16), dtype=np.int8))
    option = f"image={tmp_path / 'image.npy'}"
    done = glensidec("run", EXAMPLES / "small_cnn.gs", "--input", option, "--input", option)
    assert (done.returncode, done.stderr) == (1, "error: input 'image' is given twice\n")


@pytest.mark.slow
def test_compile_to_c_matches_the_interpreter(tmp_path: Path) -> None:
    outdir = tmp_path / "cnn"
    done = glensidec("compile", EXAMPLES / "small_cnn.gs", "--array", "8x8", "-o", outdir)
    assert done.returncode == 0, done.stderr
    subprocess.run(["make", "-s", "-C", str(outdir), "OPT=-O0"], check=True, timeout=120)
    program = read_program(EXAMPLES / "small_cnn.gs")
    image = random_inputs(program, seed=9)["image"]
    np.save(tmp_path / "image.npy", image)
    ran = subprocess.run([str(outdir / "model"), f"image={tmp_path / 'image.npy'}",
                          "-o", str(tmp_path / "out.npy")], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "predicted array cycles:" in ran.stdout
    expected = run_program(program, all_tensors(program, {"image": image}))
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


@pytest.mark.slow
def test_compile_rewritten_program_elsewhere_still_finds_its_weights(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "rewritten.gs"
    target.parent.mkdir()
    done = glensidec("compile", EXAMPLES / "small_cnn.gs", "--array", "16x16",
                     "--emit", "rewritten", "-o", target)
    assert done.returncode == 0, done.stderr
    assert "systolic-array" in target.read_text()
    checked = glensidec("run", target, "--random-inputs", "2", "-o", tmp_path / "a.npy")
    original = glensidec("run", EXAMPLES / "small_cnn.gs", "--random-inputs", "2",
                         "-o", tmp_path / "b.npy")
    assert checked.returncode == 0 and original.returncode == 0, checked.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


def test_failed_compile_leaves_no_output_directory(tmp_path: Path) -> None:
    program = tmp_path / "prog.gs"
    program.write_text('(weight w i8 (shape 4 4) "missing.npy")\n'
                       "(compute relu (access-tensor w))\n")
    done = glensidec("compile", program, "--array", "4x4", "-o", tmp_path / "out")
    assert done.returncode == 1
    assert "file not found" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.gs"]


def deep_program(path: Path, depth: int) -> Path:
    """One expression `depth` constructs deep: no lets to keep it shallow."""
    path.write_text("(input x i8 (shape 4 4))\n" + "(compute relu " * depth
                    + "(access-tensor x)" + ")" * depth + "\n")
    return path


@pytest.mark.slow
def test_deeply_nested_program_runs_through_every_command(tmp_path: Path) -> None:
    program = deep_program(tmp_path / "deep.gs", 3000)
    for command in (["check"], ["fmt"], ["run", "--random-inputs", "1"],
                    ["compile", "--array", "4x4", "-o", str(tmp_path / "out")]):
        done = glensidec(command[0], program, *command[1:])
        assert done.returncode == 0, done.stderr[-500:]
    assert glensidec("check", program).stdout == "((4,4),()) i8\n"


@pytest.mark.slow
def test_too_deep_a_program_is_a_clean_error(tmp_path: Path) -> None:
    done = glensidec("check", deep_program(tmp_path / "deeper.gs", 30000))
    assert done.returncode == 1
    assert done.stderr.startswith("error: the program nests more than about 20000 levels")


@pytest.mark.slow
def test_written_array_of_another_size_is_a_located_error(tmp_path: Path) -> None:
    # Glenside's codegen_mlp writes a (systolic-array 2 4 …); compiled for another array
    # size it is the user's error, located at the size, and nothing is written.
    source = tmp_path / "sa.gs"
    source.write_text("(input a i8 (shape 10 2))\n(input w i8 (shape 2 4))\n"
                      "(systolic-array 2 4 (access (access-tensor a) 1) "
                      "(access (access-tensor w) 0))\n")
    done = glensidec("compile", source, "--array", "16x16", "-o", tmp_path / "out")
    assert done.returncode == 1
    assert done.stderr == (f"{source}:3:17: error: systolic-array: a 2x4 array, but the "
                           "program is compiled for --array 16x16 (add 2x4 to --array to "
                           "use it)\n")
    assert "internal" not in done.stderr
    assert not (tmp_path / "out").exists()
    done = glensidec("compile", source, "--array", "2x4", "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
