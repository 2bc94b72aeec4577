"""The cost model, extraction and translation validation of glensidec.opt.extract, and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import EXAMPLES, make_program

from glensidec.cli import cli
from glensidec.errors import GlensideError
from glensidec.frontends import builders as B
from glensidec.frontends import workloads
from glensidec.hardware import array as hardware
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program, read_program
from glensidec.lang.terms import Program, postorder
from glensidec.lang.typecheck import check_program
from glensidec.opt import extract, regions
from glensidec.opt.extract import (
    best_orientation,
    matmuls,
    predict,
    unmapped_products,
    validate,
)
from glensidec.opt.rewrite import RULESETS, Limits
from glensidec.pipeline import compile_program

ARRAY = hardware.ArrayConfig(16, 16)
WORKLOADS = workloads.workloads()


@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.name)
def test_workload_is_mapped_and_correct(workload: workloads.Workload) -> None:
    # Its time budget is a benchmark target (bench/bench_rewrite.py), not a unit test.
    program = parse_program(workload.text)
    compiled = compile_program(program, ARRAY)
    if workload.max_enodes is not None:
        assert compiled.stats.enodes <= workload.max_enodes
    assert compiled.stats.stop_reason == "saturated"
    types = check_program(compiled.program)
    if workload.must_map:
        assert not unmapped_products(compiled.program.root, types, "i8")
        assert compiled.prediction.invocations
    validate(program, compiled.program)


@pytest.mark.parametrize("workload", [w for w in WORKLOADS if w.must_map],
                         ids=lambda w: w.name)
def test_predicted_cycles_are_near_t_min_and_beat_scalesim(
        workload: workloads.Workload) -> None:
    program = parse_program(workload.text)
    compiled = compile_program(program, ARRAY)
    products = matmuls(program.root, check_program(program))
    t_min = sum(best_orientation(hardware.t_min, ARRAY, p) for p in products)
    scalesim = sum(best_orientation(hardware.scalesim_ws_cycles, ARRAY, p) for p in products)
    array_cycles = sum(call.cycles for call in compiled.prediction.invocations)
    assert array_cycles <= 1.05 * t_min
    assert array_cycles <= scalesim


def test_im2col_case_maps_through_the_27_column_matrix() -> None:
    program = parse_program(workloads.conv2d(3, 32, 8, 3))
    compiled = compile_program(program, ARRAY)
    (call,) = compiled.prediction.invocations
    assert call.k == 32  # 27 = 3·3·3 padded with zeros to two 16-row folds
    assert {call.m, call.n} & {900}  # the 900 im2col rows are streamed


def test_the_prediction_is_gemm_cycles_plus_host_work() -> None:
    program = parse_program(workloads.mlp((64, 32, 16)))
    compiled = compile_program(program, ARRAY)
    expected = sum(hardware.gemm_cycles(ARRAY, c.m, c.k, c.n)
                   for c in compiled.prediction.invocations)
    assert sum(c.cycles for c in compiled.prediction.invocations) == expected
    types = check_program(compiled.program)
    host = sum(extract.host_cost(t, types) for t in postorder(compiled.program.root)
               if t.op not in extract.ARRAYS)
    assert compiled.prediction.host_cycles == host


def test_shared_subterms_are_counted_once() -> None:
    x = B.compute("relu", B.tensor("x"))
    shared = make_program(B.compute("elementwise-add", B.op("access-pair", x, x)),
                          {"x": ((8, 8), "i8")})
    types = check_program(shared)
    relu_cost = extract.host_cost(x, types)
    prediction = predict(shared.root, types)
    distinct = sum(extract.host_cost(t, types) for t in postorder(shared.root))
    assert prediction.host_cycles == distinct
    assert relu_cost > 1 and distinct < relu_cost * 2 + 200


def test_leaving_a_mappable_product_on_the_host_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong array costs in egglog (×1000) make it pick the host: extraction must refuse."""
    real = extract.gemm_cycles
    shapes_costed: list[tuple[int, ...]] = []

    def inflated_costs(graph: extract.EGraph) -> None:
        for shape in sorted(extract.array_shapes(graph)):
            shapes_costed.append(shape)
            graph.run(f"(set (gemm-cost {' '.join(map(str, shape))}) {1000 * real(*shape)})")
        graph.run_ruleset("costs", saturate=True)

    monkeypatch.setattr(extract, "set_costs", inflated_costs)
    program = parse_program(workloads.mlp((64, 32, 16)))
    with pytest.raises(GlensideError, match=r"on the host .* although the e-graph maps it"):
        compile_program(program, ARRAY)
    assert shapes_costed


def test_a_tiny_product_may_stay_on_the_host_by_the_cost_models_choice() -> None:
    """A 10-element scalar dot-product: the host's 20 cycles beat any array invocation."""
    root = B.matmul(B.access(B.tensor("x"), 0), B.access(B.tensor("w"), 0))
    program = make_program(root, {"x": ((5, 2), "i8"), "w": ((5, 2), "i8")})
    compiled = compile_program(program, ARRAY)
    types = check_program(compiled.program)
    (product,) = unmapped_products(compiled.program.root, types, "i8")
    assert extract.host_cost(product, types) < extract.mapped_cycles(
        product, types, extract.array_target(ARRAY))
    validate(program, compiled.program)


def test_unmappable_products_may_stay_on_the_host() -> None:
    """f32 products have no mapping (the array multiplies int8): no error, host code."""
    program = read_program(EXAMPLES / "matmul.gs")
    compiled = compile_program(program, ARRAY)
    assert unmapped_products(compiled.program.root, check_program(compiled.program), "f32")


# -- big programs: one region per product ---------------------------------------------


def _dot_products(program: Program) -> list[object]:
    return [t for t in postorder(program.root) if t.op == "compute"
            and t.args[0].name == "dot-product"]  # type: ignore[union-attr]


def test_products_are_compiled_region_by_region_and_spliced_back() -> None:
    """Two products, one reading a computed operand with an item ((M),(K)), the other the
    same input: each saturated alone, the relu between them kept once, the result exact."""
    a = B.access(B.tensor("a"), 1)
    relu = B.compute("relu", a)  # ((12),(32)): its region reads it through a placeholder
    first = B.matmul(relu, B.access(B.tensor("b"), 1))
    second = B.matmul(a, B.access(B.tensor("c"), 1))
    root = B.compute("elementwise-add", B.op("access-pair", first, second))
    program = make_program(root, {"a": ((12, 32), "i8"), "b": ((20, 32), "i8"),
                                  "c": ((20, 32), "i8")})
    compiled = compile_program(program, ARRAY)
    assert compiled.stats.regions == 2 and compiled.stats.stop_reason == "saturated"
    ops = [t.op for t in postorder(compiled.program.root)]
    assert ops.count("systolic-array-with-blocking") + ops.count("systolic-array") == 2
    assert not _dot_products(compiled.program)
    relus = [t for t in postorder(compiled.program.root) if t.op == "compute"
             and t.args[0].name == "relu"]  # type: ignore[union-attr]
    assert relus == [relu]  # spliced back as it was: no placeholder, no extra access
    assert "region-operand" not in format_program(compiled.program)
    validate(program, compiled.program, seeds=(0, 1))


def _depthwise_chain(layers: int, channels: int, size: int) -> Program:
    """`layers` depthwise 3×3 layers, requantized to i8 in between."""
    x = B.tensor("x")
    tensors = {"x": ((1, channels, size, size), "i8")}
    for layer in range(layers):
        name = f"w{layer}"
        tensors[name] = ((channels, 1, 3, 3), "i8")
        product = B.depthwise_conv2d_nchw(x, B.tensor(name), 1, channels, (size, size),
                                          (3, 3), (1, 1), (1, 1, 1, 1))
        x = B.compute("requantize", product, 1, 0, 8, 0) if layer + 1 < layers else product
    return make_program(x, tensors)


def _whole_program(program: Program, limits: Limits) -> tuple[str, int]:
    """Stop reason and extraction cost with the whole program in one e-graph."""
    types = check_program(program)
    products = [t for t in postorder(program.root) if regions.is_product(t)]
    target = extract.array_target(ARRAY)
    graph = extract.new_graph(program, types, products, target, RULESETS)
    name = graph.add(program.root, types)
    stats = graph.saturate(limits)
    return stats.stop_reason, extract.extract_checked(graph, name, program.tensors, target)[1]

@pytest.mark.slow
def test_each_region_has_the_limits_to_itself() -> None:
    """Three depthwise layers of 16 channels under a 4,000 e-node limit: one e-graph for
    all of them hits the limit before the cheap block-diagonal groups exist; one e-graph
    per layer saturates each, and each layer compiles as it does alone."""
    # The e-node limit is what this test is about: a generous time limit keeps a loaded
    # machine from stopping saturation first.
    limits = Limits(max_enodes=4_000, timeout=600.0)
    program = _depthwise_chain(3, 16, 6)
    compiled = compile_program(program, ARRAY, limits)
    stats = compiled.stats
    assert stats.regions == 3 and stats.stop_reason == "saturated"
    assert 1_000 < stats.enodes < 4_000  # the largest region's e-graph
    assert not _dot_products(compiled.program)  # every layer on the array
    validate(program, compiled.program)
    alone = compile_program(_depthwise_chain(1, 16, 6), ARRAY, limits)
    assert compiled.prediction.invocations == alone.prediction.invocations * 3
    reason, whole_cost = _whole_program(program, limits)
    assert reason.startswith("e-node limit") and compiled.extraction_cost < whole_cost


def test_a_time_limit_applies_to_each_region() -> None:
    program = _depthwise_chain(2, 8, 4)
    compiled = compile_program(program, ARRAY, Limits(timeout=0.0))
    assert compiled.stats.stop_reason.startswith("time limit")
    assert compiled.stats.stop_reason.endswith("of 2 regions")
    validate(program, compiled.program)


def test_validation_catches_a_wrong_program() -> None:
    program = parse_program(workloads.mlp((32, 16)))
    wrong_root = B.matmul(B.access(B.tensor("x"), 1),
                          B.access(B.compute("negative", B.tensor("w1")), 1))
    wrong = Program(program.path, program.tensors, wrong_root)
    with pytest.raises(GlensideError, match="translation validation failed"):
        validate(program, wrong)


def test_validation_accepts_float_rounding_and_rejects_real_differences() -> None:
    import numpy as np

    values = np.linspace(1, 2, 10, dtype=np.float32)
    assert extract.difference(values, values * np.float32(1 + 1e-7)) is None
    assert extract.difference(values, values + np.float32(1e-3)) is not None
    assert extract.difference(values.astype(np.int32), values.astype(np.int64)) is not None


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.gs")), ids=lambda p: p.name)
def test_every_example_compiles_and_validates(path: Path) -> None:
    program = read_program(path)
    compiled = compile_program(program, ARRAY)
    validate(program, compiled.program, seeds=(0, 1))


# -- CLI --------------------------------------------------------------------------------


def _compile(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["compile", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_compile_prints_a_program_that_parses_and_runs(tmp_path: Path) -> None:
    code, stdout, stderr = _compile(str(EXAMPLES / "small_cnn.gs"), "--array", "16x16",
                                    "--verify", "--stats")
    assert code == 0
    assert "verified" in stderr and "stop reason: saturated" in stderr
    assert "predicted cycles" in stderr
    rewritten = tmp_path / "small_cnn.gs"
    rewritten.write_text(stdout)
    (tmp_path / "small_cnn.npz").write_bytes((EXAMPLES / "small_cnn.npz").read_bytes())
    program = read_program(rewritten)
    assert "systolic-array-with-blocking" in stdout
    from glensidec.lang import data

    run_program(program, data.all_tensors(program, data.random_inputs(program, 0)))


def test_cli_compile_writes_output_and_the_egraph(tmp_path: Path) -> None:
    source = tmp_path / "conv.gs"
    source.write_text(workloads.conv2d(1, 6, 2, 3))
    target = tmp_path / "out.gs"
    code, _, _ = _compile(str(source), "--array", "4x4", "--emit", "rewritten", "-o", str(target))
    assert code == 0 and "systolic-array" in target.read_text()
    dot = tmp_path / "egraph.dot"
    code, _, _ = _compile(str(source), "--array", "4x4", "--emit", "egraph", "-o", str(dot))
    assert code == 0 and dot.read_text().lstrip().startswith(("digraph", "strict digraph"))
    # two products: compiled region by region, the extracted program shown
    source.write_text(workloads.mlp((8, 12, 6)))
    code, _, _ = _compile(str(source), "--array", "4x4", "--emit", "egraph", "-o", str(dot))
    assert code == 0 and "systolic-array-with-blocking" in dot.read_text()


def test_cli_compile_reports_limits(tmp_path: Path) -> None:
    source = tmp_path / "conv.gs"
    source.write_text(workloads.conv2d(3, 12, 4, 3, 1, 1))
    code, _, stderr = _compile(str(source), "--array", "16x16", "--stats", "--iterations", "1")
    assert code == 0
    assert "stop reason: iteration limit (1)" in stderr
    assert "best found so far" in stderr


def test_cli_compile_warns_when_a_limit_cut_saturation_short(tmp_path: Path) -> None:
    """A region too big for the limits degrades to the best program found so far: a
    one-line warning says so even without --stats, and the compile succeeds."""
    source = tmp_path / "conv.gs"
    source.write_text(workloads.conv2d(3, 12, 4, 3, 1, 1))
    code, _, stderr = _compile(str(source), "--array", "16x16", "--iterations", "1")
    assert code == 0
    assert stderr.splitlines() == [
        "warning: saturation stopped at a limit (iteration limit (1)): the program is the "
        "best found so far (--stats for more; raise --iterations, --max-enodes or "
        "--timeout for a better one)"]
    code, _, stderr = _compile(str(source), "--array", "16x16")
    assert code == 0 and "warning" not in stderr


def test_cli_compiles_the_original_glenside_im2col_file_in_compatibility_mode(
        tmp_path: Path) -> None:
    """The original's own program text and a shapes file (declaring int8 tensors)."""
    shapes = tmp_path / "im2col.json"
    shapes.write_text('{"image": {"shape": [1, 3, 32, 32], "dtype": "i8"}, '
                      '"weights": {"shape": [8, 3, 3, 3], "dtype": "i8"}}')
    code, stdout, stderr = _compile(str(EXAMPLES / "glenside" / "im2col.glenside"),
                                    "--shapes", str(shapes), "--array", "16x16", "--verify")
    assert code == 0 and "verified" in stderr
    assert "systolic-array-with-blocking 16 16" in stdout
    assert "(compute dot-product" not in stdout


@pytest.mark.slow
@pytest.mark.parametrize("array", ["16", "0x4", "ax4", "1x16"])
def test_cli_compile_rejects_bad_arrays(array: str) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "glensidec", "compile",
                           str(EXAMPLES / "matmul.gs"), "--array", array],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: --array")


# -- the user's let names survive rewriting (issue 14 feature 5) ------------------------

SMALL_CNN_LETS = ("conv", "conv_biased", "activated", "pooled", "logits")


def _lowered_buffers(program: Program) -> set[str]:
    from glensidec.backend.lower import lower_program
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    return set(lower_program(compiled.program, compiled.types).buffers)


def test_let_names_follow_their_e_class_through_rewriting() -> None:
    """small_cnn's products become array constructs (no named term survives by structure),
    yet every let names a buffer of the generated program; and the rewritten program
    printed with its lets parses to the same program."""
    program = read_program(EXAMPLES / "small_cnn.gs")
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    present = set(postorder(compiled.program.root))
    assert not any(term in present for term in program.names)  # none survives structurally
    assert sorted(compiled.program.names.values()) == sorted(SMALL_CNN_LETS)
    assert set(SMALL_CNN_LETS) <= _lowered_buffers(program)
    calls = [line for line in compiled.report_lines(hardware.ArrayConfig(8, 8))
             if "systolic-array" in line]
    assert [line.split(":")[0].strip() for line in calls] == ["conv", "logits"]
    text = format_program(compiled.program)
    reparsed = parse_program(text, str(EXAMPLES / "rewritten.gs"))
    assert reparsed.root == compiled.program.root
    assert sorted(reparsed.names.values()) == sorted(SMALL_CNN_LETS)


def test_a_named_product_compiled_in_one_e_graph_keeps_its_name() -> None:
    """One product (the whole program in one e-graph): the let names the array's result."""
    program = parse_program(
        "(input a i8 (shape 12 32))\n(input b i8 (shape 20 32))\n"
        "(let scores (compute dot-product (access-cartesian-product "
        "(access (access-tensor a) 1) (access (access-tensor b) 1))))\n"
        "(compute relu scores)\n", "named.gs")
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    assert compiled.stats.regions == 1
    (named,) = compiled.program.names
    assert compiled.program.names[named] == "scores"
    assert named.op in extract.ARRAYS or any(t.op in extract.ARRAYS for t in postorder(named))
    assert "scores" in _lowered_buffers(program)
    validate(program, compiled.program)


def test_a_let_between_a_product_and_its_operand_is_named_in_its_region() -> None:
    """Two products (one region each): a let on a view inside a region that rewriting
    replaces (a double transpose, extracted as the plain operand) keeps its name by e-class,
    as do the products; each name stays on one term."""
    program = parse_program(
        "(input a i8 (shape 12 32))\n(input b i8 (shape 20 32))\n(input c i8 (shape 20 32))\n"
        "(let act (compute relu (access (access-tensor a) 1)))\n"
        "(let bt (access-transpose (access-transpose (access (access-tensor b) 1) (list 1 0))"
        " (list 1 0)))\n"
        "(let first (compute dot-product (access-cartesian-product act bt)))\n"
        "(let second (compute dot-product (access-cartesian-product (access (access-tensor a) 1)"
        " (access (access-tensor c) 1))))\n"
        "(compute elementwise-add (access-pair first second))\n", "regions.gs")
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    assert compiled.stats.regions == 2
    names = {name: term for term, name in compiled.program.names.items()}
    assert set(names) == {"act", "bt", "first", "second"}
    assert names["bt"] == B.access(B.tensor("b"), 1)  # the double transpose is gone
    assert {"first", "second"} <= _lowered_buffers(program)
    validate(program, compiled.program)


def test_a_region_equal_to_an_earlier_one_up_to_names_reuses_its_extraction() -> None:
    """Two products equal up to their tensors' names: the second region reuses the first's
    extraction (its tensors renamed back), keeps its own let name, and the program
    computes what the original does."""
    program = parse_program(
        "(input x i8 (shape 12 32))\n(input w i8 (shape 20 32))\n"
        "(input y i8 (shape 12 32))\n(input v i8 (shape 20 32))\n"
        "(let first (compute dot-product (access-cartesian-product (access (access-tensor x) 1)"
        " (access (access-tensor w) 1))))\n"
        "(let second (compute dot-product (access-cartesian-product (access (access-tensor y) 1)"
        " (access (access-tensor v) 1))))\n"
        "(compute elementwise-add (access-pair first second))\n", "twins.gs")
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    assert (compiled.stats.regions, compiled.stats.reused) == (2, 1)
    names = {name: term for term, name in compiled.program.names.items()}
    assert set(names) == {"first", "second"}
    leaves = {str(t.args[0]) for t in postorder(names["second"]) if t.op == "access-tensor"}
    assert leaves == {"y", "v"}
    renamed = regions.rebuild(names["first"], lambda t, args: B.tensor(
        {"x": "y", "w": "v"}[str(t.args[0])]) if t.op == "access-tensor" else None)
    assert renamed == names["second"]
    assert names["first"].op in extract.ARRAYS or \
        any(t.op in extract.ARRAYS for t in postorder(names["first"]))
    validate(program, compiled.program)


def test_the_groups_of_a_grouped_convolution_are_saturated_once() -> None:
    """A grouped convolution is one product per group, reading the activations and the
    weights at each group's offsets (builders.sliced_grouped_conv2d_nchw). Its regions are equal
    up to those slices, so the first group's extraction serves the others: ResNeXt-50
    (16 convolutions of 32 groups) used to saturate 512 e-graphs, a fresh one each."""
    root = B.sliced_grouped_conv2d_nchw(B.tensor("x"), B.tensor("w"), groups=4, in_per_group=2,
                                 out_per_group=3, kernel=(3, 3), pads=(1, 1, 1, 1))
    program = make_program(root, {"x": ((1, 8, 6, 6), "i8"), "w": ((12, 2, 3, 3), "i8")})
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    assert (compiled.stats.regions, compiled.stats.reused) == (4, 3)
    calls = [t for t in postorder(compiled.program.root) if t.op in extract.ARRAYS]
    assert len(calls) == 4  # every group on the array, each with its own slices
    slices = {(t.args[1], t.args[2], t.args[3]) for t in postorder(compiled.program.root)
              if t.op == "access-slice" and t.args[0] == B.tensor("x")}
    assert slices == {(1, 2 * g, 2 * g + 2) for g in range(4)}
    validate(program, compiled.program)


def test_the_egraph_dot_is_the_same_bytes_on_every_run(tmp_path: Path) -> None:
    """egglog serializes in its hash order, which changes from process to process; the
    written dot is sorted (attribute statements kept in place), so two compiles in two
    processes write the same file, and it has every statement egglog wrote."""
    from glensidec.opt.extract import canonical_dot
    source = tmp_path / "conv.gs"
    source.write_text(workloads.conv2d(1, 6, 2, 3))
    written = []
    for run in range(2):
        dot = tmp_path / f"egraph{run}.dot"
        done = subprocess.run([sys.executable, "-m", "glensidec", "compile", str(source),
                               "--array", "4x4", "--emit", "egraph", "-o", str(dot)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        written.append(dot.read_bytes())
    assert written[0] == written[1]
    raw = ['digraph {', '  a=1', '  "y"', '  "x"', '  subgraph "s" {', '    "q"', '    "p"',
           '  }', '  b=2', '  "w"', '}']
    assert canonical_dot("\n".join(raw)).splitlines() == [
        'digraph {', '  a=1', '  "x"', '  "y"', '  subgraph "s" {', '    "p"', '    "q"', '  }',
        '  b=2', '  "w"', '}']


def test_a_region_keeps_the_tensors_its_shape_of_names() -> None:
    """Found by the fuzzer: with several products, a view above a product that reads a
    tensor's shape through `(shape-of s)` crashed region-wise compilation (KeyError: the
    region's canonical form renamed only `access-tensor`)."""
    program = parse_program(
        "(input a i8 (shape 2 3))\n(input b i8 (shape 4 3))\n(input s i8 (shape 1 4))\n"
        "(let p (compute dot-product (access-cartesian-product (access (access-tensor a) 1)"
        " (access (access-tensor b) 1))))\n"
        "(let q (access-reshape p (access-shape (shape 2) (slice-shape (shape-of s) 1))))\n"
        "(compute dot-product (access-cartesian-product q q))\n", "<test>")
    compiled = compile_program(program, hardware.ArrayConfig(2, 2))
    extract.validate(program, compiled.program)
    assert compiled.prediction.array_cycles > 0


def test_difference_sees_a_finite_error_beside_an_infinity() -> None:
    """Found by the fuzzer: an infinity in the expected result set the tolerance to
    infinity, so every finite value 'agreed'."""
    expected = np.array([np.inf, 1.0, 2.0], np.float32)
    assert extract.difference(expected, np.array([np.inf, 1.0, 5.0], np.float32))
    assert extract.difference(expected, np.array([-np.inf, 1.0, 2.0], np.float32))
    assert extract.difference(expected, expected.copy()) is None


def test_a_product_left_on_the_host_is_judged_by_the_calls_the_rules_made() -> None:
    """Found by the fuzzer: on a 3x2 array the swapped orientation of this product would
    take 13 cycles against the host's 14, but no rule maps it (the operand it would hold
    has two access axes); the one mapping made takes 16, so the host is right, and
    check_mapped reported "the extractor's costs are wrong" for it."""
    program = parse_program(
        "(input w i8 (shape 7 1))\n(input x i8 (shape 1 1 1))\n"
        "(compute dot-product (access-cartesian-product (access (access-tensor x) 2)"
        " (access (access-tensor w) 1)))\n", "<test>")
    compiled = compile_program(program, hardware.ArrayConfig(3, 2))
    extract.validate(program, compiled.program)
    assert compiled.prediction.array_cycles == 0


def test_products_reading_row_chunks_of_a_reshaped_tensor_are_saturated_once() -> None:
    """softmax·V in Swin and ViT: each (window, head) product reads rows lo..lo+1 of the
    exponentials reshaped to (windows·heads, keys, keys), a contiguous chunk of the tensor.
    Regions equal up to that chunk's offset share one extraction (swin_t: 385 distinct
    regions of 1,877 → 26, compile 47 → 30 s CPU), and the named reshape they read keeps
    its name."""
    chunk = ("(access (access-reshape (access-slice flat 0 {lo} {hi}) "
             "(access-shape (shape 4 4) (shape))) 1)")
    product = ("(compute dot-product (access-cartesian-product " + chunk +
               " (access (access-tensor v) 1)))")
    program = parse_program(
        "(input e i8 (shape 2 3 4 4))\n(input v i8 (shape 5 4))\n"
        "(let flat (access-reshape (access (access-tensor e) 4)"
        " (access-shape (shape 6 4 4) (shape))))\n"
        f"(let first {product.format(lo=0, hi=1)})\n"
        f"(let second {product.format(lo=4, hi=5)})\n"
        "(compute elementwise-add (access-pair first second))\n", "chunks.gs")
    compiled = compile_program(program, hardware.ArrayConfig(8, 8))
    assert (compiled.stats.regions, compiled.stats.reused) == (2, 1)
    assert {"first", "second", "flat"} <= set(compiled.program.names.values())
    slices = {(t.args[1], t.args[2], t.args[3]) for t in postorder(compiled.program.root)
              if t.op == "access-slice" and t.args[0].op == "access-reshape"}
    assert slices == {(0, 0, 1), (0, 4, 5)}  # each product its own chunk
    validate(program, compiled.program)
