"""Where else the digits-CNN NAS could find issue 26's 3x: networks one structural step
from the search's pick that the search space lacks, priced as the search prices them and
retrained as it retrains them (what-ifs: none of these steps is a transformation of
glensidec/nas/transforms.py yet).

3x needs the pick's 1,890 predicted cycles down to 4,528 / 3 = 1,509 at a mean accuracy
within a point of the original's. Each network below is the pick
(bench/results/nas_candidates.json, the search by cycles) changed by one step:

- kernel 1x1 (c3, c2): the 3x3 conv as 1x1 with its padding dropped (same output shape;
  the centre taps inherited: exact when the outer taps are zero), the kernel size that
  MnasNet-style searches choose per layer;
- stride moved to c1: c2's stride 2 taken by c1 instead (earlier downsampling; every shape
  from c2 on unchanged, no weight new);
- drop c3: the last conv removed, its pool reading c2's result (the classifier's input
  features halve: its weights drawn afresh, He-normal, seed 0);
- drop c1: the first conv removed, c2 reading the image (its weights over the image's one
  channel drawn afresh);
- global max / mean pool: c3's 2x2 max-pool widened to the whole 4x4 map (the classifier
  reads 32 features, not 128; its weights the sums of each channel's four positions, exact
  for either pool where a channel's four positions agree).

Every network is priced by `network_cost` (the quantized program compiled as `glensidec
compile --stats` predicts it: the search's cost) and retrained as the search retrains a
candidate (5 epochs from its inherited weights, search.RETRAIN_RATE, seeds 0 and 1; one
torch thread). The pick itself is retrained here too (it must give its record's accuracy);
the original's cycles and accuracy are its record's. A second accuracy tells the step's
inheritance from the network's capacity: every network (the original too) trained from
fresh weights (He-normal, `search.randomised`) as examples/make_digits_cnn.py trained the
original (15 epochs at 1e-2), seeds 0 and 1.

    python bench/bench_nas_routes.py   -> bench/results/nas_routes.md
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_nas

from glensidec.nas import search as S
from glensidec.nas import transforms as T
from glensidec.nas.cost import network_cost, params_and_macs
from glensidec.nas.graph import Conv, GlobalPool, Graph, Pool, Reshape, shapes
from glensidec.nas.torch_model import accuracy, train
from glensidec.opt.extract import parse_array_size

RESULTS = Path(__file__).resolve().parent / "results"
FRESH = T.Init(False, 0)  # weights no old weight gives


def kernel_1x1(name: str) -> Callable[[Graph], Graph]:
    def step(graph: Graph) -> Graph:
        op = graph.layers[name].op
        assert isinstance(op, Conv) and op.pads == (1, 1, 1, 1)
        edit = T.Edit(graph)
        edit.set(name, replace(op, pads=(0, 0, 0, 0)))
        edit.weights[op.weight] = np.ascontiguousarray(graph.weights[op.weight][:, :, 1:2, 1:2])
        return edit.done()
    return step


def stride_to_c1(graph: Graph) -> Graph:
    edit = T.Edit(graph)
    for name, stride in (("c1", (2, 2)), ("c2", (1, 1))):
        op = graph.layers[name].op
        assert isinstance(op, Conv)
        edit.set(name, replace(op, stride=stride))
    return edit.done()


def drop_c3(graph: Graph) -> Graph:
    channels = shapes(graph)["c2.relu"][1]
    edit = T.Edit(graph)
    for name in ("c3", "c3.bias", "c3.relu"):
        del edit.layers[name]
    edit.set("c3.maxpool", graph.layers["c3.maxpool"].op, ("c2.relu",))
    edit.set("flat", Reshape((1, channels * 4)))
    edit.weights["fc_w"] = FRESH.he((10, channels * 4), channels * 4, "fc_w")
    return edit.done()


def drop_c1(graph: Graph) -> Graph:
    edit = T.Edit(graph)
    for name in ("c1", "c1.bias", "c1.relu"):
        del edit.layers[name]
    edit.lets.pop("c1.relu", None)
    edit.set("c2", graph.layers["c2"].op, ("image",))
    units = graph.weights["c2_w"].shape[0]
    edit.weights["c2_w"] = FRESH.he((units, 1, 3, 3), 9, "c2_w")
    return edit.done()


def global_pool(mean: bool) -> Callable[[Graph], Graph]:
    def step(graph: Graph) -> Graph:
        channels = shapes(graph)["c3.maxpool"][1]
        edit = T.Edit(graph)
        edit.set("c3.maxpool", GlobalPool() if mean else Pool("reduce-max", (4, 4), (4, 4)))
        edit.set("flat", Reshape((1, channels)))
        fc = graph.weights["fc_w"].reshape(10, channels, 4)
        edit.weights["fc_w"] = np.ascontiguousarray(fc.sum(axis=2))
        return edit.done()
    return step


SCRATCH_EPOCHS, SCRATCH_RATE = 15, 1e-2  # examples/make_digits_cnn.py's training

STEPS: dict[str, Callable[[Graph], Graph]] = {
    "the pick itself": lambda graph: graph,
    "kernel 1x1 on c3": kernel_1x1("c3"),
    "kernel 1x1 on c2": kernel_1x1("c2"),
    "stride moved from c2 to c1": stride_to_c1,
    "drop c3": drop_c3,
    "drop c1": drop_c1,
    "global max pool before the classifier": global_pool(mean=False),
    "global mean pool before the classifier": global_pool(mean=True),
}


def percent(accuracies: list[float]) -> str:
    seeds = ", ".join(f"{100 * a:.1f}" for a in accuracies)
    return f"{100 * np.mean(accuracies):.1f} % ({seeds})"


def main() -> int:
    S.torch_threads()
    saved = json.loads((RESULTS / "nas_candidates.json").read_text())
    original, chosen = saved["picks"][0], saved["picks"][1]
    graph = bench_nas.original_graph()
    space = S.search_space(graph, bench_nas.KINDS)
    pick = S.apply(graph, space.layers, bench_nas.candidate_of(chosen["choices"],
                                                               space.layers), T.INHERIT)
    train_data, val = bench_nas.load("digits_train.npz"), bench_nas.load("digits_val.npz")
    config = parse_array_size(bench_nas.ARRAY)
    floor = float(np.mean(original["accuracies"])) - 0.01
    started = time.time()
    def scratch(network: Graph) -> list[float]:
        return [accuracy(train(S.randomised(network, seed), train_data, SCRATCH_EPOCHS, seed,
                               learning_rate=SCRATCH_RATE), val) for seed in bench_nas.SEEDS]

    original_scratch = scratch(graph)
    scratch_floor = float(np.mean(original_scratch)) - 0.01
    rows = []
    for label, step in STEPS.items():
        network = step(pick)
        cycles = network_cost(network, config).total
        params = sum(p for p, _ in params_and_macs(network).values())
        accuracies = [accuracy(train(network, train_data, bench_nas.EPOCHS, seed,
                                     learning_rate=S.RETRAIN_RATE), val)
                      for seed in bench_nas.SEEDS]
        mean = float(np.mean(accuracies))
        fresh = scratch(network)
        rows.append((label, cycles, params, accuracies, mean, fresh))
        print(f"{label}: {cycles} cycles, {mean:.4f}, from scratch {np.mean(fresh):.4f}",
              flush=True)
    choices = ", ".join(f"{k} {v}" for k, v in chosen["choices"].items() if v != "keep")
    lines = ["# Beyond the search space: one step from the digits-CNN pick (issue 26's 3x)", "",
             "\n\n".join((__doc__ or "").split("\n\n")[:4]), "",
             f"Made by `python bench/bench_nas_routes.py` in {time.time() - started:.0f} s "
             f"(load average {os.getloadavg()[0]:.1f} at the end). "
             f"The pick: {choices}. The original (its record): {original['cycles']} cycles, "
             f"{100 * np.mean(original['accuracies']):.1f} %; legal (within a point) from "
             f"{100 * floor:.1f} %; 3x needs <= {original['cycles'] // 3} cycles. Trained from "
             f"scratch the original is {percent(original_scratch)}: within a point from "
             f"{100 * scratch_floor:.1f} %.", "",
             "| network | predicted cycles | x fewer than the original | params | retrained "
             "(seeds 0, 1) | within a point | from scratch (seeds 0, 1) | within a point |",
             "|---|---:|---:|---:|---:|---|---:|---|"]
    for label, cycles, params, accuracies, mean, fresh in rows:
        lines.append(f"| {label} | {cycles} | {original['cycles'] / cycles:.2f}x | {params} | "
                     f"{percent(accuracies)} | {'yes' if mean >= floor else 'no'} | "
                     f"{percent(fresh)} | {'yes' if np.mean(fresh) >= scratch_floor else 'no'} |")
    reaching = [row[0] for row in rows[1:] if row[4] >= floor and 3 * row[1] <= original["cycles"]]
    lines += ["", "Retrained within a point and >= 3x: " + (", ".join(reaching) or
                                                          "none of these steps") + "."]
    (RESULTS / "nas_routes.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[-(len(rows) + 4):]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
