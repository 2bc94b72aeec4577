"""cocotb test of ws_accel: whole layers as command sequences, bits and cycles.

Python plays main memory (the feature map, the weights and room for the output; every
read answered exactly LATENCY cycles later, posted strobed writes) and offers the
commands of `commands.conv_program` back to back from cycle 0. At the end the output
region must equal `commands.conv_reference` (numpy convolution + the interpreter's
requantize) byte for byte, and the cycle of the last memory write + 1 must equal
`commands.accel_cycles` (the control model). A layer with `"residual": "after"` also
adds a random int8 residual tensor in the epilogue (the quantized residual add), read
through the scratchpad; `"early"` adds it to the accumulator before the requantize;
`"product"` multiplies the two rows (y·r, requantized).
A layer's `"schedule"` picks conv_program's schedule ("im2col" gathers the windows
from main memory, "window" keeps the input rows in the scratchpad and reads each window
as a 2-D pattern of them: every window tiling that fits is run; "interleave" runs every
tiling that takes several N blocks side by side in the accumulator, each COMPUTE naming its
accumulator rows; "one-band" runs every tiling whose chunks of a few output rows read one
resident band, where the epilogue is slower than the layer's K folds; default "best", the
one the cycle model prices fastest).
A layer with `"chain": K` is followed, in the same command stream and without a reset,
by a K×K stride-K max-pool of its result: the pool's first LOAD is fenced (it waits until
the convolution's STOREs have written their last beats), its addresses moved so that it
reads the convolution's output in place; the pool's output must equal the pooled
reference and the cycles `AccelModel`'s of the whole stream (the log says how many
outputs the same stream without the fence gets wrong: on most configurations the pool
then reads rows before they are written).
A layer with `"pool": true` is a max-pool (`commands.pool_program`: the DMA gathers the
windows' taps, or with `"schedule": "band"` loads the input rows once and each window is a
2-D pattern of them; pooling stores take their max), checked against `pool_reference`.
The layers come from the `layers` setting (glensidec.cosim.settings); with an `out`
setting, the simulated cycles and wall times are written to that file (JSON).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cocotb
import numpy as np
from cycle_bench import params

from glensidec.cosim.accel_driver import run_commands, start_clock
from glensidec.cosim.settings import testbench_settings
from glensidec.hardware.accel import (
    ROW_VALUE_BYTES,
    ConvLayer,
    EpilogueConfig,
    MemoryConfig,
    ResidualConfig,
    epilogue_reference,
)
from glensidec.hardware.batched import batched_program
from glensidec.hardware.commands import (
    AccelConfig,
    AccelModel,
    LayerProgram,
    LayerQuant,
    Load,
    Store,
    WindowTiling,
    accel_cycles,
    conv_program,
    conv_reference,
    encode_command,
    group_mask,
    interleaved_tilings,
    layer_folds,
    one_band_tilings,
    pool_program,
    pool_reference,
    sum_pool_reference,
    weight_matrix,
    window_program,
    window_tilings,
)


def accel_config() -> AccelConfig:
    p = params()
    memory = MemoryConfig(row_bytes=p["ROW_BYTES"],
                          scratchpad_bytes=p["ROW_BYTES"] * p["BANKS"] * p["BANK_ROWS"],
                          banks=p["BANKS"], bus_bytes=p["BUS_BYTES"], latency=p["LATENCY"],
                          write_rows=p.get("WRITE_ROWS", 1))
    return AccelConfig(p["ROWS"], p["COLS"], p["ACC_DEPTH"], memory, p["QUEUE_DEPTH"],
                       p["OUT_DEPTH"], p["EPI_LANES"], p["EPI_DEPTH"], p.get("W_LOAD", 1))


def random_table(rng: np.random.Generator, lookup: bool) -> tuple[int, ...] | None:
    """A random 256-entry lookup table (an element-wise non-linearity), or None."""
    return tuple(int(v) for v in rng.integers(-128, 128, 256)) if lookup else None


def random_quant(rng: np.random.Generator, channels: int, residual: str,
                 lookup: bool = False) -> LayerQuant:
    """Requantization like the quantizer's: small biases, multipliers near 2^30, a shift;
    a residual add like add_dynamic's (multipliers below 2^14, a zero-point offset), or
    with `residual` "early" a skip connection added to the accumulator; with `lookup` a
    random lookup table after the clip."""
    zero_point = int(rng.integers(-20, 20))
    relu = bool(rng.random() < 0.5)
    epilogue = EpilogueConfig(pre=int(rng.integers(0, 2)), post=int(rng.integers(36, 42)),
                              zero_point=zero_point, low=zero_point if relu else -128, high=127,
                              table=random_table(rng, lookup))
    added = ResidualConfig(
        self_multiplier=int(rng.integers(2**12, 2**14)), multiplier=int(rng.integers(2**12, 2**14)),
        offset=int(rng.integers(-(2**21), 2**21)),
        requantize_multiplier=int(rng.integers(2**29, 2**31 - 1)), pre=0,
        post=int(rng.integers(42, 46)), zero_point=int(rng.integers(-128, 0)), low=-128,
        high=127, early=residual == "early") if residual else None
    if residual == "rows":  # per row: each residual row holds its offset and reciprocal
        added = ResidualConfig(rows=True, pre=15)
    if residual == "product":  # y·r requantized (a GELU's x·Φ(x)): a 15-bit product
        added = ResidualConfig(
            self_multiplier=0, multiplier=int(rng.integers(-3, 4)),
            offset=int(rng.integers(-100, 100)),
            requantize_multiplier=int(rng.integers(2**29, 2**31 - 1)), pre=0,
            post=int(rng.integers(36, 40)), zero_point=int(rng.integers(-10, 10)),
            low=-128, high=127, product=True)
    return LayerQuant(epilogue, tuple(int(v) for v in rng.integers(-3000, 3000, channels)),
                      tuple(int(v) for v in rng.integers(2**29, 2**31 - 1, channels)),
                      input_zero_point=int(rng.integers(-128, 128)), residual=added)


async def run_pool(dut: Any, config: AccelConfig, layer: ConvLayer, seed: int,
                   summed: bool = False, schedule: str = "best", lookup: bool = False,
                   scaled: bool = False) -> int:
    """Run one max-pool (or, `summed`, an average pool: window sums through a random
    epilogue, with `lookup` a random lookup table after it, with `scaled` random
    per-channel scales of the sums, squeeze-excite's) on the DUT; returns the simulated
    cycles (checked inside)."""
    rng = np.random.default_rng(seed)
    feature = rng.integers(-128, 128, (layer.height, layer.width, layer.channels))
    quant = None
    if summed:  # per-channel vectors: a Config per N block
        quant = LayerQuant(EpilogueConfig(pre=0, post=int(rng.integers(30, 34)),
                                          zero_point=int(rng.integers(-20, 20)),
                                          table=random_table(rng, lookup)),
                           tuple(int(v) for v in rng.integers(-3000, 3000, layer.channels)),
                           tuple(int(v) for v in rng.integers(2**26, 2**28, layer.channels)),
                           scale=tuple(int(v) for v in rng.integers(-128, 128, layer.channels))
                           if scaled else None)
    program = pool_program(config, layer, quant, schedule)
    M, C = layer.out_size[0] * layer.out_size[1], layer.channels
    memory = rng.integers(0, 256, program.memory_bytes).astype(np.uint8)  # garbage output
    memory[:feature.size] = feature.reshape(-1) & 0xFF
    if quant is None:
        expected = pool_reference(layer, feature)
    else:
        expected = epilogue_reference(sum_pool_reference(layer, feature),
                                      np.array(quant.bias)[None, :],
                                      np.array(quant.multiplier), quant.epilogue,
                                      scale=None if quant.scale is None
                                      else np.array(quant.scale))
    return await run_and_check(dut, config, program, memory, expected,
                               f"{layer.name}: {'sum' if summed else 'max'}-pool to {M}x{C}")


async def run_and_check(dut: Any, config: AccelConfig, program: LayerProgram,
                        memory: np.ndarray, expected: np.ndarray, what: str) -> int:
    """Run a layer's commands on the DUT against `memory`; its (M, N) output region must
    equal `expected` and its cycles the prediction. Returns the cycles."""
    M, N = expected.shape
    words = [encode_command(command, config.cols) for command in program.commands]
    cycles = await run_commands(dut, words, memory,
                                range(program.output_base, program.output_base + M * N),
                                config.memory.bus_bytes, config.memory.latency)
    got = memory[program.output_base:program.output_base + M * N].astype(np.int64)
    got = np.where(got >= 128, got - 256, got).reshape(M, N)
    mismatches = int(np.count_nonzero(got != expected))
    assert mismatches == 0, f"{what}: {mismatches} of {M * N} outputs differ"
    predicted = accel_cycles(config, program.commands).cycles
    assert cycles == predicted, f"{what}: simulated {cycles} cycles, predicted {predicted}"
    dut._log.info(f"{what}, {len(program.commands)} commands, {predicted} cycles "
                  "(predicted = simulated)")
    return predicted


def schedule_tilings(config: AccelConfig, layer: ConvLayer, residual: bool,
                     schedule: str) -> list[WindowTiling]:
    """The tilings a window-like schedule runs the layer in: every one the compiler offers."""
    if schedule == "one-band":  # chunks of a few output rows reading one resident band
        tilings = one_band_tilings(config, layer, residual)
        # offered wherever the epilogue takes more cycles a row than the layer has K folds
        assert tilings or layer_folds(layer, config) >= config.epilogue_cycles, layer.name
        return list(tilings)
    tilings = window_tilings(config, layer, residual)
    assert tilings, f"{layer.name}: no window tiling fits"
    if schedule == "interleave":  # N blocks side by side in the accumulator
        tilings = list(dict.fromkeys(
            variant for base in [None, *tilings]
            for variant in interleaved_tilings(config, layer, base, residual)))
        assert tilings, f"{layer.name}: no interleaved tiling fits"
    return list(tilings)


def per_row_values(rng: np.random.Generator, rows: int, columns: int,
                   block: int) -> np.ndarray:
    """An (M, N) int8 residual for the per-row mode: each row's offset (a LayerNorm's
    mean, up to 2^15) and packed reciprocal l·2^16 + h (a LayerNorm's 2^30/σ at 2^-15:
    whole part h up to 2^15, fraction l), little-endian i32, at the start of every block
    of `block` columns (each N block reads its own)."""
    reciprocal = rng.integers(1, 2**30, rows)
    whole, part = -(reciprocal >> 15), -(reciprocal & (2**15 - 1))
    values = np.stack([rng.integers(-(2**15), 2**15, rows), part * 2**16 + whole],
                      axis=1).astype("<i4")
    row_bytes = values.view(np.int8).astype(np.int64)  # (rows, 8)
    added = rng.integers(-128, 128, (rows, columns))
    for start in range(0, columns, block):
        assert columns - start >= ROW_VALUE_BYTES, "a block too narrow for the row's values"
        added[:, start:start + ROW_VALUE_BYTES] = row_bytes
    return added


async def run_layer(dut: Any, config: AccelConfig, layer: ConvLayer, seed: int,
                    residual: str = "", schedule: str = "best", lookup: bool = False) -> int:
    """Run one layer on the DUT (each window tiling for the "window" schedule); returns
    the simulated cycles (checked inside)."""
    rng = np.random.default_rng(seed)
    feature = rng.integers(-128, 128, (layer.height, layer.width, layer.channels))
    weights = rng.integers(-128, 128, (*layer.kernel_hw, layer.channels,
                                       layer.out_channels)) * group_mask(layer)
    quant = random_quant(rng, layer.out_channels, residual, lookup)
    if schedule in ("one-band", "window", "interleave"):
        cycles = 0
        for tiling in schedule_tilings(config, layer, bool(residual), schedule):
            cycles += await run_program(dut, config, layer, window_program(
                config, layer, quant, tiling), rng, feature, weights, quant, residual,
                f"{schedule} schedule, {tiling}")
        return cycles
    return await run_program(dut, config, layer, conv_program(config, layer, quant, schedule),
                             rng, feature, weights, quant, residual, f"{schedule} schedule")


def moved(program: LayerProgram, offset: int, fence: bool) -> list[Any]:
    """The program's commands with every main-memory address `offset` bytes further,
    its first LOAD fenced when `fence`."""
    commands: list[Any] = []
    for command in program.commands:
        if isinstance(command, Load | Store):
            command = replace(command, dma=replace(command.dma, base=command.dma.base + offset))
        if isinstance(command, Load) and fence and not any(
                isinstance(earlier, Load) for earlier in commands):
            command = replace(command, fence=True)
        commands.append(command)
    return commands


@dataclass(frozen=True)
class Chained:
    """A random convolution `layer` and the pool_size × pool_size stride pool_size max-pool
    of its output (`pool_layer`): what run_chain and run_onchip_chain both run."""

    layer: ConvLayer
    conv: LayerProgram
    pool_layer: ConvLayer
    feature: np.ndarray
    weights: np.ndarray
    quant: LayerQuant
    expected: np.ndarray  # the pooled reference, (pool rows, pool cols, channels)

    def memory(self, config: AccelConfig, size: int, seed: int) -> np.ndarray:
        """`size` bytes of random main memory holding the convolution's image and weights."""
        memory = np.random.default_rng(seed).integers(0, 256, size).astype(np.uint8)
        image = self.conv.input_image(self.feature, self.quant.input_zero_point)
        memory[self.conv.input_base:self.conv.input_base + image.size] = image
        stored = weight_matrix(self.layer, config.cols, self.weights).reshape(-1)
        memory[self.conv.weight_base:self.conv.weight_base + stored.size] = stored & 0xFF
        return memory

    def mismatches(self, memory: np.ndarray, output: int) -> int:
        """Outputs of the pool at byte `output` that differ from the reference."""
        got = memory[output:output + self.expected.size].astype(np.int64)
        got = np.where(got >= 128, got - 256, got).reshape(self.expected.shape)
        return int(np.count_nonzero(got != self.expected))


def chained(config: AccelConfig, layer: ConvLayer, pool_size: int, seed: int) -> Chained:
    rng = np.random.default_rng(seed)
    feature = rng.integers(-128, 128, (layer.height, layer.width, layer.channels))
    weights = rng.integers(-128, 128, (*layer.kernel_hw, layer.channels, layer.out_channels))
    quant = random_quant(rng, layer.out_channels, "")
    out_h, out_w = layer.out_size
    pool_layer = ConvLayer(f"{layer.name}_pool", out_h, out_w, layer.out_channels,
                           layer.out_channels, pool_size, pool_size)
    expected = pool_reference(pool_layer, conv_reference(layer, feature, weights, quant)
                              .reshape(out_h, out_w, layer.out_channels))
    return Chained(layer, conv_program(config, layer, quant), pool_layer, feature, weights,
                   quant, expected)


async def run_chain(dut: Any, config: AccelConfig, layer: ConvLayer, pool_size: int,
                    seed: int) -> int:
    """The convolution `layer`, then a pool_size × pool_size stride pool_size max-pool of
    its output, in one command stream (module docstring); returns the simulated cycles."""
    chain = chained(config, layer, pool_size, seed)
    conv = chain.conv
    pool = pool_program(config, chain.pool_layer)
    offset = conv.output_base - pool.input_base  # the pool reads the conv's output in place
    (pool_h, pool_w), N = chain.pool_layer.out_size, layer.out_channels
    output = offset + pool.output_base
    size = max(conv.memory_bytes, offset + pool.memory_bytes)
    results = []
    for fence in (True, False):
        memory = chain.memory(config, size, seed)
        commands = conv.commands + moved(pool, offset, fence)
        words = [encode_command(command, config.cols) for command in commands]
        cycles = await run_commands(dut, words, memory, range(conv.output_base, size),
                                    config.memory.bus_bytes, config.memory.latency)
        results.append((cycles, chain.mismatches(memory, output)))
    (cycles, mismatches), (_, unfenced_mismatches) = results
    what = f"{layer.name} then a {pool_size}x{pool_size} max-pool to {pool_h * pool_w}x{N}"
    assert mismatches == 0, f"{what}: {mismatches} of {chain.expected.size} outputs differ"
    predicted = AccelModel(config).run(conv.commands + moved(pool, offset, True)).cycles
    assert cycles == predicted, f"{what}: simulated {cycles} cycles, predicted {predicted}"
    dut._log.info(f"{what}, chained with a fence: {predicted} cycles (predicted = simulated);"
                  f" {unfenced_mismatches} outputs wrong without it")
    return predicted


async def run_onchip_chain(dut: Any, config: AccelConfig, layer: ConvLayer, pool_size: int,
                           seed: int) -> int:
    """The convolution `layer`, then a pool_size × pool_size stride pool_size max-pool of
    its output in each pool schedule, chained through the scratchpad
    (glensidec.hardware.chain.onchip_chain: the convolution's STOREs write the pool's input
    rows on chip, the pool's pooling STOREs wait for the rows they read), the pool's rows
    placed at the first shift that keeps them apart from the convolution's. The pool's
    output must equal the pooled reference, main memory hold nothing of the convolution's
    result (it never leaves the chip), and the cycles equal `AccelModel`'s; returns them."""
    from glensidec.hardware.chain import NotChainable, onchip_chain, relocated

    chain = chained(config, layer, pool_size, seed)
    conv = chain.conv
    out_h, out_w = layer.out_size
    total = 0
    for schedule in ("band", "gather"):
        pool = pool_program(config, chain.pool_layer, schedule=schedule)
        offset = conv.output_base - pool.input_base
        step = config.memory.bank_rows // 4
        commands = None
        for shift in range(step, config.memory.scratchpad_rows, step):
            try:
                commands = onchip_chain(config, conv.commands,
                                        relocated(config, pool.commands, offset, shift))
                break
            except NotChainable:
                continue
        what = f"{layer.name} then a {pool_size}x{pool_size} {schedule} max-pool on chip"
        if commands is None:
            dut._log.info(f"{what}: the pool's rows do not fit beside the convolution's")
            continue
        size = max(conv.memory_bytes, offset + pool.memory_bytes)
        memory = chain.memory(config, size, seed)
        # main memory before the image and weights went in (the same seed's bytes)
        before = np.random.default_rng(seed).integers(0, 256, size).astype(np.uint8)
        output = offset + pool.output_base
        words = [encode_command(command, config.cols) for command in commands]
        cycles = await run_commands(dut, words, memory,
                                    range(output, output + chain.expected.size),
                                    config.memory.bus_bytes, config.memory.latency)
        mismatches = chain.mismatches(memory, output)
        assert mismatches == 0, f"{what}: {mismatches} of {chain.expected.size} outputs differ"
        result = slice(conv.output_base, conv.output_base + out_h * out_w * layer.out_channels)
        assert (memory[result] == before[result]).all(), f"{what}: the result left the chip"
        predicted = AccelModel(config).run(commands).cycles
        assert cycles == predicted, f"{what}: simulated {cycles} cycles, predicted {predicted}"
        dut._log.info(f"{what}: {predicted} cycles (predicted = simulated)")
        total += predicted
    return total


async def run_program(dut: Any, config: AccelConfig, layer: ConvLayer, program: LayerProgram,
                      rng: np.random.Generator, feature: np.ndarray, weights: np.ndarray,
                      quant: LayerQuant, residual: str, what: str) -> int:
    """Run one program of `layer` on the DUT against fresh memory; returns its cycles."""
    M, K, N = layer.gemm
    memory = rng.integers(0, 256, program.memory_bytes).astype(np.uint8)  # garbage output
    image = program.input_image(feature, quant.input_zero_point)
    memory[program.input_base:program.input_base + image.size] = image
    stored = weight_matrix(layer, config.cols, weights).reshape(-1)  # grouped: packed
    memory[program.weight_base:program.weight_base + stored.size] = stored & 0xFF
    added = rng.integers(-128, 128, (M, N)) if residual else None
    if residual == "rows":
        added = per_row_values(rng, M, N, config.cols)
    if added is not None:
        memory[program.residual_base:program.residual_base + M * N] = added.reshape(-1) & 0xFF
    return await run_and_check(dut, config, program, memory,
                               conv_reference(layer, feature, weights, quant, added),
                               f"{layer.name}: {M}x{K}x{N} ({what})")


async def run_batched(dut: Any, config: AccelConfig, item: ConvLayer, count: int,
                      seed: int, residual: str = "") -> int:
    """`count` GEMMs of the shape `item`, each its own input and weights (and, with
    `residual` "rows", its own per-row values: softmax·V's), as one chained stream
    (glensidec.hardware.batched): every item's result as `conv_reference`'s and the whole
    stream in `AccelModel`'s cycles; returns them."""
    rng = np.random.default_rng(seed)
    M, K, N = item.gemm
    quant = random_quant(rng, N, residual)
    program = batched_program(config, item, quant, count)
    features = rng.integers(-128, 128, (count, M, K))
    weights = rng.integers(-128, 128, (count, K, N))
    memory = rng.integers(0, 256, program.memory_bytes).astype(np.uint8)
    memory[program.input_base:program.input_base + features.size] = \
        features.reshape(-1) & 0xFF
    memory[program.weight_base:program.weight_base + weights.size] = weights.reshape(-1) & 0xFF
    added = [per_row_values(rng, M, N, config.cols) if residual else None
             for _ in range(count)]
    for g, rows in enumerate(added):
        if rows is not None:
            start = program.residual_base + g * M * N
            memory[start:start + M * N] = rows.reshape(-1) & 0xFF
    expected = np.concatenate([conv_reference(item, features[g].reshape(M, 1, K),
                                              weights[g].reshape(1, 1, K, N), quant, added[g])
                               for g in range(count)])
    return await run_and_check(dut, config, program, memory, expected,
                               f"{item.name}: {count} GEMMs of {M}x{K}x{N}, one stream")


@cocotb.test()
async def layers(dut: Any) -> None:
    """Every layer of the `layers` setting, one after the other (reset in between)."""
    config = accel_config()
    await start_clock(dut)
    results = []
    settings = testbench_settings()
    for seed, spec in enumerate(settings["layers"]):
        start = time.perf_counter()
        fields = {key: tuple(value) if isinstance(value, list) else value  # (dilation)
                  for key, value in spec.items()
                  if key not in ("residual", "pool", "schedule", "lookup", "scale", "chain",
                                 "onchip", "batched")}
        if spec.get("residual") == "rows" and config.cols < ROW_VALUE_BYTES:
            continue  # the per-row mode needs 8 bytes of residual row (ws_epilogue's ROW_OK)
        if spec.get("batched"):
            cycles = await run_batched(dut, config, ConvLayer(**fields), int(spec["batched"]),
                                       seed, str(spec.get("residual", "")))
        elif spec.get("onchip"):
            cycles = await run_onchip_chain(dut, config, ConvLayer(**fields),
                                            int(spec["onchip"]), seed)
        elif spec.get("chain"):
            cycles = await run_chain(dut, config, ConvLayer(**fields), int(spec["chain"]), seed)
        elif spec.get("pool"):
            cycles = await run_pool(dut, config, ConvLayer(**fields), seed,
                                    spec["pool"] == "sum", str(spec.get("schedule", "best")),
                                    bool(spec.get("lookup")), bool(spec.get("scale")))
        else:
            cycles = await run_layer(dut, config, ConvLayer(**fields), seed,
                                     str(spec.get("residual", "")),
                                     str(spec.get("schedule", "best")),
                                     bool(spec.get("lookup")))
        results.append({"name": spec["name"], "cycles": cycles,
                        "seconds": time.perf_counter() - start})
    if "out" in settings:  # bench/bench_accel_top.py reads the simulated cycles
        Path(settings["out"]).write_text(json.dumps(results))
