"""Stage 1, parse: program text ⇄ `Program`.

Reading is two steps. Lark (grammar/glenside.lark) turns text into s-expressions with
positions; `_Builder` then turns s-expressions into terms, checking each construct's arity
and argument kinds against the construct table, resolving `let` names and tensor names.
Writing (`format_program`) is the inverse and round-trips: parse(format(p)) == p.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import cast

import lark

from glensidec.errors import GlensideError, Span
from glensidec.lang import constructs as K
from glensidec.lang.constructs import COMPUTE_TYPES, CONSTRUCTS
from glensidec.lang.dtypes import LOOKUP_FUNCTIONS
from glensidec.lang.dtypes import NAMES as DTYPE_NAMES
from glensidec.lang.quantization import Quantization
from glensidec.lang.terms import (
    Arg,
    ComputeOp,
    Program,
    Symbol,
    TensorDecl,
    Term,
    postorder,
)
from glensidec.lang.typecheck import INT64_MAX, INT64_MIN, size_problem
from glensidec.resources import resource_dir

# ---------------------------------------------------------------------------------------
# Text → s-expressions


@dataclass(frozen=True)
class Atom:
    value: int | float | str
    kind: str  # "int" | "float" | "string" | "symbol"
    span: Span

    def describe(self) -> str:
        return {"string": "a string", "symbol": f"'{self.value}'"}.get(self.kind, str(self.value))


@dataclass(frozen=True)
class SList:
    items: tuple[SExpr, ...]
    span: Span

    def head(self) -> str | None:
        if self.items and isinstance(self.items[0], Atom) and self.items[0].kind == "symbol":
            return str(self.items[0].value)
        return None


SExpr = Atom | SList


def _token_span(token: lark.Token) -> Span:
    return Span(token.line or 1, token.column or 1)


class _ToSExpr(lark.Transformer[lark.Token, SExpr]):
    """Builds s-expressions while Lark parses (its LALR parser calls these on each
    reduction), so no parse tree of a large program is built and walked afterwards. An
    atom is a token of its list (or of the file), made an `Atom` here."""

    def start(self, children: Sequence[lark.Token | SExpr]) -> list[SExpr]:
        return [_atom(item) if isinstance(item, lark.Token) else item for item in children]

    def list(self, children: Sequence[lark.Token | SExpr]) -> SList:
        open_paren = children[0]
        assert isinstance(open_paren, lark.Token)
        items = tuple(_atom(item) if isinstance(item, lark.Token) else item
                      for item in children[1:-1])
        return SList(items, _token_span(open_paren))


def _atom(token: lark.Token) -> Atom:
    """The atom a FLOAT, INT, STRING or SYMBOL token writes."""
    span = _token_span(token)
    if token.type == "SYMBOL":
        return Atom(str(token), "symbol", span)
    if token.type == "INT":
        value = int(token)
        if not INT64_MIN <= value <= INT64_MAX:
            raise GlensideError(f"integer {token} does not fit in 64 bits", span)
        return Atom(value, "int", span)
    if token.type == "FLOAT":
        return Atom(float(token), "float", span)
    return Atom(_unescape(str(token)[1:-1], span), "string", span)


@cache
def _lark_parser() -> lark.Lark:
    grammar = (resource_dir("grammar") / "glenside.lark").read_text()
    # keep_all_tokens keeps the parentheses, so even `()` knows where it was written. The
    # basic lexer suffices (every terminal starts differently) and is the faster one.
    return lark.Lark(grammar, parser="lalr", lexer="basic", keep_all_tokens=True,
                     transformer=_ToSExpr())


def _unescape(body: str, span: Span) -> str:
    """String contents: backslash-quote and backslash-backslash are the only escapes."""
    out, index = [], 0
    while index < len(body):
        if body[index] == "\\":
            if index + 1 >= len(body) or body[index + 1] not in '"\\':
                message = "invalid escape in string: only \\\" and \\\\ are allowed"
                raise GlensideError(message, span)
            index += 1
        out.append(body[index])
        index += 1
    return "".join(out)


def _check_parentheses(text: str) -> None:
    """Report unbalanced parentheses where they are, before Lark reports them less clearly."""
    open_spans: list[Span] = []
    line, column = 1, 1
    in_comment = in_string = escaped = False
    for char in text:
        if in_comment:
            in_comment = char != "\n"
        elif in_string:
            in_string = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == ";":
            in_comment = True
        elif char == '"':
            in_string = True
        elif char == "(":
            open_spans.append(Span(line, column))
        elif char == ")":
            if not open_spans:
                raise GlensideError("unmatched ')'", Span(line, column))
            open_spans.pop()
        line, column = (line + 1, 1) if char == "\n" else (line, column + 1)
    if open_spans:
        raise GlensideError("'(' is never closed", open_spans[-1])


def read_sexprs(text: str) -> list[SExpr]:
    """Parse text into s-expressions; syntax errors are located GlensideErrors."""
    try:
        tree = _lark_parser().parse(text)
    except GlensideError:  # a bad atom, met while parsing
        _check_parentheses(text)
        raise
    except lark.exceptions.UnexpectedInput as error:
        # Unbalanced parentheses are reported where they are, more clearly than Lark
        # would; the scan runs only on text that failed (it is slow on large programs).
        _check_parentheses(text)
        if isinstance(error, lark.exceptions.UnexpectedCharacters):
            position = error.pos_in_stream or 0
            char = text[position] if position < len(text) else "end of file"
            span = Span(error.line, error.column)
            raise GlensideError(f"unexpected character {char!r}", span) from None
        if isinstance(error, lark.exceptions.UnexpectedToken):
            token = error.token
            raise GlensideError(f"unexpected {str(token)!r}", _token_span(token)) from None
        raise GlensideError("unexpected end of file", Span(error.line, error.column)) from None
    # (the transformer made every form an s-expression, and `start` the list of them)
    return cast(list[SExpr], tree)


# ---------------------------------------------------------------------------------------
# s-expressions → Program


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _kind_of(term: Term) -> str:
    return CONSTRUCTS[term.op].result


_KIND_WORDS = {
    K.ACCESS: "an access expression",
    K.SHAPE: "a (shape …)",
    K.LIST: "a (list …)",
    K.ACCESS_SHAPE: "an (access-shape …)",
    K.LITERAL: "a (literal …)",
    K.TUPLE: "a (construct-tuple …)",
}


class _Builder:
    def __init__(self, tensors: dict[str, TensorDecl]):
        self.tensors = tensors
        self.bindings: dict[str, Term] = {}
        self.binding_spans: dict[str, Span] = {}
        self.interned: dict[Term, Term] = {}  # each distinct term, the first one built
        self.repeated: dict[Term, list[Span]] = {}  # where a term is written again

    # -- terms --------------------------------------------------------------------------
    def term(self, sexpr: SExpr) -> Term:
        if isinstance(sexpr, Atom):
            if sexpr.kind == "symbol" and str(sexpr.value) in self.bindings:
                return self.bindings[str(sexpr.value)]
            if sexpr.kind == "symbol" and str(sexpr.value) in self.tensors:
                raise GlensideError(
                    f"'{sexpr.value}' is a tensor: write (access-tensor {sexpr.value})", sexpr.span
                )
            if sexpr.kind == "symbol":
                known = list(self.bindings)
                raise GlensideError(
                    f"unknown name '{sexpr.value}'{_suggest(str(sexpr.value), known)}", sexpr.span
                )
            raise GlensideError(f"expected an expression, got {sexpr.describe()}", sexpr.span)
        head = sexpr.head()
        if head is None:
            raise GlensideError("expected a construct name after '('", sexpr.span)
        construct = CONSTRUCTS.get(head)
        if construct is None and head in K.UNSUPPORTED:
            raise GlensideError(f"'{head}' of the original Glenside is not supported: "
                                f"{K.UNSUPPORTED[head]}", sexpr.items[0].span)
        if construct is None:
            hint = f" (did you mean (compute {head} …)?)" if head in COMPUTE_TYPES else ""
            hint = hint or _suggest(head, list(CONSTRUCTS))
            raise GlensideError(f"unknown construct '{head}'{hint}", sexpr.items[0].span)
        return self.construct(construct, sexpr)

    def construct(self, construct: K.Construct, sexpr: SList) -> Term:
        given = sexpr.items[1:]
        params = list(construct.params)
        low, high = len(params), len(params) + len(construct.optional)
        if construct.variadic is None and not low <= len(given) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise GlensideError(
                f"{construct.name} takes {expected} arguments {construct.signature()}, "
                f"got {len(given)}",
                sexpr.span,
            )
        params += list(construct.optional)
        args: list[Arg] = []
        for index, item in enumerate(given):
            name, kind = params[index] if index < len(params) else ("dim", construct.variadic)
            assert kind is not None
            args.append(self.argument(construct.name, name, kind, item))
        term = Term(construct.name, tuple(args), sexpr.span, tuple(item.span for item in given))
        # Equal terms are one object (the first written): every later stage's walks and
        # dicts compare them by identity first, and a structural comparison of two equal
        # copies walks both (swin_t's text writes 114,000 terms, 60,000 of them distinct).
        first = self.interned.setdefault(term, term)
        if first is not term:
            self.repeated.setdefault(first, []).append(sexpr.span)
        return first

    def argument(self, where: str, name: str, kind: str, item: SExpr) -> Arg:
        if kind in (K.NAT, K.INT, K.NUMBER):
            return self.number(where, name, kind, item)
        if kind in (K.PAD_TYPE, K.DTYPE, K.TENSOR):
            return self.symbol(where, name, kind, item)
        if kind == K.COMPUTE_TYPE:
            return self.compute_op(item)
        term = self.term(item)
        if _kind_of(term) != kind:
            raise GlensideError(
                f"{where}: argument '{name}' must be {_KIND_WORDS[kind]}, "
                f"got {_KIND_WORDS[_kind_of(term)]}",
                item.span,
            )
        return term

    def number(self, where: str, name: str, kind: str, item: SExpr) -> int | float:
        ok = isinstance(item, Atom) and (
            item.kind == "int" or (kind == K.NUMBER and item.kind == "float")
        )
        if not ok or (kind == K.NAT and isinstance(item, Atom) and int(item.value) < 0):
            word = {K.NAT: "a non-negative integer", K.INT: "an integer", K.NUMBER: "a number"}
            got = item.describe() if isinstance(item, Atom) else "a list"
            raise GlensideError(f"{where}: argument '{name}' must be {word[kind]}, got {got}",
                                item.span)
        assert isinstance(item, Atom) and isinstance(item.value, (int, float))
        return item.value

    def symbol(self, where: str, name: str, kind: str, item: SExpr) -> Symbol:
        # (looked up, not listed: a program declares thousands of tensors, and listing
        # them for every `access-tensor` made parsing quadratic in the tensor count)
        known: Collection[str] = {K.PAD_TYPE: K.PAD_TYPES, K.DTYPE: DTYPE_NAMES,
                                 K.FUNCTION: LOOKUP_FUNCTIONS, K.TENSOR: self.tensors}[kind]
        if not (isinstance(item, Atom) and item.kind == "symbol"):
            got = item.describe() if isinstance(item, Atom) else "a list"
            raise GlensideError(f"{where}: argument '{name}' must be a {kind} name, got {got}",
                                item.span)
        value = str(item.value)
        if value not in known:
            choices = list(known)
            what = "tensor" if kind == K.TENSOR else kind
            extra = "" if kind == K.TENSOR else f"; one of {', '.join(choices)}"
            if kind == K.TENSOR and not self.tensors:  # a bare original-Glenside expression
                extra = (": declare it with (input …), or give an original Glenside "
                         "expression's tensors with --shapes FILE.json")
            raise GlensideError(f"unknown {what} '{value}'{_suggest(value, choices)}{extra}",
                                item.span)
        return Symbol(value)

    def compute_op(self, item: SExpr) -> ComputeOp:
        head = item if isinstance(item, Atom) else (item.items[0] if item.items else item)
        if not (isinstance(head, Atom) and head.kind == "symbol"):
            raise GlensideError("expected a compute type such as dot-product or (clip 0 127)",
                                head.span)
        compute_type = COMPUTE_TYPES.get(str(head.value))
        if compute_type is None:
            hint = _suggest(str(head.value), list(COMPUTE_TYPES))
            raise GlensideError(f"unknown compute type '{head.value}'{hint}", head.span)
        given = () if isinstance(item, Atom) else item.items[1:]
        if len(given) != len(compute_type.params):
            form = compute_type.name if not compute_type.params else (
                "(" + " ".join([compute_type.name, *(p for p, _ in compute_type.params)]) + ")")
            raise GlensideError(
                f"compute type {compute_type.name} takes {len(compute_type.params)} parameters: "
                f"{form}",
                item.span,
            )
        params: list[int | float | str] = []
        for (param, kind), value in zip(compute_type.params, given, strict=True):
            if kind in (K.DTYPE, K.FUNCTION):
                params.append(self.symbol(compute_type.name, param, kind, value).name)
            else:
                params.append(self.number(compute_type.name, param, kind, value))
        return ComputeOp(compute_type.name, tuple(params))

    # -- top-level forms ----------------------------------------------------------------
    def bind(self, form: SList) -> str:
        if len(form.items) != 3:
            raise GlensideError("let takes a name and an expression: (let name expr)", form.span)
        name = self.new_name(form.items[1], "let")
        self.bindings[name] = self.term(form.items[2])
        self.binding_spans[name] = form.items[1].span
        return name

    def new_name(self, item: SExpr, form: str) -> str:
        if not (isinstance(item, Atom) and item.kind == "symbol"):
            raise GlensideError(f"{form}: expected a name, got "
                                f"{item.describe() if isinstance(item, Atom) else 'a list'}",
                                item.span)
        # No word is reserved: construct, compute-type and declaration words are recognised
        # only in their positions, so `input`, `weight`, `let` or `relu` is a name like any.
        name = str(item.value)
        earlier = self.binding_spans.get(name) or (
            self.tensors[name].span if name in self.tensors else None)
        if name in self.bindings or name in self.tensors:
            raise GlensideError(f"'{name}' is already declared at {earlier}", item.span)
        return name


def _declared_shape(item: SExpr, where: str) -> tuple[int, ...]:
    if not (isinstance(item, SList) and item.head() == "shape"):
        raise GlensideError(f"{where}: expected (shape d…) with literal dims", item.span)
    dims = []
    for dim in item.items[1:]:
        if not (isinstance(dim, Atom) and dim.kind == "int" and int(dim.value) > 0):
            raise GlensideError(f"{where}: shape dims must be positive integers", dim.span)
        dims.append(int(dim.value))
    problem = size_problem(tuple(dims))
    if problem:
        raise GlensideError(f"{where}: {problem}", item.span)
    return tuple(dims)


def _declaration(form: SList, builder: _Builder) -> TensorDecl:
    role = form.head()
    assert role in ("input", "weight")
    usage = {"input": "(input name dtype (shape d…) [(quantized scale zero-point)])",
             "weight": '(weight name dtype (shape d…) "file.npy|file.npz" [key])'}[role]
    count = len(form.items) - 1
    if not (count in (3, 4) if role == "input" else count in (4, 5)):
        raise GlensideError(f"{role} takes {usage}, got {count} arguments", form.span)
    name = builder.new_name(form.items[1], role)
    dtype = builder.symbol(role, "dtype", K.DTYPE, form.items[2]).name
    shape = _declared_shape(form.items[3], role)
    if role == "input":
        quantization = _quantization(form.items[4], f"input '{name}'") if count == 4 else None
        if quantization is not None and dtype != "i8":
            raise GlensideError(f"input '{name}': only an i8 input can be (quantized …), "
                                f"not {dtype}", form.items[4].span)
        return TensorDecl(name, shape, dtype, role, span=form.items[1].span,
                          quantization=quantization)
    source, key = _weight_source(form)
    return TensorDecl(name, shape, dtype, role, source, key, form.items[1].span)


def _weight_source(form: SList) -> tuple[str, str | None]:
    """A weight declaration's data file and (.npz) key."""
    path_atom = form.items[4]
    if not (isinstance(path_atom, Atom) and path_atom.kind == "string"):
        raise GlensideError("weight: the data file must be a quoted path", path_atom.span)
    source = str(path_atom.value)
    if not source.endswith((".npy", ".npz")):
        raise GlensideError(f"weight: data file '{source}' must be .npy or .npz",
                            path_atom.span)
    if len(form.items) < 6:
        return source, None
    key_atom = form.items[5]
    if not (isinstance(key_atom, Atom) and key_atom.kind in ("symbol", "string")):
        raise GlensideError("weight: the .npz key must be a name or a string", key_atom.span)
    return source, str(key_atom.value)


QUANTIZED, QUANTIZED_OUTPUT = "quantized", "quantized-output"


def _quantization(item: SExpr, where: str) -> Quantization:
    """`(quantized SCALE ZERO_POINT)`: SCALE a positive number, ZERO_POINT an i8 integer."""
    usage = f"{where}: expected (quantized SCALE ZERO_POINT), e.g. (quantized 0.0235 -3)"
    if not (isinstance(item, SList) and item.head() == QUANTIZED and len(item.items) == 3):
        raise GlensideError(usage, item.span)
    return _quantization_params(item.items[1], item.items[2], where, item.span)


def _quantization_params(scale: SExpr, zero_point: SExpr, where: str,
                         span: Span) -> Quantization:
    if not (isinstance(scale, Atom) and scale.kind in ("int", "float")):
        raise GlensideError(f"{where}: the scale must be a number", scale.span)
    if not (isinstance(zero_point, Atom) and zero_point.kind == "int"):
        raise GlensideError(f"{where}: the zero point must be an integer", zero_point.span)
    quantization = Quantization(float(scale.value), int(zero_point.value), span)
    problem = quantization.problem()
    if problem:
        bad = scale if "scale" in problem else zero_point
        raise GlensideError(f"{where}: {problem}", bad.span)
    return quantization


def _output_quantization(forms: list[SExpr]) -> Quantization | None:
    """The program's one `(quantized-output SCALE ZERO_POINT)` form, if any."""
    found = [f for f in forms if isinstance(f, SList) and f.head() == QUANTIZED_OUTPUT]
    if len(found) > 1:
        raise GlensideError(f"{QUANTIZED_OUTPUT} is declared twice", found[1].span)
    if not found:
        return None
    form = found[0]
    if len(form.items) != 3:
        raise GlensideError(f"{QUANTIZED_OUTPUT} takes a scale and a zero point: "
                            f"({QUANTIZED_OUTPUT} SCALE ZERO_POINT)", form.span)
    return _quantization_params(form.items[1], form.items[2], QUANTIZED_OUTPUT, form.span)


def parse_program(
    text: str, path: str = "<input>", shapes: dict[str, TensorDecl] | None = None
) -> Program:
    """Parse a whole program. `shapes` declares runtime inputs for compatibility mode."""
    try:
        return _parse_program(text, path, shapes or {})
    except GlensideError as error:
        raise error.located(path) from None


def _parse_program(text: str, path: str, shapes: dict[str, TensorDecl]) -> Program:
    forms = read_sexprs(text)
    tensors: dict[str, TensorDecl] = {}
    builder = _Builder(tensors)
    for form in forms:
        if isinstance(form, SList) and form.head() in ("input", "weight"):
            decl = _declaration(form, builder)
            tensors[decl.name] = decl
    for name, decl in shapes.items():
        if name in tensors:
            raise GlensideError(f"tensor '{name}' is declared in the program and in --shapes",
                                tensors[name].span)
        tensors[name] = decl
    names: dict[Term, str] = {}
    results: list[SExpr] = []
    for form in forms:
        head = form.head() if isinstance(form, SList) else None
        if head == "let":
            assert isinstance(form, SList)
            name = builder.bind(form)
            names.setdefault(builder.bindings[name], name)
        elif head not in ("input", "weight", QUANTIZED_OUTPUT):
            results.append(form)
    if not results:
        raise GlensideError("the program has no result expression", Span(1, 1))
    if len(results) > 1:
        raise GlensideError("a program has exactly one result expression; this is a second one",
                            results[1].span)
    return Program(path, tensors, _result(builder, results[0]), names,
                   _output_quantization(forms), builder.repeated)


def _result(builder: _Builder, form: SExpr) -> Term:
    """The result expression: any value but an argument-only atom. A bare tensor name is
    the tensor, as in the original (its `Value::Tensor`): `(access-tensor NAME)`."""
    if isinstance(form, Atom) and form.kind == "symbol" and str(form.value) in builder.tensors:
        return Term("access-tensor", (Symbol(str(form.value)),), form.span, (form.span,))
    argument_only = (*K.PAD_TYPES, *COMPUTE_TYPES)  # unless a `let` took the word as a name
    if isinstance(form, Atom) and (form.kind in ("int", "float") or (
            str(form.value) in argument_only and str(form.value) not in builder.bindings)):
        raise GlensideError(f"{form.describe()} alone is an argument, not a program result",
                            form.span)
    return builder.term(form)


def read_program(path: str | Path, shapes_path: str | Path | None = None) -> Program:
    """Read a program file (and, in compatibility mode, its shapes JSON)."""
    shapes = load_shapes(shapes_path) if shapes_path is not None else None
    return parse_program(_read_text(path), str(path), shapes)


def _read_text(path: str | Path) -> str:
    """The file's text: UTF-8, a leading byte-order mark ignored; a bad byte is located."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise GlensideError(f"no such file: {path}") from None
    except OSError as error:
        raise GlensideError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        raise GlensideError(f"invalid UTF-8 (byte 0x{raw[error.start]:02x}); programs are "
                            "UTF-8 text", Span(line, column), str(path)) from None
    return text.removeprefix("\ufeff")


def load_shapes(path: str | Path) -> dict[str, TensorDecl]:
    """The original Glenside's side file: {"name": [dims]} or {"name": {"shape", "dtype"}}."""
    text = _read_text(path)
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        raise GlensideError(f"invalid JSON: {error.msg}", Span(error.lineno, error.colno),
                            str(path)) from None
    if not isinstance(entries, dict):
        raise GlensideError("a shapes file is a JSON object {\"name\": [dims], …}", None, str(path))
    tensors = {}
    for name, entry in entries.items():
        if not _is_plain_name(name):
            raise GlensideError(f"tensor name {json.dumps(name)} is not a name the language "
                                "can spell (letters, digits, _ - . ; not starting with a digit "
                                "or -)", None, str(path))
        shape, dtype = entry, "f32"
        if isinstance(entry, dict):
            shape, dtype = entry.get("shape"), entry.get("dtype", "f32")
        dims_ok = isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
        if not dims_ok or dtype not in DTYPE_NAMES:
            raise GlensideError(
                f"tensor '{name}': expected a list of positive dims and a dtype in "
                f"{', '.join(DTYPE_NAMES)}, got {json.dumps(entry)}", None, str(path))
        problem = size_problem(tuple(shape))
        if problem:
            raise GlensideError(f"tensor '{name}': {problem}", None, str(path))
        tensors[str(name)] = TensorDecl(str(name), tuple(shape), str(dtype), "input")
    return tensors


NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")  # the grammar's SYMBOL


def _is_plain_name(name: str) -> bool:
    return NAME_PATTERN.fullmatch(name) is not None


# ---------------------------------------------------------------------------------------
# Program → text

WIDTH = 90


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _atom_text(arg: Arg) -> str:
    if isinstance(arg, Symbol):
        return arg.name
    if isinstance(arg, ComputeOp):
        if not arg.params:
            return arg.name
        return "(" + " ".join([arg.name, *(str(p) for p in arg.params)]) + ")"
    if isinstance(arg, float):
        return repr(arg)
    return str(arg)


class _Printer:
    def __init__(self, names: dict[Term, str]):
        self.names = names

    def flat(self, term: Term, top: bool = False) -> str:
        if not top and term in self.names:
            return self.names[term]
        parts = [term.op] + [self.flat(a) if isinstance(a, Term) else _atom_text(a)
                             for a in term.args]
        return "(" + " ".join(parts) + ")"

    def flat_within(self, term: Term, limit: int, top: bool = False) -> str | None:
        """`flat(term)` if it is at most `limit` characters long, else None.

        Stops as soon as the limit is passed, so asking costs O(limit), not O(term).
        """
        if not top and term in self.names:
            name = self.names[term]
            return name if len(name) <= limit else None
        parts = ["(" + term.op]
        used = len(parts[0]) + 1  # the closing parenthesis
        for arg in term.args:
            if used > limit:
                return None
            text = (self.flat_within(arg, limit - used - 1) if isinstance(arg, Term)
                    else _atom_text(arg))
            if text is None:
                return None
            parts.append(text)
            used += 1 + len(text)
        return " ".join(parts) + ")" if used <= limit else None

    def pretty(self, term: Term, indent: int = 0, top: bool = False) -> str:
        """`term` on one line if it fits in WIDTH after `indent`, else one argument a line.

        Lines are collected in one list and joined once: the cost is the size of the
        output (which grows with nesting depth times indentation), not a power of it.
        """
        lines: list[str] = []
        self._pretty(term, indent, top, lines, "")
        return "\n".join(lines)

    def _pretty(self, term: Term, indent: int, top: bool, lines: list[str],
                prefix: str) -> None:
        """Append `term`'s lines to `lines`; its first line starts with `prefix`."""
        flat = self.flat_within(term, WIDTH - indent, top)
        if flat is None and not top and term in self.names:
            flat = self.names[term]
        if flat is not None:
            lines.append(prefix + flat)
            return
        pad = " " * (indent + 1)
        args = list(term.args)
        head = prefix + "(" + term.op
        while args and not isinstance(args[0], Term):  # leading atoms stay on the head line
            head += " " + _atom_text(args.pop(0))
        lines.append(head)
        previous_was_atom = False
        for arg in args:
            if isinstance(arg, Term):
                self._pretty(arg, indent + 1, False, lines, pad)
            elif previous_was_atom:  # consecutive atoms share a line
                lines[-1] += " " + _atom_text(arg)
            else:
                lines.append(pad + _atom_text(arg))
            previous_was_atom = not isinstance(arg, Term)
        lines[-1] += ")"


def _shared_subterms(root: Term) -> list[Term]:
    """Non-trivial subterms used more than once: printing them once keeps output linear."""
    uses: Counter[Term] = Counter()
    for term in postorder(root):
        for child in set(term.children()):
            uses[child] += 1
    return [t for t in postorder(root) if uses[t] > 1 and t.op not in K.Group.LEAF
            and _kind_of(t) == K.ACCESS]


def format_program(program: Program) -> str:
    """Canonical text for a program: declarations, lets in dependency order, the result."""
    lines = []
    for decl in program.tensors.values():
        shape = "(shape " + " ".join(str(d) for d in decl.shape) + ")"
        if decl.role == "input":
            quantized = (f" ({QUANTIZED} {decl.quantization.text()})"
                         if decl.quantization is not None else "")
            lines.append(f"(input {decl.name} {decl.dtype} {shape}{quantized})")
        else:
            key = f" {_quote(decl.key)}" if decl.key is not None else ""
            source = _quote(str(decl.source))
            lines.append(f"(weight {decl.name} {decl.dtype} {shape} {source}{key})")
    names = dict(program.names)
    taken = set(names.values()) | set(program.tensors)
    for index, term in enumerate(_shared_subterms(program.root)):
        if term not in names:
            base = term.args[0].name if isinstance(term.args[0], ComputeOp) else term.op
            name = f"{base.replace('-', '_')}_{index}"
            while name in taken:
                name += "_"
            names[term] = name
            taken.add(name)
    if program.output_quantization is not None:
        lines.append(f"({QUANTIZED_OUTPUT} {program.output_quantization.text()})")
    printer = _Printer(names)
    order = [t for t in postorder(program.root) if t in names]
    if lines and order:
        lines.append("")
    for term in order:
        head = f"(let {names[term]} "
        flat = printer.flat(term, top=True)
        if len(head) + len(flat) < WIDTH:
            lines.append(f"{head}{flat})")
        else:
            lines.append(f"(let {names[term]}\n {printer.pretty(term, indent=1, top=True)})")
    if lines:
        lines.append("")
    lines.append(printer.pretty(program.root) if program.root not in names else names[program.root])
    return "\n".join(lines) + "\n"
