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

:class:`RankPool` is what ``--nproc N`` starts: N spawned processes joined in one group for a whole run, to
which the parent hands each cell; the parent returns rank 0's result.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import tempfile
import time
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from clbench.plan import Cell
    from clbench.results import CellResult
    from clbench.runner import Runner

T = TypeVar("T")

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


# --------------------------------------------------------------------------- --nproc: the rank processes
GRACE_S = 10.0
"""How long the parent waits for the other ranks once one has reported a cell that they did not finish with
it (a fault on one rank only: an observer or a file write on rank 0, memory on another); then it restarts the
ranks, whose group is out of step."""


@dataclass
class _Raised:
    """An exception that left ``Runner.run`` in a rank (sent as text: not every exception pickles)."""

    kind: str
    message: str
    trace: str


def _rank_main(rank: int, world: int, backend: str, init_method: str, disabled: tuple[str, ...],
               plugins: tuple[str, ...], fail_fast: bool, inbox: Any, outbox: Any, parent: int) -> None:
    """A rank process: join the group, then run every cell the parent sends until it sends None."""
    from clbench.worker import bootstrap

    if rank:
        warnings.simplefilter("ignore")  # rank 0 says it once
    runner = bootstrap(disabled, fail_fast, plugins, parent=parent,
                       join=lambda: join(rank, world, rank, backend, init_method))
    try:
        while (cell := inbox.get()) is not None:
            try:
                outbox.put((rank, cell.key, runner.run(cell)))
            except BaseException as exc:  # FailFast, an interrupt, a result folder of another cell
                outbox.put((rank, cell.key, _Raised(type(exc).__name__, str(exc), traceback.format_exc())))
                break
    finally:
        with contextlib.suppress(Exception):
            torch.distributed.destroy_process_group()


class RankPool:
    """``nproc`` spawned rank processes in one process group, started on the first cell and kept for the next
    ones (starting them costs seconds: torch, the plugins and the group); each cell is sent to every rank and
    :meth:`run` returns rank 0's result. A rank that dies, or ranks left out of step by a fault on one of them,
    stop the pool (the cell is recorded as failed); the next cell starts a fresh one."""

    def __init__(self, runner: Runner, nproc: int, disabled: tuple[str, ...], plugins: tuple[str, ...] = ()) -> None:
        self.runner = runner  # this process's: it writes the result of a cell whose rank 0 could not
        self.nproc = nproc
        self.plugins = plugins  # `module:name` of plugins beside the entry points (see load_plugin)
        self.backend = ""
        self.disabled = disabled
        self.fail_fast = runner.fail_fast
        self.procs: list[Any] = []
        self.inboxes: list[Any] = []
        self.outbox: Any = None
        self.store = ""

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(graceful=exc[0] is None)

    def _start(self) -> None:
        import multiprocessing

        if self.backend == "nccl" and torch.cuda.device_count() < self.nproc:
            from clbench.errors import ClbenchError

            raise ClbenchError(f"--nproc {self.nproc}: this machine has {torch.cuda.device_count()} GPUs; a cell on "
                               "CUDA runs one rank per GPU")
        # spawn, not fork: a forked child of a process that has run torch's OpenMP pool can hang in its first op
        mp = multiprocessing.get_context("spawn")
        self.store = tempfile.mkdtemp(prefix="clbench-ddp-")  # a file store: no port to find free, or to race for
        init = f"file://{os.path.join(self.store, 'store')}"
        self.outbox = mp.Queue()
        self.inboxes = [mp.Queue() for _ in range(self.nproc)]
        self.procs = [mp.Process(target=_rank_main, daemon=True, name=f"clbench-rank-{r}",
                                 args=(r, self.nproc, self.backend, init, self.disabled, self.plugins, self.fail_fast,
                                       self.inboxes[r], self.outbox, os.getpid()))
                      for r in range(self.nproc)]
        for p in self.procs:
            p.start()

    def stop(self, graceful: bool = True) -> None:
        """End the rank processes: asked to (``graceful``, between cells) or terminated (out of step, or an
        interrupt: their last checkpoints are on disk already)."""
        if graceful:
            for box in self.inboxes:
                with contextlib.suppress(Exception):
                    box.put(None)
            for p in self.procs:
                p.join(timeout=GRACE_S)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join()
        self.procs, self.inboxes = [], []
        if self.store:
            shutil.rmtree(self.store, ignore_errors=True)
            self.store = ""

    def run(self, cell: Cell) -> CellResult:
        from clbench.runner import resolve_device

        backend = backend_for(resolve_device(cell.train.device))
        if self.procs and backend != self.backend:
            self.stop()
        if not self.procs:
            self.backend = backend
            self._start()
        for box in self.inboxes:
            box.put(cell)
        try:
            got, error = self._collect(cell)
        except BaseException:  # an interrupt: the ranks stop where they are
            self.stop(graceful=False)
            raise
        main = got.get(0)
        if error is not None or isinstance(main, _Raised):
            self.stop(graceful=False)
        if isinstance(main, _Raised):
            _reraise(main)
        if main is None:  # rank 0 is gone or waits for a rank that failed alone: the cell failed
            return self.runner.record_failure(cell, error or "rank 0 reported nothing")
        return main

    def _collect(self, cell: Cell) -> tuple[dict[int, Any], str | None]:
        """Every rank's report of ``cell`` (until the ranks are known to be out of step), and the error that
        put them out of step (None: they all reported)."""
        got: dict[int, Any] = {}
        deadline = float("inf")
        while len(got) < self.nproc:
            try:
                rank, key, item = self.outbox.get(timeout=0.5)
            except queue.Empty:
                dead = [r for r, p in enumerate(self.procs) if r not in got and not p.is_alive()]
                if dead:
                    r = dead[0]
                    return got, f"rank {r} of {self.nproc} ended with exit code {self.procs[r].exitcode}"
                if time.monotonic() > deadline:
                    return got, self._fault(got)
                continue
            if key != cell.key:  # a report of a cell an out-of-step pool was running: not this one's
                continue
            got[rank] = item
            alone = isinstance(item, _Raised) or item.status == "failed"
            if rank == 0 or alone:  # the others finish with rank 0, or fail with a fault every rank has
                deadline = min(deadline, time.monotonic() + GRACE_S)
        return got, None

    def _fault(self, got: dict[int, Any]) -> str:
        waiting = [r for r in range(self.nproc) if r not in got]
        for r, item in sorted(got.items()):
            if isinstance(item, _Raised):
                return f"rank {r} of {self.nproc}: {item.kind}: {item.message}"
            if item.status == "failed":
                return f"rank {r} of {self.nproc}: {item.error}"
        return f"ranks {waiting} of {self.nproc} did not finish the cell with rank 0"


def _reraise(raised: _Raised) -> None:
    from clbench.errors import ClbenchError
    from clbench.runner import FailFast

    if raised.kind == "FailFast":
        raise FailFast(raised.message)
    if raised.kind == "KeyboardInterrupt":
        raise KeyboardInterrupt(raised.message)
    if raised.kind == "ResultFileError":
        from clbench.errors import ResultFileError

        raise ResultFileError(raised.message)
    raise ClbenchError(f"rank 0: {raised.kind}: {raised.message}\n{raised.trace}")
