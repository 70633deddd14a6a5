"""Leaderboards: result files → pandas → markdown (tabulate). One function, deterministic to the byte.

Per profile one markdown file. In it, per stream and scenario:

- the **summary**: methods ranked by AA, each row with its mean and 95 % interval, rank interval, verdict against the
  reference (declared, else every other row) by the one verdict rule (:mod:`clbench.verdicts`), and what it cost (optimizer steps a task, seconds a
  cell, the method's state, trained parameters; a step budget above 1.2× the table's median is flagged). Oracle
  rows (joint training, one model per task: methods tagged ``reference`` or ``upper-bound``) sit in their own block,
  never ranked and never the reference;
- one table per **objective** (AA, F.Ra, BWT, LA, AIA, FWT, ...): methods as rows, orders as columns plus an
  average column. A cell shows mean ± std over seeds (sample std; a single seed shows the mean alone). The average
  column pools every complete cell of the row (orders × seeds). Bold marks every row the rule does not call
  ``below``, when some row is; nothing is bold otherwise;
- the **diagnostics** (OO, AWOM, GSR, ACR, NucNorm, what methods report): one table per footprint type, never bold,
  never ranked.

A metric that does not apply is "n/a"; a metric that raised is "error" (its value is null and
``CellResult.metric_errors`` says why), is left out of the averages, which say how many they left out, and is
listed under the stream's tables. A (method, order) with no complete cell shows its status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
from tabulate import tabulate

from clbench._core.results import iter_results
from clbench._tools.summary import (
    FRAGILITY_LEGEND,
    RANK_BY,
    SECOND,
    SUMMARY_LEGEND,
    Cost,
    Summary,
    SummaryRow,
    rank_cell,
    summarise,
    summary_caption,
    summary_table,
)
from clbench._tools.tables import (
    BUDGET_FLAG,
    ERROR,
    ERROR_CHARS,
    LEGEND,
    LEGEND_NO_CELL,
    NA,
    ORACLE_TAGS,
    Judging,
    bold_rows,
    complete_seeds,
    diagnostics_tables,
    diverged_note,
    error_lines,
    fenced,
    frame,
    has_error,
    has_value,
    is_oracle,
    label_key,
    label_parts,
    mean_sd,
    metric_table,
    parse_margins,
)
from clbench.cell import CellResult
from clbench.data import scenario_needs
from clbench.errors import ClbenchError
from clbench.specs import MethodSpec, MetricSpec, ProfileSpec

if TYPE_CHECKING:
    from clbench._tools.fragility import RowFragility

SCENARIO_WORDS = {
    "task-incremental": "task-incremental: the task identity is given at test time",
    "domain-incremental": "domain-incremental: no task identity at test time, one shared head",
    "class-incremental": "class-incremental: no task identity at test time, the label set grows",
}


def summary_frame(
    results: Iterable[CellResult],
    specs: Mapping[str, MethodSpec] | None = None,
    judging: Judging | None = None,
    fragility: Mapping[tuple[str, str], RowFragility | None] | None = None,
) -> pd.DataFrame:
    """The summary tables as numbers, one row per (profile, stream, scenario, method): rank interval, the label
    the tables print (with its tags), oracle, AA (mean, 95 % interval, sample std), the verdict, d and its p (raw
    and Holm), whether the leaderboard bolds it, every other metric's mean and sample std over the row's cells, the
    cost, and with ``fragility`` the worst neighbour and its move (-inf: it did not complete). What ``clbench
    leaderboard --format csv,json,latex`` writes; the same for a pandas user."""
    rows = []
    for profile, group in by_profile(results).items():
        for (stream, scenario), section in section_results(group).items():
            summary = summarise(section, specs, (judging or Judging()).rule(stream, scenario))
            labels = method_labels([r.method for r in summary.rows], specs, profile, stream)
            bold = bold_rows(summary.table)
            metrics = sorted({k for r in section if r.status == "complete" for k in r.metrics} - {RANK_BY})
            for row in summary.rows:
                j = row.judged
                aa = [] if j is None else list(_aa_values(section, row.method))
                out = {
                    "profile": profile,
                    "stream": stream,
                    "scenario": scenario,
                    "rank": rank_cell(row),
                    "method": row.method,
                    "label": labels[row.method],
                    "oracle": row.oracle,
                    "AA mean": None if j is None else j.mean,
                    "AA ci low": None if j is None or j.interval is None else j.interval[0],
                    "AA ci high": None if j is None or j.interval is None else j.interval[1],
                    "AA std": mean_sd(aa)[1] if aa else None,
                    "cells": row.cells,
                    "verdict": "" if j is None or row.oracle else j.verdict,
                    "d": None if j is None else j.diff,
                    "p": None if j is None else j.p,
                    "p holm": None if j is None else j.p_holm,
                    "margin": summary.table.rule.margin,
                    "margin from": summary.table.rule.margin_from,
                    "reference": summary.table.reference if summary.table.declared else None,
                    "bold": row.method in bold,
                }
                if fragility is not None:
                    worst = fragility.get((stream, row.method))
                    out["fragility neighbour"] = None if worst is None else worst.neighbour
                    out["fragility move"] = None if worst is None else worst.move
                    out["fragility cells"] = None if worst is None else worst.cells
                for name in metrics:
                    values = [] if row.diverged else _metric_values(section, row.method, name)
                    mean, std = mean_sd(values) if values else (None, None)
                    out.update({f"{name} mean": mean, f"{name} std": std})
                out.update(
                    {
                        "steps per task": row.cost.steps,
                        "seconds per cell": row.cost.seconds,
                        "method state bytes": row.cost.state,
                        "trained parameters": row.cost.trainable,
                        "peak memory bytes": row.cost.peak,
                        "examples forwarded per task": row.cost.forward,
                        "examples with gradients per task": row.cost.grad,
                        "devices": ",".join(row.cost.devices),
                        "diverged": row.diverged or "",
                    }
                )
                rows.append(out)
    return pd.DataFrame(rows)


def _metric_values(section: Sequence[CellResult], method: str, name: str) -> list[float]:
    return [
        float(cast(float, r.metrics[name]))
        for r in section
        if r.method == method and r.status == "complete" and r.metrics.get(name) is not None
    ]


def _aa_values(section: Sequence[CellResult], method: str) -> list[float]:
    return [
        float(cast(float, r.metrics[RANK_BY]))
        for r in section
        if r.method == method and r.status == "complete" and r.metrics.get(RANK_BY) is not None
    ]


def load(*roots: str | Path) -> pd.DataFrame:
    """Every result under ``roots`` as a tidy DataFrame, one row per (cell, metric): profile, stream, scenario,
    method, order, seed, status, path, metric, value, error. Unusable files are skipped with a warning."""
    return frame(r for root in roots for r in iter_results(Path(root)))


def sections(df: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(stream, scenario, its rows) for every stream and scenario: a table never ranks two scenarios together."""
    return [(stream, scenario, group) for (stream, scenario), group in df.groupby(["stream", "scenario"], sort=True)]


def section_results(results: Iterable[CellResult]) -> dict[tuple[str, str], list[CellResult]]:
    """The results of each (stream, scenario), sorted by key. A section's rows are compared example by example:
    results scored on different test sets (``train.eval_split``, ``train.eval_limit``) are refused."""
    out: dict[tuple[str, str], list[CellResult]] = {}
    for r in results:
        out.setdefault((r.stream, r.scenario or ""), []).append(r)
    for (stream, _), section in out.items():
        _one_test_set(stream, section)
    return dict(sorted(out.items()))


def _one_test_set(stream: str, section: Sequence[CellResult]) -> None:
    first: dict[tuple[str, Any], CellResult] = {}  # (eval_split, eval_limit) -> the first result scored so
    for r in section:
        train = r.config.get("train", {})
        first.setdefault((str(train.get("eval_split", "test")), train.get("eval_limit", 0)), r)
    if len(first) > 1:
        seen = "; ".join(
            f"train.eval_split={split}, train.eval_limit={limit} in {r.path or r.key}"
            for (split, limit), r in list(first.items())[:2]
        )
        raise ClbenchError(
            f"the results of stream {stream!r} were scored on different test sets ({seen}), and a table ranks rows "
            "scored on one; make a leaderboard of each test set's results (one result tree each)"
        )


def section_title(stream: str, scenario: str) -> str:
    return f"{stream} — {SCENARIO_WORDS.get(scenario, scenario)}" if scenario else stream


def cannot_run(df: pd.DataFrame, scenario: str, specs: Mapping[str, MethodSpec] | None) -> list[str]:
    """Methods of these results that cannot run in ``scenario`` (their ``MethodSpec.scenarios`` exclude it)."""
    if not specs or not scenario:
        return []
    out = []
    for label in sorted(df["method"].unique(), key=label_key):
        parts = [specs[p] for p in label_parts(label) if p in specs]
        if any(p.scenarios and scenario not in p.scenarios for p in parts):
            out.append(label)
    return out


def method_labels(
    methods: Sequence[str],
    specs: Mapping[str, MethodSpec] | None,
    profile: str | Sequence[str] | None = None,
    stream: str | None = None,
    rows: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``joint (oracle)``, ``mymethod (defaults)``: a method label with what a reader must see: an oracle, or (with
    ``profile`` — a name, or a profile's lineage, ``clbench._core.cells.profile_lineage`` — and ``stream``) a method
    none of whose parts has a preset for them and that is not a row of the
    profile (``rows``: the profile's rows on the stream), so that it ran on the training defaults beside methods
    whose presets were chosen for this stream (docs/tuning.md)."""
    out = {}
    for label in methods:
        notes = ["oracle"] if is_oracle(label, specs) else []
        if (
            specs
            and profile
            and stream
            and label not in (rows or {})
            and not _has_preset(label, specs, profile, stream)
        ):
            notes.append("defaults")
        out[label] = f"{label} ({', '.join(notes)})" if notes else label
    return out


def _has_preset(label: str, specs: Mapping[str, MethodSpec], profile: str | Sequence[str], stream: str) -> bool:
    """Whether a part of the method (an unknown one counts as having one: nothing to say) has a preset for
    ``profile`` (or a profile of its lineage) on ``stream`` (the profile's own, the stream's, or an order's)."""
    names = (profile,) if isinstance(profile, str) else tuple(profile)
    for part in label_parts(label):
        if part not in specs:
            return True
        for p in names:
            if any(k in (p, f"{p}/{stream}") or k.startswith(f"{p}/{stream}/") for k in specs[part].presets):
                return True
    return False


def tree_profiles(results: Iterable[CellResult]) -> set[str]:
    """The profiles the results ran in (each tree's own under ``clbench leaderboard --label``)."""
    return {str(r.config.get("tree_profile", r.config.get("profile", "custom"))) for r in results}


def _profile_of(results: Sequence[CellResult]) -> str | None:
    """The one profile the results ran in (a tree's own under ``clbench leaderboard --label``); None for several."""
    profiles = tree_profiles(results)
    return profiles.pop() if len(profiles) == 1 else None


def console_summary(
    results: Iterable[CellResult],
    methods: Mapping[str, MethodSpec] | None = None,
    judging: Judging | None = None,
    rows: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """What ``clbench run`` prints at its end: the leaderboard's summary, one plain table per stream and scenario
    (``rows``: the profile's rows, ``ProfileSpec.rows``)."""
    blocks = []
    for (stream, scenario), section in section_results(results).items():
        if not any(RANK_BY in r.metrics for r in section):
            continue
        summary = summarise(section, methods, (judging or Judging()).rule(stream, scenario))
        labels = method_labels(
            [r.method for r in summary.rows], methods, _profile_of(section), stream, (rows or {}).get(stream, {})
        )
        blocks.append(f"{section_title(stream, scenario)}\n{summary_table(summary, labels, 'simple', cost=False)}")
    return "\n".join(blocks)


def render(
    results: Iterable[CellResult],
    metrics: Sequence[MetricSpec],
    title: str,
    link_root: Path | None = None,
    methods: Mapping[str, MethodSpec] | None = None,
    judging: Judging | None = None,
    other_code: int = 0,
    profile: ProfileSpec | None = None,
    lineage: Sequence[str] = (),
    fragility: Mapping[tuple[str, str], RowFragility | None] | None = None,
) -> str:
    """The markdown leaderboard of one profile's results: per stream and scenario, the ranked summary, then one
    table per objective (rows as in the summary; objectives that are n/a for most rows last), then the
    diagnostics per footprint type. ``methods`` (the registry's method specs) marks the oracles, the footprint types
    and the methods that cannot run in a scenario; ``judging``: ``--margin`` and ``--reference`` (:class:`Judging`);
    ``other_code`` is how many of the results were made by other code, data or settings than installed
    (:func:`clbench._tools.verify.stale`): the page then says it is a record of that code; ``profile``: the
    results' profile, whose rows (``ProfileSpec.rows``) are a method's settings, and whose published numbers
    (``ProfileSpec.targets``, :mod:`clbench._tools.parity`) are shown beside clbench's after the summary;
    ``lineage``: that profile's and those it extends (their presets count as its own); ``fragility``: per (stream,
    method) the worst neighbour of its tuned choice and its move (``clbench leaderboard --fragility``), a column of
    the summaries."""
    rows = profile.rows if profile is not None else {}
    judging = judging or Judging()
    results = list(results)
    df = frame(results)
    shown = [m for m in metrics if m.leaderboard]
    objectives = [m for m in shown if not m.is_diagnostic]
    diagnostics = [m for m in shown if m.is_diagnostic]
    parts = [
        f"# {title}\n",
        "Generated by `clbench leaderboard` from result files; do not edit by hand.\n",
        *(
            [
                f"**A record of other code**: {other_code} of {len(results)} cells were made by other code, data or "
                "settings than the clbench that rendered this page (`clbench stale` lists them and why); rerun them "
                "to read these numbers as this code's.\n"
            ]
            if other_code
            else []
        ),
        "Metrics of the accuracy matrix (AA, F.Ra, BWT, LA, AIA, FWT) are in percent, footprint metrics (OO, "
        "AWOM, GSR, ACR, ...) in their own units (README, Metrics). Cells are mean ± std over seeds, `avg` pools "
        "every cell of the row (orders × seeds). `n/a`: the metric does not apply; `error`: it could not be "
        "computed (listed under the stream's tables) and is left out of the averages; `diverged (d of n "
        "cells)`: training blew up in d cells (`clbench show` says where), and the row is not averaged.\n",
    ]
    by_section = section_results(results)
    summaries = {
        key: summarise(section, methods, judging.rule(*key))
        for key, section in by_section.items()
        if any(RANK_BY in r.metrics for r in section)
    }
    if summaries:
        legend = SUMMARY_LEGEND + (f" {FRAGILITY_LEGEND}" if fragility is not None else "")
        parts.append(f"## Summary\n\n{legend}\n")
        for (stream, scenario), summary in summaries.items():
            labels = method_labels(
                [r.method for r in summary.rows],
                methods,
                lineage or _profile_of(by_section[stream, scenario]),
                stream,
                rows.get(stream, {}),
            )
            parts.append(
                f"### {section_title(stream, scenario)}\n\n{summary_caption(summary)}\n\n"
                f"{summary_table(summary, labels, fragility=_of_stream(fragility, stream))}"
            )
    if profile is not None and profile.targets:
        from clbench._tools.parity import section

        parts.append(section(results, profile.targets))
    for stream, scenario, sdf in sections(df):
        seeds = sorted(sdf["seed"].unique())
        section_summary = summaries.get((stream, scenario))
        order = (
            [r.method for r in section_summary.rows]
            if section_summary is not None
            else sorted(sdf["method"].unique(), key=label_key)
        )
        labels = method_labels(
            order, methods, lineage or _profile_of(by_section.get((stream, scenario), [])), stream, rows.get(stream, {})
        )
        parts.append(
            f"## {section_title(stream, scenario)}\n\nseeds: {', '.join(str(s) for s in seeds)}; "
            f"cells: {sdf.drop_duplicates(['method', 'order', 'seed']).shape[0]}\n"
        )
        by_why: dict[str, list[str]] = {}  # the methods that cannot run here, by what they are built for
        for label in cannot_run(df, scenario, methods):
            specs = [methods[p] for p in label_parts(label) if methods and p in methods]
            why = "; ".join(dict.fromkeys(scenario_needs(p.scenarios) for p in specs if p.scenarios))
            by_why.setdefault(why, []).append(label)
        for why, names in by_why.items():
            parts.append(f"Cannot run in this scenario ({why}): {', '.join(names)}.\n")
        cells = [r for r in results if r.stream == stream and (r.scenario or "") == scenario]
        parts.append(_protocol_line(cells, scenario))
        parts.append(_forms_line(cells))
        parts.append((LEGEND if complete_seeds(sdf) else LEGEND_NO_CELL) + "\n")
        # a metric with neither a value nor an error for any method of the stream: no table; one that applies to
        # fewer than half of the rows goes below the others
        present = sdf.loc[has_value(sdf["value"]) | has_error(sdf["error"])].groupby("metric")["method"].nunique()
        tabled = [m for m in objectives if m.name in present.index]
        few = [m for m in tabled if 2 * present[m.name] < len(order)]
        rule = judging.rule(stream, scenario)
        for metric in [m for m in tabled if m not in few]:
            parts.append(metric_table(sdf, metric, link_root, order, labels, methods, rule))
        if few:
            parts.append("Objectives that apply to fewer than half of the methods (n/a for the others):\n")
            for metric in few:
                parts.append(metric_table(sdf, metric, link_root, order, labels, methods, rule))
        parts += diagnostics_tables(sdf, [m for m in diagnostics if m.name in present.index], order, labels, methods)
        errors = error_lines(sdf, [m.name for m in shown if m.name in present.index])
        if errors:
            parts.append(fenced(errors))
    return "\n".join(parts)


def _of_stream(
    fragility: Mapping[tuple[str, str], RowFragility | None] | None, stream: str
) -> dict[str, RowFragility | None] | None:
    return None if fragility is None else {m: w for (s, m), w in fragility.items() if s == stream}


# the protocol conventions a reader must know to compare a table with a published one: (scope, setting, default)
CONVENTIONS = (("train", "head", "masked"), ("train", "scoring", "stream"), ("train", "init", "model"))


def _protocol_line(results: Sequence[CellResult], scenario: str) -> str:
    """The protocol conventions these cells were run under (``train.head`` on class-incremental streams, and
    ``train.scoring`` of their models, ``train.init``), per value the methods that used it when they differ."""
    parts = []
    for scope, key, default in CONVENTIONS:
        if (
            key == "head"
            and scenario != "class-incremental"
            and all(r.config.get(scope, {}).get("scoring", "stream") == "stream" for r in results)
        ):
            continue  # no shared head whose classes grow
        by_value: dict[str, set[str]] = {}
        for r in results:
            by_value.setdefault(str(r.config.get(scope, {}).get(key, default)), set()).add(r.method)
        if len(by_value) == 1:
            parts.append(f"`{scope}.{key}={next(iter(by_value))}`")
        else:
            parts.append(
                f"`{scope}.{key}`: "
                + "; ".join(f"{v} ({', '.join(sorted(ms, key=label_key))})" for v, ms in sorted(by_value.items()))
            )
    return f"Protocol conventions: {', '.join(parts)} (docs/parity.md).\n"


def _forms_line(results: Sequence[CellResult]) -> str:
    """How the footprint metrics of these cells were computed (MetricsConfig), once when they agree."""
    from clbench._tools.verify import metric_settings

    forms = sorted({metric_settings(r).describe() for r in results})
    if len(forms) == 1:
        return f"Footprint metric forms: {forms[0]}.\n"
    return "Footprint metric forms differ between cells:\n\n" + "".join(f"- {f}\n" for f in forms)


def render_cell(result: CellResult) -> str:
    """What ``clbench show`` prints for one cell: its accuracy matrix, metrics, metric errors and time.

    A matrix shorter or narrower than the task list is padded with blanks (wider or longer: the extra
    columns and rows are labelled ``#<index>``)."""
    r = result
    lines = [f"{r.method} · {r.stream} · order {r.order} · seed {r.seed} · {r.status}"]
    if r.error:
        lines.append(f"error: {r.error}")
    matrix = [list(row) if row is not None else [] for row in (r.accuracy_matrix or [])]
    n_rows = max(len(r.tasks), len(matrix))
    n_cols = max([len(r.tasks), *(len(row) for row in matrix)])
    names = [str(t) for t in r.tasks] + [f"#{j}" for j in range(len(r.tasks), max(n_rows, n_cols))]
    short = [t if len(t) <= 12 else t[:11] + "…" for t in names]
    rows = []
    for i in range(n_rows):
        row = matrix[i] if i < len(matrix) else []
        cells = ["" if v is None else f"{v:.1f}" for v in row] + [""] * (n_cols - len(row))
        rows.append([f"after {short[i]}"] + cells)
    lines.append(tabulate(rows, headers=["a[i][j]"] + short[:n_cols], tablefmt="simple", disable_numparse=True))
    errors = r.metric_errors or {}
    names_m = sorted(set(r.metrics) | set(errors))
    if names_m:
        lines.append("")

        def value(k: str) -> str:
            if k in errors:
                return ERROR
            v = r.metrics.get(k)
            return NA if v is None else f"{v:.4g}"

        lines.append(
            tabulate(
                [[k, value(k)] for k in names_m], headers=["metric", "value"], tablefmt="simple", disable_numparse=True
            )
        )
        lines.extend(f"metric {k}: error: {errors[k]}" for k in sorted(errors))
    total = r.timings.get("total_s") if r.timings else None
    if total is not None:
        lines.append("")
        lines.append(f"time: {total:.1f}s on {r.env.get('device', '?')}")
    return "\n".join(lines)


EQUAL_STEPS = "equal-steps"  # the track of cells trained under train.steps_per_task (its board: PROFILE-equal-steps)
EQUAL_COMPUTE = "equal-compute"  # cells under train.compute_epochs (its board: PROFILE-equal-compute)
MEMORY = "memory"  # the track of cells under train.memory=M (its board: PROFILE-memory-M)
# the equal-budget tracks: the board's suffix and the train.* setting of each
BUDGET_TRACKS = ((EQUAL_STEPS, "steps_per_task"), (EQUAL_COMPUTE, "compute_epochs"))


def by_profile(results: Iterable[CellResult]) -> Mapping[str, list[CellResult]]:
    """The results of each profile and track, never ranked with another's: a profile's cells under
    ``train.steps_per_task`` (every method the same optimizer steps a task) form the board
    ``PROFILE-equal-steps``, under ``train.compute_epochs`` (every method the same examples forwarded with
    gradients a task, as the harness counts them) ``PROFILE-equal-compute``; those under ``train.memory=M`` (every
    method that keeps examples keeps M) the board ``PROFILE-memory-M`` (with a budget: ``PROFILE-equal-steps-memory-M``)."""
    out: dict[str, list[CellResult]] = {}
    for r in results:
        profile = str(r.config.get("profile", "custom"))
        train = r.config.get("train", {})
        # (a profile that is the track, `bench-equal-compute` or `bench-memory-200`, is named once)
        profile += "".join(
            f"-{suffix}"
            for suffix, setting in BUDGET_TRACKS
            if train.get(setting) and not profile.endswith(f"-{suffix}")
        )
        if train.get("memory") and not profile.endswith(f"-{MEMORY}-{train['memory']}"):
            profile += f"-{MEMORY}-{train['memory']}"
        out.setdefault(profile, []).append(r)
    return dict(sorted(out.items()))


def _budget_words(setting: str, streams: Mapping[Any, set[str]]) -> str:
    """What every method of an equal-budget board gets: ``streams`` maps each value of ``train.SETTING`` to the
    streams that ran it (one budget a stream where their tasks differ in size)."""
    if setting == "compute_epochs":
        each = "; ".join(f"{e:g} on {', '.join(f'`{s}`' for s in sorted(streams[e]))}" for e in sorted(streams))
        e = f"{next(iter(streams)):g}" if len(streams) == 1 else f"E ({each})"
        return (
            f"at equal compute: every method forwards with gradients {e} × each task's training examples a task, as "
            f"many as {e} epoch of plain fine-tuning does (`train.compute_epochs`)"
        )
    if len(streams) == 1:
        steps = f"{next(iter(streams))} optimizer steps a task"
    else:  # a task of split MNIST is a fifth of a permuted one
        each = "; ".join(f"{n} on {', '.join(f'`{s}`' for s in sorted(streams[n]))}" for n in sorted(streams))
        steps = f"the same optimizer steps a task on a stream ({each})"
    return f"at equal steps: every method {steps} (`train.steps_per_task`)"


def board_title(key: str, results: Sequence[CellResult]) -> str:
    """The title of the board ``key`` of :func:`by_profile`, naming its track."""
    memory = {int(r.config.get("train", {}).get("memory") or 0) for r in results}
    named = {str(r.config.get("profile", "custom")) for r in results}  # (a profile that is a track keeps its name)
    profile = key.removesuffix(f"-{MEMORY}-{max(memory)}") if memory - {0} and key not in named else key
    tracks = []
    for suffix, setting in BUDGET_TRACKS:
        if profile.endswith(f"-{suffix}"):
            profile = profile if profile in named else profile.removesuffix(f"-{suffix}")
            streams: dict[Any, set[str]] = {}  # the budget -> the streams that ran it
            for r in results:
                streams.setdefault(r.config["train"][setting], set()).add(r.stream)
            tracks.append(_budget_words(setting, streams))
    if memory - {0}:
        tracks.append(f"at equal memory: every method that keeps examples keeps {max(memory):,} (`train.memory`)")
    return f"clbench leaderboard — profile `{profile}`" + (" " + "; ".join(tracks) if tracks else "")


__all__ = [  # the leaderboard's public names, wherever they are defined
    "BUDGET_FLAG",
    "Cost",
    "BUDGET_TRACKS",
    "EQUAL_COMPUTE",
    "EQUAL_STEPS",
    "MEMORY",
    "Judging",
    "ERROR",
    "ERROR_CHARS",
    "LEGEND",
    "LEGEND_NO_CELL",
    "NA",
    "ORACLE_TAGS",
    "RANK_BY",
    "SCENARIO_WORDS",
    "SECOND",
    "SUMMARY_LEGEND",
    "Summary",
    "SummaryRow",
    "bold_rows",
    "board_title",
    "by_profile",
    "cannot_run",
    "complete_seeds",
    "console_summary",
    "diagnostics_tables",
    "diverged_note",
    "error_lines",
    "frame",
    "is_oracle",
    "label_key",
    "load",
    "method_labels",
    "metric_table",
    "parse_margins",
    "render",
    "render_cell",
    "section_results",
    "section_title",
    "sections",
    "summarise",
    "summary_caption",
    "summary_frame",
    "summary_table",
]
