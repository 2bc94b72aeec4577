"""The generated C program against the interpreter: ints bit-exact, floats at 1e-5.

Every case is compiled, built and run once per test process, when a test first asks for it,
on the inputs the interpreter saw. Cases: every example program, every compute type on
its own and in networks, the hardware constructs, and the view/copy lowering rules.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, assert_matches, make_program

from glensidec.backend.lower import LowerOptions
from glensidec.backend.plan import check_no_overlap
from glensidec.frontends import builders as b
from glensidec.hardware.array import ArrayConfig, gemm_cycles, reference_gemm
from glensidec.lang import data
from glensidec.lang.dtypes import LOOKUP_FUNCTIONS
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program, Term
from glensidec.lang.typecheck import check_program
from glensidec.outputs import MANIFEST
from glensidec.pipeline import CompileResult, compile_to_directory
from glensidec.resources import resource_dir

# Every test here builds and runs C programs (the module's `built` fixture alone takes
# minutes): the quick subset (`-m 'not slow'`) checks lowering and C rendering through
# tests/test_constructs.py instead.
pytestmark = pytest.mark.slow

CONFIG = ArrayConfig(8, 8)

# -- cases ----------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    program: Program
    given: dict[str, np.ndarray] = field(default_factory=dict)  # inputs chosen by the case
    options: LowerOptions = field(default_factory=LowerOptions)
    asan: bool = False
    seed: int = 0
    extractor_cycles: int | None = None  # what the rewriter's extraction predicted
    opt: str = "-O0"  # faster builds; the sanitizer builds use -O1


def _example_cases() -> list[Case]:
    cases = [Case(path.stem, read_program(path)) for path in sorted(EXAMPLES.glob("*.gs"))]
    for path in sorted((EXAMPLES / "glenside").glob("*.glenside")):
        cases.append(Case("glenside_" + path.stem, read_program(path, path.with_suffix(".json"))))
    for case in cases:
        case.asan = case.name in ("resnet_block", "small_cnn", "glenside_im2col")
        case.opt = "-O3"  # the examples build exactly as `make` does by default
    return cases


def _extracted_cases() -> list[Case]:
    """Programs as equality saturation extracts them (systolic-array-with-blocking, padded
    reductions): what `glensidec compile` will feed the code generator."""
    try:
        from glensidec.pipeline import compile_program
    except ImportError:  # pragma: no cover - the rewriter is developed alongside
        return []
    cases = []
    for name, path, shapes in (("small_cnn", EXAMPLES / "small_cnn.gs", None),
                               ("im2col", EXAMPLES / "glenside" / "im2col.glenside",
                                EXAMPLES / "glenside" / "im2col.json")):
        compiled = compile_program(read_program(path, shapes), CONFIG)
        cases.append(Case(f"extracted_{name}", compiled.program, asan=True,
                          extractor_cycles=compiled.prediction.array_cycles))
    return cases


def _pair(left: Term, right: Term) -> Term:
    return b.op("access-pair", left, right)


def _unary_cases() -> list[Case]:
    rng = np.random.default_rng(7)
    ints: dict[str, np.ndarray] = {"i8": np.array([[-128, -1, 0, 1, 127, 5]], dtype=np.int8),
            "i16": np.array([[-32768, -1, 0, 1, 32767, 300]], dtype=np.int16),
            "i32": np.array([[-(2**31), -1, 0, 1, 2**31 - 1, 70000]], dtype=np.int32)}
    floats = (rng.standard_normal((3, 6)) * 3).astype(np.float32)
    cases = []
    for dtype, values in [*ints.items(), ("f32", floats)]:
        x = b.access(b.tensor("x"), 1)
        root = _concatenated(b.compute("relu", x), b.compute("negative", x))
        program = make_program(root, {"x": (values.shape, dtype)})
        cases.append(Case(f"relu_negative_{dtype}", program, {"x": values}))
    root = b.compute("sqrt", b.access(b.tensor("x"), 1))
    program = make_program(root, {"x": ((3, 6), "f32")})
    cases.append(Case("sqrt_f32", program, {"x": np.abs(floats)}))
    # The transcendental functions: C's expf/tanhf/erff agree with the interpreter's f64
    # rounded once to within the float tolerance (docs/language.md).
    for name in ("exp", "sigmoid", "tanh", "erf"):
        root = b.compute(name, b.access(b.tensor("x"), 1))
        program = make_program(root, {"x": ((3, 6), "f32")})
        cases.append(Case(f"{name}_f32", program, {"x": floats}))
    root = b.compute("clip", b.access(b.tensor("x"), 1), -3, 100)
    cases.append(Case("clip_i8", make_program(root, {"x": ((4, 16), "i8")})))
    # Bounds at the dtype's own limits must not become always-false comparisons.
    for low, high in [(0, 127), (-128, 5), (-128, 127)]:
        root = b.compute("clip", b.access(b.tensor("x"), 1), low, high)
        cases.append(Case(f"clip_i8_{low}_{high}".replace("-", "m"),
                          make_program(root, {"x": ((4, 16), "i8")})))
    root = b.compute("clip", b.access(b.tensor("x"), 1), -0.5, 1.25)
    cases.append(Case("clip_f32", make_program(root, {"x": ((4, 16), "f32")})))
    # int8 lookup tables: every one of the 256 entries of each function, one row per function
    every_i8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    root = _concatenated(*(b.compute("lookup", b.access(b.tensor("x"), 1), name, 0.05, 3,
                                     0.02, -7)
                           for name in LOOKUP_FUNCTIONS))
    cases.append(Case("lookup_i8", make_program(root, {"x": ((1, 256), "i8")}),
                      {"x": every_i8}))
    return cases


def _cast_cases() -> list[Case]:
    special = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 127.5, 128.0, -129.0, 1e10, -1e10,
                        np.nan, np.inf, -np.inf, 3.7, -3.7, 40000.5], dtype=np.float32)
    big = np.array([-(2**31), -40000, -129, -128, 0, 127, 128, 40000, 2**31 - 1],
                   dtype=np.int32)
    cases = []
    for source, target, values in (("f32", "i8", special), ("f32", "i16", special),
                                   ("f32", "i32", special), ("i32", "i8", big),
                                   ("i32", "i16", big), ("i32", "f32", big),
                                   ("i8", "i32", None), ("i16", "f32", None)):
        root = b.compute("cast", b.access(b.tensor("x"), 0), target)
        shape = values.shape if values is not None else (5, 7)
        given = {"x": values} if values is not None else {}
        cases.append(Case(f"cast_{source}_{target}", make_program(root, {"x": (shape, source)}),
                          given))
    return cases


def _requantize_cases() -> list[Case]:
    values = np.concatenate([np.array([-(2**31), 2**31 - 1, -5, 5, 0, 8, -8], dtype=np.int32),
                             np.random.default_rng(3).integers(-(2**20), 2**20, 57,
                                                               dtype=np.int32)])
    params = ((1, 0, 4, 0), (1073741824, 3, 40, -7), (-3, 1, 0, 5), (2**31 - 1, 0, 62, 127))
    root = _concatenated(*(b.compute("requantize", b.access(b.tensor("x"), 0), *p)
                           for p in params))
    cases = [Case("requantize", make_program(root, {"x": ((64,), "i32")}), {"x": values})]
    # per channel: accumulators ((4,16),()) paired with one multiplier per row, broadcast
    multipliers = b.broadcast(b.op("access-insert-axis", b.tensor("m"), 1), (4, 16), ())
    root = b.compute("requantize-per-channel", _pair(b.access(b.tensor("x"), 2), multipliers),
                     2, 20, 3)
    given = {"x": values.reshape(4, 16),
             "m": np.array([1 << 20, -(1 << 19), 2**31 - 1, 12345], dtype=np.int32)}
    cases.append(Case("requantize_per_channel",
                      make_program(root, {"x": ((4, 16), "i32"), "m": ((4,), "i32")}), given))
    return cases


def _concatenated(*results: Term) -> Term:
    """Several equally shaped results stacked along axis 0: one C build checks them all."""
    root = results[0]
    for result in results[1:]:
        root = b.op("access-concatenate", root, result, 0)
    return root


def _fold_cases() -> list[Case]:
    """Per dtype, add/sub/mul/div of the same operands, stacked."""
    cases = []
    for dtype in ("i8", "i16", "i32", "f32"):
        operands = _pair(b.access(b.tensor("x"), 1), b.access(b.tensor("y"), 1))
        root = _concatenated(*(b.compute(f"elementwise-{op}", operands)
                               for op in ("add", "sub", "mul", "div")))
        program = make_program(root, {"x": ((4, 32), dtype), "y": ((4, 32), dtype)})
        given: dict[str, np.ndarray] = {}
        if dtype != "f32":
            low = {"i8": -(2**7), "i16": -(2**15), "i32": -(2**31)}[dtype]
            x = data.random_tensor(program.tensors["x"], np.random.default_rng(1))
            y = data.random_tensor(program.tensors["y"], np.random.default_rng(2))
            x[0, :4], y[0, :4] = low, [-1, 0, 1, 0]  # MIN / -1 wraps; x / 0 is 0
            y[1, :] = 0
            given = {"x": x, "y": y}
        cases.append(Case(f"add_sub_mul_div_{dtype}", program, given))
    # a three-member tuple from a real tensor: ((4),(3,5)), folded left to right
    root = b.compute("elementwise-sub", b.access(b.tensor("t"), 1))
    cases.append(Case("sub_tuple3_i16", make_program(root, {"t": ((4, 3, 5), "i16")})))
    return cases


def _reduce_cases() -> list[Case]:
    """Per dtype, the reductions whose results share a dtype, stacked."""
    cases = []
    for dtype in ("i8", "i16", "i32", "f32"):
        x = b.access(b.tensor("x"), 1)
        same_dtype = [b.compute("reduce-max", x), b.compute("reduce-mean", x)]
        if dtype in ("i32", "f32"):  # sums keep these dtypes
            same_dtype.append(b.compute("reduce-sum", x))
        else:
            root = b.compute("reduce-sum", x)
            cases.append(Case(f"reduce_sum_{dtype}",
                              make_program(root, {"x": ((3, 4, 7), dtype)})))
        cases.append(Case(f"reductions_{dtype}", make_program(_concatenated(*same_dtype),
                                                          {"x": ((3, 4, 7), dtype)})))
    root = b.compute("reduce-sum", b.access(b.tensor("x"), 2))  # no item dims: a widening copy
    cases.append(Case("reduce_sum_empty_item_i8", make_program(root, {"x": ((3, 4), "i8")})))
    root = b.compute("reduce-sum", b.access(b.tensor("x"), 0))  # the whole tensor: a scalar
    cases.append(Case("reduce_sum_to_scalar_i16", make_program(root, {"x": ((3, 4), "i16")})))
    root = b.compute("softmax", b.access(b.tensor("x"), 2))
    cases.append(Case("softmax_f32", make_program(root, {"x": ((2, 3, 10), "f32")})))
    return cases


def _dot_cases() -> list[Case]:
    cases = []
    for dtype in ("i8", "i16", "i32", "f32"):
        root = b.matmul(b.access(b.tensor("a"), 1), b.access(b.transpose(b.tensor("w"), 1, 0), 1))
        program = make_program(root, {"a": ((12, 40), dtype), "w": ((40, 10), dtype)})
        cases.append(Case(f"matmul_{dtype}", program))
        root = b.compute("dot-product", _pair(b.access(b.tensor("x"), 1),
                                              b.access(b.tensor("y"), 1)))
        cases.append(Case(f"dot_pair_{dtype}",
                          make_program(root, {"x": ((6, 3, 5), dtype), "y": ((6, 3, 5), dtype)})))
    root = b.matmul(b.access(b.tensor("a"), 1), b.access(b.tensor("w"), 1))
    cases.append(Case("matmul_i8_on_host", make_program(root, {"a": ((9, 33), "i8"),
                                                           "w": ((7, 33), "i8")}),
                      options=LowerOptions(offload_i8_gemm=False)))
    root = b.compute("dot-product", b.access(b.tensor("t"), 1))  # three members
    cases.append(Case("dot_tuple3_i32", make_program(root, {"t": ((4, 3, 6), "i32")})))
    return cases


def _systolic_cases() -> list[Case]:
    def array(construct: str, rows: int, cols: int, a_axis: int = 1) -> Term:
        return b.op(construct, rows, cols, b.access(b.tensor("a"), a_axis),
                    b.access(b.tensor("w"), 0))
    return [
        Case("systolic_array", make_program(array("systolic-array", 4, 4),
                                        {"a": ((10, 4), "i8"), "w": ((4, 4), "i8")})),
        Case("systolic_array_vector", make_program(array("systolic-array", 6, 3, 0),
                                               {"a": ((6,), "i8"), "w": ((6, 3), "i8")})),
        Case("systolic_blocking", make_program(array("systolic-array-with-blocking", 4, 4),
                                           {"a": ((20, 24), "i8"), "w": ((24, 12), "i8")}),
             asan=True),
        Case("systolic_blocking_deep_k", make_program(array("systolic-array-with-blocking", 8, 8),
                                                  {"a": ((3, 64), "i8"), "w": ((64, 16), "i8")})),
        Case("systolic_blocking_f32_host",
             make_program(array("systolic-array-with-blocking", 4, 4),
                      {"a": ((5, 8), "f32"), "w": ((8, 4), "f32")})),
        Case("systolic_blocking_transposed_weights",
             make_program(b.op("systolic-array-with-blocking", 4, 4, b.access(b.tensor("a"), 1),
                           b.access(b.transpose(b.tensor("w"), 1, 0), 0)),
                      {"a": ((7, 8), "i8"), "w": ((8, 8), "i8")})),
    ]


def _view_cases() -> list[Case]:
    x = b.tensor("x")
    cases = []
    # a reshape of a transpose that splits an axis unevenly: must copy
    root = b.compute("relu", b.reshape(b.transpose(x, 1, 0), (2,), (3,)))
    cases.append(Case("reshape_needs_copy", make_program(root, {"x": ((2, 3), "i16")})))
    root = b.compute("negative", b.op("access-concatenate", b.access(x, 1),
                                      b.access(b.tensor("y"), 1), 1))
    cases.append(Case("concatenate", make_program(root, {"x": ((3, 4), "i32"),
                                                     "y": ((3, 5), "i32")})))
    root = b.compute("relu", b.op("access-slice", b.op("access-move-axis", b.access(x, 1), 0, 2),
                                  1, 1, 3))
    cases.append(Case("slice_move_axis", make_program(root, {"x": ((2, 4, 5), "f32")})))
    pooled = b.max_pool_nchw(x, (3, 3), (2, 2), (1, 1, 1, 1))
    program = make_program(pooled, {"x": ((1, 2, 9, 9), "f32")})
    cases.append(Case("max_pool_min_padding_f32", program))
    cases.append(Case("max_pool_min_padding_i8", make_program(pooled, {"x": ((1, 2, 9, 9), "i8")})))
    # a product nobody fuses: materialised
    root = b.compute("relu", b.op("access-cartesian-product", b.access(x, 1),
                                  b.access(b.tensor("y"), 1)))
    cases.append(Case("product_materialized", make_program(root, {"x": ((3, 4), "i8"),
                                                              "y": ((2, 4), "i8")})))
    root = b.compute("reduce-sum", b.op("access-pair", b.access(x, 1), b.access(x, 1)))
    cases.append(Case("pair_materialized_shared", make_program(root, {"x": ((3, 4), "i8")})))
    root = b.op("access-shift-right", b.op("access-flatten", b.access(x, 2)))  # result is a view
    cases.append(Case("result_is_input_view", make_program(root, {"x": ((2, 3, 4), "i8")})))
    literal = b.op("access-literal", b.op("literal", 2.5))
    spread = b.broadcast(b.op("access-insert-axis", b.op("access-insert-axis", literal, 0), 0),
                         (3, 4), ())
    root = b.compute("elementwise-mul", _pair(b.access(x, 2), spread))
    cases.append(Case("literal_broadcast", make_program(root, {"x": ((3, 4), "f32")})))
    nhwc = b.conv2d_nhwc(x, b.tensor("w"), 3, (3, 3), (2, 1), (1, 0, 1, 2))
    cases.append(Case("conv2d_nhwc_i8", make_program(nhwc, {"x": ((1, 7, 6, 3), "i8"),
                                                        "w": ((3, 3, 3, 4), "i8")})))
    depthwise = b.depthwise_conv2d_nchw(x, b.tensor("w"), 1, 3, (5, 5), (3, 3),
                                        pads=(1, 1, 1, 1))
    cases.append(Case("depthwise_f32", make_program(depthwise, {"x": ((1, 3, 5, 5), "f32"),
                                                            "w": ((3, 1, 3, 3), "f32")})))
    return cases


def _random_view_program(seed: int) -> Program:
    """A random chain of re-views and copies over one input, then a compute: the view
    algebra, the copy fallbacks and loop-nest refinement all meet here."""
    import math

    from glensidec.lang.typecheck import AccessType
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 6, int(rng.integers(2, 5))))
    dtype = str(rng.choice(["i8", "i16", "f32"]))
    term: Term = b.access(b.tensor("x"), 0)
    full: tuple[int, ...] = shape
    for _ in range(int(rng.integers(3, 7))):
        rank = len(full)
        choice = int(rng.integers(0, 8))
        if choice == 0:
            candidate = b.transpose(term, *(int(a) for a in rng.permutation(rank)))
        elif choice == 1:
            axis = int(rng.integers(rank))
            low = int(rng.integers(full[axis]))
            candidate = b.op("access-slice", term, axis, low,
                             int(rng.integers(low + 1, full[axis] + 1)))
        elif choice == 2:
            split = int(rng.integers(0, rank + 1))
            candidate = b.op("access-flatten", b.access(term, split))
        elif choice == 3:
            size, dims = math.prod(full), []
            for dim in rng.integers(1, 5, 3):
                if size % int(dim) == 0:
                    dims.append(int(dim))
                    size //= int(dim)
            candidate = b.reshape(term, (), (*dims, size))
        elif choice == 4:
            candidate = b.pad(term, int(rng.integers(rank)), 1, int(rng.integers(0, 3)),
                              str(rng.choice(["zero-padding", "min-padding"])))
        elif choice == 5:
            split = int(rng.integers(0, rank))
            window = tuple(int(rng.integers(1, d + 1)) for d in full[split:])
            strides = tuple(int(rng.integers(1, 3)) for _ in window)
            candidate = b.op("access-windows", b.access(term, split), b.shape(*window),
                             b.shape(*strides))
        elif choice == 6:
            axis = int(rng.integers(rank + 1))
            expanded = b.op("access-insert-axis", b.access(term, 0), axis)
            candidate = b.broadcast(expanded, (), (*full[:axis], 3, *full[axis:]))
        else:
            candidate = b.op("access-move-axis", term, int(rng.integers(rank)),
                             int(rng.integers(rank)))
        try:
            program = make_program(candidate, {"x": (shape, dtype)})
        except Exception:  # a random op that does not type-check: skip it
            continue
        result = check_program(program)[program.root]
        assert isinstance(result, AccessType)
        if math.prod(result.full) > 4000:
            continue
        term, full = candidate, result.full
    split = int(rng.integers(0, len(full) + 1))
    final = str(rng.choice(["relu", "negative", "reduce-max", "reduce-sum"]))
    return make_program(b.compute(final, b.access(term, split)), {"x": (shape, dtype)})


def _network_cases() -> list[Case]:
    """Compute types composed: dense → bias → relu → softmax; mean-pool → requantize."""
    hidden = b.dense(b.access(b.tensor("x"), 1), b.tensor("w"))
    biased = b.channel_bias(hidden, b.tensor("bias"), (4, 10), channel_axis=1)
    root = b.compute("softmax", b.access(b.compute("relu", biased), 1))
    mlp = make_program(root, {"x": ((4, 20), "f32"), "w": ((10, 20), "f32"),
                              "bias": ((10,), "f32")})
    conv = b.conv2d_nchw(b.tensor("x"), b.tensor("w"), 2, (3, 3), (1, 1), (1, 1, 1, 1))
    pooled = b.compute("reduce-mean", b.access(conv, 2))
    quantized = b.compute("clip", b.compute("requantize", pooled, 3, 0, 5, -2), -100, 100)
    quant = make_program(quantized, {"x": ((1, 2, 6, 6), "i8"), "w": ((5, 2, 3, 3), "i8")})
    return [Case("mlp_softmax_f32", mlp), Case("conv_mean_requantize_i8", quant, asan=True)]


def _host_gemm_cases() -> list[Case]:
    """f32 products big enough for the host GEMM (host_gemm.c): a convolution (weights in
    place, im2col packed, stride 2), a dense layer (weights transposed by packing, edge
    blocks in M and N) and a depthwise layer (channels as GEMM batches)."""
    x, w = b.tensor("x"), b.tensor("w")
    conv = b.conv2d_nchw(x, w, 8, (3, 3), (2, 1), (1, 1, 1, 1))
    dense = b.dense(b.access(x, 1), w)
    depthwise = b.depthwise_conv2d_nchw(x, w, 1, 16, (20, 20), (3, 3), pads=(1, 1, 1, 1))
    return [
        Case("gemm_conv_f32", make_program(conv, {"x": ((1, 8, 23, 21), "f32"),
                                                  "w": ((19, 8, 3, 3), "f32")}), asan=True),
        Case("gemm_dense_f32", make_program(dense, {"x": ((41, 300), "f32"),
                                                    "w": ((37, 300), "f32")}), asan=True),
        Case("gemm_depthwise_f32", make_program(depthwise, {"x": ((1, 16, 20, 20), "f32"),
                                                            "w": ((16, 1, 3, 3), "f32")})),
    ]


def all_cases() -> list[Case]:
    return [*_example_cases(), *_extracted_cases(), *_unary_cases(), *_cast_cases(),
            *_requantize_cases(),
            *_fold_cases(), *_reduce_cases(), *_dot_cases(), *_systolic_cases(),
            *_view_cases(), *_network_cases(), *_host_gemm_cases(),
            *(Case(f"random_views_{seed}", _random_view_program(seed)) for seed in range(12))]


CASES = all_cases()

# -- building and running -------------------------------------------------------------


@dataclass
class Built:
    case: Case
    outdir: Path
    result: CompileResult
    expected: np.ndarray
    input_args: list[str]
    stdout: str = ""
    output: np.ndarray | None = None
    asan_stdout: str = ""
    asan_output: np.ndarray | None = None


def _make(outdir: Path, target: str, opt: str) -> None:
    completed = subprocess.run(["make", "-s", "-C", str(outdir), f"OPT={opt}", target],
                               capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def _run(executable: Path, args: list[str], out: Path) -> tuple[str, np.ndarray]:
    completed = subprocess.run([str(executable), *args, "-o", str(out)], capture_output=True,
                               text=True)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout, np.load(out)


def _prepare(case: Case, root: Path) -> Built:
    types = check_program(case.program)
    generator = np.random.default_rng(case.seed)
    inputs = {decl.name: case.given.get(decl.name, data.random_tensor(decl, generator))
              for decl in case.program.inputs()}
    weights = data.load_weights(case.program)
    expected = run_program(case.program, {**weights, **inputs}, types)
    outdir = root / case.name
    result = compile_to_directory(case.program, types, outdir, CONFIG, case.options, weights)
    args = []
    for name, array in inputs.items():
        path = root / f"{case.name}.{name}.npy"
        np.save(path, array)
        args.append(f"{name}={path}")
    return Built(case, outdir, result, expected, args)


def _build_and_run(built: Built) -> Built:
    _make(built.outdir, "model", built.case.opt)
    built.stdout, built.output = _run(built.outdir / "model", built.input_args,
                                      built.outdir / "out.npy")
    if built.case.asan:
        _make(built.outdir, "asan", "-O1")
        built.asan_stdout, built.asan_output = _run(built.outdir / "model_asan",
                                                    built.input_args, built.outdir / "asan.npy")
    return built


class BuiltCases(dict[str, Built]):
    """The cases compiled, built and run on first use, once per test process. Building on
    demand lets pytest-xdist spread the builds over its workers with the tests that need
    them; built up front, every worker built every case."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.compiled: dict[str, Built] = {}

    def compile(self, name: str) -> Built:
        """The case compiled to C (not built or run)."""
        if name not in self.compiled:
            self.compiled[name] = _prepare(CASES_BY_NAME[name], self.root)
        return self.compiled[name]

    def __missing__(self, name: str) -> Built:
        self[name] = _build_and_run(self.compile(name))
        return self[name]


CASES_BY_NAME = {case.name: case for case in CASES}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> BuiltCases:
    return BuiltCases(tmp_path_factory.mktemp("emit"))


# -- equivalence ----------------------------------------------------------------------


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert_matches(actual, expected)


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_generated_c_matches_the_interpreter(built: dict[str, Built], name: str) -> None:
    run = built[name]
    assert run.output is not None
    assert_same(run.output, run.expected)


@pytest.mark.parametrize("name", [case.name for case in CASES if case.asan])
def test_sanitizer_build_runs_clean_and_agrees(built: dict[str, Built], name: str) -> None:
    run = built[name]
    assert run.asan_output is not None
    assert_same(run.asan_output, run.expected)


def test_every_compute_type_is_covered() -> None:
    from glensidec.lang.constructs import COMPUTE_TYPES
    seen = set()
    for case in CASES:
        for term in _terms(case.program.root):
            if term.op == "compute":
                seen.add(term.args[0].name)  # type: ignore[union-attr]
    assert seen == set(COMPUTE_TYPES)


def _terms(root: Term) -> list[Term]:
    from glensidec.lang.terms import postorder
    return postorder(root)


def test_build_options_keep_the_result_and_repeat_reports_times(built: dict[str, Built],
                                                                tmp_path: Path) -> None:
    """make NATIVE=1 THREADS=2 (OpenMP) computes the same bits; --repeat N prints the
    min and median ms per inference and still describes one inference's array calls."""
    run = built["resnet_block"]
    copy = tmp_path / "resnet_block"
    shutil.copytree(run.outdir, copy)
    subprocess.run(["make", "-s", "-C", str(copy), "clean"], check=True, capture_output=True)
    completed = subprocess.run(["make", "-s", "-C", str(copy), "NATIVE=1", "THREADS=2"],
                               capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert "-march=native" in (copy / ".build-flags").read_text()
    assert "-fopenmp" in (copy / ".build-flags").read_text()
    stdout, output = _run(copy / "model", [*run.input_args, "--repeat", "5"], copy / "o.npy")
    assert_same(output, run.expected)
    timing = re.search(r"inference ms: min ([0-9.]+) median ([0-9.]+) over 5 runs\n", stdout)
    assert timing is not None, stdout
    assert 0 < float(timing.group(1)) <= float(timing.group(2))
    assert re.search(r"inference cpu ms: min [0-9.]+ median [0-9.]+\n", stdout), stdout
    cycles = re.findall(r"predicted array cycles: (\d+)", stdout)
    assert cycles == re.findall(r"predicted array cycles: (\d+)", run.stdout)
    rejected = subprocess.run([str(copy / "model"), *run.input_args, "--repeat", "0"],
                              capture_output=True, text=True)
    assert rejected.returncode == 1 and "--repeat takes a count" in rejected.stderr


@pytest.mark.parametrize("name", ["gemm_conv_f32", "gemm_dense_f32", "gemm_depthwise_f32"])
def test_big_f32_products_go_through_the_host_gemm(built: dict[str, Built], name: str) -> None:
    assert "gs_gemm_f32(" in (built[name].outdir / "model.c").read_text()


def test_resnet_block_is_nontrivial(built: dict[str, Built]) -> None:
    """The block's output is neither all zero nor saturated: the comparison means something."""
    run = built["resnet_block"]
    assert run.output is not None
    assert 0.05 < float(np.mean(run.output > 0)) < 0.95
    assert float(np.mean(np.abs(run.output.astype(np.int32)) == 127)) < 0.5


# -- the array calls and their cycles ---------------------------------------------------


@pytest.mark.parametrize("name", [c.name for c in CASES if c.name.startswith((
    "systolic", "small_cnn", "resnet", "extracted", "matmul_i8", "glenside_im2col"))])
def test_predicted_cycles_equal_the_python_cycle_model(built: dict[str, Built], name: str
                                                       ) -> None:
    run = built[name]
    calls = run.result.lowered.array_calls()
    expected = sum(gemm_cycles(CONFIG, call.m, call.k, call.n) for call in calls)
    assert f"predicted array cycles: {expected}\n" in run.stdout
    assert f"array calls: {len(calls)}\n" in run.stdout
    if name not in ("systolic_blocking_f32_host", "matmul_i8_on_host"):
        assert calls and expected > 0


@pytest.mark.parametrize("name", [c.name for c in CASES if c.extractor_cycles is not None])
def test_extracted_programs_cost_what_the_extractor_predicted(built: dict[str, Built],
                                                               name: str) -> None:
    run = built[name]
    assert f"predicted array cycles: {run.case.extractor_cycles}\n" in run.stdout
    assert run.result.lowered.array_calls()


def test_hardware_constructs_run_on_the_array(built: dict[str, Built]) -> None:
    for name in ("systolic_array", "systolic_array_vector", "systolic_blocking"):
        assert len(built[name].result.lowered.array_calls()) == 1
    assert not built["systolic_blocking_f32_host"].result.lowered.array_calls()
    assert not built["matmul_i8_on_host"].result.lowered.array_calls()


RUNTIME_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "array_runtime.h"
/* argv: M K N file — file holds A (int8), B (int8), D (int32); prints cycles, writes C. */
int main(int argc, char **argv) {
  long M = atol(argv[1]), K = atol(argv[2]), N = atol(argv[3]);
  int8_t *A = malloc((size_t)(M * K)), *B = malloc((size_t)(K * N));
  int32_t *D = malloc(sizeof(int32_t) * (size_t)(M * N));
  int32_t *C = malloc(sizeof(int32_t) * (size_t)(M * N));
  FILE *in = fopen(argv[4], "rb"), *out;
  if (argc != 6 || !A || !B || !C || !D || !in) return 3;
  if (fread(A, 1, (size_t)(M * K), in) != (size_t)(M * K)) return 4;
  if (fread(B, 1, (size_t)(K * N), in) != (size_t)(K * N)) return 4;
  if (fread(D, 4, (size_t)(M * N), in) != (size_t)(M * N)) return 4;
  fclose(in);
  int32_t *kept = malloc(sizeof(int32_t) * (size_t)(M * N));
  int pass;
  if (!kept) return 3;
  if (gs_array_gemm(M, K, N, A, B, D, C) != 0) return 5;
  /* B declared constant: packed on the first call, from the kept copy on the second */
  gs_array_declare_constants(B, K * N);
  for (pass = 0; pass < 2; ++pass) {
    if (gs_array_gemm_model(M, K, N, A, B, D, kept) != 0) return 5;
    if (memcmp(kept, C, sizeof(int32_t) * (size_t)(M * N)) != 0) return 6;
  }
  gs_array_declare_constants(NULL, 0);
  out = fopen(argv[5], "wb");
  fwrite(C, 4, (size_t)(M * N), out);
  fclose(out);
  printf("%lld\n", gs_array_predicted_cycles);
  free(A); free(B); free(C); free(D); free(kept);
  return 0;
}
"""

CYCLE_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "array_runtime.h"
int main(int argc, char **argv) {
  int i;
  for (i = 1; i + 2 < argc; i += 3)
    printf("%lld\n", gs_gemm_cycles(atol(argv[i]), atol(argv[i + 1]), atol(argv[i + 2])));
  return 0;
}
"""


def _runtime_build(tmp_path: Path, config: ArrayConfig, driver: str,
                   extra_flags: tuple[str, ...] = ()) -> Path:
    from glensidec.backend.emit import render_files
    from glensidec.backend.lower import lower_program
    from glensidec.backend.plan import plan_memory
    program = make_program(b.compute("relu", b.access(b.tensor("x"), 0)), {"x": ((2,), "i8")})
    lowered = lower_program(program, check_program(program))
    files = render_files(program, lowered, plan_memory(lowered), config, {})
    for name in ("array_runtime.c", "array_runtime.h"):
        (tmp_path / name).write_bytes(files[name])
    (tmp_path / "driver.c").write_text(driver)
    executable = tmp_path / "driver"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", *extra_flags,
                    "-o", str(executable), str(tmp_path / "driver.c"),
                    str(tmp_path / "array_runtime.c")], check=True)
    return executable


@pytest.mark.parametrize("config", [ArrayConfig(8, 8), ArrayConfig(4, 16, acc_depth=8),
                                    ArrayConfig(16, 4, acc_depth=3)])
def test_c_cycle_model_equals_python(tmp_path: Path, config: ArrayConfig) -> None:
    rng = np.random.default_rng(11)
    shapes = [(1, 1, 1), (1, 512, 10), (256, 9, 8), (30, 70, 45), (1000, 33, 17)]
    for _ in range(40):
        m, k, n = (int(v) for v in rng.integers(1, 80, 3))
        shapes.append((m, k, n))
    executable = _runtime_build(tmp_path, config, CYCLE_DRIVER)
    args = [str(v) for shape in shapes for v in shape]
    printed = subprocess.run([str(executable), *args], check=True, capture_output=True,
                             text=True).stdout.split()
    assert [int(v) for v in printed] == [gemm_cycles(config, *shape) for shape in shapes]


@pytest.mark.parametrize("flags", [(), ("-DGS_NO_VNNI",), ("-DGS_PORTABLE_ONLY",), ("-O3",)],
                         ids=["dispatched", "no-vnni", "portable-only", "O3"])
def test_runtime_gemm_is_bit_exact_with_d(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """The C model against numpy, in each of its kernels the CPU can run (dispatched: the
    VNNI one on a CPU with AVX-512 VNNI, else AVX2; no-vnni: AVX2 where present; the
    portable C): edge blocks in M and N, K past one VNNI slice (GS_VNNI_KC) and past the
    portable kernel's exact-int32 run (GS_I8_KC), so the sum itself wraps modulo 2^32."""
    rng = np.random.default_rng(5)
    executable = _runtime_build(tmp_path, CONFIG, RUNTIME_DRIVER, flags)
    for m, k, n in ((3, 5, 7), (17, 300, 9), (1, 1, 1), (9, 37, 300), (5, 140_000, 3)):
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        w = rng.integers(-128, 128, (k, n)).astype(np.int8)
        d = rng.integers(-(2**31), 2**31, (m, n), dtype=np.int64).astype(np.int32)
        a[0, :] = -128
        w[:, 0] = -128
        d[0, 0] = 2**31 - 1  # forces a wrap
        (tmp_path / "in.bin").write_bytes(a.tobytes() + w.tobytes() + d.tobytes())
        printed = subprocess.run([str(executable), str(m), str(k), str(n),
                                  str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                                 check=True, capture_output=True, text=True).stdout
        c = np.fromfile(tmp_path / "out.bin", dtype=np.int32).reshape(m, n)
        np.testing.assert_array_equal(c, reference_gemm(a, w, d))
        assert int(printed) == gemm_cycles(CONFIG, m, k, n)


GEMM_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "host_gemm.h"
/* argv: M N K file out — A (M x K) then B (K x N), f32; C gets leading dimension N + 3 */
int main(int argc, char **argv) {
  long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]), ldc = N + 3, i;
  float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N));
  float *C = malloc(sizeof(float) * (size_t)(M * ldc));
  FILE *in = fopen(argv[4], "rb"), *out;
  if (argc != 6 || !A || !B || !C || !in) return 3;
  if (fread(A, 4, (size_t)(M * K), in) != (size_t)(M * K)) return 4;
  if (fread(B, 4, (size_t)(K * N), in) != (size_t)(K * N)) return 4;
  fclose(in);
  for (i = 0; i < M * ldc; ++i) C[i] = 12345.0f; /* every C element must be overwritten */
  if (gs_gemm_f32(M, N, K, A, K, B, N, C, ldc, 0) != 0) return 5;
  for (i = 0; i < M * ldc; ++i) C[i] = 12345.0f;
  if (gs_gemm_f32(M, N, K, A, K, B, N, C, ldc, 1) != 0) return 5; /* A packed and cached */
  for (i = 0; i < M * ldc; ++i) C[i] = 12345.0f;
  if (gs_gemm_f32(M, N, K, A, K, B, N, C, ldc, 1) != 0) return 5; /* from the cache */
  out = fopen(argv[5], "wb");
  for (i = 0; i < M; ++i) fwrite(C + i * ldc, 4, (size_t)N, out);
  fclose(out);
  free(A); free(B); free(C);
  return 0;
}
"""


@pytest.mark.parametrize("flags", [(), ("-DGS_NO_AVX512",), ("-DGS_PORTABLE_ONLY",)],
                         ids=["dispatched", "no-avx512", "portable"])
def test_host_gemm_matches_numpy(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """gs_gemm_f32 in each kernel the CPU can run (dispatched: AVX-512 pairs of panels
    where present; no-avx512: AVX2; portable C) on edge shapes (not multiples of the
    4 x 16 micro-tile or of a pair of panels, K past one 256-deep slice, M past one 128-row
    block, N past one 2048-column block): f32 sums within 1e-5 of the largest |C|
    (docs/codegen.md)."""
    from glensidec.backend.emit import render_files
    from glensidec.backend.lower import lower_program
    from glensidec.backend.plan import plan_memory
    program = make_program(b.compute("relu", b.access(b.tensor("x"), 0)), {"x": ((2,), "i8")})
    lowered = lower_program(program, check_program(program))
    files = render_files(program, lowered, plan_memory(lowered), CONFIG, {})
    for name in ("host_gemm.c", "host_gemm.h", "array_runtime.h"):
        (tmp_path / name).write_bytes(files[name])
    (tmp_path / "driver.c").write_text(GEMM_DRIVER)
    executable = tmp_path / "driver"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all", *flags,
                    "-o", str(executable), str(tmp_path / "driver.c"),
                    str(tmp_path / "host_gemm.c")], check=True)
    rng = np.random.default_rng(3)
    for m, n, k in ((1, 1, 1), (5, 17, 3), (130, 33, 300), (7, 2100, 20), (4, 16, 256),
                    (8, 64, 40), (6, 47, 9)):
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        (tmp_path / "in.bin").write_bytes(a.tobytes() + w.tobytes())
        subprocess.run([str(executable), str(m), str(n), str(k), str(tmp_path / "in.bin"),
                        str(tmp_path / "out.bin")], check=True)
        c = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(m, n)
        exact = a.astype(np.float64) @ w.astype(np.float64)
        np.testing.assert_allclose(c, exact, rtol=0, atol=1e-5 * float(np.abs(exact).max()))


SEAM_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "array_runtime.h"
#include "model.h"
/* A stand-in for the RTL backend: counts calls, then defers to the C model. */
static long calls = 0;
static int counting_backend(long M, long K, long N, const int8_t *A, const int8_t *B,
                            const int32_t *D, int32_t *C) {
  ++calls;
  return gs_array_gemm_model(M, K, N, A, B, D, C);
}
static int failing_backend(long M, long K, long N, const int8_t *A, const int8_t *B,
                           const int32_t *D, int32_t *C) {
  (void)M; (void)K; (void)N; (void)A; (void)B; (void)D; (void)C;
  return 7;
}
int main(void) {
  uint8_t *constants = calloc(MODEL_CONSTANTS_SIZE + 1, 1);
  uint8_t *io = calloc(MODEL_MUTABLE_SIZE + 1, 1), *act = calloc(MODEL_ACTIVATIONS_SIZE + 1, 1);
  int ok, failed;
  gs_array_set_backend(counting_backend);
  ok = model_run(constants, io, act);
  gs_array_set_backend(failing_backend);
  failed = model_run(constants, io, act);
  printf("%d %d %ld %ld\n", ok, failed, calls, gs_array_calls);
  free(constants); free(io); free(act);
  return 0;
}
"""


def test_backend_seam_routes_every_array_call(built: dict[str, Built], tmp_path: Path) -> None:
    """Replacing the one backend pointer sees every array call; a failing backend fails
    model_run (the co-simulation build relies on exactly this)."""
    run = built["small_cnn"]
    (tmp_path / "seam.c").write_text(SEAM_DRIVER)
    executable = tmp_path / "seam"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1",
                    f"-I{run.outdir}", "-o", str(executable), str(tmp_path / "seam.c"),
                    str(run.outdir / "model.c"), str(run.outdir / "array_runtime.c"), "-lm"],
                   check=True)
    ok, failed, calls, total = subprocess.run([str(executable)], check=True, capture_output=True,
                                              text=True).stdout.split()
    array_calls = len(run.result.lowered.array_calls())
    assert (ok, failed, int(calls)) == ("0", "1", array_calls)
    assert int(total) == array_calls + 1  # the failing backend stops model_run at its first call


# -- the harness ----------------------------------------------------------------------


def _harness(run: Built, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(run.outdir / "model"), *args], capture_output=True, text=True)


def test_harness_rejects_wrong_shape_dtype_and_names(built: dict[str, Built],
                                                     tmp_path: Path) -> None:
    run = built["small_cnn"]
    wrong_shape, wrong_dtype = tmp_path / "shape.npy", tmp_path / "dtype.npy"
    np.save(wrong_shape, np.zeros((1, 1, 16, 15), dtype=np.int8))
    np.save(wrong_dtype, np.zeros((1, 1, 16, 16), dtype=np.float64))  # int16 would fit
    failures = {
        "shape": _harness(run, f"image={wrong_shape}"),
        "dtype": _harness(run, f"image={wrong_dtype}"),
        "missing": _harness(run),
        "unknown": _harness(run, f"image={wrong_dtype}", f"picture={wrong_dtype}"),
        "not npy": _harness(run, f"image={run.outdir / 'model.c'}"),
    }
    for what, completed in failures.items():
        assert completed.returncode != 0, what
    assert "shape (1, 1, 16, 15), expected (1, 1, 16, 16)" in failures["shape"].stderr
    assert "dtype '<f8', expected '<i1'" in failures["dtype"].stderr
    assert "missing input" in failures["missing"].stderr
    assert "unknown input" in failures["unknown"].stderr


def test_harness_reads_npy_version_2_and_writes_numpy_readable_output(
        built: dict[str, Built], tmp_path: Path) -> None:
    run = built["small_cnn"]
    image = np.load(run.input_args[0].split("=", 1)[1])
    path = tmp_path / "v2.npy"
    with open(path, "wb") as handle:
        np.lib.format.write_array(handle, image, version=(2, 0))
    completed = _harness(run, f"image={path}", "-o", str(tmp_path / "out.npy"))
    assert completed.returncode == 0, completed.stderr
    assert_matches(np.load(tmp_path / "out.npy"), run.expected)


def test_trace_build_hashes_every_instruction(built: dict[str, Built]) -> None:
    run = built["small_cnn"]
    _make(run.outdir, "trace", "-O0")
    completed = subprocess.run([str(run.outdir / "model_trace"), *run.input_args],
                               capture_output=True, text=True, check=True)
    lines = [line for line in completed.stderr.splitlines() if line.startswith("trace [")]
    assert len(lines) == len(run.result.lowered.instructions)
    assert run.output is not None
    fnv = 2166136261
    for byte in run.output.tobytes():
        fnv = ((fnv ^ byte) * 16777619) % 2**32
    last = lines[-1].split()
    assert last[2] == run.result.lowered.output and last[-1] == f"{fnv:08x}"


def test_scalar_and_rank1_outputs_round_trip(built: dict[str, Built]) -> None:
    shapes = {}
    for name in ("reduce_sum_to_scalar_i16", "systolic_array_vector"):
        run = built[name]
        assert run.output is not None and run.output.shape == run.expected.shape
        shapes[name] = run.output.shape
    assert shapes == {"reduce_sum_to_scalar_i16": (), "systolic_array_vector": (3,)}


# -- determinism and atomicity --------------------------------------------------------


def test_compiling_twice_gives_identical_bytes(tmp_path: Path) -> None:
    program = read_program(EXAMPLES / "resnet_block.gs")
    types = check_program(program)
    first = compile_to_directory(program, types, tmp_path / "one", CONFIG).outdir
    second = compile_to_directory(read_program(EXAMPLES / "resnet_block.gs"), types,
                                  tmp_path / "two", CONFIG).outdir
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    assert names == sorted(["Makefile", "array_runtime.c", "array_runtime.h", "cosim.json",
                            "host_gemm.c", "host_gemm.h", "main.c", "model.c", "model.h",
                            "program.gs", "program.npz", "report.html", "report.json",
                            "weights.bin", MANIFEST])
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_failed_compile_leaves_nothing_and_recompile_replaces(tmp_path: Path) -> None:
    program = read_program(EXAMPLES / "small_cnn.gs")
    types = check_program(program)
    outdir = tmp_path / "out"
    with pytest.raises(KeyError):
        compile_to_directory(program, types, outdir, CONFIG, weights={})  # no weight data
    assert list(tmp_path.iterdir()) == []
    compile_to_directory(program, types, outdir, CONFIG)
    (outdir / "model").write_bytes(b"a build product: ours, so it may go")
    compile_to_directory(program, types, outdir, ArrayConfig(4, 4))
    assert not (outdir / "model").exists()
    assert "4x4 systolic array" in (outdir / "model.h").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_templates_load_from_the_resource_directory() -> None:
    names = {p.name for p in resource_dir("templates").glob("*.j2")}
    assert names == {"model.c.j2", "model.h.j2", "array_runtime.c.j2", "array_runtime.h.j2",
                     "host_gemm.c.j2", "host_gemm.h.j2", "main.c.j2", "Makefile.j2",
                     "accel_runtime.c.j2", "accel_runtime.h.j2",
                     "report.html.j2"}


@pytest.mark.parametrize("name", CASES_BY_NAME)
def test_plan_has_no_overlap(built: BuiltCases, name: str) -> None:
    run = built.compile(name)
    plan = run.result.plan
    check_no_overlap(plan.intervals, plan.activations.offsets)
    header = (run.outdir / "model.h").read_text()
    assert f"efficiency = lower bound / used = {plan.activations.efficiency:.3f}" in header


def test_generated_code_names_buffers_after_what_they_hold(built: dict[str, Built]) -> None:
    model = (built["resnet_block"].outdir / "model.c").read_text()
    for name in ("conv1", "conv1_biased", "hidden", "conv2_biased", "skip", "block_sum",
                 "relu", "requantize"):
        assert f" *const t_{name} = " in model, name  # every buffer t_ + its name
    assert "on the systolic array (M=16 K=144 N=256)" in model


