"""Paper parity: a profile's published numbers (its targets, :attr:`clbench.specs.ProfileSpec.targets`) beside what
clbench measured with the paper's settings, each row judged by one rule (:data:`RULE`).

A target file is JSON: ``{"paper": ..., "table": ..., "metric": "AA", "rows": [{"stream", "method", "mean", "sd",
"source", "confirmed"}, ...], "not_implemented": [{"stream", "method", "mean"}, ...]}`` — ``sd`` null where the paper
gives none that could be read, ``confirmed`` what was checked against a copy of the paper or its code's own record.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clbench.cell import CellResult
from clbench.verdicts import t_interval

LEVEL = 0.95
FLOOR = 2.0  # pp

RULE = (
    "A row **reproduces** the paper when the 95 % t-interval of clbench's mean minus the paper's mean (over clbench's "
    "cells, the paper's mean held fixed) lies within ±τ, τ = max(2 pp, 2·sd), sd the paper's standard deviation "
    "over its runs where it gives one, else clbench's own over its cells (an estimate of the same run-to-run "
    "spread); **above** or **below** when the interval lies wholly beyond +τ or −τ; **not resolved** otherwise "
    "(too few cells, or a difference near τ). Why τ: two correct implementations differ by their runs' spread "
    "(data order, initialisation) — two sd covers the difference of two means of a few runs each — and by float "
    "and library details the spread does not show, which 2 pp bounds on MNIST-scale tables; a gap beyond it is a "
    "difference of protocol or code, and every such row below names its cause."
)


@dataclass(frozen=True)
class Target:
    stream: str
    method: str
    mean: float
    sd: float | None
    source: str
    confirmed: str


@dataclass(frozen=True)
class ParityRow:
    target: Target
    values: tuple[float, ...]  # clbench's AA per complete cell
    interval: tuple[float, float] | None  # of clbench's mean minus the paper's
    tau: float | None
    verdict: str

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def difference(self) -> float | None:
        return None if self.mean is None else self.mean - self.target.mean


def targets(spec: Mapping[str, Any]) -> list[Target]:
    """The rows of a profile's target file, in its order."""
    return [
        Target(
            r["stream"],
            r["method"],
            float(r["mean"]),
            None if r.get("sd") is None else float(r["sd"]),
            str(r.get("source", "")),
            str(r.get("confirmed", "")),
        )
        for r in spec.get("rows", ())
    ]


def verdict(interval: tuple[float, float] | None, tau: float | None) -> str:
    """:data:`RULE` for one row."""
    if interval is None or tau is None:
        return "not resolved"
    lo, hi = interval
    if -tau <= lo and hi <= tau:
        return "reproduces"
    if lo > tau:
        return "above"
    if hi < -tau:
        return "below"
    return "not resolved"


def judge(target: Target, values: Sequence[float]) -> ParityRow:
    interval = t_interval([v - target.mean for v in values], LEVEL)
    sd = target.sd if target.sd is not None else (statistics.stdev(values) if len(values) > 1 else None)
    tau = None if sd is None else max(FLOOR, 2 * sd)
    return ParityRow(target, tuple(values), interval, tau, verdict(interval, tau))


def parity(results: Iterable[CellResult], spec: Mapping[str, Any], metric: str = "AA") -> list[ParityRow]:
    """Every target of ``spec`` judged against the complete cells of ``results`` of its stream and method."""
    by_row: dict[tuple[str, str], list[float]] = {}
    for r in results:
        value = r.metrics.get(metric)
        if r.status == "complete" and isinstance(value, (int, float)):
            by_row.setdefault((r.stream, r.method), []).append(float(value))
    return [judge(t, by_row.get((t.stream, t.method), [])) for t in targets(spec)]


def _num(x: float | None, digits: int = 2, sign: bool = False) -> str:
    return "—" if x is None else (f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}")


def table(rows: Sequence[ParityRow], causes: Mapping[tuple[str, str], str] | None = None) -> str:
    """A markdown table: per row the paper's number, clbench's (mean, 95 % interval of the mean, n), the difference,
    τ, the verdict and (``causes``) why a row is not reproduced."""
    head = "| stream | method | paper | clbench (95 % CI) | n | difference | τ | verdict |"
    lines = [head + (" cause |" if causes is not None else ""), "|---" * (8 + (causes is not None)) + "|"]
    for row in rows:
        t = row.target
        paper = f"{t.mean:.2f}" + (f" ± {t.sd:.2f}" if t.sd is not None else "")
        if row.mean is None:
            ours = "not run"
        else:
            ci = t_interval(list(row.values), LEVEL)
            ours = f"{row.mean:.2f}" + (f" ({ci[0]:.2f}, {ci[1]:.2f})" if ci else "")
        cells = [
            t.stream,
            t.method,
            paper,
            ours,
            str(len(row.values)),
            _num(row.difference, sign=True),
            _num(row.tau, 1),
            row.verdict,
        ]
        if causes is not None:
            cells.append(causes.get((t.stream, t.method), "") if row.verdict != "reproduces" else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def counts(rows: Sequence[ParityRow]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rows:
        out[row.verdict] = out.get(row.verdict, 0) + 1
    return out


def section(results: Sequence[CellResult], spec: Mapping[str, Any]) -> str:
    """The leaderboard's parity section for a profile with targets."""
    rows = [r for r in parity(results, spec) if r.values]
    if not rows:
        return ""
    absent = ", ".join(sorted({f"{n['method']} ({n['stream']})" for n in spec.get("not_implemented", ())}))
    return (
        f"## Paper parity: {spec.get('paper', '')}, {spec.get('table', '')}\n\n"
        f"The paper's mean AA beside clbench's under the paper's settings (docs/parity.md: each convention, source "
        f"and cause). {RULE}\n\n{table(rows)}\n"
        + (f"Rows of the paper clbench does not implement: {absent}.\n" if absent else "")
    )
