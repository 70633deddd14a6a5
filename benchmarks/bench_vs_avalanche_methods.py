"""clbench's SI, GEM, A-GEM, GDumb, iCaRL, DER and ER-ACE beside Avalanche 0.6's, cell by cell.

Goal (issue 38): on a task-incremental and a class-incremental digits stream, with matched settings and 5 seeds,
each method's AA agrees with Avalanche's within 2 pooled standard deviations.

    python benchmarks/bench_vs_avalanche_methods.py --avalanche-python /path/to/venv/bin/python [--seeds 5]
        [--stream split-digits] [--method der] [--json out.json]

Avalanche needs torchvision, which does not import beside the project's CPU torch wheel, so its side runs in a
separate environment (../shared/data/README.md, plus `quadprog` for its GEM) as a subprocess: ``benchmarks/avalanche_side.py``. Both sides get
the same data (order 1 of the stream, clbench's loader, written once to an ``.npz`` with the labels as digits),
the same model (the quick MLP), the quick preset's SGD learning rate, momentum, batch size and epochs of the
method on that stream, and the method's own settings as clbench resolves them (memories, α, β, c, ξ, margin),
read from each clbench cell's recorded config. Seeds set each side's own generator: initialisation and batch
order differ between the libraries, so agreement is judged against the spread over seeds.

Verdict per row: |mean_clbench − mean_avalanche| ≤ 2·pooled sd, with pooled sd = √((sd_c² + sd_a²)/2). Seconds are
each side's own timing of training and evaluation of one cell (clbench: the cell's ``timings.total_s``, which also
holds its footprints and metrics; Avalanche: its train and eval calls), medians over the seeds.

Conventions that differ, named in the table's notes: Avalanche's DER fills a class-balanced buffer at each
experience's end and stores the logits then (clbench: a reservoir filled as the stream trains, with the logits at
that step, the paper's Algorithm 1) and, on the class-incremental stream, runs an unmasked head (see
``avalanche_side._UNMASKED``); Avalanche's SI damping ``eps`` is given clbench's ξ; GDumb retrains
``gdumb.epochs`` on both sides.
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

HERE = Path(__file__).resolve().parent
METHODS = {"split-digits": ("si", "gem", "agem", "gdumb", "der", "er-ace"),
           "split-digits-cil": ("si", "gem", "agem", "gdumb", "icarl", "der", "er-ace")}
NOTES = {"der": "Avalanche: a class-balanced buffer filled at each task's end, with the logits then (clbench: a "
                "reservoir, logits as each example trains, the paper's); an unmasked head on split-digits-cil; on "
                "split-digits its stored logits are computed with their task labels (Avalanche's DER computes them "
                "with none, which a head per task cannot answer)",
         "icarl": "Avalanche: its own wrapper of the MLP's parts, unmasked classifier (clbench: masked to the seen "
                  "classes)",
         "si": "Avalanche's eps given clbench's ξ"}


def write_stream(stream_name: str, path: Path) -> None:
    """Order 1 of the stream (clbench's loader), inputs flattened, labels as the digits they name."""
    from clbench import testing

    spec = testing.registry().streams.get(stream_name)
    stream = spec.factory(spec.config_cls())
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


def clbench_side(stream: str, method: str, seeds: list[int], out: Path) -> tuple[list[dict], dict]:
    """Each seed's AA and seconds, and the settings the Avalanche side is given (from the first cell)."""
    from clbench import testing

    results = testing.run(testing.registry(), out, method, stream=stream, profile="quick", orders=["1"], seeds=seeds)
    bad = [r for r in results if r.status != "complete"]
    if bad:
        sys.exit(f"clbench {stream} {method} seed {bad[0].seed}: {bad[0].status} {bad[0].error}")
    config = results[0].config
    settings = {"method": method, "scenario": results[0].scenario, "seeds": seeds,
                "train": {k: config["train"][k] for k in ("lr", "momentum", "batch_size", "epochs")},
                "method_settings": config["methods"][method]}
    return [{"seed": r.seed, "AA": r.metrics["AA"], "seconds": r.timings["total_s"]} for r in results], settings


def avalanche_side(python: str, data: Path, settings: dict, tmp: Path) -> list[dict]:
    path = tmp / f"{settings['method']}.json"
    path.write_text(json.dumps(settings), encoding="utf-8")
    proc = subprocess.run([python, str(HERE / "avalanche_side.py"), str(data), str(path)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"the Avalanche side of {settings['method']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(stream: str, method: str, ours: list[dict], theirs: list[dict]) -> dict:
    a, b = [r["AA"] for r in ours], [r["AA"] for r in theirs]
    pooled = math.sqrt((statistics.stdev(a) ** 2 + statistics.stdev(b) ** 2) / 2)
    gap = statistics.fmean(a) - statistics.fmean(b)
    return {"stream": stream, "method": method, "clbench": a, "avalanche": b, "pooled_sd": pooled, "gap": gap,
            "agrees": abs(gap) <= 2 * pooled,
            "clbench_s": statistics.median(r["seconds"] for r in ours),
            "avalanche_s": statistics.median(r["seconds"] for r in theirs)}


def table(rows: list[dict]) -> str:
    lines = ["| stream | method | clbench AA | Avalanche AA | gap (pooled sd) | within 2 sd | s/cell clbench | "
             "s/cell Avalanche |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = [f"{statistics.fmean(r[k]):.2f} ± {statistics.stdev(r[k]):.2f}" for k in ("clbench", "avalanche")]
        lines.append(f"| {r['stream']} | {r['method']} | {ms[0]} | {ms[1]} | {r['gap']:+.2f} ({r['pooled_sd']:.2f}) | "
                     f"{'yes' if r['agrees'] else 'no'} | {r['clbench_s']:.1f} | {r['avalanche_s']:.1f} |")
    notes = sorted({r["method"] for r in rows} & set(NOTES))
    return "\n".join(lines + [""] + [f"- {m}: {NOTES[m]}" for m in notes])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--avalanche-python", required=True, help="python of an environment with avalanche-lib 0.6")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--stream", action="append", choices=sorted(METHODS), help="only this stream (repeatable)")
    ap.add_argument("--method", action="append", help="only this method (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the rows, every seed's AA, to this file")
    args = ap.parse_args()
    seeds = list(range(args.seeds))
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for stream in args.stream or sorted(METHODS):
            data = tmp / f"{stream}.npz"
            write_stream(stream, data)
            for method in METHODS[stream]:
                if args.method and method not in args.method:
                    continue
                ours, settings = clbench_side(stream, method, seeds, tmp / stream / method)
                theirs = avalanche_side(args.avalanche_python, data, settings, tmp)
                rows.append(row(stream, method, ours, theirs))
                print(table(rows[-1:]).splitlines()[2], flush=True)  # this row, as it finishes
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
