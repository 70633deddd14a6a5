"""What every contract check shares: a failure that says what the plugin author must fix, how the kit names the
plugin under test, the checks of a cell's status and matrix, and how it compares values."""

from __future__ import annotations

import math
from typing import Any, NoReturn

import torch
from torch import Tensor

from clbench._core.boundary import describe
from clbench._core.registry import Registries
from clbench.cell import ERROR_LOG, CellResult


def _fail(message: str) -> NoReturn:
    """A contract failure: the message says what the plugin author must fix (no assertion rewriting noise)."""
    raise AssertionError(message)


def _require(condition: object, message: str) -> None:
    if not condition:
        _fail(message)


def _who(regs: Registries, kind: str, name: str) -> str:
    """``stream 'x' (plugin 'y', dist 1.0)``: how the kit names the plugin under test in its messages."""
    return f"{kind} {name!r}{describe(regs.kind(kind + 's').origins.get(name))}"


def _complete(result: CellResult, what: str) -> None:
    _require(
        result.status == "complete",
        f"{what} did not complete: status {result.status!r}: {result.error}"
        + (f" (traceback in {result.path.parent / ERROR_LOG})" if result.path is not None else ""),
    )


def _check_matrix(result: CellResult, tasks: list[str], what: str) -> None:
    """T×T accuracy matrix of finite scores in [0, 100], tasks in run order."""
    T = len(tasks)
    _require(list(result.tasks) == list(tasks), f"{what}: the result records tasks {result.tasks}, expected {tasks}")
    matrix = result.accuracy_matrix
    _require(
        len(matrix) == T and all(len(row) == T for row in matrix),
        f"{what}: the accuracy matrix is {len(matrix)}×{[len(r) for r in matrix]}, expected {T}×{T}",
    )
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            _require(
                v is not None and math.isfinite(v) and 0.0 <= v <= 100.0,
                f"{what}: score a[{i}][{j}] (task {tasks[j]!r} after training {tasks[i]!r}) is {v!r}, "
                "expected a number in [0, 100] (Stream.score / Stream.evaluate return percent)",
            )


def _same(a: Any, b: Any) -> bool:
    """Equal values, tensors compared exactly (shape, dtype, entries), lists and tuples item by item."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return (
            isinstance(a, Tensor)
            and isinstance(b, Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b, strict=True))
    return bool(a == b)


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) or a == b
