"""Observers that observe: the clbench_step hook, the per-epoch loss in result.json, and the built-in
loggers (`--logger csv,tensorboard,wandb`), which must change no number."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from collections import defaultdict

import pytest
from clbench_plugins.loggers.backends import Logger

from clbench import testing
from clbench._core.plan import RunRequest, make_plan
from clbench._core.results import RESULT_FILE
from clbench._exec.executors import execute
from clbench.hookspecs import hookimpl

STEP_KEYS = {"loss", "loss/task", "lr", "grad_norm"}


@pytest.fixture(scope="module")
def regs():
    return testing.registry()


def _run(regs, out, methods="seqft", logger=None, log_every=0, sets=None):
    sets = {**(sets or {}), "train.log_every": [log_every]}
    req = RunRequest(profile=testing.TEST_PROFILE, methods=methods, streams=["tiny-vector"], seeds=[0], sets=sets,
                     out=out, options={"logger": logger} if logger else {})
    return execute(make_plan(regs, req), regs, progress=False)


def _rows(path):
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _steps(result):
    return sum(v["steps"] for t in result.timings["tasks"] for v in t.values() if isinstance(v, dict))


@pytest.fixture(scope="module")
def logged(regs, tmp_path_factory):
    """ewc (a named loss term) with csv and tensorboard, every step logged; and the same cell unlogged."""
    out = tmp_path_factory.mktemp("logged")
    [on] = _run(regs, out / "on", "ewc", logger="csv,tensorboard", log_every=1)
    [off] = _run(regs, out / "off", "ewc")
    assert on.status == off.status == "complete", (on.error, off.error)
    return on, off


def test_csv_has_one_row_per_optimizer_step_and_one_per_task(logged):
    on, _ = logged
    rows = _rows(on.path.parent / "log.csv")
    steps = [r for r in rows if r["kind"] == "step"]
    assert len(steps) == _steps(on) > 0
    assert [int(r["step"]) for r in steps] == list(range(1, len(steps) + 1))
    for r in steps:
        assert all(r[k] != "" and math.isfinite(float(r[k])) for k in STEP_KEYS), r
        assert float(r["lr"]) == on.config["train"]["lr"]
        assert float(r["grad_norm"]) > 0
    # ewc's penalty is a named term: the total is the task loss plus it (zero on the first task)
    assert any(r.get("loss/ewc") for r in steps if r["index"] == "1")
    for r in steps:
        terms = float(r["loss/task"]) + sum(float(r[k]) for k in r if k.startswith("loss/ewc") and r[k])
        assert float(r["loss"]) == pytest.approx(terms, rel=1e-5)
    tasks = [r for r in rows if r["kind"] == "task"]
    assert [r["task"] for r in tasks] == on.tasks
    done = 0
    for i, r in enumerate(tasks):
        assert [float(r[f"accuracy/{t}"]) for t in on.tasks] == on.accuracy_matrix[i]
        done += sum(v["steps"] for v in on.timings["tasks"][i].values() if isinstance(v, dict))
        assert int(r["step"]) == done  # the task row sits at the step its task ended
    [cell] = [r for r in rows if r["kind"] == "cell"]
    assert cell["status"] == "complete" and float(cell["metric/AA"]) == pytest.approx(on.metrics["AA"])
    with (on.path.parent / "log.csv").open(newline="") as fh:  # the file widened twice (ewc's term, the metrics)
        assert {len(r) for r in csv.reader(fh)} == {len(rows[0])}  # every row as wide as the header


def test_result_json_holds_the_mean_loss_of_every_epoch(logged):
    on, _ = logged
    by_epoch = defaultdict(list)  # computed independently, from the losses the csv logger received
    for r in _rows(on.path.parent / "log.csv"):
        if r["kind"] == "step":
            by_epoch[int(r["index"]), r["phase"], int(r["epoch"])].append(float(r["loss"]))
    stored = json.loads(on.path.read_text())
    seen = 0
    for i, entry in enumerate(stored["timings"]["tasks"]):
        assert set(entry["phases"]) == {k for k, v in entry.items() if isinstance(v, dict)}  # run order
        for phase in entry["phases"]:
            losses = entry[phase]["loss"]
            assert len(losses) == on.config["train"]["epochs"]
            for epoch, mean in enumerate(losses):
                values = by_epoch[i, phase, epoch]
                assert values and mean == pytest.approx(sum(values) / len(values), rel=1e-12, abs=0)
                seen += 1
    assert seen == len(by_epoch)


def test_the_loss_curve_survives_without_a_logger(logged):
    _, off = logged
    assert not (off.path.parent / "log.csv").exists() and not (off.path.parent / "tb").exists()
    for entry in off.timings["tasks"]:
        for phase in entry["phases"]:
            assert all(isinstance(v, float) and math.isfinite(v) for v in entry[phase]["loss"])


def test_logging_changes_no_number(logged):
    on, off = logged
    assert on.accuracy_matrix == off.accuracy_matrix
    assert on.metrics == off.metrics
    assert [[t[p]["loss"] for p in t["phases"]] for t in on.timings["tasks"]] == \
        [[t[p]["loss"] for p in t["phases"]] for t in off.timings["tasks"]]
    assert on.config_hash == off.config_hash  # log_every and the loggers are not part of the identity
    assert on.config["train"]["log_every"] == 1 and off.config["train"]["log_every"] == 0


def test_tensorboard_event_files_hold_the_loss(logged):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    on, _ = logged
    tb = on.path.parent / "tb"
    assert list(tb.glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(tb))
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    assert {"loss", "loss/task", "loss/ewc", "lr", "grad_norm", "metric/AA"} <= scalars
    assert {f"accuracy/{t}" for t in on.tasks} <= scalars
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == list(range(1, _steps(on) + 1))
    csv_loss = [float(r["loss"]) for r in _rows(on.path.parent / "log.csv") if r["kind"] == "step"]
    assert [e.value for e in loss] == pytest.approx(csv_loss, rel=1e-6)  # tensorboard stores float32
    assert acc.Scalars(f"accuracy/{on.tasks[0]}")[-1].value == pytest.approx(on.accuracy_matrix[-1][0], rel=1e-6)


def test_log_every_is_not_part_of_the_config_hash(regs, tmp_path):
    def cell(**sets):
        req = RunRequest(profile=testing.TEST_PROFILE, methods="seqft", streams=["tiny-vector"], seeds=[0],
                         sets={k: [v] for k, v in sets.items()}, out=tmp_path)
        return make_plan(regs, req).cells[0]

    base = cell()
    assert base.train.log_every == 0 and base.resolved()["train"]["log_every"] == 0  # stored with the result
    assert cell(**{"train.log_every": 7}).config_hash == base.config_hash
    assert cell(**{"train.lr": 0.5}).config_hash != base.config_hash
    from clbench.config import ConfigError

    with pytest.raises(ConfigError, match="log_every"):
        cell(**{"train.log_every": -1})


class StepRecorder:
    def __init__(self):
        self.calls = []

    @hookimpl
    def clbench_step(self, cell, task, index, phase, epoch, step, values):
        self.calls.append((index, phase, epoch, step, sorted(values)))


@pytest.mark.parametrize("every", [0, 3])
def test_clbench_step_fires_only_on_logged_steps(tmp_path, every):
    rec = StepRecorder()
    regs = testing.registry(rec)
    [result] = _run(regs, tmp_path, "seqft", log_every=every)
    total = _steps(result)
    assert [c[3] for c in rec.calls] == list(range(every, total + 1, every)) if every else rec.calls == []
    for _, _, _, _, keys in rec.calls:
        assert set(keys) == STEP_KEYS  # seqft: no loss term of its own


class FaultyStepObserver:
    @hookimpl
    def clbench_step(self, cell, task, index, phase, epoch, step, values):
        if step == 3:
            raise RuntimeError("observer bug at step 3")


def test_an_observer_that_raises_on_a_step_fails_its_cell_by_name_and_the_others_still_observe(tmp_path):
    rec = StepRecorder()
    regs = testing.registry(rec, FaultyStepObserver())  # the recorder, registered first, is called after it
    [result] = _run(regs, tmp_path, "seqft", log_every=1)
    assert result.status == "failed"
    assert result.error.startswith("ObserverError: observer clbench_step (plugin ") and "FaultyStepObserver" in \
        result.error and result.error.endswith("raised RuntimeError: observer bug at step 3 (in train of task 't0')"), result.error
    assert [c[3] for c in rec.calls] == [1, 2]


def _killed_and_resumed(regs, tmp_path, logger: str, killer: object):
    """(reference, resumed): an uninterrupted seqft cell logging every step, and one killed by ``killer`` then
    run again to its end."""
    [reference] = _run(regs, tmp_path / "a", "seqft", logger=logger, log_every=1)
    regs.pm.register(killer)
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(regs, tmp_path / "b", "seqft", logger=logger, log_every=1)
    finally:
        regs.pm.unregister(killer)
    [resumed] = _run(regs, tmp_path / "b", "seqft", logger=logger, log_every=1)
    assert resumed.accuracy_matrix == reference.accuracy_matrix
    return reference, resumed


def test_a_resumed_cell_logs_each_step_once(regs, tmp_path):
    reference, resumed = _killed_and_resumed(regs, tmp_path, "csv", testing.KillAfterTask(0))

    def steps(result):
        return [(r["index"], r["step"], r["loss"]) for r in _rows(result.path.parent / "log.csv") if r["kind"] == "step"]

    assert steps(resumed) == steps(reference)


def test_an_unknown_logger_is_a_usage_error_naming_the_known_ones(tmp_path, capsys):
    from clbench._cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--profile", "quick", "--methods", "seqft", "--logger", "csv,bogus", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "bogus" in err and "csv, tensorboard, wandb" in err
    assert not list(tmp_path.rglob(RESULT_FILE))


@pytest.mark.parametrize("name", ["tensorboard", "wandb"])
def test_a_logger_whose_optional_package_is_missing_is_a_usage_error_naming_the_extra(name, tmp_path, capsys,
                                                                                      monkeypatch):
    from clbench._cli.main import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == name else real(n, *a))
    with pytest.raises(SystemExit) as exc:
        main(["run", "--profile", "quick", "--methods", "seqft", "--logger", f"csv,{name}", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert f"the {name} logger needs the {name} package: pip install 'clbench[{name}]'" in capsys.readouterr().err
    assert not list(tmp_path.rglob(RESULT_FILE))


def test_an_unknown_logger_in_a_request_fails_its_cell_by_name(regs, tmp_path):
    [result] = _run(regs, tmp_path, "seqft", logger="bogus")
    assert result.status == "failed" and "bogus" in result.error and "known: csv, tensorboard, wandb" in result.error


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is an optional extra (clbench[wandb])")
def test_wandb_logs_offline(regs, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    [on] = _run(regs, tmp_path / "on", "seqft", logger="wandb", log_every=2)
    [off] = _run(regs, tmp_path / "off", "seqft")
    assert on.status == "complete", on.error
    assert on.accuracy_matrix == off.accuracy_matrix
    [run] = list((on.path.parent / "wandb").glob("offline-run-*"))
    [records] = list(run.glob("*.wandb"))  # W&B's record log; its keys and strings are stored as they are
    data = records.read_bytes()
    assert data.count(b"grad_norm") >= _steps(on) // 2  # one history record per logged step
    for key in (b"loss/task", b"lr", b"accuracy/t1", b"metric/AA", b"config_hash", on.key.encode()):
        assert key in data, key


class _Recorder(Logger):
    def __init__(self) -> None:
        super().__init__(cell=None, resumed_from=0)
        self.batches: list[list[int]] = []

    def write_steps(self, rows) -> None:
        self.batches.append([row[4] for row in rows])


def test_logged_steps_are_written_at_task_end_or_after_write_every_s(monkeypatch):
    logger = _Recorder()
    for step in (1, 2, 3):
        logger.step("t0", 0, "train", 0, step, {"loss": 1.0})
    assert logger.batches == []  # kept in memory during the task
    logger.task_end("t0", 0, [50.0], ["t0"], 3)
    logger.step("t1", 1, "train", 0, 4, {"loss": 1.0})
    logger.close()  # an interrupted task's steps are written too (a resume drops them)
    assert logger.batches == [[1, 2, 3], [4]]
    monkeypatch.setattr(Logger, "WRITE_EVERY_S", 0.0)
    logger = _Recorder()
    for step in (1, 2):
        logger.step("t0", 0, "train", 0, step, {"loss": 1.0})
    assert logger.batches == [[1], [2]]  # due at once


class _KillAtStep:
    """Ctrl-C at a given optimizer step of the cell (inside the clbench_step hook)."""

    def __init__(self, step: int) -> None:
        self.at = step

    @hookimpl
    def clbench_step(self, cell, task, index, phase, epoch, step, values) -> None:
        if step == self.at:
            raise KeyboardInterrupt


def test_tensorboard_shows_each_step_once_after_a_kill_mid_task_and_a_resume(regs, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first_task = 8  # tiny-vector, test profile: 8 steps a task (checked below)
    # two steps into the second task: logged, then lost with the task
    reference, resumed = _killed_and_resumed(regs, tmp_path, "tensorboard", _KillAtStep(first_task + 2))
    assert reference.timings["tasks"][0]["train"]["steps"] == first_task
    tb = resumed.path.parent / "tb"
    assert len(list(tb.glob("events.out.tfevents.*"))) == 2  # the killed attempt's file and the resumed one's

    def losses(result):
        acc = EventAccumulator(str(result.path.parent / "tb"))
        acc.Reload()
        return [(e.step, e.value) for e in acc.Scalars("loss")]

    assert losses(resumed) == losses(reference)  # the killed attempt's steps of task 2 purged, none twice


def test_the_loss_curve_is_logged_without_log_every(regs, tmp_path):
    """`--logger csv,tensorboard` alone (train.log_every 0): one `loss/epoch` per epoch, the mean loss result.json
    records for it, at the step the epoch ended (each of a phase's epochs takes an equal share of its steps)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [r] = _run(regs, tmp_path, "ewc", logger="csv,tensorboard")
    expected, done = [], 0
    for task in r.timings["tasks"]:
        for phase in task["phases"]:
            losses, steps = task[phase]["loss"], task[phase]["steps"]
            expected += [(done + steps * (e + 1) // len(losses), loss) for e, loss in enumerate(losses)]
            done += steps
    rows = _rows(r.path.parent / "log.csv")
    assert not [row for row in rows if row["kind"] == "step"]  # no step is logged at log_every 0
    epochs = [(int(row["step"]), float(row["loss/epoch"])) for row in rows if row["kind"] == "epoch"]
    assert epochs == expected and len(epochs) == 2 * r.config["train"]["epochs"]
    acc = EventAccumulator(str(r.path.parent / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss/epoch")] == [(s, pytest.approx(v, rel=1e-6))
                                                                     for s, v in expected]
