"""The differential fuzzer's runner: a generated program (glensidec.lang.generate) run three
ways — the reference interpreter, the generated C program and, when asked, its RTL
co-simulation — and the results compared; a failure shrunk to a small program.

Integers must agree bit for bit; f32 results within the tolerance of translation
validation (`opt.extract.difference`: 1e-5 relative to the largest |value|, docs/rewriting.md).
Each program is compiled for the array it was written for, with `--accel` when it holds an
accelerator construct or, for int8 products, on every other program; an f32 program's
products go to the binary32 array (`RxC:f32`) on every other program.

A C build compiles only model.c and main.c for each program: the run-time sources, the
same text for every program of one array, are compiled once into objects kept in the work
folder by their content's hash, with the flags of OUTDIR's Makefile at -O0.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.lang.constructs import Group
from glensidec.lang.data import save_npy
from glensidec.lang.dtypes import Array
from glensidec.lang.generate import Generated, with_root
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, Symbol, TensorDecl, Term, is_matmul, postorder
from glensidec.lang.typecheck import AccessType, check_program
from glensidec.opt.extract import difference

# What a run can end in, worst first; AGREE is success.
DISAGREE, CRASH, COMPILE_ERROR, AGREE = "disagreement", "crash", "compile error", "agree"


@dataclass(frozen=True)
class Mode:
    """How a program is compiled: the --array option and --accel."""

    array: str
    accel: bool

    def options(self) -> list[str]:
        return ["--array", self.array, *(["--accel"] if self.accel else [])]


@dataclass(frozen=True)
class Outcome:
    status: str  # AGREE, DISAGREE, CRASH or COMPILE_ERROR
    stage: str  # where it happened: "interpreter", "compile", "gcc", "C run", "C", "RTL"
    detail: str  # the message, or what differs
    mode: Mode

    def same_failure(self, other: Outcome) -> bool:
        """The same kind of failure at the same stage (what shrinking keeps)."""
        return (self.status, self.stage) == (other.status, other.stage)


@dataclass
class Runner:
    """Runs programs in `workdir` (one folder per program, removed when it agrees)."""

    workdir: Path
    rtl: bool = False
    sim_cache: Path | None = None
    keep: bool = False
    objects: Path = field(init=False)

    def __post_init__(self) -> None:
        self.objects = self.workdir / "objects"
        self.objects.mkdir(parents=True, exist_ok=True)


def choose_mode(generated: Generated) -> Mode:
    """The compile options a program is run under (see the module docstring)."""
    rows, cols = generated.array
    size = f"{rows}x{cols}"
    terms = postorder(generated.program.root)
    if generated.needs_accel():
        return Mode(size, True)
    types = check_program(generated.program)
    product_dtypes = {_operand_dtype(term, types) for term in terms
                      if is_matmul(term) or term.op in Group.HARDWARE or term.op in Group.EXPANDED}
    product_dtypes.discard(None)
    if product_dtypes == {"f32"} and generated.index % 2:
        return Mode(f"{size}:f32", False)
    if "i8" in product_dtypes and "f32" not in product_dtypes and generated.index % 2:
        return Mode(size, True)
    return Mode(size, False)


def _operand_dtype(term: Term, types: dict[Term, Any]) -> str | None:
    for child in term.children():
        found = types.get(child)
        if isinstance(found, AccessType):
            return found.dtype
    return None


def write_case(generated: Generated, folder: Path, mode: Mode) -> Path:
    """The program as a ready-to-run folder: program.gs (its first lines say how to run
    it), weights.npz, and one .npy per input."""
    folder.mkdir(parents=True, exist_ok=True)
    if generated.weights:
        savez: Any = np.savez  # numpy's stubs take no array names as keywords
        savez(folder / "weights.npz", **generated.weights)
    for name, array in generated.inputs.items():
        save_npy(folder / f"{_file_name(name)}.npy", array)
    inputs = " ".join(f"{name}={_file_name(name)}.npy" for name in generated.inputs)
    header = (f"; generated program {generated.seed}:{generated.index}; run it three ways:\n"
              f";   glensidec run program.gs "
              + " ".join(f"--input {name}={_file_name(name)}.npy" for name in generated.inputs)
              + f"\n;   glensidec compile program.gs {' '.join(mode.options())} -o out"
              f" && make -C out && out/model {inputs} -o c.npy\n"
              f";   make -C out sim INPUTS=\"{inputs}\" OUTPUT=sim.npy\n")
    path = folder / "program.gs"
    path.write_text(header + format_program(generated.program))
    return path


def _file_name(name: str) -> str:
    """A file name for an input whatever its (hostile) name: `a.b`, `x-1`, `_`."""
    return "input_" + re.sub(r"[^A-Za-z0-9_]", "_", name) + "_" + hashlib.sha1(
        name.encode()).hexdigest()[:6]


def _loaded(generated: Generated, path: Path) -> Program:
    """The program as written to `path` (weights read from its folder)."""
    return replace(generated.program, path=str(path))


def run(runner: Runner, generated: Generated, mode: Mode | None = None) -> Outcome:
    """Run `generated` three ways under `mode` (default: choose_mode) and compare."""
    mode = mode or choose_mode(generated)
    folder = runner.workdir / f"case-{generated.seed}-{generated.index}"
    shutil.rmtree(folder, ignore_errors=True)
    try:
        outcome = _run(runner, generated, mode, folder)
    except Exception:  # a crash of the fuzzer's own machinery is a crash too
        outcome = Outcome(CRASH, "runner", traceback.format_exc(limit=-3), mode)
    if outcome.status == AGREE and not runner.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return outcome


def _run(runner: Runner, generated: Generated, mode: Mode, folder: Path) -> Outcome:
    path = write_case(generated, folder, mode)
    program = _loaded(generated, path)
    tensors = {**generated.weights, **generated.inputs}
    try:
        expected = run_program(program, tensors)
    except Exception:
        return Outcome(CRASH, "interpreter", traceback.format_exc(limit=-3), mode)
    compiled = _compile(program, mode, folder / "out")
    if compiled is not None:
        return compiled
    built = _build(runner, folder / "out")
    if built is not None:
        return Outcome(COMPILE_ERROR, "gcc", built, mode)
    arguments = [f"{name}={folder / (_file_name(name) + '.npy')}" for name in generated.inputs]
    ran = subprocess.run([str(folder / "out" / "model"), *arguments, "-o",
                          str(folder / "c.npy")], capture_output=True, text=True, timeout=120,
                         check=False)
    if ran.returncode != 0:
        return Outcome(CRASH, "C run", (ran.stderr or ran.stdout)[-2000:], mode)
    problem = _differs(expected, np.load(folder / "c.npy"))
    if problem:
        return Outcome(DISAGREE, "C", f"interpreter vs C: {problem}", mode)
    if runner.rtl:
        return _cosimulate(runner, folder, arguments, expected, mode)
    return Outcome(AGREE, "", "", mode)


def _differs(expected: Array, actual: Array) -> str | None:
    """Why two results differ (integers bit for bit, f32 within the tolerance), or None."""
    return difference(expected, actual)


def _compile(program: Program, mode: Mode, outdir: Path) -> Outcome | None:
    """`glensidec compile PROGRAM --array … [--accel] -o OUTDIR`, in this process (the
    Python API): None when it wrote OUTDIR."""
    import glensidec

    try:
        glensidec.compile(program, mode.array, outdir, accel=mode.accel)
    except GlensideError as error:
        return Outcome(COMPILE_ERROR, "compile", str(error), mode)
    except Exception:
        return Outcome(CRASH, "compile", traceback.format_exc(limit=-4), mode)
    return None


_WARNINGS = re.compile(r"^WARNINGS = (.*)$", re.MULTILINE)
_SOURCES = re.compile(r"^SOURCES = (.*)$", re.MULTILINE)
# Sources that differ per program; the others are the run-time, shared by many programs.
_PER_PROGRAM = ("main.c", "model.c")


def _build(runner: Runner, outdir: Path) -> str | None:
    """Build OUTDIR/model as its Makefile does at -O0, the shared run-time objects from
    the cache; gcc's messages when it fails."""
    makefile = (outdir / "Makefile").read_text()
    warnings, sources = _WARNINGS.search(makefile), _SOURCES.search(makefile)
    assert warnings is not None and sources is not None, "OUTDIR/Makefile changed its form"
    flags = [*warnings.group(1).split(), "-O0"]
    objects = []
    for source in sources.group(1).split():
        text = (outdir / source).read_bytes()
        if source in _PER_PROGRAM:
            objects.append(str(outdir / source))
            continue
        headers = b"".join((outdir / h).read_bytes() for h in sorted(os.listdir(outdir))
                           if h.endswith(".h") and h != "model.h")
        key = hashlib.sha256(text + headers + " ".join(flags).encode()).hexdigest()[:20]
        cached = runner.objects / f"{Path(source).stem}-{key}.o"
        if not cached.exists():
            done = _gcc([*flags, "-c", str(outdir / source), "-o", f"{cached}.tmp"], outdir)
            if done is not None:
                return done
            os.replace(f"{cached}.tmp", cached)
        objects.append(str(cached))
    return _gcc([*flags, "-o", str(outdir / "model"), *objects, "-lm"], outdir)


def _gcc(arguments: list[str], outdir: Path) -> str | None:
    done = subprocess.run(["gcc", *arguments], capture_output=True, text=True, cwd=outdir,
                          timeout=300, check=False)
    return None if done.returncode == 0 else done.stderr[-3000:]


def _cosimulate(runner: Runner, folder: Path, arguments: list[str], expected: Array,
                mode: Mode) -> Outcome:
    """`make -C OUTDIR sim`: every array call (or accelerator layer) on the RTL, cycles
    and data checked by the co-simulation itself, its result against the interpreter."""
    env = dict(os.environ)
    if runner.sim_cache is not None:
        env["GLENSIDEC_SIM_CACHE"] = str(runner.sim_cache)
    env["GLENSIDEC_PROGRESS"] = "0"
    done = subprocess.run(["make", "-s", "-C", str(folder / "out"), "sim", "OPT=-O0",
                           f"PYTHON={sys.executable}",  # the fuzzer's own: it has glensidec
                           f"INPUTS={' '.join(arguments)}", f"OUTPUT={folder / 'sim.npy'}"],
                          capture_output=True, text=True, timeout=1800, env=env, check=False)
    if done.returncode != 0:
        return Outcome(CRASH, "RTL", (done.stdout[-1500:] + done.stderr[-1500:]), mode)
    problem = _differs(expected, np.load(folder / "sim.npy"))
    if problem:
        return Outcome(DISAGREE, "RTL", f"interpreter vs RTL: {problem}", mode)
    return Outcome(AGREE, "", "", mode)


# -- shrinking --------------------------------------------------------------------------


def shrink(generated: Generated, failure: Outcome, check: Callable[[Generated], Outcome],
           budget: int = 150) -> tuple[Generated, Outcome]:
    """A smaller program that `check` finds failing the same way (`Outcome.same_failure`):
    the result replaced by one of its operands, subterms by new inputs holding the values
    they computed, tensors' dims cut down. Greedy (the smallest candidate that still fails
    is taken, then its own candidates tried), at most `budget` checks."""
    current, outcome, tries = generated, failure, 0
    improved = True
    while improved and tries < budget:
        improved = False
        for candidate in _candidates(current):
            if tries >= budget:
                break
            tries += 1
            result = check(candidate)
            if result.same_failure(failure):
                current, outcome, improved = candidate, result, True
                break
    return current, outcome


def shrink_run(runner: Runner, generated: Generated, failure: Outcome,
               budget: int = 150) -> tuple[Generated, Outcome]:
    """`shrink` by running each candidate three ways under the failure's mode."""
    return shrink(generated, failure, lambda candidate: run(runner, candidate, failure.mode),
                  budget)


def _size(generated: Generated) -> int:
    return len(postorder(generated.program.root))


def _candidates(generated: Generated) -> list[Generated]:
    """Smaller well-typed variants of `generated`, most promising first."""
    found: list[Generated] = []
    root = generated.program.root
    types = check_program(generated.program)
    # The result replaced by one of its operands (an access).
    for term in postorder(root):
        if term is not root and isinstance(types.get(term), AccessType) \
                and term.op not in ("access-tensor",):
            found.append(with_root(generated, term))
    # A subterm replaced by a new input holding what it computed (its type unchanged, so
    # every parent stays well-typed).
    for term in postorder(root):
        access = types.get(term)
        if not isinstance(access, AccessType) or term.op == "access-tensor" \
                or term is root:
            continue
        replaced = _as_input(generated, term, access)
        if replaced is not None:
            found.append(replaced)
    found.extend(_smaller_dims(generated))
    return sorted((c for c in found if _well_typed(c)), key=_size)


def _as_input(generated: Generated, term: Term, access: AccessType) -> Generated | None:
    try:
        value = run_program(replace(generated.program, root=term),
                            {**generated.weights, **generated.inputs})
    except Exception:
        return None
    name = "shrunk"
    while name in generated.program.tensors:
        name += "_"
    decl = TensorDecl(name, access.full, access.dtype, "input")
    leaf = Term("access-tensor", (Symbol(name),))
    if len(access.shape) != len(access.full):
        leaf = Term("access", (leaf, len(access.shape)))
    if not access.full:
        return None  # a scalar cannot be declared
    root = _replace(generated.program.root, term, leaf)
    tensors = {**generated.program.tensors, name: decl}
    return with_root(generated, root, tensors, {name: np.asarray(value)})


def _replace(root: Term, old: Term, new: Term) -> Term:
    done: dict[Term, Term] = {}
    for term in postorder(root):
        if term == old:
            done[term] = new
            continue
        args = tuple(done.get(arg, arg) if isinstance(arg, Term) else arg for arg in term.args)
        done[term] = Term(term.op, args) if args != term.args else term
    return done[root]


def _smaller_dims(generated: Generated) -> list[Generated]:
    """Each tensor with one dim halved or cut to 1, its data sliced to match."""
    found = []
    data = {**generated.weights, **generated.inputs}
    for name, decl in generated.program.tensors.items():
        for axis, dim in enumerate(decl.shape):
            for smaller in sorted({1, dim // 2} - {0, dim}):
                shape = decl.shape[:axis] + (smaller,) + decl.shape[axis + 1:]
                tensors = {**generated.program.tensors, name: replace(decl, shape=shape)}
                sliced = np.take(data[name], range(smaller), axis=axis)
                found.append(with_root(generated, generated.program.root, tensors,
                                       {name: sliced}))
    return found


def _well_typed(generated: Generated) -> bool:
    try:
        check_program(generated.program)
    except GlensideError:
        return False
    return True
