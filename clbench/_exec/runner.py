"""Run one cell: train on each task of an order, record footprints, fill the accuracy matrix.

Determinism and resume: every task re-seeds torch from ``(seed, task index)`` and every epoch's
shuffle uses its own generator from ``(seed, task, phase, epoch)``, so a cell resumed from the
checkpoint written after task k follows exactly the path of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import shutil
import sys
import time
import traceback
from typing import Any

import torch
from threadpoolctl import ThreadpoolController
from tqdm.auto import tqdm

from clbench._core import console, provenance
from clbench._core.boundary import (
    CheckedMethod,
    ObserverError,
    blame,
    notify,
    observers,
)
from clbench._core.registry import Registries
from clbench._core.results import environment, read_result, write_result
from clbench._exec.cellstate import CellState, fingerprints
from clbench._exec.compute import ExampleCounter
from clbench._exec.evaluation import evaluate
from clbench._exec.session import CellSession, method_label
from clbench._exec.shard import compute_precision, full_state_dict, shard_model
from clbench._exec.stats import epoch_losses, steps_done
from clbench._exec.step import COUNTER, StepObserver, train_task
from clbench.cell import CHECKPOINT_FILE, ERROR_LOG, FOOTPRINT_FILE, RESULT_FILE, Cell, CellResult
from clbench.data import Stream, atomic_write_text, atomic_write_with, shown_labels
from clbench.distributed import SINGLE, Dist, resolve_device
from clbench.errors import ClbenchError, Diverged, HubUnreachable, PluginError, ResultFileError
from clbench.method import Method
from clbench.model import CLModel

FINAL_STATUSES = ("complete", "diverged")  # deterministic outcomes: rerunning gives the same


class FailFast(ClbenchError):
    """``--fail-fast``: the first failed cell stops the run (exit code 1)."""

    exit_code = 1


@functools.cache
def blas_pools() -> ThreadpoolController:
    """The BLAS thread pools loaded in this process (numpy's and scipy's OpenBLAS), which a cell holds to
    ``train.threads`` as it does torch's: scipy's eigensolver in the dense AWOM otherwise ran on every core, and
    OpenBLAS's idle workers spin after a call, taking a core beside the next cell's training (measured with
    benchmarks/bench_vs_avalanche.py: process CPU time 8 % above wall time). Found once per process (~1.4 ms);
    a BLAS loaded later is not held."""
    return ThreadpoolController()


def cell_device(cell: Cell, dist: Dist) -> torch.device:
    """The device this process runs the cell on (its placement, else ``train.device`` resolved), with the cell's TF32
    setting (process-wide switches, set for each cell from its own ``train.tf32``)."""
    train = cell.train
    device = dist.device(torch.device(cell.placed) if cell.placed else resolve_device(train.device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = train.tf32
    return device


def show_labels(model: CLModel, stream: Stream, order: list[str], done: int, head: str) -> frozenset[str] | None:
    """On a class-incremental stream, tell the model the labels it trains and is scored on once the first ``done``
    tasks of the order are known (the task about to train included): theirs under the ``masked`` head, every
    label under the ``full`` one (:func:`clbench.data.shown_labels`, :meth:`CLModel.see_labels`). Returns them."""
    labels = shown_labels(stream, order[:done], head)
    if stream.scenario == "class-incremental":
        model.see_labels(labels)
    return labels


def release(cell: Cell) -> None:
    """Free what the finished cell held before the next one loads: its model, method and optimizer sit in reference
    cycles (a transformers model, a LoRA hook, a torch optimizer's patched ``step``) that only the cyclic collector
    frees, and a GPU's cache keeps their blocks. A full collection scans every object of the process (~170 ms with
    transformers loaded); a process that runs cells freezes what it loaded first (:func:`clbench._exec.worker.
    bootstrap`, ``clbench run``), after which it scans only the cell's own objects (~0.1 ms). Unfrozen (clbench
    as a library), only cells on a GPU pay for it."""
    on_gpu = cell.device_type == "cuda"
    if gc.get_freeze_count() or on_gpu:
        gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()


class Runner:
    """Runs cells in this process. Built once per worker from the registries. With ``dist`` (data parallelism,
    see :mod:`clbench.distributed`) this process is one rank of every cell it runs: rank 0 alone writes files and
    notifies the observers, the others return their (unwritten) result."""

    def __init__(self, regs: Registries, fail_fast: bool = False, progress: bool = True, dist: Dist = SINGLE) -> None:
        self.regs = regs
        self.fail_fast = fail_fast
        self.progress = progress and dist.is_main
        self.dist = dist
        self._code: dict[tuple[Any, ...], tuple[dict[str, str], dict[str, str]]] = {}

    def _notify(self, hook: str, **kwargs: Any) -> None:
        if self.dist.is_main:  # observers write files (loggers): once per cell, not once per rank
            notify(self.regs, hook, **kwargs)

    def existing(self, cell: Cell) -> CellResult | None:
        """The final result of this very cell (same folder, same config hash), or None. A result of another
        cell or other settings in its folder is a :class:`~clbench.errors.ResultFileError`: it is never
        returned for this cell, and never overwritten unless it failed. A result made by other code or data
        (:meth:`changes`) is returned: the caller decides (``clbench run --on-change``)."""
        path = cell.directory / RESULT_FILE
        if not path.exists():
            return None
        result = read_result(path)
        mismatch = stale_reason(result, cell)
        if mismatch is not None:
            if result.status == "failed":  # no numbers to lose: the cell is run again with its new settings
                return None
            raise ResultFileError(f"{path}: {mismatch}")
        return result if result.status in FINAL_STATUSES else None

    def twin(self, cell: Cell) -> CellResult | None:
        """A sweep point's cell (``ewc@lambda=1000``) whose settings are those of its method's own cell (``ewc``, its
        preset λ = 1000) in the same ``--out``: that cell's final result, copied into the sweep point's folder under
        its label (the numbers are the same cell's), or None."""
        if not cell.sweep:
            return None
        own = dataclasses.replace(cell, method="+".join(cell.parts), sweep={})
        try:
            found = self.existing(own)
        except ResultFileError:
            return None
        if found is None or found.config_hash != cell.config_hash or self.changes(found, own):
            return None
        copy = dataclasses.replace(
            found, method=cell.method, config={**found.config, "sweep": dict(cell.sweep)}, path=None
        )
        cell.directory.mkdir(parents=True, exist_ok=True)
        if found.path is not None and (source := found.path.parent / FOOTPRINT_FILE).exists():
            atomic_write_with(cell.directory / FOOTPRINT_FILE, lambda tmp: shutil.copyfile(source, tmp))
        copy.path = write_result(copy, cell.directory)
        return copy

    def changes(self, result: CellResult, cell: Cell) -> list[str] | None:
        """How the code and data here differ from what made ``result`` (see :func:`clbench._core.provenance.changes`)."""
        return provenance.changes(
            result.provenance,
            result.metrics if result.status == "complete" else None,
            self.regs,
            cell,
            self.code_record(cell),
            result.tasks,
        )

    def code_record(self, cell: Cell) -> tuple[dict[str, str], dict[str, str]]:
        """:func:`clbench._core.provenance.code_record`, once per set of components in this runner's life (one run)."""
        key = (cell.parts, cell.model, cell.stream)
        if key not in self._code:
            self._code[key] = provenance.code_record(self.regs, cell)
        return self._code[key]

    def run(self, cell: Cell) -> CellResult:
        done = self.existing(cell)
        if done is not None and self.changes(done, cell):  # made by other code or data: run it with this code
            done = None  # (clbench run decides before, by --on-change, which such cells reach here)
        if self.dist.active and self.dist.broadcast(done is not None) != (done is not None):
            raise ClbenchError(
                f"{cell.directory}: rank {self.dist.rank} reads another result there than rank 0; "
                "--out must be one folder every rank sees"
            )
        if done is not None:
            return done
        directory = cell.directory
        directory.mkdir(parents=True, exist_ok=True)
        state = CellState(cell)
        state.code = self.code_record(cell)
        blas = blas_pools().limit(limits=cell.train.threads, user_api="blas")
        threads = torch.get_num_threads()
        torch.set_num_threads(cell.train.threads)
        try:
            try:
                with console.in_cell(cell.key):
                    self._run(cell, state)
            except (KeyboardInterrupt, HubUnreachable):
                raise  # the checkpoint of the last finished task stays for the next run; the hub: every cell's
            except Diverged as exc:
                state.fail("diverged", str(exc))
                state.divergence = exc.where
            except Exception as exc:
                where = "" if isinstance(exc, PluginError) else blame(exc, self.regs)
                stopped = state.session.stopped if state.session is not None else None
                during = "" if stopped is None else f" ({stopped.where()})"
                self._failed(cell, state, f"{type(exc).__name__}: {exc}{where}{during}")
            if cell.metrics.device != "cpu":
                release(cell)  # the model's blocks on the GPU, before AWOM's float64 products need it
            result = self._finish(cell, state)
        finally:
            blas.restore_original_limits()
            torch.set_num_threads(threads)
            del state
            release(cell)
        return self._stop_if_failed(cell, result)

    def record_failure(self, cell: Cell, error: str) -> CellResult:
        """Write a failed result for ``cell``, which did not run to its end here (a data-parallel cell whose rank
        0 is gone, see :class:`clbench._exec.ranks.RankPool`); a checkpoint stays for the rerun."""
        state = CellState(cell)
        state.fail("failed", error)
        return self._stop_if_failed(cell, self._finish(cell, state))

    def _stop_if_failed(self, cell: Cell, result: CellResult) -> CellResult:
        if self.fail_fast and result.status == "failed":
            raise FailFast(
                f"stopped at the first failed cell (--fail-fast): {cell.key}: {result.error} "
                f"(traceback in {cell.directory / ERROR_LOG})"
            )
        return result

    def _failed(self, cell: Cell, state: CellState, error: str) -> None:
        state.fail("failed", error)
        if not self.dist.is_main:
            return
        with contextlib.suppress(OSError):  # a full disk must not hide the cell's own error
            atomic_write_text(cell.directory / ERROR_LOG, traceback.format_exc())

    def _finish(self, cell: Cell, state: CellState) -> CellResult:
        if not self.dist.is_main:  # rank 0 writes the result and tells the observers
            return state.result(self.regs, write=False)
        result = state.result(self.regs)
        result.path = write_result(result, cell.directory)
        if result.status == "complete":
            (cell.directory / CHECKPOINT_FILE).unlink(missing_ok=True)
            (cell.directory / ERROR_LOG).unlink(missing_ok=True)  # an earlier failed attempt's traceback
        try:
            notify(self.regs, "clbench_cell_end", cell=cell, result=result)
        except ObserverError as exc:  # an observer's fault fails the cell it observed, and only that one
            if state.status == "failed":  # the cell's own first fault stays its error (an observer failing twice)
                state.error = f"{state.error}; then at the cell's end {type(exc).__name__}: {exc}"
            else:
                self._failed(cell, state, f"{type(exc).__name__}: {exc}")
            result.status, result.error = state.status, state.error
            result.path = write_result(result, cell.directory)
        return result

    def _resume(
        self, session: CellSession, state: CellState, model: CLModel, method: Method, float32: bool
    ) -> tuple[CLModel, Method, int]:
        """The model and method to go on with and the tasks already done, from the cell's checkpoint (every rank
        must agree); one that does not fit starts the cell over from fresh objects (``float32``: their weights cast
        to it, as the runner casts a sharded cell's)."""
        start = state.load_checkpoint(model, method)
        starts = self.dist.gather(start)
        if len(set(starts)) > 1:
            raise ClbenchError(
                f"{state.path}: the ranks would resume from different tasks {starts}; "
                "--out must be one folder every rank sees"
            )
        if start < 0:  # a checkpoint that did not fit may have half-loaded: start from fresh objects
            model, method = session.build()
            if float32:
                model.to(torch.float32)
            start = 0
        elif start and self.dist.is_main:
            tqdm.write(
                f"resumed {session.cell.key} from its checkpoint: {start} of {len(state.tasks)} tasks done",
                file=sys.stderr,
            )
        return model, method, start

    def _run(self, cell: Cell, state: CellState) -> None:
        train = cell.train
        dist = self.dist
        device = cell_device(cell, dist)
        session = state.session = CellSession(self.regs, cell, device, dist)
        stream, order = session.stream, session.order
        # scored among each task's own classes, a class-incremental model answers a task-incremental question
        scenario = "task-incremental" if train.scoring == "task" else stream.scenario
        state.tasks, state.scenario, state.stream = order, scenario, stream
        model, method = session.build()
        sharded = train.shard != "off"
        # low-precision weights shard as their float32 masters, which a checkpoint holds
        compute = compute_precision(model, train.fp32_masters) if sharded else None
        if compute is not None:
            model.to(torch.float32)
        state.base = fingerprints(model)  # what a fresh build reproduces: checkpoints leave out what still equals it
        state.env = environment(str(device), train, dict(self._versions), world_size=dist.world_size)

        model, method, start = self._resume(session, state, model, method, compute is not None)
        if sharded:  # after the fresh build's fingerprints and the resume, which loads whole weights
            shard_model(model, compute, offload=train.shard == "offload", pin=device.type == "cuda")
        # a sharded forward is a collective: every rank evaluates every batch (the same predictions as one process)
        scoring = SINGLE if sharded else dist
        ctx = method.ctx
        checked = CheckedMethod(method, method_label(self.regs, cell))
        kind = self.regs.methods.get(cell.parts[0]).footprint_kind  # the first part owns the footprint
        self._notify("clbench_cell_start", cell=cell, resumed_from=start)
        bar = tqdm(total=len(order), initial=start, desc=cell.key, leave=False, disable=not self.progress, unit="task")
        saved = time.perf_counter()  # the cell's start or its last checkpoint (train.checkpoint_every_s)
        step = steps_done(state.task_timings)  # optimizer steps of the tasks done (by a checkpoint, on resume)
        if start == 0:  # the untrained model's scores: FWT's reference b_j (a resumed cell has them)
            with session.phase("evaluate"):
                state.evaluate_untrained(lambda: evaluate(model, method, stream, order, train, device, scoring)[0])
        counter = ExampleCounter()  # the examples the task's training forwarded (clbench._exec.compute)
        ctx.stash[COUNTER] = counter  # what train.compute_epochs spends
        hook = counter.attach(model)
        with contextlib.closing(bar), hook:
            for index in range(start, len(order)):
                task = order[index]
                self._notify("clbench_task_start", cell=cell, task=task, index=index)
                shown = show_labels(model, stream, order, index + 1, train.head)
                task_head = train.head == "task" and stream.scenario == "class-incremental"
                if task_head:  # trained among the task's own classes (train_mask), scored among the seen ones
                    model.see_labels(stream.task(task).own_labels)
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                t0 = time.perf_counter()
                counter.active = True
                session.before_task(method, index)  # (seeds the task: nothing above draws a random number)
                with session.phase("train", index):
                    stats = train_task(model, checked, ctx, index, self._step_observer(cell, task, index), step)
                step += stats.steps
                session.after_task(method, index)
                if task_head:
                    model.see_labels(shown)
                counter.active = False
                forward, grad = (sum(n) for n in zip(*dist.gather(counter.take()), strict=True))  # every rank's
                state.example_bytes = counter.example_bytes
                if not train.capture:  # a replayed graph runs no hook: the counts would be the eager steps' only
                    stats.examples_forward, stats.examples_grad = forward, grad
                state.footprints.append(checked.footprint(task, index, kind))
                t1 = time.perf_counter()
                with session.phase("evaluate", index):
                    row, per_example = evaluate(model, method, stream, order, train, device, scoring, shown)
                stats.task, stats.train_s, stats.eval_s = task, t1 - t0, time.perf_counter() - t1
                if device.type == "cuda":
                    stats.peak_memory_bytes = torch.cuda.max_memory_allocated(device)  # this task's peak
                state.record(row, per_example, stats)
                state.report = checked.report()
                # after the last task the result file is written at once
                due = index < len(order) - 1 and time.perf_counter() - saved >= train.checkpoint_every_s
                if dist.broadcast(due):  # rank 0's clock decides: every rank goes on knowing the file is written
                    whole = full_state_dict(model) if sharded else None  # (a collective: every rank gathers)
                    if dist.is_main:
                        state.save_checkpoint(model, checked, whole)
                    dist.barrier()
                    saved = time.perf_counter()
                self._notify(
                    "clbench_task_end",
                    cell=cell,
                    task=task,
                    index=index,
                    accuracy_row=row,
                    tasks=list(order),
                    step=step,
                    epochs=epoch_losses(stats, step),
                )
                bar.update(1)
        state.finish(method)

    def _step_observer(self, cell: Cell, task: str, index: int) -> StepObserver | None:
        """What train_task calls on a logged step: the clbench_step observers (None: no logging)."""
        if cell.train.log_every == 0 or not self.dist.is_main or not self.regs.pm.hook.clbench_step.get_hookimpls():
            return None
        call = observers(self.regs, "clbench_step")

        def on_step(phase: str, epoch: int, step: int, values: dict[str, float]) -> None:
            call(cell=cell, task=task, index=index, phase=phase, epoch=epoch, step=step, values=values)

        return on_step

    @functools.cached_property
    def _versions(self) -> dict[str, str]:
        """Every plugin's distribution and version, for each result's ``env`` (the registries do not change)."""
        from clbench._core.registry import _dist_of, plugin_name

        pm = self.regs.pm
        out = {}
        for plugin in pm.get_plugins():
            dist, version = _dist_of(plugin, pm)
            out[plugin_name(pm, plugin)] = f"{dist} {version}"
        return dict(sorted(out.items()))


def stale_reason(result: CellResult, cell: Cell) -> str | None:
    """Why ``result`` (found in ``cell``'s folder) is not this cell's result, or None when it is."""
    recorded = (result.method, result.stream, str(result.order), int(result.seed))
    if recorded != (cell.method, cell.stream, cell.order, cell.seed):
        return f"holds the result of another cell ({result.key}), not of {cell.key}"
    if result.config_hash == cell.config_hash:
        return None
    if result.config_hash is None:
        return "was written by an older clbench that recorded no config hash; its settings cannot be matched"
    from clbench.cell import config_diff, identity

    diff = config_diff(
        identity(result.config, result.stream, result.order, result.seed, cell.identity_since),
        identity(cell.resolved(), cell.stream, cell.order, cell.seed, cell.identity_since),
    )
    return "holds a result for other settings: " + ("; ".join(diff) or "(same settings, other hash)")
