"""Constructs the later stages never see, replaced by constructs they know.

`construct-tuple`/`tuple-get-item` and the original's `systolic-array-conv2d-…` family are
marked `expanded` in the construct table: the parser, the type checker and the interpreter
handle them directly, and `expand_program` rewrites them before rewriting and lowering.

* `(tuple-get-item (construct-tuple a0 a1 …) i)` is `ai` (a tuple is only ever made by
  `construct-tuple`, so the member is always at hand).
* A conv2d mode of the array is its im2col product: the windows of the data flattened
  to `((N,H',W'),(K))` times the filters as `((),(K,O))`, as
  `systolic-array-with-blocking rows cols` when the sizes block onto the array
  (`K % rows == 0`, `O % cols == 0`), else as a `dot-product` for the rewriter to map.
"""

from __future__ import annotations

from dataclasses import replace

from glensidec.lang import constructs as K
from glensidec.lang.terms import Arg, ComputeOp, Program, Symbol, Term, postorder
from glensidec.lang.typecheck import TypeTable, access_type, check_program


def needs_expansion(root: Term) -> bool:
    return any(K.CONSTRUCTS[term.op].expanded for term in postorder(root))


def expand_program(program: Program) -> Program:
    """`program` without expanded constructs (the same program when it has none)."""
    if not needs_expansion(program.root):
        return program
    types = check_program(program)
    done: dict[Term, Term] = {}
    for term in postorder(program.root):
        args = tuple(done[a] if isinstance(a, Term) else a for a in term.args)
        rebuilt = Term(term.op, args, term.span, term.arg_spans)
        if term.op == "tuple-get-item":
            members, index = args
            assert isinstance(members, Term) and isinstance(index, int)
            rebuilt = members.children()[index]
        elif term.op.startswith("systolic-array-conv2d-"):
            rebuilt = _conv2d(term, args, types)
        done[term] = rebuilt
    root = done[program.root]
    names = {done[term]: name for term, name in program.names.items() if term in done
             and done[term].op != "construct-tuple"}
    return replace(program, root=root, names=names)


def _op(name: str, *args: Arg) -> Term:
    return Term(name, args)


def _shape(name: str, *dims: int) -> Term:
    return _op(name, *dims)


def _access_shape(shape: tuple[int, ...], item: tuple[int, ...]) -> Term:
    return _op("access-shape", _shape("shape", *shape), _shape("shape", *item))


def _conv2d(term: Term, args: tuple[Arg, ...], types: TypeTable) -> Term:
    weights, data = args[2], args[3]
    assert isinstance(weights, Term) and isinstance(data, Term)
    rows, cols, kh, kw, stride_h, stride_w = (int(a) for a in (*args[:2], *args[4:8]))  # type: ignore[arg-type]
    data_type, result = access_type(types, term.args[3]), access_type(types, term)
    nchw = "nchw-oihw" in term.op
    if nchw:
        n, out_channels, out_h, out_w = result.full
        channels = data_type.full[1]
        window, strides, squeezed = (channels, kh, kw), (1, stride_h, stride_w), 1
    else:
        n, out_h, out_w, out_channels = result.full
        channels = data_type.full[3]
        window, strides, squeezed = (kh, kw, channels), (stride_h, stride_w, 1), 3
    reduction = channels * kh * kw
    windows = _op("access-windows", _op("access", data, 1), _shape("shape", *window),
                  _shape("shape", *strides))
    columns = _op("access-reshape", _op("access-squeeze", windows, squeezed),
                  _access_shape((n, out_h, out_w), (reduction,)))
    if nchw:  # OIHW filters as rows ((O),(K)), transposed to ((),(K,O))
        filters = _op("access-reshape", weights, _access_shape((out_channels,), (reduction,)))
        matrix = _op("access", _op("access-transpose", filters, _op("list", 1, 0)), 0)
    else:  # HWIO filters are (K,O) already
        matrix = _op("access-reshape", weights, _access_shape((), (reduction, out_channels)))
    if reduction % rows == 0 and out_channels % cols == 0:
        product = _op("systolic-array-with-blocking", rows, cols, columns, matrix)
    else:
        rows_of_filters = _op("access", _op("access-transpose", matrix, _op("list", 1, 0)), 1)
        product = _op("compute", ComputeOp("dot-product"),
                      _op("access-cartesian-product", columns, rows_of_filters))
    # The product is ((N,H',W',O),()); NCHW output moves O to axis 1.
    return _op("access-transpose", product, _op("list", 0, 3, 1, 2)) if nchw else product


def expand_accelerated(term: Term) -> Term:
    """What an accelerator construct (`Group.ACCELERATOR`) stands for in host constructs."""
    return expand_epilogue(term) if term.op == "accel-epilogue" else expand_max_pool(term)


def expand_epilogue(term: Term) -> Term:
    """The compute chain an `accel-epilogue` stands for, as the quantizer writes it (the
    inverse of the `epilogue` rules, glensidec.opt.rewrite.epilogue_rules): a broadcast
    i32 literal multiplier gives back a per-tensor `(requantize m pre post zp)`, and the
    identity clip `(clip -128 127)` no clip at all."""
    requantize, clip, accumulator, bias, multipliers = term.args
    assert isinstance(requantize, ComputeOp) and isinstance(clip, ComputeOp)
    biased = _op("compute", ComputeOp("elementwise-add"),
                 _op("access-pair", accumulator, bias))
    scalar = _broadcast_literal(multipliers)
    if scalar is not None:
        per_tensor = ComputeOp("requantize", (scalar, *requantize.params))
        requantized = _op("compute", per_tensor, biased)
    else:
        requantized = _op("compute", requantize, _op("access-pair", biased, multipliers))
    if clip == ComputeOp("clip", (-128, 127)):
        return requantized
    return _op("compute", clip, requantized)


def _broadcast_literal(multipliers: Arg) -> int | None:
    """m of `(access-broadcast (access-reshape (access-literal (literal m i32)) …) …)`."""
    if not (isinstance(multipliers, Term) and multipliers.op == "access-broadcast"):
        return None
    reshaped = multipliers.args[0]
    if not (isinstance(reshaped, Term) and reshaped.op == "access-reshape"):
        return None
    literal = reshaped.args[0]
    if not (isinstance(literal, Term) and literal.op == "access-literal"):
        return None
    value = literal.args[0]
    assert isinstance(value, Term) and isinstance(value.args[0], int)
    return value.args[0]


def expand_max_pool(term: Term) -> Term:
    """The max-pool an `accel-max-pool` of an NCHW access stands for, as the quantizer
    writes it (the inverse of the `epilogue` rules' max-pool rules)."""
    kernel, stride, padding, pooled = term.args
    assert isinstance(kernel, int) and isinstance(stride, int) and isinstance(padding, int)
    if padding:
        for axis in (2, 3):
            pooled = _op("access-pad", pooled, Symbol("min-padding"), axis, padding, padding)
    windows = _op("access-windows", _op("access", pooled, 2), _shape("shape", kernel, kernel),
                  _shape("shape", stride, stride))
    return _op("compute", ComputeOp("reduce-max"), windows)
