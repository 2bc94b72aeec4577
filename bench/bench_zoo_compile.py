"""The default compile against the bare-array compile on the zoo's quantized programs, side
by side in one run (issue 26: within 1.5× of the bare array's CPU, in 4 GiB; issue 30:
at most 15 s CPU). No PyTorch: it compiles the programs bench/bench_zoo.py made.

Run: .venv/bin/python bench/bench_zoo_compile.py --zoo DIR [--models a,b] [--keep-others]
     [--out FILE]
Per model, `glensidec.compile(DIR/MODEL/q/model.gs, "16x16", OUT)` (the default: the whole
accelerator around a 16×16 array, C written) and the same with `bare_array=True`, one after
the other, each in a process of its own under /usr/bin/time: the compile call's CPU
(process_time, bench_zoo.py's figure), the whole process's user + system CPU (interpreter
start and imports included) and peak resident MiB; the load averages before and after.
Writes a Markdown table (default bench/results/zoo_compile.md); exits 1 when a model misses.
With --keep-others, the rows of the models not run this time stay as the table had them
(their run's description kept below this run's), so a few models can be measured again.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

RATIO_LIMIT = 1.5
CPU_LIMIT_S = 15.0
MEMORY_LIMIT_MIB = 4096.0
ZOO_ORDER = [  # bench/results/zoo.md's
    "resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
    "densenet121", "regnet_x_400mf", "alexnet", "vgg11", "squeezenet1_1", "googlenet",
    "mnasnet0_5", "shufflenet_v2_x1_0", "vit_b_16", "swin_t", "convnext_tiny",
    "efficientnet_v2_s", "mobilenet_v3_large", "resnext50_32x4d", "regnet_y_400mf",
    "inception_v3", "squeezenet1_0", "lraspp_mobilenet_v3_large", "fcn_resnet50"]
# The compile in a Python of its own (as bench_zoo.py's): the CPU of the compile call alone
CHILD = """
import sys, time
import glensidec
start = time.process_time()
glensidec.compile(sys.argv[1], "16x16", sys.argv[2], bare_array=sys.argv[3:] == ["bare"])
print(time.process_time() - start)
"""


def timed_compile(program: Path, outdir: Path, bare: bool) -> tuple[float, float, float]:
    """(CPU seconds of the compile call, of the whole process, its peak resident MiB) of
    one compile in a process of its own."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        command = ["/usr/bin/time", "-f", "%U %S %M", "-o", report.name, sys.executable,
                   "-c", CHILD, str(program), str(outdir), *(["bare"] if bare else [])]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError((result.stderr.strip().splitlines() or ["?"])[-1])
        user, system, kib = report.read().split()[-3:]
    call = float(result.stdout.strip().splitlines()[-1])
    return call, float(user) + float(system), int(kib) / 1024


def load_now() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def earlier_table(path: Path) -> tuple[dict[str, str], list[str]]:
    """The rows of an earlier table by model, and its description (what lies between its
    title and its table); none when there is no table."""
    if not path.exists():
        return {}, []
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = {line.split("|")[1].strip(): line for line in lines
            if line.startswith("| ") and not line.startswith("| model |")}
    table = next((at for at, line in enumerate(lines) if line.startswith("| model |")),
                 len(lines))
    return rows, [line.removeprefix("> ").removeprefix(">") for line in lines[1:table]
                  if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", type=Path, required=True,
                        help="the directory of MODEL/q/model.gs programs bench_zoo.py made")
    parser.add_argument("--models", default=",".join(ZOO_ORDER))
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "zoo_compile.md")
    parser.add_argument("--keep-others", action="store_true",
                        help="keep the --out table's rows of the models not run this time")
    args = parser.parse_args()
    started = datetime.datetime.now(datetime.UTC)
    names = args.models.split(",")
    kept, earlier = earlier_table(args.out) if args.keep_others else ({}, [])
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            program = args.zoo / name / "q" / "model.gs"
            before = load_now()
            try:
                cpu, process, peak = timed_compile(program, Path(work) / name, bare=False)
                bare_cpu, bare_process, bare_peak = timed_compile(
                    program, Path(work) / f"{name}-bare", bare=True)
            except RuntimeError as error:
                rows.append(f"| {name} | – | – | – | – | – | – | {error} |")
                print(rows[-1], flush=True)
                continue
            ratio = cpu / bare_cpu
            misses = [label for label, met in (
                (f"≤ {RATIO_LIMIT:g}× bare", ratio <= RATIO_LIMIT),
                (f"≤ {CPU_LIMIT_S:g} s CPU", cpu <= CPU_LIMIT_S),
                ("≤ 4 GiB", peak <= MEMORY_LIMIT_MIB)) if not met]
            rows.append(f"| {name} | {cpu:.1f} | {bare_cpu:.1f} | {ratio:.2f}× | "
                        f"{process:.1f} ({bare_process:.1f}) | {peak:,.0f} ({bare_peak:,.0f}) "
                        f"| {before} → {load_now()} | "
                        f"{', '.join(misses) or '–'} |")
            print(rows[-1], flush=True)
    run = dict(zip(names, rows, strict=True))
    rows = [run.get(name) or kept[name]
            for name in [*ZOO_ORDER, *(name for name in names if name not in ZOO_ORDER)]
            if name in run or name in kept]
    met = sum(row.endswith("| – |") for row in rows)
    lines = [
        "# Default compile against the bare array's, zoo programs (bench/bench_zoo_compile.py)",
        "",
        f"Run started {started:%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores (shared: the "
        "load averages, 1/5/15 min, before → after each model are beside it; CPU seconds "
        "measured under load are inflated, the ratio less so). Each compile is "
        "`glensidec.compile(MODEL/q/model.gs, \"16x16\", OUT)` (default, C written) or with "
        "`bare_array=True`, one Python process each under /usr/bin/time: the CPU of the "
        "compile call (process_time, as bench_zoo.py's; the ratio is of these), the user + "
        "system CPU of the whole process (interpreter start and imports included) and its "
        "peak resident MiB." + (
            f" This run measured {', '.join(names)}; the other rows are an earlier run's:"
            if kept.keys() - set(names) else ""),
        *([""] + [f"> {line}" if line else ">" for line in earlier]
          if kept.keys() - set(names) else []),
        "",
        "| model | default s CPU | bare array s CPU | ratio | process s CPU (bare) "
        "| peak MiB (bare) | load | misses |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"{met} of {len(rows)} meet every target (≤ {RATIO_LIMIT:g}× the bare array's CPU, "
        f"≤ {CPU_LIMIT_S:g} s CPU, ≤ 4 GiB).",
        ""]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
