"""``clbench run``: train and evaluate a grid of cells, then a compact summary (exit 0, 1 or 2)."""

from __future__ import annotations

import copy
import dataclasses
import gc
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from clbench._cli.commands._common import INTERRUPTED, count, jobs_option
from clbench._core.registry import Registries
from clbench.cell import ERROR_LOG, CellResult
from clbench.errors import ClbenchError, ConfigError
from clbench.specs import OptionSpec

if TYPE_CHECKING:
    from clbench._exec.cards import Card

LEADERBOARD_FILE = "leaderboard.md"  # `clbench run --leaderboard` writes <out>/leaderboard.md


def csv_option(value: str | None, option: str = "the option") -> list[str] | None:
    """A comma list; an empty one is refused (it would silently mean the default)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ClbenchError(
            f"{option} {value!r}: names nothing; give at least one value, or leave {option} out for the default"
        )
    return items


def _weights_flag(regs: Registries, model: str | None, model_path: str | None) -> tuple[str | None, str | None, bool]:
    """``--model google-t5/t5-large`` (a path or hub name, not a model plugin): weights for the stream's model plugin,
    as ``--model-path`` gives them; returns (model, model_path, whether --model named the weights)."""
    if model and model not in regs.models and ("/" in model or Path(model).expanduser().exists()):
        if model_path:
            raise click.UsageError(f"--model {model} is a path or hub name, and --model-path is given too")
        return None, model, True
    return model, model_path, False


def _refuse_empty(methods: str | None, device_memory: str | None) -> None:
    """``--methods ''`` or ``--device-memory ''``: given, yet naming nothing (it would silently mean the default)."""
    if methods is not None and not methods.strip():
        raise ClbenchError("--methods '': names nothing; give a method, a comma list, or all")
    if device_memory is not None and not device_memory.strip():
        raise ClbenchError("--device-memory '': give a size (80GiB), or off")


def seeds_option(value: str | None, option: str = "--seeds") -> list[int] | None:
    """A comma list of seeds (``option`` names it in a message)."""
    items = csv_option(value, option)
    if items is None:
        return None
    try:
        seeds = [int(v) for v in items]
    except ValueError:
        raise ClbenchError(f"{option} {value!r}: expected integers separated by commas, e.g. 0,1,2") from None
    if any(s < 0 for s in seeds):
        raise ClbenchError(f"{option} {value!r}: seeds are non-negative integers")
    return seeds


@click.command(name="run")
@click.option(
    "--methods", default=None, help="Comma-separated methods, 'a+b' to compose, or 'all' (default: the profile's)."
)
@click.option("--stream", "streams", default=None, help="Comma-separated streams (default: the profile's).")
@click.option("--orders", default=None, help="Comma-separated order names (default: the profile's).")
@click.option("--seeds", default=None, help="Comma-separated seeds (default: the profile's).")
@click.option("--profile", default="quick", show_default=True, help="Named defaults; see `clbench list profiles`.")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="SCOPE.KEY=VALUE",
    help="Override a setting, e.g. ewc.lambda=100 or train.epochs=2; a,b,c sweeps (see `clbench list settings NAME`).",
)
@click.option(
    "--model",
    default=None,
    metavar="PLUGIN|NAME_OR_PATH",
    help="Model plugin, or a hub name / local folder of weights for the stream's model plugin.",
)
@click.option("--out", default="runs", show_default=True, type=click.Path(path_type=Path), help="Result directory.")
@click.option(
    "--data-dir",
    default=None,
    type=click.Path(path_type=Path),
    help="Local data directory for streams that read one (e.g. a CL_Benchmark copy).",
)
@click.option("--model-path", default=None, help="Local path (or hub name) of the model's weights.")
@click.option("--executor", default="local", show_default=True, help="Where cells run; see `clbench list executors`.")
@jobs_option(
    "Cells at once in worker processes (local executor): N, or auto: one per CPU when every cell runs on the CPU, "
    "else 1. Numbers do not depend on it (threads are `train.threads`)."
)
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=None,
    help="Data-parallel cells: each on N processes (torch.distributed; gloo on the CPU, NCCL on GPUs), "
    "the global batch split between them. Under torchrun its processes are the ranks.",
)
@click.option(
    "--on-change",
    type=click.Choice(["refuse", "rerun", "reuse"]),
    default="refuse",
    show_default=True,
    help="A finished cell whose result was made by other code or data (a plugin's sources, a data file, "
    "a version, a metric not computed): refuse to run, rerun it, or reuse it (named in the summary).",
)
@click.option("--fail-fast", is_flag=True, help="Stop at the first failed cell.")
@click.option(
    "--leaderboard/--no-leaderboard",
    "write_board",
    default=False,
    help=f"Also write this run's leaderboard to OUT/{LEADERBOARD_FILE} (default: print the command "
    "that makes one; --no-leaderboard is accepted and does nothing).",
)
@click.option("--progress/--no-progress", default=True, help="Progress bars.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="List each method and stream left out of --methods all, and why; with --explain, the defaults too.",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Print every setting the cells take and where its value came from (a stream's or method's preset, the "
    "profile, --set, a flag, the default), then stop; with --dry-run, the memory plan follows.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Plan the grid and print each cell's estimated peak device memory, by part, and its floating-point "
    "operations; train nothing.",
)
@click.option(
    "--device-memory",
    default=None,
    metavar="SIZE",
    help="Refuse, before any cell starts, cells whose estimated peak exceeds SIZE (80GiB, 141GiB; default: "
    "the visible GPU's memory when the cells run on one; 'off': no check).",
)
@click.option(
    "--card",
    default=None,
    metavar="NAME",
    help="Plan for this GPU (a100-80gb, h100-80gb, h200): its memory is the limit unless --device-memory gives "
    "one, and --dry-run adds each cell's time at the card's dense peak and the grid's total (lower bounds).",
)
@click.pass_obj
def command(
    regs: Registries,
    methods: str | None,
    streams: str | None,
    orders: str | None,
    seeds: str | None,
    profile: str,
    sets: tuple[str, ...],
    model: str | None,
    out: Path,
    data_dir: Path | None,
    model_path: str | None,
    executor: str,
    jobs: int | str,
    nproc: int | None,
    on_change: str,
    fail_fast: bool,
    write_board: bool,
    progress: bool,
    verbose: bool,
    explain: bool,
    dry_run: bool,
    device_memory: str | None,
    card: str | None,
    **options: Any,
) -> None:
    """Train and evaluate a grid of cells (method × stream × order × seed).

    -p no:NAME and --debug (options of `clbench`) may also be given after `run`.
    """
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.executors import execute
    from clbench._exec.ranks import launched_by_torchrun
    from clbench._exec.worker import freeze_loaded
    from clbench.config import parse_sets

    INTERRUPTED["line"] = "interrupted: finished cells and checkpoints are kept; rerun the same command to resume"
    _check_executor_options(regs, executor, options)
    model, model_path, weights_from_model = _weights_flag(regs, model, model_path)
    _refuse_empty(methods, device_memory)
    from clbench._exec.cards import card as find_card

    target = find_card(card) if card is not None else None  # an unknown card is named before the grid is planned
    req = RunRequest(
        profile=profile,
        methods=methods,
        streams=csv_option(streams, "--stream"),
        orders=csv_option(orders, "--orders"),
        seeds=seeds_option(seeds),
        sets=parse_sets(sets),
        model=model,
        out=out,
        options=options,
        data_dir=str(data_dir) if data_dir else None,
        model_path=model_path,
    )
    try:
        plan = make_plan(regs, req)
    except ConfigError as exc:  # the weights were given as --model: say so, not --model-path
        prefix = f"--model-path {model_path}: "
        if weights_from_model and str(exc).startswith(prefix):
            raise ConfigError(
                f"--model {model_path}: no model plugin has this name (`clbench list models`), and "
                f"as a path of weights: {str(exc).removeprefix(prefix)}"
            ) from None
        raise
    if launched_by_torchrun() and os.environ["RANK"] != "0":  # a rank of torchrun's: rank 0 says what happens
        results = execute(
            plan,
            regs,
            executor=executor,
            fail_fast=fail_fast,
            progress=False,
            options={**options, "jobs": 1, "nproc": nproc, "on_change": on_change},
        )
        sys.exit(summary(results, getattr(results, "faults", ()))[1])
    for line in _plan_lines(regs, plan, verbose):
        click.echo(line, err=True)
    if explain:
        click.echo("\n".join(explain_lines(regs, req, plan.cells, verbose)))
        if not dry_run:
            sys.exit(0)
    ranked = [dataclasses.replace(c, nproc=nproc) for c in plan.cells] if nproc else plan.cells  # a rank's plan
    _memory_plan(regs, ranked, dry_run, device_memory, progress, target)
    freeze_loaded()  # each cell's objects are then collected after it for ~0.1 ms (clbench._exec.runner.release)
    try:
        results = execute(
            plan,
            regs,
            executor=executor,
            fail_fast=fail_fast,
            progress=progress,
            options={**options, "jobs": jobs, "nproc": nproc, "on_change": on_change},
        )
    finally:
        gc.unfreeze()  # (main() may be called in a process that goes on)
    lines, code = summary(results, getattr(results, "faults", ()))
    if results:
        from clbench._tools.leaderboard import console_summary
        from clbench._tools.tables import Judging

        spec = regs.profiles.items.get(plan.profile)
        table = console_summary(
            results, regs.methods.items, Judging.of(regs), rows=spec.rows if spec is not None else None
        )
        if table:
            click.echo("\n" + table)
        line, written = _leaderboard_line(regs, results, plan.profile, out, write_board)
        lines.insert(len(lines) - 1, line)  # the last line stays the count and the exit code
        code = code or (0 if written else 2)
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


def explain_lines(regs: Registries, req: Any, cells: Sequence[Any], defaults: bool = False) -> list[str]:
    """Each group of cells that take the same settings from the same places (a method on a stream: its orders and
    seeds), then one line a setting: its value, the layer it came from and the lower layers' values it replaced.
    Settings at their default are counted, or listed with ``defaults``."""
    import dataclasses
    import json

    from clbench._core.cells import explain

    def shown(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value

    groups: dict[tuple[str, str, str], tuple[list[Any], list[Any]]] = {}
    for c in cells:
        rows = explain(regs, req, c)
        same = json.dumps([dataclasses.astuple(r) for r in rows], default=str)  # (values may be lists)
        groups.setdefault((c.stream, c.method, same), (rows, []))[1].append(c)
    lines = []
    for (stream, method, _), (rows, group) in groups.items():
        orders = ", ".join(dict.fromkeys(c.order for c in group))
        seeds = ", ".join(dict.fromkeys(str(c.seed) for c in group))
        lines += ["", f"{method} on {stream} (order {orders}; seed {seeds}: {count(len(group), 'cell')})"]
        chosen = [r for r in rows if defaults or r.layer != "default"]
        width = max((len(r.key) for r in chosen), default=0)
        values = min(max((len(shown(r.value)) for r in chosen), default=0), 24)  # (a long path is not a column)
        for r in chosen:
            over = "; over " + ", ".join(f"{layer}: {shown(v)}" for layer, v in r.shadowed) if r.shadowed else ""
            lines.append(f"  {r.key:<{width}}  {shown(r.value):<{values}}  ← {r.layer}{over}")
        if not defaults:
            lines.append(f"  ({count(len(rows) - len(chosen), 'other setting')} at the default: -v lists them)")
    return lines


def _check_executor_options(regs: Registries, executor: str, options: Mapping[str, Any]) -> None:
    """The executor exists, and no option of another executor is given (it would be silently ignored)."""
    regs.executors.get(executor)
    for spec in regs.options.values():
        value = options.get(spec.name.replace("-", "_"))
        if spec.executor and spec.executor != executor and value not in (None, False, spec.default):
            raise ConfigError(
                f"--{spec.name} configures --executor {spec.executor}; this run uses --executor "
                f"{executor}, which ignores it"
            )


def _memory_plan(
    regs: Registries,
    cells: Sequence[Any],
    dry_run: bool,
    device_memory: str | None,
    progress: bool,
    card: Card | None = None,
) -> None:
    """``--dry-run``: print every distinct cell's memory estimate and exit (2 when one does not fit). Otherwise,
    with ``--device-memory``, ``--card`` or cells on a GPU, refuse the cells that do not fit before any starts."""
    from clbench._exec import memory

    if card is not None and device_memory is None:
        device_memory = f"{card.memory}B"
    if device_memory == "off" and not dry_run:  # the plan of an 8B masked method takes minutes on the meta device
        return
    limit = memory.parse_size(device_memory) if device_memory and device_memory != "off" else None
    on_gpu = any(c.device_type == "cuda" for c in cells)
    if limit is None and on_gpu and device_memory != "off":
        limit = memory.visible_device_memory()
    if not (dry_run or device_memory or on_gpu):
        return
    # a GPU run checks on the meta device only: a CPU measurement of a big model would take its own hours
    rows = memory.plan_memory(regs, list(cells), progress, cpu_fallback=dry_run or device_memory is not None)
    if dry_run:
        click.echo(memory.memory_table(rows, limit, card))
        click.echo(memory.grid_line(rows, list(cells), card))
    over = [(c, e) for c, e in rows if e is not None and limit is not None and e.peak > limit]
    for cell, est in over:
        assert limit is not None  # only a known limit is exceeded
        parts = ", ".join(f"{name} {memory.fmt_bytes(n)}" for name, n in est.largest())
        click.echo(
            f"does not fit: {cell.key}: {memory.fmt_bytes(est.peak)} > {memory.fmt_bytes(limit)} "
            f"(largest: {parts}); try {'; '.join(memory.remedies(regs, cell, est)) or 'a smaller model'}",
            err=True,
        )
    if over:
        assert limit is not None  # only a known limit is exceeded
        raise ClbenchError(
            f"{count(len(over), 'cell')} would not fit in {memory.fmt_bytes(limit)} of device memory "
            "(estimated before anything ran; clbench run --dry-run shows every part)"
        )
    if dry_run:
        sys.exit(0)


def _plan_lines(regs: Registries, plan: Any, verbose: bool) -> list[str]:
    """What the run says before its first cell: pairings not run, settings it chose, the grid's size."""
    lines = [f"skipped: {line}" for line in plan.skipped] if verbose else []
    if plan.skipped and not verbose:
        n = len(plan.skipped)
        lines.append(
            f"not run: {n} method/stream pairing{'s' if n > 1 else ''} that do not apply (a scenario a "
            "method cannot run in, a stream's preset of methods); -v lists them"
        )
    lines += _chosen_settings(regs, plan.cells)
    lines.append(f"clbench: {count(len(plan.cells), 'cell')}, profile {plan.profile!r}, results in {plan.out}/")
    return lines


def _chosen_settings(regs: Registries, cells: Sequence[Any]) -> list[str]:
    """One line per stream whose training settings nobody chose for it: a stream of your own data (tag
    ``own-data``: its presets are generic), or a stream without a preset for the run's profile (the training
    defaults). Each method's model and settings (methods with the same ones together)."""
    from clbench._core.cells import profile_lineage

    chosen: dict[str, dict[str, list[str]]] = {}  # stream → settings text → methods
    why: dict[str, str] = {}
    for c in cells:
        spec = regs.streams.get(c.stream)
        preset = any(p in spec.presets for p in profile_lineage(regs, c.profile))
        if preset and "own-data" not in spec.tags:
            continue
        t = c.train
        text = (
            f"model {c.model}, {t.epochs} epoch{'s' if t.epochs > 1 else ''} a task, {t.optimizer} lr {t.lr:g}"
            + (f" momentum {t.momentum:g}" if t.momentum else "")
            + f", batch {t.batch_size}"
        )
        methods = chosen.setdefault(c.stream, {}).setdefault(text, [])
        if c.method not in methods:
            methods.append(c.method)
        why[c.stream] = (
            "its presets, not tuned for your data" if preset else f"no preset for profile {c.profile!r}: the defaults"
        )
    return [
        f"{stream}: "
        + "; ".join(f"{', '.join(methods)}: {text}" for text, methods in groups.items())
        + f" ({why[stream]}: --model, --set train.lr=... change them; `clbench list settings train`)"
        for stream, groups in chosen.items()
    ]


def _leaderboard_line(
    regs: Registries, results: Sequence[CellResult], profile: str, out: Path, write: bool
) -> tuple[str, bool]:
    """Where this run's leaderboard is: written to OUT/leaderboard.md (``--leaderboard``), or the command
    that makes one; and false when it was asked for and could not be written (the run then exits 2, not 0)."""
    if not write:
        return (
            f"results: {out}/; leaderboard: clbench leaderboard {shlex.quote(str(out))} (writes {out / 'leaderboard'}/)"
        ), True
    from clbench._tools.leaderboard import render
    from clbench._tools.tables import Judging
    from clbench.data import atomic_write_text

    path = out / LEADERBOARD_FILE
    text = render(
        results,
        regs.metrics.values(),
        f"profile `{profile}` ({out})",
        out.resolve(),
        regs.methods.items,
        Judging.of(regs),
        profile=regs.profiles.items.get(profile),
    )
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        return f"leaderboard: cannot write {path}: {exc.strerror or exc}", False
    return f"results: {out}/; leaderboard: wrote {path}", True


def with_plugin_options(cmd: click.Command, options: Iterable[OptionSpec]) -> click.Command:
    """A copy of ``cmd`` with the options plugins add (``clbench_add_options``) after its own; their values
    reach the command as keyword arguments and the run as ``RunRequest.options``."""
    extra = [
        click.Option(
            [f"--{spec.name}", spec.name.replace("-", "_")],
            default=spec.default,
            type=None if spec.is_flag else spec.type,
            is_flag=spec.is_flag,
            help=spec.help,
        )
        for spec in options
    ]
    if not extra:
        return cmd
    new = copy.copy(cmd)
    new.params = [*cmd.params, *extra]
    return new


def summary(results: Sequence[CellResult], faults: Sequence[str] = ()) -> tuple[list[str], int]:
    """The closing lines of a run and its exit code, as pytest's: 0 when every cell is complete or diverged
    (a divergence is a result), 1 when a cell failed or an observer of the run raised."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines = []
    for r in results:
        if r.status == "diverged":
            lines.append(f"diverged: {r.key}: {r.error}")
    for r in results:
        if r.status == "failed":
            log = r.path.parent / ERROR_LOG if r.path else None
            where = f" (traceback: {log})" if log is not None and log.exists() else ""
            lines.append(f"failed: {r.key}: {r.error}{where}")
    lines += [f"fault: {f}" for f in faults]
    lines += [f"metric error: {r.key}: {msg}" for r in results for msg in sorted(r.metric_errors.values())]
    lines += list(getattr(results, "notes", ()))
    parts = [f"{counts[s]} {s}" for s in ("complete", "diverged", "failed") if counts.get(s)]
    failed = counts.get("failed", 0) + len(faults)
    reused = len(getattr(results, "reused", ()))
    lines.append(
        f"clbench: {count(len(results), 'cell')}: {', '.join(parts) or 'none'}"
        + f"; {reused} reused"
        + (f"; {count(len(faults), 'observer fault')}" if faults else "")
        + f"; exit {1 if failed else 0}"
    )
    return lines, 1 if failed else 0
