"""Stage 4, extract: a cycle cost model, the cheapest program, and its validation.

Costs are set inside egglog (`set-cost`, from rules in the `costs` ruleset) so that its
built-in extractor, not a Python callback, picks the program:
  * array constructs cost what `glensidec.hardware.array.gemm_cycles` says the RTL takes; the
    (rows, cols, M, K, N) tuples present in the e-graph are computed in Python once each
    and given to egglog as the `gemm-cost` table, which the cost rule reads;
  * host compute costs by the host CPU model (`glensidec.hardware.host`): per element
    read, and per multiply-accumulate for dot-products;
  * access constructs are views (no cycles): whoever consumes them reads through them,
    the host in its loops and the array's driver when it gathers tiles (it zero-fills
    partial tiles and reads with strides, see `hardware.Tile`), and the consumer's cost
    already counts every element it reads.
egglog costs are integers in 1/CYCLE of a cycle plus 1 per node: the node count only breaks
ties between equally fast programs, and every cost is positive, which keeps extraction
away from the cycles in the e-graph. egglog's extractor adds the costs of a term tree, so
a subterm used twice is counted twice while choosing; the prediction reported for the
chosen program (`predict`) counts every distinct subterm once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from glensidec.errors import GlensideError
from glensidec.hardware import array as hardware
from glensidec.hardware.host import HOST_ELEMENT, HOST_MAC
from glensidec.lang import constructs as K
from glensidec.lang import data
from glensidec.lang.dtypes import Array, by_bits
from glensidec.lang.interp import run_program
from glensidec.lang.terms import (
    Program,
    TensorDecl,
    Term,
    compute_name,
    is_matmul,
    postorder,
)
from glensidec.lang.typecheck import (
    TypeTable,
    access_type,
    check_program,
    infer,
)
from glensidec.opt.egglog_core import bindings
from glensidec.opt.regions import (
    boundaries,
)
from glensidec.opt.rewrite import (
    ArrayTarget,
    Decoder,
    EGraph,
    Profile,
    Stats,
    quote,
)

CYCLE = 100  # egglog cost units per predicted cycle; each node adds 1 more (a tie-break)
ARRAYS = tuple(name for name, c in K.CONSTRUCTS.items() if c.hardware)

def array_target(config: hardware.ArrayConfig,
                 more: tuple[hardware.ArrayConfig, ...] = ()) -> ArrayTarget:
    """The rewriter's target: `config`'s array, plus the `more` arrays (same element type)
    the extractor may pick instead, product by product."""
    for other in more:
        if other.element != config.element:
            raise GlensideError(f"--array: every array of a program has one element type "
                                f"({config.element} and {other.element} given)")
    sizes = tuple(dict.fromkeys((c.rows, c.cols) for c in more
                                if (c.rows, c.cols) != (config.rows, config.cols)))
    return ArrayTarget(config.rows, config.cols, input_dtype(config), more=sizes)


def input_dtype(config: hardware.ArrayConfig) -> str:
    """The dtype of the array's inputs: f32 for the binary32 array, else the integer dtype
    as wide as its inputs."""
    if config.is_float:
        return "f32"
    dtype = by_bits(config.in_width)
    if dtype is None:
        raise GlensideError(f"no dtype is {config.in_width} bits wide")
    return dtype


# -- the cost model, in egglog ----------------------------------------------------------


def cost_rules() -> list[str]:
    """The `costs` ruleset: one `set-cost` rule per costed construct."""
    rules = []
    reads = "(= n (vprod (ashape a))) (= m (vprod (aitem a)))"
    dot = quote("dot-product")
    rules.append(
        f"(rule ((= e (compute t a)) (= t {dot}) {reads})\n"
        f"      ((set-cost (compute t a) (+ 1 (* {CYCLE} (/ (* {HOST_MAC} (* n m)) 2)))))\n"
        "      :ruleset costs :name \"cost-dot-product\")")
    rules.append(
        f"(rule ((= e (compute t a)) (!= t {dot}) {reads})\n"
        f"      ((set-cost (compute t a) (+ 1 (* {CYCLE} (* {HOST_ELEMENT} (* n m))))))\n"
        "      :ruleset costs :name \"cost-compute\")")
    for name in ARRAYS:
        rules.append(
            f"(rule ((= e ({name} r c a b)) (= m (vprod (ashape a))) "
            "(= k (vec-get (aitem a) 0)) (= n (vec-get (aitem b) 1)) "
            "(= g (gemm-cost r c m k n)))\n"
            f"      ((set-cost ({name} r c a b) (+ 1 (* {CYCLE} g))))\n"
            f"      :ruleset costs :name {quote('cost-' + name)})")
    return rules


COST_DECLARATIONS = """
(function gemm-cost (i64 i64 i64 i64 i64) i64 :merge old)
(relation on-array (Term))
"""


def reach_rules() -> list[str]:
    """The `reach` ruleset: `on-array` holds for e-classes with a mapped representative.

    A class is on the array when it holds an array construct, or a view of (or the
    accumulation or concatenation of) classes on the array. It lets extraction tell a
    dot-product that could not be mapped from one the extractor failed to map.
    """
    views = {
        "access-slice": "(access-slice x p q r)", "access-transpose": "(access-transpose x p)",
        "access-reshape": "(access-reshape x p)", "access": "(access x p)",
    }
    rules = [f"(rule ((= e ({name} r c a b))) ((on-array e)) :ruleset reach)"
             for name in ARRAYS]
    rules += [f"(rule ((= e {pattern}) (on-array x)) ((on-array e)) :ruleset reach)"
              for pattern in views.values()]
    rules += [
        "(rule ((= e (access-concatenate x y p)) (on-array x) (on-array y)) ((on-array e))"
        " :ruleset reach)",
        '(rule ((= e (compute "reduce-sum" (access-pair x y))) (on-array x) (on-array y))'
        " ((on-array e)) :ruleset reach)",
    ]
    return rules


def _ints(egraph: bindings.EGraph, value: bindings.Value) -> list[int]:
    return [egraph.value_to_i64(v) for v in egraph.value_to_vec(value)]


def array_shapes(graph: EGraph) -> set[tuple[int, int, int, int, int]]:
    """(rows, cols, M, K, N) of every array node in the e-graph."""
    egraph = graph.egraph
    frozen = egraph.freeze()
    shapes = set()
    for name in ARRAYS:
        for row in frozen.functions[name].rows:
            rows, cols, left, right = row.inputs
            left_shape = egraph.lookup_function("ashape", [left])
            left_item = egraph.lookup_function("aitem", [left])
            right_item = egraph.lookup_function("aitem", [right])
            if left_shape is None or left_item is None or right_item is None:
                raise GlensideError(f"internal: an untyped {name} node in the e-graph")
            m = math.prod(_ints(egraph, left_shape))
            k = _ints(egraph, left_item)[0]
            n = _ints(egraph, right_item)[1]
            shapes.add((egraph.value_to_i64(rows), egraph.value_to_i64(cols), m, k, n))
    return shapes


@functools.cache
def gemm_cycles(rows: int, cols: int, m: int, k: int, n: int, acc_width: int = 32) -> int:
    """Exact RTL cycles of one GEMM (memoised: a depthwise layer repeats one shape 64×)."""
    return hardware.gemm_cycles(hardware.ArrayConfig(rows, cols, acc_width=acc_width), m, k, n)


def set_costs(graph: EGraph) -> None:
    """Give every array node its exact cycle count and every host node its CPU cost."""
    facts = [f"(set (gemm-cost {r} {c} {m} {k} {n}) {gemm_cycles(r, c, m, k, n)})"
             for r, c, m, k, n in sorted(array_shapes(graph))]
    graph.run("\n".join(facts))
    graph.run_ruleset("costs", saturate=True)
    _check_costed(graph)


def _check_costed(graph: EGraph) -> None:
    """Fail loudly if a costed node was left at the default cost (an untyped class)."""
    (output,) = graph.run("(print-size)")
    assert isinstance(output, bindings.PrintAllFunctionsSize)
    sizes = dict(output.sizes)
    for name in ("compute", *ARRAYS):
        if sizes.get(f"cost_table_{name}", 0) != sizes.get(name, 0):
            raise GlensideError(f"internal: some {name} nodes have no cost (untyped e-class)")


# -- prediction for one program (DAG: shared subterms once) -----------------------------


@dataclass(frozen=True)
class Invocation:
    """One array construct of a program and its predicted cycles."""

    op: str
    rows: int
    cols: int
    m: int
    k: int
    n: int
    cycles: int


@dataclass
class Prediction:
    array_cycles: int = 0
    host_cycles: int = 0
    invocations: list[Invocation] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.array_cycles + self.host_cycles

    def per_array(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(calls, cycles) per array size, in the order the sizes are first used."""
        totals: dict[tuple[int, int], tuple[int, int]] = {}
        for call in self.invocations:
            calls, cycles = totals.get((call.rows, call.cols), (0, 0))
            totals[(call.rows, call.cols)] = (calls + 1, cycles + call.cycles)
        return totals


def host_cost(term: Term, types: TypeTable) -> int:
    """The host CPU model (glensidec.hardware.host), for one host construct."""
    if term.op == "compute":
        reads = math.prod(access_type(types, term.args[1]).full)
        if compute_name(term) == "dot-product":
            return HOST_MAC * reads // 2
        return HOST_ELEMENT * reads
    return 0


def invocation(term: Term, types: TypeTable, acc_width: int = 32) -> Invocation:
    rows, cols, left, right = term.args
    assert isinstance(rows, int) and isinstance(cols, int)
    m = math.prod(access_type(types, left).shape)
    k, n = access_type(types, right).item
    return Invocation(term.op, rows, cols, m, k, n, gemm_cycles(rows, cols, m, k, n, acc_width))


def predict(root: Term, types: TypeTable, acc_width: int = 32) -> Prediction:
    """Predicted cycles of a program: every distinct subterm once."""
    prediction = Prediction()
    for term in postorder(root):
        if term.op in ARRAYS:
            call = invocation(term, types, acc_width)
            prediction.invocations.append(call)
            prediction.array_cycles += call.cycles
        else:
            prediction.host_cycles += host_cost(term, types)
    return prediction


@dataclass(frozen=True)
class Matmul:
    """A dot-product over a cartesian product: M×K times K×N."""

    m: int
    k: int
    n: int


def matmuls(root: Term, types: TypeTable, dtype: str = "i8") -> list[Matmul]:
    """The matrix products of a program (`dtype` operands), as it is written."""
    found = []
    for term in postorder(root):
        if is_matmul(term):
            operand = term.args[1]
            assert isinstance(operand, Term)
            left, right = (access_type(types, arg) for arg in operand.args)
            if left.dtype == dtype:
                found.append(Matmul(math.prod(left.shape), math.prod(left.item),
                                    math.prod(right.shape)))
    return found


Bound = Callable[[hardware.ArrayConfig, int, int, int], int]  # t_min, scalesim_ws_cycles


def best_orientation(bound: Bound, config: hardware.ArrayConfig, matmul: Matmul) -> int:
    """A bound for the better of the two operand orientations of one product."""
    return min(bound(config, matmul.m, matmul.k, matmul.n),
               bound(config, matmul.n, matmul.k, matmul.m))


def unmapped_products(root: Term, types: TypeTable, dtype: str) -> list[Term]:
    """Host dot-products over cartesian products of `dtype` operands left in a program."""
    return [term for term in postorder(root)
            if is_matmul(term) and access_type(types, term.args[1]).dtype == dtype]


# -- compiling: saturate, cost, extract -------------------------------------------------


@dataclass
class Compiled:
    """The extracted program, typed (later stages take `types` and never check again)."""

    original: Program
    program: Program
    stats: Stats
    extraction_cost: int
    prediction: Prediction
    graph: EGraph
    types: TypeTable  # of `program`
    original_types: TypeTable
    # Wall seconds per stage: "encode" (rules and program into egglog), "saturate",
    # "extract" (costs, extraction, decoding and the checks).
    seconds: dict[str, float] = field(default_factory=dict)

    def egraph(self) -> EGraph:
        """The e-graph to show (--emit egraph). A region-by-region compile kept no
        region's e-graph; the extracted program is added to the base graph here, when asked
        for (for a whole network that costs seconds no other output needs)."""
        if self.stats.regions > 1:
            self.graph.add(self.program.root, self.types)
        return self.graph

    def report_lines(self, config: hardware.ArrayConfig) -> Iterator[str]:
        yield from self.stats.lines()
        if self.stats.hit_limit():
            yield "a limit was hit: the program is the best found so far"
        yield f"extraction cost: {self.extraction_cost}"
        yield (f"extraction's estimate: {self.prediction.total} cycles (array "
               f"{self.prediction.array_cycles}, host computes {self.prediction.host_cycles}; "
               "the predicted total is the lowered program's)")
        labels = array_labels(self.program)
        # `predict` lists the calls in this order: each with the let name of its term
        calls = [labels.get(term) for term in postorder(self.program.root) if term.op in ARRAYS]
        if len(calls) != len(self.prediction.invocations):
            calls = [None] * len(self.prediction.invocations)
        for name, call in zip(calls, self.prediction.invocations, strict=True):
            label = f"{name}: " if name else ""
            yield (f"  {label}{call.op} {call.rows}x{call.cols}: M={call.m} K={call.k} "
                   f"N={call.n}: {call.cycles} cycles")
        per_array = self.prediction.per_array()
        if len(per_array) > 1:
            for (rows, cols), (count, cycles) in per_array.items():
                yield f"array {rows}x{cols}: {count} calls, {cycles} cycles"
        products = matmuls(self.original.root, self.original_types, input_dtype(config))
        if products:
            t_min = sum(best_orientation(hardware.t_min, config, p) for p in products)
            scalesim = sum(best_orientation(hardware.scalesim_ws_cycles, config, p)
                           for p in products)
            yield f"T_min (better orientation, summed): {t_min}"
            yield f"SCALE-Sim WS (better orientation, summed): {scalesim}"


def new_graph(program: Program, types: TypeTable, products: list[Term], target: ArrayTarget,
              rulesets: tuple[str, ...]) -> EGraph:
    """An e-graph with the rules for `program` (and for its regions' placeholders)."""
    profile = Profile.of(program.root, types)
    # A region reads a computed operand ((S),(I)) as (access (access-tensor p) len(S)).
    stand_ins = [b for product in products for b in boundaries(product)]
    placeholders = {(len(t.full), len(t.shape)) for t in
                    (access_type(types, b) for b in stand_ins) if t.item}
    return graph_for(replace(profile, accesses=profile.accesses | placeholders), target,
                     rulesets)


def graph_for(profile: Profile, target: ArrayTarget, rulesets: tuple[str, ...]) -> EGraph:
    """An e-graph with the rules `profile` asks for, the costs and the reach rules."""
    graph = EGraph(rulesets, target, profile, COST_DECLARATIONS)
    graph.define("(ruleset costs)\n" + "\n".join(cost_rules()))
    graph.define("(ruleset reach)\n" + "\n".join(reach_rules()))
    return graph


def extract_checked(graph: EGraph, root_name: str, tensors: dict[str, TensorDecl],
                    target: ArrayTarget) -> tuple[Term, int, TypeTable]:
    """Cost the saturated e-graph, extract the cheapest `root_name`, check it runs and is
    mapped; the term, its extraction cost and its types."""
    set_costs(graph)
    (output,) = graph.run(f"(extract {root_name})")
    assert isinstance(output, bindings.ExtractBest)
    root = Decoder(output.termdag).term(output.term)
    new_types = infer(root, tensors)
    check_runnable(root, new_types, target)
    check_mapped(graph, root, new_types, target)
    return root, output.cost, new_types


# -- the user's names on the extracted program -----------------------------------------


_Name = TypeVar("_Name")  # what names a term: a `let` name, or its index in a list of them


def class_names(graph: EGraph, named: dict[Term, _Name], root: Term) -> dict[Term, _Name]:
    """The user's `let` names for the subterms of the extracted `root`, carried by e-class.

    Rewriting replaces a named term by an equal one of another form (a dot-product by an
    array construct, an operand by a padded one), so a name cannot follow its term by
    structure; it follows the e-class: a subterm of `root` takes the name of the named term
    in its class. Extraction picks one term per class, so a class names at most one subterm;
    when two named terms share a class, the first `let` wins.
    """
    if not named:
        return {}
    classes = graph.classes(*named, root)
    by_class: dict[bindings.Value, _Name] = {}
    for term, name in named.items():
        by_class.setdefault(classes[term], name)
    return {term: by_class[classes[term]] for term in postorder(root)
            if classes[term] in by_class}


def array_labels(program: Program) -> dict[Term, str]:
    """The `let` name of each array construct: its own, else that of the nearest named
    view of it (`conv` is a transpose of the array's result). The first name wins."""
    labels: dict[Term, str] = {}
    for term in postorder(program.root):
        name = program.names.get(term)
        while name is not None and term.op in K.Group.VIEW:
            term = term.args[0]  # type: ignore[assignment]  # a view's first argument
        if name is not None and term.op in ARRAYS:
            labels.setdefault(term, name)
    return labels


def unique_names(names: dict[Term, str], root: Term) -> dict[Term, str]:
    """`names` restricted to the subterms of `root`, each name on one term only (the first
    in post-order: a `let` shared by two regions may have been extracted in two forms)."""
    taken: set[str] = set()
    kept: dict[Term, str] = {}
    for term in postorder(root):
        name = names.get(term)
        if name is not None and name not in taken:
            kept[term] = name
            taken.add(name)
    return kept




def check_written_arrays(program: Program, target: ArrayTarget) -> None:
    """Array constructs the user wrote must be one of the arrays compiled for, located.

    The arrays are `--array`'s (`R1xC1,R2xC2,...` for several); an array of another size
    written in the program has no hardware to run on, so it is the user's error, not the
    extractor's.
    """
    sizes = target.sizes()
    for term in postorder(program.root):
        if term.op not in ARRAYS and not term.op.startswith("systolic-array-conv2d-"):
            continue
        rows, cols = term.args[0], term.args[1]
        if (rows, cols) not in sizes:
            arrays = ",".join(f"{r}x{c}" for r, c in sizes)
            raise GlensideError(
                f"{term.op}: a {rows}x{cols} array, but the program is compiled for "
                f"--array {arrays} (add {rows}x{cols} to --array to use it)",
                term.arg_span(0), program.path)


def check_runnable(root: Term, types: TypeTable, target: ArrayTarget) -> None:
    """Every array construct must run on one of the target's arrays as it is."""
    for term in postorder(root):
        if term.op not in ARRAYS:
            continue
        rows, cols = term.args[0], term.args[1]
        if (rows, cols) not in target.sizes():
            raise GlensideError(f"internal: extracted a {rows}x{cols} {term.op} for a "
                                f"{target.rows}x{target.cols} array")


def check_mapped(graph: EGraph, root: Term, types: TypeTable, target: ArrayTarget) -> None:
    """A dot-product left on the host although the array would be faster is a failure.

    The e-class must have a mapping (`on-array`), and the mapping must be predicted faster
    than the host: tiny products (a scalar dot-product of ten elements) may stay on the host
    by the cost model's choice, anything else means the extractor or its costs are wrong.
    """
    host_products = unmapped_products(root, types, target.dtype)
    if not host_products:
        return
    graph.run_ruleset("reach", saturate=True)
    classes = graph.classes(root)
    # Only the array calls the rules made count: an orientation no rule could map (the
    # held operand has several access axes and the other none to flatten it with) is not
    # an alternative the extractor passed over.
    present = array_shapes(graph)
    for product in host_products:
        if not graph.holds("on-array", classes[product]):
            continue
        array = mapped_cycles(product, types, target, present)
        host = host_cost(product, types)
        if array < host:
            raise GlensideError(
                f"extraction left a dot-product of {access_type(types, product)} on the host "
                f"({host} cycles) although the e-graph maps it onto the array ({array} "
                "cycles): the extractor's costs are wrong")


def mapped_cycles(product: Term, types: TypeTable, target: ArrayTarget,
                  present: set[tuple[int, int, int, int, int]] | None = None) -> int:
    """Array cycles of a dot-product over a cartesian product, padded, better orientation
    (only among the (rows, cols, M, K, N) calls in `present`, when given; a very large
    number when none of them is)."""
    operands = product.args[1]
    assert isinstance(operands, Term)
    left, right = (access_type(types, arg) for arg in operands.args)
    m, k, n = math.prod(left.shape), math.prod(left.item), math.prod(right.shape)

    def padded(size: int, multiple: int) -> int:
        return -(-size // multiple) * multiple

    calls = [call for rows, cols in target.sizes()
             for call in ((rows, cols, m, padded(k, rows), padded(n, cols)),
                          (rows, cols, n, padded(k, rows), padded(m, cols)))
             if present is None or call in present]
    return min((gemm_cycles(*call) for call in calls), default=2**62)


# -- translation validation -------------------------------------------------------------


def validate(original: Program, rewritten: Program, seeds: tuple[int, ...] = (0,),
             types: tuple[TypeTable, TypeTable] | None = None) -> None:
    """Run both programs on the same random inputs; raise on any difference.

    Integers must agree exactly (and in dtype), floats to 1e-5 relative. `types`: the two
    programs' types, when the caller has them (otherwise both are checked here).
    """
    original_types, rewritten_types = types or (check_program(original),
                                                check_program(rewritten))
    for seed in seeds:
        tensors = data.all_tensors(original, data.random_inputs(original, seed))
        expected = run_program(original, tensors, original_types)
        actual = run_program(rewritten, tensors, rewritten_types)
        problem = difference(expected, actual)
        if problem:
            raise GlensideError(f"translation validation failed (inputs seed {seed}): {problem}")


def difference(expected: Array, actual: Array) -> str | None:
    """Why two results differ, or None when they agree."""
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return (f"result {actual.dtype} {actual.shape} instead of "
                f"{expected.dtype} {expected.shape}")
    if np.issubdtype(expected.dtype, np.integer):
        wrong = int(np.count_nonzero(expected != actual))
        return f"{wrong} of {expected.size} values differ" if wrong else None
    # Infinities (a sum over min-padding, exp of a large value) must match exactly and must
    # not set the tolerance: an infinite scale would let every finite value pass.
    finite = np.isfinite(expected)
    scale = max(1.0, float(np.max(np.abs(expected[finite])))) if finite.any() else 1.0
    close = np.isclose(actual, expected, rtol=1e-5, atol=1e-5 * scale, equal_nan=True)
    wrong = int(np.count_nonzero(~close))
    return f"{wrong} of {expected.size} values differ beyond 1e-5" if wrong else None


# -- command-line helpers ---------------------------------------------------------------


#: The element types `--array RxC:TYPE` accepts (i8 when TYPE is left out).
ARRAY_ELEMENTS = ("i8", "f32")


def parse_array_size(text: str) -> hardware.ArrayConfig:
    """`16x16` → the int8 array (int8 in, int32 accumulate); `16x16:f32` → the binary32
    array (f32 in and out); `16x16:i8` says int8 explicitly."""
    size, colon, element = text.lower().partition(":")
    rows, times, cols = size.partition("x")
    if not (times and rows.isdigit() and cols.isdigit()) or (colon and not element):
        raise GlensideError(f"--array takes ROWSxCOLS[:TYPE] such as 16x16 or 16x16:f32, "
                            f"got '{text}'")
    if colon and element not in ARRAY_ELEMENTS:
        raise GlensideError(f"--array {text}: the array's element type is one of "
                            f"{', '.join(ARRAY_ELEMENTS)}, not '{element}'")
    try:
        if element == "f32":
            return hardware.ArrayConfig.f32(int(rows), int(cols))
        return hardware.ArrayConfig(int(rows), int(cols))
    except ValueError as error:
        raise GlensideError(f"--array {text}: {error}") from None


def arrays_for_c(compiled: Compiled, configs: tuple[hardware.ArrayConfig, ...]
                 ) -> tuple[hardware.ArrayConfig, ...]:
    """The arrays the generated C drives: the sizes the extracted program uses, in the order
    `--array` lists them (the first `--array` when it uses none)."""
    used = set(compiled.prediction.per_array())
    arrays = tuple(c for c in configs if (c.rows, c.cols) in used)
    return arrays or configs[:1]


def parse_arrays(text: str) -> tuple[hardware.ArrayConfig, ...]:
    """`--array R1xC1,R2xC2[:TYPE]`: one or more arrays (the first is the main one); a
    `:TYPE` on any of them applies to all that give none (`2x4,4x6:f32` = both f32)."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise GlensideError(f"--array takes ROWSxCOLS[:TYPE] sizes separated by commas, "
                            f"got '{text}'")
    element = next((part.partition(":")[2] for part in parts if ":" in part), "")
    configs = tuple(parse_array_size(part if ":" in part or not element
                                     else f"{part}:{element}") for part in parts)
    array_target(configs[0], configs[1:])  # one element type for all
    return tuple(dict.fromkeys(configs))


EGRAPH_RENDER_LIMIT = 5_000  # e-nodes: graphviz output past this is unreadable and slow


def egraph_dot(graph: EGraph) -> str:
    """The e-graph as graphviz dot text (small e-graphs only)."""
    size = graph.size()
    if size > EGRAPH_RENDER_LIMIT:
        raise GlensideError(f"the e-graph has {size} e-nodes; --emit egraph renders at most "
                            f"{EGRAPH_RENDER_LIMIT} (lower --iterations or --max-enodes)")
    return canonical_dot(graph.egraph.serialize([]).to_dot())


def canonical_dot(text: str) -> str:
    """`text` with the statements of every block in sorted order (sub-blocks sorted inside
    first), except attribute statements (`fillcolor=3`, `node[...]`), which apply to what
    follows them: they stay where they are and only the statements between two of them
    are sorted. egglog writes the e-graph in hash order, which differs between runs;
    sorted, the same e-graph always gives the same bytes (and the same drawing)."""
    lines = text.splitlines()

    def block(start: int) -> tuple[list[str], int]:
        """The statements from `start` to the closing brace, and the brace's index."""
        statements: list[str] = []
        run: list[str] = []  # statements since the last attribute statement
        index = start
        while index < len(lines) and lines[index].strip() != "}":
            line = lines[index]
            if line.rstrip().endswith("{"):
                inner, close = block(index + 1)
                run.append("\n".join([line, *inner, lines[close]]))
                index = close + 1
                continue
            if line.lstrip().startswith('"'):  # a node or an edge
                run.append(line)
            else:  # an attribute statement: keeps its place
                statements += sorted(run) + [line]
                run = []
            index += 1
        return statements + sorted(run), min(index, len(lines) - 1)

    statements, _ = block(0)
    return "\n".join(statements) + "\n"


def egraph_svg(dot_text: str) -> str:
    """Render dot text to SVG with graphviz's `dot`."""
    import shutil
    import subprocess

    dot = shutil.which("dot")
    if dot is None:
        raise GlensideError("graphviz's `dot` is not installed: write .dot instead of .svg")
    done = subprocess.run([dot, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise GlensideError(f"dot failed: {done.stderr.strip()}")
    return done.stdout
