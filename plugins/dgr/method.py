"""DGR: a variational autoencoder learns the inputs seen so far; its samples, labelled by the previous solver, are
replayed beside each new task's batches."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from clbench_plugins._shared.losses import distillation
from torch import Tensor, nn

from clbench.data import Batch, shown_labels
from clbench.errors import ConfigError
from clbench.method import Method, Phase
from clbench.model import CLModel

from .config import DGRConfig


class VAE(nn.Module):
    """One hidden layer each way; a Gaussian decoder of unit variance (the loss is ½‖x − x̂‖² + KL), so it models
    standardised inputs of any range, not only pixels in [0, 1]."""

    def __init__(self, dim: int, hidden: int, latent: int) -> None:
        super().__init__()
        self.latent = latent
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 2 * latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, dim))

    def loss(self, x: Tensor) -> Tensor:
        """The negative evidence lower bound per example (up to a constant), averaged over the batch."""
        mu, logvar = self.encoder(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        recon = 0.5 * (self.decoder(z) - x).pow(2).sum(dim=1)
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)
        return (recon + kl).mean()

    @torch.no_grad()
    def sample(self, n: int, device: torch.device) -> Tensor:
        return self.decoder(torch.randn(n, self.latent, device=device))


class DGR(Method):
    """Shin et al. 2017 with a VAE generator (see :class:`DGRConfig`). On a stream of one head per task the replayed
    samples carry no task: each earlier task's head labels them, and the replay loss averages over those heads.

    A task has two phases through the harness's step: ``train``, the solver (the task's batches and the replay term),
    then ``generator``, the VAE on the same task's batches and the previous generator's samples (its own loss, its own
    parameters and Adam at ``generator_lr``; as many epochs as the solver's). Both read the scholar as it was when
    the task began, so training one after the other is training them side by side (§3.1, §3.2); the generator's steps
    are counted, share ``train.steps_per_task`` with the solver's and are clipped and checked for divergence."""

    GENERATOR = "generator"  # the generator phase's name

    config: DGRConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        stream = self.ctx.stream
        if stream is not None and stream.modality == "text":
            raise ConfigError(f"dgr generates inputs: it needs tensor inputs (images, vectors), and stream "
                              f"{stream.name!r} holds texts")
        x = self.ctx.data(self.ctx.order[0]).train.x
        self.shape = tuple(x.shape[1:])
        self.generator = VAE(math.prod(self.shape), self.config.hidden, self.config.latent_dim).to(self.ctx.device)
        self.teacher: CLModel | None = None
        self.previous: VAE | None = None

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        assert self.model is not None
        self.old_tasks = list(self.ctx.order[:index])
        self.teacher = self.previous = None
        if index > 0:  # the scholar as it is now: after task index−1, or as resumed from its checkpoint
            self.teacher = copy.deepcopy(self.model).eval().requires_grad_(False)
            if self.ctx.stream.scenario == "class-incremental":  # it answers as the model did on the old tasks
                self.teacher.see_labels(shown_labels(self.ctx.stream, self.old_tasks, self.ctx.train.head))
            self.previous = copy.deepcopy(self.generator).eval().requires_grad_(False)
        self.r = self.config.new_weight or 1.0 / (index + 1)
        self.phase = ""

    def phases(self, task: str, index: int) -> list[Phase]:
        solver = Phase.from_train(self.ctx.train)
        return [solver, Phase(self.GENERATOR, solver.epochs, self.config.generator_lr, "adam", task_loss=False)]

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        self.phase = phase.name

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        if phase.name == self.GENERATOR:
            return list(self.generator.parameters())
        return super().parameters(model, phase)

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        assert self.model is not None
        k = self.config.replay_batch_size or len(batch)
        real = batch.x.flatten(1).float()
        fake = self.previous.sample(k, real.device) if self.previous is not None else None
        if self.phase == self.GENERATOR:
            return {"generator": self._generator_loss(real, fake)}
        if fake is None or self.teacher is None:
            return {}
        assert logits is not None
        replayed = fake.view(k, *self.shape).to(batch.x.dtype)
        heads = self.old_tasks if self.model.info.multi_head else [batch.task]
        replay = logits.new_zeros(())
        for head in heads:
            with torch.no_grad():
                target = self.teacher(replayed, head)
            out = self.model(replayed, head)
            replay = replay + (self.model.task_loss(out, target.argmax(dim=1)) if self.config.targets == "hard"
                               else distillation(out, target, self.config.temperature))
        replay = replay / len(heads)
        # eq. 2, r·L(new) + (1 − r)·L(replay), as the runner's L(new) plus this term
        return {"dgr": (1 - self.r) * (replay - self.model.task_loss(logits, batch.y))}

    def _generator_loss(self, real: Tensor, fake: Tensor | None) -> Tensor:
        """The generator's loss on the task's batch and the previous generator's samples, weighed as the solver
        weighs them (r and 1 − r)."""
        loss = self.generator.loss(real)
        if fake is not None:
            loss = self.r * loss + (1 - self.r) * self.generator.loss(fake)
        return loss

    def after_task(self, task: str, index: int) -> None:
        self.teacher = self.previous = None  # the next task copies the scholar afresh

    def report(self) -> dict[str, Any]:
        return {"generator": "vae", "generator_parameters": sum(p.numel() for p in self.generator.parameters())}

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "generator" in state:
            self.generator.load_state_dict(state["generator"])
