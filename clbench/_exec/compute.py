"""What a task's training computed, counted by the harness: the examples the model forwarded, and of them those
forwarded with gradients (an output a backward can reach), from ``before_task`` through ``after_task`` — the steps, a method's extra loops (a replay
batch, GEM's memory gradients, EWC's Fisher passes, a teacher copied from the model) and its phases alike.

A method declares nothing: one forward hook on the model counts every call's leading dimension. A copy of the
model (``copy.deepcopy``: LwF's teacher) keeps the hook, a plain function, so its forwards count too. What does not
pass through the model's own ``forward`` is not counted: a method calling a submodule directly, or another network
(DGR's generator). Under ``train.capture`` a replayed CUDA graph runs no Python hook, so those cells record none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry
from torch.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from clbench.config import TrainConfig


@dataclass
class ExampleCounter:
    """Counts, while ``active``, the examples forwarded through a model and those forwarded with gradients."""

    active: bool = False
    forward: int = 0
    grad: int = 0
    example_bytes: int | None = None  # one example's input, from the first call counted (what a memory keeps of it)

    def attach(self, model: nn.Module) -> RemovableHandle:
        def count(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            if self.active:
                n = batch_size(args, kwargs)
                if self.example_bytes is None and n:
                    self.example_bytes = first_tensor(args, kwargs).nbytes // n  # type: ignore[union-attr]
                self.forward += n
                if any(isinstance(t, Tensor) and t.requires_grad for t in tree_flatten(output)[0]):
                    self.grad += n  # its output is part of a graph: a backward can reach it

        return model.register_forward_hook(count, with_kwargs=True)

    def take(self) -> tuple[int, int]:
        """The counts so far, then zero."""
        out = (self.forward, self.grad)
        self.forward = self.grad = 0
        return out


def first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Tensor | None:
    """A call's first tensor with a leading dimension (positional first, then keyword): its batch of inputs."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor) and value.dim() > 0:
            return value
    return None


def batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The leading dimension of a call's first tensor (:func:`first_tensor`); 0 without one."""
    value = first_tensor(args, kwargs)
    return 0 if value is None else int(value.shape[0])


def compute_budget(compute_epochs: float, n_train: int) -> int:
    """A task's examples with gradients under ``train.compute_epochs=E``: E × its ``n_train`` training examples (what
    E epochs of plain fine-tuning forward), at least 1."""
    return max(1, round(compute_epochs * n_train))


def planned_flops(
    train: TrainConfig, splits: list[tuple[int, int]], step: int, eval_batch: int, epochs: Sequence[int] = ()
) -> int:
    """A cell's floating-point operations as its plan counts them (``clbench run --dry-run``): each task's optimizer
    steps (``train.steps_per_task``; under ``train.compute_epochs=E``, E × its training batches, an upper bound
    for a method whose step forwards more than its batch; else its epochs × its training batches) at ``step`` FLOPs
    (one step's forwards and backwards, measured on the costliest batch), and every evaluation (the untrained row, then after
    each task, each task's test batches) at ``eval_batch`` FLOPs a batch. ``splits``: each task's (training, test)
    examples. ``epochs``: the epochs over the task's data of the method's phases, task by task (LPS's warm-up, ADMM
    and retrain: 150 a task in paper-lps), the last one for every later task; empty: ``train.epochs``. What a method
    computes outside its steps (EWC's Fisher, GDumb's retraining, a phase over batches of its own) is not counted:
    a lower bound for those."""

    def task_epochs(i: int) -> int:
        return epochs[min(i, len(epochs) - 1)] if epochs else train.epochs

    def task_steps(i: int, n_train: int) -> int:
        if train.steps_per_task:
            return train.steps_per_task
        if train.compute_epochs:
            return math.ceil(compute_budget(train.compute_epochs, n_train) / train.batch_size)
        return task_epochs(i) * -(-n_train // train.batch_size)

    steps = sum(task_steps(i, n_train) for i, (n_train, _) in enumerate(splits))
    limit = train.eval_limit or None
    batches = sum(-(-min(n_test, limit or n_test) // train.eval_batch_size) for _, n_test in splits)
    return steps * step + (len(splits) + 1) * batches * eval_batch


class FlopCount(TorchDispatchMode):
    """The floating-point operations of what runs inside it, by torch's own formulas (``flop_registry``: matrix
    products, convolutions, attention, forward and backward), on any device, the meta device included. Not torch's
    ``FlopCounterMode``: that one also tracks modules, hooking the gradient of every module input that requires one,
    and fails on an input without a gradient function (a prompt method's prefix, built from its parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.total += int(formula(*args, **kwargs, out_val=out))
        return out
