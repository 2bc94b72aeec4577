"""Lift and lower: every example and every imported test model lifts to a layer graph and
lowers back to a program computing the same outputs (interpreter); anything else is an error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import MODELS, OPS, imported, single_op_model

from glensidec.errors import GlensideError
from glensidec.lang.data import load_weights, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program, read_program
from glensidec.lang.terms import Program
from glensidec.nas.graph import Conv, Dense, lift, lower

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.gs"))
LAYERED_EXAMPLES = [p for p in EXAMPLES if p.stem != "matmul"]


def outputs(program: Program, weights: dict[str, Any], seed: int = 0) -> np.ndarray:
    return run_program(program, {**weights, **random_inputs(program, seed)})


def round_trip(program: Program) -> tuple[Program, dict[str, Any]]:
    weights = load_weights(program)
    graph = lift(program, weights)
    lowered = lower(graph)
    # through text, so the lowered program is a readable program in its own right
    return parse_program(format_program(lowered), program.path), graph.weights


@pytest.mark.parametrize("path", LAYERED_EXAMPLES, ids=lambda p: p.stem)
def test_examples_round_trip(path: Path) -> None:
    program = read_program(path)
    lowered, weights = round_trip(program)
    assert lowered.root == program.root
    expected = outputs(program, load_weights(program))
    np.testing.assert_array_equal(outputs(lowered, weights), expected)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_imported_models_round_trip(name: str, tmp_path: Path) -> None:
    program = imported(MODELS[name](), tmp_path)
    lowered, weights = round_trip(program)
    assert lowered.root == program.root
    expected = outputs(program, load_weights(program))
    np.testing.assert_array_equal(outputs(lowered, weights), expected)


def test_lenet_layers_are_named_by_the_programs_lets(tmp_path: Path) -> None:
    program = imported(MODELS["lenet"](), tmp_path)
    graph = lift(program, load_weights(program))
    convs = [n for n, layer in graph.layers.items() if isinstance(layer.op, Conv)]
    dense = [n for n, layer in graph.layers.items() if isinstance(layer.op, Dense)]
    assert len(convs) == 2 and len(dense) == 3
    lets = set(program.names.values())
    assert set(convs + dense) <= lets


def test_mobilenet_depthwise_lifts_as_a_grouped_conv(tmp_path: Path) -> None:
    program = imported(MODELS["mobilenet_block"](), tmp_path)
    graph = lift(program, load_weights(program))
    groups = sorted(layer.op.groups for layer in graph.layers.values()
                    if isinstance(layer.op, Conv))
    assert groups == [1, 16]


def test_outside_the_idioms_is_a_located_error() -> None:
    text = ("(input x f32 (shape 2 7))\n"
            "(compute softmax (access (access-tensor x) 1))\n")
    program = parse_program(text, "soft.gs")
    with pytest.raises(GlensideError) as error:
        lift(program, {})
    assert str(error.value).startswith("soft.gs:2:1: error: not a layer")


@pytest.mark.parametrize("name", sorted(OPS))
def test_single_ops_round_trip_or_fail_located(name: str, tmp_path: Path) -> None:
    build, shape = OPS[name]
    program = imported(single_op_model(build, shape), tmp_path)
    weights = load_weights(program)
    try:
        graph = lift(program, weights)
    except GlensideError as error:
        assert re.match(r".*model\.gs:\d+:\d+: error: ", str(error)), str(error)
        return
    lowered = lower(graph)
    assert lowered.root == program.root
    np.testing.assert_array_equal(outputs(lowered, graph.weights), outputs(program, weights))


def test_the_matmul_example_is_not_a_network() -> None:
    program = read_program(REPO / "examples" / "matmul.gs")
    with pytest.raises(GlensideError, match=r"matmul\.gs:\d+:\d+: error: not a layer"):
        lift(program, {})
