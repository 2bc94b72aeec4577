"""Transformers in the NAS layer graph (issue 31): the importer's encoder idioms lift and
lower term for term, and the transformations of attention, MLP, low-rank projections and
residual blocks are checked graph functions (no training here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx_models import imported
from test_transformer import Size, encoder_block

from glensidec.errors import GlensideError
from glensidec.lang.data import load_weights
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, parse_program, read_program
from glensidec.lang.typecheck import check_program
from glensidec.nas import transforms as T
from glensidec.nas.coupling import coupled_sets
from glensidec.nas.graph import (
    Attention,
    Concat,
    Graph,
    LayerNorm,
    Slice,
    TokenDense,
    lift,
    lower,
    shapes,
)

REPO = Path(__file__).resolve().parent.parent
VIT = REPO / "examples" / "digits_vit.gs"
TINY = Size(tokens=4, features=8, heads=2, hidden=16)


@pytest.fixture
def vit() -> Graph:
    program = read_program(VIT)
    return lift(program, load_weights(program))


@pytest.fixture
def block(tmp_path: Path) -> Graph:
    program = imported(encoder_block(size=TINY), tmp_path)
    return lift(program, load_weights(program))


def run(graph: Graph, seed: int = 3) -> np.ndarray:
    program = parse_program(format_program(lower(graph)), "<t>")
    name, decl = next(iter(graph.inputs.items()))
    x = np.random.default_rng(seed).standard_normal(decl.shape).astype(np.float32)
    return run_program(program, {**graph.weights, name: x}, check_program(program))


def close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def kinds(graph: Graph) -> dict[str, int]:
    counted: dict[str, int] = {}
    for layer in graph.layers.values():
        counted[type(layer.op).__name__] = counted.get(type(layer.op).__name__, 0) + 1
    return counted


# -- lift and lower ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [TINY, Size(16, 64, 4, 128)], ids=["tiny", "small"])
def test_the_imported_encoder_block_lifts_and_lowers_term_for_term(size: Size,
                                                                   tmp_path: Path) -> None:
    program = imported(encoder_block(size=size), tmp_path)
    graph = lift(program, load_weights(program))
    counted = kinds(graph)
    # Q, K, V, out and the two MLP layers; one attention; two LayerNorms, each with its
    # scale and shift; two residual adds (and the GELU's product)
    assert (counted["TokenDense"], counted["Attention"], counted["LayerNorm"]) == (6, 1, 2)
    (attention,) = (la for la in graph.layers.values() if isinstance(la.op, Attention))
    assert attention.op.heads == size.heads  # type: ignore[union-attr]
    assert lower(graph).root == program.root


def test_the_digits_vit_round_trips_and_names_its_layers(vit: Graph) -> None:
    program = read_program(VIT)
    assert lower(vit).root == program.root
    assert isinstance(vit.layers["b0_attn"].op, Attention)
    assert isinstance(vit.layers["b1_ln2.layernorm"].op, LayerNorm)
    assert all(isinstance(vit.layers[f"b0_{p}"].op, TokenDense)
               for p in ("q", "k", "v", "out", "fc1", "fc2"))
    assert shapes(vit)["b0_attn"] == (1, 4, 32)


def test_a_softmax_outside_attention_is_still_not_a_layer() -> None:
    text = ("(input x f32 (shape 1 2 4 4))\n"
            "(access (compute softmax (access (access-tensor x) 3)) 4)\n")
    with pytest.raises(GlensideError, match=r"soft\.gs:2:1: error: not a layer"):
        lift(parse_program(text, "soft.gs"), {})


# -- coupling through the residual stream ------------------------------------------------------


def test_the_residual_stream_couples_embedding_out_projections_and_mlp_outputs(
        vit: Graph) -> None:
    stream = coupled_sets(vit)["embed"]
    assert stream.producers == ("embed", "b0_out", "b0_fc2", "b1_out", "b1_fc2")
    assert not stream.fixed
    assert coupled_sets(vit)["b0_fc1"].producers == ("b0_fc1",)


def test_narrowing_the_stream_shrinks_every_layer_of_it(vit: Graph) -> None:
    narrow = T.bottleneck(vit, "embed", 2)
    shape_of = shapes(narrow)
    for name in ("embed", "tokens", "b0_res1", "b1_res2", "final_ln", "b1_out"):
        assert shape_of[name] == (1, 4, 16), name
    assert narrow.weights["position"].shape == (1, 4, 16)
    assert narrow.weights["b0_q_w"].shape == (32, 16)  # the projections' inputs
    assert narrow.weights["head_w"].shape == (10, 64)  # flatten of 4 tokens x 16
    assert shape_of[narrow.output] == (1, 10)
    run(narrow)


def test_the_mlp_bottleneck_is_exact_when_the_cut_units_are_dead(vit: Graph) -> None:
    weights = dict(vit.weights)
    w, b = weights["b0_fc1_w"].copy(), weights["b0_fc1_b"].copy()
    dead = np.argsort((w.astype(np.float64) ** 2).sum(axis=1))[:32]
    w[dead], b[dead] = 0.0, 0.0
    weights.update(b0_fc1_w=w, b0_fc1_b=b)
    graph = vit.with_layers(vit.layers, weights)
    cut = T.bottleneck(graph, "b0_fc1", 2)
    assert cut.weights["b0_fc1_w"].shape == (32, 32)
    assert cut.weights["b0_fc2_w"].shape == (32, 32)
    close(run(cut), run(graph))


# -- the transformations -------------------------------------------------------------------


def with_zeroed(graph: Graph, rows: dict[str, list[int]], columns: dict[str, list[int]]) -> Graph:
    weights = {n: a.copy() for n, a in graph.weights.items()}
    for name, index in rows.items():
        weights[name][index] = 0.0
    for name, index in columns.items():
        weights[name][:, index] = 0.0
    return graph.with_layers(graph.layers, weights)


def test_fewer_heads_keeps_the_strongest_and_is_exact_when_the_others_are_dead(
        vit: Graph) -> None:
    second = list(range(16, 32))  # head 1 of b0_attn
    dead = with_zeroed(vit, {"b0_q_w": second, "b0_k_w": second, "b0_v_w": second,
                             "b0_q_b": second, "b0_k_b": second, "b0_v_b": second},
                       {"b0_out_w": second})
    fewer = T.TRANSFORMS["heads"](dead, "b0_attn", 1)
    assert fewer.layers["b0_attn"].op.heads == 1  # type: ignore[union-attr]
    assert fewer.weights["b0_q_w"].shape == (16, 32)
    assert fewer.weights["b0_out_w"].shape == (32, 16)
    # one head's softmax over its own logits equals the two heads' first (the second was
    # dead: zero logits, zero values)
    close(run(fewer), run(dead))


def test_a_smaller_head_dimension_is_exact_when_the_cut_dimensions_are_dead(vit: Graph) -> None:
    cut = [j for h in range(2) for j in range(h * 16 + 8, h * 16 + 16)]
    dead = with_zeroed(vit, {f"b1_{p}_{s}": cut for p in "qkv" for s in "wb"},
                       {"b1_out_w": cut})
    smaller = T.TRANSFORMS["head-dim"](dead, "b1_attn", 2)
    assert smaller.weights["b1_k_w"].shape == (16, 32)
    assert smaller.layers["b1_attn"].op.heads == 2  # type: ignore[union-attr]
    close(run(smaller), run(dead))


def test_low_rank_is_exact_for_a_matrix_of_that_rank(vit: Graph) -> None:
    rng = np.random.default_rng(0)
    weights = dict(vit.weights)
    weights["b0_out_w"] = (rng.standard_normal((32, 4)) @ rng.standard_normal((4, 32))).astype(
        np.float32)
    graph = vit.with_layers(vit.layers, weights)
    factored = T.TRANSFORMS["low-rank"](graph, "b0_out", 4)
    assert factored.weights["b0_out_w"].shape == (32, 4)
    assert factored.weights["b0_out_w_down"].shape == (4, 32)
    assert factored.layers["b0_out"].inputs == ("b0_out_down",)
    close(run(factored), run(graph))


def test_dropping_a_block_is_exact_when_its_branch_adds_nothing(vit: Graph) -> None:
    dead = with_zeroed(vit, {"b1_fc2_w": list(range(32)), "b1_fc2_b": list(range(32))}, {})
    dropped = T.TRANSFORMS["drop"](dead, "b1_res2")
    assert not {"b1_fc1", "b1_fc2", "b1_ln2", "b1_res2"} & set(dropped.layers)
    assert "b1_fc1_w" not in dropped.weights
    close(run(dropped), run(dead))
    both = T.TRANSFORMS["drop"](T.TRANSFORMS["drop"](vit, "b0_res1"), "b0_res2")
    assert not [n for n in both.layers if n.startswith("b0_")]
    run(both)


def test_a_grouped_projection_is_exact_when_its_weights_are_block_diagonal(
        vit: Graph) -> None:
    """group on a token projection (issue 31's grouped projections): G products on slices
    of the tokens' features (their last axis), concatenated along it; it round-trips."""
    weights = dict(vit.weights)
    w = weights["b0_fc1_w"].copy()  # 64 units x 32 features: two blocks of 32 x 16
    w[:32, 16:], w[32:, :16] = 0.0, 0.0
    weights["b0_fc1_w"] = w
    graph = vit.with_layers(vit.layers, weights)
    grouped = T.group(graph, "b0_fc1", 2)
    assert grouped.weights["b0_fc1_w_g0"].shape == (32, 16)
    assert grouped.layers["b0_fc1"].op == Concat(2)
    assert [grouped.layers[f"b0_fc1_in{g}"].op for g in range(2)] == [
        Slice(2, 0, 16), Slice(2, 16, 32)]
    assert isinstance(grouped.layers["b0_fc1_g1"].op, TokenDense)
    close(run(grouped), run(graph))
    program = lower(grouped)
    check_program(program)
    assert lower(lift(program, grouped.weights)).root == program.root


def test_heads_and_a_grouped_q_compose_in_the_search_order(vit: Graph) -> None:
    """heads cuts q, k and v before group makes q slices and products (ORDER): the other
    order would leave heads no q projection to cut."""
    from glensidec.nas import search as S

    both = S.apply(vit, ["b0_attn", "b0_q"], (S.Choice("heads", 1), S.Choice("group", 2)),
                   T.INHERIT)
    assert both.layers["b0_attn"].op.heads == 1  # type: ignore[union-attr]
    assert both.weights["b0_q_w_g0"].shape == (8, 16)
    run(both)
    with pytest.raises(GlensideError, match="not a dense projection"):
        T.TRANSFORMS["heads"](T.group(vit, "b0_q", 2), "b0_attn", 1)


def test_the_post_norm_encoder_block_transforms_too(block: Graph) -> None:
    (attention,) = (n for n, la in block.layers.items() if isinstance(la.op, Attention))
    out = run(T.TRANSFORMS["heads"](block, attention, 1))
    assert out.shape == run(block).shape
    adds = [r["name"] for r in T.transformable(block) if r["kind"] == "residual add"]
    assert len(adds) == 2
    for add in adds:
        run(T.TRANSFORMS["drop"](block, add))


@pytest.mark.parametrize(("kind", "layer", "number"), [
    ("heads", "b0_attn", 2), ("head-dim", "b0_attn", 1)])
def test_the_identity_factors_return_the_graph(vit: Graph, kind: str, layer: str,
                                               number: int) -> None:
    assert T.TRANSFORMS[kind](vit, layer, number) is vit


@pytest.mark.parametrize(("kind", "layer", "numbers", "message"), [
    ("heads", "b0_attn", (3,), "the attention has 2 heads; keep 1 to 1"),
    ("heads", "b0_q", (1,), "no attention layer 'b0_q'"),
    ("head-dim", "b0_attn", (3,), "head dimension 16 is not divisible by 3"),
    ("low-rank", "b0_out", (32,), "the rank must be 1 to 31"),
    ("low-rank", "b0_attn", (4,), "no dense/tokendense layer 'b0_attn'"),
    ("drop", "b0_q", (), "no residual add 'b0_q'"),
    ("bottleneck", "b0_q", (2,), "cannot follow kept channels through a attention"),
    ("bottleneck", "b0_out", (2,), None),
    ("group", "b0_q", (3,), "units 32 is not divisible by 3"),
    ("group", "b0_fc2", (64,), "input features 64 is not divisible|units 32 is not"),
    ("group", "b0_attn", (2,), "no dense/tokendense layer 'b0_attn'"),
])
def test_preconditions_are_one_line_errors(vit: Graph, kind: str, layer: str,
                                           numbers: tuple[int, ...], message: str | None) -> None:
    if message is None:  # the stream's later producers shrink with the embedding
        narrow = T.TRANSFORMS[kind](vit, layer, *numbers)
        assert narrow.weights["embed_w"].shape == (16, 16)
        return
    with pytest.raises(GlensideError, match=message):
        T.TRANSFORMS[kind](vit, layer, *numbers)


def test_a_branch_used_outside_its_block_cannot_be_dropped(block: Graph) -> None:
    """The post-norm block's first residual add: its skip is the input; its branch's
    projections read the input too, but nothing of the branch leaves it."""
    adds = [r["name"] for r in T.transformable(block) if r["kind"] == "residual add"]
    dropped = T.TRANSFORMS["drop"](block, adds[0])
    assert not [la for la in dropped.layers.values() if isinstance(la.op, Attention)]
    mul = next(n for n, la in block.layers.items()
               if type(la.op).__name__ == "Binary" and n not in adds)
    with pytest.raises(GlensideError, match="no residual add"):
        T.TRANSFORMS["drop"](block, mul)


@pytest.mark.parametrize(("kind", "layer", "numbers"), [
    ("heads", "b0_attn", (1,)), ("head-dim", "b1_attn", (2,)), ("low-rank", "b0_fc1", (8,)),
    ("drop", "b0_res1", ()), ("group", "b1_fc2", (2,))])
def test_random_init_is_seeded_and_lowers_to_a_typed_program(vit: Graph, kind: str,
                                                             layer: str,
                                                             numbers: tuple[int, ...]) -> None:
    first = T.TRANSFORMS[kind](vit, layer, *numbers, init=T.Init(False, 7))
    second = T.TRANSFORMS[kind](vit, layer, *numbers, init=T.Init(False, 7))
    assert all(np.array_equal(first.weights[n], second.weights[n]) for n in first.weights)
    if kind != "drop":  # dropping makes no weights
        other = T.TRANSFORMS[kind](vit, layer, *numbers, init=T.Init(False, 8))
        assert any(not np.array_equal(first.weights[n], other.weights[n])
                   for n in first.weights)
    program = lower(first)
    check_program(program)
    assert lower(lift(program, first.weights)).root == program.root
    assert shapes(first)[first.output] == (1, 10)


def test_transform_lists_attention_and_residual_adds(vit: Graph) -> None:
    rows = {r["name"]: r for r in T.transformable(vit)}
    assert rows["b0_attn"]["kind"] == "attention"
    assert rows["b0_attn"]["kernel"] == "2 heads of 16"
    assert rows["b1_res2"]["kind"] == "residual add"
    assert rows["b1_res2"]["coupled"] == "b1_fc1,b1_fc2"
    assert rows["embed"]["coupled"] == "embed,b0_out,b0_fc2,b1_out,b1_fc2"


def test_the_torch_model_equals_the_interpreter(vit: Graph, block: Graph) -> None:
    """Batched (two examples) PyTorch model of the attention, LayerNorm, token dense and
    position embedding layers against the interpreter on the lowered program."""
    torch = pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")
    from glensidec.nas.torch_model import GraphModel

    variants = [vit, block, T.TRANSFORMS["heads"](vit, "b0_attn", 1),
                T.TRANSFORMS["drop"](T.bottleneck(vit, "embed", 2), "b1_res1"),
                T.group(vit, "b1_v", 4)]
    for graph in variants:
        name, decl = next(iter(graph.inputs.items()))
        x = np.random.default_rng(1).standard_normal((2, *decl.shape[1:])).astype(np.float32)
        with torch.no_grad():
            ours = GraphModel(graph)(torch.tensor(x)).numpy()
        program = lower(graph)
        for index in range(2):
            expected = run_program(program, {**graph.weights, name: x[index:index + 1]},
                                   check_program(program))
            close(ours[index:index + 1], expected)


# -- the search over a transformer ------------------------------------------------------------


def test_the_search_space_of_the_vit(vit: Graph) -> None:
    from glensidec.nas import search as S

    space = S.search_space(vit, S.SPACE)
    options = {layer: [str(c) for c in choices]
               for layer, choices in zip(space.layers, space.options, strict=True)}
    assert options["b0_attn"] == ["keep", "heads:1", "head-dim:2"]
    assert options["b1_res2"] == ["keep", "drop"]
    # the stream's width is the embedding's choice; the MLP's hidden width fc1's
    assert "bottleneck:2" in options["embed"] and "b0_out" in options
    assert "bottleneck:2" not in options["b0_out"] and "bottleneck:4" in options["b0_fc1"]
    # q, k and v shrink by heads and head-dim, and may be grouped (not low-rank)
    assert options["b0_q"] == ["keep", "group:2", "group:4"]
    assert "group:2" in options["b0_out"] and "low-rank:8" in options["b0_out"]
    everything = tuple(choices[-1] for choices in space.options)
    smallest = S.apply(vit, space.layers, everything, T.INHERIT)
    assert shapes(smallest)[smallest.output] == (1, 10)
    run(smallest)


def test_the_cnn_spaces_are_unchanged_by_the_transformer_options() -> None:
    """The transformer's options exist only where a transformer has them: on the digits
    CNNs the default space (every kind) is the CNN kinds' space."""
    from glensidec.nas import search as S

    cnn_kinds = ("group", "bottleneck", "depthwise", "bottleneck-block", "spatial-split",
                 "stride")
    for name in ("digits_cnn", "residual_digits_cnn"):
        program = read_program(REPO / "examples" / f"{name}.gs")
        graph = lift(program, load_weights(program))
        assert S.search_space(graph, S.SPACE) == S.search_space(graph, cnn_kinds)


def test_fisher_measures_every_token_projection_per_feature(vit: Graph) -> None:
    pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")
    from glensidec.nas import fisher
    from glensidec.nas.torch_model import Data

    points = fisher.block_outputs(vit)
    assert "b0_q.bias" in points and "embed.bias" in points and "b1_fc1.bias" in points
    rng = np.random.default_rng(0)
    batch = Data(rng.random((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 8))
    deltas = fisher.per_channel(vit, batch, points)
    assert deltas["b0_fc1.bias"].shape == (64,) and deltas["embed.bias"].shape == (32,)
    # a feature that is zero everywhere contributes nothing
    dead = with_zeroed(vit, {"b0_q_w": [3], "b0_q_b": [3]}, {})
    assert fisher.per_channel(dead, batch, ["b0_q.bias"])["b0_q.bias"][3] == 0.0


def test_a_dropped_block_makes_its_layers_choices_moot(vit: Graph) -> None:
    """One network, one candidate: choices inside a dropped branch are set to keep, so a
    search does not spend its budget on copies of one network."""
    from glensidec.nas import search as S

    space = S.search_space(vit, S.SPACE)
    assert space.branches["b0_res1"] == ["b0_q", "b0_k", "b0_v", "b0_attn", "b0_out"]
    choices = {"b0_attn": "heads:1", "b0_out": "low-rank:8", "b0_res1": "drop",
               "b1_attn": "heads:1"}
    candidate = tuple(S.Choice.parse(choices.get(layer, "keep")) for layer in space.layers)
    canonical = space.canonical(candidate)
    assert space.describe(canonical) == {"b0_res1": "drop", "b1_attn": "heads:1"}
    assert space.canonical(canonical) == canonical
    same_network = S.apply(vit, space.layers, candidate, T.INHERIT)
    assert (lower(same_network).root
            == lower(S.apply(vit, space.layers, canonical, T.INHERIT)).root)


def test_the_evolution_starts_from_uniform_block_drops(vit: Graph) -> None:
    from glensidec.nas import search as S

    space = S.search_space(vit, S.SPACE)
    assert space.attention_blocks == ["b0_res1", "b1_res1"]
    described = [space.describe(c) for c in S.uniform_candidates(space)]
    assert {"b0_res1": "drop", "b1_res1": "drop"} in described
    assert {"b0_res2": "drop", "b1_res2": "drop"} in described
    assert {f"b{i}_res{j}": "drop" for i in (0, 1) for j in (1, 2)} in described
