"""The equal-compute track, `train.compute_epochs=E`: every task of every method trains until the model has forwarded
with gradients E × the task's training examples (what E epochs of plain fine-tuning forward), as the harness counts
them (clbench._exec.compute), shared among its phases in proportion to their epochs; stopped at the first step
boundary past the share."""

from __future__ import annotations

import contextlib
import math

import pytest

from clbench import testing
from clbench._exec.step import step_shares
from clbench.config import TrainConfig
from clbench.errors import ConfigError

BATCH, TASK = 16, 64  # the test profile's batch; tiny-vector's tasks: 64 training examples, 4 batches an epoch
E = 1.5
BUDGET = round(E * TASK)  # 96 examples with gradients a task


def _phase_steps(result) -> list[dict[str, int]]:
    return [{p: t[p]["steps"] for p in t["phases"]} for t in result.timings["tasks"]]


def _grad(result) -> list[int]:
    return [t["examples_grad"] for t in result.timings["tasks"]]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    regs = testing.registry()
    done = testing.run(
        regs,
        tmp_path_factory.mktemp("equal-compute"),
        "seqft,joint,packnet,lps,gem,ewc",
        sets={"train.compute_epochs": [E]},
    )
    for r in done:
        assert r.status == "complete", (r.method, r.error)
        assert r.config["train"]["compute_epochs"] == E
    return {r.method: r for r in done}


def test_a_method_of_one_batch_a_step_takes_the_steps_that_reach_the_budget(results):
    """SeqFT and joint training forward one batch a step: ⌈96 / 16⌉ = 6 steps a task. Joint training's budget is
    the new task's 64 × 1.5, not that of every task it trains on."""
    steps = math.ceil(BUDGET / BATCH)
    for method in ("seqft", "joint"):
        assert _phase_steps(results[method]) == [{"train": steps}] * 2, method
        assert _grad(results[method]) == [steps * BATCH] * 2, method


def test_phases_share_the_budget_by_their_epochs(results):
    """PackNet (train 2 epochs, retrain 1): 64 and 32 examples, 4 and 2 steps; LPS's five phases of one epoch:
    20, 19, 19, 19, 19 examples, 2 steps each."""
    shares = step_shares(BUDGET, [2, 1])
    assert shares == [64, 32]
    packnet = {"train": math.ceil(shares[0] / BATCH), "retrain": math.ceil(shares[1] / BATCH)}
    assert _phase_steps(results["packnet"]) == [packnet] * 2
    assert _grad(results["packnet"]) == [sum(packnet.values()) * BATCH] * 2
    lps = [list(t.values()) for t in _phase_steps(results["lps"])]
    assert lps == [[math.ceil(share / BATCH) for share in step_shares(BUDGET, [1] * 5)]] * 2 == [[2] * 5] * 2


def test_a_step_that_forwards_more_takes_fewer_steps(results):
    """GEM's step on the second task also forwards the first task's memory (its gradient constrains the step):
    each step forwards 16 + 64 examples with gradients, so the task takes ⌈96 / 80⌉ = 2 steps."""
    gem = results["gem"]
    [first, second] = _phase_steps(gem)
    assert first == {"train": math.ceil(BUDGET / BATCH)}
    memory = min(gem.config["methods"]["gem"]["memory_per_task"], TASK)  # 256 asked, the task's 64 kept
    per_step = BATCH + memory
    assert second == {"train": math.ceil(BUDGET / per_step)} == {"train": 2}
    assert _grad(gem)[1] == 2 * per_step


def test_what_a_method_computes_outside_its_steps_is_counted_not_capped(results):
    """EWC's Fisher after each task forwards the task's 64 examples with gradients: counted above the steps' 96."""
    assert _phase_steps(results["ewc"]) == [{"train": 6}] * 2
    assert _grad(results["ewc"]) == [6 * BATCH + TASK] * 2


def test_a_phase_on_the_methods_own_objective_runs_its_own_epochs_outside_the_budget(tmp_path):
    """DGR's generator phase (Phase.task_loss=False) trains another network, which the counter does not see: it runs
    its own epochs (the test profile's 2 × 4 batches); the solver's phase gets the whole budget, ⌈96 / 16⌉ = 6 steps
    on the first task and ⌈96 / 32⌉ = 3 on the second, where each step also forwards a generated batch."""
    [dgr] = testing.run(testing.registry(), tmp_path, "dgr", sets={"train.compute_epochs": [E]})
    assert dgr.status == "complete", dgr.error
    assert _phase_steps(dgr) == [{"train": 6, "generator": 8}, {"train": 3, "generator": 8}]
    assert _grad(dgr) == [6 * BATCH, 3 * 2 * BATCH]


def test_one_epoch_of_compute_is_plain_fine_tunings_own_epoch(tmp_path):
    """At E = 1 SeqFT trains exactly its own single epoch, on the same batches: the same numbers."""
    regs = testing.registry()
    [own] = testing.run(regs, tmp_path / "own", "seqft", sets={"train.epochs": [1]})
    [equal] = testing.run(regs, tmp_path / "equal", "seqft", sets={"train.compute_epochs": [1.0]})
    assert _phase_steps(equal) == _phase_steps(own) == [{"train": TASK // BATCH}] * 2
    assert equal.accuracy_matrix == own.accuracy_matrix
    assert equal.config_hash != own.config_hash  # another track: another cell


def test_an_equal_compute_board_is_its_own_and_names_the_budget(results):
    from clbench._tools.leaderboard import board_title, by_profile

    boards = by_profile(results.values())
    assert list(boards) == ["test-equal-compute"]
    title = board_title("test-equal-compute", boards["test-equal-compute"])
    assert "at equal compute: every method forwards with gradients 1.5 × each task's training examples" in title
    assert "(`train.compute_epochs`)" in title


def test_two_budgets_or_a_replayed_graph_are_refused():
    with pytest.raises(ConfigError, match="two equal budgets"):
        TrainConfig(compute_epochs=1.0, steps_per_task=3)
    with pytest.raises(ConfigError, match="runs no Python hook"):
        TrainConfig(compute_epochs=1.0, capture=True)


def test_equal_compute_on_several_ranks_is_refused_before_any_cell_starts(tmp_path):
    from clbench._core.cells import RunRequest
    from clbench._core.plan import make_plan
    from clbench._exec.executors import check_data_parallel
    from clbench.errors import ClbenchError

    regs = testing.registry()
    request = RunRequest(methods="seqft", streams=["tiny-vector"], profile="test", out=tmp_path,
                         sets={"train.compute_epochs": [1.0]})
    plan = make_plan(regs, request)
    with pytest.raises(ClbenchError, match="--nproc 2: train.compute_epochs stops a task by one process's count"):
        check_data_parallel(plan, regs, 2, "local", {"rank_plugins": ["clbench.testing:TinyPlugin"]})
    check_data_parallel(plan, regs, 1, "local", {})  # one process: nothing to refuse


def test_steps_the_counter_never_sees_end_the_cell_with_the_reason(tmp_path, monkeypatch):
    """A method whose steps bypass the model's forward is not counted; the budget could never be spent."""
    from clbench._exec import compute

    monkeypatch.setattr(compute.ExampleCounter, "attach", lambda self, model: contextlib.nullcontext())
    [r] = testing.run(testing.registry(), tmp_path, "seqft", sets={"train.compute_epochs": [E]})
    assert r.status != "complete"
    assert "forwarded no example with gradients" in r.error


# --- a track as a profile of its own: ProfileSpec.extends ---------------------------------------------------------


class _Profiles:
    """A base profile on tiny-vector, a track extending it with a method preset of its own, and a cycle."""

    @staticmethod
    def specs():
        from clbench.specs import ProfileSpec

        return [
            ProfileSpec("test-equal-compute", sets={"train.compute_epochs": 1.0}, extends="test"),
            ProfileSpec("test-steps", sets={"train.steps_per_task": 5, "train.lr": 0.07},
                        stream_sets={"tiny-vector": {"train.steps_per_task": 3}}, extends="test"),
            ProfileSpec("stray-stream", stream_sets={"nowhere": {"train.steps_per_task": 3}}, extends="test"),
            ProfileSpec("loop-a", extends="loop-b"),
            ProfileSpec("loop-b", extends="loop-a"),
            ProfileSpec("orphan", extends="nowhere"),
        ]

    from clbench import hookimpl

    @hookimpl
    def clbench_add_profiles(self):
        return self.specs()

    @hookimpl
    def clbench_add_methods(self):
        from clbench_plugins.seqft.plugin import clbench_add_methods as seqft  # the registered seqft, renamed

        [spec] = [s for s in seqft() if s.name == "seqft"]
        from dataclasses import replace

        presets = {"test/tiny-vector": {"train.lr": 0.05}, "test-equal-compute/tiny-vector": {"train.lr": 0.02}}
        based = {"test/tiny-vector": {"train.lr": 0.05}}  # a preset of the base profile only
        return [replace(spec, name="tracked", presets=presets), replace(spec, name="based", presets=based)]


def test_a_profile_that_extends_another_reads_its_presets_then_its_own(tmp_path):
    from clbench._core.cells import RunRequest, profile_lineage
    from clbench._core.plan import make_plan

    regs = testing.registry(_Profiles())
    assert profile_lineage(regs, "test-equal-compute") == ("test", "test-equal-compute")
    base = make_plan(regs, RunRequest(methods="tracked,seqft", profile="test", out=tmp_path)).cells
    track = make_plan(regs, RunRequest(methods="tracked,seqft", profile="test-equal-compute", out=tmp_path)).cells
    assert {c.stream for c in track} == {c.stream for c in base}  # the base's streams (its `streams`)
    by = {(c.method, c.profile): c for c in [*base, *track] if c.stream == "tiny-vector"}
    assert by["tracked", "test"].train.lr == 0.05 and by["tracked", "test-equal-compute"].train.lr == 0.02  # its own preset
    seqft_base, seqft_track = by["seqft", "test"], by["seqft", "test-equal-compute"]
    assert seqft_track.train.lr == seqft_base.train.lr  # no preset of its own: the base's
    assert seqft_track.train.compute_epochs == 1.0 and seqft_base.train.compute_epochs == 0  # its own sets
    assert seqft_track.config_hash != seqft_base.config_hash


def test_a_profiles_stream_sets_lay_one_streams_settings_over_its_sets(tmp_path):
    from clbench._core.cells import RunRequest, explain
    from clbench._core.plan import make_plan

    regs = testing.registry(_Profiles())
    req = RunRequest(methods="seqft", profile="test-steps", out=tmp_path)
    cells = make_plan(regs, req).cells
    steps = {c.stream: c.train.steps_per_task for c in cells}
    assert steps["tiny-vector"] == 3 and len(steps) > 1  # its own stream's value over the profile's sets
    assert {v for k, v in steps.items() if k != "tiny-vector"} == {5}
    assert {c.train.lr for c in cells} == {0.07}  # what the stream does not set, the sets give
    [tiny] = [c for c in cells if c.stream == "tiny-vector"][:1]
    origin = {o.key: o for o in explain(regs, req, tiny)}["train.steps_per_task"]
    assert (origin.value, origin.layer) == (3, "profile sets")
    with pytest.raises(ConfigError, match="profile 'stray-stream' sets stream 'nowhere', which is not registered"):
        make_plan(regs, RunRequest(methods="seqft", profile="stray-stream", out=tmp_path))


def test_a_profile_lineage_that_loops_or_names_no_profile_is_refused():
    from clbench._core.cells import profile_lineage

    regs = testing.registry(_Profiles())
    with pytest.raises(ConfigError, match="extends itself: loop-a → loop-b → loop-a"):
        profile_lineage(regs, "loop-a")
    with pytest.raises(ConfigError, match="extends profile 'nowhere', which is not registered"):
        profile_lineage(regs, "orphan")


def test_the_track_profiles_board_is_named_once_and_its_base_presets_are_not_defaults(tmp_path):
    from clbench._tools.leaderboard import board_title, by_profile, method_labels

    regs = testing.registry(_Profiles())
    results = testing.run(regs, tmp_path, "seqft", profile="test-equal-compute")
    assert list(by_profile(results)) == ["test-equal-compute"]  # named once
    assert board_title("test-equal-compute", results).startswith(
        "clbench leaderboard — profile `test-equal-compute` at equal compute"
    )
    specs = regs.methods.items
    assert method_labels(["based"], specs, ("test", "test-equal-compute"), "tiny-vector") == {"based": "based"}
    assert method_labels(["based"], specs, "test-equal-compute", "tiny-vector") == {"based": "based (defaults)"}


def test_the_bench_equal_compute_profile_is_bench_at_one_epoch_of_compute():
    import importlib.util
    from pathlib import Path

    regs = testing.registry()
    from clbench._core.cells import profile_lineage

    spec = regs.profiles.get("bench-equal-compute")
    assert profile_lineage(regs, "bench-equal-compute") == ("bench", "bench-equal-compute")
    assert dict(spec.sets) == {"train.compute_epochs": 1.0} and spec.seeds == regs.profiles.get("bench").seeds
    path = Path(__file__).parents[1] / "benchmarks" / "bench_quick.py"
    loaded = importlib.util.spec_from_file_location("bench_quick", path)
    assert loaded is not None and loaded.loader is not None
    bench = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(bench)
    assert bench.commands("bench", "equal-compute", []) == [
        ["clbench", "run", "--methods", "all", "--profile", "bench-equal-compute"]
    ]
    assert bench.commands("bench", "equal-steps", []) == [
        ["clbench", "run", "--methods", "all", "--profile", "bench-equal-steps"]
    ]


def test_the_bench_equal_steps_profile_gives_each_stream_one_epoch_of_its_mean_task():
    from clbench._core.cells import profile_lineage

    regs = testing.registry()
    spec = regs.profiles.get("bench-equal-steps")
    assert profile_lineage(regs, spec.name) == ("bench", "bench-equal-steps") and not spec.sets
    # (the steps themselves are computed from the data in test_vision_streams)
    given = {s: v["train.steps_per_task"] for s, v in spec.stream_sets.items()}
    assert given == {"permuted-mnist": 422, "permuted-mnist-dil": 422, "split-mnist": 85, "split-mnist-cil": 85}
