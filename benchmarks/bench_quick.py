"""Wall time of a whole profile as a user runs it: the quick default, `clbench run --methods all` (goal: ≤ 5 min on a
2-core laptop CPU), or `--profile bench` (goal: ≤ 90 min on 2 cores).

    python benchmarks/bench_quick.py [--jobs auto] [--jobs 1] [--compare results/quick]
    python benchmarks/bench_quick.py --out results/quick --record results/quick/wall-time.json
    python benchmarks/bench_quick.py --profile bench --data-dir DIR --out results/bench \
        --record results/bench/wall-time.json
    python benchmarks/bench_quick.py --profile bench --track equal-steps --data-dir DIR \
        --out results/bench-equal-steps --record results/bench-equal-steps/wall-time.json
    python benchmarks/bench_quick.py --profile bench --track equal-compute --data-dir DIR \
        --out results/bench-equal-compute --record results/bench-equal-compute/wall-time.json
    python benchmarks/bench_quick.py --profile bench --track memory-200 --data-dir DIR \
        --out results/bench-memory/200 --record results/bench-memory/200/wall-time.json

Each ``--jobs`` value (default: auto) runs the whole profile into a fresh temporary folder (``--out``: that folder, one ``--jobs`` value),
one after the other, timed from outside the process (start-up, plugin loading and the worker processes included).
With ``--compare DIR`` every run's cells are then compared with ``DIR`` (``clbench compare``, exact): the numbers
do not depend on ``--jobs``. ``--record FILE`` writes the last run's
figures as JSON (the README's wall time is generated from the committed one). Run it on a quiet machine: a
benchmark or a test run beside it slows it down.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def track_name(value: str) -> str:
    """``own``, ``equal-steps``, ``equal-compute`` or ``memory-M`` (M examples: ``train.memory``)."""
    memory = value.startswith("memory-") and value[7:].isdigit() and int(value[7:]) > 0
    if value in ("own", "equal-steps", "equal-compute") or memory:
        return value
    raise argparse.ArgumentTypeError(f"{value!r}: own, equal-steps, equal-compute or memory-M (M > 0 examples)")


def commands(profile: str | None, track: str, sets: list[str]) -> list[list[str]]:
    """The `clbench run` command line of a profile's track: the profile's own; at equal steps, equal compute and
    equal memory M (bench) the profile that is that track, presets tuned on its budget: ``bench-equal-steps`` (every
    method one epoch of the stream's mean task in optimizer steps a task), ``bench-equal-compute`` (every task's
    examples with gradients those of one epoch of plain fine-tuning) or ``bench-memory-M`` (the methods that keep
    examples, each keeping M). docs/bench.md, docs/budgets.md."""
    base = ["clbench", "run", "--methods", "all"] + (["--profile", profile] if profile else [])
    base += [f"--set={s}" for s in sets]
    if track == "own":
        return [base]
    if profile != "bench":
        sys.exit(f"--track {track} is defined for --profile bench (docs/bench.md)")
    if track.startswith("memory-"):  # (the profile's methods: those that keep examples)
        return [["clbench", "run", "--profile", f"bench-{track}", *base[6:]]]
    return [[*base[:5], f"bench-{track}", *base[6:]]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", action="append", help="a --jobs value to time (repeatable; default auto)")
    ap.add_argument("--compare", type=Path, help="a result tree every run must equal")
    ap.add_argument("--out", type=Path, help="run into this (new) folder instead of a temporary one")
    ap.add_argument("--record", type=Path, help="write the last run's figures here (JSON)")
    ap.add_argument("--profile", help="time this profile (`clbench run --profile P`) instead of the quick default")
    ap.add_argument("--track", type=track_name, default="own",
                    help="own: the methods' own budgets; equal-steps: (bench) every method the same optimizer steps "
                         "a task; equal-compute: (bench) the profile bench-equal-compute; memory-M: (bench) the profile "
                         "bench-memory-M, the methods that keep examples, each keeping M (train.memory)")
    ap.add_argument("--data-dir", help="as clbench run --data-dir")
    ap.add_argument("--seeds", help="as clbench run --seeds (default: the profile's)")
    ap.add_argument("--set", action="append", default=[], metavar="SCOPE.KEY=VALUE", help="as clbench run --set")
    args = ap.parse_args()
    if args.out and len(args.jobs or ["auto"]) > 1:
        sys.exit("--out takes one --jobs value (each run needs its own folder)")
    import os

    lines = commands(args.profile, args.track, args.set)
    goal = {None: "5 min", "quick": "5 min", "bench": "90 min"}.get(args.profile, "none")
    print(f"{cpu_model()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs or ["auto"]:
            out = args.out or Path(tmp) / f"jobs-{jobs}"
            data = ["--data-dir", args.data_dir] if args.data_dir else []
            data += ["--seeds", args.seeds] if args.seeds else []
            t0 = time.perf_counter()
            for line in lines:
                done = subprocess.run([sys.executable, "-m", "clbench", *line[1:], *data, "--jobs", jobs, "--out", str(out),
                                       "--no-progress"], capture_output=True, text=True, check=False)
                if done.returncode:
                    sys.exit(f"{' '.join(line)} --jobs {jobs} exited {done.returncode}:\n{done.stderr[-3000:]}")
            seconds = time.perf_counter() - t0
            cells = list(out.rglob("result.json"))
            made = [json.loads(p.read_text()) for p in cells]
            busy = sum(r["timings"]["total_s"] for r in made)
            kernels = ", ".join(sorted({str(r["env"].get("cpu_capability")) for r in made}))  # torch's CPU kernels
            print(f"--jobs {jobs}: {len(cells)} cells in {int(seconds // 60)} min {seconds % 60:.0f} s wall "
                  f"({seconds:.1f} s; the cells' own times add up to {busy:.1f} s)  (goal ≤ {goal})")
            if args.record:
                args.record.write_text(json.dumps({
                    "command": "; ".join(" ".join(line) for line in lines), "jobs": jobs, "cells": len(cells),
                    "wall_s": round(seconds, 1), "cells_s": round(busy, 1), "cpu": cpu_model(),
                    "cpus": os.cpu_count(), "cpu_capability": kernels, "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n",
                    encoding="utf-8")
            if args.compare:
                cmp = subprocess.run([sys.executable, "-m", "clbench", "compare", str(args.compare), str(out)],
                                     capture_output=True, text=True, check=False)
                # the verdict is compare's summary line (stderr) and exit code; its stdout is the per-cell table
                summary = cmp.stderr.strip().splitlines()[-1] if cmp.stderr.strip() else "(no summary)"
                print(f"  vs {args.compare}: {summary} (exit {cmp.returncode})")


if __name__ == "__main__":
    main()
