"""iCaRL: herding exemplars, distillation through sigmoid targets, the nearest-mean-of-exemplars classifier."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Method
from clbench.model import MASKED, CLModel

from .config import ICaRLConfig


def herding(features: Tensor, m: int) -> list[int]:
    """Algorithm 4: m rows of ``features`` (L2-normalised) chosen one at a time, each the one that brings the chosen
    rows' mean closest to the class mean μ: p_k = argmin_x ‖μ − (x + Σ_{j<k} p_j) / k‖."""
    mu = features.mean(dim=0)
    chosen: list[int] = []
    total = torch.zeros_like(mu)
    for k in range(1, min(m, len(features)) + 1):
        distance = torch.linalg.vector_norm(mu - (features + total) / k, dim=1)
        if chosen:
            distance[chosen] = float("inf")  # each example at most once
        best = int(distance.argmin())
        chosen.append(best)
        total = total + features[best]
    return chosen


class ICaRL(Method):
    """Class-incremental (one label space). The runner's cross-entropy is replaced by iCaRL's loss (the ``icarl`` term
    adds BCE − CE) on the incoming batch and on a batch of exemplars; after a task the memory is rebuilt (m = K / the
    classes seen, by herding) and the class means are recomputed; evaluation classifies by the nearest mean."""

    config: ICaRLConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if not hasattr(model, "backbone"):
            raise ConfigError("icarl classifies by the features of the model's backbone: it needs a model with one "
                              "(mlp, cnn)")
        if self.ctx.stream is not None and self.ctx.stream.scenario != "class-incremental":
            raise ConfigError(f"icarl is a class-incremental method; stream {self.ctx.stream.name!r} is "
                              f"{self.ctx.stream.scenario}")
        self.exemplars: dict[int, tuple[int, Tensor]] = {}  # class → (task index, example indices)
        self.means: Tensor | None = None  # the normalised mean feature of each class in self.classes
        self.classes: list[int] = []
        self._means_due = False  # after a resume: recompute the means once the model's weights are back
        self.old: CLModel | None = None  # the model after the previous task (the distillation's targets)

    def _features(self, x: Any) -> Tensor:
        assert self.model is not None
        return F.normalize(self.model.backbone(x), dim=1)  # type: ignore[attr-defined]

    def _loss(self, logits: Tensor, x: Any, y: Tensor, task: str) -> Tensor:
        """Sigmoid BCE summed over the visible labels, a mean over the examples: one-hot targets, replaced for the
        classes of earlier tasks (those with exemplars) by the previous model's sigmoid outputs (Algorithm 3)."""
        visible = logits != MASKED
        targets = F.one_hot(y, logits.shape[1]).float()
        if self.old is not None and self.exemplars:
            with torch.no_grad():
                old = torch.sigmoid(self.old(x, task))
            earlier = torch.zeros(logits.shape[1], dtype=torch.bool, device=logits.device)
            earlier[sorted(self.exemplars)] = True
            targets = torch.where(earlier, old, targets)
        loss = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        return (loss * visible).sum() / len(y)

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        assert self.model is not None and logits is not None
        terms = {"icarl": self._loss(logits, batch.x, batch.y, batch.task) - self.model.task_loss(logits, batch.y)}
        if self.exemplars:
            x, y, task = self._exemplar_batch(len(batch))
            terms["exemplars"] = self._loss(self.model(x, task), x, y, task)
        return terms

    def _exemplar_batch(self, k: int) -> tuple[Any, Tensor, str]:
        """k random exemplars (of any class; a class-incremental stream has one head: any task's name reaches it)."""
        pool = [(t, int(i)) for _, (t, rows) in sorted(self.exemplars.items()) for i in rows]
        pick = torch.randperm(len(pool))[:k].tolist()
        xs, ys = [], []
        for j in pick:
            t, i = pool[j]
            split = self.ctx.data(self.ctx.order[t]).train
            xs.append(split.x[i])
            ys.append(split.y[i])
        batch = Batch(torch.stack(xs), torch.stack(ys), self.ctx.order[0]).to(self.ctx.device)
        return batch.x, batch.y, batch.task

    @torch.no_grad()
    def after_task(self, task: str, index: int) -> None:
        assert self.model is not None
        was = self.model.training
        self.model.eval()
        info = self.ctx.stream.task(task)
        labels = list(info.labels)
        seen = len(self.exemplars) + len(info.own_labels)
        m = max(1, self.config.memory_size // seen)
        for c, (t, rows) in list(self.exemplars.items()):  # reduce the old classes' exemplars to m (Algorithm 5)
            self.exemplars[c] = (t, rows[:m])
        data = self.ctx.data(task).train
        for label in info.own_labels:  # the new classes' exemplars by herding (Algorithm 4)
            c = labels.index(label)
            rows = torch.nonzero(data.y == c).flatten()
            feats = self._features(Batch(data.take(rows), data.y[rows], task).to(self.ctx.device).x)
            self.exemplars[c] = (index, rows[torch.tensor(herding(feats, m))].cpu())
        self._class_means(labels, task)
        self.old = copy.deepcopy(self.model).requires_grad_(False)
        self.model.train(was)

    def _class_means(self, labels: list[str], task: str) -> None:
        """Each class's normalised mean exemplar feature (Algorithm 1's μ_y), for the classes with exemplars."""
        self.classes = sorted(self.exemplars)
        means = []
        for c in self.classes:
            t, rows = self.exemplars[c]
            split = self.ctx.data(self.ctx.order[t]).train
            feats = self._features(Batch(split.take(rows), split.y[rows], task).to(self.ctx.device).x)
            means.append(F.normalize(feats.mean(dim=0), dim=0))
        self.means = torch.stack(means)

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """The nearest mean of exemplars answers (Algorithm 1), among the classes with exemplars (under
        ``train.scoring="task"``, those of ``task`` alone); before the first task's end the model's own argmax."""
        assert self.model is not None
        if self._means_due:
            with torch.no_grad():
                self._class_means(list(self.ctx.stream.task(task).labels), task)
            self._means_due = False
        if self.means is None:
            yield
            return
        model, means, classes = self.model, self.means, torch.tensor(self.classes)
        if self.ctx.train.scoring == "task":  # task identity at test time: the task's own classes alone answer
            info = self.ctx.stream.task(task)
            own = [i for i, c in enumerate(self.classes) if info.labels[c] in info.own_labels]
            if not own:  # a task not trained yet has no exemplars: the model's argmax among its classes
                yield
                return
            means, classes = means[own], classes[own]

        def nme(x: Any, task: str) -> Tensor:
            nearest = torch.cdist(self._features(x), means).argmin(dim=1)
            return classes.to(nearest.device)[nearest]

        model.predict = nme  # type: ignore[method-assign]  # this instance, inside the block only
        try:
            yield
        finally:
            del model.predict

    def report(self) -> dict[str, Any]:
        return {"memory_size": self.config.memory_size,
                "exemplars_per_class": {str(c): len(rows) for c, (_, rows) in sorted(self.exemplars.items())}}

    def state_dict(self) -> dict[str, Any]:
        return {"exemplars": {str(c): (t, rows) for c, (t, rows) in self.exemplars.items()},
                "old": self.old.state_dict() if self.old is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.exemplars = {int(c): (int(t), rows) for c, (t, rows) in state.get("exemplars", {}).items()}
        if state.get("old") is not None:
            assert self.model is not None
            self.old = copy.deepcopy(self.model).requires_grad_(False)
            self.old.load_state_dict(state["old"])
        if self.exemplars:  # the class means follow from the exemplars and the (restored) model
            self._means_due = True
