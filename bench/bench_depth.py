"""Deep nesting benchmark: parsing, type-checking and printing a program written as one
expression thousands of constructs deep (no `let`), against the target of issue 14:
`fmt` of a 6,000-deep program in at most 1 s (printing itself, in this process; Python
start-up and parsing are reported beside it).

Run alone: `.venv/bin/python bench/bench_depth.py [--repeat 3]`.
Writes bench/results/depth.md and exits 1 if the target is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from glensidec.cli import RECURSION_LIMIT
from glensidec.lang.syntax import format_program, parse_program
from glensidec.lang.typecheck import check_program

RESULTS = Path(__file__).resolve().parent / "results" / "depth.md"
DEPTHS = (1000, 3000, 6000)
FMT_TARGET_SECONDS = 1.0  # at depth 6000


def deep_text(depth: int) -> str:
    return ("(input x i8 (shape 4 4))\n" + "(compute relu " * depth + "(access-tensor x)"
            + ")" * depth + "\n")


def median_seconds(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    rows = []
    ok = True
    for depth in DEPTHS:
        text = deep_text(depth)
        program = parse_program(text, "<deep>")
        parse_s = median_seconds(partial(parse_program, text, "<deep>"), args.repeat)
        check_s = median_seconds(partial(check_program, program), args.repeat)
        printed = format_program(program)
        fmt_s = median_seconds(partial(format_program, program), args.repeat)
        assert parse_program(printed, "<deep>").root == program.root  # it parses back
        target = FMT_TARGET_SECONDS if depth == 6000 else None
        met = target is None or fmt_s <= target
        ok &= met
        rows.append(f"| {depth} | {parse_s:.2f} | {check_s:.2f} | {fmt_s:.2f} | "
                    f"{len(printed) / 1e6:.1f} | "
                    f"{'≤ 1 s: ' + ('met' if met else 'MISSED') if target else ''} |")
        print(rows[-1], flush=True)
    RESULTS.write_text(
        "# Deep nesting (bench/bench_depth.py)\n\n"
        "One expression `depth` constructs deep, no `let`; seconds (median of "
        f"{args.repeat}) in one process. The printed text grows as depth² (indentation).\n\n"
        "| depth | parse s | check s | fmt s | printed MB | target |\n"
        "|---:|---:|---:|---:|---:|---|\n" + "\n".join(rows) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
