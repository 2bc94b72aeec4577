"""The quantization error report: how far each quantized layer is from the float program,
alone and with the error of the layers before it (`glensidec quantize` writes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from glensidec.frontends.qparams import QParams
from glensidec.frontends.quantize import QuantizedProgram, layer_values
from glensidec.lang.data import load_weights
from glensidec.lang.interp import evaluate_all
from glensidec.lang.terms import Program
from glensidec.lang.typecheck import (
    check_program,
)

Array = np.ndarray[Any, Any]


@dataclass
class LayerError:
    """Worst error of one layer over some inputs, in units of its output step (LSB).

    end_to_end: the quantized program against the float program, both from the same float
      inputs (errors of earlier layers included).
    isolated: this layer alone, fed the dequantized i8 values of the layers before it
      (its own int8 weights and output rounding).
    arithmetic: as isolated, with the float weights replaced by the dequantized i8 weights:
      what is left is the integer arithmetic itself (rounding of the output: ≤ 0.5) and
      saturation where that float value lies outside the layer's i8 range.
    arithmetic_in_range: arithmetic over the elements whose float value lies inside the i8
      range (within half a step of it): the integer arithmetic alone.
    """

    name: str
    end_to_end: float
    isolated: float
    arithmetic: float
    arithmetic_in_range: float = 0.0


def layer_errors(quantized: QuantizedProgram, program: Program,
                 samples: list[dict[str, Array]]) -> list[LayerError]:
    """Measure every recorded layer of `quantized` (made from `program`) on `samples`."""
    types = check_program(program)
    weights = load_weights(program)
    fake = dict(weights)
    for name, scales in quantized.weight_scales.items():
        fake[name] = (quantized.weights[name].astype(np.float64) * scales).astype(np.float32)
    worst = {layer.name: [0.0, 0.0, 0.0, 0.0] for layer in quantized.layers}
    for inputs in samples:
        reference = evaluate_all(program.root, types, {**weights, **inputs})
        dequantized = {layer.float_term: layer.params.dequantize(q)
                       for layer, q in layer_values(quantized, inputs)}
        for layer in quantized.layers:
            ours = dequantized[layer.float_term]
            errors = [ours - reference[layer.float_term]]
            if layer.float_term.op == "access-tensor":
                errors += [errors[0] * 0] * 3
            else:
                given = {t: v for t, v in dequantized.items() if t != layer.float_term}
                for tensors in (weights, fake):
                    alone = evaluate_all(layer.float_term, types, {**tensors, **inputs},
                                           given=given)[layer.float_term]
                    errors.append(ours - alone)
                errors.append(np.where(_in_range(alone, layer.params), errors[-1], 0))
            for index, error in enumerate(errors):
                lsb = float(np.max(np.abs(error))) / layer.params.scale
                worst[layer.name][index] = max(worst[layer.name][index], lsb)
    return [LayerError(name, *values) for name, values in worst.items()]


def _in_range(real: Array, params: QParams) -> Array:
    """Where a real value is representable in i8 with `params` (up to half a step out)."""
    low, high = (float(params.dequantize(np.array(q))) for q in (-128, 127))
    half = params.scale / 2
    result: Array = (real >= low - half) & (real <= high + half)
    return result
