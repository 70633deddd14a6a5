"""The verdict rule (clbench.verdicts) against numbers computed another way."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest

from clbench import testing
from clbench import verdicts as v


def _cells(values):
    return {f"1/{s}": float(x) for s, x in enumerate(values)}


def _overlap_tied(a, b):
    """The rule clbench used before: tied when mean ± sample sd intervals overlap."""
    ma, sa, mb, sb = statistics.fmean(a), statistics.stdev(a), statistics.fmean(b), statistics.stdev(b)
    return ma - sa <= mb + sb and mb - sb <= ma + sa


def test_pairing_separates_a_consistent_gap_that_the_overlap_rule_calls_tied():
    rng = np.random.default_rng(1)
    seed_effect = rng.normal(0, 3.0, size=10)  # cells differ a lot; the gap between methods is steady
    ref = 80 + seed_effect
    other = ref - 2.0 + rng.normal(0, 0.3, size=10)
    assert _overlap_tied(list(ref), list(other))
    table = v.judge([v.Row("a", _cells(ref)), v.Row("b", _cells(other))])
    b = table.rows[1]
    assert (table.reference, table.rows[0].verdict, b.name, b.verdict, b.pairs) == ("a", v.BEST, "b", v.BELOW, 10)
    # every difference minus Δ = 1 has one sign: the most extreme of 2^10 patterns; Holm over the two ordered pairs
    assert (b.p, b.p_holm) == (pytest.approx(1 / 2**10), pytest.approx(2 / 2**10))


def test_three_cells_never_separate_even_when_the_overlap_rule_does():
    ref, other = [90.0, 90.2, 90.1], [85.0, 85.1, 84.9]
    assert not _overlap_tied(ref, other)
    table = v.judge([v.Row("a", _cells(ref)), v.Row("b", _cells(other))])
    assert table.rows[1].verdict == v.NOT_SEPARATED
    assert table.rows[1].p == pytest.approx(1 / 8)  # one-sided: the identity is the most extreme of 2^3 patterns
    assert table.min_p == pytest.approx(2 / 8)  # two ordered pairs
    assert "nothing here can be below" in table.caption()


def test_sign_flip_p_is_the_exact_enumeration():
    d = [1.5, -0.5, 2.0, 0.7, 3.1, -0.2]
    observed = abs(np.mean(d))
    flips = [abs(np.mean([s * x for s, x in zip(signs, d, strict=True)]))
             for signs in itertools.product((1, -1), repeat=len(d))]
    expected = sum(f >= observed - 1e-12 for f in flips) / len(flips)
    assert v.sign_flip_p(d) == pytest.approx(expected)
    assert v.sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    # one-sided, shifted by Δ: the minimum-effect test of mean d > 0.5
    x = [e - 0.5 for e in d]
    shifted = [np.mean([s * e for s, e in zip(signs, x, strict=True)]) for signs in itertools.product((1, -1), repeat=6)]
    assert v.sign_flip_p(d, alternative="greater", shift=0.5) == pytest.approx(
        sum(f >= np.mean(x) - 1e-12 for f in shifted) / 64)
    # 16 cells, beyond what scipy enumerates exactly: still every one of the 2^16 patterns (meeting in the middle)
    rng = np.random.default_rng(9)
    d16 = np.round(rng.normal(0.4, 1.0, size=16), 1)  # rounded: ties with the observed sum must count
    patterns = 1 - 2 * ((np.arange(2**16)[:, None] >> np.arange(16)) & 1)
    sums = patterns @ (d16 - 0.2)
    assert v.sign_flip_p(d16, alternative="greater", shift=0.2) == pytest.approx(
        np.mean(sums >= (d16 - 0.2).sum() - 1e-9))
    assert v.sign_flip_p(d16) == pytest.approx(np.mean(np.abs(patterns @ d16) >= abs(d16.sum()) - 1e-9))


def test_holm_matches_its_definition():
    p = [0.01, 0.04, 0.03, 0.2]
    # sorted: 0.01·4 = 0.04; 0.03·3 = 0.09; 0.04·2 = 0.08 → kept monotone at 0.09; 0.2·1 = 0.2
    assert v.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert v.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_equivalent_needs_the_interval_inside_the_margin():
    rng = np.random.default_rng(2)
    ref = 90 + rng.normal(0, 1.0, size=12)
    close = ref - 0.1 + rng.normal(0, 0.05, size=12)
    far = ref - 0.5 + rng.normal(0, 2.0, size=12)
    tied = ref + np.array([0.3, -0.2, 0.1, -0.4, 0.2, -0.1, 0.4, -0.3, 0.0, 0.1, -0.1, 0.0])
    rows = [v.Row("a", _cells(ref)), v.Row("close", _cells(close)), v.Row("far", _cells(far)),
            v.Row("tied", _cells(tied))]
    table = v.judge(rows, rule=v.Rule(reference="a"))
    verdicts = {r.name: r.verdict for r in table.rows}
    assert verdicts["tied"] == v.EQUIVALENT
    assert verdicts["close"] == v.BEHIND  # behind in every cell, and within Δ: behind wins over equivalent
    assert verdicts["far"] == v.NOT_SEPARATED
    lo, hi = next(r.diff_interval for r in table.rows if r.name == "close")
    assert -1 < lo < 0.1 < hi < 1
    # the interval is at least the paired t-interval of the differences
    t = v.t_interval(list(ref - close), 0.90)
    assert lo <= t[0] and hi >= t[1]


def test_an_oracle_is_never_the_reference():
    rows = [v.Row("joint", _cells([99, 99, 99]), oracle=True), v.Row("a", _cells([90, 91, 92])),
            v.Row("b", _cells([80, 81, 82]))]
    table = v.judge(rows)
    assert table.reference == "a"
    assert [(r.name, r.verdict) for r in table.rows] == [("a", v.BEST), ("b", v.NOT_SEPARATED),
                                                         ("joint", v.ORACLE)]
    assert table.rows[2].rank is None


def test_lower_is_better_rows_are_judged_the_other_way():
    rng = np.random.default_rng(3)
    low = 5 + rng.normal(0, 1, size=10)
    high = low + 3 + rng.normal(0, 0.2, size=10)
    table = v.judge([v.Row("high", _cells(high)), v.Row("low", _cells(low))], direction="down")
    assert [(r.name, r.verdict) for r in table.rows] == [("low", v.BEST), ("high", v.BELOW)]
    assert table.rows[1].diff == pytest.approx(float(np.mean(high - low)))


def _synthetic(rng, truth, cells=10, tasks=4, n=150, seed_sd=1.5):
    """A row whose cells score Bernoulli examples around the true accuracy (percent) ``truth``."""
    values, examples = {}, {}
    for c in range(cells):
        shift = rng.normal(0, seed_sd) / 100
        per_task = {f"t{j}": (rng.random(n) < truth / 100 + shift).astype(np.float32) for j in range(tasks)}
        key = f"1/{c}"
        examples[key] = per_task
        values[key] = 100 * float(np.mean([s.mean() for s in per_task.values()]))
    return values, examples


@pytest.mark.slow
def test_two_level_bootstrap_covers_the_true_mean():
    rng = np.random.default_rng(4)
    covered = 0
    for _ in range(200):
        values, examples = _synthetic(rng, 80.0)
        table = v.judge([v.Row("a", values, examples=examples)], rule=v.Rule(resamples=500))
        lo, hi = table.rows[0].interval
        covered += lo <= 80.0 <= hi
    assert covered / 200 >= 0.90


def _shared_test_set(rng, cells=10, tasks=4, n=150, seed_sd=0.04):
    """A row whose cells all score one test set: per example a latent accuracy (Beta(8, 2): 80 % over the
    population of examples), per cell a shift (the seed); the population mean is 80."""
    p = {f"t{j}": rng.beta(8, 2, size=n) for j in range(tasks)}
    values, examples = {}, {}
    for c in range(cells):
        shift = rng.normal(0, seed_sd)
        per_task = {t: (rng.random(n) < np.clip(q + shift, 0, 1)).astype(np.float32) for t, q in p.items()}
        examples[f"1/{c}"] = per_task
        values[f"1/{c}"] = 100 * float(np.mean([s.mean() for s in per_task.values()]))
    return values, examples


@pytest.mark.slow
def test_row_intervals_cover_at_their_level_with_a_shared_test_set_and_with_cells_only():
    """Coverage of the 95 % row interval of the population mean, by simulation: with per-example scores of one
    shared test set (the two-level bootstrap), and cells only (where the plain percentile interval of 10 cells
    covers ~90 %, the expanded one ~94 %)."""
    rng = np.random.default_rng(11)
    covered = 0
    for _ in range(300):
        values, examples = _shared_test_set(rng)
        lo, hi = v.judge([v.Row("a", values, examples=examples)], rule=v.Rule(resamples=500)).rows[0].interval
        covered += lo <= 80.0 <= hi
    assert covered / 300 >= 0.93
    rng = np.random.default_rng(12)
    covered, plain = 0, 0
    for _ in range(1000):
        row = v.Row("a", _cells(80 + rng.normal(0, 2, size=10)))
        lo, hi = v.judge([row], rule=v.Rule(resamples=1000)).rows[0].interval
        covered += lo <= 80.0 <= hi
        lo, hi = v._interval(v.replicates([row], v.Rule(resamples=1000))[:, 0], 0.95)
        plain += lo <= 80.0 <= hi
    assert covered / 1000 >= 0.925 and plain / 1000 < 0.915


def test_tasks_that_share_one_test_set_resample_it_once():
    """Four tasks scored on the same 2,000 examples with identical errors (perfectly correlated, as permuted images
    are in part): one cell's AA then varies over the test set as one task's mean does, sd(s)/√n (the binomial sd
    of a mean of n scores); resampled as four independent test sets it would vary half as much (1/√4). The
    declaration of a shared test set gives the first; the draws of other tables are the ones they always were."""
    rng = np.random.default_rng(3)
    n, tasks = 2000, 4
    scores = (rng.random(n) < 0.8).astype(np.float32)
    examples = {"1/0": {f"t{k}": scores for k in range(tasks)}}
    row = v.Row("a", {"1/0": 100 * float(scores.mean())}, examples=examples)
    expected = 100 * float(scores.std()) / math.sqrt(n)
    joint = v.replicates([row], v.Rule(resamples=4000, shared_test_set=True))[:, 0].std()
    apart = v.replicates([row], v.Rule(resamples=4000))[:, 0].std()
    assert joint == pytest.approx(expected, rel=0.06)
    assert apart == pytest.approx(expected / math.sqrt(tasks), rel=0.06)
    # the first task's draw is the same either way: a table that declares nothing keeps its numbers
    one = {"1/0": {"t0": scores}}
    first = v.Row("a", {"1/0": 100 * float(scores.mean())}, examples=one)
    assert np.array_equal(v.replicates([first], v.Rule(shared_test_set=True)), v.replicates([first], v.Rule()))
    with pytest.raises(ValueError, match="declared to share one test set"):
        uneven = {"1/0": {"t0": scores, "t1": scores[:10]}}
        v.replicates([v.Row("a", {"1/0": 80.0}, examples=uneven)], v.Rule(shared_test_set=True))


def test_the_streams_that_share_one_test_set_are_judged_so():
    from clbench._tools.tables import Judging

    regs = testing.registry()
    judging = Judging.of(regs)
    assert judging.rule("permuted-mnist", "task-incremental").shared_test_set
    assert judging.rule("rot-mnist", "domain-incremental").shared_test_set
    assert not judging.rule("split-mnist", "task-incremental").shared_test_set
    assert "resampled once for all tasks" in judging.rule("perm-mnist", "domain-incremental").describe()


def test_resampling_keeps_each_orders_number_of_cells():
    """Cells are resampled within their order (the design's seeds × orders): a row whose two orders differ by 10
    and whose seeds agree has a point interval, as every replicate draws 3 cells of each order."""
    values = {f"{o}/{s}": (90.0 if o == "1" else 80.0) for o in ("1", "2") for s in range(3)}
    assert v.judge([v.Row("a", values)]).rows[0].interval == (85.0, 85.0)


def test_the_bootstrap_reads_the_stored_examples():
    rng = np.random.default_rng(5)
    values, examples = _synthetic(rng, 70.0, cells=4)
    row = v.judge([v.Row("a", values, examples=examples)]).rows[0]
    assert row.test_level
    assert row.mean == pytest.approx(statistics.fmean(values.values()))
    lo, hi = row.interval
    assert lo < row.mean < hi
    cells_only = v.judge([v.Row("a", values)]).rows[0]
    assert not cells_only.test_level
    # the test-set level adds the examples' sampling error: the interval is wider than the cells' alone
    assert (hi - lo) > (cells_only.interval[1] - cells_only.interval[0])


def test_rank_intervals_of_rows_far_apart_are_points():
    rng = np.random.default_rng(6)
    rows = [v.Row(name, _cells(mu + rng.normal(0, 0.1, size=8))) for name, mu in (("a", 90), ("b", 80), ("c", 70))]
    table = v.judge(rows)
    assert [r.rank_text for r in table.rows] == ["1", "2", "3"]


def test_claims_take_the_papers_direction():
    ours, theirs = _cells(np.arange(12) + 1.0), _cells(np.arange(12) + 5.0)  # ours lower by 4 in every cell
    rule = v.Rule(margin=1.0)
    lower = v.claim(ours, theirs, lower=True, rule=rule)
    higher = v.claim(ours, theirs, lower=False, rule=rule)
    assert (lower.diff, higher.diff, lower.pairs) == (4.0, -4.0, 12)
    assert [w for w, _ in v.claim_verdicts([lower, higher], [rule, rule])] == [v.HOLDS, v.REVERSED]
    three = v.claim(_cells([1, 2, 3]), _cells([5, 6, 7]), lower=True, rule=rule)
    assert v.claim_verdicts([three], [rule]) == [(v.NOT_SEPARATED, 0.25)]


def test_a_test_set_that_differs_between_rows_is_refused():
    a = v.Row("a", {"1/0": 50.0}, examples={"1/0": {"t": np.ones(4)}})
    b = v.Row("b", {"1/0": 50.0}, examples={"1/0": {"t": np.ones(5)}})
    with pytest.raises(ValueError, match="one test set"):
        v.judge([a, b])


def test_below_means_behind_by_more_than_the_margin_not_only_behind():
    """A deficit of mean 1.3 (> Δ) that the cells cannot show to exceed Δ = 1 is `behind`, not `below` (the rule before
    tested d ≠ 0 and compared only the mean with Δ); its p is the exact one-sided p of mean(d) − Δ."""
    ref = np.full(10, 80.0) + np.arange(10)
    d = np.array([0.2, 2.5, 0.9, 1.8, 0.4, 2.2, 1.1, 0.6, 2.0, 1.3])
    table = v.judge([v.Row("a", _cells(ref)), v.Row("b", _cells(ref - d))])
    b = table.rows[1]
    x = d - 1.0
    flips = [np.mean(np.array(signs) * x) for signs in itertools.product((1, -1), repeat=10)]
    exact = sum(f >= x.mean() - 1e-12 for f in flips) / 1024
    assert v.sign_flip_p(d, alternative="greater", shift=1.0) == pytest.approx(exact)
    assert exact > 0.05 and b.diff == pytest.approx(d.mean()) and b.diff >= 1.0
    assert b.verdict == v.BEHIND  # every d > 0: behind is shown, and its p is that test's (1/1024, Holm × 2)
    assert (b.p, b.p_holm) == (pytest.approx(1 / 1024), pytest.approx(2 / 1024))


def test_a_declared_reference_is_judged_against_in_both_directions():
    rng = np.random.default_rng(7)
    base = 70 + rng.normal(0, 2.0, size=12)
    rows = [v.Row("mine", _cells(base)), v.Row("far ahead", _cells(base + 3 + rng.normal(0, 0.2, 12))),
            v.Row("just ahead", _cells(base + 0.4 + rng.normal(0, 0.05, 12))),
            v.Row("far behind", _cells(base - 3 + rng.normal(0, 0.2, 12)))]
    table = v.judge(rows, rule=v.Rule(reference="mine"))
    assert table.declared and table.reference == "mine" and table.comparisons == 6
    assert {r.name: r.verdict for r in table.rows} == {
        "far ahead": v.ABOVE, "just ahead": v.AHEAD, "mine": v.REFERENCE, "far behind": v.BELOW}
    assert "declared reference mine" in table.caption()
    # a declared reference with no row in this table: judged as if none were declared
    assert not v.judge(rows, rule=v.Rule(reference="absent")).declared


def test_without_a_reference_the_best_row_being_chosen_does_not_inflate_the_error_rate():
    """Five rows with the same true AA, 12 paired cells: how often some row is called `behind` (or worse). Judging
    each row against every other keeps it at α; testing the best-observed row against the rest (the rule before,
    computed here directly) does not."""
    rng = np.random.default_rng(8)
    tables, open_errors, selected_errors = 300, 0, 0
    for _ in range(tables):
        seed = rng.normal(0, 2.0, size=12)
        values = [80 + seed + rng.normal(0, 1.0, size=12) for _ in range(5)]
        rows = [v.Row(f"m{k}", _cells(x)) for k, x in enumerate(values)]
        judged = v.judge(rows, rule=v.Rule(margin=0.5, resamples=20))
        open_errors += any(r.verdict in (v.BELOW, v.BEHIND) for r in judged.rows)
        best = int(np.argmax([x.mean() for x in values]))
        p = [v.sign_flip_p(values[best] - x) for k, x in enumerate(values) if k != best]
        selected_errors += min(v.holm(p)) < 0.05
    assert open_errors / tables <= 0.08  # α = 0.05 plus three binomial sds of 300 tables
    assert selected_errors > 2 * open_errors


def test_margins_are_fixed_per_scenario_and_named_in_the_caption():
    assert v.margin_for("class-incremental") == 2.0
    assert v.margin_for("task-incremental") == v.margin_for("domain-incremental") == v.margin_for(None) == 1.0
    from clbench._tools.tables import Judging, parse_margins

    assert parse_margins(["3", "split-mnist-cil=0.5", "class-incremental=4"]) == {
        "*": 3.0, "split-mnist-cil": 0.5, "class-incremental": 4.0}
    judging = Judging(parse_margins(["split-mnist-cil=0.5", "class-incremental=4"]))
    assert judging.rule("split-mnist-cil", "class-incremental").margin == 0.5
    assert judging.rule("seq-mnist", "class-incremental").margin == 4.0
    assert Judging().rule("seq-mnist", "class-incremental").margin_from == "the class-incremental default"
    with pytest.raises(ValueError, match="expected Δ ≥ 0"):
        parse_margins(["x=-1"])


def test_t_interval_is_scipy_paired_t_interval_to_the_last_bit():
    from scipy import stats

    rng = np.random.default_rng(7)
    for _ in range(300):
        d = np.round(rng.normal(rng.normal(0, 5), rng.exponential(3), size=rng.integers(2, 30)), 2)
        if np.ptp(d) == 0:
            continue
        for level in (0.9, 0.95):
            ci = stats.ttest_1samp(d, 0.0).confidence_interval(level)
            assert v.t_interval(list(d), level) == (float(ci.low), float(ci.high))
    assert v.t_interval([1.5, 1.5, 1.5], 0.9) == (1.5, 1.5)
    assert v.t_interval([2.0], 0.9) is None
