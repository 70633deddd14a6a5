"""Results you can trust: every fault of ``tests/faultsuite.py`` ends as it must (exit code, the line the user
sees, no traceback, what survives on disk), ``docs/faults.md`` is what the suite produces, and the few
checks that are not one scenario each (the run summary, folder names, duplicate cells, tolerances).

Regenerate the doc with ``python docs/gen_faults.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.register_assert_rewrite("faultsuite")

import faultsuite  # noqa: E402
from faultsuite import FAULTS, Fault, outcome  # noqa: E402

from clbench import testing  # noqa: E402
from clbench._cli.main import summary  # noqa: E402
from clbench._core.plan import RunRequest, make_plan  # noqa: E402
from clbench.cell import ERROR_LOG, TEST_PROFILE, CellResult, path_component  # noqa: E402  # noqa: E402
from clbench.errors import ConfigError  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "faults.md"


@pytest.fixture(scope="session")
def fault_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults")


def _fault_params() -> list:
    """Each fault, slow (deselected by default) unless it is the first of its family (the word its id starts
    with: rerun-..., checkpoint-..., metrics-...): the fast loop still meets every kind of fault once."""
    first: dict[str, str] = {}
    for f in FAULTS:
        first.setdefault(f.id.split("-")[0], f.id)
    slow = {f.id for f in FAULTS if first[f.id.split("-")[0]] != f.id} | {"sigterm"}  # sigterm: waits seconds
    return [pytest.param(f, id=f.id, marks=[pytest.mark.slow] if f.id in slow else []) for f in FAULTS]


@pytest.mark.parametrize("fault", _fault_params())
def test_fault_is_handled(fault: Fault, fault_base: Path) -> None:
    o = outcome(fault, fault_base)
    assert o.code == fault.exit_code, o.stderr
    assert fault.sees in o.stderr, o.stderr
    assert "Traceback" not in o.stderr, o.stderr
    fault.check(o)  # what survives on disk


def test_fault_ids_are_unique_and_every_fault_says_what_survives() -> None:
    ids = [f.id for f in FAULTS]
    assert len(ids) == len(set(ids))
    assert all(f.what and f.sees and f.survives for f in FAULTS)


# ------------------------------------------------------------------------------------------- summary
def _result(status: str, error: str | None = None, path: Path | None = None) -> CellResult:
    return CellResult("ewc", "tiny-vector", "1", 0, ["t0"], [[None]], status=status, error=error, path=path)


def test_summary_exit_codes_and_lines(tmp_path: Path) -> None:
    assert summary([_result("complete"), _result("diverged", "loss became nan")]) == (
        ["diverged: tiny-vector/ewc/order-1/seed-0: loss became nan",
         "clbench: 2 cells: 1 complete, 1 diverged; 0 reused; exit 0"], 0)
    (tmp_path / ERROR_LOG).write_text("Traceback ...")
    assert summary([_result("failed", "RuntimeError: x", tmp_path / "result.json"), _result("failed", "y")]) == (
        [f"failed: tiny-vector/ewc/order-1/seed-0: RuntimeError: x (traceback: {tmp_path / ERROR_LOG})",
         "failed: tiny-vector/ewc/order-1/seed-0: y",
         "clbench: 2 cells: 2 failed; 0 reused; exit 1"], 1)
    assert summary([_result("complete")], ["observer clbench_run_end raised"]) == (
        ["fault: observer clbench_run_end raised", "clbench: 1 cell: 1 complete; 0 reused; 1 observer fault; exit 1"], 1)


# ------------------------------------------------------------------------------------------- folders
def test_folder_names_never_leave_the_output_folder_and_never_collide() -> None:
    nasty = ["..", ".", "a/b", "../../x", "..\\..\\x", "/etc", "%2F", "%", "cuda:7", "ewc@lambda=1", "é", "a b"]
    names = [path_component(t) for t in nasty]
    assert len(set(names)) == len(names), names
    for name in names:
        assert name not in ("", ".", "..") and "/" not in name and "\\" not in name, name
    assert path_component("ewc@lambda=1") == "ewc@lambda=1"  # ordinary labels are kept as they are


# A value given twice (`--orders 1,1`, `--seeds 0,0`, `--set ewc.lambda=1,1`, `--methods ewc,ewc`) would plan two
# cells for one folder (trained twice, averaged with itself as if two seeds): the plan refuses it.
@pytest.mark.parametrize("request_", [
    dict(orders=["1", "1"]),
    dict(seeds=[0, 0]),
    dict(sets={"ewc.lambda": [1.0, 1.0]}),
    dict(methods="ewc,ewc"),
], ids=["orders", "seeds", "sweep", "methods"])
def test_a_plan_never_holds_two_cells_for_one_folder(request_: dict, tmp_path: Path) -> None:
    req = RunRequest(**{"profile": TEST_PROFILE, "methods": "ewc", "streams": ["tiny-vector"], "out": tmp_path,
                        **request_})
    try:
        plan = make_plan(testing.registry(), req)
    except ConfigError:
        return  # refusing the duplicate is an answer too
    folders = [c.directory for c in plan.cells]
    assert len(folders) == len(set(folders)), [c.key for c in plan.cells]


# ------------------------------------------------------------------------------------------- compare
def test_compare_within_the_tolerance_passes(fault_base: Path) -> None:
    [moved] = [f for f in FAULTS if f.id == "compare-moved-entry"]
    o = outcome(moved, fault_base)  # one matrix entry moved by 2 points
    again = faultsuite.clbench(o.tmp, "compare", str(faultsuite.out_of(o.tmp)), str(o.tmp / "moved"), "--atol", "2.5")
    assert again.code == 0, again.stderr
    assert "1 within tolerance, 0 beyond it (atol 2.5 pp, rtol 0); 0 missing" in again.stderr
    assert faultsuite.table_rows(again.stdout)[1:] == [["tiny-vector/ewc/order-1/seed-0", "2.00", "identical", "ok"]]


# ------------------------------------------------------------------------------------------- the doc
@pytest.mark.slow  # renders every fault's outcome, the slow ones too
def test_docs_faults_md_is_what_the_suite_produces(fault_base: Path) -> None:
    expected = faultsuite.render(fault_base)
    assert DOC.exists(), "docs/faults.md is missing: run `python docs/gen_faults.py`"
    assert DOC.read_text(encoding="utf-8") == expected, "docs/faults.md is stale: run `python docs/gen_faults.py`"
