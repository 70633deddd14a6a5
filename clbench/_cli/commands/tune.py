"""``clbench tune``: a profile's learning rates and strengths by the tuning protocol (clbench._tools.tune)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from clbench._cli.commands._common import jobs_option, margin_option
from clbench._cli.commands.run import csv_option, seeds_option
from clbench._core.registry import Registries
from clbench.errors import ClbenchError


def _power_of_two(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is None:
        return None
    if value < 1 or value & (value - 1):
        raise click.BadParameter(f"{value}: give a power of two (1, 2, 4, 8, ...): a Sobol sequence is balanced there")
    return value


@click.command(name="tune")
@click.option("--profile", default="quick", show_default=True, help="The profile whose presets are tuned.")
@click.option("--stream", "streams", help="Comma-separated streams (default: the profile's).")
@click.option("--methods", help="Comma-separated method labels (default: the profile's).")
@click.option("--set", "sets", multiple=True, metavar="SCOPE.KEY=VALUE", help="A setting for every tuning cell.")
@click.option("--out", type=click.Path(path_type=Path), help="Tuning results (default: results/tuning/PROFILE).")
@click.option("--data-dir", type=click.Path(exists=True, file_okay=False), help="As clbench run --data-dir.")
@click.option(
    "--trials",
    type=int,
    callback=_power_of_two,
    help="Configurations a round for one searched setting (a power of 2; default: the tuning tree's, else 8).",
)
@click.option(
    "--search",
    "rule",
    type=click.Choice(["per-setting", "flat"]),
    help="per-setting: TRIALS for each setting a method × stream searches, rounded up to a power of 2; flat: "
    "TRIALS whatever the number (default: the rule the tuning tree records, else per-setting).",
)
@click.option(
    "--extensions",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="Searches past a range's edge, at most.",
)
@click.option("--offset", default=1000, show_default=True, help="Tuning seed = reported seed + OFFSET.")
@click.option("--tuning-seeds", type=click.IntRange(min=1), help="Tune on the first N twins (default: every one).")
@margin_option
@jobs_option("Cells at once (as clbench run).")
@click.option("--write", type=click.Path(path_type=Path), help="Write the choices as a presets file (JSON) there.")
@click.option(
    "--fragility",
    type=click.Path(path_type=Path),
    help="Also run each choice's neighbours (0.5× and 2× its lr and strengths) on the reported seeds and orders, "
    "scored on the test split, into this folder, and print each one's AA there (docs/tuning.md).",
)
@click.option(
    "--fragility-seeds",
    callback=lambda ctx, param, value: seeds_option(value, "--fragility-seeds"),
    help="With --fragility: run the neighbours on these of the reported seeds only (comma-separated; default: all).",
)
@click.option(
    "--fragility-orders",
    callback=lambda ctx, param, value: csv_option(value, "--fragility-orders"),
    help="With --fragility: run the neighbours on these of the reported orders only (default: all).",
)
@click.option("--check", is_flag=True, help="Run nothing; exit 1 when a preset is not what the results choose.")
@click.option("--progress/--no-progress", default=True, help="Progress bars.")
@click.pass_obj
def command(
    regs: Registries,
    profile: str,
    streams: str | None,
    methods: str | None,
    sets: tuple[str, ...],
    out: Path | None,
    data_dir: str | None,
    trials: int | None,
    rule: str | None,
    extensions: int,
    offset: int,
    tuning_seeds: int | None,
    margins: dict[str, float],
    jobs: int | str,
    write: Path | None,
    fragility: Path | None,
    fragility_seeds: list[int] | None,
    fragility_orders: list[str] | None,
    check: bool,
    progress: bool,
) -> None:
    """Choose learning rates and method strengths on tuning seeds and a held-out order, never the reported ones.

    Every method gets the same number of configurations for each setting it searches (a Sobol sequence over log
    ranges), scored by validation AA; a choice on a range's edge searches past it; the choice is rerun at 0.5× and
    2× its learning rate and strengths. Rerunning resumes; the table it prints is docs/tuning.md's. See
    docs/tuning.md.
    """
    from clbench._tools.tables import Judging
    from clbench._tools.tune import choice, lower_bounds, preset_mismatches, preset_table, search_of, tune
    from clbench.config import parse_sets

    root = out or Path("results") / "tuning" / profile
    trials, rule = search_of(root, trials, rule)
    pairs, left = tune(
        regs,
        profile,
        root,
        streams=streams.split(",") if streams else None,
        methods=methods,
        sets=parse_sets(sets),
        trials=trials,
        rule=rule,
        extensions=extensions,
        offset=offset,
        tuning_seeds=tuning_seeds,
        data_dir=data_dir,
        options={"jobs": jobs},
        progress=progress,
        dry_run=check,
    )
    floors = lower_bounds(pairs)  # SeqFT's choice per stream: a method no better than it is flagged
    judging = Judging.of(regs, margins)
    choices = [choice(p, judging.rule(p.stream, p.scenario).margin, floors.get(p.stream)) for p in pairs]
    for c in choices:
        if c.chosen is None:
            continue
        point = ", ".join(f"{k}={v:g}" for k, v in c.chosen.point.items())
        edge = f"; on the edge: {', '.join(c.edges)}" if c.edges else ""
        flag = f"; 2× moves beyond Δ: {', '.join(c.flagged)}" if c.flagged else ""
        if c.at_lower_bound:
            flag += f"; indistinguishable from its lower bound: {', '.join(c.at_lower_bound)}"
        click.echo(
            f"{c.pair.key}: {point} (validation AA {c.chosen.mean:.2f} ± {c.chosen.sd:.2f}, "
            f"{len(c.pair.trials)} configurations){edge}{flag}"
        )
    if write is not None:
        if left:
            raise ClbenchError(f"--write {write}: {left} tuning cells are still to run; run `clbench tune` first")
        doc = {
            "profile": profile,
            "written_by": f"clbench tune --profile {profile} --write",
            "tuning_results": str(root),
            "search": {"trials": trials, "rule": rule, "extensions": extensions},
            "methods": preset_table(profile, choices),
        }
        write.parent.mkdir(parents=True, exist_ok=True)
        write.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        click.echo(f"wrote {write}", err=True)
    fragile_left = 0
    if fragility is not None:
        if left:
            raise ClbenchError(
                f"--fragility {fragility}: {left} tuning cells are still to run; run `clbench tune` first"
            )
        from clbench._tools.fragility import fragility as neighbours
        from clbench._tools.fragility import fragility_of

        scores, fragile_left = neighbours(
            regs,
            pairs,
            profile,
            fragility,
            sets=parse_sets(sets),
            data_dir=data_dir,
            seeds=fragility_seeds,
            orders=fragility_orders,
            options={"jobs": jobs},
            progress=progress,
            dry_run=check,
        )
        for key, moves in scores.items():
            shown = ", ".join(f"{k} {'not complete' if v is None else f'{v:.2f}'}" for k, v in moves.items())
            worst = fragility_of(moves)
            click.echo(
                f"{key}: AA on the reported cells: {shown}"
                + (
                    ""
                    if worst is None
                    else f"; worst neighbour {worst[0]}, "
                    + ("not complete" if worst[1] == -math.inf else f"{worst[1]:+.2f} against the choice")
                )
            )
    bad = preset_mismatches(choices)
    for line in bad:
        click.echo(f"preset: {line}", err=True)
    # the presets were read at start: a file --write just wrote is in them from the next start on
    stale = f" (as loaded before --write {write}: `clbench tune --check` reads it)" if write is not None and bad else ""
    click.echo(
        f"clbench tune: {len(pairs)} method × stream pairs; {len(bad)} presets differ from the choice{stale}"
        + (f"; {left} cells still to run" if left else "")
        + (f"; {fragile_left} neighbour cells still to run" if fragile_left else ""),
        err=True,
    )
    sys.exit(1 if check and (bad or left or fragile_left) else 0)
