"""The search: its space, its strategies (deterministic by seed) and a whole search on a
two-worker Dask LocalCluster, with no more training than one epoch of a tiny network."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")
pytest.importorskip("distributed", reason="needs the nas extra: pip install '.[nas]'")

from click.testing import CliRunner
from onnx_models import save
from test_nas_transforms import skip_net

from glensidec.cli import cli
from glensidec.frontends.importer import import_onnx
from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, read_program
from glensidec.nas import search as S
from glensidec.nas.graph import lift
from glensidec.opt.extract import parse_array_size


@pytest.fixture
def skip_model(tmp_path: Path) -> Path:
    return import_onnx(save(skip_net(), tmp_path / "skip.onnx"), tmp_path / "skip")


def data(tmp_path: Path, name: str, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    path = tmp_path / f"{name}.npz"
    np.savez(path, x=rng.standard_normal((n, 4, 8, 8)).astype(np.float32),
             y=rng.integers(0, 10, n).astype(np.int64))
    return path


def test_the_space_holds_only_applicable_choices(skip_model: Path) -> None:
    program = read_program(skip_model)
    graph = lift(program, load_weights(program))
    space = S.search_space(graph, S.SPACE)
    assert space.layers == ["a", "b", "c", "d", "fc"]
    options = {layer: [str(c) for c in choices]
               for layer, choices in zip(space.layers, space.options, strict=True)}
    # b and c are coupled by the add: the bottleneck of the pair is b's choice
    assert "bottleneck:2" in options["b"] and "bottleneck:2" not in options["c"]
    assert "group:8" not in options["a"]  # 4 inputs
    assert "bottleneck:2" not in options["fc"]  # the output
    assert "depthwise" in options["a"] and options["a"][0] == "keep"
    for layer, choices in zip(space.layers, space.options, strict=True):
        for choice in choices:
            S.apply(graph, [layer], (choice,), S.T.INHERIT)  # each one applies


def test_a_max_pool_is_a_gene_of_its_own_so_its_conv_keeps_a_choice() -> None:
    """The digits CNN's max-pools offer stride (folded into the conv before them) beside
    their convs' own options; a candidate can take both, as the machine rewards (a conv at
    stride 2 computes a quarter of the positions, and a narrower one less again)."""
    program = read_program(Path(__file__).resolve().parent.parent / "examples" /
                           "digits_cnn.gs")
    graph = lift(program, load_weights(program))
    space = S.search_space(graph, S.SPACE)
    assert space.layers == ["c1", "c2", "c2.maxpool", "c3", "c3.maxpool", "fc"]
    assert space.options[2] == space.options[4] == [S.KEEP, S.Choice("stride")]
    candidate = tuple(S.Choice.parse(c) for c in
                      ("keep", "bottleneck:2", "stride", "bottleneck:4", "keep", "keep"))
    network = S.apply(graph, space.layers, candidate, S.T.INHERIT)
    assert "c2.maxpool" not in network.layers and "c3.maxpool" in network.layers
    assert network.weights["c2_w"].shape == (16, 16, 3, 3)
    assert network.layers["c2"].op.stride == (2, 2)  # type: ignore[union-attr]
    assert (S.Choice("stride"), S.Choice("stride")) == tuple(
        c for c in S.uniform_candidates(space)[-1] if c != S.KEEP)


def fake_batches(space: S.Space) -> tuple[list[S.Candidate], Any]:
    seen: list[S.Candidate] = []

    def evaluate_batch(batch: list[S.Candidate]) -> list[dict[str, Any]]:
        seen.extend(batch)
        return [{"valid": True, "legal": True,
                 "cycles": sum(c.number for c in candidate) or 100} for candidate in batch]

    return seen, evaluate_batch


def test_exhaustive_when_the_space_fits_else_evolution_same_seed_same_result() -> None:
    space = S.Space(["p", "q"], [[S.KEEP, S.Choice("group", 2)],
                                 [S.KEEP, S.Choice("group", 2), S.Choice("group", 4)]])
    seen, batches = fake_batches(space)
    strategy, evaluated = S.candidates_for(space, S.Options(budget=6), batches)
    assert strategy == "exhaustive" and len(set(evaluated)) == 6 == len(seen)
    runs = []
    for _ in range(2):
        seen, batches = fake_batches(space)
        strategy, evaluated = S.candidates_for(space, S.Options(budget=5, population=3,
                                                                seed=4), batches)
        runs.append(evaluated)
        assert strategy == "aging evolution" and len(set(evaluated)) == 5
    assert runs[0] == runs[1]
    strategy, evaluated = S.candidates_for(space, S.Options(budget=4, strategy="random"),
                                           fake_batches(space)[1])
    assert strategy == "random" and len(evaluated) == 4


def test_the_evolution_starts_from_the_uniform_candidates() -> None:
    """Each choice two or more layers offer, made on all of them, is in the first
    population (before any random draw); a choice only one layer offers is not."""
    g2, g4, b2 = S.Choice("group", 2), S.Choice("group", 4), S.Choice("bottleneck", 2)
    space = S.Space(["p", "q", "r"], [[S.KEEP, g2, b2], [S.KEEP, g2, g4], [S.KEEP, b2]])
    uniform = S.uniform_candidates(space)
    assert uniform == [(b2, S.KEEP, b2), (g2, g2, S.KEEP)]
    strategy, evaluated = S.candidates_for(space, S.Options(budget=8, population=4),
                                           fake_batches(space)[1])
    assert strategy == "aging evolution" and evaluated[:2] == uniform


def descent_world(space: S.Space, legal_below: int) -> tuple[Any, Any, Any, list[Any]]:
    """A fake search: a candidate costs 100 minus its choices' numbers and is legal when
    those sum to at most `legal_below`; the callbacks `descend` takes, and a log of what
    was priced and judged."""
    records: dict[S.Candidate, dict[str, Any]] = {}
    log: list[Any] = []

    def priced(candidate: S.Candidate) -> dict[str, Any]:
        return {"valid": True, "cycles": 100 - sum(c.number for c in candidate)}

    def price_batch(batch: list[S.Candidate]) -> None:
        log.append(("price", len(batch)))
        for candidate in batch:
            records.setdefault(candidate, priced(candidate))

    def judge_batch(batch: list[S.Candidate]) -> None:
        log.append(("judge", list(batch)))
        for candidate in batch:
            records[candidate].update(score=1.0, legal=sum(c.number for c in candidate)
                                      <= legal_below)

    return records, price_batch, judge_batch, log


def test_the_descent_judges_cheaper_neighbours_of_the_cheapest_legal_first() -> None:
    """What an evolution's path misses: from the cheapest legal candidate it found (p
    group:2), the descent prices every single-layer change, judges those cheaper than it,
    cheapest first, and steps on from a legal one (q group:2) to the legal network two
    changes away, never judging a network dearer than the cheapest legal one."""
    g2, g4 = S.Choice("group", 2), S.Choice("group", 4)
    space = S.Space(["p", "q"], [[S.KEEP, g2, g4], [S.KEEP, g2, g4]])
    keep, start = (S.KEEP, S.KEEP), (g2, S.KEEP)
    records, price_batch, judge_batch, log = descent_world(space, legal_below=4)
    records[keep] = {"valid": True, "cycles": 100, "score": 1.0, "legal": True}
    records[start] = {"valid": True, "cycles": 98, "score": 1.0, "legal": True}
    options = S.Options(cost="cycles", descent=8)
    judged = S.descend(space, options, [keep, start], records.__getitem__, price_batch,
                       judge_batch)
    # the neighbours of the start and of the original cheaper than 98, cheapest first:
    # (g2, g4) at 94 (not legal: its numbers sum to 6), then three at 96 (legal)
    assert log[1] == ("judge", [(g2, g4), (g4, S.KEEP), (g2, g2), (S.KEEP, g4)])
    assert not records[(g2, g4)]["legal"] and records[(g2, g2)]["legal"]
    # then the neighbours of those under 96 — (g4, g2) at 94, (g4, g4) at 92 — are judged
    # and found not legal; nothing cheaper is left to price
    assert records[(g4, g2)]["legal"] is False and records[(g4, g4)]["legal"] is False
    cheapest_legal = min((c for c in records if records[c].get("legal")),
                         key=lambda c: records[c]["cycles"])
    assert records[cheapest_legal]["cycles"] == 96
    assert all(records[c]["cycles"] < 98 for c in judged)
    assert sum(len(entry[1]) for entry in log if entry[0] == "judge") <= options.descent


def test_the_descent_starts_from_distinct_costs_not_copies_of_one_network() -> None:
    """Guards bench_nas's run that judged 1 candidate: its 3 cheapest legal starts were one
    network and copies of it with a change the machine does not price (c1 bottlenecked),
    and the legal network one change from the next cost (c2's pool strided) was never
    priced. Here p's choice costs nothing; the 3 cheapest legal candidates cost 50, the
    next 70 (the best-scored of those starts), and (keep, s, b2) at 40, one change from it,
    is legal; (b2, s, b2), one change from the worse-scored 70, is not."""
    b2, b4, s = S.Choice("bottleneck", 2), S.Choice("bottleneck", 4), S.Choice("stride")
    space = S.Space(["p", "q", "r"], [[S.KEEP, b2, b4], [S.KEEP, s], [S.KEEP, b2, b4]])
    costs = {(S.KEEP, S.KEEP): 100, (S.KEEP, b2): 70, (S.KEEP, b4): 50, (s, S.KEEP): 80,
             (s, b2): 40, (s, b4): 30}
    records: dict[S.Candidate, dict[str, Any]] = {}

    def price_batch(batch: list[S.Candidate]) -> None:
        for candidate in batch:
            records.setdefault(candidate, {"valid": True, "cycles": costs[candidate[1:]]})

    def judge_batch(batch: list[S.Candidate]) -> None:
        for candidate in batch:
            records[candidate].update(score=1.0, legal=candidate[1:] != (s, b4) and
                                      candidate != (b2, s, b2))

    visited = [(S.KEEP, S.KEEP, S.KEEP), (S.KEEP, S.KEEP, b4), (b2, S.KEEP, b4),
               (b4, S.KEEP, b4), (b2, S.KEEP, b2), (S.KEEP, S.KEEP, b2),
               *((p, s, b4) for p in space.options[0])]
    price_batch(visited)
    judge_batch(visited)
    records[(b2, S.KEEP, b2)]["score"] = 0.9
    judged = S.descend(space, S.Options(descent=8), visited, records.__getitem__,
                       price_batch, judge_batch)
    assert (S.KEEP, s, b2) in judged and records[(S.KEEP, s, b2)]["legal"]
    assert S.distinct_costs(visited[1:6], lambda c: records[c]["cycles"]) == \
        [(S.KEEP, S.KEEP, b4), (b2, S.KEEP, b2)]


def test_the_descent_stops_at_its_budget() -> None:
    g2, g4 = S.Choice("group", 2), S.Choice("group", 4)
    space = S.Space(["p", "q", "r"], [[S.KEEP, g2, g4]] * 3)
    keep = (S.KEEP,) * 3
    records, price_batch, judge_batch, log = descent_world(space, legal_below=100)
    records[keep] = {"valid": True, "cycles": 100, "score": 1.0, "legal": True}
    judged = S.descend(space, S.Options(descent=5), [keep], records.__getitem__,
                       price_batch, judge_batch)
    assert len(judged) == 5 == sum(len(entry[1]) for entry in log if entry[0] == "judge")
    assert S.descend(space, S.Options(descent=0), [keep], records.__getitem__, price_batch,
                     judge_batch) == []


# slow: a Dask cluster of two worker processes and three searches, the suite's longest test
# (~150 CPU-s at load 20 before the descent above was narrowed); the marker also puts its
# module with the slow ones, early in a worker's queue (tests/conftest.py), not among the
# quick ones at the end, where a test that long can leave the other core idle.
@pytest.mark.slow
def test_a_search_on_a_two_worker_local_cluster(skip_model: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dask.distributed import Client, LocalCluster

    from glensidec.nas.commands import DaskMapper

    # The descent runs here, in the client: starting it from the cheapest legal cost alone
    # prices neighbours on the workers and judges the cheaper ones as the default three
    # starts do, with 32 compiles instead of 51 (pricing was most of this test's CPU); where
    # it starts from is the stubbed tests' matter
    # (test_the_descent_starts_from_distinct_costs_not_copies_of_one_network).
    monkeypatch.setattr(S, "DESCENT_STARTS", 1)
    program = read_program(skip_model)
    train = np.load(data(tmp_path, "train", 48, 1))
    val = np.load(data(tmp_path, "val", 24, 2))
    options = S.Options(budget=6, space=("group", "bottleneck"), legality="fisher-init",
                        threshold=0.0, train_epochs=1, top=2, seed=3)
    results = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for search_options in (options, options, replace(options, descent=2)):
            results.append(S.run_search(
                format_program(program), load_weights(program), (train["x"], train["y"]),
                (val["x"], val["y"]), parse_array_size("16x16"), search_options,
                DaskMapper(client)))
    first, second, descended = results
    # the descent (priced on the workers, then judged) adds at most its 2 candidates, each
    # cheaper than the cheapest legal one the evolution found, judged like the others
    assert [r["choices"] for r in descended.records[:7]] == \
        [r["choices"] for r in first.records]
    added = descended.records[7:]
    assert 1 <= len(added) <= 2
    assert all(r["descent"] and "score" in r and r["legal"] for r in added)
    bar = min(r["cycles"] for r in first.records if r.get("legal"))
    assert all(r["cycles"] < bar for r in added)
    assert first.records == second.records  # same seed, same result
    assert len(first.records) == 7  # the original and six candidates
    valid = [r for r in first.records if r["valid"]]
    assert len(valid) >= 2 and all(r["legal"] for r in valid)  # threshold 0
    # a combination whose second transformation no longer fits is recorded, not dropped
    assert all(r["error"] for r in first.records if not r["valid"])
    chosen = first.chosen
    assert chosen is not None and chosen.get("chosen") and "accuracy" in chosen
    assert chosen["cycles"] <= first.original["cycles"] or chosen is first.original


@pytest.mark.slow  # a two-worker Dask cluster too (--workers 2)
def test_nas_command_writes_its_outputs(skip_model: Path, tmp_path: Path) -> None:
    outdir = tmp_path / "search"
    result = CliRunner().invoke(cli, [
        "nas", str(skip_model), "--data", str(data(tmp_path, "train", 32, 1)), "--val",
        str(data(tmp_path, "val", 16, 2)), "--budget", "3", "--space", "group",
        "--legality", "fisher-init", "--threshold", "0", "--train-epochs", "1", "--top", "1",
        "--workers", "2", "-o", str(outdir)])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in outdir.iterdir())
    assert names == ["candidates.json", "chosen.gs", "chosen.npz", "glensidec-manifest.json",
                     "pareto.png", "report.md"]
    document = json.loads((outdir / "candidates.json").read_text())
    assert len(document["candidates"]) == 4
    assert (outdir / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    read_program(outdir / "chosen.gs")
    report = (outdir / "report.md").read_text()
    assert "compiled in full with its retrained weights, its prediction is" in report


def test_cost_bands_keep_the_best_scored_of_similar_cost() -> None:
    records = [{"cycles": 1000, "score": 1.0}, {"cycles": 1020, "score": 2.0},
               {"cycles": 1100, "score": 0.5}, {"cycles": 1010, "score": 2.0}]
    winners = S.band_winners(records, "cycles", 0.025)
    # 1000 and 1020 lose to 1010 (within 2.5 %); of the equal scores 1010 is cheaper;
    # 1100 is alone in its band
    assert winners == {id(records[3]), id(records[2])}
    assert S.band_winners(records, "cycles", 0.0) == {id(r) for r in records}
    assert S.band_winners(records, "cycles", 1.0) == {id(records[3])}


def test_cost_band_ties_go_to_the_cheaper() -> None:
    """The co-design scores a network once, so the same network on two machines ties: the
    faster pair must win its band (the earlier, slower one did, and the benchmark's
    co-design chose the reference machine over a faster one within the budget)."""
    slow = {"cycles": 2241, "score": 0.979}
    fast = {"cycles": 2191, "score": 0.979}
    assert S.band_winners([slow, fast], "cycles", 0.025) == {id(fast)}
    # equal scores and costs: the earlier
    twin = dict(slow)
    assert S.band_winners([slow, twin], "cycles", 0.025) == {id(slow)}


@pytest.mark.parametrize("legality", ["fisher-init", "fisher-warm", "loss-warm"])
def test_legality_starts_every_network_from_the_same_point(skip_model: Path, tmp_path: Path,
                                                           legality: str) -> None:
    """A network's legality score does not depend on the weights it inherited: the trained
    original and its candidates are scored from the same fresh, seeded start."""
    from glensidec.nas.fisher import block_outputs

    program = read_program(skip_model)
    graph = lift(program, load_weights(program))
    train = np.load(data(tmp_path, "train", 40, 1))
    setup = S.Setup(format_program(program), load_weights(program), ["a"],
                    parse_array_size("16x16"), legality, train["x"], train["y"], train["x"],
                    train["y"], seed=5, train_epochs=1)
    points = block_outputs(graph)
    rng = np.random.default_rng(0)
    trained_elsewhere = graph.with_layers(graph.layers, {
        name: (w + rng.standard_normal(w.shape)).astype(np.float32)
        for name, w in graph.weights.items()})
    score, _ = S.legality_score(graph, setup, points)
    assert S.legality_score(trained_elsewhere, setup, points)[0] == score
    reseeded = S.Setup(**{**setup.__dict__, "seed": 6})
    assert S.legality_score(graph, reseeded, points)[0] != score


def test_the_search_never_chooses_a_network_costlier_than_the_original(
        skip_model: Path, tmp_path: Path) -> None:
    """Every candidate made to cost more than the original: the original is within a point
    of its own accuracy, so it is the choice, whatever the candidates' accuracy; and none
    of them is retrained (none could be chosen)."""
    program = read_program(skip_model)
    train = np.load(data(tmp_path, "train", 24, 1))
    val = np.load(data(tmp_path, "val", 12, 2))
    options = S.Options(budget=4, space=("spatial-split",), legality="fisher-init",
                        threshold=0.0, train_epochs=1, top=2, seed=0)

    def here(function: Any, calls: list[Any]) -> list[Any]:
        results = [function(*call) for call in calls]
        if function is S.evaluate:
            for record in results:
                if record["valid"] and set(record["choices"].values()) != {"keep"}:
                    record["cycles"] += 10**6
        return results

    result = S.run_search(format_program(program), load_weights(program),
                          (train["x"], train["y"]), (val["x"], val["y"]),
                          parse_array_size("16x16"), options, here)
    legal = [r for r in result.records[1:] if r.get("legal")]
    assert legal and all(r["cycles"] > result.original["cycles"] for r in legal)
    assert not any("accuracy" in r for r in result.records[1:])
    assert result.chosen is result.original and result.retrained == [result.original]


def test_the_final_choice_averages_the_retraining_seeds(
        skip_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the digits ViT's miss (issue 31): a candidate whose mean accuracy over two
    seeds is within a point of the original's was rejected on the first seed alone. With
    `train_seeds=2` the finalists and the original are judged by the mean of seeds 0 and 1
    (training stubbed: seed 0 favours the original by 1.5 points, seed 1 the candidate)."""
    from glensidec.nas import torch_model

    def fake_train(graph: Any, data: Any, epochs: int, seed: int, learning_rate: float) -> Any:
        return SimpleNamespace(graph=graph, seed=seed, weights=graph.weights)

    def params(graph: Any) -> int:
        return sum(int(np.size(values)) for values in graph.weights.values())

    def fake_accuracy(trained: Any, data: Any) -> float:
        original = params(trained.graph) == base_params
        return {(True, 0): 0.98, (True, 1): 0.96, (False, 0): 0.965, (False, 1): 0.97}[
            (original, trained.seed)]

    program = read_program(skip_model)
    base_params = params(lift(program, load_weights(program)))
    monkeypatch.setattr(torch_model, "train", fake_train)
    monkeypatch.setattr(torch_model, "accuracy", fake_accuracy)
    train = np.load(data(tmp_path, "train", 24, 1))
    # (bottlenecks: cheaper than the original; spatial splits were too while the block's
    # 3x3 convolution after the stem stayed on the host, 7308ee0)
    options = S.Options(budget=4, space=("bottleneck",), legality="fisher-init",
                        threshold=0.0, train_epochs=1, top=2, seed=0)

    def here(function: Any, calls: list[Any]) -> list[Any]:
        return [function(*call) for call in calls]

    def search(seeds: int) -> S.Result:
        return S.run_search(format_program(program), load_weights(program),
                            (train["x"], train["y"]), (train["x"], train["y"]),
                            parse_array_size("16x16"), replace(options, train_seeds=seeds),
                            here)

    one, two = search(1), search(2)
    assert one.chosen is one.original  # 0.965 < 0.98 - 0.01 on seed 0 alone
    assert two.chosen is not two.original and two.chosen is not None
    assert two.original["accuracy"] == pytest.approx(0.97)
    assert two.chosen["accuracy"] == pytest.approx(0.9675)
    assert two.chosen["cycles"] < two.original["cycles"]
    # `train` legality scores by the same mean and keeps each seed's accuracy
    judged = S.run_search(format_program(program), load_weights(program),
                          (train["x"], train["y"]), (train["x"], train["y"]),
                          parse_array_size("16x16"),
                          replace(options, legality="train", train_seeds=2), here)
    candidate = next(r for r in judged.records[1:] if r["valid"])
    assert candidate["accuracies"] == [0.965, 0.97]
    assert candidate["score"] == pytest.approx(0.9675)
    assert judged.original["accuracies"] == [0.98, 0.96]


def test_train_legality_retrains_only_the_chosen_network_once(
        skip_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `train` legality every candidate's score is the mean accuracy of the very
    retraining the final choice makes (same epochs, rate, seeds): the choice takes the
    finalists' accuracies from their records and trains only the chosen network again,
    once, for its weights (bench_nas retrained the original and six finalists twice
    each per search). Training is stubbed: a trained network's accuracy is its seed's."""
    from glensidec.nas import torch_model

    trainings: list[int] = []

    def fake_train(graph: Any, data: Any, epochs: int, seed: int, learning_rate: float) -> Any:
        trainings.append(seed)
        return SimpleNamespace(graph=graph, seed=seed, weights=graph.weights)

    monkeypatch.setattr(torch_model, "train", fake_train)
    monkeypatch.setattr(torch_model, "accuracy",
                        lambda trained, data: 0.9 + 0.01 * trained.seed)
    program = read_program(skip_model)
    train = np.load(data(tmp_path, "train", 24, 1))
    options = S.Options(budget=4, space=("group",), legality="train", threshold=0.0,
                        train_epochs=1, top=2, seed=0, train_seeds=2)
    called: list[Any] = []

    def here(function: Any, calls: list[Any]) -> list[Any]:
        called.append(function)
        return [function(*call) for call in calls]

    result = S.run_search(format_program(program), load_weights(program),
                          (train["x"], train["y"]), (train["x"], train["y"]),
                          parse_array_size("16x16"), options, here)
    judged = sum(1 for r in result.records if "score" in r)
    assert S.retrain not in called and called.count(S.first_seed_weights) == 1
    assert len(trainings) == 2 * judged + 1 and trainings[-1] == 0
    assert result.chosen is not None
    assert result.chosen["accuracy"] == result.chosen["score"] == pytest.approx(0.905)
