"""Accelerator layers co-simulated with memory and commands inside the simulation
(glensidec.cosim.accel_sim, rtl/tb/tb_ws_accel_mem.v), split over simulator processes or
a Dask cluster, and the raw Verilator harness of the same top.

The quick tests check the pieces that decide a verdict without a simulator: the hex
images, the partition, and that `check_layers` fails a wrong byte, a wrong cycle count, a
bad memory access and an unfinished layer. The slow ones run the RTL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from glensidec.cosim.accel_sim import (
    RESULTS_FILE,
    LayerFiles,
    build_raw_harness,
    check_layers,
    hex_words,
    partition,
    read_hex_words,
    read_layers,
    run_raw_harness,
    sim_parameters,
    write_layer,
)
from glensidec.cosim.runner import Manifest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_hex_images_round_trip_little_endian_bus_words(tmp_path: Path) -> None:
    memory = np.arange(64, dtype=np.uint8) * 3
    text = hex_words(memory, 16)
    assert text.splitlines()[0] == bytes(memory[:16][::-1]).hex().encode()
    path = tmp_path / "words.hex"
    path.write_bytes(b"// a comment, as $writememh may write\n" + text)
    assert np.array_equal(read_hex_words(path, 16), memory)


def _layer(index: int, cycles: int) -> LayerFiles:
    return LayerFiles(index, f"l{index}", 1, 1, 1, cycles, 1, 1, 0, 4)


def test_partition_balances_predicted_cycles_and_keeps_program_order() -> None:
    layers = [_layer(index, cycles) for index, cycles in enumerate([50, 10, 40, 30, 20, 5])]
    groups = partition(layers, 2)
    loads = [sum(layer.predicted_cycles for layer in group) for group in groups]
    assert sorted(loads) == [75, 80]
    for group in groups:
        assert [layer.index for layer in group] == sorted(layer.index for layer in group)
    assert sorted(layer.index for group in groups for layer in group) == list(range(6))
    assert len(partition(layers[:1], 4)) == 1


def _recorded(tmp_path: Path) -> tuple[Path, Path, LayerFiles, np.ndarray]:
    """A layer written as the recorder writes it, and a job folder whose simulation wrote
    the expected bytes in 5 cycles (the prediction)."""
    layer_dir, job_dir = tmp_path / "layers", tmp_path / "job"
    layer_dir.mkdir()
    job_dir.mkdir()
    expected = np.array([[1, -2, 3], [-4, 5, 127]], dtype=np.int8)
    memory = np.zeros(32, dtype=np.uint8)
    layer = write_layer(layer_dir, 0, "conv", (2, 4, 3), 5, [0x1, 0x2ABC], memory,
                        range(10, 16), expected, expected, 4, 16)
    out = np.zeros(12, dtype=np.uint8)  # words 2..4 hold bytes 8..19
    out[2:8] = expected.reshape(-1).view(np.uint8)
    (job_dir / "layer_0.out.hex").write_bytes(hex_words(out, 4))
    (job_dir / RESULTS_FILE).write_text("0 5 0 0 0\n")
    return layer_dir, job_dir, layer, expected


def test_a_command_word_wider_than_the_memory_model_keeps_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a command word of 17 bits"):
        write_layer(tmp_path, 0, "conv", (1, 1, 1), 1, [1 << 16], np.zeros(4, np.uint8),
                    range(0, 1), np.zeros((1, 1)), np.zeros((1, 1)), 4, 16)


def test_check_layers_passes_the_right_bytes_and_cycles(tmp_path: Path) -> None:
    layer_dir, job_dir, layer, _ = _recorded(tmp_path)
    assert layer.output_words == (2, 3)
    assert (layer_dir / "layer_0.cmd.hex").read_text() == "1\n2abc\n"
    (entry,) = check_layers(layer_dir, job_dir, [layer], [0.5])
    assert entry["data_ok"] and entry["cycles_ok"] and entry["simulated_cycles"] == 5


def test_check_layers_fails_a_wrong_byte_and_names_it(tmp_path: Path) -> None:
    layer_dir, job_dir, layer, expected = _recorded(tmp_path)
    out = np.zeros(12, dtype=np.uint8)
    wrong = expected.copy()
    wrong[1, 1] = 6
    out[2:8] = wrong.reshape(-1).view(np.uint8)
    (job_dir / "layer_0.out.hex").write_bytes(hex_words(out, 4))
    (entry,) = check_layers(layer_dir, job_dir, [layer], [])
    assert not entry["data_ok"] and entry["cycles_ok"]
    assert entry["first_difference"] == "C model [1, 1]: RTL 6, expected 5"


def test_check_layers_fails_wrong_cycles_bad_accesses_and_unfinished_layers(
        tmp_path: Path) -> None:
    layer_dir, job_dir, layer, _ = _recorded(tmp_path)
    (job_dir / RESULTS_FILE).write_text("0 6 0 0 0\n")
    (entry,) = check_layers(layer_dir, job_dir, [layer], [])
    assert entry["data_ok"] and not entry["cycles_ok"]
    (job_dir / RESULTS_FILE).write_text("0 5 2 40 3\n")
    (entry,) = check_layers(layer_dir, job_dir, [layer], [])
    assert not entry["data_ok"]
    assert entry["error"] == "2 bad memory accesses, the first a write outside the " \
                             "layer's output at 40"
    (job_dir / RESULTS_FILE).unlink()
    (entry,) = check_layers(layer_dir, job_dir, [layer], [], "the simulator stopped")
    assert not entry["data_ok"] and not entry["cycles_ok"]
    assert entry["error"] == "the simulator stopped"


@dataclass
class SmallCnn:
    """examples/small_cnn.gs compiled once for the module's co-simulations."""

    outdir: Path
    inputs: str  # make sim's INPUTS
    folder: Path  # the module's scratch folder


@pytest.fixture(scope="module")
def small_cnn(tmp_path_factory: pytest.TempPathFactory) -> SmallCnn:
    """examples/small_cnn.gs with --accel on 8×8 (a convolution and a pooling layer as
    accelerator layers, its dense layer an array call) and make sim's INPUTS for it: one
    compile for the module (each test compiled it alike)."""
    folder = tmp_path_factory.mktemp("small_cnn")
    outdir = folder / "out"
    subprocess.run([sys.executable, "-m", "glensidec", "compile",
                    str(EXAMPLES / "small_cnn.gs"), "--array", "8x8", "--accel", "-o",
                    str(outdir)], check=True, capture_output=True, timeout=600)
    image = np.random.default_rng(5).integers(-128, 128, (1, 1, 16, 16)).astype(np.int8)
    np.save(folder / "image.npy", image)
    return SmallCnn(outdir, f"INPUTS=image={folder / 'image.npy'}", folder)


def _accel_layers(outdir: Path) -> list[dict[str, object]]:
    """The accelerator layers of make sim's report (small_cnn also has an array call)."""
    calls = json.loads((outdir / "cosim_report.json").read_text())["calls"]
    return [call for call in calls if "accel" in call]


def _make_sim(outdir: Path, inputs: str, output: Path, sim_cache: Path, *options: str
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "-s", "-C", str(outdir), "sim", inputs, f"OUTPUT={output}",
                           *options], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "GLENSIDEC_SIM_CACHE": str(sim_cache)})


@dataclass
class WholeRun:
    """`make sim WHOLE=1` of small_cnn: every accelerator layer in one simulator process."""

    output: Path  # its result
    layers: list[dict[str, object]]  # the accelerator layers of its report
    layer_dir: Path  # a copy of the layers it recorded (later runs rewrite OUTDIR's)


@pytest.fixture(scope="module")
def whole_run(small_cnn: SmallCnn, sim_cache: Path) -> WholeRun:
    """One `make sim WHOLE=1` for the module's tests that compare with it (each ran its
    own, alike)."""
    output = small_cnn.folder / "whole.npy"
    whole = _make_sim(small_cnn.outdir, small_cnn.inputs, output, sim_cache, "WHOLE=1")
    assert whole.returncode == 0, whole.stdout[-3000:] + whole.stderr[-3000:]
    assert "in 1 simulator process on this machine" in whole.stdout
    layer_dir = small_cnn.folder / "whole_layers"
    shutil.copytree(small_cnn.outdir / "sim_build" / "accel" / "layers", layer_dir)
    return WholeRun(output, _accel_layers(small_cnn.outdir), layer_dir)


# Before the co-simulations below: the module's OUTDIR is as compile left it, not yet built.
@pytest.mark.slow
def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path: Path, small_cnn: SmallCnn,
                                                      sim_cache: Path) -> None:
    pytest.importorskip("dask.distributed")
    ran = _make_sim(small_cnn.outdir, small_cnn.inputs, tmp_path / "out.npy", sim_cache,
                    "SCHEDULER=tcp://127.0.0.1:9")
    assert ran.returncode != 0
    errors = [line for line in ran.stderr.splitlines() if not line.startswith("make")]
    assert len(errors) == 1 and errors[0].startswith("error: SCHEDULER=tcp://127.0.0.1:9: "
                                                     "cannot connect"), ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.slow
@pytest.mark.rtl
def test_layers_cosimulate_on_a_dask_cluster_as_in_one_process(
        tmp_path: Path, small_cnn: SmallCnn, whole_run: WholeRun, sim_cache: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        spread = _make_sim(small_cnn.outdir, small_cnn.inputs, tmp_path / "spread.npy",
                           sim_cache, f"SCHEDULER={cluster.scheduler_address}")
    assert spread.returncode == 0, spread.stdout[-3000:] + spread.stderr[-3000:]
    assert "in 2 simulator processes on the Dask cluster" in spread.stdout
    one = whole_run.layers
    calls = _accel_layers(small_cnn.outdir)
    assert len(calls) == len(one) == 3  # the input's layout, the convolution, the pool
    assert all(call["data_ok"] and call["cycles_ok"] for call in calls)
    assert [call["simulated_cycles"] for call in calls] == \
        [call["simulated_cycles"] for call in one]
    assert np.array_equal(np.load(tmp_path / "spread.npy"), np.load(whole_run.output))


@pytest.mark.slow
@pytest.mark.rtl
def test_the_raw_harness_runs_the_same_layers_to_the_same_bytes_and_cycles(
        tmp_path: Path, small_cnn: SmallCnn, whole_run: WholeRun) -> None:
    """The anchor of bench/bench_cosim_speed.py: tb_ws_accel_mem as a plain Verilator
    binary, no cocotb, on the layers make sim recorded."""
    _, layers = read_layers(whole_run.layer_dir)
    accel = Manifest.read(small_cnn.outdir).accel_config()
    assert accel is not None
    binary = build_raw_harness(sim_parameters(accel, layers), tmp_path / "raw")
    _, entries = run_raw_harness(binary, whole_run.layer_dir, tmp_path / "raw_job", layers)
    assert all(entry["data_ok"] and entry["cycles_ok"] for entry in entries)
    assert [entry["simulated_cycles"] for entry in entries] == \
        [call["simulated_cycles"] for call in whole_run.layers]
