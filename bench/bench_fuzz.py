"""The differential fuzzer at scale: 10,000 generated programs, each run three ways.

Run alone: `.venv/bin/python bench/bench_fuzz.py [--count N] [--jobs J]` (writes
bench/results/fuzz.md). Programs `generate(SEED, i)` for i < N (glensidec/lang/generate.py),
each run by glensidec/cosim/fuzz.py: the interpreter, the generated C program (built at
-O0) and, for every RTL_EVERY-th program written for one of RTL_ARRAYS, the RTL
co-simulation (`make sim`). Each failure is shrunk and its minimal program printed in the
table. Results go to a JSON-lines log as they come (`--log`), so a stopped run resumes
where it was; `--report` rewrites the table from the log alone.

Targets (issue 27): 0 disagreements, 0 crashes, 0 compile errors; every construct and
compute type in at least 100 programs. Exits 1 when one is missed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from glensidec.cosim.fuzz import (  # noqa: E402
    AGREE,
    CRASH,
    Runner,
    choose_mode,
    run,
    shrink_run,
)
from glensidec.lang.constructs import COMPUTE_TYPES, CONSTRUCTS  # noqa: E402
from glensidec.lang.generate import Options, generate  # noqa: E402

SEED = 2027
COUNT = 10_000
RTL_EVERY = 100
RTL_ARRAYS = ((2, 2), (4, 4))  # one Verilator build each (and one of the accelerator)
TARGET_USES = 100
RESULTS = REPO / "bench" / "results" / "fuzz.md"


def run_one(runner: Runner, seed: int, index: int, options: Options, rtl_every: int,
            shrink_budget: int) -> dict[str, Any]:
    start = time.perf_counter()
    generated = generate(seed, index, options)
    runner.rtl = index % rtl_every == 0 and generated.array in RTL_ARRAYS
    outcome = run(runner, generated)
    record: dict[str, Any] = {
        "index": index, "status": outcome.status, "stage": outcome.stage,
        "mode": choose_mode(generated).options(), "rtl": runner.rtl,
        "uses": dict(generated.uses()), "detail": outcome.detail[-1500:],
    }
    if outcome.status != AGREE:
        small, last = shrink_run(runner, generated, outcome, shrink_budget)
        record["minimal"] = small.text()
        record["minimal_detail"] = last.detail[-1500:]
        record["minimal_mode"] = last.mode.options()
    record["seconds"] = round(time.perf_counter() - start, 3)
    return record


def worker(job: int, jobs: int, seed: int, indices: list[int], log: Path, work: Path,
           options: Options, rtl_every: int, shrink_budget: int) -> None:
    runner = Runner(work / f"job{job}", sim_cache=work / "sim_cache")
    with log.open("a") as out:
        for index in indices[job::jobs]:
            record = run_one(runner, seed, index, options, rtl_every, shrink_budget)
            out.write(json.dumps(record) + "\n")
            out.flush()


def recheck(log: Path, work: Path, seed: int, options: Options) -> None:
    """Run every program that failed again, with the code as it is now (after fixes), and
    record how it ends as `recheck`."""
    records = read_log(log)
    runner = Runner(work / "recheck", sim_cache=work / "sim_cache")
    for record in records.values():
        if record["status"] == AGREE or "recheck" in record:
            continue
        generated = generate(seed, record["index"], options)
        runner.rtl = record["rtl"]
        record["recheck"] = run(runner, generated).status
        with log.open("a") as out:
            out.write(json.dumps(record) + "\n")


def read_log(log: Path) -> dict[int, dict[str, Any]]:
    records = {}
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short when a run was stopped
                continue
            records[record["index"]] = record
    return records


def report(records: dict[int, dict[str, Any]], seed: int, count: int, jobs: int,
           wall: float | None, hostile: bool, rtl_every: int) -> tuple[str, bool]:
    done = [records[i] for i in sorted(records) if i < count]
    statuses = Counter(r["status"] for r in done)
    programs_using: Counter[str] = Counter()
    occurrences: Counter[str] = Counter()
    for record in done:
        programs_using.update(record["uses"].keys())
        occurrences.update(record["uses"])
    float_array = sum(1 for r in done if any(w.endswith(":f32") for w in r["mode"]))
    accel = sum(1 for r in done if "--accel" in r["mode"])
    rtl = [r for r in done if r["rtl"]]
    seconds = sum(r["seconds"] for r in done)
    names = sorted(CONSTRUCTS) + sorted(COMPUTE_TYPES)
    short = [name for name in names if programs_using[name] < TARGET_USES]
    failures = [r for r in done if r["status"] != AGREE]
    unfixed = [r for r in failures if r.get("recheck") != AGREE]
    ok = not unfixed and not short and len(done) >= count
    lines = [
        "# Differential fuzzing: interpreter, C and RTL on generated programs",
        "",
        f"Machine: {platform.machine()}, CPython {platform.python_version()}; "
        f"`python bench/bench_fuzz.py --jobs {jobs}` on a 2-core machine shared with other "
        "work. Programs "
        f"`generate({seed}, i)`, i < {count:,} (glensidec/lang/generate.py; "
        f"names: {'hostile' if hostile else 'plain'}), each run by glensidec/cosim/fuzz.py: "
        "the reference interpreter, the generated C program (-O0) and, for every "
        f"{rtl_every}th program written for a {' or '.join(f'{r}x{c}' for r, c in RTL_ARRAYS)} "
        "array, the RTL co-simulation (`make sim`). Integers compared bit for bit, f32 to "
        "1e-5 of the largest |value| (docs/rewriting.md). See docs/architecture.md, "
        "\"The fuzzer\".",
        "",
        "| | programs | target |",
        "|---|---:|---|",
        f"| run | {len(done):,} | {count:,} |",
        f"| agree | {statuses[AGREE]:,} | all |",
        f"| disagreements | {statuses['disagreement']:,} | 0 |",
        f"| crashes | {statuses[CRASH]:,} | 0 |",
        f"| compile errors | {statuses['compile error']:,} | 0 |",
        f"| failures that still fail after the fixes (`--recheck`) | {len(unfixed):,} | 0 |",
        f"| compiled with `--accel` | {accel:,} | |",
        f"| compiled for the f32 array (`RxC:f32`) | {float_array:,} | |",
        f"| co-simulated on the RTL | {len(rtl):,} ({sum(r['status'] == AGREE for r in rtl)} "
        "agree) | a sample |",
        f"| seconds per program (each job's wall time, shrinking included) | "
        f"{seconds / max(len(done), 1):.2f} | |",
    ]
    if wall is not None:
        lines.append(f"| wall time of this run | {wall / 60:.0f} min | |")
    lines += ["", f"## Coverage (every construct and compute type in ≥ {TARGET_USES} programs)", "",
              "| construct or compute type | programs | terms |", "|---|---:|---:|"]
    for name in names:
        mark = "" if programs_using[name] >= TARGET_USES else " **(short)**"
        lines.append(f"| `{name}`{mark} | {programs_using[name]:,} | {occurrences[name]:,} |")
    lines += ["", "## What the programs leave out", "",
              "- A cast of an f32 value to an integer only where every implementation "
              "computes that value exactly alike (views, copies, max, clip, relu, casts of "
              "integers), and f32 division only of such values: after a sum or `exp`, one "
              "ulp can flip a rounding or blow up a quotient, a difference the tolerance "
              "rightly allows but an integer compare would not.",
              "- i16 only through casts; no `(quantized …)` inputs or outputs; one array "
              "size per program (no `--array R1xC1,R2xC2`).",
              f"- The RTL runs only for programs written for "
              f"{' or '.join(f'{r}x{c}' for r, c in RTL_ARRAYS)} arrays (a Verilator build "
              "per size).", ""]
    lines += ["## Failures", ""]
    if not failures:
        lines.append("None.")
    for record in failures:
        again = record.get("recheck", "not run again")
        lines += [f"### program {record['index']}: {record['status']} at {record['stage']} "
                  f"(`{' '.join(record['mode'])}`); run again after the fixes: {again}", "",
                  "```", record["detail"].strip()[-800:], "```", "",
                  f"Shrunk (`{' '.join(record.get('minimal_mode', record['mode']))}`):", "",
                  "```glenside", record.get("minimal", "").strip(), "```", "",
                  "```", record.get("minimal_detail", "").strip()[-800:], "```", ""]
    return "\n".join(lines) + "\n", ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--seed", type=int, default=SEED,
                        help=f"programs generate(SEED, i) (default {SEED}: the committed table)")
    parser.add_argument("--jobs", type=int, default=1)
    scratch = Path(tempfile.gettempdir()) / "glensidec-fuzz"  # the system's, not a fixed path
    parser.add_argument("--log", type=Path, default=scratch / "log.jsonl")
    parser.add_argument("--work", type=Path, default=scratch)
    parser.add_argument("--rtl-every", type=int, default=RTL_EVERY)
    parser.add_argument("--shrink-budget", type=int, default=80)
    parser.add_argument("--plain-names", action="store_true",
                        help="t0, t1, … instead of the hostile names")
    parser.add_argument("--report", action="store_true", help="only rewrite the table")
    parser.add_argument("--recheck", action="store_true",
                        help="run the failed programs again (after fixes), then the table")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    options = Options(hostile_names=not args.plain_names)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    start, wall = time.perf_counter(), None
    if args.recheck:
        recheck(args.log, args.work, args.seed, options)
    elif not args.report:
        done = read_log(args.log)
        todo = [i for i in range(args.count) if i not in done]
        # Spawned, not forked: a forked child inherits the parent's egglog (Rust) thread
        # pool state and hung at its first compile.
        context = multiprocessing.get_context("spawn")
        processes = [context.Process(
            target=worker, args=(job, args.jobs, args.seed, todo, args.log, args.work, options,
                                 args.rtl_every, args.shrink_budget))
            for job in range(args.jobs)]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        wall = time.perf_counter() - start
    text, ok = report(read_log(args.log), args.seed, args.count, args.jobs, wall,
                      options.hostile_names, args.rtl_every)
    args.output.write_text(text)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
