"""What a candidate network costs on the machine glensidec builds: predicted cycles of the
whole accelerator (its layers with DMA at the configured bandwidth, epilogue and pooling
stores), any bare array calls left, and the host instructions left (the report's host
model).

A float candidate runs as the int8 program `glensidec quantize` makes of it, so the cost is
that of its quantized program (calibrated on seeded random inputs: the scales change values,
never cycles), compiled by the compiler's own stages — rewrite and extract
(`pipeline.compile_program`), the epilogue rules (`pipeline.fuse_epilogues`), lowering and
the accelerator passes (`backend.accel_passes.fuse_for_accelerator`) — and priced as
`compile --accel --stats` prices it. There is no second model: the estimate a search ranks
candidates by is the compiled prediction (tests/test_nas_transform_cli.py checks it
against the command line's for every transformation kind).

Costs are memoised per network and per layer alone (`layer_costs`: the layer, its weight
shapes, its input shapes, the machine): a search re-costs only what a transformation
changed.
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

from glensidec.frontends.quantize import QuantizedProgram, quantize
from glensidec.hardware.array import ArrayConfig
from glensidec.lang.syntax import format_program
from glensidec.lang.terms import Program, TensorDecl
from glensidec.nas.graph import (
    PRODUCTS,
    WEIGHTED,
    Array,
    Attention,
    Graph,
    Input,
    Layer,
    lower,
    shapes,
)
from glensidec.opt.rewrite import Limits

CALIBRATION_SAMPLES = 4
DRAM_BANDWIDTH = 16  # bytes a cycle: compile's default
# compile's defaults (--iterations, --max-enodes, --timeout): a depthwise region saturated
# to fewer e-nodes can extract another mapping
COMPILE_LIMITS = Limits(iterations=30, max_enodes=50_000, timeout=10.0)
Returned = TypeVar("Returned")


@dataclass(frozen=True)
class Cost:
    """Predicted cycles of one run: accelerator layers, bare array calls, host."""

    accelerator: int = 0
    array: int = 0
    host: int = 0

    @property
    def total(self) -> int:
        return self.accelerator + self.array + self.host

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.accelerator + other.accelerator, self.array + other.array,
                    self.host + other.host)


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


def machine_cost(quantized_program: QuantizedProgram, config: ArrayConfig,
                 dram_bandwidth: int = DRAM_BANDWIDTH) -> Cost:
    """`compile --accel`'s predicted total for an int8 program (its e-graphs on the e-graph
    thread)."""
    return on_egglog_thread(_machine_cost, quantized_program, config, dram_bandwidth)


def _machine_cost(quantized_program: QuantizedProgram, config: ArrayConfig,
                  dram_bandwidth: int) -> Cost:
    """The pipeline's own stages and its one total (`pipeline.predicted_machine_cycles`),
    so the estimate is what `glensidec compile --stats` predicts, copies included."""
    from glensidec import pipeline
    from glensidec.lang.typecheck import check_program

    program = quantized_program.program
    target = pipeline.choose_target((config,), dram_bandwidth=dram_bandwidth)
    compiled = pipeline.compile_for(pipeline.Typed(program, check_program(program)), target,
                                    COMPILE_LIMITS)
    cycles = pipeline.predicted_machine_cycles(compiled, target, quantized_program.weights)
    return Cost(cycles.accelerator, cycles.array, cycles.host)


def write_graph(graph: Graph, path: Path) -> Program:
    """The graph as `path` (.gs) and its weights beside it (.npz); the program read back."""
    program = lower(graph, path.with_suffix(".npz").name, str(path))
    np.savez(path.with_suffix(".npz"), **graph.weights)  # type: ignore[arg-type]
    path.write_text(format_program(program), encoding="utf-8")
    return program


def quantized(graph: Graph, folder: Path) -> QuantizedProgram:
    """The int8 program `glensidec quantize` makes of the graph (random calibration)."""
    program = write_graph(graph, folder / "candidate.gs")
    rng = np.random.default_rng(0)
    calibration: dict[str, Array] = {
        d.name: rng.standard_normal((CALIBRATION_SAMPLES, *d.shape)).astype(np.float32)
        for d in program.inputs()}
    return quantize(program, calibration)


def network_cost(graph: Graph, config: ArrayConfig,
                 dram_bandwidth: int = DRAM_BANDWIDTH) -> Cost:
    """The predicted cycles of the quantized graph on the whole accelerator, memoised."""
    key = (network_key(graph), config, dram_bandwidth)
    if key not in _NETWORKS:
        with tempfile.TemporaryDirectory(prefix="glensidec-nas-") as folder:
            _NETWORKS[key] = machine_cost(quantized(graph, Path(folder)), config,
                                          dram_bandwidth)
    return _NETWORKS[key]


def compiled_cost(graph: Graph, config: ArrayConfig,
                  dram_bandwidth: int = DRAM_BANDWIDTH) -> Cost:
    """The same compile, never memoised: what `glensidec nas` checks its choice with."""
    with tempfile.TemporaryDirectory(prefix="glensidec-nas-") as folder:
        return machine_cost(quantized(graph, Path(folder)), config, dram_bandwidth)


_NETWORKS: dict[tuple[object, ...], Cost] = {}


def network_key(graph: Graph) -> tuple[object, ...]:
    """What a network's cost depends on: its layers in order and its weights' shapes (the
    weights' values only through calibration of seeded random inputs)."""
    shape_of = shapes(graph)
    return (graph.output, tuple(graph.inputs.items()),
            tuple((layer.name, layer_key(graph, layer, shape_of), layer.inputs)
                  for layer in graph.layers.values()))


# -- one layer at a time --------------------------------------------------------------------


def layer_alone(graph: Graph, layer: Layer, shape_of: dict[str, tuple[int, ...]]) -> Graph:
    """A graph of one layer fed by fresh inputs of its operands' shapes."""
    inputs = {f"in{i}": TensorDecl(f"in{i}", shape_of[name], "f32", "input")
              for i, name in enumerate(layer.inputs)}
    layers = {name: Layer(name, Input()) for name in inputs}
    layers[layer.name] = Layer(layer.name, layer.op, tuple(inputs))
    names = [layer.op.weight] if isinstance(layer.op, WEIGHTED) else []
    weights = {n: graph.weights[n] for n in names}
    alone = Graph(graph.path, inputs, {}, layer.name, {}, {})
    return alone.with_layers(layers, weights)


def layer_key(graph: Graph, layer: Layer,
              shape_of: dict[str, tuple[int, ...]]) -> tuple[object, ...]:
    weight = layer.op.weight if isinstance(layer.op, WEIGHTED) else None
    weight_shape = tuple(graph.weights[weight].shape) if weight else ()
    op = layer.op if weight is None else (type(layer.op).__name__, repr(
        {k: v for k, v in vars(layer.op).items() if k != "weight"}))
    return op, weight_shape, tuple(shape_of[i] for i in layer.inputs)


def layer_costs(graph: Graph, config: ArrayConfig,
                dram_bandwidth: int = DRAM_BANDWIDTH) -> dict[str, Cost]:
    """Every layer's cost alone (its operands quantized, its result requantized): what
    `transform` prints per step. In the network a layer may cost less (a pool after a
    layer is its pooling stores, a residual add its epilogue's), so these are shown, not
    summed."""
    shape_of = shapes(graph)
    costs = {}
    for layer in graph.layers.values():
        if isinstance(layer.op, Input):
            costs[layer.name] = Cost()
            continue
        key = layer_key(graph, layer, shape_of), config, dram_bandwidth
        if key not in _MEMO:
            _MEMO[key] = network_cost(layer_alone(graph, layer, shape_of), config,
                                      dram_bandwidth)
        costs[layer.name] = _MEMO[key]
    return costs


_MEMO: dict[tuple[object, ...], Cost] = {}


def params_and_macs(graph: Graph) -> dict[str, tuple[int, int]]:
    """Parameters and multiply-accumulates of every conv and dense layer, and of every
    attention (no parameters; Q·Kᵀ and ·V: 2·T·T·width)."""
    shape_of = shapes(graph)
    result = {}
    for layer in graph.layers.values():
        if isinstance(layer.op, Attention):
            _, tokens, width = shape_of[layer.name]
            result[layer.name] = (0, 2 * tokens * tokens * width)
        elif isinstance(layer.op, PRODUCTS):
            weights = graph.weights[layer.op.weight]
            out = shape_of[layer.name]
            positions = math.prod(out) // int(weights.shape[0])
            result[layer.name] = (int(weights.size), int(weights.size) * positions)
    return result
