"""The compiler's stage sequence, in one place:

    parse → typecheck → rewrite → extract → lower → plan → emit

  parse      lang.syntax      program text → `Program`
  typecheck  lang.typecheck   `Program` → `TypeTable`, once: later stages receive the types
  rewrite    opt.rewrite      an e-graph saturated with the rulesets (one product region at
                              a time, cut out by opt.regions, when there are several)
  extract    opt.extract      `Compiled`: the cheapest program under the cycle model, typed
  lower      backend.lower    `LoweredProgram`: buffers, views, instructions
  plan       backend.plan     `MemoryPlan`: offsets
  emit       backend.emit     the C program's directory

`load` runs parse and typecheck, `compile_program` rewrite and extract, and
`compile_to_directory` lower, plan and emit; the command line (`glensidec compile`) and the
Python API (`glensidec.compile`) call these three in turn. The program is type-checked once,
after parsing: rewriting takes those types, and extraction returns the types of the program
it extracts, which lowering takes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from glensidec import progress
from glensidec.backend.accel_passes import fuse_for_accelerator
from glensidec.backend.emit import emit_directory, predicted_cycles
from glensidec.backend.lower import AccelLayer, LoweredProgram, LowerOptions, lower_program
from glensidec.backend.plan import MemoryPlan, plan_memory
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import AccelConfig
from glensidec.lang import data
from glensidec.lang.constructs import Group
from glensidec.lang.dtypes import Array
from glensidec.lang.expand import expand_accelerated, expand_program, needs_expansion
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import Arg, Program, Term, postorder
from glensidec.lang.typecheck import AccessType, TupleType, TypeTable, check_program, infer
from glensidec.opt.extract import (
    Compiled,
    array_target,
    check_runnable,
    check_written_arrays,
    class_names,
    extract_checked,
    new_graph,
    predict,
    unique_names,
)
from glensidec.opt.regions import (
    Canonical,
    canonical_region,
    compiled_term,
    is_product,
    product_region,
    rebuild,
    splice,
)
from glensidec.opt.rewrite import RULESETS, ArrayTarget, EGraph, Limits, Stats

# -- parse, typecheck -------------------------------------------------------------------


@dataclass(frozen=True)
class Typed:
    """A parsed program and its types: what every later stage starts from."""

    program: Program
    types: TypeTable


def load(path: str | Path, shapes: str | Path | None = None) -> Typed:
    """Parse and type-check a program file (`shapes`: compatibility mode's JSON)."""
    program = read_program(path, shapes)
    return Typed(program, check_program(program))


# -- rewrite, extract -------------------------------------------------------------------


def compile_program(program: Program, config: ArrayConfig, limits: Limits | None = None,
                    rulesets: tuple[str, ...] = RULESETS,
                    types: TypeTable | None = None,
                    more_arrays: tuple[ArrayConfig, ...] = ()) -> Compiled:
    """Saturate `program` with `rulesets` for `config`'s array and extract the cheapest
    (`types`: the program's, when the caller has checked it already; `more_arrays`: further
    arrays the extractor may pick instead, product by product, `--array R1xC1,R2xC2`).

    A program with one dot-product is saturated whole. With several, each product and the
    views it reads is saturated in an e-graph of its own (`compile_by_region`): every rule
    matches one product and views below it, so nothing is lost, and the e-graph, the
    limits and the time grow with the largest layer instead of with the whole network.
    """
    start = time.perf_counter()
    target = array_target(config, more_arrays)
    check_written_arrays(program, target)  # before expansion: the user's own terms, located
    if needs_expansion(program.root):  # tuples, conv2d modes: compiled as their expansion
        program, types = expand_program(program), None
    types = check_program(program) if types is None else types
    products = [term for term in postorder(program.root) if is_product(term)]
    graph = new_graph(program, types, products, target, rulesets)
    if len(products) > 1:
        return compile_by_region(program, types, products, graph, config, limits or Limits(),
                                 start, target)
    root_name = graph.add(program.root, types)
    encoded = time.perf_counter()
    stats = graph.saturate(limits or Limits())
    saturated = time.perf_counter()
    root, cost, new_types = extract_checked(graph, root_name, program.tensors, target)
    names = unique_names(class_names(graph, program.names, root), root)
    extracted = replace(program, root=root, names=names)
    prediction = predict(root, new_types, config.acc_width)
    seconds = {"encode": encoded - start, "saturate": saturated - encoded,
               "extract": time.perf_counter() - saturated}
    return Compiled(program, extracted, stats, cost, prediction, graph, new_types, types,
                    seconds)


def compile_by_region(program: Program, types: TypeTable, products: list[Term],
                      graph: EGraph, config: ArrayConfig, limits: Limits,
                      start: float, target: ArrayTarget) -> Compiled:
    """Saturate and extract every product region in turn, then splice the results into the
    program. --iterations, --max-enodes and --timeout apply to each region, so a region's
    result does not depend on how long the regions before it took (on a loaded machine a
    shared time budget ran out at different layers from run to run). A region equal to an
    earlier one up to its tensors' names (`canonical_region`) reuses that one's extraction:
    a network repeats its layer shapes."""
    compiled: dict[Term, Term] = {}  # every term rebuilt so far, products compiled
    region_names: dict[Term, str] = {}  # extracted region terms (spliced) → the user's names
    region_stats: list[Stats] = []
    extracted: dict[tuple[object, ...], _Extracted] = {}  # canonical region → its result
    seconds = {"encode": 0.0, "saturate": 0.0, "extract": 0.0}
    cost = 0
    for product in progress.iterate(products, len(products), "compiling", "layer"):
        region = product_region(product, types, program.tensors)
        named = {region.of_program[term]: name for term, name in program.names.items()
                 if term in region.of_program and term not in region.boundaries.values()}
        canonical = canonical_region(region)
        key = canonical.key(list(named))
        result = extracted.get(key)
        if result is None:
            result = _compile_region(graph, canonical, [canonical.of_region[t] for t in named],
                                     limits, target, seconds)
            extracted[key] = result
            region_stats.append(result.stats)
        else:
            region_stats.append(replace(result.stats, seconds=0.0, ruleset_seconds={},
                                        matches={}, reused=1))
        term, restored = canonical.restore(result.term)
        own_names = list(named.values())
        names = {restored[sub]: own_names[index] for sub, index in result.named_by.items()}
        operands = {name: compiled_term(boundary, compiled)
                    for name, boundary in region.boundaries.items()}
        spliced: dict[Term, Term] = {}
        compiled[product] = splice(region, term, operands, types, spliced)
        region_names.update((spliced[term], name) for term, name in names.items())
        cost += result.cost
    root = compiled_term(program.root, compiled)
    new_types = infer(root, program.tensors)
    check_runnable(root, new_types, target)
    # Outside the regions a term is rebuilt from the program's own (`compiled`): its name
    # follows it. Inside, names follow e-classes (`class_names`).
    rebuilt = {compiled[term]: name for term, name in program.names.items() if term in compiled}
    names = unique_names({**region_names, **rebuilt}, root)  # a term of its own wins
    extracted_program = replace(program, root=root, names=names)
    seconds["encode"] += time.perf_counter() - start - sum(seconds.values())  # the rest
    return Compiled(program, extracted_program, Stats.combine(region_stats), cost,
                    predict(root, new_types, config.acc_width), graph, new_types, types, seconds)


#: The rulesets of `compile --accel`: not the `depthwise` rewrites, whose block-diagonal
#: array calls read host-built im2col matrices and leave the epilogue after their
#: concatenation on the host; the backend makes a depthwise convolution one grouped
#: accelerator layer instead (backend/accel_depthwise.py).
ACCEL_RULESETS = tuple(name for name in RULESETS if name != "depthwise")


def fuse_epilogues(compiled: Compiled, config: ArrayConfig) -> Compiled:
    """The `epilogue` ruleset over the whole extracted program: every bias add, requantize
    and clip after an array call becomes an `accel-epilogue`, and a max-pool of its result
    an `accel-max-pool` (compile --accel).

    It runs after extraction, not in the product regions: a region is a product and the
    views below it, and the epilogue is above. The e-graph holds just the extracted
    program, so saturation is quick; extraction then prefers the fused forms, which cost
    no host cycles (the epilogue works as the rows stream out of the array).
    """
    start = time.perf_counter()
    program, types = compiled.program, compiled.types
    target = array_target(config)
    graph = new_graph(program, types, [], target, ("epilogue",))
    root_name = graph.add(program.root, types)
    graph.run_ruleset("reach", saturate=True)
    stats = graph.saturate(Limits())
    root, _, new_types = extract_checked(graph, root_name, program.tensors, target)
    # The user's names follow structure: expanding the epilogues gives back the program's
    # own terms (`class_names` would re-add the whole network to ask egglog). Each rebuilt
    # term is swapped for the program's own object, so comparing the next one up is shallow.
    own = {term: term for term in postorder(program.root)}

    def original(term: Term, args: tuple[Arg, ...]) -> Term:
        rebuilt = Term(term.op, args)
        rebuilt = expand_accelerated(rebuilt) if term.op in Group.ACCELERATOR else rebuilt
        return own.get(rebuilt, rebuilt)

    original_of: dict[Term, Term] = {}
    rebuild(root, original, rebuilt=original_of)
    names = unique_names({term: program.names[original] for term, original in
                          original_of.items() if original in program.names}, root)
    seconds = dict(compiled.seconds)
    seconds["epilogue"] = time.perf_counter() - start
    # (the extraction cost stays the regions': this e-graph's tree cost counts every
    # shared subterm once per use, which for a residual network means little)
    return replace(compiled, program=replace(program, root=root, names=names),
                   types=new_types, prediction=predict(root, new_types, config.acc_width),
                   seconds=seconds,
                   stats=replace(compiled.stats,
                                 matches={**compiled.stats.matches, **stats.matches}))


@dataclass(frozen=True)
class _Extracted:
    """One canonical region's extraction: the term, its cost, the run's stats, and which
    of its subterms carry the name of which named region term (by index)."""

    term: Term
    cost: int
    stats: Stats
    named_by: dict[Term, int]


def _compile_region(graph: EGraph, region: Canonical, named: list[Term], limits: Limits,
                    target: ArrayTarget, seconds: dict[str, float]) -> _Extracted:
    """Saturate and extract one region in a fresh e-graph with `graph`'s rules
    (`EGraph.fresh` says why not egglog's push and pop); adds its stage times to
    `seconds`. `named`: the region terms with `let` names, whose e-classes name the
    extracted term's subterms (`class_names`)."""
    began = time.perf_counter()
    graph = graph.fresh()
    root_name = graph.add(region.root, infer(region.root, region.tensors))
    encoded = time.perf_counter()
    stats = graph.saturate(limits)
    saturated = time.perf_counter()
    term, cost, _ = extract_checked(graph, root_name, region.tensors, target)
    named_by = class_names(graph, {t: i for i, t in enumerate(named)}, term)
    seconds["encode"] += encoded - began
    seconds["saturate"] += saturated - encoded
    seconds["extract"] += time.perf_counter() - saturated
    return _Extracted(term, cost, stats, named_by)


# -- lower, plan, emit ------------------------------------------------------------------


def parse_bytes(text: str, option: str) -> int:
    """`256KiB`, `256K`, `1MiB`, `4096` → bytes (K = KiB = 1024, M = MiB = 1024²)."""
    match = re.fullmatch(r"\s*(\d+)\s*(k|kib|m|mib|b)?\s*", text, re.IGNORECASE)
    if match is None:
        raise GlensideError(f"{option} takes a size in bytes such as 256KiB or 65536, "
                            f"got '{text}'")
    unit = (match.group(2) or "b").lower()[0]
    return int(match.group(1)) * {"b": 1, "k": 1024, "m": 1024**2}[unit]


def accelerator_for(config: ArrayConfig, scratchpad: str = "256KiB",
                    accumulator: str | None = None, dram_bandwidth: int = 16) -> AccelConfig:
    """The accelerator around the array, from --scratchpad, --accumulator, --dram-bandwidth
    (the defaults: 256 KiB, 1024 accumulator rows, 16 B/cycle).

    Every size is checked here, once, against what the RTL can have (the command fields'
    widths: glensidec.hardware.commands.accel_config_for) and what one tile needs, so the
    C sized from it builds: bad sizes are input errors that name them.
    """
    from glensidec.hardware.accel import CapacityError
    from glensidec.hardware.commands import accel_config_for, gemm_tiling

    acc_depth = config.acc_depth
    if accumulator is not None:
        size, row = parse_bytes(accumulator, "--accumulator"), config.cols * 4
        if size % row or size // row < 2:
            raise GlensideError(f"--accumulator {accumulator}: the accumulator holds rows of "
                                f"{config.cols} int32 ({row} B) and at least 2 of them; "
                                f"{size} B is not a whole number of rows ≥ 2")
        acc_depth = size // row
    try:
        accel = accel_config_for(config, parse_bytes(scratchpad, "--scratchpad"),
                                 dram_bandwidth, acc_depth=acc_depth)
        gemm_tiling(accel, 1, config.rows, config.cols, "tile")
    except CapacityError as error:  # "layer tile: …": every array call has such a tile
        raise GlensideError(f"--scratchpad {scratchpad}: {str(error).split(': ', 1)[1]}") \
            from None
    except ValueError as error:
        option = (f"--dram-bandwidth {dram_bandwidth}" if "bandwidth" in str(error)
                  else f"--accumulator {accumulator or f'{acc_depth} rows (the default)'}"
                  if "accumulator" in str(error) else f"--scratchpad {scratchpad}")
        raise GlensideError(f"{option}: {error}") from None
    return accel


@dataclass(frozen=True)
class Target:
    """Which machine a program's matrix products run on, and why (`compile_target`)."""

    line: str  # one line, e.g. "f32 program: compiled for the bare 16x16 binary32 array"
    takes_all: bool  # every product runs on the target (none falls to the host by dtype)


def compile_target(program: Program, types: TypeTable, configs: tuple[ArrayConfig, ...],
                   accel: bool) -> Target:
    """The one line `compile` says about where `program` runs: the whole accelerator (int8
    products with their epilogues), the bare int8 array, or the bare binary32 array take
    only products of their operand dtype; the rest run on the host, and the line says why
    and which option would take them."""
    from glensidec.opt.extract import input_dtype

    dtypes = sorted(_product_dtypes(program, types))
    config = configs[0]
    taken = input_dtype(config)
    size = ",".join(f"{c.rows}x{c.cols}" for c in configs)
    machine = ("the whole accelerator" if accel else
               f"the bare {size} {'binary32' if config.is_float else 'int8'} "
               f"array{'s' if len(configs) > 1 else ''}")
    if not dtypes:
        return Target("program without matrix products: it runs on the host", True)
    label = f"{' and '.join(dtypes)} program"
    host = [dtype for dtype in dtypes if dtype != taken]
    other = (f"--array {config.rows}x{config.cols}:f32{' without --accel' if accel else ''} "
             "for the binary32 array" if "f32" in host
             else f"--array {config.rows}x{config.cols} for the int8 array" if "i8" in host
             else "")
    verb = "multiply" if len(configs) > 1 and not accel else "multiplies"
    why = f"{machine} {verb} {taken} operands only" + (f" ({other})" if other else "")
    if taken not in dtypes:
        return Target(f"{label}: its products run on the host: {why}", False)
    line = f"{label}: compiled for {machine}"
    if host:
        return Target(f"{line}; its {'/'.join(host)} products run on the host: {why}", False)
    return Target(line, True)


def _product_dtypes(program: Program, types: TypeTable) -> set[str]:
    """The operand dtypes of the program's matrix products (dot-products, and array
    constructs written as such)."""
    dtypes: set[str] = set()
    for term in postorder(program.root):
        if is_product(term):
            operands = term.args[1]
        elif term.op in Group.HARDWARE:
            operands = term.args[2]
        else:
            continue
        assert isinstance(operands, Term)
        value = types[operands]
        if isinstance(value, TupleType):  # a dot-product of tuple members
            dtypes.update(member.dtype for member in value.members)
        elif isinstance(value, AccessType):
            dtypes.add(value.dtype)
    return dtypes


def require_no_epilogue(program: Program) -> None:
    """`accel-epilogue` and `accel-max-pool` need the whole accelerator: the bare array has
    no epilogue and no pooling stores (and extraction counts their work as free)."""
    for term in postorder(program.root):
        if term.op in Group.ACCELERATOR:
            raise GlensideError(f"{term.op} runs on the whole accelerator: compile with "
                                "--accel", term.span, program.path)


@dataclass(frozen=True)
class CompileResult:
    outdir: Path
    lowered: LoweredProgram
    plan: MemoryPlan
    predicted_cycles: int  # Σ hardware.gemm_cycles over the array calls of one run
    accel_cycles: int = 0  # Σ the accelerator layers' cycles (compile --accel)
    # host instructions an accel-epilogue or accel-max-pool lowered to that no accelerator
    # layer took in (e.g. a bias that varies down a column, weights that are not constant)
    host_epilogues: int = 0


def compile_to_directory(program: Program, types: TypeTable, outdir: str | Path,
                         config: ArrayConfig, options: LowerOptions | None = None,
                         weights: dict[str, Array] | None = None,
                         force: bool = False,
                         more_arrays: tuple[ArrayConfig, ...] = (),
                         accel: AccelConfig | None = None) -> CompileResult:
    """Lower, plan and emit `program` (with its `types`) as a C program in `outdir`.

    `weights` defaults to the program's weight files (glensidec.lang.data.load_weights).
    `force`: replace glensidec's own files in an OUTDIR that also holds others.
    `more_arrays`: the further arrays of a program that uses several sizes (`config` is
    the main one); the C calls each on its own.
    `accel`: run array calls with their bias, requantize and clip as accelerator layers
    (glensidec.backend.accel_layers) on this accelerator around `config`.
    """
    if accel is None:
        require_no_epilogue(program)
    weights = data.load_weights(program) if weights is None else weights
    # The binary32 array multiplies f32 operands; the int8 one i8.
    options = replace(options or LowerOptions(), array_dtype="f32" if config.is_float else "i8")
    lowered = lower_program(program, types, options)
    if accel is not None:  # the accelerator's layers, and the host's loops around them
        lowered = fuse_for_accelerator(lowered, weights, accel)
    plan = plan_memory(lowered)
    emit_directory(program, lowered, plan, Path(outdir), config, weights, force, more_arrays,
                   accel)
    return CompileResult(Path(outdir), lowered, plan,
                         predicted_cycles(lowered, config, more_arrays),
                         sum(layer.cycles for layer in lowered.accel_layers()),
                         sum(1 for instruction in lowered.instructions
                             if instruction.note.startswith(ACCELERATOR_NOTES)
                             and not isinstance(instruction, AccelLayer)))


# How the notes of an accelerator construct's instructions begin (`lower.describe`).
ACCELERATOR_NOTES = tuple(f"({name} " for name in sorted(Group.ACCELERATOR))
