"""Name hygiene: a user's tensor and let names can never break or change the generated C.

Every buffer is spelled `t_` + its name in C (`glensidec.backend.emit.c_name`), and nothing
else the C code declares or includes starts with `t_`. These programs name their tensors and
lets after C keywords, libc and runtime identifiers, the generated code's own loop indices
and locals, `main`/`argc`, and the language's own words; compiled, built with gcc and run,
they compute what the interpreter computes (issue 27: an ONNX LeNet whose MaxPool output
was named `p1` made `gs_b[…] = p1[p0 * 196 + p1 * 14 …]`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, assert_matches, run_checked

from glensidec.backend.emit import BUFFER_PREFIX
from glensidec.backend.lower import lower_program
from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program

# small_cnn.gs with every name replaced by a hostile one (weights keep their .npz keys)
CNN_NAMES = {"image": "input", "conv_w": "main", "conv_b": "argc", "dense_w": "printf",
             "dense_b": "weight", "conv": "p1", "conv_biased": "int", "activated": "p0",
             "pooled": "let", "logits": "layer"}

# An f32 network over the host's loops and GEMM: im2col packing (gs_b, p0, p1 …), maps
# (x, i0 …), folds (x0, x1), reductions (acc, k0 …), softmax (top, total), fused loops (t0 …)
F32_NETWORK = """\
(input input f32 (shape 1 4 16 16))
(weight weight f32 (shape 8 4 3 3) "w.npz" w)
(let gs_b (compute relu (access-tensor input)))
(let p1 (access-pad (access-pad gs_b zero-padding 2 1 1) zero-padding 3 1 1))
(let main
 (access-transpose
  (compute dot-product
   (access-cartesian-product
    (access (access-tensor weight) 1)
    (access (access-squeeze (access-windows (access p1 1) (shape 4 3 3) (shape 1 1 1)) 1) 3)))
  (list 1 0 2 3)))
(let argc (compute elementwise-add (access-pair main (compute relu main))))
(let x0 (compute elementwise-mul (access-pair argc argc)))
(let printf (compute reduce-max (access-windows (access x0 2) (shape 2 2) (shape 2 2))))
(let acc (compute reduce-sum (access printf 2)))
(let malloc (compute sqrt (compute relu acc)))
(let t0 (compute negative malloc))
(let top (compute relu t0))
(let return (compute softmax (access (access-reshape top (access-shape (shape 8) (shape))) 0)))
(let for (compute relu return))
(let a-b (compute elementwise-add (access-pair for return)))
(let a.b (compute elementwise-add (access-pair a-b return)))
(let a_b (compute elementwise-add (access-pair a.b for)))
(let gs_c (compute elementwise-add (access-pair a_b a-b)))
(let model_run (compute elementwise-sub (access-pair gs_c a.b)))
(let NULL (compute elementwise-mul (access-pair model_run model_run)))
(let constants (compute exp NULL))
(let activations (compute tanh constants))
(let mutable_io (compute sigmoid activations))
(let table (compute relu mutable_io))
(let i0 (compute (clip 0 1) table))
(let x (compute relu i0))
(let gs_array_gemm (compute relu x))
(let model_placeholders (compute negative gs_array_gemm))
(let argv (compute relu model_placeholders))
(let static (compute elementwise-add (access-pair argv x)))
(let INFINITY (compute relu static))
(let total (compute elementwise-add (access-pair INFINITY i0)))
total
"""

IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


def _hostile_cnn(tmp_path: Path) -> Path:
    text = re.sub(r";[^\n]*", "", (EXAMPLES / "small_cnn.gs").read_text())  # old names
    for old, new in CNN_NAMES.items():
        text = re.sub(rf"(?<![\w.-]){re.escape(old)}(?![\w.-])", new, text)
        # a weight keeps its array in small_cnn.npz: the key is the old name
        text = re.sub(rf'(\(weight {new} .*"small_cnn.npz")\)', rf"\1 {old})", text)
    result = text.rindex("(compute elementwise-add")
    text = text[:result] + "(let return " + text[result:].rstrip() + ")\nreturn\n"
    path = tmp_path / "hostile_cnn.gs"
    path.write_text(text)
    (tmp_path / "small_cnn.npz").write_bytes((EXAMPLES / "small_cnn.npz").read_bytes())
    return path


def _hostile_f32(tmp_path: Path) -> Path:
    path = tmp_path / "hostile_f32.gs"
    path.write_text(F32_NETWORK)
    np.savez(tmp_path / "w.npz", w=np.random.default_rng(3).standard_normal(
        (8, 4, 3, 3)).astype(np.float32) * np.float32(0.25))
    return path


def test_the_hostile_programs_keep_their_names(tmp_path: Path) -> None:
    """The programs below really are hostile: their buffers carry the names they were given
    (`a-b`, `a.b` and `a_b` are three buffers: a_b and two numbered ones)."""
    cnn = read_program(_hostile_cnn(tmp_path))
    assert set(CNN_NAMES.values()) <= set(cnn.tensors) | set(cnn.names.values())
    program = read_program(_hostile_f32(tmp_path))
    buffers = set(lower_program(program, check_program(program)).buffers)
    plain = {name for name in [*program.tensors, *program.names.values()]
             if re.fullmatch(r"\w+", name)}
    assert len(plain) == 30 and plain <= buffers, sorted(plain - buffers)
    assert {"a_b", "a_b_1", "a_b_2"} <= buffers


@pytest.mark.slow
@pytest.mark.parametrize(("which", "options"), [
    ("cnn", ["--array", "4x4"]),
    ("cnn", ["--array", "8x8", "--accel"]),
    ("f32", ["--array", "4x4"]),
], ids=["int8-array", "int8-accel", "f32-host"])
def test_hostile_names_compile_build_and_agree_with_the_interpreter(
        which: str, options: list[str], tmp_path: Path) -> None:
    import sys

    path = _hostile_cnn(tmp_path) if which == "cnn" else _hostile_f32(tmp_path)
    program = read_program(path)
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(path), *options,
                 "-o", str(outdir)])
    model_c = (outdir / "model.c").read_text()
    if which == "f32":  # the packing loop of issue 27, now reading the buffer t_p1
        assert re.search(r"gs_b\[[^\]]*\] = t_p1\[p0 \* ", model_c), model_c
    assert re.search(r"\bt_input\b", model_c)
    # nothing model.c includes declares or defines a t_ name: the prefix is the buffers' own
    buffers = set(re.findall(rf"\*const ({BUFFER_PREFIX}\w+) = ", model_c))
    for flags in ([], ["-DGS_TRACE"], ["-DGS_TRACE", "-dM"]):
        unit = run_checked(["gcc", "-E", *flags, "model.c"], cwd=outdir).stdout
        assert {w for w in IDENTIFIER.findall(unit) if w.startswith(BUFFER_PREFIX)} <= buffers
    run_checked(["make", "-s", "-C", str(outdir), "OPT=-O1"])
    inputs = random_inputs(program, seed=11)
    arguments = []
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        arguments.append(f"{name}={tmp_path / f'{name}.npy'}")
    subprocess.run([str(outdir / "model"), *arguments, "-o", str(tmp_path / "c.npy")],
                   check=True, capture_output=True)
    expected = run_program(program, all_tensors(program, inputs))
    assert_matches(np.load(tmp_path / "c.npy"), expected)


@pytest.mark.slow
def test_a_program_file_name_with_a_newline_builds(tmp_path: Path) -> None:
    """The program's file name goes into comments of model.c, model.h and the Makefile: a
    newline in it ended the Makefile's comment line ("missing separator")."""
    import sys

    path = tmp_path / "we\nird\\ $(x) #.gs"
    path.write_text((EXAMPLES / "matmul.gs").read_text())
    outdir = tmp_path / "out"
    run_checked([sys.executable, "-m", "glensidec", "compile", str(path), "--array", "4x4",
                 "-o", str(outdir)])
    run_checked(["make", "-s", "-C", str(outdir), "OPT=-O0"])
    assert (outdir / "Makefile").read_text().startswith(
        "# Makefile - builds the compiled model we?ird\\ $(x) #.gs. Generated")
