"""Every hook clbench calls, grouped by lifecycle.

Two families:

* **Registration hooks** run once when the plugin manager is built. Every plugin may answer; the
  answers are collected into the typed registries of :mod:`clbench._core.registry`. They return lists of
  specs (:mod:`clbench.specs`) and must not have side effects.
* **Lifecycle hooks** are observers: called on every active plugin at fixed points of a run. They
  return nothing and must not change what they are given. Loggers, progress displays, trackers and
  plots live here. clbench calls them one plugin at a time (clbench._core.boundary.notify), so a fault names
  its plugin: an observer that raises fails the cell it was observing (in ``clbench_cell_end`` too: the
  result is rewritten as failed), never the whole run; one that raises in ``clbench_run_start`` or
  ``clbench_run_end`` is reported, the run goes on, and its exit code is 1.

Per-batch work (loss terms, gradient masks) is *not* a hook: it belongs to the method object a
:class:`~clbench.specs.MethodSpec` builds, so the training loop pays no dispatch cost per step. The one
per-step observer, :func:`clbench_step`, is called only on logged steps (``train.log_every``, default 0:
never); every other step pays no dispatch, no gradient norm and no extra device sync.

A test (tests/test_hookspecs.py) fails when a spec here has no docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from clbench.cell import Cell, CellResult, Plan
    from clbench.specs import (
        CapabilitySpec,
        ExecutorSpec,
        MemorySpec,
        MethodSpec,
        MetricSpec,
        ModelSpec,
        OptionSpec,
        ProfileSpec,
        ShardingSpec,
        StreamFormSpec,
        StreamSpec,
        TargetsSpec,
        TestSetSpec,
    )

PROJECT = "clbench"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --------------------------------------------------------------------------- registration
# A spec's body is never run: pluggy reads only its name, signature and docstring, and a hook call returns
# the list of the plugins' answers. The registration specs therefore keep docstring-only bodies; mypy, which
# cannot know that, is told by a targeted ``type: ignore[empty-body]`` (``return []`` would read as a default).
@hookspec
def clbench_add_methods() -> list[MethodSpec]:  # type: ignore[empty-body]
    """Return the continual-learning methods this plugin provides.

    Called once by :func:`clbench._core.registry.build_registry` at start-up, on every plugin.
    Returns a list of :class:`~clbench.specs.MethodSpec` (may be empty). Registering a name that
    another plugin already registered is an error naming both distributions.
    """


@hookspec
def clbench_add_models() -> list[ModelSpec]:  # type: ignore[empty-body]
    """Return the model builders this plugin provides.

    Called once at start-up. Returns a list of :class:`~clbench.specs.ModelSpec`.
    """


@hookspec
def clbench_add_streams() -> list[StreamSpec]:  # type: ignore[empty-body]
    """Return the task streams this plugin provides.

    Called once at start-up. Returns a list of :class:`~clbench.specs.StreamSpec`. Loading data
    happens later, when a cell asks the stream for a task, never here.
    """


@hookspec
def clbench_add_metrics() -> list[MetricSpec]:  # type: ignore[empty-body]
    """Return the metrics this plugin provides.

    Called once at start-up. Returns a list of :class:`~clbench.specs.MetricSpec`. Metrics are
    computed by the runner at the end of each cell and stored in ``result.json``.
    """


@hookspec
def clbench_add_profiles() -> list[ProfileSpec]:  # type: ignore[empty-body]
    """Return named profiles (sets of defaults for ``clbench run``).

    Called once at start-up. Returns a list of :class:`~clbench.specs.ProfileSpec`.
    """


@hookspec
def clbench_add_targets() -> list[TargetsSpec]:  # type: ignore[empty-body]
    """Return papers' published numbers for profiles (those of this plugin or of another).

    Called once at start-up. Returns a list of :class:`~clbench.specs.TargetsSpec`; each becomes its profile's
    ``targets`` (the parity section of ``clbench leaderboard``). A profile whose own spec has targets, or that two
    plugins give targets for, is an error naming both.
    """


@hookspec
def clbench_add_memory() -> list[MemorySpec]:  # type: ignore[empty-body]
    """Return how methods (of this plugin or of another) count the examples they keep.

    Called once at start-up. Returns a list of :class:`~clbench.specs.MemorySpec`; each becomes its method's
    ``memory``, which ``train.memory`` sets. A method whose own spec declares one, or that two plugins declare, is an
    error naming both.
    """


@hookspec
def clbench_add_capabilities() -> list[CapabilitySpec]:  # type: ignore[empty-body]
    """Return what methods (of this plugin or of another) take and need, and what models provide.

    Called once at start-up. Returns a list of :class:`~clbench.specs.CapabilitySpec`; a method's ``modalities``
    become its spec's (one whose own spec declares them too is an error naming both), its ``requires`` and a model's
    ``provides`` are added to the spec's own. The planner checks them before any cell starts.
    """


@hookspec
def clbench_add_test_sets() -> list[TestSetSpec]:  # type: ignore[empty-body]
    """Return the streams (of this plugin or of another) whose tasks are all scored on the same test examples.

    Called once at start-up. Returns a list of :class:`~clbench.specs.TestSetSpec`; each sets its stream's
    ``shared_test_set``. A stream whose own spec says so, or that two plugins declare, is an error naming both.
    """


@hookspec
def clbench_add_stream_forms() -> list[StreamFormSpec]:  # type: ignore[empty-body]
    """Return streams made from registered ones (of this plugin or of another) by a form the core knows: a
    task-incremental stream's class-incremental form.

    Called once at start-up. Returns a list of :class:`~clbench.specs.StreamFormSpec`; each registers a stream under
    its ``name``. One whose base no plugin registers, whose name is taken, or whose form is unknown is an error naming
    the plugin.
    """


@hookspec
def clbench_add_sharding() -> list[ShardingSpec]:  # type: ignore[empty-body]
    """Return the methods (of this plugin or of another) that run correctly with the model's weights sharded over the
    ranks (``train.shard=full``).

    Called once at start-up. Returns a list of :class:`~clbench.specs.ShardingSpec`; each sets its method's
    ``shardable``. A method whose own spec says so, or that two plugins declare, is an error naming both.
    """


@hookspec
def clbench_add_executors() -> list[ExecutorSpec]:  # type: ignore[empty-body]
    """Return executors that run a plan's cells (local process, Ray cluster, ...).

    Called once at start-up. Returns a list of :class:`~clbench.specs.ExecutorSpec`.
    """


@hookspec
def clbench_add_options() -> list[OptionSpec]:  # type: ignore[empty-body]
    """Return extra options for ``clbench run``.

    Called once when the CLI is built, before arguments are parsed. Each
    :class:`~clbench.specs.OptionSpec` becomes ``--<name>``; the parsed value is available to
    every plugin as ``cell.options[name]``.
    """


# --------------------------------------------------------------------------- lifecycle (observers)
@hookspec
def clbench_run_start(plan: Plan) -> None:
    """Observe the start of ``clbench run``.

    Called once by :func:`clbench._exec.executors.execute` on the driver, after the grid is planned and before
    any cell runs. ``plan.cells`` lists every cell, including those that will be skipped because a
    complete result exists.
    """


@hookspec
def clbench_cell_start(cell: Cell, resumed_from: int) -> None:
    """Observe the start of one cell (method × stream × order × seed).

    Called by the runner in the process that runs the cell. ``resumed_from`` is the number of tasks
    already finished in a checkpoint (0 for a fresh cell).
    """


@hookspec
def clbench_task_start(cell: Cell, task: str, index: int) -> None:
    """Observe the start of training on task ``task``, the ``index``-th (0-based) of the cell's order.

    Called by the runner before the method's ``before_task``.
    """


@hookspec
def clbench_step(
    cell: Cell, task: str, index: int, phase: str, epoch: int, step: int, values: dict[str, float]
) -> None:
    """Observe one logged optimizer step: what a logger plots.

    Called by the runner after the step (``opt.step()`` and the method's ``after_step``) every
    ``train.log_every``-th optimizer step of the cell, and never when ``train.log_every`` is 0. ``task``
    and ``index`` are the task being trained, ``phase`` the name of its phase, ``epoch`` the 0-based
    epoch within the phase, ``step`` the 1-based optimizer step counted across the whole cell (a resumed
    cell goes on counting from its checkpoint, so the same step has the same number). ``values`` maps
    names to Python floats:

    * ``loss``: the loss the step minimised (the model's task loss plus every loss term);
    * ``loss/task``: the model's task loss alone; ``loss/<name>``: each of the method's loss terms;
    * ``lr``: the learning rate of the optimizer's first parameter group;
    * ``grad_norm``: the L2 norm of all trainable gradients after the method's ``after_backward``
      and before ``train.grad_clip`` clips them.

    The dict is the observer's to keep; observers must not change the model or the method.
    """


@hookspec
def clbench_task_end(
    cell: Cell,
    task: str,
    index: int,
    accuracy_row: list[float],
    tasks: list[str],
    step: int,
    epochs: list[dict[str, Any]],
) -> None:
    """Observe the end of task ``index``: training, the method's after-task step and evaluation done.

    ``accuracy_row`` is row ``index`` of the accuracy matrix: the score on every task of the order
    (in run order) after training this one; ``tasks`` is that order, so ``accuracy_row[j]`` is the score on
    ``tasks[j]``. ``step`` is the number of optimizer steps the cell has taken so far (the x axis of
    :func:`clbench_step`). ``epochs`` is the task's loss curve, whatever ``train.log_every`` says: one
    ``{"phase", "epoch" (from 0), "step" (where it ended), "loss" (its mean loss)}`` per epoch of each phase.
    Called by the runner after the checkpoint is written. An implementation may take any subset of these
    arguments.
    """


@hookspec
def clbench_cell_end(cell: Cell, result: CellResult) -> None:
    """Observe the end of a cell, complete, failed or diverged.

    Called by the runner after ``result.json`` is written. ``result.status`` says how it ended;
    ``result.metrics`` holds the cell's metrics (empty unless complete) and ``result.timings["tasks"]``
    per task and phase its seconds, steps and per-epoch mean ``loss``.
    """


@hookspec
def clbench_run_end(plan: Plan, results: list[Any]) -> None:
    """Observe the end of ``clbench run``.

    Called once on the driver after every cell has run or failed; ``results`` holds one
    :class:`~clbench._core.results.CellResult` per cell of the plan (skipped cells included, read back
    from disk).
    """
