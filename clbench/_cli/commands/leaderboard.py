"""``clbench leaderboard``: markdown tables (and plots) from result directories."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from clbench._cli.commands._common import comma_set, margin_option, skipping
from clbench._core.registry import Registries
from clbench.errors import ClbenchError

if TYPE_CHECKING:  # pandas and scipy load when the command runs: `clbench --help` and `list` need neither
    from clbench._tools.fragility import RowFragility
    from clbench._tools.tables import Judging

FORMATS = {"md": ".md", "csv": ".csv", "json": ".json", "latex": ".tex"}


def _formats(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    names = [v.strip().lower() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise click.BadParameter(f"{', '.join(unknown) or value!r}: choose from {', '.join(FORMATS)} (a comma list)")
    return names


@click.command(name="leaderboard")
@click.argument("runs", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    default=None,
    type=click.Path(path_type=Path),
    help="Where to write (default: DIR/leaderboard/ of the one result folder given).",
)
@click.option(
    "--format",
    "formats",
    default="md",
    show_default=True,
    callback=_formats,
    help="Comma list of md, csv, json, latex: the markdown leaderboard, and the summary tables as "
    "numbers (csv, json) or a LaTeX table, as <profile>.<ext>.",
)
@click.option("--plots/--no-plots", default=True, help="Accuracy-over-time plot per stream.")
@click.option("--heatmaps", is_flag=True, help="Also an accuracy-matrix heatmap and a loss curve per cell.")
@margin_option
@click.option(
    "--reference",
    default=None,
    help="Judge every row against this method (e.g. your own), declared in advance. Default: every row against "
    "every other, valid whichever row turns out best.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="One per result folder, in order: its rows are METHOD@LABEL, so trees made with other settings (buffer 200 "
    "and 500) sit side by side in one table, judged together, paired by order and seed.",
)
@click.option("--methods", default=None, help="Only these methods' rows (a comma list of labels).")
@click.option("--stream", "streams", default=None, help="Only these streams (a comma list).")
@click.option(
    "--fragility",
    "fragility",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A `clbench tune --fragility` tree of these results: each summary row gains the worst neighbour of its tuned "
    "choice (0.5× and 2× its lr and strengths) rerun on its orders and seeds (docs/tuning.md). Repeatable: a track's "
    "rows that train as at its base profile (`base_tuned`) read theirs from the base's tree.",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the markdown on disk differs.")
@click.pass_obj
def command(
    regs: Registries,
    runs: tuple[Path, ...],
    out: Path | None,
    formats: list[str],
    plots: bool,
    heatmaps: bool,
    margins: dict[str, float],
    reference: str | None,
    labels: tuple[str, ...],
    methods: str | None,
    streams: str | None,
    fragility: tuple[Path, ...],
    check: bool,
) -> None:
    """Markdown tables (and plots) from result directories (default: runs/), written beside them."""
    from clbench._core.results import scan

    if out is None:
        if len(runs) > 1:
            raise click.UsageError("several result folders: say where their leaderboard goes with --out")
        out = (runs[0] if runs else Path("runs")) / "leaderboard"

    roots = runs or (Path("runs"),)
    if labels and (len(labels) != len(roots) or len(set(labels)) != len(labels) or not all(labels)):
        raise click.BadParameter(
            f"{len(labels)} labels for {len(roots)} result folders: give one distinct --label per folder",
            param_hint="--label",
        )
    results, skipped, trees = [], 0, []
    for root in roots:
        found = scan(root)
        skipped += skipping(found.problems)
        trees.append(found.results)
    if labels:  # one board of every tree: its profile names them all, its rows say which tree
        combined = "+".join(dict.fromkeys(str(r.config.get("profile", "custom")) for tree in trees for r in tree))
        trees = [
            [
                replace(
                    r,
                    method=f"{r.method}@{label}",
                    config={**r.config, "profile": combined, "tree_profile": r.config.get("profile", "custom")},
                )
                for r in tree
            ]
            for tree, label in zip(trees, labels, strict=True)
        ]
    for tree in trees:
        results += tree
    if skipped:
        click.echo(
            f"warning: {skipped} result{'s' if skipped > 1 else ''} skipped (named above): the leaderboard "
            "is built without them",
            err=True,
        )
    if not results:
        raise ClbenchError(f"no result files under {', '.join(map(str, runs or ('runs',)))}")
    for given, field in ((methods, "method"), (streams, "stream")):
        wanted = comma_set(given)
        if wanted:
            held = set().union(*(_names(r, field) for r in results))
            if wanted - held:
                raise ClbenchError(
                    f"--{'methods' if field == 'method' else 'stream'} {given}: no cell of "
                    f"{', '.join(sorted(wanted - held))} in these results; they hold {', '.join(sorted(held))}"
                )
            results = [r for r in results if _names(r, field) & wanted]
    # the same cell twice would be pooled as if it were two seeds: the same settings (one identity) in two trees is
    # one cell, read once (the first tree's); other settings under one cell's name are refused
    seen: dict[tuple[str, str], Any] = {}
    unique, twice = [], 0
    for r in results:
        first = seen.setdefault((str(r.config.get("profile", "custom")), r.key), r)
        if first is r:
            unique.append(r)
        elif first.config_hash is not None and first.config_hash == r.config_hash:
            twice += 1
        else:
            raise ClbenchError(
                f"cell {r.key} of profile {r.config.get('profile', 'custom')!r} is in {first.path} and "
                f"in {r.path} with other settings; give one result tree per profile"
            )
    if twice:
        click.echo(
            f"note: {twice} cell{'s' if twice > 1 else ''} with the same settings in more than one tree: read "
            "once, from the first tree given",
            err=True,
        )
    from clbench._tools.verify import with_matrix_metrics

    # ranked by the matrix metrics its matrices give, whatever the files store
    results, differ = with_matrix_metrics(regs, unique)
    if differ:
        click.echo(
            f"warning: {len(differ)} result{'s' if len(differ) > 1 else ''} store matrix metrics that their accuracy "
            "matrices do not give (edited by hand, or made by other metric code); the tables use the recomputed ones "
            "and `clbench metrics RUNS` stores them:\n  "
            + "\n  ".join(differ[:5])
            + ("\n  ..." if len(differ) > 5 else ""),
            err=True,
        )
    if reference is not None and reference not in {r.method for r in results}:
        known = sorted({r.method for r in results})
        raise ClbenchError(
            f"--reference {reference}: no cell of that method in these results; they hold {', '.join(known)}"
        )
    from clbench._tools.tables import Judging

    judging = Judging.of(regs, margins, reference)
    worst = _fragility(regs, results, fragility) if fragility else None
    try:
        stale = _write_leaderboards(regs, results, out, plots, heatmaps, check, judging, worst)
        if not check:
            _export(regs, results, out, [f for f in formats if f != "md"], judging, worst)
    except OSError as exc:
        raise ClbenchError(f"cannot write leaderboards to {out}/: {exc.strerror or exc}") from None
    if stale:
        sys.exit(1)


def _fragility(
    regs: Registries, results: list[Any], trees: tuple[Path, ...]
) -> dict[tuple[str, str], RowFragility | None]:
    """Per (stream, method) of ``results``: the worst neighbour in the fragility ``trees`` (:func:`row_fragility`),
    its move and on how many of the row's cells."""
    from clbench._core.results import scan
    from clbench._tools.fragility import row_fragility

    neighbours = []
    for tree in trees:
        found = scan(tree)
        if skipping(found.problems):
            raise ClbenchError(f"--fragility {tree}: unreadable results (named above); rerun them or move them away")
        neighbours += found.results
    scores = row_fragility(regs, results, neighbours)
    if not scores:
        raise ClbenchError(
            f"--fragility {', '.join(map(str, trees))}: no row of these results has its tuned choice there; make it "
            "with `clbench tune --profile P --fragility DIR`"
        )
    return scores


def _tree_lineage(regs: Registries, group: list[Any]) -> tuple[str, ...]:
    """The profiles whose presets the rows of a board of no registered profile read (several trees side by side under
    ``--label``, or a budget's board): each tree's own profile and those it extends."""
    from clbench._core.cells import profile_lineage
    from clbench._tools.leaderboard import tree_profiles

    trees = sorted(tree_profiles(group))
    return tuple(dict.fromkeys(p for tree in trees if tree in regs.profiles for p in profile_lineage(regs, tree)))


def _names(result: Any, field: str) -> set[str]:
    """What ``--methods`` (a row's label, and the method it runs) or ``--stream`` match a result by."""
    value = str(getattr(result, field))
    return {value, value.split("@", 1)[0]} if field == "method" else {value}


def _export(
    regs: Registries,
    results: list[Any],
    out: Path,
    formats: list[str],
    judging: Judging,
    fragility: dict[tuple[str, str], RowFragility | None] | None = None,
) -> None:
    """The summary tables as numbers (csv, json) or LaTeX, one file per profile; pandas writes them."""
    if not formats:
        return
    from clbench._tools.leaderboard import by_profile, summary_frame
    from clbench.data import atomic_write_text

    for profile, group in by_profile(results).items():
        df = summary_frame(group, regs.methods.items, judging, fragility)
        for fmt in formats:
            path = out / f"{profile}{FORMATS[fmt]}"
            if fmt == "csv":
                text = df.to_csv(index=False)
            elif fmt == "json":
                text = df.to_json(orient="records", indent=1, force_ascii=False) + "\n"
            else:
                text = _latex(df)
            atomic_write_text(path, text)
            click.echo(f"wrote {path}")


def _latex(df: Any) -> str:
    """One booktabs table per stream and scenario: the labels as printed (tags kept), AA as mean and 95 % interval
    (bold where the leaderboard bolds it), every objective present as mean ± std, cells, the verdict; the rule's
    margin in the caption."""

    def missing(x: Any) -> bool:
        return x is None or x != x  # None or NaN

    def pm(mean: Any, std: Any) -> str:
        if missing(mean):
            return "--"
        return f"{mean:.2f}" if missing(std) else f"${mean:.2f} \\pm {std:.2f}$"

    def interval(mean: Any, lo: Any, hi: Any, bold: bool) -> str:
        if missing(mean):
            return "--"
        text = f"{mean:.2f}" + ("" if missing(lo) else f" [{lo:.2f}, {hi:.2f}]")
        return f"\\textbf{{{text}}}" if bold else text

    import pandas as pd

    from clbench._tools.leaderboard import section_title

    objectives = [m for m in ("F.Ra", "BWT", "LA", "AIA", "FWT") if f"{m} mean" in df]
    blocks = []
    for (stream, scenario), group in df.groupby(["stream", "scenario"], sort=True):
        shown = pd.DataFrame(
            {
                "rank": group["rank"],
                "method": [_tex(label) for label in group["label"]],
                "AA": [
                    interval(m, lo, hi, b)
                    for m, lo, hi, b in zip(
                        group["AA mean"], group["AA ci low"], group["AA ci high"], group["bold"], strict=True
                    )
                ],
                **{
                    m: [pm(a, b) for a, b in zip(group[f"{m} mean"], group[f"{m} std"], strict=True)]
                    for m in objectives
                },
                "cells": group["cells"],
                "verdict": group["verdict"],
            }
        )
        reference = group["reference"].iloc[0]
        against = (
            f"against the declared reference {_tex(str(reference))}"
            if isinstance(reference, str)
            else "each row against every other (no reference declared)"
        )
        caption = (
            f"{_tex(section_title(stream, scenario))}. AA: mean and 95\\% two-level bootstrap interval over cells "
            f"and test examples. Verdicts by clbench's rule, {against}: one-sided paired sign-flip tests over the "
            f"cells, Holm-adjusted, $\\alpha = 0.05$; below/above: by more than "
            f"$\\Delta = {group['margin'].iloc[0]:g}$ pp ({_tex(group['margin from'].iloc[0])}); behind/ahead: a difference shown, "
            "one above $\\Delta$ not; equivalent: the 90\\% interval within $\\pm\\Delta$."
        )
        label = "tab:" + "".join(c if c.isalnum() else "-" for c in f"{stream}-{scenario}")
        blocks.append(
            shown.to_latex(
                index=False,
                escape=False,
                caption=caption,
                label=label,
                column_format="ll" + "r" * (len(shown.columns) - 2),
            )
        )
    return "\n".join(blocks)


def _tex(text: str) -> str:
    """Plain text for LaTeX: its special characters escaped."""
    for char, repl in (
        ("\\", r"\textbackslash{}"),
        ("&", r"\&"),
        ("%", r"\%"),
        ("_", r"\_"),
        ("#", r"\#"),
        ("$", r"\$"),
        ("{", r"\{"),
        ("}", r"\}"),
    ):
        text = text.replace(char, repl)
    return text


def _write_leaderboards(
    regs: Registries,
    results: list[Any],
    out: Path,
    plots: bool,
    heatmaps: bool,
    check: bool,
    judging: Judging,
    fragility: dict[tuple[str, str], RowFragility | None] | None = None,
) -> list[Path]:
    from clbench._core.cells import profile_lineage
    from clbench._tools.leaderboard import board_title, by_profile, render
    from clbench._tools.verify import stale as other_code

    stale = []
    for profile, group in by_profile(results).items():
        path = out / f"{profile}.md"
        text = render(
            group,
            regs.metrics.values(),
            board_title(profile, group),
            out.resolve(),
            regs.methods.items,
            judging,
            other_code=len(other_code(regs, group)),
            profile=regs.profiles.items.get(profile),
            lineage=profile_lineage(regs, profile) if profile in regs.profiles else _tree_lineage(regs, group),
            fragility=fragility,
        )
        if check:
            if not path.exists():
                click.echo(f"missing: {path} (write it with `clbench leaderboard` without --check)", err=True)
                stale.append(path)
            elif path.read_text(encoding="utf-8") != text:
                click.echo(f"stale: {path} differs from what the results give; run `clbench leaderboard`", err=True)
                stale.append(path)
            continue
        from clbench.data import atomic_write_text

        atomic_write_text(path, text)
        click.echo(f"wrote {path}")
        if plots:
            from clbench._tools.plots import accuracy_over_time, heatmap, loss_curve, sweep_plots

            for stream in sorted({r.stream for r in group}):
                p = accuracy_over_time(group, stream, out / "plots" / f"{profile}-{stream}-accuracy.png")
                click.echo(f"wrote {p}")
            for p in sweep_plots(group, out / "plots", profile):  # AA against a swept value (method@key=v)
                click.echo(f"wrote {p}")
            if heatmaps:  # per cell: its accuracy matrix, and its loss curve where result.json has losses
                from tqdm.auto import tqdm

                for r in tqdm(group, desc=f"heatmaps {profile}", unit="cell", leave=False, disable=None):
                    if r.status == "complete":
                        cell = out / "plots" / "heatmaps" / profile / r.stream / r.method
                        heatmap(r, cell / f"order-{r.order}-seed-{r.seed}.png")
                        loss_curve(r, cell / f"order-{r.order}-seed-{r.seed}-loss.png")
    return stale
