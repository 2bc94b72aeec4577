"""glensidec: a compiler for Glenside tensor programs onto a weight-stationary systolic array.

The Python API (for notebooks) mirrors the commands; every function raises
`glensidec.errors.GlensideError` for bad input, as the commands print it:

    program = glensidec.load("model.gs")           # parse (and type-check)
    glensidec.check(program)                       # the result's type, e.g. ((1,10),()) i32
    out = glensidec.run(program, {"image": x})     # numpy array (reference interpreter)
    c = glensidec.compile(program, "16x16", "out") # Compilation: cycles, report, OUTDIR
    a = glensidec.compile("q/m.gs", "16x16", "o", accel=True)  # the whole accelerator
    c.report_data.rows                             # per instruction: op, MACs, cycles, …
    d = glensidec.diff("out", {"image": "x.npy"})  # interpreter vs C (rtl=True: vs RTL)
    p = glensidec.import_onnx("m.onnx", "imported")
    q = glensidec.quantize(p, "calib.npz", "q/m.gs")

Stages are imported when first used, so `import glensidec` stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from glensidec.backend.report import ReportData
    from glensidec.cosim.diff import DiffResult
    from glensidec.frontends.quantize import QuantizedProgram
    from glensidec.lang.terms import Program
    from glensidec.lang.typecheck import AccessType

__all__ = ["Compilation", "check", "compile", "diff", "import_onnx", "load", "quantize", "run"]


def _program(program: Program | str | Path) -> Program:
    return program if not isinstance(program, (str, Path)) else load(program)


def load(path: str | Path, shapes: str | Path | None = None) -> Program:
    """Read and type-check a program file (`shapes`: compatibility mode's JSON)."""
    from glensidec.lang.syntax import read_program
    from glensidec.lang.typecheck import check_program

    program = read_program(path, shapes)
    check_program(program)
    return program


def check(program: Program | str | Path) -> AccessType:
    """The type of the program's result: its access shape and dtype."""
    from glensidec.lang.typecheck import check_program, root_type

    parsed = _program(program)
    return root_type(parsed, check_program(parsed))


def run(program: Program | str | Path, inputs: dict[str, Any] | None = None,
        seed: int | None = None, *, dequantize: bool = False) -> Any:
    """Run with the reference interpreter on `inputs` (name → numpy array), or on seeded
    random inputs when `seed` is given; returns the result as a numpy array. An input
    declared `(quantized …)` may be given as float32 (quantized as declared); `dequantize`
    returns a `(quantized-output …)` program's result as float32."""
    from glensidec.errors import GlensideError
    from glensidec.lang import data
    from glensidec.lang.interp import run_program
    from glensidec.lang.typecheck import check_program

    parsed = _program(program)
    types = check_program(parsed)
    if seed is not None:
        given = data.random_inputs(parsed, seed)
    else:
        given = data.by_program_name(parsed, dict(inputs or {}))  # ONNX names too
        for decl in parsed.inputs():
            if decl.name not in given:
                raise GlensideError(f"missing input {decl.name}")
            given[decl.name] = data.input_array(decl, given[decl.name], "the given array")
    result = run_program(parsed, data.all_tensors(parsed, given), types)
    return data.dequantize_result(parsed, result) if dequantize else result


@dataclass
class Compilation:
    """What `compile` made: the rewritten program, its predicted cycles, and OUTDIR."""

    program: Program  # the rewritten (extracted) program
    predicted_cycles: int  # the whole program: array and host work
    array_cycles: int
    report: list[str]  # the lines `glensidec compile --stats` prints
    outdir: Path | None  # the C program, when an OUTDIR was given
    instructions: int | None  # lowered instructions in OUTDIR's program
    report_data: ReportData | None = None  # OUTDIR/report.json's rows, one per instruction
    # accel=True with an OUTDIR: Σ the accelerator layers' cycles (ws_accel's, exact)
    accel_cycles: int | None = None


def compile(program: Program | str | Path, array: str = "16x16",
            outdir: str | Path | None = None, *, force: bool = False, iterations: int = 30,
            max_enodes: int = 50_000, timeout: float = 10.0, accel: bool = False,
            scratchpad: str = "256KiB", accumulator: str | None = None,
            dram_bandwidth: int = 16) -> Compilation:
    """Map the program onto an RxC array (`array`, e.g. "16x16"); with `outdir`, write the C
    program there (new, empty or an earlier compile's; `force` as `--force`). `accel` and
    the memory sizes are `--accel`, `--scratchpad`, `--accumulator`, `--dram-bandwidth`:
    the int8 program's array calls run as layers of the whole accelerator."""
    from glensidec import pipeline
    from glensidec.errors import GlensideError
    from glensidec.lang.typecheck import check_program
    from glensidec.opt.extract import parse_array_size
    from glensidec.opt.rewrite import RULESETS, Limits
    from glensidec.outputs import check_output_directory

    config = parse_array_size(array)
    if accel and config.is_float:
        raise GlensideError("accel drives the int8 accelerator: not with an f32 array")
    accelerator = (pipeline.accelerator_for(config, scratchpad, accumulator, dram_bandwidth)
                   if accel else None)
    if outdir is not None:
        check_output_directory(outdir, force=force)
    typed = (pipeline.load(program) if isinstance(program, (str, Path))
             else pipeline.Typed(program, check_program(program)))
    if outdir is not None and not accel:
        pipeline.require_no_epilogue(typed.program)
    compiled = pipeline.compile_program(typed.program, config,
                                        Limits(iterations, max_enodes, timeout), types=typed.types,
                                        rulesets=pipeline.ACCEL_RULESETS if accel else RULESETS)
    if accel:
        compiled = pipeline.fuse_epilogues(compiled, config)
    written, instructions, layers, accel_cycles = None, None, None, None
    if outdir is not None:
        from glensidec.backend.report import report_data

        result = pipeline.compile_to_directory(compiled.program, compiled.types, outdir, config,
                                               force=force, accel=accelerator)
        written, instructions = result.outdir, len(result.lowered.instructions)
        layers = report_data(Path(compiled.program.path).name, result.lowered, config)
        accel_cycles = result.accel_cycles if accel else None
    return Compilation(compiled.program, compiled.prediction.total,
                       compiled.prediction.array_cycles, list(compiled.report_lines(config)),
                       written, instructions, layers, accel_cycles)


def diff(outdir: str | Path, inputs: dict[str, str | Path], *, rtl: bool = False
         ) -> DiffResult:
    """Run a compiled OUTDIR's program on `inputs` (name -> .npy file) as `glensidec diff`
    does: `.agree`, `.divergence` (the first differing instruction, element and values) and
    `.lines()` (what the command prints)."""
    from glensidec.cosim.diff import diff as diff_executions

    return diff_executions(Path(outdir), tuple(f"{name}={path}" for name, path in inputs.items()),
                           rtl)


def import_onnx(model: str | Path, outdir: str | Path, *, force: bool = False) -> Program:
    """Import an ONNX model into `outdir` (as `glensidec import`); the program, loaded."""
    from glensidec.frontends.importer import import_onnx as write_import

    return load(write_import(model, outdir, force))


def quantize(program: Program | str | Path, calibration: str | Path | dict[str, Any],
             output: str | Path | None = None, *, per_channel: bool = False,
             symmetric: bool = False, force: bool = False) -> QuantizedProgram:
    """int8 post-training quantization (as `glensidec quantize`); with `output`, also write
    the .gs, its .npz and its .json there. The result holds the program, its weights and
    the scales and zero points."""
    from glensidec.frontends.quantize import quantize as quantize_program
    from glensidec.frontends.quantize import save_quantized

    quantized = quantize_program(_program(program), calibration, per_channel, symmetric)
    if output is not None:
        save_quantized(quantized, output, force)
    return quantized
