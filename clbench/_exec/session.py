"""One cell's lifecycle as one object: its stream and task order, its context, its model and method built and set
up, each task's ``before_task`` and ``after_task`` seeded as a run seeds them, and every phase's outcome recorded
(as pytest's ``CallInfo``): which phase, of which task, how long it took and what it raised.

The runner drives a session through every task on the cell's device (:mod:`clbench._exec.runner`), the memory plan
through two tasks of two optimizer steps a phase on the meta device (:mod:`clbench._exec.memory`): both build,
seed and call the method's hooks here, so a plan runs a cell's code in the order and with the seeds a run does.
What each does between the hooks (``train_task``'s epochs, the plan's measured steps) is its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from clbench._core import provenance
from clbench._core.boundary import check_type, describe
from clbench._core.composite import CompositeMethod
from clbench._core.registry import Registries
from clbench.cell import Cell
from clbench.data import Stream
from clbench.distributed import SINGLE, Dist
from clbench.method import CellContext, Method, derive_seed, seed_torch
from clbench.model import CLModel, StreamInfo, xavier_


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
    return stream


def build_model(regs: Registries, cell: Cell, stream: Stream) -> CLModel:
    spec = regs.models.get(cell.model)
    model = spec.factory(cell.model_cfg, StreamInfo.of(stream, spec.setting(cell.model_cfg, "heads")))
    check_type(model, CLModel, f"model {cell.model!r}", "factory", regs.models.origins.get(cell.model))
    if cell.train.init == "xavier":
        xavier_(model)
    return model


def method_label(regs: Registries, cell: Cell) -> str:
    """``method 'ewc' (plugin 'ewc', clbench 0.1.0)``: how messages about a cell's method name it."""
    return f"method {cell.method!r}" + "".join(describe(regs.methods.origins.get(p)) for p in cell.parts)


PHASES = ("stream", "model", "setup", "before_task", "train", "after_task", "evaluate")
"""The phases a session records, in the order a task meets them (``stream`` and ``model``: the builds; ``setup``:
the method's; ``evaluate``: scoring every task, and the untrained model's before the first)."""


@dataclass(frozen=True)
class Outcome:
    """One phase as a session ran it: which (:data:`PHASES`), of which task (None: of the cell), its seconds, and
    what it raised (``"TypeError: ..."``; None: it returned)."""

    phase: str
    task: str | None
    seconds: float
    error: str | None = None

    def where(self) -> str:
        """``in after_task of task 't2'``: where a cell stopped, for its error."""
        return f"in {self.phase}" + ("" if self.task is None else f" of task {self.task!r}")


class CellSession:
    """A cell's stream, order and context on ``device``, and its lifecycle's outcomes (:attr:`outcomes`, one per
    phase run). ``stream``: one already built for this cell (the memory plan shares loaded data between cells)."""

    def __init__(
        self, regs: Registries, cell: Cell, device: torch.device, dist: Dist = SINGLE, stream: Stream | None = None
    ) -> None:
        self.regs, self.cell, self.device, self.dist = regs, cell, device, dist
        self.outcomes: list[Outcome] = []
        if stream is None:
            with self.phase("stream"):
                stream = build_stream(regs, cell)
        self.stream = stream
        self.order = stream.order(cell.order)

    @contextlib.contextmanager
    def phase(self, name: str, index: int | None = None) -> Iterator[None]:
        """Run the block as phase ``name`` (of task ``index``; None: of the cell), recording its outcome."""
        task = None if index is None else self.order[index]
        start = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            self.outcomes.append(Outcome(name, task, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"))
            raise
        self.outcomes.append(Outcome(name, task, time.perf_counter() - start))

    @property
    def stopped(self) -> Outcome | None:
        """The phase that raised, if one did."""
        return next((o for o in reversed(self.outcomes) if o.error is not None), None)

    def context(self) -> CellContext:
        """A fresh context for the cell's method: what it may read of the stream, order, settings and device."""
        cell = self.cell
        return CellContext(
            stream=self.stream,
            order=self.order,
            train=cell.train,
            device=self.device,
            seed=cell.seed,
            options=dict(cell.options),
            dist=self.dist,
        )

    def model(self, notes: list[str] | None = None) -> CLModel:
        """The cell's model on the session's device, seeded as a run seeds it. On the meta device it is built in
        that device's context, so that no weights are made, unless its factory refuses (one that loads weights:
        ``from_pretrained``); then it is built on the CPU and moved, and ``notes`` say so."""
        seed_torch(derive_seed(self.cell.seed, 0))
        with self.phase("model"):
            if self.device.type != "meta":
                return build_model(self.regs, self.cell, self.stream).to(self.device)
            try:
                with torch.device(self.device):
                    model = build_model(self.regs, self.cell, self.stream)
            except RuntimeError:
                model = build_model(self.regs, self.cell, self.stream)
                if notes is not None:
                    notes.append("model built on the CPU, then moved")
            return model.to(self.device)

    def method(self, model: CLModel) -> Method:
        """The cell's method (its parts joined), built on a fresh context and set up on ``model``."""
        method = build_method(self.regs, self.cell, self.context())
        with self.phase("setup"):
            method.setup(model)
        return method

    def build(self) -> tuple[CLModel, Method]:
        """The model, then the method set up on it: a cell's start."""
        model = self.model()
        return model, self.method(model)

    def before_task(self, method: Method, index: int) -> None:
        """Seed torch for task ``index`` (every task from ``(seed, index)``: a resumed cell follows an uninterrupted
        one's path), then the method's ``before_task``."""
        seed_torch(derive_seed(self.cell.seed, index + 1))
        with self.phase("before_task", index):
            method.before_task(self.order[index], index)

    def after_task(self, method: Method, index: int) -> None:
        with self.phase("after_task", index):
            method.after_task(self.order[index], index)
