"""The PyTorch model of a layer graph and Fisher Potential (the `nas` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")

import torch
from onnx_models import MODELS, OnnxGraph, imported
from test_nas_transforms import skip_net

from glensidec.errors import GlensideError
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.typecheck import check_program
from glensidec.nas import fisher
from glensidec.nas import transforms as T
from glensidec.nas.graph import Graph, lift, lower
from glensidec.nas.torch_model import Data, GraphModel


def graph_of(model: Any, tmp_path: Path) -> Graph:
    program = imported(model, tmp_path)
    return lift(program, load_weights(program))


def interpreter(graph: Graph, x: np.ndarray) -> np.ndarray:
    program = lower(graph)
    name = next(iter(graph.inputs))
    return run_program(program, {**graph.weights, name: x}, check_program(program))


def variants(graph: Graph) -> list[Graph]:
    convs = [r["name"] for r in T.transformable(graph) if r["kind"] == "conv"]
    found = [graph]
    for make in (lambda g, c: T.depthwise(g, c), lambda g, c: T.spatial_split(g, c, 2),
                 lambda g, c: T.bottleneck_block(g, c, 2), lambda g, c: T.group(g, c, 2)):
        for conv in convs:
            try:
                found.append(make(graph, conv))
                break
            except GlensideError:  # not every transformation fits every layer
                continue
    return found


@pytest.mark.parametrize("name", ["lenet", "resnet_block", "mobilenet_block", "mlp", "skip"])
def test_model_equals_the_interpreter(name: str, tmp_path: Path) -> None:
    graph = graph_of(skip_net() if name == "skip" else MODELS[name](), tmp_path)
    shape = next(iter(graph.inputs.values())).shape
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for candidate in variants(graph):
        with torch.no_grad():
            ours = GraphModel(candidate)(torch.tensor(x)).numpy()
        expected = interpreter(candidate, x)
        scale = float(np.max(np.abs(expected)))
        np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-5 * scale)


def tiny(tmp_path: Path) -> Graph:
    """x (N,2,3,3) → conv 1x1 2→2 + bias → flatten → dense 18→3 + bias."""
    g = OnnxGraph(4)
    x = g.input("x", [1, 2, 3, 3])
    c = g.conv(x, 2, 2, 1, name="c")
    flat = g.node("Flatten", [c], name="flat", axis=1)
    return graph_of(g.model(g.gemm(flat, 18, 3, name="fc"), [1, 3]), tmp_path)


def batch(n: int = 5, seed: int = 1) -> Data:
    rng = np.random.default_rng(seed)
    return Data(rng.standard_normal((n, 2, 3, 3)).astype(np.float32),
                rng.integers(0, 3, n).astype(np.int64))


def test_fisher_by_hand(tmp_path: Path) -> None:
    graph = tiny(tmp_path)
    assert fisher.block_outputs(graph) == ["c.bias"]
    data = batch()
    w, b = (graph.weights[n].astype(np.float64) for n in ("c_w", "c_b"))
    fc_w, fc_b = (graph.weights[n].astype(np.float64) for n in ("fc_w", "fc_b"))
    act = np.einsum("oc,nchw->nohw", w[:, :, 0, 0], data.x) + b[None, :, None, None]
    logits = act.reshape(5, 18) @ fc_w.T + fc_b
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dlogits = (p - np.eye(3)[data.y]) / 5  # cross-entropy, mean over the batch
    grad = (dlogits @ fc_w).reshape(5, 2, 3, 3)
    g = (act * grad).sum(axis=(2, 3))
    expected = 0.5 * (g ** 2).mean(axis=0)
    deltas = fisher.per_channel(graph, data)
    np.testing.assert_allclose(deltas["c.bias"], expected, rtol=1e-4)
    assert fisher.potential(deltas) == pytest.approx(float(np.abs(expected).sum()), rel=1e-4)


def test_a_zeroed_channel_has_no_potential(tmp_path: Path) -> None:
    graph = tiny(tmp_path)
    weights = dict(graph.weights)
    weights["c_w"] = weights["c_w"].copy()
    weights["c_b"] = weights["c_b"].copy()
    weights["c_w"][1] = 0
    weights["c_b"][1] = 0
    deltas = fisher.per_channel(graph.with_layers(graph.layers, weights), batch())["c.bias"]
    assert deltas[1] == 0.0 and deltas[0] > 0


def test_scaling_the_loss_by_c_scales_the_potential_by_c_squared(tmp_path: Path) -> None:
    graph = graph_of(skip_net(), tmp_path)
    rng = np.random.default_rng(2)
    data = Data(rng.standard_normal((8, 4, 8, 8)).astype(np.float32),
                rng.integers(0, 10, 8).astype(np.int64))
    base = fisher.potential(fisher.per_channel(graph, data))
    scaled = fisher.potential(fisher.per_channel(graph, data, loss_scale=3.0))
    assert base > 0
    assert scaled == pytest.approx(9.0 * base, rel=1e-4)


def test_transformed_networks_are_measured_at_the_same_points(tmp_path: Path) -> None:
    graph = graph_of(skip_net(), tmp_path)
    points = fisher.block_outputs(graph)
    assert points == ["a.bias", "b.bias", "c.bias", "d.bias"]
    for candidate in (T.depthwise(graph, "d"), T.bottleneck_block(graph, "a", 2),
                      T.spatial_split(graph, "b", 2)):
        assert set(points) <= set(candidate.layers)
        deltas = fisher.per_channel(candidate, Data(
            np.ones((2, 4, 8, 8), np.float32), np.array([1, 2])), points)
        assert set(deltas) == set(points)
