"""Which layers' output channels are one channel axis (docs/nas.md, "Skip connections").

A residual add makes its operands' channels the same channels: shrinking one operand means
shrinking all of them with the same kept indices. Channels flow unchanged through a bias,
a scale, an activation (relu, clip, requantize, cast), a pool, a depthwise convolution and a
constant op; an add unifies all its operands with its result. A transformer's residual
stream is one channel axis the same way: the tokens' features (the last axis of a (1, T, D)
tensor) flow through LayerNorm (over the kept features), its scale and shift, a position
embedding and every residual add, so the patch embedding, every attention's out-projection
and every MLP's second layer produce one axis and shrink together. Concatenation along the
channel axis places its operands at offsets in a new channel axis (`Slicing` follows it).

`coupled_sets(graph)` gives, for every channel axis, the layers producing it: convolutions
and dense layers (which can shrink it) and inputs or grouped convolutions (which cannot).
"""

from __future__ import annotations

from dataclasses import dataclass

from glensidec.nas.graph import (
    Binary,
    ChannelOp,
    Conv,
    Dense,
    GlobalPool,
    Graph,
    Layer,
    LayerNorm,
    Pad,
    Pointwise,
    Pool,
    ScalarOp,
    Slice,
    TokenDense,
    WeightOp,
    shapes,
)

CHANNEL_AXIS = 1
TOKEN_RANK = 3  # (1, T, D): tokens, their features last


def channel_axis(shape: tuple[int, ...]) -> int:
    """Where a value's channels are: axis 1 of NCHW and (N, C); the features (last axis)
    of a transformer's tokens (N, T, D)."""
    return len(shape) - 1 if len(shape) == TOKEN_RANK else CHANNEL_AXIS


def channel_axes(graph: Graph) -> dict[str, int]:
    return {name: channel_axis(shape) for name, shape in shapes(graph).items()}


def is_depthwise(graph: Graph, layer: Layer) -> bool:
    if not isinstance(layer.op, Conv):
        return False
    out_channels, per_group = graph.weights[layer.op.weight].shape[:2]
    return bool(per_group == 1 and layer.op.groups == out_channels)


def preserves_channels(graph: Graph, layer: Layer, axes: dict[str, int]) -> bool:
    """Channel c of the output is computed from channel c of the (single) input alone (or,
    for LayerNorm, from the channels kept with it); `axes`: every layer's channel axis."""
    op = layer.op
    if isinstance(op, (Pointwise, ScalarOp, Pool, GlobalPool, LayerNorm, WeightOp)):
        return True
    if isinstance(op, ChannelOp):
        return op.axis == axes[layer.name]
    if isinstance(op, (Slice, Pad)):
        return op.axis != axes[layer.name]
    return is_depthwise(graph, layer)


def shrinkable(layer: Layer) -> bool:
    """A layer whose output channels a bottleneck can cut: an ungrouped conv or a dense."""
    return isinstance(layer.op, (Dense, TokenDense)) or (
        isinstance(layer.op, Conv) and layer.op.groups == 1)


class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        self.parent.setdefault(name, name)
        while self.parent[name] != name:
            self.parent[name] = self.parent[self.parent[name]]
            name = self.parent[name]
        return name

    def union(self, a: str, b: str) -> None:
        root_a, root_b = self.find(a), self.find(b)
        if root_a != root_b:
            # the earlier layer names the set, so the result does not depend on visit order
            self.parent[max(root_a, root_b)] = min(root_a, root_b)


@dataclass(frozen=True)
class CoupledSet:
    """The layers producing one channel axis; `fixed` ones (inputs, grouped convs) cannot shrink."""

    producers: tuple[str, ...]
    fixed: tuple[str, ...]

    def describe(self) -> str:
        return ",".join(self.producers + self.fixed)


def channel_classes(graph: Graph, axes: dict[str, int]) -> UnionFind:
    classes = UnionFind()
    for layer in graph.layers.values():
        classes.find(layer.name)
        if preserves_channels(graph, layer, axes):
            classes.union(layer.name, layer.inputs[0])
        elif isinstance(layer.op, Binary):
            for operand in layer.inputs:
                classes.union(layer.name, operand)
    return classes


def coupled_sets(graph: Graph) -> dict[str, CoupledSet]:
    """Every layer's channel axis → the set of layers producing it."""
    axes = channel_axes(graph)
    classes = channel_classes(graph, axes)
    members: dict[str, tuple[list[str], list[str]]] = {}
    for layer in graph.layers.values():
        if preserves_channels(graph, layer, axes) or isinstance(layer.op, Binary):
            continue
        producers, fixed = members.setdefault(classes.find(layer.name), ([], []))
        (producers if shrinkable(layer) else fixed).append(layer.name)
    sets = {root: CoupledSet(tuple(p), tuple(f)) for root, (p, f) in members.items()}
    return {name: sets[classes.find(name)] for name in graph.layers
            if classes.find(name) in sets}
