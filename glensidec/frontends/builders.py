"""Build common layers as Glenside terms, in the original's own idioms.

Used by the ONNX importer, the examples, the benchmarks and the tests, so every one of them
writes a convolution the way Glenside does (language.md, "Conv2d as the original writes it").
Padding follows ONNX's order: (top, left, bottom, right).
"""

from __future__ import annotations

from glensidec.lang.terms import Arg, ComputeOp, Symbol, Term


def op(name: str, *args: Arg) -> Term:
    return Term(name, tuple(args))


def tensor(name: str) -> Term:
    return op("access-tensor", Symbol(name))


def shape(*dims: int) -> Term:
    return op("shape", *dims)


def access(term: Term, axis: int) -> Term:
    return op("access", term, axis)


def transpose(term: Term, *permutation: int) -> Term:
    return op("access-transpose", term, op("list", *permutation))


def compute(compute_type: str, term: Term, *params: int | float | str) -> Term:
    return op("compute", ComputeOp(compute_type, tuple(params)), term)


def pad(term: Term, axis: int, before: int, after: int, kind: str = "zero-padding") -> Term:
    if before == after == 0:
        return term
    return op("access-pad", term, Symbol(kind), axis, before, after)


def reshape(term: Term, access_dims: tuple[int, ...], item_dims: tuple[int, ...]) -> Term:
    return op("access-reshape", term, op("access-shape", shape(*access_dims), shape(*item_dims)))


def broadcast(term: Term, access_dims: tuple[int, ...], item_dims: tuple[int, ...]) -> Term:
    return op("access-broadcast", term,
              op("access-shape", shape(*access_dims), shape(*item_dims)))


def matmul(left: Term, right_transposed: Term) -> Term:
    """left ((M),(K)) times right given as ((N),(K)): ((M,N),())."""
    return compute("dot-product", op("access-cartesian-product", left, right_transposed))


def batched_matmul(left: Term, right: Term, count: int, m: int, k: int, n: int) -> Term:
    """left ((count,M,K),()) times right ((count,K,N),()) → ((count,M,N),()), one product of
    every batch item at once: each row of left_b paired with each column of right_b, both
    broadcast over the other's axis (a dot-product over an access-pair, as a grouped
    convolution), so later stages see one product, not `count` sliced ones."""
    rows = op("access-insert-axis", reshape(left, (count, m), (k,)), 2)
    columns = op("access-insert-axis",
                 reshape(transpose(right, 0, 2, 1), (count, n), (k,)), 1)
    pair = op("access-pair", broadcast(rows, (count, m, n), (k,)),
              broadcast(columns, (count, m, n), (k,)))
    return compute("dot-product", pair)


def conv2d_nchw(
    activations: Term, weights: Term, in_channels: int, kernel: tuple[int, int],
    strides: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0),
    pad_kind: str = "zero-padding",
) -> Term:
    """NCHW activations × OIHW weights → ((N,O,H',W'),()), as Glenside writes it."""
    top, left, bottom, right = pads
    padded = pad(pad(activations, 2, top, bottom, pad_kind), 3, left, right, pad_kind)
    windows = op("access-windows", access(padded, 1), shape(in_channels, *kernel),
                 shape(1, *strides))
    patches = access(op("access-squeeze", windows, 1), 3)
    product = matmul(access(weights, 1), patches)
    return transpose(product, 1, 0, 2, 3)


def grouped_conv2d_nchw(
    activations: Term, weights: Term, groups: int, in_per_group: int, out_per_group: int,
    kernel: tuple[int, int], strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0), batch: int = 1,
    size: tuple[int, int] = (0, 0),
) -> Term:
    """NCHW activations (batch, G·Cg, H, W) × OIHW weights (G·Og, Cg, KH, KW) →
    ((batch, G·Og, H', W'),()) as one product: the padded map viewed as G groups of Cg
    channels, each pixel's (Cg, KH, KW) window of its group paired with each of the
    group's Og filters (a dot-product over an access-pair, as a depthwise convolution).
    One term, so the quantizer sees one product with its bias and requantize, and the
    accelerator runs it as one grouped layer (backend/accel_grouped.py); `size` is the
    input's (H, W)."""
    top, left, bottom, right = pads
    height, width = size[0] + top + bottom, size[1] + left + right
    out_hw = ((height - kernel[0]) // strides[0] + 1, (width - kernel[1]) // strides[1] + 1)
    padded = pad(pad(activations, 2, top, bottom), 3, left, right)
    split = reshape(padded, (batch, groups, in_per_group, height, width), ())
    windows = op("access-windows", access(split, 2), shape(in_per_group, *kernel),
                 shape(1, *strides))  # ((batch, G, 1, H', W'), (Cg, KH, KW))
    item = (in_per_group, *kernel)
    spread = broadcast(windows, (batch, groups, out_per_group, *out_hw), item)
    filters = reshape(weights, (1, groups, out_per_group, 1, 1), item)
    pixels = broadcast(filters, (batch, groups, out_per_group, *out_hw), item)
    product = compute("dot-product", op("access-pair", spread, pixels))
    return reshape(product, (batch, groups * out_per_group, *out_hw), ())


def sliced_grouped_conv2d_nchw(
    activations: Term, weights: Term, groups: int, in_per_group: int, out_per_group: int,
    kernel: tuple[int, int], strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> Term:
    """Glow's lowering of a grouped convolution: one conv per group on channel slices,
    concatenated along the channels (what the importer wrote before grouped_conv2d_nchw;
    programs written so still compile, each group a layer of its own)."""
    result: Term | None = None
    for group in range(groups):
        x_slice = op("access-slice", activations, 1, group * in_per_group,
                     (group + 1) * in_per_group)
        w_slice = op("access-slice", weights, 0, group * out_per_group,
                     (group + 1) * out_per_group)
        part = conv2d_nchw(x_slice, w_slice, in_per_group, kernel, strides, pads)
        result = part if result is None else op("access-concatenate", result, part, 1)
    assert result is not None
    return result


def conv2d_nhwc(
    activations: Term, weights_hwio: Term, in_channels: int, kernel: tuple[int, int],
    strides: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> Term:
    """NHWC activations × HWIO weights → ((N,H',W',O),())."""
    top, left, bottom, right = pads
    padded = pad(pad(activations, 1, top, bottom), 2, left, right)
    windows = op("access-windows", access(padded, 1), shape(*kernel, in_channels),
                 shape(*strides, 1))
    patches = access(op("access-squeeze", windows, 3), 3)
    return matmul(patches, access(transpose(weights_hwio, 3, 0, 1, 2), 1))


def max_pool_nchw(activations: Term, kernel: tuple[int, int], strides: tuple[int, int],
                  pads: tuple[int, int, int, int] = (0, 0, 0, 0)) -> Term:
    top, left, bottom, right = pads
    padded = pad(pad(activations, 2, top, bottom, "min-padding"), 3, left, right, "min-padding")
    windows = op("access-windows", access(padded, 2), shape(*kernel), shape(*strides))
    return compute("reduce-max", windows)


def depthwise_conv2d_nchw(
    activations: Term, weights: Term, batch: int, channels: int, out_hw: tuple[int, int],
    kernel: tuple[int, int], strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> Term:
    """NCHW activations × (C,1,KH,KW) weights, each channel with its own filter."""
    top, left, bottom, right = pads
    padded = pad(pad(activations, 2, top, bottom), 3, left, right)
    windows = op("access-windows", access(padded, 2), shape(*kernel), shape(*strides))
    filters = reshape(weights, (1, channels, 1, 1), kernel)
    spread = broadcast(filters, (batch, channels, *out_hw), kernel)
    return compute("dot-product", op("access-pair", windows, spread))


def channel_bias(values: Term, bias: Term, dims: tuple[int, ...], channel_axis: int = 1) -> Term:
    """values ((dims),()) plus a per-channel bias vector broadcast along every other axis."""
    expanded = bias
    for axis in range(len(dims)):
        if axis != channel_axis:
            expanded = op("access-insert-axis", expanded, axis)
    spread = broadcast(expanded, dims, ())
    return compute("elementwise-add", op("access-pair", values, spread))


def dense(activations: Term, weights: Term) -> Term:
    """activations ((M),(K)) × weights [units, K] → ((M, units),())."""
    return matmul(activations, access(weights, 1))
