"""The differential fuzzer (glensidec/lang/generate.py, glensidec/cosim/fuzz.py): generated
programs are well-typed and reproducible, hold every construct, and run alike in the
interpreter, the generated C and (a handful) the RTL. bench/bench_fuzz.py runs 10,000.

The programs are fixed (seed CI_SEED, indices 0…), so a landing does not depend on luck;
a failure prints the shrunk program, ready to run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from glensidec.cosim.fuzz import (
    AGREE,
    CRASH,
    Mode,
    Outcome,
    Runner,
    choose_mode,
    run,
    shrink,
    shrink_run,
    write_case,
)
from glensidec.lang import data
from glensidec.lang.constructs import COMPUTE_TYPES, CONSTRUCTS, Group
from glensidec.lang.generate import (
    HOSTILE_NAMES,
    Generated,
    Options,
    generate,
    legal_names,
)
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import parse_program, read_program
from glensidec.lang.terms import is_matmul, postorder
from glensidec.lang.typecheck import check_program

CI_SEED = 27
C_PROGRAMS = 240  # through interpreter and C, in CHUNKS pieces (pytest-xdist spreads them)
CHUNKS = 8


def test_generated_programs_are_well_typed_reproducible_and_run() -> None:
    for index in range(150):
        generated = generate(CI_SEED, index)
        text = generated.text()
        assert generate(CI_SEED, index).text() == text  # from (seed, index) alone
        parsed = parse_program(text, "<generated>")
        assert parsed.root == generated.program.root
        check_program(parsed)
        result = run_program(generated.program, {**generated.weights, **generated.inputs})
        assert result.size >= 1


def test_a_few_hundred_programs_hold_every_construct_and_compute_type() -> None:
    uses: Counter[str] = Counter()
    for index in range(400):
        uses.update(set(generate(CI_SEED, index).uses()))
    missing = [name for name in [*CONSTRUCTS, *COMPUTE_TYPES] if uses[name] == 0]
    assert missing == []


def test_hostile_names_are_the_ones_the_language_accepts() -> None:
    accepted = legal_names(True)
    assert set(accepted) <= set(HOSTILE_NAMES)
    assert {"int", "main", "argc", "p0", "p1", "printf"} <= set(accepted)
    hostile = generate(CI_SEED, 3, Options(hostile_names=True))
    assert {decl.name for decl in hostile.program.tensors.values()} <= set(accepted)


def _holding(name: str) -> tuple[Generated, Outcome]:
    """The first generated program that holds construct `name`, as a made-up failure."""
    for index in range(400):
        generated = generate(CI_SEED, index)
        if name in generated.uses():
            return generated, Outcome(CRASH, "C", name, Mode("2x2", False))
    raise AssertionError(f"no program holds {name}")


def test_shrinking_keeps_the_failure_and_leaves_little_else() -> None:
    """With a made-up failure (any program holding access-pad 'fails'), shrinking ends at
    a program that still holds it and little besides: the pad of an input."""
    generated, failure = _holding("access-pad")

    def check(candidate: Generated) -> Outcome:
        failing = "access-pad" in candidate.uses()
        return Outcome(CRASH if failing else AGREE, "C" if failing else "", "", failure.mode)

    small, outcome = shrink(generated, failure, check)
    assert outcome.same_failure(failure)
    assert "access-pad" in small.uses()
    assert len(postorder(small.program.root)) <= 3
    assert len(postorder(small.program.root)) < len(postorder(generated.program.root)) or \
        len(postorder(generated.program.root)) <= 3
    check_program(small.program)


def test_a_written_case_runs_from_its_own_folder(tmp_path: Path) -> None:
    """`write_case` gives a folder a user can run: program.gs reads its weights from
    weights.npz beside it, and the .npy files its header names are the inputs."""
    generated = next(g for g in (generate(CI_SEED, i) for i in range(50))
                     if g.weights and g.inputs)
    path = write_case(generated, tmp_path / "case", choose_mode(generated))
    program = read_program(path)
    header = [line for line in path.read_text().splitlines() if line.startswith(";")]
    assert any("glensidec compile program.gs --array" in line for line in header)
    inputs = {name: np.load(path.parent / file) for name, file in
              (word.split("=") for word in header[1].split()[5::2])}
    result = run_program(program, data.all_tensors(program, inputs))
    expected = run_program(generated.program, {**generated.weights, **generated.inputs})
    assert result.dtype == expected.dtype and np.array_equal(result, expected, equal_nan=True)


def _outcomes(workdir: Path, indices: range) -> list[tuple[int, Outcome, str]]:
    runner = Runner(workdir)
    found = []
    for index in indices:
        generated = generate(CI_SEED, index)
        outcome = run(runner, generated)
        if outcome.status != AGREE:
            small, last = shrink_run(runner, generated, outcome, budget=40)
            found.append((index, outcome, f"{last.mode.options()}\n{small.text()}"))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_generated_programs_agree_in_the_interpreter_and_c(chunk: int, tmp_path: Path) -> None:
    size = C_PROGRAMS // CHUNKS
    failures = _outcomes(tmp_path, range(chunk * size, (chunk + 1) * size))
    assert failures == [], "\n\n".join(
        f"program {CI_SEED}:{index}: {outcome.status} at {outcome.stage}: "
        f"{outcome.detail[-600:]}\nshrunk ({program})" for index, outcome, program in failures)


# Programs for the 2x2 array, one per flavour: int8 products on the bare array, the
# whole accelerator (--accel), the f32 array; found by CI_SEED's sequence.
def _rtl_programs() -> list[int]:
    wanted = {Mode("2x2", False): None, Mode("2x2", True): None, Mode("2x2:f32", False): None}
    for index in range(2000):
        generated = generate(CI_SEED, index)
        mode = choose_mode(generated)
        products = any(is_matmul(term) or term.op in Group.HARDWARE
                       for term in postorder(generated.program.root))
        if mode in wanted and wanted[mode] is None and products:
            wanted[mode] = index
        if all(index is not None for index in wanted.values()):
            break
    return [index for index in wanted.values() if index is not None]


@pytest.mark.slow
@pytest.mark.rtl
def test_a_handful_of_generated_programs_agree_on_the_rtl(tmp_path: Path,
                                                          sim_cache: Path) -> None:
    indices = _rtl_programs()
    assert len(indices) == 3
    runner = Runner(tmp_path, rtl=True, sim_cache=sim_cache)
    for index in indices:
        outcome = run(runner, generate(CI_SEED, index))
        assert outcome.status == AGREE, (index, outcome)
