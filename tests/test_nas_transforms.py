"""Architecture transformations on layer graphs: identities, exact inheritance where it must
be exact, channel coupling through residual adds and concats, and checked preconditions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import MODELS, OnnxGraph, imported

from glensidec.errors import GlensideError
from glensidec.lang.data import load_weights, random_inputs
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program
from glensidec.lang.typecheck import check_program
from glensidec.nas import transforms as T
from glensidec.nas.coupling import coupled_sets
from glensidec.nas.graph import Conv, Dense, Graph, Pool, lift, lower, shapes


def skip_net(seed: int = 0) -> Any:
    """Two convs joined by an add, a concat with a third branch, then conv, flatten, dense."""
    g = OnnxGraph(seed)
    x = g.input("x", [1, 4, 8, 8])
    a = g.node("Relu", [g.conv(x, 4, 8, 3, pad=1, name="a")], name="a_relu")
    b = g.conv(a, 8, 8, 3, pad=1, name="b")
    c = g.conv(x, 4, 8, 1, name="c")
    s = g.node("Relu", [g.node("Add", [b, c], name="sum")], name="sum_relu")
    cat = g.node("Concat", [s, a], name="cat", axis=1)
    d = g.node("Relu", [g.conv(cat, 16, 8, 3, stride=2, pad=1, name="d")], name="d_relu")
    flat = g.node("Flatten", [d], name="flat", axis=1)
    return g.model(g.gemm(flat, 8 * 4 * 4, 10, name="fc"), [1, 10])


def graph_of(model: Any, tmp_path: Path) -> Graph:
    program = imported(model, tmp_path)
    return lift(program, load_weights(program))


def run(graph: Graph, seed: int = 3) -> np.ndarray:
    program = parse_program(format_program(lower(graph)), "<t>")
    inputs = random_inputs(program, seed)
    return run_program(program, {**graph.weights, **inputs}, check_program(program))


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def with_weight(graph: Graph, name: str, array: np.ndarray) -> Graph:
    weights = dict(graph.weights)
    weights[name] = array.astype(np.float32)
    return graph.with_layers(graph.layers, weights)


def weight_of(graph: Graph, layer: str) -> str:
    op = graph.layers[layer].op
    assert isinstance(op, (Conv, Dense))
    return op.weight


@pytest.fixture
def lenet(tmp_path: Path) -> Graph:
    return graph_of(MODELS["lenet"](), tmp_path)


@pytest.fixture
def skip(tmp_path: Path) -> Graph:
    return graph_of(skip_net(), tmp_path)


def conv_names(graph: Graph) -> list[str]:
    return [n for n, layer in graph.layers.items() if isinstance(layer.op, (Conv, Dense))]


# -- identities ----------------------------------------------------------------------------


def test_factor_one_is_the_identity(lenet: Graph) -> None:
    conv = conv_names(lenet)[0]
    for result in (T.group(lenet, conv, 1), T.bottleneck(lenet, conv, 1),
                   T.bottleneck_block(lenet, conv, 1), T.spatial_split(lenet, conv, 1)):
        assert lower(result).root == lower(lenet).root
        assert result.weights.keys() == lenet.weights.keys()


def test_transformations_do_not_change_their_argument(lenet: Graph) -> None:
    before = lower(lenet).root
    weights = {n: a.copy() for n, a in lenet.weights.items()}
    conv = conv_names(lenet)[1]
    T.group(lenet, conv, 2)
    T.bottleneck(lenet, conv, 2)
    T.depthwise(lenet, conv)
    assert lower(lenet).root == before
    assert all(np.array_equal(lenet.weights[n], a) for n, a in weights.items())


# -- exact inheritance ---------------------------------------------------------------------


def test_group_keeps_block_diagonal_weights_exactly(lenet: Graph) -> None:
    conv = conv_names(lenet)[1]  # 6 -> 16, 5x5
    w = lenet.weights[weight_of(lenet, conv)].copy()
    w[:8, 3:] = 0
    w[8:, :3] = 0
    original = with_weight(lenet, weight_of(lenet, conv), w)
    grouped = T.group(original, conv, 2)
    assert grouped.layers[conv].op.groups == 2  # type: ignore[union-attr]
    assert grouped.weights[weight_of(grouped, conv)].shape == (16, 3, 5, 5)
    close(run(grouped), run(original))


def test_group_changes_a_dense_weight_into_blocks(lenet: Graph) -> None:
    dense = conv_names(lenet)[3]  # 120 -> 84
    w = lenet.weights[weight_of(lenet, dense)].copy()
    w[:42, 60:] = 0
    w[42:, :60] = 0
    original = with_weight(lenet, weight_of(lenet, dense), w)
    grouped = T.group(original, dense, 2)
    close(run(grouped), run(original))
    assert not any(a.shape == (84, 120) for a in grouped.weights.values())


def test_bottleneck_drops_the_weakest_channels_and_slices_consumers(lenet: Graph) -> None:
    conv = conv_names(lenet)[0]  # 1 -> 6, feeds relu, pool, conv2
    w = lenet.weights[weight_of(lenet, conv)].copy()
    bias_layer = next(n for n, la in lenet.layers.items() if la.inputs == (conv,))
    bias_name = lenet.layers[bias_layer].op.weight  # type: ignore[union-attr]
    b = lenet.weights[bias_name].copy()
    w[[0, 2, 5]] = 0  # these channels are always 0 after the relu
    b[[0, 2, 5]] = -1.0
    original = with_weight(with_weight(lenet, weight_of(lenet, conv), w), bias_name, b)
    shrunk = T.bottleneck(original, conv, 2)
    assert shrunk.weights[weight_of(shrunk, conv)].shape[0] == 3
    assert shrunk.weights[weight_of(shrunk, conv_names(lenet)[1])].shape[1] == 3
    close(run(shrunk), run(original))


def test_bottleneck_of_a_conv_before_flatten_slices_the_dense_features(skip: Graph) -> None:
    w = skip.weights[weight_of(skip, "d")].copy()
    bias = skip.layers["d.bias"].op.weight  # type: ignore[union-attr]
    b = skip.weights[bias].copy()
    w[4:] = 0
    b[4:] = -1.0
    original = with_weight(with_weight(skip, weight_of(skip, "d"), w), bias, b)
    shrunk = T.bottleneck(original, "d", 2)
    assert shrunk.weights[weight_of(shrunk, "fc")].shape == (10, 4 * 16)
    close(run(shrunk), run(original))


def test_depthwise_is_exact_for_separable_filters(lenet: Graph) -> None:
    conv = conv_names(lenet)[1]
    rng = np.random.default_rng(0)
    mix, spatial = rng.standard_normal((16, 6)), rng.standard_normal((6, 5, 5))
    separable = np.einsum("oc,chw->ochw", mix, spatial)
    original = with_weight(lenet, weight_of(lenet, conv), separable)
    split = T.depthwise(original, conv)
    kinds = sorted(la.op.groups for la in split.layers.values()  # type: ignore[union-attr]
                   if isinstance(la.op, Conv))
    assert kinds == [1, 1, 6]
    close(run(split), run(original))


def test_depthwise_approximates_a_general_filter_best_per_channel(lenet: Graph) -> None:
    conv = conv_names(lenet)[1]
    w = lenet.weights[weight_of(lenet, conv)].astype(np.float64)
    split = T.depthwise(lenet, conv)
    dw = split.weights[weight_of(split, f"{conv}_dw")]
    pw = split.weights[weight_of(split, conv)]
    product = np.einsum("oc,chw->ochw", pw[:, :, 0, 0], dw[:, 0])
    for c in range(6):
        slice_c = w[:, c].reshape(16, 25)
        best = np.linalg.svd(slice_c, compute_uv=False)
        error = np.linalg.norm(slice_c - product[:, c].reshape(16, 25))
        np.testing.assert_allclose(error, np.sqrt((best[1:] ** 2).sum()), rtol=1e-4)


def test_bottleneck_block_is_exact_when_the_filter_lives_on_the_kept_channels(
        lenet: Graph) -> None:
    conv = conv_names(lenet)[1]  # 6 -> 16
    w = lenet.weights[weight_of(lenet, conv)].copy()
    w[:, [1, 4, 5]] = 0  # three unused inputs
    w[::2] = 0  # eight unused outputs
    original = with_weight(lenet, weight_of(lenet, conv), w)
    block = T.bottleneck_block(original, conv, 2)
    shapes_ = sorted(block.weights[weight_of(block, n)].shape for n in
                     (f"{conv}_down", f"{conv}_mid", conv))
    assert shapes_ == [(3, 6, 1, 1), (8, 3, 5, 5), (16, 8, 1, 1)]
    close(run(block), run(original))


@pytest.mark.parametrize("bands", [2, 3, 7])
def test_spatial_split_computes_the_same_network(lenet: Graph, bands: int) -> None:
    conv = conv_names(lenet)[0]  # pad 2, 28x28
    split = T.spatial_split(lenet, conv, bands)
    assert sum(1 for n in split.layers if n.startswith(f"{conv}_band")) == bands
    close(run(split), run(lenet))


def test_spatial_split_with_stride(skip: Graph) -> None:
    close(run(T.spatial_split(skip, "d", 2)), run(skip))


@pytest.mark.parametrize("groups", [1, 2])
def test_split_out_on_block_diagonal_parts(lenet: Graph, groups: int) -> None:
    conv = conv_names(lenet)[1]  # 6 -> 16, parts of 8 outputs
    w = lenet.weights[weight_of(lenet, conv)].copy()
    if groups == 2:
        for part in range(2):
            w[part * 8:part * 8 + 4, 3:] = 0
            w[part * 8 + 4:part * 8 + 8, :3] = 0
    original = with_weight(lenet, weight_of(lenet, conv), w)
    split = T.split_out(original, conv, 2, groups)
    assert sum(1 for n in split.layers if n.startswith(f"{conv}_part")) == 2
    close(run(split), run(original))


# -- coupling ------------------------------------------------------------------------------


def test_coupled_sets_follow_adds_but_not_concats(skip: Graph) -> None:
    sets = coupled_sets(skip)
    assert set(sets["b"].producers) == {"b", "c"} and sets["b"] == sets["c"]
    assert sets["a"].producers == ("a",)
    assert sets["d"].producers == ("d",)


def test_bottleneck_on_a_coupled_layer_shrinks_the_whole_set(skip: Graph) -> None:
    weights = dict(skip.weights)
    for layer in ("b", "c"):
        w = weights[weight_of(skip, layer)].copy()
        w[[1, 3, 5, 7]] = 0
        weights[weight_of(skip, layer)] = w
        bias = skip.layers[f"{layer}.bias"].op.weight  # type: ignore[union-attr]
        weights[bias] = np.where(np.isin(np.arange(8), [1, 3, 5, 7]), 0.0, weights[bias])
    original = skip.with_layers(skip.layers, {k: v.astype(np.float32) for k, v in
                                              weights.items()})
    shrunk = T.bottleneck(original, "b", 2)
    assert shrunk.weights[weight_of(shrunk, "b")].shape[0] == 4
    assert shrunk.weights[weight_of(shrunk, "c")].shape[0] == 4
    assert shrunk.weights[weight_of(shrunk, "d")].shape[1] == 12  # concat: 4 + 8
    close(run(shrunk), run(original))


def test_bottleneck_coupled_to_an_input_is_rejected_naming_it(tmp_path: Path) -> None:
    graph = graph_of(MODELS["resnet_block"](), tmp_path)
    last = conv_names(graph)[1]
    with pytest.raises(GlensideError, match=rf"bottleneck {last}:2: .*coupled.* x\b"):
        T.bottleneck(graph, last, 2)
    T.bottleneck(graph, conv_names(graph)[0], 2)  # the first conv is free


def test_bottleneck_of_the_output_layer_is_rejected(lenet: Graph) -> None:
    with pytest.raises(GlensideError, match="change the network's output"):
        T.bottleneck(lenet, conv_names(lenet)[-1], 2)


def truncated(graph: Graph, output: str) -> Graph:
    """The graph computing `output` (the layers after it left unused)."""
    layers = dict(list(graph.layers.items())[:list(graph.layers).index(output) + 1])
    used = {getattr(layer.op, "weight", None) for layer in layers.values()}
    cut = replace(graph, output=output)
    return cut.with_layers(layers, {n: w for n, w in graph.weights.items() if n in used})


def test_stride_folds_the_max_pool_into_its_conv(lenet: Graph) -> None:
    """conv, relu, 2x2/2 max-pool becomes the conv at stride 2: the stride-1 conv's every
    other row and column, exactly; the pool is gone and what follows reads the relu."""
    conv = conv_names(lenet)[0]
    pool = conv
    while not isinstance(lenet.layers[pool].op, Pool):  # conv, bias, relu, pool
        pool = lenet.consumers(pool)[0]
    strided = T.stride(lenet, conv)
    assert pool not in strided.layers and strided.layers[conv].op.stride == (2, 2)
    assert strided.weights.keys() == lenet.weights.keys()
    assert set(strided.layers) == set(lenet.layers) - {pool}
    assert shapes(strided)[strided.output] == shapes(lenet)[lenet.output]
    close(run(truncated(strided, conv)), run(truncated(lenet, conv))[:, :, ::2, ::2])
    run(strided)  # the whole network still runs
    # named by its pool (the search's gene), the same network
    assert lower(T.stride(lenet, pool)).root == lower(strided).root


def test_stride_needs_a_max_pool_of_its_stride_after_the_conv(skip: Graph,
                                                              lenet: Graph) -> None:
    with pytest.raises(GlensideError, match=r"stride a: 'a_relu' is read by 2 layers"):
        T.stride(skip, "a")
    with pytest.raises(GlensideError, match=r"stride b: 'sum' \(binary\) comes between 'b' "
                                            "and a max-pool; only per-channel and elementwise"):
        T.stride(skip, "b")
    with pytest.raises(GlensideError, match=r"stride d: 'd' has stride \(2, 2\)"):
        T.stride(skip, "d")
    conv = conv_names(lenet)[0]
    with pytest.raises(GlensideError, match=rf"stride {conv}: '{conv}' has stride \(2, 2\)"):
        T.stride(T.stride(lenet, conv), conv)
    with pytest.raises(GlensideError, match="no conv layer 'fc"):
        T.stride(lenet, "fc")


# -- preconditions, random init, listing -------------------------------------------------------


def test_preconditions_are_checked(lenet: Graph) -> None:
    conv = conv_names(lenet)[1]
    with pytest.raises(GlensideError, match=rf"group {conv}:4: input channels .* 6 is not "):
        T.group(lenet, conv, 4)
    with pytest.raises(GlensideError, match="no conv/dense layer 'nope' \\(layers: "):
        T.group(lenet, "nope", 2)
    with pytest.raises(GlensideError, match="grouped conv"):
        T.depthwise(T.group(lenet, conv, 2), conv)
    with pytest.raises(GlensideError, match="bands must be"):
        T.spatial_split(lenet, conv, 11)


def test_int8_programs_are_not_transformed() -> None:
    from glensidec.lang.syntax import read_program
    program = read_program(Path(__file__).resolve().parent.parent / "examples" / "small_cnn.gs")
    graph = lift(program, load_weights(program))
    with pytest.raises(GlensideError, match="transform the float model, then quantize"):
        T.group(graph, "conv", 2)


CNN_TRANSFORMS = ("group", "bottleneck", "bottleneck-block", "depthwise", "spatial-split",
                  "split-out")  # the transformer's: tests/test_nas_transformer.py


@pytest.mark.parametrize("name", CNN_TRANSFORMS)
def test_random_init_is_seeded_and_lowers_to_a_typed_program(skip: Graph, name: str) -> None:
    args = {"group": (2,), "bottleneck": (2,), "bottleneck-block": (2,), "depthwise": (),
            "spatial-split": (2,), "split-out": (2, 2)}[name]
    first = T.TRANSFORMS[name](skip, "a", *args, init=T.Init(False, 7))
    second = T.TRANSFORMS[name](skip, "a", *args, init=T.Init(False, 7))
    other = T.TRANSFORMS[name](skip, "a", *args, init=T.Init(False, 8))
    assert all(np.array_equal(first.weights[n], second.weights[n]) for n in first.weights)
    assert any(not np.array_equal(first.weights[n], other.weights[n]) for n in first.weights)
    program = lower(first)
    check_program(program)
    again = lift(program, first.weights)  # the transformed program lifts again
    assert lower(again).root == program.root
    assert shapes(first)[first.output] == (1, 10)


def test_transformable_lists_convs_dense_and_coupled_sets(skip: Graph) -> None:
    rows = {row["name"]: row for row in T.transformable(skip)}
    assert set(rows) == {"a", "b", "c", "d", "fc"}
    assert rows["b"]["coupled"] == rows["c"]["coupled"] == "b,c"
    assert (rows["d"]["in"], rows["d"]["out"], rows["d"]["kernel"]) == (16, 8, "3x3")
