"""Executors run a plan's cells; the local one is part of the core and registered as a core plugin.

An executor receives the cells still to run and a function that runs one cell in a worker, and
yields results as they finish. Scheduling belongs to an existing engine (Ray, see the ``ray``
plugin), never to clbench.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from clbench.errors import ClbenchError
from clbench.hookspecs import hookimpl
from clbench.plan import Cell, Plan
from clbench.registry import Registries
from clbench.results import CellResult
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
            progress: bool = True, options: Mapping[str, Any] | None = None) -> list[CellResult]:
    """Run every cell of ``plan`` (complete ones are read back, not rerun) and return all results."""
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


def _execute(plan: Plan, regs: Registries, executor: str, fail_fast: bool, progress: bool,
             options: Mapping[str, Any] | None) -> list[CellResult]:
    runner = Runner(regs, fail_fast=fail_fast, progress=progress)
    regs.pm.hook.clbench_run_start(plan=plan)
    results: dict[str, CellResult] = {}
    todo = []
    for cell in plan.cells:
        done = runner.existing(cell)
        if done is not None:
            results[cell.key] = done
        else:
            todo.append(cell)
    spec = regs.executors.get(executor)
    engine = spec.factory({**(options or {}), "disabled": regs.disabled, "fail_fast": fail_fast,
                           "requires_gpu": regs.profiles.get(plan.profile).requires_gpu})
    bar = tqdm(total=len(plan.cells), initial=len(results), desc="grid", unit="cell", disable=not progress)
    try:
        for result in engine.run(todo, runner.run):
            results[f"{result.stream}/{result.method}/order-{result.order}/seed-{result.seed}"] = result
            bar.update(1)
            bar.set_postfix_str(f"{result.method} {result.stream} o{result.order} s{result.seed}: {result.status}")
    finally:
        bar.close()
    ordered = [results[c.key] for c in plan.cells if c.key in results]
    regs.pm.hook.clbench_run_end(plan=plan, results=ordered)
    return ordered
