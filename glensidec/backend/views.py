"""The view algebra of lowering: a buffer seen through strided axes, and its re-views.

A `View` is a buffer, an element offset and one *group* of (size, stride) axes per logical
dim. Every affine re-view of an access (`access`, transpose, move-axis, squeeze,
insert-axis, broadcast, slice, windows, flatten, reshape, shift-right) is a function from
views to views here, with no copy; `glensidec.backend.lower` decides when a copy is
needed (a reshape that would split an axis unevenly, data movement that is not affine).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from glensidec.lang.dtypes import Array

# -- views ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """One loop of a view: `size` steps of `stride` elements (stride 0 broadcasts)."""

    size: int
    stride: int


Group = tuple[Axis, ...]  # the axes of one logical dim, outermost first


def canonical(axes: Iterable[Axis]) -> Group:
    """Drop unit axes and merge neighbours that walk memory as one axis would."""
    merged: list[Axis] = []
    for axis in axes:
        if axis.size == 1:
            continue
        if merged and merged[-1].stride == axis.size * axis.stride:
            merged[-1] = Axis(merged[-1].size * axis.size, axis.stride)
        else:
            merged.append(axis)
    return tuple(merged)


def group_size(group: Group) -> int:
    return math.prod(axis.size for axis in group)


@dataclass(frozen=True)
class View:
    """Elements of `buffer` at `offset + Σ index·stride`, one axis group per logical dim."""

    buffer: str
    offset: int
    dims: tuple[Group, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(group_size(group) for group in self.dims)

    def axes(self) -> list[Axis]:
        """All axes in row-major order of the logical index."""
        return [axis for group in self.dims for axis in group]

    def is_row_major(self) -> bool:
        """Does the view read its elements as one contiguous run, in order?"""
        merged = canonical(self.axes())
        return not merged or (len(merged) == 1 and merged[0].stride == 1)

    def with_dims(self, dims: Iterable[Group], offset: int | None = None) -> View:
        return View(self.buffer, self.offset if offset is None else offset, tuple(dims))

    def __str__(self) -> str:
        groups = ",".join("x".join(f"{a.size}:{a.stride}" for a in g) or "1" for g in self.dims)
        return f"{self.buffer}@{self.offset}[{groups}]"


def contiguous(buffer: str, shape: Sequence[int], offset: int = 0) -> View:
    """The row-major view of a whole buffer."""
    dims: list[Group] = []
    stride = 1
    for size in reversed(shape):
        dims.append(canonical([Axis(size, stride)]))
        stride *= size
    return View(buffer, offset, tuple(reversed(dims)))


def split_axes(axes: Sequence[Axis], sizes: Sequence[int]) -> list[Group] | None:
    """Cut a row-major axis list into consecutive groups of `sizes` elements each.

    An axis straddling two groups is split into an outer and an inner axis when its size
    allows; otherwise the cut is not affine and the answer is None (the caller copies).
    """
    queue = deque(axis for axis in axes if axis.size != 1)
    groups: list[Group] = []
    for size in sizes:
        group: list[Axis] = []
        need = size
        while need > 1:
            if not queue:
                return None
            axis = queue.popleft()
            if need % axis.size == 0:
                group.append(axis)
                need //= axis.size
            elif axis.size % need == 0:
                inner = axis.size // need
                group.append(Axis(need, axis.stride * inner))
                queue.appendleft(Axis(inner, axis.stride))
                need = 1
            else:
                return None
        groups.append(canonical(group))
    return groups if not queue else None


def regroup(view: View, shape: Sequence[int]) -> View | None:
    """The same elements in the same row-major order, as logical dims `shape` (a reshape)."""
    groups = split_axes(canonical(view.axes()), shape)
    return None if groups is None else view.with_dims(groups)


def merge_dims(view: View, splits: Sequence[int]) -> View:
    """Merge consecutive logical dims: `splits` are the dim counts of each new dim."""
    dims: list[Group] = []
    start = 0
    for count in splits:
        dims.append(canonical([a for g in view.dims[start:start + count] for a in g]))
        start += count
    return view.with_dims(dims)


def transpose(view: View, permutation: Sequence[int]) -> View:
    return view.with_dims(view.dims[axis] for axis in permutation)


def move_axis(view: View, source: int, destination: int) -> View:
    dims = list(view.dims)
    dims.insert(destination, dims.pop(source))
    return view.with_dims(dims)


def squeeze(view: View, axis: int) -> View:
    return view.with_dims(view.dims[:axis] + view.dims[axis + 1:])


def insert_axis(view: View, axis: int) -> View:
    return view.with_dims(view.dims[:axis] + ((),) + view.dims[axis:])


def broadcast(view: View, target: Sequence[int]) -> View:
    dims = [group if group_size(group) == size else canonical([Axis(size, 0)])
            for group, size in zip(view.dims, target, strict=True)]
    return view.with_dims(dims)


def expand(view: View, position: int, sizes: Sequence[int]) -> View:
    """Insert broadcast (stride-0) logical dims of `sizes` at `position`."""
    new = tuple(canonical([Axis(size, 0)]) for size in sizes)
    return view.with_dims(view.dims[:position] + new + view.dims[position:])


def _single(group: Group) -> Axis | None:
    if not group:
        return Axis(1, 0)
    return group[0] if len(group) == 1 else None


def _slice_group(group: Group, low: int, high: int) -> tuple[int, Group] | None:
    """(element offset, axes) of logical indices [low, high) of a dim's axis group, or
    None when no strides express them.

    A run of whole steps of the outer axis keeps the inner axes; a run inside one step of
    the outer axis fixes it and slices the inner axes (a merged dim's single index: the
    window and head pairs of a transformer's (windows·heads, tokens, width) view)."""
    if not group:
        return 0, ()
    outer, rest = group[0], group[1:]
    inner = group_size(rest)
    if low % inner == 0 and high % inner == 0:
        return (low // inner) * outer.stride, (Axis((high - low) // inner, outer.stride),
                                                *rest)
    step = low // inner
    if step != (high - 1) // inner:
        return None
    sliced = _slice_group(rest, low - step * inner, high - step * inner)
    if sliced is None:
        return None
    return step * outer.stride + sliced[0], sliced[1]


def slice_view(view: View, axis: int, low: int, high: int) -> View | None:
    sliced = _slice_group(view.dims[axis], low, high)
    if sliced is None:
        return None
    offset, axes = sliced
    dims = list(view.dims)
    dims[axis] = canonical(axes)
    return view.with_dims(dims, view.offset + offset)


def select(view: View, axis: int, index: int) -> View:
    """Fix logical dim `axis` at `index` (the dim disappears)."""
    offset = view.offset
    for sub in reversed(view.dims[axis]):
        offset += (index % sub.size) * sub.stride
        index //= sub.size
    return view.with_dims(view.dims[:axis] + view.dims[axis + 1:], offset)


def windows(view: View, access_rank: int, window: Sequence[int],
            strides: Sequence[int]) -> View | None:
    """Sliding windows over the item dims: positions (size P, stride s·t), then windows."""
    positions: list[Group] = []
    inside: list[Group] = []
    for index, (size, step) in enumerate(zip(window, strides, strict=True)):
        group = view.dims[access_rank + index]
        single = _single(group)
        if single is None:
            return None
        count = (single.size - size) // step + 1
        positions.append(canonical([Axis(count, single.stride * step)]))
        inside.append(canonical([Axis(size, single.stride)]))
    return view.with_dims(view.dims[:access_rank] + tuple(positions) + tuple(inside))


def refine(groups: Sequence[Group]) -> list[list[Axis]] | None:
    """Axes that walk every group in lockstep: the common refinement of their axis sizes.

    All groups hold the same number of elements. Each is cut at every other's axis
    boundaries; that works when the boundaries (inner products) form a divisibility chain,
    else None (the caller copies an operand into a contiguous buffer first).
    """
    boundaries = {1}
    for group in groups:
        inner = 1
        for axis in reversed(group):
            inner *= axis.size
            boundaries.add(inner)
    chain = sorted(boundaries)
    if any(high % low for low, high in itertools.pairwise(chain)):
        return None
    refined: list[list[Axis]] = []
    for group in groups:
        pieces: list[Axis] = []
        inner = 1
        for axis in reversed(group):
            cuts = [cut for cut in chain if inner <= cut <= inner * axis.size]
            for low, high in itertools.pairwise(cuts):
                pieces.append(Axis(high // low, axis.stride * (low // inner)))
            inner *= axis.size
        refined.append(list(reversed(pieces)))
    return refined


def co_refinable(dims_per_operand: Sequence[Sequence[Group]]) -> bool:
    """Can one loop nest walk these operands' (equally shaped) leading dims together?"""
    rank = min(len(dims) for dims in dims_per_operand)
    return all(refine([dims[d] for dims in dims_per_operand]) is not None for d in range(rank))


def element_range(view: View) -> tuple[int, int]:
    """The lowest and highest element the view walks (a bound: it may skip some between)."""
    axes = view.axes()
    low = view.offset + sum(min(0, (axis.size - 1) * axis.stride) for axis in axes)
    high = view.offset + sum(max(0, (axis.size - 1) * axis.stride) for axis in axes)
    return low, high


def view_array(view: View, flat: Array) -> Array:
    """The view's elements as a numpy array of its logical shape (reads `flat`)."""
    axes = view.axes()
    if not axes:
        return np.array(flat[view.offset]).reshape(view.shape)
    item = flat.itemsize
    strided = np.lib.stride_tricks.as_strided(
        flat[view.offset:], shape=[a.size for a in axes], strides=[a.stride * item for a in axes],
        writeable=False)
    # (in C order: a copy in the strides' order, numpy's default, is copied once more by
    # every reshape of it, the callers' reshape(-1) included)
    return np.array(strided, order="C").reshape(view.shape)


def store_view(view: View, flat: Array, values: Array) -> None:
    """Write `values` (the view's logical shape) into the view's elements of `flat`."""
    axes = view.axes()
    item = flat.itemsize
    target = np.lib.stride_tricks.as_strided(
        flat[view.offset:], shape=[a.size for a in axes],
        strides=[a.stride * item for a in axes])
    target[...] = np.asarray(values, dtype=flat.dtype).reshape(target.shape)


def fill_view(view: View, flat: Array, value: int) -> None:
    """Write `value` into every element of the view in `flat` (store_view of a constant,
    without an array of it)."""
    axes = view.axes()
    item = flat.itemsize
    target = np.lib.stride_tricks.as_strided(
        flat[view.offset:], shape=[a.size for a in axes],
        strides=[a.stride * item for a in axes])
    target[...] = value
