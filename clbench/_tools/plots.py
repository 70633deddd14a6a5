"""PNG plots: a cell's accuracy-matrix heatmap and loss curve, a stream's accuracy-over-time curves, sweep
plots (AA vs a value).

Every line gets a colour-and-marker pair from :func:`line_styles`, fixed by its place among the sorted names
in the plot, so no two of up to 20 methods look alike. Figures have a fixed size and dpi, and files are
written without timestamps (``metadata={"Software": None}``), so the same results give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from clbench.cell import CellResult
from clbench.data import atomic_write_with

_META = {"Software": None}
_DPI = 110
# tab20 holds 10 hues, each dark then light. The first 10 names take the dark shades with solid lines, the
# next 10 the light shades with dashed lines; the marker cycle (7 long) gives names i and i+10, which share
# a hue, different markers, and colour-marker pairs repeat only after lcm(20, 7) = 140 names.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def line_styles(names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """A matplotlib style (colour, marker, line style) per name, by its place in the sorted names."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    tab20 = colormaps["tab20"]
    styles = {}
    for i, name in enumerate(sorted(set(names))):
        light = (i // 10) % 2
        styles[name] = {
            "color": to_hex(tab20((2 * i) % 20 + light)),
            "marker": _MARKERS[i % len(_MARKERS)],
            "linestyle": "--" if light else "-",
            # markers edged in the hue's dark shade: a light shade's markers stand out on white
            "markeredgecolor": to_hex(tab20((2 * i) % 20)),
            "markeredgewidth": 0.8,
        }
    return styles


def _save(fig, path: Path) -> Path:
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=_DPI, metadata=_META))
    _pyplot().close(fig)
    return path


def _sort_key(text: str) -> tuple[int, float | str]:
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)


def _listing(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in sorted({str(v) for v in values}, key=_sort_key))


def _sample_std(values: list[float]) -> float:
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


# ---------------------------------------------------------------------------------------------- heatmap


def _text_colour(rgba: tuple[float, ...]) -> str:
    """Black or white, whichever contrasts more with the background (WCAG relative luminance)."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    luminance = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "black" if (luminance + 0.05) / 0.05 >= 1.05 / (luminance + 0.05) else "white"


def heatmap_figure(result: CellResult):
    """The figure of :func:`heatmap` (not saved): a[i][j] with each value written in its cell."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    plt = _pyplot()
    T = len(result.tasks)
    a = np.array([[np.nan if v is None else v for v in row] for row in result.accuracy_matrix], dtype=float)
    cell = 0.62 if T <= 6 else 0.46 if T <= 12 else 0.34  # inches per cell
    fig = plt.figure(figsize=(round(2.6 + cell * T, 2), round(1.9 + cell * T, 2)), layout="constrained")
    ax = fig.add_subplot()
    cmap = colormaps["viridis"].with_extremes(bad="#e6e6e6")
    norm = Normalize(vmin=0, vmax=100)
    im = ax.imshow(a, cmap=cmap, norm=norm)
    tick_size = 8 if T <= 10 else 7
    ax.set_xticks(
        range(T),
        result.tasks,
        rotation=45 if T > 4 or max(map(len, result.tasks)) > 5 else 0,
        ha="right" if T > 4 or max(map(len, result.tasks)) > 5 else "center",
        fontsize=tick_size,
    )
    ax.set_yticks(range(T), result.tasks, fontsize=tick_size)
    ax.set_xlabel("evaluated on task", fontsize=8)
    ax.set_ylabel("after training on task", fontsize=8)
    ax.tick_params(length=0)
    if T <= 16:
        size = 9 if T <= 6 else 8 if T <= 10 else 6.5
        fmt = "{:.1f}" if T <= 6 else "{:.0f}"
        for i in range(T):
            for j in range(T):
                if np.isnan(a[i, j]):
                    continue
                ax.text(
                    j,
                    i,
                    fmt.format(a[i, j]),
                    ha="center",
                    va="center",
                    fontsize=size,
                    color=_text_colour(cmap(norm(a[i, j]))),
                )
    ax.set_title(f"{result.method} · {result.stream}\norder {result.order} · seed {result.seed}", fontsize=9)
    bar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
    bar.set_label("score (%)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return fig


def heatmap(result: CellResult, path: Path) -> Path:
    """a[i][j] as an image: rows = after training task i, columns = task j (run order)."""
    return _save(heatmap_figure(result), path)


# ------------------------------------------------------------------------------------- accuracy over time


def seen_average(result: CellResult) -> list[float]:
    """Mean score over tasks seen so far after each task: mean_{j≤i} a[i][j]."""
    # a complete result's matrix has no nulls
    return [sum(cast("list[float]", row[: i + 1])) / (i + 1) for i, row in enumerate(result.accuracy_matrix)]


def _pooling(cells: list[CellResult], most: int) -> str:
    """What the band is over: e.g. "orders 1, 2, 3 pooled (seed 0)", "seeds 0, 1 (order 1)"."""
    orders, seeds = _listing(r.order for r in cells), _listing(r.seed for r in cells)
    if most < 2:
        return f"one cell per method (order {orders}; seed {seeds}): no band"
    many_orders, many_seeds = "," in orders, "," in seeds
    if many_orders and many_seeds:
        what = f"orders {orders} × seeds {seeds} pooled"
    elif many_orders:
        what = f"orders {orders} pooled (seed {seeds})"
    else:
        what = f"seeds {seeds} (order {orders})"
    return f"line: mean, band: ± sample std over {what}"


def accuracy_over_time_figure(results: Iterable[CellResult], stream: str):
    """The figure of :func:`accuracy_over_time` (not saved)."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    cells = [r for r in results if r.stream == stream and r.status == "complete"]
    curves: dict[str, list[list[float]]] = {}
    for r in cells:
        curves.setdefault(r.method, []).append(seen_average(r))
    styles = line_styles(curves)
    most = max((len(c) for c in curves.values()), default=0)
    fig = plt.figure(figsize=(7.6, 4.4), layout="constrained")
    ax = fig.add_subplot()
    longest = 0
    alpha = 0.2 if len(curves) <= 4 else 0.13 if len(curves) <= 10 else 0.09
    for method in sorted(curves):
        runs = curves[method]
        T = min(len(c) for c in runs)
        longest = max(longest, T)
        xs = list(range(1, T + 1))
        mean = [sum(c[i] for c in runs) / len(runs) for i in range(T)]
        label = method if len(runs) == most else f"{method} (n={len(runs)})"
        style = styles[method]
        ax.plot(xs, mean, markersize=4, linewidth=1.4, label=label, **style)
        if len(runs) >= 2:  # a band needs two values at each point
            std = [_sample_std([c[i] for c in runs]) for i in range(T)]
            # scores are percentages: the band stops at 0 and 100
            ax.fill_between(
                xs,
                [max(m - s, 0.0) for m, s in zip(mean, std, strict=True)],
                [min(m + s, 100.0) for m, s in zip(mean, std, strict=True)],
                color=style["color"],
                alpha=alpha,
                linewidth=0,
            )
    if longest and longest <= 20:
        ax.set_xticks(range(1, longest + 1))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("tasks trained")
    ax.set_ylabel("mean score on tasks seen so far (%)")
    ax.set_title(
        f"{stream}: accuracy over time (forgetting shows as a falling curve)\n{_pooling(cells, most)}", fontsize=9
    )
    ax.grid(alpha=0.3)
    if curves:
        fig.legend(loc="outside right upper", fontsize=7.5, frameon=False, handlelength=2.6)
    return fig


def accuracy_over_time(results: Iterable[CellResult], stream: str, path: Path) -> Path:
    """Per method: mean over its complete cells of the seen-task average after each task, ± std band."""
    return _save(accuracy_over_time_figure(results, stream), path)


# ------------------------------------------------------------------------------------------- loss curve


def _phase_names(entry: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The phases of one task's timings entry and whether that is their run order: the order of a
    ``phases`` list where the entry has one, else the order the entry holds them (result.json is written
    with sorted keys, so alphabetical: run order only when there is one phase)."""
    names = [k for k, v in entry.items() if isinstance(v, Mapping)]
    order = entry.get("phases")
    if isinstance(order, list):
        rank = {name: i for i, name in enumerate(order)}
        names.sort(key=lambda n: rank.get(n, len(rank)))
        return names, True
    return names, len(names) <= 1


def _losses(value: Any) -> list[float] | None:
    if not isinstance(value, list) or not value:
        return None
    out = []
    for v in value:
        if v is None:
            out.append(float("nan"))
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out.append(float(v))
        else:
            return None
    return out


def _loss_segments(
    data: Mapping[str, Any],
) -> tuple[list[tuple[int, str, str, list[float]]], list[tuple[int, str, int]], bool]:
    """A result's per-epoch losses: ``(task index, task name, phase, losses)`` per phase in run order, ``(task index,
    task name, epochs)`` per task that has any, and whether the phases' run order is known."""
    timings = data.get("timings")
    entries = timings.get("tasks") if isinstance(timings, Mapping) else None
    names = list(data.get("tasks") or [])
    segments: list[tuple[int, str, str, list[float]]] = []
    spans: list[tuple[int, str, int]] = []
    run_order = True
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, Mapping):
            continue
        task = str(entry.get("task", names[i] if i < len(names) else i + 1))
        epochs = 0
        phases, known = _phase_names(entry)
        run_order = run_order and known
        for phase in phases:
            losses = _losses(entry[phase].get("loss"))
            if losses:
                segments.append((i, task, phase, losses))
                epochs += len(losses)
        if epochs:
            spans.append((i, task, epochs))
    return segments, spans, run_order


def loss_curve_figure(result: CellResult | Mapping[str, Any]):
    """The figure of :func:`loss_curve` (not saved), or None without any per-epoch loss."""
    from matplotlib.ticker import MaxNLocator

    data = result.to_json() if isinstance(result, CellResult) else result
    segments, spans, run_order = _loss_segments(data)
    if not segments:
        return None

    plt = _pyplot()
    styles = line_styles(p for _, _, p, _ in segments)
    fig = plt.figure(figsize=(7.6, 4.0), layout="constrained")
    ax = fig.add_subplot()
    x = 0
    labelled: set[str] = set()
    for _, _, phase, losses in segments:
        xs = list(range(x + 1, x + len(losses) + 1))
        ax.plot(xs, losses, markersize=3.5, linewidth=1.3, **styles[phase], label=None if phase in labelled else phase)
        labelled.add(phase)
        x += len(losses)
    starts, x = [], 0
    for _, _, epochs in spans:
        starts.append(x)
        x += epochs
    for s in starts[1:]:
        ax.axvline(s + 0.5, color="0.45", linewidth=0.8, linestyle=":")
    ax.set_xlim(0.5, x + 0.5)
    values = [v for _, _, _, losses in segments for v in losses if v == v]
    if values and min(values) > 0 and max(values) / min(values) >= 20:
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    top = ax.secondary_xaxis("top")
    rotate = len(spans) > 8 or max(len(t) for _, t, _ in spans) > 8
    top.set_xticks(
        [s + e / 2 + 0.5 for s, (_, _, e) in zip(starts, spans, strict=True)],
        [f"{i + 1}: {t}" for i, t, _ in spans],
        fontsize=7,
        rotation=30 if rotate else 0,
        ha="left" if rotate else "center",
    )
    top.tick_params(length=0)
    ax.set_xlabel("epoch (counted across tasks; dotted lines: task boundaries)")
    ax.set_ylabel("mean training loss of the epoch")
    seed = data.get("seed")
    ax.set_title(
        f"{data.get('method')} · {data.get('stream')} · order {data.get('order')} · seed {seed}: "
        "loss per epoch, by task",
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    if len(styles) > 1:
        title = "phase" if run_order else "phase\n(alphabetical,\nnot run order)"
        fig.legend(title=title, loc="outside right upper", fontsize=7.5, title_fontsize=7.5, frameon=False)
    return fig


def loss_curve(result: CellResult | Mapping[str, Any], path: Path) -> Path | None:
    """The per-epoch mean loss of every phase (``timings["tasks"][i][phase]["loss"]``), epochs counted
    across tasks, a dotted line at each task boundary and the task named above it. ``None`` (nothing
    written) for a result without that field."""
    fig = loss_curve_figure(result)
    return None if fig is None else _save(fig, path)


# ----------------------------------------------------------------------------------------------- sweeps


def sweep_label(method: str) -> tuple[str, dict[str, str]] | None:
    """``"lps@beta=0.5"`` → ``("lps", {"beta": "0.5"})``; ``None`` for a label without a sweep."""
    base, sep, rest = method.partition("@")
    if not sep or not rest:
        return None
    pairs = {}
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key:
            return None
        pairs[key] = value
    return base, pairs


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def sweep_series(
    results: Iterable[CellResult], stream: str, metric: str = "AA"
) -> dict[tuple[str, str, str], list[tuple[float, list[float]]]]:
    """Per (method, swept key, the other sweep settings): (value, metric of every complete cell) by value.

    Only numeric values of a key count, and only series with two or more values (a line needs two points).
    """
    cells: dict[tuple[str, str, str], dict[float, list[float]]] = {}
    for r in results:
        parsed = sweep_label(r.method)
        if r.stream != stream or r.status != "complete" or parsed is None or r.metrics.get(metric) is None:
            continue
        base, pairs = parsed
        for key, value in pairs.items():
            x = _number(value)
            if x is None:
                continue
            rest = ",".join(f"{k}={v}" for k, v in pairs.items() if k != key)
            cells.setdefault((base, key, rest), {}).setdefault(x, []).append(float(cast(float, r.metrics[metric])))
    return {k: sorted(v.items()) for k, v in sorted(cells.items()) if len(v) >= 2}


def sweep_diverged(results: Iterable[CellResult], stream: str) -> dict[tuple[str, str, str], dict[float, int]]:
    """Per (method, swept key, the other sweep settings): how many cells of each value diverged."""
    out: dict[tuple[str, str, str], dict[float, int]] = {}
    for r in results:
        parsed = sweep_label(r.method)
        if r.stream != stream or r.status != "diverged" or parsed is None:
            continue
        base, pairs = parsed
        for key, value in pairs.items():
            x = _number(value)
            if x is not None:
                rest = ",".join(f"{k}={v}" for k, v in pairs.items() if k != key)
                counts = out.setdefault((base, key, rest), {})
                counts[x] = counts.get(x, 0) + 1
    return out


def sweep_plots(results: Iterable[CellResult], directory: Path, prefix: str, metric: str = "AA") -> list[Path]:
    """One PNG per (stream, method, swept key): ``metric`` (mean ± std over cells) against the key's value.

    Any numeric sweep label ``method@key=value`` qualifies, e.g. ``clbench run --methods lps --set
    lps.beta=0.5,0.7,0.9`` gives AA against β (the LPS paper's share-ratio figure). Other sweep settings
    of the label, if any, tell the lines apart.
    """
    results = list(results)
    written = []
    for stream in sorted({r.stream for r in results}):
        series = sweep_series(results, stream, metric)
        diverged = sweep_diverged(results, stream)
        for base, key in sorted({(b, k) for b, k, _ in series}):
            plt = _pyplot()
            lines = {rest or base: points for (b, k, rest), points in series.items() if (b, k) == (base, key)}
            styles = line_styles(lines)
            fig = plt.figure(figsize=(6.4, 3.8), layout="constrained")
            ax = fig.add_subplot()
            ticks: set[float] = set()
            for label in sorted(lines):
                points = lines[label]
                xs = [x for x, _ in points]
                ticks.update(xs)
                means = [sum(v) / len(v) for _, v in points]
                stds = [_sample_std(v) if len(v) > 1 else float("nan") for _, v in points]  # no bar for one
                ax.errorbar(xs, means, yerr=stds, markersize=5, capsize=3, label=label, **styles[label])
                rest = "" if label == base else label
                for x, count in sorted(diverged.get((base, key, rest), {}).items()):  # a blow-up is a result
                    ticks.add(x)
                    ax.plot([x], [0.0], marker="X", color="tab:red", markersize=9, linestyle="none", clip_on=False)
                    ax.annotate(
                        f"diverged: {count}",
                        (x, 0.0),
                        textcoords="offset points",
                        xytext=(4, 6),
                        fontsize=7,
                        color="tab:red",
                    )
            if ticks and min(ticks) > 0 and max(ticks) >= 20 * min(ticks):  # λ = 3 … 1000: a log axis
                ax.set_xscale("log")
            if len(ticks) <= 12:
                ax.set_xticks(sorted(ticks), [f"{t:g}" for t in sorted(ticks)])
            ax.set_xlabel(key)
            ax.set_ylabel(f"{metric} (%)")
            pooled = any(len(v) > 1 for points in lines.values() for _, v in points)
            spread = "mean ± sample std over the cells of a value" if pooled else "one cell per value: no error bars"
            ax.set_title(f"{stream}: {base}, {metric} against {key}\n{spread}", fontsize=9)
            ax.grid(alpha=0.3)
            if len(lines) > 1 or next(iter(lines)) != base:
                fig.legend(loc="outside right upper", fontsize=7.5, frameon=False)
            written.append(_save(fig, directory / f"{prefix}-{stream}-{base}-{key}.png"))
    return written
