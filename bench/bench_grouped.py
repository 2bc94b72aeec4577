"""Grouped convolutions on the accelerator: one grouped layer (block-diagonal packing of the
groups into N blocks of COLS columns, `commands.group_blocks`) against each group its own
layer, both priced by the exact cycle model (`commands.best_conv_program`).

Takes `glensidec compile` output directories (the default target) and prices each grouped
layer in them that is not depthwise: the layer as compiled, and G layers of Cg input and
Og output channels on the same map (each as if its channels were a map of their own, so
the per-group figure leaves out what reading a column window of the shared map would add).
Writes bench/results/grouped.md:

    python bench/bench_grouped.py OUTDIR [OUTDIR …]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from glensidec.backend.accel_layers import layer_geometry, layer_quant
from glensidec.cosim.diff import load_compiled
from glensidec.hardware.commands import AccelConfig, LayerQuant, best_conv_program
from glensidec.lang.data import load_weights

RESULTS = Path(__file__).resolve().parent / "results" / "grouped.md"


def price(outdir: Path) -> list[tuple[str, str, int, int]]:
    """(layer, shape, grouped-layer cycles, per-group cycles) of each grouped layer."""
    program, lowered = load_compiled(outdir)
    weights = load_weights(program)
    config = AccelConfig()
    rows = []
    for layer in lowered.accel_layers():
        if layer.groups == 1 or layer.groups == layer.n:
            continue
        geometry = layer_geometry(layer)
        quant = layer_quant(lowered, layer, weights)
        grouped = best_conv_program(config, geometry, quant)[1].cycles
        per_in, per_out = geometry.channels // layer.groups, layer.n // layer.groups
        one = replace(geometry, channels=per_in, out_channels=per_out, groups=1)
        one_quant = LayerQuant(quant.epilogue, quant.bias[:per_out],
                               quant.multiplier[:per_out], quant.input_zero_point)
        per_group = layer.groups * best_conv_program(config, one, one_quant)[1].cycles
        shape = (f"{geometry.height}×{geometry.width}, {geometry.channels}→{layer.n}, "
                 f"{layer.groups} groups of {per_in}→{per_out}, {geometry.kernel}×"
                 f"{geometry.kernel}/{geometry.stride}")
        rows.append((layer.name, shape, grouped, per_group))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdirs", nargs="+", type=Path)
    args = parser.parse_args()
    lines = ["# Grouped convolutions: one grouped layer or one layer per group "
             "(bench/bench_grouped.py)", "",
             "The default accelerator (16×16, default memories, 16 B/cycle); cycles by the "
             "exact model (`best_conv_program`). Per group: G layers of Cg→Og channels, "
             "each on a map of its own channels (a lower bound: no column window).", ""]
    for outdir in args.outdirs:
        rows = price(outdir)
        total_grouped = sum(row[2] for row in rows)
        total_split = sum(row[3] for row in rows)
        lines += [f"## {outdir.name}", "",
                  f"{len(rows)} grouped layers: {total_grouped:,} cycles as grouped layers, "
                  f"{total_split:,} as one layer per group "
                  f"({total_split / max(total_grouped, 1):.2f}×).", "",
                  "| layer | shape | grouped layer | one layer per group | ratio |",
                  "|---|---|---|---|---|"]
        lines += [f"| {name} | {shape} | {grouped:,} | {split:,} | {split / grouped:.2f}× |"
                  for name, shape, grouped, split in rows]
        lines.append("")
    RESULTS.write_text("\n".join(lines))
    print(RESULTS.read_text())


if __name__ == "__main__":
    main()
