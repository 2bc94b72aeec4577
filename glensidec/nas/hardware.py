"""`glensidec nas --hardware`: search the accelerator with the network (co-design).

A candidate is a network candidate of `search.py` (one choice per conv and dense layer)
followed by eight *machine genes*: the array's rows and columns, the scratchpad, the
accumulator rows, the DRAM bus bytes a cycle, the cycles a row takes through the
epilogue (its lanes: columns / cycles), the scratchpad rows a DMA write carries
(ws_dma_load's groups: 1 is today's) and the weight rows a cycle into the array (1 is
today's). A gene's KEEP is the reference machine's
value (`--array`, compile's default memories, `--dram-bandwidth`), so the original network
on the reference machine is the all-KEEP candidate, and the search's own machinery —
aging evolution, cost bands, retraining the finalists, keeping the cheapest within a point
of the original's accuracy — runs on the joint space unchanged (`search.apply` transforms
only the network; the machine genes are not transformations).

Each pair is costed twice:
- **cycles**, exactly as `glensidec compile --stats` predicts them on that machine: the
  network's int8 program is rewritten and extracted for the array's rows × columns once
  (memoised per network and array shape; the extraction is all that depends on the shape),
  then lowered with the accelerator passes and priced per memory configuration (memoised
  per network and machine) by `pipeline.lowered_machine_cycles`;
- **area**, by the model fitted to Yosys's cell counts (`glensidec.hardware.area`).

A pair is legal when its network is (the legality proxy, memoised per network: it does
not depend on the machine) and its area is within `--area-budget`. The result is the
Pareto front of cycles × area over the legal networks, each front network retrained for
its accuracy (`pareto.png`), and the chosen pair: the cheapest in cycles within the budget
whose retrained accuracy is within a point of the original's.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import math
import os
import pickle
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.hardware.area import AreaModel, Machine, fitted, measured, size_text
from glensidec.lang.syntax import parse_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import TypeTable
from glensidec.nas import search as S
from glensidec.nas import transforms as T
from glensidec.nas.cost import Cost, network_key, on_egglog_thread, quantized
from glensidec.nas.graph import Array, Graph, lift

GENES = ("rows", "cols", "scratchpad", "accumulator", "bus", "epilogue", "write", "load")
# The names the genes take among the layers (a layer name never holds a space).
GENE_NAMES = tuple(f"machine {gene}" for gene in GENES)
DEFAULT_SPACE: dict[str, tuple[int, ...]] = {
    "rows": (4, 8, 16, 32),
    "cols": (8, 16, 32, 64),
    "scratchpad": (16 * 1024, 64 * 1024, 256 * 1024),
    "accumulator": (256, 1024),  # rows of COLS int32
    "bus": (8, 16, 32, 64),
    # cycles a row takes through the epilogue's lanes (cols / lanes): 4 is today's (a
    # quarter of the columns requantized a cycle), 1 a lane per column. At batch 1 a
    # layer's output rows queue for the lanes (c1 of the digits CNN: 64 rows at 4 cycles)
    "epilogue": (1, 2, 4),
    # scratchpad rows a DMA write carries (1 is today's): rows end to end in memory (weight
    # blocks, whole lines of a map) go in several a bus beat when the bus is wider than a
    # row (bench/results/codesign_breakdown.md: c2's 144 weight rows took 144 slots)
    "write": (1, 2, 4),
    # weight rows a cycle into the array (1 is today's): a K fold's weights take ROWS / L
    # cycles, the cost of short tiles and of each layer's first fold
    # (bench/results/codesign_breakdown.md); 2 is left to `--hardware load=1,2,4`
    "load": (1, 4),
}
#: legal networks whose every machine within the budget is priced after the search
#: (`sweep_machines`): `glensidec nas --hardware --sweep`'s default and bench_codesign's
DEFAULT_SWEEP = 3
HELP_SPACE = ("rows=4,8,16,32 cols=8,16,32,64 scratchpad=16KiB,64KiB,256KiB "
              "accumulator=256,1024 bus=8,16,32,64 epilogue=1,2,4 write=1,2,4 load=1,4")


# -- the machine space ----------------------------------------------------------------------


def parse_space(text: str) -> dict[str, tuple[int, ...]]:
    """`--hardware` SPEC: space-separated `gene=v1,v2,…` overriding DEFAULT_SPACE; "" is
    the default space. Sizes take compile's units (16KiB); accumulator counts rows."""
    from glensidec.pipeline import parse_bytes

    space = dict(DEFAULT_SPACE)
    for item in text.split():
        gene, _, values = item.partition("=")
        if gene not in GENES:
            raise GlensideError(f"--hardware: unknown machine parameter '{gene}' (known: "
                                f"{', '.join(GENES)}; e.g. '{HELP_SPACE}')")
        if not values:
            raise GlensideError(f"--hardware: '{item}' gives no values (e.g. {gene}=8,16)")
        parsed = []
        for value in values.split(","):
            number = (parse_bytes(value, f"--hardware {gene}") if gene == "scratchpad"
                      else _count(value, gene))
            if number < 1:
                raise GlensideError(f"--hardware {gene}: {value} is not a positive size")
            parsed.append(number)
        space[gene] = tuple(sorted(set(parsed)))
    odd_write = [w for w in space["write"] if w & (w - 1) or w > 8]
    if odd_write:
        raise GlensideError(f"--hardware write: a DMA write carries 1, 2, 4 or 8 rows, not "
                            f"{odd_write[0]}")
    odd_load = [n for n in space["load"] if n & (n - 1) or n > min(space["rows"])]
    if odd_load:
        raise GlensideError(f"--hardware load: the array takes a power of two weight rows a "
                            f"cycle, at most its rows ({min(space['rows'])}), not {odd_load[0]}")
    # every pair of the space must be a machine: the epilogue's lanes divide the columns
    odd = [(c, e) for c in space["cols"] for e in space["epilogue"] if c % e]
    if odd:
        raise GlensideError(f"--hardware epilogue: {odd[0][1]} cycles a row needs columns "
                            f"it divides, not {odd[0][0]} (e.g. epilogue=1,2,4 with "
                            "cols=8,16,32,64)")
    return space


def _count(value: str, gene: str) -> int:
    if not re.fullmatch(r"\d+", value.strip()):
        raise GlensideError(f"--hardware {gene}: '{value}' is not a whole number")
    return int(value)


def gene_options(reference: Machine, space: dict[str, tuple[int, ...]]) -> list[list[S.Choice]]:
    """Per gene: KEEP (the reference's value) and every other value of the space."""
    values = machine_values(reference)
    return [[S.KEEP] + [S.Choice(gene, v) for v in space[gene] if v != values[gene]]
            for gene in GENES]


def machine_values(machine: Machine) -> dict[str, int]:
    return {"rows": machine.rows, "cols": machine.cols,
            "scratchpad": machine.scratchpad_bytes,
            "accumulator": machine.accumulator_rows, "bus": machine.bus_bytes,
            "epilogue": machine.cols // machine.epilogue_lanes, "write": machine.write_rows,
            "load": machine.weight_load_rows}


def space_machines(space: dict[str, tuple[int, ...]]) -> list[Machine]:
    """Every machine of a space, in the order of its genes' values."""
    return [Machine(rows, cols, scratchpad, depth, bus, cols // epilogue, write, load)
            for rows, cols, scratchpad, depth, bus, epilogue, write, load in
            itertools.product(*(space[gene] for gene in GENES))]


def genes_of(reference: Machine, machine: Machine) -> tuple[S.Choice, ...]:
    """The machine genes that make `machine` of `reference` (`machine_of`'s inverse)."""
    values, kept = machine_values(machine), machine_values(reference)
    return tuple(S.KEEP if values[gene] == kept[gene] else S.Choice(gene, values[gene])
                 for gene in GENES)


def machine_of(reference: Machine, genes: tuple[S.Choice, ...]) -> Machine:
    values = machine_values(reference)
    for gene, choice in zip(GENES, genes, strict=True):
        if choice != S.KEEP:
            values[gene] = choice.number
    return Machine(values["rows"], values["cols"], values["scratchpad"],
                   values["accumulator"], values["bus"],
                   values["cols"] // values["epilogue"], values["write"], values["load"])


def target(machine: Machine) -> Any:
    """The compile target of a machine; a machine compile would refuse raises its
    GlensideError (e.g. a scratchpad too small for one tile of the array)."""
    from glensidec import pipeline

    return pipeline.choose_target((machine.array(),),
                                  scratchpad=size_text(machine.scratchpad_bytes),
                                  accumulator=size_text(machine.accumulator_bytes),
                                  dram_bandwidth=machine.bus_bytes,
                                  epilogue_lanes=machine.epilogue_lanes,
                                  write_rows=machine.write_rows,
                                  weight_load_rows=machine.weight_load_rows)


def parse_budget(text: str | None, reference: Machine, model: AreaModel) -> float:
    """`--area-budget`: cell equivalents (1.2M, 800k, 1200000), or an array `RxC` meaning
    that array with the reference's memories and bus; None: the reference machine's area."""
    if text is None:
        return model.area(reference)
    shape = re.fullmatch(r"\s*(\d+)x(\d+)\s*", text)
    if shape:
        machine = Machine(int(shape.group(1)), int(shape.group(2)),
                          reference.scratchpad_bytes, reference.accumulator_rows,
                          reference.bus_bytes)
        return model.area(machine)
    number = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM])\s*", text)
    try:
        value = (float(number.group(1)) * {"k": 1e3, "m": 1e6}[number.group(2).lower()]
                 if number else float(text))
    except ValueError:
        raise GlensideError(f"--area-budget {text}: give cell equivalents (e.g. 1.2M or "
                            "900k) or an array RxC (its area with the reference memories)")\
            from None
    if not (math.isfinite(value) and value > 0):
        raise GlensideError(f"--area-budget {text}: the budget must be a positive, finite "
                            "number of cell equivalents")
    return value


# -- what a pair costs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Extracted:
    """One network's int8 program as extracted for one array shape: plain data (the
    e-graph it came from is dropped on the e-graph thread)."""

    program: Program
    types: TypeTable
    weights: dict[str, Array]


_EXTRACTED: dict[tuple[object, ...], Extracted] = {}
_PAIRS: dict[tuple[object, ...], Cost] = {}


def pair_cost(graph: Graph, machine: Machine, shared: str | None = None) -> Cost:
    """`compile --stats`'s predicted total of the quantized graph on `machine`, memoised
    per network and machine; the extraction per network and array shape (`shared`: a
    directory the workers share, where each extraction is kept for the others)."""
    network = network_key(graph)
    key = (network, machine)
    if key not in _PAIRS:
        _PAIRS[key] = on_egglog_thread(_pair_cost, graph, network, machine, shared)
    return _PAIRS[key]


def _pair_cost(graph: Graph, network: tuple[object, ...], machine: Machine,
               shared: str | None) -> Cost:
    from glensidec import pipeline

    compiled_for = target(machine)
    shape = (network, machine.rows, machine.cols)
    if shape not in _EXTRACTED:
        _EXTRACTED[shape] = shared_extraction(graph, shape, compiled_for, shared)
    extracted = _EXTRACTED[shape]
    cycles = pipeline.lowered_machine_cycles(extracted.program, extracted.types,
                                             compiled_for, extracted.weights)
    return Cost(cycles.accelerator, cycles.array, cycles.host)


def shared_extraction(graph: Graph, shape: tuple[object, ...], compiled_for: Any,
                      shared: str | None) -> Extracted:
    """The network extracted for its array shape: read from `shared` when another worker
    extracted it already (an extraction is most of a pair's price: the search's gene
    changes of scratchpad, accumulator, bus and lanes keep the network and shape, and Dask
    sends them to any worker), else extracted here and written there."""
    path = None
    if shared is not None and Path(shared).is_dir():  # (a worker on another host has none)
        digest = hashlib.sha256(repr(shape).encode()).hexdigest()
        path = Path(shared) / f"{digest}.pickle"
        if path.exists():
            kept: Extracted = pickle.loads(path.read_bytes())
            return kept
    extracted = extract(graph, compiled_for)
    if path is not None:  # written whole, then renamed: a reader never sees a part
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(pickle.dumps(extracted))
        os.replace(part, path)
    return extracted


def extract(graph: Graph, compiled_for: Any) -> Extracted:
    """The quantized graph rewritten and extracted for the target's array (on the e-graph
    thread: its e-graph is freed here)."""
    from glensidec import pipeline
    from glensidec.lang.typecheck import check_program
    from glensidec.nas.cost import COMPILE_LIMITS

    with tempfile.TemporaryDirectory(prefix="glensidec-nas-") as folder:
        program = quantized(graph, Path(folder))
    compiled = pipeline.compile_for(
        pipeline.Typed(program.program, check_program(program.program)), compiled_for,
        COMPILE_LIMITS)
    extracted = Extracted(compiled.program, compiled.types, program.weights)
    del compiled  # holds the e-graph: freed here, on the e-graph thread
    gc.collect()
    return extracted


def compiled_pair_cost(graph: Graph, machine: Machine) -> Cost:
    """The same through `cost.machine_cost`'s path (no memo), on the machine's own
    memories: what the search checks its choice with."""
    from glensidec import pipeline

    def run() -> Cost:
        from glensidec.lang.typecheck import check_program
        from glensidec.nas.cost import COMPILE_LIMITS

        with tempfile.TemporaryDirectory(prefix="glensidec-nas-") as folder:
            program = quantized(graph, Path(folder))
        chosen = target(machine)
        compiled = pipeline.compile_for(
            pipeline.Typed(program.program, check_program(program.program)), chosen,
            COMPILE_LIMITS)
        cycles = pipeline.predicted_machine_cycles(compiled, chosen, program.weights)
        return Cost(cycles.accelerator, cycles.array, cycles.host)

    return on_egglog_thread(run)


# -- Dask tasks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Codesign:
    """What the machine side of the search needs, beside the network's `Setup`."""

    reference: Machine
    networks: int  # how many of the candidate's choices are the network's
    #: a directory the workers share extractions in (`pair_cost`); None: none
    shared: str | None = None


def score_task(setup: S.Setup, candidate: S.Candidate) -> dict[str, Any]:
    """The network's params, MACs and legality score (the machine genes are ignored); with
    `train` legality each seed's accuracy too, as the network search keeps them."""
    from glensidec.nas.cost import params_and_macs

    try:
        transformed = S.apply(S.original(setup), setup.layers, candidate, T.INHERIT)
    except GlensideError as error:
        return {"valid": False, "error": error.message}
    counted = params_and_macs(transformed)
    scored = S.score(setup, candidate)
    return {"valid": True, "params": sum(p for p, _ in counted.values()),
            "macs": sum(m for _, m in counted.values()), "score": scored["score"],
            **({"accuracies": scored["accuracies"]} if "accuracies" in scored else {})}


def seed_task(setup: S.Setup, candidate: S.Candidate, seed: int) -> dict[str, Any]:
    """`score_task` of `train` legality for one seed: the network retrained with `seed`
    alone (its accuracy; the seeds train independently, deterministically on one thread,
    so their mean is `score_task`'s score)."""
    one = replace(setup, seed=seed, train_seeds=1)
    record = score_task(one, candidate)
    if record["valid"]:
        record["accuracy"] = record.pop("accuracies")[0]
        del record["score"]
    return record


def merged_seeds(records: list[dict[str, Any]]) -> dict[str, Any]:
    """`score_task`'s record from `seed_task`'s records of one network, seeds in order."""
    if not all(r["valid"] for r in records):
        return next(r for r in records if not r["valid"])
    accuracies = [r["accuracy"] for r in records]
    return {"valid": True, "params": records[0]["params"], "macs": records[0]["macs"],
            "score": float(np.mean(accuracies)), "accuracies": accuracies}


def round_task(setup: S.Setup, codesign: Codesign, kind: str, candidate: S.Candidate,
               seed: int) -> dict[str, Any]:
    """One task of `evaluate_round`: a network's score ('network'), one seed of it
    ('seed') or a pair's cycles ('pair')."""
    if kind == "pair":
        return price_task(setup, codesign, candidate)
    if kind == "seed":
        return seed_task(setup, candidate, seed)
    return score_task(setup, candidate)


def evaluate_round(setup: S.Setup, codesign: Codesign, networks: list[S.Candidate],
                   pairs: list[S.Candidate], mapper: S.Mapper,
                   ) -> tuple[dict[S.Candidate, dict[str, Any]],
                              dict[S.Candidate, dict[str, Any]]]:
    """The networks' scores and the pairs' cycles in one round of tasks: with `train`
    legality each seed of a network is a task of its own, so a batch of a few children
    keeps every worker busy instead of one network's two seeds keeping one worker busy
    while the pairs wait for the next round. Returns (scores by network, cycles by pair; a
    pair a compile or a transformation refuses is not valid)."""
    seeds = (range(setup.seed, setup.seed + setup.train_seeds) if setup.legality == "train"
             else range(0))
    calls: list[tuple[Any, ...]] = []
    for network in networks:
        calls += ([(setup, codesign, "seed", network, seed) for seed in seeds] if seeds
                  else [(setup, codesign, "network", network, 0)])
    calls += [(setup, codesign, "pair", pair, 0) for pair in pairs]
    found = iter(mapper(round_task, calls))
    scores = {network: (merged_seeds([next(found) for _ in seeds]) if seeds else next(found))
              for network in networks}
    costs = {}
    for pair in pairs:
        record = next(found)
        costs[pair] = {k: v for k, v in record.items() if k != "valid"} if record["valid"] \
            else record
    return scores, costs


def cost_task(setup: S.Setup, codesign: Codesign, candidate: S.Candidate) -> dict[str, int]:
    graph = S.apply(S.original(setup), setup.layers, candidate, T.INHERIT)
    machine = machine_of(codesign.reference, candidate[codesign.networks:])
    cost = pair_cost(graph, machine, codesign.shared)
    return {"accelerator_cycles": cost.accelerator, "array_cycles": cost.array,
            "host_cycles": cost.host, "cycles": cost.total}


def machines_task(setup: S.Setup, codesign: Codesign, candidate: S.Candidate,
                  machines: tuple[Machine, ...]) -> list[Cost | None]:
    """The network of `candidate` on each machine (of one array shape: one extraction);
    None where a compile refuses the machine."""
    graph = S.apply(S.original(setup), setup.layers, candidate, T.INHERIT)
    costs: list[Cost | None] = []
    for machine in machines:
        try:
            costs.append(pair_cost(graph, machine, codesign.shared))
        except GlensideError:
            costs.append(None)
    return costs


def machine_costs(setup: S.Setup, codesign: Codesign, candidates: list[S.Candidate],
                  machines: list[Machine], mapper: S.Mapper,
                  ) -> list[list[tuple[Machine, Cost]]]:
    """Each candidate's network priced on every machine given that compiles, one task per
    network and array shape (a worker extracts the network for the shape once and lowers
    it per memory configuration), all in one batch for the workers."""
    by_shape: dict[tuple[int, int], list[Machine]] = {}
    for machine in machines:
        by_shape.setdefault((machine.rows, machine.cols), []).append(machine)
    groups = list(by_shape.values())
    found = iter(mapper(machines_task, [(setup, codesign, candidate, tuple(group))
                                        for candidate in candidates for group in groups]))
    return [[(machine, cost) for group in groups
             for machine, cost in zip(group, next(found), strict=True) if cost is not None]
            for _ in candidates]


# -- the search ------------------------------------------------------------------------------


@dataclass
class CodesignResult:
    result: S.Result
    reference: Machine
    budget: float
    model: AreaModel
    front: list[dict[str, Any]] = field(default_factory=list)
    fixed_best: dict[str, Any] | None = None  # cheapest legal pair on the reference machine
    setup: S.Setup | None = None  # what the evaluations ran with (retraining more seeds)
    #: the networks whose every machine within the budget was priced (`sweep_machines`),
    #: by their choices, with how many machines that was
    swept: dict[tuple[str, ...], int] = field(default_factory=dict)
    #: the work behind it: networks scored (trained, with `train` legality), pairs priced
    #: (the evolution's, the descent's and the sweep's) and distinct extractions (network
    #: and array shape) the workers shared
    work: dict[str, int] = field(default_factory=dict)


def network_part(candidate: S.Candidate, networks: int) -> S.Candidate:
    return candidate[:networks] + tuple(S.KEEP for _ in candidate[networks:])


def run_codesign(program_text: str, weights: dict[str, Array],
                 train_data: tuple[Array, Array], val_data: tuple[Array, Array],
                 reference: Machine, space_of_machines: dict[str, tuple[int, ...]],
                 budget: float, options: S.Options, mapper: S.Mapper,
                 progress: Callable[[int], None] | None = None,
                 name: str = "<program>", model: AreaModel | None = None,
                 known: dict[S.Candidate, dict[str, Any]] | None = None,
                 sweep: int = 0) -> CodesignResult:
    """Search networks and machines together (module docstring). `known`: records of a
    network-only search of the same program and setup (`search.run_search`'s memo), whose
    legality scores are reused: a network's score does not depend on the machine. After
    the strategy, `options.descent` pairs judged by a cheapest-first descent over single
    gene changes (`descend_pairs`), then every machine of the space within the budget
    priced for the `sweep` cheapest legal networks (`sweep_machines`). The workers share
    their extractions in a temporary directory (`shared_extraction`), removed after."""
    with tempfile.TemporaryDirectory(prefix="glensidec-codesign-") as shared:
        return _run_codesign(program_text, weights, train_data, val_data, reference,
                             space_of_machines, budget, options, mapper, progress, name,
                             model, known, sweep, shared)


def _run_codesign(program_text: str, weights: dict[str, Array],
                  train_data: tuple[Array, Array], val_data: tuple[Array, Array],
                  reference: Machine, space_of_machines: dict[str, tuple[int, ...]],
                  budget: float, options: S.Options, mapper: S.Mapper,
                  progress: Callable[[int], None] | None, name: str,
                  model: AreaModel | None, known: dict[S.Candidate, dict[str, Any]] | None,
                  sweep: int, shared: str) -> CodesignResult:
    model = model or fitted()
    graph = lift(parse_program(program_text, name), weights)
    networks = S.search_space(graph, options.space)
    if not networks.layers:
        raise GlensideError("nothing to search: no conv or dense layer can be transformed")
    space = S.Space(networks.layers + list(GENE_NAMES),
                    networks.options + gene_options(reference, space_of_machines),
                    networks.branches, networks.attention_blocks)
    n = len(networks.layers)
    setup = S.Setup(program_text, weights, space.layers, reference.array(), options.legality,
                    train_data[0], train_data[1], val_data[0], val_data[1], options.seed,
                    options.train_epochs, name, reference.bus_bytes, options.train_seeds)
    codesign = Codesign(reference, n, shared)
    scores: dict[S.Candidate, dict[str, Any]] = {}
    for candidate, record in (known or {}).items():
        if len(candidate) == n:
            fields = ("valid", "error", "params", "macs", "score", "accuracies")
            scores[candidate + tuple(S.KEEP for _ in GENES)] = {
                k: record[k] for k in fields if k in record}
    preloaded = len(scores)
    memo: dict[S.Candidate, dict[str, Any]] = {}
    keep = tuple(S.KEEP for _ in space.layers)

    def evaluate_batch(batch: list[S.Candidate],
                       costs: dict[S.Candidate, dict[str, Any]] | None = None,
                       ) -> list[dict[str, Any]]:
        """Score each new network and cost each new pair (`costs`: pairs priced already,
        by the descent or the sweep), all in one round of tasks on the workers."""
        new = list(dict.fromkeys(c for c in batch if c not in memo))
        nets = list(dict.fromkeys(network_part(c, n) for c in new))
        nets = [c for c in nets if c not in scores]
        refused = {c: machine_refusal(machine_of(reference, c[n:])) for c in new}
        to_cost = [c for c in new if refused[c] is None and (costs is None or c not in costs)
                   and scores.get(network_part(c, n), {}).get("valid", True)]
        found_scores, found_costs = evaluate_round(setup, codesign, nets, to_cost, mapper)
        scores.update(found_scores)
        for candidate in new:
            record = pair_record(candidate, space, n, reference, model, budget,
                                 scores[network_part(candidate, n)])
            memo[candidate] = record
            if record["valid"] and costs is not None and candidate in costs:
                record.update(costs[candidate])
            elif record["valid"]:
                record.update(found_costs[candidate])
        reference_score = memo[keep]["score"] if keep in memo else None
        for candidate in new:
            record = memo[candidate]
            record["network_legal"] = candidate == keep or (
                record["valid"] and reference_score is not None
                and record["score"] >= options.threshold * reference_score)
            record["legal"] = record["network_legal"] and record["within_budget"]
            if progress is not None:
                progress(1)
        return [memo[c] for c in batch]

    evaluate_batch([keep])
    if not memo[keep]["valid"]:
        raise GlensideError(f"the reference machine {reference.describe()}: "
                            f"{memo[keep]['error']}")
    # The first population: each starting network (the caller's, else the original) on
    # every array shape of the space, its other genes kept; then the same with each other
    # epilogue of the space, most lanes first; then the uniform networks. A network search
    # knows which networks keep their accuracy; the machine is what the co-design adds, and
    # the array shape and the epilogue's lanes are its largest levers at batch 1
    # (bench/results/nas.md). A lanes-only variant costs a lowering, not an extraction.
    shapes = [(r, c) for r in space_of_machines["rows"] for c in space_of_machines["cols"]]
    reference_values = machine_values(reference)
    epilogues = dict.fromkeys([reference_values["epilogue"],
                               *sorted(space_of_machines["epilogue"])])
    starts = []
    for epilogue in epilogues:
        for network in options.start or (keep,):
            for rows, cols in shapes:
                genes = {gene: S.KEEP if value == reference_values[gene]
                         else S.Choice(gene, value)
                         for gene, value in (("rows", rows), ("cols", cols),
                                             ("epilogue", epilogue))}
                starts.append(network[:n] + tuple(genes.get(gene, network[n + i])
                                                  for i, gene in enumerate(GENES)))
    options = replace(options, start=tuple(dict.fromkeys(starts)))
    strategy, evaluated = S.candidates_for(space, options, evaluate_batch)
    descended = descend_pairs(space, options, [keep, *evaluated], memo, evaluate_batch,
                              mapper, setup, codesign, model, budget, reference, scores)
    sweeps = sweep_machines([keep, *evaluated, *descended], memo, sweep, n,
                            space_of_machines, model, budget, mapper, setup, codesign)
    for pairs, _ in sweeps.values():
        evaluate_batch([c for c, _ in pairs], dict(pairs))
    swept = [c for pairs, _ in sweeps.values() for c, _ in pairs]
    order = list(dict.fromkeys([keep, *evaluated, *descended, *swept]))
    for candidate in descended:
        memo[candidate]["descent"] = True
    records = {c: dict(memo[c]) for c in order}
    result = S.Result(space, strategy, records[keep])
    result.records = [records[c] for c in order]
    if not records[keep]["within_budget"]:
        # the original is the fallback of `choose`: over the budget it may not be chosen,
        # but it stays the accuracy it must keep
        records[keep]["legal"] = False
    # a network on several machines is retrained once (its accuracy is the machine's no matter)
    S.choose(result, setup, order, records, options, mapper,
             network=lambda candidate: network_part(candidate, n))
    found = CodesignResult(result, reference, budget, model, setup=setup,
                           swept={tuple(str(c) for c in network[:n]): priced
                                  for network, (_, priced) in sweeps.items()})
    found.work = {"networks scored": len(scores) - preloaded,
                  "pairs priced": priced_pairs(memo, sweeps),
                  "extractions": len(list(Path(shared).glob("*.pickle")))}
    found.front = pareto_front([r for r in result.records if r.get("network_legal")
                                and r.get("valid")])
    retrain_front(found, setup, order, records, mapper)
    on_reference = [r for r in result.records[1:] if r.get("legal")
                    and r["machine"] == reference.key()]
    found.fixed_best = min(on_reference, key=lambda r: r["cycles"], default=None)
    return found


def priced_pairs(memo: dict[S.Candidate, dict[str, Any]],
                 sweeps: dict[S.Candidate, tuple[list[tuple[S.Candidate, dict[str, Any]]],
                                                 int]]) -> int:
    """Pairs whose cycles were priced: the records with cycles that no sweep priced, and
    every machine each sweep priced."""
    swept = {c for pairs, _ in sweeps.values() for c, _ in pairs}
    return (sum(1 for c, r in memo.items() if "cycles" in r and c not in swept)
            + sum(priced for _, priced in sweeps.values()))


def descend_pairs(space: S.Space, options: S.Options, visited: list[S.Candidate],
                  memo: dict[S.Candidate, dict[str, Any]],
                  evaluate_batch: Callable[..., list[dict[str, Any]]], mapper: S.Mapper,
                  setup: S.Setup, codesign: Codesign, model: AreaModel, budget: float,
                  reference: Machine, scores: dict[S.Candidate, dict[str, Any]],
                  ) -> list[S.Candidate]:
    """`search.descend` on the joint space: every single change of a gene (a layer's
    choice or one machine parameter) of the cheapest legal pairs is priced — a machine
    over the budget is not, it can never be chosen — and those cheaper than the cheapest
    legal pair are judged. A pair whose network was judged already (the same network on
    another machine) costs no training and no share of `options.descent`: most of a
    pair's neighbours are machine changes."""
    if not options.descent:
        return []
    n = codesign.networks
    priced: dict[S.Candidate, dict[str, Any]] = {}

    def price_batch(batch: list[S.Candidate]) -> None:
        new = [c for c in dict.fromkeys(batch) if c not in memo and c not in priced]
        within = []
        for candidate in new:
            if model.area(machine_of(reference, candidate[n:])) > budget:
                priced[candidate] = {"valid": True, options.cost: math.inf}
            else:
                within.append(candidate)
        for candidate, record in zip(within, mapper(price_task, [(setup, codesign, c)
                                                                 for c in within]),
                                     strict=True):
            # a network judged already: its score with the pair's cycles
            network = scores.get(network_part(candidate, n), {})
            priced[candidate] = {**network, **record,
                                 "valid": record["valid"] and network.get("valid", True)}

    def judge_batch(batch: list[S.Candidate]) -> None:
        evaluate_batch(batch, {c: priced[c] for c in batch if c in priced})

    return S.descend(space, options, visited,
                     lambda c: memo[c] if c in memo else priced[c], price_batch, judge_batch)


def price_task(setup: S.Setup, codesign: Codesign, candidate: S.Candidate) -> dict[str, Any]:
    """A pair's cycles without its network's score (the descent's pricing); a network
    the transformations refuse, or a machine compile refuses, is not valid."""
    try:
        return {"valid": True, **cost_task(setup, codesign, candidate)}
    except GlensideError as error:
        return {"valid": False, "error": error.message}


def sweep_machines(order: list[S.Candidate], memo: dict[S.Candidate, dict[str, Any]],
                   count: int, n: int, space_of_machines: dict[str, tuple[int, ...]],
                   model: AreaModel, budget: float, mapper: S.Mapper, setup: S.Setup,
                   codesign: Codesign,
                   ) -> dict[S.Candidate, tuple[list[tuple[S.Candidate, dict[str, Any]]], int]]:
    """Every machine of the space within the budget for the `count` legal networks of the
    cheapest legal pairs: a network's legality does not depend on the machine, and
    pricing a pair is a lowering (the extraction is per array shape), so for the best
    networks the machine need not be searched. Returns, per network, the pairs on its own
    front of cycles × area (no other of its machines both faster and smaller), priced,
    and how many machines were priced."""
    legal = sorted((c for c in order[1:] if memo[c].get("legal")),
                   key=lambda c: (memo[c]["cycles"], order.index(c)))
    networks = list(dict.fromkeys(network_part(c, n) for c in legal))[:count]
    machines = [m for m in space_machines(space_of_machines) if model.area(m) <= budget]
    swept: dict[S.Candidate, tuple[list[tuple[S.Candidate, dict[str, Any]]], int]] = {}
    for network, costed in zip(networks, machine_costs(setup, codesign, networks, machines,
                                                       mapper), strict=True):
        front = pareto_front([{"area": model.area(m), "cycles": cost.total, "machine": m,
                               "cost": cost} for m, cost in costed])
        pairs = [(network[:n] + genes_of(codesign.reference, record["machine"]),
                  {"accelerator_cycles": record["cost"].accelerator,
                   "array_cycles": record["cost"].array, "host_cycles": record["cost"].host,
                   "cycles": record["cost"].total}) for record in front]
        swept[network] = (pairs, len(costed))
    return swept


def machine_refusal(machine: Machine) -> str | None:
    """Why compile refuses the machine (e.g. a scratchpad too small for one tile of its
    array), or None."""
    try:
        target(machine)
    except GlensideError as error:
        return error.message
    return None


def pair_record(candidate: S.Candidate, space: S.Space, n: int, reference: Machine,
                model: AreaModel, budget: float, scored: dict[str, Any]) -> dict[str, Any]:
    machine = machine_of(reference, candidate[n:])
    record: dict[str, Any] = {
        "choices": {layer: str(c) for layer, c in zip(space.layers[:n], candidate[:n],
                                                      strict=True)},
        "machine": machine.key(), "machine_text": machine.describe(),
        "area": round(model.area(machine)), "logic_cells": round(model.logic_cells(machine)),
        **scored}
    # the unrounded area: the reference machine is within a budget of its own area
    record["within_budget"] = model.area(machine) <= budget
    refused = machine_refusal(machine) if record["valid"] else None
    if refused is not None:
        record.update(valid=False, error=refused)
    return record


def pareto_front(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records no other beats in both cycles and area (ties: the first), by area."""
    front: list[dict[str, Any]] = []
    for record in sorted(records, key=lambda r: (r["area"], r["cycles"])):
        if not front or record["cycles"] < front[-1]["cycles"]:
            front.append(record)
    return front


def retrain_front(found: CodesignResult, setup: S.Setup, order: list[S.Candidate],
                  records: dict[S.Candidate, dict[str, Any]], mapper: S.Mapper) -> None:
    """The front's third axis: each front network's accuracy, retrained like the
    finalists (seed `--seed`; a network on several machines is retrained once)."""
    n = len(setup.layers) - len(GENES)
    by_network: dict[S.Candidate, list[dict[str, Any]]] = {}
    done: dict[S.Candidate, float] = {}
    for candidate in order:
        record = records[candidate]
        if "accuracy" in record:
            done[network_part(candidate, n)] = record["accuracy"]
        if any(record is f for f in found.front):
            by_network.setdefault(network_part(candidate, n), []).append(record)
    todo = [c for c in by_network if c not in done]
    for candidate, (accuracy, _) in zip(todo, mapper(S.retrain, [(setup, c) for c in todo]),
                                        strict=True):
        done[candidate] = accuracy
    for candidate, front_records in by_network.items():
        for record in front_records:
            record.setdefault("accuracy", done[candidate])
            record["front"] = True


# -- outputs ---------------------------------------------------------------------------------


def synthesized_shape() -> tuple[int, int]:
    """The most rows and columns of any configuration Yosys synthesized for the area model
    (fitted or held out)."""
    machines = [Machine.parse_key(key) for key in measured()["configurations"]]
    return max(m.rows for m in machines), max(m.cols for m in machines)


def extrapolated(machine: Machine) -> bool:
    """The machine's array is larger than any synthesized: its area is the model's
    extrapolation, not an interpolation between measured configurations."""
    rows, cols = synthesized_shape()
    return machine.rows > rows or machine.cols > cols


def pareto_png(found: CodesignResult) -> bytes:
    """Cycles against area: every pair evaluated, the front of the legal networks with
    each front network's retrained accuracy, the budget, and the marked picks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = found.result
    figure, axis = plt.subplots(figsize=(7, 4.5), dpi=100)
    valid = [r for r in result.records if r.get("valid")]
    for legal, colour, label in ((False, "lightgrey", "network not legal"),
                                 (True, "tab:blue", "network legal")):
        points = [r for r in valid if bool(r.get("network_legal")) == legal]
        axis.scatter([r["area"] / 1e6 for r in points], [r["cycles"] for r in points], s=10,
                     c=colour, label=label)
    beyond = [r for r in valid if extrapolated(Machine.parse_key(r["machine"]))]
    if beyond:
        rows, cols = synthesized_shape()
        axis.scatter([r["area"] / 1e6 for r in beyond], [r["cycles"] for r in beyond], s=28,
                     facecolors="none", edgecolors="dimgrey", linewidths=0.6,
                     label=f"area extrapolated (array beyond the {rows}x{cols} synthesized)")
    front = found.front
    axis.step([r["area"] / 1e6 for r in front], [r["cycles"] for r in front], where="post",
              c="tab:red", lw=1, label="Pareto front (legal networks)")
    for record in front:
        axis.annotate(f"{100 * record['accuracy']:.1f}%", (record["area"] / 1e6,
                                                             record["cycles"]),
                      fontsize=6, xytext=(3, 3), textcoords="offset points")
    axis.axvline(found.budget / 1e6, c="black", ls="--", lw=0.8, label="area budget")
    marks: list[tuple[dict[str, Any] | None, str, str, str]] = [
        (result.original, "*", "black", "original on the reference machine"),
        (found.fixed_best, "s", "tab:orange", "best legal pair, reference machine"),
        (result.chosen, "D", "tab:red", "chosen")]
    for mark, marker, colour, label in marks:
        if mark is not None:
            axis.scatter([mark["area"] / 1e6], [mark["cycles"]], s=70, marker=marker,
                         c=colour, label=label, zorder=3)
    axis.set_yscale("log")
    axis.set_xlabel("area (million cell equivalents: Yosys logic cells + SRAM bits, "
                    "glensidec/hardware/area.py)", fontsize=8)
    axis.set_ylabel("predicted cycles")
    axis.legend(fontsize=7)
    return S.png_bytes(figure)


def pick_row(label: str, record: dict[str, Any]) -> str:
    choices = ", ".join(f"{k} {v}" for k, v in record["choices"].items() if v != "keep")
    accuracy = record.get("accuracy")
    return (f"| {label} | {choices or '-'} | {record['machine_text']} | {record['area']:,} | "
            f"{record['cycles']} | {record['host_cycles']} | {record['score']:.4g} | "
            f"{'-' if accuracy is None else f'{100 * accuracy:.1f} %'} |")


def sweep_lines(found: CodesignResult) -> list[str]:
    """The report's line on the machine sweep: which networks had every machine within
    the budget priced, and how many machines that was."""
    if not found.swept:
        return ["- machine sweep: none (`--sweep 0`)"]
    networks = "; ".join(", ".join(c for c in network if c != "keep") or "the original"
                         for network in found.swept)
    return [f"- machine sweep: {len(found.swept)} legal networks ({networks}) each on every "
            f"machine within the budget ({', '.join(map(str, found.swept.values()))} "
            "machines priced)"]


def report_md(found: CodesignResult, options: S.Options, compiled: int) -> bytes:
    from glensidec.hardware.area import describe_model

    result, chosen = found.result, found.result.chosen
    assert chosen is not None
    machine = Machine.parse_key(chosen["machine"])
    lines = [
        "# glensidec nas --hardware report", "",
        f"- space: {result.space.size} pairs over layers {', '.join(result.space.layers)}; "
        f"strategy {result.strategy}; budget {options.budget}; seed {options.seed}",
        f"- reference machine: {found.reference.describe()} (area "
        f"{found.model.area(found.reference):,.0f}); area budget {found.budget:,.0f} cell "
        "equivalents",
        f"- legality: {options.legality}, legal when score >= {options.threshold} x the "
        "original's and the area is within the budget",
        f"- evaluated: {len(result.records)}, network legal: "
        f"{sum(1 for r in result.records if r.get('network_legal'))}, legal: "
        f"{sum(1 for r in result.records if r.get('legal'))}; the front: {len(found.front)} "
        "pairs", *sweep_lines(found), "",
        *describe_model(found.model), "",
        "| pick | network | machine | area | predicted cycles | host | score | accuracy |",
        "|---|---|---|---:|---:|---:|---:|---:|"]
    picks = [("original", result.original)]
    if found.fixed_best is not None:
        picks.append(("best legal pair on the reference machine", found.fixed_best))
    picks.append(("chosen", chosen))
    lines += [pick_row(label, record) for label, record in picks]
    lines += ["", "## The Pareto front (cycles × area, legal networks; accuracy retrained)", "",
              "| pick | network | machine | area | predicted cycles | host | score | "
              "accuracy |", "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [pick_row("front", record) for record in found.front]
    within = "within" if chosen["within_budget"] else "OVER"
    lines += ["", f"The chosen pair ({within} the budget) needs "
              f"{result.original['cycles'] / max(chosen['cycles'], 1):.2f}x fewer predicted "
              f"cycles than the original on the reference machine; compiled in full with its "
              f"retrained weights on its machine, its prediction is {compiled} cycles. Build "
              f"it: `glensidec quantize chosen.gs …` then `glensidec compile CHOSEN.q.gs "
              f"{' '.join(machine.compile_options())} -o OUT` (machine.json).", ""]
    return "\n".join(lines).encode()


def machine_json(found: CodesignResult) -> bytes:
    chosen = found.result.chosen
    assert chosen is not None
    machine = Machine.parse_key(chosen["machine"])
    document = {"rows": machine.rows, "cols": machine.cols,
                "scratchpad_bytes": machine.scratchpad_bytes,
                "accumulator_rows": machine.accumulator_rows, "bus_bytes": machine.bus_bytes,
                "epilogue_lanes": machine.epilogue_lanes, "write_rows": machine.write_rows,
                "weight_load_rows": machine.weight_load_rows,
                "area": chosen["area"],
                "budget": round(found.budget),
                "compile_options": machine.compile_options()}
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


OUTPUTS = ("chosen.gs", "chosen.npz", "candidates.json", "report.md", "pareto.png",
           "machine.json")


def outputs(found: CodesignResult, options: S.Options, compiled: int) -> dict[str, bytes]:
    return {**S.chosen_files(found.result), "candidates.json": S.candidates_json(found.result),
            "report.md": report_md(found, options, compiled), "pareto.png": pareto_png(found),
            "machine.json": machine_json(found)}


def check_estimate(found: CodesignResult) -> int:
    """Cost the retrained chosen network on its machine both ways (memoised pair cost and
    the pipeline's compile); they must agree. Returns the compiled prediction."""
    result = found.result
    assert result.chosen is not None and result.chosen_graph is not None
    machine = Machine.parse_key(result.chosen["machine"])
    estimate = pair_cost(result.chosen_graph, machine).total
    compiled = compiled_pair_cost(result.chosen_graph, machine).total
    if compiled != estimate:
        raise GlensideError(f"internal: the chosen pair compiles to {compiled} predicted "
                            f"cycles but was estimated at {estimate}")
    return compiled


def budget_fits(reference: Machine, space: dict[str, tuple[int, ...]], budget: float,
                model: AreaModel) -> None:
    """Refuse a budget no machine of the space fits (before any worker starts)."""
    smallest = min(model.area(machine) for machine in space_machines(space))
    smallest = min(smallest, model.area(reference))
    if budget < smallest:
        raise GlensideError(f"--area-budget: {budget:,.0f} cell equivalents fits no machine "
                            f"of the space (the smallest is {smallest:,.0f})")
