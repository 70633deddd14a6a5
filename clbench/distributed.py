"""Data parallelism for one cell (``clbench run --nproc N``, or ``torchrun ... -m clbench run``).

A cell runs on N processes, the ranks of one ``torch.distributed`` process group (NCCL on GPUs, gloo on the
CPU). Every rank builds the same model and method from the same seeds and walks the same steps; only the data
of a step is split:

* the global batch (``train.batch_size``) is cut into ``N × train.grad_accum`` micro-batches with
  :func:`clbench._exec.engine.micro_batches`; rank r runs micro-batches r, r+N, r+2N, ..., each loss scaled by its
  share of the *global* batch, so the gradients summed over the ranks (:meth:`Dist.all_reduce_grads`, right
  after backward and before ``Method.after_backward``) are the one-process mean gradient: every rank then
  takes the same optimizer step, and a method's gradient edits and penalties see the global gradient;
* the step's loss (and loss terms) are summed over the ranks before the non-finite check: every rank raises
  ``Diverged`` at the same step, or none does (a rank that stopped alone would leave the others waiting);
* evaluation batches are dealt round-robin and the predictions gathered, so the score is computed from
  exactly the predictions one process makes (:func:`clbench._exec.evaluation.evaluate`).

Everything else (Fisher information, replay buffers, masks, ADMM variables, adapters) is computed on every rank
from identical weights and data, so it stays identical without communication. Rank 0 alone writes files
(result, checkpoints, footprints, error log) and calls the run's observers (loggers, progress).

:class:`clbench._exec.ranks.RankPool` is what ``--nproc N`` starts: N spawned processes joined in one group for a whole
run, to which the parent hands each cell; the parent returns rank 0's result. This module is what a method sees
(:class:`Dist`, its rank and the collectives); that one runs cells.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

T = TypeVar("T")


def resolve_device(name: str) -> torch.device:
    """``train.device``: ``auto`` is CUDA where there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass(frozen=True)
class Dist:
    """This process's place in the cell's process group: rank ``rank`` of ``world_size`` (1: alone, and every
    helper below does nothing). ``local_rank`` picks the GPU on this machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = ""  # "gloo" | "nccl"; "" alone

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and calls observers."""
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's items: ``rank``, ``rank + N``, ... (round-robin, so ranks differ by at most one)."""
        return list(items[self.rank :: self.world_size])

    def device(self, device: torch.device) -> torch.device:
        """The device this rank runs a cell on: its own GPU (``cuda:local_rank``) when the cell runs on CUDA."""
        if not self.active or device.type != "cuda":
            return device
        return torch.device("cuda", self.local_rank)

    def sum(self, values: Tensor) -> Tensor:
        """``values`` summed over the ranks (a new tensor; every rank gets the same)."""
        if not self.active:
            return values
        out = values.detach().clone()
        torch.distributed.all_reduce(out)
        return out

    def all_reduce_grads(self, params: Sequence[nn.Parameter]) -> None:
        """Sum the gradients of ``params`` over the ranks, in place.

        Each rank's micro-batch losses were scaled by their share of the global batch, so the sum is the
        one-process mean gradient. One flat buffer per dtype (one collective instead of one per parameter),
        with a presence flag per parameter: a parameter no rank's micro-batches reached keeps ``grad=None``,
        as in one process, where the optimizer skips it (a zero gradient would still apply momentum and
        weight decay). Costs one extra copy of the gradients while it runs."""
        if not self.active:
            return
        by_dtype: dict[torch.dtype, list[nn.Parameter]] = {}
        for p in params:
            by_dtype.setdefault(p.dtype, []).append(p)
        for group in by_dtype.values():
            present = torch.tensor([p.grad is not None for p in group], dtype=group[0].dtype, device=group[0].device)
            flat = torch.cat(
                [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group] + [present]
            )
            torch.distributed.all_reduce(flat)
            flags = flat[-len(group) :].tolist()
            offset = 0
            for p, flag in zip(group, flags, strict=True):
                n = p.numel()
                if flag > 0:
                    reduced = flat[offset : offset + n].view_as(p)
                    if p.grad is None:
                        p.grad = reduced.clone()
                    else:
                        p.grad.copy_(reduced)
                offset += n

    def broadcast_buffers(self, module: nn.Module) -> None:
        """Rank 0's buffers (batch-norm statistics, seen by each rank on its own micro-batches only) on every
        rank, so that every rank holds the same model."""
        if not self.active:
            return
        for buffer in module.buffers():
            torch.distributed.broadcast(buffer, 0)

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj`` (picklable), in rank order, on every rank."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank (a decision every rank must share)."""
        if not self.active:
            return obj
        box: list[Any] = [obj]
        torch.distributed.broadcast_object_list(box, 0)
        return box[0]

    def barrier(self) -> None:
        if self.active:
            torch.distributed.barrier()


def full_value(value: Tensor) -> Tensor:
    """``value`` whole: a weight sharded over the ranks (a DTensor, ``train.shard=full``) gathered from every rank
    (every rank must call this), any other tensor as it is. Reads no module that is not imported already: without
    ``torch.distributed.tensor`` there is no DTensor."""
    dtensor = sys.modules.get("torch.distributed.tensor")
    if dtensor is not None and isinstance(value, dtensor.DTensor):
        return value.full_tensor()
    return value


SINGLE = Dist()
"""One process, no group: what a cell runs with unless ``--nproc`` or torchrun says otherwise."""
