"""The memory planner: no two live buffers share bytes, alignment, and the lower bound."""

from __future__ import annotations

import itertools

import pytest
from conftest import EXAMPLES, make_program
from hypothesis import given, settings
from hypothesis import strategies as st

from glensidec.backend.lower import LoweredProgram, lower_program
from glensidec.backend.plan import (
    ALIGNMENT,
    Interval,
    check_no_overlap,
    live_intervals,
    lower_bound,
    overlaps_by_name,
    plan_activations,
    plan_memory,
)
from glensidec.frontends import builders as b
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program


def lowered_of(program: Program) -> LoweredProgram:
    return lower_program(program, check_program(program))


intervals_strategy = st.lists(
    st.tuples(st.integers(1, 5000), st.integers(0, 30), st.integers(0, 8)),
    min_size=0, max_size=25,
).map(lambda rows: [Interval(f"b{i}", -(-size // 64) * 64, start, start + length)
                    for i, (size, start, length) in enumerate(rows)])


@given(intervals_strategy)
@settings(max_examples=150, deadline=None)
def test_any_interval_set_is_placed_without_overlap(intervals: list[Interval]) -> None:
    placement = plan_activations(intervals)
    check_no_overlap(intervals, placement.offsets)
    assert placement.used >= placement.lower_bound == lower_bound(intervals)
    assert 0 < placement.efficiency <= 1
    assert placement.used <= sum(i.size for i in intervals)


@given(intervals_strategy)
@settings(max_examples=150, deadline=None)
def test_lower_bound_and_partners_match_their_definitions(intervals: list[Interval]) -> None:
    """The sweeps agree with the quadratic definitions they replace."""
    peak = max((sum(i.size for i in intervals if i.start <= t <= i.end)
                for t in {i.start for i in intervals}), default=0)
    assert lower_bound(intervals) == peak
    partners = overlaps_by_name(intervals)
    for interval in intervals:
        expected = {o.name for o in intervals if o is not interval and
                    o.overlaps_in_time(interval)}
        assert {o.name for o in partners[interval.name]} == expected
        assert len(partners[interval.name]) == len(expected)


@given(st.lists(st.integers(1, 100_000), min_size=1, max_size=30))
@settings(max_examples=150, deadline=None)
def test_chains_reach_the_lower_bound(sizes: list[int]) -> None:
    """A chain: buffer i is written by instruction i and read by instruction i + 1."""
    intervals = [Interval(f"b{i}", -(-size // 64) * 64, i, i + 1) for i, size in enumerate(sizes)]
    placement = plan_activations(intervals)
    check_no_overlap(intervals, placement.offsets)
    assert placement.used == placement.lower_bound


def test_the_checker_finds_an_overlap() -> None:
    first, second = Interval("a", 128, 0, 3), Interval("b", 64, 2, 5)
    with pytest.raises(ValueError, match=r"a .* overlaps b"):
        check_no_overlap([first, second], {"a": 0, "b": 64})
    check_no_overlap([first, second], {"a": 0, "b": 128})
    check_no_overlap([first, Interval("b", 64, 4, 5)], {"a": 0, "b": 0})  # never live together
    with pytest.raises(ValueError, match="aligned"):
        check_no_overlap([first], {"a": 32})


def _chain_program(depth: int) -> Program:
    """relu, cast, requantize, negative … alternating sizes: a chain network."""
    layer = b.access(b.tensor("x"), 1)
    for index in range(depth):
        if index % 3 == 0:
            layer = b.compute("cast", layer, "i32")
        elif index % 3 == 1:
            layer = b.compute("requantize", layer, 1, 0, 2, 0)
        else:
            layer = b.compute("relu", layer)
    return make_program(b.compute("reduce-sum", layer), {"x": ((64, 33), "i8")})


@pytest.mark.parametrize("program", [
    pytest.param(_chain_program(9), id="elementwise-chain"),
    pytest.param(read_program(EXAMPLES / "small_cnn.gs"), id="small_cnn"),
    pytest.param(read_program(EXAMPLES / "glenside" / "conv2d.glenside",
                              EXAMPLES / "glenside" / "conv2d.json"), id="conv2d"),
])
def test_chain_networks_use_exactly_the_lower_bound(program: Program) -> None:
    plan = plan_memory(lowered_of(program))
    assert plan.activations.used == plan.activations.lower_bound
    assert plan.activations.efficiency == 1.0


def test_branchy_resnet_block_is_planned_and_reported() -> None:
    lowered = lowered_of(read_program(EXAMPLES / "resnet_block.gs"))
    plan = plan_memory(lowered)
    check_no_overlap(plan.intervals, plan.activations.offsets)
    # the skip connection keeps x (an input, not an activation) live; what is reported:
    assert plan.activations.lower_bound <= plan.activations.used < plan.naive_activations
    assert 0 < plan.activations.efficiency <= 1


def test_regions_are_aligned_and_separate() -> None:
    lowered = lowered_of(read_program(EXAMPLES / "resnet_block.gs"))
    plan = plan_memory(lowered)
    for offsets in (plan.constants, plan.mutable, plan.activations.offsets):
        assert all(offset % ALIGNMENT == 0 for offset in offsets.values())
    kinds = {name: buffer.kind for name, buffer in lowered.buffers.items()}
    assert {kinds[n] for n in plan.constants} == {"constant"}
    assert {kinds[n] for n in plan.mutable} == {"input", "output"}
    assert {kinds[n] for n in plan.activations.offsets} == {"activation"}
    for offsets, size in ((plan.constants, plan.constants_size),
                          (plan.mutable, plan.mutable_size)):
        ends = sorted((o, o + lowered.buffers[n].nbytes) for n, o in offsets.items())
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(ends))
        assert ends[-1][1] <= size


def test_live_intervals_span_first_write_to_last_read() -> None:
    relu = b.compute("relu", b.access(b.tensor("x"), 1))
    later = b.compute("negative", b.compute("negative", relu))
    root = b.compute("elementwise-add", b.op("access-pair", later, relu))
    intervals = {i.name: i for i in live_intervals(lowered_of(
        make_program(root, {"x": ((4, 4), "f32")})))}
    # relu is shared, so printing the program named it relu_0 (make_program round-trips)
    assert (intervals["relu_0"].start, intervals["relu_0"].end) == (0, 3)
    assert (intervals["negative"].start, intervals["negative"].end) == (1, 2)



