"""Stage 6, plan: three memory regions, every buffer 64-byte aligned (Glow's planner).

* **constants** (weights, literals, operands packed at compile time): bump allocated, in
  buffer order; their bytes are `weights.bin`.
* **mutable** (the placeholders: runtime inputs and the output): bump allocated; the offsets
  are published in `model.h`.
* **activations** (everything else): each buffer is live from the first instruction that
  touches it to the last; two buffers whose intervals overlap may not share bytes. The lower
  bound is the peak of the live bytes over time; several placement orders are tried
  (first fit, best fit, two-ended) and the smallest result is kept. `efficiency = lower
  bound / used` is reported in the generated header.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from glensidec.backend.lower import ACTIVATION, CONSTANT, INPUT, OUTPUT, LoweredProgram

ALIGNMENT = 64


def align(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class Interval:
    """An activation buffer's aligned size and its live range [start, end] (instructions)."""

    name: str
    size: int
    start: int
    end: int

    def overlaps_in_time(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class Placement:
    offsets: dict[str, int]
    used: int  # bytes of the activation region
    lower_bound: int
    strategy: str

    @property
    def efficiency(self) -> float:
        return 1.0 if self.used == 0 else self.lower_bound / self.used


@dataclass(frozen=True)
class MemoryPlan:
    constants: dict[str, int]
    constants_size: int
    mutable: dict[str, int]
    mutable_size: int
    activations: Placement
    naive_activations: int  # every activation buffer in its own bytes
    intervals: tuple[Interval, ...]


def live_intervals(lowered: LoweredProgram) -> list[Interval]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, instruction in enumerate(lowered.instructions):
        for view in (instruction.writes(), *instruction.reads()):
            first.setdefault(view.buffer, index)
            last[view.buffer] = index
    return [Interval(name, align(buffer.nbytes), first[name], last[name])
            for name, buffer in lowered.buffers.items()
            if buffer.kind == ACTIVATION and name in first]


def lower_bound(intervals: Sequence[Interval]) -> int:
    """The peak, over instructions, of the bytes live during that instruction (a sweep:
    the live bytes only change where a buffer starts or after one ends)."""
    changes: dict[int, int] = {}
    for interval in intervals:
        changes[interval.start] = changes.get(interval.start, 0) + interval.size
        changes[interval.end + 1] = changes.get(interval.end + 1, 0) - interval.size
    starts = {interval.start for interval in intervals}
    live = peak = 0
    for time in sorted(changes):
        live += changes[time]
        if time in starts:
            peak = max(peak, live)
    return peak


def overlaps_by_name(intervals: Sequence[Interval]) -> dict[str, list[Interval]]:
    """Every interval's partners live at the same time (found once, by a sweep over starts,
    instead of a scan of all placed buffers per placement and strategy)."""
    ordered = sorted(intervals, key=lambda i: i.start)
    partners: dict[str, list[Interval]] = {interval.name: [] for interval in intervals}
    for index, interval in enumerate(ordered):
        for other in ordered[index + 1:]:
            if other.start > interval.end:
                break
            partners[interval.name].append(other)
            partners[other.name].append(interval)
    return partners


def _conflicts(interval: Interval, placed: dict[str, tuple[Interval, int]],
               partners: dict[str, list[Interval]]) -> list[tuple[int, int]]:
    """(offset, end) of the placed buffers live at the same time, by offset."""
    return sorted((placed[other.name][1], placed[other.name][1] + other.size)
                  for other in partners[interval.name] if other.name in placed)


def _gaps(busy: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int]:
    """Free (start, end) runs between busy ranges, and where the free space above them starts."""
    gaps, cursor = [], 0
    for low, high in busy:
        if low > cursor:
            gaps.append((cursor, low))
        cursor = max(cursor, high)
    return gaps, cursor


Fit = Callable[[Interval, list[tuple[int, int]], int, int], int | None]


def _first_fit(interval: Interval, busy: list[tuple[int, int]], capacity: int,
               index: int) -> int | None:
    gaps, top = _gaps(busy)
    return next((low for low, high in gaps if high - low >= interval.size), top)


def _best_fit(interval: Interval, busy: list[tuple[int, int]], capacity: int,
              index: int) -> int | None:
    gaps, top = _gaps(busy)
    fitting = [(high - low, low) for low, high in gaps if high - low >= interval.size]
    return min(fitting)[1] if fitting else top


def _two_ended(interval: Interval, busy: list[tuple[int, int]], capacity: int,
               index: int) -> int | None:
    """Alternate between the bottom and the top of a region of the lower bound's size: on a
    chain (two buffers live at a time) this is optimal; None when it does not fit."""
    gaps, top = _gaps(busy)
    inside = [(low, high) for low, high in [*gaps, (top, capacity)]
              if high - low >= interval.size]
    if not inside:
        return None
    if index % 2 == 0:
        return inside[0][0]
    return inside[-1][1] - interval.size


_ORDERS: dict[str, Callable[[Interval], tuple[int, ...]]] = {
    "size": lambda i: (-i.size, i.start),
    "start": lambda i: (i.start, -i.size),
    "length": lambda i: (-(i.end - i.start), -i.size, i.start),
    "area": lambda i: (-i.size * (i.end - i.start + 1), i.start),
}
_FITS: dict[str, Fit] = {"first-fit": _first_fit, "best-fit": _best_fit,
                         "two-ended": _two_ended}


def _place(intervals: Sequence[Interval], fit: Fit, capacity: int,
           partners: dict[str, list[Interval]]) -> dict[str, int] | None:
    placed: dict[str, tuple[Interval, int]] = {}
    for index, interval in enumerate(intervals):
        offset = fit(interval, _conflicts(interval, placed, partners), capacity, index)
        if offset is None:
            return None
        placed[interval.name] = (interval, offset)
    return {name: offset for name, (_, offset) in placed.items()}


def plan_activations(intervals: Sequence[Interval]) -> Placement:
    """Try every order × fit; keep the smallest region (first tried wins ties)."""
    bound = lower_bound(intervals)
    partners = overlaps_by_name(intervals)
    best: Placement | None = None
    for order_name, key in _ORDERS.items():
        ordered = sorted(intervals, key=lambda i: (*key(i), i.name))
        for fit_name, fit in _FITS.items():
            offsets = _place(ordered, fit, bound, partners)
            if offsets is None:
                continue
            used = max((offsets[i.name] + i.size for i in intervals), default=0)
            if best is None or used < best.used:
                best = Placement(offsets, used, bound, f"{fit_name} by {order_name}")
            if used == bound:
                return best
    assert best is not None
    return best


def check_no_overlap(intervals: Sequence[Interval], offsets: dict[str, int]) -> None:
    """Raise ValueError naming two buffers live at the same time in overlapping bytes."""
    ordered = sorted(intervals, key=lambda i: offsets[i.name])
    for index, first in enumerate(ordered):
        for second in ordered[index + 1:]:
            if offsets[second.name] >= offsets[first.name] + first.size:
                break
            if first.overlaps_in_time(second):
                raise ValueError(
                    f"{first.name} [{offsets[first.name]}, +{first.size}) live "
                    f"{first.start}..{first.end} overlaps {second.name} "
                    f"[{offsets[second.name]}, +{second.size}) live {second.start}..{second.end}")
        if offsets[first.name] % ALIGNMENT:
            raise ValueError(f"{first.name} is not {ALIGNMENT}-byte aligned")


def _bump(sizes: Sequence[tuple[str, int]]) -> tuple[dict[str, int], int]:
    offsets, cursor = {}, 0
    for name, size in sizes:
        offsets[name] = cursor
        cursor += align(size)
    return offsets, cursor


def plan_memory(lowered: LoweredProgram) -> MemoryPlan:
    buffers = lowered.buffers.values()
    constants, constants_size = _bump([(b.name, b.nbytes) for b in buffers
                                       if b.kind == CONSTANT])
    # Inputs first, in declaration order, then the output.
    io = [b for b in buffers if b.kind == INPUT] + [b for b in buffers if b.kind == OUTPUT]
    mutable, mutable_size = _bump([(b.name, b.nbytes) for b in io])
    intervals = live_intervals(lowered)
    placement = plan_activations(intervals)
    check_no_overlap(intervals, placement.offsets)
    return MemoryPlan(constants, constants_size, mutable, mutable_size, placement,
                      sum(i.size for i in intervals), tuple(intervals))
