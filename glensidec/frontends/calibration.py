"""Calibration for quantization: a float program's value ranges over sample inputs (Glow's
profile), saved and loaded as JSON and tied to the program it was measured on."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from glensidec.errors import GlensideError
from glensidec.lang.data import input_aliases, load_weights, read_npy
from glensidec.lang.dtypes import integer_range
from glensidec.lang.interp import evaluate_all
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, TensorDecl, Term, postorder
from glensidec.lang.typecheck import (
    check_program,
)
from glensidec.outputs import (
    write_file,
)

Array = np.ndarray[Any, Any]
PROFILE_FORMAT = "glensidec-profile"
PROFILE_VERSION = 1


# -- profiles ---------------------------------------------------------------------------------


def program_hash(program: Program, weights: dict[str, Array]) -> str:
    """sha256 of the canonical text and of every weight's bytes."""
    digest = hashlib.sha256(format_program(program).encode())
    for name in sorted(weights):
        digest.update(name.encode() + b"\0" + np.ascontiguousarray(weights[name]).tobytes())
    return digest.hexdigest()


def term_keys(program: Program) -> dict[Term, str]:
    """A stable key per subterm: `t<index>` in postorder (names added for readers)."""
    return {term: f"t{index}" for index, term in enumerate(postorder(program.root))}


def profiled(term: Term, program: Program) -> bool:
    if term.op == "access-tensor":
        return program.tensors[str(term.args[0])].role == "input"
    return term.op in ("compute", "access-concatenate")


@dataclass
class Profile:
    program_sha256: str
    samples: int
    ranges: dict[str, tuple[float, float]]  # term key → (min, max)
    labels: dict[str, str] = field(default_factory=dict)  # term key → let name / op

    def to_json(self) -> str:
        tensors = {key: {"min": low, "max": high, "term": self.labels.get(key, "")}
                   for key, (low, high) in self.ranges.items()}
        return json.dumps({"format": PROFILE_FORMAT, "version": PROFILE_VERSION,
                           "program_sha256": self.program_sha256, "samples": self.samples,
                           "tensors": tensors}, indent=1, sort_keys=True) + "\n"


def _calibration_array(path: Path, name: str, original: str | None) -> Array:
    """The array for input `name` in a calibration file, else under its ONNX name."""
    try:
        return read_npy(path, name)
    except GlensideError as missing:
        if original is None:
            raise
        try:
            return read_npy(path, original)
        except GlensideError:
            raise missing from None


def calibration_batches(program: Program, calibration: dict[str, Array] | str | Path
                        ) -> list[dict[str, Array]]:
    """Calibration data as one input dict per sample of the program's declared shapes.

    Each array is either (samples, *shape) or, when the batch axis comes first, its
    concatenation along axis 0 (samples·N, …).
    """
    # an input renamed at import is also found under its ONNX name (`; onnx-input` lines)
    originals = {name: original for original, name in input_aliases(program).items()}
    source = ""  # the file, for the errors below
    if not isinstance(calibration, dict):
        path = Path(calibration)
        source = f"{path}: "
        calibration = {decl.name: _calibration_array(path, decl.name, originals.get(decl.name))
                       for decl in program.inputs()}
    calibration = {**{name: calibration[original] for name, original in originals.items()
                      if original in calibration}, **calibration}
    counts = set()
    split: dict[str, list[Array]] = {}
    for decl in program.inputs():
        if decl.name not in calibration:
            raise GlensideError(f"calibration data has no array for input '{decl.name}' "
                                f"(it has: {', '.join(sorted(calibration)) or 'none'})")
        array = np.asarray(calibration[decl.name])
        if decl.dtype == "f32" or array.dtype.kind not in "iu":
            array = array.astype(np.float32)
            require_finite(array, f"calibration array '{decl.name}'")
        if decl.dtype != "f32":  # integer ids, as the program declares them
            array = integer_samples(decl, array)
        if array.shape[1:] == decl.shape:
            samples = list(array)
        elif decl.shape and array.ndim == len(decl.shape) and array.shape[1:] == decl.shape[
                1:] and array.shape[0] % decl.shape[0] == 0:
            samples = list(array.reshape(-1, *decl.shape))
        else:
            raise GlensideError(f"{source}calibration array '{decl.name}' has shape "
                                f"{array.shape}; expected {_sample_shapes(decl.shape)}")
        split[decl.name] = samples
        counts.add(len(samples))
    if len(counts) != 1 or 0 in counts:
        raise GlensideError(f"calibration arrays disagree on (or have no) samples: {counts}")
    count = counts.pop()
    return [{name: samples[i] for name, samples in split.items()} for i in range(count)]


def _sample_shapes(shape: tuple[int, ...]) -> str:
    """The calibration shapes an input of `shape` takes: one sample per row, or (its batch
    axis first) the samples' batches stacked, "(samples, 1, 3, 8, 8) or (samples, 3, 8, 8)"."""
    rows = f"(samples, {', '.join(map(str, shape))})"
    if not shape:
        return rows
    batch = "samples" if shape[0] == 1 else f"{shape[0]}·samples"
    return f"{rows} or ({', '.join([batch, *map(str, shape[1:])])})"


def integer_samples(decl: TensorDecl, array: Array) -> Array:
    """Calibration values of an integer input (token ids) in its dtype; they must be
    integers within its range."""
    low, high = integer_range(decl.dtype)
    if array.size and (not np.all(array == np.round(array)) or array.min() < low
                       or array.max() > high):
        raise GlensideError(f"calibration array '{decl.name}' must hold integers of "
                            f"{decl.dtype} (input '{decl.name}' is {decl.dtype})")
    return array.astype(np.dtype(decl.dtype.replace("i", "int")))


def require_finite(array: Array, what: str) -> None:
    """Quantization needs real ranges: one NaN or infinity would make every scale garbage."""
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise GlensideError(f"{what} holds {array[index]} at index {list(index)}: quantization "
                            "needs finite values")


def profile(program: Program, calibration: dict[str, Array] | str | Path) -> Profile:
    """Run the float program on every calibration sample; min/max of every profiled term."""
    types = check_program(program)
    weights = load_weights(program)
    for name, array in weights.items():
        require_finite(array, f"weight '{name}'")
    keys = term_keys(program)
    wanted = {term for term in keys if profiled(term, program)}
    ranges: dict[str, tuple[float, float]] = {}

    def record(term: Term, value: Array) -> None:
        if term in wanted and value.dtype.kind == "f" and value.size:
            require_finite(value, f"the float program's value '{program.names.get(term, term.op)}'"
                                   " on the calibration data")
            key = keys[term]
            low, high = float(np.min(value)), float(np.max(value))
            old = ranges.get(key, (low, high))
            ranges[key] = (min(old[0], low), max(old[1], high))

    batches = calibration_batches(program, calibration)
    for inputs in batches:
        evaluate_all(program.root, types, {**weights, **inputs}, visit=record)
    labels = {keys[t]: str(t.args[0]) if t.op == "access-tensor" else program.names.get(t, t.op)
              for t in wanted}
    return Profile(program_hash(program, weights), len(batches), ranges, labels)


def save_profile(prof: Profile, path: str | Path) -> None:
    write_file(Path(path), prof.to_json().encode())


def load_profile(path: str | Path, program: Program | None = None) -> Profile:
    """Read a profile; with `program`, refuse it unless it was made for that very program."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        if raw.get("format") != PROFILE_FORMAT or raw.get("version") != PROFILE_VERSION:
            raise ValueError(f"not a {PROFILE_FORMAT} version {PROFILE_VERSION} file")
        ranges = {k: (float(v["min"]), float(v["max"])) for k, v in raw["tensors"].items()}
        labels = {k: str(v.get("term", "")) for k, v in raw["tensors"].items()}
        prof = Profile(str(raw["program_sha256"]), int(raw["samples"]), ranges, labels)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise GlensideError(f"cannot read profile {path}: {error}") from None
    if program is not None:
        check_profile(prof, program, load_weights(program), str(path))
    return prof


def check_profile(prof: Profile, program: Program, weights: dict[str, Array],
                  origin: str = "the profile") -> None:
    actual = program_hash(program, weights)
    if prof.program_sha256 != actual:
        raise GlensideError(f"{origin} was made for a different program (sha256 "
                            f"{prof.program_sha256[:12]}…, this one is {actual[:12]}…): "
                            f"profile the program again")
