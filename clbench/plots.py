"""PNG plots: a cell's accuracy-matrix heatmap, a stream's accuracy-over-time curves, sweep plots (AA vs a value).

Files are written without timestamps (``metadata={"Software": None}``) so the same results give the
same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clbench.results import CellResult, atomic_write_with

_META = {"Software": None}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmap(result: CellResult, path: Path) -> Path:
    """a[i][j] as an image: rows = after training task i, columns = task j (run order)."""
    import numpy as np

    plt = _pyplot()
    T = len(result.tasks)
    a = np.array([[np.nan if v is None else v for v in row] for row in result.accuracy_matrix], dtype=float)
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * T, 0.8 + 0.5 * T))
    im = ax.imshow(a, vmin=0, vmax=100, cmap="viridis")
    ax.set_xticks(range(T), result.tasks, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(T), [f"after {t}" for t in result.tasks], fontsize=7)
    if T <= 16:
        for i in range(T):
            for j in range(T):
                if not np.isnan(a[i, j]):
                    ax.text(j, i, f"{a[i, j]:.0f}", ha="center", va="center", fontsize=6,
                            color="white" if a[i, j] < 60 else "black")
    ax.set_title(f"{result.method} · {result.stream} · order {result.order} · seed {result.seed}", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046, label="score (%)")
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, metadata=_META))
    plt.close(fig)
    return path


def seen_average(result: CellResult) -> list[float]:
    """Mean score over tasks seen so far after each task: mean_{j≤i} a[i][j]."""
    return [sum(row[: i + 1]) / (i + 1) for i, row in enumerate(result.accuracy_matrix)]


def accuracy_over_time(results: Iterable[CellResult], stream: str, path: Path) -> Path:
    """Per method: mean over its complete cells of the seen-task average after each task."""
    plt = _pyplot()
    curves: dict[str, list[list[float]]] = {}
    for r in results:
        if r.stream == stream and r.status == "complete":
            curves.setdefault(r.method, []).append(seen_average(r))
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in sorted(curves):
        runs = curves[method]
        T = min(len(c) for c in runs)
        mean = [sum(c[i] for c in runs) / len(runs) for i in range(T)]
        ax.plot(range(1, T + 1), mean, marker="o", markersize=3, label=method)
    ax.set_xlabel("tasks trained")
    ax.set_ylabel("mean score on tasks seen (%)")
    ax.set_title(f"{stream}: accuracy over time (forgetting shows as a falling curve)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, metadata=_META))
    plt.close(fig)
    return path


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


def sweep_series(results: Iterable[CellResult], stream: str, metric: str = "AA"
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
            cells.setdefault((base, key, rest), {}).setdefault(x, []).append(float(r.metrics[metric]))
    return {k: sorted(v.items()) for k, v in sorted(cells.items()) if len(v) >= 2}


def sweep_plots(results: Iterable[CellResult], directory: Path, prefix: str, metric: str = "AA") -> list[Path]:
    """One PNG per (stream, method, swept key): ``metric`` (mean ± std over cells) against the key's value.

    Any numeric sweep label ``method@key=value`` qualifies, e.g. ``clbench run --methods lps --set
    lps.beta=0.5,0.7,0.9`` gives AA against β (the LPS paper's share-ratio figure). Other sweep settings
    of the label, if any, tell the lines apart.
    """
    import math

    results = list(results)
    written = []
    for stream in sorted({r.stream for r in results}):
        series = sweep_series(results, stream, metric)
        for base, key in sorted({(b, k) for b, k, _ in series}):
            plt = _pyplot()
            fig, ax = plt.subplots(figsize=(5, 3.6))
            for (b, k, rest), points in series.items():
                if (b, k) != (base, key):
                    continue
                xs = [x for x, _ in points]
                means = [sum(v) / len(v) for _, v in points]
                stds = [math.sqrt(sum((a - m) ** 2 for a in v) / (len(v) - 1)) if len(v) > 1 else 0.0
                        for (_, v), m in zip(points, means, strict=True)]
                ax.errorbar(xs, means, yerr=stds, marker="o", markersize=4, capsize=3, label=rest or base)
            ax.set_xlabel(key)
            ax.set_ylabel(f"{metric} (%)")
            ax.set_title(f"{stream}: {base}, {metric} against {key} (mean ± std over cells)", fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
            fig.tight_layout()
            path = directory / f"{prefix}-{stream}-{base}-{key}.png"
            atomic_write_with(path, lambda tmp, fig=fig: fig.savefig(tmp, format="png", dpi=110, metadata=_META))
            plt.close(fig)
            written.append(path)
    return written
