"""Print a compiled OUTDIR's per-layer table and where its predicted cycles go (make demo).

Reads OUTDIR/report.json (what report.html shows): per accelerator layer its cycles, the
cycles a row entered the array, the rest (DMA and epilogue wait) and the bytes the DMA
loaded and stored; then the total with the host's share (the host model of
glensidec/hardware/host.py, copies and fills included).

Run: .venv/bin/python examples/show_layers.py OUTDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from glensidec.backend.report import ReportData, cycle_parts


def main(outdir: Path) -> None:
    data = ReportData.from_json((outdir / "report.json").read_text())
    print(f"{'layer':<24} {'M x K x N':>16} {'cycles':>8} {'array':>8} {'DMA wait':>9} "
          f"{'bytes in':>9} {'bytes out':>9}")
    for row in data.layers:
        shape = row.op.split(",")[0].replace("M=", "").replace(" K=", " x ").replace(
            " N=", " x ")
        print(f"{row.name:<24} {shape:>16} {row.array_cycles:>8,} {row.busy_cycles:>8,} "
              f"{row.array_cycles - row.busy_cycles:>9,} {row.load_bytes:>9,} "
              f"{row.store_bytes:>9,}")
    total = data.cycles
    print(f"predicted cycles: {total.total:,} = accelerator {total.accelerator:,} + array calls "
          f"{total.array:,} + host {total.host:,} (host share {total.host_share:.1%})")
    for label, value in cycle_parts(data):
        print(f"  {label:<24} {value:>8,}  {value / (total.total or 1):6.1%}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
