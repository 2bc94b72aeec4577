"""Lowering: the view algebra against numpy, and what each lowering rule produces.

End-to-end equivalence of lowered programs (through C) is in test_emit.py; here each rule's
shape is checked: which constructs stay views, which copy, what fuses, what is shared.
"""

from __future__ import annotations

import math

import numpy as np
from conftest import EXAMPLES, make_program
from hypothesis import given, settings
from hypothesis import strategies as st

from glensidec.backend.lower import (
    CONSTANT,
    OUTPUT,
    ArrayGemm,
    Copy,
    Dot,
    Fill,
    Fold,
    Instruction,
    LoweredProgram,
    LowerOptions,
    Map,
    constant_array,
    format_lowered,
    lower_program,
)
from glensidec.backend.views import (
    Axis,
    View,
    broadcast,
    canonical,
    contiguous,
    merge_dims,
    refine,
    regroup,
    select,
    slice_view,
    transpose,
    view_array,
    windows,
)
from glensidec.frontends import builders as b
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program


def lower(program: Program, **options: bool) -> LoweredProgram:
    return lower_program(program, check_program(program), LowerOptions(**options))


def kinds(lowered: LoweredProgram) -> list[str]:
    return [type(i).__name__ for i in lowered.instructions]


# -- the view algebra against numpy ---------------------------------------------------

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def _base(shape: tuple[int, ...]) -> tuple[View, np.ndarray]:
    flat = np.arange(math.prod(shape) + 7, dtype=np.int32)
    return View("t", 7, contiguous("t", shape).dims), flat


@given(shapes, st.randoms(use_true_random=False))
@settings(max_examples=60, deadline=None)
def test_transpose_slice_select_broadcast_match_numpy(shape: tuple[int, ...], random: object
                                                      ) -> None:
    import random as random_module
    assert isinstance(random, random_module.Random)
    view, flat = _base(shape)
    expected = flat[7:].reshape(shape)
    permutation = list(range(len(shape)))
    random.shuffle(permutation)
    view, expected = transpose(view, permutation), expected.transpose(permutation)
    axis = random.randrange(len(shape))
    low = random.randrange(expected.shape[axis])
    high = random.randrange(low + 1, expected.shape[axis] + 1)
    sliced = slice_view(view, axis, low, high)
    assert sliced is not None  # a single-axis dim always slices
    index = [slice(None)] * len(shape)
    index[axis] = slice(low, high)
    view, expected = sliced, expected[tuple(index)]
    np.testing.assert_array_equal(view_array(view, flat), expected)
    pick = random.randrange(expected.shape[0])
    np.testing.assert_array_equal(view_array(select(view, 0, pick), flat), expected[pick])
    target = tuple(d if d != 1 else 3 for d in expected.shape)
    np.testing.assert_array_equal(view_array(broadcast(view, target), flat),
                                  np.broadcast_to(expected, target))


@given(shapes, shapes, st.randoms(use_true_random=False))
@settings(max_examples=80, deadline=None)
def test_regroup_is_a_row_major_reshape_or_refuses(shape: tuple[int, ...],
                                                   target_seed: tuple[int, ...],
                                                   random: object) -> None:
    """A reshape of a transposed view: exact when regroup answers, None only when no
    strides can express it (then the lowerer copies)."""
    import random as random_module
    assert isinstance(random, random_module.Random)
    view, flat = _base(shape)
    permutation = list(range(len(shape)))
    random.shuffle(permutation)
    view = transpose(view, permutation)
    expected = flat[7:].reshape(shape).transpose(permutation)
    size = math.prod(shape)
    target = _factor(size, target_seed)
    result = regroup(view, target)
    if result is not None:
        np.testing.assert_array_equal(view_array(result, flat), expected.reshape(target))
    if permutation == sorted(permutation):
        assert result is not None  # a contiguous buffer reshapes to anything


@given(st.lists(st.integers(2, 4), min_size=2, max_size=4).map(tuple),
       st.randoms(use_true_random=False))
@settings(max_examples=80, deadline=None)
def test_slicing_one_index_of_a_merged_dim_stays_a_view(shape: tuple[int, ...],
                                                        random: object) -> None:
    """A dim merged from several strided axes (a transposed map reshaped: Swin's
    (windows·heads, tokens, width) view of its projection) slices to a view at any single
    index, and over whole steps of its outer dim; any slice it answers is numpy's. One
    index used to copy the whole source, for every (window, head): 500 M of swin_t's
    host cycles."""
    import random as random_module
    assert isinstance(random, random_module.Random)
    view, flat = _base(shape)
    permutation = list(range(len(shape)))
    random.shuffle(permutation)
    transposed = flat[7:].reshape(shape).transpose(permutation)
    merged = merge_dims(transpose(view, permutation), [len(shape) - 1, 1])
    expected = transposed.reshape(-1, transposed.shape[-1])
    step = math.prod(transposed.shape[1:-1])  # one index of the outer merged dim
    size = expected.shape[0]
    low = random.randrange(size)
    high = low + 1 if random.random() < 0.5 else random.randrange(low + 1, size + 1)
    sliced = slice_view(merged, 0, low, high)
    if high == low + 1 or (low % step == 0 and high % step == 0):
        assert sliced is not None
    if sliced is not None:
        np.testing.assert_array_equal(view_array(sliced, flat), expected[low:high])


def _factor(size: int, seed: tuple[int, ...]) -> tuple[int, ...]:
    """A shape with `size` elements, shaped by `seed`."""
    dims = []
    for dim in seed:
        if size % dim == 0:
            dims.append(dim)
            size //= dim
    return (*dims, size)


def test_flattening_an_im2col_window_view_stays_a_view() -> None:
    view, flat = _base((3, 6, 6))
    patches = windows(view, 0, (3, 3, 3), (1, 1, 1))  # ((),(3,6,6)) → ((1,4,4),(3,3,3))
    assert patches is not None
    matrix = merge_dims(patches, [3, 3])  # the im2col matrix ((16),(27))
    assert matrix.shape == (16, 27)
    data = flat[7:].reshape(3, 6, 6)
    expected = np.stack([data[:, i:i + 3, j:j + 3].reshape(27) for i in range(4)
                         for j in range(4)])
    np.testing.assert_array_equal(view_array(matrix, flat), expected)


def test_windows_with_strides_match_numpy() -> None:
    view, flat = _base((2, 9, 8))
    result = windows(view, 1, (3, 2), (2, 3))
    assert result is not None
    data = flat[7:].reshape(2, 9, 8)
    expected = np.lib.stride_tricks.sliding_window_view(data, (3, 2), axis=(1, 2))[:, ::2, ::3]
    np.testing.assert_array_equal(view_array(result, flat), expected)


@given(st.lists(st.lists(st.sampled_from([2, 3, 4, 6]), min_size=0, max_size=3),
                min_size=2, max_size=3))
@settings(max_examples=100, deadline=None)
def test_refine_walks_every_group_in_lockstep(factorisations: list[list[int]]) -> None:
    """Groups of equal size, strides row-major in an arbitrary order: refinement, when it
    exists, visits the same logical elements through every group."""
    sizes = [math.prod(f) for f in factorisations]
    groups = []
    for factors in factorisations:
        # pad every group to the largest size with a leading factor, when it divides
        scale = max(sizes) // math.prod(factors) if max(sizes) % math.prod(factors) == 0 else 0
        if not scale:
            return
        factors = [scale, *factors] if scale > 1 else factors
        groups.append(canonical(Axis(size, math.prod(factors[i + 1:]))
                                for i, size in enumerate(factors)))
    refined = refine(groups)
    if refined is None:
        return
    assert len({tuple(a.size for a in axes) for axes in refined}) == 1

    def addresses(axes: list[Axis]) -> list[int]:
        out = [0]
        for axis in axes:
            out = [a + i * axis.stride for a in out for i in range(axis.size)]
        return out
    for group, axes in zip(groups, refined, strict=True):
        assert addresses(axes) == addresses(list(group))


def test_refine_refuses_incompatible_cuts() -> None:
    three_by_four = (Axis(3, 4), Axis(4, 1))
    four_by_three = (Axis(4, 3), Axis(3, 1))
    assert refine([three_by_four, four_by_three]) is None
    assert refine([three_by_four, (Axis(12, 1),)]) is not None


# -- lowering rules -------------------------------------------------------------------


def test_pure_reviews_lower_to_one_instruction_over_a_strided_view() -> None:
    """transpose, squeeze, windows, insert-axis, broadcast, access: no copy at all."""
    x = b.tensor("x")
    windowed = b.op("access-windows", b.access(x, 1), b.shape(4, 3), b.shape(2, 1))
    moved = b.transpose(b.op("access-squeeze", windowed, 1), 2, 0, 1, 3)
    root = b.compute("relu", b.op("access-insert-axis", moved, 1))
    lowered = lower(make_program(root, {"x": ((1, 4, 7), "f32")}))
    assert kinds(lowered) == ["Map"]
    (instruction,) = lowered.instructions
    assert isinstance(instruction, Map)
    assert instruction.src.buffer == "x" and not instruction.src.is_row_major()


def test_a_reshape_strides_cannot_express_copies_once() -> None:
    root = b.compute("relu", b.reshape(b.transpose(b.tensor("x"), 1, 0), (2,), (3,)))
    lowered = lower(make_program(root, {"x": ((2, 3), "i16")}))
    assert kinds(lowered) == ["Copy", "Map"]
    assert "not expressible as a view" in lowered.instructions[0].note


def test_a_slice_of_one_head_of_a_merged_windows_and_heads_dim_copies_nothing() -> None:
    """Swin's per-(window, head) operand: (windows, tokens, heads, width) transposed to
    (windows, heads, tokens, width), merged to (windows·heads, tokens, width), one index
    sliced. The merged dim's axes are not one stride, and the slice used to copy it all."""
    q = b.transpose(b.tensor("q"), 0, 2, 1, 3)
    merged = b.reshape(q, (6, 5, 4), ())
    root = b.compute("relu", b.op("access-slice", merged, 0, 4, 5))
    lowered = lower(make_program(root, {"q": ((2, 5, 3, 4), "i8")}))
    assert kinds(lowered) == ["Map"]
    (instruction,) = lowered.instructions
    assert isinstance(instruction, Map)
    flat = np.arange(2 * 5 * 3 * 4, dtype=np.int32)
    expected = flat.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3).reshape(6, 5, 4)[4:5]
    np.testing.assert_array_equal(view_array(instruction.src, flat), expected)


def test_pad_fills_borders_and_copies_the_interior() -> None:
    root = b.compute("relu", b.pad(b.access(b.tensor("x"), 1), 1, 2, 1, "min-padding"))
    lowered = lower(make_program(root, {"x": ((3, 4), "i8")}))
    assert kinds(lowered) == ["Fill", "Fill", "Copy", "Map"]
    fills = [i for i in lowered.instructions if isinstance(i, Fill)]
    assert [f.dst.shape for f in fills] == [(3, 2), (3, 1)] and all(f.minimum for f in fills)


def test_pair_and_product_fuse_into_their_compute() -> None:
    x, y = b.access(b.tensor("x"), 1), b.access(b.tensor("y"), 1)
    tensors: dict[str, tuple[tuple[int, ...], str]] = {"x": ((4, 6), "i8"), "y": ((4, 6), "i8")}
    added = lower(make_program(b.compute("elementwise-add", b.op("access-pair", x, y)), tensors))
    assert kinds(added) == ["Fold"]
    assert isinstance(added.instructions[0], Fold)
    assert [m.buffer for m in added.instructions[0].members] == ["x", "y"]
    on_array = lower(make_program(b.matmul(x, y), tensors))
    assert kinds(on_array) == ["Copy", "ArrayGemm"]  # y's rows become B's columns: packed
    assert "pack operand B" in on_array.instructions[0].note
    on_host = lower(make_program(b.matmul(x, y), tensors), offload_i8_gemm=False)
    assert kinds(on_host) == ["Dot"]
    tensors = {"x": ((4, 6), "f32"), "y": ((4, 6), "f32")}
    floats = lower(make_program(b.matmul(x, y), tensors))
    assert kinds(floats) == ["Dot"]
    assert isinstance(floats.instructions[0], Dot) and floats.instructions[0].reduce_rank == 1


def test_an_unfused_pair_is_materialised() -> None:
    x = b.access(b.tensor("x"), 1)
    root = b.compute("relu", b.op("access-pair", x, x))
    lowered = lower(make_program(root, {"x": ((3, 5), "f32")}))
    assert kinds(lowered) == ["Copy", "Copy", "Map"]


def test_common_subterms_are_computed_once() -> None:
    activated = b.compute("relu", b.access(b.tensor("x"), 1))
    doubled = b.compute("elementwise-add", b.op("access-pair", activated, activated))
    root = b.compute("elementwise-mul", b.op("access-pair", doubled, activated))
    lowered = lower(make_program(root, {"x": ((8, 8), "i32")}))
    assert kinds(lowered) == ["Map", "Fold", "Fold"]


def test_im2col_convolution_packs_the_window_view_once_and_calls_the_array() -> None:
    program = read_program(EXAMPLES / "small_cnn.gs")
    lowered = lower(program)
    calls = lowered.array_calls()
    assert [(c.m, c.k, c.n) for c in calls] == [(8, 9, 256), (1, 512, 10)]
    packs = [i for i in lowered.instructions if isinstance(i, Copy) and "pack" in i.note]
    assert len(packs) == 1  # the im2col matrix; the dense weights are packed at compile time
    # no copies besides the padding interiors and that pack: every re-view is a view
    copies = [i for i in lowered.instructions if isinstance(i, Copy)]
    assert len(copies) == 3


def test_constant_operands_are_packed_at_compile_time() -> None:
    program = read_program(EXAMPLES / "small_cnn.gs")
    lowered = lower(program)
    dense = next(c for c in lowered.array_calls() if c.k == 512)
    assert isinstance(dense, ArrayGemm)
    packed = lowered.buffers[dense.b.buffer]
    assert packed.kind == CONSTANT and packed.shape == (512, 10)
    weights = {"dense_w": np.arange(5120, dtype=np.int8).reshape(10, 512)}
    np.testing.assert_array_equal(constant_array(packed, weights), weights["dense_w"].T)
    # the unpacked original is no longer needed at run time
    assert "dense_w" not in lowered.buffers


def test_buffers_are_named_after_lets_and_ops() -> None:
    lowered = lower(read_program(EXAMPLES / "resnet_block.gs"))
    names = set(lowered.buffers)
    # buffers keep their names (the C code prefixes them all: emit.c_name)
    assert {"conv1", "conv1_biased", "hidden", "conv2", "skip", "block_sum", "x"} <= names
    assert lowered.buffers[lowered.output].kind == OUTPUT
    assert {"relu", "requantize", "requantize_1", "padded", "padded_1"} <= names


def test_the_result_is_computed_in_place_or_copied_once() -> None:
    relu = b.compute("relu", b.access(b.tensor("x"), 1))
    in_place = lower(make_program(relu, {"x": ((3, 4), "f32")}))
    assert kinds(in_place) == ["Map"] and in_place.output == "relu"
    view_of_input = lower(make_program(b.transpose(b.tensor("x"), 1, 0), {"x": ((3, 4), "f32")}))
    assert kinds(view_of_input) == ["Copy"]
    assert view_of_input.buffers[view_of_input.output].shape == (4, 3)


def test_format_lowered_prints_every_buffer_and_instruction() -> None:
    lowered = lower(read_program(EXAMPLES / "small_cnn.gs"))
    text = format_lowered(lowered)
    assert len(text.splitlines()) == len(lowered.buffers) + len(lowered.instructions) + 1
    assert "arraygemm conv@0[8:256,256:1] <- a=conv_w@0[8:9,9:1]" in text


def test_every_example_lowers_and_every_view_stays_inside_its_buffer() -> None:
    programs = [read_program(p) for p in sorted(EXAMPLES.glob("*.gs"))]
    programs += [read_program(p, p.with_suffix(".json"))
                 for p in sorted((EXAMPLES / "glenside").glob("*.glenside"))]
    for program in programs:
        lowered = lower(program)
        for instruction in lowered.instructions:
            for view in (instruction.writes(), *instruction.reads()):
                _assert_in_bounds(view, lowered.buffers[view.buffer].elements)


def _assert_in_bounds(view: View, elements: int) -> None:
    axes = view.axes()
    lowest = view.offset + sum((a.size - 1) * a.stride for a in axes if a.stride < 0)
    highest = view.offset + sum((a.size - 1) * a.stride for a in axes if a.stride > 0)
    assert lowest >= 0 and highest < elements, (view, elements)





def test_readers_and_writers_follow_instructions_changed_in_place() -> None:
    """The accelerator passes rewrite `instructions` in place between questions;
    `readers` and `writers` are cached (recomputing them per layer was quadratic), so the
    cache must see a replaced, deleted or inserted instruction."""
    lowered = lower(read_program(EXAMPLES / "small_cnn.gs"))
    fresh = lowered.copy()
    assert lowered.writers() == fresh._writers() and lowered.readers() == fresh._readers()
    first = lowered.instructions[0]
    copy = next(i for i in lowered.instructions if isinstance(i, Copy))
    lowered.instructions[0] = Copy("test", first.dst, copy.src)  # now reads copy.src's buffer
    assert 0 in lowered.readers()[copy.src.buffer]
    assert lowered.readers() == lowered._readers()  # updated in place of the replaced one
    lowered.instructions[0] = first
    assert lowered.writers() == fresh._writers() and lowered.readers() == fresh._readers()
    del lowered.instructions[0]
    assert lowered.writers() == {name: [i - 1 for i in indices if i > 0] for name, indices
                                 in fresh._writers().items() if indices != [0]}
    lowered.instructions.insert(0, first)
    assert lowered.writers() == fresh._writers() and lowered.readers() == fresh._readers()
def test_readers_and_writers_follow_runs_of_instructions_replaced_by_others() -> None:
    """A layer replaces its chain (a run of instructions) by a few others, changing the
    program's length: the cached answers are updated (recomputing them after each of
    ResNeXt-50's 550 layers took 25 s) and must equal a fresh computation after every
    kind of edit: a run replaced by a shorter, longer or empty one, at the start, the
    end and in between, several edits between two questions, and a large one."""
    import random

    lowered = lower(read_program(EXAMPLES / "resnet_block.gs"))
    pool = list(lowered.instructions)
    rng = random.Random(30)
    for step in range(300):
        for _ in range(rng.choice([1, 1, 1, 2])):
            size = len(lowered.instructions)
            start = rng.randrange(size + 1)
            end = min(size, start + rng.choice([0, 1, 2, 5, 100]))
            lowered.instructions[start:end] = rng.sample(pool, rng.choice([0, 1, 3, 7]))
        if not lowered.instructions:
            lowered.instructions = list(pool)
        question = lowered.readers if step % 2 else lowered.writers
        fresh = lowered._readers if step % 2 else lowered._writers
        assert question() == fresh(), step


def test_readers_and_writers_follow_many_edits_of_distinct_instructions() -> None:
    """The answers keep the instructions and find their positions through the edits
    since the program was last mapped whole (a layer moves every later instruction, and
    shifting each buffer's list after each of ResNeXt-50's 550 layers took seconds):
    hundreds of edits that insert new instruction objects (none twice, the case the
    update handles without recomputing), asked about between edits and about answers
    held from before, equal a fresh computation."""
    import copy
    import random

    lowered = lower(read_program(EXAMPLES / "resnet_block.gs"))
    pool = list(lowered.instructions)
    rng = random.Random(26)
    held = []
    for step in range(400):
        size = len(lowered.instructions)
        start = rng.randrange(size + 1)
        end = min(size, start + rng.choice([0, 1, 2, 5]))
        if rng.random() < 0.3 and size:  # one replaced in place, far from the others
            end = start = rng.randrange(size)
            end += 1
        lowered.instructions[start:end] = [copy.copy(rng.choice(pool))
                                           for _ in range(rng.choice([0, 1, 2, 3]))]
        if len(lowered.instructions) < 8:
            lowered.instructions += [copy.copy(instruction) for instruction in pool]
        question = lowered.readers if step % 2 else lowered.writers
        fresh = lowered._readers if step % 2 else lowered._writers
        answer = question()
        if step % 50 == 0:  # asked about later: answers must not change once handed out
            held.append((answer, fresh()))
        else:
            assert dict(answer) == fresh(), step
    for answer, expected in held:
        assert dict(answer) == expected




def _copy_chain(length: int) -> LoweredProgram:
    """A program of `length` copies, buffer i+1 = buffer i, after a fill of buffer 0."""
    from glensidec.backend.lower import ACTIVATION, Buffer

    buffers = {f"b{i}": Buffer(f"b{i}", "i8", (4,), ACTIVATION) for i in range(length + 1)}
    instructions: list[Fill | Copy] = [Fill("fill", contiguous("b0", (4,)), False)]
    instructions += [Copy(f"copy {i}", contiguous(f"b{i + 1}", (4,)),
                          contiguous(f"b{i}", (4,))) for i in range(length)]
    return LoweredProgram(buffers, list(instructions), f"b{length}", (4,))


def test_readers_and_writers_follow_a_layer_far_from_its_chain_without_recomputing() -> None:
    """A layer takes its array call's place and removes its chain's instructions further
    on: the edit's span holds 100 instructions it only moved. The answers are updated
    from the instructions taken out and put in (recomputing them after each of a
    vit_b_16's 750 layers, 22,000 instructions, took 30 % of its compile) and equal a
    fresh computation."""
    import copy

    lowered = _copy_chain(300)
    lowered.readers(), lowered.writers()
    asked: list[str] = []
    lowered._readers = lambda: asked.append("readers") or {}  # type: ignore[method-assign]
    lowered._writers = lambda: asked.append("writers") or {}  # type: ignore[method-assign]
    for start in (10, 150, 40):
        lowered.instructions[start] = copy.copy(lowered.instructions[start + 1])
        del lowered.instructions[start + 100]
        lowered.instructions.insert(start + 120, copy.copy(lowered.instructions[0]))
        fresh = lowered.copy()
        assert lowered.readers() == fresh.readers() and lowered.writers() == fresh.writers()
    assert asked == []


def test_readers_and_writers_follow_every_kind_of_edit_of_the_instruction_list() -> None:
    """The instruction list remembers the span each edit touched, and the answers are
    updated from that span alone: every way of editing a list (an item, a slice, an
    extended slice, delete, insert, append, extend, +=, pop, remove, sort, reverse, the
    list replaced), with new instruction objects and with ones already in the program
    (which the update refuses), between questions and several at once, must leave
    answers equal to a fresh computation."""
    import copy
    import random

    lowered = _copy_chain(60)
    pool = list(lowered.instructions)
    rng = random.Random(30)

    def some() -> list[Fill | Copy]:
        return [copy.copy(rng.choice(pool)) if rng.random() < 0.9 else rng.choice(pool)
                for _ in range(rng.choice([0, 1, 1, 2, 5]))]

    def edit(items: list[Instruction]) -> None:
        size = len(items)
        at = rng.randrange(size) if size else 0
        kind = rng.randrange(13)
        if kind == 0 and size:
            items[at - size * rng.randrange(2)] = (some() or [items[at]])[0]
        elif kind == 1:
            items[at:at + rng.choice([0, 1, 3, 70])] = some()
        elif kind == 2 and size > 4:
            step = rng.choice([2, -1])
            chosen = items[::step]
            items[::step] = [copy.copy(i) for i in chosen]
        elif kind == 3 and size:
            del items[at - size * rng.randrange(2)]
        elif kind == 4:
            del items[at:at + rng.choice([1, 2, 80])]
        elif kind == 5:
            items.insert(rng.randrange(-size - 1, size + 2), copy.copy(rng.choice(pool)))
        elif kind == 6:
            items.append(copy.copy(rng.choice(pool)))
        elif kind == 7:
            items.extend(some())
        elif kind == 8:
            items += some()
        elif kind == 9 and size:
            items.pop(rng.choice([-1, at]))
        elif kind == 10 and size:
            items.remove(items[at])
        elif kind == 11:
            items.sort(key=lambda i: i.note)
        elif kind == 12:
            items.reverse()

    for step in range(600):
        if rng.random() < 0.05:
            lowered.instructions = [copy.copy(i) for i in pool]
        for _ in range(rng.choice([1, 1, 2, 4])):
            edit(lowered.instructions)
        if len(lowered.instructions) < 10:
            lowered.instructions.extend(copy.copy(i) for i in pool)
        fresh = lowered.copy()
        question = lowered.readers if step % 3 else lowered.writers
        assert dict(question()) == dict(fresh.readers() if step % 3 else fresh.writers()), step


def test_a_buffer_name_a_let_frees_is_taken_again_by_the_next_buffer_of_its_base() -> None:
    """New buffers of one base take the first free `base_i` (trying from `base_1` each
    time was quadratic: 10 s of a swin_t's lowering); a `let` renaming a buffer frees its
    name, and the next buffer of that base takes it again, as the first-free rule says."""
    import random

    from glensidec.backend.lower import _Lowerer

    program = read_program(EXAMPLES / "matmul.gs")
    lowerer = _Lowerer(program, check_program(program), LowerOptions())
    rng = random.Random(26)
    for _ in range(2000):
        base = rng.choice(["pad", "pad_1", "a_2_1", "a_2", "x"])
        if rng.random() < 0.3 and lowerer.buffers:
            freed = rng.choice(sorted(lowerer.buffers))
            del lowerer.buffers[freed]
            lowerer.free_name(freed)
            continue
        expected = base
        if base in lowerer.buffers:
            index = 1
            while f"{base}_{index}" in lowerer.buffers:
                index += 1
            expected = f"{base}_{index}"
        assert lowerer.new_buffer(base, "i8", (1,)).buffer == expected


def test_drop_dead_code_removes_what_rounds_of_removal_would_in_one_walk() -> None:
    """`drop_dead_code` (after each accelerator pass) removed one round of instructions
    writing unread activations per walk of the program, and walked again until none was
    left; it now counts readers and follows them down in one walk. On random programs
    (copies and folds of earlier buffers, some reading their own destination, the output
    anywhere) it keeps exactly what the rounds kept, in order, and the same buffers."""
    import random

    from glensidec.backend.accel_layers import drop_dead_code
    from glensidec.backend.lower import ACTIVATION, INPUT, Buffer

    def by_rounds(lowered: LoweredProgram) -> list[Instruction]:
        instructions = list(lowered.instructions)
        while True:
            read = {view.buffer for instruction in instructions for view in instruction.reads()}
            kept = [instruction for instruction in instructions
                    if instruction.dst.buffer in read or instruction.dst.buffer == lowered.output
                    or lowered.buffer_of(instruction.dst).kind != ACTIVATION]
            if len(kept) == len(instructions):
                return kept
            instructions = kept

    rng = random.Random(30)
    for trial in range(200):
        count = rng.randrange(1, 30)
        buffers = {"x": Buffer("x", "i8", (4,), INPUT)}
        buffers.update((f"b{i}", Buffer(f"b{i}", "i8", (4,), ACTIVATION)) for i in range(count))
        names = list(buffers)
        instructions: list[Instruction] = []
        for _ in range(rng.randrange(1, 40)):
            dst = contiguous(rng.choice(names[1:]), (4,))
            sources = [contiguous(rng.choice(names), (4,)) for _ in range(2)]
            if rng.random() < 0.1:
                sources[0] = dst  # reads what it writes
            instructions.append(Copy("copy", dst, sources[0]) if rng.random() < 0.5 else
                                Fold("fold", dst, "elementwise-add", tuple(sources)))
        lowered = LoweredProgram(buffers, instructions, rng.choice(names[1:]), (4,))
        expected = by_rounds(lowered)
        drop_dead_code(lowered)
        assert list(map(id, lowered.instructions)) == list(map(id, expected)), trial
        used = {view.buffer for instruction in expected
                for view in (instruction.dst, *instruction.reads())}
        assert set(lowered.buffers) == used | {"x"}, trial


def test_element_range_is_the_lowest_and_highest_element_a_view_walks() -> None:
    """`element_range` lets a pass skip walking a view that cannot meet a run (Swin's and
    ViT's head concatenations checked every part against every other, element by
    element): on random strided views (negative, zero and positive strides) it is
    exactly the least and the greatest element `view_array` reads."""
    import random

    from glensidec.backend.views import Axis, View, element_range

    rng = random.Random(26)
    flat = np.arange(10_000)
    for _ in range(300):
        axes = [Axis(rng.randrange(1, 5), rng.randrange(-7, 8)) for _ in range(rng.randrange(4))]
        low = sum(min(0, (axis.size - 1) * axis.stride) for axis in axes)
        view = View("b", rng.randrange(-low, -low + 50), tuple((axis,) for axis in axes))
        walked = view_array(view, flat)
        assert element_range(view) == (int(walked.min()), int(walked.max())), view


def test_readers_after_an_edit_are_the_answers_before_it_shifted_not_found_again() -> None:
    """A buffer whose users an edit did not take out, put in or move keeps its answer,
    shifted past the edit (a swin_t's accelerator passes asked for 138,000 answers, each
    found user by user through the chain of edits): after edits at the start of a long
    chain, the answers asked before are not found again, and equal a fresh computation."""
    import copy

    from glensidec.backend import lower as lowering

    lowered = _copy_chain(200)
    dict(lowered.readers()), dict(lowered.writers())
    found: list[int] = []
    at = lowering._Positions.at

    def counted(self: lowering._Positions, instruction: Instruction) -> int:
        found.append(1)
        return at(self, instruction)

    lowering._Positions.at = counted  # type: ignore[method-assign]
    try:
        for start in (3, 10, 40):
            del lowered.instructions[start]
            lowered.instructions[start:start] = [copy.copy(lowered.instructions[0])] * 1 + \
                [copy.copy(lowered.instructions[1]), copy.copy(lowered.instructions[2])]
            asked = len(found)
            readers, writers = dict(lowered.readers()), dict(lowered.writers())
            assert len(found) - asked < 100  # (400 answers: found again, each is one)
            fresh = lowered.copy()
            assert readers == fresh._readers() and writers == fresh._writers()
    finally:
        lowering._Positions.at = at  # type: ignore[method-assign]
