"""Mixed precision on CPU: the cost of fp32 masters per training step, and of a measured fp32 merge per task.

    python benchmarks/bench_mixed_precision.py            # 4 Linear 1024×1024, batch 16 and 1024; 8 LoRA targets
    python benchmarks/bench_mixed_precision.py --quick    # 512-wide

Step: forward, backward and RMSProp step of a bf16 MLP, with fp32 masters (clbench's PackedState) against
the pure-bf16 step (torch's optimizer on the bf16 weights, which rounds small updates away) and against the
same model in fp32, all measured in this run; the ratio is the masters' overhead. Merge: one task's
``Adapters.finish_task(merge=True)`` on bf16 targets (fp32 product, one rounding, its error measured) against
the same merge into fp32 targets.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from clbench_plugins._shared.lora.adapters import Adapters
from clbench_plugins._shared.lora.config import LoRAConfig
from torch import Tensor, nn

from clbench._core.optim import make_optimizer, torch_optimizer
from clbench.method import Phase
from clbench.model import CLModel


class Stack(CLModel):
    """``layers`` Linear width×width with tanh, in ``dtype``; every layer is a LoRA target."""

    def __init__(self, width: int, layers: int, dtype: torch.dtype) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        for p in self.parameters():
            nn.init.normal_(p, std=0.02)
        self.to(dtype)
        self.lora_targets = [f"layers.{i}" for i in range(layers)]

    def forward(self, x: Tensor, task: str = "") -> Tensor:
        h = x.to(self.layers[0].weight.dtype)
        for layer in self.layers:
            h = torch.tanh(layer(h))
        return h.float()


def best_of(fn: Callable[[], None], repeat: int) -> float:
    fn()  # warm-up (builds optimizer state)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def step_time(width: int, dtype: torch.dtype, masters: bool, batch: int, steps: int = 5) -> float:
    model = Stack(width, 4, dtype)
    params = list(model.parameters())
    phase = Phase("bench", 1, 1e-6, "rmsprop")
    opt = make_optimizer(params, phase) if masters else torch_optimizer(params, phase)
    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)

    def run() -> None:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), target).backward()
            opt.step()

    return best_of(run, 5) / steps


def merge_time(width: int, dtype: torch.dtype) -> tuple[float, dict]:
    model = Stack(width, 8, dtype)
    adapters = Adapters(model, LoRAConfig(rank=8, alpha=16, dropout=0.0))
    times = []
    for index in range(4):
        adapters.start_task(index)
        with torch.no_grad():
            for layer in adapters.layers.values():
                layer.lora_B.normal_(std=1e-3)
        t0 = time.perf_counter()
        adapters.finish_task(index, merge=True)
        times.append(time.perf_counter() - t0)
    return min(times), (adapters.merges[-1] if adapters.merges else {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    width = 512 if args.quick else 1024
    torch.set_num_threads(1)
    for batch in (16, 1024):  # a small batch shows the optimizer's cost; 1024 rows is a short LLM micro-batch
        pure = step_time(width, torch.bfloat16, masters=False, batch=batch)
        master = step_time(width, torch.bfloat16, masters=True, batch=batch)
        fp32 = step_time(width, torch.float32, masters=False, batch=batch)
        print(f"step (4 Linear {width}², batch {batch}, RMSProp, 1 thread): pure bf16 {pure * 1e3:.2f} ms, "
              f"bf16 + fp32 masters {master * 1e3:.2f} ms, fp32 {fp32 * 1e3:.2f} ms")
        print(f"  fp32-master overhead: {master / pure:.2f}× the pure-bf16 step ({master / fp32:.2f}× the fp32 step)")
    low, record = merge_time(width, torch.bfloat16)
    full, _ = merge_time(width, torch.float32)
    print(f"merge per task (8 targets {width}², rank 8): bf16 measured fp32 merge {low * 1e3:.2f} ms, "
          f"fp32 merge {full * 1e3:.2f} ms: {low / full:.2f}×; recorded {record}")


if __name__ == "__main__":
    main()
