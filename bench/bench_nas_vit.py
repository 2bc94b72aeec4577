"""NAS on the digits vision transformer (issue 31), `python bench/bench_nas.py --transformer`.

examples/digits_vit.gs (4 patch tokens, width 32, 2 pre-norm blocks of 2 heads, MLP 64; made
by examples/make_digits_vit.py) at 16x16 on the whole accelerator, on a Dask LocalCluster:
1. `glensidec nas`'s search (`run_search`: `train` legality — the ViT retrains in seconds,
   so every candidate is judged by the target criterion itself, its validation accuracy
   after retraining EPOCHS epochs from inherited weights, the mean of seeds 0 and 1
   (`train_seeds=2`), legal at >= 0.98 x the original's; the final choice, the cheapest
   finalist within a point of the original, on the same two-seed means; cost bands of
   +-2.5 %, aging evolution over BUDGET candidates) over the transformer's
   transformations: the stream's width (bottleneck of the patch embedding), the MLP's
   hidden width (bottleneck of fc1), fewer heads, a smaller head dimension, grouped and
   low-rank projections, dropped blocks. From its evaluated candidates a random legal pick
   and the MAC-minimal legal pick (search.baselines). Every pick's accuracies (seeds 0 and
   1) are those the search judged it by.
2. The original and POOL seeded random candidates: every proxy and the retrained accuracy
   (2 seeds): Kendall tau per proxy, beside the CNN's figures.
3. The chosen network (retrained, seed 0) quantized and co-simulated on the RTL.

Each stage's wall time and the CPU time of the whole run (this process, its Dask workers
and its compiles) are recorded: on a shared machine the wall time measures the load, and
CPU seconds / 2 is what the run needs of a quiet 2-core machine.

Writes bench/results/nas_transformer.md and .json, and the section of bench/results/nas.md
between its transformer markers (the CNN's rows stay as they are). Exit 1 if a target is
missed.
"""

from __future__ import annotations

import json
from typing import Any

import bench_nas as N

from glensidec.lang.data import load_weights
from glensidec.lang.syntax import format_program, read_program
from glensidec.nas import search as S
from glensidec.nas import transforms as T
from glensidec.nas.graph import lift
from glensidec.nas.torch_model import train
from glensidec.opt.extract import parse_array_size

KINDS = ("bottleneck", "heads", "head-dim", "group", "low-rank", "drop")
BUDGET = 32
POOL = 12
WORKERS = 3
# Retraining from inherited weights: after 5 epochs the original's accuracy moves by 1.2
# points between seeds (97.8, 96.6, 97.5 for seeds 0-2), more than the target's margin;
# after 20, by 0.1 (97.8, 97.7, 97.7). A one-seed check rejected the last run's best
# network by one validation image: the search judges by the mean of two seeds.
EPOCHS = 20
SEEDS = (0, 1)
# loss-warm, the CNN's legality, marks every shallow candidate legal here (a network without
# blocks trains fastest in its 2 warm-up epochs): the first run chose the original, its
# finalists 6 to 9 points lower. Retraining is the criterion, and as cheap as the warm-up.
OPTIONS = S.Options(budget=BUDGET, space=KINDS, legality="train", threshold=0.98,
                    train_epochs=EPOCHS, top=4, seed=SEEDS[0], train_seeds=len(SEEDS))
TARGET = 2.0  # times fewer predicted cycles at <= 1 point lower accuracy (issue 31)
MODEL = N.EXAMPLES / "digits_vit.gs"
RESULTS = N.RESULTS / "nas_transformer.json"
BEGIN, END = "<!-- transformer: bench_nas_vit.py -->", "<!-- /transformer -->"


def main() -> int:
    import dask
    from dask.distributed import Client, LocalCluster

    from glensidec.nas.commands import WORKER_CONFIG, DaskMapper

    clock = N.Clock()
    program = read_program(MODEL)
    weights = load_weights(program)
    graph = lift(program, weights)
    space = S.search_space(graph, KINDS)
    train_data, val = N.load("digits_train.npz"), N.load("digits_val.npz")
    with dask.config.set(WORKER_CONFIG), \
            LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        result = S.run_search(format_program(program), weights, (train_data.x, train_data.y),
                              (val.x, val.y), parse_array_size(N.ARRAY), OPTIONS,
                              DaskMapper(client))
        clock.stage("search")
        assert result.chosen is not None
        picks = {"original": result.original, "search by cycles": result.chosen}
        for label, record in S.baselines(result):
            picks[f"{label} pick"] = record
        # every pick's accuracies are the search's own: `train` legality retrained each
        # candidate with both seeds (what the final choice and the target judge)
        saved: dict[str, Any] = {
            "partial": "search", "search records": result.records,
            "table": [{"label": label, "choices": record["choices"],
                       "cycles": record["cycles"], "macs": record["macs"],
                       "params": record["params"], "score": record["score"],
                       "accuracies": record["accuracies"]}
                      for label, record in picks.items()]}
        save(saved)
        shared = client.scatter([graph, space.layers, train_data, val], broadcast=True)
        candidates = N.pool(graph, space, POOL)
        pooled = client.gather([client.submit(N.proxies, *shared[:3], c, pure=False)
                                for c in candidates])
        pool_accuracies = client.gather([client.submit(N.retrained_accuracy, *shared, c,
                                                       seed, EPOCHS, pure=False)
                                         for c in candidates for seed in SEEDS])
        clock.stage("proxies")
    for index, record in enumerate(pooled):
        record["accuracies"] = pool_accuracies[2 * index:2 * index + 2]
    saved.update(pool=pooled, partial="pool")
    save(saved)
    chosen = train(S.apply(graph, space.layers, N.candidate_of(result.chosen["choices"],
                                                                 space.layers), T.INHERIT),
                   train_data, EPOCHS, OPTIONS.seed, learning_rate=S.RETRAIN_RATE)
    saved["int8"] = N.int8_and_cosim(chosen, train_data, val)
    clock.stage("int8 and co-simulation")
    saved.pop("partial")
    saved.update(**clock.summary(), space_size=space.size, space_layers=space.layers,
                 strategy=result.strategy, evaluated=len(result.records),
                 legal=sum(1 for r in result.records if r.get("legal")),
                 uniform=[space.describe(c) for c in S.uniform_candidates(space)],
                 attention_blocks=space.attention_blocks)
    save(saved)
    return report(saved)


def save(saved: dict[str, Any]) -> None:
    RESULTS.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def completed(saved: dict[str, Any]) -> dict[str, Any]:
    """A run stopped after a stage (`partial`) in the form `report` reads: the space's
    facts from the model, the search's from its records; what was not measured stays
    missing."""
    if "partial" not in saved:
        return saved
    program = read_program(MODEL)
    space = S.search_space(lift(program, load_weights(program)), KINDS)
    records = saved["search records"]
    return {"space_size": space.size, "space_layers": space.layers,
            "strategy": "aging evolution", "evaluated": len(records),
            "legal": sum(1 for r in records if r.get("legal")),
            "uniform": [space.describe(c) for c in S.uniform_candidates(space)],
            "attention_blocks": space.attention_blocks, **saved}


def timing(saved: dict[str, Any]) -> str:
    if "partial" in saved:
        return (f"STOPPED after its stage '{saved['partial']}' (the session's deadline, on 2 "
                f"cores at a load average of 30-55: nas_transformer.json holds that stage's "
                f"records)")
    stages = ", ".join(f"{name} {seconds} s" for name, seconds in saved["stages"].items())
    return (f"{saved['seconds']} s of wall time ({stages}) at a load average of "
            f"{saved['load']:.1f} (the mean of each stage's end); {saved['cpu_seconds']} CPU "
            f"seconds in all (this process, its workers, compiles and the simulator), so "
            f"~{saved['cpu_seconds'] / 2 / 60:.1f} min on a quiet 2-core machine (target <= 15 "
            f"min)")


def report(saved: dict[str, Any]) -> int:
    saved = completed(saved)
    table, int8 = saved["table"], saved.get("int8")
    original, chosen = table[0], table[1]
    base = N.mean(original["accuracies"])
    speedup = original["cycles"] / chosen["cycles"]
    drop = 100 * (base - N.mean(chosen["accuracies"]))
    met = speedup >= TARGET and drop <= 1.0
    lines = [
        "## The digits vision transformer (issue 31)", "",
        f"examples/digits_vit.gs: the 8x8 digits as 4 tokens of 4x4 patches, width 32, 2 "
        f"pre-norm encoder blocks (2 heads of 16, MLP 64), flatten, dense. Made by `python "
        f"bench/bench_nas.py --transformer`, {WORKERS} Dask workers, on 2 cores shared with "
        f"other jobs: {timing(saved)}. Space: {saved['space_size']} candidates over "
        f"{', '.join(saved['space_layers'])} ({', '.join(KINDS)}); {saved['strategy']}, "
        f"budget {BUDGET}: {saved['evaluated']} evaluated, {saved['legal']} legal (legality "
        f"`{OPTIONS.legality}`: the retrained accuracy, mean of seeds {SEEDS}, >= "
        f"{OPTIONS.threshold} x the original's), finalists taken cheapest first, "
        f"{OPTIONS.top} at a time and at most {OPTIONS.retrain}, until one's mean is within a "
        f"point of the original's, and the cheapest such kept. Accuracy: validation "
        f"(597 images) after retraining {EPOCHS} epochs from inherited weights, seeds "
        f"{SEEDS}. Records: nas_transformer.json.", "",
        f"| pick | choices | predicted cycles | speed-up | MACs | params | {OPTIONS.legality} "
        "score / original's | accuracy (seeds 0, 1) |",
        "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in [*table, *with_attention(saved)]:
        choices = ", ".join(f"{k} {v}" for k, v in row["choices"].items() if v != "keep")
        lines.append(
            f"| {row['label']} | {choices or '-'} | {row['cycles']} | "
            f"{original['cycles'] / row['cycles']:.2f}x | {row['macs']} | {row['params']} | "
            f"{row['score'] / original['score']:.2f} | {N.accuracy_text(row['accuracies'])} |")
    lines += ["", f"Target (>= {TARGET:g}x fewer predicted cycles at <= 1 point lower "
              f"accuracy, two seeds): {speedup:.2f}x, accuracy {abs(drop):.1f} points "
              f"{'lower' if drop >= 0 else 'higher'}: **{'met' if met else 'MISSED'}**.", ""]
    lines += uniform_lines(saved, original)
    if "pool" in saved:
        proxy = N.proxy_lines(saved["pool"])
        lines += [proxy[0].replace("## Proxies", "### Proxies on the transformer space"),
                  *proxy[1:]]
    if int8 is not None:
        lines += [line.replace("## The chosen", "### The chosen")
                  for line in N.int8_lines(int8)]
    missing = [part for part, key in (("the proxies' Kendall tau", "pool"),
                                      ("the int8 accuracy and co-simulation", "int8"))
               if key not in saved]
    if missing:
        lines += [f"Not measured in this run: {', '.join(missing)}.", ""]
    cosim_ok = int8 is not None and int8["c_equal"] and int8["rtl_equal"] and int8["ok"] and \
        int8["predicted_array_cycles"] == int8["simulated_cycles"]
    text = "\n".join(lines)
    (N.RESULTS / "nas_transformer.md").write_text(text, encoding="utf-8")
    splice(text)
    print(text)
    return 0 if met and cosim_ok else 1


def with_attention(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The cheapest legal candidate the search evaluated that keeps an attention block (the
    chosen network may have dropped them all), as a row of the picks' table."""
    blocks = saved.get("attention_blocks", [])
    kept = [r for r in saved["search records"][1:] if r.get("legal") and
            any(r["choices"].get(b) != "drop" for b in blocks)]
    if not blocks or not kept:
        return []
    cheapest = min(kept, key=lambda r: r["cycles"])
    return [{**cheapest, "label": "cheapest legal keeping an attention"}]


def uniform_lines(saved: dict[str, Any], original: dict[str, Any]) -> list[str]:
    """The uniform candidates the evolution starts from (one transformation on every layer
    offering it), as the search evaluated them: what each kind alone does to the cost."""
    records = {json.dumps({k: v for k, v in r["choices"].items() if v != "keep"},
                          sort_keys=True): r for r in saved["search records"]}
    lines = ["### The uniform candidates (the evolution's first population)", "",
             "| transformation on every layer offering it | predicted cycles | speed-up | host "
             "| train score / original's | legal |", "|---|---|---:|---:|---:|---:|"]
    for uniform in saved["uniform"]:
        record = records.get(json.dumps(uniform, sort_keys=True))
        if record is None or not record.get("valid"):
            continue
        kinds = sorted({v for v in uniform.values()})
        lines.append(f"| {', '.join(kinds)} ({len(uniform)} layers) | {record['cycles']} | "
                     f"{original['cycles'] / record['cycles']:.2f}x | "
                     f"{record['host_cycles']} | {record['score'] / original['score']:.2f} | "
                     f"{'yes' if record.get('legal') else 'no'} |")
    return [*lines, ""]


def splice(text: str) -> None:
    """The transformer's section of results/nas.md, between its markers (appended the
    first time); the rest of the file is left as it is."""
    path = N.RESULTS / "nas.md"
    current = path.read_text(encoding="utf-8")
    section = f"{BEGIN}\n{text}\n{END}\n"
    if BEGIN in current and END in current:
        head, _, rest = current.partition(BEGIN)
        _, _, tail = rest.partition(END + "\n")
        path.write_text(head + section + tail, encoding="utf-8")
    else:
        path.write_text(current.rstrip("\n") + "\n\n" + section, encoding="utf-8")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--report-only"]:
        sys.exit(report(json.loads(RESULTS.read_text(encoding="utf-8"))))
    sys.exit(main())
