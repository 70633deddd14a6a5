"""The runner: determinism, failures recorded per cell, divergence, resume on real data."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._core.results import read_result
from clbench._exec.cellstate import CellState
from clbench._exec.runner import FailFast
from clbench._exec.step import train_task
from clbench.cell import CHECKPOINT_FILE, RESULT_FILE, TEST_PROFILE
from clbench.config import TrainConfig
from clbench.hookspecs import hookimpl
from clbench.method import CellContext, Method, Phase
from clbench.model import CLModel
from clbench.specs import MethodSpec, StreamSpec


class Exploding(Method):
    """Makes the loss NaN on the second task."""

    def loss_terms(self, batch, logits):
        if batch.task == self.ctx.order[1]:
            return {"boom": logits.sum() * float("nan")}
        return {}


class Raising(Method):
    def after_task(self, task, index):
        raise RuntimeError("plugin bug in after_task")


class LateRaising(Method):
    def before_task(self, task, index):
        if index == 1:
            raise ValueError("no second task")


class BadPlugin:
    @hookimpl
    def clbench_add_methods(self):
        return [MethodSpec("exploding", Exploding), MethodSpec("raising", Raising),
                MethodSpec("late-raising", LateRaising)]


class ErrorRateStream(testing.TinyVectorStream):
    """Scores a task by its error rate: a stream's own metric replaces percent correct."""

    def score(self, task, pred, gold):
        return 100.0 - super().score(task, pred, gold)


class ScoringPlugin:
    @hookimpl
    def clbench_add_streams(self):
        tiny = testing.registry().streams.get("tiny-vector")
        return [StreamSpec("error-rate", ErrorRateStream, presets=tiny.presets)]


def test_a_stream_scores_its_own_tasks(tmp_path):
    regs = testing.registry(ScoringPlugin())
    [plain] = testing.run(regs, tmp_path / "a", "seqft")
    [own] = testing.run(regs, tmp_path / "b", "seqft", stream="error-rate")
    # same data, seeds and model: every entry is 100 minus the accuracy, and the accuracy is not constant
    assert own.accuracy_matrix == [[100.0 - v for v in row] for row in plain.accuracy_matrix]
    assert len({v for row in plain.accuracy_matrix for v in row}) > 1


def test_timings_report_throughput_per_task(tmp_path):
    regs = testing.registry()
    [vec] = testing.run(regs, tmp_path / "v", "seqft")
    [txt] = testing.run(regs, tmp_path / "t", "seqlora", stream="tiny-text")  # a frozen base: LoRA trains
    stream = testing.TinyTextStream()
    for result, data in ((vec, testing.TinyVectorStream()), (txt, stream)):
        for task_stats, task in zip(result.timings["tasks"], result.tasks, strict=True):
            n = len(data.data(task).train)
            [phase] = [v for v in task_stats.values() if isinstance(v, dict)]  # one phase per task
            assert phase["steps"] == 2 * -(-n // 16)  # 2 epochs of batch 16 (the test profile)
            assert phase["examples_per_s"] == pytest.approx(2 * n / phase["seconds"], rel=1e-6)
            assert phase["seconds"] <= task_stats["train_s"]
    words = sum(len(s.split()) for s in stream.data(txt.tasks[0]).train.x)
    [first] = [v for v in txt.timings["tasks"][0].values() if isinstance(v, dict)]
    assert first["tokens_per_s"] == pytest.approx(2 * words / first["seconds"], rel=1e-6)
    assert "tokens_per_s" not in vec.timings["tasks"][0]["train"]


def test_same_command_gives_same_numbers(tmp_path):
    regs = testing.registry()
    a = testing.run(regs, tmp_path / "a", "ewc,replay")
    b = testing.run(regs, tmp_path / "b", "ewc,replay")
    assert [r.accuracy_matrix for r in a] == [r.accuracy_matrix for r in b]
    assert [r.metrics for r in a] == [r.metrics for r in b]


def test_nan_loss_is_diverged_and_grid_goes_on(tmp_path):
    regs = testing.registry(BadPlugin())
    results = testing.run(regs, tmp_path, "exploding,raising,seqft")
    status = {r.method: r for r in results}
    assert status["exploding"].status == "diverged"
    assert "loss became nan" in status["exploding"].error
    assert status["exploding"].accuracy_matrix[0][0] is not None  # task 1 finished and is kept
    assert status["exploding"].accuracy_matrix[1] == [None, None]
    assert status["raising"].status == "failed"
    assert "RuntimeError: plugin bug in after_task" in status["raising"].error
    assert status["seqft"].status == "complete"
    # the failure is on disk, with its traceback beside it
    on_disk = read_result(next((tmp_path / "tiny-vector" / "raising").rglob(RESULT_FILE)))
    assert on_disk.status == "failed"
    assert "Traceback" in next((tmp_path / "tiny-vector" / "raising").rglob("error.log")).read_text()


def test_a_failed_cell_says_in_which_phase_and_task_it_stopped(tmp_path):
    """The cell session records every phase's outcome; the error names the one that raised (the task by name)."""
    from clbench._exec.session import CellSession

    regs = testing.registry(BadPlugin())
    [late] = testing.run(regs, tmp_path, "late-raising")
    assert late.status == "failed" and late.error.startswith("ValueError: no second task")
    assert late.error.endswith(f"(in before_task of task {late.tasks[1]!r})")
    [raising] = testing.run(regs, tmp_path, "raising")
    assert raising.error.endswith(f"(in after_task of task {raising.tasks[0]!r})")
    # a complete cell's phases, in the order a run meets them
    cell = make_plan(regs, RunRequest(profile=TEST_PROFILE, methods="seqft", streams=["tiny-vector"], seeds=[0],
                                      out=tmp_path / "p")).cells[0]
    session = CellSession(regs, cell, torch.device("cpu"))
    model, method = session.build()
    session.before_task(method, 0)
    session.after_task(method, 0)
    assert [(o.phase, o.task, o.error) for o in session.outcomes] == [
        ("stream", None, None), ("model", None, None), ("setup", None, None),
        ("before_task", session.order[0], None), ("after_task", session.order[0], None)]
    assert session.stopped is None


def test_fail_fast_stops_the_grid(tmp_path):
    regs = testing.registry(BadPlugin())
    with pytest.raises(FailFast, match=r"raising/order-1/seed-0: RuntimeError: plugin bug in after_task in plugin "
                                       r"'test_runner.BadPlugin' \(no installed distribution\) at test_runner.py:\d+"):
        testing.run(regs, tmp_path, "raising,seqft", fail_fast=True)
    assert not (tmp_path / "tiny-vector" / "seqft").exists()


def test_failed_cell_is_retried_and_complete_cell_never_rerun(tmp_path):
    regs = testing.registry()
    [first] = testing.run(regs, tmp_path, "seqft")
    path = first.path
    data = json.loads(path.read_text())
    data["accuracy_matrix"][0][0] = 12.5  # a marker: a rerun would overwrite it
    path.write_text(json.dumps(data))
    [again] = testing.run(regs, tmp_path, "seqft")
    assert again.accuracy_matrix[0][0] == 12.5


@pytest.mark.slow
def test_resume_on_real_digits_equals_uninterrupted(tmp_path):
    regs = testing.registry()
    # short, but EWC's state still crosses the kill (a checkpoint after every task: the quick profile's cells
    # are too short for the default train.checkpoint_every_s to write one)
    sets = {"train.epochs": [1], "ewc.fisher_samples": [32], "train.checkpoint_every_s": [0]}
    kw = dict(stream="permuted-digits", profile="quick", sets=sets, orders=["3"])
    [reference] = testing.run(regs, tmp_path / "ref", "ewc", **kw)
    for kill_after in (0, 4):
        out = tmp_path / f"killed{kill_after}"
        killer = testing.KillAfterTask(kill_after)
        regs.pm.register(killer)
        with pytest.raises(KeyboardInterrupt):
            testing.run(regs, out, "ewc", **kw)
        regs.pm.unregister(killer)
        [resumed] = testing.run(regs, out, "ewc", **kw)
        assert resumed.accuracy_matrix == reference.accuracy_matrix
        assert resumed.metrics == reference.metrics
        # the per-example scores and the untrained row cross the kill too (the checkpoint holds them)
        assert resumed.examples == reference.examples and resumed.initial_row == reference.initial_row


def test_a_garbled_checkpoint_restarts_the_cell_with_a_warning(tmp_path):
    regs = testing.registry()
    [reference] = testing.run(regs, tmp_path / "ref", "seqft")
    out = tmp_path / "garbled"
    killer = testing.KillAfterTask(0)
    regs.pm.register(killer)
    with pytest.raises(KeyboardInterrupt):
        testing.run(regs, out, "seqft")
    regs.pm.unregister(killer)
    [checkpoint] = out.rglob(CHECKPOINT_FILE)
    checkpoint.write_bytes(checkpoint.read_bytes()[:100])  # what a crash before the data reached disk can leave
    with pytest.warns(UserWarning, match="unreadable checkpoint"):
        [again] = testing.run(regs, out, "seqft")
    assert again.status == "complete"
    assert again.accuracy_matrix == reference.accuracy_matrix
    assert not checkpoint.exists()


def test_a_lora_checkpoint_leaves_out_the_frozen_base_and_resumes_to_the_same_numbers(tmp_path):
    """seqlora trains adapters on a frozen base: the checkpoint holds the adapters and per-task heads, not the base
    weights a fresh build reproduces (their fingerprints instead); the resumed cell equals the uninterrupted one. A
    checkpoint whose left-out weights are not this build's starts the cell over."""
    regs = testing.registry()
    kw = dict(stream="tiny-text", sets={"train.checkpoint_every_s": [0]})
    [reference] = testing.run(regs, tmp_path / "ref", "seqlora", **kw)
    out = tmp_path / "killed"
    killer = testing.KillAfterTask(0)
    regs.pm.register(killer)
    with pytest.raises(KeyboardInterrupt):
        testing.run(regs, out, "seqlora", **kw)
    regs.pm.unregister(killer)
    [checkpoint] = out.rglob(CHECKPOINT_FILE)
    payload = torch.load(checkpoint, weights_only=True)
    assert payload["unchanged"] and all(".lora" not in n and "adapter" not in n for n in payload["unchanged"])
    assert not set(payload["model"]) & set(payload["unchanged"])
    saved = copy.deepcopy(payload)
    [resumed] = testing.run(regs, out, "seqlora", **kw)
    assert resumed.accuracy_matrix == reference.accuracy_matrix and resumed.metrics == reference.metrics
    name = next(iter(saved["unchanged"]))
    saved["unchanged"][name] = [v + 1.0 for v in saved["unchanged"][name]]  # another base than this build's
    torch.save(saved, checkpoint)
    (checkpoint.parent / RESULT_FILE).unlink()
    with pytest.warns(UserWarning, match="its weights do not match this build"):
        [again] = testing.run(regs, out, "seqlora", **kw)
    assert again.accuracy_matrix == reference.accuracy_matrix


def test_no_checkpoint_is_written_after_the_last_task(tmp_path):
    regs = testing.registry()
    killer = testing.KillAfterTask(1)  # tiny-vector has two tasks
    regs.pm.register(killer)
    with pytest.raises(KeyboardInterrupt):
        testing.run(regs, tmp_path, "seqft")
    [checkpoint] = tmp_path.rglob(CHECKPOINT_FILE)
    assert torch.load(checkpoint, weights_only=True)["done"] == 1  # task 2 is redone on resume


def test_checkpoints_follow_checkpoint_every_s(tmp_path, monkeypatch):
    saved: list[int] = []
    monkeypatch.setattr(CellState, "save_checkpoint", lambda self, *args: saved.append(len(self.rows)))
    regs = testing.registry()
    for every, expected in ((0, list(range(1, 10))), (1e6, [])):  # after every task but the last of ten; never
        saved.clear()
        testing.run(regs, tmp_path / str(every), "seqft", stream="permuted-digits", profile="quick", orders=["1"],
                    sets={"train.epochs": [1], "train.checkpoint_every_s": [every], "stream.tasks": [10]})
        assert saved == expected


def test_a_killed_cell_without_a_checkpoint_starts_over_to_the_same_numbers(tmp_path):
    regs = testing.registry()
    sets = {"train.checkpoint_every_s": [3600]}
    [reference] = testing.run(regs, tmp_path / "ref", "ewc", sets=sets)
    killer = testing.KillAfterTask(0)
    regs.pm.register(killer)
    with pytest.raises(KeyboardInterrupt):
        testing.run(regs, tmp_path / "killed", "ewc", sets=sets)
    regs.pm.unregister(killer)
    assert not list((tmp_path / "killed").rglob(CHECKPOINT_FILE))  # the first task took less than an hour
    [again] = testing.run(regs, tmp_path / "killed", "ewc", sets=sets)
    assert again.accuracy_matrix == reference.accuracy_matrix and again.config_hash == reference.config_hash


def test_the_runner_tells_the_model_whether_the_method_reads_logits(tmp_path, monkeypatch):
    seen: list[bool] = []
    original = CLModel.training_loss

    def spy(self, x, task, y, need_logits=True):
        seen.append(need_logits)
        return original(self, x, task, y, need_logits)

    monkeypatch.setattr(CLModel, "training_loss", spy)
    regs = testing.registry()
    for method, needs in (("seqft", False), ("lwf", True), ("ewc+lwf", True), ("ewc", False)):
        seen.clear()
        [cell] = testing.run(regs, tmp_path / method, method, fail_fast=True)
        assert cell.status == "complete" and seen and set(seen) == {needs}, method


def test_digits_streams_are_real_and_fixed():
    regs = testing.registry()
    stream = regs.streams.get("permuted-digits").factory(regs.streams.get("permuted-digits").config_cls())
    d0, d3 = stream.data("p0"), stream.data("p3")
    assert len(d0.train) + len(d0.val) + len(d0.test) == 1797  # every sklearn digit, once
    assert torch.equal(d0.train.y, d3.train.y)
    perm = stream.permutation("p3")
    assert torch.equal(d3.train.x.reshape(len(d3.train), -1), d0.train.x.reshape(len(d0.train), -1)[:, perm])
    split = regs.streams.get("split-digits").factory(regs.streams.get("split-digits").config_cls())
    assert set(split.data("4-5").test.y.tolist()) == {0, 1}


class PresetMethodsPlugin:
    @hookimpl
    def clbench_add_streams(self):
        tiny = testing.registry().streams.get("tiny-vector")
        test = {**tiny.presets[testing.TEST_PROFILE], "methods": ["seqft", "ewc+replay"]}
        return [StreamSpec("picky", testing.TinyVectorStream, presets={testing.TEST_PROFILE: test})]


def test_a_stream_preset_can_say_what_all_means_on_it(tmp_path):
    from clbench._core.plan import RunRequest, make_plan

    regs = testing.registry(PresetMethodsPlugin())

    def planned(methods):
        req = RunRequest(profile=testing.TEST_PROFILE, methods=methods, streams=["picky", "tiny-vector"], out=tmp_path)
        plan = make_plan(regs, req)
        return {s: sorted(c.method for c in plan.cells if c.stream == s) for s in ("picky", "tiny-vector")}, plan

    cells, plan = planned("all")
    assert cells["picky"] == ["ewc+replay", "seqft"]
    assert len(cells["tiny-vector"]) > 5 and "seqft" in cells["tiny-vector"]  # other streams: every method
    assert any("not in the 'test' preset's methods" in s for s in plan.skipped)
    cells, _ = planned("seqft,lwf")  # methods the user names run everywhere they fit
    assert cells["picky"] == ["lwf", "seqft"]


def test_stream_preset_sets_the_streams_own_config_and_user_sets_win(tmp_path):
    from clbench._core.plan import RunRequest, make_plan

    regs = testing.registry()

    def cells(sets):
        return make_plan(regs, RunRequest(profile="quick", methods="all", streams=["cl-quick"], sets=sets, seeds=[0],
                                          out=tmp_path)).cells

    quick = cells({})
    assert sorted(c.method for c in quick) == ["inclora", "l2p", "nlora", "olora", "olora+nlora", "pertaskft",
                                               "progprompt", "seqlora"]
    assert {c.stream_config["train_per_task"] for c in quick} == {64}
    assert {c.stream_config["train_per_task"] for c in cells({"stream.train_per_task": [0]})} == {0}


class _Phased(Method):
    """Three Adam phases: "a" with milestones (1, 2) × 0.5, then "b1" and "b2" in one optimizer group."""

    def phases(self, task, index):
        base = Phase.from_train(self.ctx.train, optimizer="adam", lr=0.04, epochs=3)
        return [replace(base, name="a", lr_milestones=(1, 2), lr_gamma=0.5),
                replace(base, name="b1", epochs=1, optimizer_group="b"), replace(base, name="b2", epochs=1,
                                                                                optimizer_group="b")]

    def before_phase(self, phase, task, index):
        self.phase = phase.name


def test_phases_take_lr_milestones_and_share_an_optimizer_in_a_group():
    stream = testing.TinyVectorStream(tasks=1, n=32)
    ctx = CellContext(stream=stream, order=["t0"], train=TrainConfig(batch_size=16), device=torch.device("cpu"), seed=0)
    model = _mlp(stream)
    method = _Phased(None, ctx)
    method.setup(model)
    seen: list[tuple[str, float, int, float]] = []  # phase, lr, optimizer id, Adam's step count after the step
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: seen.append(
        (method.phase, opt.param_groups[0]["lr"], id(opt), max(float(s["step"]) for s in opt.state.values()))))
    try:
        train_task(model, method, ctx, 0)
    finally:
        handle.remove()
    # two batches an epoch; rate 0.04 × 0.5^(milestones passed), by hand
    assert [(p, lr) for p, lr, _, _ in seen] == [("a", 0.04)] * 2 + [("a", 0.02)] * 2 + [("a", 0.01)] * 2 \
        + [("b1", 0.04)] * 2 + [("b2", 0.04)] * 2
    assert seen[0][2] != seen[6][2] == seen[8][2]  # "b1" and "b2" step one optimizer, not "a"'s
    assert [s for _, _, _, s in seen] == [1, 2, 3, 4, 5, 6, 1, 2, 3, 4]  # and its Adam step count runs on


def _mlp(stream):
    from clbench_plugins.mlp.model import MLPConfig, build

    from clbench.model import StreamInfo

    torch.manual_seed(0)
    return build(MLPConfig(hidden=(8,)), StreamInfo.of(stream))


def test_a_cell_holds_the_blas_pools_to_train_threads(clbench_registry, tmp_path, monkeypatch):
    """numpy/scipy's OpenBLAS runs with ``train.threads`` inside a cell, as torch does, and gets its own count
    back after it (scipy's eigensolver in the dense AWOM used every core, and its idle workers spun)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from clbench._exec import runner

    if not threadpoolctl.threadpool_info():
        pytest.skip("no BLAS thread pool loaded")
    seen: list[int] = []
    evaluate = runner.evaluate

    def recording(*args, **kwargs):
        seen.extend(p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas")
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(runner, "evaluate", recording)
    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        [r] = testing.run(clbench_registry, tmp_path, "seqft", sets={"train.threads": [1]})
        after = {p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"}
    assert r.status == "complete", r.error
    assert seen and set(seen) == {1}
    assert after == {3}


class _Counting(Method):
    """Counts its per-step hooks; ``after_step`` is overridden on the class, ``after_backward`` is Method's."""

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.calls: list[str] = []

    def after_step(self):
        self.calls.append("after_step")


def test_every_per_step_hook_a_method_has_is_called_once_a_step_and_methods_own_no_ops_are_skipped():
    """The step skips the hooks a method leaves as Method's no-ops, and only those: one overridden on the class
    or set on the instance runs once every optimizer step, in order."""
    stream = testing.TinyVectorStream(tasks=1, n=48)
    ctx = CellContext(stream=stream, order=["t0"], train=TrainConfig(batch_size=16, epochs=2), device=torch.device("cpu"),
                      seed=0)
    method = _Counting(None, ctx)
    method.setup(_mlp(stream))
    stats = train_task(method.model, method, ctx, 0)
    assert method.calls == ["after_step"] * 6 == ["after_step"] * stats.phase("train").steps  # 48 / 16 × 2 epochs
    method.calls.clear()
    method.after_backward = lambda: method.calls.append("after_backward")  # an instance's own hook
    train_task(method.model, method, ctx, 0)
    assert method.calls == ["after_backward", "after_step"] * 6
