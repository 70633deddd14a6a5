"""Leaderboards: result files → pandas → markdown (tabulate). One function, deterministic to the byte.

Per profile one markdown file; in it, per stream, one table per metric: methods as rows, orders as
columns plus an average column. A cell shows mean ± std over seeds (sample std; a single seed shows
the mean alone). The average column is the mean ± std over every complete cell of the row (orders ×
seeds). A metric that does not apply is "n/a"; a metric that raised is "error" (its value is null and
``CellResult.metric_errors`` says why), is left out of the averages, which say how many they left out,
and is listed under the stream's tables. A metric with neither a value nor an error for any method of
a stream gets no table; a (method, order) with no complete cell shows its status.

Bold marks no winner the data cannot separate: the best ``avg`` and every row whose interval
(mean ± std, as printed) overlaps the best row's are tied for best and all bold; nothing is bold when
the stream has one seed or when every row is tied (see ``LEGEND`` / ``LEGEND_ONE_SEED``).
"""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from clbench._core.results import iter_results
from clbench.cell import CellResult
from clbench.specs import MethodSpec, MetricSpec

NA = "n/a"
ERROR = "error"
ERROR_CHARS = 200  # a metric error's message is cut to this many characters in the leaderboard
LEGEND = ("Bold `avg`: the best mean and every row whose mean ± std (as printed) overlaps the best row's, "
          "i.e. tied for best; no bold: every row is tied.")
LEGEND_ONE_SEED = "Bold `avg`: none, one seed, so no row is separated from the best."
LEGEND_NO_CELL = "Bold `avg`: none, no cell is complete."


def frame(results: Iterable[CellResult]) -> pd.DataFrame:
    """One row per (cell, metric) with its value and, when it raised, its error; the tidy form every
    table is pivoted from. A metric with an error has value None whatever the result recorded."""
    rows = []
    for r in results:
        profile = str(r.config.get("profile", "custom"))
        base = {"profile": profile, "stream": r.stream, "scenario": r.scenario or "", "method": r.method,
                "order": r.order, "seed": r.seed, "status": r.status, "path": str(r.path) if r.path else ""}
        if r.status != "complete":
            rows.append({**base, "metric": None, "value": None, "error": None})
            continue
        errors = r.metric_errors or {}
        for name in [*r.metrics, *sorted(n for n in errors if n not in r.metrics)]:
            error = errors.get(name)
            rows.append({**base, "metric": name, "value": None if error is not None else r.metrics.get(name),
                         "error": None if error is None else str(error)})
    return pd.DataFrame(rows, columns=["profile", "stream", "scenario", "method", "order", "seed", "status", "path",
                                       "metric", "value", "error"])


def _stats(values: Sequence[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return NA
    mean, std = _stats(values)
    return f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"


def _interval(values: Sequence[float]) -> tuple[Decimal, Decimal, Decimal]:
    """(mean, low, high) of mean ± std exactly as ``_fmt`` prints them (a lone value: a point)."""
    mean, std = _stats(values)
    m, s = Decimal(f"{mean:.2f}"), Decimal(f"{std:.2f}") if std is not None else Decimal(0)
    return m, m - s, m + s


def _errors_note(n: int) -> str:
    return f" ({n} error{'s' if n != 1 else ''})" if n else ""


def label_key(label: str) -> tuple[str, list[tuple[str, int, float, str]]]:
    """Method labels in natural order: a sweep's values numerically (``ewc@lambda=3`` before ``ewc@lambda=10``)."""
    base, _, sweep = label.partition("@")
    parts = []
    for pair in sweep.split(",") if sweep else []:
        key, _, value = pair.partition("=")
        try:
            parts.append((key, 0, float(value), ""))
        except ValueError:
            parts.append((key, 1, 0.0, value))
    return base, parts


def _order_key(order: str) -> tuple[int, str]:
    return (int(order), order) if order.isdigit() else (1 << 30, order)


def _link(text: str, paths: Sequence[str], link_root: Path | None) -> str:
    paths = [p for p in paths if p]
    if link_root is None or not paths or text == NA:
        return text
    target = Path(sorted(paths)[0])
    if len(paths) > 1:
        target = target.parent.parent  # order-<o>/ holds one directory per seed
    rel = os.path.relpath(target, link_root).replace(os.sep, "/")
    # percent-encoded: a space, newline, parenthesis or % in --out or a label would end or garble the link
    return f"[{text}]({urllib.parse.quote(rel, safe='/@=,+:')})"


def _has_error(series: pd.Series) -> pd.Series:
    return series.map(lambda e: e is not None and not (isinstance(e, float) and math.isnan(e)))


def _has_value(series: pd.Series) -> pd.Series:
    return series.map(lambda v: v is not None and not pd.isna(v))


def complete_seeds(df: pd.DataFrame) -> int:
    """How many seeds the complete cells of ``df`` span."""
    return int(df.loc[df["status"] == "complete", "seed"].nunique())


def separable(df: pd.DataFrame) -> bool:
    """Whether rows of this stream's tables can be told apart: its complete cells span two seeds or more."""
    return complete_seeds(df) >= 2


def tied_for_best(intervals: Mapping[int, tuple[Decimal, Decimal, Decimal]], direction: str) -> set[int]:
    """Rows tied for best: the best printed mean (every row with it) and every row whose printed
    mean ± std overlaps (closed intervals; touching counts) the interval of one of those."""
    if not intervals:
        return set()
    pick = max if direction == "up" else min
    top = pick(m for m, _, _ in intervals.values())
    best = [(lo, hi) for m, lo, hi in intervals.values() if m == top]
    return {i for i, (_, lo, hi) in intervals.items() if any(lo <= b_hi and b_lo <= hi for b_lo, b_hi in best)}


def diverged_note(cells: pd.DataFrame) -> str | None:
    """``diverged (d of n cells)`` when some of these cells (one row per cell and metric) diverged, else None."""
    status = cells.drop_duplicates(["order", "seed"])["status"]
    d = int((status == "diverged").sum())
    return f"diverged ({d} of {len(status)} cell{'s' if len(status) != 1 else ''})" if d else None


def metric_table(df: pd.DataFrame, metric: MetricSpec, link_root: Path | None = None,
                 methods: Sequence[str] | None = None, labels: Mapping[str, str] | None = None) -> str:
    """Markdown table of one metric on one stream (``df`` already filtered to the stream), rows in the order of
    ``methods`` (default: alphabetical), each named by ``labels`` (default: the method). A (method, order) or row
    with a diverged cell shows ``diverged (d of n cells)``, not a mean of the others, and cannot be best."""
    orders = sorted(df["order"].unique(), key=_order_key)
    methods = list(methods) if methods is not None else sorted(df["method"].unique(), key=label_key)
    labels = labels or {}
    values = df[(df["metric"] == metric.name)]
    table = []
    intervals: dict[int, tuple[Decimal, Decimal, Decimal]] = {}  # row → its avg's (mean, low, high) as printed
    for i, method in enumerate(methods):
        row = [labels.get(method, method)]
        pooled: list[float] = []
        row_errors = 0
        for order in orders:
            cells = df[(df["method"] == method) & (df["order"] == order)]
            got = values[(values["method"] == method) & (values["order"] == order)].sort_values("seed")
            numbers = [float(v) for v in got.loc[_has_value(got["value"]), "value"]]
            failed = got[_has_error(got["error"])]
            pooled += numbers
            row_errors += len(failed)
            diverged = diverged_note(cells) if not cells.empty else None
            if cells.empty:
                row.append("")
            elif diverged:
                row.append(_link(diverged, list(cells.loc[cells["status"] == "diverged", "path"]), link_root))
            elif numbers:
                row.append(_link(_fmt(numbers) + _errors_note(len(failed)), list(got["path"]), link_root))
            elif len(failed):
                row.append(_link(ERROR, list(failed["path"]), link_root))
            elif (cells["status"] == "complete").any():
                row.append(NA)
            else:
                row.append(", ".join(sorted(set(cells["status"]))))
        row_diverged = diverged_note(df[df["method"] == method])
        if row_diverged:
            row.append(row_diverged)
        elif pooled:
            row.append(_fmt(pooled) + _errors_note(row_errors))
            intervals[i] = _interval(pooled)
        else:
            row.append(ERROR if row_errors else NA)
        table.append(row)
    if separable(df):
        tied = tied_for_best(intervals, metric.direction)
        if tied != set(intervals):  # every row tied: nothing is bold
            for i in sorted(tied):
                table[i][-1] = f"**{table[i][-1]}**"
    arrow = "↑" if metric.direction == "up" else "↓"
    header = ["method"] + [f"order {o}" for o in orders] + ["avg"]
    title = f"#### {metric.name} {arrow}" + (f" — {metric.description}" if metric.description else "")
    return title + "\n\n" + tabulate(table, headers=header, tablefmt="github", disable_numparse=True) + "\n"


def _one_line(message: str, limit: int = ERROR_CHARS) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_lines(df: pd.DataFrame, metric_names: Sequence[str]) -> list[str]:
    """``errors: <metric> on <method> order <o> seed <s>: <message>`` for every metric error of the
    stream in ``df`` among ``metric_names``, sorted by metric, method, order and seed."""
    failed = df[_has_error(df["error"]) & df["metric"].isin(list(metric_names))]
    keyed = sorted(((str(m), str(me), _order_key(str(o)), int(s), str(e)) for m, me, o, s, e in
                    zip(failed["metric"], failed["method"], failed["order"], failed["seed"], failed["error"], strict=True)))
    return [f"errors: {m} on {me} order {o[1]} seed {s}: {_one_line(e)}" for m, me, o, s, e in keyed]


def _fence(lines: Sequence[str]) -> str:
    """The lines as a fenced text block (one per line, no markdown read into the messages)."""
    longest = 0
    for line in lines:
        run = 0
        for ch in line:
            run = run + 1 if ch == "`" else 0
            longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n" + "\n".join(lines) + f"\n{fence}\n"


SCENARIO_WORDS = {"task-incremental": "task-incremental: the task identity is given at test time",
                  "domain-incremental": "domain-incremental: no task identity at test time, one shared head",
                  "class-incremental": "class-incremental: no task identity at test time, the label set grows"}
RANK_BY, SECOND = "AA", "F.Ra"  # the summary ranks by AA (higher is better) and shows F.Ra beside it
SUMMARY_LEGEND = ("Ranked by mean AA over every cell of the row (orders × seeds, ± the sample std). `vs best`: "
                  "`best` is the top mean, `tied` a row whose mean ± std overlaps the best's (not separated from "
                  "it), `below` a row separated from it; with one seed nothing is separated (`—`). A row with a "
                  "diverged cell is shown as such and not ranked.")


def _pooled(sdf: pd.DataFrame, method: str, metric: str) -> list[float]:
    got = sdf[(sdf["method"] == method) & (sdf["metric"] == metric)]
    return [float(v) for v in got.loc[_has_value(got["value"]), "value"]]


def _rankable(sdf: pd.DataFrame) -> dict[str, list[float]]:
    """The AA values of every method of one section that can be ranked: it has AA and no diverged cell."""
    return {m: v for m in sorted(sdf["method"].unique(), key=label_key)
            if (v := _pooled(sdf, m, RANK_BY)) and not diverged_note(sdf[sdf["method"] == m])}


def ranking(sdf: pd.DataFrame, rankable: Mapping[str, list[float]] | None = None) -> list[str]:
    """The methods of one section, best mean AA first (ties by name); rows with a diverged cell or no AA last,
    by name."""
    rankable = _rankable(sdf) if rankable is None else rankable
    means = {m: _stats(v)[0] for m, v in rankable.items()}
    return (sorted(means, key=lambda m: (-means[m], label_key(m)))
            + sorted(set(sdf["method"].unique()) - set(means), key=label_key))


def method_labels(methods: Sequence[str], specs: Mapping[str, MethodSpec] | None) -> dict[str, str]:
    """``joint (upper bound)``: a method label with the tags a reader must see (``upper-bound``)."""
    out = {}
    for label in methods:
        parts = label.split("@", 1)[0].split("+")
        tags = set().union(*(specs[p].tags for p in parts if specs and p in specs))
        out[label] = f"{label} (upper bound)" if "upper-bound" in tags else label
    return out


def _summary(sdf: pd.DataFrame) -> list[dict[str, Any]]:
    """One section's ranking, row by row: rank ("—" when unranked), method, the pooled AA and F.Ra values, cells,
    the verdict against the best, and the diverged note."""
    rankable = _rankable(sdf)
    order = ranking(sdf, rankable)
    intervals = {i: _interval(rankable[m]) for i, m in enumerate(order) if m in rankable}
    tied = tied_for_best(intervals, "up") if separable(sdf) else set()
    top = max((m for m, _, _ in intervals.values()), default=None)
    rows = []
    for i, method in enumerate(order):
        cells = sdf[sdf["method"] == method]
        if i not in intervals:
            verdict, rank = "", "—"
        elif not separable(sdf):
            verdict, rank = "—", str(i + 1)
        else:
            verdict = "best" if intervals[i][0] == top else "tied" if i in tied else "below"
            rank = str(i + 1)
        rows.append({"rank": rank, "method": method, RANK_BY: rankable.get(method) or _pooled(sdf, method, RANK_BY),
                     SECOND: _pooled(sdf, method, SECOND), "cells": cells.drop_duplicates(["order", "seed"]).shape[0],
                     "verdict": verdict, "diverged": diverged_note(cells), "statuses": sorted(set(cells["status"]))})
    return rows


def summary_table(sdf: pd.DataFrame, labels: Mapping[str, str] | None = None, tablefmt: str = "github") -> str:
    """One section's answer to "which method is best, and by how much": methods ranked by AA (mean ± std over
    every cell), F.Ra beside it, and whether each row is separated from the best."""
    labels = labels or {}
    rows = []
    for row in _summary(sdf):
        aa, second, diverged = row[RANK_BY], row[SECOND], row["diverged"]
        shown_aa = diverged or (_fmt(aa) if aa else ", ".join(row["statuses"]))
        rows.append([row["rank"], labels.get(row["method"], row["method"]), shown_aa,
                     "" if diverged else _fmt(second) if second else NA, str(row["cells"]), row["verdict"]])
    return tabulate(rows, headers=["rank", "method", f"{RANK_BY} ↑", f"{SECOND} ↓", "cells", "vs best"],
                    tablefmt=tablefmt, disable_numparse=True) + "\n"


def summary_frame(results: Iterable[CellResult]) -> pd.DataFrame:
    """The summary tables as numbers, one row per (profile, stream, scenario, method): rank, AA and F.Ra (mean,
    sample std over every cell, n), cells, the verdict against the best and diverged cells. What ``clbench
    leaderboard --format csv,json,latex`` writes."""
    rows = []
    for profile, pdf in frame(results).groupby("profile", sort=True):
        for stream, scenario, sdf in sections(pdf):
            for row in _summary(sdf):
                out = {"profile": profile, "stream": stream, "scenario": scenario, "rank": row["rank"],
                       "method": row["method"]}
                for name in (RANK_BY, SECOND):
                    values = [] if row["diverged"] else row[name]
                    mean, std = _stats(values) if values else (None, None)
                    out.update({f"{name} mean": mean, f"{name} std": std})
                out.update(cells=row["cells"], **{"vs best": row["verdict"], "diverged": row["diverged"] or ""})
                rows.append(out)
    return pd.DataFrame(rows)


def load(*roots: str | Path) -> pd.DataFrame:
    """Every result under ``roots`` as a tidy DataFrame, one row per (cell, metric): profile, stream, scenario,
    method, order, seed, status, path, metric, value, error. Unusable files are skipped with a warning."""
    return frame(r for root in roots for r in iter_results(Path(root)))


def sections(df: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(stream, scenario, its rows) for every stream and scenario: a table never ranks two scenarios together."""
    return [(stream, scenario, group) for (stream, scenario), group
            in df.groupby(["stream", "scenario"], sort=True)]


def section_title(stream: str, scenario: str) -> str:
    return f"{stream} — {SCENARIO_WORDS.get(scenario, scenario)}" if scenario else stream


def cannot_run(df: pd.DataFrame, scenario: str, specs: Mapping[str, MethodSpec] | None) -> list[str]:
    """Methods of these results that cannot run in ``scenario`` (their ``MethodSpec.scenarios`` exclude it)."""
    if not specs or not scenario:
        return []
    out = []
    for label in sorted(df["method"].unique(), key=label_key):
        parts = [specs[p] for p in label.split("@", 1)[0].split("+") if p in specs]
        if any(p.scenarios and scenario not in p.scenarios for p in parts):
            out.append(label)
    return out


def console_summary(results: Iterable[CellResult], methods: Mapping[str, MethodSpec] | None = None) -> str:
    """What ``clbench run`` prints at its end: the leaderboard's summary, one plain table per stream and scenario."""
    blocks = [b for b in sections(frame(results)) if RANK_BY in set(b[2]["metric"])]
    return "\n".join(f"{section_title(stream, scenario)}\n"
                     f"{summary_table(sdf, method_labels(sdf['method'].unique(), methods), 'simple')}"
                     for stream, scenario, sdf in blocks)


def render(results: Iterable[CellResult], metrics: Sequence[MetricSpec], title: str,
           link_root: Path | None = None, methods: Mapping[str, MethodSpec] | None = None) -> str:
    """The markdown leaderboard of one profile's results: per stream and scenario, the ranked summary, then one
    table per metric (rows ranked as in the summary; metrics that are n/a for most rows last). ``methods`` (the
    registry's method specs) adds the tags (upper bound) and the methods that cannot run in a scenario."""
    results = list(results)
    df = frame(results)
    shown = [m for m in metrics if m.leaderboard]
    parts = [f"# {title}\n", "Generated by `clbench leaderboard` from result files; do not edit by hand.\n",
             "Metrics of the accuracy matrix (AA, F.Ra, BWT, ...) are in percent, footprint metrics (OO, AWOM, "
             "GSR, ACR, ...) in their own units (README, Metrics). Cells are mean ± std over seeds, `avg` pools "
             "every cell of the row (orders × "
             "seeds). `n/a`: the metric does not apply; `error`: it could not be computed (listed under the "
             "stream's tables) and is left out of the averages; `diverged (d of n cells)`: training blew up in d "
             "cells (`clbench show` says where), and the row is not averaged.\n"]
    blocks = sections(df)
    if any(RANK_BY in set(sdf["metric"]) for _, _, sdf in blocks):
        parts.append("## Summary\n\n" + SUMMARY_LEGEND + "\n")
        for stream, scenario, sdf in blocks:
            labels = method_labels(sdf["method"].unique(), methods)
            parts.append(f"### {section_title(stream, scenario)}\n\n{summary_table(sdf, labels)}")
    for stream, scenario, sdf in blocks:
        seeds = sorted(sdf["seed"].unique())
        order = ranking(sdf)
        labels = method_labels(order, methods)
        parts.append(f"## {section_title(stream, scenario)}\n\nseeds: {', '.join(str(s) for s in seeds)}; "
                     f"cells: {sdf.drop_duplicates(['method', 'order', 'seed']).shape[0]}\n")
        excluded = cannot_run(df, scenario, methods)
        if excluded:
            parts.append(f"Cannot run in this scenario (they use the task identity at test time): "
                         f"{', '.join(excluded)}.\n")
        parts.append(_forms_line([r for r in results if r.stream == stream and (r.scenario or "") == scenario]))
        n_seeds = complete_seeds(sdf)
        parts.append((LEGEND if n_seeds >= 2 else LEGEND_ONE_SEED if n_seeds == 1 else LEGEND_NO_CELL) + "\n")
        # a metric with neither a value nor an error for any method of the stream: no table; one that applies to
        # fewer than half of the rows goes below the others
        present = sdf.loc[_has_value(sdf["value"]) | _has_error(sdf["error"])].groupby("metric")["method"].nunique()
        tabled = [m for m in shown if m.name in present.index]
        few = [m for m in tabled if 2 * present[m.name] < len(order)]
        for metric in [m for m in tabled if m not in few]:
            parts.append(metric_table(sdf, metric, link_root, order, labels))
        if few:
            parts.append("Metrics that apply to fewer than half of the methods (n/a for the others):\n")
            for metric in few:
                parts.append(metric_table(sdf, metric, link_root, order, labels))
        errors = error_lines(sdf, [m.name for m in tabled])
        if errors:
            parts.append(_fence(errors))
    return "\n".join(parts)


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

        lines.append(tabulate([[k, value(k)] for k in names_m], headers=["metric", "value"], tablefmt="simple",
                              disable_numparse=True))
        lines.extend(f"metric {k}: error: {errors[k]}" for k in sorted(errors))
    total = r.timings.get("total_s") if r.timings else None
    if total is not None:
        lines.append("")
        lines.append(f"time: {total:.1f}s on {r.env.get('device', '?')}")
    return "\n".join(lines)


def by_profile(results: Iterable[CellResult]) -> Mapping[str, list[CellResult]]:
    out: dict[str, list[CellResult]] = {}
    for r in results:
        out.setdefault(str(r.config.get("profile", "custom")), []).append(r)
    return dict(sorted(out.items()))
