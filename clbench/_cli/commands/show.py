"""``clbench show``: the accuracy matrix and metrics of one cell."""

from __future__ import annotations

import json
from pathlib import Path

import click

from clbench._cli.commands._common import skipping
from clbench.errors import ClbenchError


@click.command(name="show")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Also write the heatmap PNG here.")
@click.option(
    "--loss-plot",
    type=click.Path(path_type=Path),
    default=None,
    help="Also write the per-epoch loss curve PNG here (from result.json's timings).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the raw result.json.")
def command(path: Path, plot: Path | None, loss_plot: Path | None, as_json: bool) -> None:
    """The accuracy matrix and metrics of one cell (PATH: its folder or result.json), or of every cell under a
    folder (an order's seeds: what a leaderboard links to for a row of several seeds)."""
    from clbench._core.results import read_result, scan
    from clbench._tools.leaderboard import render_cell
    from clbench.cell import RESULT_FILE

    if path.is_dir() and not (path / RESULT_FILE).exists():
        found = scan(path)
        skipping(found.problems)
        if not found.results:
            raise ClbenchError(f"no result under {path}")
        if as_json or plot or loss_plot:
            raise ClbenchError(
                f"{path} holds {len(found.results)} cells; --json, --plot and --loss-plot take one cell's folder"
            )
        click.echo("\n\n".join(render_cell(r) for r in found.results))
        return
    if path.is_dir():
        path = path / RESULT_FILE
    r = read_result(path)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2, sort_keys=True))
        return
    click.echo(render_cell(r))
    if plot:
        from clbench._tools.plots import heatmap

        click.echo(f"wrote {heatmap(r, plot)}")
    if loss_plot:
        from clbench._tools.plots import loss_curve

        written = loss_curve(r, loss_plot)
        click.echo(f"wrote {written}" if written else "no loss curve: this result records no per-epoch loss")
