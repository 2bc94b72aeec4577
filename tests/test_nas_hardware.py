"""Co-design (`glensidec nas --hardware`): the area model against the synthesized grid, the
machine genes, the exact cost of a pair, the search's plumbing (legality and retraining
stubbed: no training) and the command's one-line errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")
pytest.importorskip("distributed", reason="needs the nas extra: pip install '.[nas]'")

from test_nas_hostile import DIGITS, nas, no_dask  # noqa: F401  (a fixture)

from glensidec.errors import GlensideError
from glensidec.hardware import area
from glensidec.hardware.area import Machine
from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, read_program
from glensidec.nas import hardware as H
from glensidec.nas import search as S
from glensidec.nas import transforms as T
from glensidec.nas.cost import network_cost
from glensidec.nas.graph import lift


def test_machine_keys_and_compile_options_round_trip() -> None:
    machine = Machine(8, 32, 64 * 1024, 256, 32)
    assert Machine.parse_key(machine.key()) == machine
    assert machine.compile_options() == ["--array", "8x32", "--scratchpad", "64KiB",
                                         "--accumulator", "32KiB", "--dram-bandwidth", "32"]
    assert area.size_text(3000) == "3000" and area.size_text(1 << 20) == "1MiB"
    # the epilogue's lanes: the default is the old key (and equal to lanes 0), others add
    # a field and an option
    assert Machine(16, 16, epilogue_lanes=4) == Machine(16, 16)
    assert Machine(16, 16).key() == "16x16/262144/1024/16"
    wide = Machine(16, 32, 16 * 1024, 256, 32, 32)
    assert wide.key() == "16x32/16384/256/32/32" and Machine.parse_key(wide.key()) == wide
    assert wide.compile_options()[-2:] == ["--epilogue-lanes", "32"]
    assert "epilogue 32 lanes" in wide.describe()
    # the rows a DMA write carries: a field after the lanes, and an option
    written = Machine(16, 32, 16 * 1024, 256, 64, 16, write_rows=4)
    assert written.key() == "16x32/16384/256/64/16/w4"
    assert Machine.parse_key(written.key()) == written
    assert Machine.parse_key("16x16/262144/1024/64/w2") == Machine(16, 16, bus_bytes=64,
                                                                   write_rows=2)
    assert written.compile_options()[-4:] == ["--epilogue-lanes", "16", "--dma-write-rows",
                                              "4"]
    assert "4 rows a DMA write" in written.describe()
    # the weight rows a cycle into the array: a field after the rows a write, an option
    loaded = dataclasses.replace(written, weight_load_rows=4)
    assert loaded.key() == "16x32/16384/256/64/16/w4/l4"
    assert Machine.parse_key(loaded.key()) == loaded
    assert Machine.parse_key("16x16/262144/1024/16/l2") == Machine(16, 16, weight_load_rows=2)
    assert loaded.compile_options()[-2:] == ["--weight-load-rows", "4"]
    assert "4 weight rows a cycle" in loaded.describe()


def test_sram_bits_are_what_yosys_counted_on_every_synthesized_configuration() -> None:
    """On every configuration synthesized from today's RTL (those of earlier RTL counted
    another design's queues: bench/results/area.md marks them); today's RTL itself is
    counted afresh below, so an RTL change after the grid's synthesis still has a check."""
    configurations = area.measured()["configurations"]
    assert len(configurations) >= len(area.FEATURES) + 1
    for key, row in configurations.items():
        if area.current(row):
            assert area.sram_bits(Machine.parse_key(key)) == row["memory_bits"], key


@pytest.mark.slow
@pytest.mark.parametrize("machine", [Machine(4, 8, 16384, 256, 8),
                                     Machine(8, 16, 65536, 256, 16, 16)], ids=str)
def test_sram_bits_are_what_yosys_counts_in_todays_rtl(machine: Machine,
                                                       tmp_path: Path) -> None:
    """Yosys's memory bits of today's ws_accel after `proc` (the area script's count, a few
    seconds: no synthesis) equal `area.sram_bits` at that machine's parameters."""
    import shutil
    import subprocess

    from glensidec.hardware.commands import accel_config_for
    from glensidec.resources import resource_dir

    if shutil.which("yosys") is None:
        pytest.skip("needs yosys")
    parameters = accel_config_for(machine.array(), machine.scratchpad_bytes,
                                  machine.bus_bytes, acc_depth=machine.accumulator_rows,
                                  epilogue_lanes=machine.epilogue_lanes).rtl_parameters()
    sources = " ".join(str(p) for p in sorted(resource_dir("rtl").glob("ws_*.v")))
    chparams = " ".join(f"-set {k} {v}" for k, v in parameters.items())
    script = tmp_path / "bits.ys"
    script.write_text(f"read_verilog {sources}\nchparam {chparams} ws_accel\n"
                      f"hierarchy -top ws_accel\nproc\n"
                      f"tee -q -o {tmp_path / 'stat.txt'} stat -top ws_accel\n")
    subprocess.run(["yosys", "-q", "-s", str(script)], check=True, capture_output=True,
                   timeout=600)
    bits = [int(line.split()[-1]) for line in (tmp_path / "stat.txt").read_text().splitlines()
            if "Number of memory bits:" in line]
    assert max(bits) == area.sram_bits(machine)


def test_the_fit_recovers_a_linear_law_exactly() -> None:
    truth = (700.0, 19_000.0, 45.0, 30_000.0)
    assert len(truth) == len(area.FEATURES)
    machines = [Machine(r, c, bus_bytes=b) for r, c, b in
                [(4, 8, 8), (8, 8, 32), (8, 32, 64), (16, 16, 16), (32, 8, 16), (4, 32, 8),
                 (32, 32, 32)]]
    rows = [(m, round(float(np.dot(truth, area.features(m))))) for m in machines]
    fitted = area.fit(rows)
    for machine, cells in rows:
        assert abs(area.AreaModel(fitted).logic_cells(machine) - cells) < 1.0


def test_the_fitted_model_tracks_the_synthesized_cells() -> None:
    """A wrong feature or a wrong JSON would show here: every measured configuration,
    fitted, left out of a refit or held out (when any is synthesized), within 15 %
    (bench/results/area.md states the exact errors)."""
    model = area.fitted()
    quality = area.quality(model)
    assert quality["fit_max"] < 15 and quality["loo_max"] < 15, quality
    held = [key for key, row in area.measured()["configurations"].items()
            if row["role"] == "held out"]
    assert not held or quality["held_max"] < 15, quality
    reference = Machine(16, 16)
    assert model.area(reference) == pytest.approx(
        model.logic_cells(reference) + area.SRAM_CELLS_PER_BIT * area.sram_bits(reference))


def test_the_lanes_cost_what_the_epilogue_synthesized_alone_costs() -> None:
    """Per module, the accelerator's cells are its modules' summed: a machine with other
    epilogue lanes differs from the default by ws_epilogue's cells at those lanes less at
    the default. The epilogue fit tracks its synthesized rows, a lane costs cells, and the
    whole accelerators synthesized with other lanes (held out) are predicted within 15 %."""
    model = area.fitted()
    rows = area.epilogue_rows()
    assert len(rows) >= len(area.EPILOGUE_FEATURES)
    for cols, lanes, cells in rows:
        predicted = float(np.dot(model.epilogue, area.epilogue_features(cols, lanes)))
        assert abs(predicted / cells - 1) < 0.15, (cols, lanes, cells, predicted)
    per_lane = model.epilogue[0]
    assert per_lane > 1000
    wide = Machine(16, 16, epilogue_lanes=16)
    assert model.logic_cells(wide) - model.logic_cells(Machine(16, 16)) == \
        pytest.approx(12 * per_lane)
    assert model.area(wide) > model.area(Machine(16, 16))
    others = {key: row for key, row in area.measured()["configurations"].items()
              if not Machine.parse_key(key).default_lanes}
    assert others and all(row["role"] == "held out" for row in others.values())
    for key, row in others.items():
        assert abs(model.logic_cells(Machine.parse_key(key)) / row["cells"] - 1) < 0.15, key


def test_rows_a_dma_write_add_the_cells_synthesized_alone() -> None:
    """W rows a DMA write: the cells ws_dma_load and ws_spad synthesized alone add over W = 1
    (area_cells.json "write") are fitted within 10 %, a machine's logic cells grow by the
    fit's term and nothing else (its SRAM bits stay), and W = 1 adds nothing."""
    model = area.fitted()
    deltas = area.write_rows_deltas()
    assert len(deltas) >= len(area.WRITE_FEATURES)
    for row_bytes, bus, write_rows, cells in deltas:
        predicted = float(np.dot(model.write, area.write_features(row_bytes, bus, write_rows)))
        assert cells > 0 and abs(predicted / cells - 1) < 0.10, (row_bytes, bus, write_rows)
    base = Machine(16, 32, 16 * 1024, 256, 64, 16)
    for write_rows in (2, 4):
        wide = dataclasses.replace(base, write_rows=write_rows)
        term = float(np.dot(model.write, area.write_features(32, 64, write_rows)))
        assert model.logic_cells(wide) - model.logic_cells(base) == pytest.approx(term)
        assert term > 0 and area.sram_bits(wide) == area.sram_bits(base)
    assert area.write_features(16, 64, 1) == [0, 0]


def test_weight_rows_a_cycle_add_the_cells_synthesized_alone() -> None:
    """L weight rows a cycle: the cells ws_top and ws_spad synthesized alone add over L = 1
    (area_cells.json "load") are fitted within 5 %, a machine's logic cells grow by the
    fit's term and nothing else (its SRAM bits stay), and L = 1 adds nothing."""
    model = area.fitted()
    deltas = area.weight_load_deltas()
    assert len(deltas) > len(area.LOAD_FEATURES)
    for rows, cols, write, load, cells in deltas:
        row_bytes = 1 << (max(rows, cols) - 1).bit_length()
        predicted = float(np.dot(model.load, area.load_features(cols, row_bytes, write, load)))
        assert cells > 0 and abs(predicted / cells - 1) < 0.05, (rows, cols, write, load)
    base = Machine(16, 16, 16 * 1024, 256, 64, 16, write_rows=4)
    loaded = dataclasses.replace(base, weight_load_rows=4)
    term = float(np.dot(model.load, area.load_features(16, 16, 4, 4)))
    assert model.logic_cells(loaded) - model.logic_cells(base) == pytest.approx(term)
    assert term > 0 and area.sram_bits(loaded) == area.sram_bits(base)
    assert area.load_features(16, 16, 4, 1) == [0, 0]


def test_an_earlier_configuration_counts_todays_epilogue_in_place_of_its_own() -> None:
    """A configuration synthesized from an earlier RTL, its epilogue measured alone on that
    RTL, is fitted with today's epilogue instead (per module the cells add up); one of
    today's RTL, or without its epilogue's count, as synthesized."""
    epilogue = (1000.0, 10.0, 100.0)  # a lane, a column, the rest
    key = "16x16/262144/1024/16"  # 16 columns, 4 lanes: today's epilogue 4,260 cells
    earlier = {"cells": 50_000, "epilogue_cells": 9_000, "rtl": "an earlier digest"}
    assert area.cells_today(key, earlier, epilogue) == 50_000 - 9_000 + 4_260
    assert area.cells_today(key, {**earlier, "rtl": area.rtl_digest()}, epilogue) == 50_000
    assert area.cells_today(key, {"cells": 50_000, "rtl": "an earlier digest"},
                            epilogue) == 50_000


def test_machines_beyond_the_synthesized_arrays_are_marked_extrapolated() -> None:
    """The area model measured arrays up to the largest synthesized rows and columns; a
    64-column machine of the default space is its extrapolation (the co-design's tables
    and plot say so)."""
    synthesized = [Machine.parse_key(k) for k in area.measured()["configurations"]]
    rows, cols = H.synthesized_shape()
    assert (rows, cols) == (max(m.rows for m in synthesized), max(m.cols for m in synthesized))
    assert not any(H.extrapolated(m) for m in synthesized)
    assert H.extrapolated(Machine(rows, 2 * cols)) and H.extrapolated(Machine(2 * rows, cols))
    assert not H.extrapolated(Machine(16, 16))


def test_the_machine_space_and_its_errors() -> None:
    assert H.parse_space("") == H.DEFAULT_SPACE
    space = H.parse_space("rows=16,8 scratchpad=32KiB bus=64")
    assert space["rows"] == (8, 16) and space["scratchpad"] == (32 * 1024,)
    assert space["bus"] == (64,) and space["cols"] == H.DEFAULT_SPACE["cols"]
    for text, message in [
            ("banks=4", "--hardware: unknown machine parameter 'banks' (known: rows, cols,"),
            ("rows=", "--hardware: 'rows=' gives no values"),
            ("rows=eight", "--hardware rows: 'eight' is not a whole number"),
            ("rows=0", "--hardware rows: 0 is not a positive size"),
            ("scratchpad=lots", "--hardware scratchpad takes a size in bytes"),
            ("cols=8,12 epilogue=8", "--hardware epilogue: 8 cycles a row needs columns it "
             "divides, not 12"),
            ("rows=4,16 load=1,8", "--hardware load: the array takes a power of two weight "
             "rows a cycle, at most its rows (4), not 8"),
            ("load=3", "--hardware load: the array takes a power of two")]:
        with pytest.raises(GlensideError) as error:
            H.parse_space(text)
        assert error.value.message.startswith(message), error.value.message


def test_keep_is_the_reference_machine_and_genes_change_only_their_part() -> None:
    reference = Machine(16, 16, bus_bytes=16)
    options = H.gene_options(reference, H.DEFAULT_SPACE)
    assert [o[0] for o in options] == [S.KEEP] * len(H.GENES)
    assert S.Choice("rows", 16) not in options[0] and S.Choice("rows", 8) in options[0]
    assert H.machine_of(reference, tuple(S.KEEP for _ in H.GENES)) == reference
    genes = (S.Choice("rows", 8), S.KEEP, S.KEEP, S.KEEP, S.Choice("bus", 64), S.KEEP,
             S.KEEP, S.KEEP)
    assert H.machine_of(reference, genes) == Machine(8, 16, bus_bytes=64)
    # the epilogue gene is cycles a row: the lanes follow the columns
    genes = (S.KEEP, S.Choice("cols", 32), S.KEEP, S.KEEP, S.KEEP, S.Choice("epilogue", 1),
             S.KEEP, S.KEEP)
    assert H.machine_of(reference, genes) == Machine(16, 32, epilogue_lanes=32)
    genes = (S.KEEP, S.Choice("cols", 32), S.KEEP, S.KEEP, S.KEEP, S.KEEP, S.KEEP, S.KEEP)
    assert H.machine_of(reference, genes).epilogue_lanes == 8  # 4 cycles a row, as today
    # the rows a DMA write carries: a machine of their own, and back to its genes
    genes = (S.KEEP,) * 6 + (S.Choice("write", 4), S.KEEP)
    assert H.machine_of(reference, genes) == Machine(16, 16, write_rows=4)
    assert H.genes_of(reference, Machine(16, 16, write_rows=4)) == genes
    # and the weight rows a cycle
    genes = (S.KEEP,) * 7 + (S.Choice("load", 4),)
    assert H.machine_of(reference, genes) == Machine(16, 16, weight_load_rows=4)
    assert H.genes_of(reference, Machine(16, 16, weight_load_rows=4)) == genes


def test_area_budgets_and_their_errors() -> None:
    model = area.fitted()
    reference = Machine(16, 16)
    assert H.parse_budget(None, reference, model) == model.area(reference)
    assert H.parse_budget("1.5M", reference, model) == 1.5e6
    assert H.parse_budget("900k", reference, model) == 9e5
    assert H.parse_budget("8x8", reference, model) == model.area(Machine(8, 8))
    assert H.parse_budget("1e6", reference, model) == 1e6
    for text in ("lots", "-3", "0", "16x", "nan", "inf"):
        with pytest.raises(GlensideError) as error:
            H.parse_budget(text, reference, model)
        assert error.value.message.startswith(f"--area-budget {text}: "), error.value.message
    with pytest.raises(GlensideError) as error:
        H.budget_fits(reference, H.DEFAULT_SPACE, 1000.0, model)
    assert "fits no machine of the space (the smallest is" in error.value.message


def test_a_pair_costs_what_the_network_search_costs_on_the_same_machine() -> None:
    """The co-design's memoised cost (one extraction per array shape, lowered per memory
    configuration) is the pipeline's prediction: on the reference machine it equals
    cost.network_cost, and on another machine the pipeline's own compile."""
    program = read_program(DIGITS)
    graph = lift(program, load_weights(program))
    reference = Machine(16, 16)
    assert H.pair_cost(graph, reference) == network_cost(graph, reference.array())
    other = Machine(8, 32, 32 * 1024, 256, 32)
    assert H.pair_cost(graph, other) == H.compiled_pair_cost(graph, other)
    assert H.pair_cost(graph, other) != H.pair_cost(graph, reference)
    # more lanes: the same pipeline's figure, fewer cycles (c1's 64 rows wait less)
    lanes = Machine(8, 32, 32 * 1024, 256, 32, 32)
    assert H.pair_cost(graph, lanes) == H.compiled_pair_cost(graph, lanes)
    assert H.pair_cost(graph, lanes).total < H.pair_cost(graph, other).total


def test_a_machine_compile_refuses_is_an_invalid_pair_not_a_crash() -> None:
    candidate = (S.KEEP, S.Choice("rows", 32), S.Choice("cols", 32),
                 S.Choice("scratchpad", 256), S.KEEP, S.KEEP, S.KEEP, S.KEEP, S.KEEP)
    space = S.Space(["c1", *H.GENE_NAMES], [[S.KEEP]] * 8)
    scored = {"valid": True, "score": 1.0, "params": 1, "macs": 1}
    record = H.pair_record(candidate, space, 1, Machine(16, 16), area.fitted(), 1e9, scored)
    assert record["valid"] is False and record["error"].startswith("--scratchpad 256: ")


def test_the_pareto_front_keeps_what_nothing_beats_in_both() -> None:
    records = [{"area": 3, "cycles": 10}, {"area": 1, "cycles": 50}, {"area": 2, "cycles": 50},
               {"area": 2, "cycles": 20}, {"area": 4, "cycles": 10}, {"area": 5, "cycles": 5}]
    assert H.pareto_front(records) == [records[1], records[3], records[0], records[5]]


def stub_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Legality: fewer MACs score lower, smoothly (every candidate kept above 0.5 x); no
    retraining: accuracy falls with the MACs removed. Deterministic, no torch."""
    from glensidec.nas.cost import params_and_macs

    def score(graph: Any, setup: Any, points: Any) -> tuple[float, None]:
        return float(sum(m for _, m in params_and_macs(graph).values())) ** 0.1, None

    def retrain(setup: S.Setup, candidate: S.Candidate) -> tuple[float, dict[str, Any]]:
        graph = S.apply(S.original(setup), setup.layers, candidate, T.INHERIT)
        macs = sum(m for _, m in params_and_macs(graph).values())
        return 0.9 + macs / 6e7, graph.weights

    monkeypatch.setattr(S, "legality_score", score)
    monkeypatch.setattr(S, "retrain", retrain)


def test_a_codesign_search_without_training(monkeypatch: pytest.MonkeyPatch) -> None:
    stub_training(monkeypatch)
    program = read_program(DIGITS)
    x = np.zeros((4, 1, 8, 8), np.float32)
    y = np.zeros(4, np.int64)
    reference = Machine(16, 16)
    space = H.parse_space("rows=8,16 cols=16,32 scratchpad=32KiB accumulator=1024 bus=16")
    model = area.fitted()
    options = S.Options(budget=6, space=("bottleneck",), threshold=0.5, top=2,
                        population=4)

    def mapper(function: Any, calls: list[Any]) -> list[Any]:
        return [function(*call) for call in calls]

    found = H.run_codesign(format_program(program), load_weights(program), (x, y), (x, y),
                           reference, space, model.area(reference), options, mapper,
                           model=model)
    result = found.result
    assert result.records[0] is result.original and result.original["legal"]
    assert len(result.records) == 6  # the budget, the original among them
    # the first population: the original network on every array shape of the space
    first = {(r["machine"].split("/")[0], tuple(r["choices"].values()))
             for r in result.records[:4]}
    keep = ("keep", "keep", "keep")
    assert first == {("8x16", keep), ("8x32", keep), ("16x16", keep), ("16x32", keep)}
    for record in result.records:
        # unrounded: the reference machine is within a budget of its own area
        machine = Machine.parse_key(record["machine"])
        assert record["within_budget"] == (model.area(machine) <= found.budget)
        assert record["legal"] == (record["network_legal"] and record["within_budget"])
    chosen = result.chosen
    assert chosen is not None
    assert chosen["legal"] or chosen is result.original
    assert chosen["cycles"] <= result.original["cycles"]
    assert found.front and all(r.get("front") and "accuracy" in r for r in found.front)
    assert H.check_estimate(found) == chosen["cycles"]  # the stub kept the weights
    png = H.pareto_png(found)
    assert png[:4] == b"\x89PNG"
    report = H.report_md(found, options, chosen["cycles"]).decode()
    assert "## The Pareto front" in report and " ".join(
        Machine.parse_key(chosen["machine"]).compile_options()) in report
    assert json.loads(H.machine_json(found))["rows"] == Machine.parse_key(
        chosen["machine"]).rows


def test_the_descent_and_the_sweep_price_pairs_as_the_exact_model_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the evolution: the joint descent judges single-gene neighbours of the cheapest
    legal pairs (a machine change of a judged network costs it no training), and the sweep
    prices every machine within the budget for the cheapest legal network, keeping that
    network's own front: its fastest pair is the fastest any machine of the space within
    the budget runs that network, priced one machine at a time here."""
    stub_training(monkeypatch)
    program = read_program(DIGITS)
    x = np.zeros((4, 1, 8, 8), np.float32)
    y = np.zeros(4, np.int64)
    reference = Machine(16, 16)
    space = H.parse_space("rows=8,16 cols=16 scratchpad=32KiB accumulator=1024 bus=16,32 "
                          "epilogue=1,4")
    model = area.fitted()
    budget = model.area(reference)
    options = S.Options(budget=6, space=("bottleneck",), threshold=0.5, top=2,
                        population=4, descent=2)
    scored: list[S.Candidate] = []

    def mapper(function: Any, calls: list[Any]) -> list[Any]:
        if function is H.round_task:
            scored.extend(call[3] for call in calls if call[2] != "pair")
        return [function(*call) for call in calls]

    found = H.run_codesign(format_program(program), load_weights(program), (x, y), (x, y),
                           reference, space, budget, options, mapper, model=model, sweep=1)
    records = found.result.records
    assert found.setup is not None
    # a network is scored once, whatever machines it is priced on
    assert len(scored) == len(set(scored))
    for record in records:
        if record.get("descent"):
            assert "score" in record and "cycles" in record
            assert record["legal"] == (record["network_legal"] and record["within_budget"])
    (network, priced), = found.swept.items()
    within = [m for m in H.space_machines(space) if model.area(m) <= budget]
    assert priced == len(within) > 0
    candidate = tuple(S.Choice.parse(c) for c in network) + tuple(S.KEEP for _ in H.GENES)
    graph = S.apply(S.original(found.setup), found.setup.layers, candidate, T.INHERIT)
    fastest = min(H.pair_cost(graph, m).total for m in within)
    mine = [r for r in records if tuple(r["choices"].values()) == network
            and r["within_budget"]]
    assert min(r["cycles"] for r in mine) == fastest
    assert all(r["legal"] for r in mine)


@pytest.mark.parametrize(("words", "message"), [
    (("--area-budget", "1M"), "error: --area-budget needs --hardware"),
    (("--hardware", "banks=4"), "error: --hardware: unknown machine parameter 'banks'"),
    (("--hardware", "", "--area-budget", "plenty"), "error: --area-budget plenty: give cell "
     "equivalents"),
    (("--hardware", "", "--area-budget", "10"), "error: --area-budget: 10 cell equivalents "
     "fits no machine of the space"),
    (("--sweep", "2"), "error: --sweep needs --hardware"),
])
def test_nas_hardware_refuses_bad_options_in_one_line_before_any_dask_work(
        tmp_path: Path, no_dask: None, words: tuple[str, ...], message: str) -> None:  # noqa: F811
    error, result = nas(tmp_path, *words)
    assert result.exit_code != 0 and error.startswith(message), error
    assert "\n" not in error and not (tmp_path / "out").exists()


def test_nas_hardware_writes_the_front_and_the_machine(tmp_path: Path) -> None:
    """The command on a two-worker cluster (one epoch of the digits CNN on 32 images for
    the finalists; legality by Fisher at initialisation, no warm-up)."""
    from click.testing import CliRunner

    from glensidec.cli import cli

    with np.load(DIGITS.with_name("digits_train.npz")) as archive:
        np.savez(tmp_path / "train.npz", x=archive["x"][:32], y=archive["y"][:32])
        np.savez(tmp_path / "val.npz", x=archive["x"][32:48], y=archive["y"][32:48])
    outdir = tmp_path / "codesign"
    result = CliRunner().invoke(cli, [
        "nas", str(DIGITS), "--data", str(tmp_path / "train.npz"), "--val",
        str(tmp_path / "val.npz"), "--budget", "4", "--space", "bottleneck",
        "--legality", "fisher-init", "--threshold", "0", "--train-epochs", "1", "--top", "1",
        "--hardware", "rows=8,16 cols=16 scratchpad=64KiB accumulator=1024 bus=16,32",
        "--workers", "2", "-o", str(outdir)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in outdir.iterdir()) == [
        "candidates.json", "chosen.gs", "chosen.npz", "glensidec-manifest.json",
        "machine.json", "pareto.png", "report.md"]
    machine = json.loads((outdir / "machine.json").read_text())
    candidates = json.loads((outdir / "candidates.json").read_text())["candidates"]
    chosen = [r for r in candidates if r.get("chosen")]
    assert len(chosen) == 1 and chosen[0]["machine"] == Machine(
        machine["rows"], machine["cols"], machine["scratchpad_bytes"],
        machine["accumulator_rows"], machine["bus_bytes"], machine["epilogue_lanes"],
        machine["write_rows"], machine["weight_load_rows"]).key()
    assert chosen[0]["area"] <= machine["budget"]
    assert "network-machine pairs; chosen" in result.output


@pytest.mark.parametrize(("words", "sweep"), [((), H.DEFAULT_SWEEP), (("--sweep", "1"), 1),
                                             (("--sweep", "0"), 0)])
def test_nas_hardware_sweeps_the_machines_of_the_best_networks_as_the_bench_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...],
        sweep: int) -> None:
    """`glensidec nas --hardware` ends with the machine sweep bench_codesign runs (before,
    only the bench passed it): by default the bench's 3 networks, `--sweep N` N; the
    report names how many networks were swept on how many machines within the budget. No
    training (stubbed) and no cluster (in-process)."""
    from click.testing import CliRunner

    from glensidec.cli import cli
    from glensidec.nas import commands

    stub_training(monkeypatch)

    def in_process(function: Any, calls: list[Any]) -> list[Any]:
        return [function(*call) for call in calls]

    monkeypatch.setattr(commands, "dask_client", lambda scheduler, workers: None)
    monkeypatch.setattr(commands, "DaskMapper", lambda client: in_process)
    monkeypatch.setattr(commands, "close_client", lambda client: None)
    passed: list[int] = []
    search = H.run_codesign

    def spy(*args: Any, **kwargs: Any) -> H.CodesignResult:
        passed.append(kwargs["sweep"])
        return search(*args, **kwargs)

    monkeypatch.setattr(H, "run_codesign", spy)
    with np.load(DIGITS.with_name("digits_train.npz")) as archive:
        np.savez(tmp_path / "train.npz", x=archive["x"][:8], y=archive["y"][:8])
    outdir = tmp_path / "codesign"
    space = "rows=8,16 cols=16 scratchpad=32KiB accumulator=1024 bus=16,32"
    result = CliRunner().invoke(cli, [
        "nas", str(DIGITS), "--data", str(tmp_path / "train.npz"), "--val",
        str(tmp_path / "train.npz"), "--budget", "4", "--space", "bottleneck",
        "--threshold", "0.5", "--top", "1", "--hardware", space, *words, "-o", str(outdir)])
    assert result.exit_code == 0, result.output
    assert passed == [sweep]
    report = (outdir / "report.md").read_text()
    (line,) = [x for x in report.splitlines() if x.startswith("- machine sweep:")]
    records = json.loads((outdir / "candidates.json").read_text())["candidates"]
    if sweep == 0:
        assert line == "- machine sweep: none (`--sweep 0`)"
        return
    model = area.fitted()
    within = [m for m in H.space_machines(H.parse_space(space))
              if model.area(m) <= model.area(Machine(16, 16))]
    legal_networks = {tuple(r["choices"].values())[:3] for r in records if r.get("legal")}
    swept = min(sweep, len(legal_networks))
    assert line.startswith(f"- machine sweep: {swept} legal networks (")
    assert line.endswith(f"({', '.join([str(len(within))] * swept)} machines priced)")


def test_the_evolution_starts_from_the_given_candidates_then_the_uniform_ones() -> None:
    space = S.Space(["a", "b"], [[S.KEEP, S.Choice("bottleneck", 2)],
                                 [S.KEEP, S.Choice("bottleneck", 2), S.Choice("rows", 8)]])
    start = ((S.KEEP, S.Choice("rows", 8)),)
    seen: list[S.Candidate] = []

    def evaluate_batch(batch: list[S.Candidate]) -> list[dict[str, Any]]:
        seen.extend(batch)
        return [{"valid": True, "legal": True, "cycles": 1} for _ in batch]

    S.candidates_for(space, S.Options(budget=5, population=4, start=start), evaluate_batch)
    b2 = S.Choice("bottleneck", 2)
    assert seen[:2] == [start[0], (b2, b2)]  # the given one, then the uniform bottleneck


def test_a_round_scores_each_seed_apart_and_prices_the_pairs_beside_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`evaluate_round`: with `train` legality each seed of a new network is a task of its
    own, beside the pairs' pricing, in one round on the workers; merged, the seeds give
    `score_task`'s record (the mean of the seeds' accuracies, in seed order) and a pair
    costs what `cost_task` prices. Retraining stubbed: a seeded function of the network."""
    from glensidec.nas.cost import params_and_macs

    def retrained(graph: Any, setup: S.Setup) -> tuple[list[float], dict[str, Any]]:
        macs = sum(m for _, m in params_and_macs(graph).values())
        return [0.9 + macs / 6e7 + seed / 100
                for seed in range(setup.seed, setup.seed + setup.train_seeds)], {}

    monkeypatch.setattr(S, "retrained", retrained)
    program = read_program(DIGITS)
    x = np.zeros((4, 1, 8, 8), np.float32)
    y = np.zeros(4, np.int64)
    graph = lift(program, load_weights(program))
    layers = S.search_space(graph, ("bottleneck",)).layers
    setup = S.Setup(format_program(program), load_weights(program),
                    layers + list(H.GENE_NAMES), Machine(16, 16).array(), "train", x, y, x,
                    y, 3, 1, "digits_cnn.gs", 16, 2)
    b2 = S.Choice("bottleneck", 2)
    networks = [(b2,) + (S.KEEP,) * (len(layers) - 1 + len(H.GENES)),
                (S.KEEP, b2) + (S.KEEP,) * (len(layers) - 2 + len(H.GENES))]
    pair = networks[0][:len(layers)] + (S.Choice("rows", 8),) + (S.KEEP,) * (len(H.GENES) - 1)
    calls: list[tuple[Any, ...]] = []

    def mapper(function: Any, given: list[Any]) -> list[Any]:
        calls.extend(given)
        return [function(*call) for call in given]

    codesign = H.Codesign(Machine(16, 16), len(layers))
    scores, costs = H.evaluate_round(setup, codesign, networks, [pair], mapper)
    assert [call[2:] for call in calls] == [("seed", networks[0], 3), ("seed", networks[0], 4),
                                           ("seed", networks[1], 3), ("seed", networks[1], 4),
                                           ("pair", pair, 0)]
    for network in networks:
        whole = H.score_task(setup, network)
        assert scores[network] == whole and len(whole["accuracies"]) == 2
    assert costs[pair] == H.cost_task(setup, codesign, pair)


def test_a_worker_reads_the_extraction_another_worker_shared(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """`pair_cost` with a shared directory: the first extraction of a network for an array
    shape is written there; another process (its memos empty) reads it instead of
    extracting, and prices every machine of that shape as its own extraction would."""
    program = read_program(DIGITS)
    graph = lift(program, load_weights(program))
    first, other = Machine(16, 32), Machine(16, 32, 16 * 1024, 256, 64, 16)
    monkeypatch.setattr(H, "_EXTRACTED", {})  # as a fresh worker (other tests priced it)
    monkeypatch.setattr(H, "_PAIRS", {})
    cost = H.pair_cost(graph, first, str(tmp_path))
    assert len(list(tmp_path.glob("*.pickle"))) == 1
    monkeypatch.setattr(H, "_EXTRACTED", {})
    monkeypatch.setattr(H, "_PAIRS", {})
    monkeypatch.setattr(H, "extract", lambda *args: pytest.fail("extracted again"))
    assert H.pair_cost(graph, first, str(tmp_path)) == cost
    shared = H.pair_cost(graph, other, str(tmp_path))
    assert shared == H.compiled_pair_cost(graph, other)
