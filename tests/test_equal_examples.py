"""The equal-compute track, `train.examples_per_task`: every task of every method trains until the model has
forwarded N examples with gradients in the task's steps, as the harness counts them (clbench._exec.compute), shared
among its phases in proportion to their epochs; stopped at the first step boundary past the share."""

from __future__ import annotations

import contextlib
import math

import pytest

from clbench import testing
from clbench._exec.step import step_shares
from clbench.config import TrainConfig
from clbench.errors import ConfigError

BATCH = 16  # the test profile's batch; tiny-vector's tasks are 64 examples, 4 batches an epoch
BUDGET = 100


def _phase_steps(result) -> list[dict[str, int]]:
    return [{p: t[p]["steps"] for p in t["phases"]} for t in result.timings["tasks"]]


def _grad(result) -> list[int]:
    return [t["examples_grad"] for t in result.timings["tasks"]]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    regs = testing.registry()
    done = testing.run(
        regs,
        tmp_path_factory.mktemp("equal-examples"),
        "seqft,joint,packnet,lps,gem,ewc",
        sets={"train.examples_per_task": [BUDGET]},
    )
    for r in done:
        assert r.status == "complete", (r.method, r.error)
        assert r.config["train"]["examples_per_task"] == BUDGET
    return {r.method: r for r in done}


def test_a_method_of_one_batch_a_step_takes_the_steps_that_reach_the_budget(results):
    """SeqFT and joint training forward one batch a step: ⌈100 / 16⌉ = 7 steps a task, 112 examples."""
    steps = math.ceil(BUDGET / BATCH)
    for method in ("seqft", "joint"):
        assert _phase_steps(results[method]) == [{"train": steps}] * 2, method
        assert _grad(results[method]) == [steps * BATCH] * 2, method


def test_phases_share_the_budget_by_their_epochs(results):
    """PackNet (train 2 epochs, retrain 1): 67 and 33 examples, ⌈67 / 16⌉ = 5 and ⌈33 / 16⌉ = 3 steps; LPS's five
    phases of one epoch: 20 each, 2 steps each."""
    shares = step_shares(BUDGET, [2, 1])
    assert shares == [67, 33]
    packnet = {"train": math.ceil(shares[0] / BATCH), "retrain": math.ceil(shares[1] / BATCH)}
    assert _phase_steps(results["packnet"]) == [packnet] * 2
    assert _grad(results["packnet"]) == [sum(packnet.values()) * BATCH] * 2
    lps = _phase_steps(results["lps"])
    assert [list(t.values()) for t in lps] == [[math.ceil(20 / BATCH)] * 5] * 2


def test_a_step_that_forwards_more_takes_fewer_steps(results):
    """GEM's step on the second task also forwards the first task's memory (its gradient constrains the step):
    each step forwards 16 + m examples with gradients, so the task takes ⌈100 / (16 + m)⌉ steps."""
    gem = results["gem"]
    [first, second] = _phase_steps(gem)
    assert first == {"train": math.ceil(BUDGET / BATCH)}
    per_step = _grad(gem)[1] / second["train"]
    memory = gem.config["methods"]["gem"]["memory_per_task"]  # 256, more than the 64 examples a task has
    assert per_step == BATCH + min(memory, 64)
    assert second == {"train": math.ceil(BUDGET / per_step)} and second["train"] < first["train"]


def test_what_a_method_computes_outside_its_steps_is_counted_not_capped(results):
    """EWC's Fisher after each task forwards the task's 64 examples with gradients: counted above the budget's 112."""
    assert _phase_steps(results["ewc"]) == [{"train": 7}] * 2
    assert _grad(results["ewc"]) == [7 * BATCH + 64] * 2


def test_an_equal_compute_board_is_its_own_and_names_the_budget(results, tmp_path):
    from clbench._tools.leaderboard import board_title, by_profile

    boards = by_profile(results.values())
    assert list(boards) == ["test-equal-examples"]
    title = board_title("test-equal-examples", boards["test-equal-examples"])
    assert "at equal compute: every method 100 examples with gradients a task (`train.examples_per_task`)" in title


def test_two_budgets_or_a_replayed_graph_are_refused():
    with pytest.raises(ConfigError, match="two equal budgets"):
        TrainConfig(examples_per_task=10, steps_per_task=3)
    with pytest.raises(ConfigError, match="runs no Python hook"):
        TrainConfig(examples_per_task=10, capture=True)


def test_steps_the_counter_never_sees_end_the_cell_with_the_reason(tmp_path, monkeypatch):
    """A method whose steps bypass the model's forward is not counted; the budget could never be spent."""
    from clbench._exec import compute

    monkeypatch.setattr(compute.ExampleCounter, "attach", lambda self, model: contextlib.nullcontext())
    [r] = testing.run(testing.registry(), tmp_path, "seqft", sets={"train.examples_per_task": [BUDGET]})
    assert r.status != "complete"
    assert "forwarded no example with gradients" in r.error
