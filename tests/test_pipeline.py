"""The driver (glensidec/pipeline.py): the program is type-checked once, after parsing.

Every later stage receives the types with the program, so `glensidec compile` with
--verify, --stats and -o must call `check_program` exactly once, on the file it read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import glensidec.lang.typecheck as typecheck
from glensidec.cli import cli
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import TypeTable

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_compile_type_checks_the_program_once(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    original = typecheck.check_program

    def counting(program: Program) -> TypeTable:
        checked.append(program.path)
        return original(program)

    # Every module holding the function by name (imported with `from … import`).
    for name, module in list(sys.modules.items()):
        if name.startswith("glensidec") and getattr(module, "check_program", None) is original:
            monkeypatch.setattr(module, "check_program", counting)
    source = EXAMPLES / "small_cnn.gs"
    result = CliRunner().invoke(cli, ["compile", str(source), "--array", "8x8", "--verify",
                                      "--stats", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "model.c").is_file()
    assert checked == [str(source)]
