"""Progress bars: drawn on a terminal (or when forced), never in piped output or CI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EXAMPLES

from glensidec import progress
from glensidec.cosim.runner import _watch_calls
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.syntax import read_program
from glensidec.pipeline import compile_program


def test_piped_compile_prints_no_progress(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", progress.FORCE)}
    completed = subprocess.run(
        [sys.executable, "-m", "glensidec", "compile", str(EXAMPLES / "small_cnn.gs"),
         "--array", "8x8", "-o", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, check=True)
    assert completed.stderr == ""
    assert "\r" not in completed.stdout and completed.stdout.startswith("wrote ")


def test_ci_silences_even_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.FORCE, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.delenv("CI", raising=False)
    assert progress.shown()
    monkeypatch.setenv("CI", "true")
    assert not progress.shown()


def test_compile_shows_layers_when_forced(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(progress.FORCE, "1")
    compile_program(read_program(EXAMPLES / "small_cnn.gs"), ArrayConfig(8, 8))
    err = capsys.readouterr().err
    assert "compiling" in err and "2/2" in err


def test_cosimulation_bar_counts_calls_and_cycles(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(progress.FORCE, "1")
    with _watch_calls(tmp_path / "calls", 3) as calls_log:
        assert calls_log is not None
        # what the simulator appends per finished call: its cycles and wall seconds
        calls_log.write_text("100 0.5\n250 0.25\n")
        time.sleep(1.0)
    err = capsys.readouterr().err
    assert "co-simulating" in err and "2/3" in err and "467 simulated cycles/s" in err
    monkeypatch.setenv(progress.FORCE, "0")
    with _watch_calls(tmp_path / "calls", 3) as calls_log:
        assert calls_log is None  # no bar: the simulator is not asked to report
    assert capsys.readouterr().err == ""
