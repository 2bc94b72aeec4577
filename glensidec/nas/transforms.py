"""Architecture transformations: pure functions from a layer graph to a new layer graph.

Each checks its preconditions first (a GlensideError naming the layer and what is wrong)
and never changes its argument. New weights are inherited from the old ones (`Init.inherit`:
the diagonal blocks for group, the largest-norm filters for bottleneck, the best rank-1
factor per input channel for depthwise, exact when the filters are separable; copies of the
filter for spatial_split, so the network computes exactly what it did) or drawn afresh
(`Init.random`, He-normal, seeded). G=1, B=1 and S=1 return the graph unchanged.

| transformation            | conv k×k C→O becomes                                        |
|---------------------------|-------------------------------------------------------------|
| group(L, G)               | the same conv in G groups (C/G inputs per output)            |
| bottleneck(L, B)          | C→O/B; every consumer's input channels sliced to match       |
| bottleneck_block(L, B)    | 1×1 C→C/B, k×k C/B→O/B, 1×1 O/B→O                            |
| depthwise(L)              | depthwise k×k (C groups), then pointwise 1×1 C→O             |
| spatial_split(L, S)       | S bands of output rows, each its own weights, joined along H |
| split_out(L, S, G)        | S convs C→O/S in G groups each, joined along channels        |
| stride(L)                 | L at the stride of the max-pool after it; the pool removed   |

Dense layers and token projections take group and bottleneck.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.nas.coupling import (
    channel_axes,
    coupled_sets,
    is_depthwise,
    preserves_channels,
)
from glensidec.nas.graph import (
    PRODUCTS,
    WEIGHTED,
    Array,
    Attention,
    Binary,
    ChannelOp,
    Concat,
    Conv,
    Dense,
    Graph,
    Layer,
    Op,
    Pointwise,
    Pool,
    Reshape,
    ScalarOp,
    Slice,
    TokenDense,
    WeightOp,
    conv_out_hw,
    shapes,
)


@dataclass(frozen=True)
class Init:
    """How new weights are made: inherited from the old ones, or random with `seed`."""

    inherit: bool = True
    seed: int = 0

    def rng(self, salt: str) -> np.random.Generator:
        # one stream per (seed, layer): a transformation's weights do not depend on the order
        # in which the others were applied
        return np.random.default_rng([self.seed, *salt.encode()])

    def he(self, shape: tuple[int, ...], fan_in: int, salt: str) -> Array:
        values: Array = self.rng(salt).standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))
        return values.astype(np.float32)


INHERIT = Init()


# -- editing a graph ---------------------------------------------------------------------------


class Edit:
    """A copy of a graph being changed: layers, weights and lets, fresh names."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.layers = dict(graph.layers)
        self.weights = dict(graph.weights)
        self.lets = dict(graph.lets)
        self.before: dict[str, list[Layer]] = {}

    def fresh(self, wanted: str) -> str:
        taken = set(self.layers) | set(self.weights) | set(self.graph.inputs) | \
            set(self.lets.values()) | {n.name for ns in self.before.values() for n in ns}
        name, counter = wanted, 2
        while name in taken:
            name, counter = f"{wanted}{counter}", counter + 1
        return name

    def new_weight(self, wanted: str, array: Array) -> str:
        name = self.fresh(wanted)
        self.weights[name] = np.ascontiguousarray(array, dtype=np.float32)
        return name

    def insert(self, anchor: str, op: Op, inputs: tuple[str, ...], wanted: str,
               let: bool = True) -> str:
        """A new layer placed before `anchor` (keeps the order topological)."""
        name = self.fresh(wanted)
        self.before.setdefault(anchor, []).append(Layer(name, op, inputs))
        if let:
            self.lets[name] = name
        return name

    def set(self, name: str, op: Op, inputs: tuple[str, ...] | None = None) -> None:
        old = self.layers[name]
        self.layers[name] = replace(old, op=op, inputs=old.inputs if inputs is None else inputs)

    def done(self) -> Graph:
        layers: dict[str, Layer] = {}
        for name, layer in self.layers.items():
            for new in self.before.get(name, []):
                layers[new.name] = new
            layers[name] = layer
        used = {layer.op.weight for layer in layers.values() if isinstance(layer.op, WEIGHTED)}
        weights = {n: a for n, a in self.weights.items() if n in used}
        return self.graph.with_layers(layers, weights, self.lets)


def layer_named(graph: Graph, name: str, kinds: tuple[type, ...] = (Conv, Dense)) -> Layer:
    layer = graph.layers.get(name)
    if layer is None or not isinstance(layer.op, kinds):
        known = ", ".join(n for n, la in graph.layers.items() if isinstance(la.op, kinds))
        # Name the kinds this network has (a CNN's error need not mention token layers).
        present = [k for k in kinds if any(isinstance(la.op, k) for la in graph.layers.values())]
        what = "/".join(k.__name__.lower() for k in present or kinds)
        raise GlensideError(f"no {what} layer '{name}' (layers: {known or 'none'})")
    return layer


def _check_f32(graph: Graph, name: str) -> None:
    if graph.dtype() != "f32":
        raise GlensideError(f"{name}: transformations change float networks (this one is "
                            f"{graph.dtype()}); transform the float model, then quantize")


def _divides(what: str, layer: str, count: int, channels: int, label: str) -> None:
    if count < 1 or channels % count:
        raise GlensideError(f"{what} {layer}:{count}: {label} {channels} is not divisible "
                            f"by {count}")


def _conv_shape(graph: Graph, layer: Layer) -> tuple[int, int, int, int, int]:
    """(out channels, in channels per group, kh, kw, groups)."""
    assert isinstance(layer.op, Conv)
    out_channels, per_group, kh, kw = (int(d) for d in graph.weights[layer.op.weight].shape)
    return out_channels, per_group, kh, kw, layer.op.groups


# -- group -------------------------------------------------------------------------------------


def group(graph: Graph, name: str, groups: int, init: Init = INHERIT) -> Graph:
    """Split L's input and output channels into `groups` groups: keep the diagonal blocks.
    A dense layer, or a transformer's token projection, becomes `groups` dense layers on
    slices of its features, concatenated."""
    layer = layer_named(graph, name, (Conv, Dense, TokenDense))
    _check_f32(graph, f"group {name}")
    if groups == 1:
        return graph
    if isinstance(layer.op, (Dense, TokenDense)):
        return _group_dense(graph, layer, groups, init)
    out_channels, per_group, _, _, old_groups = _conv_shape(graph, layer)
    _divides("group", name, groups, out_channels // old_groups, "output channels per group")
    _divides("group", name, groups, per_group, "input channels per group")
    op = layer.op
    assert isinstance(op, Conv)
    edit = Edit(graph)
    edit.weights[op.weight] = _grouped(graph.weights[op.weight], old_groups, groups, init, name)
    edit.set(name, replace(op, groups=old_groups * groups))
    return edit.done()


def _grouped(old: Array, old_groups: int, groups: int, init: Init, salt: str) -> Array:
    """OIHW weights in `old_groups` groups → in old_groups·groups: the diagonal blocks."""
    out_channels, per_group, kh, kw = (int(d) for d in old.shape)
    new_per_group = per_group // groups
    out_per_group = out_channels // (old_groups * groups)
    if not init.inherit:
        return init.he((out_channels, new_per_group, kh, kw), new_per_group * kh * kw, salt)
    blocks = [old[o, (o // out_per_group % groups) * new_per_group:
                  (o // out_per_group % groups + 1) * new_per_group]
              for o in range(out_channels)]
    return np.stack(blocks).astype(np.float32)


def _group_dense(graph: Graph, layer: Layer, groups: int, init: Init) -> Graph:
    """A dense layer (or token projection) as `groups` of them on feature slices,
    concatenated: group g maps input features g·K/G… to output units g·U/G…"""
    assert isinstance(layer.op, (Dense, TokenDense))
    old = graph.weights[layer.op.weight]
    units, features = (int(d) for d in old.shape)
    _divides("group", layer.name, groups, units, "units")
    _divides("group", layer.name, groups, features, "input features")
    u, f = units // groups, features // groups
    # a dense layer's features are axis 1 of (N, K); a token projection's the last of (N, T, K)
    feature_axis = len(shapes(graph)[layer.inputs[0]]) - 1
    edit = Edit(graph)
    part: str | None = None
    for g in range(groups):
        block = old[g * u:(g + 1) * u, g * f:(g + 1) * f] if init.inherit else \
            init.he((u, f), f, f"{layer.name}/{g}")
        sliced = edit.insert(layer.name, Slice(feature_axis, g * f, (g + 1) * f),
                             layer.inputs, f"{layer.name}_in{g}", let=False)
        weight = edit.new_weight(f"{layer.op.weight}_g{g}", block)
        product = edit.insert(layer.name, replace(layer.op, weight=weight), (sliced,),
                              f"{layer.name}_g{g}")
        if part is None:
            part = product
        elif g < groups - 1:
            part = edit.insert(layer.name, Concat(feature_axis), (part, product),
                               f"{layer.name}_cat{g}", let=False)
        else:
            edit.set(layer.name, Concat(feature_axis), (part, product))
    return edit.done()


# -- bottleneck: shrink output channels, slice every consumer ----------------------------------


def bottleneck(graph: Graph, name: str, factor: int, init: Init = INHERIT) -> Graph:
    """Keep 1/factor of L's output channels (and of every layer coupled to L by an add)."""
    layer_named(graph, name, PRODUCTS)
    _check_f32(graph, f"bottleneck {name}")
    if factor == 1:
        return graph
    coupled = coupled_sets(graph)[name]
    if coupled.fixed:
        raise GlensideError(
            f"bottleneck {name}:{factor}: its output channels are coupled (through adds) to "
            f"{', '.join(coupled.fixed)}, which cannot shrink (coupled set: "
            f"{coupled.describe()})")
    out_channels = _out_channels(graph, graph.layers[coupled.producers[0]])
    _divides("bottleneck", name, factor, out_channels, "output channels")
    keep = out_channels // factor
    kept = _largest(graph, coupled.producers, keep) if init.inherit else list(range(keep))
    edit = Edit(graph)
    for producer in coupled.producers:
        op = graph.layers[producer].op
        assert isinstance(op, PRODUCTS)
        old = graph.weights[op.weight]
        edit.weights[op.weight] = old[kept] if init.inherit else init.he(
            (keep, *old.shape[1:]), int(np.prod(old.shape[1:])), producer)
    Slicing(graph, edit, init, f"bottleneck {name}:{factor}").run(
        {p: kept for p in coupled.producers})
    return edit.done()


def _out_channels(graph: Graph, layer: Layer) -> int:
    assert isinstance(layer.op, PRODUCTS)
    return int(graph.weights[layer.op.weight].shape[0])


def _largest(graph: Graph, producers: tuple[str, ...], keep: int) -> list[int]:
    """The `keep` output channels with the largest filter norms, summed over `producers`."""
    total: Array | None = None
    for producer in producers:
        op = graph.layers[producer].op
        assert isinstance(op, PRODUCTS)
        weights = graph.weights[op.weight].astype(np.float64)
        norms = (weights.reshape(weights.shape[0], -1) ** 2).sum(axis=1)
        total = norms if total is None else total + norms
    assert total is not None
    order = np.argsort(-total, kind="stable")[:keep]
    return sorted(int(i) for i in order)


class Slicing:
    """Follow kept channel indices from the shrunk producers to every consumer.

    In layer order: a channel-preserving layer passes them on (slicing a bias, a scale or
    a depthwise filter); an add needs the same indices on every operand; a channel concat
    offsets them; a flatten expands them to feature blocks; a conv or dense consumer keeps
    those input channels of its weights, and the slicing stops there.
    """

    def __init__(self, graph: Graph, edit: Edit, init: Init, what: str):
        self.graph, self.edit, self.init, self.what = graph, edit, init, what
        self.shape_of = shapes(graph)
        self.axes = channel_axes(graph)

    def fail(self, layer: Layer, why: str) -> GlensideError:
        return GlensideError(f"{self.what}: {why} ('{layer.name}')")

    def run(self, start: dict[str, list[int]]) -> None:
        kept: dict[str, list[int]] = dict(start)
        for layer in self.graph.layers.values():
            if layer.name in start:
                continue
            sliced = [i for i in layer.inputs if i in kept]
            if sliced:
                result = self.consume(layer, kept)
                if result is not None:
                    kept[layer.name] = result
        if self.graph.output in kept:
            raise GlensideError(f"{self.what}: it would change the network's output "
                                f"'{self.graph.output}' (its channels are the result)")

    def channels(self, name: str) -> int:
        return self.shape_of[name][self.axes[name]]

    def consume(self, layer: Layer, kept: dict[str, list[int]]) -> list[int] | None:
        op = layer.op
        if preserves_channels(self.graph, layer, self.axes):
            indices = kept[layer.inputs[0]]
            if isinstance(op, (ChannelOp, Conv)):
                self.slice_weight(op.weight, 0, indices)
            if isinstance(op, WeightOp):  # a position embedding: kept, as a bias is
                weight = self.edit.weights[op.weight]
                self.edit.weights[op.weight] = np.take(weight, indices, self.axes[layer.name])
            if isinstance(op, Conv):
                self.edit.set(layer.name, replace(op, groups=len(indices)))
            return indices
        if isinstance(op, Binary):
            sets = [kept.get(i) for i in layer.inputs]
            if any(s != sets[0] for s in sets):
                raise self.fail(layer, "an add joins channels that would be kept differently")
            return sets[0]
        if isinstance(op, Concat) and op.axis == self.axes[layer.name]:
            indices, offset = [], 0
            for operand in layer.inputs:
                part = kept.get(operand, list(range(self.channels(operand))))
                indices += [offset + i for i in part]
                offset += self.channels(operand)
            return indices
        if isinstance(op, Reshape):
            return self.flatten(layer, kept[layer.inputs[0]])
        if isinstance(op, Conv) and op.groups == 1:
            self.slice_weight(op.weight, 1, kept[layer.inputs[0]])
            return None
        if isinstance(op, (Dense, TokenDense)):
            self.slice_weight(op.weight, 1, kept[layer.inputs[0]])
            return None
        raise self.fail(layer, f"cannot follow kept channels through a "
                               f"{type(op).__name__.lower()} layer")

    def flatten(self, layer: Layer, indices: list[int]) -> list[int]:
        """(N, C, …) → (N, C·R): channel c is features [c·R, (c+1)·R); tokens (N, T, D) →
        (N, T·D): feature d of token t is feature t·D + d."""
        assert isinstance(layer.op, Reshape)
        before = self.shape_of[layer.inputs[0]]
        after = (*layer.op.dims, *layer.op.items)
        if self.axes[layer.inputs[0]] == len(before) - 1 > 1:
            return self.flatten_tokens(layer, before, after, indices)
        block = int(np.prod(before[2:]))
        if len(after) != 2 or after[0] != before[0] or after[1] != before[1] * block:
            raise self.fail(layer, "a reshape other than a flatten of (N, C, …) to (N, C·…)")
        features = [c * block + r for c in indices for r in range(block)]
        dims = (before[0], len(features))
        split = len(layer.op.dims)
        self.edit.set(layer.name, replace(layer.op, dims=dims[:split], items=dims[split:]))
        return features

    def flatten_tokens(self, layer: Layer, before: tuple[int, ...], after: tuple[int, ...],
                       indices: list[int]) -> list[int]:
        assert isinstance(layer.op, Reshape)
        tokens, width = before[1], before[2]
        if len(after) != 2 or after[0] != before[0] or after[1] != tokens * width:
            raise self.fail(layer, "a reshape other than a flatten of (N, T, D) to (N, T·D)")
        features = [t * width + d for t in range(tokens) for d in indices]
        dims = (before[0], len(features))
        split = len(layer.op.dims)
        self.edit.set(layer.name, replace(layer.op, dims=dims[:split], items=dims[split:]))
        return features

    def slice_weight(self, name: str, axis: int, indices: list[int]) -> None:
        old = self.edit.weights[name]
        if self.init.inherit or old.ndim == 1:
            self.edit.weights[name] = np.take(old, indices, axis=axis)
        else:
            shape = list(old.shape)
            shape[axis] = len(indices)
            fan_in = int(np.prod(shape[1:]))
            self.edit.weights[name] = self.init.he(tuple(shape), fan_in, name)


# -- bottleneck block, depthwise ----------------------------------------------------------------


def _plain_conv(graph: Graph, name: str, what: str) -> tuple[Layer, Conv, Array]:
    layer = layer_named(graph, name, (Conv,))
    _check_f32(graph, what)
    assert isinstance(layer.op, Conv)
    if layer.op.groups != 1 or layer.op.weight not in graph.weights or \
            graph.weights[layer.op.weight].ndim != 4:
        raise GlensideError(f"{what}: '{name}' is a grouped conv (groups "
                            f"{layer.op.groups}); this needs an ungrouped one")
    return layer, layer.op, graph.weights[layer.op.weight]


def bottleneck_block(graph: Graph, name: str, factor: int, init: Init = INHERIT) -> Graph:
    """k×k C→O as 1×1 C→C/B, k×k C/B→O/B (L's stride and padding), 1×1 O/B→O."""
    what = f"bottleneck-block {name}:{factor}"
    layer, op, old = _plain_conv(graph, name, what)
    if factor == 1:
        return graph
    out_channels, channels, kh, kw = (int(d) for d in old.shape)
    _divides("bottleneck-block", name, factor, channels, "input channels")
    _divides("bottleneck-block", name, factor, out_channels, "output channels")
    c, o = channels // factor, out_channels // factor
    if init.inherit:
        # keep the strongest input and output channels of the filter: down selects inputs,
        # up puts the kept outputs back in place (the others start at zero)
        weights = old.astype(np.float64)
        ins = np.sort(np.argsort(-(weights ** 2).sum(axis=(0, 2, 3)), kind="stable")[:c])
        outs = np.sort(np.argsort(-(weights ** 2).sum(axis=(1, 2, 3)), kind="stable")[:o])
        down = np.zeros((c, channels, 1, 1), np.float32)
        down[np.arange(c), ins] = 1.0
        mid = old[outs][:, ins]
        up = np.zeros((out_channels, o, 1, 1), np.float32)
        up[outs, np.arange(o)] = 1.0
    else:
        down = init.he((c, channels, 1, 1), channels, f"{name}/down")
        mid = init.he((o, c, kh, kw), c * kh * kw, f"{name}/mid")
        up = init.he((out_channels, o, 1, 1), o, f"{name}/up")
    edit = Edit(graph)
    w_down = edit.new_weight(f"{op.weight}_down", down)
    first = edit.insert(name, Conv(w_down), layer.inputs, f"{name}_down")
    w_mid = edit.new_weight(f"{op.weight}_mid", mid)
    second = edit.insert(name, replace(op, weight=w_mid), (first,), f"{name}_mid")
    edit.weights[op.weight] = up
    edit.set(name, Conv(op.weight), (second,))
    return edit.done()


def depthwise(graph: Graph, name: str, init: Init = INHERIT) -> Graph:
    """k×k C→O as a depthwise k×k (L's stride and padding) and a pointwise 1×1 C→O.

    Inherited: for each input channel c the best rank-1 factorisation (SVD) of the
    (O, k·k) filter slice W[:, c]: W[o, c] ≈ pointwise[o, c] · depthwise[c] — exact when
    every slice has rank one.
    """
    layer, op, old = _plain_conv(graph, name, f"depthwise {name}")
    out_channels, channels, kh, kw = (int(d) for d in old.shape)
    if init.inherit:
        spatial = np.zeros((channels, 1, kh, kw), np.float32)
        pointwise = np.zeros((out_channels, channels, 1, 1), np.float32)
        for c in range(channels):
            u, s, vt = np.linalg.svd(old[:, c].reshape(out_channels, kh * kw).astype(np.float64),
                                     full_matrices=False)
            spatial[c, 0] = (s[0] * vt[0]).reshape(kh, kw)
            pointwise[:, c, 0, 0] = u[:, 0]
    else:
        spatial = init.he((channels, 1, kh, kw), kh * kw, f"{name}/dw")
        pointwise = init.he((out_channels, channels, 1, 1), channels, f"{name}/pw")
    edit = Edit(graph)
    w_dw = edit.new_weight(f"{op.weight}_dw", spatial)
    first = edit.insert(name, replace(op, weight=w_dw, groups=channels), layer.inputs,
                        f"{name}_dw")
    edit.weights[op.weight] = pointwise
    edit.set(name, Conv(op.weight), (first,))
    return edit.done()


# -- the paper's sequences -----------------------------------------------------------------------


def spatial_split(graph: Graph, name: str, bands: int, init: Init = INHERIT) -> Graph:
    """Seq3: the output rows in `bands` bands, each computed with its own copy of the weights."""
    what = f"spatial-split {name}:{bands}"
    layer, op, old = _plain_conv(graph, name, what)
    if bands == 1:
        return graph
    shape_of = shapes(graph)
    _, _, height, width = shape_of[layer.inputs[0]]
    kh, kw = int(old.shape[2]), int(old.shape[3])
    out_h, _ = conv_out_hw((height, width), (kh, kw), op.stride, op.pads)
    if bands < 1 or bands > out_h:
        raise GlensideError(f"{what}: the output has {out_h} rows; bands must be 1..{out_h}")
    top, left, _, right = op.pads
    edit = Edit(graph)
    part: str | None = None
    for band in range(bands):
        first, last = band * out_h // bands, (band + 1) * out_h // bands
        # the band's input rows, in unpadded coordinates; padding stays inside each conv
        low, high = first * op.stride[0] - top, (last - 1) * op.stride[0] + kh - top
        pads = (max(0, -low), left, max(0, high - height), right)
        rows = edit.insert(name, Slice(2, max(0, low), min(height, high)), layer.inputs,
                           f"{name}_rows{band}", let=False)
        weights = old if init.inherit else init.he(old.shape, int(np.prod(old.shape[1:])),
                                                  f"{name}/{band}")
        weight = edit.new_weight(f"{op.weight}_band{band}", weights)
        conv = edit.insert(name, Conv(weight, 1, op.stride, pads), (rows,),
                           f"{name}_band{band}")
        part = _join(edit, name, part, conv, 2, band == bands - 1)
    edit.weights.pop(op.weight)
    return edit.done()


def _join(edit: Edit, name: str, part: str | None, new: str, axis: int, last: bool) -> str:
    """Concatenate `new` onto `part`; the last join takes over L's name."""
    if part is None:
        return new
    if last:
        edit.set(name, Concat(axis), (part, new))
        return name
    return edit.insert(name, Concat(axis), (part, new), f"{name}_join", let=False)


def split_out(graph: Graph, name: str, splits: int, groups: int,
              init: Init = INHERIT) -> Graph:
    """Seq1: the output channels in `splits` parts, each a conv over all inputs in `groups`
    groups; the parts concatenated along channels."""
    what = f"split-out {name}:{splits}:{groups}"
    layer, op, old = _plain_conv(graph, name, what)
    out_channels, channels = (int(d) for d in old.shape[:2])
    _divides("split-out", name, splits, out_channels, "output channels")
    part_out = out_channels // splits
    _divides("split-out", name, groups, part_out, "output channels per part")
    _divides("split-out", name, groups, channels, "input channels")
    if splits == 1:
        return group(graph, name, groups, init)
    edit = Edit(graph)
    part: str | None = None
    for s in range(splits):
        block = _grouped(old[s * part_out:(s + 1) * part_out], 1, groups, init,
                         f"{name}/{s}")
        weight = edit.new_weight(f"{op.weight}_part{s}", block)
        conv = edit.insert(name, replace(op, weight=weight, groups=groups), layer.inputs,
                           f"{name}_part{s}")
        part = _join(edit, name, part, conv, 1, s == splits - 1)
    edit.weights.pop(op.weight)
    return edit.done()


# -- stride: a conv and the max-pool after it become one strided conv ----------------------------


def stride(graph: Graph, name: str, init: Init = INHERIT) -> Graph:
    """Conv L, its per-channel and elementwise layers (bias, activation) and the s×s
    max-pool of stride s after them become L at stride s without the pool (the
    all-convolutional net's replacement of pooling by a strided conv): L computes 1/s² of
    its positions and the pool is gone. `name` is L or that max-pool (the search's gene is
    the pool, so that L keeps its own choice). The pool's output shape is kept, so the
    layers after it are unchanged; L keeps its filters (`init` is not used: no weight is
    new)."""
    what = f"stride {name}"
    if isinstance(getattr(graph.layers.get(name), "op", None), Pool):
        name = _conv_before(graph, name, what)
    layer = layer_named(graph, name, (Conv,))
    _check_f32(graph, what)
    assert isinstance(layer.op, Conv)
    if layer.op.stride != (1, 1):
        raise GlensideError(f"{what}: '{name}' has stride {layer.op.stride}; this needs "
                            "stride 1")
    pool = _pool_after(graph, name, what)
    assert isinstance(pool.op, Pool)
    shape_of = shapes(graph)
    weight = graph.weights[layer.op.weight]
    kernel = (int(weight.shape[2]), int(weight.shape[3]))
    strided = conv_out_hw(tuple(shape_of[layer.inputs[0]][2:4]), kernel,  # type: ignore[arg-type]
                          pool.op.stride, layer.op.pads)
    if strided != tuple(shape_of[pool.name][2:4]):
        raise GlensideError(f"{what}: at stride {pool.op.stride} '{name}' would give "
                            f"{strided[0]}x{strided[1]} positions, the pool "
                            f"'{pool.name}' gives {shape_of[pool.name][2]}x"
                            f"{shape_of[pool.name][3]}")
    edit = Edit(graph)
    edit.set(name, replace(layer.op, stride=pool.op.stride))
    before = pool.inputs[0]
    del edit.layers[pool.name]
    for consumer in graph.consumers(pool.name):
        edit.set(consumer, edit.layers[consumer].op,
                 tuple(before if i == pool.name else i for i in edit.layers[consumer].inputs))
    if pool.name in edit.lets:  # the pool ended a `let`: the layer before it ends it now
        edit.lets[before] = edit.lets.pop(pool.name)
    if graph.output == pool.name:
        return replace(edit.done(), output=before)
    return edit.done()


_BETWEEN = (ChannelOp, Pointwise, ScalarOp)  # what may come between a conv and its pool


def _conv_before(graph: Graph, pool: str, what: str) -> str:
    """The conv that max-pool `pool` follows through per-channel and elementwise layers."""
    current = graph.layers[pool].inputs[0]
    while isinstance(graph.layers[current].op, _BETWEEN) and \
            len(graph.layers[current].inputs) == 1:
        current = graph.layers[current].inputs[0]
    if not isinstance(graph.layers[current].op, Conv):
        raise GlensideError(f"{what}: the pool follows '{current}', not a conv")
    return current


def _pool_after(graph: Graph, name: str, what: str) -> Layer:
    """The unpadded max-pool whose kernel is its stride that follows conv `name` through
    layers of one operand, each the only reader of the one before."""
    current = name
    while True:
        readers = graph.consumers(current)
        if len(readers) != 1 or current == graph.output:
            raise GlensideError(f"{what}: '{current}' is read by {len(readers)} layers; "
                                f"this needs a max-pool after '{name}' and nothing else "
                                "reading the layers between")
        layer = graph.layers[readers[0]]
        if isinstance(layer.op, Pool):
            op = layer.op
            if op.reduce != "reduce-max" or op.kernel != op.stride or any(op.pads) or \
                    op.stride == (1, 1):
                raise GlensideError(f"{what}: '{layer.name}' is not a max-pool whose kernel "
                                    "is its stride (unpadded)")
            return layer
        if len(layer.inputs) != 1 or not isinstance(layer.op, _BETWEEN):
            raise GlensideError(f"{what}: '{layer.name}' ({type(layer.op).__name__.lower()}) "
                                f"comes between '{name}' and a max-pool; only per-channel "
                                "and elementwise layers may")
        current = layer.name


TRANSFORMS: dict[str, Callable[..., Graph]] = {
    "group": group, "bottleneck": bottleneck, "bottleneck-block": bottleneck_block,
    "depthwise": depthwise, "spatial-split": spatial_split, "split-out": split_out,
    "stride": stride,
}


def transformable(graph: Graph) -> list[dict[str, Any]]:
    """Every conv and dense layer: kind, channels, kernel and its coupled set; every
    attention (heads × head dimension) and residual add."""
    coupled = coupled_sets(graph)
    rows = []
    for layer in graph.layers.values():
        if isinstance(layer.op, (Attention, Binary)):
            row = _transformer_row(graph, layer)
            if row is not None:
                rows.append(row)
            continue
        if isinstance(layer.op, Conv):
            out_channels, per_group, kh, kw, groups = _conv_shape(graph, layer)
            kind = "depthwise" if is_depthwise(graph, layer) else (
                f"conv/{groups}" if groups > 1 else "conv")
            rows.append({"name": layer.name, "kind": kind, "in": per_group * groups,
                         "out": out_channels, "kernel": f"{kh}x{kw}",
                         "coupled": coupled[layer.name].describe()})
        elif isinstance(layer.op, (Dense, TokenDense)):
            units, features = graph.weights[layer.op.weight].shape
            rows.append({"name": layer.name, "kind": "dense", "in": int(features),
                         "out": int(units), "kernel": "-",
                         "coupled": coupled[layer.name].describe()})
    return rows


def _transformer_row(graph: Graph, layer: Layer) -> dict[str, Any] | None:
    """An attention's heads and projections, or a residual add and its branch's size."""
    from glensidec.nas.transformer import projections, residual_branch

    if isinstance(layer.op, Attention):
        try:
            parts = projections(graph, layer.name, layer.name)
        except GlensideError:
            return None
        width = int(graph.weights[graph.layers[parts.q].op.weight].shape[0])  # type: ignore[union-attr]
        return {"name": layer.name, "kind": "attention", "in": width, "out": width,
                "kernel": f"{layer.op.heads} heads of {width // layer.op.heads}",
                "coupled": ",".join((parts.q, parts.k, parts.v, parts.out))}
    try:
        _, inside = residual_branch(graph, layer.name, layer.name)
    except GlensideError:
        return None
    width = channel_axes(graph)[layer.name]
    channels = shapes(graph)[layer.name][width]
    branch = [n for n in graph.layers if n in inside and
              isinstance(graph.layers[n].op, (*PRODUCTS, Attention))]
    return {"name": layer.name, "kind": "residual add", "in": channels, "out": channels,
            "kernel": f"branch of {len(inside)} layers", "coupled": ",".join(branch)}


def _register_transformer() -> None:
    """The transformer's transformations live in glensidec.nas.transformer (which builds on
    this module); they are applied through the same table."""
    from glensidec.nas import transformer

    TRANSFORMS.update({"heads": transformer.heads, "head-dim": transformer.head_dim,
                       "low-rank": transformer.low_rank, "drop": transformer.drop})


_register_transformer()
