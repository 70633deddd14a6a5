"""Data-parallel step time on the CPU: the same cell with `--nproc 2` (two gloo ranks) and in one process, measured in
one run; prints the ratio of the mean optimizer-step time, N=2 / N=1.

    python benchmarks/bench_ddp.py            # seqft on permuted-digits, 3 epochs, a 1024-wide MLP
    python benchmarks/bench_ddp.py --quick    # 1 epoch, the default MLP (seconds: checks that it runs)

A step's time is the cell's training seconds over its optimizer steps (``timings.tasks[i].train``), so the
ranks' start-up (seconds: torch, the plugins, the process group) is not in it, but each step's two all-reduces
(gradients, losses) and the evaluation's gather are. Each rank runs ``train.threads`` (1) threads: on a 2-core
machine two ranks have the two cores and one process one, so the ratio shows what the split of the batch buys
against what the collectives cost; with small models the collectives dominate and no speed-up is expected.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from clbench import testing
from clbench.cell import CellResult


def step_seconds(result: CellResult) -> float:
    """Mean seconds of an optimizer step over every task and phase of the cell."""
    seconds = steps = 0.0
    for task in result.timings["tasks"]:
        for name in task["phases"]:
            seconds += task[name]["seconds"]
            steps += task[name]["steps"]
    return seconds / max(steps, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 epoch, the default MLP: checks that it runs")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    sets: dict[str, list] = {"train.epochs": [1 if args.quick else 3]}
    if not args.quick:
        sets["model.hidden"] = [[1024, 1024]]
    regs = testing.registry()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        common = dict(profile="quick", orders=["1"], sets=sets)
        [one] = testing.run(regs, out / "one", "seqft", "permuted-digits", **common)
        [many] = testing.run(regs, out / "many", "seqft", "permuted-digits", nproc=args.nproc, **common)
    for r in (one, many):
        assert r.status == "complete", r.error
    a, b = step_seconds(one), step_seconds(many)
    print(f"seqft on permuted-digits, {sets}: step {a * 1e3:.2f} ms with 1 process, {b * 1e3:.2f} ms with "
          f"{args.nproc} ranks; N={args.nproc} / N=1 = {b / a:.2f}")
    print(f"evaluation: {sum(t['eval_s'] for t in one.timings['tasks']):.2f} s and "
          f"{sum(t['eval_s'] for t in many.timings['tasks']):.2f} s")


if __name__ == "__main__":
    main()
