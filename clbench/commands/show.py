"""``clbench show``: the accuracy matrix and metrics of one cell."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command(name="show")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--plot", type=click.Path(path_type=Path), default=None, help="Also write the heatmap PNG here.")
@click.option("--loss-plot", type=click.Path(path_type=Path), default=None,
              help="Also write the per-epoch loss curve PNG here (from result.json's timings).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw result.json.")
def command(path: Path, plot: Path | None, loss_plot: Path | None, as_json: bool) -> None:
    """The accuracy matrix and metrics of one cell."""
    from clbench.leaderboard import render_cell
    from clbench.results import RESULT_FILE, read_result

    if path.is_dir():
        path = path / RESULT_FILE
    r = read_result(path)
    if as_json:
        click.echo(json.dumps(r.to_json(), indent=2, sort_keys=True))
        return
    click.echo(render_cell(r))
    if plot:
        from clbench.plots import heatmap

        click.echo(f"wrote {heatmap(r, plot)}")
    if loss_plot:
        from clbench.plots import loss_curve

        written = loss_curve(r, loss_plot)
        click.echo(f"wrote {written}" if written else "no loss curve: this result records no per-epoch loss")
