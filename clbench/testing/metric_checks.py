"""check_metric: a metric on a complete tiny cell, as recorded, as `clbench metrics` recomputes it, and pure."""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import cast

import torch

from clbench import footprints as fps
from clbench._core.boundary import metric_value
from clbench._core.registry import Registries
from clbench._core.results import read_result
from clbench._tools import verify
from clbench.cell import FOOTPRINT_FILE, CellResult
from clbench.metrics import MetricInput
from clbench.specs import MetricSpec
from clbench.testing.contract import _close, _complete, _fail, _require, _who
from clbench.testing.running import fitting_stream, run


def check_metric(
    regs: Registries, name: str, tmp_path: Path, *, method: str | None = None, stream: str | None = None
) -> CellResult:
    """Check metric ``name`` on a complete tiny cell; returns that cell's result (as stored).

    Checks: ``direction`` and ``needs`` are valid; on a cell of ``method`` (default ``seqft``; ``seqlora``
    for a metric that needs low-rank footprints) the metric is recorded in result.json as a finite number
    or None, raised nothing, is reproduced by ``clbench metrics`` (:func:`clbench._tools.verify.recompute`) twice,
    leaves its input unchanged, and a ``needs="matrix"`` or ``"report"`` metric gives the same value
    without footprints (``clbench metrics`` recomputes only those when the footprint file is gone).
    """
    spec = regs.metrics.get(name)
    who = _who(regs, "metric", name)
    _require(isinstance(spec.name, str) and spec.name, f"{who}: MetricSpec.name must be a non-empty string")
    _require(callable(spec.fn), f"{who}: MetricSpec.fn is {type(spec.fn).__name__}, expected a function")
    # direction, needs and aggregate: the registry refused the spec at registration when they are out of their words
    if method is None:
        method = "seqlora" if spec.needs == "lowrank" and "seqlora" in regs.methods else "seqft"
    stream = stream or fitting_stream(regs, method)
    _require(stream is not None, f"check_metric: no tiny stream fits method {method!r}; pass stream='NAME'")
    assert stream is not None
    [result] = run(regs, tmp_path / "check-metric", method, stream)
    _complete(result, f"the {method} cell on {stream!r} that check_metric runs {who} on")
    assert result.path is not None
    stored = read_result(result.path)
    fix = "fn(inp) must return a finite float, or None when the metric does not apply"
    if name in stored.metric_errors:
        _fail(f"{who} failed on a complete {method} cell: {stored.metric_errors[name].removeprefix(who + ': ')}; {fix}")
    _require(name in stored.metrics, f"{who} is not recorded in {result.path}")
    value = stored.metrics[name]
    _require(
        value is None or (isinstance(value, float) and math.isfinite(value)),
        f"{who}: result.json records {value!r}; {fix}",
    )
    _require(
        value == result.metrics.get(name),
        f"{who}: result.json records {value!r}, the run returned {result.metrics.get(name)!r}",
    )

    for attempt in ("", " again"):
        recomputed, errors, _ = verify.recompute(regs, stored)
        _require(
            name not in errors,
            f"{who}: `clbench metrics` recomputing it from result.json and "
            f"{FOOTPRINT_FILE}{attempt} fails: {errors.get(name)}",
        )
        _require(
            _close(recomputed.get(name), value),
            f"{who}: `clbench metrics` recomputes it{attempt} from result.json and {FOOTPRINT_FILE} as "
            f"{recomputed.get(name)!r}, but the run recorded {value!r}: the value must depend only on the "
            "MetricInput (matrix, footprints, report, tasks and the metrics settings), deterministically",
        )

    _check_pure(spec, verify._metric_input(stored), value, who)
    return stored


def _check_pure(spec: MetricSpec, inp: MetricInput, value: float | None, who: str) -> None:
    """``spec.fn`` leaves its input unchanged, and a metric that needs only the matrix (or the report) gives
    ``value`` without the footprints (and the report)."""
    before = (
        copy.deepcopy(inp.matrix),
        copy.deepcopy(inp.report),
        list(inp.tasks),
        fps.to_tensors(inp.footprints) if inp.footprints else None,
    )
    metric_value(spec.fn(inp))
    after_footprints = fps.to_tensors(inp.footprints) if inp.footprints else None
    _require(
        inp.matrix == before[0]
        and inp.report == before[1]
        and inp.tasks == before[2]
        and (before[3] is None) == (after_footprints is None)
        and (
            before[3] is None
            or all(torch.equal(v, cast("dict[str, torch.Tensor]", after_footprints)[k]) for k, v in before[3].items())
        ),
        f"{who}: fn(inp) changed its input (matrix, report, tasks or footprints); the metrics of a cell share "
        "one MetricInput, so a metric must not modify it",
    )
    if spec.needs in ("matrix", "report"):
        # the same input and settings, without footprints (and without the report for needs="matrix")
        bare = dataclasses.replace(
            inp,
            matrix=copy.deepcopy(inp.matrix),
            footprints=None,
            tasks=list(inp.tasks),
            report=copy.deepcopy(inp.report) if spec.needs == "report" else {},
            cache={},
        )
        try:
            without = metric_value(spec.fn(bare))
        except Exception as exc:
            raise AssertionError(
                f"{who}: declares needs={spec.needs!r} but raises without footprints"
                f"{'' if spec.needs == 'report' else ' or report'} ({type(exc).__name__}: {exc}); "
                "declare needs='footprint' (or 'report') if it reads them"
            ) from exc
        _require(
            _close(without, value),
            f"{who}: declares needs={spec.needs!r} but gives {without!r} without footprints"
            f"{'' if spec.needs == 'report' else ' or report'} and {value!r} with them; declare the needs it "
            "has ('footprint', 'lowrank' or 'report'): `clbench metrics` recomputes matrix and report metrics "
            "when the footprint file is absent",
        )
