"""Executors run a plan's cells; the local one is part of the core and registered as a core plugin.

An executor receives the cells still to run and a function that runs one cell in a worker, and
yields results as they finish. Cluster scheduling belongs to an existing engine (Ray, see the ``ray``
plugin); the local executor only spreads cells over this machine's cores with :mod:`multiprocessing`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import importlib
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from clbench._core.boundary import ObserverError, notify
from clbench._core.registry import Registries, in_process_plugins
from clbench._core.results import remove_orphan_temp_files
from clbench._exec import worker
from clbench._exec.ranks import RankPool, from_torchrun, launched_by_torchrun, run_one
from clbench._exec.runner import Runner, resolve_device
from clbench.cell import RESULT_FILE, Cell, CellResult, Plan
from clbench.distributed import SINGLE, Dist
from clbench.errors import ClbenchError, ResultFileError
from clbench.specs import ExecutorContext, Workers

LOCK_FILE = ".clbench.lock"


def data_parallel(plan: Plan, options: Mapping[str, Any]) -> tuple[Dist, int]:
    """This process's rank when torchrun started it (its group joined), else :data:`SINGLE`; and the ranks each
    cell runs on (``--nproc``, or torchrun's world size)."""
    nproc = options.get("nproc")
    if nproc is not None and (isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1):
        raise ClbenchError(f"--nproc {nproc!r}: the processes a cell runs on, at least 1")
    if not launched_by_torchrun():
        return SINGLE, nproc or 1
    world = int(os.environ["WORLD_SIZE"])
    if nproc not in (None, world):
        raise ClbenchError(
            f"--nproc {nproc}: torchrun started {world} processes (WORLD_SIZE); leave --nproc out "
            "under torchrun, every process is a rank of each cell"
        )
    device = resolve_device(plan.cells[0].train.device) if plan.cells else resolve_device("cpu")
    return from_torchrun(device), world


def _name_of(spec: str) -> str:
    """The plugin name a ``rank_plugins`` entry registers under: ``module.Class`` of the class it names, wherever
    that class is defined (``clbench.testing:TinyPlugin`` is ``clbench.testing.tiny.TinyPlugin``)."""
    module, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):  # the rank reports it, naming the spec
        return spec.replace(":", ".")
    return f"{obj.__module__}.{obj.__qualname__}" if isinstance(obj, type) else getattr(obj, "__name__", attr)


def check_data_parallel(plan: Plan, regs: Registries, nproc: int, executor: str, options: Mapping[str, Any]) -> None:
    """Refuse, before anything runs, a data-parallel run of a method that cannot run on ranks
    (``MethodSpec.data_parallel``), of a cell under ``train.compute_epochs``, a sharded cell on one process or of a
    method not declared to run sharded (``MethodSpec.shardable``), whose global batches do not split into ``nproc`` ranks × ``train.grad_accum``
    equal micro-batches, or whose plugins the rank processes could not load."""
    for cell in plan.cells:
        if cell.train.shard == "full" and nproc == 1:
            raise ClbenchError(
                f"train.shard=full shards the model over ranks ({cell.key}): give --nproc N (N > 1), run torchrun "
                "with N processes, or keep the shards in host memory on one device (train.shard=offload)"
            )
        for part in cell.parts:
            if cell.train.shard != "off" and part in regs.methods and not regs.methods.get(part).shardable:
                raise ClbenchError(
                    f"--nproc {nproc} --set train.shard={cell.train.shard}: method {part!r} is not declared to run "
                    "with its model's weights sharded (it may copy, anchor or mask them: ShardingSpec, "
                    "docs/scale-out.md); run it with train.shard=off"
                )
    if nproc == 1:
        return
    for cell in plan.cells:
        for part in cell.parts:
            if part in regs.methods and not regs.methods.get(part).data_parallel:
                raise ClbenchError(
                    f"--nproc {nproc}: method {part!r} cannot run data-parallel (its state is kept per rank: the "
                    "ranks would not give one process's numbers); run it with --nproc 1 (train.grad_accum for a "
                    "larger global batch)"
                )
    for cell in plan.cells:
        if cell.train.compute_epochs:
            raise ClbenchError(
                f"--nproc {nproc}: train.compute_epochs stops a task by one process's count of the examples its model "
                f"forwarded, and every rank must stop at the same step ({cell.key}); run it with --nproc 1 or use "
                "train.steps_per_task"
            )
        batch, accum = cell.train.batch_size, cell.train.grad_accum
        if batch % (nproc * accum):
            why = (
                f"--nproc {nproc} is more ranks than train.batch_size={batch} has examples"
                if nproc > batch
                else f"train.batch_size={batch} does not split into {nproc} ranks × train.grad_accum={accum} equal "
                "micro-batches"
            )
            raise ClbenchError(
                f"{why} ({cell.key}); choose --nproc and train.grad_accum whose product divides the global batch"
            )
    if executor != "local" or launched_by_torchrun():
        return
    local_only = set(in_process_plugins(regs.pm)) - {_name_of(spec) for spec in options.get("rank_plugins", ())}
    for cell in plan.cells:
        for kind, name in [*(("methods", p) for p in cell.parts), ("streams", cell.stream), ("models", cell.model)]:
            origin = regs.kind(kind).origins.get(name)
            if origin is not None and origin.plugin in local_only:
                raise ClbenchError(
                    f"--nproc {nproc}: {kind[:-1]} {name!r} comes from plugin {origin.plugin!r}, "
                    "registered in this process only: the rank processes load plugins from entry "
                    "points; install it as a package with a `clbench` entry point"
                )


_TREE_DEPTH = 4  # <out>/<stream>/<method>/order-<o>/seed-<s>/result.json


_CELL_PATTERN = ("*", "*", "order-*", "seed-*")  # <stream>/<method>/order-<o>/seed-<s> below a tree's root


def check_not_nested(out: Path) -> None:
    """Refuse an ``--out`` inside another run's result tree, or holding one at another depth: ``leaderboard`` and
    ``compare`` read a tree recursively, and a nested run's cells would be read as a second result of the same
    cells (or a stray tree's).

    Above ``--out`` it looks for the lock file every run leaves in each ancestor, and for cell folders in the nearest
    ancestors that are no mount point (never a listing of ``/`` or ``/proc``, where processes come and go); an entry
    that vanishes or cannot be listed while it looks is skipped."""
    given, out = out, out.resolve()
    if out.exists() and not out.is_dir():
        raise ClbenchError(f"--out {given} is a file; give a folder (it is created when missing)")
    for level, parent in enumerate(out.parents):
        if _exists(parent / LOCK_FILE) or (
            level < _TREE_DEPTH and not os.path.ismount(parent) and _holds_cells(parent)
        ):
            raise ClbenchError(
                f"--out {given} is inside the result tree of another run, {parent}/: its cells would be "
                "read as that tree's; use a folder beside it, not inside it"
            )
    if not out.is_dir():
        return
    for path in _walk(out, RESULT_FILE):
        if len(path.relative_to(out).parts) != _TREE_DEPTH + 1:
            raise ClbenchError(
                f"--out {given} holds a result outside the cell layout, {path}: another run's tree "
                "nested inside it? move it out, or use another --out"
            )
    for lock in _walk(out, LOCK_FILE):
        if lock.parent != out:
            raise ClbenchError(
                f"--out {given} holds another run's result tree, {lock.parent}/; move it out, or use another --out"
            )


def _holds_cells(root: Path) -> bool:
    """Whether ``root`` holds a cell, ``<stream>/<method>/order-<o>/seed-<s>/result.json``, folder by folder: a folder
    that vanishes or cannot be listed meanwhile is skipped (pathlib's glob raises)."""
    level = [root]
    for pattern in _CELL_PATTERN:
        below = []
        for folder in level:
            try:
                with os.scandir(folder) as entries:
                    below += [Path(e.path) for e in entries if fnmatch.fnmatch(e.name, pattern) and _is_dir(e)]
            except OSError:
                continue
        level = below
    return any((folder / RESULT_FILE).is_file() for folder in level)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError as exc:  # a permission error on a parent: name it, with what was being checked
        raise ClbenchError(
            f"cannot read {path} ({exc.strerror or exc}) while checking that --out is not inside "
            "another run's result tree"
        ) from None


def _walk(root: Path, name: str) -> Iterator[Path]:
    """Every ``name`` below ``root`` (os.walk: an entry that vanishes, or cannot be listed, is skipped)."""
    for folder, _, files in os.walk(root):
        if name in files:
            yield Path(folder) / name


def output_lock(out: Path) -> FileLock:
    """One ``clbench run`` per output directory at a time: a second one refuses instead of racing."""
    out.mkdir(parents=True, exist_ok=True)
    return FileLock(str(out / LOCK_FILE), timeout=0)


def execute(
    plan: Plan,
    regs: Registries,
    executor: str = "local",
    fail_fast: bool = False,
    progress: bool = True,
    options: Mapping[str, Any] | None = None,
) -> RunResults:
    """Run every cell of ``plan`` (complete ones of the same settings are read back, not rerun) and return
    all results. Refuses, before running anything, when a cell's folder holds another cell's result or a
    result of other settings."""
    options = dict(options or {})
    dist, nproc = data_parallel(plan, options)
    check_data_parallel(plan, regs, nproc, executor, options)
    if dist.is_main:
        check_not_nested(plan.out)
    try:
        with output_lock(plan.out) if dist.is_main else contextlib.nullcontext():  # torchrun: rank 0 holds it
            return _execute(plan, regs, executor, fail_fast, progress, {**options, "nproc": nproc}, dist)
    except Timeout:
        raise ClbenchError(
            f"another clbench run is writing to {plan.out}/ (lock {plan.out / LOCK_FILE}); wait for it to "
            "finish or use another --out"
        ) from None
    except OSError as exc:  # read-only directory, full disk: finished cells stay, no partial file
        where = Path(exc.filename) if exc.filename else plan.out
        cell = next((c for c in plan.cells if where == c.directory or c.directory in where.parents), None)
        if cell is not None:
            raise ClbenchError(f"cell {cell.key}: cannot write to {where}: {exc.strerror or exc}") from None
        raise ClbenchError(
            f"cannot write results to {where}{'' if exc.filename else '/'}: {exc.strerror or exc}"
        ) from None


class RunResults(list[CellResult]):
    """The results of every cell of a plan, in plan order; the faults outside any cell (an observer of the run
    that raised: they make the exit code 1 like a failed cell); the keys of the cells whose finished result was
    reused, not run; and lines the run's summary prints about them."""

    def __init__(
        self,
        results: Iterable[CellResult] = (),
        faults: Iterable[str] = (),
        reused: Iterable[str] = (),
        notes: Iterable[str] = (),
    ) -> None:
        super().__init__(results)
        self.faults = list(faults)
        self.reused = list(reused)
        self.notes = list(notes)


ON_CHANGE = ("refuse", "rerun", "reuse")  # what `clbench run --on-change` does with results of other code or data


@dataclasses.dataclass
class _Found:
    """The plan split by what its folders already hold."""

    done: dict[str, CellResult] = dataclasses.field(default_factory=dict)  # finished by this code and data: reused
    todo: list[Cell] = dataclasses.field(default_factory=list)
    stale: list[str] = dataclasses.field(default_factory=list)  # another cell's or other settings' results: refused
    # finished by other code or data (why): --on-change decides
    changed: list[tuple[Cell, CellResult, str]] = dataclasses.field(default_factory=list)
    unchecked: list[str] = dataclasses.field(default_factory=list)  # reused results that record no provenance


def _stale(plan: Plan, runner: Runner) -> _Found:
    """Split the plan into cells already done (same settings, code and data) and cells to run; results of other
    settings or of another cell in a cell's folder are collected, never returned as this cell's, and so are
    results made by other code or data (``--on-change`` decides)."""
    found = _Found()
    for cell in plan.cells:
        try:
            result = runner.existing(cell)
        except ResultFileError as exc:
            found.stale.append(str(exc))
            continue
        if result is None:
            result = runner.twin(cell)  # a sweep point that is its method's own cell: reuse that
        if result is None:
            found.todo.append(cell)
            continue
        changed = runner.changes(result, cell)
        if changed:
            found.changed.append((cell, result, "; ".join(changed)))
            continue
        found.done[cell.key] = result
        if changed is None:
            found.unchecked.append(cell.key)
    return found


def _listed(lines: list[str], limit: int = 10) -> str:
    return "\n  ".join(lines[:limit]) + (f"\n  ... and {len(lines) - limit} more" if len(lines) > limit else "")


def _apply_on_change(found: _Found, plan: Plan, on_change: str) -> list[str]:
    """Act on the cells made by other code or data; return the summary's lines about reused results."""
    if on_change not in ON_CHANGE:
        raise ClbenchError(f"--on-change {on_change!r}: choose one of {', '.join(ON_CHANGE)}")
    lines = [f"{c.key}: {why}" for c, _, why in found.changed]
    if found.changed and on_change == "refuse":
        hint = (
            " (`clbench metrics OUT` computes the missing metrics without training)"
            if any("not computed (no plugin computed them" in line for line in lines)
            else ""
        )
        raise ClbenchError(
            f"{len(found.changed)} of {len(plan.cells)} cells hold results in {plan.out}/ made by other code or "
            f"data than this run's; nothing was run or deleted:\n  {_listed(lines)}\nRerun them with "
            f"--on-change rerun, keep them with --on-change reuse, or use another --out{hint}"
        )
    notes = []
    if on_change == "rerun":
        order = {c.key: i for i, c in enumerate(plan.cells)}
        found.todo = sorted([*found.todo, *(c for c, _, _ in found.changed)], key=lambda c: order[c.key])
        notes += [f"rerun, made by other code or data: {line}" for line in lines]
    else:
        found.done.update((c.key, result) for c, result, _ in found.changed)
        notes += [f"reused, made by other code or data: {line}" for line in lines]
    if found.unchecked:
        n = len(found.unchecked)
        notes.append(
            f"{n} reused result{'s' if n > 1 else ''} predate{'s' if n == 1 else ''} provenance records "
            "(written before clbench recorded code and data digests): not checked against this code"
        )
    return notes


def _execute(
    plan: Plan, regs: Registries, executor: str, fail_fast: bool, progress: bool, options: Mapping[str, Any], dist: Dist
) -> RunResults:
    for path in remove_orphan_temp_files(plan.out) if dist.is_main else ():
        warnings.warn(f"removed {path}, a temp file left by an interrupted write", stacklevel=2)
    spec = regs.executors.get(executor)
    engine = spec.factory(
        ExecutorContext(
            worker=Workers(worker.start, worker.run, run_one),
            options=options,
            disabled=regs.not_loaded,
            fail_fast=fail_fast,
            requires_gpu=regs.profiles.get(plan.profile).requires_gpu,
            in_process_plugins=tuple(in_process_plugins(regs.pm)),
            nproc=options.get("nproc"),
        )
    )
    # the processes each cell runs on are part of its identity: --nproc, torchrun's world size, or what the
    # executor gives a cell (Ray's --cell-gpus N runs N ranks)
    ranks = int(engine.nproc)
    if any(c.nproc != ranks for c in plan.cells):
        plan = dataclasses.replace(plan, cells=[dataclasses.replace(c, nproc=ranks) for c in plan.cells])
    runner = Runner(regs, fail_fast=fail_fast, progress=progress, dist=dist)
    found = _stale(plan, runner)
    if found.stale:
        raise ClbenchError(
            f"{len(found.stale)} of {len(plan.cells)} cells already hold results in {plan.out}/ that are not theirs; "
            f"nothing was run or deleted:\n  {_listed(found.stale)}\nUse another --out, or move those cell folders "
            "away to run them with these settings (a sweep, `--set KEY=a,b`, runs values side by side)"
        )
    notes = _apply_on_change(found, plan, str(options.get("on_change") or "refuse"))
    results, todo = found.done, found.todo
    reused = list(results)
    if dist.active:  # torchrun: every rank runs the cells rank 0 found to do (and each checks again, see Runner.run)
        keys = set(dist.broadcast([c.key for c in todo]))
        todo = [c for c in plan.cells if c.key in keys]
        if executor != "local":
            raise ClbenchError(
                f"--executor {executor} under torchrun: torchrun's processes are the ranks of each "
                "cell; run them with the local executor"
            )
    faults = []
    try:
        if dist.is_main:
            notify(regs, "clbench_run_start", plan=plan)
    except ObserverError as exc:
        faults.append(str(exc))
        warnings.warn(f"{exc}; the run goes on", stacklevel=2)
    bar = tqdm(
        total=len(plan.cells), initial=len(results), desc="grid", unit="cell", disable=not progress or not dist.is_main
    )
    nproc = int(options.get("nproc") or 1)
    # --nproc N: each cell on N rank processes (started at the first cell that runs, kept for the next ones); a
    # sharded cell on one device (train.shard=offload) on one, the process group its engine needs
    pool = (
        RankPool(runner, nproc, regs.not_loaded, tuple(options.get("rank_plugins", ())))
        if any(c.in_ranks(nproc) for c in todo) and not dist.active
        else None
    )
    try:
        with pool or contextlib.nullcontext():
            for result in engine.run(todo, lambda c: pool.run(c) if pool and c.in_ranks(nproc) else runner.run(c)):
                results[result.key] = result
                bar.update(1)
                bar.set_postfix_str(f"{result.method} {result.stream} o{result.order} s{result.seed}: {result.status}")
    finally:
        bar.close()
    ordered = RunResults((results[c.key] for c in plan.cells if c.key in results), faults, reused, notes)
    try:
        if dist.is_main:
            notify(regs, "clbench_run_end", plan=plan, results=list(ordered))
    except ObserverError as exc:
        ordered.faults.append(str(exc))
        warnings.warn(str(exc), stacklevel=2)
    return ordered
