"""Optimizer state of a mask method: packed to the trainable coordinates vs torch's dense state.

    python benchmarks/bench_sparse_state.py            # 4096×4096 (a Llama q_proj) at 10 % and 1 %
    python benchmarks/bench_sparse_state.py --quick    # 1024×1024

For one matrix whose gradient is masked (as every mask method here does), prints the bytes of
optimizer state (plus the packed values and their int32 indices) and the time of one optimizer step, each as a ratio
against the dense torch optimizer measured in the same run. The mask itself is the method's and is
not counted on either side (1 byte a weight as a bool tensor).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from clbench._core.optim import PackedState, make_optimizer
from clbench.method import Phase


def state_bytes(opt: object) -> int:
    total = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()  # type: ignore[attr-defined]
                if torch.is_tensor(t) and t.dim() > 0)
    if isinstance(opt, PackedState):
        total += sum(t.numel() * t.element_size() for _, index, v in opt.packed for t in (index, v))
    return total


def measure(shape: tuple[int, int], density: float, optimizer: str, packed: bool, steps: int) -> tuple[int, float]:
    g = torch.Generator().manual_seed(0)
    p = nn.Parameter(torch.randn(shape, generator=g))
    mask = torch.rand(shape, generator=g) < density
    opt = make_optimizer([p], Phase("bench", 1, 1e-3, optimizer, momentum=0.9 if optimizer != "adamw" else 0.0),
                         [(p, mask)] if packed else ())
    grad = torch.randn(shape, generator=g) * mask
    p.grad = grad.clone()
    opt.step()  # builds the state
    t0 = time.perf_counter()
    for _ in range(steps):
        p.grad = grad.clone()
        opt.step()
    return state_bytes(opt), (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    shape = (1024, 1024) if args.quick else (4096, 4096)
    print(f"matrix {shape[0]}×{shape[1]} fp32, {args.steps} steps; ratio = packed / dense (dense = torch as is)")
    print(f"{'optimizer':<9} {'density':>7} {'dense MiB':>10} {'packed MiB':>11} {'memory ratio':>13} "
          f"{'dense ms':>9} {'packed ms':>10} {'time ratio':>11}")
    for optimizer in ("adamw", "rmsprop", "sgd"):
        dense_b, dense_t = measure(shape, 1.0, optimizer, False, args.steps)  # dense state is mask-independent
        for density in (0.1, 0.01):
            packed_b, packed_t = measure(shape, density, optimizer, True, args.steps)
            print(f"{optimizer:<9} {density:>7.0%} {dense_b / 2**20:>10.1f} {packed_b / 2**20:>11.1f} "
                  f"{packed_b / dense_b:>13.3f} {dense_t * 1e3:>9.1f} {packed_t * 1e3:>10.1f} "
                  f"{packed_t / dense_t:>11.2f}")


if __name__ == "__main__":
    main()
