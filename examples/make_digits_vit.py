"""The digits vision transformer that `glensidec nas` searches (needs the nas extra).

The same digits and split as examples/make_digits_cnn.py (scikit-learn's bundled 8x8
images, no download; digits_train.npz and digits_val.npz). The network is written as a layer
graph in the idioms `glensidec import` writes for an ONNX transformer (MatMul, Add,
Softmax, LayerNormalization), lowered to a program and trained with glensidec's PyTorch
model:

  the 8x8 image as 4 patches of 4x4 (reshape, transpose, reshape: 4 tokens x 16)
  patch embedding 16->32 + bias, + a learned position embedding (4 x 32)
  2 pre-norm encoder blocks, each
    x + out(attention(LayerNorm(x)))       2 heads of 16, Q/K/V/out projections 32->32
    x + fc2(relu(fc1(LayerNorm(x))))       MLP 32->64->32
  LayerNorm, flatten 4x32, dense 128->10 + bias

Writes digits_vit.gs and digits_vit.npz here (and the digits' .npz files if missing):
    python examples/make_digits_vit.py
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from make_digits_cnn import split_digits

from glensidec.lang.syntax import format_program
from glensidec.lang.terms import ComputeOp, TensorDecl
from glensidec.nas.graph import (
    Attention,
    Binary,
    ChannelOp,
    Dense,
    Graph,
    Input,
    Layer,
    LayerNorm,
    Op,
    Pointwise,
    Reshape,
    TokenDense,
    Transpose,
    WeightOp,
    literal,
    lower,
)
from glensidec.nas.torch_model import Data, accuracy, train

HERE = Path(__file__).resolve().parent
EPOCHS = 40
LEARNING_RATE = 3e-3
TOKENS, PATCH, WIDTH, HEADS, HIDDEN, BLOCKS, CLASSES = 4, 16, 32, 2, 64, 2, 10
EPSILON = 1e-5


def he(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


class Net:
    """Layers and weights appended in order; `previous` is the last layer."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.layers = [Layer("image", Input())]
        self.weights: dict[str, np.ndarray] = {}
        self.lets: dict[str, str] = {}
        self.previous = "image"

    def add(self, name: str, op: Op, inputs: tuple[str, ...] | None = None,
            let: str | None = "") -> str:
        """A layer; `let`: the program's name for it ("" its own, None none)."""
        self.layers.append(Layer(name, op, inputs or (self.previous,)))
        if let is not None:
            self.lets[name] = let or name
        self.previous = name
        return name

    def dense(self, name: str, fan_in: int, units: int, source: str) -> str:
        """x W + b over the last axis, as PyTorch exports nn.Linear (MatMul, Add)."""
        self.weights[f"{name}_w"] = he(self.rng, (units, fan_in))
        self.weights[f"{name}_b"] = np.zeros(units, np.float32)
        self.add(name, TokenDense(f"{name}_w"), (source,), let=None)
        return self.add(f"{name}.bias", ChannelOp("elementwise-add", f"{name}_b", 2, "reshape"),
                        let=name)

    def layer_norm(self, name: str, source: str) -> str:
        self.weights[f"{name}_scale"] = np.ones(WIDTH, np.float32)
        self.weights[f"{name}_shift"] = np.zeros(WIDTH, np.float32)
        self.add(f"{name}.layernorm", LayerNorm(literal(EPSILON)), (source,), let=None)
        self.add(f"{name}.scale", ChannelOp("elementwise-mul", f"{name}_scale", 2, "reshape"),
                 let=None)
        return self.add(name, ChannelOp("elementwise-add", f"{name}_shift", 2, "reshape"))

    def block(self, index: int, x: str) -> str:
        b = f"b{index}"
        normed = self.layer_norm(f"{b}_ln1", x)
        q, k, v = (self.dense(f"{b}_{p}", WIDTH, WIDTH, normed) for p in "qkv")
        self.add(f"{b}_attn", Attention(HEADS, literal(1.0 / math.sqrt(WIDTH // HEADS))),
                 (q, k, v))
        out = self.dense(f"{b}_out", WIDTH, WIDTH, f"{b}_attn")
        x = self.add(f"{b}_res1", Binary("elementwise-add"), (x, out))
        normed = self.layer_norm(f"{b}_ln2", x)
        hidden = self.dense(f"{b}_fc1", WIDTH, HIDDEN, normed)
        del self.lets[hidden]  # the let is relu(fc1(x) + b), as make_digits_cnn's c1
        self.add(f"{b}_fc1.relu", Pointwise(ComputeOp("relu")), (hidden,), let=f"{b}_fc1")
        out = self.dense(f"{b}_fc2", HIDDEN, WIDTH, f"{b}_fc1.relu")
        return self.add(f"{b}_res2", Binary("elementwise-add"), (x, out))


def network(seed: int = 0) -> Graph:
    net = Net(seed)
    side = math.isqrt(PATCH)
    # (1, 1, 8, 8) → (1, 2, 4, 2, 4) rows × columns of patches → (1, 4 patches, 16 pixels)
    net.add("rows", Reshape((1, 2, side, 2, side)), let=None)
    net.add("patches.t", Transpose((0, 1, 3, 2, 4)), let=None)
    net.add("patches", Reshape((1, TOKENS, PATCH)))
    embedded = net.dense("embed", PATCH, WIDTH, "patches")
    net.weights["position"] = (0.02 * net.rng.standard_normal((1, TOKENS, WIDTH))).astype(
        np.float32)
    x = net.add("tokens", WeightOp("elementwise-add", "position"), (embedded,))
    for index in range(BLOCKS):
        x = net.block(index, x)
    net.layer_norm("final_ln", x)
    net.add("flat", Reshape((1, TOKENS * WIDTH)))
    net.weights["head_w"] = he(net.rng, (CLASSES, TOKENS * WIDTH))
    net.weights["head_b"] = np.zeros(CLASSES, np.float32)
    net.add("head", Dense("head_w"))
    net.add("logits", ChannelOp("elementwise-add", "head_b", 1, "reshape"))
    inputs = {"image": TensorDecl("image", (1, 1, 8, 8), "f32", "input")}
    empty = Graph(str(HERE / "digits_vit.gs"), inputs, {}, "logits", {}, {})
    return empty.with_layers({layer.name: layer for layer in net.layers}, net.weights,
                             net.lets)


def main() -> None:
    x_train, x_val, y_train, y_val = split_digits()
    graph = train(network(), Data(x_train, y_train), EPOCHS, seed=0,
                  learning_rate=LEARNING_RATE)
    print(f"validation accuracy {100 * accuracy(graph, Data(x_val, y_val)):.1f} %")
    program = lower(graph, "digits_vit.npz")
    header = ("; A small vision transformer for scikit-learn's digits, made and trained by "
              "examples/make_digits_vit.py.\n")
    (HERE / "digits_vit.gs").write_text(header + format_program(program), encoding="utf-8")
    np.savez(HERE / "digits_vit.npz", **graph.weights)
    for name, x, y in (("digits_train.npz", x_train, y_train), ("digits_val.npz", x_val, y_val)):
        if not (HERE / name).exists():
            np.savez(HERE / name, x=x, y=y)
    print("wrote digits_vit.gs, digits_vit.npz")


if __name__ == "__main__":
    main()
