"""``--nproc N``: the rank processes of data-parallel cells (see :mod:`clbench.distributed` for what a rank
computes)."""

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
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from clbench._exec.worker import bootstrap
from clbench.distributed import SINGLE, Dist
from clbench.errors import ClbenchError

if TYPE_CHECKING:
    from clbench._exec.runner import Runner
    from clbench.cell import Cell, CellResult

GRACE_S = 10.0
"""How long the parent waits for the other ranks once one has reported a cell that they did not finish with
it (a fault on one rank only: an observer or a file write on rank 0, memory on another); then it restarts the
ranks, whose group is out of step."""

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


TIMEOUT_ENV = "CLBENCH_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 7200.0


def collective_timeout() -> timedelta:
    """How long a rank waits in a collective before the group fails: ``$CLBENCH_COLLECTIVE_TIMEOUT_S``, default two
    hours. Rank 0 alone evaluates what cannot be split (lm-eval, a capability chain's generation) while the others
    wait in a broadcast: NCCL's own default, 10 minutes, is shorter than an 8B model's evaluation."""
    text = os.environ.get(TIMEOUT_ENV, str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ClbenchError(f"{TIMEOUT_ENV}={text!r}: give the seconds a rank may wait in a collective (> 0)")
    return timedelta(seconds=seconds)


def join(rank: int, world_size: int, local_rank: int, backend: str, init_method: str) -> Dist:
    """Join the process group (its collectives time out after :func:`collective_timeout`) and return this
    process's :class:`Dist`."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # before any collective: NCCL and the object collectives use it
    torch.distributed.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size, timeout=collective_timeout()
    )
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


@dataclass
class _Raised:
    """An exception that left ``Runner.run`` in a rank (sent as text: not every exception pickles)."""

    kind: str
    message: str
    trace: str


def _rank_main(
    rank: int,
    world: int,
    backend: str,
    init_method: str,
    disabled: Sequence[str],
    plugins: tuple[str, ...],
    fail_fast: bool,
    inbox: Any,
    outbox: Any,
    parent: int,
) -> None:
    """A rank process: join the group, then run every cell the parent sends until it sends None."""

    if rank:
        warnings.simplefilter("ignore")  # rank 0 says it once
    runner = bootstrap(
        disabled, fail_fast, plugins, parent=parent, join=lambda: join(rank, world, rank, backend, init_method)
    )
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

    def __init__(self, runner: Runner, nproc: int, disabled: Sequence[str], plugins: tuple[str, ...] = ()) -> None:
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
            raise ClbenchError(
                f"--nproc {self.nproc}: this machine has {torch.cuda.device_count()} GPUs; a cell on "
                "CUDA runs one rank per GPU"
            )
        # spawn, not fork: a forked child of a process that has run torch's OpenMP pool can hang in its first op
        mp = multiprocessing.get_context("spawn")
        self.store = tempfile.mkdtemp(prefix="clbench-ddp-")  # a file store: no port to find free, or to race for
        init = f"file://{os.path.join(self.store, 'store')}"
        self.outbox = mp.Queue()
        self.inboxes = [mp.Queue() for _ in range(self.nproc)]
        self.procs = [
            mp.Process(
                target=_rank_main,
                daemon=True,
                name=f"clbench-rank-{r}",
                args=(
                    r,
                    self.nproc,
                    self.backend,
                    init,
                    self.disabled,
                    self.plugins,
                    self.fail_fast,
                    self.inboxes[r],
                    self.outbox,
                    os.getpid(),
                ),
            )
            for r in range(self.nproc)
        ]
        for p in self.procs:
            p.start()

    def stop(self, graceful: bool = True) -> None:
        """End the rank processes: asked to (``graceful``, between cells) or terminated (out of step, or an
        interrupt: their last checkpoints are on disk already)."""
        started = [p for p in self.procs if p.pid is not None]  # a start that failed part way left the others
        if graceful:
            for box in self.inboxes:
                with contextlib.suppress(Exception):
                    box.put(None)
            for p in started:
                p.join(timeout=GRACE_S)
        for p in started:
            if p.is_alive():
                p.terminate()
        for p in started:
            p.join()
        self.procs, self.inboxes = [], []
        if self.store:
            shutil.rmtree(self.store, ignore_errors=True)
            self.store = ""

    def run(self, cell: Cell) -> CellResult:
        backend = backend_for(torch.device(cell.device_type))
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
    from clbench._exec.runner import FailFast

    if raised.kind == "FailFast":
        raise FailFast(raised.message)
    if raised.kind == "KeyboardInterrupt":
        raise KeyboardInterrupt(raised.message)
    if raised.kind == "ResultFileError":
        from clbench.errors import ResultFileError

        raise ResultFileError(raised.message)
    raise ClbenchError(f"rank 0: {raised.kind}: {raised.message}\n{raised.trace}")


def run_one(cell: Any, disabled: Sequence[str], fail_fast: bool, nproc: int = 1) -> Any:
    """Set up this process (a remote task: Ray's) and run one cell in it, on ``nproc`` data-parallel ranks that are
    processes of this one (one per GPU the task was given, through ``CUDA_VISIBLE_DEVICES``, or CPU processes with
    gloo)."""
    runner = bootstrap(disabled, fail_fast)
    # (a cell complete on another worker since the driver looked runs no rank)
    if not cell.in_ranks(nproc) or runner.existing(cell) is not None:
        return runner.run(cell)
    with RankPool(runner, nproc, disabled) as pool:
        return pool.run(cell)
