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
from glensidec import pipeline  # (imported before a test patches check_program: it keeps it)
from glensidec.cli import cli
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import TypeTable

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every program `check_program` is called on, in order."""
    paths: list[str] = []
    original = typecheck.check_program

    def counting(program: Program) -> TypeTable:
        paths.append(program.path)
        return original(program)

    # Every module holding the function by name (imported with `from … import`).
    for name, module in list(sys.modules.items()):
        if name.startswith("glensidec") and getattr(module, "check_program", None) is original:
            monkeypatch.setattr(module, "check_program", counting)
    return paths


def test_compile_type_checks_the_program_once(tmp_path: Path, checked: list[str]) -> None:
    source = EXAMPLES / "small_cnn.gs"
    result = CliRunner().invoke(cli, ["compile", str(source), "--array", "8x8", "--verify",
                                      "--stats", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "model.c").is_file()
    assert checked == [str(source)]


def test_api_compile_of_a_path_type_checks_the_program_once(tmp_path: Path,
                                                            checked: list[str]) -> None:
    """`glensidec.compile` of a file (what bench_zoo times) checked the program twice: once
    loading it, once more for the compile."""
    import glensidec

    source = EXAMPLES / "small_cnn.gs"
    compiled = glensidec.compile(source, "8x8", tmp_path / "out")
    assert compiled.outdir is not None and (tmp_path / "out" / "model.c").is_file()
    assert checked == [str(source)]


def test_api_load_and_compile_pause_the_cycle_collector(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The API's `load` and `compile` parse with the cycle collector paused, as the
    command's stages do (a swin_t's parse took twice as long with it running)."""
    import gc

    import glensidec
    from glensidec.lang import syntax

    seen: list[bool] = []
    for module in (syntax, pipeline):
        read = module.read_program
        monkeypatch.setattr(module, "read_program",
                            lambda *args, read=read: seen.append(gc.isenabled()) or read(*args))
    glensidec.load(EXAMPLES / "matmul.gs")
    glensidec.compile(EXAMPLES / "matmul.gs", "8x8")
    assert seen == [False, False] and gc.isenabled()


def test_compile_stages_pause_the_cycle_collector_and_turn_it_back_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stages run without Python's cycle collector (its passes over the compiler's
    millions of surviving objects were 40 % of a vit_b_16's compile), and turn it back on
    when they return or fail; a stage inside another leaves it to the outer one."""
    import gc

    from glensidec.collector import without_cycle_collection

    seen: list[bool] = []

    @without_cycle_collection
    def inner() -> None:
        seen.append(gc.isenabled())

    @without_cycle_collection
    def outer(fail: bool) -> None:
        inner()
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("a stage's error")

    assert gc.isenabled()
    outer(False)
    assert seen == [False, False] and gc.isenabled()
    with pytest.raises(ValueError, match="a stage's error"):
        outer(True)
    assert gc.isenabled()
    read = pipeline.read_program
    monkeypatch.setattr(pipeline, "read_program",
                        lambda *args: seen.append(gc.isenabled()) or read(*args))
    pipeline.load(Path(__file__).parent.parent / "examples" / "matmul.gs")
    assert seen[-1] is False and gc.isenabled()
