"""Tensor data in and out: weights from .npy/.npz, runtime inputs, random inputs.

Data must match its declaration exactly (shape and dtype): a silent cast would make the
interpreter, the C program and the RTL disagree about what was computed.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from glensidec.errors import GlensideError, escaped, quoted
from glensidec.lang.dtypes import DTYPES, INTEGER_NAMES, Array, integer_range
from glensidec.lang.quantization import check_float_input
from glensidec.lang.terms import Program, TensorDecl
from glensidec.outputs import write_file

NPY_MAGIC = b"\x93NUMPY"


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ",".join(str(d) for d in shape) + ")"


def check_array(decl: TensorDecl, array: Array, origin: str) -> Array:
    """`array` if it has `decl`'s shape and dtype, else a clear error naming both."""
    want = np.dtype(DTYPES[decl.dtype].numpy)
    if array.dtype != want or tuple(array.shape) != decl.shape:
        also = " or float32 (quantized as the program declares)" if decl.quantization else ""
        raise GlensideError(
            f"{decl.role} '{decl.name}': {origin} holds {array.dtype} {_shape_text(array.shape)}, "
            f"expected {want}{also} {_shape_text(decl.shape)} ({decl.dtype})")
    return array


def input_array(decl: TensorDecl, array: Array, origin: str) -> Array:
    """An input's data as the program takes it: as declared, or — for an input declared
    `(quantized SCALE ZERO_POINT)` — float32, quantized here exactly as the quantizer does."""
    if (decl.quantization is not None and array.dtype == np.float32
            and tuple(array.shape) == decl.shape):
        check_float_input(decl.name, array, origin)
        return decl.quantization.quantize(array)
    if (decl.dtype in INTEGER_NAMES and array.dtype.kind in "iu" and array.size
            and tuple(array.shape) == decl.shape):
        # integers of another width (INT64 token ids for an i32 input): taken if they fit
        low, high = integer_range(decl.dtype)
        if not (low <= int(array.min()) and int(array.max()) <= high):
            raise GlensideError(f"{decl.role} '{decl.name}': {origin} holds {array.dtype} "
                                f"values outside {decl.dtype} ({array.min()}..{array.max()})")
        return array.astype(DTYPES[decl.dtype].numpy)
    return check_array(decl, array, origin)


def read_npy(path: Path, key: str | None = None) -> Array:
    """One array from a .npy file, or from an .npz archive by key."""
    return read_arrays(path, [key])[key]


def _held(files: list[str]) -> str:
    """An archive's array names for an error message (escaped only when one is raised: a
    network's archive holds thousands, and escaping them for every key read was half of
    swin_t's compile)."""
    return ", ".join(map(escaped, files)) or "none"


def read_arrays(path: Path, keys: list[str | None]) -> dict[str | None, Array]:
    """Arrays from one .npy file (key None) or several from one .npz archive, opened once
    (a network's weights are hundreds of arrays in one archive)."""
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                arrays: dict[str | None, Array] = {}
                for key in keys:
                    if key is None and len(archive.files) == 1:  # a .npz given for a .npy
                        arrays[key] = np.asarray(archive[archive.files[0]])
                        continue
                    if key is None:
                        raise GlensideError(f"{path}: an .npz holding "
                                            f"{len(archive.files)} arrays "
                                            f"({_held(archive.files)}); give a .npy file")
                    if key not in archive.files:
                        raise GlensideError(f"{path}: no array {quoted(key)} "
                                            f"(it has: {_held(archive.files)})")
                    arrays[key] = np.asarray(archive[key])
                return arrays
        with open(path, "rb") as handle:
            if handle.read(6) != NPY_MAGIC:
                raise GlensideError(f"{path} is not a .npy file (it does not start with the "
                                    "NumPy header)")
        array = np.asarray(np.load(path, allow_pickle=False))
        return {key: array for key in keys}
    except FileNotFoundError:
        raise GlensideError(f"file not found: {path}") from None
    except IsADirectoryError:
        raise GlensideError(f"{path} is a directory, not a .npy file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise GlensideError(f"cannot read {path}: {error}") from None


def load_weights(program: Program) -> dict[str, Array]:
    """Every weight's data, checked against its declaration; errors point at the declaration.

    Each weight file is read once, however many weights it holds."""
    by_file: dict[Path, list[TensorDecl]] = {}
    for decl in program.weights():
        by_file.setdefault(program.weight_path(decl), []).append(decl)
    weights = {}
    for path, decls in by_file.items():
        try:
            arrays = read_arrays(path, [decl.key or decl.name for decl in decls])
        except GlensideError:
            arrays = {}  # name the first declaration that cannot be read, below
        for decl in decls:
            try:
                key = decl.key or decl.name
                array = arrays[key] if key in arrays else read_npy(path, key)
                weights[decl.name] = check_array(decl, array, str(path))
            except GlensideError as error:
                prefix = f"weight '{decl.name}': "
                message = error.message.removeprefix(prefix)
                raise GlensideError(prefix + message, decl.span, program.path) from None
    return weights


#: How `run` takes its inputs, as its errors say (`glensidec diff` takes bare NAME=FILE.npy).
RUN_INPUTS = "--input NAME=FILE.npy or --random-inputs SEED"
DIFF_INPUTS = "NAME=FILE.npy after OUTDIR, one for each input"


def parse_input_options(options: tuple[str, ...] | list[str],
                        option: str = "--input") -> dict[str, Path]:
    """`NAME=FILE.npy` options as a dict; each name at most once (`option`: what the user
    wrote them as, for the error)."""
    given: dict[str, Path] = {}
    for text in options:
        name, equals, path = text.partition("=")
        if not equals or not name or not path:
            raise GlensideError(f"{option} takes NAME=FILE.npy, got {quoted(text)}")
        if name in given:
            raise GlensideError(f"input {quoted(name)} is given twice")
        given[name] = Path(path)
    return given


# `glensidec import` records each ONNX input whose name it had to change, so the name the
# user's model has keeps working: `; onnx-input "input:0" input_0` (the ONNX name JSON-quoted).
ALIAS_LINE = re.compile(r'^; onnx-input ("(?:[^"\\]|\\.)*") (\S+)$', re.MULTILINE)


def alias_line(original: str, name: str) -> str:
    return f"; onnx-input {json.dumps(original)} {name}"


def input_aliases(program: Program) -> dict[str, str]:
    """Original (ONNX) input name → the program's input name, from the program's header."""
    path = Path(program.path)
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8", errors="replace")
    return {json.loads(quoted): name for quoted, name in ALIAS_LINE.findall(text)}


def aliases_text(program: Program) -> str:
    """The program's `; onnx-input` lines, for a program written from it (quantize's,
    OUTDIR/program.gs): the ONNX names keep working there too."""
    return "".join(alias_line(original, name) + "\n"
                   for original, name in input_aliases(program).items())


def by_program_name(program: Program, given: dict[str, Any]) -> dict[str, Any]:
    """Per-input data keyed by the program's input names; a key may also be an input's
    original ONNX name (its `; onnx-input` line). Unknown names are errors."""
    declared = {decl.name: decl for decl in program.inputs()}
    aliases = {original: name for original, name in input_aliases(program).items()
               if name in declared and original not in declared}
    renamed: dict[str, Any] = {}
    for name, value in given.items():
        if name not in declared and name not in aliases:
            known = ", ".join(declared) or "none"
            known += "".join(f" ({quoted(a)} is {n})" for a, n in aliases.items())
            raise GlensideError(f"{quoted(name)} is not an input of {program.path} "
                                f"(inputs: {known})")
        target = aliases.get(name, name)
        if target in renamed:
            raise GlensideError(f"input '{target}' is given twice")
        renamed[target] = value
    return renamed


def load_inputs(program: Program, given: dict[str, Path] | dict[str, Path | Array],
                how: str = RUN_INPUTS) -> dict[str, Array]:
    """Runtime inputs from .npy files (or arrays, from the Python API): every declared
    input, nothing else (`how`: how the command takes them, for the error about a missing
    one).

    An input may be named as the program declares it or by its original ONNX name.
    """
    declared = {decl.name: decl for decl in program.inputs()}
    named = by_program_name(program, dict(given))
    missing = [name for name in declared if name not in named]
    if missing:
        raise GlensideError(f"missing input {', '.join(missing)}: give {how}")
    return {name: input_array(declared[name], read_npy(value), str(value))
            if isinstance(value, Path) else input_array(declared[name], value, "the given array")
            for name, value in named.items()}


def dequantize_result(program: Program, result: Array) -> Array:
    """The i8 result as float32 reals, by the program's `(quantized-output …)`."""
    quantization = program.output_quantization
    if quantization is None:
        raise GlensideError(f"cannot dequantize: {program.path} declares no "
                            "(quantized-output SCALE ZERO_POINT)")
    return quantization.dequantize(result)


def random_tensor(decl: TensorDecl, generator: np.random.Generator) -> Array:
    """Random data for a declaration: ints uniform over i8/i16 (i32: ±2^15), floats N(0,1)."""
    if decl.dtype == "f32":
        return generator.standard_normal(decl.shape).astype(np.float32)
    low, high = integer_range(decl.dtype) if decl.dtype != "i32" else (-(2**15), 2**15 - 1)
    values = generator.integers(low, high, size=decl.shape, endpoint=True)
    return values.astype(DTYPES[decl.dtype].numpy)


def random_inputs(program: Program, seed: int) -> dict[str, Array]:
    generator = np.random.default_rng(seed)
    return {decl.name: random_tensor(decl, generator) for decl in program.inputs()}


def write_npz(path: Path | BinaryIO, arrays: dict[str, Array]) -> None:
    """An .npz with fixed timestamps, so the same arrays give the same bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, np.ascontiguousarray(arrays[name]),
                                          allow_pickle=False)


def npz_bytes(arrays: dict[str, Array]) -> bytes:
    """`write_npz`'s bytes, for writing through glensidec.outputs."""
    buffer = io.BytesIO()
    write_npz(buffer, arrays)
    return buffer.getvalue()


def save_npy(path: Path, array: Array) -> None:
    """Write an array so that a failure leaves no half-written file behind."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    write_file(path, buffer.getvalue())


def all_tensors(program: Program, inputs: dict[str, Array]) -> dict[str, Any]:
    return {**load_weights(program), **inputs}
