"""ONNX → Glenside: a readable float (f32) program plus its weights.

`import_onnx(model, outdir)` writes `outdir/<model>.gs` and `outdir/<model>.npz`. Every ONNX
node output becomes a `let` named after it, so the program reads like the graph. Values are
kept as accesses with every axis in the access part, `((full shape),())`, which is what the
builders produce; each op re-`access`es its operands as its idiom needs.

Constants (initializers, Constant nodes) are numpy arrays until a program needs them; then
they become weights (`.npz`), or literals when they hold one number. Batch-norm after a
convolution is folded into its weights (Glow's rewrite); anything the importer cannot
translate exactly is a GlensideError naming the node, its op and what is missing.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np

from glensidec.errors import GlensideError
from glensidec.frontends import builders as B
from glensidec.lang.constructs import COMPUTE_TYPES, CONSTRUCTS
from glensidec.lang.data import alias_line
from glensidec.lang.dtypes import F32_MAX
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, TensorDecl, Term
from glensidec.lang.typecheck import AccessType, TypeTable, infer

Array = np.ndarray[Any, Any]
Value = Term | Array  # a computed access, or a constant known at import time

RESERVED = set(CONSTRUCTS) | set(COMPUTE_TYPES) | {"input", "weight", "let"}


# -- names ------------------------------------------------------------------------------


def sanitize(name: str) -> str:
    """An ONNX name as a Glenside symbol `[A-Za-z_][A-Za-z0-9_\\-.]*`.

    PyTorch's `/layer1/conv/Conv_output_0` becomes `layer1.conv.Conv`.
    """
    name = re.sub(r"_output_0(_[A-Za-z0-9]+)?$", r"\1", name).replace("/", ".")
    cleaned = re.sub(r"[^A-Za-z0-9_\-.]", "_", name).strip("_.") or "t"
    if not re.match(r"[A-Za-z_]", cleaned):
        cleaned = "t" + cleaned
    return cleaned


@dataclass
class Names:
    """Unique program names, given out in a deterministic order."""

    taken: set[str] = field(default_factory=lambda: set(RESERVED))

    def fresh(self, wanted: str) -> str:
        base = sanitize(wanted)
        name, counter = base, 2
        while name in self.taken:
            name, counter = f"{base}_{counter}", counter + 1
        self.taken.add(name)
        return name


# -- the import state ---------------------------------------------------------------------


@dataclass
class Node:
    """The parts of an ONNX NodeProto the translators need."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any]
    domain: str = ""

    def where(self) -> str:
        return f"node '{self.name}' ({self.op})"


class Importer:
    def __init__(self, weights_file: str):
        self.weights_file = weights_file
        self.values: dict[str, Value] = {}
        self.tensors: dict[str, TensorDecl] = {}
        self.weights: dict[str, Array] = {}
        self.names: dict[Term, str] = {}
        self.types: TypeTable = {}
        self.symbols = Names()

    # -- values -------------------------------------------------------------------------
    def full_shape(self, term: Term) -> tuple[int, ...]:
        infer(term, self.tensors, self.types)
        access = self.types[term]
        assert isinstance(access, AccessType)
        return access.full

    def as_full_access(self, term: Term) -> Term:
        """The invariant every value keeps: all axes in the access part, ((full),())."""
        infer(term, self.tensors, self.types)
        access = self.types[term]
        assert isinstance(access, AccessType)
        return term if not access.item else B.access(term, len(access.full))

    def dynamic(self, node: Node, index: int) -> Term:
        value = self.value(node, index)
        if not isinstance(value, Term):
            raise GlensideError(f"{node.where()}: input {index} ('{node.inputs[index]}') is a "
                                f"constant; the importer needs a computed tensor here")
        return value

    def constant(self, node: Node, index: int) -> Array:
        value = self.value(node, index)
        if isinstance(value, Term):
            raise GlensideError(f"{node.where()}: input {index} ('{node.inputs[index]}') must be "
                                f"a constant (an initializer or Constant node)")
        return value

    def value(self, node: Node, index: int) -> Value:
        return self.values[node.inputs[index]]

    def has_input(self, node: Node, index: int) -> bool:
        return index < len(node.inputs) and node.inputs[index] != ""

    def term_of(self, value: Value, name: str) -> Term:
        """A value as an access ((full),()): constants become weights or literals."""
        if isinstance(value, Term):
            return value
        return self.weight(name, value)

    def weight(self, name: str, array: Array) -> Term:
        array = np.ascontiguousarray(array, dtype=np.float32)
        if array.size == 1:
            scalar = float(array.reshape(()))
            if not math.isfinite(scalar):
                raise GlensideError(f"constant '{name}' is {scalar}: only finite numbers")
            literal = B.op("access-literal", B.op("literal", scalar))
            if array.ndim == 0:
                return literal
            return B.reshape(literal, array.shape, ())
        symbol = self.symbols.fresh(name)
        self.tensors[symbol] = TensorDecl(symbol, tuple(array.shape), "f32", "weight",
                                          self.weights_file)
        self.weights[symbol] = array
        return B.tensor(symbol)

    def name_output(self, node: Node, term: Term) -> None:
        if term not in self.names and term.op != "access-tensor":
            self.names[term] = self.symbols.fresh(node.outputs[0])


# -- numpy-style broadcasting and elementwise ops -------------------------------------------


def broadcast_to(term: Term, shape: tuple[int, ...], target: tuple[int, ...]) -> Term:
    """numpy broadcasting of an access ((shape),()) to ((target),())."""
    if len(shape) < len(target):
        shape = (1,) * (len(target) - len(shape)) + shape
        term = B.reshape(term, shape, ())
    if shape != target:
        term = B.broadcast(term, target, ())
    return term


def elementwise(imp: Importer, node: Node, compute_type: str) -> Value:
    left, right = imp.value(node, 0), imp.value(node, 1)
    if not isinstance(left, Term) and not isinstance(right, Term):
        raise GlensideError(f"{node.where()}: both inputs are constants (fold them first)")
    terms, shapes = [], []
    for index, value in enumerate((left, right)):
        term = imp.term_of(value, f"{node.outputs[0]}_{'ab'[index]}")
        terms.append(term)
        shapes.append(imp.full_shape(term))
    try:
        target = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise GlensideError(f"{node.where()}: shapes {shapes[0]} and {shapes[1]} do not "
                            f"broadcast") from None
    spread = [broadcast_to(t, s, target) for t, s in zip(terms, shapes, strict=True)]
    return B.compute(compute_type, B.op("access-pair", *spread))


def channel_op(values: Term, vector: Term, dims: tuple[int, ...], compute_type: str,
               channel_axis: int = 1) -> Term:
    """values ((dims),()) combined with a per-channel vector broadcast along the rest."""
    shape = tuple(d if axis == channel_axis else 1 for axis, d in enumerate(dims))
    spread = B.broadcast(B.reshape(vector, shape, ()), dims, ())
    return B.compute(compute_type, B.op("access-pair", values, spread))


# -- attribute helpers ---------------------------------------------------------------------


def ints(node: Node, name: str, default: list[int]) -> list[int]:
    return [int(v) for v in node.attributes.get(name, default)]


def check_attributes(node: Node, known: set[str]) -> None:
    unknown = sorted(set(node.attributes) - known)
    if unknown:
        raise GlensideError(f"{node.where()}: attribute '{unknown[0]}' is not supported "
                            f"(supported: {', '.join(sorted(known)) or 'none'})")


def spatial_pads(node: Node, in_hw: tuple[int, ...], kernel: tuple[int, ...],
                 strides: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right), from `pads` or `auto_pad`."""
    auto_pad = node.attributes.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max((math.ceil(i / s) - 1) * s + k - i, 0)
                  for i, k, s in zip(in_hw, kernel, strides, strict=True)]
        small = [t // 2 for t in totals]
        large = [t - t // 2 for t in totals]
        before, after = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        return before[0], before[1], after[0], after[1]
    if auto_pad not in ("NOTSET", "VALID"):
        raise GlensideError(f"{node.where()}: auto_pad '{auto_pad}' is not supported")
    pads = ints(node, "pads", [0, 0, 0, 0]) if auto_pad == "NOTSET" else [0, 0, 0, 0]
    if len(pads) != 4 or any(p < 0 for p in pads):
        raise GlensideError(f"{node.where()}: pads {pads} must be 4 non-negative numbers")
    return pads[0], pads[1], pads[2], pads[3]


def spatial_input(imp: Importer, node: Node) -> tuple[Term, tuple[int, ...]]:
    x = imp.dynamic(node, 0)
    shape = imp.full_shape(x)
    if len(shape) != 4:
        raise GlensideError(f"{node.where()}: only 2-D NCHW inputs are supported, got shape "
                            f"{shape}")
    return x, shape


def unit_dilations(node: Node) -> None:
    if any(d != 1 for d in ints(node, "dilations", [1, 1])):
        raise GlensideError(f"{node.where()}: dilations {ints(node, 'dilations', [])} are not "
                            f"supported (only 1)")


def out_size(size: int, kernel: int, stride: int, before: int, after: int) -> int:
    return (size + before + after - kernel) // stride + 1


# -- translators ---------------------------------------------------------------------------


Translator = Callable[[Importer, Node], Value]
TRANSLATORS: dict[str, Translator] = {}


TranslatorT = TypeVar("TranslatorT", bound=Callable[..., Value])


def translates(*ops: str) -> Callable[[TranslatorT], TranslatorT]:
    def register(function: TranslatorT) -> TranslatorT:
        for name in ops:
            TRANSLATORS[name] = function
        return function

    return register


CONV_ATTRIBUTES = {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad"}


@dataclass
class ConvWeights:
    weights: Array
    bias: Array | None


def conv_weights(imp: Importer, node: Node) -> ConvWeights:
    weights = imp.constant(node, 1)
    bias = imp.constant(node, 2) if imp.has_input(node, 2) else None
    return ConvWeights(weights, bias)


@translates("Conv")
def conv(imp: Importer, node: Node, folded: ConvWeights | None = None) -> Value:
    check_attributes(node, CONV_ATTRIBUTES)
    unit_dilations(node)
    x, (batch, channels, height, width) = spatial_input(imp, node)
    params = folded or conv_weights(imp, node)
    weights = params.weights
    if weights.ndim != 4:
        raise GlensideError(f"{node.where()}: only 2-D convolutions are supported")
    out_channels, group_channels, kh, kw = (int(d) for d in weights.shape)
    groups = int(node.attributes.get("group", 1))
    if group_channels * groups != channels or out_channels % groups:
        raise GlensideError(f"{node.where()}: weights {weights.shape} do not fit {channels} "
                            f"input channels in {groups} groups")
    strides = tuple(ints(node, "strides", [1, 1]))
    pads = spatial_pads(node, (height, width), (kh, kw), strides)
    base = node.outputs[0]
    if groups == 1:
        product = B.conv2d_nchw(x, imp.weight(f"{base}_w", weights), channels, (kh, kw),
                                (strides[0], strides[1]), pads)
    elif groups == channels == out_channels:
        out_hw = (out_size(height, kh, strides[0], pads[0], pads[2]),
                  out_size(width, kw, strides[1], pads[1], pads[3]))
        product = B.depthwise_conv2d_nchw(x, imp.weight(f"{base}_w", weights), batch, channels,
                                          out_hw, (kh, kw), (strides[0], strides[1]), pads)
    else:
        product = grouped_conv(imp, x, imp.weight(f"{base}_w", weights), groups,
                               group_channels, out_channels // groups, (kh, kw),
                               (strides[0], strides[1]), pads)
    if params.bias is None:
        return product
    dims = imp.full_shape(product)
    return channel_op(product, imp.weight(f"{base}_b", params.bias), dims, "elementwise-add")


def grouped_conv(imp: Importer, x: Term, weights: Term, groups: int, in_per_group: int,
                 out_per_group: int, kernel: tuple[int, int], strides: tuple[int, int],
                 pads: tuple[int, int, int, int]) -> Term:
    """Glow's lowering: one convolution per group on channel slices, concatenated."""
    result: Term | None = None
    for group in range(groups):
        x_slice = B.op("access-slice", x, 1, group * in_per_group, (group + 1) * in_per_group)
        w_slice = B.op("access-slice", weights, 0, group * out_per_group,
                       (group + 1) * out_per_group)
        part = B.conv2d_nchw(x_slice, w_slice, in_per_group, kernel, strides, pads)
        result = part if result is None else B.op("access-concatenate", result, part, 1)
    assert result is not None
    return result


def batch_norm_parameters(imp: Importer, node: Node) -> tuple[Array, Array]:
    """(A, shift) with BN(x) = A·x + shift per channel: A = γ/√(var+ε), shift = β − mean·A."""
    check_attributes(node, {"epsilon", "momentum", "training_mode", "spatial"})
    if int(node.attributes.get("training_mode", 0)) != 0 or len(node.outputs) > 1:
        raise GlensideError(f"{node.where()}: training-mode batch-norm is not supported")
    gamma, beta, mean, var = (imp.constant(node, i).astype(np.float64) for i in range(1, 5))
    epsilon = float(node.attributes.get("epsilon", 1e-5))
    scale = gamma / np.sqrt(var + epsilon)
    return scale, beta - mean * scale


def fold_batch_norm(imp: Importer, conv_node: Node, bn_node: Node) -> ConvWeights:
    """W' = W·A, b' = (b − mean)·A + β (Glow's constant rewrite)."""
    params = conv_weights(imp, conv_node)
    scale, shift = batch_norm_parameters(imp, bn_node)
    weights = params.weights.astype(np.float64) * scale.reshape(-1, 1, 1, 1)
    bias = params.bias.astype(np.float64) if params.bias is not None else 0.0
    return ConvWeights(weights.astype(np.float32), (bias * scale + shift).astype(np.float32))


@translates("BatchNormalization")
def batch_norm(imp: Importer, node: Node) -> Value:
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    if len(dims) < 2:
        raise GlensideError(f"{node.where()}: the input needs a channel axis, got {dims}")
    scale, shift = batch_norm_parameters(imp, node)
    base = node.outputs[0]
    scaled = channel_op(x, imp.weight(f"{base}_scale", scale), dims, "elementwise-mul")
    return channel_op(scaled, imp.weight(f"{base}_shift", shift), dims, "elementwise-add")


def matmul_rows(imp: Importer, node: Node, left: Value, right_rows: Value) -> Term:
    """left (M,K) times right given as rows (N,K): ((M,N),())."""
    left_term = imp.term_of(left, f"{node.outputs[0]}_a")
    right_term = imp.term_of(right_rows, f"{node.outputs[0]}_w")
    return B.matmul(B.access(left_term, 1), B.access(right_term, 1))


def transposed(value: Value) -> Value:
    return value.T if not isinstance(value, Term) else B.transpose(value, 1, 0)


@translates("Gemm")
def gemm(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"alpha", "beta", "transA", "transB"})
    alpha = float(node.attributes.get("alpha", 1.0))
    beta = float(node.attributes.get("beta", 1.0))
    a, b = imp.value(node, 0), imp.value(node, 1)
    if not isinstance(a, Term) and not isinstance(b, Term):
        raise GlensideError(f"{node.where()}: both matrix inputs are constants")
    if int(node.attributes.get("transA", 0)):
        a = transposed(a)
    rows = b if int(node.attributes.get("transB", 0)) else transposed(b)  # (N,K)
    if alpha != 1.0:  # fold alpha into whichever operand is constant
        if not isinstance(rows, Term):
            rows = rows * np.float32(alpha)
        elif not isinstance(a, Term):
            a = a * np.float32(alpha)
    product: Term = matmul_rows(imp, node, a, rows)
    if alpha != 1.0 and isinstance(a, Term) and isinstance(rows, Term):
        literal = imp.weight(f"{node.outputs[0]}_alpha", np.array(alpha, np.float32))
        dims = imp.full_shape(product)
        product = B.compute("elementwise-mul", B.op(
            "access-pair", product, broadcast_to(literal, (), dims)))
    if not imp.has_input(node, 2):
        return product
    c = imp.value(node, 2)
    if not isinstance(c, Term):
        c = c.astype(np.float32) * np.float32(beta)
    elif beta != 1.0:
        raise GlensideError(f"{node.where()}: beta={beta} with a computed C is not supported")
    dims = imp.full_shape(product)
    if not isinstance(c, Term) and c.shape in ((dims[1],), (1, dims[1])) and c.size > 1:
        return channel_op(product, imp.weight(f"{node.outputs[0]}_b", c.reshape(-1)), dims,
                          "elementwise-add")
    c_term = imp.term_of(c, f"{node.outputs[0]}_b")
    c_shape = imp.full_shape(c_term)
    spread = broadcast_to(c_term, c_shape, dims)
    return B.compute("elementwise-add", B.op("access-pair", product, spread))


@translates("MatMul")
def matmul(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    a, b = imp.value(node, 0), imp.value(node, 1)
    b_shape = b.shape if not isinstance(b, Term) else imp.full_shape(b)
    if len(b_shape) != 2:
        raise GlensideError(f"{node.where()}: only a 2-D right operand is supported, got "
                            f"shape {tuple(b_shape)}")
    if not isinstance(a, Term):
        if a.ndim != 2:
            raise GlensideError(f"{node.where()}: a constant left operand must be 2-D")
        return matmul_rows(imp, node, a, transposed(b))
    a_shape = imp.full_shape(a)
    if len(a_shape) < 2:
        raise GlensideError(f"{node.where()}: the left operand must be at least 2-D")
    rows = math.prod(a_shape[:-1])
    flat = a if len(a_shape) == 2 else B.reshape(a, (rows, a_shape[-1]), ())
    product = matmul_rows(imp, node, flat, transposed(b))
    if len(a_shape) == 2:
        return product
    return B.reshape(product, (*a_shape[:-1], int(b_shape[1])), ())


@translates("Relu")
def relu(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    return B.compute("relu", imp.dynamic(node, 0))


@translates("Clip")
def clip(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"min", "max"})
    bounds = [float(node.attributes.get("min", -F32_MAX)),
              float(node.attributes.get("max", F32_MAX))]
    for index in (1, 2):
        if imp.has_input(node, index):
            bounds[index - 1] = float(imp.constant(node, index).reshape(()))
    low, high = (max(-F32_MAX, min(F32_MAX, b)) for b in bounds)
    return B.compute("clip", imp.dynamic(node, 0), low, high)


@translates("Identity", "Dropout")
def identity(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"ratio", "seed"} if node.op == "Dropout" else set())
    if len(node.outputs) > 1 and node.outputs[1]:
        raise GlensideError(f"{node.where()}: the mask output is not supported")
    if node.op == "Dropout" and imp.has_input(node, 2):
        # training_mode = true drops at random: no inference program computes that
        training = imp.value(node, 2)
        if isinstance(training, Term) or bool(np.asarray(training).reshape(-1)[0]):
            raise GlensideError(f"{node.where()}: training_mode=true is not supported "
                                f"(inference only)")
    return imp.value(node, 0)


POOL_ATTRIBUTES = {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations",
                   "storage_order", "count_include_pad"}


def pool_windows(imp: Importer, node: Node, pad_kind: str) -> Term:
    check_attributes(node, POOL_ATTRIBUTES)
    unit_dilations(node)
    if int(node.attributes.get("ceil_mode", 0)):
        raise GlensideError(f"{node.where()}: ceil_mode=1 is not supported")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise GlensideError(f"{node.where()}: the Indices output is not supported")
    x, (_, _, height, width) = spatial_input(imp, node)
    kernel = tuple(ints(node, "kernel_shape", []))
    strides = tuple(ints(node, "strides", [1, 1]))
    if len(kernel) != 2 or len(strides) != 2:
        raise GlensideError(f"{node.where()}: needs a 2-D kernel_shape and strides")
    top, left, bottom, right = spatial_pads(node, (height, width), kernel, strides)
    if pad_kind == "zero-padding" and (top, left, bottom, right) != (0, 0, 0, 0) and not int(
            node.attributes.get("count_include_pad", 0)):
        raise GlensideError(f"{node.where()}: padding with count_include_pad=0 is not "
                            f"supported (export with count_include_pad=1)")
    padded = B.pad(B.pad(x, 2, top, bottom, pad_kind), 3, left, right, pad_kind)
    return B.op("access-windows", B.access(padded, 2), B.shape(*kernel), B.shape(*strides))


@translates("MaxPool")
def max_pool(imp: Importer, node: Node) -> Value:
    return B.compute("reduce-max", pool_windows(imp, node, "min-padding"))


@translates("AveragePool")
def average_pool(imp: Importer, node: Node) -> Value:
    return B.compute("reduce-mean", pool_windows(imp, node, "zero-padding"))


@translates("GlobalAveragePool")
def global_average_pool(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    if len(dims) < 3:
        raise GlensideError(f"{node.where()}: needs a spatial input (N,C,…), got {dims}")
    mean = B.compute("reduce-mean", B.access(x, 2))
    return B.reshape(mean, (*dims[:2], *(1 for _ in dims[2:])), ())


# ONNX's numpy-broadcasting binary ops, one compute type each.
ELEMENTWISE_OPS = {"Add": "elementwise-add", "Sub": "elementwise-sub",
                   "Mul": "elementwise-mul", "Div": "elementwise-div"}


@translates(*ELEMENTWISE_OPS)
def binary(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    return elementwise(imp, node, ELEMENTWISE_OPS[node.op])


@translates("Flatten")
def flatten(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"axis"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    axis = int(node.attributes.get("axis", 1))
    if not -len(dims) <= axis <= len(dims):
        raise GlensideError(f"{node.where()}: axis {axis} is out of range for rank {len(dims)}")
    axis += len(dims) if axis < 0 else 0  # ONNX: a negative axis counts from the back
    return B.reshape(x, (math.prod(dims[:axis]), math.prod(dims[axis:])), ())


@translates("Reshape")
def reshape(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"allowzero"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    wanted = [int(d) for d in imp.constant(node, 1).reshape(-1)]
    allow_zero = int(node.attributes.get("allowzero", 0))
    target = [dims[i] if d == 0 and not allow_zero else d for i, d in enumerate(wanted)]
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise GlensideError(f"{node.where()}: invalid target shape {wanted}")
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        target[target.index(-1)] = math.prod(dims) // max(known, 1)
    if math.prod(target) != math.prod(dims):
        raise GlensideError(f"{node.where()}: cannot reshape {dims} to {wanted}")
    return B.reshape(x, tuple(target), ())


@translates("Transpose")
def transpose(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"perm"})
    x = imp.dynamic(node, 0)
    rank = len(imp.full_shape(x))
    permutation = ints(node, "perm", list(reversed(range(rank))))
    return B.transpose(x, *permutation)


@translates("Concat")
def concat(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"axis"})
    parts = [imp.term_of(imp.value(node, i), f"{node.outputs[0]}_{i}")
             for i in range(len(node.inputs))]
    rank = len(imp.full_shape(parts[0]))
    axis = int(node.attributes["axis"]) % rank
    result = parts[0]
    for part in parts[1:]:
        result = B.op("access-concatenate", result, part, axis)
    return result


@translates("Pad")
def pad(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"mode", "pads", "value"})
    mode = node.attributes.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "constant":
        raise GlensideError(f"{node.where()}: mode '{mode}' is not supported (only constant)")
    x = imp.dynamic(node, 0)
    rank = len(imp.full_shape(x))
    if imp.has_input(node, 1):
        pads = [int(p) for p in imp.constant(node, 1).reshape(-1)]
    else:
        pads = ints(node, "pads", [])
    value = float(node.attributes.get("value", 0.0))
    if imp.has_input(node, 2):
        value = float(imp.constant(node, 2).reshape(()))
    if value != 0.0:
        raise GlensideError(f"{node.where()}: constant_value {value} is not supported (only 0)")
    axes = list(range(rank))
    if imp.has_input(node, 3):
        axes = [int(a) % rank for a in imp.constant(node, 3).reshape(-1)]
    if len(pads) != 2 * len(axes) or any(p < 0 for p in pads):
        raise GlensideError(f"{node.where()}: pads {pads} must be 2×{len(axes)} non-negative "
                            f"numbers")
    for index, axis in enumerate(axes):
        x = B.pad(x, axis, pads[index], pads[index + len(axes)])
    return x


@translates("Softmax")
def softmax(imp: Importer, node: Node, opset: int = 13) -> Value:
    check_attributes(node, {"axis"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    rank = len(dims)
    if opset < 13:  # softmax of the input coerced to 2-D at `axis`
        axis = int(node.attributes.get("axis", 1)) % rank
        flat = B.reshape(x, (math.prod(dims[:axis]), math.prod(dims[axis:])), ())
        result = B.compute("softmax", B.access(flat, 1))
        return B.reshape(result, dims, ())
    axis = int(node.attributes.get("axis", -1)) % rank
    if axis == rank - 1:
        return B.access(B.compute("softmax", B.access(x, rank - 1)), rank)
    moved = B.op("access-move-axis", x, axis, rank - 1)
    result = B.access(B.compute("softmax", B.access(moved, rank - 1)), rank)
    return B.op("access-move-axis", result, rank - 1, axis)


# -- the graph -----------------------------------------------------------------------------


def _load_model(model_path: Path) -> Any:
    try:
        import onnx
    except ImportError:
        raise GlensideError("glensidec import needs the onnx package (pip install onnx)") from None
    if not model_path.is_file():
        raise GlensideError(f"no such model file: {model_path}")
    try:
        model = onnx.load(str(model_path))
        onnx.checker.check_model(model)
    except Exception as error:  # onnx raises protobuf DecodeError, ValidationError, …
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GlensideError(f"{model_path}: not a valid ONNX model (truncated or corrupt?): "
                            f"{first}") from None
    return model


def _attributes(node_proto: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node_proto.attribute}


def onnx_input_names(model: Any) -> dict[str, str]:
    """The graph's runtime inputs: ONNX name → the program's input name (sanitized, unique).

    Inputs are the first names given out, so this is the same in every import of the model.
    """
    initializers = {i.name for i in model.graph.initializer}
    names = Names()
    return {v.name: names.fresh(v.name) for v in model.graph.input
            if v.name not in initializers}


def _input_decl(imp: Importer, value_info: Any, name: str) -> TensorDecl:
    import onnx

    tensor_type = value_info.type.tensor_type
    if tensor_type.elem_type != onnx.TensorProto.FLOAT:
        kind = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        raise GlensideError(f"input '{value_info.name}' is {kind}: only float inputs")
    if not tensor_type.HasField("shape"):
        raise GlensideError(f"input '{value_info.name}' has no shape; static shapes needed")
    dims = []
    for index, dim in enumerate(tensor_type.shape.dim):
        if not dim.HasField("dim_value") or dim.dim_value <= 0:
            symbolic = dim.dim_param or "unknown"
            raise GlensideError(f"input '{value_info.name}' has a dynamic shape: dim {index} "
                                f"is '{symbolic}'; export the model with static shapes")
        dims.append(int(dim.dim_value))
    imp.symbols.taken.add(name)
    return TensorDecl(name, tuple(dims), "f32", "input")


def _fusable_batch_norms(nodes: list[Node], constants: set[str],
                         outputs: set[str]) -> dict[str, Node]:
    """Conv output name → the BatchNormalization that alone consumes it (weights constant)."""
    consumers: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            consumers[name] = consumers.get(name, 0) + 1
    producers = {node.outputs[0]: node for node in nodes}
    fused = {}
    for node in nodes:
        if node.op != "BatchNormalization":
            continue
        source = producers.get(node.inputs[0])
        if (source is not None and source.op == "Conv" and consumers[node.inputs[0]] == 1
                and node.inputs[0] not in outputs
                and all(name in constants for name in source.inputs[1:] + node.inputs[1:])):
            fused[source.outputs[0]] = node
    return fused


def build_program(model: Any, weights_file: str, program_path: str) -> tuple[Program,
                                                                           dict[str, Array]]:
    """Translate a loaded ONNX model; returns the program and its weight arrays."""
    from onnx import numpy_helper

    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    imp = Importer(weights_file)
    for initializer in graph.initializer:
        imp.values[initializer.name] = numpy_helper.to_array(initializer)
    input_names = onnx_input_names(model)
    for value_info in graph.input:
        if value_info.name in imp.values:
            continue
        decl = _input_decl(imp, value_info, input_names[value_info.name])
        imp.tensors[decl.name] = decl
        imp.values[value_info.name] = B.tensor(decl.name)
    nodes = [Node(n.name or n.output[0], n.op_type, list(n.input), list(n.output),
                  _attributes(n), n.domain) for n in graph.node]
    constants = set(imp.values) - {v.name for v in graph.input if v.name not in
                                   {i.name for i in graph.initializer}}
    constants |= {n.outputs[0] for n in nodes if n.op == "Constant"}
    fused = _fusable_batch_norms(nodes, constants, {o.name for o in graph.output})
    skipped = {bn.name for bn in fused.values()}
    for node in nodes:
        if node.name in skipped and node.op == "BatchNormalization":
            continue
        _translate(imp, node, fused, opset)
    if len(graph.output) != 1:
        raise GlensideError(f"the model has {len(graph.output)} outputs; a program has one")
    result = imp.values.get(graph.output[0].name)
    if not isinstance(result, Term):
        raise GlensideError(f"output '{graph.output[0].name}' is not computed from an input")
    names = {term: name for term, name in imp.names.items()}
    program = Program(program_path, dict(imp.tensors), result, names)
    infer(result, program.tensors, imp.types)
    return program, imp.weights


def _translate(imp: Importer, node: Node, fused: dict[str, Node], opset: int) -> None:
    if node.domain not in ("", "ai.onnx"):
        raise GlensideError(f"{node.where()}: op domain '{node.domain}' is not supported")
    for name in node.inputs:
        if name and name not in imp.values:
            raise GlensideError(f"{node.where()}: input '{name}' is not defined by any graph "
                                f"input, initializer or earlier node")
    if node.op == "Constant":
        imp.values[node.outputs[0]] = _constant_value(node)
        return
    translator = TRANSLATORS.get(node.op)
    if translator is None:
        raise GlensideError(f"{node.where()}: unsupported op '{node.op}' (supported: "
                            f"{', '.join(sorted(TRANSLATORS))})")
    if node.op == "Conv" and node.outputs[0] in fused:
        bn = fused[node.outputs[0]]
        value = conv(imp, node, fold_batch_norm(imp, node, bn))
        node = Node(node.name, node.op, node.inputs, bn.outputs, node.attributes, node.domain)
    elif node.op == "Softmax":
        value = softmax(imp, node, opset)
    else:
        value = translator(imp, node)
    if isinstance(value, Term):
        value = imp.as_full_access(value)  # type-checks now, so an error names this node
        imp.name_output(node, value)
    imp.values[node.outputs[0]] = value


def _constant_value(node: Node) -> Array:
    from onnx import numpy_helper

    if "value" not in node.attributes:
        raise GlensideError(f"{node.where()}: only Constant nodes with a tensor 'value'")
    return np.asarray(numpy_helper.to_array(node.attributes["value"]))


# -- writing -------------------------------------------------------------------------------


def write_npz(path: Path, arrays: dict[str, Array]) -> None:
    """An .npz with fixed timestamps, so the same arrays give the same bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, np.ascontiguousarray(arrays[name]),
                                          allow_pickle=False)


def write_atomically(outdir: Path, files: Callable[[Path], None]) -> None:
    """Fill a temporary sibling of `outdir`, then rename it into place; no debris on failure."""
    outdir = outdir.absolute()
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", suffix=".tmp", dir=outdir.parent))
    old = outdir.with_name(f".{outdir.name}.old-{os.getpid()}")
    try:
        files(staging)
        if outdir.exists():
            if not outdir.is_dir():
                raise GlensideError(f"{outdir} exists and is not a directory")
            outdir.rename(old)
        staging.rename(outdir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if old.exists() and not outdir.exists():
            old.rename(outdir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def import_onnx(model_path: str | Path, outdir: str | Path) -> Path:
    """Write `outdir/<stem>.gs` and `outdir/<stem>.npz` from an ONNX model; returns the .gs."""
    return import_model(model_path, outdir)[0]


def import_model(model_path: str | Path, outdir: str | Path) -> tuple[Path, dict[str, str]]:
    """`import_onnx`, also returning the inputs' names: ONNX name → program name."""
    model_path, outdir = Path(model_path), Path(outdir)
    stem = sanitize(model_path.stem)
    model = _load_model(model_path)
    program, weights = build_program(model, f"{stem}.npz", str(outdir / f"{stem}.gs"))
    header = (f"; Imported from {model_path.name} by glensidec import "
              f"(ONNX opset {_opset(model)}, producer {model.producer_name or 'unknown'}).\n"
              f"; Weights: {stem}.npz. Float (f32) program; `glensidec quantize` makes an "
              f"int8 one.\n")
    renamed = {o: n for o, n in onnx_input_names(model).items() if o != n}
    if renamed:  # `glensidec run --input NAME=…` accepts the ONNX names through these lines
        header += "; Inputs renamed from the ONNX model (either name works with --input):\n"
        header += "".join(alias_line(o, n) + "\n" for o, n in renamed.items())
    text = header + format_program(program)

    def files(staging: Path) -> None:
        (staging / f"{stem}.gs").write_text(text, encoding="utf-8")
        write_npz(staging / f"{stem}.npz", weights)

    write_atomically(outdir, files)
    return outdir / f"{stem}.gs", onnx_input_names(model)


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


@click.command("import")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--outdir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the program and its weights into.")
def import_command(model: Path, outdir: Path) -> None:
    """Import an ONNX MODEL as a float Glenside program (+ weights) in OUTDIR."""
    program, input_names = import_model(model, outdir)
    click.echo(f"wrote {program} and {program.with_suffix('.npz')}")
    for original, name in input_names.items():
        note = "" if original == name else " (renamed: --input accepts either name)"
        click.echo(f"input '{original}' → {name}{note}")
