"""The core plugins: the local executor and the ``quick`` profile, registered by every registry the harness builds
(:func:`harness_registry`) under the name ``clbench.local``.

It imports nothing that runs cells: the functions a worker process starts with and runs a cell with come in the
executor's options (``clbench._exec.executors.execute``).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from clbench._core.registry import Registries, build_registry
from clbench.errors import ClbenchError, ConfigError
from clbench.hookspecs import hookimpl
from clbench.specs import ExecutorContext, ExecutorSpec, ProfileSpec, Workers

if TYPE_CHECKING:
    from clbench.cell import Cell, CellResult


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or ``taskset``'s share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


class LocalExecutor:
    """Cells on this machine: one after another in this process (``jobs`` 1, the API's default), or in
    ``jobs`` worker processes (``clbench run --jobs N``; ``auto``: one per usable CPU when every cell runs on
    the CPU, else 1). A worker runs a cell exactly as this process would: its numbers depend on its own
    settings (seed, ``train.threads``), never on where or beside what it runs."""

    def __init__(self, context: ExecutorContext) -> None:
        # how a worker process starts and runs a cell (clbench._exec.worker.start, .run), handed in by
        # clbench._exec.executors: the core plugin imports nothing that builds registries (which import it by name)
        self.worker = context.worker
        self.jobs = context.options.get("jobs") or 1
        self.nproc = int(context.nproc or 1)
        self.disabled = context.disabled
        self.fail_fast = context.fail_fast
        self.in_process = list(context.in_process_plugins)

    def workers(self, cells: list[Cell]) -> int:
        """How many worker processes to start (1: run in this process)."""
        # a data-parallel or sharded cell takes rank processes (and cores, or GPUs) of its own
        if self.nproc > 1 or any(c.in_ranks(self.nproc) for c in cells):
            if self.jobs != "auto" and int(self.jobs) > 1:
                ranks = f"--nproc {self.nproc}" if self.nproc > 1 else "a sharded cell (train.shard)"
                raise ClbenchError(
                    f"{ranks} runs one cell at a time on {self.nproc} process{'es' if self.nproc > 1 else ''}; it "
                    f"does not combine with --jobs {self.jobs} (use --jobs 1, or leave --jobs at auto)"
                )
            return 1
        if self.jobs == "auto":
            if self.in_process or any(c.device_type != "cpu" for c in cells):
                return 1  # several cells on one GPU would share its memory: one at a time
            jobs = usable_cpus()
        else:
            jobs = int(self.jobs)
            if jobs > 1 and self.in_process:
                raise ClbenchError(
                    f"--jobs {jobs}: plugins registered in this process only "
                    f"({', '.join(self.in_process)}) would be missing in worker processes; "
                    "install them as a package with a `clbench` entry point, or use --jobs 1"
                )
        return max(1, min(jobs, len(cells)))

    def run(self, cells: Iterable[Cell], run_cell: Callable[[Cell], CellResult]) -> Iterator[CellResult]:
        cells = list(cells)
        jobs = self.workers(cells)
        cpus = usable_cpus()
        # Refused, not clamped: the threads are a setting of the cell's identity (numbers depend on them), and
        # oversubscribed cores make a cell many times slower (64 threads on 2 CPUs: minutes for seconds' work).
        # Cells share the CPUs (--jobs starts one only while the running cells' threads leave room for it), so
        # each cell may ask for all of them, never more.
        wide = [c for c in cells if c.train.threads > cpus]
        if wide and self.nproc == 1:
            most = max(wide, key=lambda c: c.train.threads)
            raise ConfigError(
                f"train.threads={most.train.threads} ({most.key}) is more threads than the {cpus} CPUs this "
                f"process may use: its cells would run oversubscribed, many times slower; set train.threads to "
                f"at most {cpus} (--jobs shares the {cpus} CPUs between cells, never gives a cell more), or run "
                "on a machine with more CPUs"
            )
        if jobs == 1:
            for cell in cells:
                yield run_cell(cell)
            return
        yield from _in_workers(cells, jobs, cpus, self.disabled, self.fail_fast, self.worker)


def next_cell(pending: list[Cell], running: Mapping[str, int], jobs: int, cpus: int) -> Cell | None:
    """The first pending cell that may start now: a worker is free and the running cells' threads leave room
    for its ``train.threads`` (capped at ``cpus``: a cell that wants more runs alone); None: wait."""
    if len(running) >= jobs:
        return None
    free = cpus - sum(running.values())
    return next((c for c in pending if not running or min(c.train.threads, cpus) <= free), None)


def _in_workers(
    cells: list[Cell], jobs: int, cpus: int, disabled: tuple[str, ...], fail_fast: bool, worker: Workers
) -> Iterator[CellResult]:
    """Run ``cells`` in ``jobs`` spawned worker processes, yielding results as they finish. A cell starts when a
    worker is free and the ``train.threads`` of the running cells leave room for its own (a cell asking for
    more threads than ``cpus`` runs alone): oversubscribed cores would slow every cell. An interrupt or a
    --fail-fast stop terminates the workers; finished results and checkpoints are on disk already."""
    finished: queue.SimpleQueue[CellResult | BaseException] = queue.SimpleQueue()
    pending = list(cells)
    running: dict[str, int] = {}  # cell key -> the threads it holds
    # spawn, not fork: a forked child of a process that has run torch's OpenMP pool can hang in its first op
    context = multiprocessing.get_context("spawn")
    started = context.SimpleQueue()  # (pid, cell key) as a worker starts a cell
    workers: dict[str, int] = {}  # cell key -> the pid of the worker running it
    start, run = worker.start, worker.run
    # the workers follow this process: one that sees it gone already when its start-up ends stops there
    pool = context.Pool(jobs, start, (disabled, fail_fast, os.getpid(), started))
    try:
        while pending or running:
            while (cell := next_cell(pending, running, jobs, cpus)) is not None:
                pending.remove(cell)
                running[cell.key] = min(cell.train.threads, cpus)
                pool.apply_async(run, (cell,), callback=finished.put, error_callback=finished.put)
            try:
                item = finished.get(timeout=WORKER_CHECK_S)
            except queue.Empty:
                _check_workers(started, workers, running)
                continue
            if isinstance(item, BaseException):  # FailFast, or a cell that could not reach its worker
                raise item
            running.pop(item.key)
            workers.pop(item.key, None)
            yield item
    except BaseException:  # an interrupt, --fail-fast, an error, or the caller stopped early
        pool.terminate()  # the cells still running stop (their last checkpoints stay)
        raise
    else:
        pool.close()  # every cell is done: the workers exit on their own
    finally:
        pool.join()


WORKER_CHECK_S = 2.0  # how often the pool's owner looks for a worker that died with a cell


class WorkerDied(ClbenchError):
    """A ``--jobs`` worker died while running a cell: the run stops, as a failed cell does (exit code 1)."""

    exit_code = 1


def _check_workers(started: Any, workers: dict[str, int], running: Mapping[str, int]) -> None:
    """Raise when a worker died while running a cell: a process pool neither reports nor reruns the task of a
    worker killed outright (SIGKILL, the out-of-memory killer), so the run would wait for its result forever."""
    while not started.empty():
        pid, key = started.get()
        workers[key] = pid
    for key, pid in workers.items():
        if key not in running:
            continue
        try:
            os.kill(pid, 0)  # (the pool reaps a dead worker within 0.1 s: no zombie answers for it)
        except ProcessLookupError:
            raise WorkerDied(
                f"the worker process running cell {key} (pid {pid}) died without a result: killed, by a signal or "
                "the out-of-memory killer (`dmesg` says which). The cells finished so far are kept; rerun the "
                "same command to resume the others from their checkpoints (--jobs 1 runs one cell at a time, "
                "with less memory)"
            ) from None


@hookimpl
def clbench_add_executors() -> list[ExecutorSpec]:
    return [
        ExecutorSpec(
            "local",
            LocalExecutor,
            "cells on this machine: in this process, or in --jobs N worker "
            "processes (auto: one per CPU when every cell runs on the CPU)",
        )
    ]


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [
        ProfileSpec(
            "quick",
            "embedded default: every method on every quick stream, real data shipped offline, CPU, minutes",
            version="2",  # 2: seeds 0-2 on order 1, permuted-digits in both scenarios, tuned presets (docs/tuning.md)
            seeds=(0, 1, 2),
        )
    ]


def harness_registry(
    disabled: Iterable[str] = (), extra_plugins: Iterable[object] = (), autoload: bool | None = None
) -> Registries:
    """The registries of the core plugins (this module), the installed entry points and ``extra_plugins``: what
    every command, worker and rank builds (:func:`clbench._core.registry.build_registry`)."""
    return build_registry(disabled, extra_plugins, autoload, core=sys.modules[__name__])
