"""``clbench verify`` (rerun a sample of committed cells and compare) and ``clbench compare`` (two trees)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from clbench._cli.commands._common import count, jobs_option, unusable
from clbench._core.registry import Registries
from clbench.cell import CellResult
from clbench.errors import ClbenchError

_ATOL_HELP = "Allowed |Δ| in percentage points (scores, AA, F.Ra, BWT)."
_RTOL_HELP = "Allowed relative |Δ| of the other metrics."


class Tolerance(click.ParamType):
    """A finite number ≥ 0 (click's FloatRange lets NaN through: every comparison with it is false, so ``--atol nan``
    passed every difference)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r} is not a finite number ≥ 0", param, ctx)
        return number


TOLERANCE = Tolerance()


@click.command(name="verify")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--cells",
    "per_stream",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="Cells rerun per stream (the cheapest).",
)
@click.option("--atol", default=0.0, show_default=True, type=TOLERANCE, help=_ATOL_HELP)
@click.option("--rtol", default=0.0, show_default=True, type=TOLERANCE, help=_RTOL_HELP)
@click.option("--keep", type=click.Path(path_type=Path), default=None, help="Keep the rerun cells here.")
@click.pass_obj
def command(regs: Registries, run_dir: Path, per_stream: int, atol: float, rtol: float, keep: Path | None) -> None:
    """Rerun a sample of committed cells from their recorded settings and compare the numbers."""
    from clbench._core.results import scan
    from clbench._tools.verify import rerun, sample

    found = scan(run_dir)
    bad = unusable(found.problems)
    chosen = sample(found.results, per_stream)
    if not chosen:
        raise ClbenchError(
            f"no complete result under {run_dir}: nothing was verified" + (f" ({bad} unusable)" if bad else "")
        )
    click.echo(f"clbench verify: rerunning {len(chosen)} cells of {run_dir}", err=True)
    code = report_deltas(regs, {r.key: r for r in chosen}, {r.key: r for r in rerun(regs, chosen, keep)}, atol, rtol)
    sys.exit(code or (1 if bad else 0))


@click.command(name="stale")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0), help="Cells listed per tree.")
@click.option(
    "--rerun",
    is_flag=True,
    help="Run every stale cell again, in place, from the settings its result records (whatever commands made the "
    "tree), then list what is still stale.",
)
@jobs_option("With --rerun: cells at once in worker processes, as clbench run --jobs.")
@click.option("--progress/--no-progress", default=True, help="With --rerun: progress bars.")
@click.pass_obj
def stale(
    regs: Registries, run_dirs: tuple[Path, ...], limit: int, rerun: bool, jobs: int | str, progress: bool
) -> None:
    """List the results made by other code, data or settings resolution than what is installed.

    Exit 1 when any is found (rerun them: `clbench stale DIR --rerun`, or `clbench run ... --out DIR --on-change
    rerun`), 0 when every result of every tree was made by what is installed now."""
    from clbench._core.results import scan
    from clbench._tools.verify import stale as stale_results

    if rerun:
        for run_dir in run_dirs:
            _rerun_stale(regs, run_dir, stale_results(regs, scan(run_dir).results), jobs, progress)
    total = bad = 0
    for run_dir in run_dirs:
        found = scan(run_dir)
        bad += unusable(found.problems)
        listed = stale_results(regs, found.results)
        total += len(listed)
        for result, why in listed[:limit]:
            click.echo(f"stale: {result.path.parent if result.path else result.key}: {'; '.join(why)}")
        if len(listed) > limit:
            click.echo(f"stale: ... and {len(listed) - limit} more under {run_dir}")
        click.echo(f"{run_dir}: {len(listed)} of {len(found.results)} results made by other code or data", err=True)
    sys.exit(1 if total or bad else 0)


def _rerun_stale(
    regs: Registries, run_dir: Path, listed: Sequence[tuple[CellResult, list[str]]], jobs: int | str, progress: bool
) -> None:
    """Run the cells of ``listed`` (stale results under ``run_dir``) again where they lie, each from its recorded
    settings: one grid per folder that holds results laid out as ``clbench run --out`` lays them. A result whose
    settings no longer resolve to its cell is named and left (only a run of its profile can remake it)."""
    from clbench._cli.commands.run import summary
    from clbench._core.cells import cell_from_result
    from clbench._exec.executors import execute
    from clbench.cell import Plan

    grids: dict[Path, list[Any]] = {}
    for result, _why in listed:
        assert result.path is not None  # (scanned from files)
        root = result.path.parents[4]  # ROOT/stream/method/order-O/seed-S/result.json
        try:
            cell = cell_from_result(regs, result, root)
        except ClbenchError as exc:
            click.echo(f"not rerun: {result.path.parent}: {exc}", err=True)
            continue
        if cell.directory.resolve() != result.path.parent.resolve():
            click.echo(f"not rerun: {result.path.parent}: its cell's folder would be {cell.directory}", err=True)
            continue
        if cell.config_hash != result.config_hash:
            click.echo(
                f"not rerun: {result.path.parent}: its recorded settings now hash to another cell (a setting's "
                "meaning or default changed): run its profile again",
                err=True,
            )
            continue
        grids.setdefault(root, []).append(cell)
    for root, cells in grids.items():
        click.echo(f"clbench stale: rerunning {count(len(cells), 'cell')} under {root}/", err=True)
        profiles = sorted({c.profile for c in cells})
        results = execute(
            Plan(cells, profiles[0] if len(profiles) == 1 else "mixed", root),
            regs,
            progress=progress,
            options={"jobs": jobs, "on_change": "rerun"},
        )
        lines, _code = summary(results, getattr(results, "faults", ()))
        for line in lines:
            click.echo(line, err=True)


@click.command(name="compare")
@click.argument("old", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("new", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--atol", default=0.0, show_default=True, type=TOLERANCE, help=_ATOL_HELP)
@click.option("--rtol", default=0.0, show_default=True, type=TOLERANCE, help=_RTOL_HELP)
@click.pass_obj
def compare(regs: Registries, old: Path, new: Path, atol: float, rtol: float) -> None:
    """Compare two result trees cell by cell; exit 1 when a number moved beyond the tolerance."""
    from clbench._core.results import located, scan

    a, b = scan(old), scan(new)
    bad = unusable(a.problems + b.problems)
    if not a.results and not b.results:
        raise ClbenchError(
            f"no result under {old} or {new}: nothing was compared" + (f" ({bad} unusable)" if bad else "")
        )
    code = report_deltas(
        regs, {located(r, old): r for r in a.results}, {located(r, new): r for r in b.results}, atol, rtol
    )
    sys.exit(code or (1 if bad else 0))


def report_deltas(regs: Registries, old: Mapping[str, Any], new: Mapping[str, Any], atol: float, rtol: float) -> int:
    """Print the cell-by-cell table and the missing/extra cells; 1 when a cell moved beyond the tolerance
    or is missing from ``new``."""
    from tabulate import tabulate

    from clbench._tools.verify import compare as compare_results
    from clbench._tools.verify import percent_metrics, table, verdict_of

    deltas, only_old, only_new = compare_results(old, new)
    percent = percent_metrics(regs)
    click.echo(
        tabulate(
            table(deltas, atol, rtol, percent),
            headers=["cell", "max |Δa| (pp)", "changed", "verdict"],
            tablefmt="github",
            disable_numparse=True,
        )
    )
    for key in only_old:
        click.echo(f"missing: {key} (only in the first)", err=True)
    for key in only_new:
        click.echo(f"extra: {key} (only in the second)", err=True)
    bad = [d for d in deltas if not d.within(atol, rtol, percent)]
    kernels = [_kernels(side.values()) for side in (old, new)]
    if any(d.matrix or d.metrics for d in deltas) and kernels[0] != kernels[1]:
        made = kernels[0]  # one kernel name (AVX2) can be forced on a CPU that has more (AVX512)
        force = (
            f" (ATEN_CPU_CAPABILITY={made.lower()} reruns on torch's own kernels of the first; BLAS and oneDNN pick "
            "theirs apart)"
            if made.isalnum()
            else ""
        )
        click.echo(
            f"CPU kernels: {kernels[0]} made the first, {kernels[1]} the second{force}; float results differ between "
            "kernel paths, and a chaotic cell's by whole points",
            err=True,
        )
    other = sum(verdict_of(d, atol, rtol, percent) == "other code" for d in bad)
    click.echo(
        f"{len(deltas) - len(bad)} within tolerance, {len(bad)} beyond it (atol {atol:g} pp, rtol {rtol:g})"
        + (f", {other} of them made by other code or data" if other else "")
        + f"; {len(only_old)} missing",
        err=True,
    )
    return 1 if bad or only_old else 0


def _kernels(results: Iterable[Any]) -> str:
    """The CPU kernel paths (``env.cpu_capability``) the CPU cells of ``results`` were made with."""
    found = {str(r.env.get("cpu_capability", "not recorded")) for r in results if r.env.get("device") == "cpu"}
    return ", ".join(sorted(found)) or "none on the CPU"
