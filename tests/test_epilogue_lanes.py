"""`glensidec compile --epilogue-lanes N`: the epilogue's lanes (ws_accel's EPI_LANES) as a
machine a user and the co-design search choose (issue 31: at batch 1 a layer's output rows
queue for the lanes, c1 of the digits CNN 64 rows at 4 cycles a row). The cycle model and
the RTL take the lanes since issue 28 (sim/test_ws_accel.py runs them); these tests are the
option's path: its errors, the manifest `make sim` builds the RTL from, and one program
co-simulated bit- and cycle-exact with every column a lane."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_calls_match_the_model, compile_and_cosimulate
from test_accel_array_shapes import _quantized
from test_accel_cli import BLOCK, glensidec
from test_accel_offload import _interpreted

from glensidec.cosim.runner import Manifest
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.lang import data
from glensidec.lang.syntax import read_program
from glensidec.nas import transforms as T
from glensidec.nas.cost import write_graph
from glensidec.nas.graph import lift
from glensidec.pipeline import accelerator_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("lanes", [3, 32])
def test_lanes_that_do_not_divide_the_columns_are_a_one_line_error(
        tmp_path: Path, lanes: int) -> None:
    done = glensidec("compile", BLOCK, "--array", "16x16", "--epilogue-lanes", str(lanes),
                     "-o", tmp_path / "out")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (f"error: --epilogue-lanes {lanes}: the epilogue's lanes "
                                   f"divide the array's 16 columns, got {lanes}")
    assert not (tmp_path / "out").exists()
    with pytest.raises(GlensideError):
        accelerator_for(ArrayConfig(16, 16), epilogue_lanes=lanes)


def test_the_default_lanes_are_a_quarter_of_the_columns_and_change_nothing() -> None:
    assert accelerator_for(ArrayConfig(16, 16)).epilogue_lanes == 4
    assert accelerator_for(ArrayConfig(16, 16), epilogue_lanes=4) == \
        accelerator_for(ArrayConfig(16, 16))
    assert accelerator_for(ArrayConfig(16, 32), epilogue_lanes=32).epilogue_cycles == 1


def test_the_manifest_carries_the_lanes_to_make_sim(tmp_path: Path) -> None:
    """`make sim` builds ws_accel from the manifest: with the lanes compiled for (a default
    compile's manifest has no lanes field, as before the option)."""
    program = _quantized(EXAMPLES / "digits_cnn.gs", tmp_path / "digits.q.gs")
    outdirs = {}
    for lanes in ("4", "16"):
        outdirs[lanes] = tmp_path / lanes
        done = glensidec("compile", program, "--array", "16x16", "--epilogue-lanes", lanes,
                         "--stats", "-o", outdirs[lanes])
        assert done.returncode == 0, done.stderr
        assert f"epilogue {lanes} lanes ({16 // int(lanes)} cycles a row)" in done.stderr
    manifests = {lanes: json.loads((outdir / "cosim.json").read_text())
                 for lanes, outdir in outdirs.items()}
    assert "epilogue_lanes" not in manifests["4"]["accelerator"]
    assert Manifest.read(outdirs["16"]).accel_config().epilogue_lanes == 16  # type: ignore
    assert Manifest.read(outdirs["4"]).accel_config().epilogue_lanes == 4  # type: ignore
    # the lanes are timing only: the same commands, fewer cycles
    fewer = [a[3] <= b[3] for a, b in zip(manifests["16"]["accel_layers"],
                                          manifests["4"]["accel_layers"], strict=True)]
    assert all(fewer) and manifests["16"]["accel_layers"] != manifests["4"]["accel_layers"]


@pytest.mark.slow
@pytest.mark.rtl
def test_make_sim_runs_the_digits_pick_with_a_lane_per_column(
        tmp_path: Path, sim_cache: Path) -> None:
    """The co-design's kind of machine: bench_nas's pick (c2 strided, c2 and c3
    bottlenecked by 2) in int8 on a 16x32 with 32 lanes, 2 rows a DMA write and 2 weight
    rows a cycle into the array; every layer's bits and cycles as predicted, the result
    the interpreter's."""
    source = read_program(EXAMPLES / "digits_cnn.gs")
    graph = T.stride(lift(source, data.load_weights(source)), "c2.maxpool")
    graph = T.bottleneck(T.bottleneck(graph, "c2", 2), "c3", 2)
    write_graph(graph, tmp_path / "pick.gs")
    program = _quantized(tmp_path / "pick.gs", tmp_path / "pick.q.gs")
    image = np.random.default_rng(7).integers(-128, 128, (1, 1, 8, 8)).astype(np.int8)
    ran = compile_and_cosimulate(program, "16x32", {"image": image}, tmp_path, sim_cache,
                                 options=("--epilogue-lanes", "32", "--scratchpad", "16KiB",
                                          "--accumulator", "32KiB", "--dram-bandwidth", "32",
                                          "--dma-write-rows", "2", "--weight-load-rows", "2"))
    assert_calls_match_the_model(ran.report)
    assert all("accel" in call for call in ran.report["calls"])
    expected = _interpreted(program, {"image": image})
    assert np.array_equal(ran.c.reshape(expected.shape), expected)
    assert np.array_equal(ran.sim.reshape(expected.shape), expected)
