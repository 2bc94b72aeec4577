"""A plain, non-editable install must carry grammar/, templates/ and rtl/ inside the package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import REPO


def test_wheel_ships_grammar_templates_and_rtl(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(tmp_path), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("glensidec-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "glensidec/grammar/glenside.lark" in names
    assert "glensidec/templates/README.md" in names
    for verilog in (REPO / "rtl").glob("*.v"):
        assert f"glensidec/rtl/{verilog.name}" in names
