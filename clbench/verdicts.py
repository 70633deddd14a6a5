"""The one verdict rule: how every table clbench prints says that one method is better than another.

The unit is a cell (order, seed). The cells of one table are paired across its rows: the same seed, data order,
initialisation and test set. Per table:

- **Margin** Δ: the smallest difference that matters, fixed before any result: :data:`MARGINS` per scenario (AA in
  percentage points), or what the user gives (``clbench leaderboard --margin``). Never derived from results.
- **Reference**: a method the user declares (``--reference``, e.g. their own). Without one, every row is compared
  with every other, so that picking the best row from the data cannot inflate the error rate (a best-observed
  reference tested against the others rejects far more often than α when the rows are equal).
- **Tests**: one-sided paired sign-flip permutation tests over the cells (exact up to 26 cells) of
  "ahead by more than Δ" (a minimum-effect test: the mean difference minus Δ) and of "ahead" (Δ = 0), each family
  Holm–Bonferroni-adjusted over the table's comparisons: with a declared reference, each row against it in both
  directions; without, every ordered pair of rows.
- **Verdicts** of a row: ``below`` (behind by more than Δ: the reference, or some row — then the best — leads it by
  more than Δ), ``behind`` (a lead over it is shown, one of more than Δ is not), ``equivalent`` (the 90 % interval
  of the difference to the reference — without one, of every other row's lead — lies under Δ), ``not separated``
  otherwise; against a declared reference also ``above`` and ``ahead``, the same the other way. With n cells no
  one-sided p is below 1/2ⁿ, and Holm multiplies the smallest by the number of comparisons: a table says when
  that floor is above α (nothing in it can be separated).
- **Intervals**: each row's mean with a 95 % two-level bootstrap interval — cells resampled, then the test
  examples of every task (Poisson weights, the same draw for every row and cell: they share the test set) from
  the per-example scores a result stores — and each row's rank interval from the same replicates. A cell without
  per-example scores is resampled at the cell level only, and the table says so. The 90 % interval of a
  difference is the wider of the bootstrap's and the paired t-interval's, so that few cells never make an
  equivalence claim easier.

Claims tables (one method against another, with the paper's direction) use :func:`claim`: ``holds`` and
``reversed`` are the minimum-effect tests in the claimed and the opposite direction, Holm over both for every
claim of a table; ``equivalent`` as above. docs/verdicts.md explains the rule for readers; tests/test_verdicts.py
checks it against direct computations.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from scipy import special, stats

Direction = Literal["up", "down"]

BELOW, BEHIND, EQUIVALENT, NOT_SEPARATED = "below", "behind", "equivalent", "not separated"
ABOVE, AHEAD = "above", "ahead"  # against a declared reference only
REFERENCE, BEST, ORACLE = "reference", "best", "—"
HOLDS, REVERSED = "holds", "reversed"
EXACT_UP_TO = 26  # every one of the 2^n sign patterns counted exactly up to n = 26 cells; beyond, random ones
RANDOM_PATTERNS = 99_999

# Δ per scenario for AA in pp, fixed before any result (docs/verdicts.md, "The margin", gives the reasons).
MARGINS: dict[str, float] = {"class-incremental": 2.0, "task-incremental": 1.0, "domain-incremental": 1.0}
DEFAULT_MARGIN = 1.0  # a scenario MARGINS does not name


def margin_for(scenario: str | None) -> float:
    """The default Δ (pp of AA) of a scenario."""
    return MARGINS.get(scenario or "", DEFAULT_MARGIN)


@dataclass(frozen=True)
class Rule:
    """The rule's settings. ``margin`` is Δ in the metric's unit; 0 (a metric with no practical margin) never
    gives ``equivalent``, and its minimum-effect test is the plain one-sided test. ``reference``: the declared
    reference (a row's name); None compares every row with every other. ``margin_from`` says where Δ came from."""

    alpha: float = 0.05
    margin: float = DEFAULT_MARGIN
    level: float = 0.95  # row intervals
    equivalence_level: float = 0.90  # the interval of d that must lie within ±Δ (two one-sided tests at 5 %)
    resamples: int = 2000  # bootstrap replicates
    seed: int = 0  # the bootstrap's and the permutation test's generator: a table is the same on every run
    reference: str | None = None
    margin_from: str = "fixed in advance"
    # every task scored on the same test examples (StreamSpec.shared_test_set): one draw of their weights for all
    shared_test_set: bool = False

    def describe(self, unit: str = "pp") -> str:
        joint = " (the tasks' shared test examples resampled once for all tasks)" if self.shared_test_set else ""
        return (
            f"one-sided paired sign-flip tests over the cells, Holm across the comparisons, α = {self.alpha:g}; "
            f"Δ = {self.margin:g} {unit} ({self.margin_from}); {_pct(self.level)} two-level bootstrap intervals{joint}"
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
    """A row's numbers and verdict. ``diff`` is the mean paired difference to the reference (declared, else the
    best row), signed so that positive means worse than it; ``pairs`` the cells it was computed over. ``p`` and
    ``p_holm`` are the raw and Holm-adjusted one-sided p of the test that decides the verdict: of a lead at all for
    ``behind``/``ahead``, the minimum-effect test otherwise; against the reference in the direction of ``diff``
    or, without a declared reference, of the row whose lead over this one has the smallest adjusted p."""

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
    """A judged table: its rows (ranked first, best mean first; then the oracles), the reference (declared, else
    the best row), the rule, whether the reference was declared, and ``min_p``: the smallest Holm-adjusted p its
    comparisons can reach (the number of comparisons × 1/2ⁿ at n paired cells)."""

    rows: list[Judged]
    reference: str | None
    rule: Rule
    min_p: float | None
    declared: bool = False
    comparisons: int = 0

    def caption(self, unit: str = "pp") -> str:
        n = max((r.pairs for r in self.rows), default=0)
        if self.declared:
            text = (
                f"Verdicts against the declared reference {self.reference}: {self.rule.describe(unit)}. "
                f"`below`/`above`: behind/ahead of it by more than Δ (a minimum-effect test); `behind`/`ahead`: "
                f"behind/ahead, by more than Δ not shown; `equivalent`: the "
                f"{_pct(self.rule.equivalence_level)} interval of the paired difference within ±Δ; else "
                "`not separated`."
            )
        else:
            text = (
                f"No reference declared: every row against every other ({self.comparisons} ordered pairs), so "
                f"that the best row being chosen from the data cannot inflate the error rate; "
                f"{self.rule.describe(unit)}. `below`: some row leads it by more than Δ (it is behind the best by "
                "more than Δ); `behind`: a lead over it is shown, one of more than Δ is not; `equivalent`: every "
                f"other row's lead over it has its {_pct(self.rule.equivalence_level)} interval under Δ; else "
                "`not separated`."
            )
        if self.min_p is not None and self.min_p >= self.rule.alpha:
            text += (
                f" With {n} paired cell{'s' if n != 1 else ''} and {self.comparisons} comparisons no Holm-adjusted "
                f"p can be below {self.min_p:.3g}: nothing here can be below, behind, ahead or above"
                + ("" if self.declared else " (declaring a reference needs fewer comparisons)")
                + "; more cells are needed for a ranking."
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


def _half_sums(x: np.ndarray) -> np.ndarray:
    """Every signed sum ±x₁ ± … ± x_k (2ᵏ of them), sorted."""
    sums = np.zeros(1)
    for v in x:
        sums = np.concatenate([sums + v, sums - v])
    return np.sort(sums)


def sign_flip_p(
    diffs: Sequence[float], seed: int = 0, alternative: Literal["two-sided", "greater"] = "two-sided", shift: float = 0
) -> float:
    """The p of mean(diffs) = ``shift`` by flipping the signs of diffs − shift: two-sided, or ``greater`` (the
    alternative mean(diffs) > shift; with shift = Δ > 0, a minimum-effect test). Exact, every one of the 2ⁿ sign
    patterns, up to :data:`EXACT_UP_TO` pairs; beyond, the identity and :data:`RANDOM_PATTERNS` random patterns.

    Written here, not through ``scipy.stats.permutation_test``: that enumerates 2ⁿ patterns exactly only up to its
    resampling budget (n ≈ 13), and a table without a declared reference runs two tests for each of hundreds of
    ordered pairs. Meeting in the middle (the 2^(n/2) sums of each half, one sorted) counts the 2ⁿ patterns exactly
    in O(2^(n/2) log 2^(n/2)), so 20 cells give their exact floor of 1/2²⁰ rather than a sampling floor."""
    x = np.asarray(diffs, dtype=float) - shift
    n = len(x)
    if n == 0 or not np.any(x):
        return 1.0
    observed = float(x.sum())
    tol = 1e-12 * float(np.abs(x).sum())  # equal sums in another order are as extreme
    if n > EXACT_UP_TO:
        rng = np.random.default_rng(seed)
        flipped = np.vstack([np.ones((1, n)), rng.choice([-1.0, 1.0], size=(RANDOM_PATTERNS, n))]) @ x
        hits = np.abs(flipped) >= abs(observed) - tol if alternative == "two-sided" else flipped >= observed - tol
        return float(hits.mean())
    left, right = _half_sums(x[: n // 2]), _half_sums(x[n // 2 :])
    if alternative == "two-sided":
        a = abs(observed) - tol
        if a <= 0:
            return 1.0
        count = (len(right) - np.searchsorted(right, a - left, "left")) + np.searchsorted(right, -a - left, "right")
    else:
        count = len(right) - np.searchsorted(right, observed - tol - left, "left")
    return float(count.sum() / 2**n)


def smallest_p(pairs: int, alternative: Literal["two-sided", "greater"] = "two-sided") -> float:
    """The smallest p a sign-flip test over ``pairs`` paired cells can give (beyond :data:`EXACT_UP_TO` pairs, the
    random patterns' floor)."""
    if pairs < 2:
        return 1.0 if pairs == 0 or alternative == "two-sided" else 0.5
    floor = 1 / 2**pairs if pairs <= EXACT_UP_TO else 1 / (RANDOM_PATTERNS + 1)
    return min(1.0, floor * (2 if alternative == "two-sided" else 1))


def t_interval(diffs: Sequence[float], level: float) -> tuple[float, float] | None:
    """The paired t-interval of mean(diffs); None for fewer than two pairs, a point when they are all equal."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return None
    if np.ptp(d) == 0:
        return float(d[0]), float(d[0])
    # scipy.stats.ttest_1samp(d).confidence_interval(level), the same operations in the same order (equal to the
    # last bit): its array-API wrapper costs ~1 ms a call, and a leaderboard asks for thousands of intervals.
    n = len(d)
    mean = np.mean(d)
    se = np.sqrt(np.mean((d - mean) ** 2) * (n / (n - 1)) / n)
    low, high = _t_quantiles(n - 1, level)
    return float(low * se + mean), float(high * se + mean)


@functools.lru_cache(maxsize=256)
def _t_quantiles(df: int, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    return float(special.stdtrit(df, tail)), float(special.stdtrit(df, 1 - tail))


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
    none of a row's cells). Each replicate draws the cells with replacement within each order (the same draw for
    every row: they are paired; the design's seeds × orders: every order keeps its number of cells), then Poisson(1)
    weights for the test examples of every task (the same for every row and cell: one test set; with
    ``rule.shared_test_set`` one draw for every task too, whose examples are the same ones); a cell with per-example
    scores takes its value from them, one without keeps its value."""
    rng = np.random.default_rng(rule.seed)
    cells = _cells(rows)
    B = rule.resamples
    counts = np.zeros((B, len(cells)))  # B × cells: how often each cell is drawn
    strata: dict[str, list[int]] = {}
    for k, c in enumerate(cells):
        strata.setdefault(c.split("/", 1)[0], []).append(k)
    for members in strata.values():
        counts[:, members] = rng.multinomial(len(members), [1 / len(members)] * len(members), size=B)
    sizes = _test_sets(rows)
    # per (row, cell) its value under each replicate's test weights: B values, or its fixed value
    task_means: dict[str, np.ndarray] = {}  # task -> B × (rows·cells) of weighted mean scores, filled lazily
    column = {(ri, c): k for k, (ri, c) in enumerate((ri, c) for ri in range(len(rows)) for c in cells)}
    if rule.shared_test_set and len(set(sizes.values())) > 1:
        raise ValueError(
            f"the tasks are declared to share one test set (shared_test_set) but have {sorted(set(sizes.values()))} "
            "test examples"
        )
    weights: np.ndarray | None = None
    for task, n in sizes.items():
        if weights is None or not rule.shared_test_set:  # a shared test set keeps the first task's draw
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


def expanded_level(level: float, n: int) -> float:
    """The percentile level that makes a bootstrap interval of a mean over n cells as wide as a t-interval would
    be: the expanded percentile interval (Hesterberg 2015), z = √(n/(n−1))·t_{n−1}. The plain percentile interval
    of a mean of few cells is too narrow (about 89 % coverage at a nominal 95 % with 10 cells)."""
    if n < 2:
        return level
    z = math.sqrt(n / (n - 1)) * float(stats.t.ppf(0.5 + level / 2, n - 1))
    return float(2 * stats.norm.cdf(z) - 1)


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
    """Judge a table's rows (see the module's docstring). Rows with no value are dropped; the result lists the
    ranked rows best mean first, then the oracles best mean first. A declared reference (``rule.reference``) that
    is not a ranked row of this table leaves it judged as if none were declared."""
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
    declared = next((i for i in ranked if rows[i].name == rule.reference), None)
    ref = declared if declared is not None else (ranked[0] if ranked else None)
    # ordered pairs (j, i): "j is ahead of i"; against a declared reference both directions of each row
    pairs: list[tuple[int, int]]
    if declared is not None:
        pairs = [p for i in ranked if i != declared for p in ((declared, i), (i, declared))]
    else:
        pairs = [(j, i) for i in ranked for j in ranked if j != i]
    diffs = {(j, i): _paired(rows[j], rows[i], sign) for j, i in pairs}
    raw_effect = {k: sign_flip_p(d, rule.seed, "greater", rule.margin) for k, d in diffs.items()}
    raw_ahead = {k: sign_flip_p(d, rule.seed, "greater") for k, d in diffs.items()}
    effect = dict(zip(pairs, holm([raw_effect[k] for k in pairs]), strict=True))
    ahead = dict(zip(pairs, holm([raw_ahead[k] for k in pairs]), strict=True))
    n_max = max((len(d) for d in diffs.values()), default=0)
    judged = []
    for i in ranked + oracles:
        row = rows[i]
        test_level = bool(row.values) and all(c in row.examples for c in row.values)
        # resampled at the cell level only, the percentile interval of a mean of few cells is too narrow: expanded
        # (resampling a shared test set as well already covers; tests/test_verdicts.py simulates both)
        level = rule.level if test_level else expanded_level(rule.level, len(row.values))
        common = Judged(
            name=row.name,
            oracle=row.oracle,
            cells=len(row.values),
            mean=means[i],
            interval=_interval(reps[:, i], level),
            rank=rank.get(i),
            verdict=ORACLE,
            test_level=test_level,
        )
        if i == ref:
            judged.append(replace(common, verdict=REFERENCE if declared is not None else BEST))
            continue
        if row.oracle or ref is None:
            judged.append(common)
            continue
        d = diffs.get((ref, i)) or _paired(rows[ref], row, sign)
        diff = float(np.mean(d)) if d else None
        leaders = [j for j, k in pairs if k == i]  # the rows tested for a lead over this one
        if declared is not None:
            interval = _difference_interval(reps, ref, i, d, sign, rule)
            verdict = _declared_verdict(i, ref, effect, ahead, interval, rule)
            candidates = [(ref, i) if diff is None or diff >= 0 else (i, ref)]
        else:  # the best row is one of the leaders: its interval is among theirs
            intervals = {j: _difference_interval(reps, j, i, diffs[(j, i)], sign, rule) for j in leaders}
            interval = intervals[ref]
            verdict = _open_verdict(i, leaders, effect, ahead, list(intervals.values()), rule)
            candidates = [(j, i) for j in leaders]
        # the p shown is the decisive test's: "ahead at all" for behind/ahead, the minimum-effect test otherwise
        raw, adjusted = (raw_ahead, ahead) if verdict in (BEHIND, AHEAD) else (raw_effect, effect)
        lead = min(candidates, key=lambda k: (adjusted[k], raw[k]))
        p, p_holm = raw[lead], adjusted[lead]
        judged.append(
            replace(common, verdict=verdict, diff=diff, diff_interval=interval, p=p, p_holm=p_holm, pairs=len(d))
        )
    floor = min(1.0, len(pairs) * smallest_p(n_max, "greater")) if pairs else None
    return Table(
        judged,
        rows[ref].name if ref is not None else None,
        rule,
        floor,
        declared=declared is not None,
        comparisons=len(pairs),
    )


def _paired(ahead: Row, behind: Row, sign: float) -> list[float]:
    """d over the cells both rows have, positive where ``ahead`` is better."""
    shared = sorted(set(ahead.values) & set(behind.values))
    return [sign * (ahead.values[c] - behind.values[c]) for c in shared]


def _declared_verdict(
    i: int,
    ref: int,
    effect: Mapping[tuple[int, int], float],
    ahead: Mapping[tuple[int, int], float],
    interval: tuple[float, float] | None,
    rule: Rule,
) -> str:
    if effect[(ref, i)] < rule.alpha:
        return BELOW
    if effect[(i, ref)] < rule.alpha:
        return ABOVE
    if ahead[(ref, i)] < rule.alpha:
        return BEHIND
    if ahead[(i, ref)] < rule.alpha:
        return AHEAD
    return EQUIVALENT if _within(interval, rule.margin) else NOT_SEPARATED


def _open_verdict(
    i: int,
    leaders: Sequence[int],
    effect: Mapping[tuple[int, int], float],
    ahead: Mapping[tuple[int, int], float],
    intervals: Sequence[tuple[float, float] | None],
    rule: Rule,
) -> str:
    """Without a declared reference: behind the best by more than Δ when any row is; equivalent to the best when
    every row's lead is shown under Δ."""
    if any(effect[(j, i)] < rule.alpha for j in leaders):
        return BELOW
    if any(ahead[(j, i)] < rule.alpha for j in leaders):
        return BEHIND
    if rule.margin > 0 and intervals and all(iv is not None and iv[1] < rule.margin for iv in intervals):
        return EQUIVALENT
    return NOT_SEPARATED


def _within(interval: tuple[float, float] | None, margin: float) -> bool:
    return interval is not None and margin > 0 and -margin < interval[0] and interval[1] < margin


def _difference_interval(
    reps: np.ndarray, ref: int, i: int, d: Sequence[float], sign: float, rule: Rule
) -> tuple[float, float] | None:
    """The wider of the bootstrap's and the paired t-interval's ``equivalence_level`` interval of d."""
    boot = _interval(sign * (reps[:, ref] - reps[:, i]), rule.equivalence_level)
    t = t_interval(d, rule.equivalence_level)
    if boot is None or t is None:
        return boot or t
    return min(boot[0], t[0]), max(boot[1], t[1])


@dataclass(frozen=True)
class Claim:
    """One claim's test: ``ours`` against ``theirs`` over their paired cells, in the direction the claim states."""

    diff: float | None  # mean of (theirs − ours) for a lower-is-claimed metric, (ours − theirs) otherwise
    interval: tuple[float, float] | None
    pairs: int
    d: tuple[float, ...] = ()


def claim(ours: Mapping[str, float], theirs: Mapping[str, float], lower: bool, rule: Rule) -> Claim:
    """The paired differences of a claim that ``ours`` is lower (``lower``) or higher than ``theirs``; a positive
    ``diff`` is in the claimed direction. Turn claims into verdicts with :func:`claim_verdicts`. The interval for
    ``equivalent`` is the paired t-interval: claims compare recorded numbers (footprint metrics too), not
    per-example scores."""
    shared = sorted(set(ours) & set(theirs))
    d = tuple((theirs[c] - ours[c]) if lower else (ours[c] - theirs[c]) for c in shared)
    return Claim(float(np.mean(d)) if d else None, t_interval(d, rule.equivalence_level), len(d), d)


def _both_ways(ds: Sequence[Sequence[float]], rules: Sequence[Rule], shift: bool) -> list[float]:
    """Holm-adjusted one-sided p of every d ahead (the first len(ds)) and behind (the rest), by more than each
    rule's Δ (``shift``) or at all."""
    pairs = list(zip(ds, rules, strict=True))
    raw = [sign_flip_p(d, r.seed, "greater", r.margin if shift else 0.0) for d, r in pairs]
    raw += [sign_flip_p([-x for x in d], r.seed, "greater", r.margin if shift else 0.0) for d, r in pairs]
    return holm(raw)


def paired_verdicts(ds: Sequence[Sequence[float]], rules: Sequence[Rule]) -> list[tuple[str, float]]:
    """Per paired comparison (d: the second minus the first in each cell, positive = the second is better), the
    verdict of the second against the first as against a declared reference — ``above``/``below`` (by more than
    its rule's Δ), ``ahead``/``behind`` (shown, beyond Δ not), ``equivalent`` (its paired t-interval within ±Δ),
    ``not separated`` (``n/a`` without a pair) — Holm across both directions of every comparison, and the
    adjusted p of the decisive test."""
    effect, ahead = _both_ways(ds, rules, True), _both_ways(ds, rules, False)
    k, out = len(ds), []
    for i, (d, rule) in enumerate(zip(ds, rules, strict=True)):
        up = not d or float(np.mean(d)) >= 0
        if not d:
            out.append(("n/a", 1.0))
        elif effect[i] < rule.alpha or effect[k + i] < rule.alpha:
            out.append((ABOVE, effect[i]) if effect[i] < rule.alpha else (BELOW, effect[k + i]))
        elif ahead[i] < rule.alpha or ahead[k + i] < rule.alpha:
            out.append((AHEAD, ahead[i]) if ahead[i] < rule.alpha else (BEHIND, ahead[k + i]))
        else:
            within = _within(t_interval(d, rule.equivalence_level), rule.margin)
            out.append((EQUIVALENT if within else NOT_SEPARATED, effect[i] if up else effect[k + i]))
    return out


def claim_verdicts(claims: Sequence[Claim], rules: Sequence[Rule]) -> list[tuple[str, float]]:
    """Per claim of one table: ``holds`` (the claimed direction by more than Δ, a minimum-effect test),
    ``reversed`` (the other direction by more than Δ), ``equivalent``, ``not separated`` (``n/a`` without a pair),
    and the Holm-adjusted p of its test in the direction of its mean (Holm over both directions of every claim;
    each judged with its own rule: its metric's margin)."""
    adjusted = _both_ways([c.d for c in claims], rules, True)
    out = []
    for k, (c, rule) in enumerate(zip(claims, rules, strict=True)):
        holds, rev = adjusted[k], adjusted[k + len(claims)]
        p = holds if c.diff is None or c.diff >= 0 else rev
        if not c.pairs:
            out.append(("n/a", p))
        elif holds < rule.alpha:
            out.append((HOLDS, p))
        elif rev < rule.alpha:
            out.append((REVERSED, p))
        else:
            out.append((EQUIVALENT if _within(c.interval, rule.margin) else NOT_SEPARATED, p))
    return out


def claims_floor(claims: int, pairs: int) -> float:
    """The smallest Holm-adjusted p :func:`claim_verdicts` can give ``claims`` claims over ``pairs`` pairs each."""
    return min(1.0, 2 * claims * smallest_p(pairs, "greater"))


CLAIMS_RULE = (
    "one-sided paired sign-flip tests of a difference beyond Δ in each direction, Holm across both directions of "
    "every row"
)


def fmt_p(p: float | None) -> str:
    if p is None or math.isnan(p):
        return "—"
    return f"{p:.2g}" if p >= 0.001 else "<0.001"
