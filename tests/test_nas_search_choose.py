"""The final choice (`search.choose`) with scoring and retraining stubbed: which finalists it
retrains, in what order, when it stops, and that a larger search never ends worse than a
smaller one. No network is trained here; the skip network is only transformed (numpy)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, read_program
from glensidec.nas import search as S
from glensidec.nas.graph import lift
from glensidec.opt.extract import parse_array_size

pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")

from onnx_models import save
from test_nas_transforms import skip_net

from glensidec.frontends.importer import import_onnx


@pytest.fixture(scope="module")
def skip_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[S.Setup, list[S.Candidate]]:
    """The skip network's search setup and 12 of its candidates (group and bottleneck)."""
    folder = tmp_path_factory.mktemp("skip")
    program = read_program(import_onnx(save(skip_net(), folder / "skip.onnx"), folder / "m"))
    weights = load_weights(program)
    space = S.search_space(lift(program, weights), ("group", "bottleneck"))
    empty = np.zeros((0, 4, 8, 8), np.float32), np.zeros(0, np.int64)
    setup = S.Setup(format_program(program), weights, space.layers, parse_array_size("16x16"),
                    "loss-warm", *empty, *empty, seed=0, train_epochs=1)
    candidates = [c for c in itertools.product(*space.options)][1:13]
    return setup, candidates


class Stub:
    """A mapper whose retraining returns the table's accuracy (by cost) and counts its
    calls; the chosen network's weights are its inherited ones."""

    def __init__(self, setup: S.Setup, records: dict[S.Candidate, dict[str, Any]],
                 accuracy: dict[float, float]):
        self.setup, self.records, self.accuracy = setup, records, accuracy
        self.batches: list[list[float]] = []

    def __call__(self, function: Any, calls: list[Any]) -> list[Any]:
        if function is S.retrain:
            costs = [self.records[c]["cycles"] for _, c in calls]
            self.batches.append(costs)
            return [(self.accuracy[cost], {}) for cost in costs]
        assert function is S.first_seed_weights
        return [S.apply(S.original(self.setup), self.setup.layers, c, S.T.INHERIT).weights
                for _, c in calls]


def search(setup: S.Setup, keep: S.Candidate, table: list[tuple[S.Candidate, float, float]],
           accuracy: dict[float, float], network: Any = None,
           **options: Any) -> tuple[S.Result, Stub]:
    """`choose` over the original (1,000 cycles) and the table's legal candidates (candidate,
    cycles, score), in that order."""
    def record(candidate: S.Candidate, cycles: int, score: float) -> dict[str, Any]:
        return {"choices": {layer: str(choice) for layer, choice in
                            zip(setup.layers, candidate, strict=True)},
                "cycles": cycles, "score": score, "legal": True, "valid": True}

    records = {keep: record(keep, 1000, 1.0)}
    for candidate, cycles, score in table:
        records[candidate] = record(candidate, cycles, score)
    result = S.Result(S.Space([], []), "stub", records[keep])
    stub = Stub(setup, records, {1000: 0.98, **accuracy})
    S.choose(result, setup, list(records), records, S.Options(**options), stub,
             **({} if network is None else {"network": network}))
    return result, stub


def keep_of(setup: S.Setup) -> S.Candidate:
    return tuple(S.KEEP for _ in setup.layers)


def test_finalists_are_retrained_past_the_first_top_until_one_keeps_the_accuracy(
        skip_setup: tuple[S.Setup, list[S.Candidate]]) -> None:
    """The digits CNN's miss at budget 64: its three cheapest finalists all lost more than
    a point, and the original was kept. The fourth keeps the accuracy: it is chosen."""
    setup, (a, b, c, d, e, *_) = skip_setup
    table = [(a, 300, 1.0), (b, 400, 1.0), (c, 500, 1.0), (d, 600, 1.0), (e, 700, 1.0)]
    accuracy = {300: 0.90, 400: 0.95, 500: 0.969, 600: 0.975, 700: 0.98}
    result, stub = search(setup, keep_of(setup), table, accuracy, top=3)
    assert result.chosen is not None and result.chosen["cycles"] == 600
    # `top` at a time, each batch the finalists cheaper than the best kept before it
    assert stub.batches == [[1000], [300, 400, 500], [600, 700]]
    assert [r["cycles"] for r in result.retrained] == [1000, 300, 400, 500, 600, 700]
    assert result.retrain_floor == pytest.approx(0.97)


def test_a_larger_search_never_ends_worse_than_a_smaller_one(
        skip_setup: tuple[S.Setup, list[S.Candidate]]) -> None:
    """A small search saw one cheap network that keeps the accuracy; a larger one saw it
    too, and four cheaper ones besides that all fail: it must not end on the original."""
    setup, (a, b, c, d, e, *_) = skip_setup
    accuracy = {300: 0.90, 350: 0.92, 400: 0.95, 450: 0.96, 600: 0.975}
    small, _ = search(setup, keep_of(setup), [(e, 600, 1.0)], accuracy)
    large, stub = search(setup, keep_of(setup), [(a, 300, 1.0), (b, 350, 1.0), (c, 400, 1.0),
                                                (d, 450, 1.0), (e, 600, 1.0)], accuracy)
    assert small.chosen is not None and large.chosen is not None
    assert small.chosen["cycles"] == large.chosen["cycles"] == 600
    assert stub.batches == [[1000], [300, 350, 400], [450, 600]]


def test_a_failed_band_winner_gives_its_place_to_the_next_of_its_band(
        skip_setup: tuple[S.Setup, list[S.Candidate]]) -> None:
    """Within a cost band only the best-scored is a finalist; when it fails, the band's next
    best is one (the old rule never retrained it, and chose the original)."""
    setup, (a, b, *_) = skip_setup
    # 500 and 505 are one band (+-2.5 %); 505 scores higher, fails; 500 keeps the accuracy
    result, stub = search(setup, keep_of(setup), [(a, 500, 0.9), (b, 505, 1.0)],
                          {500: 0.975, 505: 0.9})
    assert stub.batches == [[1000], [505], [500]]
    assert result.chosen is not None and result.chosen["cycles"] == 500


def test_the_retrain_budget_bounds_the_finalists_retrained(
        skip_setup: tuple[S.Setup, list[S.Candidate]]) -> None:
    """`retrain` finalists at most: when they all fail the original is kept, and no
    finalist dearer than the original is ever retrained (it could not be chosen)."""
    setup, (a, b, c, d, *_) = skip_setup
    table = [(a, 300, 1.0), (b, 400, 1.0), (c, 500, 1.0), (d, 1200, 1.0)]
    accuracy = {300: 0.5, 400: 0.5, 500: 0.98, 1200: 0.99}
    result, stub = search(setup, keep_of(setup), table, accuracy, top=1, retrain=2)
    assert stub.batches == [[1000], [300], [400]]
    assert result.chosen is result.original
    everything, stub = search(setup, keep_of(setup), table, accuracy, top=1, retrain=10)
    assert stub.batches == [[1000], [300], [400], [500]]
    assert everything.chosen is not None and everything.chosen["cycles"] == 500


def test_a_network_is_retrained_once_whatever_else_its_candidates_choose(
        skip_setup: tuple[S.Setup, list[S.Candidate]]) -> None:
    """The co-design's pairs: one network on two machines is two candidates of two costs.
    Its accuracy is the machine's no matter: retrained once, and the second candidate
    costs none of the retrain budget."""
    setup, (a, b, c, *_) = skip_setup
    same = {b: a}  # b stands for a on another machine
    result, stub = search(setup, keep_of(setup), [(a, 300, 1.0), (b, 350, 1.0), (c, 400, 1.0)],
                          {300: 0.5, 400: 0.98}, network=lambda n: same.get(n, n), top=1,
                          retrain=2)
    assert stub.batches == [[1000], [300], [400]]
    assert [r["cycles"] for r in result.retrained] == [1000, 300, 350, 400]
    assert result.retrained[2]["accuracy"] == 0.5
    assert result.chosen is not None and result.chosen["cycles"] == 400


def test_the_report_lists_every_finalist_retrained_and_by_how_much_it_failed(
        skip_setup: tuple[S.Setup, list[S.Candidate]]) -> None:
    setup, (a, b, *_) = skip_setup
    result, _ = search(setup, keep_of(setup), [(a, 300, 1.0), (b, 400, 1.0)],
                       {300: 0.9, 400: 0.975})
    rows = [line for line in S.retrained_md(result) if line.startswith("| ")][1:]
    assert len(rows) == 3
    assert rows[0].startswith("| original | - | 1000 |") and "98.0 %" in rows[0]
    assert rows[1].split(" | ")[1:] == [str(S.describe_choices(result.retrained[1])), "300",
                                        "1", "90.0 %", "-8.0", "failed |"]
    assert rows[2].split(" | ")[3:] == ["1", "97.5 %", "-0.5", "kept: chosen |"]
