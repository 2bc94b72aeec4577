"""OUTDIR/report.html: per-instruction cycles, MACs and utilization with inline plots,
byte-identical across compiles, listed in the manifest; `make sim` adds its section."""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import replace
from pathlib import Path

from conftest import EXAMPLES

from glensidec.backend.report import MAX_BINS, ReportData, cycles_plot
from glensidec.cosim.runner import CosimResult, add_to_report
from glensidec.hardware.array import ArrayConfig, gemm_cycles
from glensidec.lang.syntax import read_program
from glensidec.lang.typecheck import check_program
from glensidec.outputs import MANIFEST, check_output_directory
from glensidec.pipeline import compile_to_directory

CONFIG = ArrayConfig(8, 8)


def _compile(outdir: Path) -> None:
    program = read_program(EXAMPLES / "small_cnn.gs")
    compile_to_directory(program, check_program(program), outdir, CONFIG)


def test_report_rows_follow_the_lowered_program(tmp_path: Path) -> None:
    program = read_program(EXAMPLES / "small_cnn.gs")
    result = compile_to_directory(program, check_program(program), tmp_path / "out", CONFIG)
    data = ReportData.from_json((tmp_path / "out" / "report.json").read_text())
    assert [row.name for row in data.rows] == [
        i.writes().buffer for i in result.lowered.instructions]
    calls = [row for row in data.rows if row.where == "array"]
    assert len(calls) == len(result.lowered.array_calls()) > 0
    for row, call in zip(calls, result.lowered.array_calls(), strict=True):
        cycles = gemm_cycles(CONFIG, call.m, call.k, call.n)
        assert row.array_cycles == cycles
        assert row.macs == call.m * call.k * call.n
        assert row.utilization == row.macs / (CONFIG.rows * CONFIG.cols * cycles)
    assert data.array_cycles == result.predicted_cycles
    host = [row for row in data.rows if row.kind in ("map", "fold", "reduce")]
    assert host and all(row.host_cycles > 0 and row.array_cycles == 0 for row in host)


def test_report_html_is_self_contained_and_deterministic(tmp_path: Path) -> None:
    _compile(tmp_path / "a")
    _compile(tmp_path / "b")
    page = (tmp_path / "a" / "report.html").read_bytes()
    assert page == (tmp_path / "b" / "report.html").read_bytes()
    text = page.decode()
    # three plots (where the cycles go, cycles per instruction, utilization), each a
    # complete SVG document in a data: URL; nothing fetched from elsewhere
    images = re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', text)
    assert len(images) == 3
    for image in images:
        assert base64.b64decode(image).decode().rstrip().endswith("</svg>")
    assert not re.search(r'(src|href)="(?!data:)', text)
    data = ReportData.from_json((tmp_path / "a" / "report.json").read_text())
    for row in data.rows:
        assert f"<td>{row.index}</td>" in text
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert {"report.html", "report.json"} <= set(manifest["files"])


def _fake_simulation(data: ReportData) -> CosimResult:
    calls = [{"m": 1, "k": 1, "n": 1, "predicted_cycles": row.array_cycles,
              "simulated_cycles": row.array_cycles + 1, "data_ok": True, "cycles_ok": True,
              "rtl_seconds": 0.5} for row in data.rows if row.where == "array"]
    return CosimResult(calls, 0, 12.25)


def test_sim_section_is_added_and_the_directory_stays_ours(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    _compile(outdir)
    data = ReportData.from_json((outdir / "report.json").read_text())
    simulation = _fake_simulation(data)
    assert add_to_report(outdir, simulation) == outdir / "report.html"
    text = (outdir / "report.html").read_text()
    assert "Co-simulation (make sim)" in text and "12.25 s" in text
    simulated = sum(int(call["simulated_cycles"]) for call in simulation.calls)
    assert f"Simulated cycles of {len(simulation.calls)} array calls: {simulated:,}" in text
    check_output_directory(outdir)  # compiling into it again is still allowed
    _compile(outdir)
    assert "Co-simulation" not in (outdir / "report.html").read_text()


def test_sim_leaves_a_report_the_user_edited_alone(tmp_path: Path) -> None:
    outdir = tmp_path / "out"
    _compile(outdir)
    (outdir / "report.html").write_text("my notes")
    data = ReportData.from_json((outdir / "report.json").read_text())
    assert add_to_report(outdir, _fake_simulation(data)) is None
    assert (outdir / "report.html").read_text() == "my notes"


def test_a_whole_network_is_plotted_in_bins(tmp_path: Path) -> None:
    _compile(tmp_path / "out")
    small = ReportData.from_json((tmp_path / "out" / "report.json").read_text())
    # the same instructions a thousand times over: too many for a labelled bar each
    rows = [replace(row, index=i) for i, row in enumerate(small.rows * 50)]
    data = ReportData(small.source, small.rows_cols, rows)
    image = cycles_plot(data)
    assert image is not None and image == cycles_plot(data)
    svg = base64.b64decode(image.split("base64,")[1].rstrip('">')).decode()
    plotted = sum(1 for row in rows if row.array_cycles or row.host_cycles)
    assert f"summed over runs of {math.ceil(plotted / MAX_BINS)} plotted instructions" in svg
    assert f"[{rows[-1].index}]" not in svg  # no per-instruction labels
