"""The leaderboard's per-metric tables: cells into a frame, each metric's table by orders with its verdict marks,
the diagnostics, error lines, and how a rendering's tables are judged (:class:`Judging`: ``--margin``,
``--reference``)."""

from __future__ import annotations

import math
import os
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from tabulate import tabulate

from clbench import verdicts as V
from clbench.cell import CellResult
from clbench.specs import MethodSpec, MetricSpec

if TYPE_CHECKING:
    from clbench._core.registry import Registries

NA = "n/a"
ERROR = "error"
ERROR_CHARS = 200  # a metric error's message is cut to this many characters in the leaderboard
ORACLE_TAGS = frozenset({"reference", "upper-bound"})  # methods given what a continual learner is not
BUDGET_FLAG = 1.2  # a row whose steps a task exceed this × the table's median is flagged
LEGEND = (
    "Bold `avg`: the rows the verdict rule does not call `below` (behind the best, or the declared reference, by "
    "more than Δ; see the summary's caption); no bold: no row is. Oracle rows are never bold."
)
LEGEND_NO_CELL = "Bold `avg`: none, no cell is complete."


def frame(results: Iterable[CellResult]) -> pd.DataFrame:
    """One row per (cell, metric) with its value and, when it raised, its error; the tidy form every
    table is pivoted from. A metric with an error has value None whatever the result recorded."""
    rows = []
    for r in results:
        profile = str(r.config.get("profile", "custom"))
        base = {
            "profile": profile,
            "stream": r.stream,
            "scenario": r.scenario or "",
            "method": r.method,
            "order": r.order,
            "seed": r.seed,
            "status": r.status,
            "path": str(r.path) if r.path else "",
        }
        if r.status != "complete":
            rows.append({**base, "metric": None, "value": None, "error": None})
            continue
        errors = r.metric_errors or {}
        for name in [*r.metrics, *sorted(n for n in errors if n not in r.metrics)]:
            error = errors.get(name)
            rows.append(
                {
                    **base,
                    "metric": name,
                    "value": None if error is not None else r.metrics.get(name),
                    "error": None if error is None else str(error),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "profile",
            "stream",
            "scenario",
            "method",
            "order",
            "seed",
            "status",
            "path",
            "metric",
            "value",
            "error",
        ],
    )


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of ``values`` and their sample standard deviation (None for one value)."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return NA
    mean, std = mean_sd(values)
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


def has_error(series: pd.Series) -> pd.Series:
    """Per entry of a frame's ``error`` column: whether the metric failed there (a message, not None or NaN)."""
    return series.map(lambda e: e is not None and not (isinstance(e, float) and math.isnan(e)))


def has_value(series: pd.Series) -> pd.Series:
    """Per entry of a frame's ``value`` column: whether the metric has a value there."""
    return series.map(lambda v: v is not None and not pd.isna(v))


def complete_seeds(df: pd.DataFrame) -> int:
    """How many seeds the complete cells of ``df`` span."""
    return int(df.loc[df["status"] == "complete", "seed"].nunique())


def diverged_note(cells: pd.DataFrame) -> str | None:
    """``diverged (d of n cells)`` when some of these cells (one row per cell and metric) diverged, else None."""
    if not (cells["status"].to_numpy() == "diverged").any():
        return None
    status = cells.drop_duplicates(["order", "seed"])["status"]
    d = int((status == "diverged").sum())
    return f"diverged ({d} of {len(status)} cell{'s' if len(status) != 1 else ''})" if d else None


def label_parts(label: str) -> list[str]:
    """The methods a row label combines (``ewc+lwf@200`` → ``["ewc", "lwf"]``)."""
    return label.split("@", 1)[0].split("+")


def is_oracle(label: str, specs: Mapping[str, MethodSpec] | None) -> bool:
    """Whether a method label is an oracle (one of its parts tagged ``reference`` or ``upper-bound``)."""
    return bool(specs) and any(specs[p].tags & ORACLE_TAGS for p in label_parts(label) if specs and p in specs)


def _cell_values(values: pd.DataFrame) -> dict[str, float]:
    """``order/seed`` → value of one method's cells of one metric (those with a value)."""
    got = values.loc[has_value(values["value"])]
    return {f"{o}/{s}": float(v) for o, s, v in zip(got["order"], got["seed"], got["value"], strict=True)}


def _judge_metric(
    df: pd.DataFrame, metric: MetricSpec, methods: Sequence[str], specs: Mapping[str, MethodSpec] | None, rule: V.Rule
) -> V.Table:
    """The verdict rule on one metric's pooled cells (rows with a diverged cell left out)."""
    values = _groups(df[df["metric"] == metric.name], "method")
    by_method = _groups(df, "method")
    rows = [
        V.Row(m, _cell_values(values.get(m, df.iloc[:0])), is_oracle(m, specs))
        for m in methods
        if not diverged_note(by_method.get(m, df.iloc[:0]))
    ]
    return V.judge(rows, metric.direction, rule)


def _groups(df: pd.DataFrame, *keys: str) -> dict[Any, pd.DataFrame]:
    """``df``'s rows by the values of ``keys`` (one pass; a boolean mask a key would scan the frame each time)."""
    return dict(tuple(df.groupby(list(keys) if len(keys) > 1 else keys[0], sort=False)))


def bold_rows(table: V.Table) -> set[str]:
    """The rows a table bolds: every ranked row not ``below``, when some row is."""
    ranked = [r for r in table.rows if not r.oracle]
    if not any(r.verdict == V.BELOW for r in ranked):
        return set()
    return {r.name for r in ranked if r.verdict != V.BELOW}


def metric_table(
    df: pd.DataFrame,
    metric: MetricSpec,
    link_root: Path | None = None,
    methods: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
    specs: Mapping[str, MethodSpec] | None = None,
    rule: V.Rule | None = None,
) -> str:
    """Markdown table of one objective on one stream (``df`` already filtered to the stream), rows in the order of
    ``methods`` (default: alphabetical), each named by ``labels`` (default: the method). A (method, order) or row
    with a diverged cell shows ``diverged (d of n cells)``, not a mean of the others, and cannot be bold."""
    orders = sorted(df["order"].unique(), key=_order_key)
    methods = list(methods) if methods is not None else sorted(df["method"].unique(), key=label_key)
    labels = labels or {}
    values = df[(df["metric"] == metric.name)]
    none = df.iloc[:0]
    by_method, by_cell, values_by_cell = (
        _groups(df, "method"),
        _groups(df, "method", "order"),
        _groups(values, "method", "order"),
    )
    table = []
    for method in methods:
        row = [labels.get(method, method)]
        pooled: list[float] = []
        row_errors = 0
        for order in orders:
            cells = by_cell.get((method, order), none)
            got = values_by_cell.get((method, order), none).sort_values("seed")
            numbers = [float(v) for v in got.loc[has_value(got["value"]), "value"]]
            failed = got[has_error(got["error"])]
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
        row_diverged = diverged_note(by_method.get(method, none))
        if row_diverged:
            row.append(row_diverged)
        elif pooled:
            row.append(_fmt(pooled) + _errors_note(row_errors))
        else:
            row.append(ERROR if row_errors else NA)
        table.append(row)
    if not metric.is_diagnostic:
        bold = bold_rows(_judge_metric(df, metric, methods, specs, rule or V.Rule()))
        for row, method in zip(table, methods, strict=True):
            if method in bold:
                row[-1] = f"**{row[-1]}**"
    arrow = "↑" if metric.direction == "up" else "↓"
    header = ["method"] + [f"order {o}" for o in orders] + ["avg"]
    title = f"#### {metric.name} {arrow}" + (f" — {metric.description}" if metric.description else "")
    return title + "\n\n" + tabulate(table, headers=header, tablefmt="github", disable_numparse=True) + "\n"


def diagnostics_tables(
    df: pd.DataFrame,
    metrics: Sequence[MetricSpec],
    methods: Sequence[str],
    labels: Mapping[str, str],
    specs: Mapping[str, MethodSpec] | None,
) -> list[str]:
    """One table per footprint type (dense, LoRA, masked) of the diagnostics that have a value or an error for one
    of its methods: mean ± std over every cell of the row, never bold, never ranked."""

    def kind(label: str) -> str:
        first = label_parts(label)[0]
        return specs[first].footprint_kind if specs and first in specs else "other"

    out = []
    for footprint in sorted({kind(m) for m in methods}):
        rows_of = [m for m in methods if kind(m) == footprint]
        sub = df[df["method"].isin(rows_of)]
        present = sub.loc[has_value(sub["value"]) | has_error(sub["error"]), "metric"].unique()
        shown = [m for m in metrics if m.name in set(present)]
        if not shown:
            continue
        table = []
        for method in rows_of:
            row = [labels.get(method, method)]
            for metric in shown:
                got = sub[(sub["method"] == method) & (sub["metric"] == metric.name)]
                numbers = [float(v) for v in got.loc[has_value(got["value"]), "value"]]
                failed = int(has_error(got["error"]).sum())
                row.append(_fmt_sig(numbers) + _errors_note(failed) if numbers else ERROR if failed else NA)
            table.append(row)
        header = ["method"] + [f"{m.name} {'↑' if m.direction == 'up' else '↓'}" for m in shown]
        out.append(
            f"#### Diagnostics — {footprint} footprints (never ranked)\n\n"
            + tabulate(table, headers=header, tablefmt="github", disable_numparse=True)
            + "\n"
        )
    return out


def _fmt_sig(values: Sequence[float]) -> str:
    """Mean ± std in 4 significant digits: diagnostics span many orders of magnitude."""
    mean, std = mean_sd(values)
    return f"{mean:.4g}" if std is None else f"{mean:.4g} ± {std:.2g}"


def _one_line(message: str, limit: int = ERROR_CHARS) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_lines(df: pd.DataFrame, metric_names: Sequence[str]) -> list[str]:
    """``errors: <metric> on <method> order <o> seed <s>: <message>`` for every metric error of the
    stream in ``df`` among ``metric_names``, sorted by metric, method, order and seed."""
    failed = df[has_error(df["error"]) & df["metric"].isin(list(metric_names))]
    keyed = sorted(
        (
            (str(m), str(me), _order_key(str(o)), int(s), str(e))
            for m, me, o, s, e in zip(
                failed["metric"], failed["method"], failed["order"], failed["seed"], failed["error"], strict=True
            )
        )
    )
    return [f"errors: {m} on {me} order {o[1]} seed {s}: {_one_line(e)}" for m, me, o, s, e in keyed]


def fenced(lines: Sequence[str]) -> str:
    """The lines as a fenced text block (one per line, no markdown read into the messages)."""
    longest = 0
    for line in lines:
        run = 0
        for ch in line:
            run = run + 1 if ch == "`" else 0
            longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n" + "\n".join(lines) + f"\n{fence}\n"


@dataclass(frozen=True)
class Judging:
    """How the tables of one rendering are judged: Δ given by the user (``--margin``: a stream, a scenario or
    ``*`` → Δ; otherwise each scenario's default, :data:`clbench.verdicts.MARGINS`) and the declared reference
    (``--reference``; None compares every row with every other)."""

    margins: Mapping[str, float] = field(default_factory=dict)
    reference: str | None = None
    # the streams whose tasks share one test set (StreamSpec.shared_test_set): see :meth:`of`
    shared_test_sets: frozenset[str] = frozenset()

    @classmethod
    def of(cls, regs: Registries, margins: Mapping[str, float] | None = None, reference: str | None = None) -> Judging:
        """The judging of tables whose streams ``regs`` registers (which of them share one test set)."""
        shared = frozenset(name for name, spec in regs.streams.items.items() if spec.shared_test_set)
        return cls(dict(margins or {}), reference, shared)

    def rule(self, stream: str, scenario: str | None) -> V.Rule:
        margin = V.margin_for(scenario)
        where = f"the {scenario} default" if scenario in V.MARGINS else "the default"
        for key in (stream, scenario or "", "*"):
            if key in self.margins:
                margin, where = self.margins[key], "set by --margin" + ("" if key == "*" else f" {key}")
                break
        return V.Rule(
            margin=margin,
            reference=self.reference,
            margin_from=where,
            shared_test_set=stream in self.shared_test_sets,
        )


def parse_margins(values: Iterable[str]) -> dict[str, float]:
    """``--margin`` values into :attr:`Judging.margins`: ``2`` (every table) or ``NAME=2`` (a stream or a
    scenario); ValueError naming the value that is neither."""
    out: dict[str, float] = {}
    for raw in values:
        name, sep, value = raw.rpartition("=")
        key = name.strip() if sep else "*"
        try:
            margin = float(value)
        except ValueError:
            margin = -1.0
        if not margin >= 0 or not key or key in out:
            raise ValueError(
                f"{raw!r}: expected Δ ≥ 0 in the metric's unit (pp for AA), alone for every table or as "
                "STREAM=Δ or SCENARIO=Δ, each name once"
            )
        out[key] = margin
    return out
