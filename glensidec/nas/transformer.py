"""Transformations of a transformer's layers (docs/nas.md, "Transformer transformations").

Pure functions from a layer graph to a new one, with checked preconditions, like those of
glensidec.nas.transforms (whose Edit and Init they use):

| transformation      | becomes                                                          |
|---------------------|------------------------------------------------------------------|
| heads(A, H)         | attention A with H of its heads: the strongest (norms of their    |
|                     | Q, K, V rows and out-projection columns), their projections cut   |
| head_dim(A, F)      | every head of A with dh/F of its dimensions: the strongest of each |
|                     | head; the scale stays (the kept dimensions' logits are unchanged)  |
| low_rank(L, R)      | dense L (U×K) as two, K→R then R→U (the best rank-R factors, SVD)  |
| drop(ADD)           | the residual add ADD and its branch removed: x + f(x) becomes x    |

The MLP bottleneck (hidden width / B) is `bottleneck` on the MLP's first layer, and the
residual stream's width `bottleneck` on the patch embedding: coupling (glensidec.nas.coupling)
shrinks every layer writing the stream with it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from glensidec.errors import GlensideError
from glensidec.nas.graph import (
    PRODUCTS,
    Array,
    Attention,
    Binary,
    ChannelOp,
    Dense,
    Graph,
    Layer,
    TokenDense,
)
from glensidec.nas.transforms import INHERIT, Edit, Init, _check_f32, layer_named


@dataclass(frozen=True)
class Projections:
    """An attention's q, k, v and out-projection dense layers and their biases (or None)."""

    q: str
    k: str
    v: str
    out: str
    biases: dict[str, str | None]


def _projection_of(graph: Graph, source: str, attention: str, what: str) -> tuple[str, str | None]:
    """The dense layer (and its bias) feeding the attention's operand `source`, used by
    nothing else (cutting it must not change another layer)."""
    layer = graph.layers[source]
    bias: str | None = None
    if isinstance(layer.op, ChannelOp) and layer.op.compute == "elementwise-add":
        bias, layer = source, graph.layers[layer.inputs[0]]
    if not isinstance(layer.op, TokenDense) or (
            bias is not None and graph.consumers(layer.name) != [bias]):
        raise GlensideError(f"{what}: the attention's operand '{source}' is not a dense "
                            "projection (and bias) of its own")
    if graph.consumers(bias or layer.name) != [attention]:
        raise GlensideError(f"{what}: the projection '{layer.name}' feeds other layers too")
    return layer.name, bias


def projections(graph: Graph, name: str, what: str) -> Projections:
    attention = graph.layers[name]
    found = [_projection_of(graph, source, name, what) for source in attention.inputs]
    consumers = graph.consumers(name)
    if len(consumers) != 1 or not isinstance(graph.layers[consumers[0]].op, TokenDense):
        raise GlensideError(f"{what}: the attention's result must feed one dense "
                            f"out-projection (it feeds {', '.join(consumers) or 'nothing'})")
    q, k, v = (n for n, _ in found)
    biases = {n: b for n, b in found}
    return Projections(q, k, v, consumers[0], biases)


def _attention(graph: Graph, name: str, what: str) -> tuple[Attention, int, int]:
    """The attention op, its heads and head dimension."""
    layer = layer_named(graph, name, (Attention,))
    _check_f32(graph, what)
    assert isinstance(layer.op, Attention)
    width = int(graph.weights[_weight(graph, projections(graph, name, what).q)].shape[0])
    return layer.op, layer.op.heads, width // layer.op.heads


def _weight(graph: Graph, name: str) -> str:
    op = graph.layers[name].op
    assert isinstance(op, PRODUCTS)
    return op.weight


def _strength(graph: Graph, parts: Projections) -> Array:
    """Per attention feature: squared norms of its Q, K, V rows and out-projection column."""
    total = np.zeros(graph.weights[_weight(graph, parts.q)].shape[0])
    for layer in (parts.q, parts.k, parts.v):
        total += (graph.weights[_weight(graph, layer)].astype(np.float64) ** 2).sum(axis=1)
    total += (graph.weights[_weight(graph, parts.out)].astype(np.float64) ** 2).sum(axis=0)
    return total


def _cut(graph: Graph, parts: Projections, kept: list[int], init: Init, what: str) -> Edit:
    """Keep attention features `kept` in the q, k, v projections (rows, biases) and the
    out-projection (columns); random weights of the new shapes with `init.random`."""
    edit = Edit(graph)
    for layer in (parts.q, parts.k, parts.v):
        weight = _weight(graph, layer)
        old = graph.weights[weight]
        edit.weights[weight] = old[kept] if init.inherit else init.he(
            (len(kept), old.shape[1]), int(old.shape[1]), f"{layer}/{what}")
        bias = parts.biases[layer]
        if bias is not None:
            op = graph.layers[bias].op
            assert isinstance(op, ChannelOp)
            edit.weights[op.weight] = graph.weights[op.weight][kept]
    weight = _weight(graph, parts.out)
    old = graph.weights[weight]
    edit.weights[weight] = old[:, kept] if init.inherit else init.he(
        (old.shape[0], len(kept)), len(kept), f"{parts.out}/{what}")
    return edit


def heads(graph: Graph, name: str, count: int, init: Init = INHERIT) -> Graph:
    """Keep `count` of attention `name`'s heads, the strongest."""
    what = f"heads {name}:{count}"
    op, old_heads, head = _attention(graph, name, what)
    if count == old_heads:
        return graph
    if not 1 <= count < old_heads:
        raise GlensideError(f"{what}: the attention has {old_heads} heads; keep 1 to "
                            f"{old_heads - 1} of them")
    parts = projections(graph, name, what)
    per_head = _strength(graph, parts).reshape(old_heads, head).sum(axis=1)
    strongest = sorted(int(h) for h in np.argsort(-per_head, kind="stable")[:count])
    kept = [h * head + j for h in strongest for j in range(head)]
    edit = _cut(graph, parts, kept, init, "heads")
    edit.set(name, replace(op, heads=count))
    return edit.done()


def head_dim(graph: Graph, name: str, factor: int, init: Init = INHERIT) -> Graph:
    """Every head of attention `name` keeps 1/factor of its dimensions, its strongest."""
    what = f"head-dim {name}:{factor}"
    _, count, head = _attention(graph, name, what)
    if factor == 1:
        return graph
    if factor < 1 or head % factor:
        raise GlensideError(f"{what}: the head dimension {head} is not divisible by {factor}")
    parts = projections(graph, name, what)
    strength = _strength(graph, parts).reshape(count, head)
    keep = head // factor
    kept = [h * head + int(j) for h in range(count)
            for j in sorted(np.argsort(-strength[h], kind="stable")[:keep])]
    return _cut(graph, parts, kept, init, "head-dim").done()


def low_rank(graph: Graph, name: str, rank: int, init: Init = INHERIT) -> Graph:
    """Dense `name` (U×K weights) as K→rank then rank→U: W ≈ (U_r·√S_r)(√S_r·V_rᵀ), the best
    rank-`rank` factors (exact when W has that rank)."""
    what = f"low-rank {name}:{rank}"
    layer = layer_named(graph, name, (Dense, TokenDense))
    _check_f32(graph, what)
    assert isinstance(layer.op, (Dense, TokenDense))
    old = graph.weights[layer.op.weight]
    units, features = (int(d) for d in old.shape)
    if not 1 <= rank < min(units, features):
        raise GlensideError(f"{what}: the rank must be 1 to {min(units, features) - 1} "
                            f"(the weights are {units}x{features})")
    if init.inherit:
        u, s, vt = np.linalg.svd(old.astype(np.float64), full_matrices=False)
        root = np.sqrt(s[:rank])
        down, up = root[:, None] * vt[:rank], u[:, :rank] * root[None, :]
    else:
        down = init.he((rank, features), features, f"{name}/down")
        up = init.he((units, rank), rank, f"{name}/up")
    edit = Edit(graph)
    weight = edit.new_weight(f"{layer.op.weight}_down", down)
    first = edit.insert(name, replace(layer.op, weight=weight), layer.inputs, f"{name}_down")
    edit.weights[layer.op.weight] = up.astype(np.float32)
    edit.set(name, layer.op, (first,))
    return edit.done()


def residual_branch(graph: Graph, name: str, what: str) -> tuple[str, set[str]]:
    """The residual add `name`'s skip operand and the layers of its other (the branch)."""
    layer = graph.layers.get(name)
    if layer is None or not isinstance(layer.op, Binary) or \
            layer.op.compute != "elementwise-add":
        adds = [n for n, la in graph.layers.items() if isinstance(la.op, Binary) and
                la.op.compute == "elementwise-add"]
        raise GlensideError(f"{what}: no residual add '{name}' (adds: {', '.join(adds) or 'none'})")
    for skip, branch in (layer.inputs, tuple(reversed(layer.inputs))):
        ancestors = _ancestors(graph, branch)
        if skip not in ancestors or skip == branch:
            continue
        inside = ancestors - _ancestors(graph, skip)
        outside = [c for n in inside for c in graph.consumers(n) if c not in inside | {name}]
        if not outside:
            return skip, inside
    raise GlensideError(f"{what}: neither operand of '{name}' is a branch computed from the "
                        "other and used by nothing else (not a residual block)")


def _ancestors(graph: Graph, name: str) -> set[str]:
    """`name` and every layer it is computed from."""
    found, stack = set(), [name]
    while stack:
        current = stack.pop()
        if current not in found:
            found.add(current)
            stack.extend(graph.layers[current].inputs)
    return found


def drop(graph: Graph, name: str, init: Init = INHERIT) -> Graph:
    """Remove the residual add `name` and its branch: its consumers read the skip operand."""
    what = f"drop {name}"
    _check_f32(graph, what)
    skip, inside = residual_branch(graph, name, what)
    gone = inside | {name}
    layers: dict[str, Layer] = {}
    for layer_name, layer in graph.layers.items():
        if layer_name not in gone:
            inputs = tuple(skip if i == name else i for i in layer.inputs)
            layers[layer_name] = replace(layer, inputs=inputs)
    edit = Edit(graph)
    edit.layers = layers
    edit.lets = {n: let for n, let in graph.lets.items() if n not in gone}
    result = edit.done()
    if graph.output == name:
        result = replace(result, output=skip)
    return result
