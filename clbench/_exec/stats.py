"""What training a task cost, typed: a :class:`PhaseStats` per phase inside a :class:`TaskStats` per task.

In ``result.json`` (``timings.tasks``) a task's entry keeps the layout readers know: each phase's numbers under its
name, beside ``phases`` (the names in run order), ``task``, ``train_s``, ``eval_s`` and, on a GPU,
``peak_memory_bytes``, and the examples the model forwarded (``examples_forward``; with gradients:
``examples_grad``; :mod:`clbench._exec.compute`). A phase may not take one of those names (:data:`RESERVED`), so the
two never collide.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clbench.errors import ClbenchError

RESERVED = frozenset({"phases", "task", "train_s", "eval_s", "peak_memory_bytes", "examples_forward", "examples_grad"})
"""The keys of a task's timings entry that are not phases."""


@dataclass
class PhaseStats:
    """One phase of a task: its seconds, optimizer steps, trained parameters, throughput and each epoch's mean
    loss (a loss curve without a logger; None for an epoch without a batch)."""

    name: str
    seconds: float
    steps: int
    trainable: int
    examples_per_s: float
    loss: list[float | None]
    tokens_per_s: float | None = None  # text models only: the tokens they counted

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seconds": self.seconds,
            "steps": self.steps,
            "trainable": self.trainable,
            "examples_per_s": self.examples_per_s,
            "loss": self.loss,
        }
        if self.tokens_per_s is not None:
            out["tokens_per_s"] = self.tokens_per_s
        return out

    @classmethod
    def from_json(cls, name: str, entry: Mapping[str, Any]) -> PhaseStats:
        return cls(
            name,
            float(entry["seconds"]),
            int(entry["steps"]),
            int(entry["trainable"]),
            float(entry["examples_per_s"]),
            list(entry["loss"]),
            entry.get("tokens_per_s"),
        )


@dataclass
class TaskStats:
    """One task: its phases in run order, and (once evaluated) the task's name and its training and evaluation
    seconds; on a GPU the task's peak allocated memory."""

    phases: list[PhaseStats] = field(default_factory=list)
    task: str = ""
    train_s: float = 0.0
    eval_s: float = 0.0
    peak_memory_bytes: int | None = None
    examples_forward: int | None = None  # None: not counted (under train.capture, or recorded before it was)
    examples_grad: int | None = None

    def add(self, phase: PhaseStats) -> None:
        if phase.name in RESERVED:
            raise ClbenchError(
                f"a phase may not be called {phase.name!r}: the task's timings use that key "
                f"({', '.join(sorted(RESERVED))})"
            )
        if any(p.name == phase.name for p in self.phases):
            raise ClbenchError(f"two phases of one task are called {phase.name!r}: their timings would collide")
        self.phases.append(phase)

    def phase(self, name: str) -> PhaseStats:
        return next(p for p in self.phases if p.name == name)

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {p.name: p.to_json() for p in self.phases}
        out.update(phases=[p.name for p in self.phases], task=self.task, train_s=self.train_s, eval_s=self.eval_s)
        if self.peak_memory_bytes is not None:
            out["peak_memory_bytes"] = self.peak_memory_bytes
        if self.examples_forward is not None:
            out.update(examples_forward=self.examples_forward, examples_grad=self.examples_grad)
        return out

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> TaskStats:
        return cls(
            [PhaseStats.from_json(name, entry[name]) for name in entry.get("phases", ())],
            str(entry.get("task", "")),
            float(entry.get("train_s", 0.0)),
            float(entry.get("eval_s", 0.0)),
            entry.get("peak_memory_bytes"),
            entry.get("examples_forward"),
            entry.get("examples_grad"),
        )


def epoch_losses(stats: TaskStats, step: int) -> list[dict[str, Any]]:
    """The mean loss of every epoch of a task's phases, in run order, each at the cell's optimizer step where that
    epoch ended (``step``: the step the task ended; a phase's epochs take equal shares of its steps)."""
    out: list[dict[str, Any]] = []
    start = step - stats.steps
    for phase in stats.phases:
        for e, loss in enumerate(phase.loss):
            out.append(
                {
                    "phase": phase.name,
                    "epoch": e,
                    "step": start + phase.steps * (e + 1) // len(phase.loss),
                    "loss": loss,
                }
            )
        start += phase.steps
    return out


def steps_done(tasks: Iterable[TaskStats]) -> int:
    """Optimizer steps of ``tasks`` (to go on counting after a resume)."""
    return sum(t.steps for t in tasks)
