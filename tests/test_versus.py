"""`clbench versus A B`: two result trees compared method by method with the one verdict rule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from faultsuite import clbench, ok

from clbench import verdicts as v
from clbench._tools.tables import Judging
from clbench._tools.versus import contrast, markdown
from clbench.cell import CellResult


def _cell(method: str, seed: int, aa: float, scenario: str = "domain-incremental") -> CellResult:
    return CellResult(method=method, stream="s", order="1", seed=seed, tasks=["a"], accuracy_matrix=[[aa / 100]],
                      metrics={"AA": aa}, status="complete", config={"profile": "p"}, scenario=scenario)


def _exact_greater(d: np.ndarray, shift: float) -> float:
    x = d - shift
    sums = [np.dot(signs, x) for signs in itertools.product((1, -1), repeat=len(x))]
    return float(np.mean([s >= x.sum() - 1e-9 for s in sums]))


def test_each_method_is_judged_over_the_cells_both_trees_hold():
    rng = np.random.default_rng(0)
    base = 80 + rng.normal(0, 3, size=10)
    lift = 3 + np.array([0.2, -0.1, 0.3, 0.0, -0.2, 0.1, 0.25, -0.15, 0.05, 0.4])  # B leads by ~3 in every cell
    wobble = np.array([0.3, -0.2, 0.1, -0.4, 0.2, -0.1, 0.4, -0.3, 0.0, 0.1])  # B equal to A, ±0.4
    a = [_cell("up", s, base[s]) for s in range(10)] + [_cell("same", s, base[s]) for s in range(10)]
    a += [_cell("gone", 0, 50.0), _cell("moved", 0, 50.0)]
    b = [_cell("up", s, base[s] + lift[s]) for s in range(10)] + [_cell("same", s, base[s] + wobble[s]) for s in range(8)]
    b += [_cell("moved", 0, 50.0, scenario="task-incremental"), _cell("up", 99, 10.0)]  # seed 99: not in A
    rows, notes = contrast(a, b)
    assert notes == {"another scenario in each tree": ["s/moved"], "only in A": ["s/gone"]}
    by = {r.method: r for r in rows}
    assert (by["up"].cells, by["same"].cells) == (10, 8)
    assert by["up"].diff == pytest.approx(lift.mean()) and by["up"].b == pytest.approx((base + lift).mean())
    # Δ = 1 (domain-incremental); Holm across both directions of the two rows: 4 hypotheses
    assert by["up"].verdict == v.ABOVE
    assert by["up"].p == pytest.approx(min(1.0, 4 * _exact_greater(lift, 1.0)))
    assert by["same"].verdict == v.EQUIVALENT
    lo, hi = by["same"].interval
    assert -1 < lo < hi < 1
    # --margin moves Δ: at 5 pp the lift of ~3 is a lead shown, one beyond Δ not
    rows5, _ = contrast(a, b, Judging({"*": 5.0}))
    assert {r.method: r.verdict for r in rows5}["up"] == v.AHEAD
    text = markdown(rows, ("old", "new"))
    assert "new against old, paired by stream, method, order and seed" in text
    assert "| s (domain-incremental) | up" in text


def test_versus_on_two_trees_from_the_command_line(tmp_path):
    for name, lr in (("a", "0.05"), ("b", "0.2")):
        ok(clbench(tmp_path, "run", "--profile", "test", "--stream", "tiny-vector", "--methods", "seqft", "--seeds",
                   "0,1", "--set", f"train.lr={lr}", "--no-progress", "--no-leaderboard", "--out",
                   str(tmp_path / name)))
    o = clbench(tmp_path, "versus", str(tmp_path / "a"), str(tmp_path / "b"), "--labels", "lr 0.05,lr 0.2",
                "--out", str(tmp_path / "v.md"))
    assert o.code == 0, o.stderr
    assert "| tiny-vector (task-incremental) | seqft    | 2" in o.stdout
    assert (tmp_path / "v.md").read_text() == o.stdout.rstrip("\n") + "\n"
    refused = clbench(tmp_path, "versus", str(tmp_path / "a"), str(tmp_path / "b"), "--methods", "ewc")
    assert refused.code == 2 and "nothing to compare" in refused.stderr
