"""Fisher Potential, exactly as BlockSwap (Turner et al., ICLR 2020) measures it.

At each measured point (a block's output: a conv's result after its bias and scale, before
any activation or residual add), per channel k over a minibatch of N examples:
    g_nk = Σ_hw act[n,k,h,w] · grad[n,k,h,w],   Δ_k = ½ · mean_n g_nk²
where grad is the gradient of the cross-entropy loss (mean over the batch) with respect to
that activation. A point's score is Σ_k |Δ_k|, the network's the sum over points. The
network runs in train mode on one minibatch. Needs the `nas` extra.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from glensidec.nas.coupling import TOKEN_RANK
from glensidec.nas.graph import ChannelOp, Conv, Dense, Graph, TokenDense
from glensidec.nas.torch_model import Data, GraphModel, batched


def block_outputs(graph: Graph) -> list[str]:
    """Where to measure: each conv's (or a transformer's token projection's) result after
    the channel ops that directly follow it.

    Transformations keep the transformed layer's name on its last layer, so the points of
    the original network name the same places in every candidate made from it.
    """
    points = []
    for layer in graph.layers.values():
        if not isinstance(layer.op, (Conv, TokenDense)):
            continue
        point = layer.name
        while True:
            consumers = graph.consumers(point)
            if len(consumers) == 1 and isinstance(graph.layers[consumers[0]].op, ChannelOp):
                point = consumers[0]
            else:
                break
        points.append(point)
    return points


def per_channel(graph: Graph, data: Data, points: list[str] | None = None,
                loss_scale: float = 1.0, seed: int = 0) -> dict[str, np.ndarray]:
    """Δ_k at every point, over the minibatch `data` (`loss_scale` multiplies the loss)."""
    torch.manual_seed(seed)
    model = GraphModel(graph)
    model.train()
    model.tap_names = set(block_outputs(graph) if points is None else points)
    x, y = data.tensors()
    loss = F.cross_entropy(model(batched(graph, x)), y) * loss_scale
    loss.backward()  # type: ignore[no-untyped-call]
    deltas = {}
    for name, act in model.taps.items():
        grad = act.grad if act.grad is not None else torch.zeros_like(act)
        # summed over the positions of each channel: NCHW's H and W, or the tokens of a
        # transformer's (N, T, D), whose channels are its last axis
        axes = (1,) if act.dim() == TOKEN_RANK else tuple(range(2, act.dim()))
        g = (act * grad).sum(dim=axes) if axes else act * grad
        deltas[name] = (0.5 * (g ** 2).mean(dim=0)).detach().numpy().astype(np.float64)
    return deltas


def potential(deltas: dict[str, np.ndarray]) -> float:
    return float(sum(np.abs(d).sum() for d in deltas.values()))


def measured_layers(graph: Graph) -> list[str]:
    return [n for n, layer in graph.layers.items() if isinstance(layer.op, (Conv, Dense))]
