"""User-facing errors: every message a user sees is `file:line:col: error: …`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """Where a piece of program text starts (1-based line and column)."""

    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


class GlensideError(Exception):
    """An error in the user's input: a program, a data file, a command-line value.

    The CLI prints it as one line and exits 1; it never becomes a traceback.
    """

    def __init__(self, message: str, span: Span | None = None, path: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.path = path

    def located(self, path: str) -> GlensideError:
        """The same error, attributed to `path` unless it already names a file."""
        if self.path is None:
            self.path = path
        return self

    def __str__(self) -> str:
        if self.path is None and self.span is None:
            return f"error: {self.message}"
        where = self.path or "<input>"
        if self.span is not None:
            where = f"{where}:{self.span}"
        return f"{where}: error: {self.message}"


def escaped(text: str) -> str:
    """`text` with a backslash, a single quote and every character that is not printable
    escaped as Python escapes it (a newline as \\n, an escape as \\x1b)."""
    return "".join(char if char.isprintable() and char not in "\\'"
                   else "\\" + char if char in "\\'"
                   else char.encode("unicode_escape").decode("ascii") for char in text)


def quoted(name: str) -> str:
    """`name` in single quotes for a message, escaped: a name from a model (an ONNX input,
    node or tensor) may hold a newline, a quote or a terminal escape, which would break the
    one-line message or the terminal showing it."""
    return f"'{escaped(name)}'"
