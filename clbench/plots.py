"""PNG plots: a cell's accuracy-matrix heatmap and a stream's accuracy-over-time curves.

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
