"""The verdict rule (clbench.verdicts) against numbers computed another way."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

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
    assert (table.reference, b.name, b.verdict, b.pairs) == ("a", "b", v.BELOW, 10)
    assert b.p == pytest.approx(2 / 2**10)  # every difference has one sign: the most extreme of 2^10 patterns


def test_three_cells_never_separate_even_when_the_overlap_rule_does():
    ref, other = [90.0, 90.2, 90.1], [85.0, 85.1, 84.9]
    assert not _overlap_tied(ref, other)
    table = v.judge([v.Row("a", _cells(ref)), v.Row("b", _cells(other))])
    assert table.rows[1].verdict == v.NOT_SEPARATED
    assert table.rows[1].p == pytest.approx(0.25)
    assert table.min_p == pytest.approx(0.25)
    assert "nothing here can be separated" in table.caption()


def test_sign_flip_p_is_the_exact_enumeration():
    d = [1.5, -0.5, 2.0, 0.7, 3.1, -0.2]
    observed = abs(np.mean(d))
    flips = [abs(np.mean([s * x for s, x in zip(signs, d, strict=True)]))
             for signs in itertools.product((1, -1), repeat=len(d))]
    expected = sum(f >= observed - 1e-12 for f in flips) / len(flips)
    assert v.sign_flip_p(d) == pytest.approx(expected)
    assert v.sign_flip_p([0.0, 0.0, 0.0]) == 1.0


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
    table = v.judge([v.Row("a", _cells(ref)), v.Row("close", _cells(close)), v.Row("far", _cells(far))])
    verdicts = {r.name: r.verdict for r in table.rows}
    assert verdicts["close"] == v.EQUIVALENT
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
    assert [(r.name, r.verdict) for r in table.rows] == [("a", v.REFERENCE), ("b", v.NOT_SEPARATED),
                                                         ("joint", v.ORACLE)]
    assert table.rows[2].rank is None


def test_lower_is_better_rows_are_judged_the_other_way():
    rng = np.random.default_rng(3)
    low = 5 + rng.normal(0, 1, size=10)
    high = low + 3 + rng.normal(0, 0.2, size=10)
    table = v.judge([v.Row("high", _cells(high)), v.Row("low", _cells(low))], direction="down")
    assert [(r.name, r.verdict) for r in table.rows] == [("low", v.REFERENCE), ("high", v.BELOW)]
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
