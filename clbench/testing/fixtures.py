"""The kit's pytest fixtures, which ``pytest_plugins = ["clbench.testing"]`` registers (the package re-exports them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clbench._core.registry import Registries
from clbench.cell import CellResult
from clbench.testing.running import registry, run


@pytest.fixture
def clbench_registry() -> Registries:
    """A fresh registry per test: installed plugins + the tiny test plugin."""
    return registry()


@pytest.fixture
def run_cell(clbench_registry: Registries, tmp_path: Path):
    """``run_cell("ewc", stream="tiny-vector", sets=...) -> CellResult`` in a temp directory."""

    def _run(method: str, stream: str = "tiny-vector", **kw: Any) -> CellResult:
        return run(clbench_registry, tmp_path / "runs", method, stream, **kw)[0]

    return _run
