"""LFPT5: one soft prompt, trained through the whole sequence in front of a frozen generative model, as a task solver
and as a generator of the tasks' examples; before each new task it writes pseudo samples of the earlier ones.

* **Generation input** of task t: the text ``classify<t>`` (the code's per-task token ``classifyagnews`` and so on).
  The LM loss of an example (x, y) is the model's loss on the text ``x __ans__ y`` after that input.
* **Before task k > 0** the prompt as it stands (the previous task's) is kept as the teacher, and for every earlier
  task t the model samples ``samples`` texts after t's generation input (top-k, repetition penalty: the code's call).
  A text splits on ``__ans__`` into exactly two parts; the second, stripped, must be one of t's labels exactly; the
  first, stripped and not empty, is the input. Up to ``per_class`` of them a label are kept, drawn with the cell's
  generator: the pool of pseudo samples.
* **A step of task k** adds to the runner's task loss: ``λ_lm · LM(batch)``; then, once there is a pool, a batch of
  pseudo samples drawn from it (the code mixes them into the task's data): their task loss, ``λ_lm`` times their LM
  loss, and ``λ_kd · KL(teacher ‖ student)`` summed over them (the code's reduction), where each distribution is the
  softmax of the model's scores of the task's labels (the code's KL is over the whole vocabulary at each label
  token) and the teacher is the same model with the teacher prompt.

Evaluation uses the prompt as it is, whichever task is asked (task-agnostic). The model never moves: no footprint.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from clbench_plugins._shared.soft_prompt import PromptMethod, initial_prompt
from torch import Tensor, nn

from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import Phase
from clbench.model import CLModel

from .config import LFPT5Config

ANSWER = "__ans__"

Pseudo = tuple[int, str, int]  # (index of the task in the order, input text, label index)


def generation_input(task: str) -> str:
    return f"classify{task}"


def parse(text: str, labels: tuple[str, ...]) -> tuple[str, int] | None:
    """``x __ans__ y`` with y exactly one of ``labels`` and x not empty: (x, index of y); else None."""
    parts = text.split(ANSWER)
    if len(parts) != 2:
        return None
    x, y = parts[0].strip(), parts[1].strip()
    return (x, labels.index(y)) if x and y in labels else None


class LFPT5(PromptMethod):
    config: LFPT5Config

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if not hasattr(model, "sample"):
            raise ConfigError(f"{type(model).__name__} cannot generate text: lfpt5 needs a model plugin that provides "
                              "'generation' (causal-lm, t5)")
        c = self.config
        start = initial_prompt(self.lm, (c.length, self.lm.embedding_dim), c.init, self.ctx.generator(0, 3))
        self.prompt = nn.Parameter(start)
        self.teacher: Tensor | None = None  # the prompt as task k started (k > 0)
        self.pool: list[Pseudo] = []
        self.kept: list[int] = []  # pseudo samples kept, per task after the first (report)
        self._teaching = False

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return [self.prompt]

    def soft_prompt(self, input_ids: Tensor, attention: Tensor) -> Tensor:
        prompt = self.teacher if self._teaching and self.teacher is not None else self.prompt
        return prompt.unsqueeze(0).expand(input_ids.shape[0], -1, -1)

    def labels(self, index: int) -> tuple[str, ...]:
        return tuple(self.ctx.data(self.ctx.order[index]).info.labels)

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        if index == 0:
            return
        self.teacher = self.prompt.detach().clone()
        self.pool = self.pseudo_samples(index)
        self.kept.append(len(self.pool))

    def pseudo_samples(self, index: int) -> list[Pseudo]:
        """The pool for task ``index``: sampled texts of every earlier task, parsed, a few a label kept."""
        c = self.config
        g = self.ctx.generator(index, 5)
        pool: list[Pseudo] = []
        for t in range(index):
            name, labels = self.ctx.order[t], self.labels(t)
            if self.prompt.device.type == "meta":  # the memory plan: the earlier task's own examples stand in
                train = self.ctx.data(name).train
                found = [(str(x), int(y)) for x, y in zip(train.x[: c.samples], train.y[: c.samples].tolist(),
                                                          strict=True)]
            else:
                was = self.lm.training
                self.lm.eval()
                try:
                    texts = self.lm.sample([generation_input(name)] * c.samples, c.max_new_tokens, c.top_k,
                                           c.repetition_penalty)
                finally:
                    self.lm.train(was)
                found = [p for p in (parse(text, labels) for text in texts) if p is not None]
            for y in range(len(labels)):
                mine = [x for x, label in found if label == y]
                keep = torch.randperm(len(mine), generator=g)[: c.per_class].tolist()
                pool += [(t, mine[i], y) for i in keep]
        return pool

    def lm_loss(self, task: str, x: list[str], y: list[int], labels: tuple[str, ...]) -> Tensor:
        targets = [f"{text} {ANSWER} {labels[label]}" for text, label in zip(x, y, strict=True)]
        return self.lm.generation_loss([generation_input(task)] * len(x), targets)

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        c = self.config
        index = self.ctx.order.index(batch.task)
        terms = {"lm": c.lm_lambda * self.lm_loss(batch.task, list(batch.x), batch.y.tolist(), self.labels(index))}
        if not self.pool:
            return terms
        pick = torch.randint(len(self.pool), (min(len(batch), len(self.pool)),)).tolist()
        task_loss, lm, kd = self.prompt.new_zeros(()), self.prompt.new_zeros(()), self.prompt.new_zeros(())
        for t in sorted({self.pool[i][0] for i in pick}):
            rows = [self.pool[i] for i in pick if self.pool[i][0] == t]
            name, share = self.ctx.order[t], len(rows) / len(pick)
            x, y = [r[1] for r in rows], [r[2] for r in rows]
            student = self.lm(x, name)
            target = torch.tensor(y, device=student.device)
            task_loss = task_loss + self.lm.task_loss(student, target) * share
            lm = lm + self.lm_loss(name, x, y, self.labels(t)) * share
            with torch.no_grad():
                self._teaching = True
                try:
                    teacher = self.lm(x, name)
                finally:
                    self._teaching = False
            kd = kd + F.kl_div(F.log_softmax(student.float(), -1), F.log_softmax(teacher.float(), -1),
                               reduction="sum", log_target=True)
        terms.update(pseudo=task_loss, pseudo_lm=c.lm_lambda * lm, kd=c.kd_lambda * kd)
        return terms

    def report(self) -> dict[str, Any]:
        return {"protocol": "task-agnostic: one prompt for every task", "pseudo_samples_kept": list(self.kept)}

    def state_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt.detach().cpu(), "kept": list(self.kept)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "prompt" in state:
            with torch.no_grad():
                self.prompt.copy_(state["prompt"])
            self.kept = list(state.get("kept", []))
