"""Executors run a plan's cells; the local one is part of the core and registered as a core plugin.

An executor receives the cells still to run and a function that runs one cell in a worker, and
yields results as they finish. Scheduling belongs to an existing engine (Ray, see the ``ray``
plugin), never to clbench.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from clbench.boundary import ObserverError, notify
from clbench.errors import ClbenchError, ResultFileError
from clbench.hookspecs import hookimpl
from clbench.plan import Cell, Plan
from clbench.registry import Registries
from clbench.results import CellResult, remove_orphan_temp_files
from clbench.runner import Runner
from clbench.specs import ExecutorSpec, ProfileSpec


class LocalExecutor:
    """One process, cells one after another (the default)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options

    def run(self, cells: Iterable[Cell], run_cell: Callable[[Cell], CellResult]) -> Iterator[CellResult]:
        for cell in cells:
            yield run_cell(cell)


@hookimpl
def clbench_add_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec("local", LocalExecutor, "run every cell in this process, one after another")]


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [
        ProfileSpec(
            "quick",
            "embedded default: every method on every quick stream, real data shipped offline, CPU, minutes",
            version="1",
            seeds=(0,),
        )
    ]


LOCK_FILE = ".clbench.lock"


def output_lock(out: Path) -> FileLock:
    """One ``clbench run`` per output directory at a time: a second one refuses instead of racing."""
    out.mkdir(parents=True, exist_ok=True)
    return FileLock(str(out / LOCK_FILE), timeout=0)


def execute(plan: Plan, regs: Registries, executor: str = "local", fail_fast: bool = False,
            progress: bool = True, options: Mapping[str, Any] | None = None) -> RunResults:
    """Run every cell of ``plan`` (complete ones of the same settings are read back, not rerun) and return
    all results. Refuses, before running anything, when a cell's folder holds another cell's result or a
    result of other settings."""
    try:
        with output_lock(plan.out):
            return _execute(plan, regs, executor, fail_fast, progress, options)
    except Timeout:
        raise ClbenchError(
            f"another clbench run is writing to {plan.out}/ (lock {plan.out / LOCK_FILE}); wait for it to "
            "finish or use another --out"
        ) from None
    except OSError as exc:  # read-only directory, full disk: finished cells stay, no partial file
        raise ClbenchError(f"cannot write results to {plan.out}/: {exc.strerror or exc}") from None


class RunResults(list[CellResult]):
    """The results of every cell of a plan, in plan order, and the faults outside any cell (an observer of
    the run that raised): they make the exit code 1 like a failed cell."""

    def __init__(self, results: Iterable[CellResult] = (), faults: Iterable[str] = ()) -> None:
        super().__init__(results)
        self.faults = list(faults)


def _stale(plan: Plan, runner: Runner) -> tuple[dict[str, CellResult], list[Cell], list[str]]:
    """Split the plan into cells already done (same settings) and cells to run; results of other settings
    or of another cell in a cell's folder are collected, never returned as this cell's."""
    done: dict[str, CellResult] = {}
    todo: list[Cell] = []
    stale: list[str] = []
    for cell in plan.cells:
        try:
            result = runner.existing(cell)
        except ResultFileError as exc:
            stale.append(str(exc))
            continue
        if result is not None:
            done[cell.key] = result
        else:
            todo.append(cell)
    return done, todo, stale


def _execute(plan: Plan, regs: Registries, executor: str, fail_fast: bool, progress: bool,
             options: Mapping[str, Any] | None) -> RunResults:
    for path in remove_orphan_temp_files(plan.out):
        warnings.warn(f"removed {path}, a temp file left by an interrupted write", stacklevel=2)
    runner = Runner(regs, fail_fast=fail_fast, progress=progress)
    results, todo, stale = _stale(plan, runner)
    if stale:
        shown = "\n  ".join(stale[:10]) + (f"\n  ... and {len(stale) - 10} more" if len(stale) > 10 else "")
        raise ClbenchError(
            f"{len(stale)} of {len(plan.cells)} cells already hold results in {plan.out}/ that are not theirs; "
            f"nothing was run or deleted:\n  {shown}\nUse another --out, or move those cell folders away "
            "to run them with these settings (a sweep, `--set KEY=a,b`, runs values side by side)"
        )
    faults = []
    try:
        notify(regs, "clbench_run_start", plan=plan)
    except ObserverError as exc:
        faults.append(str(exc))
        warnings.warn(f"{exc}; the run goes on", stacklevel=2)
    spec = regs.executors.get(executor)
    engine = spec.factory({**(options or {}), "disabled": regs.disabled, "fail_fast": fail_fast,
                           "requires_gpu": regs.profiles.get(plan.profile).requires_gpu})
    bar = tqdm(total=len(plan.cells), initial=len(results), desc="grid", unit="cell", disable=not progress)
    try:
        for result in engine.run(todo, runner.run):
            results[result.key] = result
            bar.update(1)
            bar.set_postfix_str(f"{result.method} {result.stream} o{result.order} s{result.seed}: {result.status}")
    finally:
        bar.close()
    ordered = RunResults((results[c.key] for c in plan.cells if c.key in results), faults)
    try:
        notify(regs, "clbench_run_end", plan=plan, results=list(ordered))
    except ObserverError as exc:
        ordered.faults.append(str(exc))
        warnings.warn(str(exc), stacklevel=2)
    return ordered
