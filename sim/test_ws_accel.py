"""pytest entry for ws_accel: whole layers (im2col load → compute → epilogue → store).

Small arrays and memories keep CI cheap; the memories are small on purpose so the
3×3 layer runs in K pieces everywhere (and two M chunks on 4×4), layers span several N
blocks, and one configuration stores 8-byte rows over a 4-byte bus (store back-pressure).
"""

from __future__ import annotations

import pytest
from cycle_bench import params_env
from sim_harness import build_module, run_cocotb

#: (rows, cols, row bytes, bank rows, bus bytes, latency, accumulator rows, output FIFO rows,
#: epilogue lanes, epilogue FIFO rows[, rows a DMA write carries: 1 if absent[, weight rows
#: a cycle into the array: 1 if absent]])
#: The first is `compile --array 2x2 --accel`'s default: 256 KiB of 2-byte rows is 2^17
#: scratchpad rows, more than 16-bit row fields address (issue 27: data and cycles differed).
#: Output FIFOs of 2 and 4 rows fill up (the array freezes again), 1024 never does.
#: The last, at 8 B/cycle, offers the window schedule's every weight layout (issue 28). The
#: epilogue: a lane per column, or lanes shared by 2 or 4 column groups (a row over 2 or 4
#: cycles), behind FIFOs of 2 rows (the array freezes for every row) to 16. The last
#: writes 4 scratchpad rows at once (ws_dma_load's groups) from a bus of 4 rows a beat. The
#: 8×4 after it takes 4 weight rows a cycle into the array (a tile's weights in 2 beats,
#: read from 4 scratchpad sub-banks while a DMA write carries 2 rows).
CASES = [(2, 2, 2, 32768, 16, 8, 16, 1024, 1, 8), (4, 4, 4, 32, 4, 2, 16, 2, 4, 2),
         (4, 8, 8, 128, 4, 3, 32, 4, 2, 4), (8, 4, 8, 128, 16, 5, 32, 16, 1, 16),
         (4, 4, 4, 32, 8, 2, 16, 1024, 1, 16), (4, 8, 8, 128, 32, 3, 32, 4, 2, 4, 4),
         (8, 4, 8, 128, 16, 5, 32, 16, 1, 16, 2, 4)]

#: ConvLayer fields: the 4×2×2 GEMM of issue 27, 3×3 padded (partial channel fold, two N
#: blocks), strided 1×1, a GEMM, a 2-channel 5×5 whose kernel taps are packed into
#: scratchpad rows, and the 3×3 and the GEMM again with a residual add in the epilogue
#: (after and before the requantize), and max-pools through pooling stores: 3×3 stride 2
#: padded (ResNet's), 2×2 stride 2 unpadded on an odd map; a depthwise 3×3 (each N block
#: reads only its own channels); average pools as window sums through the epilogue (2×2/2,
#: and a global one); and the window schedule (input rows resident, each window a 2-D
#: pattern of them): a 3×3 in several chunks, K pieces and channel planes, a strided 3×3
#: with a residual add over two N blocks, a strided 1×1 (only sampled pixels loaded), a
#: GEMM with an early residual, a 5×5 with packed taps (a plane per group of taps), GEMMs
#: whose tilings keep the weights resident over several chunks (with a residual add) or
#: give one band the rows tight weight buffers leave; pools forced to each schedule (the
#: windows of resident input rows as 2-D patterns, and the gathered taps); and the 3×3
#: again in today's im2col schedule; a GEMM whose epilogue maps its results through a
#: lookup table (an element-wise non-linearity) before a residual add, one whose epilogue
#: multiplies its (looked-up) rows by the residual rows (a GELU's x·Φ(x)), one whose
#: epilogue takes each row's offset and multiplier from its residual row (the per-row
#: mode: LayerNorm's normalisation; on arrays of 8 columns or more), and an average
#: pool with a table; squeeze-excite's channel scale (1×1 sum pools whose epilogue multiplies each
#: channel by its scale) in both pool schedules; and a GEMM and a 3×3 whose N blocks
#: accumulate side by side (each COMPUTE names its accumulator rows), in every such
#: tiling that fits; and windows that are not k×k with adjacent taps (issue 30): a 1×5
#: padded along x only (Inception's 1×7 in small) in every window tiling, and a 3×3 of
#: dilation 2 padded by 2 (FCN's) in the im2col schedule; and layers of fewer K folds than
#: the epilogue's cycles a row (a 1×1 of 2 channels, a 1-channel 3×3 with packed taps: the
#: digits CNN's first layer) in chunks of a few output rows reading one resident band,
#: every such tiling (where the configuration's epilogue makes any); and a 3×3 followed in
#: the same command stream by a 2×2 max-pool of its result, the pool's first load fenced
#: (it waits for the convolution's stores: reads the result in place, in memory); and the
#: same chained through the scratchpad (the convolution's stores write the pool's input
#: rows on chip, its pooling stores wait for the rows they read), in both pool schedules.
LAYERS = [
    {"name": "gemm4x2x2", "height": 4, "width": 1, "channels": 2, "out_channels": 2},
    {"name": "conv3x3", "height": 5, "width": 5, "channels": 6, "out_channels": 6,
     "kernel": 3, "stride": 1, "padding": 1},
    {"name": "conv1x1s2", "height": 6, "width": 6, "channels": 8, "out_channels": 11,
     "kernel": 1, "stride": 2, "padding": 0},
    {"name": "gemm", "height": 9, "width": 1, "channels": 12, "out_channels": 5},
    {"name": "packed5x5s2", "height": 9, "width": 8, "channels": 2, "out_channels": 3,
     "kernel": 5, "stride": 2, "padding": 2},
    {"name": "conv3x3_residual", "height": 5, "width": 5, "channels": 6, "out_channels": 6,
     "kernel": 3, "stride": 1, "padding": 1, "residual": "after"},
    {"name": "gemm_residual", "height": 9, "width": 1, "channels": 12, "out_channels": 5,
     "residual": "early"},
    {"name": "maxpool3x3s2", "height": 7, "width": 6, "channels": 6, "out_channels": 6,
     "kernel": 3, "stride": 2, "padding": 1, "pool": True},
    {"name": "maxpool2x2s2", "height": 5, "width": 6, "channels": 5, "out_channels": 5,
     "kernel": 2, "stride": 2, "padding": 0, "pool": True},
    {"name": "depthwise3x3", "height": 5, "width": 5, "channels": 10, "out_channels": 10,
     "kernel": 3, "stride": 1, "padding": 1, "groups": 10},
    {"name": "avgpool2x2s2", "height": 5, "width": 4, "channels": 6, "out_channels": 6,
     "kernel": 2, "stride": 2, "padding": 0, "pool": "sum"},
    {"name": "globalavgpool", "height": 3, "width": 3, "channels": 5, "out_channels": 5,
     "kernel": 3, "stride": 1, "padding": 0, "pool": "sum"},
    {"name": "window3x3", "height": 4, "width": 3, "channels": 6, "out_channels": 6,
     "kernel": 3, "stride": 1, "padding": 1, "schedule": "window"},
    {"name": "window3x3s2_residual", "height": 5, "width": 3, "channels": 5,
     "out_channels": 5, "kernel": 3, "stride": 2, "padding": 1, "residual": "after",
     "schedule": "window"},
    {"name": "window1x1s2", "height": 6, "width": 6, "channels": 8, "out_channels": 5,
     "kernel": 1, "stride": 2, "padding": 0, "schedule": "window"},
    {"name": "window_gemm_residual", "height": 9, "width": 1, "channels": 12,
     "out_channels": 5, "residual": "early", "schedule": "window"},
    {"name": "window_packed5x5s2", "height": 5, "width": 4, "channels": 2,
     "out_channels": 3, "kernel": 5, "stride": 2, "padding": 2, "schedule": "window"},
    {"name": "window_gemm40_residual", "height": 40, "width": 1, "channels": 12,
     "out_channels": 8, "residual": "after", "schedule": "window"},
    {"name": "window_gemm12x40", "height": 12, "width": 1, "channels": 40,
     "out_channels": 8, "schedule": "window"},
    {"name": "band_maxpool3x3s2", "height": 7, "width": 6, "channels": 6, "out_channels": 6,
     "kernel": 3, "stride": 2, "padding": 1, "pool": True, "schedule": "band"},
    {"name": "gather_maxpool3x3s2", "height": 7, "width": 6, "channels": 6,
     "out_channels": 6, "kernel": 3, "stride": 2, "padding": 1, "pool": True,
     "schedule": "gather"},
    {"name": "band_avgpool2x2s2", "height": 5, "width": 4, "channels": 6, "out_channels": 6,
     "kernel": 2, "stride": 2, "padding": 0, "pool": "sum", "schedule": "band"},
    {"name": "im2col3x3", "height": 4, "width": 3, "channels": 6, "out_channels": 6,
     "kernel": 3, "stride": 1, "padding": 1, "schedule": "im2col"},
    {"name": "gemm_lookup_residual", "height": 9, "width": 1, "channels": 12,
     "out_channels": 5, "residual": "after", "lookup": True},
    {"name": "gemm_lookup_product", "height": 9, "width": 1, "channels": 12,
     "out_channels": 5, "residual": "product", "lookup": True},
    {"name": "gemm_rows", "height": 9, "width": 1, "channels": 12, "out_channels": 16,
     "residual": "rows"},
    {"name": "globalavgpool_lookup", "height": 3, "width": 3, "channels": 5,
     "out_channels": 5, "kernel": 3, "stride": 1, "padding": 0, "pool": "sum",
     "lookup": True},
    {"name": "channel_scale", "height": 3, "width": 4, "channels": 6, "out_channels": 6,
     "kernel": 1, "stride": 1, "padding": 0, "pool": "sum", "scale": True},
    {"name": "gather_channel_scale", "height": 3, "width": 4, "channels": 6,
     "out_channels": 6, "kernel": 1, "stride": 1, "padding": 0, "pool": "sum",
     "scale": True, "schedule": "gather"},
    {"name": "interleave_gemm24x20", "height": 24, "width": 1, "channels": 20,
     "out_channels": 20, "schedule": "interleave"},
    {"name": "interleave3x3", "height": 5, "width": 4, "channels": 6, "out_channels": 12,
     "kernel": 3, "stride": 1, "padding": 1, "schedule": "interleave"},
    {"name": "window1x5", "height": 3, "width": 5, "channels": 5, "out_channels": 5,
     "kernel": 1, "kernel_w": 5, "padding": 0, "padding_w": 2, "schedule": "window"},
    {"name": "im2col3x3d2", "height": 4, "width": 4, "channels": 5, "out_channels": 5,
     "kernel": 3, "padding": 2, "dilation": [2, 2], "schedule": "im2col"},
    {"name": "one_band1x1", "height": 5, "width": 3, "channels": 2, "out_channels": 3,
     "schedule": "one-band"},
    {"name": "one_band_packed3x3", "height": 6, "width": 5, "channels": 1, "out_channels": 3,
     "kernel": 3, "stride": 1, "padding": 1, "schedule": "one-band"},
    {"name": "chain3x3_maxpool", "height": 4, "width": 4, "channels": 5, "out_channels": 6,
     "kernel": 3, "stride": 1, "padding": 1, "chain": 2},
    {"name": "batched3_gemm", "height": 9, "width": 1, "channels": 12, "out_channels": 5,
     "batched": 3},
    {"name": "batched4_gemm7x20x18", "height": 7, "width": 1, "channels": 20,
     "out_channels": 18, "batched": 4},
    {"name": "batched3_rows_gemm9x12x16", "height": 9, "width": 1, "channels": 12,
     "out_channels": 16, "batched": 3, "residual": "rows"},
    {"name": "onchip3x3_maxpool", "height": 4, "width": 4, "channels": 5, "out_channels": 6,
     "kernel": 3, "stride": 1, "padding": 1, "onchip": 2},
]


@pytest.mark.parametrize("case", CASES, ids=lambda v: "-".join(map(str, v)))
def test_ws_accel(case: tuple[int, ...]) -> None:
    rows, cols, row_bytes, bank_rows, bus, latency, acc_depth, out_depth, lanes, depth = case[:10]
    parameters = {"ROWS": rows, "COLS": cols, "ROW_BYTES": row_bytes, "BANKS": 4,
                  "BANK_ROWS": bank_rows, "BUS_BYTES": bus, "LATENCY": latency,
                  "ACC_DEPTH": acc_depth, "QUEUE_DEPTH": 8, "OUT_DEPTH": out_depth,
                  "EPI_LANES": lanes, "EPI_DEPTH": depth, **(
                      {"WRITE_ROWS": case[10]} if len(case) > 10 else {}), **(
                      {"W_LOAD": case[11]} if len(case) > 11 else {})}
    runner = build_module("ws_accel", "ws_accel_" + "_".join(map(str, case)), parameters)
    env = params_env(parameters, layers=LAYERS)
    run_cocotb(runner, "ws_accel", "cocotb_ws_accel", "layers", env)
