"""EWC's quadratic penalty and the diagonal Fisher it is weighted by: ``ewc`` runs them, and so does the masked
training of :mod:`clbench_plugins._shared.masked` (Expander-EWC and its ablations, LoTA/LoTTO, the per-task masks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from clbench.data import batches
from clbench.model import CLModel


def diagonal_fisher(model: CLModel, data: Any, task: str, params: dict[str, nn.Parameter], samples: int,
                    batch_size: int, device: torch.device, generator: torch.Generator,
                    at: Mapping[str, Tensor] | None = None) -> dict[str, Tensor]:
    """Empirical diagonal Fisher: mean over examples of the squared gradient of the log-likelihood
    of the true label. Batches of ``batch_size`` with per-batch mean gradients (the usual estimate). ``at``: boolean
    masks of some parameters, whose Fisher is then kept and returned at the mask only (packed, in the mask's order):
    the whole one's values there, without a whole float32 copy of the weight.

    Squared and summed in float32 whatever the weights' dtype: accumulated in bf16 (the weights' dtype), the 256
    squared gradients of tests/test_ewc.py sum to 1.9 % below their float64 sum (each addition rounds to 8 bits of
    mantissa), in float32 to 2e-7. For float32 weights the arithmetic is what it always was."""
    at = at or {}
    fisher = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items() if n not in at}
    packed: dict[str, Tensor] = {}  # (0 + x is x: the first batch's squares start a packed sum)
    was_training = model.training
    model.eval()
    n_batches = 0
    seen = 0
    for batch in batches(data, batch_size, task, generator):
        if samples and seen >= samples:
            break
        batch = batch.to(device)
        model.zero_grad(set_to_none=True)
        logits = model(batch.x, batch.task)
        model.task_loss(logits, batch.y).backward()
        for n, p in params.items():
            if p.grad is not None:
                if n not in at:
                    fisher[n] += p.grad.detach().float() ** 2
                elif n in packed:
                    packed[n] += p.grad.detach()[at[n]].float() ** 2
                else:
                    packed[n] = p.grad.detach()[at[n]].float() ** 2
        n_batches += 1
        seen += len(batch)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    for n, mask in at.items():
        if n in params and n not in packed:  # no gradient reached it
            packed[n] = params[n].new_zeros(mask.shape, dtype=torch.float32)[mask]
    return {n: (packed[n] if n in packed else fisher[n]) / max(n_batches, 1) for n in params}


class Offload:
    """Where a method keeps its per-weight state (a Fisher, an anchor): on the cell's device, or, with
    ``train.offload_state`` on an accelerator (the memory plan's meta device included), in host memory (pinned for a
    CUDA device), copied to the device one parameter at a time when read. The same values either way, so the same
    numbers; an 8B model's float32 Fisher (28 GiB) then takes no device memory."""

    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.device = device
        self.on = enabled and device.type != "cpu"

    def keep(self, t: Tensor) -> Tensor:
        """A copy of ``t`` where the state lives (``t`` itself on the device: the caller's to keep)."""
        if not self.on:
            return t
        host = t.to("cpu", copy=True)
        return host.pin_memory() if self.device.type == "cuda" else host

    def copy(self, t: Tensor) -> Tensor:
        """A copy of ``t`` (a tensor the caller keeps using: a weight) where the state lives."""
        return self.keep(t) if self.on else t.clone()

    def load(self, t: Tensor) -> Tensor:
        """A checkpoint's tensor where the state lives."""
        return self.keep(t) if self.on else t.to(self.device)

    def read(self, t: Tensor) -> Tensor:
        """``t`` on the device (a fresh copy when it is kept on the host)."""
        return t.to(self.device, non_blocking=True) if self.on else t


class Weighted(Mapping[str, Tensor]):
    """Each penalised parameter's 2w (the penalty's gradient is 2w ⊙ (θ − θ*)), or any per-parameter tensor, computed
    when read, one parameter at a time: no second full copy beside the Fisher (λF of an 8B model is 30 GiB of
    float32). The same float32 products as a stored λF, so the numbers are unchanged."""

    def __init__(self, names: Callable[[], Iterable[str]], weight: Callable[[str], Tensor]) -> None:
        self._names, self._weight = names, weight

    def __getitem__(self, name: str) -> Tensor:
        return self._weight(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names()))

    def __len__(self) -> int:
        return len(list(self._names()))


# The quadratic penalty Σ w ⊙ (θ − θ*)² and its gradient 2w ⊙ (θ − θ*), without autograd. Through autograd the
# penalty keeps θ − θ* and its square for backward (two copies of every penalised weight: of a whole model for
# EWC over an LLM). The gradient is the very float32 product autograd forms (×2 is exact in binary floating point,
# so round(2w·d) = 2·round(w·d)). The runner's checks and logs read the value from loss_terms; the gradient is
# formed again in after_backward, one parameter at a time, rather than held from loss_terms for the whole model
# (a third copy: 30 GiB for an 8B model), and added there, after data parallelism's all-reduce (it is the same on
# every rank).
@torch.no_grad()
def penalty_value(doubled: Mapping[str, Tensor], params: Mapping[str, nn.Parameter], anchor: Mapping[str, Tensor]
                  ) -> Tensor:
    """(1/2) Σ 2w ⊙ (θ − θ*)² (``doubled`` holds 2w), without a graph, one parameter's temporaries at a time."""
    parts = []
    for n, w2 in doubled.items():
        d = params[n] - anchor[n]
        parts.append((w2 * d * d).sum())
    return 0.5 * torch.stack(parts).sum()


@torch.no_grad()
def add_penalty_gradients(doubled: Mapping[str, Tensor], params: Mapping[str, nn.Parameter],
                          anchor: Mapping[str, Tensor]) -> None:
    """θ.grad += 2w ⊙ (θ − θ*) for every penalised parameter (θ.grad = it where θ has none)."""
    for n, w2 in doubled.items():
        p = params[n]
        g = w2 * (p - anchor[n])
        if p.grad is None:
            p.grad = g.to(p.dtype)
        else:
            p.grad.add_(g)
