"""Nothing lost: compile, import and quantize write only where they may (glensidec.outputs).

An output directory must be new, empty or glensidec's own earlier output (its manifest says
which files); a single output file must be new or an existing regular file we may write.
Everything else is refused with one line naming the path, and nothing else is touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from glensidec.cli import main
from glensidec.errors import GlensideError
from glensidec.outputs import MANIFEST, write_directory, write_file

TINY = """\
(input x f32 (shape 4 8))
(weight w f32 (shape 6 8) "tiny.npz")
(compute dot-product
 (access-cartesian-product (access (access-tensor x) 1) (access (access-tensor w) 1)))
"""


def make_sources(root: Path) -> dict[str, Path]:
    """A tiny float program with weights, its calibration data and a tiny ONNX model."""
    generator = np.random.default_rng(0)
    (root / "tiny.gs").write_text(TINY)
    np.savez(root / "tiny.npz", w=generator.standard_normal((6, 8)).astype(np.float32))
    np.savez(root / "calib.npz", x=generator.standard_normal((3, 4, 8)).astype(np.float32))
    weight = numpy_helper.from_array(generator.standard_normal((8, 6)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(root / "tiny.onnx"))
    return {name: root / name for name in ("tiny.gs", "tiny.npz", "calib.npz", "tiny.onnx")}


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run_cli(*args: str | Path, cwd: Path) -> int:
    """`glensidec ARGS` in this process (fast enough for property tests); the exit code."""
    saved_argv, saved_term = sys.argv, signal.getsignal(signal.SIGTERM)
    saved_limit = sys.getrecursionlimit()
    sys.argv = ["glensidec", *map(str, args)]
    try:
        with working_directory(cwd):
            main()
        return 0
    except SystemExit as done:
        return int(done.code or 0)
    finally:
        sys.argv = saved_argv
        sys.setrecursionlimit(saved_limit)
        signal.signal(signal.SIGTERM, saved_term)


def command(kind: str, sources: dict[str, Path], target: str) -> list[str | Path]:
    if kind == "compile":
        return ["compile", sources["tiny.gs"], "--array", "4x4", "--iterations", "2", "-o",
                target]
    if kind == "import":
        return ["import", sources["tiny.onnx"], "-o", target]
    if kind == "transform":
        return ["transform", EXAMPLES / "digits_cnn.gs", "--group", "c2:2", "-o", target]
    return ["quantize", sources["tiny.gs"], "--calibrate", sources["calib.npz"], "-o", target]


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under root: file bytes, or the kind of a non-file."""
    found: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            found[relative] = "link"
        elif path.is_file():
            found[relative] = path.read_bytes()
        elif path.is_dir():
            found[relative] = "dir"
        else:
            found[relative] = "special"
    return found


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "src").mkdir()
    return make_sources(tmp_path / "src")


# -- output directories -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["compile", "import"])
def test_refuses_everything_but_a_new_empty_or_own_directory(
        kind: str, sources: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    os.mkfifo(work / "fifo")
    (work / "full").mkdir()
    (work / "full" / "keep.c").write_text("int main(void) { return 0; }\n")
    before = snapshot(tmp_path)
    for target, message in [(".", "working directory"), ("", "working directory"),
                            ("..", "working directory or one above"),
                            ("notes.txt", "not a directory"), ("fifo", "not a directory"),
                            ("full", "not written by glensidec")]:
        capsys.readouterr()
        assert run_cli(*command(kind, sources, target), cwd=work) == 1, target
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("\n") == 1, err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["compile", "import"])
def test_own_output_is_replaced_and_force_keeps_other_files(
        kind: str, sources: dict[str, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run_cli(*command(kind, sources, str(out)), cwd=tmp_path) == 0
    first = snapshot(out)
    assert MANIFEST in first
    assert run_cli(*command(kind, sources, str(out)), cwd=tmp_path) == 0  # all ours: replaced
    assert snapshot(out) == first  # deterministic
    (out / "mine.txt").write_text("a user's file")
    capsys.readouterr()
    assert run_cli(*command(kind, sources, str(out)), cwd=tmp_path) == 1
    assert "mine.txt" in capsys.readouterr().err
    assert run_cli(*command(kind, sources, str(out)), "--force", cwd=tmp_path) == 0
    assert (out / "mine.txt").read_text() == "a user's file"
    assert snapshot(out) == {**first, "mine.txt": b"a user's file"}
    # An edited file of ours is not silently replaced either.
    edited = next(name for name in first if name != MANIFEST)
    (out / edited).write_bytes(b"edited by hand")
    (out / "mine.txt").unlink()
    assert run_cli(*command(kind, sources, str(out)), cwd=tmp_path) == 1
    assert f"{edited} changed since glensidec wrote it" in capsys.readouterr().err
    assert (out / edited).read_bytes() == b"edited by hand"


def test_force_never_replaces_a_foreign_file_of_the_same_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "main.c").write_text("the user's own main.c")
    with pytest.raises(GlensideError, match=r"main\.c was not written by glensidec"):
        write_directory(out, {"main.c": b"ours"}, force=True)
    assert (out / "main.c").read_text() == "the user's own main.c"


def test_build_products_count_as_ours(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_directory(out, {"a.c": b"1"}, products=["model"])
    (out / "model").write_bytes(b"built")
    write_directory(out, {"a.c": b"2"}, products=["model"])
    assert sorted(p.name for p in out.iterdir()) == ["a.c", MANIFEST]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_parent_is_one_clean_line(sources: dict[str, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert run_cli(*command("compile", sources, str(locked / "out")), cwd=tmp_path) == 1
        assert "Permission denied" in capsys.readouterr().err
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("kind", ["compile", "import", "quantize", "transform"])
@pytest.mark.parametrize("where", ["/proc/self/no-such-dir/out", "/proc/out"])
def test_impossible_paths_are_one_clean_line(kind: str, where: str, sources: dict[str, Path],
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """One line naming the path given (quantize and transform write a sibling first, its
    .json or .npz: the error named that file, one the user never gave)."""
    target = where + (".gs" if kind in ("quantize", "transform") else "")
    assert run_cli(*command(kind, sources, target), cwd=tmp_path) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write {target}: ") and err.count("\n") == 1, err


# -- single files -------------------------------------------------------------------------------


def test_write_file_refuses_directories_and_special_files(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name, message in [("dir", "it is a directory"), ("fifo", "not a regular file")]:
        with pytest.raises(GlensideError, match=message):
            write_file(tmp_path / name, "x")
    with pytest.raises(GlensideError, match="not a regular file"):
        write_file(Path("/dev/null"), "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_write_file_creates_parents_and_keeps_permissions(tmp_path: Path) -> None:
    write_file(tmp_path / "a" / "b" / "c.txt", "one")
    target = tmp_path / "a" / "b" / "c.txt"
    target.chmod(0o640)
    write_file(target, "two")
    assert target.read_text() == "two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["c.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_fmt_in_place_on_a_read_only_file(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "m.gs"
    program.write_text((EXAMPLES / "matmul.gs").read_text())
    program.chmod(0o444)
    assert run_cli("fmt", "-i", program, cwd=tmp_path) == 1
    assert "permission denied" in capsys.readouterr().err
    assert program.read_text() == (EXAMPLES / "matmul.gs").read_text()


@pytest.mark.parametrize("target", ["missing/dir/x.gs", "dir"])
def test_emit_rewritten_to_odd_paths(target: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "dir").mkdir()
    code = run_cli("compile", EXAMPLES / "matmul.gs", "--array", "4x4", "--iterations", "1",
                   "--emit", "rewritten", "-o", target, cwd=tmp_path)
    err = capsys.readouterr().err
    if target == "dir":
        assert code == 1 and "it is a directory" in err and "Traceback" not in err
    else:
        assert code == 0, err
        assert (tmp_path / target).is_file()


def test_quantize_refuses_a_foreign_file_and_creates_the_parent(
        sources: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "new" / "dir" / "q.gs"
    assert run_cli(*command("quantize", sources, str(target)), cwd=tmp_path) == 0
    assert run_cli(*command("quantize", sources, str(target)), cwd=tmp_path) == 0  # ours
    (tmp_path / "new" / "dir" / "q.npz").write_bytes(b"someone else's")
    capsys.readouterr()
    assert run_cli(*command("quantize", sources, str(target)), cwd=tmp_path) == 1
    assert "q.npz exists and was not written" in capsys.readouterr().err
    assert (tmp_path / "new" / "dir" / "q.npz").read_bytes() == b"someone else's"
    assert run_cli(*command("quantize", sources, str(target)), "--force", cwd=tmp_path) == 0


# -- interruption -------------------------------------------------------------------------------


def test_sigterm_in_the_middle_of_writing_leaves_no_staging(tmp_path: Path) -> None:
    script = """
import os, signal, sys
from glensidec import outputs
outputs.raise_on_sigterm()
real_replace = os.replace
def replace(a, b):
    os.kill(os.getpid(), signal.SIGTERM)
    return real_replace(a, b)
os.replace = replace
try:
    outputs.write_directory(sys.argv[1], {"a.c": b"x" * 100000, "b.c": b"y"})
except outputs.Terminated:
    sys.exit(143)
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "out")], timeout=60)
    assert done.returncode == 143
    assert list(tmp_path.iterdir()) == []


def _signal_handler_installed(pid: int, signum: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line.split()[1] for line in status.splitlines()
                      if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signum - 1) & 1)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_compile_exits_with_the_signal_code(signum: int, code: int,
                                                        tmp_path: Path) -> None:
    # A deep program (3,000 nested constructs to parse, type, rewrite, lower and emit), so
    # that some work is still ahead when the signal arrives.
    depth = 3000
    program = tmp_path / "deep.gs"
    program.write_text("(input x i8 (shape 4 4))\n" + "(compute relu " * depth
                       + "(access-tensor x)" + ")" * depth + "\n")
    outdir = tmp_path / "out"
    # As from a terminal: SIGINT at its default. A suite started in the background of a
    # non-interactive shell (`make test &`) runs with SIGINT ignored, a child inherits an
    # ignored signal, and Python then never raises KeyboardInterrupt.
    process = subprocess.Popen(
        [sys.executable, "-m", "glensidec", "compile", str(program), "--array", "8x8", "-o",
         str(outdir)], stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # The signal goes as soon as the CLI's handler is in place: the compile itself now takes
    # well under a second, and a fixed pause before the signal let a compile on a loaded
    # machine finish first (exit 0), which is a race in the test, not a fault of the CLI.
    deadline = time.monotonic() + 60
    while not _signal_handler_installed(process.pid, signal.SIGTERM):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.005)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == [program]


# A Ctrl-C that lands while the command's modules load (the hook below sends it as
# `click` is imported, deterministically) used to print an import's traceback and die by
# SIGINT, or, inside one of importlib's weakref callbacks, be dropped with the compile
# running on.
INTERRUPT_WHILE_LOADING = """
import os, signal, sys
class InterruptAtClick:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, InterruptAtClick())
sys.argv = ["glensidec", "--version"]
from glensidec.cli import main
main()
"""


def test_ctrl_c_while_the_cli_loads_is_one_line_and_exit_130() -> None:
    process = subprocess.run(
        [sys.executable, "-c", INTERRUPT_WHILE_LOADING], capture_output=True, text=True,
        timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (process.returncode, process.stdout, process.stderr) == (130, "", "interrupted\n")


# -- the property: nothing the tool did not create is ever changed -----------------------------

NAMES = ["tiny.gs", "tiny.npz", "main.c", "model.h", "notes.txt", MANIFEST, "q.gs", "q.npz",
         "q.gs.json", "out"]
TARGETS = ["out", "out/sub", ".", "", "..", "notes.txt", "q.gs", "tiny.gs", "fresh",
           "fresh/q.gs"]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[str, str, bool, bool, dict[str, bytes | None]]:
    """A command, its -o target, --force, an earlier run first, and the user's files
    (name -> bytes, or None for an empty directory), at the top and inside out/."""
    kind = draw(st.sampled_from(["compile", "import", "quantize"]))
    target = draw(st.sampled_from(TARGETS))
    names = draw(st.lists(st.sampled_from(NAMES + [f"out/{n}" for n in NAMES[:-1]]),
                          unique=True, max_size=5))
    files: dict[str, bytes | None] = {}
    for name in names:
        if any(other.startswith(name + "/") for other in names) or name == "out":
            files[name] = None
        else:
            files[name] = draw(st.binary(min_size=0, max_size=8))
    return kind, target, draw(st.booleans()), draw(st.booleans()), files


@pytest.mark.slow
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                  HealthCheck.too_slow])
@given(layout=layouts())
def test_never_deletes_or_changes_a_file_it_did_not_create(
        layout: tuple[str, str, bool, bool, dict[str, bytes | None]],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    kind, target, force, earlier_run, files = layout
    root = tmp_path_factory.mktemp("property")
    sources = make_sources(root)
    work = root / "work"
    work.mkdir()
    if earlier_run:
        run_cli(*command(kind, sources, target), cwd=work)
    created: set[Path] = set()
    for name, content in files.items():
        path = work / name
        if path.exists() or any(p.exists() and not p.is_dir() for p in path.parents):
            continue  # the earlier run owns it (or a file stands where a directory would)
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        created.add(path)
    if kind == "quantize" and force:  # --force: the user asks to replace what -o names
        named = work / target
        created -= {named, named.with_name(named.stem + ".npz"),
                    named.with_name(named.name + ".json")}
    before = snapshot(root)
    theirs = {name: content for name, content in before.items()
              if not name.startswith("work/") or root / name in created}
    args = [*command(kind, sources, target), *(["--force"] if force else [])]
    run_cli(*args, cwd=work)
    after = snapshot(root)
    for name, content in theirs.items():
        assert after.get(name) == content, (name, args)


# -- output that does not depend on where it is written ------------------------------------------


def test_outdir_bytes_do_not_depend_on_its_path_or_the_working_directory(
        tmp_path: Path) -> None:
    """`examples/small_cnn.gs` compiled into directories at different depths, from different
    working directories and by relative and absolute paths: the same bytes in every file,
    glensidec-manifest.json and program.gs included (issue 27: program.gs pointed its
    weights back at the program by a path relative to OUTDIR)."""
    (tmp_path / "work" / "deeper").mkdir(parents=True)
    program = EXAMPLES / "small_cnn.gs"
    relative = os.path.relpath(program, tmp_path / "work" / "deeper")
    runs = [(tmp_path, program, "a"),
            (tmp_path / "work", program, "x/y/z"),
            (tmp_path / "work" / "deeper", relative, str(tmp_path / "b"))]
    outputs = []
    for cwd, source, outdir in runs:
        assert run_cli("compile", source, "--array", "16x16", "-o", outdir, cwd=cwd) == 0
        outputs.append(snapshot(cwd / outdir))
    assert outputs[0] == outputs[1] == outputs[2]
    assert {"program.gs", "program.npz", MANIFEST} <= set(outputs[0])
    assert str(tmp_path) not in str(outputs[0])  # no path of ours in any file


def test_outdir_bytes_do_not_depend_on_the_python_that_compiled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled by the Pythons of two different venvs into two directories: the same bytes
    (issue 27: the Makefile's `PYTHON ?=` was the compiling venv's absolute path)."""
    outputs = []
    for python, outdir in ((tmp_path / "venv-a" / "bin" / "python3", tmp_path / "a"),
                           (tmp_path / "elsewhere" / "venv-b" / "bin" / "python",
                            tmp_path / "x" / "y" / "b")):
        monkeypatch.setattr(sys, "executable", str(python))
        assert run_cli("compile", EXAMPLES / "small_cnn.gs", "--array", "8x8", "-o", outdir,
                       cwd=tmp_path) == 0
        outputs.append(snapshot(outdir))
    assert outputs[0] == outputs[1]
    text = b"".join(content for content in outputs[0].values() if isinstance(content, bytes))
    assert b"venv-a" not in text and str(tmp_path).encode() not in text
    assert b"PYTHON ?= python3\n" in outputs[0]["Makefile"]  # type: ignore[operator]


@pytest.mark.slow
def test_a_moved_outdir_still_diffs(tmp_path: Path) -> None:
    """OUTDIR holds everything `glensidec diff` reads: moved away from a program that is
    gone, it still runs the interpreter on the compiled program and its own weights."""
    (tmp_path / "src").mkdir()
    for name in ("small_cnn.gs", "small_cnn.npz"):
        (tmp_path / "src" / name).write_bytes((EXAMPLES / name).read_bytes())
    assert run_cli("compile", tmp_path / "src" / "small_cnn.gs", "--array", "8x8", "-o",
                   tmp_path / "out", cwd=tmp_path) == 0
    for path in (tmp_path / "src").iterdir():
        path.unlink()
    (tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    moved = tmp_path / "elsewhere" / "deeper" / "moved"
    (tmp_path / "out").rename(moved)
    image = np.random.default_rng(4).integers(-128, 128, (1, 1, 16, 16)).astype(np.int8)
    np.save(tmp_path / "image.npy", image)
    done = subprocess.run([sys.executable, "-m", "glensidec", "diff", str(moved),
                           f"image={tmp_path / 'image.npy'}"], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path / "elsewhere")
    assert done.returncode == 0, done.stderr
    assert "instructions agree: interpreter, C program" in done.stdout
