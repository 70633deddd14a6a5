"""``train.capture``: a static training step recorded once as a CUDA graph and replayed.

A small model's step on a GPU costs the launches of its kernels more than their work: the permuted-MNIST MLP of
``paper-lps`` took 1.27 ms a step eagerly and 0.42 ms replayed from one CUDA graph (docs/scale-out.md). A graph
replays the kernels recorded with the tensors they touched, so what it records must be the same tensor program every
step: the same input shapes, no Python decision on a value, no state kept outside tensors. A method declares that of
its step (``MethodSpec.static_step``); the plan refuses capture for any other, on a device other than CUDA, with
gradient accumulation or data parallelism (``clbench._core.cells._capture_refusal``).

How a phase runs under capture (:class:`CapturedStep`): its first ``WARMUP`` full-size batches step eagerly (the
optimizer's state is created, the CUDA libraries' handles too, as torch's graph capture requires); the next full-size
batch is copied into static input tensors and its whole step (forward, backward, the method's hooks, gradient
clipping, the optimizer's step) recorded, then replayed for that batch; every later full-size batch is copied into
the inputs and replayed. A batch of another size (an epoch's last) steps eagerly into the same gradient tensors, and
a change of learning rate (a schedule's milestone) records a new graph, since the graph holds the rate it saw.

The graph is an argument (:class:`Graph`): tests run the same code on the CPU with :class:`EagerGraph`, which runs the
recorded step again on each replay, so everything but the CUDA recording itself is checked against eager training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten

WARMUP = 3
"""Eager steps of a phase before its step is recorded (torch's graph capture wants the step run first)."""

StepOutputs = Any  # what a step returns: tensors (and None), nested in tuples and dicts


class Graph(Protocol):
    def record(self, step: Callable[[], StepOutputs]) -> StepOutputs:
        """Record ``step`` and run it once; its outputs, which each replay rewrites in place."""
        ...

    def replay(self) -> None:
        """Run the recorded step again on the current contents of the tensors it read."""
        ...


class CudaGraph:
    """``torch.cuda.CUDAGraph``: the step recorded on a side stream, as torch requires, then replayed."""

    def __init__(self) -> None:
        self.graph = torch.cuda.CUDAGraph()

    def record(self, step: Callable[[], StepOutputs]) -> StepOutputs:
        with torch.cuda.graph(self.graph):
            out = step()
        self.graph.replay()  # recording runs nothing: this is the step of the batch it was recorded on
        return out

    def replay(self) -> None:
        self.graph.replay()


class EagerGraph:
    """A stand-in for a CUDA graph on any device: each replay runs the recorded step again and copies its outputs
    into the first run's tensors, as a graph's replay rewrites them."""

    def __init__(self) -> None:
        self.step: Callable[[], StepOutputs] | None = None
        self.out: list[Tensor] = []

    def record(self, step: Callable[[], StepOutputs]) -> StepOutputs:
        self.step = step
        out = step()
        self.out = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor)]
        return out

    def replay(self) -> None:
        assert self.step is not None
        fresh = [t for t in tree_flatten(self.step())[0] if isinstance(t, Tensor)]
        with torch.no_grad():
            for static, new in zip(self.out, fresh, strict=True):
                static.copy_(new)


class CapturedStep:
    """One phase's step under ``train.capture``: ``step(x, y)`` runs the whole step on those inputs and returns its
    outputs; ``lr()`` reads the optimizer's learning rate. Call with each batch's inputs (see the module)."""

    def __init__(
        self,
        step: Callable[[Tensor, Tensor], StepOutputs],
        lr: Callable[[], float],
        zero_grad: Callable[[bool], None],
        graph: Callable[[], Graph] = CudaGraph,
    ) -> None:
        self._step, self._lr, self._zero_grad, self._graph = step, lr, zero_grad, graph
        self.shape: tuple[torch.Size, torch.Size] | None = None  # the full batch's: the first batch seen
        self.eager = 0  # full-size steps taken eagerly so far
        self.recorded: Graph | None = None
        self._inputs: tuple[Tensor, Tensor] | None = None
        self._out: StepOutputs = None
        self._at_lr: float | None = None

    def __call__(self, x: Tensor, y: Tensor) -> tuple[StepOutputs, bool]:
        """The step's outputs for this batch, and whether they are a graph's (rewritten by its next replay: copy
        what must outlive it)."""
        if self.shape is None:
            self.shape = (x.shape, y.shape)
        full = (x.shape, y.shape) == self.shape
        if not full or self.eager < WARMUP:
            self.eager += full
            # once a graph holds the gradients, an eager step writes into them (0 + g is g): the graph's optimizer
            # step reads those tensors, and a step's logged gradient norm reads p.grad
            self._zero_grad(self.recorded is None)
            return self._step(x, y), False
        if self.recorded is None or self._lr() != self._at_lr:
            self._record(x, y)
            return self._out, True
        assert self._inputs is not None
        self._inputs[0].copy_(x)
        self._inputs[1].copy_(y)
        self.recorded.replay()
        return self._out, True

    def _record(self, x: Tensor, y: Tensor) -> None:
        self._inputs = (x.clone(), y.clone())
        self._at_lr = self._lr()
        self._zero_grad(True)  # the recorded backward writes the gradients it creates: its own tensors
        inputs = self._inputs
        self.recorded = self._graph()
        self._out = self.recorded.record(lambda: self._step(*inputs))
