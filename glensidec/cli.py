"""The `glensidec` command line.

Exit codes: 0 success, 1 an error in the user's input (one line on stderr, no traceback),
2 a usage error (click's own), 130 interrupted (SIGINT), 143 terminated (SIGTERM).
"""

from __future__ import annotations

from glensidec.outputs import interrupts_held_while_loading

# Loading what the commands need takes a moment (most of a second on a loaded machine):
# a Ctrl-C meanwhile ends the command as any interrupt does, one line and exit 130.
with interrupts_held_while_loading():
    import math
    import os
    import sys
    from collections.abc import Iterator, Sequence
    from pathlib import Path
    from typing import TYPE_CHECKING, NoReturn

    import click
    import numpy as np

    from glensidec import __version__
    from glensidec.errors import GlensideError, quoted
    from glensidec.lang import data
    from glensidec.lang.interp import evaluate_result
    from glensidec.lang.syntax import format_program, read_program
    from glensidec.lang.terms import Program
    from glensidec.lang.typecheck import check_program, describe_value, require_access_result
    from glensidec.nas import commands as nas_commands
    from glensidec.outputs import (
        Terminated,
        check_output_directory,
        check_writable_file,
        raise_on_sigterm,
        write_file,
    )

if TYPE_CHECKING:
    from glensidec.hardware.commands import AccelConfig
    from glensidec.opt.extract import Compiled, Invocation

PROGRAM = click.argument("program", type=click.Path(dir_okay=False, path_type=Path))
# A seed for numpy's and torch's generators: a non-negative 63-bit number.
SEED = click.IntRange(min=0, max=2**63 - 1)
SHAPES = click.option("--shapes", type=click.Path(dir_okay=False, path_type=Path),
                      help="Compatibility mode: a JSON file {\"name\": [dims]} declaring inputs.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="glensidec")
def cli() -> None:
    """glensidec: compile Glenside tensor programs onto a systolic array."""


def _finite(value: float, option: str) -> float:
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number of seconds",
                                 param_hint=option)
    return value


def _load(program_path: Path, shapes: Path | None) -> Program:
    return read_program(program_path, shapes)


@cli.command()
@PROGRAM
@SHAPES
def check(program: Path, shapes: Path | None) -> None:
    """Parse and type-check PROGRAM; print its result's access shape and dtype."""
    parsed = _load(program, shapes)
    click.echo(describe_value(check_program(parsed)[parsed.root]))


@cli.command()
@PROGRAM
@SHAPES
@click.option("--input", "input_options", multiple=True, metavar="NAME=FILE.npy",
              help="A runtime input (repeat for each).")
@click.option("--random-inputs", type=click.IntRange(min=0, max=2**63 - 1), metavar="SEED",
              help="Fill every runtime input with seeded random data.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the result here as .npy (default: print it).")
@click.option("--dequantize", is_flag=True,
              help="Give the i8 result as float32, by the program's (quantized-output …).")
def run(program: Path, shapes: Path | None, input_options: tuple[str, ...],
        random_inputs: int | None, output: Path | None, dequantize: bool) -> None:
    """Run PROGRAM with the reference interpreter.

    An input declared (quantized SCALE ZERO_POINT) takes an int8 or a float32 .npy; a
    float32 one is quantized as the program declares."""
    parsed = _load(program, shapes)
    types = check_program(parsed)
    if input_options and random_inputs is not None:
        raise click.UsageError("give --input or --random-inputs, not both")
    if dequantize and parsed.output_quantization is None:
        data.dequantize_result(parsed, np.zeros(0, np.int8))  # the error, before the run
    if random_inputs is not None:
        inputs = data.random_inputs(parsed, random_inputs)
    else:
        inputs = data.load_inputs(parsed, data.parse_input_options(input_options))
    value = evaluate_result(parsed, data.all_tensors(parsed, inputs), types)
    if not isinstance(value, np.ndarray):  # a shape or a tuple: printed, never written
        if output is not None:
            require_access_result(parsed, types, "run -o")
        members = value if value is not None else ()
        click.echo("\n".join([describe_value(types[parsed.root]), *map(str, members)]))
        return
    result = data.dequantize_result(parsed, value) if dequantize else value
    if output is not None:
        data.save_npy(output, result)
        click.echo(f"wrote {output}: {result.dtype} {tuple(result.shape)}")
    else:
        click.echo(str(result))


@cli.command()
@PROGRAM
@SHAPES
@click.option("-i", "--in-place", is_flag=True, help="Rewrite PROGRAM instead of printing.")
def fmt(program: Path, shapes: Path | None, in_place: bool) -> None:
    """Print PROGRAM in canonical form (it parses back to the same program)."""
    parsed = _load(program, shapes)
    check_program(parsed)
    # the `; onnx-input` lines are a comment that means something: the ONNX input names
    # every command takes (fmt -i had dropped them, and those names with them)
    text = data.aliases_text(parsed) + format_program(parsed)
    if in_place:
        write_file(program, text)
    else:
        click.echo(text, nl=False)


@cli.command(name="compile")
@PROGRAM
@SHAPES
@click.option("--array", "array_size", default="16x16", show_default=True,
              metavar="RxC[:TYPE][,RxC...]",
              help="The systolic array to map onto, e.g. 16x16 (int8) or 16x16:f32 "
                   "(binary32); several sizes (2x4,4x6) let the extractor pick per product.")
@click.option("--emit", type=click.Choice(["c", "rewritten", "egraph"]),
              help="What to write: the C program (the default with -o), the rewritten "
                   "program (the default without -o), or the e-graph (graphviz).")
@click.option("--stats", is_flag=True, help="Report the run and the predicted cycles on stderr.")
@click.option("--verify", is_flag=True,
              help="Run the original and the rewritten program on random inputs and compare.")
@click.option("--iterations", type=click.IntRange(min=0, max=2**31 - 1), default=30,
              show_default=True)
@click.option("--max-enodes", type=click.IntRange(min=1, max=2**62), default=50_000,
              show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
              callback=lambda ctx, param, value: _finite(value, "--timeout"),
              metavar="S", help="Seconds of saturation (per product region) before "
                                "extracting the best so far.")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="OUTDIR for the C program (new, empty, or an earlier compile's); a file "
                   "for --emit rewritten|egraph (.svg renders the e-graph).")
@click.option("--force", is_flag=True,
              help="Replace glensidec's own files in an OUTDIR that also holds others.")
@click.option("--scratchpad", default="256KiB", show_default=True, metavar="SIZE",
              help="Operand scratchpad of the accelerator (bytes; K/KiB and M/MiB suffixes).")
@click.option("--accumulator", default=None, metavar="SIZE",
              help="Accumulator memory (bytes, a multiple of COLS×4) [default: 1024 rows, "
                   "64KiB at 16x16].")
@click.option("--dram-bandwidth", type=click.IntRange(min=1), default=16, show_default=True,
              metavar="B", help="Main-memory bytes per cycle (a power of two).")
@click.option("--epilogue-lanes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Columns the epilogue requantizes a cycle (a divisor of the columns) "
                   "[default: a quarter of them, 4 at 16x16].")
@click.option("--dma-write-rows", type=click.IntRange(min=1), default=1, show_default=True,
              metavar="N", help="Scratchpad rows one DMA write may carry (1, 2, 4 or 8): "
                                "rows that lie end to end come N a write, several a bus "
                                "beat when the bus is wider than a row.")
@click.option("--weight-load-rows", type=click.IntRange(min=1), default=1, show_default=True,
              metavar="N", help="Weight rows the array takes a cycle (a power of two, at "
                                "most --dma-write-rows and half the array's rows): a tile's "
                                "weights load in ROWS/N cycles.")
@click.option("--bare-array", is_flag=True,
              help="Compile for the bare systolic array, the host doing everything else "
                   "(original Glenside programs, teaching), instead of the whole accelerator.")
@click.option("--accel", is_flag=True,
              help="The whole accelerator: the default for one int8 array (kept for "
                   "compatibility; an error with --bare-array, f32 or several arrays).")
def compile_command(program: Path, shapes: Path | None, array_size: str, emit: str | None,
                    stats: bool, verify: bool, iterations: int, max_enodes: int,
                    timeout: float, output: Path | None, force: bool, scratchpad: str,
                    accumulator: str | None, dram_bandwidth: int,
                    epilogue_lanes: int | None, dma_write_rows: int, weight_load_rows: int,
                    bare_array: bool, accel: bool) -> None:
    """Map PROGRAM onto the accelerator around an RxC systolic array; write the C program
    to OUTDIR.

    The target is the whole accelerator (DMA, scratchpad, array, epilogue, pooling stores,
    run by a command runtime) around one int8 array: each array call with its bias,
    requantize, clip, residual add and max-pool runs as one accelerator layer. The bare
    array, with the host doing all but the products, is the target with --bare-array, and
    for what the accelerator does not have: an f32 array (RxC:f32) or several array sizes
    (a line on stderr says so).

    `make -C OUTDIR` builds OUTDIR/model; `make -C OUTDIR sim` co-simulates it on the RTL.
    Without -o, print the rewritten program instead.
    """
    from glensidec import pipeline
    from glensidec.opt.extract import arrays_for_c, parse_arrays, validate
    from glensidec.opt.rewrite import Limits

    emit = emit or ("c" if output is not None else "rewritten")
    if emit == "c" and output is None:
        raise click.UsageError("--emit c writes a directory: give -o OUTDIR")
    if emit == "c" and output is not None:
        check_output_directory(output, force=force)  # before any work: refuse early
    elif output is not None:
        check_writable_file(output)
    configs = parse_arrays(array_size)
    if accel and bare_array:
        raise click.UsageError("--accel and --bare-array name two targets: give one")
    if accel and (configs[0].is_float or len(configs) > 1):
        raise click.UsageError("--accel drives the int8 accelerator around one array: not "
                               "with an f32 array or several arrays")
    target = pipeline.choose_target(configs, bare_array, scratchpad, accumulator,
                                    dram_bandwidth, epilogue_lanes or 0, dma_write_rows,
                                    weight_load_rows)
    if target.accel is None and not bare_array:  # not asked for: say so, and why
        click.echo(target.describe(), err=True)
    typed = pipeline.load(program, shapes)  # parse, typecheck
    parsed = typed.program
    require_access_result(parsed, typed.types, "compile")
    if target.accel is None and emit == "c":
        pipeline.require_no_epilogue(parsed)
    # rewrite, extract (and on the accelerator, its epilogue rules)
    compiled = pipeline.compile_for(typed, target, Limits(iterations, max_enodes, timeout))
    placement = pipeline.compile_target(parsed, typed.types, target.arrays,
                                        target.accel is not None)  # where, and why
    if compiled.stats.hit_limit() and not stats:  # a cheaper mapping: say so, never abort
        click.echo(f"warning: saturation stopped at a limit ({compiled.stats.stop_reason}): "
                   "the program is the best found so far (--stats for more; raise "
                   "--iterations, --max-enodes or --timeout for a better one)", err=True)
    if stats:
        click.echo(f"note: {placement.line}", err=True)
        for line in compiled.report_lines(target.config):
            click.echo(line, err=True)
        if target.accel is not None:
            for line in _accelerator_lines(target.accel, compiled.prediction.invocations):
                click.echo(line, err=True)
    if verify:
        validate(parsed, compiled.program, types=(typed.types, compiled.types))
        click.echo("verified: the rewritten program computes the same result", err=True)
    if emit != "c":
        if stats:
            click.echo(pipeline.predicted_machine_cycles(compiled, target).line(), err=True)
        _write_rewritten(compiled, emit, output)
        return
    assert output is not None
    arrays = arrays_for_c(compiled, configs)
    result = pipeline.compile_to_directory(
        compiled.program, compiled.types, output, arrays[0], force=force,
        more_arrays=arrays[1:], accel=target.accel)  # lower, plan, emit
    layers = result.lowered.accel_layers()
    fused = (f", {len(layers)} accelerator layers: {result.accel_cycles} cycles"
             if target.accel is not None else "")
    click.echo(f"wrote {output}: {len(result.lowered.instructions)} instructions, "
               f"predicted array cycles {result.predicted_cycles}{fused}")
    click.echo(result.cycles.line())
    if not (placement.takes_all or stats):  # products on the host: say why
        click.echo(f"note: {placement.line}", err=True)
    if result.host_epilogues:
        from glensidec.opt.batch import unsplit_reason

        why = unsplit_reason(parsed, typed.types) or (
            "the accelerator cannot take them: e.g. weights that are not constant, a bias "
            "or multiplier not per column")
        click.echo(f"warning: {result.host_epilogues} host instructions of accel-epilogue "
                   f"or accel-max-pool terms stay on the host ({why})", err=True)
    if stats and target.accel is not None:
        from glensidec.backend.accel_layers import accel_layer_lines

        for line in accel_layer_lines(result.lowered, arrays[0]):  # with the total
            click.echo(line, err=True)
    elif stats:
        click.echo(result.cycles.line(), err=True)


def _write_rewritten(compiled: Compiled, emit: str, output: Path | None) -> None:
    """--emit rewritten|egraph: the program (or e-graph) to OUTPUT or stdout."""
    from glensidec.opt.extract import egraph_dot, egraph_svg

    if emit == "egraph":
        text = egraph_dot(compiled.egraph())
        text = egraph_svg(text) if output is not None and output.suffix == ".svg" else text
    else:
        rewritten = compiled.program if output is None else compiled.program.moved_to(output)
        text = data.aliases_text(compiled.program) + format_program(rewritten)
    if output is not None:
        write_file(output, text)
    else:
        click.echo(text, nl=False)


# An input's name may start with '-' (an ONNX input named "-1"): such a NAME=FILE.npy is an
# input, not an unknown option; a word with no '=' is still refused as an option.
@cli.command("diff", context_settings={"ignore_unknown_options": True})
@click.argument("outdir", type=click.Path(file_okay=False, path_type=Path))
@click.argument("inputs", nargs=-1, metavar="NAME=FILE.npy...")
@click.option("--rtl", is_flag=True,
              help="Also co-simulate (array calls on the Verilog array) and compare it.")
def diff_command(outdir: Path, inputs: tuple[str, ...], rtl: bool) -> None:
    """Run a compiled OUTDIR's program three ways and name the first instruction that differs.

    The interpreter (on the program's own weights), the C program (`make trace`) and, with
    --rtl, the co-simulation are compared instruction by instruction of the lowered
    program. Exit 0 when all agree, 1 at a divergence (or an error).
    """
    from glensidec.cosim.diff import diff

    unknown = next((word for word in inputs if word.startswith("-") and "=" not in word), None)
    if unknown is not None:
        raise click.NoSuchOption(unknown)

    result = diff(outdir, inputs, rtl)
    for line in result.lines():
        click.echo(line)
    if not result.agree:
        sys.exit(1)


def _accelerator_lines(accel: AccelConfig, invocations: Sequence[Invocation]) -> Iterator[str]:
    """--stats: the memories and how each array call would be tiled to fit them."""
    from glensidec.hardware.commands import gemm_tiling

    memory = accel.memory
    yield (f"accelerator memories: scratchpad {memory.scratchpad_bytes} B ({memory.banks} banks "
           f"of {memory.bank_rows} {memory.row_bytes}-byte rows), accumulator "
           f"{accel.acc_depth} rows ({accel.acc_depth * accel.cols * 4} B), DRAM "
           f"{memory.bus_bytes} B/cycle, epilogue {accel.epilogue_lanes} lanes "
           f"({accel.epilogue_cycles} cycles a row)"
           + (f", {memory.write_rows} rows a DMA write" if memory.write_rows > 1 else "")
           + (f", {accel.weight_load_rows} weight rows a cycle"
              if accel.weight_load_rows > 1 else ""))
    for call in invocations:
        tiling = gemm_tiling(accel, call.m, call.k, call.n, call.op)
        yield (f"  {call.op} M={call.m} K={call.k} N={call.n}: K pieces of "
               f"{tiling.piece_folds} of {tiling.folds} folds, M chunks of "
               f"{tiling.chunk_rows} rows")


@cli.command("import")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--outdir", required=True, type=click.Path(path_type=Path),
              help="Directory to write the program and its weights into (new, empty, or "
                   "an earlier import's).")
@click.option("--force", is_flag=True,
              help="Replace glensidec's own files in an OUTDIR that also holds others.")
def import_command(model: Path, outdir: Path, force: bool) -> None:
    """Import an ONNX MODEL as a float Glenside program (+ weights) in OUTDIR."""
    from glensidec.frontends.importer import import_model

    program, input_names = import_model(model, outdir, force)
    click.echo(f"wrote {program} and {program.with_suffix('.npz')}")
    for original, name in input_names.items():
        note = ("" if original == name else " (renamed: --input accepts either name)"
                if "=" not in original else f" (renamed: give it as {name}: a NAME=FILE "
                "ends the name at its first '=')")
        click.echo(f"input {quoted(original)} → {name}{note}")


@cli.command("quantize")
@PROGRAM
@click.option("--calibrate", "calibration", type=click.Path(dir_okay=False, path_type=Path),
              help="Calibration inputs: an .npz with one (samples, …) array per input.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Use a saved profile instead of (or, with --calibrate, save one to) "
                   "this file.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the int8 program (.gs; weights go beside it as .npz).")
@click.option("--per-channel", is_flag=True, help="One weight scale per output channel.")
@click.option("--symmetric", is_flag=True, help="Symmetric activations (zero point 0).")
@click.option("--force", is_flag=True,
              help="Replace existing output files an earlier run did not write.")
def quantize_command(program: Path, calibration: Path | None, profile_path: Path | None,
                     output: Path, per_channel: bool, symmetric: bool, force: bool) -> None:
    """Quantize a float PROGRAM to int8 with calibration data (Glow's profile-guided way)."""
    from glensidec.frontends.quantize import quantize_files

    written = quantize_files(program, calibration, profile_path, output, per_channel,
                             symmetric, force)
    click.echo(f"wrote {written}, {written.with_suffix('.npz')} and {written}.json")


# -- architecture search (glensidec/nas) ------------------------------------------------------


@cli.command("transform")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--group", multiple=True, metavar="LAYER:G", help="Split into G groups.")
@click.option("--bottleneck", multiple=True, metavar="LAYER:B",
              help="Keep 1/B of the output channels (and of the layers coupled to it).")
@click.option("--bottleneck-block", multiple=True, metavar="LAYER:B",
              help="1x1 down by B, the kxk conv at C/B, 1x1 up.")
@click.option("--depthwise", multiple=True, metavar="LAYER",
              help="Depthwise kxk then pointwise 1x1.")
@click.option("--spatial-split", multiple=True, metavar="LAYER:S",
              help="S bands of output rows, each with its own weights.")
@click.option("--split-out", multiple=True, metavar="LAYER:S:G",
              help="S parts of the output channels, each a conv in G groups.")
@click.option("--stride", multiple=True, metavar="LAYER",
              help="The conv at the stride of the max-pool after it; the pool removed.")
@click.option("--heads", multiple=True, metavar="ATTENTION:H",
              help="Keep the attention's H strongest heads.")
@click.option("--head-dim", multiple=True, metavar="ATTENTION:F",
              help="Keep 1/F of every head's dimensions (the strongest).")
@click.option("--low-rank", multiple=True, metavar="LAYER:R",
              help="A dense layer as two of rank R (SVD).")
@click.option("--drop", multiple=True, metavar="ADD",
              help="Remove a residual add and its branch (x + f(x) becomes x).")
@click.option("--init", type=click.Choice(["inherit", "random"]), default="inherit",
              show_default=True, help="New weights from the old ones, or random (He).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="For --init random.")
@click.option("--array", "array_size", default="16x16", show_default=True, metavar="RxC",
              help="The array of the accelerator the predicted cycles are for.")
@click.option("--dram-bandwidth", type=click.IntRange(min=1), default=16, show_default=True,
              help="The accelerator's DRAM bytes per cycle (as compile's).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="The new program (.gs); its weights go beside it (.npz).")
@click.option("--force", is_flag=True,
              help="Replace existing output files an earlier run did not write.")
def transform_command(model: Path, group: tuple[str, ...], bottleneck: tuple[str, ...],
                      bottleneck_block: tuple[str, ...], depthwise: tuple[str, ...],
                      spatial_split: tuple[str, ...], split_out: tuple[str, ...],
                      stride: tuple[str, ...], heads: tuple[str, ...],
                      head_dim: tuple[str, ...],
                      low_rank: tuple[str, ...], drop: tuple[str, ...], init: str,
                      seed: int, array_size: str, dram_bandwidth: int, output: Path | None,
                      force: bool) -> None:
    """Transform MODEL's architecture; with no transformation, list its transformable layers.

    Transformations apply in the order stride, bottleneck, heads, head-dim, group,
    split-out, bottleneck-block, depthwise, spatial-split, low-rank, drop. Each prints
    the layers it changed with their parameters, multiply-accumulates and predicted cycles
    on the array, before and after.
    """
    nas_commands.transform(model, {"group": group, "bottleneck": bottleneck,
                                   "depthwise": depthwise, "bottleneck-block": bottleneck_block,
                                   "spatial-split": spatial_split, "split-out": split_out,
                                   "stride": stride, "heads": heads, "head-dim": head_dim,
                                   "low-rank": low_rank, "drop": drop},
                           init, seed, array_size, output, force, dram_bandwidth)


@cli.command("nas")
@click.argument("model", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--data", "train_path", required=True, metavar="TRAIN.npz",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Training examples: x (N, input shape) f32 and y (N,) int64.")
@click.option("--val", "val_path", required=True, metavar="VAL.npz",
              type=click.Path(dir_okay=False, path_type=Path), help="Validation examples.")
@click.option("--array", "array_size", default="16x16", show_default=True, metavar="RxC",
              help="The array of the accelerator candidates are costed on.")
@click.option("--dram-bandwidth", type=click.IntRange(min=1), default=16, show_default=True,
              help="The accelerator's DRAM bytes per cycle (as compile's).")
@click.option("--budget", type=click.IntRange(min=1), default=64, show_default=True,
              help="Candidates to evaluate (the whole space if it fits).")
@click.option("--space", default=",".join(nas_commands.SEARCH_SPACE), show_default=True,
              help="Transformations to search, comma-separated.")
@click.option("--legality", type=click.Choice(nas_commands.LEGALITY), default="loss-warm",
              show_default=True, help="How candidates are judged (docs/nas.md).")
@click.option("--threshold", type=float, default=0.9, show_default=True,
              help="Legal when the score is at least this times the original's.")
@click.option("--band", type=click.FloatRange(min=0.0), default=0.025, show_default=True,
              help="Legal candidates compete within +-band of each other's cost; only "
                   "the best-scored of a band is retrained (BlockSwap's parameter band).")
@click.option("--cost", type=click.Choice(["cycles", "macs"]), default="cycles",
              show_default=True,
              help="What the search minimises: predicted cycles, or MACs (a baseline).")
@click.option("--train-epochs", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--train-seeds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Seeds each retraining averages (and --legality train): --seed, "
                   "--seed + 1, ...")
@click.option("--top", type=click.IntRange(min=1), default=3, show_default=True,
              help="Finalists retrained at once, cheapest first.")
@click.option("--retrain", type=click.IntRange(min=1), default=12, show_default=True,
              help="Finalists retrained at most: the search retrains the next cheapest "
                   "until one keeps the original's accuracy within a point.")
@click.option("--descent", type=click.IntRange(min=0), default=0, show_default=True,
              help="After the strategy, judge up to this many more candidates: the "
                   "single-layer changes of the cheapest legal ones that cost less, "
                   "cheapest first (docs/nas.md).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--strategy", type=click.Choice(["auto", "random"]), default="auto",
              show_default=True, help="auto: exhaustive if the space fits, else evolution.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Local Dask workers (without --scheduler).")
@click.option("--scheduler", metavar="ADDRESS", help="An existing Dask scheduler.")
@click.option("--hardware", "hardware", is_flag=False, flag_value="", default=None,
              metavar="[SPACE]",
              help="Search the accelerator with the network: array rows x cols, scratchpad, "
                   "accumulator rows, bus bytes, cycles a row through the epilogue's lanes "
                   "(SPACE overrides the default grid, e.g. 'rows=8,16 bus=16,32 "
                   "epilogue=1,4'; docs/nas.md).")
@click.option("--area-budget", metavar="CELLS|RxC",
              help="With --hardware: the most area a machine may have, in cell "
                   "equivalents (1.2M) or as an array RxC; default: the --array machine's.")
@click.option("--sweep", type=click.IntRange(min=0), default=None, metavar="N",
              help="With --hardware: after the search, price every machine of the space "
                   "within the budget for the N cheapest legal networks (default 3; 0: "
                   "none).")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="OUTDIR: chosen.gs/.npz, candidates.json, report.md, pareto.png "
                   "(and machine.json with --hardware).")
def nas_command(model: Path, train_path: Path, val_path: Path, array_size: str,
                dram_bandwidth: int, budget: int,
                space: str, legality: str, threshold: float, band: float, cost: str,
                train_epochs: int, train_seeds: int, top: int, retrain: int, descent: int,
                seed: int, strategy: str, workers: int, scheduler: str | None,
                hardware: str | None, area_budget: str | None, sweep: int | None,
                output: Path) -> None:
    """Search MODEL's transformations for the fewest predicted cycles at kept accuracy."""
    nas_commands.search(model, train_path, val_path, array_size, budget, space, legality,
                        threshold, band, cost, train_epochs, top, seed, strategy, workers,
                        scheduler, output, dram_bandwidth, hardware, area_budget, train_seeds,
                        descent, sweep, retrain)


# Every stage walks terms recursively somewhere (parsing, printing, lowering); a program
# written as one deeply nested expression (thousands of layers without `let`) needs more
# than Python's default 1000 frames. Python-to-Python calls do not use the C stack in 3.11.
RECURSION_LIMIT = 20_000


def _exit_interrupted(message: str, code: int) -> NoReturn:
    """Exit with `code` now. Cleanup already ran as the exception unwound; a normal exit
    could still end in SIGINT: CPython re-raises a KeyboardInterrupt it saw escape code it
    ran for an extension (egglog) as a kill by SIGINT at shutdown, hiding our exit code."""
    click.echo(message, err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    raise_on_sigterm()  # so staging files are cleaned up on SIGTERM too
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # click's form of KeyboardInterrupt
        _exit_interrupted("interrupted", 130)
    except Terminated:
        _exit_interrupted("terminated", 143)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except GlensideError as error:
        click.echo(str(error), err=True)
        sys.exit(1)
    except RecursionError:
        click.echo(f"error: the program nests more than about {RECURSION_LIMIT} levels deep; "
                   "name intermediate results with (let name expr)", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        _exit_interrupted("interrupted", 130)


if __name__ == "__main__":
    main()
