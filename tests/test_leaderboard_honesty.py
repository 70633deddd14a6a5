"""The leaderboard names no winner the data cannot separate, and shows metric errors instead of dropping them.

Bold follows the one verdict rule (clbench.verdicts): the reference and every row not `below` it, when some row is.
Every expected string here was worked out by hand: sample std, 2 decimals.
"""

from __future__ import annotations

from pathlib import Path

from clbench._tools.leaderboard import LEGEND, diagnostics_tables, frame, metric_table, render, render_cell
from clbench.cell import CellResult
from clbench.specs import MethodSpec, MetricSpec

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


def spec(direction: str = "up", name: str = "M", needs: str = "matrix") -> MetricSpec:
    return MetricSpec(name, lambda inp: None, direction, needs)  # type: ignore[arg-type]


def avg_column(results: list[CellResult], direction: str = "up", **kw) -> dict[str, str]:
    lines = metric_table(frame(results), spec(direction), **kw).splitlines()[4:]
    return {cells[0]: cells[-1] for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines)}


def bold(results: list[CellResult], direction: str = "up", **kw) -> set[str]:
    return {m for m, v in avg_column(results, direction, **kw).items() if v.startswith("**")}


EIGHT = [50.0, 53.0, 47.0, 51.0, 49.0, 55.0, 45.0, 52.0]  # seeds differ by far more than the methods below


# --------------------------------------------------------------------------- which rows are bold
def test_one_seed_bolds_nothing():
    results = [cell("a", "1", 0, 10.0), cell("a", "2", 0, 12.0), cell("b", "1", 0, 50.0), cell("b", "2", 0, 51.0)]
    assert avg_column(results) == {"a": "11.00 ± 1.41", "b": "50.50 ± 0.71"}  # orders pooled
    text = render(results, [spec()], "T")
    assert "**" not in text and "\n" + LEGEND + "\n" in text


def test_three_seeds_bold_nothing_however_far_apart():
    # 3 paired cells: no two-sided sign-flip p below 2/8 = 0.25, so no row is `below` and nothing is bold
    assert bold(grid({"a": [10.0, 12.0, 11.0], "c": [30.0, 31.0, 30.5]})) == set()


def test_eight_paired_seeds_bold_the_reference_and_the_rows_not_below_it():
    # b trails a by 0.1 in every cell (not below: under Δ = 1); c by 5 (p = 2/2^8, Holm ×2 = 0.0156 < 0.05)
    results = grid({"a": [v + 5 for v in EIGHT], "b": [v + 4.9 for v in EIGHT], "c": EIGHT})
    assert bold(results) == {"a", "b"}
    # unpaired, the rows overlap (std 3.24 each, √(73.5/7)): the rule used before called all three tied
    assert avg_column(results)["c"] == "50.25 ± 3.24"


def test_direction_down_the_lowest_is_the_reference():
    results = grid({"a": [v + 5 for v in EIGHT], "b": [v + 4.9 for v in EIGHT], "c": EIGHT})
    assert bold(results, "down") == {"c"}
    assert metric_table(frame(results), spec("down")).startswith("#### M ↓\n")


def test_an_oracle_is_never_bold_nor_the_reference():
    specs = {"joint": MethodSpec("joint", object, tags=frozenset({"reference"})),
             "a": MethodSpec("a", object), "c": MethodSpec("c", object)}
    results = grid({"joint": [v + 20 for v in EIGHT], "a": [v + 5 for v in EIGHT], "c": EIGHT})
    assert bold(results, specs=specs) == {"a"}
    assert bold(results) == {"joint"}  # without the specs nothing marks it an oracle: it is the reference


def test_a_diagnostic_is_never_bold_and_sits_in_its_footprint_type_table():
    results = grid({"a": [v + 5 for v in EIGHT], "c": EIGHT})
    assert "**" not in metric_table(frame(results), spec(needs="footprint"))
    specs = {"a": MethodSpec("a", object, footprint_kind="masked"), "c": MethodSpec("c", object)}
    tables = diagnostics_tables(frame(results), [spec(needs="footprint")], ["a", "c"], {}, specs)
    assert [t.splitlines()[0] for t in tables] == ["#### Diagnostics — dense footprints (never ranked)",
                                                   "#### Diagnostics — masked footprints (never ranked)"]
    assert "| a        | 55.25 ± 3.2 |" in tables[1]  # 4 significant digits, std 2


def test_avg_pools_orders_and_seeds():
    # a: 10, 12 | 14, 16 → 13.00 ± 2.58 (√(20/3)); b: 1, 2 | 1, 2 → 1.50 ± 0.58 (√(1/3)); 4 paired cells: p ≥ 1/8
    results = [cell("a", "1", 0, 10.0), cell("a", "1", 1, 12.0), cell("a", "2", 0, 14.0), cell("a", "2", 1, 16.0),
               cell("b", "1", 0, 1.0), cell("b", "1", 1, 2.0), cell("b", "2", 0, 1.0), cell("b", "2", 1, 2.0)]
    assert metric_table(frame(results), spec()) == (
        "#### M ↑\n\n"
        "| method   | order 1      | order 2      | avg          |\n"
        "|----------|--------------|--------------|--------------|\n"
        "| a        | 11.00 ± 1.41 | 15.00 ± 1.41 | 13.00 ± 2.58 |\n"
        "| b        | 1.50 ± 0.71  | 1.50 ± 0.71  | 1.50 ± 0.58  |\n"
    )


# --------------------------------------------------------------------------- metric errors
def test_a_metric_error_shows_error_and_the_avg_counts_it():
    results = [cell("a", "1", 0, 10.0), cell("a", "1", 1, None, "boom"),
               cell("b", "1", 0, 5.0), cell("b", "1", 1, 6.0),
               cell("c", "1", 0, None), cell("c", "1", 1, None)]
    # a: one value 10.00; b: 5.50 ± 0.71; c does not apply; one paired cell separates nothing
    assert metric_table(frame(results), spec(), ROOT) == (
        "#### M ↑\n\n"
        "| method   | order 1                        | avg             |\n"
        "|----------|--------------------------------|-----------------|\n"
        "| a        | [10.00 (1 error)](s/a/order-1) | 10.00 (1 error) |\n"
        "| b        | [5.50 ± 0.71](s/b/order-1)     | 5.50 ± 0.71     |\n"
        "| c        | n/a                            | n/a             |\n"
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
