"""The one optimizer step every execution of a phase runs (:class:`StepEngine`): the model's task loss plus the
method's loss terms, backward (in micro-batches for ``train.grad_accum``, across ranks for a data-parallel cell), the
method's ``after_backward``, clipping, the optimizer, ``after_step``. Three executions drive it: eager (the training
loop, :mod:`clbench._exec.step`, which reads the loss between the backward and the update), captured (the whole step
recorded once and replayed, :meth:`StepEngine.captured`) and the memory plan (:mod:`clbench._exec.memory`, which
measures between the backward and the update on the meta device or the CPU)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from clbench._core.boundary import CheckedMethod
from clbench._exec.capture import CapturedStep, Graph
from clbench.data import Batch
from clbench.distributed import Dist
from clbench.errors import ClbenchError, ConfigError
from clbench.method import Method
from clbench.model import CLModel

Losses = tuple[torch.Tensor, torch.Tensor, Mapping[str, torch.Tensor]]
"""A step's loss, task loss and loss terms (see :func:`batch_loss`)."""


def micro_batches(batch: Batch, parts: int) -> list[Batch]:
    """``batch`` cut into ``parts`` consecutive pieces (sizes differ by at most one; fewer when it is shorter)."""
    bounds = torch.linspace(0, len(batch), min(parts, len(batch)) + 1).round().long().tolist()
    raw = batch.raw
    return [
        Batch(batch.x[a:b], batch.y[a:b], batch.task, None if raw is None else raw[a:b])
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def autocast_dtype(train: Any) -> torch.dtype | None:
    """``train.autocast`` as a dtype, None when off."""
    return torch.bfloat16 if train.autocast == "bfloat16" else None


def batch_loss(
    model: CLModel, method: CheckedMethod, batch: Batch, task_loss: bool = True, amp: torch.dtype | None = None
) -> Losses:
    """The loss of ``batch`` (the model's task loss plus the method's loss terms), the task loss and the terms.
    ``task_loss=False`` (a phase that fits the method's own objective, :class:`~clbench.method.Phase`): the model is
    not run, the loss is the terms alone and the task loss reads 0. ``amp`` (``train.autocast``): computed under
    :func:`torch.autocast` in that dtype, on the batch's device; the backward pass runs outside it."""
    if amp is not None:
        with torch.autocast(batch.y.device.type, dtype=amp):
            return batch_loss(model, method, batch, task_loss)
    if not task_loss:
        terms = method.loss_terms(batch, None)
        if not terms:
            raise ClbenchError("a phase with task_loss=False needs loss terms: the method's loss_terms returned none")
        values = list(terms.values())
        loss = values[0]
        for term in values[1:]:
            loss = loss + term
        return loss, loss.new_zeros(()), terms
    logits, model_loss = model.training_loss(batch.x, batch.task, batch.y, method.method.needs_logits)
    terms = method.loss_terms(batch, logits)
    loss = model_loss
    for term in terms.values():
        loss = loss + term
    return loss, model_loss, terms


def accumulate(
    model: CLModel,
    method: CheckedMethod,
    batch: Batch,
    parts: int,
    task_loss: bool = True,
    amp: torch.dtype | None = None,
) -> Losses:
    """Forward and backward of ``batch`` in ``parts`` micro-batches (``train.grad_accum``); returns the batch's
    loss, task loss and loss terms (detached), as one pass over the whole batch would.

    Each micro-batch's loss, method terms included, is scaled by its share of the examples, so the summed
    gradients are the batch's mean gradient. A term that depends on the batch (LwF's distillation, replay)
    is then its batch mean; a term that does not (EWC's or O-LoRA's penalty: the weights do not move between
    micro-batches) has shares summing to one: it counts once per optimizer step, as without accumulation.
    """
    pieces = micro_batches(batch, parts)
    return _backward(model, method, pieces, [len(micro) / len(batch) for micro in pieces], task_loss, amp)


def _backward(
    model: CLModel,
    method: CheckedMethod,
    pieces: list[Batch],
    shares: list[float],
    task_loss: bool = True,
    amp: torch.dtype | None = None,
) -> Losses:
    """Forward and backward of each micro-batch of ``pieces``, its loss scaled by its share; the shared sums."""
    losses: list[torch.Tensor] = []
    task_losses: list[torch.Tensor] = []
    terms: dict[str, list[torch.Tensor]] = {}
    for micro, share in zip(pieces, shares, strict=True):
        part, part_loss, part_terms = batch_loss(model, method, micro, task_loss, amp)
        (part * share).backward()
        losses.append(part.detach() * share)
        task_losses.append(part_loss.detach() * share)
        for name, term in part_terms.items():
            terms.setdefault(name, []).append(term.detach() * share)
    return (
        torch.stack(losses).sum(),
        torch.stack(task_losses).sum(),  # share-weighted: the whole batch's values
        {name: torch.stack(values).sum() for name, values in terms.items()},
    )


def data_parallel_step(
    model: CLModel,
    method: CheckedMethod,
    batch: Batch,
    accum: int,
    params: Sequence[torch.nn.Parameter],
    dist: Dist,
    task_loss: bool = True,
    amp: torch.dtype | None = None,
    sharded: bool = False,
) -> Losses:
    """This rank's part of a step on the global ``batch``: micro-batches rank, rank+N, ... of ``batch`` cut into
    N × ``accum`` (each scaled by its share of the global batch, as :func:`accumulate` does), then the gradients
    and the losses summed over the ranks. Returns the global batch's loss, task loss and terms (every rank the
    same), the gradients of ``params`` being the one-process mean gradient. ``sharded`` (``train.shard``):
    FSDP reduce-scatters the gradients in the backward as the ranks' mean, so each rank's losses are scaled by N
    (clbench._exec.shard)."""
    pieces = micro_batches(batch, accum * dist.world_size)
    mine = dist.shard(pieces)
    scale = dist.world_size if sharded else 1
    if mine:
        weights = [scale * len(m) / len(batch) for m in mine]
        loss, model_loss, terms = _backward(model, method, mine, weights, task_loss, amp)
    else:  # a short last batch, fewer micro-batches than ranks: piece 0 at weight 0 adds nothing, and this rank
        # reduces the same loss terms and gradients as the others (a missing one would leave them waiting)
        loss, model_loss, terms = _backward(model, method, pieces[:1], [0.0], task_loss, amp)
    total = dist.sum(torch.stack([loss.float(), model_loss.float(), *(t.float() for t in terms.values())]))
    if sharded:
        total = total / scale
    else:
        dist.all_reduce_grads(params)  # before after_backward: a method edits (and adds to) the global gradient
    return total[0], total[1], dict(zip(terms, total[2:], strict=True))


def _own_hook(method: Method, name: str) -> Callable[[], None] | None:
    """The method's per-step hook ``name``, or None where it is :class:`Method`'s own no-op: the step then
    skips the call (in the training loop a Python call costs ~1 µs, benchmarks/bench_overhead.py)."""
    hook = getattr(method, name)
    return None if getattr(hook, "__func__", None) is getattr(Method, name) else hook


def step_hooks(method: Method) -> tuple[Callable[[], None] | None, Callable[[], None] | None]:
    """The method's ``after_backward`` and ``after_step``, each None where the method keeps :class:`Method`'s
    no-op. A step calls them in this order around the optimizer's step."""
    return _own_hook(method, "after_backward"), _own_hook(method, "after_step")


def grad_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of every gradient of ``params`` together (as ``clip_grad_norm_`` computes it; read only)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads]))


class StepEngine:
    """One phase's optimizer step: :meth:`backward` (zero the gradients; forward and backward of a batch, in
    ``train.grad_accum`` micro-batches, across ranks when the cell is data-parallel) then :meth:`update` (the
    method's ``after_backward``, clipping at ``train.grad_clip``, the optimizer, ``after_step``). A caller may read
    the losses, or measure, between the two; :meth:`__call__` is both at once."""

    __slots__ = (
        "model",
        "method",
        "opt",
        "params",
        "dist",
        "task_loss",
        "accum",
        "clip",
        "amp",
        "sharded",
        "parallel",
        "after_backward",
        "after_step",
    )

    def __init__(
        self,
        model: CLModel,
        method: CheckedMethod,
        opt: Any,
        params: list[torch.nn.Parameter],
        train: Any,
        dist: Dist,
        task_loss: bool = True,
    ) -> None:
        self.model, self.method, self.opt, self.params, self.dist = model, method, opt, params, dist
        self.task_loss = task_loss  # False: the method's own objective alone (Phase.task_loss)
        self.accum, self.clip, self.amp = train.grad_accum, train.grad_clip, autocast_dtype(train)
        self.sharded, self.parallel = train.shard != "off", dist.active  # (read once: a property a step)
        self.after_backward, self.after_step = step_hooks(method.method)

    def backward(self, batch: Batch, parts: int | None = None, set_to_none: bool = True) -> Losses:
        """Zero the gradients, then the forward and backward of ``batch`` in ``parts`` micro-batches (default:
        ``train.grad_accum``); returns its loss, task loss and loss terms. ``set_to_none=False`` zeroes gradients in
        place (a recorded step keeps their storage)."""
        self.opt.zero_grad(set_to_none=set_to_none)
        parts = self.accum if parts is None else parts
        if self.parallel:  # the losses summed over the ranks: every rank diverges at the same step or none
            return data_parallel_step(
                self.model, self.method, batch, parts, self.params, self.dist, self.task_loss, self.amp, self.sharded
            )
        if parts == 1:
            loss, task_loss, terms = batch_loss(self.model, self.method, batch, self.task_loss, self.amp)
            loss.backward()
            return loss, task_loss, terms
        return accumulate(self.model, self.method, batch, parts, self.task_loss, self.amp)

    def update(self, norm_wanted: bool = False) -> torch.Tensor | None:
        """The step after the backward: ``after_backward``, clipping, the optimizer, ``after_step``. Returns the
        gradients' norm before clipping where it is computed: under clipping, or when ``norm_wanted`` (a logged
        step); else None."""
        if self.after_backward is not None:
            self.after_backward()
        norm = None
        if self.clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        elif norm_wanted:
            norm = grad_norm(self.params)
        self.opt.step()
        if self.after_step is not None:
            self.after_step()
        return norm

    def __call__(
        self, batch: Batch, set_to_none: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], Any]:
        """The whole step: its loss, task loss and terms (detached) and the norm :meth:`update` returns."""
        loss, task_loss, terms = self.backward(batch, set_to_none=set_to_none)
        norm = self.update()
        return loss.detach(), task_loss.detach(), {k: v.detach() for k, v in terms.items()}, norm

    def captured(self, graph: Callable[[], Graph]) -> Captured:
        """The captured execution (``train.capture``): the whole step recorded once a batch task and replayed."""
        if self.parallel:
            raise ConfigError("train.capture records one whole step: it cannot run with --nproc > 1")
        return Captured(self, graph)


class Captured:
    """A phase's whole step for :class:`~clbench._exec.capture.CapturedStep`, one recording per batch task: the
    engine's step as one function of the batch's tensors."""

    def __init__(self, engine: StepEngine, graph: Callable[[], Graph]) -> None:
        self.engine, self.graph = engine, graph
        self.by_task: dict[str, CapturedStep] = {}

    def __call__(self, batch: Batch) -> tuple[Any, bool]:
        if not isinstance(batch.task, str) or not isinstance(batch.x, torch.Tensor):
            raise ConfigError("train.capture records a step of tensor inputs from one task a batch")
        task, opt = batch.task, self.engine.opt
        if task not in self.by_task:
            # zeroes gradients that exist (0 + g is g); records nothing where the recording starts without any
            self.by_task[task] = CapturedStep(
                lambda x, y: self.engine(Batch(x, y, task), set_to_none=False),
                lambda: float(opt.param_groups[0]["lr"]),
                lambda none: opt.zero_grad(set_to_none=none),
                self.graph,
            )
        return self.by_task[task](batch.x, batch.y)
