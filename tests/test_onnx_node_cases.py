"""ONNX's own backend node tests, for every op the importer lists as supported.

The `onnx` package ships the cases (`onnx.backend.test.case.node`: a one-node model, its
inputs and the expected outputs). Every case whose ops are all in the importer's table must
either give the expected outputs in the reference interpreter, or be rejected with a
GlensideError whose reason `docs/import.md` documents. A wrong answer, or any other
exception, fails.

`python tests/test_onnx_node_cases.py` prints the tally (passed / rejected / wrong) and each
rejection's reason.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import pkgutil
import re
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from glensidec.errors import GlensideError
from glensidec.frontends.importer import TRANSLATORS, build_program, onnx_input_names
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.interp import run_program
from glensidec.lang.terms import Program, postorder
from glensidec.pipeline import compile_program, is_product

Array = np.ndarray[Any, Any]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "import.md"

# Ops the importer handles without a translator of their own.
SUPPORTED_OPS = set(TRANSLATORS) | {"Constant"}

# Every rejection's message contains one of these phrases, and docs/import.md quotes each
# under "Rejected node tests" with its reason, so a user can read why a model does not import.
DOCUMENTED_REASONS = {
    "non-float input": ("only float inputs",),
    "dynamic shape": ("has a dynamic shape",),
    "several outputs": ("outputs; a program has one",),
    "nothing computed": ("is not computed from an input",),
    "unsupported attribute value": ("is not supported", "are not supported"),
    "constant operand required": ("must be a constant",),
    "empty tensor": ("empty tensor",),
    "unsupported rank": ("only 2-D", "only a 2-D", "must be at least 2-D", "only 1-D, 2-D and 3-D"),
}


@dataclass
class Case:
    name: str
    model: Any
    inputs: list[Array]
    outputs: list[Array]
    rtol: float
    atol: float


def case_modules() -> list[str]:
    """The modules of onnx.backend.test.case.node named after a supported op.

    Each module's cases are made when it is imported, so importing only these (instead of
    all ~190) keeps collection to a few seconds; cases of other modules use other ops.
    """
    import onnx.backend.test.case.node as cases

    available = {module.name for module in pkgutil.iter_modules(cases.__path__)}
    wanted = set()
    for op in SUPPORTED_OPS:
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()
        wanted |= {op.lower(), snake} & available
    return sorted(wanted)


@cache
def node_cases() -> dict[str, Case]:
    """The ONNX node cases whose ops are all supported, by name (collected once)."""
    import onnx.backend.test.case.node as cases

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for module in case_modules():
            importlib.import_module(f"{cases.__name__}.{module}")
    selected = {}
    for case in cases._NodeTestCases:
        ops = {node.op_type for node in case.model.graph.node}
        if not ops <= SUPPORTED_OPS or not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        selected[case.name] = Case(case.name, case.model, [np.asarray(i) for i in inputs],
                                   [np.asarray(o) for o in outputs], case.rtol, case.atol)
    return dict(sorted(selected.items()))


@dataclass
class Outcome:
    verdict: str  # "passed", "rejected" or "wrong"
    detail: str
    as_initializers: tuple[str, ...] = ()  # inputs that were given as constants


# A node test passes its parameters (shapes, axes, pads, weights, bounds) as graph inputs;
# exported models hold them as initializers, which is what the importer needs. When an
# import is refused for that reason alone, the case runs again with those inputs made
# initializers (same values, same expected outputs); the tally counts these separately.
PARAMETER_REFUSALS = (r"input \d+ \('([^']+)'\) must be a constant",
                      r"input '([^']+)' is (?:INT64|INT32|BOOL): only float inputs",
                      # an int64 parameter is an i32 input now (token ids are int64)
                      r"input '([^']+)' is i(?:8|16|32): only float inputs",
                      r"input '([^']+)' has dim \d+ = 0: an empty tensor")


def parameter_input(case: Case, message: str) -> str | None:
    """The graph input a refusal asks to be a constant, if it is one of the parameters."""
    data = case.model.graph.node[0].input  # the data the node works on stays an input
    first = data[0] if data else None
    for pattern in PARAMETER_REFUSALS:
        found = re.search(pattern, message)
        if found and found.group(1) != first:
            return found.group(1)
    return None


def with_initializer(case: Case, name: str) -> Case:
    from onnx import numpy_helper

    model = copy.deepcopy(case.model)
    position = [v.name for v in model.graph.input].index(name)
    model.graph.initializer.append(numpy_helper.from_array(case.inputs[position], name))
    del model.graph.input[position]
    inputs = case.inputs[:position] + case.inputs[position + 1:]
    return Case(case.name, model, inputs, case.outputs, case.rtol, case.atol)


def run_case(case: Case, as_initializers: tuple[str, ...] = ()) -> Outcome:
    """Import the case's model and run it in the interpreter; compare with the expected."""
    try:
        program, weights = build_program(case.model, "case.npz", "case.gs")
    except GlensideError as error:
        parameter = parameter_input(case, str(error))
        if parameter is not None:
            return run_case(with_initializer(case, parameter), (*as_initializers, parameter))
        return Outcome("rejected", str(error), as_initializers)
    names = onnx_input_names(case.model)
    given = [v.name for v in case.model.graph.input]
    tensors = {**weights, **{names[n]: a for n, a in zip(given, case.inputs, strict=True)}}
    actual = run_program(program, tensors)
    expected = case.outputs[0]
    if actual.shape != expected.shape:
        return Outcome("wrong", f"shape {actual.shape}, expected {expected.shape}",
                       as_initializers)
    if not np.allclose(actual, expected, rtol=case.rtol, atol=case.atol):
        error = float(np.max(np.abs(actual.astype(np.float64) - expected)))
        return Outcome("wrong", f"max |error| {error:.3g}", as_initializers)
    reference = onnxruntime_output(case)
    if (reference is not None and reference.shape == expected.shape
            and np.allclose(reference, expected, rtol=case.rtol, atol=case.atol)
            and not np.allclose(actual, reference, rtol=1e-5, atol=1e-6)):
        error = float(np.max(np.abs(actual.astype(np.float64) - reference)))
        return Outcome("wrong", f"max |error| {error:.3g} from onnxruntime", as_initializers)
    return Outcome("passed", "", as_initializers)


def onnxruntime_output(case: Case) -> Array | None:
    """onnxruntime's output for the case (None without onnxruntime).

    The cases' own expected outputs are sometimes written out by hand to four digits
    (test_averagepool_2d_ceil_last_window_starts_on_pad expects 0.1511 for the mean
    1.3595 / 9 = 0.151056), so the case's tolerance is its rtol of 1e-3; against
    onnxruntime the result must agree to float32 rounding (rtol 1e-5) — where onnxruntime
    itself gives the case's expected output (it does not for
    test_resize_downsample_scales_linear_align_corners, whose one-row output ONNX's
    reference takes at row 0)."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(case.model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    feeds = {v.name: a for v, a in zip(case.model.graph.input, case.inputs, strict=True)}
    return np.asarray(session.run(None, feeds)[0])


def product_cases() -> list[str]:
    """The cases that import to a program with a matrix product (MatMul, Gemm, Conv)."""
    return [name for name in node_cases() if (imported := imported_case(name)) is not None
            and any(is_product(term) for term in postorder(imported[0].root))]


@cache
def imported_case(name: str) -> tuple[Program, dict[str, Array]] | None:
    return _imported(node_cases()[name])


def _imported(case: Case) -> tuple[Program, dict[str, Array]] | None:
    """The case's program and its tensors (parameters as initializers where the importer
    asks), or None when the importer rejects it."""
    try:
        program, weights = build_program(case.model, "case.npz", "case.gs")
    except GlensideError as error:
        parameter = parameter_input(case, str(error))
        return _imported(with_initializer(case, parameter)) if parameter else None
    names = onnx_input_names(case.model)
    given = [v.name for v in case.model.graph.input]
    return program, {**weights, **{names[n]: a for n, a in zip(given, case.inputs, strict=True)}}


def documented_reason(message: str) -> str | None:
    return next((key for key, phrases in DOCUMENTED_REASONS.items()
                 if any(phrase in message for phrase in phrases)), None)


@pytest.mark.parametrize("name", sorted(node_cases()))
def test_node_case_passes_or_is_rejected_with_a_documented_reason(name: str) -> None:
    outcome = run_case(node_cases()[name])
    assert outcome.verdict != "wrong", outcome.detail
    if outcome.verdict == "rejected":
        assert documented_reason(outcome.detail) is not None, outcome.detail


@pytest.mark.parametrize("name", product_cases())
def test_node_case_with_a_product_compiles_to_the_same_result(name: str) -> None:
    """Each case with a product compiles for a binary32 array (test_matmul_bcast's six
    batch regions once failed: issue 27) and the compiled program computes the case's."""
    imported = imported_case(name)
    assert imported is not None
    program, tensors = imported
    compiled = compile_program(program, ArrayConfig.f32(4, 4))
    expected = run_program(program, tensors)
    assert np.allclose(run_program(compiled.program, tensors), expected, rtol=1e-5, atol=1e-6)


def test_documented_reasons_are_in_the_docs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Rejected node tests"):]
    for key, phrases in DOCUMENTED_REASONS.items():
        assert f"**{key}**" in section, key
        for phrase in phrases:
            assert f"`{phrase}`" in section, phrase


def main() -> None:
    tally: dict[str, int] = {}
    for name, case in node_cases().items():
        outcome = run_case(case)
        verdict = outcome.verdict + (" (parameters as initializers)"
                                     if outcome.as_initializers else " (as given)")
        tally[verdict] = tally.get(verdict, 0) + 1
        if outcome.verdict != "passed":
            reason = documented_reason(outcome.detail) if outcome.verdict == "rejected" else ""
            print(f"{outcome.verdict:8} {name}: [{reason}] {outcome.detail}")
    print(f"{len(node_cases())} cases: " + ", ".join(f"{n} {v}" for v, n in sorted(tally.items())))


if __name__ == "__main__":
    main()
