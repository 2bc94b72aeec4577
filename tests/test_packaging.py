"""A plain, non-editable install must work: grammar/, templates/ and rtl/ inside the package.

The wheel is built here and installed with `pip install --target` into a fresh folder that
is put first on PYTHONPATH, so every glensidec import below comes from the installed copy,
never from this checkout (the commands also run outside it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, REPO

# Building and installing the wheel takes tens of seconds.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(folder), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (built,) = folder.glob("glensidec-*.whl")
    return built


def test_wheel_ships_grammar_templates_and_rtl(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "glensidec/grammar/glenside.lark" in names
    for template in (REPO / "templates").glob("*.j2"):
        assert f"glensidec/templates/{template.name}" in names
    for verilog in (REPO / "rtl").rglob("*.v"):
        assert f"glensidec/rtl/{verilog.relative_to(REPO / 'rtl')}" in names
    assert "glensidec/hardware/accel_model.c" in names  # the cycle model's C port


@pytest.mark.rtl
def test_installed_wheel_compiles_and_cosimulates(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(wheel)], check=True, capture_output=True,
                   timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(site)}

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(command, cwd=work, env=environment, capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done

    where = run(sys.executable, "-c", "import glensidec; print(glensidec.__file__)")
    assert where.stdout.startswith(str(site))
    run(sys.executable, "-m", "glensidec", "compile", str(EXAMPLES / "small_cnn.gs"),
        "--array", "4x4", "-o", "out")
    np.save(work / "image.npy", np.ones((1, 1, 16, 16), dtype=np.int8))
    simulated = run("make", "-C", "out", "sim", f"INPUTS=image={work / 'image.npy'}",
                    f"OUTPUT={work / 'sim.npy'}")
    assert "co-simulation: every result and cycle count matches" in simulated.stdout
    assert (work / "sim.npy").is_file()
