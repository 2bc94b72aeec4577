"""Every array shape compiles onto the accelerator: non-square and wider arrays (whose
lowering pads a convolution's pixels to the columns or its K to the rows) and layers of few
channels after a padded map (issue 31's co-design prices these machines; on main their
convolutions' maps were copied, padded and laid out by the host, one element a cycle).

The quick tests lower the quantized digits CNN with the accelerator passes and run the
lowered program in numpy (each accelerator layer as what it declares); the slow one builds
the C program and co-simulates ws_accel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import assert_calls_match_the_model, compile_and_cosimulate
from test_accel_commands import random_layer_data, run_layer
from test_accel_offload import (
    _accelerated,
    _assert_interpreters_agree,
    _interpreted,
)

from glensidec.backend.accel_layers import layer_geometry
from glensidec.backend.lower import AccelLayer, Copy, Fill, LoweredProgram
from glensidec.frontends.quantize import quantize, save_quantized
from glensidec.hardware.accel import ConvLayer, MemoryConfig
from glensidec.hardware.commands import (
    AccelConfig,
    Compute,
    accel_cycles,
    conv_folds,
    conv_program,
    conv_reference,
)
from glensidec.lang import data
from glensidec.lang.syntax import read_program
from glensidec.nas import transforms as T
from glensidec.nas.cost import write_graph
from glensidec.nas.graph import lift

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _quantized(graph_path: Path, out: Path) -> Path:
    program = read_program(graph_path)
    rng = np.random.default_rng(0)
    calibration = {d.name: rng.standard_normal((4, *d.shape)).astype(np.float32)
                   for d in program.inputs()}
    return save_quantized(quantize(program, calibration), out)


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits CNN in int8."""
    return _quantized(EXAMPLES / "digits_cnn.gs",
                      tmp_path_factory.mktemp("digits") / "digits.q.gs")


@pytest.fixture(scope="module")
def narrow_c1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits CNN with c1 at 8 channels (bottleneck:2), in int8: c2 reads 8 channels,
    few enough that its taps would pack (2 · 8 <= 16 rows)."""
    folder = tmp_path_factory.mktemp("narrow")
    source = read_program(EXAMPLES / "digits_cnn.gs")
    graph = T.bottleneck(lift(source, data.load_weights(source)), "c1", 2)
    write_graph(graph, folder / "narrow.gs")
    return _quantized(folder / "narrow.gs", folder / "narrow.q.gs")


@pytest.fixture(scope="module")
def strided(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench_nas's pick in int8: c2 at its pool's stride (16 output pixels), c2 and c3
    bottlenecked by 2."""
    folder = tmp_path_factory.mktemp("strided")
    source = read_program(EXAMPLES / "digits_cnn.gs")
    graph = T.stride(lift(source, data.load_weights(source)), "c2.maxpool")
    graph = T.bottleneck(T.bottleneck(graph, "c2", 2), "c3", 2)
    write_graph(graph, folder / "strided.gs")
    return _quantized(folder / "strided.gs", folder / "strided.q.gs")


def _host_layouts(lowered: LoweredProgram) -> list[str]:
    """The host's fills and copies that pad or lay out a map for a layer (the flatten
    before the dense layer, a copy of a few pooled rows, is not one)."""
    return [instruction.note for instruction in lowered.instructions
            if isinstance(instruction, Fill) or (isinstance(instruction, Copy) and (
                "im2col" in instruction.note or "interior" in instruction.note
                or ("transposed" in instruction.note and "pooled" not in instruction.note)))]


@pytest.mark.parametrize("array", ["16x32", "8x32"])
def test_a_convolution_whose_pixels_are_padded_to_the_columns_runs_on_the_accelerator(
        strided: Path, array: str) -> None:
    """c2 strided has 16 output pixels: on 32 columns the lowering pads them to 32 (the
    weights are A, the im2col matrix B) and slices the padded ones away (was: the host's
    im2col matrix, and c1's rows copied back to NCHW and padded for it)."""
    lowered = _accelerated(strided, array)
    assert _host_layouts(lowered) == []
    assert sum(1 for layer in lowered.accel_layers()
               if layer.image and not layer.pool and layer.kernel == 3) == 3
    _assert_interpreters_agree(strided, lowered, int(array.split("x")[0]))


@pytest.mark.parametrize("array", ["32x16", "32x32", "8x8"])
def test_every_array_shape_runs_the_digits_cnns_convolutions_on_the_accelerator(
        digits: Path, array: str) -> None:
    """32 rows: c2 and c3's 16 input channels would pack two taps a row, which needs a
    padded map (was: host copies of every map); 8x8: c3's pixels padded to the columns."""
    lowered = _accelerated(digits, array)
    assert _host_layouts(lowered) == []
    assert sum(1 for layer in lowered.accel_layers()
               if layer.image and not layer.pool and layer.kernel == 3) == 3
    _assert_interpreters_agree(digits, lowered, int(array.split("x")[0]))


def test_a_layer_of_few_channels_reads_the_padded_rows_of_the_layer_before_unpacked(
        narrow_c1: Path) -> None:
    """c2 reads c1's 8 channels padded by 1: one tap a row, the padding by the DMA's
    bounds (was: c1's rows transposed, padded and laid out again by the host, 2,880 of
    4,904 predicted cycles)."""
    lowered = _accelerated(narrow_c1, "16x16")
    assert _host_layouts(lowered) == []
    c2 = next(layer for layer in lowered.accel_layers() if layer.image[-1:] == (8,))
    assert (c2.padding, c2.pack_taps) == (1, False)
    _assert_interpreters_agree(narrow_c1, lowered, 16)


def test_an_unpacked_layer_of_few_channels_pads_with_the_dmas_bounds() -> None:
    """pack_taps=False: one tap of 2 channels a row (25 folds, not 5 × 3), the map loaded
    unpadded; the commands compute the layer and take the cycles the C model says."""
    config = AccelConfig(4, 4, 16, MemoryConfig(row_bytes=4, scratchpad_bytes=2048, banks=4,
                                                 bus_bytes=4, latency=2))
    layer = ConvLayer("unpacked", 9, 8, 2, 3, kernel=5, stride=2, padding=2,
                      pack_taps=False)
    assert len(conv_folds(layer, config.rows)) == 25
    feature, weights, quant = random_layer_data(layer, 3)
    program = conv_program(config, layer, quant)
    assert program.input_padding == 0
    assert program.input_image(feature, quant.input_zero_point).size == feature.size
    got = run_layer(program, layer, feature, weights, quant, None, config)
    assert np.array_equal(got, conv_reference(layer, feature, weights, quant))
    rows = sum(command.m_len for command in program.commands if isinstance(command, Compute))
    assert accel_cycles(config, program.commands).compute_rows == rows


@pytest.mark.slow
@pytest.mark.rtl
def test_make_sim_runs_an_unpacked_few_channel_layer_on_ws_accel(
        narrow_c1: Path, tmp_path: Path, sim_cache: Path) -> None:
    """The narrow digits CNN at 16x16 on ws_accel: every layer's bits and cycles as
    predicted, the result the interpreter's, nothing laid out by the host."""
    image = np.random.default_rng(5).integers(-128, 128, (1, 1, 8, 8)).astype(np.int8)
    ran = compile_and_cosimulate(narrow_c1, "16x16", {"image": image}, tmp_path, sim_cache)
    assert_calls_match_the_model(ran.report)
    assert all("accel" in call for call in ran.report["calls"])
    expected = _interpreted(narrow_c1, {"image": image})
    assert np.array_equal(ran.c.reshape(expected.shape), expected)
    assert np.array_equal(ran.sim.reshape(expected.shape), expected)


def test_accel_layers_carry_pack_taps_into_their_geometry(narrow_c1: Path) -> None:
    """The layer's commands are those of its declared geometry (an unpacked layer's table
    is not a packed one's)."""
    lowered = _accelerated(narrow_c1, "16x16")
    unpacked = [layer for layer in lowered.accel_layers() if not layer.pack_taps]
    assert unpacked and all(not layer_geometry(layer).pack_taps for layer in unpacked)
    assert all(isinstance(layer, AccelLayer) for layer in unpacked)


@pytest.mark.parametrize("array", ["16x16", "16x32"])
def test_a_dense_layer_on_the_accelerator_reads_the_pooled_rows_in_their_order(
        digits: Path, strided: Path, array: str) -> None:
    """The classifier, fused onto the accelerator with its epilogue, read the last pool's
    NHWC rows through a host copy into the NCHW order its flatten reads (256 of the digits
    CNN's 5,007 predicted cycles); it reads them as they are, its weights' rows permuted."""
    for source in (digits, strided):
        lowered = _accelerated(source, array)
        assert not [instruction for instruction in lowered.instructions
                    if isinstance(instruction, Copy | Fill)]
        _assert_interpreters_agree(source, lowered, int(array.split("x")[0]))
