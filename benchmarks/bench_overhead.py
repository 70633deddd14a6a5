"""Harness overhead: `clbench` seqft vs a bare hand-written PyTorch loop, same model, data, epochs,
per-task evaluation of every task, in one process. Goal: ratio ≤ 1.03.

    python benchmarks/bench_overhead.py [--reps 3] [--epochs 3]

Both sides train the quick MLP on permuted-digits (10 tasks, order 1) with SGD(lr 0.05, momentum 0.9),
batch 32. clbench's side includes everything a real run does: checkpoint after every task,
footprints, metrics and result files.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from clbench import testing
from clbench.method import derive_seed


def bare_loop(epochs: int) -> list[list[float]]:
    regs = testing.registry()
    spec = regs.streams.get("permuted-digits")
    stream = spec.factory(spec.config_cls())
    order = stream.order("1")
    torch.manual_seed(derive_seed(0, 0))
    mspec = regs.models.get("mlp")
    from clbench.model import StreamInfo

    model = mspec.factory(mspec.config_cls(), StreamInfo.of(stream))
    rows = []
    for i, task in enumerate(order):
        torch.manual_seed(derive_seed(0, i + 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        train = stream.data(task).train
        for epoch in range(epochs):
            g = torch.Generator().manual_seed(derive_seed(0, i, 0, epoch))
            perm = torch.randperm(len(train), generator=g)
            for s in range(0, len(train), 32):
                idx = perm[s : s + 32]
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(model(train.x[idx], task), train.y[idx])
                loss.backward()
                opt.step()
        model.eval()
        with torch.no_grad():
            row = []
            for t in order:
                test = stream.data(t).test
                row.append(100.0 * float((model(test.x, t).argmax(-1) == test.y).float().mean()))
        model.train()
        rows.append(row)
    return rows


def clbench_loop(epochs: int, out: Path) -> list[list[float]]:
    regs = testing.registry()
    [r] = testing.run(regs, out, "seqft", stream="permuted-digits", profile="quick", orders=["1"],
                      sets={"train.epochs": [epochs]})
    return r.accuracy_matrix


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)  # less noise from the other core
    bare_loop(1)  # warm caches (data, imports)
    bare, ours = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            t0 = time.perf_counter()
            a = bare_loop(args.epochs)
            bare.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = clbench_loop(args.epochs, Path(tmp) / f"r{rep}")
            ours.append(time.perf_counter() - t0)
    same = max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"bare loop   median {statistics.median(bare):.3f}s  {[round(t, 3) for t in bare]}")
    print(f"clbench     median {statistics.median(ours):.3f}s  {[round(t, 3) for t in ours]}")
    print(f"overhead ratio clbench/bare = {ratio:.3f}  (goal ≤ 1.03)")
    print(f"max |Δ accuracy| between the two = {same:.3f} points (same seeds, same data order)")


if __name__ == "__main__":
    main()
