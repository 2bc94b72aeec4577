"""Stage 5, lower: a typed program to a buffer-level program (Glow's low-level IR).

The access-pattern program is pure; the buffer-level program is a list of instructions over
named buffers, in execution order. Three ideas carry it (docs/codegen.md):

* **Views, not copies.** Every affine re-view of a value (`access`, transpose, move-axis,
  squeeze, insert-axis, broadcast, slice, windows, flatten, reshape, shift-right) is a `View`:
  a buffer, an element offset and one *group* of (size, stride) axes per logical dim. A
  logical dim made of several axes is what keeps a flattened windows view (the im2col
  matrix) a view. Only a reshape that would split an axis unevenly, and the data movement
  that is not affine (pad, concatenate, a materialised pair or product), copy.
* **Fused tuples.** `access-pair` and `access-cartesian-product` are lazy: a compute over
  them reads its two members through two views. `dot-product` over a cartesian product of
  i8 operands becomes one `ArrayGemm` (the systolic array runtime); the hardware constructs
  always do when their operands are i8.
* **Hash-consing.** Terms compare by structure, so each distinct term is lowered once and
  its value reused wherever it appears (common subterms are computed once).

`lower_program` returns a `LoweredProgram`; `format_lowered` prints it for debugging.
`_Lowerer` holds the buffers and instructions being built and lowers computes and the array
constructs; each access construct's lowering is a function in the `LOWERINGS` table (the
view algebra of backend/views.py applied to terms).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any, SupportsIndex

import numpy as np

from glensidec.backend.views import (
    View,
    broadcast,
    co_refinable,
    contiguous,
    expand,
    insert_axis,
    merge_dims,
    move_axis,
    regroup,
    select,
    slice_view,
    squeeze,
    transpose,
    view_array,
    windows,
)
from glensidec.hardware.accel import ResidualConfig
from glensidec.hardware.commands import LayerTraffic
from glensidec.hardware.layout import NchwLayout, NhwcLayout
from glensidec.lang.constructs import ComputeKind, Group
from glensidec.lang.dtypes import DTYPES, Array
from glensidec.lang.expand import expand_program, needs_expansion
from glensidec.lang.terms import ComputeOp, Program, Symbol, Term, postorder
from glensidec.lang.typecheck import (
    AccessType,
    LiteralValue,
    TypeTable,
    access_type,
    check_program,
)

# -- buffers and instructions ---------------------------------------------------------

CONSTANT, INPUT, OUTPUT, ACTIVATION = "constant", "input", "output", "activation"


@dataclass(frozen=True)
class ConstantSource:
    """Where a constant's bytes come from: a weight tensor, a literal, or a packed view."""

    tensor: str | None = None
    literal: int | float | None = None
    packed: View | None = None  # a view of another constant, stored contiguously …
    packed_from: Buffer | None = None  # … namely of this one
    data: bytes | None = None  # made by the compiler (an accelerator layer's commands)


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    kind: str  # CONSTANT, INPUT, OUTPUT or ACTIVATION
    source: ConstantSource | None = None
    tensor: str | None = None  # the declared tensor an input or weight buffer holds

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * DTYPES[self.dtype].size


@dataclass(frozen=True)
class Instruction:
    """Base of every instruction: `note` says which construct of the source it implements;
    every instruction writes exactly one view, `dst`."""

    note: str
    dst: View

    def reads(self) -> tuple[View, ...]:
        return ()

    def writes(self) -> View:
        return self.dst

    @functools.cached_property
    def read_buffers(self) -> frozenset[str]:
        """The buffers it reads (once per instruction: the accelerator passes ask after
        every edit of a program, of every instruction)."""
        return frozenset(view.buffer for view in self.reads())


@dataclass(frozen=True)
class Copy(Instruction):
    src: View

    def reads(self) -> tuple[View, ...]:
        return (self.src,)


@dataclass(frozen=True)
class Fill(Instruction):
    """dst = the padding value: zero, or the dtype's minimum (`minimum=True`); `value`
    instead of zero where an accelerator layer pads with its input's zero point."""

    minimum: bool
    value: int = 0


@dataclass(frozen=True)
class Map(Instruction):
    """An elementwise unary compute (relu, sqrt, exp, sigmoid, tanh, erf, negative, clip,
    cast, requantize)."""

    op: ComputeOp
    src: View

    def reads(self) -> tuple[View, ...]:
        return (self.src,)


@dataclass(frozen=True)
class Fold(Instruction):
    """elementwise-add/sub/mul/div folded across tuple members, wrapping at every step."""

    op: str
    members: tuple[View, ...]

    def reads(self) -> tuple[View, ...]:
        return self.members


@dataclass(frozen=True)
class RequantizePerChannel(Instruction):
    """requantize-per-channel: each i32 accumulator with its own i32 multiplier, to i8."""

    members: tuple[View, ...]  # (accumulators, multipliers)
    pre: int
    post: int
    zero_point: int

    def reads(self) -> tuple[View, ...]:
        return self.members


@dataclass(frozen=True)
class Reduce(Instruction):
    """reduce-sum/max/mean over the last `reduce_rank` logical dims of `src`."""

    op: str
    src: View
    reduce_rank: int

    def reads(self) -> tuple[View, ...]:
        return (self.src,)


@dataclass(frozen=True)
class Dot(Instruction):
    """dot-product on the host: Σ over the last `reduce_rank` dims of Π members."""

    members: tuple[View, ...]
    reduce_rank: int

    def reads(self) -> tuple[View, ...]:
        return self.members


@dataclass(frozen=True)
class Softmax(Instruction):
    """softmax over the last logical dim."""

    src: View

    def reads(self) -> tuple[View, ...]:
        return (self.src,)


@dataclass(frozen=True)
class ArrayGemm(Instruction):
    """C(M×N) = A(M×K) · B(K×N) on the systolic array (i8 -> i32, or f32); operands
    row-major."""

    a: View
    b: View
    m: int
    k: int
    n: int
    # The array's size, from its systolic-array construct: which of several arrays runs
    # the call, and (rows) the K folds that fix the order of an f32 array's sums. 0 where no
    # construct names them (the main array; integer sums are the same in any order).
    rows: int = 0
    cols: int = 0

    def reads(self) -> tuple[View, ...]:
        return (self.a, self.b)


@dataclass(frozen=True)
class Step:
    """One elementwise operation of a `Fused` instruction: a map (`op` a ComputeOp), a
    fold (`op` its name, e.g. "elementwise-add") or a requantize-per-channel (`op` that
    name, `params` pre, post, zero point), over `operands`: i ≥ 0 is leaf i, i < 0 the
    result of step −i − 1. `dtype` is the type of its result."""

    op: ComputeOp | str
    operands: tuple[int, ...]
    dtype: str
    params: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        """The operation by name: a map's compute type, a fold's or a requantize's op."""
        return self.op if isinstance(self.op, str) else self.op.name


@dataclass(frozen=True)
class Fused(Instruction):
    """Elementwise instructions in one loop nest (glensidec.backend.fuse_elementwise):
    each element of dst is the last step's value, computed from the leaves' elements at
    the same index; the steps in between stay in registers."""

    leaves: tuple[View, ...]
    steps: tuple[Step, ...]

    def reads(self) -> tuple[View, ...]:
        return self.leaves


@dataclass(frozen=True)
class AccelLayer(Instruction):
    """dst (M×N i8) = clip(requantize(a (M×K i8) · b (K×N i8) + bias)) on the whole
    accelerator (rtl/ws_accel.v): a table of its commands moves `a` and `b` through the DMA
    into the scratchpad, the array multiplies, and the epilogue adds the bias (N i32),
    requantizes by the multiplier (N i32) and clips as the rows leave for memory.

    Made by glensidec.backend.accel_layers from an array call and the bias add,
    requantize and clip that follow it; all operands are row-major and contiguous. With
    `residual` (M×N i8), the epilogue then adds it as the quantized residual add
    `residual_add` describes: dst = clip(requantize(y·a + residual·b + c)).
    """

    name: str  # the program's buffer the layer computes (its `let`)
    a: View
    b: View
    bias: View
    multiplier: View
    commands: View  # i32 rows of accel_native.FIELDS: conv_program's commands
    m: int
    k: int
    n: int
    pre: int
    post: int
    zero_point: int
    low: int
    high: int
    # From the commands (accel_layers.program_accel_layers sets them, last):
    input_base: int = 0  # where a, b and dst sit in the commands' address space
    weight_base: int = 0
    output_base: int = 0
    cycles: int = 0  # predicted: commands.accel_cycles, the RTL's count
    load_bytes: int = 0
    store_bytes: int = 0
    compute_rows: int = 0  # cycles the array took a row
    # the bytes moved by tensor and the compulsory bytes (commands.layer_traffic)
    traffic: LayerTraffic | None = None
    # A convolution the DMA reads as im2col rows straight from `a`, an NHWC feature map
    # (height, width, channels), already padded; () when `a` is the M×K matrix itself.
    image: tuple[int, ...] = ()
    kernel: int = 1
    stride: int = 1
    residual: View | None = None
    residual_add: ResidualConfig | None = None
    residual_base: int = -1
    # A max-pool (commands.pool_program) of the NHWC map `a` (`image`) over kernel ×
    # kernel windows at `stride`: no weights (`b` is unused, k is 0), the epilogue the
    # identity; dst holds the (M, C) pooled rows.
    pool: bool = False
    # … or the pool's window sums (an average pool) through the layer's epilogue (bias,
    # multiplier, clip), instead of its max.
    pool_sum: bool = False
    # A convolution's (or pool's) padding of `image` by the DMA: rows outside the map
    # read `pad_value` (a pool's padding never wins the max).
    padding: int = 0
    pad_value: int = 0
    pad_end: int = 0  # a ceil-mode pool's extra padding below and right of the map
    # A convolution's window that is not square or not dense (hardware.accel.ConvLayer's
    # fields of these names): `kernel`, `stride` and `padding` are along y, these along x
    # where they differ (None: the same), and the taps' dilation (dy, dx).
    kernel_w: int | None = None
    stride_w: int | None = None
    padding_w: int | None = None
    dilation: tuple[int, int] = (1, 1)
    # False: one kernel tap a scratchpad row even for few channels (ConvLayer.pack_taps),
    # so the DMA's bounds can pad the map
    pack_taps: bool = True
    # A grouped convolution of `image` (depthwise: groups = n): `b` is
    # commands.weight_matrix's packing for N blocks of `group_cols` columns (each block's
    # rows hold only the channels its groups read).
    groups: int = 1
    group_cols: int = 0
    # A layout layer (glensidec.hardware.layout), no image, kernel or pool: `a` is an NCHW
    # map, dst the NHWC map an NhwcLayout describes (padded), written as (m, n) rows of
    # n = g·C bytes; or (NchwLayout) `a` is a layer's (P, C) rows and dst the NCHW map, in
    # rows of g pixels. `b` holds the weight tiles that put each byte into place.
    layout: NhwcLayout | NchwLayout | None = None
    # An element-wise non-linearity after the clip (the IR's int8 `lookup`: hardswish,
    # sigmoid …): 256 i8 entries, result = table[clipped + 128], before a residual add.
    table: View | None = None
    # Bytes between dst's rows when the layer writes a block of columns of wider rows (a
    # channel concatenation in NHWC, written in place); 0: its rows are n bytes apart.
    output_pitch: int = 0
    # Per-column int8 scales of the biased sums (N, a run-time vector: squeeze-excite's
    # channel scale s, x·s[c] requantized): a sum pool of 1×1 windows with them.
    scale: View | None = None
    # Bytes between the pixels of `a` when a pool reads the first channels of wider rows
    # (a dense block's concatenation, read in place: `a` is strided); 0: `image`'s
    # channels apart.
    input_pitch: int = 0
    # The result's rows in another order: the layer's row i is row row_order[i] of dst (an
    # (M, N) buffer), and its residual row i row residual_order[i] of `residual` (None:
    # row i) — Swin's attention rows in window order, its map in image order. The DMA
    # cuts each store and residual load into 2-D row patterns (commands.with_row_order).
    row_order: tuple[int, ...] | None = None
    residual_order: tuple[int, ...] | None = None
    # A batch of `batch` independent products of one shape (hardware.batched: attention's
    # per-window, per-head products as one layer): `a` holds (batch, M/batch, K), `b`
    # (batch, K, N), dst (batch, M/batch, N), each contiguous; m counts every item's rows.
    # 0: one product.
    batch: int = 0

    @property
    def multiplies(self) -> bool:
        """Whether the layer is a product (not a pool or a layout change): what T_min, MACs
        and utilization count."""
        return not self.pool and self.layout is None

    @property
    def input_elements(self) -> int:
        """Bytes of `a` in the commands' address space."""
        if isinstance(self.layout, NchwLayout):
            return self.layout.pixels * self.layout.channels
        if self.layout is not None:
            return self.layout.channels * self.layout.height * self.layout.width
        if self.input_pitch:
            *pixels, channels = self.image
            return (math.prod(pixels) - 1) * self.input_pitch + channels
        return math.prod(self.image) if self.image else self.m * self.k

    def reads(self) -> tuple[View, ...]:
        operands: tuple[View, ...] = (self.a, self.b, self.bias, self.multiplier,
                                      self.commands)
        if self.table is not None:
            operands = (*operands, self.table)
        if self.scale is not None:
            operands = (*operands, self.scale)
        return operands if self.residual is None else (*operands, self.residual)


class InstructionList(list[Instruction]):
    """A program's instructions, remembering where each edit changed them: the span of
    positions an edit touched, as how many leading and how many trailing instructions it
    left in place (`edit_since`). LoweredProgram's `readers` and `writers` read it to
    update their answers from the edited span alone: comparing the whole program with
    its last snapshot at each question (a swin_t asks 12,000 times of 22,000
    instructions while the accelerator passes edit it) took most of those passes."""

    def __init__(self, items: Iterable[Instruction] = ()) -> None:
        super().__init__(items)
        self.version = 0
        self._edits: list[tuple[int, int]] = []  # per version: (leading, trailing) kept

    def __reduce__(self) -> tuple[object, ...]:
        return _restore_instructions, (list(self), self.version, list(self._edits))

    def edit_since(self, version: int) -> tuple[int, int]:
        """How many leading and trailing instructions no edit since `version` touched."""
        edits = self._edits[version:]
        return min(low for low, _ in edits), min(tail for _, tail in edits)

    def _edit(self, start: int, stop: int, count: int) -> None:
        """Positions [start, stop) were replaced by `count` instructions."""
        old = len(self) - count + (stop - start)
        self._edits.append((start, old - stop))
        self.version += 1

    def _span(self, index: SupportsIndex | slice) -> tuple[int, int] | None:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return (start, max(start, stop)) if step == 1 else None
        position = operator.index(index)
        position += len(self) if position < 0 else 0
        return position, position + 1

    def __setitem__(self, index: Any, value: Any) -> None:
        span = self._span(index)
        before = len(self)
        super().__setitem__(index, value)
        if span is None:
            self._edit(0, before, len(self))
        else:
            self._edit(span[0], span[1], span[1] - span[0] + len(self) - before)

    def __delitem__(self, index: SupportsIndex | slice) -> None:
        span = self._span(index)
        before = len(self)
        super().__delitem__(index)
        if span is None:
            self._edit(0, before, len(self))
        else:
            self._edit(span[0], span[1], 0)

    def insert(self, index: SupportsIndex, value: Instruction) -> None:
        self[index:index] = [value]

    def append(self, value: Instruction) -> None:
        super().append(value)
        self._edit(len(self) - 1, len(self) - 1, 1)

    def extend(self, values: Iterable[Instruction]) -> None:
        before = len(self)
        super().extend(values)
        self._edit(before, before, len(self) - before)

    def __iadd__(self, values: Iterable[Instruction]) -> InstructionList:  # type: ignore[override,misc]
        self.extend(values)
        return self

    def pop(self, index: SupportsIndex = -1) -> Instruction:
        value = self[index]
        del self[index]
        return value

    def _whole(self, method: str, *args: Any, **kwargs: Any) -> Any:
        before = len(self)
        answer = getattr(super(), method)(*args, **kwargs)
        self._edit(0, before, len(self))
        return answer

    def remove(self, value: Instruction) -> None:
        self._whole("remove", value)

    def clear(self) -> None:
        self._whole("clear")

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._whole("sort", *args, **kwargs)

    def reverse(self) -> None:
        self._whole("reverse")

    def __imul__(self, times: SupportsIndex) -> InstructionList:
        self._whole("__imul__", times)
        return self


def _restore_instructions(items: list[Instruction], version: int,
                          edits: list[tuple[int, int]]) -> InstructionList:
    restored = InstructionList(items)
    restored.version, restored._edits = version, edits
    return restored


@dataclass(frozen=True)
class _Seen:
    """The instructions (the list object, its version and a snapshot) that LoweredProgram's
    cached `readers` and `writers` answer for."""

    instructions: InstructionList
    version: int
    snapshot: tuple[Instruction, ...]


@dataclass
class LoweredProgram:
    buffers: dict[str, Buffer]
    instructions: list[Instruction]  # an InstructionList (what is assigned becomes one)
    output: str  # the buffer holding the program's result
    output_shape: tuple[int, ...]

    def __setattr__(self, name: str, value: object) -> None:
        if name == "instructions" and not isinstance(value, InstructionList):
            assert isinstance(value, list)
            value = InstructionList(value)
        super().__setattr__(name, value)

    def buffer_of(self, view: View) -> Buffer:
        return self.buffers[view.buffer]

    def array_calls(self) -> list[ArrayGemm]:
        return [i for i in self.instructions if isinstance(i, ArrayGemm)]

    def accel_layers(self) -> list[AccelLayer]:
        return [i for i in self.instructions if isinstance(i, AccelLayer)]

    def copy(self) -> LoweredProgram:
        """The same program in new containers (the buffers' dict, the instructions' list):
        what a pass edits in place without changing the program it was given."""
        copied = LoweredProgram(dict(self.buffers), list(self.instructions), self.output,
                                self.output_shape)
        seen = self._seen
        if seen is not None:  # the answers asked for so far hold for the copy too (each
            # pass starts with a copy, and asks them again)
            copied._users = dict(self._users)
            copied._seen = seen  # (edited since: the copy catches up when asked)
            instructions = copied.instructions
            assert isinstance(instructions, InstructionList)
            if seen.instructions is self.instructions and \
                    seen.version == self.instructions.version:  # (an InstructionList)
                copied._seen = _Seen(instructions, instructions.version, seen.snapshot)
        return copied

    # The `readers`/`writers` answers asked for (by name) and the instructions they answer
    # for: the accelerator passes ask for them once per layer while rewriting
    # `instructions` in place, and recomputing them each time made those passes quadratic
    # in the program.
    _users: dict[str, Users] = field(default_factory=dict, init=False, repr=False,
                                     compare=False)
    _seen: _Seen | None = field(default=None, init=False, repr=False, compare=False)

    def readers(self) -> Users:
        """Per buffer, the instructions that read it (each once), in program order
        (callers must not change the answer)."""
        return self._cached("readers", self._readers)

    def writers(self) -> Users:
        """Per buffer, the instructions that write it, in program order (callers must not
        change the answer)."""
        return self._cached("writers", self._writers)

    def _cached(self, which: str, compute: Callable[[], dict[str, list[int]]]) -> Users:
        self._catch_up()
        answer = self._users.get(which)
        if answer is None:
            assert self._seen is not None
            answer = self._users[which] = Users.of(self._seen.snapshot, compute())
        return answer

    def _catch_up(self) -> None:
        """Bring the answers asked for so far up to the instructions' edits: where the
        same list was edited, from the span its edits touched (`InstructionList`), or
        from a comparison of the old and the new snapshots (instructions compare by
        identity: a pass that changes one replaces it); only the lists of the buffers the
        instructions taken out or put in use are redone (`Users.edited`)."""
        instructions = self.instructions
        assert isinstance(instructions, InstructionList)
        seen = self._seen
        if seen is not None and seen.instructions is instructions and \
                seen.version == instructions.version:
            return
        snapshot = tuple(instructions)
        if seen is not None:
            kept = instructions.edit_since(seen.version) \
                if seen.instructions is instructions else None
            self._users = {which: updated for which, answer in self._users.items()
                           if (updated := _users_after_edit(
                               seen.snapshot, snapshot, answer, _USES[which], kept))
                           is not None}
        self._seen = _Seen(instructions, instructions.version, snapshot)

    def _readers(self) -> dict[str, list[int]]:
        readers: dict[str, list[int]] = {}
        for index, instruction in enumerate(self.instructions):
            for view in instruction.reads():
                if index not in readers.setdefault(view.buffer, []):
                    readers[view.buffer].append(index)
        return readers

    def _writers(self) -> dict[str, list[int]]:
        writers: dict[str, list[int]] = {}
        for index, instruction in enumerate(self.instructions):
            writers.setdefault(instruction.dst.buffer, []).append(index)
        return writers

    def is_whole(self, view: View) -> bool:
        """Does `view` walk its whole buffer, row-major, from the start?"""
        return (view.offset == 0 and view.is_row_major()
                and math.prod(view.shape) == self.buffer_of(view).elements)


#: The most instructions an edit may remove or insert for `_users_after_edit` to update
#: an answer rather than have it recomputed (its span, the instructions between the first
#: and the last it changed, may be longer: those it kept are only moved).
_EDIT_LIMIT = 64


def _identical_run(first: Sequence[Instruction], second: Sequence[Instruction]) -> int:
    """How many leading items the two hold as the same objects (a C loop)."""
    return len(list(itertools.takewhile(bool, map(operator.is_, first, second))))


def _users_after_edit(old: tuple[Instruction, ...], new: tuple[Instruction, ...],
                      answer: Users, buffers: Callable[[Instruction], Set[str]],
                      kept: tuple[int, int] | None = None) -> Users | None:
    """`answer` (readers or writers of `old`, by `buffers`) for `new`, or None when the
    edit is too large to update (recompute). A new answer: callers may hold the old one.
    `kept`: how many leading and trailing instructions the edit is known to have left in
    place (else the two are compared).

    The edit is the span between the first and the last position where the two differ.
    A layer puts its instruction where its array call was and removes its chain's
    instructions further on, so the span holds many instructions it only moved (a
    vit_b_16's spans are 70-180 long): those keep their entries and get new positions;
    only the ones taken out or put in change the lists of the buffers they use."""
    shortest = min(len(old), len(new))
    if kept is None:
        start = _identical_run(old, new)
        if start == len(old) == len(new):
            return answer
        tail = _identical_run(old[:start - 1:-1], new[:start - 1:-1]) if start else \
            _identical_run(old[::-1], new[::-1])
    else:
        start = min(kept[0], shortest)
        tail = min(kept[1], shortest - start)
    old_end, new_end = len(old) - tail, len(new) - tail
    old_span, new_span = old[start:old_end], new[start:new_end]
    new_ids = set(map(id, new_span))
    if len(new_ids) != len(new_span):
        return None  # an instruction twice
    staying = new_ids.intersection(map(id, old_span))
    removed = [instruction for instruction in old_span if id(instruction) not in staying]
    added = {start + offset: instruction for offset, instruction in enumerate(new_span)
             if id(instruction) not in staying}
    if len(removed) + len(added) > _EDIT_LIMIT:
        return None
    was = {id(instruction): start + offset for offset, instruction in enumerate(old_span)
           if id(instruction) in staying}
    moved = {start + offset: instruction for offset, instruction in enumerate(new_span)
             if id(instruction) in staying and was[id(instruction)] != start + offset}
    if not (removed or added or moved) and len(old) == len(new):
        return answer  # (instructions put back where they were)
    return answer.edited(new, old_end, new_end - old_end, removed, added, moved, buffers)


class _Positions:
    """Where each instruction of a program is (by `id`): a full map, or the map of the
    program before an edit and the edit (the instructions from position `moved_from` on
    moved by `shift`, those `removed` gone, and where the ones put in are: `region`).
    Building the full map walks the whole program, so it is rebuilt only every
    _POSITION_DEPTH edits."""

    def __init__(self, base: dict[int, int] | None, parent: _Positions | None = None,
                 moved_from: int = 0, shift: int = 0, removed: frozenset[int] = frozenset(),
                 region: dict[int, int] | None = None) -> None:
        self.base, self.parent = base, parent
        self.moved_from, self.shift, self.removed = moved_from, shift, removed
        self.region = region or {}
        self.depth: int = 0 if parent is None else parent.depth + 1

    @staticmethod
    def of(program: tuple[Instruction, ...]) -> _Positions:
        return _Positions(dict(zip(map(id, program), range(len(program)), strict=True)))

    def find(self, key: int) -> int | None:
        """The position of the instruction whose id is `key`, None when it is not there."""
        edits: list[_Positions] = []
        level = self
        while level.base is None:
            position = level.region.get(key)
            if position is not None or key in level.removed:
                break
            edits.append(level)
            assert level.parent is not None
            level = level.parent
        else:
            position = level.base.get(key)
        if position is None:
            return None
        for edit in reversed(edits):  # (before each edit, outside what it changed)
            if position >= edit.moved_from:
                position += edit.shift
        return position

    def at(self, instruction: Instruction) -> int:
        position = self.find(id(instruction))
        assert position is not None, "an instruction of the answer left the program"
        return position


#: Edits after which `_Positions` maps the whole program again.
_POSITION_DEPTH = 32


class _UsersByBuffer:
    """Per buffer, its users (instructions): a full dict, or an earlier map and the lists
    of the buffers an edit changed (None: the buffer has no users left). Copying the full
    dict for each edit made `Users.edited` linear in the buffers (a swin_t has 15,000), so
    it is flattened only every _POSITION_DEPTH edits."""

    def __init__(self, base: dict[str, list[Instruction]] | None,
                 parent: _UsersByBuffer | None = None,
                 changed: dict[str, list[Instruction] | None] | None = None) -> None:
        self.base, self.parent, self.changed = base, parent, changed or {}
        self.depth: int = 0 if parent is None else parent.depth + 1

    def get(self, name: str) -> list[Instruction] | None:
        level = self
        while level.base is None:
            if name in level.changed:
                return level.changed[name]
            assert level.parent is not None
            level = level.parent
        return level.base.get(name)

    def flat(self) -> dict[str, list[Instruction]]:
        """The full dict (kept: asked for again, it is not rebuilt)."""
        if self.base is None:
            edits: list[_UsersByBuffer] = []
            level = self
            while level.base is None:
                edits.append(level)
                assert level.parent is not None
                level = level.parent
            base = dict(level.base)  # (one copy, the edits applied in their order)
            for edit in reversed(edits):
                for name, users in edit.changed.items():
                    if users is None:
                        base.pop(name, None)
                    else:
                        base[name] = users
            self.base, self.parent, self.changed = base, None, {}
        return self.base

    def edited(self, changed: dict[str, list[Instruction] | None]) -> _UsersByBuffer:
        edited = _UsersByBuffer(None, self, changed)
        if edited.depth > _POSITION_DEPTH:
            edited.flat()
            edited.depth = 0
        return edited


class Users(Mapping[str, list[int]]):
    """Per buffer, the positions of the instructions that use it (LoweredProgram's
    `readers` or `writers`), in program order.

    Kept as the instructions themselves and turned into positions when asked: a layer
    that replaces its chain by fewer instructions moves every later instruction, and
    rewriting every buffer's list after each of ResNeXt-50's 550 layers took seconds; a
    list of instructions stays true. (A program that holds one instruction object twice
    keeps positions, and any edit of it recomputes.)"""

    def __init__(self, by_buffer: _UsersByBuffer | None, where: _Positions | None,
                 answers: dict[str, list[int]] | None = None,
                 edit: _AnswersBefore | None = None) -> None:
        self._by_buffer, self._where = by_buffer, where
        self._answers: dict[str, list[int]] = answers or {}
        self._before = edit
        self.depth: int = 0 if edit is None else edit.users.depth + 1

    @staticmethod
    def of(program: tuple[Instruction, ...], positions: dict[str, list[int]]) -> Users:
        if len(set(map(id, program))) != len(program):  # the same object twice
            return Users(None, None, positions)
        return Users(_UsersByBuffer({name: [program[index] for index in users]
                                     for name, users in positions.items()}),
                     _Positions.of(program))

    def __getitem__(self, name: str) -> list[int]:
        answer = self._known(name)
        if answer is None:
            users = None if self._by_buffer is None else self._by_buffer.get(name)
            if users is None or self._where is None:
                raise KeyError(name)
            at = self._where.at
            answer = self._answers[name] = [at(user) for user in users]
        return answer

    def _known(self, name: str) -> list[int] | None:
        """The answer for `name` if this one or an answer before its edits has it."""
        answer = self._answers.get(name)
        if answer is None and self._before is not None:
            answer = self._before.answer(name)
            if answer is not None:
                self._answers[name] = answer
        return answer

    def __contains__(self, name: object) -> bool:
        if self._by_buffer is None or not isinstance(name, str):
            return name in self._answers
        return self._by_buffer.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._answers if self._by_buffer is None else self._by_buffer.flat())

    def __len__(self) -> int:
        return len(self._answers if self._by_buffer is None else self._by_buffer.flat())

    def edited(self, program: tuple[Instruction, ...], moved_from: int, shift: int,
               removed: Sequence[Instruction], added: dict[int, Instruction],
               moved: dict[int, Instruction], buffers: Callable[[Instruction], Set[str]]
               ) -> Users | None:
        """The answer for `program`: this one's with `removed` taken out and `added` (by
        position) put in, the instructions from `moved_from` on moved by `shift` and those
        `moved` to their new positions; None when positions are kept or an instruction is
        in the program twice (recompute)."""
        if self._by_buffer is None or self._where is None:
            return None
        gone = frozenset(map(id, removed))
        region = {id(user): index for index, user in added.items()}
        if len(region) != len(added) or any(
                self._where.find(key) is not None for key in region):
            return None  # an instruction twice
        region.update((id(user), index) for index, user in moved.items())
        where = _Positions(None, self._where, moved_from, shift, gone, region)
        if where.depth > _POSITION_DEPTH:
            where = _Positions.of(program)
        changed: dict[str, list[Instruction] | None] = {}  # (the lists that change are new)
        # (the lists of the buffers that the moved ones use keep their members, in a new
        # order)
        for name in {name for user in (*removed, *added.values(), *moved.values())
                     for name in buffers(user)}:
            users = [user for user in self._by_buffer.get(name) or []
                     if id(user) not in gone]
            users += [user for user in added.values() if name in buffers(user)]
            users.sort(key=where.at)
            changed[name] = users or None
        before = _AnswersBefore(self, frozenset(changed), moved_from, shift)
        if self.depth < _POSITION_DEPTH:
            return Users(self._by_buffer.edited(changed), where, edit=before)
        # (every _POSITION_DEPTH edits the answers known so far are carried over at once,
        # so the chain of answers before stays short)
        answers = {name: answer for name in self._answers
                   if (answer := before.answer(name)) is not None}
        return Users(self._by_buffer.edited(changed), where, answers)


@dataclass(frozen=True)
class _AnswersBefore:
    """The `Users` an edit replaced, and the edit: a buffer whose users the
    edit did not take out, put in or move keeps its users, each at its old position or,
    from `moved_from` on, `shift` further (as `_Positions.find` says), so its answer is
    the old one shifted, not found again user by user (which walked the chain of
    `_Positions` for each: a swin_t's accelerator passes asked for 138,000 answers)."""

    users: Users  # the answer the edit replaced
    changed: frozenset[str]  # the buffers whose users the edit changed
    moved_from: int
    shift: int

    def answer(self, name: str) -> list[int] | None:
        if name in self.changed:
            return None
        old = self.users._known(name)
        if not old:
            return None
        if not self.shift or old[-1] < self.moved_from:
            return old  # (answers are not changed by callers)
        return [position + self.shift if position >= self.moved_from else position
                for position in old]


def _read_buffers(instruction: Instruction) -> frozenset[str]:
    return instruction.read_buffers


def _written_buffers(instruction: Instruction) -> set[str]:
    return {instruction.dst.buffer}


#: Per answer of LoweredProgram, the buffers an instruction is one of the users of.
_USES: dict[str, Callable[[Instruction], Set[str]]] = {
    "readers": _read_buffers, "writers": _written_buffers}


@dataclass(frozen=True)
class LowerOptions:
    # Send i8 dot-products over cartesian products (matmuls, im2col convolutions) to the
    # array even when no rewrite mapped them: the array is the point of the accelerator.
    offload_i8_gemm: bool = True
    # The dtype the array multiplies: its hardware constructs over operands of this dtype
    # become ArrayGemm calls ("f32" for the binary32 array); others run on the host.
    array_dtype: str = "i8"


# -- lazy tuples ----------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """`access-pair`: two member views of dims S+I; the tuple axis sits at `axis` = len(S)."""

    left: View
    right: View
    axis: int


@dataclass(frozen=True)
class Product:
    """`access-cartesian-product`: left dims A+I, right dims B+I."""

    left: View
    right: View
    left_rank: int
    right_rank: int

    def as_pair(self) -> Pair:
        a, b = self.left_rank, self.right_rank
        left = expand(self.left, a, self.right.shape[:b])
        right = expand(self.right, 0, self.left.shape[:a])
        return Pair(left, right, a + b)


Value = View | Pair | Product

def c_identifier(text: str) -> str:
    """A buffer's name from a `let`, tensor or construct name: the characters C allows in an
    identifier. The C code spells each buffer with a prefix of its own (`emit.c_name`), so
    no name a user can write meets a C keyword or a generated or library identifier."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def describe(term: Term, names: dict[Term, str]) -> str:
    """A one-line rendering of a term for comments: named subterms by name, long ones cut."""
    def text(arg: object, depth: int) -> str:
        if isinstance(arg, Term):
            if arg in names and depth > 0:
                return names[arg]
            if depth > 2:
                return "…"
            return "(" + " ".join([arg.op, *(text(a, depth + 1) for a in arg.args)]) + ")"
        if isinstance(arg, ComputeOp):
            return arg.name if not arg.params else "(" + " ".join(
                [arg.name, *map(str, arg.params)]) + ")"
        return str(arg)
    line = text(term, 0)
    line = line.replace("*/", "* /")
    return line if len(line) <= 110 else line[:109] + "…"


# -- the lowerer ----------------------------------------------------------------------


@dataclass
class _Lowerer:
    program: Program
    types: TypeTable
    options: LowerOptions
    buffers: dict[str, Buffer] = field(default_factory=dict)
    instructions: list[Instruction] = field(default_factory=list)
    values: dict[Term, Value] = field(default_factory=dict)
    auto_named: set[str] = field(default_factory=set)
    note: str = ""
    # Per buffer, the positions of the instructions and the terms whose values name it:
    # what `adopt_name` renames (rewriting every instruction and value for each `let`
    # took 60 % of lowering a swin_t, 22,000 instructions).
    instructions_naming: dict[str, list[int]] = field(default_factory=dict)
    terms_naming: dict[str, list[Term]] = field(default_factory=dict)
    # Per base name, an index below which every `base_i` (i ≥ 1) is taken: `new_buffer`
    # tries from there (trying from 1 each time was quadratic in a base's buffers).
    next_suffix: dict[str, int] = field(default_factory=dict)

    # -- buffers --
    def new_buffer(self, base: str, dtype: str, shape: tuple[int, ...], kind: str = ACTIVATION,
                   source: ConstantSource | None = None, auto: bool = True,
                   tensor: str | None = None) -> View:
        name = c_identifier(base)
        if name in self.buffers:  # the first free `name_i`
            stem = name
            index = self.next_suffix.get(stem, 1)
            while f"{stem}_{index}" in self.buffers:
                index += 1
            self.next_suffix[stem] = index + 1
            name = f"{stem}_{index}"
        self.buffers[name] = Buffer(name, dtype, shape, kind, source, tensor)
        if auto:
            self.auto_named.add(name)
        return contiguous(name, shape)

    def free_name(self, name: str) -> None:
        """`name` is no longer a buffer's: a later `new_buffer` may take it again."""
        stem, _, suffix = name.rpartition("_")
        if stem and suffix.isdigit() and str(int(suffix)) == suffix and int(suffix) > 0:
            self.next_suffix[stem] = min(self.next_suffix.get(stem, 1), int(suffix))

    def result_buffer(self, term: Term, base: str) -> View:
        """A fresh buffer for `term`'s value, named by its `let` if it has one."""
        result = self.access_type(term)
        if term in self.program.names:
            return self.new_buffer(self.program.names[term], result.dtype, result.full,
                                   auto=False)
        return self.new_buffer(base, result.dtype, result.full)

    def dtype(self, view: View) -> str:
        return self.buffers[view.buffer].dtype

    def emit(self, instruction: Instruction) -> None:
        for name in _named_buffers(instruction):
            self.instructions_naming.setdefault(name, []).append(len(self.instructions))
        self.instructions.append(instruction)

    def set_value(self, term: Term, value: Value) -> None:
        self.values[term] = value
        for view in _value_views(value):
            self.terms_naming.setdefault(view.buffer, []).append(term)

    def access_type(self, term: Term) -> AccessType:
        return access_type(self.types, term)

    # -- values --
    def lower(self) -> LoweredProgram:
        for term in postorder(self.program.root):
            if self.access_type_or_none(term) is None or term in self.values:
                continue
            self.note = describe(term, self.program.names)
            value = LOWERINGS[term.op](self, term)
            self.set_value(term, value)
            self.adopt_name(term, value)
        return self.finish()

    def arg_type(self, term: Term, index: int) -> AccessType:
        """The access type of argument `index` of `term`."""
        arg = term.args[index]
        assert isinstance(arg, Term)
        return self.access_type(arg)

    def arg_ints(self, term: Term, index: int) -> tuple[int, ...]:
        """The value of a (shape …)/(list …) argument, as the type checker evaluated it."""
        arg = term.args[index]
        assert isinstance(arg, Term)
        value = self.types[arg]
        assert isinstance(value, tuple)
        return value

    def access_type_or_none(self, term: Term) -> AccessType | None:
        value = self.types.get(term)
        return value if isinstance(value, AccessType) else None

    def adopt_name(self, term: Term, value: Value) -> None:
        """A `let` naming a view of an unnamed buffer gives the buffer its name."""
        name = self.program.names.get(term)
        if name is None or not isinstance(value, View) or value.buffer not in self.auto_named:
            return
        new_name = c_identifier(name)
        if new_name in self.buffers or new_name in self.program.tensors:
            return
        old = value.buffer
        self.buffers = {(new_name if key == old else key): (replace(buf, name=new_name)
                        if key == old else buf) for key, buf in self.buffers.items()}
        self.auto_named.discard(old)
        self.free_name(old)
        positions = self.instructions_naming.pop(old, [])
        for position in positions:
            self.instructions[position] = _rename(self.instructions[position], old, new_name)
        self.instructions_naming.setdefault(new_name, []).extend(positions)
        terms = self.terms_naming.pop(old, [])
        for named in terms:
            self.values[named] = _rename_value(self.values[named], old, new_name)
        self.terms_naming.setdefault(new_name, []).extend(terms)

    def value(self, arg: object) -> Value:
        assert isinstance(arg, Term)
        return self.values[arg]

    def view(self, arg: object) -> View:
        """The argument as a view, materialising a lazy pair or product."""
        value = self.value(arg)
        if isinstance(value, Product):
            value = value.as_pair()
        if isinstance(value, Pair):
            return self.materialize_pair(value, arg)
        return value

    def materialize_pair(self, pair: Pair, term: object) -> View:
        assert isinstance(term, Term)
        dst = self.result_buffer(term, term.op.replace("access-", ""))
        for index, member in enumerate((pair.left, pair.right)):
            self.emit(Copy(f"{self.note}: member {index}", select(dst, pair.axis, index), member))
        return dst

    def materialize(self, view: View, base: str) -> View:
        """A contiguous copy of `view` (when a re-view is not affine)."""
        dst = self.new_buffer(base, self.dtype(view), view.shape)
        self.emit(Copy(f"{self.note}: copy (not expressible as a view)", dst, view))
        return dst

    # -- compute --
    def compute(self, term: Term) -> Value:
        op, arg = term.args
        assert isinstance(op, ComputeOp) and isinstance(arg, Term)
        name = op.name
        if name == "dot-product":
            return self.dot_product(term, arg)
        if name in ComputeKind.FOLD:
            dst = self.result_buffer(term, name.removeprefix("elementwise-"))
            members = self.tuple_members(arg)
            self.emit(Fold(self.note, dst, name, tuple(self.operands(dst, members, 0))))
            return dst
        if name == "requantize-per-channel":
            pre, post, zero_point = (int(p) for p in op.params)
            dst = self.result_buffer(term, "requantized")
            members = self.operands(dst, self.tuple_members(arg), 0)
            self.emit(RequantizePerChannel(self.note, dst, tuple(members), pre, post, zero_point))
            return dst
        source = self.view(arg)
        if name in ComputeKind.REDUCE:
            return self.reduce(term, name, source, len(self.access_type(arg).item))
        dst = self.result_buffer(term, name.replace("-", "_"))
        if name == "softmax":
            self.emit(Softmax(self.note, dst, *self.operands(dst, [source], 0)))
        else:
            assert name in ComputeKind.MAP, name
            self.emit(Map(self.note, dst, op, *self.operands(dst, [source], 0)))
        return dst

    def reduce(self, term: Term, name: str, source: View, reduce_rank: int) -> View:
        dst = self.result_buffer(term, name.replace("-", "_"))
        (source,) = self.operands(dst, [source], reduce_rank)
        self.emit(Reduce(self.note, dst, name, source, reduce_rank))
        return dst

    def tuple_members(self, arg: Term) -> list[View]:
        """The t members of a tuple access ((S),(t,c…)) as views of dims S+c."""
        value = self.value(arg)
        if isinstance(value, Product) and arg.op == "access-cartesian-product":
            value = value.as_pair()
        if isinstance(value, Pair) and arg.op in ("access-pair", "access-cartesian-product"):
            return [value.left, value.right]
        view = self.view(arg)
        axis = len(self.access_type(arg).shape)
        return [select(view, axis, index) for index in range(view.shape[axis])]

    def operands(self, dst: View, sources: list[View], reduce_rank: int) -> list[View]:
        """Sources a single loop nest can walk with `dst`; others are copied contiguous."""
        def fits(candidates: list[View]) -> bool:
            outer = [dst.dims, *(s.dims[:len(dst.dims)] for s in candidates)]
            inner = [s.dims[len(dst.dims):] for s in candidates]
            return co_refinable(outer) and (not reduce_rank or co_refinable(inner))
        if fits(sources):
            return sources
        return [s if s.is_row_major() else self.materialize(s, s.buffer + "_packed")
                for s in sources]

    def dot_product(self, term: Term, arg: Term) -> View:
        value = self.value(arg)
        if isinstance(value, Product) and arg.op == "access-cartesian-product":
            dtype = self.dtype(value.left)
            # (only onto the int8 array: the binary32 one multiplies f32 operands)
            if dtype == "i8" == self.options.array_dtype and self.options.offload_i8_gemm:
                return self.product_on_array(term, value)
            pair = value.as_pair()
            item_rank = len(pair.left.dims) - pair.axis
            dst = self.result_buffer(term, "dot_product")
            members = self.operands(dst, [pair.left, pair.right], item_rank)
            self.emit(Dot(self.note, dst, tuple(members), item_rank))
            return dst
        members = self.tuple_members(arg)
        dst = self.result_buffer(term, "dot_product")
        item_rank = len(members[0].dims) - len(dst.dims)
        self.emit(Dot(self.note, dst, tuple(self.operands(dst, members, item_rank)), item_rank))
        return dst

    def product_on_array(self, term: Term, product: Product) -> View:
        a_rank, b_rank = product.left_rank, product.right_rank
        left_item = len(product.left.dims) - a_rank
        a = merge_dims(product.left, [a_rank, left_item])
        b = transpose(merge_dims(product.right, [b_rank, left_item]), (1, 0))
        return self.gemm(term, a, b)

    def gemm(self, term: Term, a: View, b: View, rows: int = 0, cols: int = 0) -> View:
        """dst(M×N) = a(M×K)·b(K×N) on the array (the result buffer keeps term's shape)."""
        a = self.matrix_operand(a, "a")
        b = self.matrix_operand(b, "b")
        (m, k), n = a.shape, b.shape[1]
        dst = self.result_buffer(term, "gemm")
        matrix = regroup(dst, (m, n))
        assert matrix is not None
        self.emit(ArrayGemm(self.note, matrix, a, b, m, k, n, rows, cols))
        return dst

    def matrix_operand(self, view: View, role: str) -> View:
        """A row-major matrix for the array: as is, packed at compile time, or copied."""
        if view.is_row_major():
            return view
        source = self.buffers[view.buffer]
        base = f"{view.buffer}_packed_{role}"
        if source.kind == CONSTANT:
            # Weights are known at compile time: store them in the order the array reads.
            packed = self.new_buffer(base, source.dtype, view.shape, CONSTANT,
                                     ConstantSource(packed=view, packed_from=source))
            return packed
        dst = self.new_buffer(base, source.dtype, view.shape)
        self.emit(Copy(f"{self.note}: pack operand {role.upper()} row-major", dst, view))
        return dst

    def accel_epilogue(self, term: Term) -> Value:
        """The epilogue's three steps as the host loops a compute chain lowers to: the
        accelerator pass (glensidec.backend.accel_layers) moves them into the epilogue of
        the array call that wrote the accumulator."""
        requantize_op, clip_op = term.args[0], term.args[1]
        assert isinstance(requantize_op, ComputeOp) and isinstance(clip_op, ComputeOp)
        accumulator, bias, multipliers = (self.view(arg) for arg in term.args[2:5])
        shape = self.access_type(term).full
        biased = self.new_buffer("biased", "i32", shape)
        self.emit(Fold(self.note, biased, "elementwise-add",
                       tuple(self.operands(biased, [accumulator, bias], 0))))
        identity = clip_op.name == "clip" and tuple(clip_op.params) == (-128, 127)
        requantized = (self.result_buffer(term, "requantized") if identity
                       else self.new_buffer("requantized", "i8", shape))
        pre, post, zero_point = (int(p) for p in requantize_op.params)
        self.emit(RequantizePerChannel(
            self.note, requantized, tuple(self.operands(requantized, [biased, multipliers], 0)),
            pre, post, zero_point))
        if identity:
            return requantized
        dst = self.result_buffer(term, clip_op.name)
        self.emit(Map(self.note, dst, clip_op, *self.operands(dst, [requantized], 0)))
        return dst

    def systolic_array(self, term: Term) -> Value:
        activations = self.view(term.args[2])
        weights = self.view(term.args[3])
        act_type = self.arg_type(term, 2)
        if act_type.dtype == self.options.array_dtype:
            # No access dims: merging zero dims gives M = 1.
            a = merge_dims(activations, [len(act_type.shape), 1])
            rows, cols = term.args[0], term.args[1]
            assert isinstance(rows, int) and isinstance(cols, int)
            return self.gemm(term, a, weights, rows, cols)
        # Not the array's dtype: the host computes the same product.
        rank = len(act_type.shape)
        outputs = weights.shape[1]
        left = expand(activations, rank, [outputs])
        right = expand(transpose(weights, (1, 0)), 0, act_type.shape)
        dst = self.result_buffer(term, "systolic")
        members = self.operands(dst, [left, right], 1)
        self.emit(Dot(self.note, dst, tuple(members), 1))
        return dst


    # -- the result --
    def finish(self) -> LoweredProgram:
        root = self.program.root
        self.note = "the result"
        view = self.view(root)  # a view's logical shape is always its term's full shape
        shape = self.access_type(root).full
        buffer = self.buffers[view.buffer]
        whole = view.offset == 0 and view.is_row_major() and buffer.elements == math.prod(shape)
        if whole and buffer.kind == ACTIVATION:
            # Glow's copy propagation: the last value is computed straight into the output.
            self.buffers[view.buffer] = replace(buffer, kind=OUTPUT, shape=shape)
            output = view.buffer
        else:
            base = self.program.names.get(root, "output")
            dst = self.new_buffer(base, buffer.dtype, shape, OUTPUT, auto=False)
            self.emit(Copy("the result: copy into the output placeholder", dst, view))
            output = dst.buffer
        return LoweredProgram(self.live_buffers(output), self.instructions, output, shape)

    def live_buffers(self, output: str) -> dict[str, Buffer]:
        """Drop buffers no instruction touches (weights used only in packed form), but keep
        every declared input: the harness takes each one by name."""
        used = {output} | {view.buffer for instruction in self.instructions
                           for view in (instruction.writes(), *instruction.reads())}
        buffers = {name: buf for name, buf in self.buffers.items()
                   if name in used or buf.kind == INPUT}
        for decl in self.program.inputs():
            if not any(buf.tensor == decl.name for buf in buffers.values()):
                view = self.new_buffer(decl.name, decl.dtype, decl.shape, INPUT, auto=False,
                                       tensor=decl.name)
                buffers[view.buffer] = self.buffers[view.buffer]
        return buffers


# -- access constructs: the view algebra (backend/views.py) applied to terms ----------------
#
# Each is `(lowerer, term) → Value`: a view of the operand where the construct is a re-view,
# a new buffer and copies where it makes data (pad, concatenate), or a lazy tuple.

AccessLowering = Callable[[_Lowerer, Term], Value]
# construct → its lowering: every access construct but the expanded ones
LOWERINGS: dict[str, AccessLowering] = {}


def _lowers(*names: str) -> Callable[[AccessLowering], AccessLowering]:
    def register(function: AccessLowering) -> AccessLowering:
        for name in names:
            LOWERINGS[name] = function
        return function
    return register


@_lowers("access-tensor")
def _access_tensor(lowerer: _Lowerer, term: Term) -> Value:
    # Each distinct term is lowered once, and `(access-tensor t)` is one term per t.
    name = str(term.args[0])
    decl = lowerer.program.tensors[name]
    kind = INPUT if decl.role == "input" else CONSTANT
    source = ConstantSource(tensor=name) if kind == CONSTANT else None
    return lowerer.new_buffer(name, decl.dtype, decl.shape, kind, source, auto=False,
                              tensor=name)


@_lowers("access", "access-shift-right")
def _access(lowerer: _Lowerer, term: Term) -> Value:
    return lowerer.view(term.args[0])


@_lowers("access-transpose")
def _access_transpose(lowerer: _Lowerer, term: Term) -> Value:
    return transpose(lowerer.view(term.args[0]), lowerer.arg_ints(term, 1))


@_lowers("access-move-axis")
def _access_move_axis(lowerer: _Lowerer, term: Term) -> Value:
    source, destination = term.args[1], term.args[2]
    assert isinstance(source, int) and isinstance(destination, int)
    return move_axis(lowerer.view(term.args[0]), source, destination)


@_lowers("access-squeeze")
def _access_squeeze(lowerer: _Lowerer, term: Term) -> Value:
    assert isinstance(term.args[1], int)
    return squeeze(lowerer.view(term.args[0]), term.args[1])


@_lowers("access-insert-axis")
def _access_insert_axis(lowerer: _Lowerer, term: Term) -> Value:
    assert isinstance(term.args[1], int)
    return insert_axis(lowerer.view(term.args[0]), term.args[1])


@_lowers("access-broadcast")
def _access_broadcast(lowerer: _Lowerer, term: Term) -> Value:
    return broadcast(lowerer.view(term.args[0]), lowerer.access_type(term).full)


def _view_or_copy(lowerer: _Lowerer, source: View, copy_name: str,
                  make: Callable[[View], View | None]) -> View:
    """`make(source)`, or `make` of a contiguous copy of `source` (a buffer named
    `copy_name`) when the view algebra cannot express it on the source's strides."""
    view = make(source)
    if view is None:
        view = make(lowerer.materialize(source, copy_name))
        assert view is not None
    return view


@_lowers("access-flatten", "access-reshape")
def _reshape(lowerer: _Lowerer, term: Term) -> Value:
    source = lowerer.view(term.args[0])
    target = lowerer.access_type(term).full
    return _view_or_copy(lowerer, source, "reshaped", lambda view: regroup(view, target))


@_lowers("access-slice")
def _access_slice(lowerer: _Lowerer, term: Term) -> Value:
    axis, low, high = term.args[1], term.args[2], term.args[3]
    assert isinstance(axis, int) and isinstance(low, int) and isinstance(high, int)
    source = lowerer.view(term.args[0])
    return _view_or_copy(lowerer, source, "sliced",
                         lambda view: slice_view(view, axis, low, high))


@_lowers("access-windows")
def _access_windows(lowerer: _Lowerer, term: Term) -> Value:
    source = lowerer.view(term.args[0])
    rank = len(lowerer.arg_type(term, 0).shape)
    window, strides = lowerer.arg_ints(term, 1), lowerer.arg_ints(term, 2)
    return _view_or_copy(lowerer, source, "windowed",
                         lambda view: windows(view, rank, window, strides))


@_lowers("access-pad")
def _access_pad(lowerer: _Lowerer, term: Term) -> Value:
    source = lowerer.view(term.args[0])
    kind, axis, before, after = term.args[1:]
    assert isinstance(axis, int) and isinstance(before, int) and isinstance(after, int)
    dst = lowerer.result_buffer(term, "padded")
    minimum = isinstance(kind, Symbol) and kind.name == "min-padding"
    return _pad(lowerer, source, dst, axis, before, after, minimum)


def _pad(lowerer: _Lowerer, source: View, dst: View, axis: int, before: int, after: int,
         minimum: bool) -> View:
    """`dst` = `source` with `before`/`after` elements of padding on `axis` (fills, a copy)."""
    size = dst.shape[axis]
    for low, high in ((0, before), (size - after, size)):
        if high > low:
            border = slice_view(dst, axis, low, high)
            assert border is not None
            lowerer.emit(Fill(f"{lowerer.note}: border", border, minimum))
    interior = slice_view(dst, axis, before, size - after)
    assert interior is not None
    lowerer.emit(Copy(f"{lowerer.note}: interior", interior, source))
    return dst


@_lowers("access-concatenate")
def _access_concatenate(lowerer: _Lowerer, term: Term) -> Value:
    left, right = lowerer.view(term.args[0]), lowerer.view(term.args[1])
    axis = term.args[2]
    assert isinstance(axis, int)
    dst = lowerer.result_buffer(term, "concatenated")
    split = left.shape[axis]
    for name, part, low, high in (("left", left, 0, split),
                                  ("right", right, split, dst.shape[axis])):
        region = slice_view(dst, axis, low, high)
        assert region is not None
        lowerer.emit(Copy(f"{lowerer.note}: {name}", region, part))
    return dst


@_lowers("access-pair")
def _access_pair(lowerer: _Lowerer, term: Term) -> Value:
    left = lowerer.arg_type(term, 0)
    return Pair(lowerer.view(term.args[0]), lowerer.view(term.args[1]), len(left.shape))


@_lowers("access-cartesian-product")
def _access_cartesian_product(lowerer: _Lowerer, term: Term) -> Value:
    left, right = lowerer.arg_type(term, 0), lowerer.arg_type(term, 1)
    return Product(lowerer.view(term.args[0]), lowerer.view(term.args[1]), len(left.shape),
                   len(right.shape))


@_lowers("access-literal")
def _access_literal(lowerer: _Lowerer, term: Term) -> Value:
    literal_term = term.args[0]
    assert isinstance(literal_term, Term)
    literal = lowerer.types[literal_term]
    assert isinstance(literal, LiteralValue)
    return lowerer.new_buffer("literal", literal.dtype, (), CONSTANT,
                              ConstantSource(literal=literal.value))


LOWERINGS["compute"] = _Lowerer.compute
LOWERINGS.update((name, _Lowerer.systolic_array) for name in Group.HARDWARE)
LOWERINGS["accel-epilogue"] = _Lowerer.accel_epilogue


@_lowers("accel-max-pool")
def _accel_max_pool(lowerer: _Lowerer, term: Term) -> Value:
    """As the max-pool it stands for lowers (min-padding of the two axes, a windows view,
    a reduce-max): the accelerator pass `accel_pool` makes that a pooling layer."""
    kernel, stride, padding = term.args[:3]
    assert isinstance(kernel, int) and isinstance(stride, int) and isinstance(padding, int)
    source = lowerer.view(term.args[3])
    rank = len(source.shape)
    for axis in (rank - 2, rank - 1) if padding else ():
        shape = tuple(size + 2 * padding if index == axis else size
                      for index, size in enumerate(source.shape))
        dst = lowerer.new_buffer("padded", "i8", shape)
        source = _pad(lowerer, source, dst, axis, padding, padding, minimum=True)
    windowed = _view_or_copy(lowerer, source, "windowed",
                             lambda view: windows(view, rank - 2, (kernel, kernel),
                                                  (stride, stride)))
    assert isinstance(windowed, View)
    return lowerer.reduce(term, "reduce-max", windowed, 2)


def _rename_view(view: View, old: str, new: str) -> View:
    return replace(view, buffer=new) if view.buffer == old else view


def _rename_value(value: Value, old: str, new: str) -> Value:
    if isinstance(value, View):
        return _rename_view(value, old, new)
    return replace(value, left=_rename_view(value.left, old, new),
                   right=_rename_view(value.right, old, new))


def _value_views(value: Value) -> tuple[View, ...]:
    return (value,) if isinstance(value, View) else (value.left, value.right)


def _named_buffers(instruction: Instruction) -> set[str]:
    """The buffers `_rename` looks at in `instruction`: its views and tuples of views."""
    names = set()
    for current in vars(instruction).values():
        if isinstance(current, View):
            names.add(current.buffer)
        elif isinstance(current, tuple) and current and isinstance(current[0], View):
            names.update(view.buffer for view in current)
    return names


def _rename(instruction: Instruction, old: str, new: str) -> Instruction:
    return rename_buffers(instruction, {old: new})


def rename_buffers(instruction: Instruction, names: Mapping[str, str]) -> Instruction:
    """`instruction` with its views of each buffer of `names` viewing the buffer it maps
    to (the same object when it views none of them)."""
    changes: dict[str, object] = {}
    for name, current in vars(instruction).items():
        if isinstance(current, View):
            if current.buffer in names:
                changes[name] = replace(current, buffer=names[current.buffer])
        elif isinstance(current, tuple) and current and isinstance(current[0], View) and \
                any(view.buffer in names for view in current):
            changes[name] = tuple(replace(view, buffer=names[view.buffer])
                                  if view.buffer in names else view for view in current)
    return replace(instruction, **changes) if changes else instruction  # type: ignore[arg-type]


def lower_program(program: Program, types: TypeTable,
                  options: LowerOptions | None = None) -> LoweredProgram:
    """The buffer-level program computing `program`'s result."""
    if needs_expansion(program.root):  # tuples, conv2d modes: lowered as what they expand to
        program = expand_program(program)
        types = check_program(program)
    return _Lowerer(program, types, options or LowerOptions()).lower()


# -- debugging ------------------------------------------------------------------------


def format_lowered(lowered: LoweredProgram) -> str:
    """One line per buffer, then one per instruction: `kind dst <- operands  ; note`."""
    lines = [f"{b.kind:10} {b.name}: {b.dtype}{list(b.shape)}" for b in lowered.buffers.values()]
    for index, instruction in enumerate(lowered.instructions):
        fields = {k: v for k, v in vars(instruction).items() if k != "note"}
        dst = fields.pop("dst")
        rest = ", ".join(f"{k}={_field_text(v)}" for k, v in fields.items())
        lines.append(f"{index:3} {type(instruction).__name__.lower():8} {dst} <- {rest}"
                     f"  ; {instruction.note}")
    lines.append(f"output {lowered.output}")
    return "\n".join(lines)


def _field_text(value: object) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_field_text(v) for v in value) + ")"
    if isinstance(value, ComputeOp):
        return value.name + ("" if not value.params else str(list(value.params)))
    return str(value)


def constant_array(buffer: Buffer, weights: dict[str, Array]) -> Array:
    """The data of a constant buffer (a weight, a literal, or a compile-time packed view)."""
    source = buffer.source
    assert buffer.kind == CONSTANT and source is not None
    dtype = DTYPES[buffer.dtype].numpy
    if source.tensor is not None:
        return np.ascontiguousarray(weights[source.tensor], dtype=dtype)
    if source.literal is not None:
        return np.array(source.literal, dtype=dtype)
    if source.data is not None:
        little = np.frombuffer(source.data, np.dtype(dtype).newbyteorder("<"))
        return little.astype(dtype).reshape(buffer.shape)
    assert source.packed is not None and source.packed_from is not None
    flat = constant_array(source.packed_from, weights).reshape(-1)
    return view_array(source.packed, flat).reshape(buffer.shape)
