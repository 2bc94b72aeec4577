"""What a candidate network costs on the accelerator: predicted cycles, array plus host.

A float candidate runs on the array as the int8 program `glensidec quantize` makes of it,
so the cost is that of its quantized program (calibrated on seeded random inputs: the
scales change values, never cycles), under the compiler's own cost model
(glensidec.opt.extract): a dot-product over a cartesian product costs the smaller of its
mapped array cycles (`mapped_cycles`, better orientation, padded to the array) and its host
cost; every other compute its host cost. `estimate` applies that model term by term without
saturating an e-graph; `compiled` runs the whole compiler and reads its prediction (the two
agree when extraction finds the cheapest mapping of every product, which the tests check).

Layer costs are memoised per (layer, its weight shapes, its input shapes, array): a search
re-costs only the layers a transformation changed.
"""

from __future__ import annotations

import gc
import math
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from glensidec.frontends.quantize import quantize
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, Symbol, TensorDecl, Term, postorder
from glensidec.lang.typecheck import TypeTable, access_type, check_program
from glensidec.nas.graph import Array, ChannelOp, Conv, Dense, Graph, Input, Layer, lower, shapes
from glensidec.opt.extract import array_target, host_cost, mapped_cycles
from glensidec.opt.regions import is_product, product_region
from glensidec.pipeline import compile_program

CALIBRATION_SAMPLES = 4
Returned = TypeVar("Returned")


@dataclass(frozen=True)
class Cost:
    array: int = 0
    host: int = 0

    @property
    def total(self) -> int:
        return self.array + self.host

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.array + other.array, self.host + other.host)


def estimate(program: Program, config: ArrayConfig) -> Cost:
    """The compiler's cost model applied to every distinct term of an (int8) program."""
    types = check_program(program)
    target = array_target(config)
    array = host = 0
    for term in postorder(program.root):
        on_host = host_cost(term, types)
        operand = term.args[1] if is_product(term) else None
        if isinstance(operand, Term) and operand.op != "access-cartesian-product":
            # a depthwise product: the compiler's rewrites decide how it maps; ask them
            region = product_region(term, types, program.tensors)
            cost = _compiled_region(region.root, region.tensors, config)
            array, host = array + cost.array, host + cost.host
            continue
        if isinstance(operand, Term) and _dtype(types, operand) == target.dtype:
            on_array = mapped_cycles(term, types, target)
            if on_array < on_host:
                array += on_array
                continue
        host += on_host
    return Cost(array, host)


def _dtype(types: TypeTable, term: Term) -> str:
    return access_type(types, term).dtype


_REGIONS: dict[tuple[object, ...], Cost] = {}

# Every e-graph lives and dies on this one thread. egglog's EGraph may be dropped only on
# the thread that made it ("egglog::egraph::EGraph is unsendable, but is being dropped on
# another thread"): a Dask worker runs its tasks on one thread and its event loop, which
# also collects garbage, on another. What a compile returns here is plain data (cycle
# counts); the e-graph is dropped, and any cycle holding it collected, before the thread
# hands the result back.
_EGGLOG = ThreadPoolExecutor(max_workers=1, thread_name_prefix="glensidec-egglog")


def on_egglog_thread(function: Callable[..., Returned], *args: object) -> Returned:
    """`function(*args)` on the e-graph thread; its e-graphs are freed there."""
    def run() -> Returned:
        try:
            return function(*args)
        finally:
            gc.collect()

    return _EGGLOG.submit(run).result()


def _compiled_region(root: Term, tensors: dict[str, TensorDecl], config: ArrayConfig) -> Cost:
    """The compiler's prediction for one product region, memoised by its structure."""
    used = [t.args[0].name for t in postorder(root)
            if t.op == "access-tensor" and isinstance(t.args[0], Symbol)]
    key = (tuple((t.op, tuple(a for a in t.args if not isinstance(a, (Term, Symbol))))
                 for t in postorder(root)),
           tuple((tensors[n].shape, tensors[n].dtype) for n in used), config)
    if key not in _REGIONS:
        region = Program("<region>", {n: tensors[n] for n in used}, root)
        _REGIONS[key] = on_egglog_thread(_predicted, region, config)
    return _REGIONS[key]


def _predicted(program: Program, config: ArrayConfig) -> Cost:
    prediction = compile_program(program, config).prediction
    return Cost(prediction.array_cycles, prediction.host_cycles)


def write_graph(graph: Graph, path: Path) -> Program:
    """The graph as `path` (.gs) and its weights beside it (.npz); the program read back."""
    program = lower(graph, path.with_suffix(".npz").name, str(path))
    np.savez(path.with_suffix(".npz"), **graph.weights)  # type: ignore[arg-type]
    path.write_text(format_program(program), encoding="utf-8")
    return program


def quantized(graph: Graph, folder: Path) -> Program:
    """The int8 program `glensidec quantize` makes of the graph (random calibration)."""
    program = write_graph(graph, folder / "candidate.gs")
    rng = np.random.default_rng(0)
    calibration: dict[str, Array] = {
        d.name: rng.standard_normal((CALIBRATION_SAMPLES, *d.shape)).astype(np.float32)
        for d in program.inputs()}
    return quantize(program, calibration).program


def network_cost(graph: Graph, config: ArrayConfig) -> Cost:
    with tempfile.TemporaryDirectory(prefix="glensidec-nas-") as folder:
        return estimate(quantized(graph, Path(folder)), config)


def compiled_cost(graph: Graph, config: ArrayConfig) -> Cost:
    """The whole compiler's prediction for the quantized graph (saturation and extraction)."""
    with tempfile.TemporaryDirectory(prefix="glensidec-nas-") as folder:
        return on_egglog_thread(_predicted, quantized(graph, Path(folder)), config)


# -- one layer at a time --------------------------------------------------------------------


def layer_alone(graph: Graph, layer: Layer, shape_of: dict[str, tuple[int, ...]]) -> Graph:
    """A graph of one layer fed by fresh inputs of its operands' shapes."""
    inputs = {f"in{i}": TensorDecl(f"in{i}", shape_of[name], "f32", "input")
              for i, name in enumerate(layer.inputs)}
    layers = {name: Layer(name, Input()) for name in inputs}
    layers[layer.name] = Layer(layer.name, layer.op, tuple(inputs))
    names = [layer.op.weight] if isinstance(layer.op, (Conv, Dense, ChannelOp)) else []
    weights = {n: graph.weights[n] for n in names}
    alone = Graph(graph.path, inputs, {}, layer.name, {}, {})
    return alone.with_layers(layers, weights)


def layer_key(graph: Graph, layer: Layer,
              shape_of: dict[str, tuple[int, ...]]) -> tuple[object, ...]:
    weight = layer.op.weight if isinstance(layer.op, (Conv, Dense, ChannelOp)) else None
    weight_shape = tuple(graph.weights[weight].shape) if weight else ()
    op = layer.op if weight is None else (type(layer.op).__name__, repr(
        {k: v for k, v in vars(layer.op).items() if k != "weight"}))
    return op, weight_shape, tuple(shape_of[i] for i in layer.inputs)


def layer_costs(graph: Graph, config: ArrayConfig) -> dict[str, Cost]:
    """Every layer's cost alone (its operands quantized, its result requantized)."""
    shape_of = shapes(graph)
    costs = {}
    for layer in graph.layers.values():
        if isinstance(layer.op, Input):
            costs[layer.name] = Cost()
            continue
        key = layer_key(graph, layer, shape_of)
        if (key, config) not in _MEMO:
            _MEMO[key, config] = network_cost(layer_alone(graph, layer, shape_of), config)
        costs[layer.name] = _MEMO[key, config]
    return costs


_MEMO: dict[tuple[object, ...], Cost] = {}


def params_and_macs(graph: Graph) -> dict[str, tuple[int, int]]:
    """Parameters and multiply-accumulates of every conv and dense layer."""
    shape_of = shapes(graph)
    result = {}
    for layer in graph.layers.values():
        if isinstance(layer.op, (Conv, Dense)):
            weights = graph.weights[layer.op.weight]
            out = shape_of[layer.name]
            positions = math.prod(out) // int(weights.shape[0])
            result[layer.name] = (int(weights.size), int(weights.size) * positions)
    return result
