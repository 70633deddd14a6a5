"""``clbench versus A B``: a paired comparison of two result trees by the one verdict rule.

Two trees of the same streams and methods made with other settings (buffer 200 against 500, the code before a change
against after it) pair cell by cell: the same stream, method, order and seed. Per (stream, method) the differences
of AA (B − A) over the paired cells are judged as against a declared reference, A: ``above``/``below`` when B leads
or trails by more than Δ (a one-sided minimum-effect sign-flip test), ``ahead``/``behind`` when a lead is shown and
one beyond Δ is not, ``equivalent`` when the paired 90 % t-interval lies within ±Δ, ``not separated`` otherwise;
Holm across both directions of every row. Δ is the scenario's (:data:`clbench.verdicts.MARGINS`) or ``--margin``.
Unlike ``clbench compare`` (a regression check of every number of every cell), this asks whether the change moved a
method's score by an amount that matters.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tabulate import tabulate

from clbench import verdicts as V
from clbench._tools.summary import RANK_BY
from clbench._tools.tables import Judging, label_key
from clbench.cell import CellResult


@dataclass(frozen=True)
class Contrast:
    """One (stream, method): its paired cells' mean AA in A and in B, the mean of B − A with its paired 90 %
    t-interval, the verdict of B against A and the Holm-adjusted p of the test that decided it."""

    stream: str
    scenario: str | None
    method: str
    cells: int
    a: float
    b: float
    diff: float
    interval: tuple[float, float] | None
    verdict: str
    p: float
    margin: float


def _aa(results: Sequence[CellResult]) -> dict[tuple[str, str], dict[str, tuple[float, str | None]]]:
    """(stream, method) → ``order/seed`` → (AA, scenario) of the complete cells."""
    out: dict[tuple[str, str], dict[str, tuple[float, str | None]]] = {}
    for r in results:
        value = r.metrics.get(RANK_BY)
        if r.status == "complete" and value is not None:
            out.setdefault((r.stream, r.method), {})[f"{r.order}/{r.seed}"] = (float(value), r.scenario)
    return out


def contrast(
    a: Sequence[CellResult],
    b: Sequence[CellResult],
    judging: Judging | None = None,
    methods: Collection[str] | None = None,
    streams: Collection[str] | None = None,
) -> tuple[list[Contrast], dict[str, list[str]]]:
    """Every (stream, method) with a paired cell in both trees, judged; and why the others could not be (only in
    A, only in B, no cell in both, another scenario in each tree) → their ``stream/method`` names."""
    judging = judging or Judging()
    first, second = _aa(a), _aa(b)
    keys = sorted(set(first) | set(second), key=lambda k: (k[0], label_key(k[1])))
    keys = [k for k in keys if (methods is None or k[1] in methods) and (streams is None or k[0] in streams)]
    notes: dict[str, list[str]] = {}
    rows = []
    for stream, method in keys:
        x, y = first.get((stream, method), {}), second.get((stream, method), {})
        shared = sorted(set(x) & set(y))
        if not shared:
            why = "only in B" if not x else "only in A" if not y else "no cell in both"
            notes.setdefault(why, []).append(f"{stream}/{method}")
            continue
        scenarios = {x[c][1] for c in shared} | {y[c][1] for c in shared}
        if len(scenarios) > 1:
            notes.setdefault("another scenario in each tree", []).append(f"{stream}/{method}")
            continue
        rows.append((stream, scenarios.pop(), method, [x[c][0] for c in shared], [y[c][0] for c in shared]))
    rules = [judging.rule(stream, scenario) for stream, scenario, *_ in rows]
    diffs = [[q - p for p, q in zip(xs, ys, strict=True)] for *_, xs, ys in rows]
    verdicts = V.paired_verdicts(diffs, rules)
    out = [
        Contrast(
            stream,
            scenario,
            method,
            len(d),
            statistics.fmean(xs),
            statistics.fmean(ys),
            statistics.fmean(d),
            V.t_interval(d, rule.equivalence_level),
            verdict,
            p,
            rule.margin,
        )
        for (stream, scenario, method, xs, ys), d, rule, (verdict, p) in zip(rows, diffs, rules, verdicts, strict=True)
    ]
    return out, notes


def markdown(rows: Sequence[Contrast], names: tuple[str, str]) -> str:
    """The comparison as a markdown table with a caption that states the rule and its floor."""
    a, b = names
    table = [
        [
            f"{r.stream} ({r.scenario})" if r.scenario else r.stream,
            r.method,
            str(r.cells),
            f"{r.a:.2f}",
            f"{r.b:.2f}",
            f"{r.diff:+.2f}" + ("" if r.interval is None else f" ({r.interval[0]:+.2f} to {r.interval[1]:+.2f})"),
            f"{r.margin:g}",
            f"{r.verdict} ({V.fmt_p(r.p)})",
        ]
        for r in rows
    ]
    head = ["stream", "method", "paired cells", f"{a}: AA", f"{b}: AA", f"{b} − {a} (90 % CI)", "Δ", f"{b} vs {a}"]
    cells = max((r.cells for r in rows), default=0)
    floor = V.claims_floor(len(rows), cells) if rows else 1.0
    caption = (
        f"{b} against {a}, paired by stream, method, order and seed; AA in percent. Verdicts by the one rule "
        f"(docs/verdicts.md) with {a} as the declared reference: {V.CLAIMS_RULE} ({len(rows)} rows); "
        f"`above`/`below`: {b} leads/trails by more than Δ; `ahead`/`behind`: a lead shown, one beyond Δ not; "
        "`equivalent`: the paired 90 % t-interval within ±Δ; else `not separated`. "
        f"With {cells} paired cells no Holm-adjusted p is below {floor:.2g}"
        + (": nothing here can be separated." if floor >= 0.05 else ".")
    )
    return caption + "\n\n" + tabulate(table, headers=head, tablefmt="github", disable_numparse=True) + "\n"
