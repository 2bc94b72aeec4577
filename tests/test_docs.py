"""Every ```glenside example in docs/language.md parses, type-checks and means what it says.

A block may be followed (immediately, one per line, in any order) by annotations:

  <!-- result: ((32,16),()) f32 -->      the root type, as `glensidec check` prints it
  <!-- shapes: {"a": [32, 64]} -->       compatibility mode: the --shapes JSON
  <!-- inputs: {"x": [1, 2]} -->         run the interpreter on these inputs (JSON) …
  <!-- value: [2, 4] -->                  … and expect this result (floats to 1e-6)
  <!-- error: docs:2:3: error: … -->      the block must fail with exactly this message
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from glensidec.errors import GlensideError
from glensidec.lang.constructs import COMPUTE_TYPES, CONSTRUCTS
from glensidec.lang.dtypes import DTYPES
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import parse_program
from glensidec.lang.terms import Program, TensorDecl
from glensidec.lang.typecheck import check_program, describe_value, root_type

DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"
FENCE = re.compile(r"^```glenside[ \t]*\n(.*?)^```[ \t]*\n", re.MULTILINE | re.DOTALL)
NOTE = re.compile(r"<!-- (result|shapes|inputs|value|error): (.*?) -->[ \t]*\n")
KNOWN_NOTES = ("result", "shapes", "inputs", "value", "error")


@dataclass
class Example:
    line: int
    text: str
    notes: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"language.md:{self.line}"


def extract(doc: str) -> list[Example]:
    examples = []
    for fence in FENCE.finditer(doc):
        example = Example(doc.count("\n", 0, fence.start()) + 1, fence.group(1))
        position = fence.end()
        while (note := NOTE.match(doc, position)) is not None:
            assert note.group(1) not in example.notes, f"{example}: two {note.group(1)} notes"
            example.notes[note.group(1)] = note.group(2)
            position = note.end()
        examples.append(example)
    return examples


EXAMPLES = extract(DOC.read_text(encoding="utf-8"))


def shapes_from_json(text: str) -> dict[str, TensorDecl]:
    """The same reading as `--shapes FILE.json` (glensidec.lang.syntax.load_shapes)."""
    decls = {}
    for name, entry in json.loads(text).items():
        shape, dtype = (entry["shape"], entry.get("dtype", "f32")) if isinstance(entry, dict) \
            else (entry, "f32")
        assert dtype in DTYPES
        decls[name] = TensorDecl(name, tuple(shape), dtype, "input")
    return decls


def parse(example: Example) -> Program:
    shapes = shapes_from_json(example.notes["shapes"]) if "shapes" in example.notes else None
    return parse_program(example.text, "docs", shapes)


def test_the_doc_has_examples() -> None:
    assert len(EXAMPLES) >= 40
    with_result = [e for e in EXAMPLES if "result" in e.notes]
    assert len(with_result) >= 0.8 * len([e for e in EXAMPLES if "error" not in e.notes])


def test_every_annotation_belongs_to_a_block() -> None:
    doc = DOC.read_text(encoding="utf-8")
    attached = sum(len(e.notes) for e in EXAMPLES)
    notes = r"^<!-- (?:" + "|".join(KNOWN_NOTES) + r"): "
    written = len(re.findall(notes, doc, re.MULTILINE))
    assert attached == written, "an annotation is not directly after a ```glenside block"


def test_every_construct_and_compute_type_has_a_checked_example() -> None:
    checked = [e.text for e in EXAMPLES if "error" not in e.notes]
    for name in CONSTRUCTS:
        assert any(re.search(rf"\({re.escape(name)}[\s)]", text) for text in checked), name
    for name in COMPUTE_TYPES:
        assert any(re.search(rf"\(compute \(?{re.escape(name)}[\s)]", text)
                   for text in checked), name


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example(example: Example) -> None:
    if "error" in example.notes:
        with pytest.raises(GlensideError) as raised:
            check_program(parse(example))
        assert str(raised.value) == example.notes["error"]
        return
    program = parse(example)
    types = check_program(program)
    if "result" in example.notes:
        assert describe_value(types[program.root]) == example.notes["result"]
    if "inputs" in example.notes or "value" in example.notes:
        result = root_type(program, types)
        given = json.loads(example.notes["inputs"]) if "inputs" in example.notes else {}
        inputs = {name: np.array(given[name], dtype=DTYPES[decl.dtype].numpy)
                  for name, decl in program.tensors.items()}
        value = run_program(program, inputs, types)
        expected = np.array(json.loads(example.notes["value"]))
        assert value.dtype == np.dtype(DTYPES[result.dtype].numpy)
        if result.dtype == "f32":
            np.testing.assert_allclose(value, expected, rtol=1e-6)
        else:
            np.testing.assert_array_equal(value, expected)
