"""AWOM of dense footprints (full fine-tuning, masked methods) at 8B scale: its float64 work counted from Llama-3-8B's
shapes, and each route's speed on this machine (``metrics.device``: ``cpu`` LAPACK, or torch on ``--device``).

    python benchmarks/bench_awom_dense.py [--device cuda] [--rows 32064 --cols 2048]

AWOM's dense route (clbench.metrics._spectral_dense) takes, per matrix and earlier task, a thin QR of the last
task's ΔW where it is tall, one product with the earlier task's ΔW, the Gram of that product and its largest
eigenvalue. The count below is the multiply-adds × 2 of each step (the eigensolve's tridiagonal reduction as
4/3·n³); the timing runs both routes on one random pair of the given shape and divides its count by the time. On
the GPU lease of 2026-11-26 a 1.5 B-parameter cell (Llama-3-8B's shapes, 2 of its 32 layers) was still in its
end-of-cell metrics after 85 s on 8 CPU threads, which is what made metrics.device a setting.
"""

from __future__ import annotations

import argparse
import time

import torch

from clbench import footprint_metrics

# Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json): out × in of every matrix a full fine-tuning moves
WIDTH, MLP, KV, VOCAB, LAYERS = 4096, 14336, 1024, 128256, 32
LAYER = [(WIDTH, WIDTH), (KV, WIDTH), (KV, WIDTH), (WIDTH, WIDTH), (MLP, WIDTH), (MLP, WIDTH), (WIDTH, MLP)]
WHOLE = [(VOCAB, WIDTH), (VOCAB, WIDTH)]  # embeddings and the (untied) head


def pair_flop(out: int, inp: int) -> float:
    """float64 FLOP of one (last, earlier) pair of an out × in matrix in the eq. 8 route (ΔWᵀ: in × out)."""
    rows, cols = out, inp  # Lt = (ΔW_Tᵀ)ᵀ: out × in
    k = min(rows, cols)
    qr = 2.0 * rows * cols * cols if rows > cols else 0.0
    product = 2.0 * k * cols * rows
    gram = 2.0 * k * k * rows  # y (k × out) times its transpose
    return qr + product + gram + 4.0 / 3.0 * k**3


def route_speed(rows: int, cols: int, device: str) -> list[tuple[str, float, float]]:
    g = torch.Generator().manual_seed(0)
    last, prev = (torch.randn(cols, rows, generator=g, dtype=torch.float64) for _ in range(2))
    flop = pair_flop(rows, cols)
    out = []
    for name, fn in (("cpu (LAPACK)", lambda: footprint_metrics._spectral_dense(last, [prev])),
                     (f"torch on {device}", lambda: footprint_metrics._spectral_dense_torch(last, [prev], device))):
        fn()  # warm-up (a GPU's kernels, the allocator)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        value = fn()[0]
        out.append((name, time.perf_counter() - t, value))
    return [(name, flop / s / 1e9, s) for name, s, _ in out]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="the torch route's device (cuda on a GPU machine)")
    p.add_argument("--rows", type=int, default=32064)
    p.add_argument("--cols", type=int, default=2048)
    args = p.parse_args()
    per_pair = LAYERS * sum(pair_flop(o, i) for o, i in LAYER) + sum(pair_flop(o, i) for o, i in WHOLE)
    print(f"Llama-3-8B dense AWOM: {per_pair / 1e12:.0f} TFLOP of float64 per pair of tasks "
          f"(a chain of T tasks has T - 1 pairs); embeddings and head {sum(pair_flop(o, i) for o, i in WHOLE) / 1e12:.1f}")
    print(f"CPU threads {torch.get_num_threads()}; one {args.rows} × {args.cols} pair:")
    for name, gflops, seconds in route_speed(args.rows, args.cols, args.device):
        print(f"  {name:20s} {seconds:7.2f} s  {gflops:7.1f} GFLOP/s  → one 8B pair ≈ {per_pair / gflops / 1e9 / 60:.0f} min")


if __name__ == "__main__":
    main()
