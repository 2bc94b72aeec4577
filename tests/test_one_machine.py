"""One machine (issue 26): the whole accelerator is the default target, the bare array a
configuration of the same stages, every host instruction priced in one total, and the
accelerator's epilogue rules run one neighbourhood at a time."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
from conftest import EXAMPLES

import glensidec
from glensidec import pipeline
from glensidec.backend.lower import Copy, Fill, lower_program
from glensidec.backend.report import machine_cycles, report_data
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.host import HOST_MOVE
from glensidec.lang.syntax import parse_program, read_program
from glensidec.lang.terms import ComputeOp, compute_name, postorder
from glensidec.lang.typecheck import check_program
from glensidec.opt.extract import validate

CNN = EXAMPLES / "small_cnn.gs"


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_the_default_target_is_the_accelerator_and_bare_array_the_option() -> None:
    accel = _cli("compile", CNN, "--array", "8x8")
    bare = _cli("compile", CNN, "--array", "8x8", "--bare-array")
    old = _cli("compile", CNN, "--array", "8x8", "--accel")  # the old flag: a no-op alias
    assert accel.returncode == bare.returncode == old.returncode == 0
    assert "accel-epilogue" in accel.stdout and "accel-epilogue" not in bare.stdout
    assert accel.stdout == old.stdout
    assert accel.stderr == bare.stderr == ""  # chosen or asked for: nothing to explain
    both = _cli("compile", CNN, "--array", "8x8", "--accel", "--bare-array")
    assert both.returncode == 2 and "give one" in both.stderr


def test_compile_without_options_targets_the_16x16_accelerator() -> None:
    """`glensidec compile file.gs` alone (issue 26: "without options targets it") is the
    default machine, the 16×16 accelerator: the same program as --array 16x16."""
    plain = _cli("compile", CNN)
    sized = _cli("compile", CNN, "--array", "16x16")
    assert plain.returncode == sized.returncode == 0, plain.stderr
    assert "accel-epilogue" in plain.stdout and plain.stdout == sized.stdout


def test_an_f32_array_or_several_arrays_say_in_one_line_why_the_bare_array() -> None:
    f32 = pipeline.choose_target((ArrayConfig.f32(4, 4),))
    several = pipeline.choose_target((ArrayConfig(4, 4), ArrayConfig(8, 8)))
    assert f32.accel is None and several.accel is None
    assert f32.describe() == ("target: the bare 4x4:f32 array (the accelerator is int8; an "
                              "f32 array is the bare binary32 array)")
    assert several.describe().startswith("target: the bare 4x4,8x8 arrays (the accelerator "
                                         "has one array")
    done = _cli("compile", EXAMPLES / "glenside" / "matmul.glenside", "--shapes",
                EXAMPLES / "glenside" / "matmul.json", "--array", "4x4:f32")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f32.describe()]


def test_the_python_api_follows_the_same_default() -> None:
    accel = glensidec.compile(CNN, "8x8")
    bare = glensidec.compile(CNN, "8x8", bare_array=True)
    assert bare.target == "i8 program: compiled for the bare 8x8 int8 array"
    assert accel.target == "i8 program: compiled for the whole accelerator"
    assert accel.accel_cycles and bare.accel_cycles is None
    assert any(t.op == "accel-epilogue" for t in postorder(accel.program.root))
    assert glensidec.compile(CNN, "8x8", accel=False).program == bare.program


def test_copies_and_fills_are_priced_and_the_total_is_one_number() -> None:
    program = read_program(CNN)
    lowered = lower_program(program, check_program(program))
    rows = report_data("", lowered, ArrayConfig(8, 8)).rows
    moves = [(row, instruction) for row, instruction in zip(rows, lowered.instructions,
                                                           strict=True)
             if isinstance(instruction, Copy | Fill)]
    assert moves  # the padding of the image, at least
    for row, instruction in moves:
        assert row.host_cycles == HOST_MOVE * math.prod(instruction.dst.shape) > 0
    cycles = machine_cycles(lowered, ArrayConfig(8, 8))
    assert cycles.host == sum(row.host_cycles for row in rows)
    assert cycles.total == cycles.accelerator + cycles.array + cycles.host
    bare = glensidec.compile(program, "8x8", bare_array=True)  # the rewritten program's
    rewritten = lower_program(bare.program, check_program(bare.program))
    assert bare.predicted_cycles == machine_cycles(rewritten, ArrayConfig(8, 8)).total


def test_stats_prints_the_total_with_copies_priced() -> None:
    done = _cli("compile", CNN, "--array", "8x8", "--stats")
    compiled = glensidec.compile(CNN, "8x8")
    line = next(line for line in done.stderr.splitlines()
                if line.startswith("predicted cycles:"))
    assert line.startswith(f"predicted cycles: {compiled.predicted_cycles} (accelerator "
                           f"{compiled.accel_cycles}, array calls {compiled.array_cycles}, "
                           f"host {compiled.host_cycles} = ")


TWO_LAYERS = """
(input x i8 (shape 4 16))
(input w1 i8 (shape 16 16))
(input w2 i8 (shape 16 16))
(input b i32 (shape 16))
(let bias (access-broadcast (access-insert-axis (access-tensor b) 0)
                            (access-shape (shape 4 16) (shape))))
(let one (compute relu (compute (requantize 1234 0 12 0) (compute elementwise-add (access-pair
  (compute dot-product (access-cartesian-product (access (access-tensor x) 1)
                                                 (access (access-tensor w1) 1)))
  bias)))))
(compute (requantize 4321 0 12 0) (compute elementwise-add (access-pair
  (compute dot-product (access-cartesian-product (access one 1) (access (access-tensor w2) 1)))
  bias)))
"""


def test_epilogue_regions_keep_each_layers_own_multiplier() -> None:
    """Two layers alike but for their multipliers share one saturation (the multipliers are
    sentinels in the e-graph); each fused epilogue gets its own multiplier back."""
    program = parse_program(TWO_LAYERS, "two.gs")
    config = ArrayConfig(8, 8)
    compiled = pipeline.compile_program(program, config, types=check_program(program))
    fused = pipeline.fuse_epilogues(compiled, config)
    epilogues = [t for t in postorder(fused.program.root) if t.op == "accel-epilogue"]
    assert len(epilogues) == 2
    literals = {t.args[0] for e in epilogues for t in postorder(e.args[4])  # type: ignore[union-attr]
                if t.op == "literal"}
    assert literals == {1234, 4321}
    assert not any(compute_name(t) == "requantize" for t in postorder(fused.program.root))
    assert isinstance(epilogues[0].args[0], ComputeOp)
    validate(program, fused.program, seeds=(0, 1), types=(check_program(program), fused.types))


# Two layers, the second reading the first; each adds its own row of `s` (a slice of a
# transpose: no region leaf) along its rows, as Swin's softmax·V divides by its row of Σe.
ROW_BIASED_LAYERS = """
(input x i8 (shape 4 16))
(input w1 i8 (shape 16 16))
(input w2 i8 (shape 16 16))
(input s i32 (shape 2 4))
(let rows (access-transpose (access-tensor s) (list 1 0)))
(let one (compute (requantize 1234 0 12 0) (compute elementwise-add (access-pair
  (compute dot-product (access-cartesian-product (access (access-tensor x) 1)
                                                 (access (access-tensor w1) 1)))
  (access-broadcast (access-slice rows 1 0 1) (access-shape (shape 4 16) (shape)))))))
(compute (requantize 1234 0 12 0) (compute elementwise-add (access-pair
  (compute dot-product (access-cartesian-product (access one 1) (access (access-tensor w2) 1)))
  (access-broadcast (access-slice rows 1 1 2) (access-shape (shape 4 16) (shape))))))
"""


def test_epilogue_regions_alike_but_for_a_side_branch_are_saturated_once() -> None:
    """A term without an array call below a region's array call (a bias, a multiplier, a
    residual) is a placeholder of the region: no epilogue rule looks inside it. So two
    layers that differ only in which row of `s` they add are one canonical region (Swin's
    408 softmax·V regions per model were 408 saturations), and each fused epilogue keeps
    its own row."""
    from glensidec.opt.regions import canonical_region, cut_region

    program = parse_program(ROW_BIASED_LAYERS, "rows.gs")
    config = ArrayConfig(8, 8)
    compiled = pipeline.compile_program(program, config, types=check_program(program))
    root, types = compiled.program.root, compiled.types
    regions = pipeline.epilogue_regions(root)
    keys = {canonical_region(cut_region(top, below, types, compiled.program.tensors)).key([])
            for top, below in regions}
    assert (len(regions), len(keys)) == (2, 1)
    fused = pipeline.fuse_epilogues(compiled, config)
    epilogues = [t for t in postorder(fused.program.root) if t.op == "accel-epilogue"]
    assert len(epilogues) == 2
    slices = {(t.args[2], t.args[3]) for t in postorder(fused.program.root)
              if t.op == "access-slice"}
    assert slices == {(0, 1), (1, 2)}
    validate(program, fused.program, seeds=(0, 1), types=(check_program(program), fused.types))


def test_readers_and_writers_follow_changed_instructions() -> None:
    program = read_program(CNN)
    lowered = lower_program(program, check_program(program))
    before = {name: list(users) for name, users in lowered.writers().items()}
    changed = lowered.copy()
    assert changed.writers() == before
    first = changed.instructions.pop(0)
    assert changed.writers().get(first.dst.buffer, []) == [
        index - 1 for index in before[first.dst.buffer][1:]]
    assert np.all([index >= 0 for users in changed.readers().values() for index in users])


def test_the_report_shows_each_layer_and_where_the_cycles_go(tmp_path: Path) -> None:
    from glensidec.backend.report import ReportData, cycle_parts

    compiled = glensidec.compile(CNN, "8x8", tmp_path / "out")
    data = ReportData.from_json((tmp_path / "out" / "report.json").read_text())
    layers = data.layers
    # the input's padding (a layout layer), the convolution, the pool
    assert len(layers) == 3 and compiled.accel_cycles == sum(r.array_cycles for r in layers)
    _, conv, pool = layers
    assert 0 < conv.busy_cycles < conv.array_cycles and pool.busy_cycles == 0
    assert all(r.load_bytes > 0 and r.store_bytes > 0 for r in layers)
    parts = dict(cycle_parts(data))
    assert sum(parts.values()) == data.cycles.total == compiled.predicted_cycles
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<h2>Accelerator layers</h2>" in page and "Where the cycles go" in page
    assert f"<td>{conv.array_cycles - conv.busy_cycles:,}</td>" in page  # its DMA wait


def test_copies_of_constants_are_made_once_by_the_compiler() -> None:
    """The dense layer's weights, padded and packed for the array: constants of the
    compiled program, not host copies on every run (`make sim` checks the result:
    tests/test_cosim.py)."""
    from glensidec.backend.accel_layers import evaluate_buffer
    from glensidec.lang import data

    typed = pipeline.load(CNN)
    target = pipeline.choose_target((ArrayConfig(8, 8),))
    compiled = pipeline.compile_for(typed, target)
    weights = data.load_weights(compiled.program)
    lowered = pipeline.lower_for(compiled.program, compiled.types, target.config,
                                 target.accel, weights)
    bare = pipeline.lower_for(compiled.program, compiled.types, target.config, None, weights)
    moves = [i for i in lowered.instructions if isinstance(i, Copy | Fill)]
    assert moves and all(evaluate_buffer(lowered, i.dst.buffer, weights, len(
        lowered.instructions)) is None for i in moves)
    assert any(evaluate_buffer(bare, i.dst.buffer, weights, len(bare.instructions)) is not None
               for i in bare.instructions if isinstance(i, Copy | Fill))


def test_a_layers_layout_copy_is_not_warned_about_as_host_epilogue_work(tmp_path: Path) -> None:
    """small_cnn's pooled rows are copied back to NCHW on the host: a layout copy, not an
    epilogue the accelerator could not take (compile warned about it once)."""
    done = _cli("compile", CNN, "--array", "8x8", "-o", tmp_path / "out")
    assert done.returncode == 0 and done.stderr == ""
    assert "3 accelerator layers" in done.stdout  # the input's layout, conv and pool


def test_an_epilogue_region_that_reads_a_shape_of_a_tensor_compiles(tmp_path: Path) -> None:
    """The epilogue batches rename a region's tensors apart: `shape-of` names its tensor as
    `access-tensor` does, and was left with the canonical name (a KeyError at compile,
    found by the fuzzer: program 27:231)."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "weights.npz", w=rng.integers(-8, 8, (2, 6), dtype=np.int8),
             b=rng.integers(-8, 8, (2,), dtype=np.int32))
    (tmp_path / "p.gs").write_text("""
(weight w i8 (shape 2 6) "weights.npz" "w")
(weight b i32 (shape 2) "weights.npz" "b")
(input x i8 (shape 4 6))
(let bias
 (access-broadcast
  (access-insert-axis (access-tensor b) 0)
  (access-shape (shape-remove-axis (shape-remove-axis (shape 1 4 2 4) 0) 2)
                (slice-shape (shape-of w) 2))))
(compute (requantize-per-channel 3 24 -69)
 (access-pair
  (compute dot-product
   (access-cartesian-product (access (access-tensor x) 1) (access (access-tensor w) 1)))
  bias))
""")
    done = _cli("compile", tmp_path / "p.gs", "--array", "3x2", "--verify",
                "-o", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout + done.stderr
