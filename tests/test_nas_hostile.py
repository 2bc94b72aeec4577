"""`glensidec nas` on bad input: every mistake in the model, the data or the options is one
line naming what is wrong, found before any Dask work starts; and Ctrl-C stops a search
cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the nas extra: pip install '.[nas]'")
pytest.importorskip("distributed", reason="needs the nas extra: pip install '.[nas]'")

from click.testing import CliRunner

from glensidec.cli import cli
from glensidec.errors import GlensideError
from glensidec.nas import commands

REPO = Path(__file__).resolve().parent.parent
DIGITS = REPO / "examples" / "digits_cnn.gs"
TRAIN = REPO / "examples" / "digits_train.npz"
VAL = REPO / "examples" / "digits_val.npz"


@pytest.fixture
def no_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Dask work fails the test: bad input must be refused before it."""
    def refuse(*args: Any) -> None:
        raise AssertionError("a Dask cluster was started for bad input")

    monkeypatch.setattr(commands, "dask_client", refuse)


def nas(tmp_path: Path, *words: str, model: Path = DIGITS, train: Path = TRAIN,
        val: Path = VAL) -> tuple[str, Any]:
    """The one-line error `glensidec nas` prints (or '' on success) and the result."""
    result = CliRunner().invoke(cli, ["nas", str(model), "--data", str(train), "--val",
                                      str(val), "-o", str(tmp_path / "out"), *words])
    if isinstance(result.exception, GlensideError):
        return str(result.exception), result
    return result.output.strip().splitlines()[-1] if result.exit_code else "", result


def npz(tmp_path: Path, name: str, x: np.ndarray, y: np.ndarray) -> Path:
    path = tmp_path / name
    np.savez(path, x=x, y=y)
    return path


def digits(count: int = 20) -> tuple[np.ndarray, np.ndarray]:
    with np.load(TRAIN) as archive:
        return archive["x"][:count], archive["y"][:count]


@pytest.mark.parametrize(("which", "make", "message"), [
    ("train", lambda x, y: (x[:, :, :7, :7], y),
     "x holds examples of shape (1, 7, 7); the network's input image takes (1, 8, 8)"),
    ("train", lambda x, y: (x, np.where(y == y[0], 20, y)),
     "y holds label 20, outside the network's 10 classes (0 to 9)"),
    ("train", lambda x, y: (x[:0], y[:0]), "x holds no examples"),
    ("train", lambda x, y: (x, y[:-3]), "x holds 20 examples but y 17 labels"),
    ("val", lambda x, y: (x, np.eye(10, dtype=np.int64)[y]), "y must be one class number "
     "per example, shape (20,); got one-hot labels of shape (20, 10)"),
    ("val", lambda x, y: (x, np.where(y == y[0], 20, y)),
     "y holds label 20, outside the network's 10 classes (0 to 9)"),
    ("train", lambda x, y: (np.where(np.arange(20)[:, None, None, None] == 4, np.nan, x), y),
     "x holds NaN or infinity (example 4 first)"),
    ("train", lambda x, y: (x, y + 0.5), "y must hold whole class numbers; it holds "
     "fractions"),
])
def test_nas_refuses_bad_data_in_one_line_before_any_dask_work(
        tmp_path: Path, no_dask: None, which: str, make: Any, message: str) -> None:
    x, y = make(*digits())
    path = npz(tmp_path, f"{which}.npz", x, y)
    error, result = nas(tmp_path, **{which: path})
    assert result.exit_code != 0
    assert error == f"error: data {path}: {message}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("words", "message"), [
    (("--threshold", "nan"), "error: --threshold nan: give a finite number"),
    (("--threshold", "inf"), "error: --threshold inf: give a finite number"),
    (("--workers", "1000000"), "error: --workers 1000000: at most "),
])
def test_nas_refuses_options_that_cannot_work_before_any_dask_work(
        tmp_path: Path, no_dask: None, words: tuple[str, ...], message: str) -> None:
    error, result = nas(tmp_path, *words)
    assert result.exit_code != 0 and error.startswith(message), error
    assert "\n" not in error


def test_nas_seed_must_be_a_seed(tmp_path: Path, no_dask: None) -> None:
    error, result = nas(tmp_path, "--seed", "-1")
    assert result.exit_code == 2 and "--seed" in error


def test_nas_scheduler_that_is_not_an_address_is_a_clear_error(tmp_path: Path) -> None:
    error, result = nas(tmp_path, "--scheduler", "garbage")
    assert result.exit_code != 0
    assert error.startswith("error: --scheduler garbage: not a scheduler address such as "
                            "tcp://HOST:8786")
    assert not (tmp_path / "out").exists()


def test_nas_error_in_the_model_names_the_users_file(tmp_path: Path, no_dask: None) -> None:
    model = tmp_path / "mine.gs"
    np.savez(tmp_path / "mine.npz", w=np.ones((10, 64), np.float32))
    model.write_text('(input image f32 (shape 1 1 8 8))\n(weight w f32 (shape 10 64) '
                     '"mine.npz")\n\n(let flat (access-reshape (access-tensor image) '
                     '(access-shape (shape 1 64) (shape))))\n(compute softmax (access '
                     '(compute dot-product (access-cartesian-product (access flat 1) '
                     '(access (access-tensor w) 1))) 1))\n')
    error, result = nas(tmp_path, model=model)
    assert result.exit_code != 0
    assert error.startswith(f"{model}:5:1: error: not a layer"), error


@pytest.mark.slow
def test_sigint_during_a_search_exits_130_without_tracebacks(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group: the command and its Dask workers."""
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "glensidec", "nas", str(DIGITS), "--data", str(TRAIN), "--val",
         str(VAL), "--budget", "40", "--train-epochs", "1", "--workers", "2", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while len(_descendants(process.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)  # the fork server, the resource tracker, two workers
        time.sleep(3)  # the search under way
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert stderr.strip() == "interrupted"  # (click writes a newline first)
    assert not out.exists()


def _descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        found += map(int, children)
        frontier += map(int, children)
    return found


def test_nas_workers_run_without_the_profiler_that_dropped_egraphs_on_its_thread() -> None:
    """The workers' statistical profiler held the e-graph thread's frame on the event loop;
    an e-graph freed with it there panicked ("EGraph is unsendable, but is being dropped on
    another thread", a traceback from a worker in bench_nas's run). The local cluster's
    workers run with it off."""
    import dask

    client = commands.dask_client(None, 1)
    try:
        enabled = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
        assert enabled and set(enabled.values()) == {False}
        periodic = client.run(lambda dask_worker: sorted(dask_worker.periodic_callbacks))
        assert all("profile" not in names for names in periodic.values())
    finally:
        commands.close_client(client)
