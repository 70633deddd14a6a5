"""ACR's sensitivity to the "non-zero" tolerance τ (|x| > τ·max|ΔW|), from saved result directories.

The paper gives no τ; clbench records τ = 1e-3 in every result. This recomputes ACR (and GSR, which
needs no τ) from each cell's ``footprints.safetensors`` for several τ and prints one row per method
(mean over the cells found), plus the time the recomputation took.

    python benchmarks/bench_lora_acr_tau.py RUNS_DIR [--taus 1e-4,1e-3,1e-2,1e-1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

from clbench import footprints as fps
from clbench import metrics as m
from clbench.cell import FOOTPRINT_FILE, RESULT_FILE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--taus", default="1e-4,1e-3,1e-2,1e-1")
    args = ap.parse_args()
    taus = [float(t) for t in args.taus.split(",")]
    rows: dict[str, list[list[float]]] = defaultdict(list)
    t0 = time.perf_counter()
    for path in sorted(args.runs.rglob(FOOTPRINT_FILE)):
        result = json.loads((path.parent / RESULT_FILE).read_text())
        loaded = fps.load(path)
        rows[result["method"]].append([m.collision_rate(loaded, tau) or 0.0 for tau in taus])
    elapsed = time.perf_counter() - t0
    print("| method | cells | " + " | ".join(f"ACR τ={t:g}" for t in taus) + " |")
    print("|---|---|" + "---|" * len(taus))
    for method, values in sorted(rows.items()):
        means = [statistics.mean(v[i] for v in values) for i in range(len(taus))]
        print(f"| {method} | {len(values)} | " + " | ".join(f"{x:.4f}" for x in means) + " |")
    print(f"\nrecomputed from footprints in {elapsed:.1f} s")


if __name__ == "__main__":
    main()
