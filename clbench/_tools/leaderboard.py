"""Leaderboards: result files → pandas → markdown (tabulate). One function, deterministic to the byte.

Per profile one markdown file. In it, per stream and scenario:

- the **summary**: methods ranked by AA, each row with its mean and 95 % interval, rank interval, verdict against the
  reference by the one verdict rule (:mod:`clbench.verdicts`), and what it cost (optimizer steps a task, seconds a
  cell, the method's state, trained parameters; a step budget above 1.2× the table's median is flagged). Oracle
  rows (joint training, one model per task: methods tagged ``reference`` or ``upper-bound``) sit in their own block,
  never ranked and never the reference;
- one table per **objective** (AA, F.Ra, BWT, LA, AIA, FWT, ...): methods as rows, orders as columns plus an
  average column. A cell shows mean ± std over seeds (sample std; a single seed shows the mean alone). The average
  column pools every complete cell of the row (orders × seeds). Bold marks the reference and every row the rule
  does not call ``below`` it, when some row is; nothing is bold otherwise;
- the **diagnostics** (OO, AWOM, GSR, ACR, NucNorm, what methods report): one table per footprint type, never bold,
  never ranked.

A metric that does not apply is "n/a"; a metric that raised is "error" (its value is null and
``CellResult.metric_errors`` says why), is left out of the averages, which say how many they left out, and is
listed under the stream's tables. A (method, order) with no complete cell shows its status.
"""

from __future__ import annotations

import math
import os
import statistics
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pandas as pd
from tabulate import tabulate

from clbench import verdicts as V
from clbench._core.examples import final_row
from clbench._core.results import iter_results
from clbench.cell import CellResult
from clbench.errors import ResultFileError
from clbench.specs import MethodSpec, MetricSpec

NA = "n/a"
ERROR = "error"
ERROR_CHARS = 200  # a metric error's message is cut to this many characters in the leaderboard
ORACLE_TAGS = frozenset({"reference", "upper-bound"})  # methods given what a continual learner is not
DEFAULT_MARGIN = 1.0  # Δ in pp: the least margin of any stream (clbench.verdicts)
MARGIN_FILE = "MARGIN"  # a result tree's per-stream margins (`stream=pp` lines), see read_margins
BUDGET_FLAG = 1.2  # a row whose steps a task exceed this × the table's median is flagged
LEGEND = ("Bold `avg`: the reference (the best non-oracle mean) and every row the verdict rule does not call `below` "
          "it (see the summary's caption); no bold: no row is separated from the reference. Oracle rows are never "
          "bold.")
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


def diverged_note(cells: pd.DataFrame) -> str | None:
    """``diverged (d of n cells)`` when some of these cells (one row per cell and metric) diverged, else None."""
    status = cells.drop_duplicates(["order", "seed"])["status"]
    d = int((status == "diverged").sum())
    return f"diverged ({d} of {len(status)} cell{'s' if len(status) != 1 else ''})" if d else None


def _parts(label: str) -> list[str]:
    return label.split("@", 1)[0].split("+")


def is_oracle(label: str, specs: Mapping[str, MethodSpec] | None) -> bool:
    """Whether a method label is an oracle (one of its parts tagged ``reference`` or ``upper-bound``)."""
    return bool(specs) and any(specs[p].tags & ORACLE_TAGS for p in _parts(label) if specs and p in specs)


def _cell_values(values: pd.DataFrame) -> dict[str, float]:
    """``order/seed`` → value of one method's cells of one metric (those with a value)."""
    got = values.loc[_has_value(values["value"])]
    return {f"{o}/{s}": float(v) for o, s, v in zip(got["order"], got["seed"], got["value"], strict=True)}


def _judge_metric(df: pd.DataFrame, metric: MetricSpec, methods: Sequence[str],
                  specs: Mapping[str, MethodSpec] | None, margin: float) -> V.Table:
    """The verdict rule on one metric's pooled cells (rows with a diverged cell left out)."""
    values = df[df["metric"] == metric.name]
    rows = [V.Row(m, _cell_values(values[values["method"] == m]), is_oracle(m, specs)) for m in methods
            if not diverged_note(df[df["method"] == m])]
    return V.judge(rows, metric.direction, V.Rule(margin=margin))


def bold_rows(table: V.Table) -> set[str]:
    """The rows a table bolds: the reference and every ranked row not ``below`` it, when some row is below."""
    ranked = [r for r in table.rows if not r.oracle]
    if not any(r.verdict == V.BELOW for r in ranked):
        return set()
    return {r.name for r in ranked if r.verdict != V.BELOW}


def metric_table(df: pd.DataFrame, metric: MetricSpec, link_root: Path | None = None,
                 methods: Sequence[str] | None = None, labels: Mapping[str, str] | None = None,
                 specs: Mapping[str, MethodSpec] | None = None, margin: float = DEFAULT_MARGIN) -> str:
    """Markdown table of one objective on one stream (``df`` already filtered to the stream), rows in the order of
    ``methods`` (default: alphabetical), each named by ``labels`` (default: the method). A (method, order) or row
    with a diverged cell shows ``diverged (d of n cells)``, not a mean of the others, and cannot be bold."""
    orders = sorted(df["order"].unique(), key=_order_key)
    methods = list(methods) if methods is not None else sorted(df["method"].unique(), key=label_key)
    labels = labels or {}
    values = df[(df["metric"] == metric.name)]
    table = []
    for method in methods:
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
        else:
            row.append(ERROR if row_errors else NA)
        table.append(row)
    if not metric.is_diagnostic:
        bold = bold_rows(_judge_metric(df, metric, methods, specs, margin))
        for row, method in zip(table, methods, strict=True):
            if method in bold:
                row[-1] = f"**{row[-1]}**"
    arrow = "↑" if metric.direction == "up" else "↓"
    header = ["method"] + [f"order {o}" for o in orders] + ["avg"]
    title = f"#### {metric.name} {arrow}" + (f" — {metric.description}" if metric.description else "")
    return title + "\n\n" + tabulate(table, headers=header, tablefmt="github", disable_numparse=True) + "\n"


def diagnostics_tables(df: pd.DataFrame, metrics: Sequence[MetricSpec], methods: Sequence[str],
                       labels: Mapping[str, str], specs: Mapping[str, MethodSpec] | None) -> list[str]:
    """One table per footprint type (dense, LoRA, masked) of the diagnostics that have a value or an error for one
    of its methods: mean ± std over every cell of the row, never bold, never ranked."""
    def kind(label: str) -> str:
        first = _parts(label)[0]
        return specs[first].footprint_kind if specs and first in specs else "other"

    out = []
    for footprint in sorted({kind(m) for m in methods}):
        rows_of = [m for m in methods if kind(m) == footprint]
        sub = df[df["method"].isin(rows_of)]
        present = sub.loc[_has_value(sub["value"]) | _has_error(sub["error"]), "metric"].unique()
        shown = [m for m in metrics if m.name in set(present)]
        if not shown:
            continue
        table = []
        for method in rows_of:
            row = [labels.get(method, method)]
            for metric in shown:
                got = sub[(sub["method"] == method) & (sub["metric"] == metric.name)]
                numbers = [float(v) for v in got.loc[_has_value(got["value"]), "value"]]
                failed = int(_has_error(got["error"]).sum())
                row.append(_fmt_sig(numbers) + _errors_note(failed) if numbers else ERROR if failed else NA)
            table.append(row)
        header = ["method"] + [f"{m.name} {'↑' if m.direction == 'up' else '↓'}" for m in shown]
        out.append(f"#### Diagnostics — {footprint} footprints (never ranked)\n\n"
                   + tabulate(table, headers=header, tablefmt="github", disable_numparse=True) + "\n")
    return out


def _fmt_sig(values: Sequence[float]) -> str:
    """Mean ± std in 4 significant digits: diagnostics span many orders of magnitude."""
    mean, std = _stats(values)
    return f"{mean:.4g}" if std is None else f"{mean:.4g} ± {std:.2g}"


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
SUMMARY_LEGEND = ("Rows ranked by mean AA over every cell (orders × seeds), with its 95 % two-level bootstrap "
                  "interval (cells, then test examples) and the rank interval those replicates give. `vs reference`: "
                  "the verdict of the one rule (docs/verdicts.md) against the reference, the best non-oracle row; "
                  "`d (p)`: the row's mean paired deficit in AA and its Holm-adjusted p. Oracle rows sit apart; "
                  "`(defaults)` marks a method with no preset for the profile and stream: it ran on the training "
                  "defaults, not on settings chosen for the stream as the built-ins' presets are (docs/tuning.md). "
                  "Cost: optimizer steps a task (⚑: above 1.2× the table's median), wall seconds a cell, the method's "
                  "state after the last task, the most parameters a phase trained.")


def read_margins(root: Path) -> dict[str, float]:
    """A result tree's per-stream margins Δ (pp) from ``root/MARGIN``: lines ``stream=number``, ``#`` comments;
    {} when the file is absent. Streams not named get :data:`DEFAULT_MARGIN`."""
    path = Path(root) / MARGIN_FILE
    if not path.exists():
        return {}
    out: dict[str, float] = {}
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        stream, sep, value = (part.strip() for part in line.partition("="))
        try:
            margin = float(value)
        except ValueError:
            margin = -1.0
        if not sep or not stream or not margin >= 0 or stream in out:
            raise ResultFileError(f"{path}:{n}: expected one `stream=<margin in pp ≥ 0>` line per stream, got {raw!r}")
        out[stream] = margin
    return out


def margin_of(stream: str, margins: Mapping[str, float] | None) -> float:
    return max(DEFAULT_MARGIN, (margins or {}).get(stream, DEFAULT_MARGIN))


@dataclass(frozen=True)
class Cost:
    """What a row's complete cells cost, as their result.json record it."""

    steps: float | None  # optimizer steps a task, mean over cells
    seconds: float | None  # wall seconds a cell, mean
    devices: tuple[str, ...]
    peak: int | None  # the largest per-task peak device memory (GPU cells only)
    state: int | None  # the method's state after the last task, largest over cells
    trainable: int | None  # the most parameters a phase trained

    @classmethod
    def of(cls, results: Sequence[CellResult]) -> Cost:
        steps, seconds, peaks, states, trainable = [], [], [], [], []
        for r in results:
            tasks = (r.timings or {}).get("tasks", [])
            phases = [v for t in tasks for v in t.values() if isinstance(v, dict)]
            if tasks:
                steps.append(sum(int(v.get("steps", 0)) for v in phases) / len(tasks))
            if (r.timings or {}).get("total_s") is not None:
                seconds.append(float(r.timings["total_s"]))
            peaks += [int(t["peak_memory_bytes"]) for t in tasks if t.get("peak_memory_bytes") is not None]
            compute = r.compute or {}
            if compute.get("method_state_bytes") is not None:
                states.append(int(compute["method_state_bytes"]))
            trainable += [int(v["trainable"]) for v in phases if v.get("trainable") is not None]
        return cls(statistics.fmean(steps) if steps else None, statistics.fmean(seconds) if seconds else None,
                   tuple(sorted({str(r.env.get("device", "?")) for r in results})), max(peaks, default=None),
                   max(states, default=None), max(trainable, default=None))


@dataclass(frozen=True)
class SummaryRow:
    method: str
    judged: V.Judged | None  # None: not judged (a diverged cell, or no AA)
    fra: list[float]
    cells: int
    diverged: str | None
    statuses: list[str]
    cost: Cost
    oracle: bool


@dataclass(frozen=True)
class Summary:
    """One section's summary: ranked rows (best mean first), then oracle rows, then rows that cannot be judged."""

    rows: list[SummaryRow]
    table: V.Table
    median_steps: float | None


def summarise(results: Sequence[CellResult], specs: Mapping[str, MethodSpec] | None = None,
              margin: float = DEFAULT_MARGIN) -> Summary:
    """The verdict rule on one section's AA (one stream, one scenario), with each row's F.Ra and cost."""
    by_method: dict[str, list[CellResult]] = {}
    for r in results:
        by_method.setdefault(r.method, []).append(r)
    rows, other = [], []
    for method in sorted(by_method, key=label_key):
        cells = by_method[method]
        complete = [r for r in cells if r.status == "complete"]
        diverged = sum(r.status == "diverged" for r in cells)
        note = f"diverged ({diverged} of {len(cells)} cell{'s' if len(cells) != 1 else ''})" if diverged else None
        aa = {f"{r.order}/{r.seed}": float(cast(float, r.metrics[RANK_BY])) for r in complete
              if r.metrics.get(RANK_BY) is not None}
        examples = {}
        for r in complete:
            per_task = final_row(r.examples, r.tasks)
            if per_task is not None:
                examples[f"{r.order}/{r.seed}"] = per_task
        if aa and not note:
            rows.append(V.Row(method, aa, is_oracle(method, specs), examples))
        else:
            other.append(method)
    table = V.judge(rows, "up", V.Rule(margin=margin))
    judged = {j.name: j for j in table.rows}
    ordered = [j.name for j in table.rows] + other

    def row(method: str) -> SummaryRow:
        cells = by_method[method]
        complete = [r for r in cells if r.status == "complete"]
        diverged = sum(r.status == "diverged" for r in cells)
        return SummaryRow(method, judged.get(method),
                          [float(cast(float, r.metrics[SECOND])) for r in complete
                           if r.metrics.get(SECOND) is not None],
                          len(cells), f"diverged ({diverged} of {len(cells)} cell{'s' if len(cells) != 1 else ''})"
                          if diverged else None, sorted({r.status for r in cells}), Cost.of(complete),
                          is_oracle(method, specs))

    out = [row(m) for m in ordered]
    steps = [r.cost.steps for r in out if r.cost.steps is not None]
    return Summary(out, table, statistics.median(steps) if steps else None)


def _bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _count(n: int | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} k" if n >= 1e3 else str(n)


def _aa_text(row: SummaryRow) -> str:
    j = row.judged
    if row.diverged:
        return row.diverged
    if j is None:
        return ", ".join(row.statuses)
    if j.interval is None or j.interval[0] == j.interval[1]:
        return f"{j.mean:.2f}"
    return f"{j.mean:.2f} ({j.interval[0]:.2f}–{j.interval[1]:.2f})"


def _diff_text(row: SummaryRow) -> str:
    j = row.judged
    if j is None or j.diff is None:
        return ""
    return f"{j.diff:.2f} ({V.fmt_p(j.p_holm)})"


def _steps_text(row: SummaryRow, median: float | None) -> str:
    steps = row.cost.steps
    if steps is None:
        return "—"
    flag = f" ⚑{steps / median:.1f}×" if median and steps > BUDGET_FLAG * median else ""
    return f"{steps:,.0f}{flag}"


def _rank(row: SummaryRow) -> str:
    if row.judged is None:
        return "—"
    return "ref." if row.oracle else row.judged.rank_text


def summary_table(summary: Summary, labels: Mapping[str, str] | None = None, tablefmt: str = "github",
                  cost: bool = True) -> str:
    """One section's answer to "which method is best, and by how much": the ranked rows, then the oracle rows
    (their own table in markdown, a block below in plain text), then rows that cannot be judged."""
    labels = labels or {}
    head = ["rank", "method", f"{RANK_BY} ↑ (95 % CI)", f"{SECOND} ↓", "cells", "vs reference", "d (p)"]
    if cost:
        head += ["steps/task", "s/cell", "state", "trained"]
        if any(r.cost.peak is not None for r in summary.rows):
            head.append("peak memory")

    def line(row: SummaryRow) -> list[str]:
        verdict = row.judged.verdict if row.judged is not None else ""
        out = [_rank(row), labels.get(row.method, row.method), _aa_text(row),
               "" if row.diverged else _fmt(row.fra) if row.fra else NA, str(row.cells),
               "" if row.oracle else verdict, _diff_text(row)]
        if cost:
            c = row.cost
            out += [_steps_text(row, summary.median_steps), "—" if c.seconds is None else f"{c.seconds:.1f}",
                    _bytes(c.state), _count(c.trainable)]
            if "peak memory" in head:
                out.append(_bytes(c.peak))
        return out

    ranked = [r for r in summary.rows if not r.oracle]
    oracles = [r for r in summary.rows if r.oracle]
    text = tabulate([line(r) for r in ranked], headers=head, tablefmt=tablefmt, disable_numparse=True) + "\n"
    if oracles:
        text += ("\nOracle rows (given what a continual learner is not: every task's data at once, or one model per "
                 "task); not ranked, never the reference:\n\n" if tablefmt == "github" else "oracle rows (not ranked):\n")
        text += tabulate([line(r) for r in oracles], headers=head, tablefmt=tablefmt, disable_numparse=True) + "\n"
    return text


def summary_caption(summary: Summary) -> str:
    """The rule, n, p and Δ of one section's verdicts, and the devices its cells ran on."""
    devices = sorted({d for r in summary.rows for d in r.cost.devices})
    peak = any(r.cost.peak is not None for r in summary.rows)
    return (summary.table.caption() + f" Cells ran on {', '.join(devices) or '?'}"
            + ("" if peak else "; peak memory is measured on GPU cells only") + ".")


def summary_frame(results: Iterable[CellResult], specs: Mapping[str, MethodSpec] | None = None,
                  margins: Mapping[str, float] | None = None) -> pd.DataFrame:
    """The summary tables as numbers, one row per (profile, stream, scenario, method): rank interval, the label
    the tables print (with its tags), oracle, AA (mean, 95 % interval, sample std), the verdict, d and its p (raw
    and Holm), whether the leaderboard bolds it, every other metric's mean and sample std over the row's cells, and
    the cost. What ``clbench leaderboard --format csv,json,latex`` writes; the same for a pandas user."""
    rows = []
    for profile, group in by_profile(results).items():
        for (stream, scenario), section in section_results(group).items():
            summary = summarise(section, specs, margin_of(stream, margins))
            labels = method_labels([r.method for r in summary.rows], specs, profile, stream)
            bold = bold_rows(summary.table)
            metrics = sorted({k for r in section if r.status == "complete" for k in r.metrics} - {RANK_BY})
            for row in summary.rows:
                j = row.judged
                aa = [] if j is None else list(_aa_values(section, row.method))
                out = {
                    "profile": profile, "stream": stream, "scenario": scenario, "rank": _rank(row),
                    "method": row.method, "label": labels[row.method], "oracle": row.oracle,
                    "AA mean": None if j is None else j.mean,
                    "AA ci low": None if j is None or j.interval is None else j.interval[0],
                    "AA ci high": None if j is None or j.interval is None else j.interval[1],
                    "AA std": _stats(aa)[1] if aa else None, "cells": row.cells,
                    "verdict": "" if j is None or row.oracle else j.verdict,
                    "d": None if j is None else j.diff, "p": None if j is None else j.p,
                    "p holm": None if j is None else j.p_holm, "margin": summary.table.rule.margin,
                    "bold": row.method in bold}
                for name in metrics:
                    values = [] if row.diverged else _metric_values(section, row.method, name)
                    mean, std = _stats(values) if values else (None, None)
                    out.update({f"{name} mean": mean, f"{name} std": std})
                out.update({"steps per task": row.cost.steps, "seconds per cell": row.cost.seconds,
                            "method state bytes": row.cost.state, "trained parameters": row.cost.trainable,
                            "peak memory bytes": row.cost.peak, "devices": ",".join(row.cost.devices),
                            "diverged": row.diverged or ""})
                rows.append(out)
    return pd.DataFrame(rows)


def _metric_values(section: Sequence[CellResult], method: str, name: str) -> list[float]:
    return [float(cast(float, r.metrics[name])) for r in section if r.method == method and r.status == "complete"
            and r.metrics.get(name) is not None]


def _aa_values(section: Sequence[CellResult], method: str) -> list[float]:
    return [float(cast(float, r.metrics[RANK_BY])) for r in section if r.method == method and r.status == "complete"
            and r.metrics.get(RANK_BY) is not None]


def load(*roots: str | Path) -> pd.DataFrame:
    """Every result under ``roots`` as a tidy DataFrame, one row per (cell, metric): profile, stream, scenario,
    method, order, seed, status, path, metric, value, error. Unusable files are skipped with a warning."""
    return frame(r for root in roots for r in iter_results(Path(root)))


def sections(df: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(stream, scenario, its rows) for every stream and scenario: a table never ranks two scenarios together."""
    return [(stream, scenario, group) for (stream, scenario), group
            in df.groupby(["stream", "scenario"], sort=True)]


def section_results(results: Iterable[CellResult]) -> dict[tuple[str, str], list[CellResult]]:
    """The results of each (stream, scenario), sorted by key."""
    out: dict[tuple[str, str], list[CellResult]] = {}
    for r in results:
        out.setdefault((r.stream, r.scenario or ""), []).append(r)
    return dict(sorted(out.items()))


def section_title(stream: str, scenario: str) -> str:
    return f"{stream} — {SCENARIO_WORDS.get(scenario, scenario)}" if scenario else stream


def cannot_run(df: pd.DataFrame, scenario: str, specs: Mapping[str, MethodSpec] | None) -> list[str]:
    """Methods of these results that cannot run in ``scenario`` (their ``MethodSpec.scenarios`` exclude it)."""
    if not specs or not scenario:
        return []
    out = []
    for label in sorted(df["method"].unique(), key=label_key):
        parts = [specs[p] for p in _parts(label) if p in specs]
        if any(p.scenarios and scenario not in p.scenarios for p in parts):
            out.append(label)
    return out


def method_labels(methods: Sequence[str], specs: Mapping[str, MethodSpec] | None, profile: str | None = None,
                  stream: str | None = None) -> dict[str, str]:
    """``joint (oracle)``, ``mymethod (defaults)``: a method label with what a reader must see: an oracle, or (with
    ``profile`` and ``stream``) a method none of whose parts has a preset for them, so that it ran on the training
    defaults beside methods whose presets were chosen for this stream (docs/tuning.md)."""
    out = {}
    for label in methods:
        notes = ["oracle"] if is_oracle(label, specs) else []
        if specs and profile and stream and not _has_preset(label, specs, profile, stream):
            notes.append("defaults")
        out[label] = f"{label} ({', '.join(notes)})" if notes else label
    return out


def _has_preset(label: str, specs: Mapping[str, MethodSpec], profile: str, stream: str) -> bool:
    """Whether a part of the method (an unknown one counts as having one: nothing to say) has a preset for
    ``profile`` on ``stream`` (the profile's own, the stream's, or an order's)."""
    for part in _parts(label):
        if part not in specs:
            return True
        if any(k in (profile, f"{profile}/{stream}") or k.startswith(f"{profile}/{stream}/")
               for k in specs[part].presets):
            return True
    return False


def _profile_of(results: Sequence[CellResult]) -> str | None:
    profiles = {str(r.config.get("profile", "custom")) for r in results}
    return profiles.pop() if len(profiles) == 1 else None


def console_summary(results: Iterable[CellResult], methods: Mapping[str, MethodSpec] | None = None,
                    margins: Mapping[str, float] | None = None) -> str:
    """What ``clbench run`` prints at its end: the leaderboard's summary, one plain table per stream and scenario."""
    blocks = []
    for (stream, scenario), section in section_results(results).items():
        if not any(RANK_BY in r.metrics for r in section):
            continue
        summary = summarise(section, methods, margin_of(stream, margins))
        labels = method_labels([r.method for r in summary.rows], methods, _profile_of(section), stream)
        blocks.append(f"{section_title(stream, scenario)}\n{summary_table(summary, labels, 'simple', cost=False)}")
    return "\n".join(blocks)


def render(results: Iterable[CellResult], metrics: Sequence[MetricSpec], title: str,
           link_root: Path | None = None, methods: Mapping[str, MethodSpec] | None = None,
           margins: Mapping[str, float] | None = None) -> str:
    """The markdown leaderboard of one profile's results: per stream and scenario, the ranked summary, then one
    table per objective (rows as in the summary; objectives that are n/a for most rows last), then the
    diagnostics per footprint type. ``methods`` (the registry's method specs) marks the oracles, the footprint types
    and the methods that cannot run in a scenario; ``margins`` is Δ per stream (:func:`read_margins`)."""
    results = list(results)
    df = frame(results)
    shown = [m for m in metrics if m.leaderboard]
    objectives = [m for m in shown if not m.is_diagnostic]
    diagnostics = [m for m in shown if m.is_diagnostic]
    parts = [f"# {title}\n", "Generated by `clbench leaderboard` from result files; do not edit by hand.\n",
             "Metrics of the accuracy matrix (AA, F.Ra, BWT, LA, AIA, FWT) are in percent, footprint metrics (OO, "
             "AWOM, GSR, ACR, ...) in their own units (README, Metrics). Cells are mean ± std over seeds, `avg` pools "
             "every cell of the row (orders × seeds). `n/a`: the metric does not apply; `error`: it could not be "
             "computed (listed under the stream's tables) and is left out of the averages; `diverged (d of n "
             "cells)`: training blew up in d cells (`clbench show` says where), and the row is not averaged.\n"]
    by_section = section_results(results)
    summaries = {key: summarise(section, methods, margin_of(key[0], margins)) for key, section in by_section.items()
                 if any(RANK_BY in r.metrics for r in section)}
    if summaries:
        parts.append("## Summary\n\n" + SUMMARY_LEGEND + "\n")
        for (stream, scenario), summary in summaries.items():
            labels = method_labels([r.method for r in summary.rows], methods, _profile_of(by_section[stream, scenario]),
                                   stream)
            parts.append(f"### {section_title(stream, scenario)}\n\n{summary_caption(summary)}\n\n"
                         f"{summary_table(summary, labels)}")
    for stream, scenario, sdf in sections(df):
        seeds = sorted(sdf["seed"].unique())
        section_summary = summaries.get((stream, scenario))
        order = ([r.method for r in section_summary.rows] if section_summary is not None
                 else sorted(sdf["method"].unique(), key=label_key))
        labels = method_labels(order, methods, _profile_of(by_section.get((stream, scenario), [])), stream)
        parts.append(f"## {section_title(stream, scenario)}\n\nseeds: {', '.join(str(s) for s in seeds)}; "
                     f"cells: {sdf.drop_duplicates(['method', 'order', 'seed']).shape[0]}\n")
        excluded = cannot_run(df, scenario, methods)
        if excluded:
            parts.append(f"Cannot run in this scenario (they use the task identity at test time): "
                         f"{', '.join(excluded)}.\n")
        parts.append(_forms_line([r for r in results if r.stream == stream and (r.scenario or "") == scenario]))
        parts.append((LEGEND if complete_seeds(sdf) else LEGEND_NO_CELL) + "\n")
        # a metric with neither a value nor an error for any method of the stream: no table; one that applies to
        # fewer than half of the rows goes below the others
        present = sdf.loc[_has_value(sdf["value"]) | _has_error(sdf["error"])].groupby("metric")["method"].nunique()
        tabled = [m for m in objectives if m.name in present.index]
        few = [m for m in tabled if 2 * present[m.name] < len(order)]
        margin = margin_of(stream, margins)
        for metric in [m for m in tabled if m not in few]:
            parts.append(metric_table(sdf, metric, link_root, order, labels, methods, margin))
        if few:
            parts.append("Objectives that apply to fewer than half of the methods (n/a for the others):\n")
            for metric in few:
                parts.append(metric_table(sdf, metric, link_root, order, labels, methods, margin))
        parts += diagnostics_tables(sdf, [m for m in diagnostics if m.name in present.index], order, labels, methods)
        errors = error_lines(sdf, [m.name for m in shown if m.name in present.index])
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
