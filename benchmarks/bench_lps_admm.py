"""LPS cost on the paper's permuted-MNIST network (784-2000-2000-10, one head per task, batch 128, Adam):

1. one ADMM update (eq. 14: Z/U projection + dual update on the weights, Y/K on the share mask) against
   one training step of the ADMM phase (forward, CE + ADMM penalties, backward, share-mask gradient,
   Adam step, M ⊙ W̄ write-back) and against one plain training step of the same network. Goal ≤ 0.2×.
   The update runs once every ``admm_interval`` epochs, so its cost per step is also shown amortised.
2. the top-k selection behind every projection: numpy's O(n) partition (what ``topk_positions`` uses on
   CPU) against ``torch.topk``, on the 2000×2000 layer.
3. mask memory per task: LPS keeps one shared owner map (uint8, one byte per weight) plus one bit-packed
   share mask per task; against one float32 mask per task (and an unpacked bool one).

    python benchmarks/bench_lps_admm.py [--task 9] [--reps 7] [--threads 1]

No data are read: the network sees random batches (the cost does not depend on the pixels). Earlier
tasks' partitions are laid down by the method's own final projection, so task ``--task`` sees the
paper's capacity state (α = 10% per task, β = 90%). Ratios are measured in the same process.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from clbench_plugins._shared.partition import pack, topk_positions
from clbench_plugins.lps.config import LPSConfig
from clbench_plugins.lps.method import LPS

from clbench import testing
from clbench.config import TrainConfig
from clbench.method import CellContext, Phase
from clbench.model import StreamInfo

STEPS_PER_EPOCH = math.ceil(54_000 / 128)  # permuted MNIST: 60,000 − 10% validation, batch 128


def build(task: int) -> tuple[LPS, torch.nn.Module, CellContext, Phase]:
    regs = testing.registry()
    sspec = regs.streams.get("permuted-mnist")
    stream = sspec.factory(sspec.config_cls())  # no data are loaded until a task's data are asked for
    order = stream.order("1")
    train = TrainConfig(batch_size=128, optimizer="adam", lr=1e-3, device="cpu")
    ctx = CellContext(stream=stream, order=order, train=train, device=torch.device("cpu"), seed=0)
    mspec = regs.models.get("mlp")
    torch.manual_seed(0)
    model = mspec.factory(mspec.config_cls(hidden=(2000, 2000), multi_head=True), StreamInfo.of(stream, True))
    method = LPS(LPSConfig(alpha=(0.1,), beta=(0.9,)), ctx)  # Table I, permuted MNIST
    method.setup(model)
    for i in range(task):  # lay down tasks 0..task-1 with the method's own final projection (no training)
        method.before_task(order[i], i)
        method.before_phase(Phase("retrain", 1, 1e-3), order[i], i)
        method.after_task(order[i], i)
    phase = Phase("admm1", 1, 1e-3, "adam")
    method.before_task(order[task], task)
    method.before_phase(phase, order[task], task)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a mid-ADMM state: duals away from zero, M away from 1
        for n, p in method.layers.items():
            method.U[n] = 0.01 * torch.randn(p.shape, generator=g) * method.free(n)
            if n in method.M:
                method.M[n].add_(0.05 * torch.randn(p.shape, generator=g))
                method.K[n] = 0.01 * torch.randn(p.shape, generator=g) * method.old(n)
    return method, model, ctx, phase


def timed(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", type=int, default=9, help="0-based task index (9: the last of 10, most shared)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    method, model, ctx, phase = build(args.task)
    task = ctx.order[args.task]
    g = torch.Generator().manual_seed(2)
    x, y = torch.rand(128, 1, 28, 28, generator=g), torch.randint(0, 10, (128,), generator=g)
    opt = torch.optim.Adam(method.parameters(model, phase), lr=1e-3)
    plain_opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def lps_step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(x, task)
        loss = F.cross_entropy(logits, y)
        for value in method.loss_terms(None, logits).values():  # type: ignore[arg-type]
            loss = loss + value
        loss.backward()
        method.after_backward()
        opt.step()
        method.after_step()

    def plain_step() -> None:
        plain_opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, task), y).backward()
        plain_opt.step()

    snapshot = {n: p.detach().clone() for n, p in model.named_parameters()}
    t_lps, t_plain, t_admm = [], [], []
    for _ in range(args.reps):  # interleaved, so load on the machine hits all three alike
        t_lps.append(timed(lps_step, 1))
        t_admm.append(timed(method.admm_update, 1))
        t_plain.append(timed(plain_step, 1))
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(snapshot[n])
    lps_s, plain_s, admm_s = (statistics.median(t) for t in (t_lps, t_plain, t_admm))

    w = method.layers["backbone.3.weight"]  # the 2000×2000 layer, as task 1 sees it: all free, keep 10%
    free = torch.ones(w.shape, dtype=torch.bool)
    k = method.count("backbone.3.weight", 0)
    ours = timed(lambda: topk_positions(w.abs(), free, k), args.reps)

    def torch_topk() -> None:
        out = torch.zeros(w.numel(), dtype=torch.bool)
        out[w.detach().abs().flatten().masked_fill(~free.flatten(), -math.inf).topk(k, sorted=False).indices] = True

    theirs = timed(torch_topk, args.reps)

    weights = sum(p.numel() for p in method.layers.values())
    T = len(ctx.order)
    bits = sum(pack(torch.ones(p.shape, dtype=torch.bool)).numel() for p in method.layers.values())
    owner_per_task = weights / T
    float_mask = 4 * weights
    ours_per_task = bits + owner_per_task

    print(f"LPS on 784-2000-2000-10 ({weights:,} pruned weights), task {args.task + 1} of {T}, batch 128, "
          f"{args.threads} thread(s), median of {args.reps}")
    print(f"  training step, ADMM phase (LPS hooks)   {lps_s * 1e3:8.1f} ms")
    print(f"  training step, plain network + Adam     {plain_s * 1e3:8.1f} ms")
    print(f"  ADMM update (Z/U + Y/K, both layers)    {admm_s * 1e3:8.1f} ms")
    print(f"  ratio ADMM update / LPS step            {admm_s / lps_s:8.3f}   (goal ≤ 0.2)")
    print(f"  ratio ADMM update / plain step          {admm_s / plain_s:8.3f}")
    print(f"  amortised per step (1 update / epoch of {STEPS_PER_EPOCH} steps) {admm_s / lps_s / STEPS_PER_EPOCH:.5f}")
    print(f"top-{k:,} of the 2000×2000 layer (task 1: all entries free): numpy partition {ours * 1e3:.1f} ms, "
          f"torch.topk {theirs * 1e3:.1f} ms, ratio {ours / theirs:.2f}")
    print(f"mask memory per task ({T} tasks): bit-packed share mask {bits / 1e6:.3f} MB + owner map "
          f"{owner_per_task / 1e6:.3f} MB (1 B/weight over {T} tasks) = {ours_per_task / 1e6:.3f} MB; "
          f"float32 mask {float_mask / 1e6:.3f} MB (ratio {ours_per_task / float_mask:.3f}); "
          f"bool mask {weights / 1e6:.3f} MB")
    print(f"  method.mask_bytes_per_task() after laying down {args.task} tasks: "
          f"{method.mask_bytes_per_task() / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
