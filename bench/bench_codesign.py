"""Co-design on the digits CNN (issue 31, part 4): the network and the accelerator searched
together under an area budget equal to today's 16x16 accelerator, against the best network
the same search finds on the fixed 16x16 machine.

1. The fixed-machine search (`glensidec nas`'s, bench_nas.OPTIONS: aging evolution over
   128 networks, `train` legality — retrained accuracy, the mean of seeds 0 and 1, >= 0.99
   x the original's) on the 16x16 accelerator at its default memories.
2. `glensidec nas --hardware`'s search (`nas/hardware.run_codesign`) over the same
   networks and the default machine space (rows 4-32, cols 8-64, scratchpad 16-256 KiB,
   accumulator 256 or 1024 rows, bus 8-64 B/cycle, 1, 2 or 4 cycles a row through the
   epilogue's lanes, 1, 2 or 4 scratchpad rows a DMA write, 1 or 4 weight rows a cycle into
   the array), with the same legality
   (scores shared with 1), over CODESIGN_BUDGET pairs; its first population is the fixed
   search's legal networks, cheapest first, each on every array shape of the space at
   each epilogue.
3. The original, the fixed-machine pick and the co-designed pick retrained from inherited
   weights with seeds 0 and 1; the co-designed pair quantized, compiled for its machine and
   co-simulated on the RTL (`make sim`'s runner), C and RTL against the interpreter.
   After the evolution, a cheapest-first descent over single gene changes (a layer's
   choice or one machine parameter; B.DESCENT networks judged at most, a machine change of
   a judged network costs no training), then every machine of the space within the budget
   for the SWEEP cheapest legal networks (`hardware.sweep_machines`).
4. The same choice under other SRAM weights of the area model (does the chosen machine
   still fit a budget of today's machine under them?).
5. The fixed-machine pick's network on every machine of the space within the budget: what
   the machine alone gives it (`best_machine`; the sweep's when it swept that network).

    python bench/bench_codesign.py   → the co-design section of bench/results/nas.md,
                                       nas_codesign.png, nas_codesign.json (exit 1: missed)
    python bench/bench_codesign.py [--workers N]   N Dask workers (default 2, a core each)
    python bench/bench_codesign.py --scheduler ADDRESS   on an existing Dask cluster instead
        (with any of the modes below)
    python bench/bench_codesign.py --report-only   re-tabulates nas_codesign.json
    python bench/bench_codesign.py --bound [--workers N]   no search, no training: the
        committed fixed search's pick and cheapest legal networks on every machine within
        the budget (nas_codesign_bound.json), the fastest pair co-simulated; its table
        heads the section

`stage` is this benchmark's steps 1-4 for a caller that has run the fixed search already;
`python bench/bench_nas.py` (the CNN's benchmark) no longer runs it: this script alone does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.hardware.area import Machine, fitted, sram_bits
from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, read_program
from glensidec.nas import hardware as H
from glensidec.nas import search as S
from glensidec.nas import transforms as T
from glensidec.nas.torch_model import Data

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_nas as B

REFERENCE = Machine(16, 16)  # today's accelerator: 16x16, 256 KiB, 1024 rows, 16 B/cycle
# The joint space is 6,912 times the network space (3,456 before the weight rows a cycle,
# 1,152 before the rows a DMA write):
# more pairs than networks, and a first population large enough to hold the fixed
# search's legal networks on every array shape (16) at each of the 3 epilogues (a
# lanes-only variant costs a lowering, not an extraction).
# Half the pairs of the last session's run (384, population 192, 4 starting networks: 35
# minutes at load 25, mostly training the networks its children made): the machines of the
# best networks are now swept exhaustively after the search (SWEEP), not left to it.
CODESIGN_BUDGET = 192
CODESIGN_OPTIONS = dataclasses.replace(B.OPTIONS, budget=CODESIGN_BUDGET, population=96,
                                       top=6)
STARTING_NETWORKS = 2  # the fixed search's cheapest legal networks the evolution starts from
# legal networks whose every machine within the budget is priced after the search: a
# network's legality is the machine's no matter, so for the best ones the machine is not
# left to the evolution (a network on the ~1,780 machines of the default space within
# today's budget: ~16 extractions and ~1,780 lowerings, about two minutes of CPU)
SWEEP = H.DEFAULT_SWEEP  # 3, as `glensidec nas --hardware` sweeps
INT8_IMAGES = 100  # validation images the int8 interpreter runs (the bench's first ones)
PARTIAL = B.RESULTS / "nas_codesign.json"
TARGET = 1.5  # times faster than the best network on the fixed machine (issue 31)
SRAM_WEIGHTS = (0.125, 0.25, 0.5)
BEGIN, END = "<!-- codesign: begin -->", "<!-- codesign: end -->"


def stage(mapper: Any, train_data: Data, val: Data, fixed: S.Result | None = None,
          memo: dict[S.Candidate, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Steps 1-4 (module docstring); `fixed` and `memo`: the fixed-machine search by
    cycles and its records, when the caller ran it already."""
    program = read_program(B.EXAMPLES / "digits_cnn.gs")
    weights = load_weights(program)
    text = format_program(program)
    memo = {} if memo is None else memo
    started = time.perf_counter()
    if fixed is None:
        fixed = S.run_search(text, weights, (train_data.x, train_data.y), (val.x, val.y),
                             REFERENCE.array(), B.OPTIONS, mapper, memo=memo)
    fixed_seconds = time.perf_counter() - started
    model = fitted()
    budget = model.area(REFERENCE)
    seconds = {"fixed search": round(fixed_seconds)}
    started = time.perf_counter()
    # The evolution starts from what the network search found legal (its retrained
    # accuracy within about a point), cheapest first, on today's machine (run_codesign puts
    # each on every array shape; then the uniform networks, then random pairs); legality
    # scores are shared with that search.
    legal = sorted((r for r in fixed.records[1:] if r.get("legal")), key=lambda r: r["cycles"])
    verified = [B.candidate_of(r["choices"], fixed.space.layers) + tuple(
        S.KEEP for _ in H.GENES) for r in legal[:STARTING_NETWORKS]]
    options = dataclasses.replace(CODESIGN_OPTIONS, start=tuple(verified))
    found = H.run_codesign(text, weights, (train_data.x, train_data.y), (val.x, val.y),
                           REFERENCE, H.DEFAULT_SPACE, budget, options, mapper,
                           model=model, known=memo, sweep=SWEEP)
    search_seconds = time.perf_counter() - started
    seconds["co-design search"] = round(search_seconds)
    started = time.perf_counter()
    compiled = H.check_estimate(found)
    seconds["the choice compiled again"] = round(time.perf_counter() - started)
    (B.RESULTS / "nas_codesign.png").write_bytes(H.pareto_png(found))
    layers = found.result.space.layers
    n = len(layers) - len(H.GENES)
    assert fixed.chosen is not None and found.result.chosen is not None
    # the fixed search may come from a file made by an earlier compiler (--fixed): its pick
    # is costed again on this one, as every pair of the co-design is
    fixed_graph = S.apply(B.original_graph(), fixed.space.layers,
                          B.candidate_of(fixed.chosen["choices"], fixed.space.layers), T.INHERIT)
    fixed_cost = H.pair_cost(fixed_graph, REFERENCE)
    picks = {"original, 16x16": found.result.original,
             "best network on the fixed 16x16 (search by cycles)": {
                 **fixed.chosen, "machine": REFERENCE.key(),
                 "machine_text": REFERENCE.describe(), "area": round(budget),
                 "cycles": fixed_cost.total, "host_cycles": fixed_cost.host,
                 "searched_cycles": fixed.chosen["cycles"]},
             "co-design (network + machine)": found.result.chosen}
    rows = [{"label": label, "choices": record["choices"], "machine": record["machine"],
             "machine_text": record["machine_text"], "area": record["area"],
             "cycles": record["cycles"], "host": record["host_cycles"], "accuracies": [],
             "searched_cycles": record.get("searched_cycles", record["cycles"])}
            for label, record in picks.items()]
    front = [{k: r.get(k) for k in ("choices", "machine_text", "area", "cycles", "score",
                                    "accuracy", "within_budget")} for r in found.front]
    found_so_far = {"rows": rows, "front": front, "budget": round(budget),
                    "evaluated": len(found.result.records), "strategy": found.result.strategy,
                    "space": found.result.space.size, "compiled": compiled,
                    "legal": sum(1 for r in found.result.records if r.get("legal")),
                    "fixed_seconds": round(fixed_seconds),
                    "search_seconds": round(search_seconds),
                    "fixed_evaluated": len(fixed.records), "partial": "searched",
                    "descent": sum(1 for r in found.result.records if r.get("descent")),
                    "swept": swept_rows(found),
                    "stage_seconds": seconds, "settings": settings_text(),
                    "work": found.work,
                    "started_from": [{k: str(v) for k, v in zip(fixed.space.layers, c, strict=False)
                                      if v != S.KEEP} for c in verified]}
    save(found_so_far)
    # `train` legality retrained every pick with B.SEEDS as this table does (B.RETRAINED:
    # the same epochs, rate and seeds, deterministic): the accuracies are their records'.
    # A pick without them (another legality) is retrained here, one seed a call (the
    # mapper ships one Setup per call).
    started = time.perf_counter()
    assert found.setup is not None
    for row, record in zip(rows, picks.values(), strict=True):
        row["accuracies"] = list(record.get("accuracies", [])) if B.RETRAINED else []
    todo = [row for row in rows if not row["accuracies"]]
    candidates = [B.candidate_of(row["choices"], layers[:n]) + tuple(S.KEEP for _ in H.GENES)
                  for row in todo]
    for seed in B.SEEDS:
        setup = dataclasses.replace(found.setup, seed=seed, train_seeds=1)
        for row, (accuracy, _) in zip(todo, mapper(S.retrain, [(setup, c)
                                                               for c in candidates]),
                                      strict=True):
            row["accuracies"].append(accuracy)
    seconds["the picks retrained"] = round(time.perf_counter() - started)
    found_so_far["partial"] = "retrained"
    save(found_so_far)
    started = time.perf_counter()
    bound = best_machine(found, rows[1]["choices"], mapper)
    seconds["the machine-only bound"] = round(time.perf_counter() - started)
    found_so_far["fixed_on_best_machine"] = bound
    save(found_so_far)
    started = time.perf_counter()
    chosen_machine = Machine.parse_key(found.result.chosen["machine"])
    assert found.result.chosen_graph is not None
    int8 = B.int8_and_cosim(found.result.chosen_graph, train_data, val, chosen_machine,
                            INT8_IMAGES)
    seconds["int8 and co-simulation"] = round(time.perf_counter() - started)
    sensitivity = []
    for weight in SRAM_WEIGHTS:
        other = dataclasses.replace(model, sram_cells_per_bit=weight)
        sensitivity.append({"weight": weight, "budget": round(other.area(REFERENCE)),
                            "chosen": round(other.area(chosen_machine))})
    del found_so_far["partial"]
    return {**found_so_far, "int8": int8, "compile_options": chosen_machine.compile_options(),
            "sram_bits": {"reference": sram_bits(REFERENCE),
                          "chosen": sram_bits(chosen_machine)},
            "sensitivity": sensitivity}


def best_machine(found: H.CodesignResult, choices: dict[str, str],
                 mapper: Any) -> dict[str, Any]:
    """The fixed-machine pick's network on every machine of the space within the budget
    (the exact cycle model, no training): the fastest, i.e. what changing the machine alone
    gives that network. The sweep's figures when the search swept that network (its
    fastest machine is on the front the sweep kept), else priced here on the workers."""
    setup = found.setup
    assert setup is not None
    n = len(setup.layers) - len(H.GENES)
    network = B.candidate_of(choices, setup.layers[:n])
    key = tuple(str(c) for c in network)
    if key in found.swept:
        pairs = [r for r in found.result.records
                 if tuple(r["choices"].values()) == key and r.get("within_budget")
                 and "cycles" in r]
        best = min(pairs, key=lambda r: (r["cycles"], r["area"]))
        return {"cycles": best["cycles"], "area": best["area"],
                "machine_text": best["machine_text"], "machines": found.swept[key],
                "swept": True}
    machines = [m for m in H.space_machines(H.DEFAULT_SPACE)
                if found.model.area(m) <= found.budget]
    candidate = network + tuple(S.KEEP for _ in H.GENES)
    costed = H.machine_costs(setup, H.Codesign(found.reference, n), [candidate], machines,
                             mapper)[0]
    machine, cost = min(costed, key=lambda c: (c[1].total, found.model.area(c[0])))
    return {"cycles": cost.total, "area": round(found.model.area(machine)),
            "machine_text": machine.describe(), "machines": len(costed), "swept": False}


def swept_rows(found: H.CodesignResult) -> list[dict[str, Any]]:
    """Each network the search swept: how many machines, and its fastest within the budget
    (the fastest of its own front, which the sweep added to the records)."""
    assert found.setup is not None
    layers = found.setup.layers
    rows = []
    for network, priced in found.swept.items():
        pairs = [r for r in found.result.records if tuple(r["choices"].values()) == network
                 and r.get("within_budget") and "cycles" in r]
        best = min(pairs, key=lambda r: (r["cycles"], r["area"]))
        rows.append({"choices": dict(zip(layers, network, strict=False)), "machines": priced,
                     "cycles": best["cycles"], "area": best["area"],
                     "machine_text": best["machine_text"]})
    return rows


def bound_run(mapper: Any, train_data: Data, val: Data) -> dict[str, Any]:
    """`--bound`: no search, no training. The committed fixed-machine search's records
    (bench/results/nas_candidates.json: its pick and which networks its retraining judged
    legal) and, for its pick and its SWEEP cheapest legal networks of distinct cost, every
    machine of the space within the budget priced (`hardware.machine_costs`: one Dask task
    per network and array shape). Then the fastest pair is compiled for its machine and
    co-simulated (its network retrained with the first seed, quantized)."""
    saved = json.loads((B.RESULTS / "nas_candidates.json").read_text(encoding="utf-8"))
    fixed = next(p for p in saved["picks"] if p["label"] == "search by cycles")
    legal = sorted((r for r in saved["search records"][1:] if r.get("legal")),
                   key=lambda r: (r["cycles"], -r["score"]))
    by_cost: dict[int, dict[str, Any]] = {}
    for record in legal:  # the best-scored legal network of each cost, as the descent
        by_cost.setdefault(record["cycles"], record)
    networks = list({json.dumps(r["choices"], sort_keys=True): r for r in
                     [fixed, *list(by_cost.values())[:SWEEP]]}.values())
    graph = B.original_graph()
    layers = S.search_space(graph, B.KINDS).layers
    model = fitted()
    budget = model.area(REFERENCE)
    setup = bound_setup(train_data, val)
    machines = [m for m in H.space_machines(H.DEFAULT_SPACE) if model.area(m) <= budget]
    candidates = [B.candidate_of(r["choices"], layers) + tuple(S.KEEP for _ in H.GENES)
                  for r in networks]
    started = time.perf_counter()
    priced = H.machine_costs(setup, H.Codesign(REFERENCE, len(layers)), candidates, machines,
                             mapper)
    seconds = {"the machines priced": round(time.perf_counter() - started)}
    rows = []
    for record, costed in zip(networks, priced, strict=True):
        machine, cost = min(costed, key=lambda c: (c[1].total, model.area(c[0])))
        # the 16x16 is within its own budget, so priced here by this compiler: the saved
        # search's cycles are its compiler's (kept as searched_cycles)
        on_reference = next(c.total for m, c in costed if m == REFERENCE)
        rows.append({"choices": record["choices"], "fixed_cycles": on_reference,
                     "searched_cycles": record["cycles"],
                     "accuracies": record["accuracies"], "machines": len(costed),
                     "cycles": cost.total, "host": cost.host,
                     "area": round(model.area(machine)), "machine": machine.key(),
                     "machine_text": machine.describe()})
    found: dict[str, Any] = {"fixed": {"choices": fixed["choices"],
                                       "cycles": rows[0]["fixed_cycles"],
                                       "searched_cycles": fixed["cycles"],
                                       "accuracies": fixed["accuracies"]},
                             "rows": rows, "budget": round(budget), "machines": len(machines),
                             "stage_seconds": seconds}
    save_bound(found)
    cosimulate_fastest(found, setup, mapper, train_data, val)
    return found


def bound_setup(train_data: Data, val: Data) -> S.Setup:
    """The Setup of `glensidec nas --hardware` on the digits CNN with bench_nas's OPTIONS."""
    program = read_program(B.EXAMPLES / "digits_cnn.gs")
    layers = S.search_space(B.original_graph(), B.KINDS).layers
    return S.Setup(format_program(program), load_weights(program),
                   layers + list(H.GENE_NAMES), REFERENCE.array(), B.OPTIONS.legality,
                   train_data.x, train_data.y, val.x, val.y, B.OPTIONS.seed,
                   B.OPTIONS.train_epochs, "digits_cnn.gs", REFERENCE.bus_bytes,
                   B.OPTIONS.train_seeds)


def cosimulate_fastest(found: dict[str, Any], setup: S.Setup, mapper: Any, train_data: Data,
                       val: Data) -> None:
    """The fastest pair of `--bound`: its network retrained with the first seed,
    quantized, compiled for its machine and co-simulated (B.int8_and_cosim)."""
    best = min(found["rows"], key=lambda r: (r["cycles"], r["area"]))
    started = time.perf_counter()
    graph = B.original_graph()
    layers = setup.layers[:len(setup.layers) - len(H.GENES)]
    candidate = B.candidate_of(best["choices"], layers) + tuple(S.KEEP for _ in H.GENES)
    trained = mapper(S.first_seed_weights, [(setup, candidate)])[0]
    network = S.apply(graph, layers, candidate[:len(layers)], T.INHERIT)
    network = network.with_layers(network.layers, trained)
    found["int8"] = B.int8_and_cosim(network, train_data, val, Machine.parse_key(
        best["machine"]), INT8_IMAGES)
    found["compile_options"] = Machine.parse_key(best["machine"]).compile_options()
    found["stage_seconds"]["the fastest pair retrained (seed 0), quantized and "
                           "co-simulated"] = round(time.perf_counter() - started)
    save_bound(found)


BOUND = B.RESULTS / "nas_codesign_bound.json"


def save_bound(found: dict[str, Any]) -> None:
    BOUND.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def bound_run_lines(found: dict[str, Any]) -> list[str]:
    """`--bound`'s table: each network's fastest machine within the budget."""
    fixed = found["fixed"]
    out = ["### The machine-only bound of the fixed search's legal networks (`--bound`)", "",
           "No search and no training: the committed fixed-machine search "
           "(bench/results/nas_candidates.json, bench_nas's run) judged these networks legal "
           "(retrained accuracy, the mean of seeds 0 and 1, >= 0.99 x the original's); each "
           f"priced on every one of the {found['machines']} machines of the space within the "
           f"budget ({found['budget']:,} cell equivalents, today's 16x16) by the exact cycle "
           "model. The fastest pair is the best any co-design over this machine space can do "
           "with these networks.", "",
           "| network | on the 16x16 | fastest machine within the budget | area | "
           "predicted cycles | x the fixed pick | accuracy (seeds 0, 1) |",
           "|---|---:|---|---:|---:|---:|---:|"]
    for row in found["rows"]:
        choices = ", ".join(f"{k} {v}" for k, v in row["choices"].items() if v != "keep")
        out.append(f"| {choices or 'original'} | {row['fixed_cycles']} | "
                   f"{machine_text(row['machine_text'])} | {row['area']:,} | {row['cycles']} | "
                   f"{fixed['cycles'] / row['cycles']:.2f}x | "
                   f"{B.accuracy_text(row['accuracies'])} |")
    best = min(found["rows"], key=lambda r: (r["cycles"], r["area"]))
    if fixed.get("searched_cycles", fixed["cycles"]) != fixed["cycles"]:
        out += ["", f"(The committed search costed its pick at {fixed['searched_cycles']} "
                f"cycles on an earlier compiler; the column 'on the 16x16' and the target are "
                f"this compiler's: {fixed['cycles']}.)"]
    out += ["", f"Target (issue 31: >= {TARGET:g}x the fixed pick's {fixed['cycles']} cycles): "
            f"the best pair is **{fixed['cycles'] / best['cycles']:.2f}x**: MISSED by any "
            "machine of this space for these networks.", ""]
    int8 = found.get("int8")
    if int8 is not None:
        out += [*B.int8_lines(int8)[2:],
                f"(The fastest pair's network retrained with seed 0, quantized; int8 accuracy "
                f"on the first {int8.get('int8_images', 597)} validation images; compiled with "
                f"`{' '.join(found['compile_options'])}`.)", ""]
    out.append("Its stages: " + ", ".join(f"{k} {v} s" for k, v in
                                          found["stage_seconds"].items()) + ".")
    if "cpu_seconds" in found:
        where = (f"--workers {found['workers']}" if isinstance(found["workers"], int)
                 else f"--scheduler {found['workers']}")
        out += ["", f"`python bench/bench_codesign.py --bound {where}`: "
                f"{found['cpu_seconds']} CPU seconds (this process, its Dask workers and the "
                f"simulator), load average {found['load']:.1f} at its end."]
    return [*out, ""]


def save(found: dict[str, Any]) -> None:
    PARTIAL.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def met(found: dict[str, Any]) -> tuple[bool, float, float, float]:
    """(met, speed-up over the fixed-machine pick, points lower than it, than the original)."""
    original, fixed, chosen = found["rows"]
    speedup = fixed["cycles"] / chosen["cycles"]
    drop = 100 * (B.mean(fixed["accuracies"]) - B.mean(chosen["accuracies"]))
    drop_original = 100 * (B.mean(original["accuracies"]) - B.mean(chosen["accuracies"]))
    int8 = found.get("int8")
    cosim = int8 is not None and int8["c_equal"] and int8["rtl_equal"] and int8["ok"] and \
        int8["predicted_array_cycles"] == int8["simulated_cycles"]
    return speedup >= TARGET and drop <= 1.0 and cosim, speedup, drop, drop_original


def recost_lines(found: dict[str, Any]) -> list[str]:
    """Whether the fixed-machine pick's cycles moved since its search (a saved search
    costed by an earlier compiler): the table shows this compiler's."""
    fixed = found["rows"][1]
    searched = fixed.get("searched_cycles", fixed["cycles"])
    if searched == fixed["cycles"]:
        return []
    return [f"The fixed-machine search (--fixed) costed its pick at {searched} cycles; on "
            f"this compiler the same network on the same machine is {fixed['cycles']}, the "
            "figure above and the one the target is judged against.", ""]


def bound_lines(found: dict[str, Any]) -> list[str]:
    """What the machine alone gives the fixed-machine pick (`best_machine`), and the
    fastest machine of each network the search swept."""
    best = found.get("fixed_on_best_machine")
    out = []
    fixed = found["rows"][1]
    if best is not None:
        out += [f"What the machine alone gives the fixed-machine pick: its network on each "
                f"of the {best['machines']} machines of the space within the budget (exact "
                f"cycle model), the fastest is {machine_text(best['machine_text'])} at "
                f"{best['cycles']} cycles, {fixed['cycles'] / best['cycles']:.2f}x its "
                f"{fixed['cycles']} on the 16x16 (area {best['area']:,}).", ""]
    swept = found.get("swept", [])
    if swept:
        out += [f"The search's sweep: its {len(swept)} cheapest legal networks each on every "
                "machine of the space within the budget (the fastest of each; the best any "
                "machine of the space does for them):", "",
                "| network | machines priced | fastest machine | area | predicted cycles | "
                "x the fixed pick |", "|---|---:|---|---:|---:|---:|"]
        for row in swept:
            choices = ", ".join(f"{k} {v}" for k, v in row["choices"].items() if v != "keep")
            out.append(f"| {choices or 'original'} | {row['machines']} | "
                       f"{machine_text(row['machine_text'])} | {row['area']:,} | "
                       f"{row['cycles']} | {fixed['cycles'] / row['cycles']:.2f}x |")
        out.append("")
    return out


def stage_lines(found: dict[str, Any]) -> list[str]:
    """Where the run's time went, stage by stage, and the co-design search's work."""
    stages = found.get("stage_seconds")
    if not stages:
        return []
    work = found.get("work")
    done = ("" if not work else " The co-design search's work: " + ", ".join(
        f"{value} {name}" for name, value in work.items()) + ".")
    return ["Its stages: " + ", ".join(f"{name} {value} s" for name, value in stages.items())
            + "." + done, ""]


def settings_text() -> str:
    """Every setting of the two searches, as the table states them."""
    fixed, joint = B.OPTIONS, CODESIGN_OPTIONS
    return (f"legality {B.legality_text(fixed)}; aging evolution (population "
            f"{fixed.population}, sample {fixed.sample}, seed {fixed.seed}) over "
            f"{fixed.budget} networks on the fixed machine and {joint.budget} pairs in the "
            f"co-design (population {joint.population}, starting from the fixed search's "
            f"{STARTING_NETWORKS} cheapest legal networks on every array shape at each "
            f"epilogue); cost bands "
            f"+-{100 * fixed.band:g} %; the {fixed.top} cheapest band winners retrained and "
            "the cheapest within a point of the original's accuracy chosen")


def machine_text(text: str) -> str:
    """A machine as the tables show it, marked when its array is larger than any that was
    synthesized (its area is the model's extrapolation)."""
    rows, cols = (int(d) for d in text.split(",")[0].split("x"))
    if not H.extrapolated(Machine(rows, cols)):
        return text
    top_rows, top_cols = H.synthesized_shape()
    return f"{text} (area extrapolated: beyond the {top_rows}x{top_cols} synthesized)"


def lines(found: dict[str, Any]) -> list[str]:
    ok, speedup, drop, drop_original = met(found)
    machines = np.prod([len(values) for values in H.DEFAULT_SPACE.values()])
    # a run before the descent and the sweep (its records have no such count)
    strategy = ("aging evolution" if "descent" not in found else
                f"aging evolution, a descent (judging {found['descent']}) and the machine "
                "sweep below")
    out = [BEGIN, "", "## Co-design: the network and the accelerator searched together", "",
           f"`glensidec nas --hardware` (glensidec/nas/hardware.py) on the digits CNN: the "
           f"same networks as above times {machines} machines ({H.HELP_SPACE}), "
           f"{found['space']} pairs; {strategy} over "
           f"{found['evaluated']} pairs ({found['legal']} legal) in {found['search_seconds']} s "
           f"(the fixed-machine search it is compared with: {found['fixed_evaluated']} "
           f"networks, {found['fixed_seconds']} s). Both searches: "
           f"{found.get('settings', settings_text())}. Each "
           "pair costed by the exact cycle model on its machine and by the area model of "
           "bench/results/area.md; legal when its network is and the area is within the "
           f"budget: today's 16x16 accelerator, {found['budget']:,} cell equivalents. "
           "Accuracy: retrained 5 epochs from inherited weights, seeds 0 and 1. The Pareto "
           "front (cycles x area, each front network's accuracy) is in nas_codesign.png.", "",
           "| pick | network | machine | area | predicted cycles | host | accuracy (seeds 0, "
           "1) |", "|---|---|---|---:|---:|---:|---:|"]
    for row in found["rows"]:
        choices = ", ".join(f"{k} {v}" for k, v in row["choices"].items() if v != "keep")
        out.append(f"| {row['label']} | {choices or '-'} | {machine_text(row['machine_text'])} | "
                   f"{row['area']:,} | {row['cycles']} | {row['host']} | "
                   f"{B.accuracy_text(row['accuracies'])} |")
    out += ["", f"Target (issue 31: >= {TARGET:g}x faster than the best network on the fixed "
            f"16x16 machine at <= 1 point lower accuracy, the pair co-simulating): "
            f"**{speedup:.2f}x**, accuracy {abs(drop):.1f} points "
            f"{'lower' if drop >= 0 else 'higher'} than the fixed-machine pick "
            f"({abs(drop_original):.1f} {'lower' if drop_original >= 0 else 'higher'} than "
            f"the original): {'met' if ok else 'MISSED'}.", "",
            *recost_lines(found),
            *bound_lines(found),
            *stage_lines(found),
            "| the Pareto front (legal networks) | machine | area | predicted cycles | "
            "accuracy (seed 0) |", "|---|---|---:|---:|---:|"]
    for row in found["front"]:
        choices = ", ".join(f"{k} {v}" for k, v in row["choices"].items() if v != "keep")
        out.append(f"| {choices or 'original'} | {machine_text(row['machine_text'])} | "
                   f"{row['area']:,} | "
                   f"{row['cycles']} | {100 * row['accuracy']:.1f} % |")
    if "partial" in found:  # a run stopped after a stage: what is missing stays missing
        return [*out, "", f"**Stopped after its stage '{found['partial']}'**: the int8 "
                "co-simulation of the chosen pair (and the SRAM-weight table) were not "
                "measured in this run.", "", END, ""]
    out += ["", "The SRAM weight of the area model is an assumption (0.25 cell equivalents "
            "a bit); the chosen machine against the budget under others:", "",
            "| SRAM weight | budget (16x16 today) | chosen machine | fits |",
            "|---:|---:|---:|---|"]
    for row in found["sensitivity"]:
        out.append(f"| {row['weight']:g} | {row['budget']:,} | {row['chosen']:,} | "
                   f"{'yes' if row['chosen'] <= row['budget'] else 'no'} |")
    int8 = found["int8"]
    out += ["", *B.int8_lines(int8)[2:],
            f"(The int8 accuracy on the first {int8.get('int8_images', 597)} validation images; "
            f"the chosen machine compiled with `{' '.join(found['compile_options'])}`.)", "",
            END, ""]
    return out


def with_bound(section: list[str]) -> list[str]:
    """The section with `--bound`'s table first, when it ran after the last full run."""
    if not BOUND.exists() or BOUND.stat().st_mtime < PARTIAL.stat().st_mtime:
        return section
    found = json.loads(BOUND.read_text(encoding="utf-8"))
    return [*section[:4], *bound_run_lines(found),
            "### The last full run of the co-design", "",
            "(Its fixed-machine pick and cycles are that run's compiler's, before one-band "
            "chunks; the bound above is today's.)", "", *section[4:]]


@contextlib.contextmanager
def dask_mapper(workers: int, scheduler: str | None) -> Iterator[Any]:
    """A DaskMapper on `workers` local worker processes, or on the cluster of an existing
    scheduler (`--scheduler ADDRESS`: Dask is how the benchmark scales out; the CPU
    seconds it reports are then this process's and its simulator's only)."""
    import dask
    from dask.distributed import Client, LocalCluster

    from glensidec.nas.commands import WORKER_CONFIG, DaskMapper

    if scheduler is not None:
        with Client(scheduler, timeout=10) as client:
            yield DaskMapper(client)
        return
    with dask.config.set(WORKER_CONFIG), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        yield DaskMapper(client)


def bound_main(workers: int = B.WORKERS, scheduler: str | None = None) -> None:
    train_data, val = B.load("digits_train.npz"), B.load("digits_val.npz")
    started = time.perf_counter()
    with dask_mapper(workers, scheduler) as mapper:
        found = bound_run(mapper, train_data, val)
    found["workers"] = workers if scheduler is None else scheduler
    found["seconds"] = round(time.perf_counter() - started)
    found["load"] = os.getloadavg()[0]
    found["cpu_seconds"] = cpu_seconds()
    found["stage_seconds"]["the whole run"] = found["seconds"]
    save_bound(found)


def cpu_seconds() -> int:
    """CPU seconds of this process and its children (the Dask workers, waited for once
    their cluster closed; the co-simulation's simulator)."""
    import resource

    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                resource.RUSAGE_CHILDREN)]
    return round(sum(u.ru_utime + u.ru_stime for u in used))


def write_section(section: list[str]) -> None:
    """The co-design section of nas.md between its markers (appended the first time)."""
    path = B.RESULTS / "nas.md"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = "\n".join(section)
    if BEGIN in text:
        before, rest = text.split(BEGIN, 1)
        text = before + block + rest.split(END, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text, encoding="utf-8")


def main(fixed_file: Path | None = None, only_fixed: bool = False,
         workers: int = B.WORKERS, scheduler: str | None = None) -> int:
    """`--fixed FILE`: step 1 saved by an earlier `--only-fixed FILE` run (a pickle of the
    fixed-machine search and its records), so the co-design can be rerun alone.
    `--workers N`: Dask worker processes (default bench_nas's, one a core)."""
    import pickle

    started = time.perf_counter()
    train_data, val = B.load("digits_train.npz"), B.load("digits_val.npz")
    fixed, memo = None, None
    if fixed_file is not None and not only_fixed:
        fixed, memo = pickle.loads(fixed_file.read_bytes())
    with dask_mapper(workers, scheduler) as mapper:
        if only_fixed and fixed_file is not None:
            program = read_program(B.EXAMPLES / "digits_cnn.gs")
            memo = {}
            fixed = S.run_search(format_program(program), load_weights(program),
                                 (train_data.x, train_data.y), (val.x, val.y),
                                 REFERENCE.array(), B.OPTIONS, mapper, memo=memo)
            fixed.chosen_graph = None
            fixed_file.write_bytes(pickle.dumps((fixed, memo)))
            print(fixed.chosen, f"{time.perf_counter() - started:.0f} s")
            return 0
        found = stage(mapper, train_data, val, fixed, memo)
    found["seconds"] = round(time.perf_counter() - started)
    found["load"] = os.getloadavg()[0]
    found["cpu_seconds"] = cpu_seconds()
    found["workers"] = workers
    save(found)
    section = lines(found)
    section.insert(-2, f"This section alone: `python bench/bench_codesign.py --workers "
                   f"{workers}` in {found['seconds']} s of wall time and "
                   f"{found['cpu_seconds']} CPU seconds (this process and its Dask workers) "
                   f"on 2 cores shared with other jobs (load average {found['load']:.1f} at "
                   f"the end), {workers} Dask workers.\n")
    write_section(section)
    print("\n".join(section))
    return 0 if met(found)[0] else 1


def options_of(arguments: list[str]) -> tuple[list[str], int, str | None] | None:
    """(the other arguments, --workers N, --scheduler ADDRESS) wherever those two stand;
    None for a malformed one (the usage is printed)."""
    rest, workers, scheduler = [], B.WORKERS, None
    words = iter(arguments)
    for word in words:
        if word in ("--workers", "--scheduler"):
            value = next(words, "")
            if word == "--workers" and value.isdigit() and int(value):
                workers = int(value)
            elif word == "--scheduler" and value and not value.startswith("-"):
                scheduler = value
            else:
                return None
        else:
            rest.append(word)
    return rest, workers, scheduler


if __name__ == "__main__":
    parsed = options_of(sys.argv[1:])
    arguments, workers, scheduler = parsed if parsed is not None else (["--help?"], 0, None)
    if arguments in (["--report-only"], ["--bound"]):
        saved = json.loads((B.RESULTS / "nas_codesign.json").read_text())
        if arguments[0] == "--bound":
            bound_main(workers, scheduler)
        write_section(with_bound(lines(saved)))
        sys.exit(0 if met(saved)[0] else 1)
    if arguments[:1] in (["--fixed"], ["--only-fixed"]) and len(arguments) == 2:
        sys.exit(main(Path(arguments[1]), arguments[0] == "--only-fixed", workers, scheduler))
    if not arguments:
        sys.exit(main(workers=workers, scheduler=scheduler))
    print(__doc__)  # --help or a mistyped option: the usage, not a long run
    sys.exit(0 if arguments in (["-h"], ["--help"]) else 2)
