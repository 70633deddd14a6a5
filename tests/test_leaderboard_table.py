"""One metric table: which avg is bold (the best, and every row whose printed mean ± std overlaps it)."""

from __future__ import annotations

import pytest

from clbench._tools.leaderboard import frame, metric_table
from clbench.cell import CellResult
from clbench.specs import MetricSpec


def table(values: dict[str, list[float]], direction: str) -> dict[str, str]:
    """``values``: method → its value for seed 0, 1, … (one order)."""
    results = [CellResult(method=m, stream="s", order="1", seed=s, tasks=["a"], accuracy_matrix=[[1.0]],
                          metrics={"M": v}, config={}, status="complete")
               for m, vs in values.items() for s, v in enumerate(vs)]
    spec = MetricSpec("M", lambda inp: None, direction)  # type: ignore[arg-type]
    lines = metric_table(frame(results), spec).splitlines()[4:]
    return {cells[0]: cells[-1] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


@pytest.mark.parametrize(("direction", "bold"), [("up", {"b", "c"}), ("down", {"a"})])
def test_rows_within_the_margin_are_bold_together(direction, bold):
    # 8 paired seeds; b and c differ by 0.003 (within Δ = 1: never below each other), a by 0.49 from both… and by
    # 2 more in the other direction: a row 2.5 away from the reference in every seed is below it (p = 2/2^8)
    avg = table({"a": [0.5 + k for k in range(8)], "b": [2.991 + k for k in range(8)],
                 "c": [2.994 + k for k in range(8)]}, direction)
    assert {m for m, v in avg.items() if v.startswith("**")} == bold
    assert avg["b"].strip("*") == "6.49 ± 2.45" and avg["c"].strip("*") == "6.49 ± 2.45"


def test_one_seed_bolds_nothing_even_when_printed_values_differ():
    avg = table({"a": [0.5], "b": [0.991], "c": [0.994]}, "up")
    assert avg == {"a": "0.50", "b": "0.99", "c": "0.99"}


def test_a_single_method_is_not_bold():
    assert table({"a": [1.0]}, "up") == {"a": "1.00"}
    assert table({"a": [1.0, 2.0]}, "up") == {"a": "1.50 ± 0.71"}
