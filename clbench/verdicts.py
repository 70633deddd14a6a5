"""The one verdict rule: how every table clbench prints says that one method is better than another.

The unit is a cell (order, seed). The cells of one table are paired across its rows: the same seed, data order,
initialisation and test set. Per table:

- **Reference**: the row with the best mean among the rows that are not oracles (joint training, one model per
  task, ...). Oracles are judged against nothing and are never the reference.
- **Test**: for each other row, the paired differences d over the cells both rows have (reference − row for a
  metric where higher is better); a two-sided sign-flip permutation test of mean d = 0
  (:func:`scipy.stats.permutation_test`, exact up to 2¹³ sign patterns); Holm–Bonferroni over the table's rows.
- **Margin** Δ: the smallest difference that matters (at least 1 pp for a score in percent, and at least the
  stream's cross-machine move of a row mean, see README "Reproducibility").
- **Verdicts**: ``below`` when Holm's p < α and mean d ≥ Δ; ``equivalent`` when the 90 % interval of d lies
  inside (−Δ, Δ); ``not separated`` otherwise. With n cells no two-sided p is below 2/2ⁿ: three seeds can never
  separate two rows (p ≥ 0.25), which a table with three seeds says rather than inventing separation.
- **Intervals**: each row's mean with a 95 % two-level bootstrap interval — cells resampled, then the test
  examples of every task (Poisson weights, the same draw for every row and cell: they share the test set) from
  the per-example scores a result stores — and each row's rank interval from the same replicates. A cell without
  per-example scores is resampled at the cell level only, and the table says so. The 90 % interval of d for
  ``equivalent`` is the wider of the bootstrap's and the paired t-interval's, so that few cells never make an
  equivalence claim easier.

Claims tables (one method against another, with the paper's direction) use :func:`claim`: ``holds`` and
``reversed`` take the place of ``below``, with the same test, margin and equivalence. docs/verdicts.md explains
the rule for readers; tests/test_verdicts.py checks it against direct computations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy import stats

Direction = Literal["up", "down"]

BELOW, EQUIVALENT, NOT_SEPARATED, REFERENCE, ORACLE = "below", "equivalent", "not separated", "reference", "—"
HOLDS, REVERSED = "holds", "reversed"
EXACT_UP_TO = 13  # sign patterns 2^n enumerated exactly up to n = 13 (8,192 ≤ permutation_test's resamples)


@dataclass(frozen=True)
class Rule:
    """The rule's settings. ``margin`` is Δ in the metric's unit; 0 (a metric with no practical margin) never
    gives ``equivalent``."""

    alpha: float = 0.05
    margin: float = 1.0
    level: float = 0.95  # row intervals
    equivalence_level: float = 0.90  # the interval of d that must lie within ±Δ (two one-sided tests at 5 %)
    resamples: int = 2000  # bootstrap replicates
    seed: int = 0  # the bootstrap's and the permutation test's generator: a table is the same on every run

    def describe(self, unit: str = "pp") -> str:
        return (
            f"paired sign-flip permutation test over the cells, Holm across rows, α = {self.alpha:g}; "
            f"Δ = {self.margin:g} {unit}; {_pct(self.level)} two-level bootstrap intervals"
        )


@dataclass(frozen=True)
class Row:
    """One row of a table: its value in each cell (``"order/seed"`` → value), whether it is an oracle, and per cell
    the per-example scores in [0, 1] of its final evaluation by task (task → scores), where the result stored
    them and the value is their mean over tasks × 100 (AA)."""

    name: str
    values: Mapping[str, float]
    oracle: bool = False
    examples: Mapping[str, Mapping[str, np.ndarray]] = field(default_factory=dict)


@dataclass(frozen=True)
class Judged:
    """A row's numbers and verdict. ``diff`` is the mean paired difference to the reference, signed so that
    positive means worse than the reference; ``pairs`` the cells it was computed over."""

    name: str
    oracle: bool
    cells: int
    mean: float
    interval: tuple[float, float] | None
    rank: tuple[int, int] | None
    verdict: str
    diff: float | None = None
    diff_interval: tuple[float, float] | None = None
    p: float | None = None
    p_holm: float | None = None
    pairs: int = 0
    test_level: bool = False  # its interval resampled test examples in every cell

    @property
    def rank_text(self) -> str:
        if self.rank is None:
            return "—"
        lo, hi = self.rank
        return str(lo) if lo == hi else f"{lo}–{hi}"


@dataclass(frozen=True)
class Table:
    """A judged table: its rows (ranked first, best mean first; then the oracles), the reference and the rule."""

    rows: list[Judged]
    reference: str | None
    rule: Rule
    min_p: float | None  # the smallest two-sided p the table's pairs can reach (2 / 2ⁿ at most n pairs)

    def caption(self, unit: str = "pp") -> str:
        n = max((r.pairs for r in self.rows), default=0)
        text = (
            f"Verdicts against the reference (best non-oracle mean): {self.rule.describe(unit)}. "
            f"`below`: Holm p < {self.rule.alpha:g} and mean difference ≥ Δ; `equivalent`: the "
            f"{_pct(self.rule.equivalence_level)} interval of the paired difference within ±Δ; else `not separated`."
        )
        if self.min_p is not None and self.min_p >= self.rule.alpha:
            text += (
                f" With {n} paired cell{'s' if n != 1 else ''} no p can be below {self.min_p:.3g}: nothing here "
                "can be separated; this table is a smoke test, not evidence of a ranking."
            )
        missing = [r.name for r in self.rows if not r.test_level]
        if missing and len(missing) < len(self.rows):
            text += f" Intervals over cells only (no per-example scores stored): {', '.join(missing)}."
        elif missing:
            text += " Intervals over cells only: these results store no per-example scores."
        return text


def _pct(level: float) -> str:
    return f"{100 * level:g} %"


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the order given. Written here: scipy.stats offers false-discovery
    control (``false_discovery_control``), not Holm's family-wise step-down."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def sign_flip_p(diffs: Sequence[float], seed: int = 0) -> float:
    """Two-sided p of mean(diffs) = 0 by flipping the signs of the paired differences (exact for ≤ 13 pairs)."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2 or not np.any(d):  # one pair: its two sign patterns are equally extreme, p = 1
        return 1.0
    res = stats.permutation_test(
        (d,),
        np.mean,
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=9999,
        vectorized=True,
        axis=-1,
        rng=np.random.default_rng(seed),
    )
    return float(min(1.0, res.pvalue))


def t_interval(diffs: Sequence[float], level: float) -> tuple[float, float] | None:
    """The paired t-interval of mean(diffs); None for fewer than two pairs, a point when they are all equal."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return None
    if np.ptp(d) == 0:
        return float(d[0]), float(d[0])
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(level)
    return float(ci.low), float(ci.high)


def _cells(rows: Sequence[Row]) -> list[str]:
    return sorted({c for r in rows for c in r.values})


def _test_sets(rows: Sequence[Row]) -> dict[str, int]:
    """Every task with per-example scores in the table, and its number of test examples (the same in every row
    and cell of a table; a mismatch means the rows were not scored on one test set)."""
    sizes: dict[str, int] = {}
    for r in rows:
        for per_task in r.examples.values():
            for task, scores in per_task.items():
                if sizes.setdefault(task, len(scores)) != len(scores):
                    raise ValueError(
                        f"task {task!r} has {sizes[task]} test examples in one cell and {len(scores)} in "
                        f"another ({r.name}): the rows were not scored on one test set"
                    )
    return sizes


def replicates(rows: Sequence[Row], rule: Rule) -> np.ndarray:
    """Bootstrap replicates of every row's mean, shape (rule.resamples, len(rows)) (NaN where a replicate drew
    none of a row's cells). Each replicate draws the cells with replacement (the same draw for every row: they
    are paired), then Poisson(1) weights for the test examples of every task (the same for every row and cell:
    one test set); a cell with per-example scores takes its value from them, one without keeps its value."""
    rng = np.random.default_rng(rule.seed)
    cells = _cells(rows)
    B = rule.resamples
    counts = rng.multinomial(len(cells), [1 / len(cells)] * len(cells), size=B).astype(float)  # B × cells
    sizes = _test_sets(rows)
    # per (row, cell) its value under each replicate's test weights: B values, or its fixed value
    task_means: dict[str, np.ndarray] = {}  # task -> B × (rows·cells) of weighted mean scores, filled lazily
    column = {(ri, c): k for k, (ri, c) in enumerate((ri, c) for ri in range(len(rows)) for c in cells)}
    for task, n in sizes.items():
        weights = rng.poisson(1.0, size=(B, n)).astype(np.float32)
        scores = np.zeros((n, len(column)), dtype=np.float32)
        for (ri, c), k in column.items():
            per_task = rows[ri].examples.get(c)
            if per_task is not None and task in per_task:
                scores[:, k] = per_task[task]
        total = np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
        task_means[task] = (weights @ scores) / total  # B × (rows·cells)
    out = np.full((B, len(rows)), np.nan)
    for ri, row in enumerate(rows):
        values = np.full((B, len(cells)), np.nan)
        for ci, c in enumerate(cells):
            if c not in row.values:
                continue
            per_task = row.examples.get(c)
            if per_task:
                k = column[(ri, c)]
                values[:, ci] = 100.0 * np.mean([task_means[t][:, k] for t in per_task], axis=0)
            else:
                values[:, ci] = row.values[c]
        present = ~np.isnan(values)
        w = counts * present
        total = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, ri] = np.where(total > 0, np.nansum(np.where(present, values, 0.0) * w, axis=1) / total, np.nan)
    return out


def _interval(samples: np.ndarray, level: float) -> tuple[float, float] | None:
    s = samples[~np.isnan(samples)]
    if len(s) == 0:
        return None
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(s, [tail, 100 - tail])
    return float(lo), float(hi)


def _ranks(reps: np.ndarray, ranked: Sequence[int], direction: Direction, level: float) -> dict[int, tuple[int, int]]:
    """Each ranked row's rank interval: the central ``level`` of its rank (1 = best) over the replicates."""
    sub = reps[:, ranked]
    key = -sub if direction == "up" else sub
    key = np.where(np.isnan(key), np.inf, key)
    ranks = key.argsort(axis=1, kind="stable").argsort(axis=1) + 1
    tail = 100 * (1 - level) / 2
    out = {}
    for k, ri in enumerate(ranked):
        lo, hi = np.percentile(ranks[:, k], [tail, 100 - tail], method="nearest")
        out[ri] = (int(lo), int(hi))
    return out


def judge(rows: Sequence[Row], direction: Direction = "up", rule: Rule | None = None) -> Table:
    """Judge a table's rows against its reference (see the module's docstring). Rows with no value are dropped;
    the result lists the ranked rows best mean first, then the oracles best mean first."""
    rule = rule or Rule()
    rows = [r for r in rows if r.values]
    if not rows:
        return Table([], None, rule, None)
    sign = 1.0 if direction == "up" else -1.0
    means = [float(np.mean(list(r.values.values()))) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: (-sign * means[i], rows[i].name))
    ranked = [i for i in order if not rows[i].oracle]
    oracles = [i for i in order if rows[i].oracle]
    reps = replicates(rows, rule)
    rank = _ranks(reps, ranked, direction, rule.level) if ranked else {}
    ref = ranked[0] if ranked else None
    tests: dict[int, tuple[list[float], float]] = {}
    if ref is not None:
        for i in ranked[1:]:
            shared = sorted(set(rows[i].values) & set(rows[ref].values))
            d = [sign * (rows[ref].values[c] - rows[i].values[c]) for c in shared]
            tests[i] = (d, sign_flip_p(d, rule.seed))
    adjusted = dict(zip(tests, holm([p for _, p in tests.values()]), strict=True))
    judged = []
    for i in ranked + oracles:
        row = rows[i]
        test_level = bool(row.values) and all(c in row.examples for c in row.values)
        common = Judged(
            name=row.name,
            oracle=row.oracle,
            cells=len(row.values),
            mean=means[i],
            interval=_interval(reps[:, i], rule.level),
            rank=rank.get(i),
            verdict=ORACLE,
            test_level=test_level,
        )
        if i == ref:
            judged.append(replace(common, verdict=REFERENCE))
        elif i in tests:
            assert ref is not None  # tests holds rows only when there is a reference
            d, p = tests[i]
            diff = float(np.mean(d)) if d else None
            interval = _difference_interval(reps, ref, i, d, sign, rule)
            verdict = _verdict(diff, interval, adjusted[i], rule, (BELOW, None))
            judged.append(
                replace(
                    common, verdict=verdict, diff=diff, diff_interval=interval, p=p, p_holm=adjusted[i], pairs=len(d)
                )
            )
        else:
            judged.append(common)
    pairs = max((len(d) for d, _ in tests.values()), default=0)
    return Table(judged, rows[ref].name if ref is not None else None, rule, 2.0 / 2**pairs if pairs else None)


def _difference_interval(
    reps: np.ndarray, ref: int, i: int, d: Sequence[float], sign: float, rule: Rule
) -> tuple[float, float] | None:
    """The wider of the bootstrap's and the paired t-interval's ``equivalence_level`` interval of d."""
    boot = _interval(sign * (reps[:, ref] - reps[:, i]), rule.equivalence_level)
    t = t_interval(d, rule.equivalence_level)
    if boot is None or t is None:
        return boot or t
    return min(boot[0], t[0]), max(boot[1], t[1])


def _verdict(
    diff: float | None, interval: tuple[float, float] | None, p_holm: float, rule: Rule, words: tuple[str, str | None]
) -> str:
    """``words[0]`` when d ≥ Δ is significant, ``words[1]`` when −d ≥ Δ is (None: never), ``equivalent`` when the
    interval lies within ±Δ, else ``not separated``."""
    if diff is None:
        return NOT_SEPARATED
    if p_holm < rule.alpha and diff >= rule.margin:
        return words[0]
    if words[1] is not None and p_holm < rule.alpha and -diff >= rule.margin:
        return words[1]
    if interval is not None and rule.margin > 0 and -rule.margin < interval[0] and interval[1] < rule.margin:
        return EQUIVALENT
    return NOT_SEPARATED


@dataclass(frozen=True)
class Claim:
    """One claim's test: ``ours`` against ``theirs`` over their paired cells, in the direction the claim states."""

    diff: float | None  # mean of (theirs − ours) for a lower-is-claimed metric, (ours − theirs) otherwise
    interval: tuple[float, float] | None
    p: float
    pairs: int


def claim(ours: Mapping[str, float], theirs: Mapping[str, float], lower: bool, rule: Rule) -> Claim:
    """The paired test of a claim that ``ours`` is lower (``lower``) or higher than ``theirs``; a positive
    ``diff`` is in the claimed direction. Turn claims into verdicts with :func:`claim_verdicts` (Holm across the
    table's claims). The interval for ``equivalent`` is the paired t-interval: claims compare recorded numbers
    (footprint metrics too), not per-example scores."""
    shared = sorted(set(ours) & set(theirs))
    d = [(theirs[c] - ours[c]) if lower else (ours[c] - theirs[c]) for c in shared]
    t = t_interval(d, rule.equivalence_level)
    return Claim(float(np.mean(d)) if d else None, t, sign_flip_p(d, rule.seed), len(d))


def claim_verdicts(claims: Sequence[Claim], rules: Sequence[Rule]) -> list[tuple[str, float]]:
    """Per claim of one table: ``holds``, ``reversed``, ``equivalent``, ``not separated`` (``n/a`` without a pair),
    and its Holm-adjusted p across the table's claims (each judged with its own rule: its metric's margin)."""
    adjusted = holm([c.p for c in claims])
    return [
        (_verdict(c.diff, c.interval, p, rule, (HOLDS, REVERSED)) if c.pairs else "n/a", p)
        for c, p, rule in zip(claims, adjusted, rules, strict=True)
    ]


def smallest_p(pairs: int) -> float:
    """The smallest two-sided p a sign-flip test over ``pairs`` paired cells can give."""
    return 1.0 if pairs == 0 else min(1.0, 2.0 / 2**pairs)


def fmt_p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "—"
    return f"{p:.2g}" if p >= 0.001 else "<0.001"
