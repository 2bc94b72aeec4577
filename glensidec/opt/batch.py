"""A batch of images, compiled as one program per image (the accelerator target).

A program whose inputs all lead with the same batch size N ≥ 2 computes, in most
networks, each image's result from that image alone. The accelerator's passes recognise
a layer by the views of one image: a convolution's DMA im2col reads one NHWC map, its
epilogue writes one map's rows, a pool reads one map. With the batch folded into the
products (an im2col matrix of N·H·W columns, an NCHW result read image by image) none of
them matched, and everything but the products ran on the host (a batch-2 small CNN: 97 %
host cycles).

`split_images` proves, construct by construct, that image i of the result depends only
on image i of the inputs, and if so writes the program as N copies of its per-image
computation — each input sliced to its image, every literal shape of a batched term with
the batch dimension cut to one image — concatenated along the result's batch axis. Each
copy is then what a batch-1 program is: its layers, pools, residual adds and layouts are
the accelerator's exactly as at batch 1 (the canonical regions of the copies are equal,
so rewriting saturates each layer shape once). Terms that do not depend on the inputs
(weights, broadcast constants) are shared by the copies. A program that mixes images (a
reduction or product across the batch axis), or uses a construct the analysis does not
know, is returned unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from glensidec.lang.constructs import ComputeKind
from glensidec.lang.dtypes import DTYPES
from glensidec.lang.terms import ComputeOp, Program, Term, postorder
from glensidec.lang.typecheck import AccessType, TypeTable, check_program


@dataclass(frozen=True)
class Batched:
    """Where a term's images are: along full axis `axis` (access then item axes), image i
    at indices [i·block, (i+1)·block)."""

    axis: int
    block: int


class _Mixes(Exception):
    """The program mixes images (or uses what the analysis does not follow); the message
    says where, completing "because …"."""


def batch_size(program: Program) -> int:
    """The batch size N when every input is an integer tensor (an int8 program's: the
    accelerator's) of rank 3 or more leading with the same N ≥ 2, else 1. A matrix (N, K)
    is not a batch: its rows are what one array call streams, one layer for all of them
    (splitting a dense layer's 5 rows made 5 layers)."""
    inputs = program.inputs()
    leading = {decl.shape[0] if decl.shape else 1 for decl in inputs}
    if (len(leading) != 1 or not all(DTYPES[decl.dtype].integer for decl in inputs)
            or any(len(decl.shape) < 3 for decl in inputs)):
        return 1
    return max(1, leading.pop())


def split_images(program: Program, types: TypeTable | None = None) -> Program:
    """`program` as one copy per image concatenated along the batch axis (see the module's
    docstring), or `program` itself when it is not a batch of independent images."""
    images = batch_size(program)
    if images < 2:
        return program
    types = check_program(program) if types is None else types
    try:
        states = _analyse(program, types, images)
        root_state = states[program.root]
        if root_state is None:
            return program
        splitter = _Splitter(program, types, states, images)
        parts = [splitter.image(program.root, image) for image in range(images)]
    except _Mixes:
        return program
    return _joined(program, splitter, parts, root_state)


def unsplit_reason(program: Program, types: TypeTable) -> str:
    """Why a program with a batch (N ≥ 2) is compiled with its images folded together,
    for a warning about what stays on the host; "" when it is split (or has no batch)."""
    images = batch_size(program)
    if images < 2:
        return ""
    try:
        _analyse(program, types, images)
    except _Mixes as mixes:
        return (f"the program's {images} images are compiled together, its batch folded "
                f"into each product, because {mixes} (compile works image by image only "
                f"where each image's result is its own): the accelerator's layers, pools "
                f"and layouts take one image's map")
    return ""


def _joined(program: Program, splitter: _Splitter, parts: list[Term],
            root_state: Batched) -> Program:
    """The program whose result is the images' results concatenated."""
    root = parts[0]
    for part in parts[1:]:
        root = Term("access-concatenate", (root, part, root_state.axis))
    names = dict(splitter.names)
    return Program(program.path, program.tensors, root, names, program.output_quantization)


def _access(types: TypeTable, term: Term) -> AccessType:
    value = types.get(term)
    if not isinstance(value, AccessType):
        raise _Mixes(f"{term.op} is not an access")
    return value


def _analyse(program: Program, types: TypeTable, images: int) -> dict[Term, Batched | None]:
    """Each access term's `Batched` (None: it depends on no input); raises `_Mixes`."""
    states: dict[Term, Batched | None] = {}
    for term in postorder(program.root):
        if term.op in _SHAPE_OPS:
            continue
        states[term] = _state(term, types, states, program, images)
    return states


_SHAPE_OPS = frozenset({"shape", "list", "literal", "access-shape", "get-access-shape",
                        "shape-of", "slice-shape", "shape-insert-axis", "shape-remove-axis"})


def _state(term: Term, types: TypeTable, states: dict[Term, Batched | None],
           program: Program, images: int) -> Batched | None:
    op, args = term.op, term.args
    if op == "access-tensor":
        decl = program.tensors[str(args[0])]
        return Batched(0, decl.shape[0] // images) if decl.role == "input" else None
    if op == "access-literal":
        return None
    children = [child for child in term.children() if child.op not in _SHAPE_OPS]
    batched = [states[child] for child in children]
    if all(state is None for state in batched):
        return None
    operand = _access(types, children[0])
    state = batched[0]
    result = _access(types, term)
    if op in ("access", "access-shift-right"):
        return state
    if op == "access-transpose":
        assert state is not None
        return Batched(list(_ints(args[1])).index(state.axis), state.block)
    if op == "access-move-axis":
        assert state is not None
        axes = list(range(len(operand.full)))
        axes.insert(_int(args[2]), axes.pop(_int(args[1])))
        return Batched(axes.index(state.axis), state.block)
    if op == "access-squeeze":
        assert state is not None
        axis = _int(args[1])
        return Batched(state.axis - (axis < state.axis), state.block)
    if op == "access-insert-axis":
        assert state is not None
        axis = _int(args[1])
        return Batched(state.axis + (axis <= state.axis), state.block)
    if op == "access-broadcast":
        return state  # (a batched operand's batch axis is not a broadcast one: N ≥ 2)
    if op in ("access-pad", "access-slice"):
        assert state is not None
        if _int(args[2 if op == "access-pad" else 1]) == state.axis:
            raise _Mixes(f"an {op} works along the batch axis")
        return state
    if op == "access-windows":
        assert state is not None
        if state.axis >= len(operand.shape):
            raise _Mixes("an access-windows slides along the batch axis")
        return state
    if op == "access-flatten":
        assert state is not None
        return _flattened(operand, state)
    if op == "access-reshape":
        assert state is not None
        return _reshaped(operand.full, result.full, state, images)
    if op in ("access-pair", "access-concatenate"):
        left, right = batched
        if left is not None and right is not None and left != right:
            raise _Mixes(f"an {op} lines up one operand's images with other axes of the "
                         f"other's")
        state = left or right
        assert state is not None
        if op == "access-concatenate" and _int(args[2]) == state.axis:
            raise _Mixes("an access-concatenate joins along the batch axis")
        if op == "access-pair" and state.axis >= len(operand.shape):
            return Batched(state.axis + 1, state.block)
        return state
    if op == "access-cartesian-product":
        left, right = batched
        if left is not None and right is not None:
            raise _Mixes("an access-cartesian-product pairs every image of one operand with "
                         "every image of the other")
        if left is not None:
            if left.axis >= len(operand.shape):
                raise _Mixes("an access-cartesian-product's items hold the batch axis")
            return left
        assert right is not None
        right_type = _access(types, children[1])
        if right.axis >= len(right_type.shape):
            raise _Mixes("an access-cartesian-product's items hold the batch axis")
        return Batched(len(operand.shape) + right.axis, right.block)
    if op == "compute":
        assert state is not None
        return _computed(term, operand, state)
    # the array's and the accelerator's constructs, tuples: not followed
    raise _Mixes(f"the per-image analysis does not follow {op}")


def _computed(term: Term, operand: AccessType, state: Batched) -> Batched:
    compute = term.args[0]
    assert isinstance(compute, ComputeOp)
    name = compute.name
    in_item = state.axis >= len(operand.shape)
    if name in ComputeKind.MAP:
        return state
    if in_item:  # folds, reductions and products work across the item's axes
        raise _Mixes(f"a {name} works across the batch axis")
    return state  # the batch axis is an access axis: kept in the result's access axes


def _flattened(operand: AccessType, state: Batched) -> Batched:
    """Flatten merges the access axes into one and the item axes into one."""
    access = len(operand.shape)
    part = operand.shape if state.axis < access else operand.item
    first = 0 if state.axis < access else access
    position = state.axis - first
    if math.prod(part[:position]) != 1:
        raise _Mixes("an access-flatten interleaves the images with an outer axis")
    inner = math.prod(part[position + 1:])
    return Batched(0 if state.axis < access else (1 if operand.shape else 0),
                   state.block * inner)


def _reshaped(before: tuple[int, ...], after: tuple[int, ...], state: Batched,
              images: int) -> Batched:
    """Where a row-major reshape puts the images: an axis of `after` whose outer axes hold
    as many elements as the batch axis's outer ones, and that splits into the images at
    the same stride."""
    outer = math.prod(before[:state.axis])
    image_elements = state.block * math.prod(before[state.axis + 1:])
    for axis in range(len(after)):
        if math.prod(after[:axis]) != outer:
            continue
        inner = math.prod(after[axis + 1:])
        if after[axis] % images == 0 and (after[axis] // images) * inner == image_elements:
            return Batched(axis, after[axis] // images)
    raise _Mixes("an access-reshape spreads an image over several blocks")


def _int(arg: object) -> int:
    assert isinstance(arg, int)
    return arg


def _ints(arg: object) -> tuple[int, ...]:
    assert isinstance(arg, Term)
    return tuple(_int(value) for value in arg.args)


class _Splitter:
    """Builds each image's copy of the batched terms."""

    def __init__(self, program: Program, types: TypeTable,
                 states: dict[Term, Batched | None], images: int) -> None:
        self.program, self.types, self.states, self.images = program, types, states, images
        self.made: dict[tuple[Term, int], Term] = {}
        self.names: dict[Term, str] = {term: name for term, name in program.names.items()
                                       if states.get(term) is None}

    def image(self, term: Term, image: int) -> Term:
        """`term`'s part for `image` (the term itself when it is not batched)."""
        state = self.states.get(term)
        if state is None:
            return term
        made = self.made.get((term, image))
        if made is None:
            made = self.made[(term, image)] = self._build(term, state, image)
            name = self.program.names.get(term)
            if name is not None:
                self.names[made] = f"{name}_image{image}"
        return made

    def aligned(self, term: Term, state: Batched, image: int) -> Term:
        """An operand of a batched term: its image, or — not batched itself, its shape the
        batched one's — its slice at that image's indices."""
        if self.states.get(term) is not None:
            return self.image(term, image)
        low = image * state.block
        return Term("access-slice", (term, state.axis, low, low + state.block))

    def _build(self, term: Term, state: Batched, image: int) -> Term:
        op, args = term.op, term.args
        if op == "access-tensor":
            return Term("access-slice", (term, 0, image * state.block,
                                         (image + 1) * state.block), term.span)
        if op in ("access-pair", "access-concatenate"):
            operand_state = self.states[term.children()[0]] or self.states[term.children()[1]]
            assert operand_state is not None
            left, right = (self.aligned(child, operand_state, image)
                           for child in term.children())
            return Term(op, (left, right, *args[2:]), term.span)
        if op in ("access-broadcast", "access-reshape"):
            operand = args[0]
            assert isinstance(operand, Term)
            target = self._target(args[1], state)
            return Term(op, (self.image(operand, image), target), term.span)
        rebuilt = tuple(self.image(arg, image) if isinstance(arg, Term) and
                        arg.op not in _SHAPE_OPS else arg for arg in args)
        return Term(op, rebuilt, term.span)

    def _target(self, target: object, state: Batched) -> Term:
        """An access shape with the batch axis cut to one image's block."""
        if not (isinstance(target, Term) and target.op == "access-shape" and
                all(isinstance(part, Term) and part.op == "shape" for part in target.args)):
            raise _Mixes("a batched term's target shape is not (access-shape (shape …) "
                         "(shape …))")
        shape, item = (list(_ints(part)) for part in target.args)
        full = shape + item
        full[state.axis] = state.block
        return Term("access-shape", (Term("shape", tuple(full[:len(shape)])),
                                     Term("shape", tuple(full[len(shape):]))))
