"""Run one cell: train on each task of an order, record footprints, fill the accuracy matrix.

Determinism and resume: every task re-seeds torch from ``(seed, task index)`` and every epoch's
shuffle uses its own generator from ``(seed, task, phase, epoch)``, so a cell resumed from the
checkpoint written after task k follows exactly the path of an uninterrupted one.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import gc
import math
import shutil
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from threadpoolctl import ThreadpoolController
from torch import Tensor, nn
from torch.optim.lr_scheduler import MultiStepLR
from tqdm.auto import tqdm

from clbench import footprints as fps
from clbench._core import console, provenance
from clbench._core.boundary import (
    ObserverError,
    blame,
    check_footprint,
    check_loss_terms,
    check_report,
    check_type,
    compute_metrics,
    describe,
    notify,
    observers,
)
from clbench._core.composite import CompositeMethod
from clbench._core.examples import Entry, encode_row
from clbench._core.optim import Masters, make_optimizer, torch_optimizer_of
from clbench._core.registry import Registries
from clbench._core.results import environment, read_result, write_result
from clbench.cell import CHECKPOINT_FILE, ERROR_LOG, FOOTPRINT_FILE, RESULT_FILE, Cell, CellResult
from clbench.config import TrainConfig
from clbench.data import Batch, Stream, atomic_write_text, atomic_write_with, batches
from clbench.distributed import SINGLE, Dist, resolve_device
from clbench.errors import ClbenchError, Diverged, HubUnreachable, PluginError, ResultFileError
from clbench.method import MASTERS, CellContext, Method, Phase, derive_seed, seed_torch
from clbench.metrics import MetricInput
from clbench.model import CLModel, StreamInfo

# The least blow-up reference (train.diverge_factor): a phase that starts on a task already learned (joint training
# after its first task: a first step of 4e-4) has a loss that may rise a hundredfold and stay far below a blow-up.
LOSS_FLOOR = 1.0
SYNC_EVERY = 32  # train.sync_every's default on an accelerator: steps between reads of the step losses
FINAL_STATUSES = ("complete", "diverged")  # deterministic outcomes: rerunning gives the same


def build_method(regs: Registries, cell: Cell, ctx: CellContext) -> Method:
    methods = []
    for part in cell.parts:
        method = regs.methods.get(part).factory(cell.methods_cfg[part], ctx)
        check_type(method, Method, f"method {part!r}", "factory", regs.methods.origins.get(part))
        methods.append((part, method))
    return methods[0][1] if len(methods) == 1 else CompositeMethod(methods, ctx)


def build_stream(regs: Registries, cell: Cell) -> Stream:
    stream = provenance.observed(lambda: regs.streams.get(cell.stream).factory(cell.stream_cfg))
    check_type(stream, Stream, f"stream {cell.stream!r}", "factory", regs.streams.origins.get(cell.stream))
    stream.eval_split = cell.train.eval_split
    stream.device_data = cell.train.device_data
    return stream


def build_model(regs: Registries, cell: Cell, stream: Stream) -> CLModel:
    multi_head = getattr(cell.model_cfg, "multi_head", None)
    model = regs.models.get(cell.model).factory(cell.model_cfg, StreamInfo.of(stream, multi_head))
    check_type(model, CLModel, f"model {cell.model!r}", "factory", regs.models.origins.get(cell.model))
    return model


def method_label(regs: Registries, cell: Cell) -> str:
    """``method 'ewc' (plugin 'ewc', clbench 0.1.0)``: how messages about a cell's method name it."""
    return f"method {cell.method!r}" + "".join(describe(regs.methods.origins.get(p)) for p in cell.parts)


@torch.no_grad()
def evaluate(model: CLModel, method: Method, stream: Stream, tasks: list[str], train: TrainConfig,
             device: torch.device, dist: Dist = SINGLE) -> tuple[list[float], list[Tensor | None]]:
    """Score (0-100, by the stream's :meth:`Stream.score`) on every task of ``tasks`` with the model as it is now,
    and each task's per-example scores (:meth:`Stream.example_scores`; None where the stream has none).

    Data-parallel (``dist``), each rank predicts its share of the test batches (:meth:`Stream.predictions`) and
    every rank scores all predictions gathered: the same batches, predictions and score as one process. A
    stream with an evaluation of its own (an overridden :meth:`Stream.evaluate`) is run whole on rank 0."""
    was_training = model.training
    model.eval()
    row: list[float] = []
    examples: list[Tensor | None] = []
    if not dist.active or type(stream).evaluate is not Stream.evaluate:
        for task in tasks if dist.is_main else ():
            with method.evaluating(task):
                score, per_example = stream.evaluate_examples(model, task, batch_size=train.eval_batch_size,
                                                              limit=train.eval_limit, device=device)
            row.append(float(score))
            examples.append(per_example)
        row = dist.broadcast(row)
    else:
        mine = {}
        for task in tasks:
            with method.evaluating(task):
                mine[task] = stream.predictions(model, task, batch_size=train.eval_batch_size, limit=train.eval_limit,
                                                device=device, shard=(dist.rank, dist.world_size))
        every = dist.gather(mine)
        n = dist.world_size
        for task in tasks:
            count = sum(len(part[task]) for part in every)
            preds = [every[i % n][task][i // n] for i in range(count)]  # batch i was rank i mod N's
            score, per_example = stream.score_examples(task, preds, train.eval_limit)
            row.append(float(score))
            examples.append(per_example)
    model.train(was_training)
    return row, examples


def _epoch_batches(ctx: CellContext, tasks: list[str], batch_size: int, *salt: int) -> Iterator[Batch]:
    """One epoch's batches of ``tasks``, on the cell's device where the stream keeps the split there
    (``train.device_data``); the same batches, in the same order, as from the CPU."""
    fraction = ctx.train.device_data
    if len(tasks) == 1:  # the split's own generator: no second generator frame a step
        return batches(ctx.stream.on_device(tasks[0], "train", ctx.device, fraction), batch_size, tasks[0],
                       ctx.generator(*salt))
    # Joint training: every batch holds one task; batches of all tasks interleaved at random.
    pool = [b for i, t in enumerate(tasks)
            for b in batches(ctx.stream.on_device(t, "train", ctx.device, fraction), batch_size, t,
                             ctx.generator(*salt, i))]
    return (pool[i] for i in torch.randperm(len(pool), generator=ctx.generator(*salt, -1)).tolist())


def _own_hook(method: Method, name: str) -> Callable[[], None] | None:
    """The method's per-step hook ``name``, or None where it is :class:`Method`'s own no-op: the step then
    skips the call (in the training loop a Python call costs ~1 µs, benchmarks/bench_overhead.py)."""
    hook = getattr(method, name)
    return None if getattr(hook, "__func__", None) is getattr(Method, name) else hook


StepObserver = Callable[[str, int, int, dict[str, float]], None]
"""``on_step(phase, epoch, step, values)``: what :func:`train_task` calls on a logged step (see clbench_step)."""


def grad_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of every gradient of ``params`` together (as ``clip_grad_norm_`` computes it; read only)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach()) for g in grads]))


def cell_masters(ctx: CellContext) -> Masters:
    """The fp32 masters of the cell's low-precision weights (none for an fp32 model), kept from phase to phase and
    task to task, and in the checkpoint."""
    return ctx.stash.setdefault(MASTERS, Masters())


def micro_batches(batch: Batch, parts: int) -> list[Batch]:
    """``batch`` cut into ``parts`` consecutive pieces (sizes differ by at most one; fewer when it is shorter)."""
    bounds = torch.linspace(0, len(batch), min(parts, len(batch)) + 1).round().long().tolist()
    return [Batch(batch.x[a:b], batch.y[a:b], batch.task) for a, b in zip(bounds, bounds[1:], strict=False)]


def batch_loss(model: CLModel, method: Method, batch: Batch, what: str
               ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of ``batch`` (the model's task loss plus the method's loss terms), the task loss and the terms."""
    logits, task_loss = model.training_loss(batch.x, batch.task, batch.y, method.needs_logits)
    terms = method.loss_terms(batch, logits)
    if type(terms) is not dict or terms:  # {}, most steps of most methods, has nothing to check
        terms = check_loss_terms(terms, what)
    loss = task_loss
    for term in terms.values():
        loss = loss + term
    return loss, task_loss, terms


Losses = tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]
"""A step's loss, task loss and loss terms (see :func:`batch_loss`)."""


def accumulate(model: CLModel, method: Method, batch: Batch, parts: int, what: str) -> Losses:
    """Forward and backward of ``batch`` in ``parts`` micro-batches (``train.grad_accum``); returns the batch's
    loss, task loss and loss terms (detached), as one pass over the whole batch would.

    Each micro-batch's loss, method terms included, is scaled by its share of the examples, so the summed
    gradients are the batch's mean gradient. A term that depends on the batch (LwF's distillation, replay)
    is then its batch mean; a term that does not (EWC's or O-LoRA's penalty: the weights do not move between
    micro-batches) has shares summing to one: it counts once per optimizer step, as without accumulation.
    """
    pieces = micro_batches(batch, parts)
    return _backward(model, method, pieces, [len(micro) / len(batch) for micro in pieces], what)


def _backward(model: CLModel, method: Method, pieces: list[Batch], shares: list[float], what: str) -> Losses:
    """Forward and backward of each micro-batch of ``pieces``, its loss scaled by its share; the shared sums."""
    losses: list[torch.Tensor] = []
    task_losses: list[torch.Tensor] = []
    terms: dict[str, list[torch.Tensor]] = {}
    for micro, share in zip(pieces, shares, strict=True):
        part, part_loss, part_terms = batch_loss(model, method, micro, what)
        (part * share).backward()
        losses.append(part.detach() * share)
        task_losses.append(part_loss.detach() * share)
        for name, term in part_terms.items():
            terms.setdefault(name, []).append(term.detach() * share)
    return (torch.stack(losses).sum(), torch.stack(task_losses).sum(),  # share-weighted: the whole batch's values
            {name: torch.stack(values).sum() for name, values in terms.items()})


def data_parallel_step(model: CLModel, method: Method, batch: Batch, accum: int, params: Sequence[torch.Tensor],
                       dist: Dist, what: str) -> Losses:
    """This rank's part of a step on the global ``batch``: micro-batches rank, rank+N, ... of ``batch`` cut into
    N × ``accum`` (each scaled by its share of the global batch, as :func:`accumulate` does), then the gradients
    and the losses summed over the ranks. Returns the global batch's loss, task loss and terms (every rank the
    same), the gradients of ``params`` being the one-process mean gradient."""
    pieces = micro_batches(batch, accum * dist.world_size)
    mine = dist.shard(pieces)
    if mine:
        loss, task_loss, terms = _backward(model, method, mine, [len(m) / len(batch) for m in mine], what)
    else:  # a short last batch, fewer micro-batches than ranks: piece 0 at weight 0 adds nothing, and this rank
        # reduces the same loss terms and gradients as the others (a missing one would leave them waiting)
        loss, task_loss, terms = _backward(model, method, pieces[:1], [0.0], what)
    total = dist.sum(torch.stack([loss.float(), task_loss.float(), *(t.float() for t in terms.values())]))
    dist.all_reduce_grads(params)  # before after_backward: a method edits (and adds to) the global gradient
    return total[0], total[1], dict(zip(terms, total[2:], strict=True))


def train_task(model: CLModel, method: Method, ctx: CellContext, index: int, what: str = "method",
               on_step: StepObserver | None = None, step: int = 0) -> dict[str, Any]:
    """All phases of task ``index``; returns per phase its seconds, steps, examples/s (and tokens/s) and the
    mean loss of each epoch, and ``phases``: the phase names in run order. ``what`` names the method in a
    boundary error (see :func:`method_label`). ``on_step`` is called after every ``ctx.train.log_every``-th
    optimizer step, counted across the cell from ``step`` (the steps before this task); on other steps it
    costs nothing. A step takes ``train.batch_size`` examples (the global batch), in ``train.grad_accum``
    micro-batches (see :func:`accumulate`)."""
    task, train_tasks = ctx.order[index], method.train_tasks(index)
    stats: dict[str, Any] = {}
    model.train()
    group: tuple[str, Any] = ("", None)  # the optimizer of the phase group going on (Phase.optimizer_group)
    for p_i, phase in enumerate(method.phases(task, index)):
        method.before_phase(phase, task, index)
        params = method.parameters(model, phase)
        if not phase.optimizer_group or group[0] != phase.optimizer_group:
            group = (phase.optimizer_group, make_optimizer(params, phase, method.sparse_coordinates(phase),
                                                           cell_masters(ctx), ctx.train.fused))
        run = _PhaseRun(model, method, ctx, phase, p_i, index, train_tasks, group[1], params, what, on_step, step)
        t0, tokens0 = time.perf_counter(), model.tokens_seen
        epoch_loss = run.epochs()
        seconds, step = time.perf_counter() - t0, run.step
        if ctx.dist.active:  # each rank counted the tokens of its micro-batches
            model.tokens_seen = tokens0 + int(ctx.dist.sum(torch.tensor(model.tokens_seen - tokens0,
                                                                        device=ctx.device)))
        entry: dict[str, Any] = {"seconds": seconds, "steps": run.steps,
                                 "trainable": sum(p.numel() for p in params),  # the phase's trained parameters
                                 "examples_per_s": run.examples / max(seconds, 1e-9),
                                 "loss": epoch_loss}  # the mean loss of each epoch: a loss curve without a logger
        if model.tokens_seen > tokens0:
            entry["tokens_per_s"] = (model.tokens_seen - tokens0) / max(seconds, 1e-9)
        stats[phase.name] = entry
    stats["phases"] = [name for name, v in stats.items() if isinstance(v, dict)]  # result.json sorts keys
    ctx.dist.broadcast_buffers(model)
    return stats


@dataclass
class _PhaseRun:
    """One phase of a task being trained: its epochs (:meth:`epochs`) and their steps (:meth:`epoch`), counting
    the cell's optimizer steps from ``step``."""

    model: CLModel
    method: Method
    ctx: CellContext
    phase: Phase
    p_i: int
    index: int
    train_tasks: Any  # Method.train_tasks(index): the tasks whose data this task trains on
    opt: Any
    params: list[Tensor]
    what: str
    on_step: StepObserver | None
    step: int
    steps: int = 0
    examples: int = 0
    first: float | None = None  # the blow-up reference: the loss the phase starts from (its first step's)

    def epochs(self) -> list[float | None]:
        """Every epoch of the phase: each one's mean loss; raises Diverged on a blow-up (train.diverge_factor)."""
        phase, blowup, task = self.phase, self.ctx.train.diverge_factor, self.ctx.order[self.index]
        schedule = MultiStepLR(torch_optimizer_of(self.opt), list(phase.lr_milestones), phase.lr_gamma) \
            if phase.lr_milestones else None
        epoch_loss: list[float | None] = []
        for epoch in range(phase.epochs):
            total, n = self.epoch(epoch)
            self.method.after_epoch(phase, epoch)
            if schedule is not None:
                schedule.step()
            mean = total / n if n else None
            epoch_loss.append(mean)
            if blowup and mean is not None and self.first is not None and mean > blowup * self.first:
                raise _diverged(f"epoch mean loss {mean:.4g} > {blowup:g} × {self.first:.4g} (the phase's first step's "
                                f"loss, at least {LOSS_FLOOR:g}; train.diverge_factor)", task, self.index, phase.name,
                                epoch, self.step, mean, self.first)
        return epoch_loss

    def epoch(self, epoch: int) -> tuple[float, int]:
        """One epoch's optimizer steps: the sum of their losses and their count. The step is written out here, in
        one loop over locals: it is the harness's whole per-step cost (benchmarks/bench_overhead.py)."""
        model, method, ctx, opt, params, what, on_step = (self.model, self.method, self.ctx, self.opt, self.params,
                                                          self.what, self.on_step)
        phase, dist, accum, clip = self.phase, ctx.dist, ctx.train.grad_accum, ctx.train.grad_clip
        every = ctx.train.log_every if on_step is not None else 0
        # a batch not already on the device (a split kept on the host) is copied there; on the CPU it is used as is
        move, parallel = ctx.device.type != "cpu", dist.active
        after_backward, after_step = _own_hook(method, "after_backward"), _own_hook(method, "after_step")
        step, total, n, value = self.step, 0.0, 0, math.nan
        # the step losses read at once every `sync` steps (train.sync_every): every step on the CPU, where reading one
        # is cheap; on an accelerator each read waits for the device to finish the step
        sync, pending = ctx.train.sync_every or (1 if ctx.device.type == "cpu" else SYNC_EVERY), []
        for batch in _epoch_batches(ctx, self.train_tasks, ctx.train.batch_size, self.index, self.p_i, epoch):
            if move:
                batch = batch.to(ctx.device)
            opt.zero_grad(set_to_none=True)
            if parallel:  # the losses summed over the ranks: every rank diverges at the same step or none
                loss, task_loss, terms = data_parallel_step(model, method, batch, accum, params, dist, what)
            elif accum == 1:
                loss, task_loss, terms = batch_loss(model, method, batch, what)
                loss.backward()
            else:
                loss, task_loss, terms = accumulate(model, method, batch, accum, what)
            step += 1
            logged = every and step % every == 0
            pending.append(loss.detach())
            if len(pending) >= sync or logged:  # the host sync: the non-finite check and the epoch's mean loss
                total, n, value = self._drain(pending, epoch, step, total, n)
            if after_backward is not None:
                after_backward()
            norm = None
            if clip > 0:
                norm = torch.nn.utils.clip_grad_norm_(params, clip)
            elif logged:
                norm = grad_norm(params)
            opt.step()
            if after_step is not None:
                after_step()
            self.examples += batch.y.shape[0]  # not len(): Tensor.__len__ is Python
            if logged:
                values = {"loss": value, "loss/task": float(task_loss.detach())}
                values.update((f"loss/{name}", float(term.detach())) for name, term in terms.items())
                values.update(lr=float(opt.param_groups[0]["lr"]), grad_norm=float(norm))
                on_step(phase.name, epoch, step, values)
        if pending:
            total, n, value = self._drain(pending, epoch, step, total, n)
        self.steps += step - self.step
        self.step = step
        return total, n

    def _drain(self, pending: list[Tensor], epoch: int, step: int, total: float, n: int) -> tuple[float, int, float]:
        """Read the losses of the steps ``pending`` (the last of them the cell's step ``step``) in one host sync:
        raise :class:`Diverged` naming the first non-finite one's step, else add them to the epoch's ``total`` and
        count ``n``; returns those and the last loss. Empties ``pending``."""
        values = [pending[0].item()] if len(pending) == 1 else torch.stack([v.float() for v in pending]).tolist()
        pending.clear()
        first_step = step - len(values) + 1
        for k, value in enumerate(values):
            if not math.isfinite(value):
                raise _diverged(f"loss became {value}", self.ctx.order[self.index], self.index, self.phase.name, epoch,
                                first_step + k, value, None)
            if self.first is None:
                self.first = max(value, LOSS_FLOOR)
            total += value
            n += 1
        return total, n, values[-1]


def _diverged(what: str, task: str, index: int, phase: str, epoch: int, step: int, loss: float,
              reference: float | None) -> Diverged:
    """The :class:`Diverged` of a blow-up on ``task`` (epoch counted from 0, ``step`` the cell's optimizer step)."""
    where = {"task": task, "index": index, "phase": phase, "epoch": epoch + 1, "step": step,
             "loss": loss if math.isfinite(loss) else str(loss), "reference": reference}
    return Diverged(f"{what} on task {task!r} (task {index + 1}, phase {phase}, epoch {epoch + 1}, step {step})",
                    where)


def epoch_losses(stats: dict[str, Any], step: int) -> list[dict[str, Any]]:
    """The mean loss of every epoch of a task's phases, in run order, each at the cell's optimizer step where that
    epoch ended (``step``: the step the task ended; a phase's epochs take equal shares of its steps)."""
    out: list[dict[str, Any]] = []
    start = step - sum(int(stats[p].get("steps", 0)) for p in stats.get("phases", ()))
    for phase in stats.get("phases", ()):
        losses, steps = stats[phase].get("loss", []), int(stats[phase].get("steps", 0))
        for e, loss in enumerate(losses):
            out.append({"phase": phase, "epoch": e, "step": start + steps * (e + 1) // len(losses),
                        "loss": loss})
        start += steps
    return out


def steps_done(timings: list[dict[str, Any]]) -> int:
    """Optimizer steps of the tasks whose timings these are (to go on counting after a resume)."""
    return sum(int(v.get("steps", 0)) for t in timings for v in t.values() if isinstance(v, dict))


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


def cell_device(train: TrainConfig, dist: Dist) -> torch.device:
    """The device this process runs the cell on, with the cell's TF32 setting (process-wide switches, set for each
    cell from its own ``train.tf32``)."""
    device = dist.device(resolve_device(train.device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = train.tf32
    return device


def tensor_bytes(state: Any) -> int:
    """The bytes of every tensor in a (nested) state_dict."""
    if isinstance(state, Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(tensor_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(tensor_bytes(v) for v in state)
    return 0


def release(cell: Cell) -> None:
    """Free what the finished cell held before the next one loads: its model, method and optimizer sit in reference
    cycles (a transformers model, a LoRA hook, a torch optimizer's patched ``step``) that only the cyclic collector
    frees, and a GPU's cache keeps their blocks. A full collection scans every object of the process (~170 ms with
    transformers loaded); a process that runs cells freezes what it loaded first (:func:`clbench._exec.worker.
    bootstrap`, ``clbench run``), after which it scans only the cell's own objects (~0.1 ms). Unfrozen (clbench
    as a library), only cells on a GPU pay for it."""
    on_gpu = resolve_device(cell.train.device).type == "cuda"
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
        copy = dataclasses.replace(found, method=cell.method, config={**found.config, "sweep": dict(cell.sweep)},
                                   path=None)
        cell.directory.mkdir(parents=True, exist_ok=True)
        if found.path is not None and (found.path.parent / FOOTPRINT_FILE).exists():
            atomic_write_with(cell.directory / FOOTPRINT_FILE, lambda tmp: shutil.copyfile(
                found.path.parent / FOOTPRINT_FILE, tmp))
        copy.path = write_result(copy, cell.directory)
        return copy

    def changes(self, result: CellResult, cell: Cell) -> list[str] | None:
        """How the code and data here differ from what made ``result`` (see :func:`clbench._core.provenance.changes`)."""
        return provenance.changes(result.provenance, result.metrics if result.status == "complete" else None,
                                  self.regs, cell, self.code_record(cell), result.tasks)

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
            raise ClbenchError(f"{cell.directory}: rank {self.dist.rank} reads another result there than rank 0; "
                               "--out must be one folder every rank sees")
        if done is not None:
            return done
        directory = cell.directory
        directory.mkdir(parents=True, exist_ok=True)
        state = _CellState(cell)
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
                self._failed(cell, state, f"{type(exc).__name__}: {exc}{where}")
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
        state = _CellState(cell)
        state.fail("failed", error)
        return self._stop_if_failed(cell, self._finish(cell, state))

    def _stop_if_failed(self, cell: Cell, result: CellResult) -> CellResult:
        if self.fail_fast and result.status == "failed":
            raise FailFast(f"stopped at the first failed cell (--fail-fast): {cell.key}: {result.error} "
                           f"(traceback in {cell.directory / ERROR_LOG})")
        return result

    def _failed(self, cell: Cell, state: _CellState, error: str) -> None:
        state.fail("failed", error)
        if not self.dist.is_main:
            return
        with contextlib.suppress(OSError):  # a full disk must not hide the cell's own error
            atomic_write_text(cell.directory / ERROR_LOG, traceback.format_exc())

    def _finish(self, cell: Cell, state: _CellState) -> CellResult:
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

    def _build(self, cell: Cell, stream: Stream, order: list[str], device: torch.device
               ) -> tuple[CLModel, Method]:
        ctx = CellContext(stream=stream, order=order, train=cell.train, device=device, seed=cell.seed,
                          options=dict(cell.options), dist=self.dist)
        seed_torch(derive_seed(cell.seed, 0))
        model = build_model(self.regs, cell, stream).to(device)
        method = build_method(self.regs, cell, ctx)
        method.setup(model)
        return model, method

    def _resume(self, cell: Cell, state: _CellState, model: CLModel, method: Method, device: torch.device
                ) -> tuple[CLModel, Method, int]:
        """The model and method to go on with and the tasks already done, from the cell's checkpoint (every rank
        must agree); one that does not fit starts the cell over from fresh objects."""
        start = state.load_checkpoint(model, method)
        starts = self.dist.gather(start)
        if len(set(starts)) > 1:
            raise ClbenchError(f"{state.path}: the ranks would resume from different tasks {starts}; "
                               "--out must be one folder every rank sees")
        if start < 0:  # a checkpoint that did not fit may have half-loaded: start from fresh objects
            assert state.stream is not None
            model, method = self._build(cell, state.stream, state.tasks, device)
            start = 0
        elif start and self.dist.is_main:
            tqdm.write(f"resumed {cell.key} from its checkpoint: {start} of {len(state.tasks)} tasks done",
                       file=sys.stderr)
        return model, method, start

    def _run(self, cell: Cell, state: _CellState) -> None:
        train = cell.train
        dist = self.dist
        device = cell_device(train, dist)
        stream = build_stream(self.regs, cell)
        order = stream.order(cell.order)
        state.tasks, state.scenario, state.stream = order, stream.scenario, stream
        model, method = self._build(cell, stream, order, device)
        state.base = fingerprints(model)  # what a fresh build reproduces: checkpoints leave out what still equals it
        state.env = environment(str(device), train, dict(self._versions), world_size=dist.world_size)

        model, method, start = self._resume(cell, state, model, method, device)
        ctx = method.ctx
        what = method_label(self.regs, cell)
        kind = self.regs.methods.get(cell.parts[0]).footprint_kind  # the first part owns the footprint
        self._notify("clbench_cell_start", cell=cell, resumed_from=start)
        bar = tqdm(total=len(order), initial=start, desc=cell.key, leave=False, disable=not self.progress,
                   unit="task")
        saved = time.perf_counter()  # the cell's start or its last checkpoint (train.checkpoint_every_s)
        step = steps_done(state.task_timings)  # optimizer steps of the tasks done (by a checkpoint, on resume)
        if start == 0:  # the untrained model's scores: FWT's reference b_j (a resumed cell has them)
            state.evaluate_untrained(lambda: evaluate(model, method, stream, order, train, device, dist)[0])
        with contextlib.closing(bar):
            for index in range(start, len(order)):
                task = order[index]
                self._notify("clbench_task_start", cell=cell, task=task, index=index)
                seed_torch(derive_seed(cell.seed, index + 1))
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                t0 = time.perf_counter()
                method.before_task(task, index)
                stats = train_task(model, method, ctx, index, what, self._step_observer(cell, task, index), step)
                step += steps_done([stats])
                method.after_task(task, index)
                state.footprints.append(check_footprint(method.footprint(task, index), kind, what))
                t1 = time.perf_counter()
                row, per_example = evaluate(model, method, stream, order, train, device, dist)
                stats.update(task=task, train_s=t1 - t0, eval_s=time.perf_counter() - t1)
                if device.type == "cuda":
                    stats["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)  # this task's peak
                state.record(row, per_example, stats)
                state.report = check_report(method.report(), what)
                # after the last task the result file is written at once
                due = index < len(order) - 1 and time.perf_counter() - saved >= train.checkpoint_every_s
                if dist.broadcast(due):  # rank 0's clock decides: every rank goes on knowing the file is written
                    if dist.is_main:
                        state.save_checkpoint(model, method, what)
                    dist.barrier()
                    saved = time.perf_counter()
                self._notify("clbench_task_end", cell=cell, task=task, index=index, accuracy_row=row,
                             tasks=list(order), step=step, epochs=epoch_losses(stats, step))
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

    diff = config_diff(identity(result.config, result.stream, result.order, result.seed),
                       identity(cell.resolved(), cell.stream, cell.order, cell.seed))
    return "holds a result for other settings: " + ("; ".join(diff) or "(same settings, other hash)")


@torch.no_grad()
def fingerprint(tensor: Tensor) -> list[float]:
    """Three float64 reductions of a tensor (its sum, its norm, the sum of every 97th entry), accumulated without a
    float64 copy: any change training or a merge makes to a value changes them, short of an exact cancellation."""
    t = tensor.detach()
    if not t.is_floating_point():
        t = t.double()
    flat = t.reshape(-1)
    return [float(flat.sum(dtype=torch.float64)), float(torch.linalg.vector_norm(flat, dtype=torch.float64)),
            float(flat[::97].sum(dtype=torch.float64))]


def fingerprints(model: nn.Module) -> dict[str, list[float]]:
    return {name: fingerprint(t) for name, t in model.state_dict().items()}


class _CellState:
    """What a cell has produced so far; checkpointed after every task."""

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.tasks: list[str] = []
        self.rows: list[list[float]] = []
        self.examples: list[list[Entry]] | None = []  # per-example scores of each row; None: a resume lost them
        self.initial: list[float] | None = None  # the untrained model's row (FWT's reference)
        self.initial_s = 0.0
        self.method_state_bytes: int | None = None  # what the method keeps after the last task (its state_dict)
        self.footprints: list[fps.TaskFootprint] = []
        self.task_timings: list[dict[str, Any]] = []
        self.report: dict[str, Any] = {}
        self.env: dict[str, Any] = {}
        self.status = "failed"
        self.error: str | None = "the cell did not start"
        self.divergence: dict[str, Any] | None = None  # where training blew up (status "diverged")
        self.scenario: str | None = None  # the stream's test-time scenario (Stream.scenario)
        self.stream: Stream | None = None  # for the data files it read (provenance)
        self.code: tuple[dict[str, str], dict[str, str]] | None = None  # provenance.code_record, set by the runner
        self.started = time.perf_counter()
        self.base: dict[str, list[float]] = {}  # fingerprints of a fresh build's state entries

    @property
    def path(self) -> Path:
        return self.cell.directory / CHECKPOINT_FILE

    def fail(self, status: str, error: str) -> None:
        self.status, self.error = status, error

    def save_checkpoint(self, model: CLModel, method: Method, what: str = "the method") -> None:
        payload = {
            "config_hash": self.cell.config_hash,
            "code": self.trained_by(),
            "done": len(self.rows),
            "rows": self.rows,
            "examples": self.examples,
            "initial": self.initial,
            "timings": self.task_timings,
            "report": self.report,
            **self._changed_weights(model),
            "method": method.state_dict(),
            "footprints": fps.to_tensors(self.footprints),
            "masters": cell_masters(method.ctx).state_dict({id(p): n for n, p in model.named_parameters()}),
        }
        # not fsynced: a killed process keeps it (the page cache survives), and the rare checkpoint a machine
        # crash garbles is read as absent below: the cell starts over, it does not fail
        try:
            atomic_write_with(self.path, lambda tmp: torch.save(payload, tmp), durable=False)
        except OSError:
            raise
        except Exception as exc:  # pickling: an object in a state_dict that torch.save cannot write
            raise PluginError(f"{what}: the resume checkpoint cannot hold its state_dict() ({type(exc).__name__}: "
                              f"{exc}); return tensors, numbers, strings and lists or dicts of them") from exc

    def _changed_weights(self, model: CLModel) -> dict[str, Any]:
        """The model's state entries that differ from a fresh build's (``self.base``) under ``model``, and under
        ``unchanged`` the fingerprints of the others, left out: a LoRA cell on a frozen 8B base checkpoints its
        adapters, not 16 GB of base weights it never moved."""
        changed, unchanged = {}, {}
        for name, tensor in model.state_dict().items():
            mark = fingerprint(tensor)
            if self.base.get(name) == mark:
                unchanged[name] = mark
            else:
                changed[name] = tensor
        return {"model": changed, "unchanged": unchanged}

    def _load_weights(self, model: CLModel, payload: dict[str, Any]) -> None:
        """The checkpoint's changed weights into ``model``; the ones it left out must be this build's own."""
        unchanged = payload.get("unchanged", {})
        missing, unexpected = model.load_state_dict(payload["model"], strict=not unchanged)
        moved = [n for n in unchanged if self.base.get(n) != unchanged[n]]
        if set(missing) != set(unchanged) or unexpected or moved:
            raise ValueError(f"its weights do not match this build (missing {sorted(set(missing) - set(unchanged))[:5]}, "
                             f"unexpected {sorted(unexpected)[:5]}, left out with other values {moved[:5]})")

    def load_checkpoint(self, model: CLModel, method: Method) -> int:
        """Tasks done by the checkpoint (0: none or unusable, with a warning), or -1 when it was for this
        cell but did not load into it (missing keys, other shapes): the caller rebuilds model and method."""
        if not self.path.exists():
            return 0
        try:
            payload = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated or garbled: torch raises RuntimeError, EOFError, UnpicklingError...
            warnings.warn(f"{self.path}: unreadable checkpoint ({type(exc).__name__}); the cell starts over",
                          stacklevel=2)
            return 0
        recorded = payload.get("config_hash") if isinstance(payload, dict) else None
        if recorded != self.cell.config_hash:
            warnings.warn(f"{self.path}: checkpoint of other settings (config hash {str(recorded)[:12]}, this cell "
                          f"{self.cell.config_hash[:12]}); the cell starts over", stacklevel=2)
            return 0
        code, now = payload.get("code"), self.trained_by()
        if code is not None and code != now:
            moved = sorted(k for k in set(code) | set(now) if code.get(k) != now.get(k))
            warnings.warn(f"{self.path}: checkpoint made by other code ({', '.join(moved)}); the cell starts over",
                          stacklevel=2)
            return 0
        try:
            method.load_state_dict(payload["method"])  # first: it may rebuild structure the weights need
            self._load_weights(model, payload)
            cell_masters(method.ctx).load_state_dict(payload.get("masters", {}), dict(model.named_parameters()))
            self.rows = payload["rows"]
            self.examples = payload.get("examples")  # None from a checkpoint written before they were kept
            self.initial = payload.get("initial")
            self.task_timings = payload["timings"]
            self.report = payload["report"]
            self.footprints = fps.from_tensors(payload["footprints"])
            done = int(payload["done"])
            if not 0 < done == len(self.rows) == len(self.footprints) < len(self.tasks) + 1:
                raise ValueError(f"it records {done} tasks done, {len(self.rows)} rows, {len(self.footprints)} footprints")
        except Exception as exc:
            first = " ".join(str(exc).split())[:400]  # torch lists the missing keys and shapes after a header
            warnings.warn(f"{self.path}: checkpoint does not fit this cell ({type(exc).__name__}: {first}); "
                          "the cell starts over", stacklevel=2)
            self.rows, self.task_timings, self.report, self.footprints = [], [], {}, []
            self.examples, self.initial = [], None
            return -1
        return done

    def result(self, regs: Registries, write: bool = True) -> CellResult:
        """The result so far; with ``write`` (the process that writes: rank 0) its metrics computed and its
        footprints saved, else the matrix and status only."""
        cell = self.cell
        T = len(self.tasks)
        matrix: list[list[float | None]] = [list(r) for r in self.rows] + [[None] * T for _ in range(T - len(self.rows))]
        metrics: dict[str, float | None] = {}
        errors: dict[str, str] = {}
        footprints = None
        if self.status == "complete" and write:
            inp = MetricInput.with_settings(cell.metrics, matrix=[list(map(float, r)) for r in self.rows],
                                            initial=self.initial,
                                            footprints=self.footprints, report=self.report, tasks=self.tasks)
            # the footprint file (serialized, hashed, written: ~11 ms for a 10-task dense cell, GIL mostly
            # released) is written beside the metrics (~25 ms of BLAS) rather than after them
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clbench-footprints") as pool:
                saving = pool.submit(fps.save, self.footprints, cell.directory / FOOTPRINT_FILE)
                metrics, errors = compute_metrics(regs.metrics.values(), inp, regs.metrics.origins)
                try:
                    footprints = saving.result()
                except OSError as exc:  # a full disk: the numbers stay in result.json, the cell is not complete
                    self.fail("failed", f"cannot write {cell.directory / FOOTPRINT_FILE}: {exc.strerror or exc}")
        return CellResult(
            method=cell.method,
            stream=cell.stream,
            order=cell.order,
            seed=cell.seed,
            tasks=self.tasks or ["(not loaded)"],
            accuracy_matrix=matrix if self.tasks else [[None]],
            status=self.status,
            metrics=metrics,
            config=cell.resolved(),
            env=self.env,
            timings={"total_s": time.perf_counter() - self.started, "initial_eval_s": self.initial_s,
                     "tasks": self.task_timings},
            report=self.report,
            error=None if self.status == "complete" else self.error,
            config_hash=cell.config_hash,
            metric_errors=errors,
            footprints=footprints,
            scenario=self.scenario,
            divergence=self.divergence if self.status == "diverged" else None,
            provenance=self.provenance() if write else None,
            examples=self.examples if self.examples and len(self.examples) == len(self.rows) else None,
            initial_row=self.initial,
            compute=self.compute(),
        )

    def record(self, row: list[float], per_example: list[Tensor | None], stats: dict[str, Any]) -> None:
        """A finished task's accuracy row, per-example scores and timings."""
        self.rows.append(row)
        if self.examples is not None:
            self.examples.append(encode_row(per_example))
        self.task_timings.append(stats)

    def finish(self, method: Method) -> None:
        """The last task is done: what the method keeps, and the cell is complete."""
        self.method_state_bytes = tensor_bytes(method.state_dict())
        self.status = "complete"

    def evaluate_untrained(self, row: Callable[[], list[float]]) -> None:
        """Record the untrained model's row (``row()``) and what it took."""
        t0 = time.perf_counter()
        self.initial = row()
        self.initial_s = time.perf_counter() - t0

    def compute(self) -> dict[str, Any] | None:
        """What the cell cost beyond its timings: the method's state after the last task and the most parameters a
        phase trained (None before a task finished)."""
        trainable = [v["trainable"] for t in self.task_timings for v in t.values() if isinstance(v, dict)
                     and "trainable" in v]
        if self.method_state_bytes is None and not trainable:
            return None
        return {"method_state_bytes": self.method_state_bytes, "trainable_parameters": max(trainable, default=None)}

    def trained_by(self) -> dict[str, str]:
        """The code digests of the method, model and stream (not the metrics: they run after the last task): what
        a checkpoint must have been written by to be resumed."""
        return {k: v for k, v in (self.code[0] if self.code else {}).items() if not k.startswith("metric:")}

    def provenance(self) -> dict[str, Any] | None:
        """What made this result beyond its settings (:mod:`clbench._core.provenance`); None before the stream loaded."""
        if self.code is None:
            return None
        code, versions = self.code
        read = provenance.stream_files(self.stream, self.stream.opened) if self.stream is not None else []
        return {"versions": versions, "code": code, "data": provenance.data_digests(read, self.cell)}
