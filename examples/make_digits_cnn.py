"""The digits CNN that `glensidec nas` searches out of the box (needs the nas extra).

scikit-learn's bundled digits (1,797 8x8 grey images, no download), split 1,200 train /
597 validation (stratified, seed 0). The network is written as a layer graph and lowered
to a program in the builders' idioms, then trained with glensidec's PyTorch model:

  conv 3x3 1->16 pad 1 + bias, relu            (8x8)
  conv 3x3 16->32 pad 1 + bias, relu, max-pool (4x4)
  conv 3x3 32->64 pad 1 + bias, relu, max-pool (2x2)
  flatten 256, dense 256->10 + bias

Writes digits_cnn.gs, digits_cnn.npz, digits_train.npz and digits_val.npz here:
    python examples/make_digits_cnn.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from glensidec.lang.syntax import format_program
from glensidec.lang.terms import ComputeOp, TensorDecl
from glensidec.nas.graph import (
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


def he(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def network(seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    layers = [Layer("image", Input())]
    weights: dict[str, np.ndarray] = {}
    previous, channels = "image", 1
    for name, out, pool in (("c1", 16, False), ("c2", 32, True), ("c3", 64, True)):
        weights[f"{name}_w"] = he(rng, (out, channels, 3, 3))
        weights[f"{name}_b"] = np.zeros(out, np.float32)
        layers += [Layer(name, Conv(f"{name}_w", 1, (1, 1), (1, 1, 1, 1)), (previous,)),
                   Layer(f"{name}.bias", ChannelOp("elementwise-add", f"{name}_b", 1,
                                                   "reshape"), (name,)),
                   Layer(f"{name}.relu", Pointwise(ComputeOp("relu")), (f"{name}.bias",))]
        previous, channels = f"{name}.relu", out
        if pool:
            layers.append(Layer(f"{name}.pool", Pool("reduce-max", (2, 2), (2, 2)),
                                (previous,)))
            previous = f"{name}.pool"
    layers.append(Layer("flat", Reshape((1, 256)), (previous,)))
    weights["fc_w"] = he(rng, (10, 256))
    weights["fc_b"] = np.zeros(10, np.float32)
    layers += [Layer("fc", Dense("fc_w"), ("flat",)),
               Layer("logits", ChannelOp("elementwise-add", "fc_b", 1, "reshape"), ("fc",))]
    inputs = {"image": TensorDecl("image", (1, 1, 8, 8), "f32", "input")}
    lets = {"c1.relu": "c1", "c2.pool": "c2", "c3.pool": "c3", "flat": "flat", "fc": "fc",
            "logits": "logits"}
    empty = Graph(str(HERE / "digits_cnn.gs"), inputs, {}, "logits", {}, {})
    return empty.with_layers({layer.name: layer for layer in layers}, weights, lets)


def split_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x_train, x_val, y_train, y_val: the digits as (N, 1, 8, 8) in [0, 1] and labels."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (1797, 1, 8, 8)
    y = digits.target.astype(np.int64)
    x_train, x_val, y_train, y_val = train_test_split(x, y, train_size=1200, random_state=0,
                                                      stratify=y)
    return x_train, x_val, y_train, y_val


def main() -> None:
    x_train, x_val, y_train, y_val = split_digits()
    graph = train(network(), Data(x_train, y_train), EPOCHS, seed=0)
    print(f"validation accuracy {100 * accuracy(graph, Data(x_val, y_val)):.1f} %")
    program = lower(graph, "digits_cnn.npz")
    header = ("; A small CNN for scikit-learn's digits, made and trained by "
              "examples/make_digits_cnn.py.\n")
    (HERE / "digits_cnn.gs").write_text(header + format_program(program), encoding="utf-8")
    np.savez(HERE / "digits_cnn.npz", **graph.weights)
    np.savez(HERE / "digits_train.npz", x=x_train, y=y_train)
    np.savez(HERE / "digits_val.npz", x=x_val, y=y_val)
    print("wrote digits_cnn.gs, digits_cnn.npz, digits_train.npz, digits_val.npz")


if __name__ == "__main__":
    main()
