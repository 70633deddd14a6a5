"""The training loops: one task's phases, each phase's epochs, each epoch's optimizer steps.

Each step is the phase's :class:`~clbench._exec.engine.StepEngine` (eager, or recorded once and replayed under
``train.capture``); the loop reads its loss between the backward and the update. The runner drives it for a cell;
a blow-up (a non-finite loss, an epoch mean past ``train.diverge_factor``) ends it as
:class:`~clbench.errors.Diverged`, naming the exact step.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor
from torch.optim.lr_scheduler import MultiStepLR

from clbench._core.boundary import CheckedMethod
from clbench._core.optim import Masters, make_optimizer, torch_optimizer_of
from clbench._exec.capture import CudaGraph, Graph
from clbench._exec.compute import ExampleCounter, compute_budget
from clbench._exec.engine import Captured, StepEngine, grad_norm
from clbench._exec.stats import PhaseStats, TaskStats
from clbench.data import Batch, batches, mixed_batches
from clbench.errors import ClbenchError, ConfigError, Diverged
from clbench.method import MASTERS, CellContext, Method, Phase, StashKey
from clbench.model import CLModel

# The least blow-up reference (train.diverge_factor): a phase that starts on a task already learned (joint training
# after its first task: a first step of 4e-4) has a loss that may rise a hundredfold and stay far below a blow-up.
LOSS_FLOOR = 1.0
SYNC_EVERY = 32  # train.sync_every's default on an accelerator: steps between reads of the step losses


def _epoch_batches(
    ctx: CellContext, tasks: list[str], batch_size: int, *salt: int, mix: bool = False
) -> Iterator[Batch]:
    """One epoch's batches of ``tasks``, on the cell's device where the stream keeps the split there
    (``train.device_data``); the same batches, in the same order, as from the CPU. ``mix`` (Method.mix_tasks, with
    one head shared by every task): several tasks' batches drawn from their union, each mixing tasks. A stream with
    an ``augment`` has it applied to every batch, from a generator of its own (the shuffle's draws are unchanged);
    the batch keeps its inputs as stored in ``raw``."""
    augment = ctx.stream.augment
    drawn = _drawn_batches(ctx, tasks, batch_size, *salt, mix=mix)
    if augment is None:
        return drawn
    g = ctx.generator(*salt, -3)
    return (Batch(augment(cast(Tensor, b.x), g), b.y, b.task, cast(Tensor, b.x)) for b in drawn)


def _drawn_batches(
    ctx: CellContext, tasks: list[str], batch_size: int, *salt: int, mix: bool = False
) -> Iterator[Batch]:
    fraction = ctx.train.device_data
    if len(tasks) == 1:  # the split's own generator: no second generator frame a step
        return batches(
            ctx.stream.on_device(tasks[0], "train", ctx.device, fraction), batch_size, tasks[0], ctx.generator(*salt)
        )
    if mix:  # named the newest task: a shared head does not read a batch's task
        splits = [ctx.stream.on_device(t, "train", ctx.device, fraction) for t in tasks]
        return mixed_batches(splits, batch_size, tasks[-1], ctx.generator(*salt, -2))
    # Joint training with a head per task: every batch holds one task; batches of all tasks interleaved at random.
    pool = [
        b
        for i, t in enumerate(tasks)
        for b in batches(ctx.stream.on_device(t, "train", ctx.device, fraction), batch_size, t, ctx.generator(*salt, i))
    ]
    return (pool[i] for i in torch.randperm(len(pool), generator=ctx.generator(*salt, -1)).tolist())


def task_phases(
    model: CLModel, method: Method, ctx: CellContext, index: int
) -> Iterator[tuple[int, Phase, list[torch.nn.Parameter], Any]]:
    """Each phase of task ``index``, ready to train: ``(position, phase, its parameters, its optimizer)``, the
    method's ``before_phase`` called. Consecutive phases of one non-empty ``optimizer_group`` share the optimizer
    built for the first of them; another phase gets a new one, built after the generator lets the previous go
    (a caller that holds it across iterations holds both)."""
    task = ctx.order[index]
    group: tuple[str, Any] = ("", None)
    for position, phase in enumerate(method.phases(task, index)):
        method.before_phase(phase, task, index)
        params = method.parameters(model, phase)
        if not phase.optimizer_group or group[0] != phase.optimizer_group:
            group = ("", None)
            group = (
                phase.optimizer_group,
                make_optimizer(
                    params,
                    phase,
                    method.sparse_coordinates(phase),
                    cell_masters(ctx),
                    ctx.train.fused,
                    fp32_masters=ctx.train.fp32_masters,
                    capturable=ctx.train.capture,
                ),
            )
        yield position, phase, params, group[1]


StepObserver = Callable[[str, int, int, dict[str, float]], None]
"""``on_step(phase, epoch, step, values)``: what :func:`train_task` calls on a logged step (see clbench_step)."""


def step_shares(budget: int, epochs: Sequence[int], setting: str = "train.steps_per_task") -> list[int]:
    """``budget`` optimizer steps (or examples: ``setting``) shared among phases in proportion to their ``epochs``
    (largest remainder, ties to the earlier phase; a phase of 0 epochs gets none, every other at least one)."""
    weights = [max(0, e) for e in epochs]
    trained = [i for i, w in enumerate(weights) if w]
    if len(trained) > budget:
        raise ClbenchError(f"{setting}={budget} is fewer than the task's {len(trained)} training phases")
    total = sum(weights)
    exact = [budget * w / total if total else 0.0 for w in weights]
    shares = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: (-(exact[i] - shares[i]), i))[: budget - sum(shares)]:
        shares[i] += 1
    for i in trained:  # at least one step a trained phase, taken from the largest share
        if shares[i] == 0:
            shares[max(range(len(shares)), key=lambda j: (shares[j], -j))] -= 1
            shares[i] = 1
    return shares


def cell_masters(ctx: CellContext) -> Masters:
    """The fp32 masters of the cell's low-precision weights (none for an fp32 model), kept from phase to phase and
    task to task, and in the checkpoint."""
    return ctx.stash.setdefault(MASTERS, Masters())


def train_task(
    model: CLModel,
    method: Method | CheckedMethod,
    ctx: CellContext,
    index: int,
    on_step: StepObserver | None = None,
    step: int = 0,
) -> TaskStats:
    """All phases of task ``index``; returns per phase its seconds, steps, examples/s (and tokens/s) and the
    mean loss of each epoch. ``method`` as a :class:`CheckedMethod` names it in a boundary error. ``on_step`` is
    called after every ``ctx.train.log_every``-th optimizer step, counted across the cell from ``step`` (the
    steps before this task); on other steps it costs nothing. A step takes ``train.batch_size`` examples (the
    global batch), in ``train.grad_accum`` micro-batches (see :func:`~clbench._exec.engine.accumulate`)."""
    checked = method if isinstance(method, CheckedMethod) else CheckedMethod(method)
    train_tasks = checked.method.train_tasks(index)
    stats = TaskStats()
    model.train()
    counter = budget_counter(ctx)
    budget = examples_budget(ctx, index) if counter is not None else ctx.train.steps_per_task
    phases = checked.method.phases(ctx.order[index], index)
    # under train.compute_epochs a phase on the method's own objective alone (DGR's generator: another network,
    # which the counter does not see) runs its own epochs outside the budget; the others share it
    counted = [counter is None or p.task_loss for p in phases]
    epochs = [p.epochs if c else 0 for p, c in zip(phases, counted, strict=True)]
    setting = "train.steps_per_task" if counter is None else "train.compute_epochs"
    shares = step_shares(budget, epochs, setting) if budget else None
    for p_i, phase, params, opt in task_phases(model, checked.method, ctx, index):
        limit = shares[p_i] if shares is not None and counted[p_i] else None
        spends = counter if limit is not None else None
        engine = StepEngine(model, checked, opt, params, ctx.train, ctx.dist, phase.task_loss)
        run = _PhaseRun(model, checked, ctx, phase, p_i, index, train_tasks, engine, on_step, step, limit, spends)
        if ctx.train.capture:
            run.captured = engine.captured(ctx.stash.get(GRAPH) or CudaGraph)
        t0, tokens0 = time.perf_counter(), model.tokens_seen
        epoch_loss = run.epochs()
        seconds, step = time.perf_counter() - t0, run.step
        if ctx.dist.active:  # each rank counted the tokens of its micro-batches
            model.tokens_seen = tokens0 + int(
                ctx.dist.sum(torch.tensor(model.tokens_seen - tokens0, device=ctx.device))
            )
        tokens = model.tokens_seen - tokens0
        stats.add(
            PhaseStats(
                phase.name,
                seconds,
                run.steps,
                sum(p.numel() for p in params),
                run.examples / max(seconds, 1e-9),
                epoch_loss,
                tokens / max(seconds, 1e-9) if tokens > 0 else None,
            )
        )
    ctx.dist.broadcast_buffers(model)
    return stats


COUNTER: StashKey[ExampleCounter] = StashKey()
"""``ctx.stash`` key of the runner's :class:`~clbench._exec.compute.ExampleCounter`: what ``train.compute_epochs``
spends."""


def examples_budget(ctx: CellContext, index: int) -> int:
    """Task ``index``'s examples with gradients under ``train.compute_epochs=E``: E × its training examples (what E
    epochs of plain fine-tuning forward; a joint or replay method's other data does not enlarge it), at least 1."""
    return compute_budget(ctx.train.compute_epochs, len(ctx.stream.data(ctx.order[index]).train))


def budget_counter(ctx: CellContext) -> ExampleCounter | None:
    """The counter a task's steps spend under ``train.compute_epochs`` (None: that setting is 0). Refused where
    the count cannot be the budget: several processes (each counts its own micro-batches, and every rank must stop at
    the same step) or no counter attached (a task trained outside the runner)."""
    if not ctx.train.compute_epochs:
        return None
    if ctx.dist.active:
        raise ConfigError(
            "train.compute_epochs stops a task by one process's count of the examples its model forwarded: it "
            "cannot run with --nproc > 1 (use train.steps_per_task)"
        )
    counter = ctx.stash.get(COUNTER)
    if counter is None:
        raise ClbenchError("train.compute_epochs needs the runner's example counter (ctx.stash[COUNTER])")
    return counter


GRAPH: StashKey[Callable[[], Graph]] = StashKey()
"""``ctx.stash`` key of the graph a captured step is recorded in (:class:`~clbench._exec.capture.CudaGraph`; tests
put :class:`~clbench._exec.capture.EagerGraph` there to run the same code on the CPU)."""


@dataclass
class _PhaseRun:
    """One phase of a task being trained: its epochs (:meth:`epochs`) and their steps (:meth:`epoch`), counting
    the cell's optimizer steps from ``step``."""

    model: CLModel
    method: CheckedMethod
    ctx: CellContext
    phase: Phase
    p_i: int
    index: int
    train_tasks: Any  # Method.train_tasks(index): the tasks whose data this task trains on
    engine: StepEngine
    on_step: StepObserver | None
    step: int
    limit: int | None = None  # the phase's share of train.steps_per_task or train.compute_epochs (None: its epochs)
    counter: ExampleCounter | None = None  # train.compute_epochs: the counter `limit` is spent from (else steps)
    steps: int = 0
    examples: int = 0
    first: float | None = None  # the blow-up reference: the loss the phase starts from (its first step's)
    captured: Captured | None = None  # train.capture's recorded step (built by train_task)

    @property
    def mix(self) -> bool:
        """Whether a batch of several tasks mixes them: the method asks (Method.mix_tasks), the model's one head is
        shared by every task (a head per task takes one task a batch) and the inputs are not texts (a text model
        reads a batch's task for its instruction)."""
        info = getattr(self.model, "info", None)
        shared = info is not None and not info.multi_head and info.modality != "text"
        return self.method.method.mix_tasks and shared

    def epochs(self) -> list[float | None]:
        """Every epoch of the phase: each one's mean loss; raises Diverged on a blow-up (train.diverge_factor)."""
        phase, blowup, task = self.phase, self.ctx.train.diverge_factor, self.ctx.order[self.index]
        schedule = (
            MultiStepLR(torch_optimizer_of(self.engine.opt), list(phase.lr_milestones), phase.lr_gamma)
            if phase.lr_milestones
            else None
        )
        epoch_loss: list[float | None] = []
        epochs = range(phase.epochs) if self.limit is None else itertools.count()
        start = self.counter.grad if self.counter is not None else 0  # the examples counted before the phase
        for epoch in epochs:
            spent = self.steps if self.counter is None else self.counter.grad - start
            if self.limit is not None and spent >= self.limit:
                break
            total, n = self.epoch(epoch, start)
            if self.limit is not None and n == 0:  # no batch at all: the share can never be spent
                raise ClbenchError(f"phase {phase.name!r}: an epoch of no batches cannot spend {self.setting}")
            if self.counter is not None and self.counter.grad - start == spent:
                raise ClbenchError(
                    f"phase {phase.name!r}: an epoch of {n} steps forwarded no example with gradients through the "
                    "model's forward, so train.compute_epochs can never be spent (a method that calls a submodule "
                    "directly is not counted: clbench._exec.compute)"
                )
            self.method.method.after_epoch(phase, epoch)
            if schedule is not None:
                schedule.step()
            mean = total / n if n else None
            epoch_loss.append(mean)
            if blowup and mean is not None and self.first is not None and mean > blowup * self.first:
                raise _diverged(
                    f"epoch mean loss {mean:.4g} > {blowup:g} × {self.first:.4g} (the phase's first step's "
                    f"loss, at least {LOSS_FLOOR:g}; train.diverge_factor)",
                    task,
                    self.index,
                    phase.name,
                    epoch,
                    self.step,
                    mean,
                    self.first,
                )
        return epoch_loss

    @property
    def setting(self) -> str:
        """The budget ``limit`` is a share of."""
        return "train.steps_per_task" if self.counter is None else "train.compute_epochs"

    def epoch(self, epoch: int, start: int = 0) -> tuple[float, int]:
        """One epoch's optimizer steps: the sum of their losses and their count. The loop reads each step's loss
        between the engine's backward and update (on the CPU, a non-finite loss stops the task before the optimizer
        takes it); it is the harness's whole per-step cost (benchmarks/bench_overhead.py)."""
        ctx, engine, on_step, phase = self.ctx, self.engine, self.on_step, self.phase
        backward, update = engine.backward, engine.update
        every = ctx.train.log_every if on_step is not None else 0
        # a batch not already on the device (a split kept on the host) is copied there; on the CPU it is used as is
        move = ctx.device.type != "cpu"
        step, total, n, value = self.step, 0.0, 0, math.nan
        # the step losses read at once every `sync` steps (train.sync_every): every step on the CPU, where reading one
        # is cheap; on an accelerator each read waits for the device to finish the step
        sync, pending = ctx.train.sync_every or (1 if ctx.device.type == "cpu" else SYNC_EVERY), []
        epoch_batches: Iterable[Batch] = (
            _epoch_batches(ctx, self.train_tasks, ctx.train.batch_size, self.index, self.p_i, epoch, mix=self.mix)
            if phase.batches is None
            else phase.batches(epoch)  # the method's own data (GDumb's memory)
        )
        if self.limit is not None and self.counter is None:  # the share of train.steps_per_task: cut here
            epoch_batches = itertools.islice(epoch_batches, self.limit - self.steps)
        elif self.limit is not None and self.counter is not None:  # train.compute_epochs: the step past it is last
            epoch_batches = _until_spent(epoch_batches, self.counter, start + self.limit)
        captured = self.captured
        for batch in epoch_batches:
            if move:
                batch = batch.to(ctx.device)
            if captured is not None:  # train.capture: the whole step, recorded once and replayed
                (loss, task_loss, terms, norm), replayed = captured(batch)
                step += 1
                logged = every and step % every == 0
                pending.append(loss.clone() if replayed else loss)  # (the next replay rewrites the graph's)
                if len(pending) >= sync or logged:
                    total, n, value = self._drain(pending, epoch, step, total, n)
                if logged and norm is None:
                    norm = grad_norm(engine.params)
            else:
                loss, task_loss, terms = backward(batch)
                step += 1
                logged = every and step % every == 0
                pending.append(loss.detach())
                if len(pending) >= sync or logged:  # the host sync: the non-finite check and the epoch's mean loss
                    total, n, value = self._drain(pending, epoch, step, total, n)
                norm = update(bool(logged))
            self.examples += batch.y.shape[0]  # not len(): Tensor.__len__ is Python
            if logged:
                assert norm is not None and on_step is not None  # computed above; no observer: nothing is logged
                values = {"loss": value, "loss/task": float(task_loss.detach())}
                values.update((f"loss/{name}", float(term.detach())) for name, term in terms.items())
                values.update(lr=float(engine.opt.param_groups[0]["lr"]), grad_norm=float(norm))
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
                raise _diverged(
                    f"loss became {value}",
                    self.ctx.order[self.index],
                    self.index,
                    self.phase.name,
                    epoch,
                    first_step + k,
                    value,
                    None,
                )
            if self.first is None:
                self.first = max(value, LOSS_FLOOR)
            total += value
            n += 1
        return total, n, values[-1]


def _until_spent(batches: Iterable[Batch], counter: ExampleCounter, goal: int) -> Iterator[Batch]:
    """``batches`` until ``counter`` has counted ``goal`` examples with gradients (checked before each step: the
    step that crosses it is the last)."""
    for batch in batches:
        if counter.grad >= goal:
            return
        yield batch


def _diverged(
    what: str, task: str, index: int, phase: str, epoch: int, step: int, loss: float, reference: float | None
) -> Diverged:
    """The :class:`Diverged` of a blow-up on ``task`` (epoch counted from 0, ``step`` the cell's optimizer step)."""
    where = {
        "task": task,
        "index": index,
        "phase": phase,
        "epoch": epoch + 1,
        "step": step,
        "loss": loss if math.isfinite(loss) else str(loss),
        "reference": reference,
    }
    return Diverged(f"{what} on task {task!r} (task {index + 1}, phase {phase}, epoch {epoch + 1}, step {step})", where)
