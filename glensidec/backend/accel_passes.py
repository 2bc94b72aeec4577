"""`compile --accel`: the passes that put a lowered program on the whole accelerator.

In order (each a module of its own, each taking and giving a `LoweredProgram`):

0. `accel_shared`: a requantization of an array call's result written twice (MobileNet-v2's
   projections) is computed once; `accel_swin`: the per-(window, head) requantizations
   of Swin's qkv projection, alike for every window of a head, one loop per head.
0b. `accel_recompute`: an int8 array call whose result several requantizations read
   (ConvNeXt's and ViT's GELU: x and x/√2) is copied once per requantization, when each
   copy's chain makes an accelerator layer.
1. `accel_layers`: an int8 array call with its bias add, skip connection, requantize and
   clips becomes an `AccelLayer` (the DMA's im2col where an operand is a convolution's
   im2col matrix; int8 steps of the result alone after it become one lookup table,
   `accel_tables`); `accel_depthwise`: a depthwise convolution (a host dot-product over
   windows) with its epilogue becomes a grouped `AccelLayer`; `accel_attention`: an int8
   array call of two activations (attention's Q·Kᵀ and softmax·V per head) becomes one
   too, its B operand the layer's weights, loaded from where its producer wrote it;
   `accel_batched`: a batched product of two int8 activations (every item's product one
   host `Dot`) with its requantize becomes one layer of all the items
   (`hardware.batched`).
1b. `accel_layout.join_concatenations`: a channel concatenation of layers' results is
   written by the layers as its NHWC rows, each its block of columns (a row pitch).
2. `accel_pool`: a max-pool of a layer's result, or an average pool (a window sum and its
   requantize), becomes a pooling `AccelLayer` (so a residual add reading the pool reads
   its rows).
3. `fuse_elementwise`: the host's remaining elementwise chains become one loop each;
   `accel_scale`: a channel scale of a layer's result (squeeze-excite's x·s[c],
   requantized) becomes a 1×1 sum-pool layer whose epilogue scales each column;
   `accel_layer_norm`: a LayerNorm's normalisation (e = m − 128·q, then each row times its
   reciprocal, the scale and bias) becomes a depthwise 1×1 layer of q·(−128) in the
   epilogue's per-row mode, the host packing each row's mean and reciprocal;
   `accel_softmax`: softmax·V divided after the product (e·V, then each row times its
   reciprocal) becomes a product layer in the epilogue's per-row mode;
   `accel_softmax_exp`: softmax's e = exp_table[requantize(q − max q)] becomes a
   depthwise 1×1 layer of q·1 in the per-row mode (offset −max) with the table;
   `accel_dense`: a requantized per-channel affine of a layer's rows (DenseNet's
   pre-activation batch-norm and ReLU) becomes one too (or, with a shift the bias cannot
   take after the scale, a depthwise 1×1 layer), and a dense block's chain of
   concatenations is written in place, once, by the layers that make its parts.
4. `accel_swin.fuse_window_residuals`: Swin's output projection, its rows in window
   order, with its requantize (the shifted windows' per-slice requantizations of its
   rows merged first) and the residual add after the window reverse becomes one layer
   that reads the residual's rows and stores its own at their places in the map
   (`AccelLayer.row_order`: its stores and residual loads cut into 2-D row patterns);
   `accel_swin.requantize_in_loops`: a loop whose i32 sum only equal requantizes of its
   parts read (a Swin stage's last residual add, which patch merging's slices read) ends
   in that requantize, the readers copies of its result; then
   `accel_residual`: a quantized residual add after a layer moves into its epilogue (not
   a pooling layer's), and so does a requantized product of two layers' rows (GELU's
   x·Φ(x): ws_epilogue's product mode).
   Then `accel_pool` again: the pools of residual blocks' results, which read the layer
   that took the add; `accel_gather`: a host copy that gathers channels of a layer's rows
   (ShuffleNet's shuffle and split) reads a selection layer's rows (a 0/1 1×1
   convolution) instead; and `join_concatenations` again (concatenations of pools and of
   those selections), then
   `accel_pool` once more (pools of those concatenations: Inception's branch pools).
5. `accel_layout`: a layer whose input is an earlier layer's rows (padded) reads them.
6. `accel_boundary`: a layer operand that is the program's NCHW input in NHWC (padded)
   is made by a layout layer on the accelerator, not by the host's copies.
7. `fold_constants`: buffers only fills and copies of constants write (weights padded and
   packed at run time) become constants. Then `accel_boundary` again: the program's result,
   a layer's rows in NCHW, is written by a layout layer; a dense layer that reads a
   layer's rows reordered reads them as they are, its weights reordered.
8. `accel_attention.write_in_place`: layers whose results a concatenation copies write
   its runs themselves (attention's heads); `accel_heads`: a product whose rows a copy
   interleaves from such a stack of heads (vit_b_16's output projection) reads them in the
   stack's order, its weights' rows permuted; `accel_swin.write_heads_in_place`: layers whose
   results one copy rearranges into another buffer's rows (Swin's contexts interleaved
   into the output projection's rows) store them there, rows `output_pitch` apart.
   Then `accel_softmax_exp.fuse_softmax_maxima`: softmax's row maximum of scores the
   heads' layers write is a max-pool of their rows re-laid as squares of pixels (the
   layers writing and reading them at a row pitch), the host's maximum over a few block
   maxima a row. `accel_swin.fuse_position_biases`: Swin's relative-position bias added to
   the scores (requantize(256·s + b)) becomes depthwise 1×1 layers, a window's scores
   one row and b a per-column bias, 256·s the array's s plus the epilogue's early
   residual 255·s, writing the rows where the maxima's pool reads them.
9. `accel_row_sums`: a LayerNorm's row sums Σq and Σq² of its int8 rows become array
   calls (q times a column of ones; each block of rows times its transpose, the host
   copying the transposes in and the diagonals out).
10. `accel_batch.fold_image_layers`: a batch's per-image matrix layers (or int8 array
   calls) with the same weights and epilogue become one layer of all their rows where the
   exact model prices that lower (a classifier's weights loaded once, not once an image).
11. `accel_swin.store_rows_in_place`: a buffer that copies make of one layer's whole rows,
   each row to a row (Swin's cyclic shift and window partition of a LayerNorm's rows,
   patch merging's 2×2 neighbours), is written by the layer's stores themselves
   (`row_order`), last: a layer storing its rows reordered is no longer traced as them.
12. `accel_layers.program_accel_layers`: every layer's commands and cycles, once, last.
"""

from __future__ import annotations

from glensidec.backend.accel_attention import (
    fuse_activation_products,
    split_head_projections,
    write_in_place,
)
from glensidec.backend.accel_batch import fold_image_layers
from glensidec.backend.accel_batched import fuse_batched_products
from glensidec.backend.accel_boundary import absorb_input_layouts, absorb_result_layouts
from glensidec.backend.accel_dense import fuse_dense_blocks
from glensidec.backend.accel_depthwise import fuse_accel_depthwise
from glensidec.backend.accel_gather import gather_channels
from glensidec.backend.accel_grouped import fuse_accel_grouped
from glensidec.backend.accel_heads import read_heads_in_stack_order
from glensidec.backend.accel_layer_norm import fuse_layer_norms
from glensidec.backend.accel_layers import fuse_accel_layers, program_accel_layers
from glensidec.backend.accel_layout import join_concatenations, read_layer_rows
from glensidec.backend.accel_pool import fuse_accel_pools
from glensidec.backend.accel_recompute import recompute_shared_products
from glensidec.backend.accel_residual import fuse_accel_residuals
from glensidec.backend.accel_row_sums import sum_rows_on_the_array
from glensidec.backend.accel_scale import fuse_accel_scales
from glensidec.backend.accel_shared import share_requantizations
from glensidec.backend.accel_softmax import fuse_row_scaled_products
from glensidec.backend.accel_softmax_exp import (
    fuse_softmax_exponentials,
    fuse_softmax_maxima,
    sum_exponentials_on_the_array,
)
from glensidec.backend.accel_swin import (
    fuse_position_biases,
    fuse_window_residuals,
    merge_window_requantizations,
    requantize_in_loops,
    store_rows_in_place,
    write_heads_in_place,
)
from glensidec.backend.fold_constants import fold_constant_copies
from glensidec.backend.fuse_elementwise import fuse_elementwise
from glensidec.backend.lower import LoweredProgram
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array


def fuse_for_accelerator(lowered: LoweredProgram, weights: dict[str, Array],
                         accel: AccelConfig) -> LoweredProgram:
    """`lowered` run on the accelerator where it can be (a new program)."""
    layers = merge_window_requantizations(share_requantizations(lowered, weights), weights,
                                          accel)
    layers = split_head_projections(layers, weights, accel)
    layers = recompute_shared_products(layers, weights, accel)
    layers = fuse_accel_depthwise(fuse_accel_layers(layers, weights, accel), weights, accel)
    layers = fuse_accel_grouped(layers, weights, accel)
    layers = join_concatenations(fuse_batched_products(
        fuse_activation_products(layers, weights, accel), weights, accel))
    layers = fuse_accel_pools(layers, weights, accel)  # (a later residual add reads its rows)
    layers = fuse_accel_scales(fuse_elementwise(layers), accel)
    layers = fuse_layer_norms(layers, weights, accel)
    layers = fuse_row_scaled_products(layers, weights, accel)
    layers = sum_exponentials_on_the_array(fuse_softmax_exponentials(layers, weights, accel))
    layers = fuse_dense_blocks(layers, weights, accel)
    layers = fuse_window_residuals(layers, weights, accel)
    layers = fuse_accel_residuals(requantize_in_loops(layers), weights, accel)
    layers = fuse_accel_pools(layers, weights, accel)  # pools of the layers that took an add
    # concatenations of pools' rows too, then the pools of those concatenations; channel
    # gathers of layers' rows (ShuffleNet's shuffle and split) as selection layers first
    layers = join_concatenations(gather_channels(layers, weights, accel))
    layers = fuse_accel_pools(layers, weights, accel)
    layers = absorb_input_layouts(read_layer_rows(layers, weights, accel), weights, accel)
    layers = absorb_result_layouts(fold_constant_copies(layers, weights), weights, accel)
    layers = write_heads_in_place(read_heads_in_stack_order(write_in_place(layers), weights,
                                                            accel))
    # (once the heads write the scores in place: their rows re-laid for the pool)
    layers = fuse_softmax_maxima(layers, weights, accel)
    # (then the scores' bias add, writing the rows where the maxima's pool reads them)
    layers = fuse_position_biases(layers, weights, accel)
    layers = sum_rows_on_the_array(layers, accel)
    layers = fold_image_layers(layers, weights, accel)  # (a batch's classifiers: one layer)
    # (last: a layer storing its rows reordered is no longer traced as its rows)
    layers = store_rows_in_place(layers)
    return program_accel_layers(layers, weights, accel)
