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
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from glensidec.collector import without_cycle_collection
from glensidec.errors import GlensideError, escaped, quoted
from glensidec.frontends import builders as B
from glensidec.lang.data import alias_line, npz_bytes
from glensidec.lang.dtypes import F32_MAX, INTEGER_NAMES, integer_range
from glensidec.lang.syntax import NAME_PATTERN, format_program
from glensidec.lang.terms import Program, Symbol, TensorDecl, Term
from glensidec.lang.typecheck import TypeTable, infer, infer_access
from glensidec.outputs import check_output_directory, write_directory

Array = np.ndarray[Any, Any]
Value = Term | Array  # a computed access, or a constant known at import time

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
    """Unique program names, given out in a deterministic order. No word is reserved in the
    language, so a name the model has (PyTorch's `input`, a node called `relu`) is kept."""

    taken: set[str] = field(default_factory=set)

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
    proto: Any = field(default=None, compare=False, repr=False)  # the NodeProto, for folding

    def where(self) -> str:
        return f"node {quoted(self.name)} ({escaped(self.op)})"


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
        return infer_access(term, self.tensors, self.types).full

    def as_full_access(self, term: Term) -> Term:
        """The invariant every value keeps: all axes in the access part, ((full),())."""
        access = infer_access(term, self.tensors, self.types)
        return term if not access.item else B.access(term, len(access.full))

    def dynamic(self, node: Node, index: int) -> Term:
        value = self.value(node, index)
        if not isinstance(value, Term):
            raise GlensideError(f"{node.where()}: input {index} ({quoted(node.inputs[index])}) "
                                "is a constant; the importer needs a computed tensor here")
        return value

    def constant(self, node: Node, index: int) -> Array:
        value = self.value(node, index)
        if isinstance(value, Term):
            raise GlensideError(f"{node.where()}: input {index} ({quoted(node.inputs[index])}) "
                                "must be a constant (an initializer or Constant node)")
        return value

    def value(self, node: Node, index: int) -> Value:
        return self.values[node.inputs[index]]

    def has_input(self, node: Node, index: int) -> bool:
        return index < len(node.inputs) and node.inputs[index] != ""

    def dtype(self, term: Term) -> str:
        return infer_access(term, self.tensors, self.types).dtype

    def term_of(self, value: Value, name: str, dtype: str = "f32") -> Term:
        """A value as an access ((full),()): constants become weights or literals."""
        if isinstance(value, Term):
            return value
        return self.weight(name, value, dtype)

    def weight(self, name: str, array: Array, dtype: str = "f32") -> Term:
        """A constant as a `dtype` weight, or a literal when it holds one number."""
        array = integer_constant(name, array, dtype) if dtype in INTEGER_NAMES else \
            np.ascontiguousarray(array, dtype=np.float32)
        if array.size == 1:
            number = array.reshape(()).item()
            if not math.isfinite(number):
                raise GlensideError(f"constant {quoted(name)} is {number}: only finite numbers")
            literal = B.op("access-literal", B.op("literal", number) if dtype == "f32" else
                           B.op("literal", number, Symbol(dtype)))
            if array.ndim == 0:
                return literal
            return B.reshape(literal, array.shape, ())
        symbol = self.symbols.fresh(name)
        self.tensors[symbol] = TensorDecl(symbol, tuple(array.shape), dtype, "weight",
                                          self.weights_file)
        self.weights[symbol] = array
        return B.tensor(symbol)

    def name_output(self, node: Node, term: Term, index: int = 0) -> None:
        if term not in self.names and term.op != "access-tensor":
            self.names[term] = self.symbols.fresh(node.outputs[index])


def integer_constant(name: str, array: Array, dtype: str) -> Array:
    """A constant operand of an integer tensor, as that dtype (ONNX gives both one type)."""
    low, high = integer_range(dtype)
    values = np.asarray(array)
    if not (np.all(np.isfinite(values)) and np.all(values == np.round(values))
            and values.min(initial=low) >= low and values.max(initial=high) <= high):
        raise GlensideError(f"constant {quoted(name)} does not fit {dtype}, the dtype of the "
                            "tensor it is combined with")
    return np.ascontiguousarray(values.astype(np.int64).astype(np.dtype(dtype.replace(
        "i", "int"))))


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
    return combine(imp, node, compute_type, left, right)


def combine(imp: Importer, node: Node, compute_type: str, left: Value, right: Value) -> Term:
    """`compute_type` over two values broadcast against each other (numpy's rules)."""
    terms, shapes = [], []
    computed = next(v for v in (left, right) if isinstance(v, Term))
    dtype = imp.dtype(computed)  # a constant operand takes the computed one's dtype
    for index, value in enumerate((left, right)):
        term = imp.term_of(value, f"{node.outputs[0]}_{'ab'[index]}", dtype)
        terms.append(term)
        shapes.append(imp.full_shape(term))
    try:
        target = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise GlensideError(f"{node.where()}: shapes {shapes[0]} and {shapes[1]} do not "
                            f"broadcast") from None
    spread = [broadcast_to(t, s, target) for t, s in zip(terms, shapes, strict=True)]
    return B.compute(compute_type, B.op("access-pair", *spread))


def scalar(value: float) -> Array:
    return np.array(value, np.float32)


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
        raise GlensideError(f"{node.where()}: attribute {quoted(unknown[0])} is not supported "
                            f"(supported: {', '.join(sorted(known)) or 'none'})")


def spatial_pads(node: Node, in_hw: tuple[int, ...], kernel: tuple[int, ...],
                 strides: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right), from `pads` or `auto_pad`."""
    before, after = padding(node, in_hw, kernel, strides)
    if len(before) != 2:
        raise GlensideError(f"{node.where()}: pads must be 4 non-negative numbers")
    return before[0], before[1], after[0], after[1]


def padding(node: Node, sizes: tuple[int, ...], kernel: tuple[int, ...],
            strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Padding before and after each spatial axis, from `pads` or `auto_pad`."""
    rank = len(sizes)
    auto_pad = node.attributes.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max((math.ceil(i / s) - 1) * s + k - i, 0)
                  for i, k, s in zip(sizes, kernel, strides, strict=True)]
        small = tuple(t // 2 for t in totals)
        large = tuple(t - t // 2 for t in totals)
        return (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    if auto_pad not in ("NOTSET", "VALID"):
        raise GlensideError(f"{node.where()}: auto_pad {quoted(str(auto_pad))} is not supported")
    pads = ints(node, "pads", [0] * 2 * rank) if auto_pad == "NOTSET" else [0] * 2 * rank
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise GlensideError(f"{node.where()}: pads {pads} must be {2 * rank} non-negative "
                            f"numbers")
    return tuple(pads[:rank]), tuple(pads[rank:])


def spatial_input(imp: Importer, node: Node) -> tuple[Term, tuple[int, ...]]:
    x = imp.dynamic(node, 0)
    shape = imp.full_shape(x)
    if len(shape) != 4:
        raise GlensideError(f"{node.where()}: only 2-D NCHW inputs are supported, got shape "
                            f"{shape}")
    return x, shape


def out_size(size: int, kernel: int, stride: int, before: int, after: int) -> int:
    return (size + before + after - kernel) // stride + 1


# -- translators ---------------------------------------------------------------------------


Outputs = Value | list[Value]  # a list for ops with several outputs (Split)
Translator = Callable[[Importer, Node], Outputs]
TRANSLATORS: dict[str, Translator] = {}


TranslatorT = TypeVar("TranslatorT", bound=Callable[..., Outputs])


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
    dilations = conv_dilations(node)
    spans = ((kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1)
    pads = spatial_pads(node, (height, width), spans, strides)
    base = node.outputs[0]
    if dilations != (1, 1):
        geometry = DilatedConv(batch, (height, width), (kh, kw), dilations,
                               (strides[0], strides[1]), pads)
        product = dilated_conv(x, imp.weight(f"{base}_w", weights), geometry, groups,
                               group_channels, out_channels // groups)
    elif groups == 1:
        product = B.conv2d_nchw(x, imp.weight(f"{base}_w", weights), channels, (kh, kw),
                                (strides[0], strides[1]), pads)
    elif groups == channels == out_channels:
        out_hw = (out_size(height, kh, strides[0], pads[0], pads[2]),
                  out_size(width, kw, strides[1], pads[1], pads[3]))
        product = B.depthwise_conv2d_nchw(x, imp.weight(f"{base}_w", weights), batch, channels,
                                          out_hw, (kh, kw), (strides[0], strides[1]), pads)
    else:
        product = B.grouped_conv2d_nchw(x, imp.weight(f"{base}_w", weights), groups,
                                        group_channels, out_channels // groups, (kh, kw),
                                        (strides[0], strides[1]), pads, batch,
                                        (height, width))
    if params.bias is None:
        return product
    dims = imp.full_shape(product)
    return channel_op(product, imp.weight(f"{base}_b", params.bias), dims, "elementwise-add")


def conv_dilations(node: Node) -> tuple[int, int]:
    dilations = ints(node, "dilations", [1, 1])
    if len(dilations) != 2 or any(d < 1 for d in dilations):
        raise GlensideError(f"{node.where()}: dilations {dilations} must be 2 positive numbers")
    return dilations[0], dilations[1]


@dataclass(frozen=True)
class DilatedConv:
    """A dilated convolution's geometry: its input, kernel, dilations, strides, padding."""

    batch: int
    size: tuple[int, int]  # H, W
    kernel: tuple[int, int]
    dilations: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def spans(self) -> tuple[int, int]:  # a dilated window's extent
        return ((self.kernel[0] - 1) * self.dilations[0] + 1,
                (self.kernel[1] - 1) * self.dilations[1] + 1)

    @property
    def out(self) -> tuple[int, int]:
        top, left, bottom, right = self.pads
        return (out_size(self.size[0], self.spans[0], self.strides[0], top, bottom),
                out_size(self.size[1], self.spans[1], self.strides[1], left, right))


def dilated_taps(windows: Term, dims: tuple[int, ...], split: int,
                 geometry: DilatedConv) -> Term:
    """Windows of k·d pixels per axis (`dilated_conv`'s), the last two item axes, cut to
    the kernel's taps (every d-th element: `every_nth`, as MaxPool's dilations), so a
    dilated convolution multiplies k_h·k_w taps, not (d·(k−1)+1)² mostly zero ones. The
    windows are k·d long, not (k−1)·d + 1, so that keeping every d-th is a reshape and a
    slice of each window — a view of the padded map, which the accelerator's DMA reads
    as a dilated window — rather than a padded copy of every window."""
    first = len(dims) - 2
    for axis, (size, dilation) in enumerate(zip(geometry.kernel, geometry.dilations,
                                                strict=True)):
        if dilation > 1:
            windows = every_nth(windows, dims, split, first + axis, size, dilation)
            dims = (*dims[:first + axis], size, *dims[first + axis + 1:])
    return windows


def dilated_conv(x: Term, weights: Term, geometry: DilatedConv, groups: int,
                 group_channels: int, group_out: int) -> Term:
    """A convolution with `dilations` as dilated windows (strided taps): the windows of
    the padded input span d·(k−1)+1 elements and keep every d-th; then the product of
    conv2d_nchw (one per group on channel slices, as sliced_grouped_conv2d_nchw), or for a
    depthwise convolution the pair of depthwise_conv2d_nchw."""
    top, left, bottom, right = geometry.pads
    # windows of k·d pixels end d − 1 pixels past the last tap: that much more padding
    # below and right keeps the output's size (no tap reads it)
    more_h, more_w = (dilation - 1 for dilation in geometry.dilations)
    padded = B.pad(B.pad(x, 2, top, bottom + more_h), 3, left, right + more_w)
    spans = (geometry.kernel[0] * geometry.dilations[0],
             geometry.kernel[1] * geometry.dilations[1])
    out_hw, channels = geometry.out, groups * group_channels
    if groups == channels == groups * group_out and group_channels == 1:  # depthwise
        windows = B.op("access-windows", B.access(padded, 2), B.shape(*spans),
                       B.shape(*geometry.strides))
        dims = (geometry.batch, channels, *out_hw, *spans)
        taps = dilated_taps(windows, dims, 4, geometry)
        filters = B.reshape(weights, (1, channels, 1, 1), geometry.kernel)
        spread = B.broadcast(filters, (geometry.batch, channels, *out_hw), geometry.kernel)
        return B.compute("dot-product", B.op("access-pair", taps, spread))
    result: Term | None = None
    for group in range(groups):
        part_x = padded if groups == 1 else B.op(
            "access-slice", padded, 1, group * group_channels, (group + 1) * group_channels)
        part_w = weights if groups == 1 else B.op(
            "access-slice", weights, 0, group * group_out, (group + 1) * group_out)
        windows = B.op("access-windows", B.access(part_x, 1),
                       B.shape(group_channels, *spans), B.shape(1, *geometry.strides))
        squeezed = B.op("access-squeeze", windows, 1)
        dims = (geometry.batch, *out_hw, group_channels, *spans)
        taps = dilated_taps(squeezed, dims, 3, geometry)
        part = B.transpose(B.matmul(B.access(part_w, 1), B.access(taps, 3)), 1, 0, 2, 3)
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
    elif beta != 1.0:  # beta·C, one product per element before the bias is added
        c = combine(imp, node, "elementwise-mul", c, scalar(beta))
    dims = imp.full_shape(product)
    if not isinstance(c, Term) and c.shape in ((dims[1],), (1, dims[1])) and c.size > 1:
        return channel_op(product, imp.weight(f"{node.outputs[0]}_b", c.reshape(-1)), dims,
                          "elementwise-add")
    c_term = imp.term_of(c, f"{node.outputs[0]}_b")
    c_shape = imp.full_shape(c_term)
    spread = broadcast_to(c_term, c_shape, dims)
    return B.compute("elementwise-add", B.op("access-pair", product, spread))


def shape_of_value(imp: Importer, value: Value) -> tuple[int, ...]:
    return tuple(int(d) for d in value.shape) if not isinstance(value, Term) else \
        imp.full_shape(value)


def reshaped(value: Value, dims: tuple[int, ...]) -> Value:
    return value.reshape(dims) if not isinstance(value, Term) else B.reshape(value, dims, ())


@translates("MatMul")
def matmul(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    a, b = imp.value(node, 0), imp.value(node, 1)
    a_shape, b_shape = shape_of_value(imp, a), shape_of_value(imp, b)
    if len(a_shape) == 1 or len(b_shape) == 1:  # numpy: a vector is a row (left), column
        a2 = reshaped(a, (1, *a_shape)) if len(a_shape) == 1 else a
        b2 = reshaped(b, (*b_shape, 1)) if len(b_shape) == 1 else b
        product = matmul_of(imp, node, a2, b2)
        dims = imp.full_shape(product)
        out = tuple(d for axis, d in enumerate(dims)
                    if not (len(a_shape) == 1 and axis == len(dims) - 2)
                    and not (len(b_shape) == 1 and axis == len(dims) - 1))
        return B.reshape(product, out, ())
    return matmul_of(imp, node, a, b)


def matmul_of(imp: Importer, node: Node, a: Value, b: Value) -> Term:
    if not isinstance(a, Term) and not isinstance(b, Term):
        raise GlensideError(f"{node.where()}: both inputs are constants (fold them first)")
    b_shape = shape_of_value(imp, b)
    if len(b_shape) > 2 or (not isinstance(a, Term) and a.ndim > 2):
        return batched_matmul(imp, node, a, b)
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


def batched_matmul(imp: Importer, node: Node, a: Value, b: Value) -> Term:
    """(…, M, K) × (…, K, N) with numpy's batch broadcasting: one matrix product per batch
    index, each a dot-product over a cartesian product (so each is an array call), stacked
    with access-concatenate."""
    a_shape, b_shape = shape_of_value(imp, a), shape_of_value(imp, b)
    if a_shape[-1] != b_shape[-2]:
        raise GlensideError(f"{node.where()}: shapes {a_shape} and {b_shape} do not multiply")
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        raise GlensideError(f"{node.where()}: batch dims of {a_shape} and {b_shape} do not "
                            f"broadcast") from None
    count, m, n = math.prod(batch), a_shape[-2], b_shape[-1]

    def per_batch(value: Value, shape: tuple[int, ...]) -> Callable[[int], Value]:
        rows, cols = shape[-2:]
        if not isinstance(value, Term):
            stacked = np.broadcast_to(value, (*batch, rows, cols)).reshape(count, rows, cols)
            return lambda i: np.ascontiguousarray(stacked[i])
        full = broadcast_to(value, shape, (*batch, rows, cols))
        flat = B.reshape(full, (count, rows, cols), ())
        return lambda i: B.reshape(B.op("access-slice", flat, 0, i, i + 1), (rows, cols), ())

    left, right = per_batch(a, a_shape), per_batch(b, b_shape)
    result: Term | None = None
    for index in range(count):
        product = matmul_rows(imp, node, left(index), transposed(right(index)))
        part = B.reshape(product, (1, m, n), ())
        result = part if result is None else B.op("access-concatenate", result, part, 0)
    assert result is not None
    return B.reshape(result, (*batch, m, n), ())


UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Erf": "erf",
         "Sqrt": "sqrt", "Neg": "negative"}


@translates(*UNARY)
def unary(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    return B.compute(UNARY[node.op], imp.dynamic(node, 0))


@translates("Reciprocal")
def reciprocal(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    return combine(imp, node, "elementwise-div", scalar(1.0), imp.dynamic(node, 0))


@translates("Pow")
def power(imp: Importer, node: Node) -> Value:
    """x^c for the constant exponents networks use, as products and roots (exact for 1, 2,
    3; `sqrt` for 0.5; a division for the negative ones)."""
    check_attributes(node, set())
    x = imp.dynamic(node, 0)
    exponent = imp.constant(node, 1)
    if exponent.size != 1:
        raise GlensideError(f"{node.where()}: exponent of shape {exponent.shape} is not "
                            f"supported (only a single constant)")
    c = float(exponent.reshape(()))
    powers: dict[float, Callable[[], Term]] = {
        1.0: lambda: x,
        2.0: lambda: combine(imp, node, "elementwise-mul", x, x),
        3.0: lambda: combine(imp, node, "elementwise-mul",
                             combine(imp, node, "elementwise-mul", x, x), x),
        0.5: lambda: B.compute("sqrt", x),
        -1.0: lambda: combine(imp, node, "elementwise-div", scalar(1.0), x),
        -0.5: lambda: combine(imp, node, "elementwise-div", scalar(1.0), B.compute("sqrt", x)),
    }
    if c not in powers:
        raise GlensideError(f"{node.where()}: exponent {c} is not supported (only 1, 2, 3, "
                            f"0.5, -1, -0.5)")
    return powers[c]()


@translates("HardSigmoid", "HardSwish")
def hard_sigmoid(imp: Importer, node: Node) -> Value:
    """max(0, min(1, α·x + β)); HardSwish is x times it with α = 1/6, β = 1/2."""
    check_attributes(node, {"alpha", "beta"} if node.op == "HardSigmoid" else set())
    x = imp.dynamic(node, 0)
    swish = node.op == "HardSwish"
    alpha = 1.0 / 6.0 if swish else float(node.attributes.get("alpha", 0.2))
    beta = 0.5 if swish else float(node.attributes.get("beta", 0.5))
    line = combine(imp, node, "elementwise-add",
                   combine(imp, node, "elementwise-mul", x, scalar(alpha)), scalar(beta))
    gate = B.compute("clip", line, 0.0, 1.0)
    return combine(imp, node, "elementwise-mul", x, gate) if swish else gate


@translates("Gelu")
def gelu(imp: Importer, node: Node) -> Value:
    """x·(1 + erf(x/√2))/2, or with approximate="tanh" x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))/2."""
    check_attributes(node, {"approximate"})
    approximate = node.attributes.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
    x = imp.dynamic(node, 0)
    if approximate == "none":
        inner = B.compute("erf", combine(imp, node, "elementwise-mul", x,
                                         scalar(1.0 / math.sqrt(2.0))))
    elif approximate == "tanh":
        cube = combine(imp, node, "elementwise-mul", combine(imp, node, "elementwise-mul", x, x),
                       x)
        cubic = combine(imp, node, "elementwise-add", x,
                        combine(imp, node, "elementwise-mul", cube, scalar(0.044715)))
        inner = B.compute("tanh", combine(imp, node, "elementwise-mul", cubic,
                                          scalar(math.sqrt(2.0 / math.pi))))
    else:
        raise GlensideError(f"{node.where()}: approximate {quoted(str(approximate))} is not "
                            "supported")
    half = combine(imp, node, "elementwise-mul", x, scalar(0.5))
    return combine(imp, node, "elementwise-mul", half,
                   combine(imp, node, "elementwise-add", inner, scalar(1.0)))


@translates("LayerNormalization")
def layer_norm(imp: Importer, node: Node) -> Value:
    """(x − mean)/√(var + ε)·scale + bias over the axes from `axis` on (ONNX's own function
    body: mean and variance by reduce-mean, the variance of the centred values)."""
    check_attributes(node, {"axis", "epsilon", "stash_type"})
    if any(name for name in node.outputs[1:]):
        raise GlensideError(f"{node.where()}: the Mean and InvStdDev outputs are not supported")
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    axis = int(node.attributes.get("axis", -1))
    axis += len(dims) if axis < 0 else 0
    epsilon = float(node.attributes.get("epsilon", 1e-5))
    kept = dims[:axis] + (1,) * (len(dims) - axis)

    def mean(term: Term) -> Term:
        return B.reshape(B.compute("reduce-mean", B.access(term, axis)), kept, ())

    centred = combine(imp, node, "elementwise-sub", x, mean(x))
    variance = mean(combine(imp, node, "elementwise-mul", centred, centred))
    deviation = B.compute("sqrt", combine(imp, node, "elementwise-add", variance,
                                          scalar(epsilon)))
    result = combine(imp, node, "elementwise-div", centred, deviation)
    result = combine(imp, node, "elementwise-mul", result, imp.value(node, 1))
    if imp.has_input(node, 2):
        result = combine(imp, node, "elementwise-add", result, imp.value(node, 2))
    return result


@translates("Clip")
def clip(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"min", "max"})
    bounds = [float(node.attributes.get("min", -F32_MAX)),
              float(node.attributes.get("max", F32_MAX))]
    for index in (1, 2):
        if imp.has_input(node, index):
            bounds[index - 1] = float(imp.constant(node, index).reshape(()))
    x = imp.dynamic(node, 0)
    dtype = imp.dtype(x)
    if dtype in INTEGER_NAMES:  # integer bounds, saturated to the dtype's range
        dtype_low, dtype_high = integer_range(dtype)
        low_int, high_int = (max(dtype_low, min(dtype_high, math.floor(b) if b > 0
                                                else math.ceil(b))) for b in bounds)
        return B.compute("clip", x, min(low_int, high_int), high_int)
    low, high = (max(-F32_MAX, min(F32_MAX, b)) for b in bounds)
    low = min(low, high)  # ONNX: min > max gives max everywhere
    return B.compute("clip", x, low, high)


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


def every_nth(term: Term, dims: tuple[int, ...], split: int, axis: int, count: int,
              step: int, pad_kind: str = "zero-padding") -> Term:
    """Elements 0, step, 2·step, … (`count` of them) of one axis of an access split at `split`.

    No construct strides a single axis, so: pad or cut the axis to count·step, reshape it to
    (count, step), keep the first column, reshape the unit axis away.
    """
    length, wanted = dims[axis], count * step
    if length < wanted:
        term = B.pad(term, axis, 0, wanted - length, pad_kind)
    elif length > wanted:
        term = B.op("access-slice", term, axis, 0, wanted)
    grouped = (*dims[:axis], count, step, *dims[axis + 1:])
    in_access = axis < split
    cut = split + 1 if in_access else split
    term = B.reshape(term, grouped[:cut], grouped[cut:])
    if step > 1:
        term = B.op("access-slice", term, axis + 1, 0, 1)
    kept = (*dims[:axis], count, *dims[axis + 1:])
    return B.reshape(term, kept[:split], kept[split:])


@dataclass
class PoolGeometry:
    """One pooling node's windows over its spatial axes (1-D, 2-D or 3-D): kernel, strides,
    dilations and padding, ceil_mode's included."""

    sizes: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    before: tuple[int, ...]  # the node's own padding
    after: tuple[int, ...]
    extra: tuple[int, ...]  # more elements after the end that only ceil_mode adds

    @property
    def spans(self) -> tuple[int, ...]:  # a dilated window's extent
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))

    def out(self, axis: int) -> int:
        size = self.sizes[axis] + self.before[axis] + self.after[axis]
        return (size + self.extra[axis] - self.spans[axis]) // self.strides[axis] + 1


def pool_geometry(node: Node, sizes: tuple[int, ...]) -> PoolGeometry:
    rank = len(sizes)
    kernel = tuple(ints(node, "kernel_shape", []))
    strides = tuple(ints(node, "strides", [1] * rank))
    dilations = tuple(ints(node, "dilations", [1] * rank))
    if len(kernel) != rank or len(strides) != rank or len(dilations) != rank:
        raise GlensideError(f"{node.where()}: needs a {rank}-D kernel_shape, strides and "
                            f"dilations")
    spans = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True))
    before, after = padding(node, sizes, spans, strides)
    extra = [0] * rank
    if int(node.attributes.get("ceil_mode", 0)):
        for axis, size in enumerate(sizes):
            padded = size + before[axis] + after[axis]
            out = -(-(padded - spans[axis]) // strides[axis]) + 1
            if (out - 1) * strides[axis] >= size + before[axis]:  # last window starts in the pad
                out -= 1
            extra[axis] = max(0, (out - 1) * strides[axis] + spans[axis] - padded)
    return PoolGeometry(sizes, kernel, strides, dilations, before, after, tuple(extra))


def pool_windows(imp: Importer, node: Node, pad_kind: str) -> tuple[Term, PoolGeometry]:
    """Windows ((N,C,out…),(k…)) of the padded input, dilations applied (1-D to 3-D)."""
    check_attributes(node, POOL_ATTRIBUTES)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise GlensideError(f"{node.where()}: the Indices output is not supported")
    x = imp.dynamic(node, 0)
    shape = imp.full_shape(x)
    if not 3 <= len(shape) <= 5:
        raise GlensideError(f"{node.where()}: only 1-D, 2-D and 3-D (N,C,…) inputs are "
                            f"supported, got shape {shape}")
    rank = len(shape) - 2
    geometry = pool_geometry(node, shape[2:])
    for axis in range(rank):
        x = B.pad(x, 2 + axis, geometry.before[axis],
                  geometry.after[axis] + geometry.extra[axis], pad_kind)
    windows = B.op("access-windows", B.access(x, 2), B.shape(*geometry.spans),
                   B.shape(*geometry.strides))
    dims: tuple[int, ...] = (*shape[:2], *(geometry.out(a) for a in range(rank)),
                             *geometry.spans)
    split = 2 + rank
    for axis, (size, dilation) in enumerate(zip(geometry.kernel, geometry.dilations,
                                                strict=True)):
        if dilation > 1:
            windows = every_nth(windows, dims, split, split + axis, size, dilation, pad_kind)
            dims = (*dims[:split + axis], size, *dims[split + axis + 1:])
    return windows, geometry


def average_divisors(node: Node, geometry: PoolGeometry) -> Array:
    """The divisor of each output position: ONNX counts the window's elements inside the
    input, plus the explicit padding if count_include_pad=1 (never ceil_mode's extension)."""
    include_pad = int(node.attributes.get("count_include_pad", 0))
    rank = len(geometry.sizes)
    full = [b + n + a for b, n, a in zip(geometry.before, geometry.sizes, geometry.after,
                                         strict=True)]
    counted = np.zeros([f + e for f, e in zip(full, geometry.extra, strict=True)])
    if include_pad:
        counted[tuple(slice(0, f) for f in full)] = 1
    else:
        counted[tuple(slice(b, b + n) for b, n in zip(geometry.before, geometry.sizes,
                                                      strict=True))] = 1
    outs = tuple(geometry.out(a) for a in range(rank))
    divisors = np.zeros(outs)
    for position in np.ndindex(*outs):
        window = tuple(slice(p * s, p * s + span, d) for p, s, span, d in zip(
            position, geometry.strides, geometry.spans, geometry.dilations, strict=True))
        divisors[position] = counted[window].sum()
    return divisors


@translates("MaxPool")
def max_pool(imp: Importer, node: Node) -> Value:
    return B.compute("reduce-max", pool_windows(imp, node, "min-padding")[0])


@translates("AveragePool")
def average_pool(imp: Importer, node: Node) -> Value:
    windows, geometry = pool_windows(imp, node, "zero-padding")
    divisors = average_divisors(node, geometry)
    if np.all(divisors == math.prod(geometry.kernel)):  # every window counts in full
        return B.compute("reduce-mean", windows)
    # Otherwise a sum, times 1/divisor per output position (a constant of shape (out…)).
    total = B.compute("reduce-sum", windows)
    dims = imp.full_shape(total)
    scale = imp.weight(f"{node.outputs[0]}_divisor", (1.0 / divisors).astype(np.float32))
    spread = broadcast_to(scale, tuple(divisors.shape), dims)
    return B.compute("elementwise-mul", B.op("access-pair", total, spread))


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
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise GlensideError(f"{node.where()}: mode {quoted(str(mode))} is not supported (only "
                            "constant, edge, reflect and wrap)")
    x = imp.dynamic(node, 0)
    rank = len(imp.full_shape(x))
    if imp.has_input(node, 1):
        pads = [int(p) for p in imp.constant(node, 1).reshape(-1)]
    else:
        pads = ints(node, "pads", [])
    axes = list(range(rank))
    if imp.has_input(node, 3):
        axes = [int(a) % rank for a in imp.constant(node, 3).reshape(-1)]
    if len(pads) != 2 * len(axes) or any(p < 0 for p in pads):
        raise GlensideError(f"{node.where()}: pads {pads} must be 2×{len(axes)} non-negative "
                            f"numbers")
    sides = [(axis, pads[i], pads[i + len(axes)]) for i, axis in enumerate(axes)]
    if mode != "constant":
        for axis, before, after in sides:
            x = copy_padded(imp, node, x, axis, before, after, mode)
        return x
    value = float(node.attributes.get("value", 0.0))
    if imp.has_input(node, 2):
        value = float(imp.constant(node, 2).reshape(()))
    if not math.isfinite(value):
        raise GlensideError(f"{node.where()}: constant_value {value} is not supported (only "
                            f"finite numbers)")
    dims = imp.full_shape(x)
    dtype = imp.dtype(x)
    mask = np.zeros(dims, np.float32)  # 1 where the padding will be
    for axis, before, after in sides:
        x = B.pad(x, axis, before, after)
        mask = np.pad(mask, [(before, after) if a == axis else (0, 0) for a in range(rank)],
                      constant_values=1.0)
    if value == 0.0 or not mask.any():
        return x
    # Zero padding plus value·mask: inside, x + 0 is x exactly; in the padding, 0 + value.
    fill = imp.weight(f"{node.outputs[0]}_fill", mask * np.float32(value), dtype)
    return B.compute("elementwise-add", B.op("access-pair", x, fill))


def copy_padded(imp: Importer, node: Node, x: Term, axis: int, before: int, after: int,
                mode: str) -> Term:
    """One axis padded with copies of the input's own rows (numpy's edge, reflect, wrap):
    slices of single rows (or a row broadcast, edge), joined by `access-concatenate`."""
    dims = imp.full_shape(x)
    size = dims[axis]
    limit = size - 1 if mode == "reflect" else size
    if mode != "edge" and max(before, after) > limit:
        raise GlensideError(f"{node.where()}: {mode} padding of {max(before, after)} on an axis "
                            f"of {size} is not supported (at most {limit})")

    def rows(start: int, count: int) -> Term:
        return B.op("access-slice", x, axis, start, start + count)

    def repeated(start: int, count: int) -> Term:  # `count` copies of row `start`
        return B.broadcast(rows(start, 1), (*dims[:axis], count, *dims[axis + 1:]), ())

    def reversed_rows(first: int, count: int) -> list[Term]:  # rows first, first-1, …
        return [rows(first - k, 1) for k in range(count)]

    head: list[Term] = []
    tail: list[Term] = []
    if mode == "edge":
        head = [repeated(0, before)] if before else []
        tail = [repeated(size - 1, after)] if after else []
    elif mode == "reflect":
        head = reversed_rows(before, before)
        tail = reversed_rows(size - 2, after)
    else:  # wrap
        head = [rows(size - before, before)] if before else []
        tail = [rows(0, after)] if after else []
    result = None
    for part in (*head, x, *tail):
        result = part if result is None else B.op("access-concatenate", result, part, axis)
    assert result is not None
    return result


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


# -- shapes, slicing and reductions -----------------------------------------------------------


def axes_input(imp: Importer, node: Node, index: int, rank: int) -> list[int] | None:
    """`axes` from input `index` (newer opsets) or the attribute (older): normalized, or None."""
    if imp.has_input(node, index):
        axes = [int(a) for a in imp.constant(node, index).reshape(-1)]
    elif "axes" in node.attributes:
        axes = ints(node, "axes", [])
    else:
        return None
    if any(not -rank <= a < rank for a in axes) or len(set(a % rank for a in axes)) < len(axes):
        raise GlensideError(f"{node.where()}: axes {axes} are invalid for rank {rank}")
    return sorted(a % rank for a in axes)


@translates("Shape")
def shape_of(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"start", "end"})
    dims = imp.full_shape(imp.dynamic(node, 0))
    start, end = node.attributes.get("start", 0), node.attributes.get("end", len(dims))
    return np.array(dims[int(start):int(end)], np.int64)


@translates("Size")
def size_of(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    return np.array(math.prod(imp.full_shape(imp.dynamic(node, 0))), np.int64)


@translates("Squeeze")
def squeeze(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"axes"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    axes = axes_input(imp, node, 1, len(dims))
    if axes is None:
        axes = [axis for axis, d in enumerate(dims) if d == 1]
    if any(dims[axis] != 1 for axis in axes):
        raise GlensideError(f"{node.where()}: cannot squeeze axes {axes} of shape {dims}")
    return B.reshape(x, tuple(d for axis, d in enumerate(dims) if axis not in axes), ())


@translates("Unsqueeze")
def unsqueeze(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"axes"})
    x = imp.dynamic(node, 0)
    dims = list(imp.full_shape(x))
    rank = len(dims) + len(imp.constant(node, 1).reshape(-1) if imp.has_input(node, 1)
                           else ints(node, "axes", []))
    axes = axes_input(imp, node, 1, rank)
    if axes is None:
        raise GlensideError(f"{node.where()}: needs axes")
    for axis in axes:
        dims.insert(axis, 1)
    return B.reshape(x, tuple(dims), ())


def take(term: Term, dims: tuple[int, ...], axis: int, indices: range) -> Term:
    """The elements `indices` (a range with a positive step) of one axis of ((dims),())."""
    if len(indices) == dims[axis] and indices.step == 1:
        return term
    first, last = indices[0], indices[-1]
    # Cut whole steps when the axis has room, so no padding (which int8 may refuse) is needed.
    end = min(first + len(indices) * indices.step, dims[axis]) if indices.step > 1 else last + 1
    term = B.op("access-slice", term, axis, first, end)
    if indices.step == 1:
        return term
    cut = (*dims[:axis], end - first, *dims[axis + 1:])
    # The padding, if any, is cut away again: min-padding quantizes with any zero point.
    return every_nth(term, cut, len(cut), axis, len(indices), indices.step, "min-padding")


@translates("Slice")
def slice_op(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"starts", "ends", "axes"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    if imp.has_input(node, 1):  # opset ≥ 10: starts, ends, axes, steps are inputs
        starts = [int(v) for v in imp.constant(node, 1).reshape(-1)]
        ends = [int(v) for v in imp.constant(node, 2).reshape(-1)]
        steps = ([int(v) for v in imp.constant(node, 4).reshape(-1)]
                 if imp.has_input(node, 4) else [1] * len(starts))
    else:
        starts, ends, steps = ints(node, "starts", []), ints(node, "ends", []), []
        steps = [1] * len(starts)
    axes = axes_input(imp, node, 3, len(dims))
    if axes is None:
        axes = list(range(len(starts)))
    elif imp.has_input(node, 3) or "axes" in node.attributes:  # keep the given order
        given = (imp.constant(node, 3).reshape(-1) if imp.has_input(node, 3)
                 else ints(node, "axes", []))
        axes = [int(a) % len(dims) for a in given]
    result, shape = x, dims
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        if step <= 0:
            raise GlensideError(f"{node.where()}: step {step} is not supported (only positive "
                                f"steps)")
        indices = range(*slice(start, end, step).indices(shape[axis]))
        if len(indices) == 0:
            raise GlensideError(f"{node.where()}: the slice of axis {axis} is an empty tensor")
        result = take(result, shape, axis, indices)
        shape = (*shape[:axis], len(indices), *shape[axis + 1:])
    return result


@translates("Split")
def split(imp: Importer, node: Node) -> list[Value]:
    check_attributes(node, {"axis", "split", "num_outputs"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    axis = int(node.attributes.get("axis", 0)) % len(dims)
    if imp.has_input(node, 1):
        sizes = [int(v) for v in imp.constant(node, 1).reshape(-1)]
    elif "split" in node.attributes:
        sizes = ints(node, "split", [])
    else:  # equal parts (the last one smaller if it must be)
        parts = int(node.attributes.get("num_outputs", len(node.outputs)))
        chunk = -(-dims[axis] // parts)
        sizes = [min(chunk, dims[axis] - i * chunk) for i in range(parts)]
    if sum(sizes) != dims[axis] or any(size <= 0 for size in sizes):
        raise GlensideError(f"{node.where()}: sizes {sizes} do not split axis {axis} of {dims} "
                            f"(empty tensor parts are not supported)")
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    return [B.op("access-slice", x, axis, low, low + size) if size != dims[axis] else x
            for low, size in zip(offsets, sizes, strict=True)]


@translates("Expand")
def expand(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    wanted = tuple(int(d) for d in imp.constant(node, 1).reshape(-1))
    try:
        target = tuple(int(d) for d in np.broadcast_shapes(dims, wanted))
    except ValueError:
        raise GlensideError(f"{node.where()}: {dims} does not broadcast to {wanted}") from None
    return broadcast_to(x, dims, target)


@translates("Tile")
def tile(imp: Importer, node: Node) -> Value:
    check_attributes(node, set())
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    repeats = [int(r) for r in imp.constant(node, 1).reshape(-1)]
    if len(repeats) != len(dims) or any(r < 1 for r in repeats):
        raise GlensideError(f"{node.where()}: repeats {repeats} must be {len(dims)} positive "
                            f"numbers")
    result = x
    for axis, count in enumerate(repeats):
        copy = result
        for _ in range(count - 1):
            result = B.op("access-concatenate", result, copy, axis)
    return result


@translates("Gather")
def gather(imp: Importer, node: Node) -> Value:
    """Gather with constant indices: the selected slices, concatenated and reshaped; or
    rows of a constant table selected by computed ids (an embedding)."""
    check_attributes(node, {"axis"})
    if isinstance(imp.value(node, 1), Term) and not isinstance(imp.value(node, 0), Term):
        return embedding(imp, node)
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    axis = int(node.attributes.get("axis", 0)) % len(dims)
    indices = imp.constant(node, 1).astype(np.int64)
    flat = [int(i) % dims[axis] if -dims[axis] <= i < dims[axis] else None
            for i in indices.reshape(-1)]
    if None in flat or not flat:
        raise GlensideError(f"{node.where()}: indices {indices.tolist()} are out of range "
                            f"for axis {axis} of {dims} (or an empty tensor)")
    result: Term | None = None
    for index in flat:
        assert index is not None
        part = B.op("access-slice", x, axis, index, index + 1)
        result = part if result is None else B.op("access-concatenate", result, part, axis)
    assert result is not None
    return B.reshape(result, (*dims[:axis], *indices.shape, *dims[axis + 1:]), ())


def embedding(imp: Importer, node: Node) -> Value:
    """Rows of a constant table (V, …) picked by computed integer ids: a one-hot product.

    onehot[…, v] = 1 − clip(ids − v, 0, 1) − clip(v − ids, 0, 1) (exact in integers), cast
    to f32, times the table as a (V, D) matrix: the product is an ordinary matrix product
    (the array's, once quantized), and the ids stay integers in every program. It costs
    T·V integer compares on the host and a T×V×D product, which is fine for the reduced
    vocabularies of tests and small models; an id outside [0, V) picks no row (zeros).
    """
    table = imp.constant(node, 0)
    ids = imp.dynamic(node, 1)
    axis = int(node.attributes.get("axis", 0))
    if axis % max(table.ndim, 1) != 0 or table.ndim < 1:
        raise GlensideError(f"{node.where()}: computed indices select rows (axis 0) of a "
                            f"constant table; axis {axis} of {table.shape} is not supported")
    kind = imp.dtype(ids)
    if kind not in INTEGER_NAMES:
        raise GlensideError(f"{node.where()}: indices {quoted(node.inputs[1])} are {kind}, "
                            "not integers")
    dims = imp.full_shape(ids)
    rows = int(table.shape[0])
    spread = (*dims, rows)
    base = node.outputs[0]

    def across(term: Term, shape: tuple[int, ...]) -> Term:
        return B.broadcast(B.reshape(term, shape, ()), spread, ())

    def clipped(term: Term) -> Term:
        return B.compute("clip", term, 0, 1)

    ids_spread = across(ids, (*dims, 1))
    row_numbers = across(imp.weight(f"{base}_rows", np.arange(rows), kind),
                         (*([1] * len(dims)), rows))
    one = across(imp.weight(f"{base}_one", np.ones(1), kind), (1,) * len(spread))
    difference = B.compute("elementwise-sub", B.op("access-pair", ids_spread, row_numbers))
    above = clipped(difference)
    below = clipped(B.compute("negative", difference))
    missed = B.compute("elementwise-add", B.op("access-pair", above, below))
    onehot = B.compute("elementwise-sub", B.op("access-pair", one, missed))
    matrix = table.reshape(rows, -1).astype(np.float32)
    columns = imp.weight(f"{base}_table", np.ascontiguousarray(matrix.T))
    product = B.matmul(B.access(B.compute("cast", onehot, "f32"), len(dims)),
                       B.access(columns, 1))
    return B.reshape(product, (*dims, *table.shape[1:]), ())


RESIZE_ATTRIBUTES = {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                     "exclude_outside", "extrapolation_value", "antialias", "axes",
                     "keep_aspect_ratio_policy"}


@translates("Resize")
def resize(imp: Importer, node: Node) -> Value:
    """Resize of a computed tensor with constant scales or sizes, one axis at a time.

    Resizing is separable and linear along each axis, so each resized axis is a constant
    (out × in) matrix, which ONNX's own reference implementation computes by resizing the
    identity (every mode, coordinate transformation and rounding as ONNX defines them).
    A matrix that picks one element per row (nearest) is a selection: repeats of each
    element when every element repeats s times in order (an `access-broadcast` view, as
    an integer-factor upsampling is), else one `access-slice` per output index joined by
    `access-concatenate`. Any other (linear, cubic) is a matrix product along the axis,
    moved last and back (`access-move-axis`).
    """
    check_attributes(node, RESIZE_ATTRIBUTES)
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    for name, allowed in (("coordinate_transformation_mode", "tf_crop_and_resize"),
                          ("keep_aspect_ratio_policy", "stretch")):
        value = node.attributes.get(name, b"")
        text = value.decode() if isinstance(value, bytes) else str(value)
        if text and (text == allowed) == (name == "coordinate_transformation_mode"):
            raise GlensideError(f"{node.where()}: {name} {text} is not supported")
    scales, sizes = resize_targets(imp, node, dims)
    for axis in range(len(dims)):
        matrix = resize_matrix(node, dims[axis], scales[axis], sizes[axis])
        if matrix.shape == (dims[axis], dims[axis]) and np.array_equal(
                matrix, np.eye(dims[axis])):
            continue
        x = resize_axis(imp, node, x, dims, axis, matrix)
        dims = (*dims[:axis], matrix.shape[0], *dims[axis + 1:])
    return x


def resize_targets(imp: Importer, node: Node, dims: tuple[int, ...]
                   ) -> tuple[list[float | None], list[int | None]]:
    """Per axis, the scale or the size the node gives (`axes` spread to every axis)."""
    rank = len(dims)
    axes = [int(a) % rank for a in ints(node, "axes", list(range(rank)))]
    scales_input = 1 if len(node.inputs) == 2 else 2  # opset 10: (X, scales)
    given_scales = (imp.constant(node, scales_input).reshape(-1)
                    if imp.has_input(node, scales_input) else None)
    given_sizes = imp.constant(node, 3).reshape(-1) if imp.has_input(node, 3) else None
    if given_sizes is not None and given_sizes.size:
        if given_sizes.size != len(axes):
            raise GlensideError(f"{node.where()}: {given_sizes.size} sizes for {len(axes)} axes")
        sizes: list[int | None] = [None] * rank
        for axis, size in zip(axes, given_sizes, strict=True):
            sizes[axis] = int(size)
        return [None] * rank, [size if size is not None else dims[a]
                               for a, size in enumerate(sizes)]
    if given_scales is None or given_scales.size != len(axes):
        raise GlensideError(f"{node.where()}: needs constant scales or sizes for its "
                            f"{len(axes)} axes")
    scales: list[float | None] = [1.0] * rank
    for axis, scale in zip(axes, given_scales, strict=True):
        scales[axis] = float(scale)
    return scales, [None] * rank


def resize_matrix(node: Node, length: int, scale: float | None, size: int | None) -> Array:
    """The (out × in) matrix of the node's resizing of one axis of `length` elements: the
    reference implementation's resize of the identity, that axis only."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    attributes = {k: v for k, v in node.attributes.items() if k not in ("axes",)}
    inputs = ["x", "", "scales"] if size is None else ["x", "", "", "sizes"]
    proto = helper.make_node("Resize", inputs, ["y"], **attributes)
    feeds: dict[str, Array] = {"x": np.eye(length, dtype=np.float64).astype(np.float32)}
    if size is None:
        feeds["scales"] = np.array([scale, 1.0], np.float32)
    else:
        feeds["sizes"] = np.array([size, length], np.int64)
    try:
        (result,) = ReferenceEvaluator(proto).run(None, feeds)
    except Exception as error:  # the reference raises anything from numpy to its own errors
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise GlensideError(f"{node.where()}: cannot resize: {first}") from None
    matrix = np.asarray(result, dtype=np.float64)
    if matrix.shape[0] < 1:
        raise GlensideError(f"{node.where()}: resizing an axis of {length} gives no elements")
    return matrix


def resize_axis(imp: Importer, node: Node, x: Term, dims: tuple[int, ...], axis: int,
                matrix: Array) -> Term:
    """`x` resized along `axis` by `matrix` (out × in)."""
    out = matrix.shape[0]
    picks = matrix.argmax(axis=1)
    if np.array_equal(matrix, np.eye(dims[axis])[picks]):  # a selection: nearest
        repeat = out // dims[axis]
        if out == repeat * dims[axis] and np.array_equal(picks, np.arange(out) // repeat):
            grown = B.broadcast(B.reshape(x, (*dims[:axis + 1], 1, *dims[axis + 1:]), ()),
                                (*dims[:axis + 1], repeat, *dims[axis + 1:]), ())
            return B.reshape(grown, (*dims[:axis], out, *dims[axis + 1:]), ())
        result: Term | None = None
        for index in picks:
            part = B.op("access-slice", x, axis, int(index), int(index) + 1)
            result = part if result is None else B.op("access-concatenate", result, part, axis)
        assert result is not None
        return result
    rank = len(dims)
    moved = x if axis == rank - 1 else B.op("access-move-axis", x, axis, rank - 1)
    weights = imp.weight(f"{node.outputs[0]}_axis{axis}", matrix.astype(np.float32))
    product = B.matmul(B.access(moved, rank - 1), B.access(weights, 1))
    return product if axis == rank - 1 else B.op("access-move-axis", product, rank - 1, axis)


# ReduceMin(x) is −ReduceMax(−x): exact in floats, so no construct of its own is needed.
REDUCTIONS = {"ReduceMean": "reduce-mean", "ReduceSum": "reduce-sum", "ReduceMax": "reduce-max",
              "ReduceMin": "reduce-max"}


@translates(*REDUCTIONS)
def reduce(imp: Importer, node: Node) -> Value:
    check_attributes(node, {"axes", "keepdims", "noop_with_empty_axes"})
    x = imp.dynamic(node, 0)
    dims = imp.full_shape(x)
    axes = axes_input(imp, node, 1, len(dims))
    if not axes:
        if int(node.attributes.get("noop_with_empty_axes", 0)):
            return x
        axes = list(range(len(dims)))
    kept = [axis for axis in range(len(dims)) if axis not in axes]
    moved = x if kept + axes == list(range(len(dims))) else B.transpose(x, *kept, *axes)
    if node.op == "ReduceMin":
        moved = B.compute("negative", moved)
    result = B.compute(REDUCTIONS[node.op], B.access(moved, len(kept)))
    if node.op == "ReduceMin":
        result = B.compute("negative", result)
    if int(node.attributes.get("keepdims", 1)):
        return B.reshape(result, tuple(1 if a in axes else d for a, d in enumerate(dims)), ())
    return result


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
        outline = _outline(model)
        onnx.checker.check_model(outline)
    except Exception as error:  # onnx raises protobuf DecodeError, ValidationError, …
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GlensideError(f"{model_path}: not a valid ONNX model (truncated or corrupt?): "
                            f"{first}") from None
    try:  # what onnxruntime would refuse: bad attributes, mixed dtypes, impossible shapes
        onnx.shape_inference.infer_shapes(outline, check_type=True, strict_mode=True,
                                          data_prop=True)
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GlensideError(f"{model_path}: the model is inconsistent (ONNX shape "
                            f"inference): {first}") from None
    return model


#: Initializers with more elements than this are weights, not shapes, scales or indices
#: that shape inference reads the values of (`_outline` leaves them out).
OUTLINE_ELEMENTS = 4096


def _outline(model: Any) -> Any:
    """`model` with each large initializer (a weight) declared as a graph input of its type
    and shape instead, for the checker and shape inference: both copy the whole model to
    C++ and shape inference copies its result back (a vit_b_16's 346 MB thrice, most of its
    import), and neither reads a weight's values. Each one left out is checked here: its
    data must decode to its declared shape."""
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    large = [tensor for tensor in graph.initializer
             if math.prod(tensor.dims) > OUTLINE_ELEMENTS]
    if not large:
        return model
    for tensor in large:  # (a view of its bytes: no copy)
        numpy_helper.to_array(tensor)
    outline = onnx.ModelProto()
    _copy_fields(model, outline, skip="graph")
    _copy_fields(graph, outline.graph, skip="initializer")
    left_out = {tensor.name for tensor in large}
    outline.graph.initializer.extend(tensor for tensor in graph.initializer
                                     if tensor.name not in left_out)
    declared = {value.name for value in graph.input}
    outline.graph.input.extend(
        onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
        for tensor in large if tensor.name not in declared)
    return outline


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    """The fields of protobuf message `source` but `skip` into `target` (of its type)."""
    for descriptor, value in source.ListFields():
        if descriptor.name == skip:
            continue
        repeated = descriptor.is_repeated if hasattr(descriptor, "is_repeated") else \
            descriptor.label == descriptor.LABEL_REPEATED  # (protobuf < 5.28)
        if repeated:
            getattr(target, descriptor.name).extend(value)
        elif descriptor.message_type is not None:
            getattr(target, descriptor.name).CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)


def _attributes(node_proto: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node_proto.attribute}


def onnx_input_names(model: Any) -> dict[str, str]:
    """The graph's runtime inputs: ONNX name → the program's input name (sanitized, unique).

    Inputs are the first names given out, so this is the same in every import of the model.
    An ONNX name the language can spell is kept, and only then are the others renamed: a
    renamed input's ONNX name is then never another input's program name, which every
    command that takes per-input data would read as that other input (`a:b` sanitized
    first to `a_b` had pushed the model's own `a_b` to `a_b_2`, and quantize calibrated
    both from the .npz's `a_b`).
    """
    initializers = {i.name for i in model.graph.initializer}
    runtime = [v.name for v in model.graph.input if v.name not in initializers]
    names = Names({name for name in runtime if NAME_PATTERN.fullmatch(name)})
    return {name: name if name in names.taken else names.fresh(name) for name in runtime}


# ONNX element types a program's input can have (TensorProto.FLOAT, INT8, INT16, INT32).
# INT64 inputs (token ids) are declared i32: every value a program is given must fit it.
INPUT_DTYPES = {1: "f32", 3: "i8", 5: "i16", 6: "i32", 7: "i32"}

# Ops that take integer tensors: what ONNX computes on them, the language computes the same
# way (two's complement wrapping, division truncated toward zero, integer clip bounds).
# Anything else (sigmoid, softmax, convolutions, averages, …) is float-only here.
INTEGER_OPS = {"Add", "Sub", "Mul", "Div", "Neg", "Relu", "Clip", "Identity", "Dropout",
               "MaxPool", "Flatten", "Reshape", "Transpose", "Concat", "Pad", "Squeeze",
               "Unsqueeze", "Slice", "Split", "Expand", "Tile", "Gather", "ReduceMax",
               "ReduceMin"}


def _input_decl(imp: Importer, value_info: Any, name: str) -> TensorDecl:
    import onnx

    tensor_type = value_info.type.tensor_type
    dtype = INPUT_DTYPES.get(tensor_type.elem_type)
    if dtype is None:
        kind = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        raise GlensideError(f"input {quoted(value_info.name)} is {kind}: only float inputs and "
                            f"signed 8-, 16-, 32- and 64-bit integers")
    if not tensor_type.HasField("shape"):
        raise GlensideError(f"input {quoted(value_info.name)} has no shape; static shapes needed")
    dims = []
    for index, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value <= 0:
            raise GlensideError(f"input {quoted(value_info.name)} has dim {index} = "
                                f"{dim.dim_value}: an empty tensor (a program's tensors have no "
                                "zero dims)")
        if not dim.HasField("dim_value"):
            symbolic = dim.dim_param or "unknown"
            raise GlensideError(f"input {quoted(value_info.name)} has a dynamic shape: dim {index} "
                                f"is {quoted(str(symbolic))}; export the model with static shapes")
        dims.append(int(dim.dim_value))
    imp.symbols.taken.add(name)
    return TensorDecl(name, tuple(dims), dtype, "input")


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
                  _attributes(n), n.domain, n) for n in graph.node]
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
        raise GlensideError(f"output {quoted(graph.output[0].name)} is not computed from an input")
    names = {term: name for term, name in imp.names.items()}
    program = Program(program_path, dict(imp.tensors), result, names)
    infer(result, program.tensors, imp.types)
    return program, imp.weights


def _translate(imp: Importer, node: Node, fused: dict[str, Node], opset: int) -> None:
    if node.domain not in ("", "ai.onnx"):
        raise GlensideError(f"{node.where()}: op domain {quoted(node.domain)} is not supported")
    for name in node.inputs:
        if name and name not in imp.values:
            raise GlensideError(f"{node.where()}: input {quoted(name)} is not defined by any graph "
                                f"input, initializer or earlier node")
    if node.op == "Constant":
        imp.values[node.outputs[0]] = _constant_value(node)
        return
    if foldable(imp, node):
        for name, array in zip(node.outputs, fold(node, imp), strict=False):
            imp.values[name] = array
        return
    translator = TRANSLATORS.get(node.op)
    if translator is None:
        raise GlensideError(f"{node.where()}: unsupported op {quoted(node.op)} (supported: "
                            f"{', '.join(sorted(TRANSLATORS))})")
    if node.op not in INTEGER_OPS:
        refuse_integer_operands(imp, node)
    value: Outputs
    if node.op == "Conv" and node.outputs[0] in fused:
        bn = fused[node.outputs[0]]
        value = conv(imp, node, fold_batch_norm(imp, node, bn))
        node = Node(node.name, node.op, node.inputs, bn.outputs, node.attributes, node.domain)
    elif node.op == "Softmax":
        value = softmax(imp, node, opset)
    else:
        value = translator(imp, node)
    values = value if isinstance(value, list) else [value]
    for index, (output, part) in enumerate(zip(node.outputs, values, strict=False)):
        if isinstance(part, Term):
            part = imp.as_full_access(part)  # type-checks now, so an error names this node
            imp.name_output(node, part, index)
        imp.values[output] = part


def refuse_integer_operands(imp: Importer, node: Node) -> None:
    """A float-only op given an integer tensor (a program input of an integer model)."""
    for name in node.inputs:
        operand = imp.values.get(name) if name else None
        if isinstance(operand, Term) and imp.dtype(operand) != "f32":
            raise GlensideError(f"{node.where()}: input {quoted(name)} is {imp.dtype(operand)}: "
                                f"only float inputs for {node.op}")


# Ops never folded although their inputs are constants: random, or translated on purpose.
NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
              "Multinomial", "Bernoulli", "Dropout"}


def foldable(imp: Importer, node: Node) -> bool:
    """Every input is known at import time (shape computations on static shapes, arithmetic
    on weights): then the node's value is computed now, not in the program."""
    present = [name for name in node.inputs if name]
    return (bool(present) and node.op not in NOT_FOLDED and node.proto is not None
            and all(not isinstance(imp.values[name], Term) for name in present))


def fold(node: Node, imp: Importer) -> list[Array]:
    """The node's outputs on constant inputs, by ONNX's own reference implementation."""
    from onnx.reference import ReferenceEvaluator

    feeds = {name: np.asarray(imp.values[name]) for name in node.inputs if name}
    try:
        results = ReferenceEvaluator(node.proto).run(None, feeds)
    except Exception as error:  # the reference raises anything from numpy to its own errors
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise GlensideError(f"{node.where()}: cannot compute this constant at import time: "
                            f"{first}") from None
    return [np.asarray(result) for result in results]


def _constant_value(node: Node) -> Array:
    from onnx import numpy_helper

    if "value" not in node.attributes:
        raise GlensideError(f"{node.where()}: only Constant nodes with a tensor 'value'")
    return np.asarray(numpy_helper.to_array(node.attributes["value"]))


# -- writing -------------------------------------------------------------------------------


def import_onnx(model_path: str | Path, outdir: str | Path, force: bool = False) -> Path:
    """Write `outdir/<stem>.gs` and `outdir/<stem>.npz` from an ONNX model; returns the .gs.

    OUTDIR must be new, empty or an earlier import's (see glensidec.outputs); `force`
    replaces only glensidec's own files in it.
    """
    return import_model(model_path, outdir, force)[0]


@without_cycle_collection  # (1.5 of a vit_b_16's 4.9 s CPU)
def import_model(model_path: str | Path, outdir: str | Path,
                 force: bool = False) -> tuple[Path, dict[str, str]]:
    """`import_onnx`, also returning the inputs' names: ONNX name → program name."""
    model_path, outdir = Path(model_path), Path(outdir)
    stem = sanitize(model_path.stem)
    check_output_directory(outdir, [f"{stem}.gs", f"{stem}.npz"], force)
    model = _load_model(model_path)
    program, weights = build_program(model, f"{stem}.npz", str(outdir / f"{stem}.gs"))
    # escaped: a newline in the file's or the producer's name would end the comment
    header = (f"; Imported from {escaped(model_path.name)} by glensidec import (ONNX opset "
              f"{_opset(model)}, producer {escaped(model.producer_name or 'unknown')}).\n"
              f"; Weights: {stem}.npz. Float (f32) program; `glensidec quantize` makes an "
              f"int8 one.\n")
    renamed = {o: n for o, n in onnx_input_names(model).items() if o != n}
    if renamed:  # `glensidec run --input NAME=…` accepts the ONNX names through these lines
        header += "; Inputs renamed from the ONNX model (either name works with --input):\n"
        header += "".join(alias_line(o, n) + "\n" for o, n in renamed.items())
    text = header + format_program(program)
    write_directory(outdir, {f"{stem}.gs": text.encode("utf-8"),
                             f"{stem}.npz": npz_bytes(weights)}, force=force)
    return outdir / f"{stem}.gs", onnx_input_names(model)


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
