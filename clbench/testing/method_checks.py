"""check_method: a method's two-task cell, its footprints, and its resume after a kill."""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast, get_args

import pytest

from clbench import footprints as fps
from clbench._core.boundary import CheckedMethod
from clbench._core.registry import Registries
from clbench._core.results import read_result
from clbench.cell import CHECKPOINT_FILE, FOOTPRINT_FILE, RESULT_FILE, CellResult
from clbench.errors import CheckpointDiscardedWarning, ClbenchError
from clbench.hookspecs import hookimpl
from clbench.specs import FootprintKind
from clbench.testing.contract import _check_matrix, _complete, _fail, _require, _who
from clbench.testing.running import KillAfterTask, fitting_stream, run

_FOOTPRINT_CLASSES: dict[str, type] = {"lowrank": fps.LowRank, "masked": fps.Masked, "dense": fps.Dense}


def check_method(regs: Registries, method: str, tmp: Path, check_resume: bool = True) -> CellResult:
    """Run ``method`` on a two-task tiny stream and check the result contract; returns the result.

    Checks: the cell completes; the matrix is 2×2 of scores in [0, 100]; metrics are finite or None;
    every task's footprint, read back from ``footprints.safetensors``, is of the kind the MethodSpec
    declares (``lowrank``: LowRank, ``masked``: Masked, ``dense``: Dense, ``none``: empty); and
    (``check_resume``) a cell killed after its first task resumes from the checkpoint (``state_dict`` /
    ``load_state_dict`` round trip) and ends with the same matrix, metrics and footprints.
    """
    stream = fitting_stream(regs, method)
    if stream is None:
        pytest.skip(f"no tiny test model meets the requirements of {method!r}")
    what = f"{_who(regs, 'method', method)} on {stream!r}"
    with _loss_terms_seen() as seen:
        [result] = run(regs, tmp / "a", method, stream, fail_fast=True)
    _complete(result, what)
    _check_gradients(seen, what)
    assert result.path is not None
    try:  # the runner does not validate what it writes: the method's report() and metrics land in the file
        read_result(result.path)
    except ClbenchError as exc:
        _fail(f"{what}: its result.json does not validate: {exc}")
    T = len(result.tasks)
    _require(T == 2, f"{what}: {T} tasks recorded, expected the tiny stream's 2")
    _check_matrix(result, list(result.tasks), what)
    if "AA" in result.metrics:
        _require(
            result.metrics["AA"] == pytest.approx(sum(cast("list[float]", result.accuracy_matrix[-1])) / T),
            f"{what}: AA {result.metrics['AA']} is not the mean of the last row {result.accuracy_matrix[-1]}",
        )
    for name, value in result.metrics.items():
        _require(value is None or math.isfinite(value), f"{what}: metric {name!r} is {value!r}")
    _check_footprint_kind(regs, method, result, what)
    if check_resume:
        _check_resume(regs, method, stream, tmp / "b", result)
    return result


@contextlib.contextmanager
def _loss_terms_seen() -> Iterator[dict[str, tuple[bool, bool]]]:
    """Every loss term the runner receives while the context is open: name → (declared in the method's
    ``value_only_terms``, carried a gradient at least once)."""
    seen: dict[str, tuple[bool, bool]] = {}
    checked = CheckedMethod.loss_terms

    def observe(self: CheckedMethod, batch: Any, logits: Any) -> Any:
        terms = checked(self, batch, logits)
        for name, term in terms.items():
            graph = seen.get(name, (False, False))[1]
            seen[name] = (name in self.method.value_only_terms, graph or term.requires_grad)
        return terms

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CheckedMethod, "loss_terms", observe)
        yield seen


def _check_gradients(seen: dict[str, tuple[bool, bool]], what: str) -> None:
    """A loss term carries its gradient, unless the method declares it value-only (``Method.value_only_terms``:
    its gradient added in ``after_backward``); a term that never carries one would add nothing to training."""
    for name, (value_only, graph) in seen.items():
        _require(
            value_only or graph,
            f"{what}: loss_terms[{name!r}] never carried a gradient (no autograd graph): compute it from the "
            "parameters, or list it in the method's value_only_terms and add its gradient in after_backward",
        )


def _check_footprint_kind(regs: Registries, method: str, result: CellResult, what: str) -> None:
    """Every task's footprint, as stored, is of the kind ``MethodSpec.footprint_kind`` declares."""
    kind = regs.methods.get(method).footprint_kind
    _require(
        kind in get_args(FootprintKind),
        f"{what}: MethodSpec.footprint_kind={kind!r} is not one of {list(get_args(FootprintKind))}",
    )
    assert result.path is not None
    path = result.path.parent / FOOTPRINT_FILE
    _require(path.exists(), f"{what}: no {FOOTPRINT_FILE} beside {result.path}")
    saved = fps.load(path, result.footprints)
    _require(
        len(saved) == len(result.tasks),
        f"{what}: {path.name} holds {len(saved)} task footprints for {len(result.tasks)} tasks",
    )
    for index, (task, footprint) in enumerate(zip(result.tasks, saved, strict=True)):
        if kind == "none":
            _require(
                not footprint,
                f"{what}: declares footprint_kind='none' but footprint() of task {task!r} "
                f"(index {index}) returned footprints of {sorted(footprint)[:3]}: return {{}} "
                "from footprint(), or declare the kind it returns in its MethodSpec",
            )
            continue
        want = _FOOTPRINT_CLASSES[kind]
        for name, fp in footprint.items():
            _require(
                isinstance(fp, want),
                f"{what}: declares footprint_kind={kind!r} but footprint() of task {task!r} (index {index}) "
                f"returned {type(fp).__name__} for {name!r}: return clbench.footprints.{want.__name__} "
                f"values, or declare footprint_kind={getattr(fp, 'kind', '?')!r} in its MethodSpec (footprint "
                "metrics such as OO read only the kind a method declares)",
            )
    if kind != "none":
        _require(
            any(saved),
            f"{what}: declares footprint_kind={kind!r} but footprint() returned {{}} for every "
            "task: record what each task changed, or declare footprint_kind='none'",
        )


class _ResumeWatcher:
    """Records the task index each cell starts from (``clbench_cell_start``'s ``resumed_from``)."""

    def __init__(self) -> None:
        self.starts: list[int] = []

    @hookimpl
    def clbench_cell_start(self, cell: Any, resumed_from: int) -> None:
        self.starts.append(resumed_from)


# what the method author must fix for each reason the runner discards a checkpoint (CheckpointDiscardedWarning)
_CHECKPOINT_FIXES = {
    "does-not-fit": "the method's state_dict() did not load back: load_state_dict(state_dict()) must succeed on a freshly "
    "built method right after setup(model), and afterwards the model's state_dict must load too (rebuild any "
    "structure the method added to the model, e.g. adapters of later tasks, in load_state_dict)",
    "unreadable": "the checkpoint could not be read back with torch.load(weights_only=True): state_dict() may hold only "
    "tensors, numbers, strings, None, and lists, tuples, sets and dicts of them (no numpy arrays, dataclasses "
    "or other objects)",
    "other-settings": "the cell's settings hash changed between two runs: a setting of the method is not deterministic",
    "other-code": "the code digest of the method, model or stream changed between two runs in one process: their source "
    "files must not change while the test runs",
}


def _check_resume(regs: Registries, method: str, stream: str, out: Path, reference: CellResult) -> None:
    """Kill the cell after its first task (as Ctrl-C would), rerun: it must resume from that task's
    checkpoint (not start over) and end with the same matrix, metrics and footprints."""
    label = _who(regs, "method", method) if method in regs.methods else f"method {method!r}"  # or "a+b"
    what = f"{label} on {stream!r}"
    killer = KillAfterTask(0)
    regs.pm.register(killer)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(regs, out, method, stream, fail_fast=True)
    finally:
        regs.pm.unregister(killer)
    _require(any(out.rglob(CHECKPOINT_FILE)), f"{what}: no checkpoint was left after the first task")
    _require(not any(out.rglob(RESULT_FILE)), f"{what}: a killed cell must not write result.json")
    watcher = _ResumeWatcher()
    regs.pm.register(watcher)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            [resumed] = run(regs, out, method, stream, fail_fast=True)
    finally:
        regs.pm.unregister(watcher)
    for w in caught:
        if isinstance(w.message, CheckpointDiscardedWarning):
            fix = _CHECKPOINT_FIXES.get(w.message.reason, "the runner could not use the checkpoint")
            _fail(
                f"{what}: the cell killed after task 1 did not resume, it started over: {fix}.\n"
                f"The runner said: {w.message}"
            )
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)  # not ours: pass on
    _require(
        watcher.starts == [1],
        f"{what}: the cell killed after task 1 started again from task "
        f"{watcher.starts[0] + 1 if watcher.starts else '?'} instead of resuming at task 2",
    )
    _complete(resumed, f"{what}, resumed after task 1,")
    _require(
        resumed.accuracy_matrix == reference.accuracy_matrix,
        f"{what}: the resumed cell's matrix {resumed.accuracy_matrix} differs from the uninterrupted "
        f"{reference.accuracy_matrix}: state_dict() must hold everything later tasks depend on (Fisher "
        "information, masks, replay buffers, anchors) and draw randomness only from ctx.generator(...)",
    )
    _require(
        resumed.metrics == reference.metrics,
        f"{what}: the resumed cell's metrics {resumed.metrics} differ from the uninterrupted {reference.metrics}",
    )
    if resumed.footprints and reference.footprints:
        _require(
            resumed.footprints.get("sha256") == reference.footprints.get("sha256"),
            f"{what}: the resumed cell's footprints differ from the uninterrupted cell's: state_dict() must "
            "restore what footprint() of later tasks reads",
        )
