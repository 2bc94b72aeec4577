"""Where a quantized vision transformer's predicted cycles go: accelerator, array calls and
the host by kind (issue 30 item 5, issue 26: the host share of a transformer).

Run: .venv/bin/python bench/bench_attention.py [--tree DIR] [--program NAME=Q.GS]…
(prints a Markdown table; bench/results/attention.md holds the committed one).

Two networks, compiled by default (the whole accelerator, 16x16, default memories):
  * vit_b_16-like: bench/bench_compile_ratio.py's (12 blocks, 197 tokens, 768 features,
    12 heads, MLP 3072; random weights), quantized `--per-channel --symmetric` on two
    samples (minutes and about 3 GiB);
  * digits ViT: examples/digits_vit.gs (4 tokens, 32 features, 2 heads of 16, MLP 64),
    quantized on the first 64 training digits.
`--program NAME=Q.GS` takes an already quantized program instead (the same one can then
be compiled by two trees: `--tree` runs the compile with another checkout's glensidec,
e.g. main before a change). The host's rows (report.json) are sorted by what they touch:
a tokens × tokens operand is softmax (with the scores' scaling), the MLP's hidden width
is its activation (GELU) and bias, copies and fills are data movement, and the rest —
the model width — is LayerNormalization with the residual adds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

#: name → (tokens, MLP width): what sorts the host's rows
NETWORKS = {"vit_b_16-like": (197, 3072), "digits ViT": (4, 64)}


def quantized(name: str, work: Path) -> Path:
    """The network quantized into `work`."""
    if name == "vit_b_16-like":
        import bench_compile_ratio

        return bench_compile_ratio.quantized(name, work)
    digits = np.load(ROOT / "examples" / "digits_train.npz")
    np.savez(work / "calib.npz", image=digits["x"][:64])
    program = work / "q.gs"
    subprocess.run([sys.executable, "-m", "glensidec", "quantize",
                    str(ROOT / "examples" / "digits_vit.gs"), "--calibrate",
                    str(work / "calib.npz"), "-o", str(program)], check=True,
                   capture_output=True)
    return program


def kinds(report: dict[str, object], tokens: int, hidden: int) -> Counter[str]:
    """Predicted cycles by where and, on the host, by kind."""
    cycles: Counter[str] = Counter()
    rows = report["rows"]
    assert isinstance(rows, list)
    for row in rows:
        if row["where"] != "host":
            cycles[row["where"]] += row["array_cycles"]
            continue
        shapes = [tuple(shape) for shape in row["inputs"]] + [tuple(row["output"])]
        if row["kind"] in ("copy", "fill"):
            kind = "copies and fills"
        elif any(shape.count(tokens) >= 2 for shape in shapes):
            kind = "softmax"
        elif any(hidden in shape for shape in shapes):
            kind = "GELU"
        else:
            kind = "LayerNorm"
        cycles[kind] += row["host_cycles"]
    return cycles


def measure(tree: Path, program: Path, outdir: Path, tokens: int, hidden: int
            ) -> Counter[str]:
    """The cycles by kind of the default compile."""
    # (run in `tree`: `python -m` puts the working directory first on the path)
    subprocess.run([sys.executable, "-m", "glensidec", "compile", str(program), "--array",
                    "16x16", "--force", "-o", str(outdir)], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    report = json.loads((outdir / "report.json").read_text())
    return kinds(report, tokens, hidden)


COLUMNS = ("accelerator", "array", "softmax", "LayerNorm", "GELU", "copies and fills")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--label", default="",
                        help="what the table calls the tree (default: its commit)")
    parser.add_argument("--program", action="append", default=[],
                        help="NAME=Q.GS: an already quantized network")
    options = parser.parse_args()
    given = dict(item.split("=", 1) for item in options.program)
    label = options.label or subprocess.run(
        ["git", "-C", str(options.tree), "rev-parse", "--short", "HEAD"], capture_output=True,
        text=True).stdout.strip()
    print("| network | tree | predicted cycles | host share | "
          + " | ".join(COLUMNS) + " |\n|---|---|---:|---:|" + "---:|" * len(COLUMNS))
    for name, (tokens, hidden) in NETWORKS.items():
        with tempfile.TemporaryDirectory() as scratch:
            work = Path(scratch)
            program = Path(given[name]) if name in given else quantized(name, work)
            cycles = measure(options.tree, program, work / "out", tokens, hidden)
        total = sum(cycles.values())
        host = total - cycles["accelerator"] - cycles["array"]
        shares = " | ".join(f"{cycles[column]:,} ({cycles[column] / total:.1%})"
                            for column in COLUMNS)
        print(f"| {name} | {label} | {total:,} | {host / total:.1%} | {shares} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
