"""Forward time at task 10 vs task 1 under olora / nlora (merged earlier adapters), in one run.

The model is a MiniLM-sized stand-in (6 blocks, hidden 384, q/v/o and MLP Linears, 8 × 64 tokens)
with ``lora_targets`` = the q/v layers; the methods run their real task lifecycle (before_task /
after_task, which merges) with random adapter values — training is not what is timed. The baseline
"unmerged" keeps every finished adapter in the forward, as the released O-LoRA/N-LoRA code does
(lora_A/lora_B of rank 8·(t−1) beside loranew), to show what merging saves.

    python benchmarks/bench_lora_forward.py [--tasks 10] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from clbench_plugins._shared.lora.adapters import LoRAHook
from clbench_plugins.nlora.config import NLoRAConfig
from clbench_plugins.nlora.method import NLoRA
from clbench_plugins.olora.config import OLoRAConfig
from clbench_plugins.olora.method import OLoRA
from torch import Tensor, nn

from clbench.config import TrainConfig
from clbench.method import CellContext
from clbench.model import CLModel
from clbench.testing import TinyVectorStream


class StandIn(CLModel):
    def __init__(self, dim: int = 384, blocks: int = 6) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict({k: nn.Linear(dim, dim) for k in ("q", "v", "o")}
                                                  | {"up": nn.Linear(dim, 4 * dim), "down": nn.Linear(4 * dim, dim)})
                                    for _ in range(blocks))
        self.lora_targets = [f"blocks.{i}.{k}" for i in range(blocks) for k in ("q", "v")]
        for p in self.parameters():
            p.requires_grad_(False)

    def forward(self, x: Tensor, task: str) -> Tensor:
        for b in self.blocks:
            q, v = b["q"](x), b["v"](x)
            att = torch.softmax(q @ x.transpose(1, 2) / x.shape[-1] ** 0.5, dim=-1)
            x = x + b["o"](att @ v)
            x = x + b["down"](torch.relu(b["up"](x)))
        return x.mean(dim=1)


def interleaved_times(models: list[nn.Module], x: Tensor, repeats: int) -> list[float]:
    """Median forward time of each model, timed round-robin so load drift hits all of them alike."""
    times: list[list[float]] = [[] for _ in models]
    with torch.no_grad():
        for model in models:
            model.eval()
            model(x, "w0")
        for _ in range(repeats):
            for i, model in enumerate(models):
                t0 = time.perf_counter()
                model(x, "w0")
                times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def at_task(method_cls: type, config: object, task: int, tasks: int) -> tuple[StandIn, object]:
    """A model whose method has finished tasks 0..task−1 (random adapters, merged) and started ``task``."""
    torch.manual_seed(0)
    model = StandIn()
    stream = TinyVectorStream(tasks=tasks)
    ctx = CellContext(stream=stream, order=stream.order("1"), train=TrainConfig(), device=torch.device("cpu"),
                      seed=0)
    method = method_cls(config, ctx)
    method.setup(model)
    for i, name in enumerate(ctx.order[: task + 1]):
        method.before_task(name, i)
        with torch.no_grad():
            for _, B in method.adapters.current().values():
                B.normal_(0, 0.01)
        if i < task:
            method.after_task(name, i)
    return model, method


def unmerged(model: StandIn, method: object, tasks: int) -> StandIn:
    """The same model with every finished adapter kept as a live branch, as the released code does."""
    for name, layer in method.adapters.layers.items():  # type: ignore[attr-defined]
        for t in range(tasks - 1):
            A, B = method.adapters.history[t][name]  # type: ignore[attr-defined]
            with torch.no_grad():  # take the merged update back out of W
                layer.weight.sub_(method.adapters.scale * B @ A)  # type: ignore[attr-defined]
            holder = nn.Module()
            holder.lora_A, holder.lora_B = nn.Parameter(A, False), nn.Parameter(B, False)
            layer.register_module(f"old_{t}", holder)
            hook = LoRAHook(layer, method.adapters.scale, 0.0)  # type: ignore[attr-defined]
            layer.register_forward_hook(lambda mod, inp, out, h=hook, e=holder: h(e, inp, out))
    return model


def run(method_cls: type, config: object, tasks: int, repeats: int, x: Tensor) -> tuple[float, float, float]:
    first, _ = at_task(method_cls, config, 0, tasks)
    last, method = at_task(method_cls, config, tasks - 1, tasks)
    baseline = unmerged(*at_task(method_cls, config, tasks - 1, tasks), tasks)
    for model in (first, last, baseline):
        model.eval()  # no adapter dropout: the check below compares functions, the timing measures inference
    with torch.no_grad():
        torch.testing.assert_close(baseline(x, "w0"), last(x, "w0"), rtol=1e-4, atol=1e-4)  # same function
    t_first, t_last, t_unmerged = interleaved_times([first, last, baseline], x, repeats)
    return t_first, t_last, t_unmerged


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    x = torch.randn(8, 64, 384)
    for name, cls, cfg in (("olora", OLoRA, OLoRAConfig()), ("nlora", NLoRA, NLoRAConfig())):
        first, last, unmerged = run(cls, cfg, args.tasks, args.repeats, x)
        print(f"{name}: forward task 1 {first * 1e3:.1f} ms, task {args.tasks} {last * 1e3:.1f} ms → "
              f"{last / first:.3f}× (goal ≤ 1.05×); without merging task {args.tasks} would take "
              f"{unmerged * 1e3:.1f} ms ({unmerged / first:.2f}×)")


if __name__ == "__main__":
    main()
