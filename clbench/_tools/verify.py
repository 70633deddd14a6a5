"""Committed results checked against the code: metrics recomputed from the stored footprints and matrices
(``clbench metrics``), cells rerun from their recorded settings (``clbench verify``), and two result
trees compared within a tolerance (``clbench compare``).

Tolerances are in the numbers' own units: ``atol`` in percentage points for accuracy-matrix entries and the
metrics computed from the matrix alone (``MetricSpec.needs == "matrix"``: AA, F.Ra, BWT, unseen — scores in
percent), and ``rtol`` relative for every other metric (|Δ| ≤ rtol·max(|old|, |new|)).
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import torch

from clbench import config as cfg
from clbench import footprints as fps
from clbench._core import provenance
from clbench._core.boundary import compute_metrics
from clbench._core.cells import cell_from_result
from clbench._core.registry import Registries
from clbench._core.results import scan, write_result
from clbench.cell import FOOTPRINT_FILE, CellResult
from clbench.errors import ClbenchError, ConfigError, ResultFileError
from clbench.metrics import MetricInput


def percent_metrics(regs: Registries) -> frozenset[str]:
    """Metrics computed from the accuracy matrix alone: percentages, compared with ``atol``."""
    return frozenset(s.name for s in regs.metrics.values() if s.needs == "matrix")


RECOMPUTE_RTOL = 1e-9  # same code, same inputs: only float summation order may differ


@dataclass
class Delta:
    """How one cell differs between two sets of numbers."""

    key: str
    matrix: float  # max |Δ a[i][j]| in percentage points (0 when identical)
    metrics: dict[str, tuple[float | None, float | None]]  # metric -> (old, new) where they differ
    note: str = ""
    other_code: list[str] = field(default_factory=list)  # what made the two differently (provenance.differences)

    def within(self, atol: float, rtol: float, percent: frozenset[str]) -> bool:
        if self.note or self.matrix > atol:
            return False
        return all(_close(name in percent, a, b, atol, rtol) for name, (a, b) in self.metrics.items())


def _close(is_percent: bool, a: float | None, b: float | None, atol: float, rtol: float) -> bool:
    if a is None or b is None:
        return a is b
    if is_percent:
        return abs(a - b) <= atol
    return abs(a - b) <= rtol * max(abs(a), abs(b)) or a == b


def metric_settings(result: CellResult) -> cfg.MetricsConfig:
    """The metrics settings a result records, with the defaults of forms it predates."""
    return cfg.apply(cfg.MetricsConfig, None, result.config.get("metrics", {}), "metrics")


def _metric_input(result: CellResult) -> MetricInput:
    """The inputs a result's metrics were computed from; ``footprints`` is None when the file is absent."""
    if result.path is None:
        raise ResultFileError(f"{result.key}: a result read from a file is needed")
    footprints = None
    path = result.path.parent / FOOTPRINT_FILE
    if path.exists():
        footprints = fps.load(path, result.footprints)  # schema 1 records no digest: read as it is
    settings = metric_settings(result)
    if settings.device != "cpu" and not torch.cuda.is_available():
        # AWOM computed on a GPU, checked here on the CPU's LAPACK: the two agree to ~1e-12, far inside the tolerance
        settings = replace(settings, device="cpu")
    report = {k: v for k, v in result.report.items() if k != "metric_errors"}  # schema 1 kept errors there
    matrix = [[float(cast(float, v)) for v in row] for row in result.accuracy_matrix]  # complete: no nulls
    return MetricInput.with_settings(
        settings,
        matrix=matrix,
        footprints=footprints,
        report=report,
        tasks=list(result.tasks),
        initial=result.initial_row,
        scenario=result.scenario,
    )


def recompute(regs: Registries, result: CellResult) -> tuple[dict[str, float | None], dict[str, str], bool]:
    """The metrics of a complete result, recomputed from its matrix, report and footprint file, and whether
    the footprint file was there: without it only the metrics that need no footprint are recomputed."""
    inp = _metric_input(result)
    has_footprints = inp.footprints is not None or result.footprints is None
    specs = [s for s in regs.metrics.values() if has_footprints or s.needs in ("matrix", "report")]
    # with the cell's own thread count, as the runner computed them: a float64 QR or eigensolve split over
    # two threads rounds differently from one
    threads = torch.get_num_threads()
    torch.set_num_threads(int(result.config.get("train", {}).get("threads", 1)))
    try:
        metrics, errors = compute_metrics(specs, inp, regs.metrics.origins)
    finally:
        torch.set_num_threads(threads)
    return metrics, errors, has_footprints


def matrix_metrics(regs: Registries, result: CellResult) -> dict[str, float | None]:
    """The metrics of a complete result that need only its accuracy matrix (AA, F.Ra, BWT, ...: ``needs="matrix"``),
    recomputed from the stored matrix: what a table ranks by, whatever number the file stores."""
    matrix = [[float(cast(float, v)) for v in row] for row in result.accuracy_matrix]
    inp = MetricInput.with_settings(
        metric_settings(result),
        matrix=matrix,
        footprints=None,
        report={},
        tasks=list(result.tasks),
        initial=result.initial_row,
        scenario=result.scenario,
    )
    specs = [s for s in regs.metrics.values() if s.needs == "matrix"]
    return compute_metrics(specs, inp, regs.metrics.origins)[0]


def with_matrix_metrics(regs: Registries, results: Iterable[CellResult]) -> tuple[list[CellResult], list[str]]:
    """``results`` with each complete one's matrix metrics recomputed from its matrix (:func:`matrix_metrics`), and
    a line for each result whose stored value of one differs (edited by hand, or made by other metric code)."""
    out, differ = [], []
    for r in results:
        if r.status != "complete" or not r.accuracy_matrix:
            out.append(r)
            continue
        fresh = {k: v for k, v in matrix_metrics(regs, r).items() if v is not None or k in r.metrics}
        moved = [k for k, v in fresh.items() if k in r.metrics and not _close(True, r.metrics[k], v, 1e-9, 0.0)]
        if moved:
            where = r.path or r.key
            differ.append(
                f"{where}: " + ", ".join(f"{k} stored {r.metrics[k]} but its matrix gives {fresh[k]}" for k in moved)
            )
        out.append(replace(r, metrics={**r.metrics, **fresh}))
    return out, differ


@dataclass
class Recomputed:
    deltas: list[Delta]  # cells whose stored metrics differ, or whose footprint file is unreadable
    checked: int  # complete cells recomputed
    without_footprints: list[str]  # cells whose footprint file is absent: matrix metrics only
    problems: list[str] = field(default_factory=list)  # results that could not be read (clbench._core.results.scan)


def unloaded_metrics(regs: Registries, results: Iterable[CellResult]) -> dict[str, int]:
    """Metric → how many of ``results`` store it while no loaded plugin computes it (disabled or uninstalled)."""
    out: dict[str, int] = {}
    for r in results:
        for name in set(r.metrics) | set(r.metric_errors):
            if name not in regs.metrics:
                out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def recompute_tree(regs: Registries, roots: Iterable[Path], write: bool) -> Recomputed:
    """Recompute every complete result under ``roots``. With ``write``, store the recomputed metrics in each
    result.json (never for a cell whose footprint file is absent: its footprint metrics stay as recorded).

    A stored metric whose plugin is not loaded now is a :class:`~clbench.errors.ClbenchError` before anything is
    read further or written: recomputing would replace its value by "absent"."""
    scans = [scan(root) for root in roots]
    out = Recomputed([], 0, [], [p for s in scans for p in s.problems])
    complete = [r for s in scans for r in s.results if r.status == "complete"]
    unloaded = unloaded_metrics(regs, complete)
    if unloaded:
        n = max(unloaded.values())
        listed = f"{', '.join(unloaded)} (stored in {n} result{'s' if n > 1 else ''})"
        raise ClbenchError(
            f"no loaded plugin computes the stored metrics {listed}: a metric plugin is disabled "
            "(-p no:NAME, CLBENCH_DISABLE_PLUGIN_AUTOLOAD) or uninstalled; nothing was "
            f"{'written' if write else 'checked'}. Load it and run again"
        )
    metric_code = provenance.metric_code(regs)
    for result in complete:
        try:
            metrics, errors, whole = recompute(regs, result)
        except ResultFileError as exc:
            out.deltas.append(Delta(result.key, 0.0, {}, str(exc)))
            continue
        out.checked += 1
        stored = result.metrics if whole else {k: v for k, v in result.metrics.items() if k in metrics}
        stored_errors = (
            result.metric_errors if whole else {k: v for k, v in result.metric_errors.items() if k in metrics}
        )
        if not whole:
            out.without_footprints.append(result.key)
        delta = Delta(result.key, 0.0, _metric_changes(stored, metrics))
        settings = cfg.to_dict(metric_settings(result))
        if delta.metrics or errors != stored_errors:
            out.deltas.append(delta)
        recorded = result.provenance
        code = {**recorded["code"], **metric_code} if recorded is not None else None
        # written also when only the record of the settings is incomplete: a result written before a metric
        # form existed then names the form its numbers now follow (its config hash stays: IDENTITY_SINCE); and
        # when the metric plugins' code changed: the result then records the code that computed its metrics
        if (
            write
            and whole
            and (
                delta.metrics
                or errors != stored_errors
                or result.config.get("metrics") != settings
                or (recorded is not None and code != recorded["code"])
            )
        ):
            result.metrics, result.metric_errors = metrics, errors
            result.config["metrics"] = settings
            if recorded is not None and code is not None:
                result.provenance = {**recorded, "code": dict(sorted(code.items()))}
            assert result.path is not None  # recompute() read the result from its file
            write_result(result, result.path.parent)
    return out


def _metric_changes(
    old: Mapping[str, float | None], new: Mapping[str, float | None], rtol: float = RECOMPUTE_RTOL
) -> dict[str, tuple[float | None, float | None]]:
    out = {}
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if (a is None) != (b is None) or (a is not None and b is not None and not math.isclose(a, b, rel_tol=rtol)):
            out[name] = (a, b)
    return out


def compare(a: Mapping[str, CellResult], b: Mapping[str, CellResult]) -> tuple[list[Delta], list[str], list[str]]:
    """Per key present in both (a cell key, or :func:`clbench._core.results.located`), how ``b``'s result differs from
    ``a``'s; and the keys only in a, only in b."""
    deltas = []
    for key in sorted(set(a) & set(b)):
        x, y = a[key], b[key]
        if x.status != y.status:
            why = f": {' '.join(str(y.error).split())[:200]}" if y.error else ""  # a rerun's own failure, named
            deltas.append(Delta(key, math.inf, {}, f"status {x.status} → {y.status}{why}"))
            continue
        if list(x.tasks) != list(y.tasks):  # the matrices are of other tasks: nothing to compare entry by entry
            deltas.append(Delta(key, math.inf, {}, f"task list changed: {', '.join(x.tasks)} → {', '.join(y.tasks)}"))
            continue
        diff = max(
            (
                abs(u - v)
                for ru, rv in zip(x.accuracy_matrix, y.accuracy_matrix, strict=True)
                for u, v in zip(ru, rv, strict=True)
                if u is not None and v is not None
            ),
            default=0.0,
        )
        note = "" if x.config_hash == y.config_hash else "other settings (config hash differs)"
        deltas.append(
            Delta(
                key,
                diff,
                _metric_changes(x.metrics, y.metrics, 0.0),
                note,
                provenance.differences(x.provenance, y.provenance),
            )
        )
    return deltas, sorted(set(a) - set(b)), sorted(set(b) - set(a))


def sample(results: Sequence[CellResult], per_stream: int) -> list[CellResult]:
    """The ``per_stream`` cheapest complete cells of each stream (by recorded time; ties by key)."""
    out = []
    for stream in sorted({r.stream for r in results}):
        cells = [r for r in results if r.stream == stream and r.status == "complete"]
        cells.sort(key=lambda r: (round(float(r.timings.get("total_s", math.inf)), 1), r.key))
        out += cells[:per_stream]
    return out


def stale(regs: Registries, results: Sequence[CellResult]) -> list[tuple[CellResult, list[str]]]:
    """The results not made by the code, data and settings resolution installed now, each with why
    (:meth:`clbench._exec.runner.Runner.changes`, and a recorded configuration that no longer hashes to the cell's
    recorded hash). A result that records no provenance is listed too: nothing shows what made it."""
    from clbench._exec.runner import Runner

    runner = Runner(regs, progress=False)  # its code record is computed once per set of components
    out: list[tuple[CellResult, list[str]]] = []
    for result in results:
        try:
            cell = cell_from_result(regs, result, result.path.parent if result.path else Path("."))
        except ClbenchError as exc:
            out.append((result, [f"its settings no longer resolve: {exc}"]))
            continue
        why: list[str] = []
        if result.config_hash is not None and cell.config_hash != result.config_hash:
            why.append(
                f"its recorded settings now hash to {cell.config_hash[:12]}, not {result.config_hash[:12]} "
                "(a setting's meaning or default changed)"
            )
        changed = runner.changes(result, cell)
        why += ["it records no provenance"] if changed is None else changed
        if why:
            out.append((result, why))
    return out


def rerun(regs: Registries, results: Sequence[CellResult], out: Path | None = None) -> list[CellResult]:
    """Run each result's cell again from its recorded settings into ``out`` (a temp dir by default). A result
    whose settings no longer resolve to its recorded config hash is a ConfigError: the code changed what
    those settings mean (a new setting, another default), so the numbers are not comparable."""
    from clbench._exec.ranks import RankPool
    from clbench._exec.runner import Runner

    runner = Runner(regs, progress=False)
    with tempfile.TemporaryDirectory(prefix="clbench-verify-") as tmp, contextlib.ExitStack() as stack:
        target = Path(out) if out is not None else Path(tmp)
        pools: dict[int, RankPool] = {}  # a data-parallel or sharded cell reruns on as many processes as it ran on
        fresh = []
        for result in results:
            cell = cell_from_result(regs, result, target)
            if result.config_hash is not None and cell.config_hash != result.config_hash:
                raise ConfigError(
                    f"{result.path}: its recorded settings now hash to {cell.config_hash[:12]}, not "
                    f"{result.config_hash[:12]}: the code resolves them differently; rerun the profile"
                )
            ranked = cell.in_ranks(cell.nproc)
            if ranked and cell.nproc not in pools:
                pools[cell.nproc] = stack.enter_context(RankPool(runner, cell.nproc, regs.disabled))
            fresh.append(pools[cell.nproc].run(cell) if ranked else runner.run(cell))
        return fresh


def table(deltas: Sequence[Delta], atol: float, rtol: float, percent: frozenset[str]) -> list[list[str]]:
    """Rows for printing: cell, max |Δa| (pp), metrics that moved, verdict."""
    rows = []
    for d in deltas:
        moved = ", ".join(f"{k} {_num(a)}→{_num(b)}" for k, (a, b) in d.metrics.items())
        verdict = verdict_of(d, atol, rtol, percent)
        if d.other_code:
            moved = (moved or "identical") + "; made by other code or data: " + ", ".join(d.other_code)
        rows.append(
            [d.key, "-" if math.isinf(d.matrix) else f"{d.matrix:.2f}", d.note or moved or "identical", verdict]
        )
    return rows


def verdict_of(d: Delta, atol: float, rtol: float, percent: frozenset[str]) -> str:
    """``ok``; ``other code`` when the numbers moved and the two were made by other code or data (expected: the
    committed result is out of date, not irreproducible); ``DIFFERS`` when the same code gives other numbers."""
    if d.within(atol, rtol, percent):
        return "ok"
    return "other code" if d.other_code and not d.note else "DIFFERS"


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.6g}"
