"""clbench's regularisation and replay-family methods beside Avalanche 0.6's, cell by cell, on the four quick digits
streams.

Goal (issues 38 and 49): every method clbench and Avalanche 0.6 both have (EWC, SI, LwF, replay, GEM, A-GEM, DER,
DER++, ER-ACE, iCaRL, GDumb) on every quick digits stream clbench runs it on (split-digits, split-digits-cil,
permuted-digits, permuted-digits-til; iCaRL runs class-incremental only), with matched settings and 10 seeds: each
method's AA agrees with Avalanche's within 2 pooled standard deviations.

    python benchmarks/bench_vs_avalanche_methods.py --avalanche-python /path/to/venv/bin/python [--seeds 10]
        [--stream split-digits] [--method der] [--json out.json]
    python benchmarks/bench_vs_avalanche_methods.py --merge a.json b.json [--json all.json]

Avalanche needs torchvision, which does not import beside the project's CPU torch wheel, so its side runs in a
separate environment (../shared/data/README.md, plus `quadprog` for its GEM) as a subprocess:
``benchmarks/avalanche_side.py``. Both sides get the same data (order 1 of the stream as the cell resolves it,
clbench's loader, written once to an ``.npz`` with the labels as digits), the same model (the quick MLP with clbench's
heads: one per task on the task-incremental streams, one shared otherwise), the quick preset's SGD learning rate,
momentum, batch size and epochs of the method on that stream, and the method's own settings as clbench resolves them
(λ, c, ξ, T, memories, margin, α, β), read from each clbench cell's recorded config. Seeds set each side's own
generator: initialisation and batch order differ between the libraries, so agreement is judged against the spread
over seeds. ``--merge`` renders one table from the rows of several ``--json`` files (a later file's row replaces an
earlier one's), so the grid can run in pieces.

Per row: each side's mean ± sd over the seeds; the paired difference clbench − Avalanche (seed s beside seed s) with
its 95 % t-interval; the verdict |mean_clbench − mean_avalanche| ≤ 2·pooled sd, with pooled sd = √((sd_c² + sd_a²)/2);
and seconds, each side's own timing of training and evaluation of one cell (clbench: the cell's ``timings.total_s``,
which also holds its footprints and metrics; Avalanche: its train and eval calls), medians over the seeds.

Conventions that differ are named in ``COMMON`` and ``NOTES`` (printed under the table). Where a setting's scale
differs it is converted, not left to the verdict: EWC's λ/2, SI's 2c, LwF's T², DER's α on a masked head, and the
sum of Replay's and ER-ACE's two terms (``avalanche_side.SumOfTerms``). EWC runs on both sides with Avalanche's
Fisher estimator. Two Avalanche faults are patched on its side and named: DER's stored logits need task labels on a
head per task, and SI keeps views, not copies, of the weights on a CPU (its Ω stayed 0: plain fine-tuning). DGR is
not compared (``NOT_COMPARED``).

Verdict (2026-11-28, clbench 1db32d9b, results/peer-avalanche/README.md): 35 of the 41 rows agree. The six that do
not are conventions, none a clbench fault found: LwF on split-digits-cil (which classes are distilled; run with
clbench's choice, Avalanche gives 27.5 ± 1.8 against clbench's 29.6 ± 1.3); SI on permuted-digits and
permuted-digits-til (Avalanche clips Ω at 0.001; lifting the clip alone, its path integral through its own penalty
diverges); DER on split-digits-cil and permuted-digits, where Avalanche's side diverges in most seeds (AA at chance:
its buffer replays nothing during the first task, and clbench's tuned learning rates are past its stability; at lr
0.05 on permuted-digits it gives 91.4, at 0.02 on split-digits-cil 41.6, no seed at chance); DER++ on split-digits,
0.07 points past the threshold with Avalanche ahead (one replayed batch for both terms, its buffer). The 2026-11-26
record (5 seeds, two streams) had compared clbench's SI with an Avalanche SI that did nothing on a CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
STREAMS = ("split-digits", "split-digits-cil", "permuted-digits", "permuted-digits-til")
METHODS = ("ewc", "si", "lwf", "replay", "gem", "agem", "der", "derpp", "er-ace", "icarl", "gdumb")
# The clbench side's settings beyond its quick cell's: Avalanche's EWC estimates the Fisher from squared gradients of
# the training batches (32) over the whole task, clbench's quick cell from 256 per-example ones
SETS = {"ewc": {"ewc.fisher_samples": [0], "ewc.fisher_batch_size": [32]}}
NOT_COMPARED = {
    "dgr": "Avalanche's GenerativeReplay brings its own VAE (BatchNorm, LeakyReLU, a 128-wide code layer and a "
           "classification head, BCE reconstruction, Adam at 0.01, nhid=2) and no per-task heads; matching clbench's "
           "(one hidden layer of 400, latent 32, Gaussian decoder, Adam at 1e-3, replay weight 1/tasks seen, each "
           "earlier head labelling the samples) means writing the generator and its training for Avalanche: "
           "clbench's code compared with itself"}
COMMON = ("every row: each task's data in clbench's order (Avalanche's EWC reads its Fisher's batches in it); "
          "Avalanche's optimizer state reset at each experience, as clbench builds an optimizer per task (Avalanche "
          "keeps SGD's momentum across experiences by default)")
NOTES = {
    "ewc": "both sides run Avalanche's Fisher estimator (clbench `ewc.fisher_samples=0 ewc.fisher_batch_size=32`; its "
           "quick cell uses 256 per-example gradients); Avalanche's λ is given λ/2 (it adds λ·ΣF(θ−θ*)², clbench "
           "(λ/2)·ΣF(θ−θ*)²); Avalanche's penalty also spans the per-task heads (a head gets no gradient outside its "
           "task, so it stays at θ*)",
    "si": "Avalanche's eps given clbench's ξ and its λ 2c (it adds (λ/2)·ΣΩ(θ−θ̃)², clbench c·ΣΩ(θ−θ̃)²); Avalanche's "
          "SI keeps its weights as views on a CPU, so it measures no movement and Ω stays 0: patched to copies "
          "(``avalanche_side._copy_weights``); it clips Ω at 0.001 (hard-coded, Maltoni & Lomonaco's variant; clbench "
          "does not) and integrates the whole loss's gradient, its own penalty's included (clbench: the task loss's, "
          "Zenke's)",
    "lwf": "Avalanche's α given λ·T² (clbench's distillation carries Hinton's T²); on split-digits-cil Avalanche "
           "distils over the earlier tasks' classes, clbench over every class seen, the new task's included",
    "replay": "Avalanche: Naive + ReplayPlugin given a ReservoirSamplingBuffer, clbench's policy (the Replay "
              "strategy's default buffer is experience-balanced); one batch of new and replayed examples whose mean "
              "loss, half clbench's sum, is doubled; clbench draws replayed examples with replacement, Avalanche "
              "cycles through its buffer",
    "der": "Avalanche: a class-balanced buffer filled at each task's end, with the logits then, so nothing is "
           "replayed while the first task trains (clbench: a reservoir, logits as each example trains, replayed from "
           "the first step, the paper's); an unmasked head on split-digits-cil; on the "
           "task-incremental streams its stored logits are computed with their task labels (Avalanche's DER computes "
           "them with none, which a head per task cannot answer)",
    "derpp": "as der; Avalanche replays one buffer batch for both terms (clbench: two, the paper's)",
    "er-ace": "Avalanche: a class-balanced buffer filled with each task's examples as it starts (clbench: a reservoir "
              "filled batch by batch); its (ACE + replay)/2 doubled to clbench's sum",
    "icarl": "Avalanche: its own wrapper of the MLP's parts, unmasked classifier (clbench: masked to the seen "
             "classes)",
    "gdumb": "both retrain `gdumb.epochs`; Avalanche's memory balances digits alone, a digit's examples of every task "
             "sharing one reservoir (permuted-digits: every task's in proportion to its count; permuted-digits-til: "
             "one quota for a digit of every task's head); clbench's balances (task, digit) pairs, greedily (the "
             "paper's sampler)",
}


def write_stream(stream_name: str, config: dict, path: Path) -> None:
    """Order 1 of the stream with the cell's stream settings (clbench's loader), inputs flattened, labels as the
    digits they name."""
    from clbench import testing

    spec = testing.registry().streams.get(stream_name)
    stream = spec.factory(spec.config_cls(**config))
    order = stream.order("1")
    arrays: dict[str, np.ndarray] = {"tasks": np.array(len(order))}
    for t, task in enumerate(order):
        labels = stream.task(task).labels
        data = stream.data(task)
        for split in ("train", "test"):
            part = getattr(data, split)
            arrays[f"{split}_x_{t}"] = part.x.reshape(len(part), -1).numpy().astype(np.float32)
            arrays[f"{split}_y_{t}"] = np.array([int(labels[int(y)]) for y in part.y], dtype=np.int64)
    np.savez(path, **arrays)


def refusal(stream: str, method: str) -> str | None:
    """Why clbench does not run ``method`` on ``stream`` (its scenarios), or None."""
    from clbench import testing

    regs = testing.registry()
    spec = regs.streams.get(stream)
    scenario = spec.factory(spec.config_cls()).scenario
    scenarios = regs.methods.get(method).scenarios
    return None if not scenarios or scenario in scenarios else f"runs only {', '.join(sorted(scenarios))}"


def clbench_side(stream: str, method: str, seeds: list[int], out: Path) -> tuple[list[dict], dict, dict]:
    """Each seed's AA and seconds, the settings the Avalanche side is given and the stream's (from the first cell)."""
    from clbench import testing

    results = testing.run(testing.registry(), out, method, stream=stream, profile="quick", orders=["1"], seeds=seeds,
                          sets=SETS.get(method))
    bad = [r for r in results if r.status != "complete"]
    if bad:
        sys.exit(f"clbench {stream} {method} seed {bad[0].seed}: {bad[0].status} {bad[0].error}")
    config = results[0].config
    settings = {"method": method, "scenario": results[0].scenario, "seeds": seeds,
                "train": {k: config["train"][k] for k in ("lr", "momentum", "batch_size", "epochs")},
                "method_settings": config["methods"][method]}
    if method == "ewc" and settings["method_settings"]["fisher_batch_size"] != settings["train"]["batch_size"]:
        sys.exit("ewc.fisher_batch_size must be the training batch size: Avalanche's Fisher uses its batches")
    return ([{"seed": r.seed, "AA": r.metrics["AA"], "seconds": r.timings["total_s"]} for r in results], settings,
            config["stream"])


def avalanche_side(python: str, data: Path, settings: dict, tmp: Path) -> list[dict]:
    path = tmp / f"{settings['method']}.json"
    path.write_text(json.dumps(settings), encoding="utf-8")
    proc = subprocess.run([python, str(HERE / "avalanche_side.py"), str(data), str(path)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"the Avalanche side of {settings['method']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(stream: str, method: str, ours: list[dict], theirs: list[dict], settings: dict) -> dict:
    assert [r["seed"] for r in ours] == [r["seed"] for r in theirs]
    a, b = [r["AA"] for r in ours], [r["AA"] for r in theirs]
    pooled = math.sqrt((statistics.stdev(a) ** 2 + statistics.stdev(b) ** 2) / 2)
    gap = statistics.fmean(a) - statistics.fmean(b)  # the mean of the paired differences
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    half = stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return {"stream": stream, "method": method, "seeds": [r["seed"] for r in ours], "clbench": a, "avalanche": b,
            "pooled_sd": pooled, "gap": gap, "gap_ci95": [gap - half, gap + half], "agrees": abs(gap) <= 2 * pooled,
            "clbench_s": statistics.median(r["seconds"] for r in ours),
            "avalanche_s": statistics.median(r["seconds"] for r in theirs), "settings": settings}


def table(rows: list[dict]) -> str:
    lines = ["| stream | method | clbench AA | Avalanche AA | clbench − Avalanche [95 % CI] | 2 pooled sd | within "
             "2 sd | s/cell clbench | s/cell Avalanche |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = [f"{statistics.fmean(r[k]):.2f} ± {statistics.stdev(r[k]):.2f}" for k in ("clbench", "avalanche")]
        lo, hi = r["gap_ci95"]
        lines.append(f"| {r['stream']} | {r['method']} | {ms[0]} | {ms[1]} | {r['gap']:+.2f} [{lo:+.2f}, {hi:+.2f}] | "
                     f"{2 * r['pooled_sd']:.2f} | {'yes' if r['agrees'] else '**no**'} | {r['clbench_s']:.1f} | "
                     f"{r['avalanche_s']:.1f} |")
    notes = [f"- {COMMON}"] + [f"- {m}: {NOTES[m]}" for m in METHODS if m in {r["method"] for r in rows} and m in NOTES]
    notes += [f"- {m}: not compared. {why}" for m, why in NOT_COMPARED.items()]
    return "\n".join(lines + [""] + notes)


def ordered(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (STREAMS.index(r["stream"]), METHODS.index(r["method"])))


def run(python: str, seeds: list[int], streams: list[str], methods: list[str]) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for stream in streams:
            data, data_config = tmp / f"{stream}.npz", None
            for method in methods:
                why = refusal(stream, method)
                if why:
                    print(f"skipped: {method} on {stream} ({why})", file=sys.stderr)
                    continue
                ours, settings, stream_config = clbench_side(stream, method, seeds, tmp / stream / method)
                if data_config is None:
                    data_config = stream_config
                    write_stream(stream, stream_config, data)
                if stream_config != data_config:
                    sys.exit(f"{stream} {method}: stream settings {stream_config}, not {data_config}")
                theirs = avalanche_side(python, data, settings, tmp)
                rows.append(row(stream, method, ours, theirs, settings))
                print(table(rows[-1:]).splitlines()[2], flush=True)  # this row, as it finishes
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--avalanche-python", help="python of an environment with avalanche-lib 0.6")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--stream", action="append", choices=STREAMS, help="only this stream (repeatable)")
    ap.add_argument("--method", action="append", choices=METHODS, help="only this method (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the rows, every seed's AA, to this file")
    ap.add_argument("--merge", type=Path, nargs="+", help="run nothing: one table of these files' rows")
    args = ap.parse_args()
    if args.merge:
        merged = {(r["stream"], r["method"]): r for f in args.merge for r in json.loads(f.read_text("utf-8"))}
        rows = ordered(list(merged.values()))
    else:
        if not args.avalanche_python:
            ap.error("--avalanche-python is required to run")
        rows = run(args.avalanche_python, list(range(args.seeds)), args.stream or STREAMS, args.method or METHODS)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
