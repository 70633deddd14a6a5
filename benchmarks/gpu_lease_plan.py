"""The memory plan's estimate of every cell in results/gpu-lease, beside what the GPU measured: writes
results/gpu-lease/plan.json, which scripts/docs_tables.py turns into docs/scale-out.md's "Measured on a GPU" table.

    bash benchmarks/gpu_lease_prep.sh            # the lease's data (.gpu/), as the GPU run read it
    python benchmarks/gpu_lease_plan.py          # re-plan each committed result's cell from its recorded settings

Each cell is rebuilt from its result.json (``cell_from_result``; ``train.device=cuda``, as it ran), so the plan sees
the very settings and data that ran. The random T5 and Llama were recorded at /tmp/t5-large-random and /tmp/llama-random;
their config.json and tokenizer are written there if absent (benchmarks/random_model.py --config-only: the plan reads
no weights).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from clbench._core.cells import cell_from_result
from clbench._core.results import read_result
from clbench._exec.local import harness_registry
from clbench._exec.memory import estimate

ROOT = Path(__file__).resolve().parent.parent
LEASE = ROOT / "results" / "gpu-lease"
T5 = Path("/tmp/t5-large-random")
LLAMA = Path("/tmp/llama-random")  # the bf16 cells' (gpu_lease.sh)


def main() -> int:
    if not (ROOT / ".gpu" / "tok").is_dir():
        print("gpu_lease_plan: no .gpu/ folder: run benchmarks/gpu_lease_prep.sh first", file=sys.stderr)
        return 2
    for arch, folder in (("t5", T5), ("llama", LLAMA)):
        if not (folder / "config.json").is_file():
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "random_model.py"), str(ROOT / ".gpu" / "tok"),
                            str(folder), "--arch", arch, "--config-only"], check=True)
    regs = harness_registry()
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    plans = {}
    for path in sorted(LEASE.glob("*/*/*/order-*/seed-*/result.json")):
        cell = cell_from_result(regs, read_result(path), path.parent)
        # it ran on the GPU ("auto" there): planned as a CUDA cell, whatever this machine has
        cell = dataclasses.replace(cell, train=dataclasses.replace(cell.train, device="cuda"))
        est = estimate(regs, cell)
        key = str(path.parent.relative_to(LEASE))
        plans[key] = {"peak_bytes": est.peak, "terms": est.terms, "measured_on": est.device, "notes": est.notes}
        print(f"{key}: {est.peak / 2**30:.2f} GiB ({est.device})", flush=True)
    out = {"plan_commit": rev, "cells": plans}
    (LEASE / "plan.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
