"""The equal-steps track, `train.steps_per_task`: every task of every method trains exactly N optimizer steps,
shared among its phases in proportion to their epochs; 0 (the default) leaves each method's own epochs."""

from __future__ import annotations

import pytest

from clbench import testing
from clbench._exec.step import step_shares
from clbench.errors import ClbenchError


@pytest.mark.parametrize(
    ("budget", "epochs", "shares"),
    [
        (10, [3, 3, 2], [4, 4, 2]),  # 3.75, 3.75, 2.5: the two largest remainders get the two steps left
        (5, [1, 0, 9], [1, 0, 4]),  # 0.5, 0, 4.5: a tie of remainders goes to the earlier phase; 0 epochs, 0 steps
        (3, [1, 100], [1, 2]),  # 0.03, 2.97 → 0, 3: a trained phase gets one step, from the largest share
        (7, [2], [7]),
        (4, [], []),  # GDumb: no phase
    ],
)
def test_step_shares_by_hand(budget, epochs, shares):
    assert step_shares(budget, epochs) == shares
    assert sum(shares) == (budget if any(epochs) else 0)


def test_fewer_steps_than_phases_is_refused():
    with pytest.raises(ClbenchError, match="fewer than the task's 3 training phases"):
        step_shares(2, [1, 1, 1])


def _steps(result) -> list[int]:
    """Each task's optimizer steps, all its phases together, from the result's timings."""
    return [sum(t[name]["steps"] for name in t["phases"]) for t in result.timings["tasks"]]


def test_every_method_trains_the_same_steps_a_task(tmp_path):
    """tiny-vector's tasks are 64 examples, 4 batches of 16 an epoch: 11 steps is 2¾ epochs of one phase, and
    PackNet, LPS and LoTA split it among their phases."""
    regs = testing.registry()
    methods = "seqft,ewc,packnet,lps,lota,joint"
    results = testing.run(regs, tmp_path, methods, sets={"train.steps_per_task": [11]})
    assert {r.method for r in results} == set(methods.split(","))
    for r in results:
        assert r.status == "complete", r.error
        assert _steps(r) == [11, 11], r.method
        assert r.config["train"]["steps_per_task"] == 11
    lps = next(r for r in results if r.method == "lps").timings["tasks"][0]
    # the test profile's LPS phases: warm-up 1, ADMM 3 (three ρ stages of 1), retrain 1 epoch: 11 × 1/5 = 2.2 each
    assert [lps[p]["steps"] for p in lps["phases"]] == step_shares(11, [1, 1, 1, 1, 1]) == [3, 2, 2, 2, 2]


def test_by_default_each_method_keeps_its_epochs(tmp_path):
    regs = testing.registry()
    [seqft, packnet] = testing.run(regs, tmp_path, "seqft,packnet")
    assert _steps(seqft) == [8, 8]  # 2 epochs of 4 batches
    assert _steps(packnet) == [12, 12]  # train 2 epochs + retrain max(1, 2 // 2) = 1 epoch
    assert seqft.config["train"]["steps_per_task"] == 0


def test_the_equal_steps_track_has_its_own_board(tmp_path):
    from click.testing import CliRunner

    from clbench._cli.main import build_cli

    regs = testing.registry()
    testing.run(regs, tmp_path / "runs", "seqft", sets={"train.steps_per_task": [5]})
    testing.run(regs, tmp_path / "runs", "ewc")
    done = CliRunner().invoke(build_cli(regs), ["leaderboard", str(tmp_path / "runs"), "--out",
                                                str(tmp_path / "boards"), "--no-plots"], obj=regs)
    assert done.exit_code == 0, done.output
    own, equal = (tmp_path / "boards" / "test.md"), (tmp_path / "boards" / "test-equal-steps.md")
    assert "at equal steps: every method 5 optimizer steps a task" in equal.read_text()
    assert "seqft" in equal.read_text() and "ewc" not in equal.read_text()
    assert "ewc" in own.read_text() and "equal steps" not in own.read_text()


def test_an_equal_steps_board_names_each_streams_steps():
    """Streams whose tasks differ in size get a budget each: the title says which streams ran which."""
    from types import SimpleNamespace

    from clbench._tools.leaderboard import board_title

    def cell(stream: str, steps: int) -> SimpleNamespace:
        return SimpleNamespace(stream=stream, config={"train": {"steps_per_task": steps}})

    one = board_title("bench-equal-steps", [cell("a", 7), cell("b", 7)])  # type: ignore[list-item]
    assert one.endswith("every method 7 optimizer steps a task (`train.steps_per_task`)")
    two = board_title("bench-equal-steps", [cell("s2", 85), cell("p1", 422), cell("s1", 85)])  # type: ignore[list-item]
    assert two.startswith("clbench leaderboard — profile `bench` at equal steps: ")
    assert "(85 on `s1`, `s2`; 422 on `p1`)" in two
