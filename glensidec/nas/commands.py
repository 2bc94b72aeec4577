"""`glensidec transform` and `glensidec nas`: what the commands do (their options are in
glensidec.cli)."""

from __future__ import annotations

import hashlib
import io
import logging
import math
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from glensidec.errors import GlensideError
from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, read_program
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import check_program
from glensidec.nas import transforms as T
from glensidec.nas.graph import Graph, lift, lower
from glensidec.outputs import check_can_create, check_writable_file, write_file

if TYPE_CHECKING:
    from glensidec.nas.cost import Cost

# The cost model imports the compiler (egglog); it is loaded when a command needs it, so
# that `glensidec --help` and the other commands start quickly.

# The search's names (glensidec.nas.search imports torch-free modules only, but keeps
# the command quick to load by being imported in the command).
SEARCH_SPACE = ("group", "bottleneck", "depthwise", "bottleneck-block", "spatial-split",
                "stride", "heads", "head-dim", "low-rank", "drop")
LEGALITY = ("fisher-init", "fisher-warm", "loss-warm", "train")

# Applied in this order, whatever the order on the command line (click groups repeated
# options): a conv takes its pool's stride first (the others keep a conv's stride), then
# shrink channels (a transformer's heads and head dimension with them: they cut q, k and v,
# which grouping would make slices and concatenations), then restructure what is left;
# dropping a block last (it removes layers the others may name).
ORDER = ("stride", "bottleneck", "heads", "head-dim", "group", "split-out", "bottleneck-block",
         "depthwise", "spatial-split", "low-rank", "drop")
ARITY = {"stride": 0, "group": 1, "bottleneck": 1, "bottleneck-block": 1, "depthwise": 0,
         "spatial-split": 1, "split-out": 2, "heads": 1, "head-dim": 1, "low-rank": 1,
         "drop": 0}


@dataclass(frozen=True)
class Step:
    """One transformation as given on the command line: `--group c2:4`."""

    kind: str
    layer: str
    numbers: tuple[int, ...]

    def __str__(self) -> str:
        return f"--{self.kind} {':'.join([self.layer, *map(str, self.numbers)])}"

    def apply(self, graph: Graph, init: T.Init) -> Graph:
        return T.TRANSFORMS[self.kind](graph, self.layer, *self.numbers, init=init)


def parse_step(kind: str, text: str) -> Step:
    parts = text.split(":")
    usage = ":".join(["LAYER", *("N" for _ in range(ARITY[kind]))])
    if len(parts) != 1 + ARITY[kind] or not parts[0] or \
            not all(p.isdigit() and int(p) > 0 for p in parts[1:]):
        raise GlensideError(f"--{kind} takes {usage} (positive numbers), got '{text}'")
    return Step(kind, parts[0], tuple(int(p) for p in parts[1:]))


def affected(before: Graph, after: Graph) -> tuple[list[str], list[str]]:
    """Layers of `before` that the step changed or removed, and those of `after` it made."""
    def signature(graph: Graph, name: str) -> object:
        layer = graph.layers[name]
        weight = getattr(layer.op, "weight", None)
        shape = tuple(graph.weights[weight].shape) if weight in graph.weights else ()
        return layer.op, layer.inputs, shape

    old = [n for n in before.layers if n not in after.layers or
           signature(before, n) != signature(after, n)]
    new = [n for n in after.layers if n not in before.layers or
           signature(before, n) != signature(after, n)]
    return old, new


def _sum(costs: dict[str, Cost], names: list[str]) -> Cost:
    from glensidec.nas.cost import Cost

    total = Cost()
    for name in names:
        total = total + costs[name]
    return total


def _counts(graph: Graph, names: list[str]) -> tuple[int, int]:
    from glensidec.nas.cost import params_and_macs

    counted = params_and_macs(graph)
    return (sum(counted[n][0] for n in names if n in counted),
            sum(counted[n][1] for n in names if n in counted))


def report_step(step: Step, before: Graph, after: Graph, config_text: str,
                echo: Callable[[str], None], dram_bandwidth: int = 16) -> None:
    from glensidec.nas.cost import layer_costs
    from glensidec.opt.extract import parse_array_size

    config = parse_array_size(config_text)
    old, new = affected(before, after)
    params = _counts(before, old), _counts(after, new)
    cycles = (_sum(layer_costs(before, config, dram_bandwidth), old),
              _sum(layer_costs(after, config, dram_bandwidth), new))
    echo(f"{step}: layers {', '.join(old) or '-'} -> {', '.join(new) or '-'}")
    echo(f"  params {params[0][0]} -> {params[1][0]}, MACs {params[0][1]} -> {params[1][1]}, "
         f"predicted cycles of these layers alone {cycles[0].total} -> {cycles[1].total}")


def _totals(graph: Graph) -> tuple[int, int]:
    from glensidec.nas.cost import params_and_macs

    counted = params_and_macs(graph)
    return sum(p for p, _ in counted.values()), sum(m for _, m in counted.values())


def write_outputs(program: Program, weights: dict[str, np.ndarray], output: Path,
                  inputs: set[Path], force: bool = False) -> Path:
    """OUT.gs and OUT.npz, both or neither; never over the model or its weights, and over
    existing files only if an earlier `transform` wrote them unchanged, or with `force`."""
    npz = check_outputs(output, inputs, force)
    weights_bytes = _npz_bytes(weights)
    text = format_program(program)
    header = HEADER.format(program=_sha256(text.encode()), weights=_sha256(weights_bytes),
                           npz=npz.name)
    check_can_create(output)
    existed = npz.exists()
    # The weights first: a program on disk always has its weights beside it.
    write_file(npz, weights_bytes)
    try:
        write_file(output, (header + text).encode())
    except BaseException:
        if not existed:  # neither, then
            npz.unlink(missing_ok=True)
        raise
    return npz


# The first line of a program `transform` writes: what makes OUT.gs and OUT.npz its own, so
# that a later run may replace them (the README's "nothing of yours is ever overwritten").
HEADER = ("; written by glensidec transform: sha256 {program} of the lines below, "
          "{weights} of {npz}\n")
_HEADER = re.compile(r"; written by glensidec transform: sha256 ([0-9a-f]{64}) of the lines "
                     r"below, ([0-9a-f]{64}) of (.+)")


def check_outputs(output: Path, inputs: set[Path], force: bool) -> Path:
    """Refuse OUT.gs / OUT.npz before any work: a bad name, the model's own files, something
    that is not a regular file (a FIFO, a directory), or files of someone else's. Returns
    OUT.npz."""
    if output.suffix != ".gs":
        raise GlensideError(f"-o {output}: the program's name must end in .gs")
    npz = output.with_suffix(".npz")
    if {output.resolve(), npz.resolve()} & inputs:
        raise GlensideError(f"-o {output} would overwrite the model or its weights; "
                            f"choose another name")
    for path in (output, npz):
        check_writable_file(path)
    if force or not (output.exists() or npz.exists()) or _written_by_transform(output, npz):
        return npz
    held = output if output.exists() else npz
    raise GlensideError(f"-o {output}: {held} exists and was not written by glensidec "
                        "transform (or was changed since); pass --force to replace it")


def _written_by_transform(output: Path, npz: Path) -> bool:
    """OUT.gs begins with our header, and it and OUT.npz (if present) are as we wrote them."""
    try:
        first, _, rest = output.read_bytes().partition(b"\n")
        match = _HEADER.fullmatch(first.decode())
        if match is None or match.group(3) != npz.name or _sha256(rest) != match.group(1):
            return False
        return not npz.exists() or _sha256(npz.read_bytes()) == match.group(2)
    except (OSError, UnicodeDecodeError):
        return False


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _npz_bytes(weights: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **weights)  # type: ignore[arg-type]
    return buffer.getvalue()


def list_layers(graph: Graph, echo: Callable[[str], None]) -> None:
    rows = T.transformable(graph)
    if not rows:
        echo("no transformable layers (no conv or dense)")
    for row in rows:
        echo(f"{row['name']}  {row['kind']}  channels {row['in']}->{row['out']}  "
             f"kernel {row['kernel']}  coupled {row['coupled']}")


def _steps(options: dict[str, tuple[str, ...]]) -> list[Step]:
    return [parse_step(kind, text) for kind in ORDER for text in options[kind]]


def transform(model: Path, steps_by_kind: dict[str, tuple[str, ...]], init: str, seed: int,
              array_size: str, output: Path | None, force: bool = False,
              dram_bandwidth: int = 16) -> None:
    """`glensidec transform` (options as glensidec.cli's command takes them): apply the
    steps and write the new program, or with no steps list MODEL's transformable layers."""
    from glensidec.nas.cost import network_cost
    from glensidec.opt.extract import parse_array_size
    from glensidec.pipeline import accelerator_for

    config = parse_array_size(array_size)
    accelerator_for(config, dram_bandwidth=dram_bandwidth)  # the machine exists: refuse early
    program = read_program(model)
    check_program(program)
    graph = lift(program, load_weights(program))
    steps = _steps(steps_by_kind)
    if not steps:
        list_layers(graph, click.echo)
        return
    if output is None:
        raise click.UsageError("give -o OUT.gs for the transformed program")
    inputs = {model.resolve(), *(program.weight_path(d).resolve() for d in program.weights())}
    check_outputs(output, inputs, force)  # before any work: refuse early
    seeds = T.Init(init == "inherit", seed)
    current = graph
    for step in steps:
        after = step.apply(current, seeds)
        report_step(step, current, after, array_size, click.echo, dram_bandwidth)
        current = after
    old, new = (network_cost(g, config, dram_bandwidth) for g in (graph, current))
    (p0, m0), (p1, m1) = _totals(graph), _totals(current)
    click.echo(f"network: params {p0} -> {p1}, MACs {m0} -> {m1}, predicted cycles on "
               f"{array_size} {old.total} -> {new.total} (accelerator layers "
               f"{old.accelerator} -> {new.accelerator}, array calls {old.array} -> "
               f"{new.array}, host {old.host} -> {new.host}; the default compile's "
               "prediction, as a search scores it)")
    result = lower(current, output.with_suffix(".npz").name, str(output))
    npz = write_outputs(result, current.weights, output, inputs, force)
    click.echo(f"wrote {output} and {npz}")


# -- glensidec nas ------------------------------------------------------------------------------


class DaskMapper:
    """Runs evaluations on a Dask cluster; the search's Setup is scattered once per search.

    The Setup is scattered with `hash=False`: with content hashing, two searches over the
    same program scatter under the same key, and the first search's future, released while
    the second one starts, makes the scheduler drop the data the second one depends on
    ("lost dependencies"). We hold the Setup itself, not its `id`, so a later Setup can
    never be mistaken for a collected one that had the same address.
    """

    def __init__(self, client: Any):
        self.client = client
        self.setup: Any = None
        self.setup_future: Any = None

    def __call__(self, function: Callable[..., Any], calls: list[Any]) -> list[Any]:
        if not calls:
            return []
        setup = calls[0][0]
        if setup is not self.setup:
            self.setup = setup
            self.setup_future = self.client.scatter(setup, broadcast=True, hash=False)
        futures = [self.client.submit(function, self.setup_future, *call[1:], pure=False)
                   for call in calls]
        return list(self.client.gather(futures))


# The workers' statistical profiler is off. Every 10 ms it takes sys._current_frames() on
# the worker's event loop, the e-graph thread's frame among them (cost.on_egglog_thread);
# when that frame returns before the profiler lets go of it, its locals — an e-graph —
# are freed on the event loop's thread and egglog panics ("EGraph is unsendable, but is
# being dropped on another thread": a traceback from a worker in bench_nas's run).
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}


def dask_client(scheduler: str | None, workers: int) -> Any:
    if scheduler:
        Client, _ = _dask()
        try:
            return Client(scheduler, timeout=10)
        except (OSError, TimeoutError) as error:
            raise GlensideError(f"--scheduler {scheduler}: cannot connect: {error}") from None
        except (ValueError, TypeError) as error:  # not an address: "missing port number"
            raise GlensideError(f"--scheduler {scheduler}: not a scheduler address such as "
                                f"tcp://HOST:8786 ({error})") from None
    Client, LocalCluster = _dask()
    import dask

    _forkserver_ignoring_sigint()
    # Ctrl-C while the cluster starts is held until it has started, then stops us: a
    # cluster interrupted half-started leaves workers starting with nobody to close them.
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver",
                              **WORKER_CONFIG}):
            # No dashboard; the scheduler's HTTP server (always started) on a free local
            # port, not on 8787 with a warning when another cluster has it. A task's error
            # reaches us as its exception: the workers' own logs are noise (after an
            # interruption, heartbeats failing as the scheduler goes).
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.CRITICAL,
                                   scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        client = Client(cluster)
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        close_client(client)
        release_semaphores()
        raise KeyboardInterrupt
    return client


def _forkserver_ignoring_sigint() -> None:
    """Start multiprocessing's fork server with SIGINT ignored, so that the workers forked
    from it ignore SIGINT too. Ctrl-C reaches the whole process group: workers that died of
    it printed their tracebacks, and the scheduler logged "Task exception was never
    retrieved" about them. Only this process stops, closing the cluster as it unwinds.

    (The fork server restores in each child the handlers it started with; an ignored
    signal stays ignored across exec, and Python then installs no handler of its own.)"""
    import multiprocessing.forkserver

    _quiet_resource_tracker()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (before the fork server, which would start
    it) with its "leaked semaphore objects" warning off. After Ctrl-C the cluster stops a
    worker still busy training, and the semaphores that worker made are left registered:
    the tracker unlinks them as designed, but its warning was the one line besides
    "interrupted" that an interrupted search printed (about one run in two). The tracker
    takes -W options from our PYTHONWARNINGS as it starts; ours is restored at once."""
    from multiprocessing import resource_tracker

    saved = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(
        filter(None, [saved, "ignore:resource_tracker:UserWarning"]))
    try:
        resource_tracker.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = saved


def _dask() -> tuple[Any, Any]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise GlensideError("glensidec nas needs the nas extra: pip install 'glensidec[nas]'")\
            from None
    return Client, LocalCluster


def max_local_workers() -> int:
    """Local workers are processes that each train networks: a few per CPU at most (more
    only queue for the CPUs, and a huge number would take the machine's memory first)."""
    return WORKERS_PER_CPU * (os.cpu_count() or 1)


WORKERS_PER_CPU = 4


def close_client(client: Any) -> None:
    """Close the client and, if we started it, its local cluster (quietly: after an
    interruption, requests in flight fail as their workers go, and are not news)."""
    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()
    del cluster


def release_semaphores() -> None:
    """After an interruption: unlink the semaphores of the workers' multiprocessing queues
    now, as a normal exit would (the CLI exits at once on SIGINT; the resource tracker
    would then warn of "leaked semaphore objects"). Only while exiting, and only once the
    cluster is closed: a worker still starting would find its queues gone."""
    from multiprocessing import util

    util._run_finalizers(0)  # type: ignore[attr-defined]  # what its atexit hook runs


def _progress(total_hint: int) -> Callable[[int], None] | None:
    """A candidates-done counter on a terminal; nothing when stderr is piped."""
    if not sys.stderr.isatty():
        return None
    done = [0]

    def tick(count: int) -> None:
        done[0] += count
        width = 30
        filled = min(width, width * done[0] // max(total_hint, 1))
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] candidates "
                         f"{done[0]}/{total_hint}")
        sys.stderr.flush()

    return tick


def search(model: Path, train_path: Path, val_path: Path, array_size: str, budget: int,
           space: str, legality: str, threshold: float, band: float, cost: str,
           train_epochs: int, top: int, seed: int, strategy: str, workers: int,
           scheduler: str | None, output: Path, dram_bandwidth: int = 16,
           hardware: str | None = None, area_budget: str | None = None,
           train_seeds: int = 1, descent: int = 0, sweep: int | None = None,
           retrain: int = 12) -> None:
    """`glensidec nas` (options as glensidec.cli's command takes them); `hardware` (a
    machine space, "" for the default one) searches the machine too (nas/hardware.py),
    then prices every machine within the budget for the `sweep` cheapest legal networks
    (None: hardware.DEFAULT_SWEEP)."""
    from glensidec.nas.cost import compiled_cost, network_cost
    from glensidec.nas.search import (
        Options,
        candidates_json,
        chosen_files,
        pareto_png,
        report_md,
        run_search,
    )
    from glensidec.nas.torch_model import check_fits, load_data
    from glensidec.opt.extract import parse_array_size
    from glensidec.outputs import check_output_directory, write_directory
    from glensidec.pipeline import accelerator_for

    config = parse_array_size(array_size)
    accelerator_for(config, dram_bandwidth=dram_bandwidth)  # the machine exists: refuse early
    kinds = tuple(k.strip() for k in space.split(",") if k.strip())
    unknown = [k for k in kinds if k not in SEARCH_SPACE]
    if unknown or not kinds:
        raise GlensideError(f"--space: unknown transformation '{(unknown or [''])[0]}' "
                            f"(known: {', '.join(SEARCH_SPACE)})")
    if not math.isfinite(threshold):
        raise GlensideError(f"--threshold {threshold}: give a finite number (legal when the "
                            "score is at least this times the original's)")
    if scheduler is None and workers > max_local_workers():
        raise GlensideError(f"--workers {workers}: at most {max_local_workers()} local "
                            f"worker processes on this machine's {os.cpu_count()} CPUs; "
                            "for more, start a Dask cluster and give --scheduler")
    if area_budget is not None and hardware is None:
        raise GlensideError("--area-budget needs --hardware (the machine is searched only "
                            "with it)")
    if sweep is not None and hardware is None:
        raise GlensideError("--sweep needs --hardware (it prices networks on the machines "
                            "of the space)")
    codesign = None if hardware is None else _codesign_inputs(config, dram_bandwidth,
                                                              hardware, area_budget)
    names = ("chosen.gs", "chosen.npz", "candidates.json", "report.md", "pareto.png")
    check_output_directory(output, names if codesign is None else _hardware().OUTPUTS)
    program = read_program(model)
    check_program(program)
    weights = load_weights(program)
    # Everything that can be wrong with the model or the data is found here, located in
    # the user's files, before a Dask worker starts: lifting names the term that is not a
    # layer, the data checks name the file.
    graph = lift(program, weights)
    train_data, val_data = load_data(train_path), load_data(val_path)
    check_fits(train_data, train_path, graph)
    check_fits(val_data, val_path, graph)
    options = Options(budget, kinds, legality, threshold, train_epochs, top, seed, strategy,
                      cost=cost, band=band, dram_bandwidth=dram_bandwidth,
                      train_seeds=train_seeds, descent=descent, retrain=retrain)
    client = None
    interrupted = True
    try:
        client = dask_client(scheduler, workers)
        if codesign is not None:
            found = _hardware().run_codesign(
                format_program(program), weights, (train_data.x, train_data.y),
                (val_data.x, val_data.y), *codesign, options, DaskMapper(client),
                _progress(budget), name=str(model),
                sweep=_hardware().DEFAULT_SWEEP if sweep is None else sweep)
        else:
            result = run_search(format_program(program), weights,
                                (train_data.x, train_data.y), (val_data.x, val_data.y),
                                config, options, DaskMapper(client), _progress(budget),
                                name=str(model))
        interrupted = False
    except GlensideError:
        interrupted = False
        raise
    finally:
        if client is not None:
            close_client(client)
            if interrupted:  # KeyboardInterrupt, Terminated: the CLI exits at once
                release_semaphores()
        if sys.stderr.isatty():
            sys.stderr.write("\n")
    if codesign is not None:
        _write_codesign(found, options, output)
        return
    assert result.chosen is not None and result.chosen_graph is not None
    # Retraining changed the weights the candidate was costed with, and quantization sees
    # values (a layer's calibrated range decides, e.g., whether its ReLU is a clip): cost
    # the retrained network again, and compare the estimate with the compile of the same.
    estimate = network_cost(result.chosen_graph, config, dram_bandwidth)
    compiled = compiled_cost(result.chosen_graph, config, dram_bandwidth).total
    if compiled != estimate.total:
        raise GlensideError(f"internal: the chosen network compiles to {compiled} predicted "
                            f"cycles but was estimated at {estimate.total}")
    files = {**chosen_files(result), "candidates.json": candidates_json(result),
             "report.md": report_md(result, options, array_size, compiled),
             "pareto.png": pareto_png(result)}
    write_directory(output, files)
    original, chosen = result.original, result.chosen
    changes = [f"{k} {v}" for k, v in chosen["choices"].items() if v != "keep"]
    finalists = result.retrained[1:]
    failed = sum(1 for r in finalists if r["accuracy"] < result.retrain_floor)
    click.echo(f"{result.strategy}: {len(result.records)} candidates, {len(finalists)} "
               f"finalists retrained ({failed} more than a point below the original); chosen "
               f"{', '.join(changes) or 'the original'}: predicted cycles {original['cycles']} -> "
               f"{chosen['cycles']}, accuracy {100 * original['accuracy']:.1f} % -> "
               f"{100 * chosen['accuracy']:.1f} %; wrote {output}")


# -- glensidec nas --hardware (glensidec/nas/hardware.py) ------------------------------------


def _hardware() -> Any:
    from glensidec.nas import hardware

    return hardware


def _codesign_inputs(config: Any, dram_bandwidth: int, hardware: str,
                     area_budget: str | None) -> tuple[Any, dict[str, tuple[int, ...]], float]:
    """The reference machine, the machine space and the area budget, checked before any
    worker starts."""
    from glensidec.hardware.area import Machine, fitted

    hw = _hardware()
    reference = Machine(config.rows, config.cols, bus_bytes=dram_bandwidth)
    space = hw.parse_space(hardware)
    model = fitted()
    budget = hw.parse_budget(area_budget, reference, model)
    hw.budget_fits(reference, space, budget, model)
    return reference, space, budget


def _write_codesign(found: Any, options: Any, output: Path) -> None:
    from glensidec.outputs import write_directory

    hw = _hardware()
    compiled = hw.check_estimate(found)
    write_directory(output, hw.outputs(found, options, compiled))
    result, chosen = found.result, found.result.chosen
    changes = [f"{k} {v}" for k, v in chosen["choices"].items() if v != "keep"]
    click.echo(f"{result.strategy}: {len(result.records)} network-machine pairs; chosen "
               f"{', '.join(changes) or 'the original network'} on "
               f"{chosen['machine_text']} (area {chosen['area']:,} of {found.budget:,.0f}): "
               f"predicted cycles {result.original['cycles']} -> {chosen['cycles']}, "
               f"accuracy {100 * result.original['accuracy']:.1f} % -> "
               f"{100 * chosen['accuracy']:.1f} %; wrote {output}")
