"""Expander masks at LLM shapes: time and peak memory with the spectral check, against networkx, and
overlap avoidance between tasks (issue 15) against independent masks, per layer shape.

    python benchmarks/bench_expander_masks.py            # 4096×14336 at 10 % + per-layer overlap + Llama-3-8B
    python benchmarks/bench_expander_masks.py --quick    # 1000×4000 only (seconds)
    python benchmarks/bench_expander_masks.py --capacity # 512×2048 filled task by task: the fallback (seconds)

Per layer shape, three tasks' masks in sequence under each ``overlap_policy``: the Jaccard index with
every earlier mask (independent sampling expects p/(2−p)), σ₂ against the Ramanujan bound (spectral gap
1 − σ₂ against 1 − bound), and the CPU time of each construction; the ratio avoid / independent is taken
in the same run, task by task (the first task has nothing to avoid, so the two policies draw the same mask).

Baseline, measured in the same run: ``networkx.bipartite.configuration_model`` (docs/reference-code.md §4) on
1000×4000 at 10 %, the shape where it still finishes in seconds; its time at 4096×14336 is
extrapolated linearly in the number of edges (it is a Python loop over edges). It also loses the
edges that collide (parallel edges collapse in a simple graph), which is printed too.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
import warnings

import numpy as np
from clbench_plugins._shared.masked.masks import (
    OVERLAP_POLICIES,
    MaskSpec,
    MaskWarning,
    edge_count,
    make_mask,
    pack,
)

# Llama-3-8B: 32 layers × {q, o: 4096×4096; k, v: 1024×4096; gate, up: 14336×4096; down: 4096×14336}
LLAMA3_8B = {(4096, 4096): 2, (1024, 4096): 2, (14336, 4096): 2, (4096, 14336): 1}
LAYERS = 32
TASKS = 3


def ours(shape: tuple[int, int], density: float, seed: int = 0, memory: bool = False) -> tuple[float, int, dict]:
    """Seconds (untraced run), peak traced bytes (a second, traced run when ``memory``), the mask's stats.

    The stats gain ``cpu_s``, the process CPU time of the untraced run: on a shared, loaded machine
    wall time overstates the cost, CPU time (one BLAS thread: ``OMP_NUM_THREADS=1``) does not.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    _, stats = make_mask(shape, MaskSpec(density), np.random.default_rng(seed))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = 0
    if memory:
        tracemalloc.start()
        make_mask(shape, MaskSpec(density), np.random.default_rng(seed))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return elapsed, peak, {**stats.as_dict(), "cpu_s": cpu}


def networkx_configuration(rows: int, cols: int, density: float, seed: int = 0) -> tuple[float, float]:
    import networkx as nx

    nnz = edge_count(rows, cols, density)
    dl, dr = nnz // rows, nnz // cols
    t0 = time.perf_counter()
    g = nx.bipartite.configuration_model([dl] * rows, [dr] * cols, create_using=nx.Graph(), seed=seed)
    elapsed = time.perf_counter() - t0
    lost = 1.0 - g.number_of_edges() / (dl * rows)
    return elapsed, lost


def task_sequence(shape: tuple[int, int], density: float, policy: str, tasks: int = TASKS) -> list[dict]:
    """Stats and CPU seconds of ``tasks`` successive masks of one matrix under ``policy`` (seeds 0, 1, …)."""
    spec = MaskSpec(density, overlap=0.2, overlap_policy=policy)  # ExpanderEWCConfig's δ
    earlier: list[np.ndarray] = []
    out = []
    for task in range(tasks):
        c0 = time.process_time()
        mask, stats = make_mask(shape, spec, np.random.default_rng(task), earlier)
        out.append({**stats.as_dict(), "cpu_s": time.process_time() - c0})
        earlier.append(pack(mask))
    return out


def overlap_report(shape: tuple[int, int], density: float) -> dict[str, list[dict]]:
    """Print one line per task and policy for ``shape``; return the runs by policy."""
    runs = {policy: task_sequence(shape, density, policy) for policy in OVERLAP_POLICIES}
    expected = density / (2 - density)
    print(f"{shape[0]}×{shape[1]} at {density:.0%} (independent masks expect Jaccard p/(2−p) = {expected:.4f}):")
    for task in range(TASKS):
        for policy, run in runs.items():
            st = run[task]
            jac = " ".join(f"{j:.4f}" for j in st["jaccard"]) or "—"
            print(f"  task {task + 1} {policy:>11}: Jaccard vs earlier [{jac}], shared {st['shared']}, "
                  f"σ₂ {st['sigma2']:.4f} ≤ bound {st['bound']:.4f} (gap {st['spectral_gap']:.4f} ≥ "
                  f"{1 - st['bound']:.4f}), degrees {st['row_degrees']}/{st['col_degrees']}, {st['cpu_s']:.2f} s CPU")
        if task:
            ratio = runs["avoid"][task]["cpu_s"] / runs["independent"][task]["cpu_s"]
            print(f"  task {task + 1} time avoid / independent: {ratio:.2f}")
    return runs


def capacity_report(shape: tuple[int, int], density: float, tasks: int) -> None:
    """Fill one matrix with ``tasks`` avoiding masks: edges shared with earlier masks against the least
    possible, max(0, nnz − free positions), once the earlier masks leave too little room."""
    spec = MaskSpec(density, overlap=0.2)
    earlier: list[np.ndarray] = []
    print(f"{shape[0]}×{shape[1]} at {density:.0%}, {tasks} tasks under avoid (independent expects Jaccard "
          f"{density / (2 - density):.4f}):")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MaskWarning)  # the shared counts are printed below
        for task in range(tasks):
            free = shape[0] * shape[1] - int(np.bitwise_count(np.bitwise_or.reduce(earlier)).sum()) if earlier else 0
            mask, st = make_mask(shape, spec, np.random.default_rng(task), earlier)
            least = max(0, st.nnz - free) if earlier else 0
            print(f"  task {task + 1}: shared {st.shared} (least possible {least}), max Jaccard "
                  f"{max(st.jaccard, default=0):.4f}, σ₂ {st.sigma2:.4f} ≤ bound {st.bound:.4f}, "
                  f"degrees {st.row_degrees}/{st.col_degrees}")
            earlier.append(pack(mask))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the 1000×4000 comparison")
    parser.add_argument("--capacity", action="store_true", help="only the fill-up sequence on 512×2048")
    parser.add_argument("--density", type=float, default=0.1)
    args = parser.parse_args()
    d = args.density
    if args.capacity:
        capacity_report((512, 2048), d, int(round(1 / d)) + 2)
        return

    small = (1000, 4000)
    t_nx, lost = networkx_configuration(*small, d)
    t_small, _, st = ours(small, d)
    print(f"{small[0]}×{small[1]} at {d:.0%}: networkx configuration model {t_nx:.2f} s "
          f"({lost:.1%} of edges lost to collisions); ours {t_small:.3f} s with the spectral check "
          f"(σ₂ = {st['sigma2']:.4f} ≤ bound {st['bound']:.4f}, degrees {st['row_degrees']}/{st['col_degrees']}) "
          f"→ {t_nx / t_small:.0f}× faster")
    if args.quick:
        overlap_report(small, d)
        return

    big = (4096, 14336)
    t_big, peak_big, st = ours(big, d, memory=True)
    nnz = edge_count(*big, d)
    nx_est = t_nx * nnz / edge_count(*small, d)
    print(f"{big[0]}×{big[1]} at {d:.0%}: {t_big:.2f} s wall, {st['cpu_s']:.2f} s CPU, peak {peak_big / 2**20:.0f} MiB "
          f"({peak_big / nnz:.1f} bytes per edge; the bool mask alone is {big[0] * big[1] / 2**20:.0f} MiB), "
          f"σ₂ = {st['sigma2']:.4f} ≤ bound {st['bound']:.4f}, tries {st['tries']}, "
          f"degrees rows {st['row_degrees']} cols {st['col_degrees']}, nnz {st['nnz']} = round({d}·m·n) = {nnz}")
    print(f"  networkx extrapolated from {small[0]}×{small[1]}: ≈ {nx_est:.0f} s → ours {nx_est / t_big:.0f}× faster")

    total = 0.0
    for shape, per_layer in LLAMA3_8B.items():
        runs = overlap_report(shape, d)
        t = max(st["cpu_s"] for st in runs["avoid"])  # the slowest task: a later one, which avoids
        total += t * per_layer * LAYERS
        print(f"  {shape[0]}×{shape[1]}: {t:.2f} s CPU (slowest task, avoid) × {per_layer * LAYERS} matrices")
    print(f"Llama-3-8B, all {sum(LLAMA3_8B.values()) * LAYERS} projection matrices, one task: ≈ {total:.0f} s CPU "
          f"on this CPU (one core; matrices are independent, so it parallelises)")


if __name__ == "__main__":
    main()
