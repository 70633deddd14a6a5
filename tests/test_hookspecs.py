"""Every hookspec is documented, and lifecycle hooks fire in the documented order."""

from __future__ import annotations

import inspect

import pytest

from clbench import hookspecs, testing
from clbench.hookspecs import hookimpl


def _specs():
    return [f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("clbench_")]


def test_there_are_hookspecs():
    names = {f.__name__ for f in _specs()}
    assert {"clbench_add_methods", "clbench_add_models", "clbench_add_streams", "clbench_add_metrics",
            "clbench_add_executors", "clbench_add_options", "clbench_run_start", "clbench_task_end"} <= names


@pytest.mark.parametrize("spec", _specs(), ids=lambda f: f.__name__)
def test_every_hookspec_is_documented(spec):
    doc = inspect.getdoc(spec) or ""
    assert len(doc) > 40, f"{spec.__name__} needs a docstring saying who calls it, when, and what it returns"
    assert "Called" in doc, f"{spec.__name__}: say who calls it and when ('Called ...')"
    assert hasattr(spec, "clbench_spec"), f"{spec.__name__} is not marked with @hookspec"


class Recorder:
    def __init__(self):
        self.calls = []

    @hookimpl
    def clbench_run_start(self, plan):
        self.calls.append(("run_start", len(plan.cells)))

    @hookimpl
    def clbench_cell_start(self, cell, resumed_from):
        self.calls.append(("cell_start", cell.method, resumed_from))

    @hookimpl
    def clbench_task_start(self, cell, task, index):
        self.calls.append(("task_start", task, index))

    @hookimpl
    def clbench_task_end(self, cell, task, index, accuracy_row):
        self.calls.append(("task_end", task, index, len(accuracy_row)))

    @hookimpl
    def clbench_cell_end(self, cell, result):
        self.calls.append(("cell_end", cell.method, result.status))

    @hookimpl
    def clbench_run_end(self, plan, results):
        self.calls.append(("run_end", len(results)))


def test_lifecycle_call_order(tmp_path):
    rec = Recorder()
    regs = testing.registry(rec)
    testing.run(regs, tmp_path, "seqft,ewc")
    assert rec.calls == [
        ("run_start", 2),
        ("cell_start", "seqft", 0),  # cells run in the order the user named the methods
        ("task_start", "t0", 0), ("task_end", "t0", 0, 2),
        ("task_start", "t1", 1), ("task_end", "t1", 1, 2),
        ("cell_end", "seqft", "complete"),
        ("cell_start", "ewc", 0),
        ("task_start", "t0", 0), ("task_end", "t0", 0, 2),
        ("task_start", "t1", 1), ("task_end", "t1", 1, 2),
        ("cell_end", "ewc", "complete"),
        ("run_end", 2),
    ]
    # A second run finds both cells complete: no cell hooks, results still reported.
    rec.calls.clear()
    testing.run(regs, tmp_path, "seqft,ewc")
    assert rec.calls == [("run_start", 2), ("run_end", 2)]
