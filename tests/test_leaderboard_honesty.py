"""The leaderboard names no winner the data cannot separate, and shows metric errors instead of dropping them.

Every expected string here was worked out by hand: sample std, 2 decimals, intervals mean ± std as printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clbench._tools.leaderboard import (
    LEGEND,
    LEGEND_ONE_SEED,
    frame,
    metric_table,
    render,
    render_cell,
    tied_for_best,
)
from clbench.cell import CellResult
from clbench.specs import MetricSpec

ROOT = Path("/r")


def cell(method: str, order: str, seed: int, value: float | None, error: str | None = None,
         stream: str = "s") -> CellResult:
    return CellResult(method=method, stream=stream, order=order, seed=seed, tasks=["a"], accuracy_matrix=[[1.0]],
                      metrics={"M": None if error is not None else value},
                      metric_errors={} if error is None else {"M": error}, config={"profile": "p"},
                      path=ROOT / stream / method / f"order-{order}" / f"seed-{seed}" / "result.json")


def grid(values: dict[str, list[float]]) -> list[CellResult]:
    """``values``: method → its value for seed 0, 1, … (order 1)."""
    return [cell(m, "1", s, v) for m, vs in values.items() for s, v in enumerate(vs)]


def spec(direction: str = "up", name: str = "M") -> MetricSpec:
    return MetricSpec(name, lambda inp: None, direction)  # type: ignore[arg-type]


def avg_column(results: list[CellResult], direction: str = "up") -> dict[str, str]:
    lines = metric_table(frame(results), spec(direction)).splitlines()[4:]
    return {cells[0]: cells[-1] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


def bold(results: list[CellResult], direction: str = "up") -> set[str]:
    return {m for m, v in avg_column(results, direction).items() if v.startswith("**")}


# --------------------------------------------------------------------------- which rows are bold
def test_one_seed_bolds_nothing_and_the_legend_says_why():
    results = [cell("a", "1", 0, 10.0), cell("a", "2", 0, 12.0), cell("b", "1", 0, 50.0), cell("b", "2", 0, 51.0)]
    assert avg_column(results) == {"a": "11.00 ± 1.41", "b": "50.50 ± 0.71"}  # orders pooled, yet one seed
    text = render(results, [spec()], "T")
    assert "**" not in text
    assert "\n" + LEGEND_ONE_SEED + "\n" in text and LEGEND not in text
    assert LEGEND_ONE_SEED == "Bold `avg`: none, one seed, so no row is separated from the best."


def test_two_seeds_separated_only_the_best_is_bold():
    # a: 11.00 ± 1.41 → [9.59, 12.41]; b: 21.00 ± 1.41 → [19.59, 22.41]; c: 30.50 ± 0.71 → [29.79, 31.21]
    results = grid({"a": [10.0, 12.0], "b": [20.0, 22.0], "c": [30.0, 31.0]})
    assert metric_table(frame(results), spec()) == (
        "#### M ↑\n\n"
        "| method   | order 1      | avg              |\n"
        "|----------|--------------|------------------|\n"
        "| a        | 11.00 ± 1.41 | 11.00 ± 1.41     |\n"
        "| b        | 21.00 ± 1.41 | 21.00 ± 1.41     |\n"
        "| c        | 30.50 ± 0.71 | **30.50 ± 0.71** |\n"
    )
    text = render(results, [spec()], "T")
    assert "\n" + LEGEND + "\n" in text
    assert LEGEND == ("Bold `avg`: the best mean and every row whose mean ± std (as printed) overlaps the best "
                      "row's, i.e. tied for best; no bold: every row is tied.")


def test_overlapping_rows_are_tied_and_both_bold():
    # b: 12.50 ± 0.71 → [11.79, 13.21] is best; a: [9.59, 12.41] overlaps it; c: 1.50 ± 0.71 → [0.79, 2.21] does not
    results = grid({"a": [10.0, 12.0], "b": [12.0, 13.0], "c": [1.0, 2.0]})
    assert avg_column(results) == {"a": "**11.00 ± 1.41**", "b": "**12.50 ± 0.71**", "c": "1.50 ± 0.71"}


def test_intervals_that_only_touch_are_tied():
    # b: 11.00 ± 1.00 → [10.00, 12.00]; a: 10.00 ± 0.00 → [10.00, 10.00] touches it; c: 0.00 ± 0.00 does not
    results = grid({"a": [10.0, 10.0], "b": [10.0, 12.0, 11.0], "c": [0.0, 0.0]})
    assert avg_column(results) == {"a": "**10.00 ± 0.00**", "b": "**11.00 ± 1.00**", "c": "0.00 ± 0.00"}


def test_every_row_tied_bolds_nothing():
    # a: [9.59, 12.41], b: 12.00 ± 1.41 → [10.59, 13.41]: the best and the only other row overlap
    results = grid({"a": [10.0, 12.0], "b": [11.0, 13.0]})
    assert avg_column(results) == {"a": "11.00 ± 1.41", "b": "12.00 ± 1.41"}


@pytest.mark.parametrize(("values", "expected"), [
    ({"a": [10.0, 12.0], "b": [12.0, 13.0], "c": [1.0, 2.0]}, {"c"}),  # c: [0.79, 2.21] is lowest, alone
    ({"a": [10.0, 12.0], "b": [11.0, 13.0], "c": [30.0, 31.0]}, {"a", "b"}),  # a lowest, b overlaps it
])
def test_direction_down_the_lowest_is_best(values, expected):
    assert bold(grid(values), "down") == expected
    assert metric_table(frame(grid(values)), spec("down")).startswith("#### M ↓\n")


def test_avg_pools_orders_and_seeds():
    # a: 10, 12 | 14, 16 → 13.00 ± 2.58 (√(20/3)); b: 1, 2 | 1, 2 → 1.50 ± 0.58 (√(1/3))
    results = [cell("a", "1", 0, 10.0), cell("a", "1", 1, 12.0), cell("a", "2", 0, 14.0), cell("a", "2", 1, 16.0),
               cell("b", "1", 0, 1.0), cell("b", "1", 1, 2.0), cell("b", "2", 0, 1.0), cell("b", "2", 1, 2.0)]
    assert metric_table(frame(results), spec()) == (
        "#### M ↑\n\n"
        "| method   | order 1      | order 2      | avg              |\n"
        "|----------|--------------|--------------|------------------|\n"
        "| a        | 11.00 ± 1.41 | 15.00 ± 1.41 | **13.00 ± 2.58** |\n"
        "| b        | 1.50 ± 0.71  | 1.50 ± 0.71  | 1.50 ± 0.58      |\n"
    )


def test_tie_rule_on_printed_intervals():
    from decimal import Decimal as D

    iv = {0: (D("5.00"), D("4.00"), D("6.00")), 1: (D("7.00"), D("6.00"), D("8.00")), 2: (D("7.00"), D("7.00"), D("7.00")),
          3: (D("3.00"), D("2.00"), D("3.99"))}
    assert tied_for_best(iv, "up") == {0, 1, 2}  # 1 and 2 share the best mean; 0 touches 1 at 6.00
    assert tied_for_best(iv, "down") == {3}
    assert tied_for_best({}, "up") == set()


# --------------------------------------------------------------------------- metric errors
def test_a_metric_error_shows_error_and_the_avg_counts_it():
    results = [cell("a", "1", 0, 10.0), cell("a", "1", 1, None, "boom"),
               cell("b", "1", 0, 5.0), cell("b", "1", 1, 6.0),
               cell("c", "1", 0, None), cell("c", "1", 1, None)]
    # a: one value 10.00 → [10, 10]; b: 5.50 ± 0.71 → [4.79, 6.21]; c does not apply: a alone is best
    assert metric_table(frame(results), spec(), ROOT) == (
        "#### M ↑\n\n"
        "| method   | order 1                        | avg                 |\n"
        "|----------|--------------------------------|---------------------|\n"
        "| a        | [10.00 (1 error)](s/a/order-1) | **10.00 (1 error)** |\n"
        "| b        | [5.50 ± 0.71](s/b/order-1)     | 5.50 ± 0.71         |\n"
        "| c        | n/a                            | n/a                 |\n"
    )
    text = render(results, [spec()], "T", ROOT)
    assert text.endswith("\n```text\nerrors: M on a order 1 seed 1: boom\n```\n")


def test_a_metric_that_only_errored_still_gets_its_table_and_every_error_is_listed():
    long = "x" * 150 + "\n" + "y" * 150
    results = [cell("a", "2", 0, None, long), cell("a", "10", 0, None, "late order"),
               cell("a", "2", 1, None, "second"), cell("b", "2", 0, None, "b broke"), cell("b", "2", 1, None),
               cell("b", "10", 0, None), cell("b", "10", 1, None)]
    text = render(results, [spec(), spec(name="N")], "T", ROOT)
    assert "#### N" not in text  # N is absent from every result: no table
    # an order-2 cell with two errors links its order, one with one error its result; a row with no value
    # but an error has the avg `error` (b's other cells are n/a)
    assert (
        "#### M ↑\n\n"
        "| method   | order 2                                 | order 10                                 | avg   |\n"
        "|----------|-----------------------------------------|------------------------------------------|-------|\n"
        "| a        | [error](s/a/order-2)                    | [error](s/a/order-10/seed-0/result.json) | error |\n"
        "| b        | [error](s/b/order-2/seed-0/result.json) | n/a                                      | error |\n"
    ) in text
    message = "x" * 150 + " " + "y" * 48 + "…"  # newline folded, cut to 200 characters
    assert text.endswith(
        "\n```text\n"
        f"errors: M on a order 2 seed 0: {message}\n"
        "errors: M on a order 2 seed 1: second\n"
        "errors: M on a order 10 seed 0: late order\n"
        "errors: M on b order 2 seed 0: b broke\n"
        "```\n")


def test_n_a_everywhere_gets_no_table():
    results = [cell("a", "1", 0, None), cell("a", "1", 1, None)]
    assert "#### M" not in render(results, [spec()], "T")


# --------------------------------------------------------------------------- clbench show
def test_render_cell_pads_a_short_matrix_and_prints_metric_errors():
    r = CellResult(method="ewc", stream="digits", order="2", seed=1, tasks=["t1", "a-very-long-task", "t3"],
                   accuracy_matrix=[[90.0], [80.5, None]], metrics={"AA": 85.25, "OO": None, "GSR": None},
                   metric_errors={"GSR": "footprints missing"}, timings={"total_s": 3.21}, env={"device": "cpu"})
    assert render_cell(r) == (
        "ewc · digits · order 2 · seed 1 · complete\n"
        "a[i][j]             t1    a-very-long…    t3\n"
        "------------------  ----  --------------  ----\n"
        "after t1            90.0\n"
        "after a-very-long…  80.5\n"
        "after t3\n"
        "\n"
        "metric    value\n"
        "--------  -------\n"
        "AA        85.25\n"
        "GSR       error\n"
        "OO        n/a\n"
        "metric GSR: error: footprints missing\n"
        "\n"
        "time: 3.2s on cpu"
    )


def test_render_cell_of_a_failed_cell_with_a_longer_wider_matrix():
    r = CellResult(method="m", stream="s", order="1", seed=0, tasks=["t1"], accuracy_matrix=[[1.0, 2.0], [3.0]],
                   status="failed", error="OOM")
    assert render_cell(r) == (
        "m · s · order 1 · seed 0 · failed\n"
        "error: OOM\n"
        "a[i][j]    t1    #1\n"
        "---------  ----  ----\n"
        "after t1   1.0   2.0\n"
        "after #1   3.0"
    )
