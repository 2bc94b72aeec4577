"""Glenside's own test suite, run through glensidec's command line.

Run: `.venv/bin/python bench/bench_glenside_suite.py GLENSIDE_DIR` with a checkout of
https://github.com/gussmith23/glenside (commit PINNED below; or set GLENSIDE_DIR; writes
bench/results/glenside_suite.md; without a checkout it says so and exits 0). Nothing of
Glenside is copied into this repository (it carries no licence file): every program is
read from the checkout when the bench runs.

Every `#[test]` of Glenside's `src/` unit tests and `tests/*.rs` is read; each program it
writes as a string (an s-expression, not a rewrite pattern with `?x` variables, not a
`format!` template) is one case, with the tensors the test gives it: the interpreter
tests' environments (`vec![("t", array![…])]`, their values), `map.insert("t", vec![…])`
shapes and `name_to_dtype`, the analysis's built-in names (`t-3-32-32`, …), and the `.npy`
files a test loads from the checkout. Each case runs as `glensidec check PROG --shapes
J` and `glensidec run PROG --shapes J --input …` (random inputs where the test gives only
shapes), in this process. A case passes when

- the test expects success (no `#[should_panic]`): both commands exit 0, and where the
  test states them, the result's value (`assert_eq!(tensor, array![…])`, to 1e-5 for
  floats), access axis and access shape (`a.shape`, `a.item_shape`) are the original's;
- the test expects a panic: some program of the test is refused with a one-line error and
  none crashes.

A case that fails is listed with its cause and counted as a deliberate deviation when
docs/language.md ("Differences from the original") gives it (see DEVIATIONS).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from glensidec.cli import main as cli_main  # noqa: E402

RESULTS = REPO / "bench" / "results" / "glenside_suite.md"
PINNED = "f8e341ed9fedb6be149694e3a7ab7e6cf542fd2e"  # the commit the committed table ran on
SOURCES = ("src/language/interpreter.rs", "src/language/language.rs", "src/codegen.rs",
           "src/language/rewrites.rs", "src/extraction/mod.rs", "src/extraction/ilp.rs",
           "src/hw_design_language.rs", "src/language/from_relay/mod.rs")

# Why a failing case is a deliberate deviation (docs/language.md, "Differences from the
# original"), by the first words of glensidec's message.
DEVIATIONS = {
    "alone is an argument, not a program result":
        "bare atoms as program results (a number or pad type is an argument only)",
    "of the original Glenside is not supported":
        "Relay operators, third-party accelerators, inline constants: not supported "
        "(ONNX models are imported instead)",
}
# (test, reason): the original's access-tensor is ((),(shape)) in its interpreter and
# ((shape),()) in its analysis; glensidec keeps the analysis's split.
SPLIT_DEVIATION = "access-tensor's split is the type analysis's ((shape),()), not the interpreter's"


@dataclass
class Tensor:
    shape: tuple[int, ...]
    dtype: str = "f32"
    value: np.ndarray[Any, Any] | None = None


@dataclass
class Case:
    source: str  # file in the checkout
    test: str  # the #[test] fn
    program: str
    panics: bool  # #[should_panic]
    tensors: dict[str, Tensor] = field(default_factory=dict)
    value: np.ndarray[Any, Any] | None = None  # the test's expected value
    axis: int | None = None  # its expected access axis
    split: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (a.shape, a.item_shape)
    result_shape: tuple[int, ...] | None = None  # its expected tensor.shape()
    shape_value: tuple[int, ...] | None = None  # a shape-valued result's expected dims
    absent: bool = False  # a rewrite's result the test asserts is NOT in the e-graph
    array: str | None = None  # the test builds a monolithic array of this size from it


@dataclass
class Outcome:
    case: Case
    status: str  # "pass", "fail", "deviation", "harness"
    detail: str = ""


# -- reading Rust ---------------------------------------------------------------------------


def _string_end(text: str, start: int) -> int:
    """The index after the string literal that starts at `start` (", r", r#")."""
    if text.startswith("r#", start) or text.startswith('r"', start):
        hashes = len(re.match(r"r(#*)", text[start:]).group(1))  # type: ignore[union-attr]
        close = '"' + "#" * hashes
        return text.index(close, start + 2 + hashes) + len(close)
    i = start + 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _strip_comments(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
        elif text[i] == '"' or (text[i] == "r" and re.match(r'r#*"', text[i:i + 4])
                                and not text[i - 1].isalnum() and text[i - 1] != "_"):
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
        elif text[i] == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):  # a char
            end = text.index("'", i + 2) + 1
            out.append(text[i:end])
            i = end
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _matching(text: str, start: int) -> int:
    """The index after the bracket that closes the one at `start` (strings skipped)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, i = [pairs[text[start]]], start + 1
    while stack:
        char = text[i]
        if char == '"':
            i = _string_end(text, i)
            continue
        if char in pairs:
            stack.append(pairs[char])
        elif char == stack[-1]:
            stack.pop()
        i += 1
    return i


def _literal(raw: str) -> str:
    if raw.startswith("r"):
        return raw[raw.index('"') + 1:raw.rindex('"')]
    return bytes(raw[1:-1], "utf-8").decode("unicode_escape")


def test_functions(text: str) -> list[tuple[str, str, bool, bool]]:
    """(name, body, should_panic, ignored) of every #[test] fn."""
    found = []
    for match in re.finditer(r"#\[test\]((?:\s*#\[[^\]]*(?:\][^\]]*)*?\])*)\s*fn\s+(\w+)\s*\(\)"
                             r"[^{]*\{", text):
        before = text[max(0, match.start() - 120):match.start()]
        panics = "should_panic" in match.group(1) or "should_panic" in before.split("}")[-1]
        ignored = "#[ignore" in match.group(1) or "#[ignore" in before.split("}")[-1]
        body_start = match.end() - 1
        found.append((match.group(2), text[body_start:_matching(text, body_start)],
                      panics, ignored))
    return found


def _rust_value(expr: str) -> np.ndarray[Any, Any] | None:
    """A Rust `array![…]` / `ndarray::arr0(…)` literal as numpy, or None."""
    expr = expr.strip().rstrip(",").strip()
    expr = re.sub(r"\s*\.(into_dyn|unwrap)\(\)", "", expr)
    ranged = re.fullmatch(r"(?:ndarray::)?ArrayD::from_shape_vec\(\s*vec!\[([^\]]*)\],\s*"
                          r"\(0\.\.([^)]*)\)\.collect\(\),?\s*\)", expr)
    if ranged:  # (0..N).collect() reshaped
        dims = [_arithmetic(d) for d in ranged.group(1).split(",") if d.strip()]
        return np.arange(_arithmetic(ranged.group(2)), dtype=np.int32).reshape(dims)
    expr = re.sub(r"(ndarray::)?arr0\(", "(", expr)
    expr = expr.replace("array!", "")
    floating = bool(re.search(r"\d\.|\df64|\df32|\d\.\d", expr))
    expr = re.sub(r"(\d)f(32|64)", r"\1", expr)
    expr = re.sub(r"(\d)\.(?!\d)", r"\1.0", expr)
    if not re.fullmatch(r"[\s\d\.\-\+\*/\(\)\[\],e]*", expr):
        return None
    try:
        value = eval(expr, {"__builtins__": {}})
    except SyntaxError:
        return None
    return np.array(value, np.float32 if floating else np.int32)


def _arithmetic(expr: str) -> int:
    if not re.fullmatch(r"[\d\s\*\+]+", expr):
        raise ValueError(expr)
    return int(eval(expr, {"__builtins__": {}}))


def _environment(segment: str) -> dict[str, Tensor]:
    """The interpreter test's `vec![("t", array![…].into_dyn()), …]`."""
    tensors = {}
    for match in re.finditer(r'\(\s*"([^"]+)"\s*,', segment):
        start = match.end()
        end = start
        depth = 0
        while end < len(segment):  # to the comma or paren that ends the value
            char = segment[end]
            if char in "([":
                depth += 1
            elif char in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif char == "," and depth == 0:
                break
            end += 1
        source = segment[start:end]
        value = _rust_value(source)
        zeros = re.search(r"zeros\(IxDyn\(&\[([\d,\s]+)\]\)\)", source)
        if value is not None:
            tensors[match.group(1)] = Tensor(value.shape, _dtype(value), value)
        elif zeros:
            shape = tuple(int(d) for d in zeros.group(1).split(",") if d.strip())
            tensors[match.group(1)] = Tensor(shape, "f32", np.zeros(shape, np.float32))
    return tensors


def _dtype(value: np.ndarray[Any, Any]) -> str:
    return "i32" if np.issubdtype(value.dtype, np.integer) else "f32"


def builtin_shapes(language_rs: str) -> dict[str, tuple[int, ...]]:
    """The analysis's built-in tensor names (`"t-3-32-32" => vec![3, 32, 32]`)."""
    return {name: tuple(int(d) for d in dims.split(",") if d.strip())
            for name, dims in re.findall(r'"([\w-]+)" => vec!\[([\d,\s]*)\]', language_rs)}


def _program_strings(body: str) -> list[tuple[int, str]]:
    """(position, text) of each string in `body` that is a concrete program."""
    found = []
    i = 0
    while i < len(body):
        if body[i] == '"' or (body[i] == "r" and re.match(r'r#*"', body[i:i + 4])
                              and not (body[i - 1].isalnum() or body[i - 1] == "_")):
            end = _string_end(body, i)
            text = _literal(body[i:end]).strip()
            if (text.startswith("(") and "?" not in text and "{" not in text
                    and text.count("(") == text.count(")") and " " in text):
                found.append((i, text))
            i = end
        else:
            i += 1
    return found


def _expectations(case: Case, after: str) -> None:
    """The asserts that follow a program (up to the next one) in its test."""
    shape = re.search(r"a\.shape,\s*IxDyn\(&\[([\d,\s]*)\]\)", after)
    item = re.search(r"a\.item_shape,\s*IxDyn\(&\[([\d,\s]*)\]\)", after)
    if shape and item:
        case.split = (tuple(int(d) for d in shape.group(1).split(",") if d.strip()),
                      tuple(int(d) for d in item.group(1).split(",") if d.strip()))
    axis = re.search(r"assert_eq!\(\s*(?:a\.)?access_axis\s*,\s*(\d+)\s*\)", after)
    result_shape = re.search(r"tensor\.shape\(\),\s*&?\[([\d,\s]*)\]", after)
    if result_shape:
        case.result_shape = tuple(int(d) for d in result_shape.group(1).split(",") if d.strip())
    shape_value = re.search(r"(?:assert_eq!\(\s*\w+\s*,|get_shape_of_value\(id, &egraph\),)"
                            r"\s*&?IxDyn\(&\[([\d,\s]*)\]\)", after)
    if shape_value:
        case.shape_value = tuple(int(d) for d in shape_value.group(1).split(",") if d.strip())
    case.absent = bool(re.match(r"\s*\.parse::<Pattern<Language>>\(\)\s*\.unwrap\(\);\s*"
                                r"let matches = test_pattern\.search_eclass\([^;]*\);\s*"
                                r"assert!\(matches\.is_none\(\)\)", after[after.index('"', 1) + 1:]
                                if '"' in after[1:] else ""))
    if axis:
        case.axis = int(axis.group(1))
    value = re.search(r"assert_eq!\(\s*(?:tensor|t)\s*,", after)
    if value:
        start = value.end()
        close = _matching(after, value.start() + len("assert_eq!"))
        case.value = _rust_value(after[start:close - 1])


def read_cases(checkout: Path) -> list[Case]:
    builtin = builtin_shapes((checkout / "src/language/language.rs").read_text())
    files = [checkout / name for name in SOURCES] + sorted((checkout / "tests").glob("*.rs"))
    cases = []
    for path in files:
        source = str(path.relative_to(checkout))
        text = _strip_comments(path.read_text())
        cases += _interpreter_cases(text, source) if source.endswith("interpreter.rs") else []
        for name, body, panics, ignored in test_functions(text):
            if ignored:
                continue
            cases += _function_cases(checkout, source, name, body, panics, builtin)
            cases += _file_cases(checkout, source, name, body)
    return cases + _example_cases(checkout)


def _file_cases(checkout: Path, source: str, name: str, body: str) -> list[Case]:
    """A test that reads a program and its shapes from files in the checkout."""
    program = re.search(r'"\{\}/(data/[^"]+\.glenside)"', body)
    shapes = re.search(r'"\{\}/(data/[^"]+shapes\.json)"', body)
    if not program or not shapes:
        return []
    declared = json.loads((checkout / shapes.group(1)).read_text())
    tensors = {key: Tensor(tuple(dims)) for key, dims in declared.items()}
    return [Case(source, name, (checkout / program.group(1)).read_text(), False, tensors)]


def _example_cases(checkout: Path) -> list[Case]:
    """tests/run-glenside-examples.rs: every glenside-programs/*/program.glenside on its
    .npy inputs, against its output.npy (read there as f64; here as f32, to 1e-5)."""
    cases = []
    for folder in sorted((checkout / "glenside-programs").iterdir()):
        if not (folder / "program.glenside").is_file():
            continue
        tensors = {}
        for npy in sorted(folder.glob("*.npy")):
            if npy.name != "output.npy":
                value = np.load(npy).astype(np.float32)
                tensors[npy.stem] = Tensor(value.shape, "f32", value)
        cases.append(Case("tests/run-glenside-examples.rs", f"run_glenside_examples "
                          f"({folder.name})", (folder / "program.glenside").read_text(),
                          False, tensors,
                          value=np.load(folder / "output.npy").astype(np.float32)))
    return cases


def _interpreter_cases(text: str, source: str) -> list[Case]:
    """interpreter.rs's `benchmark_and_test!(name, bench, "program", env, |value| …)`."""
    cases = []
    tests = text[text.index("mod tests"):]
    for match in re.finditer(r"benchmark_and_test!\(", tests):
        end = _matching(tests, match.end() - 1)
        block = tests[match.end():end - 1]
        if "$" in block:  # the macro's own definition
            continue
        panics = "should_panic" in block[:200]
        name = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(\w+)", block).group(1)  # type: ignore[union-attr]
        first = re.search(r'"', block)
        if first is None:
            continue
        position = first.start()
        program = _literal(block[position:_string_end(block, position)]).strip()
        closure = block.find("|value|")
        closure = len(block) if closure < 0 else closure
        case = Case(source, name, program, panics, _environment(block[position:closure]))
        _expectations(case, block[closure:])
        cases.append(case)
    return cases


def _function_cases(checkout: Path, source: str, name: str, body: str, panics: bool,
                    builtin: dict[str, tuple[int, ...]]) -> list[Case]:
    shapes = {key: tuple(int(d) for d in dims.split(",") if d.strip())
              for key, dims in re.findall(r'insert\(\s*"([\w-]+)"\.to_string\(\),\s*'
                                          r'vec!\[([\d,\s]*)\]', body)}
    variables = {var: dims for var, dims in re.findall(r"let (\w+) = vec!\[([\d,\s]*)\];", body)}
    for key, var in re.findall(r'insert\(\s*"([\w-]+)"\.to_string\(\),\s*(\w+)\.clone\(\)',
                               body):
        if var in variables:  # `let shape = vec![…]; map.insert("t", shape.clone())`
            shapes[key] = tuple(int(d) for d in variables[var].split(",") if d.strip())
    dtypes = {key: ("i8" if bits == "8" else "i32") for key, bits in
              re.findall(r'insert\(\s*"([\w-]+)"\.to_string\(\),\s*'
                         r'(?:crate::language::)?DataType::Int\((\d+)\)', body)}
    data = {}
    for variable, file in re.findall(r'let (\w+) = load_npy::<f32>\(\s*format!\(\s*"\{\}/\{\}",'
                                     r'\s*env!\("CARGO_MANIFEST_DIR"\),\s*"([^"]+)"', body):
        data[variable] = np.load(checkout / file).astype(np.float32)
    for key, variable in re.findall(r'env\.insert\(\s*"([\w-]+)",\s*(\w+)\s*\)', body):
        if variable in data:
            shapes[key] = data[variable].shape
    strings = _program_strings(body)
    cases = []
    for index, (position, program) in enumerate(strings):
        tensors = {}
        for tensor in set(re.findall(r"\(access-tensor ([\w-]+)\)|shape-of ([\w-]+)\)",
                                     program)):
            for tname in tensor:
                if not tname:
                    continue
                shape = shapes.get(tname, builtin.get(tname))
                if shape is not None:
                    value = data.get(tname)
                    tensors[tname] = Tensor(tuple(shape), dtypes.get(tname, "f32"),
                                            None if value is None else value)
        for key, variable in re.findall(r'env\.insert\(\s*"([\w-]+)",\s*(\w+)\s*\)', body):
            if key in tensors and variable in data:
                tensors[key].value = data[variable]
        case = Case(source, name, program, panics, tensors)
        if "result" in data and "abs_diff_eq(&result" in body:  # interpret-conv2d.rs
            case.value = data["result"]
        monolithic = re.search(r"create_hardware_design_monolithic\(&egraph, \((\d+), (\d+)\)",
                               body)
        case.array = f"{monolithic.group(1)}x{monolithic.group(2)}" if monolithic else None
        after = body[position:strings[index + 1][0] if index + 1 < len(strings) else len(body)]
        _expectations(case, after)
        cases.append(case)
    return cases


# -- running through the command line -------------------------------------------------------


def glensidec(*args: str | Path, cwd: Path) -> tuple[int, str, str]:
    """`glensidec ARGS` in this process: (exit code, stdout, stderr); a traceback is caught
    as exit code -1 with the traceback as stderr."""
    import traceback

    saved_argv, saved_cwd = sys.argv, os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["glensidec", *map(str, args)]
    code = 0
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli_main()
    except SystemExit as done:
        code = int(done.code or 0) if not isinstance(done.code, str) else 1
    except Exception:
        code = -1
        err.write(traceback.format_exc())
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    return code, out.getvalue(), err.getvalue()


def _type_split(line: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    match = re.match(r"\(\(([\d,\s]*)\),\s*\(([\d,\s]*)\)\)", line.strip())
    if not match:
        return None
    return tuple(int(d) for d in match.group(1).split(",") if d.strip()), \
        tuple(int(d) for d in match.group(2).split(",") if d.strip())


def run_case(case: Case, work: Path) -> Outcome:
    work.mkdir(parents=True, exist_ok=True)
    (work / "program.glenside").write_text(case.program + "\n")
    (work / "shapes.json").write_text(json.dumps(
        {name: {"shape": list(t.shape), "dtype": t.dtype} for name, t in case.tensors.items()}))
    code, out, err = glensidec("check", "program.glenside", "--shapes", "shapes.json", cwd=work)
    message = err.strip()
    if code == -1:
        return Outcome(case, "fail", "check crashed: " + message.splitlines()[-1])
    if code != 0:
        return _refused(case, message)
    typeline = out.strip().splitlines()[0]
    inputs = []
    for name, tensor in case.tensors.items():
        if tensor.value is not None:
            np.save(work / f"{name}.npy", tensor.value)
            inputs += ["--input", f"{name}={name}.npy"]
    if len(inputs) // 2 < len(case.tensors):
        inputs = ["--random-inputs", "0"]
    access = typeline.startswith("((")  # else a shape, list or tuple: printed, not saved
    code, out, err = glensidec("run", "program.glenside", "--shapes", "shapes.json", *inputs,
                               *(["-o", "result.npy"] if access else []), cwd=work)
    if code == -1:
        return Outcome(case, "fail", "run crashed: " + err.strip().splitlines()[-1])
    if code != 0:
        return _refused(case, err.strip())
    if case.array is not None:  # the test builds a monolithic array: compile for it
        code, _, err = glensidec("compile", "program.glenside", "--shapes", "shapes.json",
                                 "--array", case.array, "--emit", "rewritten", "-o",
                                 "rewritten.glenside", cwd=work)
        if code == -1:
            return Outcome(case, "fail", "compile crashed: " + err.strip().splitlines()[-1])
        if code != 0:
            return _refused(case, f"compile --array {case.array}: {err.strip()}")
    if case.panics:
        return Outcome(case, "accepted", typeline)
    if case.absent:
        return Outcome(case, "pass", "accepted (the test asserts only that a rewrite does "
                       "not produce it)")
    if not access:
        return _compare_printed(case, out.strip())
    return _compare(case, typeline, np.load(work / "result.npy"))


def _refused(case: Case, message: str) -> Outcome:
    """A program check or run refused: right when the test expects a panic."""
    one_line = len(message.splitlines()) == 1 and "error: " in message
    if case.panics or case.absent:
        return Outcome(case, "pass" if one_line else "fail", message)
    unknown = re.search(r"unknown tensor '([\w-]+)'", message)
    if unknown and unknown.group(1) not in case.tensors:
        return Outcome(case, "harness", f"the test gives {unknown.group(1)}'s shape in code "
                       "this bench does not read")
    for words, reason in DEVIATIONS.items():
        if words in message:
            return Outcome(case, "deviation", f"{reason}: {message}")
    return Outcome(case, "fail", message)


def _compare_printed(case: Case, printed: str) -> Outcome:
    if case.shape_value is not None:
        wanted = "(shape" + "".join(f" {d}" for d in case.shape_value) + ")"
        if printed != wanted:
            return Outcome(case, "fail", f"{printed}, the original's {wanted}")
    return Outcome(case, "pass", printed)


def _compare(case: Case, typeline: str, result: np.ndarray[Any, Any]) -> Outcome:
    split = _type_split(typeline)
    if case.value is not None:
        wanted = case.value
        same = result.shape == wanted.shape and (
            np.array_equal(result, wanted) if np.issubdtype(wanted.dtype, np.integer)
            else np.allclose(result, wanted, rtol=1e-5, atol=1e-5))
        if not same:
            return Outcome(case, "fail", f"value {result.tolist()}, the original's "
                           f"{wanted.tolist()}")
    if case.result_shape is not None and result.shape != case.result_shape:
        return Outcome(case, "fail", f"result shape {result.shape}, the original's "
                       f"{case.result_shape}")
    if case.split is not None and split != case.split:
        return Outcome(case, "fail", f"type {typeline}, the original's {case.split}")
    if case.axis is not None and split is not None and len(split[0]) != case.axis:
        if re.fullmatch(r"\(access-(tensor|pad|squeeze) .*", case.program) and \
                "(access " not in case.program:
            return Outcome(case, "deviation", f"{SPLIT_DEVIATION}: {typeline}")
        return Outcome(case, "fail", f"access axis {len(split[0])}, the original's {case.axis}")
    return Outcome(case, "pass", typeline)


# -- the table -------------------------------------------------------------------------------


def by_test(outcomes: list[Outcome]) -> dict[tuple[str, str], str]:
    """Each test's verdict: a should_panic test passes when some program of it is refused
    cleanly and none crashes; any other test when all its programs pass."""
    verdicts: dict[tuple[str, str], list[Outcome]] = {}
    for outcome in outcomes:
        verdicts.setdefault((outcome.case.source, outcome.case.test), []).append(outcome)
    result = {}
    for key, group in verdicts.items():
        statuses = {o.status for o in group}
        if group[0].case.panics:
            refused = any(o.status == "pass" for o in group)
            result[key] = "pass" if refused and "fail" not in statuses else (
                "deviation" if "deviation" in statuses else "fail")
        elif statuses <= {"pass"}:
            result[key] = "pass"
        elif "fail" in statuses:
            result[key] = "fail"
        elif "harness" in statuses:
            result[key] = "harness"
        else:
            result[key] = "deviation"
    return result


def report(checkout: Path, commit: str, outcomes: list[Outcome]) -> str:
    tests = by_test(outcomes)
    programs = Counter(o.status for o in outcomes)
    verdicts = Counter(tests.values())
    lines = [
        "# Glenside's own tests through glensidec's command line", "",
        f"`python bench/bench_glenside_suite.py GLENSIDE_DIR` on github.com/gussmith23/glenside "
        f"at {commit}: every `#[test]` of `src/` and `tests/*.rs` that is not `#[ignore]`d, each "
        "program it writes as a string run with `glensidec check` and `glensidec run` "
        "(`--shapes`, the test's own tensors or random ones), compared with what the test "
        "asserts (value, access axis, access shape) where it asserts it. Glenside has no "
        "licence file, so none of it is copied here; the bench reads the checkout.", "",
        "| | tests | programs |", "|---|---:|---:|",
        f"| read | {len(tests)} | {len(outcomes)} |",
        f"| pass | {verdicts['pass']} | {programs['pass']} |",
        f"| deliberate deviations (docs/language.md) | {verdicts['deviation']} | "
        f"{programs['deviation']} |",
        f"| fail | {verdicts['fail']} | {programs['fail']} |",
        f"| not runnable here (the test gives no shape for a tensor) | {verdicts['harness']} | "
        f"{programs['harness']} |", "",
        "A `#[should_panic]` test passes when one of its programs is refused with a one-line "
        f"error and none crashes; {programs['accepted']} programs of such tests are accepted "
        "(the panic is in a later program, or in what the test does with the result).", "",
    ]
    for status, title in (("fail", "Failures"), ("deviation", "Deliberate deviations"),
                          ("harness", "Not runnable here")):
        rows = [o for o in outcomes if o.status == status]
        lines += [f"## {title}", ""]
        if not rows:
            lines += ["None.", ""]
            continue
        lines += ["| file | test | program | why |", "|---|---|---|---|"]
        for o in rows:
            program = " ".join(o.case.program.split())
            program = program if len(program) < 90 else program[:87] + "..."
            detail = " ".join(o.detail.split()).replace("|", "\\|")
            lines.append(f"| {o.case.source} | `{o.case.test}` | `{program}` | "
                         f"{detail[:300]} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("glenside", type=Path, nargs="?",
                        default=os.environ.get("GLENSIDE_DIR") or None,
                        help="a checkout of gussmith23/glenside (default: $GLENSIDE_DIR)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.glenside is None or not (args.glenside / "src" / "language").is_dir():
        print("bench_glenside_suite: skipped, no Glenside checkout (git clone "
              f"https://github.com/gussmith23/glenside; git checkout {PINNED}; then pass its "
              f"directory or set GLENSIDE_DIR); {RESULTS.name} left as it is")
        return 0
    commit = subprocess.run(["git", "-C", str(args.glenside), "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    cases = read_cases(args.glenside)
    with tempfile.TemporaryDirectory() as scratch:
        outcomes = [run_case(case, Path(scratch) / str(index))
                    for index, case in enumerate(cases)]
    text = report(args.glenside, commit, outcomes)
    args.output.write_text(text + "\n")
    print(text)
    return 0 if not any(o.status == "fail" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
