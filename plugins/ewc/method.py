"""EWC with a diagonal Fisher; the Fisher code is reused by methods built on EWC (Expander-EWC)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from clbench_plugins._shared.params import shared_trainable
from torch import Tensor, nn

from clbench.data import Batch, batches
from clbench.method import Method, Phase
from clbench.model import CLModel

from .config import EWCConfig


def diagonal_fisher(model: CLModel, data: Any, task: str, params: dict[str, nn.Parameter], samples: int,
                    batch_size: int, device: torch.device, generator: torch.Generator) -> dict[str, Tensor]:
    """Empirical diagonal Fisher: mean over examples of the squared gradient of the log-likelihood
    of the true label. Batches of ``batch_size`` with per-batch mean gradients (the usual estimate).

    Squared and summed in float32 whatever the weights' dtype: accumulated in bf16 (the weights' dtype), the 256
    squared gradients of tests/test_ewc.py sum to 1.9 % below their float64 sum (each addition rounds to 8 bits of
    mantissa), in float32 to 2e-7. For float32 weights the arithmetic is what it always was."""
    fisher = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
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
                fisher[n] += p.grad.detach().float() ** 2
        n_batches += 1
        seen += len(batch)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return {n: f / max(n_batches, 1) for n, f in fisher.items()}


class Weighted(Mapping[str, Tensor]):
    """Each penalised parameter's 2w (the penalty's gradient is 2w ⊙ (θ − θ*)), computed when read, one parameter at
    a time: no second full copy beside the Fisher (λF of an 8B model is 30 GiB of float32). The same float32
    products as a stored λF, so the numbers are unchanged."""

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


class EWC(Method):
    needs_logits = False  # loss_terms does not read the logits
    value_only_terms = frozenset({"ewc"})  # its gradient is added in after_backward
    config: EWCConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        self.fisher: dict[str, Tensor] = {}
        self.anchor: dict[str, Tensor] = {}
        self._lambda_fisher: Mapping[str, Tensor] = {}
        self._penalized: dict[str, nn.Parameter] | None = None

    def penalized(self) -> dict[str, nn.Parameter]:
        """The trainable parameters outside the per-task heads (a head every task shares is penalised like any
        shared weight: ``CLModel.head_parameter_names``); found once per phase (a phase may freeze parameters, a
        step cannot): walking the model twice a step was 10 % of a quick EWC cell's time."""
        if self._penalized is None:
            assert self.model is not None
            self._penalized = shared_trainable(self.model)
        return self._penalized

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        super().before_phase(phase, task, index)
        self._penalized = None

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        """(λ/2) Σ F ⊙ (θ − θ*)², its value only: its gradient, computed with it (the weights do not move
        before the step), is added in :meth:`after_backward`."""
        if not self.fisher:
            return {}
        return {"ewc": penalty_value(self._lambda_fisher, self.penalized(), self.anchor)}

    def after_backward(self) -> None:
        if self.fisher:
            add_penalty_gradients(self._lambda_fisher, self.penalized(), self.anchor)  # λF ⊙ (θ − θ*)

    def after_task(self, task: str, index: int) -> None:
        assert self.model is not None
        self._penalized = None
        params = self.penalized()
        fk = diagonal_fisher(self.model, self.ctx.data(task).train, task, params, self.config.fisher_samples,
                             self.config.fisher_batch_size, self.ctx.device, self.ctx.generator(index, 9999))
        for n, f in fk.items():
            self.fisher[n] = self.config.decay * self.fisher[n] + f if n in self.fisher else f
        self.anchor = {n: p.detach().clone() for n, p in params.items()}
        self._weigh()

    def _weigh(self) -> None:
        self._lambda_fisher = Weighted(lambda: self.fisher.keys(), lambda n: self.config.lambda_ * self.fisher[n])  # 2×(λ/2)F

    def report(self) -> dict[str, Any]:
        if not self.fisher:
            return {}
        return {"fisher_mean": float(sum(f.sum() for f in self.fisher.values()) /
                                     sum(f.numel() for f in self.fisher.values()))}

    def state_dict(self) -> dict[str, Any]:
        return {"fisher": dict(self.fisher), "anchor": dict(self.anchor)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._penalized = None
        dev = self.ctx.device
        self.fisher = {n: t.to(dev) for n, t in state.get("fisher", {}).items()}
        self.anchor = {n: t.to(dev) for n, t in state.get("anchor", {}).items()}
        self._weigh()
