"""``clbench metrics``: recompute every complete cell's metrics from its matrix and footprint file."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from clbench._cli.commands._common import unusable, warned
from clbench._core.registry import Registries
from clbench.errors import ClbenchError


@click.command(name="metrics")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if a stored metric differs from the recomputed one.")
@click.pass_obj
def command(regs: Registries, runs: tuple[Path, ...], check: bool) -> None:
    """Recompute every complete cell's metrics from its matrix and footprint file (no training).

    Without --check the recomputed metrics are written into each result.json (after a metric plugin
    changed, say). Footprint files are checked against the sha256 and size their result.json records.
    """
    from clbench._tools.verify import RECOMPUTE_RTOL, recompute_tree

    done = warned(lambda: recompute_tree(regs, runs, write=not check))
    bad = unusable(done.problems)
    if not done.checked and not done.deltas:
        raise ClbenchError(
            f"no complete result under {', '.join(map(str, runs))}: nothing was checked"
            + (f" ({bad} unusable)" if bad else "")
        )
    for d in done.deltas:
        moved = d.note or ", ".join(f"{k}: {a!r} → {b!r}" for k, (a, b) in d.metrics.items()) or "metric errors changed"
        click.echo(f"{'differs' if check else 'updated'}: {d.key}: {moved}", err=True)
    broken = [d for d in done.deltas if d.note]
    partial = len(done.without_footprints)
    click.echo(
        f"clbench metrics: {done.checked} complete cells recomputed"
        + (f" ({partial} without a footprint file: matrix metrics only)" if partial else "")
        + f"; {len(done.deltas) - len(broken)} {'differ' if check else 'changed'} "
        f"(relative tolerance {RECOMPUTE_RTOL:g}); {len(broken) + bad} unreadable",
        err=True,
    )
    sys.exit(1 if broken or bad or (check and done.deltas) else 0)
