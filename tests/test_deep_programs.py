"""Programs much deeper as trees than as DAGs compile in the memory a DAG needs."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from glensidec.lang.syntax import parse_program
from glensidec.pipeline import WHOLE_TREE_LIMIT, tree_size

#: The compile's address space: a few times what the program needs, far below the 16 GB
#: that egglog's whole-program extraction took for 40 levels.
ADDRESS_SPACE = 4 << 30


def residual_chain(depth: int) -> str:
    """`depth` adds, each of the previous result with itself: 2^depth paths to the input."""
    lines = ["(input x f32 (shape 4 4))", "(let a0 (access (access-tensor x) 0))"]
    lines += [f"(let a{i} (compute elementwise-add (access-pair a{i - 1} a{i - 1})))"
              for i in range(1, depth + 1)]
    return "\n".join([*lines, f"a{depth}", ""])


def test_tree_size_counts_every_path_and_stops_just_past_the_limit() -> None:
    program = parse_program(residual_chain(3), "chain.gs")
    # a0 is (access (access-tensor x) 0), 2 terms; each add is itself, its pair and twice
    # the level below
    assert tree_size(program.root, 10**6) == 2 + 2 * (2 + 2 * (2 + 2 * 2))
    deep = parse_program(residual_chain(60), "deep.gs")
    assert tree_size(deep.root, WHOLE_TREE_LIMIT) == WHOLE_TREE_LIMIT + 1


def limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def test_a_forty_level_residual_chain_compiles_within_four_gib(tmp_path: Path) -> None:
    source = tmp_path / "chain.gs"
    source.write_text(residual_chain(40))
    outdir = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "glensidec", "compile", str(source),
                           "-o", str(outdir)], capture_output=True, text=True,
                          preexec_fn=limit_address_space, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "predicted cycles" in done.stdout
    assert (outdir / "model.c").is_file()
