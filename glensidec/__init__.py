"""glensidec: a compiler for Glenside tensor programs onto a weight-stationary systolic array.

The Python API (for notebooks) mirrors the commands; every function raises
`glensidec.errors.GlensideError` for bad input, as the commands print it, and a TypeError
naming the argument for one of the wrong kind (checked here, at the boundary):

    program = glensidec.load("model.gs")           # parse (and type-check)
    glensidec.check(program)                       # the result's type, e.g. ((1,10),()) i32
    out = glensidec.run(program, {"image": x})     # numpy array (reference interpreter);
                                                   # x: an array or a .npy path
    c = glensidec.compile(program, "16x16", "out") # for the accelerator: cycles, OUTDIR
    b = glensidec.compile(program, "16x16", bare_array=True)  # for the bare array
    c.report_data.rows                             # per instruction: op, MACs, cycles, …
    d = glensidec.diff("out", {"image": "x.npy"})  # interpreter vs C (rtl=True: vs RTL)
    p = glensidec.import_onnx("m.onnx", "imported")
    q = glensidec.quantize(p, "calib.npz", "q/m.gs")

Stages are imported when first used, so `import glensidec` stays cheap.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glensidec.collector import without_cycle_collection

__version__ = "0.1.0"

if TYPE_CHECKING:
    from glensidec.backend.report import ReportData
    from glensidec.cosim.diff import DiffResult
    from glensidec.frontends.quantize import QuantizedProgram
    from glensidec.lang.terms import Program
    from glensidec.lang.typecheck import TypeValue

__all__ = ["Compilation", "check", "compile", "diff", "import_onnx", "load", "quantize", "run"]


# -- the boundary: arguments of the wrong kind are a TypeError naming the argument here,
# and bad values a GlensideError, never an exception from deep inside a stage.


def _kind(value: object) -> str:
    return type(value).__name__


def _path(value: object, argument: str) -> Path:
    """A path argument: a str or an os.PathLike (pathlib.Path)."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str):
            return Path(path)
    raise TypeError(f"{argument}: expected a path (str or pathlib.Path), got {_kind(value)}")


def _program(program: object) -> Program:
    """A loaded Program as is; a path is loaded (parsed and type-checked)."""
    from glensidec.lang.terms import Program

    if isinstance(program, Program):
        return program
    if isinstance(program, (str, os.PathLike)):
        return load(_path(program, "program"))
    raise TypeError(f"program: expected a Program (glensidec.load) or the path of a .gs file "
                    f"(str or pathlib.Path), got {_kind(program)}")


def _integer(value: object, argument: str, low: int, high: int = 2**63 - 1) -> int:
    """An int argument (not a bool) from `low` to `high`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argument}: expected an int, got {_kind(value)}")
    number = int(value)
    if not low <= number <= high:
        from glensidec.errors import GlensideError

        raise GlensideError(f"{argument} must be from {low} to {high}, got {number}")
    return number


def _size(value: object, argument: str) -> str:
    """A memory size: bytes as an int, or a string such as "256KiB"."""
    return value if isinstance(value, str) else str(_integer(value, argument, 1))


def _array_size(array: object) -> str:
    """`array`: "RxC[:TYPE][,RxC…]" as `--array` takes it, or a (rows, cols) pair."""
    if isinstance(array, str):
        return array
    if (isinstance(array, tuple) and len(array) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in array)):
        return f"{array[0]}x{array[1]}"
    raise TypeError(f"array: expected a size such as \"16x16\" or \"16x16:f32\", or a "
                    f"(rows, cols) pair of ints, got {_kind(array)} {array!r}")


def _inputs(program: Program, inputs: object, argument: str) -> dict[str, Path | Any]:
    """Runtime inputs by name: a mapping of name → numpy array or .npy path, or a list or
    tuple of them in the order the program declares its inputs."""
    import numpy as np

    if isinstance(inputs, Mapping):
        named = dict(inputs)
    elif isinstance(inputs, (list, tuple)):
        names = [decl.name for decl in program.inputs()]
        if len(inputs) != len(names):
            from glensidec.errors import GlensideError

            raise GlensideError(f"{argument}: {len(inputs)} given for the program's "
                                f"{len(names)} inputs ({', '.join(names) or 'none'}), in "
                                "that order")
        named = dict(zip(names, inputs, strict=True))
    else:
        raise TypeError(f"{argument}: expected a dict of input name → numpy array or .npy "
                        f"path (or a list in the program's input order), got {_kind(inputs)}")
    given: dict[str, Path | Any] = {}
    for name, value in named.items():
        if not isinstance(name, str):
            raise TypeError(f"{argument}: input names are str, got {_kind(name)} {name!r}")
        if isinstance(value, (str, os.PathLike)):
            given[name] = _path(value, f"{argument}[{name!r}]")
        elif isinstance(value, np.ndarray) or np.isscalar(value):
            given[name] = np.asarray(value)
        else:
            raise TypeError(f"{argument}[{name!r}]: expected a numpy array or the path of a "
                            f".npy file, got {_kind(value)}")
    return given


@without_cycle_collection  # (a large program's terms survive: see glensidec.collector)
def load(path: str | Path, shapes: str | Path | None = None) -> Program:
    """Read and type-check a program file (`shapes`: compatibility mode's JSON)."""
    from glensidec.lang.syntax import read_program
    from glensidec.lang.typecheck import check_program

    program = read_program(_path(path, "path"),
                           None if shapes is None else _path(shapes, "shapes"))
    check_program(program)
    return program


def check(program: Program | str | Path) -> TypeValue:
    """The type of the program's result, as `glensidec check` describes it: for a tensor
    (every program that computes one) an `AccessType`, its access shape and dtype; else
    a shape's dims, a literal's or a tuple's type."""
    from glensidec.lang.typecheck import check_program

    parsed = _program(program)
    return check_program(parsed)[parsed.root]


def run(program: Program | str | Path,
        inputs: Mapping[str, Any] | list[Any] | tuple[Any, ...] | None = None,
        seed: int | None = None, *, dequantize: bool = False) -> Any:
    """Run with the reference interpreter on `inputs`, or on seeded random inputs when
    `seed` (0 ≤ seed < 2**63) is given; returns the result as a numpy array (a tuple of
    them for a tuple; a shape-valued program's dims, as `check` gives them).

    `inputs`: a dict of input name → numpy array or the path of a .npy file (as `run
    --input NAME=FILE.npy`), or a list of them in the order the program declares its
    inputs. An input declared `(quantized …)` may be given as float32 (quantized as
    declared); `dequantize` returns a `(quantized-output …)` program's result as float32."""
    from glensidec.errors import GlensideError
    from glensidec.lang import data
    from glensidec.lang.interp import evaluate_result
    from glensidec.lang.typecheck import check_program, require_access_result

    parsed = _program(program)
    if seed is not None and inputs is not None:
        raise GlensideError("give inputs or seed, not both")
    types = check_program(parsed)
    if seed is not None:
        given = data.random_inputs(parsed, _integer(seed, "seed", 0))
    else:
        given = data.load_inputs(parsed, _inputs(parsed, {} if inputs is None else inputs,
                                                  "inputs"),  # ONNX names too
                                 "inputs={name: array or .npy path} or seed=N")
    if dequantize:
        require_access_result(parsed, types, "run(dequantize=True)")
    result = evaluate_result(parsed, data.all_tensors(parsed, given), types)
    if result is None:  # a shape, known from the types alone
        return types[parsed.root]
    if dequantize and not isinstance(result, tuple):
        return data.dequantize_result(parsed, result)
    return result


@dataclass
class Compilation:
    """What `compile` made: the rewritten program, its predicted cycles, and OUTDIR."""

    program: Program  # the rewritten (extracted) program
    predicted_cycles: int  # the whole program on its target: accelerator, array and host
    array_cycles: int  # Σ the bare array calls' cycles (0 when the accelerator runs them)
    report: list[str]  # the lines `glensidec compile --stats` prints
    outdir: Path | None  # the C program, when an OUTDIR was given
    instructions: int | None  # lowered instructions in OUTDIR's program
    report_data: ReportData | None = None  # OUTDIR/report.json's rows, one per instruction
    # Σ the accelerator layers' cycles (ws_accel's, exact); None for the bare array
    accel_cycles: int | None = None
    host_cycles: int = 0  # every host instruction under the host model, copies included
    # where the products run and why, as `compile` says it (pipeline.compile_target)
    target: str = ""


@without_cycle_collection  # (as the command's stages: the survivors are millions of objects)
def compile(program: Program | str | Path, array: str | tuple[int, int] = "16x16",
            outdir: str | Path | None = None, *, force: bool = False, iterations: int = 30,
            max_enodes: int = 50_000, timeout: float = 10.0, bare_array: bool = False,
            accel: bool | None = None, scratchpad: str | int = "256KiB",
            accumulator: str | int | None = None, dram_bandwidth: int = 16,
            epilogue_lanes: int = 0, dma_write_rows: int = 1,
            weight_load_rows: int = 1) -> Compilation:
    """Compile the program for the whole accelerator around an RxC int8 array (`array`,
    e.g. "16x16" or (16, 16)), as `glensidec compile` does; with `outdir`, write the C
    program there (new, empty or an earlier compile's; `force` as `--force`). The memory
    sizes are `--scratchpad`, `--accumulator`, `--dram-bandwidth` (sizes as "256KiB" or an
    int of bytes), `epilogue_lanes` is `--epilogue-lanes` (0: the default),
    `dma_write_rows` `--dma-write-rows`, `weight_load_rows` `--weight-load-rows`. `bare_array`
    (or the older `accel=False`) compiles for the bare array instead; an f32 array
    ("16x16:f32") or several sizes always do. `accel=True` is the default.
    `Compilation.target` says where the products run and why."""
    from glensidec import pipeline
    from glensidec.errors import GlensideError
    from glensidec.lang import data
    from glensidec.lang.typecheck import check_program, require_access_result
    from glensidec.opt.extract import arrays_for_c, parse_arrays
    from glensidec.opt.rewrite import Limits
    from glensidec.outputs import check_output_directory

    configs = parse_arrays(_array_size(array))
    if accel and (bare_array or configs[0].is_float or len(configs) > 1):
        raise GlensideError("accel drives the int8 accelerator around one array: not with "
                            "bare_array, an f32 array or several arrays")
    target = pipeline.choose_target(
        configs, bool(bare_array) or accel is False, _size(scratchpad, "scratchpad"),
        None if accumulator is None else _size(accumulator, "accumulator"),
        _integer(dram_bandwidth, "dram_bandwidth", 1),
        _integer(epilogue_lanes, "epilogue_lanes", 0),
        _integer(dma_write_rows, "dma_write_rows", 1),
        _integer(weight_load_rows, "weight_load_rows", 1))
    limits = Limits(_integer(iterations, "iterations", 0, 2**31 - 1),
                    _integer(max_enodes, "max_enodes", 1, 2**62), _seconds(timeout))
    if outdir is not None:
        check_output_directory(_path(outdir, "outdir"), force=force)
    if isinstance(program, (str, os.PathLike)):  # parsed and type-checked once
        typed = pipeline.load(_path(program, "program"))
    else:
        parsed = _program(program)
        typed = pipeline.Typed(parsed, check_program(parsed))
    require_access_result(typed.program, typed.types, "compile")
    if outdir is not None and target.accel is None:
        pipeline.require_no_epilogue(typed.program)
    compiled = pipeline.compile_for(typed, target, limits)
    placement = pipeline.compile_target(typed.program, typed.types, target.arrays,
                                        target.accel is not None)
    written, instructions, layers = None, None, None
    if outdir is not None:
        arrays = arrays_for_c(compiled, target.arrays)
        result = pipeline.compile_to_directory(compiled.program, compiled.types, outdir,
                                               arrays[0], force=force, more_arrays=arrays[1:],
                                               accel=target.accel)
        written, instructions = result.outdir, len(result.lowered.instructions)
        layers = result.report  # (report.json's rows)
        cycles = result.cycles
    else:
        cycles = pipeline.predicted_machine_cycles(compiled, target,
                                                   data.load_weights(compiled.program))
    report = [*compiled.report_lines(target.config), cycles.line()]
    return Compilation(compiled.program, cycles.total, cycles.array, report, written,
                       instructions, layers,
                       cycles.accelerator if target.accel is not None else None, cycles.host,
                       placement.line)


def _seconds(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout: expected seconds as a number, got {_kind(timeout)}")
    if not (math.isfinite(timeout) and timeout >= 0):
        from glensidec.errors import GlensideError

        raise GlensideError(f"timeout must be a finite number of seconds ≥ 0, got {timeout}")
    return float(timeout)


def diff(outdir: str | Path,
         inputs: Mapping[str, Any] | list[str] | tuple[str, ...] | str, *,
         rtl: bool = False) -> DiffResult:
    """Run a compiled OUTDIR's program on `inputs` as `glensidec diff` does: `.agree`,
    `.divergence` (the first differing instruction, element and values) and `.lines()`
    (what the command prints).

    `inputs`: a dict of input name → .npy path or numpy array, or the command's own
    "NAME=FILE.npy" words (one string, or a list of them)."""
    import tempfile

    import numpy as np

    from glensidec.cosim.diff import diff as diff_executions

    directory = _path(outdir, "outdir")
    if isinstance(inputs, str):
        return diff_executions(directory, (inputs,), rtl)
    if isinstance(inputs, (list, tuple)):
        if not all(isinstance(word, str) for word in inputs):
            raise TypeError("inputs: a list of \"NAME=FILE.npy\" strings, or a dict of "
                            "input name → .npy path or numpy array")
        return diff_executions(directory, tuple(inputs), rtl)
    if not isinstance(inputs, Mapping):
        raise TypeError(f"inputs: expected a dict of input name → .npy path or numpy array "
                        f"(or \"NAME=FILE.npy\" strings), got {_kind(inputs)}")
    with tempfile.TemporaryDirectory(prefix="glensidec-diff-inputs-") as scratch:
        words = []
        for index, (name, value) in enumerate(inputs.items()):
            if not isinstance(name, str):
                raise TypeError(f"inputs: input names are str, got {_kind(name)} {name!r}")
            if isinstance(value, np.ndarray):  # the C program reads .npy files
                path = Path(scratch) / f"{index}.npy"
                np.save(path, value)
            else:
                path = _path(value, f"inputs[{name!r}]")
            words.append(f"{name}={path}")
        return diff_executions(directory, tuple(words), rtl)


def import_onnx(model: str | Path, outdir: str | Path, *, force: bool = False) -> Program:
    """Import an ONNX model into `outdir` (as `glensidec import`); the program, loaded."""
    from glensidec.frontends.importer import import_onnx as write_import

    return load(write_import(_path(model, "model"), _path(outdir, "outdir"), force))


def quantize(program: Program | str | Path, calibration: str | Path | dict[str, Any],
             output: str | Path | None = None, *, per_channel: bool = False,
             symmetric: bool = False, force: bool = False) -> QuantizedProgram:
    """int8 post-training quantization (as `glensidec quantize`); with `output`, also write
    the .gs, its .npz and its .json there. The result holds the program, its weights and
    the scales and zero points."""
    from glensidec.frontends.calibration import Profile
    from glensidec.frontends.quantize import quantize as quantize_program
    from glensidec.frontends.quantize import save_quantized

    data = (dict(calibration) if isinstance(calibration, Mapping)
            else calibration if isinstance(calibration, Profile)
            else _path(calibration, "calibration"))
    quantized = quantize_program(_program(program), data, per_channel, symmetric)
    if output is not None:
        save_quantized(quantized, _path(output, "output"), force)
    return quantized
