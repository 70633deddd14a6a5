"""The model contract: a network that scores a task's labels.

Every model plugin returns a :class:`CLModel`: ``model(x, task)`` gives logits over the labels of
``task`` (one column per entry of ``TaskInfo.labels``). How it gets them is the model's business: a
per-task head, a shared head, label-word scoring by an encoder, or label log-likelihoods under a
language model. Evaluation defaults to ``argmax`` of those logits; generative models may override
:meth:`CLModel.predict` (generation + exact match).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from clbench.data import Stream, TaskInfo
from clbench.errors import ConfigError


@dataclass(frozen=True)
class StreamInfo:
    """What a model builder may know about the stream: its tasks and input format."""

    name: str
    tasks: tuple[TaskInfo, ...]
    modality: str
    input_shape: tuple[int, ...]
    multi_head: bool

    @classmethod
    def of(cls, stream: Stream, multi_head: bool | None = None) -> StreamInfo:
        mh = stream.multi_head if multi_head is None else multi_head
        return cls(stream.name, tuple(stream.tasks), stream.modality, tuple(stream.input_shape), mh)


# The logit of a label a class-incremental learner has not seen (CLModel.see_labels): finite, so that distillation and
# logit-matching losses stay finite, and far enough below any trained logit that its softmax probability is 0.
MASKED = -1e4


@torch.no_grad()
def xavier_(model: nn.Module) -> None:
    """Redraw every Linear and Conv2d weight of ``model`` Xavier-uniform (Glorot & Bengio 2010, gain 1: U(−a, a),
    a = √(6 / (fan_in + fan_out))) and zero its bias (``train.init="xavier"``)."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class CLModel(nn.Module):
    """Base class of every model plugin's network."""

    info: StreamInfo
    # Text models add the (non-padding) input tokens of every training forward; the runner turns the
    # count into tokens/s per task in the result's timings. Models of tensors leave it at 0.
    tokens_seen: int = 0

    def forward(self, x: Any, task: str) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def task_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(logits, y)

    def training_loss(self, x: Any, task: str, y: Tensor, need_logits: bool = True) -> tuple[Tensor | None, Tensor]:
        """``(logits, task loss)`` of a training batch. With ``need_logits=False`` (the method never reads
        them) a model may skip the logits and return ``None``: a language model whose loss is the gold
        label's likelihood then scores one label per example instead of every label."""
        logits = self(x, task)
        return logits, self.task_loss(logits, y)

    def see_labels(self, labels: Collection[str] | None) -> None:
        """On a class-incremental stream, the labels seen so far, told by the runner before each task is trained and
        its row evaluated: the model scores those alone (the other labels' logits masked to :data:`MASKED`, as a head
        that grows with the classes would). None: every label (the untrained row, other scenarios). A model that
        cannot mask raises; the default keeps every label only when told None."""
        if labels is not None:
            raise ConfigError(
                f"{type(self).__name__} cannot mask the labels not seen yet: a class-incremental stream "
                "needs a model that implements CLModel.see_labels (mlp, cnn)"
            )

    @torch.no_grad()
    def predict(self, x: Any, task: str) -> Tensor:
        return self(x, task).argmax(dim=-1)

    @torch.no_grad()
    def predict_peak(self, x: Any, task: str) -> Any:
        """One pass that holds what :meth:`predict` holds at its peak, for the memory plan (``clbench run
        --dry-run``), which runs it on the meta device. The default is ``predict``'s forward. A model whose
        ``predict`` loops (token by token generation) overrides it with one pass that builds the loop's largest
        state (the KV cache at its full length) instead of running the loop."""
        return self(x, task)

    def head_parameter_names(self) -> set[str]:
        """Names of parameters that belong to one task only (per-task heads). A head shared by every task is
        a shared parameter: not named here, so a method regularises it like any other (EWC's penalty)."""
        return set()

    def output_parameter_names(self) -> set[str]:
        """Names of the output heads' parameters, shared or per task: left out of the adaptable layers and of
        the dense footprint (the body's weight change). Defaults to the per-task heads."""
        return self.head_parameter_names()

    def adaptable_layers(self) -> dict[str, nn.Module]:
        """The shared Linear/Conv layers a method may adapt, prune or mask (output heads excluded)."""
        heads = {n.rsplit(".", 1)[0] for n in self.output_parameter_names()}
        return {
            name: m for name, m in self.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d)) and name not in heads
        }


class HeadedModel(CLModel):
    """A backbone followed by one shared head or one head per task (task-incremental)."""

    def __init__(self, backbone: nn.Module, feature_dim: int, info: StreamInfo) -> None:
        super().__init__()
        self.info = info
        self.backbone = backbone
        self._visible: Tensor | None = (
            None  # class-incremental: which of the shared head's labels are seen (see_labels)
        )
        if info.multi_head:
            self.heads = nn.ModuleDict({self._key(t.name): nn.Linear(feature_dim, t.num_classes) for t in info.tasks})
        else:
            label_sets = {t.labels for t in info.tasks}
            if len(label_sets) != 1:
                raise ConfigError(
                    f"stream {info.name!r} has tasks with different label sets; use a model with "
                    "one head per task (model.multi_head=true)"
                )
            self.heads = nn.ModuleDict({"shared": nn.Linear(feature_dim, info.tasks[0].num_classes)})

    @staticmethod
    def _key(task: str) -> str:
        return task.replace(".", "_")  # ModuleDict keys may not contain dots

    def head(self, task: str) -> nn.Linear:
        return cast(nn.Linear, self.heads[self._key(task)] if self.info.multi_head else self.heads["shared"])

    def features(self, x: Tensor) -> Tensor:
        """What the head reads of the inputs ``x``: the backbone's output."""
        return cast(Tensor, self.backbone(x))

    def forward(self, x: Tensor, task: str) -> Tensor:
        logits = self.head(task)(self.features(x))
        if self._visible is not None:
            logits = logits.masked_fill(~self._visible.to(logits.device), MASKED)
        return logits

    def see_labels(self, labels: Collection[str] | None) -> None:
        if labels is None or self.info.multi_head:
            self._visible = None
            return
        names = self.info.tasks[0].labels  # the shared head's labels: every task's
        unknown = set(labels) - set(names)
        if unknown:
            raise ConfigError(f"labels {sorted(unknown)} are not the shared head's ({', '.join(names)})")
        self._visible = torch.tensor([name in labels for name in names])

    def head_parameter_names(self) -> set[str]:
        if not self.info.multi_head:  # one head for every task: shared, not any one task's
            return set()
        return self.output_parameter_names()

    def output_parameter_names(self) -> set[str]:
        return {n for n, _ in self.named_parameters() if n.startswith("heads.")}
