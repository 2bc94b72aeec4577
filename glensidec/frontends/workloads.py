"""Benchmark programs as Glenside text: convolutions, an MLP, a depthwise layer.

Each generator returns .gs source (int8 tensors, weights declared as `input`s so no data
files are needed), written with `glensidec.frontends.builders` in the original Glenside's own forms
(NCHW/OIHW conv2d with access-pad and access-windows strides) and printed by
`syntax.format_program`. The rewriting benchmark and its tests parse this text, so they
measure the whole path a user's program takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from glensidec.frontends import builders as B
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, TensorDecl, Term


def _text(root: Term, tensors: dict[str, tuple[int, ...]], comment: str) -> str:
    decls = {name: TensorDecl(name, shape, "i8", "input") for name, shape in tensors.items()}
    return f"; {comment}\n" + format_program(Program("<workload>", decls, root))


def conv2d(in_channels: int, size: int, out_channels: int, kernel: int, stride: int = 1,
           pad: int = 0) -> str:
    """One NCHW conv2d layer, batch 1, square image and kernel."""
    root = B.conv2d_nchw(B.tensor("x"), B.tensor("w"), in_channels, (kernel, kernel),
                         (stride, stride), (pad, pad, pad, pad))
    comment = (f"conv2d {kernel}x{kernel}/{stride} {in_channels}->{out_channels} "
               f"at {size}x{size}, pad {pad}")
    return _text(root, {"x": (1, in_channels, size, size),
                        "w": (out_channels, in_channels, kernel, kernel)}, comment)


def mlp(widths: tuple[int, ...]) -> str:
    """Dense layers of `widths` (input first), requantized to i8 and relu'd in between."""
    layer = B.access(B.tensor("x"), 1)
    tensors: dict[str, tuple[int, ...]] = {"x": (1, widths[0])}
    for index, (inputs, outputs) in enumerate(pairwise(widths)):
        name = f"w{index + 1}"
        tensors[name] = (outputs, inputs)
        product = B.dense(layer, B.tensor(name))
        if index + 2 < len(widths):
            activated = B.compute("relu", B.compute("requantize", product, 1, 0, 8, 0))
            layer = B.access(activated, 1)
        else:
            layer = product
    return _text(layer, tensors, "MLP " + "-".join(str(w) for w in widths))


def depthwise(channels: int, size: int, kernel: int, stride: int, pad: int) -> str:
    """A depthwise NCHW conv2d: every channel its own kernel (no cartesian product)."""
    out = (size + 2 * pad - kernel) // stride + 1
    root = B.depthwise_conv2d_nchw(B.tensor("x"), B.tensor("w"), 1, channels, (out, out),
                                   (kernel, kernel), (stride, stride), (pad, pad, pad, pad))
    comment = f"depthwise {kernel}x{kernel}/{stride} {channels} channels at {size}x{size}"
    return _text(root, {"x": (1, channels, size, size), "w": (channels, 1, kernel, kernel)},
                 comment)


@dataclass(frozen=True)
class Workload:
    name: str
    text: str
    must_map: bool  # every dot-product over a cartesian product must reach the array
    seconds: float  # the end-to-end budget the benchmark checks
    max_enodes: int | None = None


def workloads() -> list[Workload]:
    """The benchmark table's programs, with the budgets of issue 3."""
    return [
        Workload("im2col 3x32x32 * 8x3x3x3", conv2d(3, 32, 8, 3), True, 1.0, 10_000),
        Workload("resnet50 3x3 64->64 @56 pad1", conv2d(64, 56, 64, 3, 1, 1), True, 2.0),
        Workload("resnet50 7x7/2 3->64 @224 pad3", conv2d(3, 224, 64, 7, 2, 3), True, 2.0),
        Workload("resnet50 1x1/2 256->512 @56", conv2d(256, 56, 512, 1, 2, 0), True, 2.0),
        Workload("MLP 784-512-512-10", mlp((784, 512, 512, 10)), True, 2.0),
        Workload("depthwise 3x3/2 64 @112 pad1", depthwise(64, 112, 3, 2, 1), False, 5.0),
    ]
