"""The Python API (glensidec.load/check/run/compile/import_onnx/quantize) agrees with the
commands it mirrors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_outputs import make_sources, run_cli

import glensidec
from glensidec.errors import GlensideError


def test_api_mirrors_the_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sources = make_sources(tmp_path)
    program = glensidec.load(sources["tiny.gs"])
    assert str(glensidec.check(program)) == "((4,6),())"
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert run_cli("run", sources["tiny.gs"], "--input", f"x={tmp_path / 'x.npy'}", "-o",
                   tmp_path / "cli.npy", cwd=tmp_path) == 0
    np.testing.assert_array_equal(glensidec.run(program, {"x": x}), np.load(tmp_path / "cli.npy"))
    w = np.load(sources["tiny.npz"])["w"]
    np.testing.assert_allclose(glensidec.run(sources["tiny.gs"], {"x": x}), x @ w.T, rtol=1e-5)
    with pytest.raises(GlensideError, match="missing input x"):
        glensidec.run(program, {})

    compiled = glensidec.compile(program, "4x4", tmp_path / "c", iterations=2)
    assert compiled.outdir is not None and (compiled.outdir / "model.c").is_file()
    assert compiled.instructions and compiled.predicted_cycles >= compiled.array_cycles >= 0
    assert any(line.startswith("predicted cycles:") for line in compiled.report)
    assert compiled.report_data is not None
    assert len(compiled.report_data.rows) == compiled.instructions
    assert compiled.report_data.array_cycles == compiled.array_cycles

    imported = glensidec.import_onnx(sources["tiny.onnx"], tmp_path / "imported")
    assert str(glensidec.check(imported)) == "((4,6),())"

    quantized = glensidec.quantize(program, sources["calib.npz"], tmp_path / "q" / "tiny.gs")
    assert (tmp_path / "q" / "tiny.gs").is_file()
    assert glensidec.check(quantized.program).dtype in ("i8", "i32")
    assert run_cli("quantize", sources["tiny.gs"], "--calibrate", sources["calib.npz"], "-o",
                   tmp_path / "cliq" / "tiny.gs", cwd=tmp_path) == 0
    assert ((tmp_path / "q" / "tiny.gs").read_text()
            == (tmp_path / "cliq" / "tiny.gs").read_text())


@pytest.mark.slow
def test_compile_accel_writes_what_the_command_writes(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "resnet_block.gs"
    compiled = glensidec.compile(example, "16x16", tmp_path / "api", accel=True,
                                 scratchpad="64KiB", dram_bandwidth=8)
    assert run_cli("compile", example, "--array", "16x16", "--accel", "--scratchpad", "64KiB",
                   "--dram-bandwidth", "8", "-o", tmp_path / "cli", cwd=tmp_path) == 0
    files = sorted(path.name for path in (tmp_path / "cli").iterdir())
    assert files == sorted(path.name for path in (tmp_path / "api").iterdir())
    for name in files:
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    assert "accel_runtime.c" in files
    assert compiled.accel_cycles is not None and compiled.accel_cycles > 0
    assert f"2 accelerator layers: {compiled.accel_cycles} cycles" in capsys.readouterr().out
    assert "(accel-epilogue" in (tmp_path / "api" / "program.gs").read_text()
    with pytest.raises(GlensideError, match="--scratchpad 128: "):
        glensidec.compile(example, "16x16", accel=True, scratchpad="128")
