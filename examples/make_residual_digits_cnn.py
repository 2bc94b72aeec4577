"""A residual CNN for the digits (needs the nas extra): the second network `bench/bench_nas.py`
searches, its skip connection coupling c1 and c3.

The same data as examples/make_digits_cnn.py (scikit-learn's bundled digits, split 1,200
train / 597 validation, stratified, seed 0):

  conv 3x3 1->16 pad 1 + bias, relu                     c1 (8x8)
  conv 3x3 16->16 pad 1 + bias, relu                    c2
  conv 3x3 16->16 pad 1 + bias, + c1, relu, max-pool    c3 (4x4)
  conv 3x3 16->32 pad 1 + bias, relu, max-pool          c4 (2x2)
  flatten 128, dense 128->10 + bias                     fc

Writes residual_digits_cnn.gs and residual_digits_cnn.npz here (the data files are
make_digits_cnn.py's):
    python examples/make_residual_digits_cnn.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from make_digits_cnn import he, split_digits

from glensidec.lang.syntax import format_program
from glensidec.lang.terms import ComputeOp, TensorDecl
from glensidec.nas.graph import (
    Binary,
    ChannelOp,
    Conv,
    Dense,
    Graph,
    Input,
    Layer,
    Pointwise,
    Pool,
    Reshape,
    lower,
)
from glensidec.nas.torch_model import Data, accuracy, train

HERE = Path(__file__).resolve().parent
EPOCHS = 15
RELU = Pointwise(ComputeOp("relu"))


def conv(name: str, source: str, channels: int, out: int, rng: np.random.Generator,
         weights: dict[str, np.ndarray]) -> list[Layer]:
    """A 3x3 conv (padding 1) and its bias."""
    weights[f"{name}_w"] = he(rng, (out, channels, 3, 3))
    weights[f"{name}_b"] = np.zeros(out, np.float32)
    return [Layer(name, Conv(f"{name}_w", 1, (1, 1), (1, 1, 1, 1)), (source,)),
            Layer(f"{name}.bias", ChannelOp("elementwise-add", f"{name}_b", 1, "reshape"),
                  (name,))]


def network(seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    weights: dict[str, np.ndarray] = {}
    layers = [Layer("image", Input()),
              *conv("c1", "image", 1, 16, rng, weights),
              Layer("c1.relu", RELU, ("c1.bias",)),
              *conv("c2", "c1.relu", 16, 16, rng, weights),
              Layer("c2.relu", RELU, ("c2.bias",)),
              *conv("c3", "c2.relu", 16, 16, rng, weights),
              Layer("c3.add", Binary("elementwise-add"), ("c3.bias", "c1.relu")),
              Layer("c3.relu", RELU, ("c3.add",)),
              Layer("c3.pool", Pool("reduce-max", (2, 2), (2, 2)), ("c3.relu",)),
              *conv("c4", "c3.pool", 16, 32, rng, weights),
              Layer("c4.relu", RELU, ("c4.bias",)),
              Layer("c4.pool", Pool("reduce-max", (2, 2), (2, 2)), ("c4.relu",)),
              Layer("flat", Reshape((1, 128)), ("c4.pool",))]
    weights["fc_w"] = he(rng, (10, 128))
    weights["fc_b"] = np.zeros(10, np.float32)
    layers += [Layer("fc", Dense("fc_w"), ("flat",)),
               Layer("logits", ChannelOp("elementwise-add", "fc_b", 1, "reshape"), ("fc",))]
    inputs = {"image": TensorDecl("image", (1, 1, 8, 8), "f32", "input")}
    lets = {"c1.relu": "c1", "c2.relu": "c2", "c3.pool": "c3", "c4.pool": "c4",
            "flat": "flat", "fc": "fc", "logits": "logits"}
    empty = Graph(str(HERE / "residual_digits_cnn.gs"), inputs, {}, "logits", {}, {})
    return empty.with_layers({layer.name: layer for layer in layers}, weights, lets)


def main() -> None:
    x_train, x_val, y_train, y_val = split_digits()
    graph = train(network(), Data(x_train, y_train), EPOCHS, seed=0)
    print(f"validation accuracy {100 * accuracy(graph, Data(x_val, y_val)):.1f} %")
    program = lower(graph, "residual_digits_cnn.npz")
    header = ("; A residual CNN for scikit-learn's digits, made and trained by "
              "examples/make_residual_digits_cnn.py.\n")
    (HERE / "residual_digits_cnn.gs").write_text(header + format_program(program),
                                                 encoding="utf-8")
    np.savez(HERE / "residual_digits_cnn.npz", **graph.weights)
    print("wrote residual_digits_cnn.gs, residual_digits_cnn.npz")


if __name__ == "__main__":
    main()
