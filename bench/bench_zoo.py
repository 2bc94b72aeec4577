"""The torchvision zoo through glensidec as a user runs it: export, import, f32 against
onnxruntime, `glensidec quantize` (the CLI, calibration keyed by the ONNX input name), int8
against float, and the default compile (the whole accelerator around a 16×16 array).

It needs PyTorch and torchvision, which neither CI nor the project's .venv installs: PyPI's
torchvision does not import beside the CPU-only `torch==2.13.0` of the `nas` extra, so use a
venv of its own outside the repository (x86_64; a CUDA build, about 5.5 GB, that runs on
the CPU; `[dev]` only, since `[nas]` would bring torch 2.13.0 back):

    python3 -m venv ~/zoovenv
    ~/zoovenv/bin/pip install torch==2.14.1 torchvision==0.29.1
    ~/zoovenv/bin/pip install -e '.[dev]'
    ~/zoovenv/bin/python bench/bench_zoo.py            # all 24, hours on 2 cores
    ~/zoovenv/bin/python bench/bench_zoo.py --models shufflenet_v2_x1_0 vit_b_16

Each model's row goes into bench/results/zoo.json as soon as it is measured, and
bench/results/zoo.md is rewritten from all recorded rows, so a run of a few models
(`--models`) replaces just their rows and an interrupted run keeps what it measured
(`--skip-measured-since "2026-11-27 03:00 UTC"` resumes it). `make bench` runs it with the
others; without torchvision it prints why and exits 0, leaving the committed table as it is.

Models: the 13 classifiers of issue 17, the nine of issue 30 (vit_b_16 and swin_t with their
heads re-initialised: torchvision zero-initialises ViT's head, every logit 0, which would make
the f32 check vacuous; inception_v3 at 299×299) and two segmentation models (LRASPP with
bilinear Resize, FCN with dilated convolutions at 112×112, see SIDE; their `out` map is the
output).

Per model (random weights, `torch.manual_seed(0)`, eval mode, batch 1, the legacy
TorchScript exporter `dynamo=False` at opset 17, which needs no onnxscript):
- import: wall and CPU seconds of `import_model`;
- f32: max |error| / max |onnxruntime| on one N(0,1) input;
- quantize: `python -m glensidec quantize --per-channel --symmetric` on a calibration .npz
  of 2 N(0,1) samples keyed by the ONNX input name (a subprocess, its wall seconds);
- int8 against float on fresh inputs (`--samples N`, default 20): relative L2 of the
  output, top-1 agreement (segmentation: the share of pixels whose class agrees), and for
  classifiers two facts that tell a tie from a wrong answer: how often the float top-1
  class is among the classes tied at the int8 maximum, and the smallest gap between the
  float top-1 and top-2 logits in int8 output steps (below 1, int8 cannot order them);
- compile: `glensidec.compile(QPROG, "16x16", OUTDIR)` — the default target, the whole
  accelerator, default memories, C written — in a subprocess of its own so its figures
  are honest: CPU seconds of the compile call (all threads), its peak resident memory
  (its own VmHWM), predicted cycles, the host's share of them (every host instruction, copies
  and fills included, under glensidec/hardware/host.py's model) and the int8 products left
  on the host. A compile whose RSS passes `--kill-mib` (default 8192) or that takes more
  than `--compile-cpu-limit` CPU seconds (default 600) is stopped and its row says so.
Each stage that fails records its one-line error and the model's row says so. Exits 1 when
a model misses a target of issues 26 and 30: import ≤ 15 s, f32 ≤ 1e-5, quantizes,
compile ≤ 15 s CPU in ≤ 4 GiB, host share ≤ 15 %, every int8 product on the array.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "zoo.md"
RECORD = RESULTS.with_suffix(".json")  # every measured row, so partial runs merge
CLASSIC = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
           "densenet121", "regnet_x_400mf", "alexnet", "vgg11", "squeezenet1_1", "googlenet",
           "mnasnet0_5", "shufflenet_v2_x1_0"]
RECENT = ["vit_b_16", "swin_t", "convnext_tiny", "efficientnet_v2_s", "mobilenet_v3_large",
          "resnext50_32x4d", "regnet_y_400mf", "inception_v3", "squeezenet1_0"]
SEGMENTATION = ["lraspp_mobilenet_v3_large", "fcn_resnet50"]
MODELS = CLASSIC + RECENT + SEGMENTATION
# input height and width; 224 otherwise. fcn_resnet50 at 224 stops at import: its head's
# 3×3 conv over 2048 channels at 28×28 (output stride 8) is a cartesian product of 14.8 G
# elements, over the language's limit of 2^32 for one access (docs/language.md)
SIDE = {"inception_v3": 299, "fcn_resnet50": 112}
SAMPLES = 20
CALIBRATION = 2
IMPORT_LIMIT_S = 15.0
F32_LIMIT = 1e-5
COMPILE_LIMIT_S = 15.0  # CPU seconds
MEMORY_LIMIT_MIB = 4096.0
HOST_SHARE_LIMIT = 0.15
BARE_RATIO_LIMIT = 1.5  # the default compile's CPU against the bare array's, same program

# The compile, run by a Python of its own: CPU of the compile call, and what it predicts.
COMPILE_CHILD = """
import json, sys, time
from pathlib import Path
import glensidec
from glensidec.lang.typecheck import check_program
from glensidec.opt.extract import unmapped_products
start = time.process_time()
bare = sys.argv[3:] == ["bare"]  # the bare array: what compile did before issue 26
compiled = glensidec.compile(sys.argv[1], "16x16", sys.argv[2], bare_array=bare)
cpu = time.process_time() - start
products = unmapped_products(compiled.program.root, check_program(compiled.program), "i8")
host_parts = {}  # host cycles by instruction kind and operation: what keeps the host busy
host_rows = [row for row in compiled.report_data.rows if row.where == "host"]  # as report.html
for row in host_rows:
    part = f"{row.kind} {row.op}" if row.kind != row.op else row.kind
    host_parts[part] = host_parts.get(part, 0) + row.host_cycles
largest = sorted(host_parts.items(), key=lambda item: -item[1])[:3]
print(json.dumps({"compile_cpu_s": cpu, "cycles": compiled.predicted_cycles,
                  "host_cycles": compiled.host_cycles,
                  "accel_cycles": compiled.accel_cycles or 0,
                  "host_products": len(products), "host_parts": largest,
                  # products the host computes (a depthwise window's dot-product, too)
                  "host_product_instructions": sum(row.macs > 0 for row in host_rows),
                  "host_macs": sum(row.macs for row in host_rows),
                  "compile_peak_mib": next(
                      int(line.split()[1]) / 1024 for line in Path("/proc/self/status")
                      .read_text().splitlines() if line.startswith("VmHWM:"))}))
"""


@dataclass(frozen=True)
class Limits:
    samples: int
    kill_mib: float
    compile_cpu_limit_s: float


def side(name: str) -> int:
    return SIDE.get(name, 224)


def build(name: str) -> Any:
    """The torchvision model in eval mode, random weights, its output one tensor."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name in SEGMENTATION:
        return out_map_class()(getattr(torchvision.models.segmentation, name)(
            weights=None, weights_backbone=None)).eval()
    kwargs: dict[str, Any] = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, name)(**kwargs)
    head = {"vit_b_16": lambda m: m.heads.head, "swin_t": lambda m: m.head}.get(name)
    if head is not None:  # zero-initialised (ViT): every logit 0, a vacuous f32 check
        head(model).reset_parameters()
    return model.eval()


def out_map_class() -> Any:
    """A module whose output is a segmentation model's `out` map (its dict, one tensor)."""
    import torch

    class OutMapModule(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, image: Any) -> Any:
            return self.inner(image)["out"]

    return OutMapModule


def export(name: str, path: Path) -> None:
    import torch

    model = build(name)
    image = torch.randn(1, 3, side(name), side(name))
    # nn.MultiheadAttention's fused inference path (ViT) has no ONNX export: the plain ops
    torch.backends.mha.set_fastpath_enabled(False)
    torch.onnx.export(model, (image,), str(path), opset_version=17, dynamo=False,
                      input_names=["input"], output_names=["out"])


def measure(row: dict[str, Any], workdir: Path, limits: Limits) -> None:
    """Fill `row` stage by stage (so a failure keeps what was measured before it)."""
    import onnxruntime as ort

    from glensidec.frontends.importer import import_model
    from glensidec.lang.data import load_weights
    from glensidec.lang.interp import run_program
    from glensidec.lang.syntax import read_program

    name = row["model"]
    path = workdir / f"{name}.onnx"
    row["stage"] = "export"
    export(name, path)
    row["stage"] = "import"
    wall, cpu = time.perf_counter(), time.process_time()
    program_path, names = import_model(path, workdir / name)
    row["import_s"] = time.perf_counter() - wall
    row["import_cpu_s"] = time.process_time() - cpu
    program = read_program(program_path)
    weights = load_weights(program)
    (onnx_name, input_name), = names.items()
    row["input_name"] = onnx_name
    shape = (1, 3, side(name), side(name))
    rng = np.random.default_rng(0)
    image = rng.standard_normal(shape).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # a shared machine
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, {onnx_name: image})[0]
    del session
    actual = run_program(program, {**weights, input_name: image})
    row["f32_error"] = float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
    row["stage"] = "quantize"
    calibration = workdir / f"{name}-calibration.npz"
    batch: dict[str, Any] = {onnx_name: rng.standard_normal((CALIBRATION, *shape)).astype(
        np.float32)}
    np.savez(calibration, **batch)
    quantized_path = workdir / f"{name}-q" / "model.gs"
    start = time.perf_counter()
    glensidec_command(["quantize", str(program_path), "--calibrate", str(calibration), "-o",
                       str(quantized_path), "--per-channel", "--symmetric"])
    row["quantize_s"] = time.perf_counter() - start
    compare_int8(row, program, weights, quantized_path, onnx_name, rng, limits.samples)
    row["stage"] = "compile"
    compile_default(row, quantized_path, workdir / f"{name}-out", limits)
    compile_bare(row, quantized_path, workdir / f"{name}-bare", limits)
    del row["stage"]


def glensidec_command(words: list[str]) -> None:
    """Run `glensidec WORDS…` as a user would; its one-line error if it fails."""
    done = subprocess.run([sys.executable, "-m", "glensidec", *words], capture_output=True,
                          text=True, check=False)
    if done.returncode < 0:  # e.g. the kernel's OOM killer on a machine out of memory
        raise RuntimeError(f"glensidec {words[0]} killed by signal {-done.returncode} "
                           f"({signal.Signals(-done.returncode).name})")
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or
                 f"exit {done.returncode}").splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit {done.returncode}")


def compare_int8(row: dict[str, Any], program: Any, weights: dict[str, Any],
                 quantized_path: Path, onnx_name: str, rng: np.random.Generator,
                 samples: int) -> None:
    """int8 (the quantized program, fed float inputs by their ONNX name) against float."""
    from glensidec.lang.data import dequantize_result, load_inputs, load_weights
    from glensidec.lang.interp import run_program
    from glensidec.lang.syntax import read_program
    from glensidec.lang.typecheck import check_program

    quantized = read_program(quantized_path)
    q_types, q_weights = check_program(quantized), load_weights(quantized)
    float_types = check_program(program)
    (input_name,) = [decl.name for decl in program.inputs()]
    quantization = quantized.output_quantization
    step = float(quantization.scale) if quantization is not None else float("nan")
    l2, agree, among_tied, margins = [], 0.0, 0, []
    shape = program.tensors[input_name].shape
    for _ in range(samples):
        sample = rng.standard_normal(shape).astype(np.float32)
        reference = run_program(program, {**weights, input_name: sample}, float_types)
        inputs = load_inputs(quantized, {onnx_name: sample})
        integers = run_program(quantized, {**q_weights, **inputs}, q_types)
        output = (dequantize_result(quantized, integers) if quantization is not None
                  else integers)
        l2.append(float(np.linalg.norm(output - reference) / np.linalg.norm(reference)))
        if row["model"] in SEGMENTATION:  # per pixel: the class axis is 1
            agree += float(np.mean(np.argmax(output, 1) == np.argmax(reference, 1)))
            continue
        logits, float_logits = output.reshape(-1), reference.reshape(-1)
        agree += int(np.argmax(logits) == np.argmax(float_logits))
        among_tied += int(logits[np.argmax(float_logits)] == logits.max())
        margins.append(top_margin(float_logits) / step)
    row["int8_l2"], row["top1"] = max(l2), agree / samples
    if margins:
        row["top1_tied"], row["margin_steps"] = among_tied / samples, min(margins)


def compile_bare(row: dict[str, Any], quantized_path: Path, outdir: Path,
                 limits: Limits) -> None:
    """The bare-array compile of the same program, side by side (issue 26: the default
    compile within 1.5× of it): its CPU seconds and peak memory as `bare_…`."""
    bare: dict[str, Any] = {}
    try:
        compile_default(bare, quantized_path, outdir, limits, ["bare"])
    except RuntimeError as error:
        row["bare_error"] = str(error)[:200]
    for key in ("compile_cpu_s", "compile_peak_mib", "cycles"):
        if key in bare:
            row[f"bare_{key}"] = bare[key]


def compile_default(row: dict[str, Any], quantized_path: Path, outdir: Path,
                    limits: Limits, how: list[str] | None = None) -> None:
    """The default compile (`how` ["bare"]: the bare array's) in a process of its own,
    watched: its RSS and CPU time bounded."""
    log = outdir.with_suffix(".log")
    with log.open("w", encoding="utf-8") as output:
        child = subprocess.Popen([sys.executable, "-c", COMPILE_CHILD, str(quantized_path),
                                  str(outdir), *(how or [])], stdout=output,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        start, stopped, peak = time.perf_counter(), "", 0.0
        while True:  # os.wait4, not Popen.poll: it reaps the child with its resource usage
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            rss = resident_mib(child.pid)
            peak = max(peak, rss)
            if rss > limits.kill_mib:
                stopped = f"stopped at {rss:,.0f} MiB resident (the bench's --kill-mib)"
            elif cpu_seconds(child.pid) > limits.compile_cpu_limit_s:
                stopped = (f"stopped after {limits.compile_cpu_limit_s:.0f} s CPU "
                           "(the bench's --compile-cpu-limit)")
            if stopped:
                os.killpg(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.2)
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
    row["compile_wall_s"] = time.perf_counter() - start
    # not usage.ru_maxrss: a vforked child's counts the parent's (torch's) memory too
    row["compile_peak_mib"] = peak  # sampled; the child's own VmHWM replaces it below
    row["compile_process_cpu_s"] = usage.ru_utime + usage.ru_stime
    if stopped:
        raise RuntimeError(stopped)
    lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    if child.returncode != 0 or not lines or not lines[-1].startswith("{"):
        raise RuntimeError(lines[-1] if lines else f"exit {child.returncode}")
    row.update(json.loads(lines[-1]))
    row["host_share"] = row["host_cycles"] / row["cycles"] if row["cycles"] else 0.0


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU seconds so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def resident_mib(pid: int) -> float:
    """The process's resident set now (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def top_margin(logits: Any) -> float:
    """The float top-1 logit minus the top-2 logit."""
    second, first = np.sort(logits)[-2:]
    return float(first - second)


def misses(row: dict[str, Any]) -> list[str]:
    """The targets the row misses (an unmeasured figure misses its target)."""
    if "error" not in row and "compile_cpu_s" not in row:
        return ["not measured on the default compile"]
    checks = [("imports", "error" not in row or row.get("stage") != "import"),
              (f"import ≤ {IMPORT_LIMIT_S:g} s", row.get("import_s", 1e9) <= IMPORT_LIMIT_S),
              (f"f32 ≤ {F32_LIMIT:g}", row.get("f32_error", 1.0) <= F32_LIMIT),
              ("quantizes", "int8_l2" in row),
              (f"compile ≤ {COMPILE_LIMIT_S:g} s CPU",
               row.get("compile_cpu_s", 1e9) <= COMPILE_LIMIT_S),
              (f"≤ {MEMORY_LIMIT_MIB / 1024:g} GiB",
               row.get("compile_peak_mib", 1e9) <= MEMORY_LIMIT_MIB),
              (f"host ≤ {HOST_SHARE_LIMIT:.0%}", row.get("host_share", 1.0) <= HOST_SHARE_LIMIT),
              ("every product on the array", row.get("host_products", 1) == 0
               and row.get("host_product_instructions", 0) == 0)]
    if "bare_compile_cpu_s" in row:  # issue 26: no slower than the bare array's, within 1.5×
        checks.append((f"compile ≤ {BARE_RATIO_LIMIT:g}× the bare array's",
                       row.get("compile_cpu_s", 1e9)
                       <= BARE_RATIO_LIMIT * row["bare_compile_cpu_s"]))
    return [what for what, ok in checks if not ok]


def cell(row: dict[str, Any], key: str, form: str, scale: float = 1.0) -> str:
    if key not in row:
        return "–"
    return format(row[key] * scale if scale != 1.0 else row[key], form)


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | import s wall (CPU) | f32 error vs onnxruntime | quantize s | "
             "int8 rel. L2 (worst) | int8 top-1 agreement | float top-1 among int8 ties | "
             "float top-1 margin (int8 steps, least) | compile s CPU (bare array) | "
             "compile peak MiB (bare array) | predicted cycles (bare array) | host share % | "
             "i8 products on host (MACs) | largest host parts (share of cycles) | misses | "
             "stopped at |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        stopped = f"{row['stage']}: {row['error']}" if "error" in row else ""
        products = (f"{row['host_products'] + row.get('host_product_instructions', 0)} "
                    f"({row['host_macs']:,})" if "host_macs" in row
                    else cell(row, "host_products", "d"))
        lines.append(f"| {row['model']} | {paired(row, 'import_s', 'import_cpu_s', '.1f')} | "
                     f"{cell(row, 'f32_error', '.1e')} | {cell(row, 'quantize_s', '.1f')} | "
                     f"{cell(row, 'int8_l2', '.3f')} | {cell(row, 'top1', '.0%')} | "
                     f"{cell(row, 'top1_tied', '.0%')} | {cell(row, 'margin_steps', '.2f')} | "
                     f"{paired(row, 'compile_cpu_s', 'bare_compile_cpu_s', '.1f')} | "
                     f"{paired(row, 'compile_peak_mib', 'bare_compile_peak_mib', ',.0f')} | "
                     f"{paired(row, 'cycles', 'bare_cycles', ',')} | "
                     f"{cell(row, 'host_share', '.1f', 100)} | {products} | "
                     f"{host_parts(row)} | {', '.join(misses(row))} | {stopped} |")
    return lines


def paired(row: dict[str, Any], key: str, beside: str, form: str) -> str:
    """A figure with a second one in parentheses, when measured."""
    return cell(row, key, form) + (f" ({cell(row, beside, form)})" if beside in row else "")


def host_parts(row: dict[str, Any]) -> str:
    """The host's largest parts, each as a share of the predicted total."""
    parts = row.get("host_parts", [])
    return "; ".join(f"{part} {cycles / row['cycles']:.0%}" for part, cycles in parts
                     if cycles / row["cycles"] >= 0.005).replace("|", "/") or "–"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=SAMPLES,
                        help="fresh inputs for the int8 comparison (the table says how many)")
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    parser.add_argument("--skip-measured-since", metavar="WHEN", default=None,
                        help="skip models whose recorded row was measured at or after WHEN "
                             "('YYYY-MM-DD HH:MM UTC', as zoo.json writes it): resume a run")
    parser.add_argument("--kill-mib", type=float, default=8192.0,
                        help="stop a compile whose resident memory passes this (MiB)")
    parser.add_argument("--compile-cpu-limit", type=float, default=600.0,
                        help="stop a compile that takes more CPU seconds than this")
    parser.add_argument("--load", default=None,
                        help="the machine's load during the run, noted beside its times")
    parser.add_argument("--table-only", action="store_true",
                        help="rewrite zoo.md from zoo.json without measuring")
    options = parser.parse_args()
    if options.table_only:
        write_results(load_record())
        return 0
    try:
        import torch
        import torchvision
    except ImportError as error:
        print(f"bench_zoo: skipped, {error.name} is not installed (out of CI, in a venv of "
              f"its own: pip install torch==2.14.1 torchvision==0.29.1; see this script's "
              f"docstring); {RESULTS.name} left as it is")
        return 0
    torch.set_num_threads(1)
    setup = (f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
             f"{platform.machine()}")
    recorded = load_record()
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    limits = Limits(options.samples, options.kill_mib, options.compile_cpu_limit)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in options.models:
            earlier = recorded.get(name, {})
            if (options.skip_measured_since is not None
                    and earlier.get("measured", "") >= options.skip_measured_since):
                print(f"-- {name}: measured {earlier['measured']}, skipped", flush=True)
                rows.append(earlier)
                continue
            print(f"-- {name}", flush=True)
            rows.append({"model": name, "setup": setup, "samples": options.samples,
                         "measured": started, "load": options.load or load_now()})
            try:
                measure(rows[-1], Path(tmp), limits)
            except Exception as error:  # one model's failure is a row, not the end
                first = (str(error).strip().splitlines() or [type(error).__name__])[0]
                rows[-1]["error"] = first.removeprefix("error: ")[:200].replace("|", "/")
            rows[-1]["load_after"] = load_now()
            print(rows[-1], flush=True)
            recorded[name] = rows[-1]
            write_results(recorded)  # after each model: a long run keeps what it measured
    print(f"wrote {RESULTS}")
    return 0 if all(not misses(row) for row in rows) else 1


def load_now() -> str:
    """The 1-, 5- and 15-minute load averages (the machine is shared: times depend on it)."""
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def load_record() -> dict[str, dict[str, Any]]:
    """The rows of earlier runs, by model (an absent record: none)."""
    if not RECORD.exists():
        return {}
    rows: list[dict[str, Any]] = json.loads(RECORD.read_text(encoding="utf-8"))
    return {row["model"]: row for row in rows}


def write_results(recorded: dict[str, dict[str, Any]]) -> None:
    rows = [recorded[name] for name in MODELS if name in recorded]
    RECORD.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    passed = sum(not misses(row) for row in rows)
    imported = sum(row.get("f32_error", 1.0) <= F32_LIMIT for row in rows)
    runs: dict[tuple[str, str, int], list[str]] = {}
    for row in rows:
        runs.setdefault((row["measured"], row["setup"], row["samples"]), []).append(
            f"{row['model']} (load {row.get('load', '?')} → {row.get('load_after', '?')})")
    when = [f"- {measured}; {setup}; {samples} fresh int8 inputs: {', '.join(models)}"
            for (measured, setup, samples), models in sorted(runs.items())]
    RESULTS.write_text("\n".join([
        "# The torchvision zoo (bench/bench_zoo.py)", "",
        "Random weights, batch 1, 224×224 (inception_v3 299×299, fcn_resnet50 112×112), opset "
        "17, legacy exporter; "
        f"int8 by `glensidec quantize --per-channel --symmetric` on {CALIBRATION} calibration "
        "samples keyed by the ONNX input name; the default compile (the whole accelerator "
        "around a 16×16 array, default memories, C written) in a process of its own: CPU "
        "seconds of the compile, the process's peak resident memory, predicted cycles and the "
        "host's share of them (copies and fills priced); in parentheses the bare-array "
        "compile (`bare_array=True`) of the same quantized program, measured the same way "
        "in the same hour. The machine (2 cores) is shared: the load averages (1, 5, 15 min) "
        "before → after each model are beside it, and wall times (import, quantize) depend "
        "on them more than CPU seconds do. Each row comes from the run started at:", "",
        *when, "", *table(rows), "",
        f"{imported} of {len(rows)} models import and match onnxruntime within "
        f"{F32_LIMIT:g} in f32; {passed} of {len(rows)} meet every target (import ≤ "
        f"{IMPORT_LIMIT_S:g} s, f32 ≤ {F32_LIMIT:g}, quantizes, compile ≤ "
        f"{COMPILE_LIMIT_S:g} s CPU in ≤ {MEMORY_LIMIT_MIB / 1024:g} GiB, host share ≤ "
        f"{HOST_SHARE_LIMIT:.0%}, every int8 product on the array, compile ≤ "
        f"{BARE_RATIO_LIMIT:g}× the bare array's).", ""]),
        encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
