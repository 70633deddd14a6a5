"""The Ray executor on a local Ray (2 CPUs) gives the local executor's numbers, and resumes the same way."""

from __future__ import annotations

import pytest

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._exec.executors import execute

pytestmark = pytest.mark.slow  # a local Ray (tests/conftest.py) takes seconds to start


def _plan(regs, out):
    req = RunRequest(profile="quick", methods="seqft,ewc,replay", streams=["split-digits"], orders=["1", "2"],
                     seeds=[0], sets={"train.epochs": [1]}, out=out)
    return make_plan(regs, req)


def test_ray_grid_equals_local_grid(local_ray, tmp_path):
    regs = testing.registry()
    local = execute(_plan(regs, tmp_path / "local"), regs, progress=False)
    remote = execute(_plan(regs, tmp_path / "ray"), regs, executor="ray", progress=False)
    assert [r.status for r in remote] == ["complete"] * 6
    assert {(r.method, r.order): r.accuracy_matrix for r in remote} == {
        (r.method, r.order): r.accuracy_matrix for r in local}
    # a finished cell is never rerun: the second call only reads results back
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "ray").rglob("result.json")}
    execute(_plan(regs, tmp_path / "ray"), regs, executor="ray", progress=False)
    assert before == {p: p.stat().st_mtime_ns for p in (tmp_path / "ray").rglob("result.json")}
