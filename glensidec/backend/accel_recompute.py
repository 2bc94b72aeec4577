"""An array call whose i32 result several requantizations read runs once per reader.

ConvNeXt's and ViT's MLP requantize the first linear layer's sums twice, per channel: x
(the GELU's input, kept for its product x·Φ(x)) and x/√2 (the erf's argument, its own
multipliers), and the host did both over every element (2.4 M cycles a block at 56×56×384,
with the erf and the affine after it 10.8 M). The epilogue requantizes one result per
layer, and the accumulator's i32 sums never leave the accelerator, so the product is
computed once for each requantization: each copy of the array call with its own
requantize (and what follows it: the erf's table, composed with the affine after it by
`accel_tables`) is then an accelerator layer like any other. The array's cycles are paid
twice (about M·N/16 cycles for a 16×16 array at full use, 460 k for that block) to save
the host's M·N per requantization and everything after it.

It runs before `accel_layers.fuse_accel_layers`, and copies a call only when every copy's
chain is one the accelerator layers take (`accel_layers.chain_of_call`).
"""

from __future__ import annotations

from dataclasses import replace

from glensidec.backend.accel_layers import chain_of_call, fusable_call
from glensidec.backend.lower import (
    ArrayGemm,
    Buffer,
    Fold,
    Instruction,
    LoweredProgram,
    Map,
    RequantizePerChannel,
    rename_buffers,
)
from glensidec.backend.views import View
from glensidec.hardware.commands import AccelConfig
from glensidec.lang.dtypes import Array


def recompute_shared_products(lowered: LoweredProgram, weights: dict[str, Array],
                              accel: AccelConfig) -> LoweredProgram:
    """`lowered` with each int8 array call that several requantizations read copied once
    per requantization, each copy read by one (a new program)."""
    result = lowered.copy()
    index = 0
    while index < len(result.instructions):
        gemm = result.instructions[index]
        if isinstance(gemm, ArrayGemm) and fusable_call(result, gemm, accel):
            index += _split(result, index, weights)
        index += 1
    return result


def _requantizes(instruction: Instruction, result: View) -> bool:
    """Does `instruction` requantize `result`'s buffer (and read nothing else of it)?"""
    reads = [view for view in instruction.reads() if view.buffer == result.buffer]
    return len(reads) == 1 and (
        isinstance(instruction, RequantizePerChannel)
        or (isinstance(instruction, Map) and instruction.op.name == "requantize"))


def _shared_point(lowered: LoweredProgram, index: int) -> list[int]:
    """The call at `index` and the bias adds after it that each have one reader: the
    instructions a requantization's copy repeats."""
    chain, current = [index], lowered.instructions[index].dst
    while len(followers := lowered.readers().get(current.buffer, [])) == 1:
        step = lowered.instructions[followers[0]]
        if not (isinstance(step, Fold) and step.op == "elementwise-add") or \
                lowered.writers().get(step.dst.buffer) != followers:
            break
        chain.append(followers[0])
        current = step.dst
    return chain


def _split(lowered: LoweredProgram, index: int, weights: dict[str, Array]) -> int:
    """Copy the call at `index` (and the bias adds after it) for each reader of their
    result after the first; the number of instructions inserted (0: nothing changed)."""
    chain = _shared_point(lowered, index)
    shared = lowered.instructions[chain[-1]].dst
    readers = lowered.readers().get(shared.buffer, [])
    if len(readers) < 2 or shared.buffer == lowered.output or \
            lowered.writers().get(lowered.instructions[index].dst.buffer) != [index] or \
            not all(_requantizes(lowered.instructions[reader], shared) for reader in readers):
        return 0
    copies: list[Instruction] = []
    originals = {reader: lowered.instructions[reader] for reader in readers[1:]}
    for number, reader in enumerate(readers[1:], 1):
        names: dict[str, str] = {}
        for position in chain:  # each buffer of the chain gets its copy
            made = lowered.instructions[position].dst.buffer
            names[made] = _fresh(lowered, f"{made}_again", number)
            original = lowered.buffers[made]
            lowered.buffers[names[made]] = Buffer(names[made], original.dtype, original.shape,
                                                  original.kind)
        copies.extend(replace(rename_buffers(lowered.instructions[position], names),
                              note=f"{lowered.instructions[position].note} (again, for "
                                   f"{originals[reader].dst.buffer})")
                      for position in chain)
        lowered.instructions[reader] = rename_buffers(originals[reader], names)
    end = chain[-1] + 1
    lowered.instructions[end:end] = copies
    calls = [index] + [end + offset for offset in range(0, len(copies), len(chain))]
    if all(chain_of_call(lowered, call, weights) is not None for call in calls):
        return len(copies)
    # some copy's chain would stay on the host: the call is kept once
    del lowered.instructions[end:end + len(copies)]
    for reader, instruction in originals.items():
        lowered.instructions[reader] = instruction
    for copy in copies:
        del lowered.buffers[copy.dst.buffer]
    return 0


def _fresh(lowered: LoweredProgram, base: str, number: int) -> str:
    name = f"{base}_{number}" if number > 1 else base
    while name in lowered.buffers:
        name += "_"
    return name
