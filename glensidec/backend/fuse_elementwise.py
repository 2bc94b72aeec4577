"""Fusing elementwise instructions: one loop nest instead of one per operation.

What stays on the host around accelerator layers is mostly elementwise: a quantized
residual add is cast, scale, cast, scale, add, requantize and relu, seven passes over the
tensor, each writing an intermediate buffer the next one reads. This pass (run with
`compile --accel`, after the accelerator layers are formed) merges a map, fold or
requantize-per-channel into the one that consumes its result when

* the result is a buffer of its own, written whole and row-major by that one
  instruction and read whole and row-major, in the same element order, by the consumer
  alone (not the program's output) — through a reshape too (a LayerNorm's result read as
  a matrix's rows: the producer's loop then walks the consumer's shape), and
* one loop nest can walk the destination and every remaining operand together.

The merged instruction (`lower.Fused`) reads its leaves once per element and keeps the
intermediate values in registers; the intermediates' buffers disappear. The values are the
same: every step is the same operation with the same dtypes (`glensidec diff` checks it
instruction by instruction). The host model counts what the fused loop reads, so the
predicted host cycles drop with the passes saved.
"""

from __future__ import annotations

from glensidec.backend.lower import (
    INPUT,
    OUTPUT,
    Fold,
    Fused,
    Instruction,
    LoweredProgram,
    Map,
    RequantizePerChannel,
    Step,
)
from glensidec.backend.views import co_refinable, regroup

#: Maps whose C needs a declaration of its own around the loop (lookup's table) stay apart.
UNFUSABLE_MAPS = frozenset({"lookup"})


def as_fused(instruction: Instruction, lowered: LoweredProgram) -> Fused | None:
    """An elementwise instruction as a one-step Fused, or None for any other."""
    dtype = lowered.buffer_of(instruction.dst).dtype
    if isinstance(instruction, Map) and instruction.op.name not in UNFUSABLE_MAPS:
        return Fused(instruction.note, instruction.dst, (instruction.src,),
                     (Step(instruction.op, (0,), dtype),))
    if isinstance(instruction, Fold):
        # a member read twice (a LayerNorm's squared deviations, d·d) is one leaf, loaded
        # once per element
        leaves = tuple(dict.fromkeys(instruction.members))
        return Fused(instruction.note, instruction.dst, leaves,
                     (Step(instruction.op, tuple(leaves.index(member)
                                                 for member in instruction.members), dtype),))
    if isinstance(instruction, RequantizePerChannel):
        return Fused(instruction.note, instruction.dst, instruction.members,
                     (Step("requantize-per-channel", (0, 1), dtype,
                           (instruction.pre, instruction.post, instruction.zero_point)),))
    if isinstance(instruction, Fused):
        return instruction
    return None


def reshaped(fused: Fused, shape: tuple[int, ...]) -> Fused | None:
    """`fused` walking its destination and leaves as logical dims `shape` (the same
    elements in the same order: a consumer that reads its whole result through a reshape,
    as a LayerNorm's requantize reads its (1, H, W, C) values as (H·W, C) rows), or None
    when a leaf's axes do not split that way."""
    views = [regroup(view, shape) for view in (fused.dst, *fused.leaves)]
    if any(view is None for view in views):
        return None
    dst, *leaves = (view for view in views if view is not None)
    return Fused(fused.note, dst, tuple(leaves), fused.steps)


def merge_loops(producer: Fused, consumer: Fused, leaf: int) -> Fused:
    """`consumer` with its leaf `leaf` replaced by `producer`'s steps."""
    leaves = list(consumer.leaves)
    del leaves[leaf]
    offset = len(leaves)  # the producer's leaves go after the consumer's other ones
    leaves += producer.leaves

    def producer_operand(operand: int) -> int:
        return operand + offset if operand >= 0 else operand

    steps = [Step(step.op, tuple(map(producer_operand, step.operands)), step.dtype,
                  step.params) for step in producer.steps]
    produced = -len(steps)  # the producer's last step
    shift = len(steps)

    def consumer_operand(operand: int) -> int:
        if operand == leaf:
            return produced
        if operand >= 0:
            return operand - (operand > leaf)
        return operand - shift  # a consumer step, now after the producer's

    steps += [Step(step.op, tuple(map(consumer_operand, step.operands)), step.dtype,
                   step.params) for step in consumer.steps]
    return Fused(consumer.note, consumer.dst, tuple(leaves), tuple(steps))


def fuse_elementwise(lowered: LoweredProgram) -> LoweredProgram:
    """`lowered` with chains of elementwise instructions merged (a new program)."""
    result = lowered.copy()
    while _merge_round(result):
        pass
    # a fold of one operand with itself left alone (d·d before a reduction) loads it once
    result.instructions = [
        as_fused(instruction, result) or instruction
        if isinstance(instruction, Fold) and len(set(instruction.members)) < len(
            instruction.members) else instruction
        for instruction in result.instructions]
    used = {view.buffer for instruction in result.instructions
            for view in (instruction.dst, *instruction.reads())}
    result.buffers = {name: buffer for name, buffer in lowered.buffers.items()
                      if name in used or buffer.kind in (INPUT, OUTPUT) or name == lowered.output}
    return result


def _merge_round(lowered: LoweredProgram) -> bool:
    """Merge, in program order, each consumer with the first producer it can take in,
    where neither took part in a merge this round; False when none is left.

    One round reads the program's readers and writers once: merging one pair per pass
    over the program made fusing a transformer's thousands of instructions quadratic
    (a minute for a 12-block encoder). An instruction merged this round waits for the
    next round (the positions of `between` are this round's, so the check is safe)."""
    instructions = lowered.instructions
    writers, readers = lowered.writers(), lowered.readers()
    involved: set[int] = set()  # consumers and producers merged this round
    removed: set[int] = set()  # producers merged into their consumer
    for index, instruction in enumerate(instructions):
        if index in involved:
            continue
        consumer = as_fused(instruction, lowered)
        if consumer is None:
            continue
        for leaf, view in enumerate(consumer.leaves):
            written = writers.get(view.buffer, [])
            if (len(written) != 1 or readers.get(view.buffer) != [index]
                    or written[0] in involved
                    or sum(other.buffer == view.buffer for other in consumer.leaves) != 1
                    or lowered.buffers[view.buffer].kind == OUTPUT
                    or view.buffer == lowered.output):
                continue
            producer = as_fused(instructions[written[0]], lowered)
            if producer is None or not (lowered.is_whole(view)
                                        and lowered.is_whole(producer.dst)):
                continue
            if view.shape != producer.dst.shape:  # read through a reshape (a matrix's rows)
                producer = reshaped(producer, view.shape)
                if producer is None:
                    continue
            between = {instructions[position].dst.buffer
                       for position in range(written[0] + 1, index)}
            if any(leaf_view.buffer in between for leaf_view in producer.leaves):
                continue  # its operands change before the consumer would read them
            merged = merge_loops(producer, consumer, leaf)
            if not co_refinable([merged.dst.dims, *(leaf.dims for leaf in merged.leaves)]):
                continue
            instructions[index] = merged
            involved |= {index, written[0]}
            removed.add(written[0])
            break
    lowered.instructions = [instruction for position, instruction in enumerate(instructions)
                            if position not in removed]
    return bool(removed)
