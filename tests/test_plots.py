"""Plots: a distinct colour-and-marker pair per method, integer task ticks, a ± std band only where a point
has two values, a heatmap PNG, and a loss curve that is drawn from result.json or skipped."""

from __future__ import annotations

import copy

import pytest
from matplotlib.collections import PolyCollection

from clbench._tools import plots
from clbench.cell import CellResult

PNG = b"\x89PNG\r\n\x1a\n"


def cell(method: str, order: str = "1", seed: int = 0, T: int = 4, stream: str = "s", shift: float = 0.0,
         **fields) -> CellResult:
    tasks = [f"t{i}" for i in range(T)]
    matrix = [[min(100.0, 90.0 - 7 * (i - j) + shift) if j <= i else 50.0 for j in range(T)] for i in range(T)]
    return CellResult(method=method, stream=stream, order=order, seed=seed, tasks=tasks,
                      accuracy_matrix=matrix, **fields)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plots._pyplot().close("all")


def test_twenty_methods_get_distinct_colour_marker_pairs():
    names = ["dense-ewc", "random-mask-ewc", "ewc", "replay", "expander", "seqft", "expander-ewc", "joint",
             "lota", "lotto", "lps", "lwf", "packnet", "inclora", "nlora", "olora", "olora+nlora", "seqlora",
             "si", "agem"]
    styles = plots.line_styles(names)
    pairs = {(s["color"], s["marker"]) for s in styles.values()}
    assert len(pairs) == 20
    assert len({s["color"] for s in styles.values()}) == 20  # tab20: every colour once
    # the pairs that shared colour and marker before
    for a, b in [("dense-ewc", "random-mask-ewc"), ("ewc", "replay"), ("expander", "seqft")]:
        assert (styles[a]["color"], styles[a]["marker"]) != (styles[b]["color"], styles[b]["marker"])
    # stable: fixed by the sorted names, not the order they come in
    assert plots.line_styles(reversed(names)) == styles
    # beyond 20 the pairs still do not repeat
    many = plots.line_styles(f"m{i:03d}" for i in range(140))
    assert len({(s["color"], s["marker"]) for s in many.values()}) == 140


@pytest.mark.parametrize("T", [4, 5, 30])
def test_task_ticks_are_integers(T):
    fig = plots.accuracy_over_time_figure([cell("ewc", T=T), cell("seqft", T=T)], "s")
    ticks = fig.axes[0].get_xticks()
    assert len(ticks) >= 2
    assert all(float(t).is_integer() for t in ticks)
    if T <= 20:
        assert list(ticks) == list(range(1, T + 1))


def bands(fig) -> int:
    return sum(isinstance(c, PolyCollection) for c in fig.axes[0].collections)


def test_band_only_where_a_point_has_two_values():
    one_each = [cell("ewc"), cell("seqft")]
    fig = plots.accuracy_over_time_figure(one_each, "s")
    assert bands(fig) == 0
    assert "no band" in fig.axes[0].get_title()

    seeds = [cell("ewc", seed=0), cell("ewc", seed=1, shift=-5), cell("seqft", seed=0)]
    fig = plots.accuracy_over_time_figure(seeds, "s")
    assert bands(fig) == 1  # ewc has two seeds, seqft one
    title = fig.axes[0].get_title()
    assert "seeds 0, 1" in title and "order 1" in title
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["ewc", "seqft (n=1)"]

    orders = [cell(m, order=o, shift=float(o)) for m in ("ewc", "seqft") for o in ("1", "2", "3")]
    fig = plots.accuracy_over_time_figure(orders, "s")
    assert bands(fig) == 2
    assert "orders 1, 2, 3 pooled (seed 0)" in fig.axes[0].get_title()


def test_legend_sits_outside_the_axes():
    fig = plots.accuracy_over_time_figure([cell(f"m{i}") for i in range(13)], "s")
    assert not fig.axes[0].get_legend() and len(fig.legends) == 1
    fig.canvas.draw()
    legend, axes = fig.legends[0].get_window_extent(), fig.axes[0].get_window_extent()
    assert legend.x0 >= axes.x1


def test_heatmap_of_a_4x4_matrix_writes_a_png(tmp_path):
    r = cell("ewc", T=4)
    r.accuracy_matrix[0][3] = 5.0
    fig = plots.heatmap_figure(r)
    texts = {t.get_text(): t for t in fig.axes[0].texts}
    assert len(fig.axes[0].texts) == 16 and all(t.get_fontsize() >= 8 for t in texts.values())
    assert texts["90.0"].get_color() == "black" and texts["5.0"].get_color() == "white"  # bright / dark cells
    path = plots.heatmap(r, tmp_path / "a" / "h.png")
    assert path.read_bytes()[:8] == PNG
    again = plots.heatmap(r, tmp_path / "h2.png")
    assert again.read_bytes() == path.read_bytes()  # deterministic


def with_losses(r: CellResult, phases: dict[str, int]) -> CellResult:
    r = copy.deepcopy(r)
    r.timings = {"tasks": [
        {"task": t, "train_s": 0.1, "eval_s": 0.01,
         **{p: {"seconds": 0.1, "steps": 3, "loss": [2.0 / (e + 1) for e in range(n)]} for p, n in phases.items()}}
        for t in r.tasks]}
    return r


def test_loss_curve_with_and_without_the_loss_field(tmp_path):
    r = cell("ewc", T=4)
    r.timings = {"tasks": [{"task": t, "train": {"seconds": 0.1, "steps": 3}} for t in r.tasks], "total_s": 1}
    assert plots.loss_curve(r, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
    assert plots.loss_curve(cell("ewc"), tmp_path / "none.png") is None  # no timings at all

    lossy = with_losses(r, {"train": 3})
    path = plots.loss_curve(lossy, tmp_path / "loss.png")
    assert path == tmp_path / "loss.png" and path.read_bytes()[:8] == PNG
    assert plots.loss_curve(lossy.to_json(), tmp_path / "loss2.png").read_bytes() == path.read_bytes()

    fig = plots.loss_curve_figure(lossy)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 4 + 3  # one line per task, a boundary between tasks
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert ax.get_xlim() == (0.5, 12.5)
    top = [a for a in ax.child_axes][0]
    assert [t.get_text() for t in top.get_xticklabels()] == ["1: t0", "2: t1", "3: t2", "4: t3"]


def test_loss_curve_names_its_phase_order(tmp_path):
    r = with_losses(cell("lps", T=2), {"warmup": 1, "retrain": 2})
    fig = plots.loss_curve_figure(r)  # result.json sorts keys: the run order is not known
    assert "alphabetical" in fig.legends[0].get_title().get_text()
    for entry in r.timings["tasks"]:
        entry["phases"] = ["warmup", "retrain"]
    fig = plots.loss_curve_figure(r)
    assert fig.legends[0].get_title().get_text() == "phase"
    first = fig.axes[0].get_lines()[0]
    assert first.get_label() == "warmup" and list(first.get_xdata()) == [1]
