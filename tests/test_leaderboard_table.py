"""One metric table: which avg is bold (the best as printed, ties included)."""

from __future__ import annotations

import pytest

from clbench.leaderboard import frame, metric_table
from clbench.results import CellResult
from clbench.specs import MetricSpec


def table(values: dict[str, float], direction: str) -> dict[str, str]:
    results = [CellResult(method=m, stream="s", order="1", seed=0, tasks=["a"], accuracy_matrix=[[1.0]],
                          metrics={"M": v}, config={}, status="complete") for m, v in values.items()]
    spec = MetricSpec("M", lambda inp: None, direction)  # type: ignore[arg-type]
    lines = metric_table(frame(results), spec).splitlines()[4:]
    return {cells[0]: cells[-1] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


@pytest.mark.parametrize(("direction", "bold"), [("up", {"b", "c"}), ("down", {"a"})])
def test_every_row_tying_the_best_as_printed_is_bold(direction, bold):
    # b and c differ only past the printed 2 decimals: neither can be shown as better than the other
    avg = table({"a": 0.5, "b": 0.991, "c": 0.994}, direction)
    assert {m for m, v in avg.items() if v.startswith("**")} == bold
    assert avg["b"].strip("*") == avg["c"].strip("*") == "0.99"


def test_a_single_method_is_not_bold():
    assert table({"a": 1.0}, "up") == {"a": "1.00"}

