"""What recording a result's provenance costs (clbench._core.provenance): the audit hook that sees the files a stream
opens, the digests of the plugins' sources and of the data files, and the check a rerun makes before it
reuses a result. Goal: ≤ 1 % of a quick cell's time.

    python benchmarks/bench_provenance.py [--reps 5]

- **hook**: a quick cell (seqft, permuted-digits order 1, 3 epochs) in a fresh process, with the audit hook
  as shipped and with :func:`clbench._core.provenance.reading` replaced by a no-op (the hook never installed);
  alternating, ``--reps`` of each. Ratio: the median of the repetitions' own ratios of the cells' recorded
  ``timings.total_s``.
- **record**: in this process, cold (nothing cached): ``code_record`` of that cell (hashing every plugin
  package it names and the shared modules their files import, read from their import statements) and the
  digests of the data files its stream read; then warm (cached, as every later cell of a run); and
  ``Runner.changes`` on the finished result, what a rerun pays per cell before it reuses it.

Measured 2026-11-25 (AMD EPYC, 2 vCPUs, torch 2.13 CPU, load ~1.3 from nothing else of ours), ``--reps 5``:
cell 1.821 s with the hook, 1.830 s without, ratio 0.990 (within the noise of one process against another);
record, cold: sources 1.3 ms, data files 0.2 ms (2 files), 0.08 % of the cell; warm 0.63 ms; a rerun's check
0.7 ms for the first cell, 0.10 ms for each next one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CELL = ["run", "--methods", "seqft", "--stream", "permuted-digits", "--orders", "1", "--seeds", "0",
        "--set", "train.epochs=3", "--no-progress", "--no-leaderboard"]
NO_HOOK = """
import contextlib, clbench._core.provenance as p
@contextlib.contextmanager
def reading():
    yield set()
p.reading = reading
"""


def run_cell(out: Path, hook: bool) -> float:
    code = ("" if hook else NO_HOOK) + f"from clbench._cli.main import main\nmain({[*CELL, '--out', str(out)]!r})"
    subprocess.run([sys.executable, "-c", code], check=False, capture_output=True)
    [path] = out.rglob("result.json")
    return float(json.loads(path.read_text())["timings"]["total_s"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    ratios, on, off = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            sides = [True, False] if rep % 2 == 0 else [False, True]
            t = {hook: run_cell(Path(tmp) / f"{rep}-{hook}", hook) for hook in sides}
            on.append(t[True])
            off.append(t[False])
            ratios.append(t[True] / t[False])
        print(f"hook: cell {statistics.median(on):.3f} s with the audit hook, {statistics.median(off):.3f} s "
              f"without; ratio (median of {args.reps}) {statistics.median(ratios):.4f}")

        from clbench._core import provenance
        from clbench._core.cells import cell_from_result
        from clbench._core.results import read_result
        from clbench._exec.local import harness_registry
        from clbench._exec.runner import Runner

        regs = harness_registry()
        result = read_result(next((Path(tmp) / "0-True").rglob("result.json")))
        cell = cell_from_result(regs, result, Path(tmp) / "0-True")
        provenance._digests.clear()
        provenance._links.clear()
        t0 = time.perf_counter()
        provenance.code_record(regs, cell)
        t1 = time.perf_counter()
        for key in result.provenance["data"]:
            path = provenance.locate(key, cell, "data_dir")
            assert path is not None
            provenance.file_digest(path)
        t2 = time.perf_counter()
        provenance.code_record(regs, cell)
        t3 = time.perf_counter()
        runner = Runner(regs, progress=False)
        runner.changes(result, cell)
        t4 = time.perf_counter()
        runner.changes(result, cell)
        t5 = time.perf_counter()
        cell_s = statistics.median(off)
        print(f"record, cold: sources {1e3 * (t1 - t0):.1f} ms, data files {1e3 * (t2 - t1):.1f} ms "
              f"({len(result.provenance['data'])} files) = {100 * (t2 - t0) / cell_s:.2f} % of the cell")
        print(f"record, warm (cached): {1e3 * (t3 - t2):.2f} ms; rerun check per cell: first {1e3 * (t4 - t3):.1f} ms, "
              f"then {1e3 * (t5 - t4):.2f} ms")


if __name__ == "__main__":
    main()
