"""A stream's summary: methods ranked by AA with intervals and rank intervals, the verdict against the reference,
and each row's cost (steps a task, seconds a cell, the method's state, trained parameters); oracle rows apart."""

from __future__ import annotations

import collections
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from tabulate import tabulate

from clbench import verdicts as V
from clbench._core.examples import final_row
from clbench._tools.tables import (
    BUDGET_FLAG,
    NA,
    _fmt,
    is_oracle,
    label_key,
)
from clbench.cell import CellResult
from clbench.errors import ResultFileError
from clbench.specs import MethodSpec

if TYPE_CHECKING:
    from clbench._tools.fragility import RowFragility

RANK_BY, SECOND = "AA", "F.Ra"  # the summary ranks by AA (higher is better) and shows F.Ra beside it
SUMMARY_LEGEND = (
    "Rows ranked by mean AA over every cell (orders × seeds), with its 95 % two-level bootstrap "
    "interval (cells, then test examples) and the rank interval those replicates give. `verdict`: the one "
    "rule's (docs/verdicts.md), against the declared reference or, without one, against every other row; "
    "`d (p)`: the row's mean paired deficit in AA to the reference (or the best row) and the Holm-adjusted p "
    "of the test that decides its verdict (of a lead at all for `behind`, of one beyond Δ otherwise). Oracle "
    "rows sit apart; "
    "`(defaults)` marks a method with no preset for the profile and stream: it ran on the training "
    "defaults, not on settings chosen for the stream as the built-ins' presets are (docs/tuning.md). "
    "Cost: optimizer steps a task (⚑: above 1.2× the table's median), wall seconds a cell, the method's "
    "state after the last task, the most parameters a phase trained, (where the results counted them) the "
    "examples the model forwarded a task, every loop of the method included, and of them those with gradients "
    "(⚑: above 1.2× the table's median; not compared at equal compute, `train.compute_epochs`), and "
    "`memory`: the examples a method keeps at the stream's end (`train.memory`, docs/budgets.md), with their inputs' "
    "bytes where the results recorded them (⚑: more than 2 % off the number most rows keep; not compared at equal "
    "memory)."
)


@dataclass(frozen=True)
class Cost:
    """What a row's complete cells cost, as their result.json record it."""

    steps: float | None  # optimizer steps a task, mean over cells
    seconds: float | None  # wall seconds a cell, mean
    devices: tuple[str, ...]
    peak: int | None  # the largest per-task peak device memory (GPU cells only)
    state: int | None  # the method's state after the last task, largest over cells
    trainable: int | None  # the most parameters a phase trained
    forward: float | None = None  # examples the model forwarded a task (clbench._exec.compute), mean over cells
    grad: float | None = None  # ... of them with gradients
    memory: int | None = None  # the examples it may keep at the stream's end (MethodSpec.memory), largest over cells
    example_bytes: int | None = None  # one stored example's input as the model received it, where recorded

    @classmethod
    def of(cls, results: Sequence[CellResult], specs: Mapping[str, MethodSpec] | None = None) -> Cost:
        steps, seconds, peaks, states, trainable = [], [], [], [], []
        memory = [n for n in (memory_of(r, specs or {}) for r in results) if n is not None]
        recorded = [(r.compute or {}).get("example_bytes") for r in results]
        example_bytes = [int(n) for n in recorded if n]
        forward: list[float] = []
        grad: list[float] = []
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
            if tasks and all(t.get("examples_forward") is not None for t in tasks):
                forward.append(sum(int(t["examples_forward"]) for t in tasks) / len(tasks))
                grad.append(sum(int(t["examples_grad"]) for t in tasks) / len(tasks))
        return cls(
            statistics.fmean(steps) if steps else None,
            statistics.fmean(seconds) if seconds else None,
            tuple(sorted({str(r.env.get("device", "?")) for r in results})),
            max(peaks, default=None),
            max(states, default=None),
            max(trainable, default=None),
            statistics.fmean(forward) if forward else None,
            statistics.fmean(grad) if grad else None,
            max(memory, default=None),
            max(example_bytes, default=None),
        )


def memory_of(result: CellResult, specs: Mapping[str, MethodSpec]) -> int | None:
    """The examples a cell's method parts may keep at the stream's end, by the rule each declares
    (:attr:`MethodSpec.memory`) at the value its configuration recorded; None: no part keeps examples."""
    kept = []
    for part, settings in (result.config.get("methods") or {}).items():
        spec = specs.get(part)
        if spec is not None and spec.memory is not None and settings.get(spec.memory.setting) is not None:
            kept.append(spec.memory.capacity(int(settings[spec.memory.setting]), len(result.tasks)))
    return sum(kept) if kept else None


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
    median_grad: float | None = None  # examples with gradients a task, the rows' median (where results counted them)


def summarise(
    results: Sequence[CellResult], specs: Mapping[str, MethodSpec] | None = None, rule: V.Rule | None = None
) -> Summary:
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
        aa = {
            f"{r.order}/{r.seed}": float(cast(float, r.metrics[RANK_BY]))
            for r in complete
            if r.metrics.get(RANK_BY) is not None
        }
        examples = {}
        for r in complete:
            try:
                per_task = final_row(r.examples, r.tasks)
            except ResultFileError as exc:  # edited or cut by hand: its verdicts cannot be computed
                raise ResultFileError(
                    f"{r.path or r.key}: {exc}; restore the file, or move its cell folder away and rerun the cell"
                ) from None
            if per_task is not None:
                examples[f"{r.order}/{r.seed}"] = per_task
        if aa and not note:
            rows.append(V.Row(method, aa, is_oracle(method, specs), examples))
        else:
            other.append(method)
    table = V.judge(rows, "up", rule)
    judged = {j.name: j for j in table.rows}
    ordered = [j.name for j in table.rows] + other

    def row(method: str) -> SummaryRow:
        cells = by_method[method]
        complete = [r for r in cells if r.status == "complete"]
        diverged = sum(r.status == "diverged" for r in cells)
        return SummaryRow(
            method,
            judged.get(method),
            [float(cast(float, r.metrics[SECOND])) for r in complete if r.metrics.get(SECOND) is not None],
            len(cells),
            f"diverged ({diverged} of {len(cells)} cell{'s' if len(cells) != 1 else ''})" if diverged else None,
            sorted({r.status for r in cells}),
            Cost.of(complete, specs),
            is_oracle(method, specs),
        )

    out = [row(m) for m in ordered]
    steps = [r.cost.steps for r in out if r.cost.steps is not None]
    grad = [r.cost.grad for r in out if r.cost.grad is not None]
    return Summary(out, table, statistics.median(steps) if steps else None, statistics.median(grad) if grad else None)


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


def _examples_text(cost: Cost, median: float | None) -> str:
    """Examples forwarded a task, and of them those with gradients; ⚑ where those are above
    :data:`BUDGET_FLAG` × the table's median: the compute the rows spent is not equal (at equal compute,
    ``train.compute_epochs``, what a method computes outside its steps: EWC's Fisher, GDumb's retraining)."""
    if cost.forward is None:
        return "—"
    grad = round(cost.grad or 0)
    flag = f" ⚑{grad / median:.1f}×" if median and grad > BUDGET_FLAG * median else ""
    return f"{_count(round(cost.forward))} ({_count(grad)}){flag}"


def _most_common(values: Sequence[int]) -> int | None:
    """The value more rows hold than any other; None on a tie (or none)."""
    counts = collections.Counter(values).most_common(2)
    return counts[0][0] if counts and (len(counts) == 1 or counts[0][1] > counts[1][1]) else None


MEMORY_FLAG = 0.02  # a row keeping more than 2 % more or fewer examples than the most rows do is flagged


def _memory_text(cost: Cost, common: int | None) -> str:
    """Examples kept, and the bytes of their inputs where a result recorded one example's; ⚑ where the row keeps
    more than :data:`MEMORY_FLAG` more or fewer examples than the most rows that keep any do, or on every row that
    keeps any when no number is the most common: their comparison is not at equal memory (GEM's 66 a task of 3
    tasks under ``train.memory=200``, 198 in all, is)."""
    if cost.memory is None:
        return "—"
    text = f"{cost.memory:,}" + (f" ({_bytes(cost.memory * cost.example_bytes)})" if cost.example_bytes else "")
    return text + (" ⚑" if common is None or abs(cost.memory - common) > MEMORY_FLAG * common else "")


def rank_cell(row: SummaryRow) -> str:
    """A summary row's ``rank`` cell: its rank interval, ``ref.`` for an oracle, ``—`` for a row not judged."""
    if row.judged is None:
        return "—"
    return "ref." if row.oracle else row.judged.rank_text


FRAGILITY_LEGEND = (
    "`fragility`: the worst of the row's neighbours — its tuned choice at 0.5× and 2× its learning rate and at 0.5× "
    "and 2× its strengths (docs/tuning.md) — rerun on the row's own orders and seeds beside the choice (all of the "
    "row's cells, or as many of them as the cell says): the neighbour's mean AA minus the rerun choice's there, and "
    "which neighbour (⚑: below by more than the table's Δ, so a factor of two in one setting moves the row by more than the verdict rule's margin; `not complete`: that "
    "neighbour diverged or failed; `at P`: a row that trains exactly as at the profile P this one extends, its "
    "neighbours run there; —: no neighbours were run for the row)."
)


def fragility_text(worst: RowFragility | None, margin: float) -> str:
    """A row's ``fragility`` cell from :func:`clbench._tools.fragility.fragility_scores`: the move, the neighbour and,
    when the neighbours ran on part of the row's cells, on how many."""
    if worst is None:
        return "—"
    name = worst.neighbour if worst.cells == worst.of else f"{worst.neighbour}; {worst.cells} of {worst.of} cells"
    if worst.at is not None:
        name += f"; at {worst.at}"
    if worst.move == float("-inf"):
        return f"not complete ({name}) ⚑"
    return f"{worst.move:+.2f} ({name})" + (" ⚑" if worst.move < -margin else "")


def summary_table(
    summary: Summary,
    labels: Mapping[str, str] | None = None,
    tablefmt: str = "github",
    cost: bool = True,
    fragility: Mapping[str, RowFragility | None] | None = None,
) -> str:
    """One section's answer to "which method is best, and by how much": the ranked rows, then the oracle rows
    (their own table in markdown, a block below in plain text), then rows that cannot be judged. ``fragility``:
    per method its worst neighbour and move (:data:`FRAGILITY_LEGEND`), a column after the verdict's."""
    labels = labels or {}
    head = ["rank", "method", f"{RANK_BY} ↑ (95 % CI)", f"{SECOND} ↓", "cells", "verdict", "d (p)"]
    if fragility is not None:
        head.append("fragility")
    if cost:
        head += ["steps/task", "s/cell", "state", "trained"]
        kept = [r.cost.memory for r in summary.rows if r.cost.memory is not None]
        common = _most_common(kept)
        if kept:
            head.append("memory")
        if any(r.cost.forward is not None for r in summary.rows):
            head.append("examples/task (grad)")
        if any(r.cost.peak is not None for r in summary.rows):
            head.append("peak memory")

    def line(row: SummaryRow) -> list[str]:
        verdict = row.judged.verdict if row.judged is not None else ""
        out = [
            rank_cell(row),
            labels.get(row.method, row.method),
            _aa_text(row),
            "" if row.diverged else _fmt(row.fra) if row.fra else NA,
            str(row.cells),
            "" if row.oracle else verdict,
            _diff_text(row),
        ]
        if fragility is not None:
            out.append(fragility_text(fragility.get(row.method), summary.table.rule.margin))
        if cost:
            c = row.cost
            out += [
                _steps_text(row, summary.median_steps),
                "—" if c.seconds is None else f"{c.seconds:.1f}",
                _bytes(c.state),
                _count(c.trainable),
            ]
            if "memory" in head:
                out.append(_memory_text(c, common))
            if "examples/task (grad)" in head:
                out.append(_examples_text(c, summary.median_grad))
            if "peak memory" in head:
                out.append(_bytes(c.peak))
        return out

    ranked = [r for r in summary.rows if not r.oracle]
    oracles = [r for r in summary.rows if r.oracle]
    text = tabulate([line(r) for r in ranked], headers=head, tablefmt=tablefmt, disable_numparse=True) + "\n"
    if oracles:
        text += (
            "\nOracle rows (given what a continual learner is not: every task's data at once, or one model per "
            "task); not ranked, never the reference:\n\n"
            if tablefmt == "github"
            else "oracle rows (not ranked):\n"
        )
        text += tabulate([line(r) for r in oracles], headers=head, tablefmt=tablefmt, disable_numparse=True) + "\n"
    return text


def summary_caption(summary: Summary) -> str:
    """The rule, n, p and Δ of one section's verdicts, and the devices its cells ran on."""
    devices = sorted({d for r in summary.rows for d in r.cost.devices})
    peak = any(r.cost.peak is not None for r in summary.rows)
    return (
        summary.table.caption()
        + f" Cells ran on {', '.join(devices) or '?'}"
        + ("" if peak else "; peak memory is measured on GPU cells only")
        + "."
    )
