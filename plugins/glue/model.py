"""``glue-encoder``: an encoder fine-tuned GLUE-style — raw sentence(s) in, one linear head per task,
and a one-output regression head (MSE loss, float prediction) for a task whose labels are
:data:`REGRESSION_LABELS` (STS-B).

It is the ``encoder`` model of ``plugins/hf`` (mean-pooled, L2-normalised sentence embedding) with
three changes: the head is always linear (``model.head=similarity`` is refused: a score has no label
word), inputs are the sentences as the stream gives them (GLUE fine-tuning has no prompt; the CL
benchmark's instruction and ``Option:`` line are not prepended), and regression tasks. The loss picks
MSE when the targets are floats, so every caller of ``task_loss`` (the runner, EWC's Fisher, replay)
gets the right loss without knowing the task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from clbench_plugins._shared.hf.config import EncoderConfig
from clbench_plugins._shared.hf.model import EncoderModel, load_backbone, load_tokenizer, minilm_path
from torch import Tensor, nn

from clbench.config import setting
from clbench.data import TaskInfo
from clbench.errors import ConfigError
from clbench.model import StreamInfo

REGRESSION_LABELS = ("score",)  # a task with these labels is scored by one real-valued output


def is_regression(info: TaskInfo) -> bool:
    return tuple(info.labels) == REGRESSION_LABELS


@dataclass(frozen=True)
class GlueEncoderConfig(EncoderConfig):
    """``encoder`` settings; the head is a linear one per task (a regression task has one output)."""

    head: Literal["similarity", "linear"] = setting("linear", help="only linear: a similarity score has no label word")


class GlueEncoder(EncoderModel):
    """Sentence embedding → per-task linear head; regression tasks: one output, MSE, float predictions."""

    config: GlueEncoderConfig

    def __init__(self, config: GlueEncoderConfig, info: StreamInfo, backbone: nn.Module, tokenizer: Any) -> None:
        if config.head != "linear":
            raise ConfigError(f"model.head={config.head!r}: glue-encoder has linear heads only (a regression task "
                              "has no label words to score)")
        super().__init__(config, info, backbone, tokenizer)
        self.regression = {t.name for t in info.tasks if is_regression(t)}

    def prompts(self, x: list[str], info: TaskInfo) -> list[str]:
        return list(x)  # GLUE-style fine-tuning: the sentence (pair) itself, no prompt

    def task_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        if y.is_floating_point():  # a regression task's targets (class indices are integers)
            return F.mse_loss(logits[:, 0].float(), y.float())
        return F.cross_entropy(logits, y)

    @torch.no_grad()
    def predict(self, x: Any, task: str) -> Tensor:
        out = self(x, task)
        return out[:, 0] if task in self.regression else out.argmax(dim=-1)


def build_glue_encoder(config: GlueEncoderConfig, info: StreamInfo) -> GlueEncoder:
    from transformers import AutoModel

    path = config.name_or_path or minilm_path()
    return GlueEncoder(config, info, load_backbone(AutoModel, config, path), load_tokenizer(config, path))
