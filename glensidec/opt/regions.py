"""Region splitting: a big program's products one at a time, and the results spliced back.

A program with several dot-products is saturated one product region at a time (the
product and the views above its computed operands, which become placeholder tensors), so
that the e-graph, the limits and the time grow with the largest layer instead of with the
whole network. This module cuts regions out and splices extracted regions back in; the
sequence that saturates each region is `glensidec.pipeline.compile_by_region`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from glensidec.lang import constructs as K
from glensidec.lang.terms import Arg, Symbol, TensorDecl, Term, compute_name
from glensidec.lang.typecheck import TypeTable, access_type


def is_product(term: Term) -> bool:
    return compute_name(term) == "dot-product"


def boundaries(product: Term) -> list[Term]:
    """The computed operands of a product's region: the computes (and array constructs)
    reached from it through views. The region is the product and the views above them."""
    found: list[Term] = []
    stack = [arg for arg in product.args if isinstance(arg, Term)]
    seen: set[Term] = set()
    while stack:
        term = stack.pop()
        if term in seen:
            continue
        seen.add(term)
        if term.op == "compute" or term.op in K.Group.HARDWARE:
            found.append(term)
        else:
            stack.extend(term.children())
    return found


def rebuild(root: Term, replace_term: Callable[[Term, tuple[Arg, ...]], Term | None],
             stop: Callable[[Term], bool] = lambda term: False,
             rebuilt: dict[Term, Term] | None = None) -> Term:
    """`root` rebuilt bottom-up: `replace_term(term, new args)` may give a term's new form
    (None keeps it with its new arguments); below `stop` terms nothing is visited.
    `rebuilt` (old term → new) is the memo, which a caller may share between calls."""
    rebuilt = {} if rebuilt is None else rebuilt
    stack: list[tuple[Term, bool]] = [(root, False)]
    while stack:
        term, expanded = stack.pop()
        if term in rebuilt:
            continue
        children = [] if stop(term) else term.children()
        if not expanded and children:
            stack.append((term, True))
            stack.extend((child, False) for child in children if child not in rebuilt)
            continue
        args = tuple(rebuilt.get(a, a) if isinstance(a, Term) else a for a in term.args)
        same = all(new is old for new, old in zip(args, term.args, strict=True))
        rebuilt[term] = replace_term(term, args) or (term if same else Term(term.op, args))
    return rebuilt[root]


@dataclass
class Region:
    """One product with its computed operands replaced by placeholder tensors."""

    root: Term
    tensors: dict[str, TensorDecl]  # the program's tensors and the placeholders
    boundaries: dict[str, Term]  # placeholder name → the computed operand it stands for
    # program term → its form in the region (placeholders for the operands), for the terms
    # between the product and its operands: how the user's `let` names find their region terms
    of_program: dict[Term, Term] = field(default_factory=dict)


def product_region(product: Term, types: TypeTable, tensors: dict[str, TensorDecl]) -> Region:
    return cut_region(product, boundaries(product), types, tensors)


def cut_region(root: Term, cuts: list[Term], types: TypeTable,
               tensors: dict[str, TensorDecl]) -> Region:
    """`root` with each term of `cuts` below it replaced by a placeholder tensor of its
    type (`region-operand-i`, in the order of `cuts`)."""
    region = Region(root, dict(tensors), {})
    stand_ins: dict[Term, Term] = {}
    for boundary in cuts:
        value = access_type(types, boundary)
        name = f"region-operand-{len(region.boundaries)}"
        while name in region.tensors:  # a user may call a tensor that too
            name += "_"
        region.tensors[name] = TensorDecl(name, value.full, value.dtype, "input")
        region.boundaries[name] = boundary
        leaf = Term("access-tensor", (Symbol(name),))
        stand_ins[boundary] = Term("access", (leaf, len(value.shape))) if value.item else leaf
    region.root = rebuild(root, lambda term, _: stand_ins.get(term),
                          stop=lambda term: term in stand_ins, rebuilt=region.of_program)
    return region


def splice(region: Region, term: Term, operands: dict[str, Term], types: TypeTable,
           spliced: dict[Term, Term] | None = None) -> Term:
    """An extracted region term with its placeholders replaced by the (compiled) operands;
    `types` are the operands' types, which their placeholders mirror. `spliced` (extracted
    subterm → its spliced form) is filled when given."""

    def placeholder(arg: Arg) -> str | None:
        if isinstance(arg, Term) and arg.op == "access-tensor":
            name = arg.args[0]
            assert isinstance(name, Symbol)
            return name.name if name.name in region.boundaries else None
        return None

    def operand(name: str, split: int | None) -> Term:
        value = access_type(types, region.boundaries[name])
        full = operands[name]
        wanted = len(value.full) if split is None else split
        return full if wanted == len(value.shape) else Term("access", (full, wanted))

    def replace_term(old: Term, args: tuple[Arg, ...]) -> Term | None:
        name = placeholder(old)
        if name is not None:  # a bare placeholder is ((full shape),())
            return operand(name, None)
        inner = placeholder(old.args[0]) if old.op == "access" and old.args else None
        if inner is not None:  # (access placeholder k): access the operand itself
            split = old.args[1]
            assert isinstance(split, int)
            return operand(inner, split)
        return None

    return rebuild(term, replace_term, rebuilt=spliced)


def compiled_term(term: Term, compiled: dict[Term, Term]) -> Term:
    """`term` with the products below it in their compiled form. Regions are compiled in
    post-order, so every product below `term` is in `compiled` already; `compiled` is also
    the memo, so each term of the program is rebuilt once in all."""
    return rebuild(term, lambda old, args: None, rebuilt=compiled)


@dataclass(frozen=True)
class Canonical:
    """A region with its tensors renamed `region-tensor-i` in order of first use (post-order).

    Regions that differ only in their tensors' names — a network's repeated layers, whose
    weights have names of their own — have equal canonical forms (`key`), so one
    saturation and extraction serves them all (`glensidec.pipeline.compile_by_region`).
    A slice of a tensor, `(access-slice (access-tensor t) axis lo hi)`, is a tensor of its
    own here (of the slice's shape): a grouped convolution's groups read the same
    activations and weights at different offsets, and only that way are its 32 group
    regions one canonical region instead of 32. Nothing in the region can tell a slice
    of a tensor from a tensor of that shape (no rule looks at what lies beside a slice).
    """

    root: Term
    tensors: dict[str, TensorDecl]  # canonical name → the declaration, renamed
    renamed: dict[str, Term]  # canonical name → the region's own leaf (tensor or slice)
    of_region: dict[Term, Term]  # region term → its canonical form

    def key(self, named: list[Term]) -> tuple[object, ...]:
        """What the extraction depends on: the term, the tensors' types, and which terms
        carry `let` names (`named`: region terms, in the order their names take effect)."""
        decls = tuple((d.name, d.shape, d.dtype, d.role) for d in self.tensors.values())
        return self.root, decls, tuple(self.of_region[term] for term in named)

    def restore(self, term: Term) -> tuple[Term, dict[Term, Term]]:
        """An extracted canonical term with the region's own tensors (and slices), and the
        map from each canonical subterm to its restored form."""
        restored: dict[Term, Term] = {}
        root = rebuild(term, lambda old, args: self._restored_leaf(old), rebuilt=restored)
        return root, restored

    def _restored_leaf(self, term: Term) -> Term | None:
        if term.op not in NAMING or not isinstance(term.args[0], Symbol) or \
                term.args[0].name not in self.renamed:
            return None
        own = self.renamed[term.args[0].name]
        if term.op == "access-tensor":
            return own
        assert own.op == "access-tensor"  # a slice is never `shape-of`'s (see `leaf`)
        return Term(term.op, own.args)


# The constructs that name a tensor (its first argument).
NAMING = ("access-tensor", "shape-of")


def _slice_of_tensor(term: Term) -> bool:
    """`(access-slice (access-tensor t) axis lo hi)`: a region leaf of its own."""
    return term.op == "access-slice" and isinstance(term.args[0], Term) and \
        term.args[0].op == "access-tensor" and isinstance(term.args[0].args[0], Symbol)


def _chunk_of_tensor(term: Term) -> tuple[str, tuple[int, ...]] | None:
    """`(access-slice (access-reshape T (access-shape (shape n …) (shape))) 0 lo hi)` with T
    a tensor under `access` splits: rows lo..hi of a row-major reshape are one contiguous
    chunk of the tensor, a tensor of shape (hi − lo, …) to the region. Swin's and ViT's
    softmax·V products read each (window, head) this way: 192 regions alike but for lo.
    Returns the tensor's name and the chunk's shape."""
    if term.op != "access-slice" or term.args[1] != 0:
        return None
    reshape = term.args[0]
    if not isinstance(reshape, Term) or reshape.op != "access-reshape":
        return None
    inner, target = reshape.args
    while isinstance(inner, Term) and inner.op == "access":
        inner = inner.args[0]
    if not (isinstance(inner, Term) and inner.op == "access-tensor"
            and isinstance(inner.args[0], Symbol)):
        return None
    if not (isinstance(target, Term) and target.op == "access-shape"):
        return None
    shape, item = target.args
    if not (isinstance(shape, Term) and isinstance(item, Term) and not item.args):
        return None
    low, high = term.args[2:]
    assert isinstance(low, int) and isinstance(high, int)
    dims = tuple(int(d) for d in shape.args)  # type: ignore[arg-type]
    return inner.args[0].name, (high - low, *dims[1:])


def _region_leaf(term: Term) -> bool:
    return _slice_of_tensor(term) or _chunk_of_tensor(term) is not None


def canonical_region(region: Region) -> Canonical:
    order: dict[Term, Symbol] = {}  # the region's leaf (as `access-tensor`) → canonical name
    decls: dict[str, TensorDecl] = {}

    def leaf(own: Term, shape: tuple[int, ...], base: str) -> Symbol:
        if own not in order:
            name = Symbol(f"region-tensor-{len(order)}")
            order[own] = name
            decls[name.name] = replace(region.tensors[base], name=name.name, shape=shape,
                                       source=None, key=None, span=None, quantization=None)
        return order[own]

    def rename(term: Term, args: tuple[Arg, ...]) -> Term | None:
        if _slice_of_tensor(term):
            tensor = term.args[0]
            assert isinstance(tensor, Term) and isinstance(tensor.args[0], Symbol)
            base = tensor.args[0].name
            axis, low, high = term.args[1:]
            assert isinstance(axis, int) and isinstance(low, int) and isinstance(high, int)
            shape = list(region.tensors[base].shape)
            shape[axis] = high - low
            return Term("access-tensor", (leaf(term, tuple(shape), base),))
        chunk = _chunk_of_tensor(term)
        if chunk is not None:
            return Term("access-tensor", (leaf(term, chunk[1], chunk[0]),))
        if term.op in NAMING and isinstance(term.args[0], Symbol):
            own = term.args[0].name
            name = leaf(Term("access-tensor", (term.args[0],)), region.tensors[own].shape, own)
            return Term(term.op, (name,))
        return None

    of_region: dict[Term, Term] = {}
    # (a slice's own tensor is not visited: it is not a leaf of the region unless used bare)
    root = rebuild(region.root, rename, stop=_region_leaf, rebuilt=of_region)
    return Canonical(root, decls, {name.name: own for own, name in order.items()}, of_region)
