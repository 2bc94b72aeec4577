"""`glensidec compile --weight-load-rows N`: the weight rows the array takes a cycle
(ws_accel's W_LOAD) as a machine a user and the co-design search choose (issue 31: a K
fold's weights take ROWS cycles before its first activation, exposed on short tiles and
each layer's first fold). The RTL and both cycle models take it (sim/test_ws_accel.py,
tests/test_accel_native.py); these tests are the option's path: its errors and the
manifest `make sim` builds the RTL from (tests/test_epilogue_lanes.py co-simulates the
digits pick on a machine with it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_accel_cli import BLOCK, glensidec

from glensidec.cosim.runner import Manifest
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.pipeline import accelerator_for


@pytest.mark.parametrize("rows", [3, 32])
def test_rows_that_are_not_a_power_of_two_dividing_the_array_are_a_one_line_error(
        tmp_path: Path, rows: int) -> None:
    done = glensidec("compile", BLOCK, "--array", "16x16", "--weight-load-rows", str(rows),
                     "-o", tmp_path / "out")
    assert done.returncode != 0
    assert done.stderr.strip() == (f"error: --weight-load-rows {rows}: the weight rows a "
                                   f"cycle into the array are a power of two dividing its "
                                   f"16 rows, got {rows}")
    with pytest.raises(GlensideError):
        accelerator_for(ArrayConfig(16, 16), weight_load_rows=rows)


def test_the_manifest_carries_the_rows_to_make_sim_and_they_change_only_the_timing(
        tmp_path: Path) -> None:
    """A default compile's manifest has no field (as before the option); with 4 rows a
    cycle `make sim` builds ws_accel with W_LOAD 4, from the same commands in fewer
    cycles."""
    outdirs = {}
    for rows in ("1", "4"):
        outdirs[rows] = tmp_path / rows
        done = glensidec("compile", BLOCK, "--array", "16x16", "--weight-load-rows", rows,
                         "--stats", "-o", outdirs[rows])
        assert done.returncode == 0, done.stderr
        assert ("4 weight rows a cycle" in done.stderr) == (rows == "4")
    manifests = {rows: json.loads((outdir / "cosim.json").read_text())
                 for rows, outdir in outdirs.items()}
    assert "weight_load_rows" not in manifests["1"]["accelerator"]
    config = Manifest.read(outdirs["4"]).accel_config()
    assert config is not None and config.weight_load_rows == 4
    assert config.rtl_parameters()["W_LOAD"] == 4
    fewer = [a[3] <= b[3] for a, b in zip(manifests["4"]["accel_layers"],
                                          manifests["1"]["accel_layers"], strict=True)]
    assert all(fewer) and manifests["4"]["accel_layers"] != manifests["1"]["accel_layers"]
