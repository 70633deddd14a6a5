"""Data parallelism for one cell (``clbench run --nproc N``, or ``torchrun ... -m clbench.cli run``).

A cell runs on N processes, the ranks of one ``torch.distributed`` process group (NCCL on GPUs, gloo on the
CPU). Every rank builds the same model and method from the same seeds and walks the same steps; only the data
of a step is split:

* the global batch (``train.batch_size``) is cut into ``N × train.grad_accum`` micro-batches with
  :func:`clbench.runner.micro_batches`; rank r runs micro-batches r, r+N, r+2N, ..., each loss scaled by its
  share of the *global* batch, so the gradients summed over the ranks (:meth:`Dist.all_reduce_grads`, right
  after backward and before ``Method.after_backward``) are the one-process mean gradient: every rank then
  takes the same optimizer step, and a method's gradient edits and penalties see the global gradient;
* the step's loss (and loss terms) are summed over the ranks before the non-finite check: every rank raises
  ``Diverged`` at the same step, or none does (a rank that stopped alone would leave the others waiting);
* evaluation batches are dealt round-robin and the predictions gathered, so the score is computed from
  exactly the predictions one process makes (:func:`clbench.runner.evaluate`).

Everything else (Fisher information, replay buffers, masks, ADMM variables, adapters) is computed on every rank
from identical weights and data, so it stays identical without communication. Rank 0 alone writes files
(result, checkpoints, footprints, error log) and calls the run's observers (loggers, progress).

:class:`clbench.ranks.RankPool` is what ``--nproc N`` starts: N spawned processes joined in one group for a whole
run, to which the parent hands each cell; the parent returns rank 0's result. This module is what a method sees
(:class:`Dist`, its rank and the collectives); that one runs cells.
"""

from __future__ import annotations

import os
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

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


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
            present = torch.tensor([p.grad is not None for p in group], dtype=group[0].dtype,
                                   device=group[0].device)
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group]
                             + [present])
            torch.distributed.all_reduce(flat)
            flags = flat[-len(group):].tolist()
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


SINGLE = Dist()
"""One process, no group: what a cell runs with unless ``--nproc`` or torchrun says otherwise."""


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def join(rank: int, world_size: int, local_rank: int, backend: str, init_method: str) -> Dist:
    """Join the process group and return this process's :class:`Dist`."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # before any collective: NCCL and the object collectives use it
    torch.distributed.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    return Dist(rank, world_size, local_rank, backend)


def launched_by_torchrun() -> bool:
    """The environment of a process that torchrun (or another launcher of its conventions) started."""
    return all(v in os.environ for v in TORCHRUN_VARS)


def from_torchrun(device: torch.device) -> Dist:
    """This torchrun process's :class:`Dist` (the group joined through ``env://``); a world of 1 joins none."""
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if world == 1:
        return SINGLE
    if torch.distributed.is_initialized():
        return Dist(rank, world, local, str(torch.distributed.get_backend()))
    return join(rank, world, local, backend_for(device), "env://")
