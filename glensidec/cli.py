"""The `glensidec` command line.

Exit codes: 0 success, 1 an error in the user's input (one line on stderr, no traceback),
2 a usage error (click's own), 130 interrupted (SIGINT), 143 terminated (SIGTERM).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from glensidec import __version__
from glensidec.errors import GlensideError
from glensidec.lang import data
from glensidec.lang.interp import run_program
from glensidec.lang.syntax import format_program, read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program, root_type
from glensidec.outputs import (
    Terminated,
    check_output_directory,
    check_writable_file,
    raise_on_sigterm,
    write_file,
)

PROGRAM = click.argument("program", type=click.Path(dir_okay=False, path_type=Path))
SHAPES = click.option("--shapes", type=click.Path(dir_okay=False, path_type=Path),
                      help="Compatibility mode: a JSON file {\"name\": [dims]} declaring inputs.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="glensidec")
def cli() -> None:
    """glensidec: compile Glenside tensor programs onto a systolic array."""


def _load(program_path: Path, shapes: Path | None) -> Program:
    return read_program(program_path, shapes)


@cli.command()
@PROGRAM
@SHAPES
def check(program: Path, shapes: Path | None) -> None:
    """Parse and type-check PROGRAM; print its result's access shape and dtype."""
    parsed = _load(program, shapes)
    result = root_type(parsed, check_program(parsed))
    click.echo(f"{result} {result.dtype}")


@cli.command()
@PROGRAM
@SHAPES
@click.option("--input", "input_options", multiple=True, metavar="NAME=FILE.npy",
              help="A runtime input (repeat for each).")
@click.option("--random-inputs", type=int, metavar="SEED",
              help="Fill every runtime input with seeded random data.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the result here as .npy (default: print it).")
def run(program: Path, shapes: Path | None, input_options: tuple[str, ...],
        random_inputs: int | None, output: Path | None) -> None:
    """Run PROGRAM with the reference interpreter."""
    parsed = _load(program, shapes)
    types = check_program(parsed)
    if input_options and random_inputs is not None:
        raise click.UsageError("give --input or --random-inputs, not both")
    if random_inputs is not None:
        inputs = data.random_inputs(parsed, random_inputs)
    else:
        inputs = data.load_inputs(parsed, data.parse_input_options(input_options))
    result = run_program(parsed, data.all_tensors(parsed, inputs), types)
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
    text = format_program(parsed)
    if in_place:
        write_file(program, text)
    else:
        click.echo(text, nl=False)


@cli.command(name="compile")
@PROGRAM
@SHAPES
@click.option("--array", "array_size", required=True, metavar="RxC",
              help="The systolic array to map onto, e.g. 16x16.")
@click.option("--emit", type=click.Choice(["c", "rewritten", "egraph"]),
              help="What to write: the C program (the default with -o), the rewritten "
                   "program (the default without -o), or the e-graph (graphviz).")
@click.option("--stats", is_flag=True, help="Report the run and the predicted cycles on stderr.")
@click.option("--verify", is_flag=True,
              help="Run the original and the rewritten program on random inputs and compare.")
@click.option("--iterations", type=click.IntRange(min=0), default=30, show_default=True)
@click.option("--max-enodes", type=click.IntRange(min=1), default=50_000, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0), default=10.0, show_default=True,
              metavar="S", help="Seconds of saturation before extracting the best so far.")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="OUTDIR for the C program (new, empty, or an earlier compile's); a file "
                   "for --emit rewritten|egraph (.svg renders the e-graph).")
@click.option("--force", is_flag=True,
              help="Replace glensidec's own files in an OUTDIR that also holds others.")
def compile_command(program: Path, shapes: Path | None, array_size: str, emit: str | None,
                    stats: bool, verify: bool, iterations: int, max_enodes: int,
                    timeout: float, output: Path | None, force: bool) -> None:
    """Map PROGRAM onto an RxC systolic array; write the C program to OUTDIR.

    `make -C OUTDIR` builds OUTDIR/model; `make -C OUTDIR sim` co-simulates it on the RTL.
    Without -o, print the rewritten program instead.
    """
    from glensidec.backend.emit import compile_to_directory
    from glensidec.opt.extract import (
        compile_program,
        egraph_dot,
        egraph_svg,
        parse_array_size,
        validate,
    )
    from glensidec.opt.rewrite import Limits

    emit = emit or ("c" if output is not None else "rewritten")
    if emit == "c" and output is None:
        raise click.UsageError("--emit c writes a directory: give -o OUTDIR")
    if emit == "c" and output is not None:
        check_output_directory(output, force=force)  # before any work: refuse early
    elif output is not None:
        check_writable_file(output)
    config = parse_array_size(array_size)
    parsed = _load(program, shapes)
    compiled = compile_program(parsed, config, Limits(iterations, max_enodes, timeout))
    if stats:
        for line in compiled.report_lines(config):
            click.echo(line, err=True)
    if verify:
        validate(parsed, compiled.program)
        click.echo("verified: the rewritten program computes the same result", err=True)
    if emit == "c":
        assert output is not None
        result = compile_to_directory(compiled.program, compiled.types, output,
                                      config, force=force)
        click.echo(f"wrote {output}: {len(result.lowered.instructions)} instructions, "
                   f"predicted array cycles {result.predicted_cycles}")
        return
    if emit == "egraph":
        text = egraph_dot(compiled.graph)
        text = egraph_svg(text) if output is not None and output.suffix == ".svg" else text
    else:
        rewritten = compiled.program if output is None else compiled.program.moved_to(output)
        text = format_program(rewritten)
    if output is not None:
        write_file(output, text)
    else:
        click.echo(text, nl=False)


def _register_front_ends() -> None:
    # The importer and the quantizer define their own commands next to their code.
    from glensidec.frontends.importer import import_command
    from glensidec.frontends.quantize import quantize_command
    from glensidec.nas.commands import nas_command, transform_command

    cli.add_command(import_command)
    cli.add_command(quantize_command)
    cli.add_command(transform_command)
    cli.add_command(nas_command)


_register_front_ends()


# Every stage walks terms recursively somewhere (parsing, printing, lowering); a program
# written as one deeply nested expression (thousands of layers without `let`) needs more
# than Python's default 1000 frames. Python-to-Python calls do not use the C stack in 3.11.
RECURSION_LIMIT = 20_000


def main() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    raise_on_sigterm()  # so staging files are cleaned up on SIGTERM too
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:  # click's form of KeyboardInterrupt
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Terminated:
        click.echo("terminated", err=True)
        sys.exit(143)
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
        sys.exit(130)


if __name__ == "__main__":
    main()
