"""EWC with a diagonal Fisher (the per-example Fisher: :mod:`.fisher`; the batched one and the penalty:
:mod:`clbench_plugins._shared.penalty`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clbench_plugins._shared.params import shared_trainable
from clbench_plugins._shared.penalty import (
    Offload,
    Weighted,
    add_penalty_gradients,
    diagonal_fisher,
    penalty_value,
)
from torch import Tensor, nn

from clbench.data import Batch
from clbench.method import Method, Phase
from clbench.model import CLModel

from .config import EWCConfig
from .fisher import per_example_fisher


class EWC(Method):
    needs_logits = False  # loss_terms does not read the logits
    value_only_terms = frozenset({"ewc"})  # its gradient is added in after_backward
    config: EWCConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        # F and θ*: on the device, or in host memory (train.offload_state), read a parameter at a time either way
        self.offload = Offload(self.ctx.device, self.ctx.train.offload_state)
        self.fisher: dict[str, Tensor] = {}
        self.anchor: dict[str, Tensor] = {}
        self._lambda_fisher: Mapping[str, Tensor] = {}
        self._anchor: Mapping[str, Tensor] = Weighted(  # θ* on the device, a parameter at a time
            lambda: self.anchor.keys(), lambda n: self.offload.read(self.anchor[n])
        )
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
        return {"ewc": penalty_value(self._lambda_fisher, self.penalized(), self._anchor)}

    def after_backward(self) -> None:
        if self.fisher:
            add_penalty_gradients(self._lambda_fisher, self.penalized(), self._anchor)  # λF ⊙ (θ − θ*)

    def after_task(self, task: str, index: int) -> None:
        assert self.model is not None
        self._penalized = None
        params = self.penalized()
        cfg, split, generator = self.config, self.ctx.data(task).train, self.ctx.generator(index, 9999)
        if cfg.fisher_batch_size == 1:
            fk = per_example_fisher(self.model, split, task, params, cfg.fisher_samples, self.ctx.device, generator,
                                    cfg.fisher_weight)
        else:
            fk = diagonal_fisher(self.model, split, task, params, cfg.fisher_samples, cfg.fisher_batch_size,
                                 self.ctx.device, generator)
        keep, read = self.offload.keep, self.offload.read
        for n in list(fk):
            f = fk.pop(n)  # (each task's Fisher leaves the device as it is kept: one whole copy at most)
            self.fisher[n] = keep(self.config.decay * read(self.fisher[n]) + f if n in self.fisher else f)
        self.anchor = {n: self.offload.copy(p.detach()) for n, p in params.items()}
        self._weigh()

    def _weigh(self) -> None:
        self._lambda_fisher = Weighted(  # 2×(λ/2)F
            lambda: self.fisher.keys(), lambda n: self.config.lambda_ * self.offload.read(self.fisher[n])
        )

    def report(self) -> dict[str, Any]:
        if not self.fisher:
            return {}
        return {"fisher_mean": float(sum(f.sum() for f in self.fisher.values()) /
                                     sum(f.numel() for f in self.fisher.values()))}

    def state_dict(self) -> dict[str, Any]:
        return {"fisher": dict(self.fisher), "anchor": dict(self.anchor)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._penalized = None
        load = self.offload.load
        self.fisher = {n: load(t) for n, t in state.get("fisher", {}).items()}
        self.anchor = {n: load(t) for n, t in state.get("anchor", {}).items()}
        self._weigh()
