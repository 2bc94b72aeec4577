"""The table of constructs: every operator of the language, its arguments and what it makes.

This table is the single list the other stages read: the parser checks arity and argument
kinds against it, the type checker and the interpreter have one rule per entry (a test
checks none is missing), and the e-graph encoding is generated from it. Adding a construct
means one row here and one rule in each stage that must understand it.

Argument kinds:
  access        an access-pattern expression (or the name of a `let` binding)
  nat / int     a non-negative / any integer literal
  number        an integer or float literal
  shape, list   a `(shape …)`/`(list …)`-valued term
  access-shape  an `(access-shape …)`-valued term
  pad-type      `zero-padding` or `min-padding`
  compute-type  a compute type from COMPUTE_TYPES, bare or with parameters: `(clip 0 127)`
  tensor        the name of a declared tensor
  literal       a `(literal …)` term
  dtype         one of i8, i16, i32, f32
  tuple         a `(construct-tuple …)`-valued term
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

ACCESS = "access"
NAT = "nat"
INT = "int"
NUMBER = "number"
SHAPE = "shape"
LIST = "list"
ACCESS_SHAPE = "access-shape"
PAD_TYPE = "pad-type"
COMPUTE_TYPE = "compute-type"
TENSOR = "tensor"
LITERAL = "literal"
DTYPE = "dtype"
FUNCTION = "function"  # a function an int8 lookup table holds (dtypes.LOOKUP_FUNCTIONS)
TUPLE = "tuple"

PAD_TYPES = ("zero-padding", "min-padding")

Param = tuple[str, str]  # (name, kind)


@dataclass(frozen=True)
class Construct:
    name: str
    params: tuple[Param, ...]
    result: str  # the kind of value the construct makes
    summary: str
    variadic: str | None = None  # kind of each further argument: `(shape 1 2 3)`
    optional: tuple[Param, ...] = ()  # trailing arguments that may be left out
    hardware: bool = False  # runs on the systolic array rather than the host
    # Replaced by other constructs (glensidec.lang.expand) before the rewriter and the C
    # back end see the program; only the parser, the type checker and the interpreter
    # know it.
    expanded: bool = False

    def signature(self) -> str:
        """`(access-pad access pad-type axis before after)`, for messages and docs."""
        words = [self.name, *(name for name, _ in self.params)]
        words += [f"[{name}]" for name, _ in self.optional]
        if self.variadic is not None:
            words.append(f"{self.variadic}…")
        return "(" + " ".join(words) + ")"


def _c(name: str, params: str, result: str, summary: str, **extra: object) -> Construct:
    """A row of the table; `params` is "name:kind name:kind …"."""
    pairs = tuple((p.split(":")[0], p.split(":")[1]) for p in params.split())
    return Construct(name, pairs, result, summary, **extra)  # type: ignore[arg-type]


_TABLE = [
    # Access patterns: re-view or move data, never compute.
    _c("access-tensor", "tensor:tensor", ACCESS, "name a declared tensor as ((shape),())"),
    _c("access", "access:access axis:nat", ACCESS, "re-split the access at `axis`"),
    _c("access-transpose", "access:access permutation:list", ACCESS, "permute the axes"),
    _c("access-cartesian-product", "left:access right:access", ACCESS,
       "pair every item of `left` with every item of `right`"),
    _c("access-pair", "left:access right:access", ACCESS, "zip two equal accesses item by item"),
    _c("access-windows", "access:access window:shape strides:shape", ACCESS,
       "sliding windows over the item axes"),
    _c("access-squeeze", "access:access axis:nat", ACCESS, "drop a unit axis"),
    _c("access-insert-axis", "access:access axis:nat", ACCESS, "insert a unit axis"),
    _c("access-broadcast", "access:access target:access-shape", ACCESS,
       "expand unit axes to a target shape"),
    _c("access-pad", "access:access pad-type:pad-type axis:nat before:nat after:nat", ACCESS,
       "pad one axis with zeros or the dtype's minimum"),
    _c("access-slice", "access:access axis:nat low:nat high:nat", ACCESS,
       "keep [low, high) of one axis"),
    _c("access-concatenate", "left:access right:access axis:nat", ACCESS,
       "join two accesses along one axis"),
    _c("access-flatten", "access:access", ACCESS, "flatten the access and the item part each"),
    _c("access-reshape", "access:access target:access-shape", ACCESS,
       "row-major reshape to a target access shape"),
    _c("access-shift-right", "access:access", ACCESS, "move the last access axis into the item"),
    _c("access-move-axis", "access:access source:nat destination:nat", ACCESS,
       "move one axis to another position"),
    _c("access-literal", "literal:literal", ACCESS, "a scalar as the access ((),())"),
    # Computation: the only construct that computes, over every item.
    _c("compute", "compute-type:compute-type access:access", ACCESS, "map an op over every item"),
    # Hardware.
    _c("systolic-array", "rows:nat cols:nat activations:access weights:access", ACCESS,
       "one invocation of a rows×cols weight-stationary array", hardware=True),
    _c("systolic-array-with-blocking", "rows:nat cols:nat activations:access weights:access",
       ACCESS, "the same product, blocked onto a rows×cols array", hardware=True),
    # The accelerator's output epilogue on an accumulator the array computed: + bias,
    # requantize per column, clip, as the rows leave for memory (compile --accel).
    _c("accel-epilogue",
       "requantize:compute-type clip:compute-type accumulator:access bias:access "
       "multipliers:access", ACCESS,
       "clip(requantize-per-channel(accumulator + bias, multipliers)) in the epilogue"),
    # The accelerator's pooling stores: a max-pool over the last two axes of a layer's
    # result, read back from the scratchpad (compile --accel).
    _c("accel-max-pool", "kernel:nat stride:nat padding:nat access:access", ACCESS,
       "kernel×kernel max-pool, stride and min-padding, of an accelerator layer's result"),
    # The original's conv2d modes of the array: a conv2d (no padding) as one blocked
    # product over the im2col matrix, expanded into systolic-array-with-blocking.
    *(_c(f"systolic-array-conv2d-{mode}{layout}-with-blocking",
         "rows:nat cols:nat weights:access data:access kh:nat kw:nat stride-h:nat stride-w:nat",
         ACCESS, f"a {layout.upper()} conv2d on a rows×cols array", expanded=True)
      for mode in ("", "im2col-") for layout in ("nchw-oihw", "nhwc-hwio")),
    # Tuples: a value of several accesses, taken apart again by index.
    _c("construct-tuple", "", TUPLE, "a tuple of accesses", variadic=ACCESS, expanded=True),
    _c("tuple-get-item", "tuple:tuple index:nat", ACCESS, "item `index` of a tuple",
       expanded=True),
    # Scalars.
    _c("literal", "value:number", LITERAL, "a scalar constant", optional=(("dtype", DTYPE),)),
    # Shape-valued helpers, evaluated while type checking.
    _c("shape", "", SHAPE, "a shape", variadic=NAT),
    _c("list", "", LIST, "a list of integers", variadic=NAT),
    _c("shape-of", "tensor:tensor", SHAPE, "the declared shape of a tensor"),
    _c("slice-shape", "shape:shape start:nat", SHAPE, "the dims of `shape` from `start` on"),
    _c("shape-insert-axis", "shape:shape axis:nat", SHAPE, "insert a 1 at `axis`"),
    _c("shape-remove-axis", "shape:shape axis:nat", SHAPE, "remove the dim at `axis`"),
    _c("access-shape", "access:shape item:shape", ACCESS_SHAPE, "an access shape ((S),(I))"),
    _c("get-access-shape", "access:access", ACCESS_SHAPE, "the access shape of an access"),
]

CONSTRUCTS: dict[str, Construct] = {c.name: c for c in _TABLE}

# Constructs of the original Glenside that glensidec rejects, each with its reason (the
# parser names the construct and says why; docs/language.md lists them).
UNSUPPORTED: dict[str, str] = {
    "relay-operator-call": "Relay operators are imported from ONNX instead (glensidec import)",
    "accelerator-call": "calls into the original's third-party accelerators (FlexNLP, VTA, "
                        "HLSCNN) have no hardware here",
    "accelerator-func": "calls into the original's third-party accelerators have no hardware "
                        "here",
    "constant-tensor": "constants are weights: declare them with (weight …)",
}


@dataclass(frozen=True)
class ComputeType:
    name: str
    params: tuple[Param, ...]
    summary: str


def _ct(name: str, params: str, summary: str) -> ComputeType:
    pairs = tuple((p.split(":")[0], p.split(":")[1]) for p in params.split())
    return ComputeType(name, pairs, summary)


_COMPUTE_TABLE = [
    _ct("dot-product", "", "item (t,c…): multiply the t tuple members, sum everything"),
    _ct("reduce-sum", "", "sum of the item"),
    _ct("reduce-max", "", "maximum of the item"),
    _ct("reduce-mean", "", "mean of the item"),
    _ct("relu", "", "max(x, 0) elementwise"),
    _ct("sqrt", "", "square root elementwise (floats)"),
    _ct("exp", "", "e^x elementwise (floats)"),
    _ct("sigmoid", "", "1/(1+e^-x) elementwise (floats)"),
    _ct("tanh", "", "hyperbolic tangent elementwise (floats)"),
    _ct("erf", "", "the error function elementwise (floats)"),
    _ct("negative", "", "-x elementwise"),
    _ct("elementwise-add", "", "item (t,c…): sum of the t tuple members"),
    _ct("elementwise-sub", "", "item (t,c…): first member minus the others"),
    _ct("elementwise-mul", "", "item (t,c…): product of the t tuple members"),
    _ct("elementwise-div", "", "item (t,c…): first member divided by the others"),
    _ct("softmax", "", "softmax over the single item axis (floats)"),
    _ct("clip", "low:number high:number", "clamp elementwise to [low, high]"),
    _ct("cast", "dtype:dtype", "convert elementwise to dtype, saturating"),
    _ct("requantize", "multiplier:int pre:nat post:nat zero-point:int",
        "integer (accumulator) to i8: ((((x >> pre) * m) + round) >> post) + zp, saturated"),
    _ct("requantize-per-channel", "pre:nat post:nat zero-point:int",
        "item (2,c…) of i32 (accumulator x, multiplier m): requantize x by m to i8"),
    _ct("lookup", "function:function in-scale:number in-zero-point:int out-scale:number "
        "out-zero-point:int",
        "i8 to i8 through a 256-entry table of function, from the quantization parameters"),
]

COMPUTE_TYPES: dict[str, ComputeType] = {c.name: c for c in _COMPUTE_TABLE}


# -- groups ------------------------------------------------------------------------------
# Every stage's lists of names derive from these sets (in the spirit of tinygrad's
# GroupOp): a stage asks "is it a view?", "which C operator folds it?", and never spells
# the names out again. tests/test_constructs.py checks that each access construct and each
# compute type is in exactly one group, and that every stage has a rule for its group.


class Group:
    """The access-valued constructs, by what they do with data."""

    # Name stored data: a declared tensor, a scalar literal.
    LEAF = frozenset({"access-tensor", "access-literal"})
    # Re-view data without computing: every element of the result is one element of the
    # operand (or a broadcast copy of it). Lowering makes most of them strided views.
    VIEW = frozenset({
        "access", "access-transpose", "access-reshape", "access-flatten", "access-squeeze",
        "access-insert-axis", "access-broadcast", "access-slice", "access-shift-right",
        "access-move-axis", "access-windows",
    })
    # Make a new buffer from data: padding adds elements no operand has, concatenation
    # joins two operands.
    COPY = frozenset({"access-pad", "access-concatenate"})
    # Tuples of two accesses: a compute over them reads the members side by side; they
    # are never materialised on their own.
    TUPLE = frozenset({"access-pair", "access-cartesian-product"})
    # The only construct that computes (what it computes is a compute type: ComputeKind).
    COMPUTE = frozenset({"compute"})
    # Run on the systolic array.
    HARDWARE = frozenset(name for name, c in CONSTRUCTS.items() if c.hardware)
    # Run in the accelerator's output path, on the rows an array call computed: its
    # epilogue, and its pooling stores.
    ACCELERATOR = frozenset({"accel-epilogue", "accel-max-pool"})
    # Not accesses: literals and shape-valued helpers, evaluated while type checking (and
    # construct-tuple, a tuple of accesses).
    STATIC = frozenset(name for name, c in CONSTRUCTS.items() if c.result != ACCESS)
    # Accesses replaced by other constructs before rewriting and lowering
    # (glensidec.lang.expand): tuple-get-item, the original's conv2d modes of the array.
    EXPANDED = frozenset(name for name, c in CONSTRUCTS.items()
                         if c.expanded and c.result == ACCESS)

    ACCESS = LEAF | VIEW | COPY | TUPLE | COMPUTE | HARDWARE | ACCELERATOR | EXPANDED


class ComputeKind:
    """The compute types, by the shape of their computation (and so of their lowering)."""

    # One element in, one element out, the same item shape.
    MAP = frozenset({"relu", "sqrt", "negative", "clip", "cast", "requantize", "exp",
                     "sigmoid", "tanh", "erf", "lookup"})
    # Over a tuple item (t,c…): fold the t members with a binary operator, here the C one.
    FOLD: Mapping[str, str] = MappingProxyType({
        "elementwise-add": "+", "elementwise-sub": "-", "elementwise-mul": "*",
        "elementwise-div": "/",
    })
    # The whole item to one value.
    REDUCE = frozenset({"reduce-sum", "reduce-max", "reduce-mean"})
    # Sum of products of the tuple members: what the systolic array computes.
    DOT = frozenset({"dot-product"})
    # Computed on the host by an instruction of their own: softmax (needs the whole item
    # twice), requantize-per-channel (pairs each accumulator with its own multiplier).
    HOST_ONLY = frozenset({"softmax", "requantize-per-channel"})

    ALL = MAP | frozenset(FOLD) | REDUCE | DOT | HOST_ONLY
    # Their result is in the accumulator dtype of their operand (dtypes.accumulator).
    ACCUMULATING = frozenset({"dot-product", "reduce-sum"})
