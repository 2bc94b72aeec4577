"""The e-graph encoding, the type rules and each ruleset of glensidec.opt.rewrite, one by one.

Every test that rewrites also runs the interpreter on the original and the extracted
program (translation validation), so a wrong rule fails here, not in the C backend.
"""

from __future__ import annotations

import pytest
from conftest import EXAMPLES, make_program

from glensidec.errors import GlensideError
from glensidec.frontends import builders as B
from glensidec.frontends import workloads
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.syntax import parse_program, read_program
from glensidec.lang.terms import Program, Symbol, TensorDecl, postorder
from glensidec.lang.typecheck import AccessType, check_program
from glensidec.opt.extract import array_shapes, predict, validate
from glensidec.opt.rewrite import RULESETS, ArrayTarget, EGraph, Limits, Profile
from glensidec.pipeline import compile_program

ARRAY = ArrayConfig(16, 16)


def _example_programs() -> list[Program]:
    return [read_program(path) for path in sorted(EXAMPLES.glob("*.gs"))]


def _ops(program: Program) -> list[str]:
    return [term.op for term in postorder(program.root)]


def _literal_program() -> Program:
    """Literals, parameterised compute types and an optional dtype: the awkward encodings."""
    x = B.tensor("x")
    two = B.op("access-literal", B.op("literal", 2, Symbol("i8")))
    spread = B.broadcast(B.op("access-insert-axis", two, 0), (4,), ())
    summed = B.compute("elementwise-add", B.op("access-pair", x, spread))
    clipped = B.compute("clip", summed, -3, 5)
    root = B.compute("cast", B.compute("elementwise-mul", B.op(
        "access-pair", clipped, B.compute("cast", clipped, "i8"))), "i16")
    return make_program(root, {"x": ((4,), "i8")})


def _matmul(m: int, k: int, n: int) -> Program:
    """a[m,k] times b given as [n,k], int8."""
    root = B.matmul(B.access(B.tensor("a"), 1), B.access(B.tensor("b"), 1))
    return make_program(root, {"a": ((m, k), "i8"), "b": ((n, k), "i8")})


# -- encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize("program", [*_example_programs(), _literal_program()],
                         ids=lambda p: p.path)
def test_programs_round_trip_through_the_egraph_unchanged(program: Program) -> None:
    compiled = compile_program(program, ARRAY, rulesets=())
    assert compiled.program.root == program.root
    assert compiled.stats.stop_reason == "saturated"


def test_the_encoding_covers_every_construct() -> None:
    from glensidec.lang.constructs import CONSTRUCTS
    from glensidec.opt.rewrite import schema

    text = schema()
    for name, construct in CONSTRUCTS.items():
        # Expanded constructs (tuples, conv2d modes) are gone before the rewriter runs.
        assert (f"  ({name} " in text) != construct.expanded, name

@pytest.mark.slow
def test_encoding_and_decoding_a_long_program() -> None:
    """Adding a program of 1,500 computes (6,000 egglog commands) takes well under a second.

    As one egglog program it takes about 20 s (egglog's parse and run of one program grow
    faster than its length: 8 s for 1,000 computes, 38 s for 2,000); `EGraph.run_commands`
    sends it in chunks. The bound is loose against load on the machine, tight against the
    superlinear form."""

    root = B.tensor("x")
    for _ in range(1500):
        root = B.compute("relu", root)
    program = Program("<chain>", {"x": TensorDecl("x", (4, 4), "i8", "input")}, root)
    types = check_program(program)
    graph = EGraph(RULESETS, ArrayTarget(8, 8), Profile.of(root, types))
    graph.add(root, types)  # its speed is measured by bench/bench_regions.py
    assert graph.size() == 1501
    # and decoding the extracted program does not recurse 1,500 deep
    extracted = compile_program(program, ArrayConfig(8, 8), rulesets=()).program
    assert _ops(extracted) == _ops(program) == ["access-tensor"] + ["compute"] * 1500


@pytest.mark.parametrize("text", [
    workloads.conv2d(3, 32, 8, 3), workloads.conv2d(3, 30, 8, 7, 2, 3),
    workloads.mlp((40, 24, 10)), workloads.depthwise(32, 12, 3, 1, 1),
], ids=["im2col", "conv7x7", "mlp", "depthwise"])
def test_egraph_types_agree_with_the_type_checker(text: str) -> None:
    """Every subterm of the extracted program: the e-graph's type is typecheck's type."""
    compiled = compile_program(parse_program(text), ARRAY)
    types = check_program(compiled.program)
    graph = compiled.egraph()  # holds the extracted program
    classes = graph.classes(compiled.program.root)
    checked = 0
    for term, value in classes.items():
        if isinstance(types[term], AccessType):
            assert graph.type_of(value) == types[term], term.op
            checked += 1
    assert checked > 10


# -- rulesets, one at a time ------------------------------------------------------------


@pytest.mark.parametrize("ruleset", RULESETS)
@pytest.mark.parametrize("program", _example_programs()
                         + [parse_program(workloads.conv2d(3, 12, 4, 3, 1, 1)),
                            parse_program(workloads.mlp((20, 24, 10))),
                            parse_program(workloads.depthwise(4, 9, 3, 2, 1))],
                         ids=lambda p: p.path)
def test_each_ruleset_alone_preserves_meaning(ruleset: str, program: Program) -> None:
    compiled = compile_program(program, ARRAY, rulesets=(ruleset,))
    validate(program, compiled.program, seeds=(0, 1))


def test_cleanup_collapses_nested_views() -> None:
    x = B.tensor("x")
    twice = B.transpose(B.transpose(x, 1, 0), 1, 0)
    nested = B.access(B.access(twice, 1), 2)
    reshaped = B.reshape(B.reshape(nested, (6,), (2,)), (3, 4), ())
    program = make_program(B.compute("relu", reshaped), {"x": ((3, 4), "i8")})
    compiled = compile_program(program, ARRAY, rulesets=("cleanup",))
    assert _ops(compiled.program) == ["access-tensor", "compute"]
    validate(program, compiled.program)


def test_im2col_finds_the_27_row_matrix() -> None:
    """Glenside's own case: flattened windows (900 rows of 27) times flattened weights."""
    program = parse_program(workloads.conv2d(3, 32, 8, 3))
    compiled = compile_program(program, ArrayConfig(27, 900), rulesets=("im2col",))
    compiled.graph.run(
        '(check (= e (compute "dot-product" (access-cartesian-product a b))) '
        "(= (ashape a) (vec-of 8)) (= (aitem a) (vec-of 27)) (= (ashape b) (vec-of 900)))")
    validate(program, compiled.program)


def test_original_array_shape_27x900_is_found_and_chosen() -> None:
    """With a 27x900 array the exact invocation the original finds is there and extracted."""
    program = parse_program(workloads.conv2d(3, 32, 8, 3))
    compiled = compile_program(program, ArrayConfig(27, 900))
    assert (27, 900, 8, 27, 900) in array_shapes(compiled.graph)
    assert "systolic-array" in _ops(compiled.program)
    validate(program, compiled.program)


def test_both_operand_orientations_are_in_the_egraph() -> None:
    compiled = compile_program(_matmul(40, 32, 16), ARRAY, rulesets=("mapping",))
    shapes = array_shapes(compiled.graph)
    assert (16, 16, 40, 32, 16) in shapes  # stream a, hold b
    assert (16, 16, 16, 32, 48) in shapes  # stream b, hold a (40 outputs padded to 48)


def test_the_cheaper_orientation_is_extracted() -> None:
    """a[100,16]·b[16,20]: streaming b's 20 rows through a held (16 × 100→112) takes fewer
    cycles than streaming a's 100 rows twice (20 outputs need two 16-column folds)."""
    program = _matmul(100, 16, 20)
    compiled = compile_program(program, ARRAY, rulesets=("mapping",))
    (call,) = compiled.prediction.invocations
    assert (call.m, call.k, call.n) == (20, 16, 112)
    validate(program, compiled.program)


def test_unaligned_shapes_are_padded_with_harmless_zeros() -> None:
    program = _matmul(5, 27, 10)
    compiled = compile_program(program, ARRAY, rulesets=("mapping",))
    assert "access-pad" in _ops(compiled.program)
    assert not [t for t in postorder(compiled.program.root) if t.op == "compute"]
    validate(program, compiled.program, seeds=(0, 1, 2))


def test_explicit_blocking_splits_the_reduction_and_accumulates() -> None:
    """Without runtime blocking, K=48 and N=32 reach a 16x16 array only by splitting."""
    program = _matmul(7, 48, 32)
    target = ArrayTarget(16, 16, runtime_blocking=False)
    types = check_program(program)
    graph = EGraph(("mapping",), target, Profile.of(program.root, types))
    graph.add(program.root, types)
    graph.saturate(Limits())
    graph.run('(check (= e (compute "reduce-sum" (access-pair x y))))')
    graph.run("(check (= e (access-concatenate x y 1)))")
    assert {shape[3:] for shape in array_shapes(graph)} == {(16, 16)}


def test_explicitly_blocked_program_is_extracted_and_correct(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from glensidec import pipeline

    monkeypatch.setattr(pipeline, "array_target",
                        lambda config, more=(): ArrayTarget(config.rows, config.cols,
                                                            runtime_blocking=False))
    program = _matmul(7, 48, 32)
    compiled = compile_program(program, ARRAY)
    ops = _ops(compiled.program)
    # K=48 is three 16-row folds whichever operand streams, accumulated by reduce-sums.
    assert ops.count("systolic-array") >= 3
    assert ops.count("compute") == ops.count("systolic-array") - 1
    assert "systolic-array-with-blocking" not in ops
    validate(program, compiled.program, seeds=(0, 1))


def test_host_ops_stay_on_the_host() -> None:
    x = B.tensor("x")
    pooled = B.compute("reduce-max", B.op("access-windows", B.access(x, 2), B.shape(2, 2),
                                          B.shape(2, 2)))
    program = make_program(B.compute("relu", pooled), {"x": ((1, 4, 8, 8), "i8")})
    compiled = compile_program(program, ARRAY)
    assert compiled.program.root == program.root
    assert not compiled.prediction.invocations


def test_depthwise_is_split_per_channel_and_mapped_when_cheaper() -> None:
    program = parse_program(workloads.depthwise(8, 12, 3, 2, 1))
    compiled = compile_program(program, ARRAY)
    assert compiled.stats.matches["split-pair-on-axis-1"] == 7  # 8 channels: 7 splits
    assert compiled.stats.matches["pair-with-one-filter-is-a-product"] == 8
    assert compiled.prediction.invocations
    assert compiled.prediction.total < predict(program.root, check_program(program)).total
    assert compiled.stats.enodes < 250 * 8  # grows linearly with the channels
    validate(program, compiled.program, seeds=(0, 1))


def test_depthwise_groups_channels_with_block_diagonal_weights() -> None:
    """32 channels on 16 columns: two groups of 16 filters (K = 16·9), not 32 invocations."""
    program = parse_program(workloads.depthwise(32, 12, 3, 1, 1))
    compiled = compile_program(program, ARRAY)
    calls = compiled.prediction.invocations
    assert [(call.m, call.k, call.n) for call in calls] == [(144, 144, 16)] * 2
    validate(program, compiled.program, seeds=(0, 1))


def test_float_products_are_not_mapped_onto_the_int8_array() -> None:
    (program,) = [p for p in _example_programs() if p.path.endswith("matmul.gs")]
    compiled = compile_program(program, ARRAY)
    assert compiled.program.root == program.root


# -- schedule and limits ----------------------------------------------------------------


@pytest.mark.parametrize(("limits", "reason"), [
    (Limits(iterations=2), "iteration limit"),
    (Limits(max_enodes=50), "e-node limit"),
    (Limits(timeout=0.0), "time limit"),
])
def test_a_limit_stops_saturation_and_still_gives_a_program(limits: Limits,
                                                            reason: str) -> None:
    program = parse_program(workloads.conv2d(3, 12, 4, 3, 1, 1))
    compiled = compile_program(program, ARRAY, limits)
    assert compiled.stats.stop_reason.startswith(reason)
    assert compiled.stats.hit_limit()
    validate(program, compiled.program)


def test_stats_report_size_and_time_per_ruleset() -> None:
    compiled = compile_program(parse_program(workloads.conv2d(3, 32, 8, 3)), ARRAY)
    stats = compiled.stats
    assert stats.stop_reason == "saturated"
    assert stats.enodes == compiled.graph.size() > 100
    assert set(stats.ruleset_seconds) == {"types", *RULESETS}
    assert stats.matches["bubble-reshape-through-dot-product"] > 0


def test_compiling_twice_gives_identical_text() -> None:
    from glensidec.lang.syntax import format_program

    program = parse_program(workloads.conv2d(3, 16, 8, 3, 2, 1))
    first = format_program(compile_program(program, ARRAY).program)
    second = format_program(compile_program(program, ARRAY).program)
    assert first == second


def test_generated_rules_are_rejected_loudly_when_malformed() -> None:
    graph = EGraph((), ArrayTarget(16, 16), Profile(1, frozenset(), frozenset(), frozenset()))
    with pytest.raises(GlensideError, match="egglog rejected"):
        graph.run("(rule ((= e (no-such-construct a))) ((union e a)))")


def test_profile_only_generates_ranks_the_program_has() -> None:
    program = _matmul(4, 16, 16)
    profile = Profile.of(program.root, check_program(program))
    assert profile.products == frozenset({(1, 1)})
    assert (2, 0) in profile.transposes  # the swapped orientation's transpose back


def test_tensor_decls_survive_compilation() -> None:
    program = _matmul(4, 16, 16)
    compiled = compile_program(program, ARRAY)
    assert compiled.program.tensors == program.tensors
    assert all(isinstance(decl, TensorDecl) for decl in compiled.program.tensors.values())


def test_egglog_core_is_loaded_without_its_python_front_end() -> None:
    """The compiler needs only egglog's compiled bindings; its front end (and `black`)
    would add half a second to every compile. A later `import egglog` reuses the module."""
    import subprocess
    import sys

    code = ("import sys\nfrom glensidec.opt import rewrite\n"
            "assert 'black' not in sys.modules and 'egglog.builtins' not in sys.modules\n"
            "core = rewrite.bindings\nimport egglog\nfrom egglog import bindings\n"
            "assert bindings is core and egglog.EGraph is not None\n"
            "print(core.EGraph().parse_program('(ruleset r)'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _broadcast_matmul() -> Program:
    """(3,1,3,4) × (1,2,4,2) broadcast to six (3,4)·(4,2) products, as the importer
    writes a batched MatMul: each batch is a slice of the broadcast operands."""
    def operand(name: str, full: str, flat: str, index: int, matrix: str) -> str:
        return (f"(access-reshape (access-slice (access-reshape (access-broadcast "
                f"(access-tensor {name}) (access-shape (shape {full}) (shape))) "
                f"(access-shape (shape {flat}) (shape))) 0 {index} {index + 1}) "
                f"(access-shape (shape {matrix}) (shape)))")
    products = [
        "(access-reshape (compute dot-product (access-cartesian-product "
        f"(access {operand('a', '3 2 3 4', '6 3 4', i, '3 4')} 1) "
        f"(access (access-transpose {operand('b', '3 2 4 2', '6 4 2', i, '4 2')} (list 1 0)) 1)))"
        " (access-shape (shape 1 3 2) (shape)))" for i in range(6)]
    joined = products[0]
    for product in products[1:]:
        joined = f"(access-concatenate {joined} {product} 0)"
    return parse_program("(input a i8 (shape 3 1 3 4))\n(input b i8 (shape 1 2 4 2))\n"
                         + joined, "bcast.gs")


def test_regions_that_differ_in_a_slice_index_each_extract_their_own_terms() -> None:
    """Issue 27 (test_matmul_bcast): under egglog's push/pop the second of two such
    regions read its `(shape 4 2)` back as `(shape)` and compile failed; every region now
    gets a fresh e-graph."""
    program = _broadcast_matmul()
    compiled = compile_program(program, ArrayConfig(4, 4))
    assert compiled.stats.regions == 6
    assert _ops(compiled.program).count("systolic-array") == 6
    validate(program, compiled.program, seeds=(0, 1))
