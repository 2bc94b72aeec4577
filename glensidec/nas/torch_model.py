"""A PyTorch model of a float layer graph (needs the `nas` extra: pip install '.[nas]').

The model computes what the interpreter computes on the lowered program (tests check 1e-5),
with every weight a trainable parameter, and takes any batch size: axis 0 is the batch.
`train` and `accuracy` are what legality checks and the search's retraining use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from glensidec.errors import GlensideError
from glensidec.lang.interp import evaluate
from glensidec.lang.typecheck import infer
from glensidec.nas.graph import (
    Array,
    Attention,
    Binary,
    ChannelOp,
    Concat,
    Conv,
    Dense,
    GlobalPool,
    Graph,
    Input,
    Layer,
    LayerNorm,
    Pad,
    Pointwise,
    Pool,
    Reshape,
    ScalarOp,
    Slice,
    TokenDense,
    Transpose,
    WeightOp,
    shapes,
)

TORCH_DTYPE = torch.float32


def _clip(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return torch.clamp(x, min=low, max=high)


class GraphModel(nn.Module):
    """The layers of a graph in order; `taps` collects chosen layers' outputs (Fisher)."""

    def __init__(self, graph: Graph):
        super().__init__()
        if graph.dtype() != "f32":
            raise GlensideError(f"training needs a float network; this one is {graph.dtype()}")
        self.graph = graph
        self.params = nn.ParameterDict({
            name: nn.Parameter(torch.tensor(np.asarray(array), dtype=TORCH_DTYPE))
            for name, array in graph.weights.items()})
        self.batch = next(iter(graph.inputs.values())).shape[0]
        self.constants: dict[str, torch.Tensor] = {}
        self.taps: dict[str, torch.Tensor] = {}
        self.tap_names: set[str] = set()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        values: dict[str, torch.Tensor] = dict(zip(self.graph.inputs, inputs, strict=True))
        self.taps = {}
        for layer in self.graph.layers.values():
            if not isinstance(layer.op, Input):
                values[layer.name] = self.layer(layer, [values[i] for i in layer.inputs])
            if layer.name in self.tap_names:
                tapped = values[layer.name]
                if tapped.requires_grad:
                    tapped.retain_grad()
                self.taps[layer.name] = tapped
        return values[self.graph.output]

    def layer(self, layer: Layer, xs: list[torch.Tensor]) -> torch.Tensor:
        op, x = layer.op, xs[0]
        if isinstance(op, Conv):
            top, left, bottom, right = op.pads
            return F.conv2d(F.pad(x, (left, right, top, bottom)), self.params[op.weight],
                            stride=op.stride, groups=op.groups)
        if isinstance(op, Dense):
            weight: torch.Tensor = self.params[op.weight]
            return x.reshape(x.shape[0], -1) @ weight.T
        if isinstance(op, ChannelOp):
            shape = [1] * x.dim()
            shape[op.axis] = -1
            vector: torch.Tensor = self.params[op.weight].reshape(shape)
            return x + vector if op.compute == "elementwise-add" else x * vector
        if isinstance(op, Pointwise):
            return pointwise(op, x)
        if isinstance(op, ScalarOp):
            return self.scalar_op(layer, op, x)
        if isinstance(op, Pool):
            return pool(op, x)
        if isinstance(op, GlobalPool):
            return x.mean(dim=(2, 3), keepdim=True)
        if isinstance(op, Binary):
            return binary(op.compute, xs[0], xs[1])
        if isinstance(op, Concat):
            return torch.cat(xs, dim=op.axis)
        if isinstance(op, Reshape):
            dims = (*op.dims, *op.items)
            return x.reshape(x.shape[0] if dims[0] == self.batch else dims[0], *dims[1:])
        if isinstance(op, Slice):
            return x.narrow(op.axis, op.low, op.high - op.low)
        if isinstance(op, TokenDense):
            rows: torch.Tensor = self.params[op.weight]
            return x @ rows.T
        if isinstance(op, Attention):
            return self.attention(layer, op, *xs)
        if isinstance(op, LayerNorm):
            epsilon = self.constant(layer.name, op.epsilon).reshape(())
            centred = x - x.mean(dim=-1, keepdim=True)
            return centred / torch.sqrt((centred * centred).mean(dim=-1, keepdim=True) + epsilon)
        if isinstance(op, WeightOp):
            pair = (self.params[op.weight], x) if op.weight_first else (x, self.params[op.weight])
            return binary(op.compute, *pair)
        if isinstance(op, Transpose):
            if op.permutation[0] != 0:
                raise GlensideError(f"'{layer.name}': a transpose that moves the batch axis has "
                                    "no batched training counterpart")
            return x.permute(*op.permutation)
        assert isinstance(op, Pad)
        pads = [0, 0] * (x.dim() - 1 - op.axis) + [op.before, op.after]
        fill = float("-inf") if op.kind == "min-padding" else 0.0
        return F.pad(x, pads, value=fill)

    def constant(self, name: str, source: Any) -> torch.Tensor:
        """A layer's constant term, evaluated once."""
        if name not in self.constants:
            value = evaluate(source, infer(source, {}), {})
            self.constants[name] = torch.tensor(np.asarray(value), dtype=TORCH_DTYPE)
        return self.constants[name]

    def attention(self, layer: Layer, op: Attention, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = q.shape
        head = width // op.heads

        def split(x: torch.Tensor) -> torch.Tensor:  # (N, T, H·dh) → (N, H, T, dh)
            return x.reshape(batch, tokens, op.heads, head).permute(0, 2, 1, 3)

        scale = self.constant(layer.name, op.scale).reshape(())
        weights = torch.softmax(split(q) @ split(k).transpose(2, 3) * scale, dim=-1)
        return (weights @ split(v)).permute(0, 2, 1, 3).reshape(batch, tokens, width)

    def scalar_op(self, layer: Layer, op: ScalarOp, x: torch.Tensor) -> torch.Tensor:
        constant = self.constant(layer.name, op.source)
        pair = (constant, x) if op.constant_first else (x, constant)
        return binary(op.compute, *pair)


def pointwise(op: Pointwise, x: torch.Tensor) -> torch.Tensor:
    name, params = op.op.name, op.op.params
    if name == "relu":
        return F.relu(x)
    if name == "clip":
        return _clip(x, float(params[0]), float(params[1]))
    if name == "negative":
        return -x
    if name == "sqrt":
        return torch.sqrt(x)
    if name in ("erf", "tanh", "exp", "sigmoid"):
        function: Any = getattr(torch, name)
        return function(x)  # type: ignore[no-any-return]
    raise GlensideError(f"'{name}' has no float training counterpart")


def pool(op: Pool, x: torch.Tensor) -> torch.Tensor:
    top, left, bottom, right = op.pads
    if op.reduce == "reduce-max":
        padded = F.pad(x, (left, right, top, bottom), value=float("-inf"))
        return F.max_pool2d(padded, op.kernel, op.stride)
    padded = F.pad(x, (left, right, top, bottom))
    return F.avg_pool2d(padded, op.kernel, op.stride)


def binary(compute: str, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    if compute == "elementwise-add":
        return left + right
    if compute == "elementwise-sub":
        return left - right
    if compute == "elementwise-mul":
        return left * right
    return left / right


def weights_of(model: GraphModel) -> dict[str, Array]:
    return {name: p.detach().numpy().astype(np.float32).copy()
            for name, p in model.params.items()}


# -- training ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Data:
    """Examples `x` (N, *input shape without its batch axis) and labels `y` (N,)."""

    x: Array
    y: Array

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor(self.x, dtype=TORCH_DTYPE), torch.tensor(self.y, dtype=torch.int64)


def load_data(path: Any) -> Data:
    """Examples from an .npz with arrays x (N, …) and y (N,) of class numbers, checked: at
    least one example, as many labels as examples, integer labels, finite x. A bad file is
    a GlensideError naming it (before any training: the search runs on workers)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            x, y = np.asarray(archive["x"]), np.asarray(archive["y"])
    except (OSError, KeyError, ValueError, EOFError) as error:
        raise GlensideError(f"cannot read data {path}: {error} (it needs arrays x and y)")\
            from None
    problem = _data_problem(x, y)
    if problem:
        raise GlensideError(f"data {path}: {problem}")
    return Data(x.astype(np.float32), y.astype(np.int64))


def _data_problem(x: Array, y: Array) -> str | None:
    if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
        return f"x and y must be numbers (x is {x.dtype}, y is {y.dtype})"
    if x.ndim == 0 or x.shape[0] == 0:
        return "x holds no examples"
    if y.ndim != 1:
        kind = "one-hot labels" if y.ndim == 2 else "labels"
        return (f"y must be one class number per example, shape ({x.shape[0]},); got "
                f"{kind} of shape {y.shape}")
    if len(y) != x.shape[0]:
        return f"x holds {x.shape[0]} examples but y {len(y)} labels"
    if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):
        return "y must hold whole class numbers; it holds fractions"
    if not np.isfinite(x).all():
        index = int(np.argwhere(~np.isfinite(x.reshape(len(x), -1)).any(axis=1))[0, 0])
        return f"x holds NaN or infinity (example {index} first)"
    return None


def check_fits(data: Data, path: Any, graph: Graph) -> None:
    """The examples fit the network: one input, examples of its shape (with or without its
    batch axis of 1), labels among its output's classes."""
    if len(graph.inputs) != 1:
        raise GlensideError(f"training needs a network of one input; this one has "
                            f"{len(graph.inputs)} ({', '.join(graph.inputs)})")
    name, decl = next(iter(graph.inputs.items()))
    example = tuple(int(d) for d in data.x.shape[1:])
    if example not in (tuple(decl.shape[1:]), tuple(decl.shape)):
        raise GlensideError(f"data {path}: x holds examples of shape {example}; the "
                            f"network's input {name} takes {tuple(decl.shape[1:])}")
    classes = shapes(graph)[graph.output][-1]
    outside = data.y[(data.y < 0) | (data.y >= classes)]
    if outside.size:
        raise GlensideError(f"data {path}: y holds label {int(outside[0])}, outside the "
                            f"network's {classes} classes (0 to {classes - 1})")


def batched(graph: Graph, x: torch.Tensor) -> torch.Tensor:
    """Examples as the graph's input: (N, *shape[1:])."""
    shape = next(iter(graph.inputs.values())).shape
    return x.reshape(x.shape[0], *shape[1:])


def train(graph: Graph, data: Data, epochs: int, seed: int, batch_size: int = 64,
          learning_rate: float = 1e-2) -> Graph:
    """The graph with trained weights (Adam, cross-entropy on the output logits)."""
    torch.manual_seed(seed)
    model = GraphModel(graph)
    model.train()
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    x, y = data.tensors()
    x = batched(graph, x)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            index = order[start:start + batch_size]
            optimiser.zero_grad()
            loss = F.cross_entropy(model(x[index]), y[index])
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
    return graph.with_layers(graph.layers, weights_of(model))


def accuracy(graph: Graph, data: Data) -> float:
    model = GraphModel(graph)
    model.eval()
    x, y = data.tensors()
    with torch.no_grad():
        predicted = model(batched(graph, x)).argmax(dim=1)
    return float((predicted == y).float().mean())


def mean_loss(graph: Graph, data: Data) -> float:
    model = GraphModel(graph)
    x, y = data.tensors()
    with torch.no_grad():
        return float(F.cross_entropy(model(batched(graph, x)), y))
