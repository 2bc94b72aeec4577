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
from dataclasses import dataclass, field, replace
from pathlib import Path

from glensidec import progress
from glensidec.backend.accel_passes import fuse_for_accelerator
from glensidec.backend.emit import emit_directory, predicted_cycles
from glensidec.backend.lower import (
    AccelLayer,
    Copy,
    Fill,
    LoweredProgram,
    LowerOptions,
    lower_program,
)
from glensidec.backend.plan import MemoryPlan, plan_memory
from glensidec.backend.report import (
    MachineCycles,
    ReportData,
    machine_cycles,
    report_data,
    totals,
)
from glensidec.collector import without_cycle_collection
from glensidec.errors import GlensideError
from glensidec.hardware.array import ArrayConfig
from glensidec.hardware.commands import AccelConfig
from glensidec.lang import data
from glensidec.lang.constructs import ACCESS, CONSTRUCTS, Group
from glensidec.lang.dtypes import Array
from glensidec.lang.expand import expand_accelerated, expand_program, needs_expansion
from glensidec.lang.syntax import read_program
from glensidec.lang.terms import (
    Arg,
    ComputeOp,
    Program,
    Symbol,
    Term,
    compute_name,
    postorder,
)
from glensidec.lang.typecheck import AccessType, TupleType, TypeTable, check_program, infer
from glensidec.opt.batch import split_images
from glensidec.opt.extract import (
    Compiled,
    array_target,
    check_runnable,
    check_written_arrays,
    class_names,
    extract_checked,
    graph_for,
    new_graph,
    predict,
    unique_names,
)
from glensidec.opt.regions import (
    NAMING,
    Canonical,
    canonical_region,
    compiled_term,
    cut_region,
    is_product,
    product_region,
    rebuild,
    splice,
)
from glensidec.opt.regions import boundaries as boundaries_of
from glensidec.opt.rewrite import (
    ROW_VIEWS,
    RULESETS,
    ArrayTarget,
    EGraph,
    Limits,
    Profile,
    Stats,
)

# -- parse, typecheck -------------------------------------------------------------------


@dataclass(frozen=True)
class Typed:
    """A parsed program and its types: what every later stage starts from."""

    program: Program
    types: TypeTable


@without_cycle_collection
def load(path: str | Path, shapes: str | Path | None = None) -> Typed:
    """Parse and type-check a program file (`shapes`: compatibility mode's JSON)."""
    program = read_program(path, shapes)
    return Typed(program, check_program(program))


# -- rewrite, extract -------------------------------------------------------------------


#: A program is saturated whole only while, written out as a tree, it has at most this many
#: terms: egglog's extraction materialises the tree, and a DAG that reads a term twice per
#: level (a residual chain) doubles it with every level (40 levels took 16 GB).
WHOLE_TREE_LIMIT = 100_000


def tree_size(root: Term, limit: int) -> int:
    """How many terms `root` has written out as a tree, counted up to just past `limit`."""
    sizes: dict[Term, int] = {}
    for term in postorder(root):
        sizes[term] = min(limit + 1, 1 + sum(sizes[child] for child in term.children()))
    return sizes[root]


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
    So is a program too deep to extract whole (`WHOLE_TREE_LIMIT`), with one product or
    none: what is not a product's region is kept as written.
    """
    start = time.perf_counter()
    target = array_target(config, more_arrays)
    check_written_arrays(program, target)  # before expansion: the user's own terms, located
    if needs_expansion(program.root):  # tuples, conv2d modes: compiled as their expansion
        program, types = expand_program(program), None
    types = check_program(program) if types is None else types
    products = [term for term in postorder(program.root) if is_product(term)]
    graph = new_graph(program, types, products, target, rulesets)
    if len(products) > 1 or tree_size(program.root, WHOLE_TREE_LIMIT) > WHOLE_TREE_LIMIT:
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
    rank = {term: index for index, term in enumerate(program.names)}  # (the names' order)
    for product in progress.iterate(products, len(products), "compiling", "layer"):
        region = product_region(product, types, program.tensors)
        # the region's named terms, in the names' order (a region holds a few terms, a
        # program thousands of names: a swin_t's 1,877 regions went through all of them)
        cut = set(region.boundaries.values())
        named = {region.of_program[term]: program.names[term] for term in
                 sorted((term for term in region.of_program
                         if term in rank and term not in cut), key=rank.__getitem__)}
        canonical = canonical_region(region)
        # a named view inside a region leaf (a chunk of a tensor, regions.py) is not in the
        # canonical region: it keeps its name where the leaf is restored, below
        hidden = {term: name for term, name in named.items()
                  if term not in canonical.of_region}
        named = {term: name for term, name in named.items() if term not in hidden}
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
        region_names.update((spliced[term], name) for term, name in hidden.items()
                            if term in spliced)
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
    """The `epilogue` ruleset over the extracted program: every bias add, requantize and
    clip after an array call becomes an `accel-epilogue`, and a max-pool of its result an
    `accel-max-pool` (the accelerator target's stage after extraction).

    It runs after extraction, not in the product regions: a region is a product and the
    views below it, and the epilogue is above. It runs one neighbourhood at a time
    (`epilogue_regions`): each array call's operands and every computed term used twice
    are placeholders, so an e-graph holds one layer's epilogue, however big the network
    (over a whole transformer at once, egglog's extracted tree repeats the shared
    residual stream exponentially). Extraction then prefers the fused forms, which cost
    no host cycles (the epilogue works as the rows stream out of the array).
    """
    start = time.perf_counter()
    program, types = compiled.program, compiled.types
    target = array_target(config)
    regions = []  # (the top term, its region, its canonical form, multipliers by sentinel)
    for top, below in epilogue_regions(program.root):
        region = cut_region(top, below, types, program.tensors)
        # A region no epilogue rule can match is its own extraction (the rules' unions
        # are the only ones in this e-graph): it stays as written, rebuilt over its fused
        # operands like every term outside the regions (below). Swin_t's attention
        # concatenations are 964 of its 967 regions: canonicalising, restoring and
        # splicing each was 13 % of the stage.
        if not _epilogue_may_match(region.root):
            continue
        canonical = canonical_region(region)
        sentinel_root, multipliers = _sentinel_multipliers(canonical.root)
        regions.append((top, region, replace(canonical, root=sentinel_root), multipliers))
    # One e-graph for all regions, with rules for the requantizes they hold as sentinels
    # (rules are generated per requantize text; a network has hundreds of multipliers,
    # and egglog's memory grows faster than the rule count: 64 texts took 1 GB).
    # Distinct regions, saturated EPILOGUE_BATCH at a time in one fresh e-graph (a fresh
    # e-graph per region, `EGraph.fresh`, cost more than the rules' work), each region's
    # tensors prefixed so that the regions of a batch stay apart.
    distinct: dict[tuple[object, ...], Canonical] = {}
    for _, _, canonical, _ in regions:
        distinct.setdefault(canonical.key([]), canonical)
    done: dict[tuple[object, ...], Term] = {}  # canonical region → its extracted term
    keys = list(distinct)
    profile = Profile.of(program.root, types)
    # (equal regions profile alike: each distinct one once)
    region_profiles = [Profile.of(c.root, infer(c.root, c.tensors)) for c in distinct.values()]
    profile = replace(profile, requantizes=frozenset().union(
        *(p.requantizes for p in region_profiles)), accesses=profile.accesses.union(
        *(p.accesses for p in region_profiles)))
    graph = graph_for(profile, target, ("epilogue",))
    region_stats: list[Stats] = []
    for first in range(0, len(keys), EPILOGUE_BATCH):
        batch = keys[first:first + EPILOGUE_BATCH]
        region_stats.append(_saturate_batch(graph, [distinct[key] for key in batch], target,
                                            done, batch))
    fused: dict[Term, Term] = {}  # program term → its fused form (the memo of the splices)
    for top, region, canonical, multipliers in regions:
        term, _ = canonical.restore(_restore_multipliers(done[canonical.key([])], multipliers))
        operands = {name: compiled_term(boundary, fused)
                    for name, boundary in region.boundaries.items()}
        fused[top] = splice(region, term, operands, types)
    root = compiled_term(program.root, fused)
    new_types = infer(root, program.tensors)
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
    stats = Stats.combine(region_stats) if region_stats else Stats("saturated", 0, 0, 0.0)
    # (the extraction cost stays the regions': the epilogue's fused forms cost no cycles)
    return replace(compiled, program=replace(program, root=root, names=names),
                   types=new_types, prediction=predict(root, new_types, config.acc_width),
                   seconds=seconds,
                   stats=replace(compiled.stats,
                                 matches={**compiled.stats.matches, **stats.matches}))


EPILOGUE_BATCH = 16  # distinct epilogue regions saturated together in one e-graph


def _saturate_batch(graph: EGraph, batch: list[Canonical], target: ArrayTarget,
                    done: dict[tuple[object, ...], Term], keys: list[tuple[object, ...]]
                    ) -> Stats:
    """Saturate a batch of canonical regions in one fresh e-graph and extract each (into
    `done` under its key, in its canonical tensor names)."""
    fresh = graph.fresh()
    roots = []
    for index, canonical in enumerate(batch):
        prefix = f"b{index}-"
        names = {name: Symbol(prefix + name) for name in canonical.tensors}
        root = _rename_tensors(canonical.root, names)
        tensors = {prefix + name: replace(decl, name=prefix + name)
                   for name, decl in canonical.tensors.items()}
        roots.append((fresh.add(root, infer(root, tensors), f"$b{index}_"), tensors, prefix))
    fresh.run_ruleset("reach", saturate=True)
    stats = fresh.saturate(Limits(max_enodes=Limits().max_enodes * len(batch)))
    for key, (root_name, tensors, prefix) in zip(keys, roots, strict=True):
        term = extract_checked(fresh, root_name, tensors, target)[0]
        back = {name: Symbol(name[len(prefix):]) for name in tensors}
        done[key] = _rename_tensors(term, back)
    return stats


def _rename_tensors(root: Term, names: dict[str, Symbol]) -> Term:
    """`root` with the tensors `names` maps renamed."""

    def renamed(term: Term, args: tuple[Arg, ...]) -> Term | None:
        if term.op in NAMING and isinstance(term.args[0], Symbol) and \
                term.args[0].name in names:  # `shape-of` names its tensor too
            return Term(term.op, (names[term.args[0].name], *term.args[1:]))
        return None

    return rebuild(root, renamed)


def _sentinel_multipliers(root: Term) -> tuple[Term, dict[int, int]]:
    """`root` with each per-tensor requantize's multiplier replaced by a sentinel (1, 2, …
    in order of first use), and the multipliers by sentinel: regions that differ only in
    their multipliers become equal (one saturation serves them), and the e-graph needs
    rules for a few requantize texts, not for every multiplier of the network."""
    multipliers: dict[int, int] = {}
    sentinels: dict[int | float | str, int] = {}

    def replace_term(term: Term, args: tuple[Arg, ...]) -> Term | None:
        op = args[0] if term.op == "compute" else None
        if not (isinstance(op, ComputeOp) and op.name == "requantize"):
            return None
        multiplier = op.params[0]
        assert isinstance(multiplier, int)
        sentinel = sentinels.setdefault(multiplier, len(sentinels) + 1)
        multipliers[sentinel] = multiplier
        return Term("compute", (ComputeOp("requantize", (sentinel, *op.params[1:])), *args[1:]))

    return rebuild(root, replace_term), multipliers


def _restore_multipliers(root: Term, multipliers: dict[int, int]) -> Term:
    """The inverse of `_sentinel_multipliers` on an extracted region: in a requantize's
    parameters and in an `accel-epilogue`'s broadcast multiplier literal."""

    def literal(term: Term, args: tuple[Arg, ...]) -> Term | None:
        if term.op == "literal" and isinstance(args[0], int) and args[0] in multipliers:
            return Term("literal", (multipliers[args[0]], *args[1:]))
        return None

    def replace_term(term: Term, args: tuple[Arg, ...]) -> Term | None:
        op = args[0] if term.op == "compute" else None
        if isinstance(op, ComputeOp) and op.name == "requantize":
            assert isinstance(op.params[0], int)
            restored = ComputeOp("requantize", (multipliers[op.params[0]], *op.params[1:]))
            return Term("compute", (restored, *args[1:]))
        if term.op == "accel-epilogue" and isinstance(args[4], Term):
            return Term(term.op, (*args[:4], rebuild(args[4], literal)))
        return None

    return rebuild(root, replace_term)


# The views `array-rows` sees through to an array call's rows (`rewrite.epilogue_rules`).
_ROW_VIEWS = frozenset(view[1:].split()[0] for view in ROW_VIEWS.values())


def _epilogue_may_match(root: Term) -> bool:
    """Could a rule of `rewrite.epilogue_rules` match in the region `root`: a requantize
    of a bias add (`elementwise-add` of a pair) with `array-rows` in that pair (the
    per-channel requantize's pair first), or an accelerator construct already there (the
    clip and max-pool rules match only those)? The shape conditions of the rules are left
    out: a region they would refuse is saturated, as every region was.

    This restates the rules' patterns by hand (deriving it from their egglog text would
    need a matcher of that text; a coarser filter from their root constructs alone would
    saturate the regions with a requantize of no array call, most of swin_t's): a rule of
    a new kind must be added here too, and test_accel_epilogue's
    test_the_epilogue_filter_knows_every_kind_of_epilogue_rule fails until it is. The
    views that keep an array call's rows are the rules' own (rewrite.ROW_VIEWS)."""
    rows: set[Term] = set()  # the terms that are `array-rows`
    for term in postorder(root):
        if term.op in Group.ACCELERATOR:
            return True
        if term.op in Group.HARDWARE or (term.op in _ROW_VIEWS and term.args[0] in rows):
            rows.add(term)
        name = compute_name(term)
        if name not in ("requantize", "requantize-per-channel"):
            continue
        added = term.args[1]
        if name == "requantize-per-channel" and isinstance(added, Term) and \
                added.op == "access-pair":
            added = added.args[0]
        pair = added.args[1] if isinstance(added, Term) and \
            compute_name(added) == "elementwise-add" else None
        if isinstance(pair, Term) and pair.op == "access-pair" and \
                any(operand in rows for operand in pair.args):
            return True
    return False


# What an epilogue region may fuse: a requantize or clip above an array call, a max-pool.
_EPILOGUE_COMPUTES = frozenset({"requantize", "requantize-per-channel", "clip", "relu",
                                "reduce-max"})


def epilogue_regions(root: Term) -> list[tuple[Term, list[Term]]]:
    """The neighbourhoods the epilogue rules run in, in post-order: (region root, the terms
    below it that are placeholders). The program is cut at every array call's operands, at
    every computed term with several users (each such term roots a region of its own) and
    at every side branch without an array call (`_array_free_branches`); a region is kept
    only if it holds an array call and a compute that could fuse into its epilogue."""
    users: dict[Term, int] = {}
    array_operands: set[Term] = set()
    order = list(postorder(root))
    for term in order:
        for child in set(term.children()):
            users[child] = users.get(child, 0) + 1
        if term.op in Group.HARDWARE:
            array_operands.update(arg for arg in term.args if isinstance(arg, Term))
    tops = {term for term in order if term.op == "compute" and users.get(term, 0) > 1}
    tops |= {boundary for operand in array_operands for boundary in boundaries_of(operand)}
    tops.add(root)
    regions = []
    # (once: per top it was quadratic in the network)
    cuts = tops | array_operands
    cuts |= _array_free_branches(order, cuts)
    for top in (term for term in order if term in tops):
        below, inside = _cut_below(top, cuts)
        if any(term.op in Group.HARDWARE for term in inside) and any(
                compute_name(term) in _EPILOGUE_COMPUTES for term in inside):
            regions.append((top, below))
    return regions


def _array_free_branches(order: list[Term], cuts: set[Term]) -> set[Term]:
    """The maximal access subterms without an array call between them and `cuts` below a
    term with one (tensors and literals aside): placeholders of the epilogue regions. No
    epilogue rule rewrites such a branch (each fused form has an array call's rows inside,
    `array-rows`): a bias, a multiplier or a residual is copied into the fused form whole,
    so the region needs only its type. Without the cut, Swin's 408 softmax·V regions (each
    (window, head) divides by its own row of Σe: a slice at its own offset) were 408
    distinct saturations."""
    has_array: dict[Term, bool] = {}  # an array call in its region (above the cuts)
    branches: set[Term] = set()
    for term in order:  # (post-order: the children first)
        children = term.children()
        has_array[term] = term.op in Group.HARDWARE or any(
            has_array[child] for child in children if child not in cuts)
        if has_array[term]:
            branches.update(child for child in children
                            if not has_array[child] and child.op not in Group.LEAF
                            and CONSTRUCTS[child.op].result == ACCESS)
    return branches


def _cut_below(top: Term, cuts: set[Term]) -> tuple[list[Term], list[Term]]:
    """The members of `cuts` first reached below `top` (in order), and the terms between."""
    below: list[Term] = []
    inside: list[Term] = []
    seen = {top}
    stack = [top]
    while stack:
        term = stack.pop()
        inside.append(term)
        for child in term.children():
            if child in seen:
                continue
            seen.add(child)
            (below.append if child in cuts else stack.append)(child)
    return below, inside


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
                    accumulator: str | None = None, dram_bandwidth: int = 16,
                    epilogue_lanes: int = 0, write_rows: int = 1,
                    weight_load_rows: int = 1) -> AccelConfig:
    """The accelerator around the array, from --scratchpad, --accumulator, --dram-bandwidth,
    --epilogue-lanes, --dma-write-rows and --weight-load-rows (the defaults: 256 KiB, 1024
    accumulator rows, 16 B/cycle, a quarter of the columns, one row a DMA write, one
    weight row a cycle into the array).

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
                                 dram_bandwidth, acc_depth=acc_depth,
                                 epilogue_lanes=epilogue_lanes, write_rows=write_rows,
                                 weight_load_rows=weight_load_rows)
        gemm_tiling(accel, 1, config.rows, config.cols, "tile")
    except CapacityError as error:  # "layer tile: …": every array call has such a tile
        raise GlensideError(f"--scratchpad {scratchpad}: {str(error).split(': ', 1)[1]}") \
            from None
    except ValueError as error:
        option = (f"--dram-bandwidth {dram_bandwidth}" if "bandwidth" in str(error)
                  else f"--epilogue-lanes {epilogue_lanes}" if "lanes" in str(error)
                  else f"--weight-load-rows {weight_load_rows}" if "weight rows" in str(error)
                  else f"--dma-write-rows {write_rows}" if "DMA write" in str(error)
                  else f"--accumulator {accumulator or f'{acc_depth} rows (the default)'}"
                  if "accumulator" in str(error) else f"--scratchpad {scratchpad}")
        raise GlensideError(f"{option}: {error}") from None
    return accel


@dataclass(frozen=True)
class Placement:
    """Which machine a program's matrix products run on, and why (`compile_target`)."""

    line: str  # one line, e.g. "f32 program: compiled for the bare 16x16 binary32 array"
    takes_all: bool  # every product runs on the target (none falls to the host by dtype)


def compile_target(program: Program, types: TypeTable, configs: tuple[ArrayConfig, ...],
                   accel: bool) -> Placement:
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
        return Placement("program without matrix products: it runs on the host", True)
    label = f"{' and '.join(dtypes)} program"
    host = [dtype for dtype in dtypes if dtype != taken]
    other = (f"--array {config.rows}x{config.cols}:f32 for the binary32 array" if "f32" in host
             else f"--array {config.rows}x{config.cols} for the int8 array" if "i8" in host
             else "")
    verb = "multiply" if len(configs) > 1 and not accel else "multiplies"
    why = f"{machine} {verb} {taken} operands only" + (f" ({other})" if other else "")
    if taken not in dtypes:
        return Placement(f"{label}: its products run on the host: {why}", False)
    line = f"{label}: compiled for {machine}"
    if host:
        return Placement(f"{line}; its {'/'.join(host)} products run on the host: {why}", False)
    return Placement(line, True)


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
            raise GlensideError(f"{term.op} runs on the whole accelerator: compile without "
                                "--bare-array", term.span, program.path)


# -- the target: one pipeline, configured -------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a program compiles for. The default is the whole accelerator (`accel`: DMA,
    scratchpad, array, epilogue, pooling stores) around one int8 array; the bare array
    (`accel` None) is the same stages configured without the accelerator's: no epilogue
    rules after extraction, no accelerator passes after lowering."""

    config: ArrayConfig
    more_arrays: tuple[ArrayConfig, ...] = ()
    accel: AccelConfig | None = None
    why: str = ""  # why the bare array when the accelerator was not declined: "" otherwise

    @property
    def arrays(self) -> tuple[ArrayConfig, ...]:
        return (self.config, *self.more_arrays)

    def describe(self) -> str:
        """One line: which machine and why."""
        sizes = ",".join(f"{c.rows}x{c.cols}{':f32' if c.is_float else ''}"
                         for c in self.arrays)
        if self.accel is not None:
            return f"target: the whole accelerator around the {sizes} int8 array"
        return f"target: the bare {sizes} array{'s' if self.more_arrays else ''} ({self.why})"


# Why the bare array: the accelerator is int8 around one array.
BARE_ASKED = "--bare-array"
BARE_FLOAT = "the accelerator is int8; an f32 array is the bare binary32 array"
BARE_SEVERAL = "the accelerator has one array; several sizes run as bare arrays"


def choose_target(configs: tuple[ArrayConfig, ...], bare_array: bool = False,
                  scratchpad: str = "256KiB", accumulator: str | None = None,
                  dram_bandwidth: int = 16, epilogue_lanes: int = 0,
                  write_rows: int = 1, weight_load_rows: int = 1) -> Target:
    """The whole accelerator, unless the bare array is asked for or the arrays are ones the
    accelerator does not have (f32, several sizes). The memory options are checked either
    way, so a bad size is an error whatever the target."""
    config, more = configs[0], configs[1:]
    accel = accelerator_for(config, scratchpad, accumulator, dram_bandwidth, epilogue_lanes,
                            write_rows, weight_load_rows)
    if bare_array:
        return Target(config, more, None, BARE_ASKED)
    if config.is_float:
        return Target(config, more, None, BARE_FLOAT)
    if more:
        return Target(config, more, None, BARE_SEVERAL)
    return Target(config, (), accel)


@without_cycle_collection
def compile_for(typed: Typed, target: Target, limits: Limits | None = None) -> Compiled:
    """Rewrite and extract for the target's arrays, then (the accelerator) fuse epilogues.
    On the accelerator a batch of independent images is compiled as one copy per image
    (`opt.batch.split_images`): the accelerator's layers, pools and layouts take one image's
    views."""
    program, types = typed.program, typed.types
    if target.accel is not None:
        split = split_images(program, types)
        if split is not program:
            program, types = split, check_program(split)
    compiled = compile_program(program, target.config, limits, types=types,
                               more_arrays=target.more_arrays,
                               rulesets=RULESETS if target.accel is None else ACCEL_RULESETS)
    return fuse_epilogues(compiled, target.config) if target.accel is not None else compiled


@without_cycle_collection
def lower_for(program: Program, types: TypeTable, config: ArrayConfig,
              accel: AccelConfig | None, weights: dict[str, Array],
              options: LowerOptions | None = None) -> LoweredProgram:
    """Lower `program`, then (the accelerator) run the accelerator passes over it."""
    # The binary32 array multiplies f32 operands; the int8 one i8.
    options = replace(options or LowerOptions(), array_dtype="f32" if config.is_float else "i8")
    lowered = lower_program(program, types, options)
    if accel is not None:  # the accelerator's layers, and the host's loops around them
        lowered = fuse_for_accelerator(lowered, weights, accel)
    return lowered


def predicted_machine_cycles(compiled: Compiled, target: Target,
                             weights: dict[str, Array] | None = None) -> MachineCycles:
    """The one predicted total of a compiled program on its target (what `--stats`, the
    report and the NAS use): lowered as for the C program, without writing it."""
    weights = data.load_weights(compiled.program) if weights is None else weights
    return lowered_machine_cycles(compiled.program, compiled.types, target, weights)


def lowered_machine_cycles(program: Program, types: TypeTable, target: Target,
                           weights: dict[str, Array]) -> MachineCycles:
    """`predicted_machine_cycles` of an extracted program and its types, without the rest of
    its `Compiled` (whose e-graph a caller that keeps the program must not hold: the
    co-design search lowers one extraction for many memory configurations)."""
    lowered = lower_for(program, types, target.config, target.accel, weights)
    return machine_cycles(lowered, target.config, target.more_arrays)


@dataclass(frozen=True)
class CompileResult:
    outdir: Path
    lowered: LoweredProgram
    plan: MemoryPlan
    predicted_cycles: int  # Σ hardware.gemm_cycles over the array calls of one run
    accel_cycles: int = 0  # Σ the accelerator layers' cycles
    # host instructions an accel-epilogue or accel-max-pool lowered to that no accelerator
    # layer took in (e.g. a bias that varies down a column, weights that are not constant)
    host_epilogues: int = 0
    cycles: MachineCycles = field(default_factory=lambda: MachineCycles(0, 0, 0))
    report: ReportData | None = None  # report.json's rows


@without_cycle_collection
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
    `accel`: the accelerator around `config` (`Target.accel`; the command line's default):
    array calls with their bias, requantize and clip run as its layers
    (glensidec.backend.accel_passes). None: the bare array.
    """
    if accel is None:
        require_no_epilogue(program)
    weights = data.load_weights(program) if weights is None else weights
    lowered = lower_for(program, types, config, accel, weights, options)
    plan = plan_memory(lowered)
    # the report's rows, made once: report.json, the totals and the API's `report_data`
    # (a swin_t's 18,000 instructions took a third of a second each time)
    report = report_data(Path(program.path).name, lowered, config, more_arrays)
    emit_directory(program, lowered, plan, Path(outdir), config, weights, force, more_arrays,
                   accel, report)
    return CompileResult(Path(outdir), lowered, plan,
                         predicted_cycles(lowered, config, more_arrays),
                         sum(layer.cycles for layer in lowered.accel_layers()),
                         sum(1 for instruction in lowered.instructions
                             if instruction.note.startswith(ACCELERATOR_NOTES)
                             # a layout copy of the layer's rows is no epilogue work
                             and not isinstance(instruction, AccelLayer | Copy | Fill)),
                         totals(report), report)


# How the notes of an accelerator construct's instructions begin (`lower.describe`).
ACCELERATOR_NOTES = tuple(f"({name} " for name in sorted(Group.ACCELERATOR))
