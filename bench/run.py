"""Run every benchmark, one after the other; each rewrites its table in bench/results/.

`make bench` runs this. Each bench_*.py is also runnable alone. Exits non-zero if any
benchmark misses one of its targets.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main() -> int:
    failed = []
    for script in sorted(BENCH_DIR.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], check=False).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"targets missed in: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
