"""`glensidec transform` and the cost it reports: the compiler's cycle model, estimated per
term and compiled in full, agree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import MODELS, save
from test_nas_transforms import skip_net

from glensidec.frontends.importer import import_onnx
from glensidec.frontends.quantize import save_quantized
from glensidec.lang.data import load_weights, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import read_program
from glensidec.nas import transforms as T
from glensidec.nas.cost import compiled_cost, layer_costs, network_cost, quantized
from glensidec.nas.graph import lift
from glensidec.opt.extract import parse_array_size

# Every test runs `glensidec transform` or compiles a network: seconds each.
pytestmark = pytest.mark.slow


def glensidec(*words: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "glensidec", *map(str, words)],
                          capture_output=True, text=True, check=False)


@pytest.fixture
def skip_model(tmp_path: Path) -> Path:
    return import_onnx(save(skip_net(), tmp_path / "skip.onnx"), tmp_path / "skip")


def run(path: Path) -> np.ndarray:
    program = read_program(path)
    return run_program(program, {**load_weights(program), **random_inputs(program, 5)})


def test_no_transformation_lists_the_transformable_layers(skip_model: Path) -> None:
    result = glensidec("transform", skip_model)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["a", "b", "c", "d", "fc"]
    assert lines[1] == "b  conv  channels 8->8  kernel 3x3  coupled b,c"
    assert lines[4] == "fc  dense  channels 128->10  kernel -  coupled fc"


def test_transform_writes_a_program_and_its_weights_beside_it(skip_model: Path,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "new" / "split.gs"
    out.parent.mkdir()
    result = glensidec("transform", skip_model, "--spatial-split", "d:2", "--bottleneck",
                       "a:2", "-o", out)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["split.gs", "split.npz"]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("--bottleneck a:2: layers a, a.bias, b, d -> a, a.bias, b, d")
    # a 4->8 3x3 (64 positions), b 8->8 3x3 (64), d 16->8 3x3 (16): a keeps 4 outputs, b and
    # d (through the concat: 8 + 4 inputs) their inputs
    assert lines[1].startswith("  params 2016 -> 1296, MACs 73728 -> 41472, ")
    network = next(line for line in lines if line.startswith("network: "))
    assert " predicted cycles on 16x16 " in network
    assert network.endswith("the default compile's prediction, as a search scores it)")
    # spatial-split with inherited weights computes exactly the original network
    program = read_program(out)
    assert [d.source for d in program.weights()] == ["split.npz"] * len(program.weights())
    only_split = tmp_path / "only.gs"
    assert glensidec("transform", skip_model, "--spatial-split", "d:3", "-o",
                     only_split).returncode == 0
    np.testing.assert_allclose(run(only_split), run(skip_model), rtol=1e-5, atol=1e-5)


def test_transform_is_deterministic(skip_model: Path, tmp_path: Path) -> None:
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        result = glensidec("transform", skip_model, "--depthwise", "d", "--group", "a:2",
                           "--init", "random", "--seed", "3", "-o", tmp_path / name / "t.gs")
        assert result.returncode == 0, result.stderr
    for suffix in (".gs", ".npz"):
        first, second = (tmp_path / name / f"t{suffix}" for name in ("one", "two"))
        assert first.read_bytes() == second.read_bytes()


def test_transform_never_writes_over_the_model(skip_model: Path) -> None:
    before = skip_model.read_bytes(), skip_model.with_suffix(".npz").read_bytes()
    result = glensidec("transform", skip_model, "--group", "a:2", "-o", skip_model)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"error: -o {skip_model} would overwrite the model or "
                                     f"its weights; choose another name")
    assert (skip_model.read_bytes(), skip_model.with_suffix(".npz").read_bytes()) == before


@pytest.mark.parametrize(("words", "message"), [
    (("--group", "zz:2"), "error: no conv/dense layer 'zz' (layers: a, b, c, d, fc)"),
    (("--group", "a"), "error: --group takes LAYER:N (positive numbers), got 'a'"),
    (("--group", "a:3"), "error: group a:3: output channels per group 8 is not divisible by 3"),
    (("--bottleneck", "fc:2"), "error: bottleneck fc:2: it would change the network's output"),
])
def test_bad_transformations_are_one_line_errors(skip_model: Path, tmp_path: Path,
                                                 words: tuple[str, ...], message: str) -> None:
    result = glensidec("transform", skip_model, *words, "-o", tmp_path / "out.gs")
    assert result.returncode == 1
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(message)
    assert not (tmp_path / "out.gs").exists() and not (tmp_path / "out.npz").exists()


DIGITS_CNN = Path(__file__).resolve().parent.parent / "examples" / "digits_cnn.gs"


@pytest.mark.parametrize("step", [("group", "b", 2), ("bottleneck", "a", 2),
                                  ("bottleneck_block", "d", 2), ("depthwise", "a"),
                                  ("spatial_split", "d", 2), ("split_out", "a", 2, 2),
                                  ("stride", "c2")])
def test_the_search_cost_is_what_compile_accel_predicts(skip_model: Path, tmp_path: Path,
                                                         step: tuple[Any, ...]) -> None:
    """For every transformation kind: the cost a search ranks a candidate by equals the
    predicted cycles `glensidec compile --stats` prints for its int8 program (the default
    target: the whole accelerator), copies and fills included. (The skip network has no
    max-pool: stride is tried on the digits CNN's c2.)"""
    program = read_program(DIGITS_CNN if step[0] == "stride" else skip_model)
    kind, layer, *numbers = step
    graph = getattr(T, kind)(lift(program, load_weights(program)), layer, *numbers)
    config = parse_array_size("16x16")
    folder = tmp_path / "q"
    folder.mkdir()
    path = save_quantized(quantized(graph, folder), folder / "candidate.q.gs")
    result = glensidec("compile", path, "--array", "16x16", "--stats", "-o",
                       tmp_path / "out")
    assert result.returncode == 0, result.stderr
    totals = re.findall(r"^ *predicted cycles: (\d+)", result.stderr, re.MULTILINE)
    assert len(totals) == 1, result.stderr
    cost = network_cost(graph, config)
    assert cost.total == int(totals[0]) and cost.accelerator > 0


def test_layer_costs_are_memoised_by_shape(tmp_path: Path) -> None:
    program = read_program(import_onnx(save(MODELS["resnet_block"](), tmp_path / "m.onnx"),
                                       tmp_path / "m"))
    graph = lift(program, load_weights(program))
    costs = layer_costs(graph, parse_array_size("16x16"))
    convs = [row["name"] for row in T.transformable(graph)]
    assert costs[convs[0]] == costs[convs[1]]  # two 16->16 3x3 convs on 16x16: one cost
    assert costs[convs[0]].accelerator > 0


def test_transform_creates_a_missing_output_directory(skip_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "t.gs"
    result = glensidec("transform", skip_model, "--group", "a:2", "-o", out)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.gs", "t.npz"]


def test_transform_seed_must_be_a_seed(skip_model: Path, tmp_path: Path) -> None:
    (tmp_path / "o").mkdir()
    result = glensidec("transform", skip_model, "--init", "random", "--seed", "-1",
                       "--group", "a:2", "-o", tmp_path / "o" / "t.gs")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "--seed" in result.stderr
    assert list((tmp_path / "o").iterdir()) == []


def test_transform_onto_a_fifo_leaves_nothing_behind(skip_model: Path, tmp_path: Path) -> None:
    folder = tmp_path / "o"
    folder.mkdir()
    os.mkfifo(folder / "pipe.gs")
    result = glensidec("transform", skip_model, "--group", "a:2", "-o", folder / "pipe.gs")
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: cannot write {folder / 'pipe.gs'}: it is not " \
                                    "a regular file"
    assert sorted(p.name for p in folder.iterdir()) == ["pipe.gs"]  # no pipe.npz


def test_transform_never_replaces_files_it_did_not_write(skip_model: Path,
                                                         tmp_path: Path) -> None:
    out = tmp_path / "keep.gs"
    for name, text in (("keep.gs", "; my notes\n"), ("keep.npz", "my weights")):
        (tmp_path / name).write_text(text)
        result = glensidec("transform", skip_model, "--group", "a:2", "-o", out)
        assert result.returncode == 1
        assert result.stderr.strip() == (
            f"error: -o {out}: {tmp_path / name} exists and was not written by glensidec "
            "transform (or was changed since); pass --force to replace it")
        assert (tmp_path / name).read_text() == text
        (tmp_path / name).unlink()
    # its own earlier output it replaces; once the user edits it, no more
    for _ in range(2):
        assert glensidec("transform", skip_model, "--group", "a:2", "-o", out).returncode == 0
    out.write_text(out.read_text() + "; edited\n")
    assert glensidec("transform", skip_model, "--group", "a:2", "-o", out).returncode == 1
    result = glensidec("transform", skip_model, "--group", "a:2", "-o", out, "--force")
    assert result.returncode == 0, result.stderr
    assert "; edited" not in out.read_text()


def test_every_egraph_is_made_on_the_one_egglog_thread(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """egglog's EGraph may only be dropped on the thread that made it: costs computed on
    a Dask worker's task threads must not leave e-graphs for its event loop to collect."""
    import threading

    from glensidec.opt import rewrite

    made_on: set[int] = set()
    original = rewrite.bindings.EGraph

    def recording(*args: object, **kwargs: object) -> object:
        made_on.add(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(rewrite.bindings, "EGraph", recording)
    program = read_program(import_onnx(save(MODELS["mobilenet_block"](), tmp_path / "m.onnx"),
                                       tmp_path / "m"))
    graph = lift(program, load_weights(program))
    config = parse_array_size("16x16")
    threads = [threading.Thread(target=cost, args=(graph, config))
               for cost in (network_cost, compiled_cost)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made_on) == 1 and threading.get_ident() not in made_on
