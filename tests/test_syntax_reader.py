"""The hand-written s-expression reader (`syntax.read_sexprs`) reads what the language's
grammar (grammar/glenside.lark) reads, as Lark's LALR parser of it did, and fails where and
as that did: the same s-expressions and positions, the same located error message."""

from __future__ import annotations

from pathlib import Path

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glensidec.errors import GlensideError, Span
from glensidec.lang.syntax import Atom, SExpr, SList, _check_parentheses, _unescape, read_sexprs
from glensidec.lang.typecheck import INT64_MAX, INT64_MIN
from glensidec.resources import resource_dir

ROOT = Path(__file__).resolve().parent.parent


def _lark_parser() -> lark.Lark:
    grammar = (resource_dir("grammar") / "glenside.lark").read_text()
    return lark.Lark(grammar, parser="lalr", keep_all_tokens=True)


_PARSER = _lark_parser()


def _span(token: lark.Token) -> Span:
    return Span(token.line or 1, token.column or 1)


def _to_sexpr(tree: lark.Tree[lark.Token]) -> SExpr:
    if tree.data == "list":
        open_paren = tree.children[0]
        assert isinstance(open_paren, lark.Token)
        inner = tree.children[1:-1]
        return SList(tuple(_to_sexpr(child) for child in inner), _span(open_paren))  # type: ignore[arg-type]
    token = tree.children[0]
    assert isinstance(token, lark.Token)
    kind = str(tree.data)
    if kind == "int":
        if not INT64_MIN <= int(token) <= INT64_MAX:
            raise GlensideError(f"integer {token} does not fit in 64 bits", _span(token))
        return Atom(int(token), "int", _span(token))
    if kind == "float":
        return Atom(float(token), "float", _span(token))
    if kind == "string":
        return Atom(_unescape(str(token)[1:-1], _span(token)), "string", _span(token))
    return Atom(str(token), "symbol", _span(token))


def lark_sexprs(text: str) -> list[SExpr]:
    """The reader this project had: the parentheses checked, then Lark's parse."""
    _check_parentheses(text)
    try:
        tree = _PARSER.parse(text)
    except lark.exceptions.UnexpectedCharacters as error:
        position = error.pos_in_stream or 0
        char = text[position] if position < len(text) else "end of file"
        raise GlensideError(f"unexpected character {char!r}",
                            Span(error.line, error.column)) from None
    except lark.exceptions.UnexpectedToken as error:
        raise GlensideError(f"unexpected {str(error.token)!r}", _span(error.token)) from None
    return [_to_sexpr(child) for child in tree.children]  # type: ignore[arg-type]


def outcome(read: object, text: str) -> tuple[str, object]:
    try:
        return "ok", read(text)  # type: ignore[operator]
    except GlensideError as error:
        return "error", (str(error), error.span)


def test_the_reader_reads_every_example_program_as_the_grammar_does() -> None:
    programs = [path for path in sorted((ROOT / "examples").rglob("*"))
                if path.suffix in (".gs", ".glenside")]
    assert len(programs) > 5
    for path in programs:
        text = path.read_text()
        assert outcome(read_sexprs, text) == outcome(lark_sexprs, text), path


TRICKY = [
    "", "()", "(a b) c", "(a", "a)", "(a))", "((a)", "1.5 -2 +3 .5 1e5 1.e3 1e 1.5e-3 -.5e+2",
    "12abc", "a-b.c_d", "-x", "+", "- 1", '"a b" "x\\"y" "\\\\"', '"a\\n"', '"unterminated',
    '"ab\ncd"', "(a ; comment (\n b)", "; only a comment", "\ta\r\nb\fc", "a\vb", "é", "(#)",
    "99999999999999999999", "(1 99999999999999999999 #)", '"\\q" 99999999999999999999',
    '(a "(" b)', '(a ")" b))', '"a\\\n(" (', "()()(()())", "\n\n  (x\n   (y #))",
]


@pytest.mark.parametrize("text", TRICKY)
def test_the_reader_agrees_with_the_grammar_on_tricky_text(text: str) -> None:
    assert outcome(read_sexprs, text) == outcome(lark_sexprs, text)


PIECES = ["(", ")", " ", "\n", "\t", ";", '"', "\\", "1", "-", "+", ".", "e", "E", "a", "_",
          "é", "#", "0.5", "x1", "123456789012345678901", "\r\n"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=24).map("".join))
def test_the_reader_agrees_with_the_grammar_on_any_text(text: str) -> None:
    assert outcome(read_sexprs, text) == outcome(lark_sexprs, text)
