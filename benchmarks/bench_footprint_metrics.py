"""OO + AWOM + GSR + ACR (+ nuclear norm, ‖A_T‖) at LLaMA-7B shapes, low-rank vs dense, in one run.

Shapes: 32 layers × (q, v) = 64 adapted 4096×4096 matrices, rank 8, 15 tasks, random factors.
The dense route forms ΔW = s·B·A (and ΔW_Tᵀ ΔW_i for AWOM); it is timed on a few layers (and, for
AWOM, a few task pairs) and extrapolated linearly to the full run. The low-rank route is timed in full.

    python benchmarks/bench_footprint_metrics.py                  # full shapes; exact GSR/ACR extrapolated
    python benchmarks/bench_footprint_metrics.py --exact-layers 0  # exact GSR/ACR on all 64 (minutes)
    python benchmarks/bench_footprint_metrics.py --layers 8 # a quicker look, extrapolated the same way
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from clbench import metrics as m
from clbench.footprints import Dense, LowRank


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def footprints(layers: int, tasks: int, dim: int, rank: int, seed: int = 0) -> list[dict[str, LowRank]]:
    g = torch.Generator().manual_seed(seed)
    return [{f"layers.{i}.{p}": LowRank(torch.randn(rank, dim, generator=g) / dim**0.5,
                                         torch.randn(dim, rank, generator=g) * 1e-2, 4.0)
             for i in range(layers) for p in ("q", "v")} for _ in range(tasks)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32, help="transformer layers (×2 matrices: q, v)")
    ap.add_argument("--tasks", type=int, default=15)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--dense-layers", type=int, default=1, help="matrices the dense GSR/ACR route is timed on")
    ap.add_argument("--dense-pairs", type=int, default=1, help="task pairs the dense AWOM route is timed on")
    ap.add_argument("--exact-layers", type=int, default=4,
                    help="matrices the exact low-rank GSR/ACR pass is timed on (0: all of them)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--samples", type=int, default=1 << 16, help="positions per layer for the sampled estimator")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    fps = footprints(args.layers, args.tasks, args.dim, args.rank)
    n_mats = 2 * args.layers
    print(f"shapes: {n_mats} matrices of {args.dim}×{args.dim}, rank {args.rank}, {args.tasks} tasks; "
          f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f}")

    # ---- low-rank route, full size
    t_oo, oo = timed(lambda: m.orthogonal_overlap(fps))
    t_awom, awom = timed(lambda: m.adapter_weight_overlap(fps))
    t_extra, _ = timed(lambda: (m.mean_nuclear_norm(fps), m.last_adapter_norm(fps)))
    if args.exact_layers and args.exact_layers < n_mats:
        # the exact pass touches every position of every ΔW (64·15·4096² here): on a shared 2-core CPU it
        # takes minutes, so it is timed on a few matrices and extrapolated like the dense route below
        part = sorted(fps[0])[: args.exact_layers]
        sub = [{n: t[n] for n in part} for t in fps]
        t_scan, scan = timed(lambda: m.scan(sub))
        t_scan *= n_mats / len(part)
        exact_note = f" (exact timed on {len(part)} matrices, extrapolated)"
        same = m.scan(sub, samples=args.samples)  # the estimator on the matrices the exact pass saw
    else:
        t_scan, scan = timed(lambda: m.scan(fps))
        exact_note = ""
    t_sampled, sampled = timed(lambda: m.scan(fps, samples=args.samples))
    if not exact_note:
        same = sampled
    print(f"low-rank   OO {t_oo:7.3f} s   AWOM {t_awom:7.3f} s   nuclear+‖A_T‖ {t_extra:6.3f} s   "
          f"GSR+ACR exact {t_scan:7.2f} s   GSR+ACR sampled({args.samples}/layer) {t_sampled:6.3f} s{exact_note}")
    where = f"on the {len(part)} exact matrices" if exact_note else "on all matrices"
    print(f"values     OO {oo:.4g}  AWOM {awom:.4g}  {where}: GSR exact {scan.sparsity_rate():.6f} sampled "
          f"{same.sparsity_rate():.6f}  ACR exact {scan.collision_rate():.6f} sampled {same.collision_rate():.6f}")

    # ---- dense route on a few matrices / pairs, extrapolated
    names = sorted(fps[0])[: args.dense_layers]
    last = fps[-1]

    def dense_awom() -> float:
        total = 0.0
        for name in names:
            wt = last[name].dense().double()
            for prev in fps[: args.dense_pairs]:
                total += float(torch.linalg.matrix_norm(wt.T @ prev[name].dense().double(), ord=2))
        return total

    t_awom_d, _ = timed(dense_awom)
    t_awom_d *= (n_mats / len(names)) * ((args.tasks - 1) / args.dense_pairs)
    t_oo_d, _ = timed(lambda: sum(float(((p[n].A.double() @ last[n].A.double().T) ** 2).sum())
                                  for n in names for p in fps[:-1]))
    t_oo_d *= n_mats / len(names)  # OO is defined on the A's: there is no ΔW to form; same work
    sub = [{n: Dense(t[n].dense()) for n in names} for t in fps]
    t_scan_d, _ = timed(lambda: (m.collision_rate(sub), m.generalized_sparsity_rate(sub)))
    t_scan_d *= n_mats / len(names)
    print(f"dense est. OO {t_oo_d:7.3f} s   AWOM {t_awom_d:9.1f} s   GSR+ACR {t_scan_d:9.1f} s  "
          f"(timed on {len(names)} matrices, {args.dense_pairs} AWOM pair(s), extrapolated)")

    low = t_oo + t_awom + t_scan
    dense = t_oo_d + t_awom_d + t_scan_d
    low_sampled = t_oo + t_awom + t_sampled
    print(f"OO+AWOM+GSR+ACR  exact low-rank {low:.2f} s  vs dense {dense:.1f} s  → {dense / low:.0f}× faster")
    print(f"OO+AWOM+GSR+ACR  with sampled GSR/ACR {low_sampled:.2f} s  → {dense / low_sampled:.0f}× faster")
    print(f"OO+AWOM alone    low-rank {t_oo + t_awom:.3f} s  vs dense {t_oo_d + t_awom_d:.1f} s  → "
          f"{(t_oo_d + t_awom_d) / (t_oo + t_awom):.0f}× faster")


if __name__ == "__main__":
    main()
