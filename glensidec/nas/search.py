"""`glensidec nas`: search a network's transformations for the fewest predicted cycles.

A candidate chooses one transformation (or none) per conv and dense layer of the original,
and per attention and residual block of a transformer.
Every candidate is evaluated independently (transform, cost, legality score) as a Dask task:
on a local cluster by default, on an existing one with `--scheduler ADDRESS`. The search is
exhaustive when the space fits the budget, aging evolution (Real et al. 2019) otherwise, or
random sampling (`--strategy random`, the baseline). Legality scores every network, the
original included, from one common starting point (fresh seeded weights, the same warm-up),
so that a threshold relative to the original is fair. Legal candidates are compared within a
cost band (BlockSwap compares within a parameter band): the best-scored of a band is a
finalist. Finalists are retrained cheapest first until one is within a point of the
original's accuracy (`choose`); the cheapest such (the original if none) is kept, compiled
in full, and its prediction checked against the estimate.
Needs the `nas` extra.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.syntax import format_program, parse_program
from glensidec.nas import transforms as T
from glensidec.nas.coupling import CoupledSet, coupled_sets, is_depthwise
from glensidec.nas.graph import (
    Array,
    Attention,
    Binary,
    ChannelOp,
    Conv,
    Dense,
    Graph,
    Pool,
    TokenDense,
    WeightOp,
    lift,
    lower,
)
from glensidec.nas.transformer import projections, residual_branch

LEGALITY = ("fisher-init", "fisher-warm", "loss-warm", "train")
# The transformer's options are offered only where a transformer has them (attention, its
# residual blocks, its token projections): a CNN's space is what it was.
TRANSFORMER_SPACE = ("heads", "head-dim", "low-rank", "drop")
SPACE = ("group", "bottleneck", "depthwise", "bottleneck-block", "spatial-split", "stride",
         *TRANSFORMER_SPACE)
# stride first: the others keep a conv's stride (depthwise, bottleneck-block, spatial-split
# build their convs from it), and it needs the conv still followed by its pool. heads and
# head-dim before group: they cut an attention's q, k and v projections, which a grouped
# projection (slices, products, a concatenation) no longer is.
ORDER = ("stride", "bottleneck", "heads", "head-dim", "group", "bottleneck-block", "depthwise",
         "spatial-split", "low-rank", "drop")
FISHER_BATCH = 128
# Retraining starts from inherited weights: a fine-tuning rate, not a from-scratch one.
RETRAIN_RATE = 2e-3
# The legality warm-up starts every network from fresh weights, so it trains at the rate
# the original was trained with from scratch (examples/make_digits_cnn.py). Two epochs and
# two fresh starts averaged: after one epoch from one start, the loss of the same network
# varies by 2.5x between seeds on the digits CNN, which swamps what the proxy measures.
WARM_EPOCHS = 2
WARM_RATE = 1e-2
STARTS = 2
COSTS = ("cycles", "macs")


@dataclass(frozen=True)
class Choice:
    kind: str  # "keep" or a transformation
    number: int = 0

    def __str__(self) -> str:
        return self.kind if not self.number else f"{self.kind}:{self.number}"

    @staticmethod
    def parse(text: str) -> Choice:
        """The inverse of `str`: "keep", "depthwise", "group:4"."""
        kind, _, number = text.partition(":")
        return Choice(kind, int(number) if number else 0)


KEEP = Choice("keep")
Candidate = tuple[Choice, ...]  # one choice per searched layer, in layer order


@dataclass
class Space:
    layers: list[str]
    options: list[list[Choice]]
    # a residual add's layer → the searched layers inside its branch: dropping the block
    # makes their choices moot
    branches: dict[str, list[str]] = field(default_factory=dict)
    # the residual adds whose branch holds an attention (a transformer's attention blocks;
    # the others are its MLP blocks)
    attention_blocks: list[str] = field(default_factory=list)

    def canonical(self, candidate: Candidate) -> Candidate:
        """The candidate with the choices a dropped block makes moot set to keep: one
        network, one candidate (a search does not spend its budget on copies)."""
        moot = {inner for layer, choice in zip(self.layers, candidate, strict=True)
                if choice.kind == "drop" for inner in self.branches.get(layer, [])}
        if not moot:
            return candidate
        return tuple(KEEP if layer in moot else choice
                     for layer, choice in zip(self.layers, candidate, strict=True))

    @property
    def size(self) -> int:
        return math.prod(len(o) for o in self.options)

    def describe(self, candidate: Candidate) -> dict[str, str]:
        return {layer: str(c) for layer, c in zip(self.layers, candidate, strict=True)
                if c != KEEP}


def search_space(graph: Graph, kinds: tuple[str, ...]) -> Space:
    """The options of every conv and dense layer (those whose preconditions hold), of every
    max-pool (stride: folded into its conv), and of a transformer's attention layers and
    residual blocks."""
    coupled = coupled_sets(graph)
    layers, options = [], []
    for name, layer in graph.layers.items():
        if isinstance(layer.op, (Attention, Binary)):
            proposals = transformer_proposals(graph, layer.name, kinds)
        elif isinstance(layer.op, (Conv, Dense, TokenDense)) and not is_depthwise(graph, layer):
            proposals = product_proposals(graph, layer.name, kinds, coupled)
        elif isinstance(layer.op, Pool):
            # the pool's own gene, so that its conv keeps a choice of its own
            proposals = [Choice("stride")] if "stride" in kinds else []
        else:
            continue
        choices = [KEEP]
        for choice in proposals:
            try:
                apply(graph, [name], (choice,), T.INHERIT)
            except GlensideError:
                continue
            choices.append(choice)
        if len(choices) > 1:
            layers.append(name)
            options.append(choices)
    branches, attention_blocks = {}, []
    for name, choices in zip(layers, options, strict=True):
        if Choice("drop") in choices:
            _, inside = residual_branch(graph, name, name)
            branches[name] = [layer for layer in layers if layer in inside]
            if any(isinstance(graph.layers[n].op, Attention) for n in inside):
                attention_blocks.append(name)
    return Space(layers, options, branches, attention_blocks)


def transformer_proposals(graph: Graph, name: str, kinds: tuple[str, ...]) -> list[Choice]:
    """An attention: half its heads, half its head dimension. A residual add whose branch
    holds an attention or a token projection (a transformer's block): dropping it."""
    layer = graph.layers[name]
    if isinstance(layer.op, Attention):
        proposals = []
        if "heads" in kinds and layer.op.heads > 1:
            proposals.append(Choice("heads", layer.op.heads // 2))
        if "head-dim" in kinds:
            proposals.append(Choice("head-dim", 2))
        return proposals
    if "drop" not in kinds:
        return []
    try:
        _, inside = residual_branch(graph, name, name)
    except GlensideError:
        return []
    block = any(isinstance(graph.layers[n].op, (Attention, TokenDense)) for n in inside)
    return [Choice("drop")] if block else []


def attention_projections(graph: Graph) -> set[str]:
    """The q, k and v projections of every attention (heads and head-dim shrink those)."""
    found: set[str] = set()
    for name, layer in graph.layers.items():
        if isinstance(layer.op, Attention):
            try:
                parts = projections(graph, name, name)
            except GlensideError:
                continue
            found |= {parts.q, parts.k, parts.v}
    return found


def product_proposals(graph: Graph, name: str, kinds: tuple[str, ...],
                      coupled: dict[str, CoupledSet]) -> list[Choice]:
    """A conv's or dense layer's options; for a transformer's token projections group (q,
    k, v, out-projection and MLP: grouped projections) and low-rank (out-projections and MLP
    layers: its q, k and v shrink by heads and head-dim)."""
    layer = graph.layers[name]
    proposals: list[Choice] = []
    if "group" in kinds:
        # a token projection's 32 or 64 features in 8 groups of 4 or 8 is not a projection
        sizes = (2, 4) if isinstance(layer.op, TokenDense) else (2, 4, 8)
        proposals += [Choice("group", g) for g in sizes]
    if "bottleneck" in kinds and coupled[name].producers[:1] == (name,):
        proposals += [Choice("bottleneck", b) for b in (2, 4)]
    if isinstance(layer.op, Conv) and layer.op.groups == 1:
        kernel = graph.weights[layer.op.weight].shape[2:]
        if "depthwise" in kinds and tuple(kernel) != (1, 1):
            proposals.append(Choice("depthwise"))
        if "bottleneck-block" in kinds:
            proposals += [Choice("bottleneck-block", b) for b in (2, 4)]
        if "spatial-split" in kinds:
            proposals.append(Choice("spatial-split", 2))
    if "low-rank" in kinds and isinstance(layer.op, TokenDense) and \
            name not in attention_projections(graph):
        units, features = graph.weights[layer.op.weight].shape
        proposals.append(Choice("low-rank", int(min(units, features)) // 4))
    return proposals


def apply(graph: Graph, layers: list[str], candidate: Candidate, init: T.Init) -> Graph:
    """The candidate's transformations, in the fixed order of `ORDER`."""
    for kind in ORDER:
        for layer, choice in zip(layers, candidate, strict=True):
            if choice.kind == kind:
                numbers = (choice.number,) if choice.number else ()  # depthwise, stride, drop
                graph = T.TRANSFORMS[kind](graph, layer, *numbers, init=init)
    return graph


# -- evaluating one candidate (a Dask task) ----------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What every evaluation needs; shipped to the workers once per search."""

    program_text: str
    weights: dict[str, Array]
    layers: list[str]
    config: ArrayConfig
    legality: str
    train_x: Array
    train_y: Array
    val_x: Array
    val_y: Array
    seed: int
    train_epochs: int
    name: str = "<program>"  # the model's file: what an error in the program names
    dram_bandwidth: int = 16  # the accelerator's DRAM bytes a cycle
    train_seeds: int = 1  # retraining (and `train` legality) averages seeds seed, seed+1, …


_GRAPHS: dict[str, Graph] = {}


def original(setup: Setup) -> Graph:
    """The original graph, lifted once per worker (terms are rebuilt, never unpickled)."""
    key = hashlib.sha256(setup.program_text.encode()).hexdigest()
    if key not in _GRAPHS:
        program = parse_program(setup.program_text, setup.name)
        _GRAPHS[key] = lift(program, setup.weights)
    return _GRAPHS[key]


def randomised(graph: Graph, seed: int) -> Graph:
    """Every weight drawn afresh (He-normal; biases and scales zero / one)."""
    init = T.Init(False, seed)
    weights = {}
    for layer in graph.layers.values():
        op = layer.op
        if isinstance(op, (Conv, Dense, TokenDense)):
            old = graph.weights[op.weight]
            weights[op.weight] = init.he(old.shape, int(np.prod(old.shape[1:])), op.weight)
        elif isinstance(op, ChannelOp):
            fill = 0.0 if op.compute == "elementwise-add" else 1.0
            weights[op.weight] = np.full_like(graph.weights[op.weight], fill)
        elif isinstance(op, WeightOp):  # a position embedding: small, as ViTs start it
            shape = graph.weights[op.weight].shape
            weights[op.weight] = np.asarray(0.02 * init.rng(op.weight).standard_normal(shape),
                                            dtype=np.float32)
    return graph.with_layers(graph.layers, weights)


def legality_score(graph: Graph, setup: Setup,
                   points: list[str]) -> tuple[float, dict[str, float] | None]:
    """Higher is more capable: Fisher Potential (and its value per measured point),
    1/loss or accuracy (docs/nas.md says how well each ranks the networks)."""
    from glensidec.nas.torch_model import Data

    torch_threads()
    if setup.legality == "train":
        return float(np.mean(retrained(graph, setup)[0])), None
    return proxy(setup.legality, graph, Data(setup.train_x, setup.train_y), setup.seed, points)


def retrained(graph: Graph, setup: Setup) -> tuple[list[float], dict[str, Array]]:
    """Validation accuracies after retraining from the graph's weights with each of
    `setup.train_seeds` seeds from `setup.seed` (one seed's accuracy moves by a point on the
    digits ViT: the final rule's one-point margin needs their mean), and the weights the
    first seed trained."""
    from glensidec.nas.torch_model import Data, accuracy, train

    train_data, val = Data(setup.train_x, setup.train_y), Data(setup.val_x, setup.val_y)
    found = []
    for seed in range(setup.seed, setup.seed + setup.train_seeds):
        trained = train(graph, train_data, setup.train_epochs, seed, learning_rate=RETRAIN_RATE)
        found.append((accuracy(trained, val), trained.weights))
    return [a for a, _ in found], found[0][1]


def starts(graph: Graph, seed: int) -> list[Graph]:
    """The common starting points: `STARTS` fresh draws of the weights (seeds from `seed`).

    Every network, the original included, is scored from these, never from the weights it
    inherited: from inherited weights, after a warm-up epoch the trained original's loss is
    ~100x smaller than any candidate's whose weights were just cut, and no relative
    threshold separates good candidates from bad ones. Weights are seeded per layer name,
    so the layers a candidate keeps start as the original's do."""
    return [randomised(graph, s) for s in range(seed, seed + STARTS)]


def warmed(fresh: Graph, data: Any, seed: int) -> Graph:
    """The legality warm-up of freshly initialised weights."""
    from glensidec.nas.torch_model import train

    return train(fresh, data, WARM_EPOCHS, seed, learning_rate=WARM_RATE)


def proxy(name: str, graph: Graph, data: Any, seed: int, points: list[str],
          warm: list[Graph] | None = None) -> tuple[float, dict[str, float] | None]:
    """fisher-init, fisher-warm or loss-warm from the common starting points, averaged
    (`warm`: the warmed starts, when the caller has them already)."""
    from glensidec.nas import fisher
    from glensidec.nas.torch_model import Data, mean_loss

    fresh = starts(graph, seed)
    if name != "fisher-init":
        fresh = warm or [warmed(g, data, seed + i) for i, g in enumerate(fresh)]
    if name == "loss-warm":
        return 1.0 / max(float(np.mean([mean_loss(g, data) for g in fresh])), 1e-12), None
    batch = Data(data.x[:FISHER_BATCH], data.y[:FISHER_BATCH])
    measured = [fisher.per_channel(g, batch, points, seed=seed + i)
                for i, g in enumerate(fresh)]
    per_point = {p: float(np.mean([np.abs(d[p]).sum() for d in measured]))
                 for p in measured[0]}
    return float(np.mean([fisher.potential(d) for d in measured])), per_point


def torch_threads() -> None:
    import torch

    torch.set_num_threads(1)  # one thread per worker: reproducible, and workers share cores


def evaluate(setup: Setup, candidate: Candidate) -> dict[str, Any]:
    """Transform, cost and score one candidate; an illegal transformation is recorded."""
    record = price(setup, candidate)
    return record if not record["valid"] else {**record, **score(setup, candidate)}


def price(setup: Setup, candidate: Candidate) -> dict[str, Any]:
    """Transform and cost one candidate, without judging it: its choices, validity (or the
    error), parameters, MACs and predicted cycles. A few seconds of compiling, where the
    legality score (`score`) trains networks."""
    from glensidec.nas.cost import network_cost, params_and_macs

    record: dict[str, Any] = {"choices": {layer: str(c) for layer, c in
                                          zip(setup.layers, candidate, strict=True)}}
    try:
        transformed = apply(original(setup), setup.layers, candidate, T.INHERIT)
    except GlensideError as error:
        return {**record, "valid": False, "error": error.message}
    cost = network_cost(transformed, setup.config, setup.dram_bandwidth)
    counted = params_and_macs(transformed)
    record.update(valid=True, params=sum(p for p, _ in counted.values()),
                  macs=sum(m for _, m in counted.values()),
                  accelerator_cycles=cost.accelerator, array_cycles=cost.array,
                  host_cycles=cost.host, cycles=cost.total)
    return record


def score(setup: Setup, candidate: Candidate) -> dict[str, Any]:
    """The legality score of a valid candidate (with `train`, each seed's accuracy too; with
    Fisher Potential, its value per measured point)."""
    from glensidec.nas import fisher

    graph = original(setup)
    transformed = apply(graph, setup.layers, candidate, T.INHERIT)
    record: dict[str, Any] = {}
    if setup.legality == "train":  # the accuracy of each seed is kept with their mean
        torch_threads()
        record["accuracies"] = retrained(transformed, setup)[0]
        value, per_point = float(np.mean(record["accuracies"])), None
    else:
        value, per_point = legality_score(transformed, setup, fisher.block_outputs(graph))
    record["score"] = value
    if per_point is not None:
        record["fisher"] = per_point
    return record


def retrain(setup: Setup, candidate: Candidate) -> tuple[float, dict[str, Array]]:
    """The candidate retrained from inherited weights (`retrained`): the mean accuracy and
    the first seed's weights."""
    torch_threads()
    accuracies, weights = retrained(apply(original(setup), setup.layers, candidate, T.INHERIT),
                                    setup)
    return float(np.mean(accuracies)), weights


def first_seed_weights(setup: Setup, candidate: Candidate) -> dict[str, Array]:
    """The weights `retrained` keeps: the candidate retrained with the first seed."""
    from glensidec.nas.torch_model import Data, train

    torch_threads()
    graph = apply(original(setup), setup.layers, candidate, T.INHERIT)
    return train(graph, Data(setup.train_x, setup.train_y), setup.train_epochs, setup.seed,
                 learning_rate=RETRAIN_RATE).weights


# -- the search ------------------------------------------------------------------------------


@dataclass
class Options:
    budget: int = 64
    space: tuple[str, ...] = SPACE
    legality: str = "loss-warm"
    threshold: float = 0.9
    train_epochs: int = 8
    top: int = 3  # finalists retrained at once (in parallel on the workers)
    seed: int = 0
    strategy: str = "auto"  # auto (exhaustive if it fits, else evolution), random
    population: int = 16
    sample: int = 4
    cost: str = "cycles"  # what the search minimises: predicted cycles, or MACs (a baseline)
    band: float = 0.025  # legal candidates compete within +-band of each other's cost
    dram_bandwidth: int = 16  # the accelerator's, for predicted cycles
    # candidates the evolution's first population starts with, before the uniform ones
    # (the co-design starts from a network search's retrained picks: nas/hardware.py)
    start: tuple[Candidate, ...] = ()
    # seeds every retraining averages (and `train` legality): seed, seed + 1, ...
    train_seeds: int = 1
    # candidates the descent after the strategy may judge (`descend`); 0: no descent
    descent: int = 0
    # finalists retrained at most in all, cheapest first, until one keeps the accuracy
    retrain: int = 12


@dataclass
class Result:
    space: Space
    strategy: str
    original: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, Any] | None = None
    chosen_graph: Graph | None = None
    # the original and the finalists `choose` retrained, in order, and the accuracy a
    # finalist had to reach (the original's less one point)
    retrained: list[dict[str, Any]] = field(default_factory=list)
    retrain_floor: float = 0.0


Mapper = Callable[[Callable[..., Any], list[Any]], list[Any]]


def candidates_for(space: Space, options: Options, evaluate_batch: Callable[
        [list[Candidate]], list[dict[str, Any]]]) -> tuple[str, list[Candidate]]:
    """Run the strategy; returns its name and every candidate evaluated, in order."""
    rng = random.Random(options.seed)
    if options.strategy == "auto" and space.size <= options.budget:
        everything = list(dict.fromkeys(space.canonical(c)
                                        for c in itertools.product(*space.options)))
        evaluate_batch(everything)
        return "exhaustive", everything

    def draw() -> Candidate:
        return space.canonical(tuple(rng.choice(o) for o in space.options))

    if options.strategy == "random":
        drawn = [draw() for _ in range(options.budget)]
        evaluate_batch(drawn)
        return "random", drawn
    return "aging evolution", aging_evolution(space, options, rng, draw, evaluate_batch)


def aging_evolution(space: Space, options: Options, rng: random.Random,
                    draw: Callable[[], Candidate],
                    evaluate_batch: Callable[[list[Candidate]], list[dict[str, Any]]],
                    ) -> list[Candidate]:
    """Real et al.: a queue of `population`; a child mutates one layer of the best of
    `sample` random members; the oldest member dies. The first population is the uniform
    candidates (`uniform_candidates`) and random draws for the rest."""
    population_size = min(options.population, options.budget)
    uniform = list(dict.fromkeys([*options.start, *uniform_candidates(space)]))
    uniform = uniform[:population_size]
    seen: list[Candidate] = uniform + [draw() for _ in range(population_size - len(uniform))]
    fitness = {c: _fitness(r, options.cost)
               for c, r in zip(seen, evaluate_batch(seen), strict=True)}
    population = list(seen)
    batch = 4
    # The budget counts distinct candidates (a repeated child costs nothing: it is
    # memoised); the bound on children ends a search whose space is nearly exhausted.
    for _ in range(10 * options.budget):
        distinct = len(set(seen))
        if distinct >= options.budget:
            break
        children: list[Candidate] = []
        for _ in range(min(batch, options.budget - distinct)):
            parent = max(rng.sample(population, min(options.sample, len(population))),
                         key=lambda c: fitness[c])
            layer = rng.randrange(len(space.layers))
            mutated = list(parent)
            mutated[layer] = rng.choice(space.options[layer])
            children.append(space.canonical(tuple(mutated)))
        for child, record in zip(children, evaluate_batch(children), strict=True):
            fitness[child] = _fitness(record, options.cost)
        seen += children
        population = (population + children)[len(children):]
    return seen


DESCENT_STARTS = 3  # the lowest costs of legal candidates whose neighbours the descent prices
DESCENT_BATCH = 4  # candidates judged at once (in parallel on the workers)


def descend(space: Space, options: Options, visited: list[Candidate],
            record_of: Callable[[Candidate], dict[str, Any]],
            price_batch: Callable[[list[Candidate]], None],
            judge_batch: Callable[[list[Candidate]], None]) -> list[Candidate]:
    """After the strategy: a cheapest-first descent from its cheapest legal candidates.

    Pricing a candidate (compiling it) takes seconds and judging it (training, with `train`
    legality) several times that, and the strategy's path decides which cheap networks it
    ever judges: an evolution that settled on one legal network may never visit the legal
    neighbour that is cheaper. So every single-layer change of the legal candidates of the
    `DESCENT_STARTS` lowest costs (the best-scored of each: `distinct_costs`) is priced,
    and those cheaper than the cheapest legal one are judged, cheapest first,
    `DESCENT_BATCH` at a time; a legal one lowers the bar and its own neighbours are priced
    next. It ends when no priced neighbour is cheaper than the cheapest legal candidate or
    `options.descent` candidates were judged. `visited`: the
    strategy's candidates, the original first (legal); returns the candidates judged or
    found judged already (another search's, in a shared memo), in order."""
    seen = list(dict.fromkeys(visited))
    judged: list[Candidate] = []
    spent = 0

    def cost(candidate: Candidate) -> float:
        return float(record_of(candidate)[options.cost])

    while spent < options.descent:
        legal = sorted((c for c in seen if record_of(c).get("legal")),
                       key=lambda c: (cost(c), -record_of(c)["score"], seen.index(c)))
        bar = cost(legal[0])
        neighbours = list(dict.fromkeys(
            space.canonical((*start[:index], choice, *start[index + 1:]))
            for start in distinct_costs(legal, cost)[:DESCENT_STARTS]
            for index, choices in enumerate(space.options)
            for choice in choices if choice != start[index]))
        unseen = [c for c in neighbours if c not in seen]
        price_batch(unseen)
        cheaper = sorted((c for c in unseen if record_of(c).get("valid") and cost(c) < bar),
                         key=lambda c: (cost(c), unseen.index(c)))
        if not cheaper:
            break
        batch = cheaper[:min(DESCENT_BATCH, options.descent - spent)]
        spent += sum(1 for c in batch if "score" not in record_of(c))
        judge_batch(batch)
        seen += batch
        judged += batch
    return judged


def distinct_costs(candidates: list[Candidate],
                   cost: Callable[[Candidate], float]) -> list[Candidate]:
    """The first candidate of each cost, in order. Legal networks of one cost are mostly
    one network with a change the machine does not price (on the digits CNN, c1
    bottlenecked: its cycles are its epilogue's rows): starting the descent from them
    prices one neighbourhood three times (bench_nas's run judged 1 candidate, and missed
    the legal network one change from the third-lowest cost). The descent orders them
    best-scored first within a cost: the likeliest to keep a cheaper neighbour legal (c1
    bottlenecked or not is a point of accuracy there)."""
    found: dict[float, Candidate] = {}
    for candidate in candidates:
        found.setdefault(cost(candidate), candidate)
    return list(found.values())


def uniform_candidates(space: Space) -> list[Candidate]:
    """For each choice two or more layers offer (bottleneck:2, group:4, ...), the candidate
    making it on every layer that offers it. Whole-network transformations of one kind are
    where a single-layer mutation is slowest to get to (each layer changed one at a time,
    every step judged on its own), and they are what the literature's hand-designed
    networks do, so the evolution starts from them."""
    counts: dict[Choice, int] = {}
    for options in space.options:
        for choice in options:
            if choice != KEEP:
                counts[choice] = counts.get(choice, 0) + 1
    uniform = [space.canonical(tuple(choice if choice in options else KEEP
                                     for options in space.options))
               for choice in sorted(counts, key=str) if counts[choice] >= 2]
    # A transformer's blocks of one kind dropped together: every attention block, every
    # MLP block (dropping all of them is the uniform candidate above).
    blocks = [b for b in space.branches if b in space.attention_blocks]
    for kind in (blocks, [b for b in space.branches if b not in blocks]):
        if 2 <= len(kind) < len(space.branches):
            uniform.append(tuple(Choice("drop") if layer in kind else KEEP
                                 for layer in space.layers))
    return uniform


def _fitness(record: dict[str, Any], cost: str) -> float:
    if not record.get("valid"):
        return -math.inf
    return -float(record[cost]) - (0.0 if record.get("legal") else 1e15)


def run_search(program_text: str, weights: dict[str, Array], train_data: tuple[Array, Array],
               val_data: tuple[Array, Array], config: ArrayConfig, options: Options,
               mapper: Mapper, progress: Callable[[int], None] | None = None,
               memo: dict[Candidate, dict[str, Any]] | None = None,
               name: str = "<program>") -> Result:
    """Search; `memo` (records by candidate) lets searches over the same program, setup and
    threshold share their evaluations (the benchmark scores one search by cycles, one by
    MACs). `name`: the model's file, which errors in `program_text` name."""
    graph = lift(parse_program(program_text, name), weights)
    space = search_space(graph, options.space)
    if not space.layers:
        raise GlensideError("nothing to search: no conv or dense layer can be transformed")
    setup = Setup(program_text, weights, space.layers, config, options.legality,
                  train_data[0], train_data[1], val_data[0], val_data[1], options.seed,
                  options.train_epochs, name, options.dram_bandwidth, options.train_seeds)
    keep = tuple(KEEP for _ in space.layers)
    memo = {} if memo is None else memo
    if keep not in memo:
        memo[keep] = mapper(evaluate, [(setup, keep)])[0]
    reference = memo[keep]
    reference["legal"] = True

    def judged(record: dict[str, Any]) -> dict[str, Any]:
        record["legal"] = bool(record.get("valid")) and \
            record["score"] >= options.threshold * reference["score"]
        return record

    def evaluate_batch(batch: list[Candidate]) -> list[dict[str, Any]]:
        new = list(dict.fromkeys(c for c in batch if c not in memo))
        for candidate, record in zip(new, mapper(evaluate, [(setup, c) for c in new]),
                                     strict=True):
            memo[candidate] = judged(record)
            if progress is not None:
                progress(1)
        return [memo[c] for c in batch]

    strategy, evaluated = candidates_for(space, options, evaluate_batch)
    descended: list[Candidate] = []
    if options.descent:
        priced: dict[Candidate, dict[str, Any]] = {}

        def price_batch(batch: list[Candidate]) -> None:
            new = list(dict.fromkeys(c for c in batch if c not in memo and c not in priced))
            for candidate, record in zip(new, mapper(price, [(setup, c) for c in new]),
                                         strict=True):
                priced[candidate] = record

        def judge_batch(batch: list[Candidate]) -> None:
            new = [c for c in batch if c not in memo]
            for candidate, found in zip(new, mapper(score, [(setup, c) for c in new]),
                                        strict=True):
                memo[candidate] = judged({**priced[candidate], **found, "descent": True})
                if progress is not None:
                    progress(1)

        descended = descend(space, options, [keep, *evaluated],
                            lambda c: memo[c] if c in memo else priced[c], price_batch,
                            judge_batch)
    order = list(dict.fromkeys([keep, *evaluated, *descended]))
    # The choice marks its own copies: a shared memo stays as the evaluations left it.
    records = {c: dict(memo[c]) for c in order}
    result = Result(space, strategy, records[keep])
    result.records = [records[c] for c in order]
    choose(result, setup, order, records, options, mapper)
    return result


def choose(result: Result, setup: Setup, order: list[Candidate],
           memo: dict[Candidate, dict[str, Any]], options: Options, mapper: Mapper,
           network: Callable[[Candidate], Candidate] = lambda candidate: candidate) -> None:
    """Retrain the original, then the finalists cheapest first until one keeps the accuracy
    (within one point of the original's), `top` at a time and at most `retrain` in all; keep
    the cheapest that does (the original if none: a search never chooses a network costlier
    than the original). Finalists are the legal candidates cheaper than the best kept so far
    that are the best-scored of their cost band among those not yet failed: a failed
    finalist is no rival, so the next of its band is a finalist in turn. Stopping at the
    first `top` (the old rule) made a larger budget end worse than a smaller one: its
    extra candidates took the cheap places and all failed (the digits CNN at budget 64 kept
    the original where budget 8 found 1.7x fewer cycles). With `train` legality the scores
    are those retrained accuracies already; only the chosen network is trained again, once,
    for its weights. `result.retrained` lists the retrained records in order. `network`:
    the candidate's network, retrained once whatever else the candidate chooses (the
    co-design's pairs: one network on several machines); `retrain` counts networks."""
    keep = order[0]
    legal = [c for c in order[1:] if memo[c].get("legal")]
    winners = band_winners([memo[c] for c in legal], options.cost, options.band)
    for candidate in legal:
        memo[candidate]["band_best"] = id(memo[candidate]) in winners
    # by network: its accuracy and the weights its retraining's first seed made
    accuracy_of: dict[Candidate, float] = {}
    weights_of: dict[Candidate, dict[str, Array]] = {}
    measured: set[Candidate] = set()

    def measure(batch: list[Candidate]) -> int:
        """Accuracies for the batch; returns how many networks were retrained for them."""
        fresh = list(dict.fromkeys(network(c) for c in batch
                                   if network(c) not in accuracy_of))
        if setup.legality == "train":
            # `train` legality judged every candidate by this very retraining (the same
            # epochs, rate and seeds, deterministic): the accuracies are the scores
            for candidate in batch:
                accuracy_of.setdefault(network(candidate), memo[candidate]["score"])
        elif fresh:
            for key, (acc, weights) in zip(fresh, mapper(retrain, [(setup, key) for key in
                                                                   fresh]), strict=True):
                accuracy_of[key], weights_of[key] = acc, weights
        for candidate in batch:
            memo[candidate]["accuracy"] = accuracy_of[network(candidate)]
        result.retrained += [memo[c] for c in batch]
        measured.update(batch)
        return len(fresh)

    def cost(candidate: Candidate) -> float:
        return float(memo[candidate][options.cost])

    measure([keep])
    floor = memo[keep]["accuracy"] - 0.01
    best, failed, tried = keep, set[Candidate](), 0
    while tried < options.retrain:
        remaining = [c for c in legal if c not in failed]
        standing = band_winners([memo[c] for c in remaining], options.cost, options.band)
        batch = sorted((c for c in remaining if id(memo[c]) in standing
                        and c not in measured and cost(c) < cost(best)),
                       key=lambda c: (cost(c), order.index(c)))
        batch = batch[:min(options.top, options.retrain - tried)]
        if not batch:
            break
        tried += measure(batch)
        for candidate in batch:  # cheapest first: of equal costs the earlier is kept
            if memo[candidate]["accuracy"] < floor:
                failed.add(candidate)
            elif cost(candidate) < cost(best):
                best = candidate
    result.retrain_floor = floor
    memo[best]["chosen"] = True
    result.chosen = memo[best]
    if network(best) not in weights_of:
        weights_of[network(best)] = mapper(first_seed_weights, [(setup, best)])[0]
    graph = apply(original(setup), setup.layers, best, T.INHERIT)
    result.chosen_graph = graph.with_layers(graph.layers, weights_of[network(best)])


def band_winners(records: list[dict[str, Any]], cost: str, band: float) -> set[int]:
    """The records (by `id`) that no other record within +-`band` of their cost outscores:
    BlockSwap compares Fisher Potential only between networks of similar size, because a
    capacity proxy is not comparable across sizes. Of equal scores the cheaper record wins
    (the co-design's same network on a faster machine: the score is the network's), then
    the earlier."""
    winners = set()
    for index, record in enumerate(records):
        low, high = (1 - band) * record[cost], (1 + band) * record[cost]
        beaten = any(low <= rival[cost] <= high and
                     (rival["score"], -rival[cost], -other) >
                     (record["score"], -record[cost], -index)
                     for other, rival in enumerate(records) if other != index)
        if not beaten:
            winners.add(id(record))
    return winners


# -- outputs ---------------------------------------------------------------------------------


def candidates_json(result: Result) -> bytes:
    document = {"layers": result.space.layers, "strategy": result.strategy,
                "space_size": result.space.size, "candidates": result.records}
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def pareto_png(result: Result) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4), dpi=100)
    valid = [r for r in result.records if r.get("valid")]
    base = result.original["score"] or 1.0
    for legal, colour in ((False, "lightgrey"), (True, "tab:blue")):
        points = [r for r in valid if bool(r.get("legal")) == legal]
        axis.scatter([r["cycles"] for r in points], [r["score"] / base for r in points],
                     s=12, c=colour, label="legal" if legal else "not legal")
    marks = [(result.original, "*", "black", "original"),
             *((record, "s", colour, label) for (label, record), colour in
               zip(baselines(result), ("tab:orange", "tab:green"), strict=False)),
             (result.chosen, "D", "tab:red", "chosen")]
    for record, marker, colour, label in marks:
        if record is not None:
            axis.scatter([record["cycles"]], [record["score"] / base], s=70, marker=marker,
                         c=colour, label=label)
    axis.set_xlabel("predicted cycles (accelerator layers + array calls + host)")
    axis.set_ylabel("legality score / original's")
    axis.legend(fontsize=8)
    return png_bytes(figure)


def png_bytes(figure: Any) -> bytes:
    """The figure as PNG bytes, closed; no 'Software' tag, so the bytes do not change with
    matplotlib's version."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()


def baselines(result: Result) -> list[tuple[str, dict[str, Any]]]:
    """The picks a search should beat: the FLOP-minimal and a random legal candidate."""
    legal = [r for r in result.records[1:] if r.get("legal")]
    if not legal:
        return []
    flop_minimal = min(legal, key=lambda r: (r["macs"], r["cycles"]))
    return [("FLOP-minimal legal", flop_minimal),
            ("random legal", random.Random(0).choice(legal))]


def report_md(result: Result, options: Options, config_text: str, compiled: int) -> bytes:
    original, chosen = result.original, result.chosen
    assert chosen is not None
    lines = [
        "# glensidec nas report", "",
        f"- space: {result.space.size} candidates over layers {', '.join(result.space.layers)}"
        f"; strategy {result.strategy}; budget {options.budget}; seed {options.seed}",
        f"- retraining: {options.train_epochs} epochs from inherited weights, accuracy the "
        f"mean of {options.train_seeds} seed(s) from {options.seed}",
        f"- legality: {options.legality} from a common fresh start, legal when score >= "
        f"{options.threshold} x the original's; cost band +-{100 * options.band:g} %; "
        f"minimised: {options.cost}; array {config_text}",
        f"- evaluated: {len(result.records)} ("
        f"{sum(1 for r in result.records if r.get('descent'))} by the descent of up to "
        f"{options.descent}), legal: "
        f"{sum(1 for r in result.records if r.get('legal'))}, best of their cost band: "
        f"{sum(1 for r in result.records if r.get('band_best'))}", "",
        "| network | choices | params | MACs | predicted cycles | accelerator layers | "
        "array calls | host | score | accuracy |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, record in (("original", original), *baselines(result), ("chosen", chosen)):
        accuracy = record.get("accuracy")
        lines.append(f"| {label} | {describe_choices(record)} | {record['params']} | "
                     f"{record['macs']} | "
                     f"{record['cycles']} | {record['accelerator_cycles']} | "
                     f"{record['array_cycles']} | "
                     f"{record['host_cycles']} | {record['score']:.4g} | "
                     f"{'-' if accuracy is None else f'{100 * accuracy:.1f} %'} |")
    speedup = original["cycles"] / max(chosen["cycles"], 1)
    lines += ["", f"The chosen network needs {speedup:.2f}x fewer predicted cycles; compiled "
              f"in full with its retrained weights, its prediction is {compiled} cycles "
              f"(estimated {chosen['cycles']} with the inherited weights it was searched "
              "with).", "", *retrained_md(result, options)]
    return "\n".join(lines).encode()


def describe_choices(record: dict[str, Any]) -> str:
    """A record's transformations, `c1 bottleneck:2, c2 bottleneck:2`; `-` for none."""
    return ", ".join(f"{k} {v}" for k, v in record["choices"].items() if v != "keep") or "-"


def retrained_md(result: Result, options: Options | None = None) -> list[str]:
    """The original and every finalist `choose` retrained, in order, each against the
    original's accuracy: what failed, and by how much."""
    budget = "" if options is None else (f", {options.top} at a time, at most "
                                         f"{options.retrain}")
    lines = [f"Retrained (the original, then the finalists cheapest first{budget}, until one "
             f"is within a point of the original: at least {100 * result.retrain_floor:.1f} "
             "%):", "",
             "| network | choices | predicted cycles | score | accuracy | points vs the "
             "original | |", "|---|---|---:|---:|---:|---:|---|"]
    base = result.original.get("accuracy", 0.0)
    for index, record in enumerate(result.retrained):
        accuracy = record["accuracy"]
        if index == 0:
            label, delta, verdict = "original", "-", "kept" + (
                ": chosen" if record.get("chosen") else "")
        else:
            label, delta = f"finalist {index}", f"{100 * (accuracy - base):+.1f}"
            verdict = ("failed" if accuracy < result.retrain_floor else
                       "kept: chosen" if record.get("chosen") else "kept")
        lines.append(f"| {label} | {describe_choices(record)} | {record['cycles']} | "
                     f"{record['score']:.4g} | {100 * accuracy:.1f} % | {delta} | {verdict} |")
    return [*lines, ""]


def chosen_files(result: Result) -> dict[str, bytes]:
    assert result.chosen_graph is not None
    program = lower(result.chosen_graph, "chosen.npz", "chosen.gs")
    buffer = io.BytesIO()
    np.savez(buffer, **result.chosen_graph.weights)  # type: ignore[arg-type]
    return {"chosen.gs": format_program(program).encode(), "chosen.npz": buffer.getvalue()}
