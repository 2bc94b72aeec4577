"""The binary32 array: its order of operations, the compiler's `--array RxC:f32`, and the
three-way agreement (interpreter, generated C, RTL) on Glenside's f32 programs.

The RTL's own arithmetic is tested in sim/ (test_fp32_mul, test_fp32_add: random and
edge-case operands against numpy; test_ws_top_f32: whole GEMMs, bits and cycles).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, assert_calls_match_the_model, compile_and_cosimulate

from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig, gemm_cycles, reference_gemm_f32
from glensidec.lang.data import all_tensors, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.opt.extract import parse_array_size, unmapped_products
from glensidec.pipeline import compile_program

GLENSIDE = EXAMPLES / "glenside"


def scalar_array_gemm(A: np.ndarray, B: np.ndarray, D: np.ndarray | None,
                      rows: int) -> np.ndarray:
    """The array's order written out one scalar at a time (an independent reference):
    PE by PE down a column, padding PEs included, then the accumulator."""
    M, K = A.shape
    N = B.shape[1]
    C = np.zeros((M, N), dtype=np.float32)
    folds = -(-K // rows)
    for m in range(M):
        for n in range(N):
            stored = np.float32(0)
            for fold in range(folds):
                psum = np.float32(D[m, n]) if (fold == 0 and D is not None) else np.float32(0)
                for r in range(rows):
                    k = fold * rows + r
                    a, w = (A[m, k], B[k, n]) if k < K else (np.float32(0), np.float32(0))
                    psum = np.float32(psum + np.float32(a * w))
                stored = psum if fold == 0 else np.float32(psum + stored)
            C[m, n] = stored
    return C


def bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("rows", [2, 3, 4])
def test_reference_is_the_scalar_pe_order(rows: int) -> None:
    rng = np.random.default_rng(rows)
    with np.errstate(all="ignore"):
        for M, K, N, with_d in [(3, 7, 2, True), (2, 4, 3, False), (1, 1, 1, True)]:
            A = (rng.standard_normal((M, K)) * 10.0 ** rng.integers(-30, 30, (M, K)))
            B = rng.standard_normal((K, N)).astype(np.float32)
            A = A.astype(np.float32)
            D = rng.standard_normal((M, N)).astype(np.float32) if with_d else None
            got = reference_gemm_f32(A, B, D, rows)
            want = scalar_array_gemm(A, B, D, rows)
            assert np.array_equal(bits(got), bits(want)), (rows, M, K, N)


def test_padding_pes_turn_a_negative_zero_sum_positive() -> None:
    # -1 * 0 = -0; +0 + -0 = +0 in the first PE already, so the sum is +0 however K folds.
    A = np.array([[-1.0]], dtype=np.float32)
    B = np.array([[0.0]], dtype=np.float32)
    D = np.array([[-0.0]], dtype=np.float32)
    # With D = -0: -0 + -0 = -0 in the one real PE, then a padding PE adds +0: +0.
    assert bits(reference_gemm_f32(A, B, D, 2))[0, 0] == 0x00000000
    # A full fold (rows = 1) has no padding PE: the -0 survives.
    assert bits(reference_gemm_f32(A, B, D, 1))[0, 0] == 0x80000000


def test_sum_order_differs_from_a_single_rounding() -> None:
    """The array rounds after every add: the result is not the correctly rounded sum, and
    a different fold size (rows) can give different bits — so the model must follow it."""
    values = np.array([[1e8, 1.0, -1e8, 1.0]], dtype=np.float32)
    ones = np.ones((4, 1), dtype=np.float32)
    by_four = reference_gemm_f32(values, ones, None, 4)[0, 0]  # ((1e8+1)-1e8)+1 = 1
    by_two = reference_gemm_f32(values, ones, None, 2)[0, 0]  # (-1e8+1) + (1e8+1) = 0
    assert (float(by_four), float(by_two)) == (1.0, 0.0)


def test_f32_array_size_parses() -> None:
    config = parse_array_size("16x8:f32")
    assert (config.rows, config.cols, config.element) == (16, 8, "f32")
    assert (config.in_width, config.acc_width) == (32, 32)
    assert parse_array_size("4x4:i8") == parse_array_size("4x4") == ArrayConfig(4, 4)
    # The binary32 PE takes one cycle like the integer one: the same timing.
    assert gemm_cycles(config, 40, 33, 17) == gemm_cycles(ArrayConfig(16, 8), 40, 33, 17)
    for bad in ("4x4:f64", "4x4:", "4:f32"):
        with pytest.raises(GlensideError, match="--array"):
            parse_array_size(bad)


def test_f32_products_map_to_the_f32_array_only() -> None:
    program = read_program(GLENSIDE / "mlp.glenside", GLENSIDE / "mlp.json")
    on_f32 = compile_program(program, parse_array_size("4x4:f32"))
    on_i8 = compile_program(program, parse_array_size("4x4"))
    assert len(on_f32.prediction.invocations) == 3
    assert unmapped_products(on_f32.program.root, on_f32.types, "f32") == []
    assert on_i8.prediction.invocations == []
    assert len(unmapped_products(on_i8.program.root, on_i8.types, "f32")) == 3


@pytest.mark.slow
@pytest.mark.parametrize("example", ["mlp", "conv2d", "matmul", "resnet_block"])
def test_generated_c_sums_in_the_array_order(example: str, tmp_path: Path) -> None:
    """The C model (compiled with -ffp-contract=off) and the interpreter agree in bits."""
    path, shapes = GLENSIDE / f"{example}.glenside", GLENSIDE / f"{example}.json"
    program = read_program(path, shapes)
    compiled = compile_program(program, parse_array_size("4x4:f32"))
    inputs = random_inputs(program, seed=5)
    expected = run_program(compiled.program, all_tensors(compiled.program, inputs),
                           compiled.types)
    outdir = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "glensidec", "compile", str(path), "--shapes",
                    str(shapes), "--array", "4x4:f32", "-o", str(outdir)], check=True,
                   capture_output=True)
    assert "-ffp-contract=off" in (outdir / "Makefile").read_text()
    arguments = []
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
        arguments.append(f"{name}={tmp_path / f'{name}.npy'}")
    subprocess.run(["make", "-s", "-C", str(outdir), "OPT=-O2"], check=True)
    subprocess.run([str(outdir / "model"), *arguments, "-o", str(tmp_path / "c.npy")],
                   check=True, capture_output=True)
    assert np.array_equal(bits(np.load(tmp_path / "c.npy")), bits(expected))


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("example", ["mlp", "conv2d", "matmul", "resnet_block"])
def test_glenside_f32_program_cosimulates_bit_exactly(example: str, tmp_path: Path,
                                                      sim_cache: Path) -> None:
    """Interpreter == C == C with the binary32 RTL array, in bits; cycles as predicted."""
    array = "2x2:f32"  # the smallest binary32 array: its Verilator build is the cost
    path, shapes = GLENSIDE / f"{example}.glenside", GLENSIDE / f"{example}.json"
    program = read_program(path, shapes)
    inputs = random_inputs(program, seed=21)
    compiled = compile_program(program, parse_array_size(array))
    expected = run_program(compiled.program, all_tensors(compiled.program, inputs),
                           compiled.types)
    run = compile_and_cosimulate(path, array, inputs, tmp_path, sim_cache, shapes)
    assert np.array_equal(bits(run.c), bits(expected))
    assert np.array_equal(bits(run.sim), bits(expected))
    assert run.report["calls"]
    assert_calls_match_the_model(run.report)


def _conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """NCHW x OIHW, pad 1, stride 1, in float64: the definition, one output pixel at a time."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((x.shape[0], w.shape[0], x.shape[2], x.shape[3]))
    for i in range(x.shape[2]):
        for j in range(x.shape[3]):
            out[:, :, i, j] = np.einsum("ocyx,ncyx->no", w, padded[:, :, i:i + 3, j:j + 3])
    return out


def test_the_f32_resnet_block_example_is_a_resnet_block() -> None:
    """examples/glenside/resnet_block.glenside computes relu(conv2(relu(conv1(x))) + x),
    and the compiler maps both convolutions to the binary32 array."""
    path, shapes = GLENSIDE / "resnet_block.glenside", GLENSIDE / "resnet_block.json"
    program = read_program(path, shapes)
    inputs = random_inputs(program, seed=3)
    x, w1, w2 = (inputs[name].astype(np.float64) for name in ("x", "weights1", "weights2"))
    expected = np.maximum(_conv3x3(np.maximum(_conv3x3(x, w1), 0), w2) + x, 0)
    compiled = compile_program(program, parse_array_size("2x2:f32"))
    got = run_program(compiled.program, all_tensors(compiled.program, inputs), compiled.types)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())
    assert len(compiled.prediction.invocations) == 2
    assert unmapped_products(compiled.program.root, compiled.types, "f32") == []
