"""Expander masks at LLM shapes: time and peak memory with the spectral check, against networkx.

    python benchmarks/bench_expander_masks.py            # 4096×14336 at 10 % + the Llama-3-8B estimate
    python benchmarks/bench_expander_masks.py --quick    # 1000×4000 only (seconds)

Baseline, measured in the same run: ``networkx.bipartite.configuration_model`` (docs/reference-code.md §4) on
1000×4000 at 10 %, the shape where it still finishes in seconds; its time at 4096×14336 is
extrapolated linearly in the number of edges (it is a Python loop over edges). It also loses the
edges that collide (parallel edges collapse in a simple graph), which is printed too.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from clbench_plugins.expander_ewc.masks import MaskSpec, edge_count, make_mask

# Llama-3-8B: 32 layers × {q, o: 4096×4096; k, v: 1024×4096; gate, up: 14336×4096; down: 4096×14336}
LLAMA3_8B = {(4096, 4096): 2, (1024, 4096): 2, (14336, 4096): 2, (4096, 14336): 1}
LAYERS = 32


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="only the 1000×4000 comparison")
    parser.add_argument("--density", type=float, default=0.1)
    args = parser.parse_args()
    d = args.density

    small = (1000, 4000)
    t_nx, lost = networkx_configuration(*small, d)
    t_small, _, st = ours(small, d)
    print(f"{small[0]}×{small[1]} at {d:.0%}: networkx configuration model {t_nx:.2f} s "
          f"({lost:.1%} of edges lost to collisions); ours {t_small:.3f} s with the spectral check "
          f"(σ₂ = {st['sigma2']:.4f} ≤ bound {st['bound']:.4f}, degrees {st['row_degrees']}/{st['col_degrees']}) "
          f"→ {t_nx / t_small:.0f}× faster")
    if args.quick:
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
        t = t_big if shape == big else ours(shape, d)[0]
        total += t * per_layer * LAYERS
        print(f"  {shape[0]}×{shape[1]}: {t:.2f} s × {per_layer * LAYERS} matrices")
    print(f"Llama-3-8B, all {sum(LLAMA3_8B.values()) * LAYERS} projection matrices, one task: ≈ {total:.0f} s "
          f"on this CPU (one core; matrices are independent, so it parallelises)")


if __name__ == "__main__":
    main()
