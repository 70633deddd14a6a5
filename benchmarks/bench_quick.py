"""Wall time of the quick default, `clbench run --methods all`, as a user runs it. Goal: ≤ 5 min on a
2-core laptop CPU.

    python benchmarks/bench_quick.py [--jobs auto] [--jobs 1] [--compare results/quick]
    python benchmarks/bench_quick.py --out results/quick --record results/quick/wall-time.json

Each ``--jobs`` value (default: auto) runs the whole profile into a fresh temporary folder (``--out``: that
folder, one ``--jobs`` value), one after the other, timed from outside the process (start-up, plugin loading and
the worker processes included). With ``--compare DIR`` every run's cells are then compared with ``DIR``
(``clbench compare``, exact): the numbers do not depend on ``--jobs``. ``--record FILE`` writes the last run's
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", action="append", help="a --jobs value to time (repeatable; default auto)")
    ap.add_argument("--compare", type=Path, help="a result tree every run must equal")
    ap.add_argument("--out", type=Path, help="run into this (new) folder instead of a temporary one")
    ap.add_argument("--record", type=Path, help="write the last run's figures here (JSON)")
    args = ap.parse_args()
    if args.out and len(args.jobs or ["auto"]) > 1:
        sys.exit("--out takes one --jobs value (each run needs its own folder)")
    import os

    print(f"{cpu_model()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in args.jobs or ["auto"]:
            out = args.out or Path(tmp) / f"jobs-{jobs}"
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "clbench", "run", "--methods", "all", "--jobs", jobs,
                                   "--out", str(out), "--no-progress"], capture_output=True, text=True, check=False)
            seconds = time.perf_counter() - t0
            if done.returncode:
                sys.exit(f"clbench run --jobs {jobs} exited {done.returncode}:\n{done.stderr[-3000:]}")
            cells = list(out.rglob("result.json"))
            busy = sum(json.loads(p.read_text())["timings"]["total_s"] for p in cells)
            print(f"--jobs {jobs}: {len(cells)} cells in {int(seconds // 60)} min {seconds % 60:.0f} s wall "
                  f"({seconds:.1f} s; the cells' own times add up to {busy:.1f} s)  (goal ≤ 5 min)")
            if args.record:
                args.record.write_text(json.dumps({
                    "command": "clbench run --methods all", "jobs": jobs, "cells": len(cells),
                    "wall_s": round(seconds, 1), "cells_s": round(busy, 1), "cpu": cpu_model(),
                    "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}, indent=1) + "\n", encoding="utf-8")
            if args.compare:
                cmp = subprocess.run([sys.executable, "-m", "clbench", "compare", str(args.compare), str(out)],
                                     capture_output=True, text=True, check=False)
                # the verdict is compare's summary line (stderr) and exit code; its stdout is the per-cell table
                summary = cmp.stderr.strip().splitlines()[-1] if cmp.stderr.strip() else "(no summary)"
                print(f"  vs {args.compare}: {summary} (exit {cmp.returncode})")


if __name__ == "__main__":
    main()
