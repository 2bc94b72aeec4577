"""accel-epilogue and accel-max-pool: their type rules, their meaning, the `epilogue` rules
that write them, and the three executions of a program that uses one (interpreter, C on
the accelerator model, RTL)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import cosimulate, run_c_program, save_inputs

from glensidec import pipeline
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.lang import data
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program, read_program
from glensidec.lang.terms import Program, Term, compute_name, postorder
from glensidec.lang.typecheck import check_program
from glensidec.opt.extract import validate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# A dense int8 layer as the quantizer writes one (inputs only, so random data fills them):
# a per-channel requantize of the product plus a per-channel bias, then `{clip}`.
DENSE = """
(input x i8 (shape 5 24))
(input w i8 (shape 20 24))
(input b i32 (shape 20))
(input mult i32 (shape 20))
{open}
 (compute (requantize-per-channel 1 24 3)
  (access-pair
   (compute elementwise-add
    (access-pair
     {product}
     (access-broadcast (access-insert-axis (access-tensor b) 0)
                       (access-shape (shape 5 20) (shape)))))
   (access-broadcast (access-insert-axis (access-tensor mult) 0)
                     (access-shape (shape 5 20) (shape)))))
{close}
"""
PRODUCT = ("(compute dot-product (access-cartesian-product (access (access-tensor x) 1) "
           "(access (access-tensor w) 1)))")


def _dense(clip: str | None, product: str = PRODUCT) -> Program:
    text = DENSE.format(open=f"(compute {clip}" if clip else "", close=")" if clip else "",
                        product=product)
    return parse_program(text, "dense.gs")


def _fused(program: Program, array: str = "8x8") -> Program:
    rows, cols = (int(v) for v in array.split("x"))
    config = ArrayConfig(rows, cols)
    compiled = pipeline.compile_program(program, config, types=check_program(program))
    return pipeline.fuse_epilogues(compiled, config).program


def _epilogues(program: Program) -> list[Term]:
    return [term for term in postorder(program.root) if term.op == "accel-epilogue"]


def _clip_text(term: Term) -> str:
    op = term.args[1]
    return str(op.name if not op.params else  # type: ignore[union-attr]
               f"({op.name} {' '.join(map(str, op.params))})")  # type: ignore[union-attr]


@pytest.mark.parametrize("clip, expected", [(None, "(clip -128 127)"), ("relu", "relu"),
                                            ("(clip -50 100)", "(clip -50 100)")])
def test_the_rules_fuse_bias_requantize_and_clip_after_an_array_call(
        clip: str | None, expected: str) -> None:
    program = _dense(clip)
    fused = _fused(program)
    (epilogue,) = _epilogues(fused)
    assert _clip_text(epilogue) == expected
    assert not any(compute_name(term) in ("requantize-per-channel", "elementwise-add", "clip",
                                          "relu") for term in postorder(fused.root))
    validate(program, fused, seeds=(0, 1))  # what --verify runs


def test_an_accumulator_no_array_computed_is_not_fused() -> None:
    # the same chain over an input accumulator: the epilogue only exists after the array
    program = parse_program("(input acc i32 (shape 5 20))\n" + DENSE.format(
        open="(compute relu", close=")", product="(access-tensor acc)"), "acc.gs")
    fused = _fused(program)
    assert _epilogues(fused) == []
    assert any(compute_name(term) == "requantize-per-channel" for term in postorder(fused.root))


def test_an_accumulator_of_several_array_calls_is_not_fused() -> None:
    # two products joined (as a depthwise convolution's channel groups are): no one array
    # call's rows leave through the epilogue, so the rules leave the chain to the host
    halves = [f"(compute dot-product (access-cartesian-product (access (access-tensor x) 1) "
              f"(access (access-slice (access-tensor w) 0 {low} {high}) 1)))"
              for low, high in ((0, 8), (8, 20))]
    program = parse_program(DENSE.format(
        open="(compute relu", close=")",
        product=f"(access-concatenate {halves[0]} {halves[1]} 1)"), "joined.gs")
    fused = _fused(program)
    assert _epilogues(fused) == []
    assert sum(1 for term in postorder(fused.root) if term.op.startswith("systolic-array")) == 2


@pytest.mark.parametrize("example, fused_clips", [
    # per-tensor requantize (a broadcast literal multiplier), then relu
    ("small_cnn.gs", ["relu"]),
    # conv1 fuses; conv2 adds the skip connection between its bias and its requantize, so
    # no rule fuses it (the backend's residual pass takes it)
    ("resnet_block.gs", ["relu"]),
])
def test_the_rules_fuse_the_examples_per_tensor_requantizes(example: str,
                                                           fused_clips: list[str]) -> None:
    typed = pipeline.load(EXAMPLES / example)
    fused = _fused(typed.program, "16x16")
    assert [_clip_text(term) for term in _epilogues(fused)] == fused_clips
    validate(typed.program, fused)


@pytest.mark.parametrize("example", ["small_cnn.gs", "resnet_block.gs"])
def test_the_regions_no_epilogue_rule_matches_are_skipped_with_the_same_result(
        example: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # (swin_t: 46 of its 49 distinct regions are skipped, 90 % of the saturation's time)
    program = pipeline.load(EXAMPLES / example).program
    may_match = pipeline._epilogue_may_match
    answers: list[bool] = []

    def recorded(root: Term) -> bool:
        answers.append(may_match(root))
        return answers[-1]

    monkeypatch.setattr(pipeline, "_epilogue_may_match", recorded)
    filtered = format_program(_fused(program, "16x16"))
    monkeypatch.setattr(pipeline, "_epilogue_may_match", lambda root: True)
    assert format_program(_fused(program, "16x16")) == filtered
    assert True in answers
    if example == "resnet_block.gs":  # conv2's skip connection: no rule fuses its chain
        assert False in answers


def test_the_epilogue_filter_sees_the_bias_add_of_an_array_calls_rows() -> None:
    fused = _fused(_dense("relu"))
    assert _epilogues(fused)
    accumulator = parse_program("(input acc i32 (shape 5 20))\n" + DENSE.format(
        open="(compute relu", close=")", product="(access-tensor acc)"), "acc.gs")
    assert not pipeline._epilogue_may_match(accumulator.root)
    compiled = pipeline.compile_program(_dense("relu"), ArrayConfig(8, 8),
                                        types=check_program(_dense("relu")))
    assert pipeline._epilogue_may_match(compiled.program.root)


def _expanded(requantize: str, clip: str) -> str:
    return (f"(compute {clip} (compute {requantize} (access-pair (compute elementwise-add "
            "(access-pair (access-tensor acc) (access-tensor bias))) (access-tensor m))))")


@pytest.mark.parametrize("clip", ["relu", "(clip -5 9)", "(clip -128 127)"])
def test_it_means_the_compute_chain_it_replaces(clip: str) -> None:
    declarations = "".join(f"(input {name} i32 (shape 3 4 5))\n" for name in ("acc", "bias", "m"))
    requantize = "(requantize-per-channel 2 40 -7)"
    fused = parse_program(declarations + f"(accel-epilogue {requantize} {clip} (access-tensor "
                          "acc) (access-tensor bias) (access-tensor m))", "fused.gs")
    chain = parse_program(declarations + _expanded(requantize, clip), "chain.gs")
    rng = np.random.default_rng(5)
    inputs = {"acc": rng.integers(-2**31, 2**31, (3, 4, 5)).astype(np.int32),  # wraps
              "bias": rng.integers(-2**31, 2**31, (3, 4, 5)).astype(np.int32),
              "m": rng.integers(2**17, 2**19, (3, 4, 5)).astype(np.int32)}
    got, expected = run_program(fused, inputs), run_program(chain, inputs)
    assert got.dtype == expected.dtype == np.int8 and np.array_equal(got, expected)
    assert len(np.unique(got)) > 4


BAD = [
    ("(accel-epilogue (requantize 1 0 4 0) relu a b m)", "4:17",
     "the requantize must be (requantize-per-channel pre post zero-point), got requantize"),
    ("(accel-epilogue (requantize-per-channel 0 4 0) sqrt a b m)", "4:48",
     "the clip must be relu or (clip low high), got sqrt"),
    ("(accel-epilogue (requantize-per-channel 0 4 0) (clip -300 0) a b m)", "4:48",
     "clip bounds [-300, 0] must be i8 integers"),
    ("(accel-epilogue (requantize-per-channel 0 4 0) relu a s m)", "4:71",
     "bias ((2),()) must have the accumulator's access shape ((2,3),())"),
    ("(accel-epilogue (requantize-per-channel 0 4 0) relu a b n)", "4:89",
     "multipliers must be i32, got ((2,3),()) i8"),
]


@pytest.mark.parametrize("root, where, message", BAD)
def test_a_bad_epilogue_is_a_located_error(root: str, where: str, message: str) -> None:
    text = ("(input a i32 (shape 2 3)) (input b i32 (shape 2 3)) (input m i32 (shape 2 3))\n"
            "(input s i32 (shape 2))\n(input n i8 (shape 2 3))\n"
            + root.replace(" a ", " (access-tensor a) ").replace(" b ", " (access-tensor b) ")
            .replace(" s ", " (access-tensor s) ").replace(" m)", " (access-tensor m))")
            .replace(" n)", " (access-tensor n))"))
    with pytest.raises(GlensideError) as raised:
        check_program(parse_program(text, "bad.gs"))
    assert str(raised.value) == f"bad.gs:{where}: error: accel-epilogue: {message}"


def _cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", *arguments],
                          capture_output=True, text=True, timeout=600)


def test_compile_accel_shows_and_verifies_the_fused_program() -> None:
    example = str(EXAMPLES / "small_cnn.gs")
    rewritten = _cli("compile", example, "--array", "8x8", "--accel", "--verify")
    assert rewritten.returncode == 0, rewritten.stderr
    assert "verified: the rewritten program computes the same result" in rewritten.stderr
    assert "(accel-epilogue (requantize-per-channel 0 4 0) relu" in rewritten.stdout
    bare = _cli("compile", example, "--array", "8x8", "--bare-array")  # no epilogue there
    assert bare.returncode == 0 and "accel-epilogue" not in bare.stdout


def _hand_written(root: Path) -> Path:
    """The dense layer written with accel-epilogue over a product the rewriter maps; its
    weights, bias and multipliers are constants (the accelerator preloads them)."""
    rng = np.random.default_rng(7)
    np.savez(root / "dense.npz", w=rng.integers(-128, 128, (20, 24)).astype(np.int8),
             b=rng.integers(-4000, 4000, 20).astype(np.int32),
             mult=rng.integers(2**14, 2**16, 20).astype(np.int32))
    text = DENSE.format(open="", close="", product=PRODUCT)
    body = text.split("(compute (requantize-per-channel 1 24 3)")[0]
    for name in ("w", "b", "mult"):
        body = body.replace(f"(input {name} ", f"(weight {name} ")
        body = body.replace(f"(weight {name} i8 (shape 20 24))",
                            f'(weight {name} i8 (shape 20 24) "dense.npz")')
        body = body.replace(f"(weight {name} i32 (shape 20))",
                            f'(weight {name} i32 (shape 20) "dense.npz")')
    bias = ("(access-broadcast (access-insert-axis (access-tensor b) 0) "
            "(access-shape (shape 5 20) (shape)))")
    mult = bias.replace("tensor b", "tensor mult")
    path = root / "hand.gs"
    path.write_text(body + f"(accel-epilogue (requantize-per-channel 1 24 3) (clip -50 100)\n"
                    f" {PRODUCT}\n {bias}\n {mult})\n")
    return path


def test_on_the_bare_array_a_hand_written_epilogue_is_an_error(tmp_path: Path) -> None:
    source = _hand_written(tmp_path)
    ran = _cli("compile", str(source), "--array", "8x8", "--bare-array", "-o",
               str(tmp_path / "out"))
    assert ran.returncode == 1
    assert ran.stderr.strip() == (f"{source}:7:2: error: accel-epilogue runs on the whole "
                                  "accelerator: compile without --bare-array")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.rtl
def test_a_hand_written_epilogue_runs_on_the_accelerator_three_ways(
        tmp_path: Path, sim_cache: Path) -> None:
    """Interpreter, generated C (the accelerator's C model) and make sim (ws_accel) agree
    bit for bit, and the layer takes its predicted cycles on the RTL."""
    source = _hand_written(tmp_path)
    outdir = tmp_path / "out"
    ran = _cli("compile", str(source), "--array", "8x8", "--accel", "-o", str(outdir))
    assert ran.returncode == 0 and "warning" not in ran.stderr, ran.stderr
    assert ", 1 accelerator layers:" in ran.stdout
    x = np.random.default_rng(2).integers(-128, 128, (5, 24)).astype(np.int8)
    arguments = save_inputs({"x": x}, tmp_path)
    program = read_program(source)
    expected = run_program(program, data.all_tensors(program, {"x": x}))
    assert len(np.unique(expected)) > 4
    assert np.array_equal(run_c_program(outdir, arguments, tmp_path / "c.npy"), expected)
    sim = cosimulate(outdir, arguments, tmp_path / "sim.npy", sim_cache)
    assert np.array_equal(sim.result, expected)
    (layer,) = [call for call in sim.report["calls"] if "accel" in call]
    assert layer["data_ok"] and layer["simulated_cycles"] == layer["predicted_cycles"]


# A quantized 3×3 convolution (inputs only) and a 3×3, stride 2 max-pool of its result
# padded by 1 with the minimum, as ResNet's stem writes one.
POOLED = """
(input x i8 (shape 1 4 6 6))
(input w i8 (shape 8 4 3 3))
(input b i32 (shape 8))
(input m i32 (shape 8))
(let layer
 (compute (requantize-per-channel 0 8 -3)
  (access-pair
   (compute elementwise-add
    (access-pair
     (access-transpose
      (compute dot-product
       (access-cartesian-product
        (access (access-tensor w) 1)
        (access (access-squeeze (access-windows
          (access (access-pad (access-pad (access-tensor x) zero-padding 2 1 1)
                              zero-padding 3 1 1) 1)
          (shape 4 3 3) (shape 1 1 1)) 1) 3)))
      (list 1 0 2 3))
     (access-broadcast (access-reshape (access-tensor b) (access-shape (shape 1 8 1 1) (shape)))
                       (access-shape (shape 1 8 6 6) (shape)))))
   (access-broadcast (access-reshape (access-tensor m) (access-shape (shape 1 8 1 1) (shape)))
                     (access-shape (shape 1 8 6 6) (shape))))))
(compute reduce-max
 (access-windows (access {pooled} 2) (shape 3 3) (shape 2 2)))
"""
PADDED = "(access-pad (access-pad layer min-padding 2 1 1) min-padding 3 1 1)"


def test_the_rules_fuse_a_max_pool_of_an_epilogue() -> None:
    program = parse_program(POOLED.format(pooled=PADDED), "pooled.gs")
    fused = _fused(program)
    pools = [term for term in postorder(fused.root) if term.op == "accel-max-pool"]
    assert [pool.args[:3] for pool in pools] == [(3, 2, 1)]
    assert pools[0].args[3] == _epilogues(fused)[0]
    assert not any(compute_name(term) == "reduce-max" for term in postorder(fused.root))
    validate(program, fused, seeds=(0, 1))


def test_the_rules_fuse_small_cnns_unpadded_max_pool() -> None:
    typed = pipeline.load(EXAMPLES / "small_cnn.gs")
    fused = _fused(typed.program, "16x16")
    pools = [term for term in postorder(fused.root) if term.op == "accel-max-pool"]
    assert [pool.args[:3] for pool in pools] == [(2, 2, 0)]
    assert fused.names[pools[0]] == "pooled"  # the user's name follows the fused term


def test_a_max_pool_of_no_layer_or_padded_unevenly_is_not_fused() -> None:
    uneven = "(access-pad (access-pad layer min-padding 2 1 1) min-padding 3 0 1)"
    for pooled in ("(access-pad (access-pad (access-tensor x) min-padding 2 1 1) "
                   "min-padding 3 1 1)", uneven):
        program = parse_program(POOLED.format(pooled=pooled), "pooled.gs")
        fused = _fused(program)
        assert not any(term.op == "accel-max-pool" for term in postorder(fused.root))


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 1), (2, 2, 0), (3, 1, 2)])
def test_accel_max_pool_means_the_max_pool_it_replaces(kernel: int, stride: int,
                                                       padding: int) -> None:
    declaration = "(input y i8 (shape 2 3 7 6))\n"
    pooled = "(access-tensor y)"
    if padding:
        pooled = (f"(access-pad (access-pad {pooled} min-padding 2 {padding} {padding}) "
                  f"min-padding 3 {padding} {padding})")
    chain = parse_program(declaration + f"(compute reduce-max (access-windows (access {pooled} "
                          f"2) (shape {kernel} {kernel}) (shape {stride} {stride})))", "c.gs")
    fused = parse_program(declaration + f"(accel-max-pool {kernel} {stride} {padding} "
                          "(access-tensor y))", "f.gs")
    y = np.random.default_rng(4).integers(-128, 128, (2, 3, 7, 6)).astype(np.int8)
    got, expected = run_program(fused, {"y": y}), run_program(chain, {"y": y})
    assert got.dtype == expected.dtype == np.int8 and np.array_equal(got, expected)
    assert check_program(fused)[fused.root] == check_program(chain)[chain.root]


POOL_BAD = [
    ("(accel-max-pool 0 1 0 (access-tensor y))", "2:17",
     "kernel 0 and stride 1 must be positive and padding 0 smaller than the kernel"),
    ("(accel-max-pool 2 2 2 (access-tensor y))", "2:17",
     "kernel 2 and stride 2 must be positive and padding 2 smaller than the kernel"),
    ("(accel-max-pool 9 1 0 (access-tensor y))", "2:17",
     "a 9x9 window does not fit the padded 7x6"),
    ("(accel-max-pool 2 2 0 (access (access-tensor y) 2))", "2:23",
     "pools an i8 access with two or more access axes and no item axes ((…,H,W),()), "
     "got ((2,3),(7,6)) i8"),
]


@pytest.mark.parametrize("root, where, message", POOL_BAD)
def test_a_bad_max_pool_is_a_located_error(root: str, where: str, message: str) -> None:
    with pytest.raises(GlensideError) as raised:
        check_program(parse_program("(input y i8 (shape 2 3 7 6))\n" + root, "bad.gs"))
    assert str(raised.value) == f"bad.gs:{where}: error: accel-max-pool: {message}"


def test_an_accelerator_construct_the_accelerator_cannot_take_is_warned_about(
        tmp_path: Path) -> None:
    # a max-pool of an input, not of an accelerator layer's rows: it runs on the host, and
    # compile says so (the reduce; its padding's copies and fills are data movement)
    source = tmp_path / "pool.gs"
    source.write_text("(input y i8 (shape 1 3 7 6))\n(accel-max-pool 3 2 1 (access-tensor y))\n")
    ran = _cli("compile", str(source), "--array", "4x4", "--accel", "-o", str(tmp_path / "out"))
    assert ran.returncode == 0, ran.stderr
    assert ", 0 accelerator layers:" in ran.stdout
    assert ran.stderr.startswith("warning: 1 host instructions of accel-epilogue or "
                                 "accel-max-pool terms stay on the host")


def test_an_epilogue_over_a_cast_of_min_padded_floats_compiles(tmp_path: Path) -> None:
    """Found by the fuzzer: `compile --accel` asked for the integer range of an f32 buffer
    (a min-padding fill, while looking for constant biases) and crashed with an assertion."""
    program = parse_program(
        "(input f f32 (shape 2 3))\n(input t i32 (shape 2 4))\n"
        "(accel-epilogue (requantize-per-channel 0 4 0) relu\n"
        " (compute (cast i32) (access-pad (access-tensor f) min-padding 1 0 1))\n"
        " (access-tensor t) (access-tensor t))\n", str(tmp_path / "p.gs"))
    config = ArrayConfig(2, 2)
    result = pipeline.compile_to_directory(program, check_program(program), tmp_path / "out",
                                           config, accel=pipeline.accelerator_for(config))
    assert result.host_epilogues > 0 and (tmp_path / "out" / "model.c").is_file()


def test_the_epilogue_filter_knows_every_kind_of_epilogue_rule() -> None:
    """pipeline._epilogue_may_match restates the epilogue rules by hand, so that regions
    no rule can match are not saturated: a rule of a kind it does not know would silently
    never fire there. Each kind here is one the filter accounts for (a requantize of a bias
    add of `array-rows`, or a rule matching an accelerator construct); a new kind fails
    until the filter (and this list) say how it matches."""
    import re
    from dataclasses import replace

    from glensidec.lang.constructs import Group
    from glensidec.opt.rewrite import ROW_VIEWS, Profile, epilogue_rules

    typed = pipeline.load(EXAMPLES / "small_cnn.gs")
    profile = replace(Profile.of(typed.program.root, typed.types),
                      requantizes=frozenset({("(requantize 1 0 4 0)", 4),
                                             ("(requantize-per-channel 1 24 3)", 2)}),
                      clips=frozenset({"relu", "(clip -3 7)"}))
    names = re.findall(r':name "([^"]*)"', "\n".join(epilogue_rules(profile)))
    known = ([f"array-rows-{array}" for array in sorted(Group.HARDWARE)]
             + [f"array-rows-{view}" for view in ROW_VIEWS]
             + [f"epilogue-{text}-{side}" for text in ("(requantize 1 0 4 0)-4",
                                                       "(requantize-per-channel 1 24 3)")
                for side in "xb"]
             + ["epilogue-clip-relu", "epilogue-clip-(clip -3 7)",
                "epilogue-max-pool-padded", "epilogue-max-pool-unpadded"])
    assert sorted(names) == sorted(known)
