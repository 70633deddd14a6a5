"""The "results you can trust" fault suite, as data: one :class:`Fault` per thing that can go wrong.

Each fault has a scenario (set the fault up in a fresh folder and run the ``clbench`` command a user would
run, in this process, with in-memory plugins where the fault is a plugin's), the exit code and the
message the user must get, and what must survive on disk (a check and a sentence for the docs).

``tests/test_trust.py`` parametrizes over :data:`FAULTS`; ``docs/gen_faults.py`` runs them all and writes
``docs/faults.md`` with :func:`render` (a test checks that file is current). Scenarios do all the work
(runs, tampering, reruns) and leave evidence in their folder; checks only read it, so an outcome is
computed once per process and shared by the test and the doc.

What a user sees is made deterministic: the scenario's folder is ``<tmp>`` and its ``--out`` is
``<out>``; memory addresses and timings are masked.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

from clbench import testing
from clbench._cli import main as clbench_cli
from clbench.cell import CHECKPOINT_FILE, ERROR_LOG, FOOTPRINT_FILE, RESULT_FILE, TEST_PROFILE
from clbench.hookspecs import hookimpl
from clbench.method import Method
from clbench.specs import MethodSpec, MetricSpec, StreamSpec

# --------------------------------------------------------------------------- running the command
TINY = ("--profile", TEST_PROFILE, "--stream", "tiny-vector", "--no-progress", "--no-leaderboard")
DIGITS = ("--stream", "split-digits", "--set", "train.epochs=1", "--seeds", "0", "--no-progress", "--no-leaderboard")


class Outcome(NamedTuple):
    """What a scenario ends with: the decisive command's exit code and stderr (normalised), its folder,
    and its stdout (normalised) for the faults whose answer is printed there."""

    code: int
    stderr: str
    tmp: Path
    stdout: str = ""


def out_of(tmp: Path) -> Path:
    """The ``--out`` of a scenario (``<out>`` in what the user sees)."""
    return tmp / "runs"


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_TIME = re.compile(r"\btime: [0-9.]+s\b")
_HASH = re.compile(r"\b[0-9a-f]{12}\b")  # config-hash prefixes: they move with any default, not with the fault


def normalise(text: str, tmp: Path) -> str:
    """Scenario paths as ``<out>``/``<tmp>``; memory addresses, timings and config-hash prefixes masked."""
    for root in {str(tmp), os.path.realpath(tmp)}:
        text = text.replace(str(Path(root) / "runs"), "<out>").replace(root, "<tmp>")
    text = _ADDRESS.sub("0x…", text)
    text = _HASH.sub("<hash>", text)
    return _TIME.sub("time: …s", text)


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    # What Python does by default (print to stderr, formatted by warnings.formatwarning, which `clbench` sets
    # to one line), but also under pytest, which would otherwise collect the warning instead of printing it.
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def clbench(tmp: Path, *args: str, plugins: Sequence[object] = ()) -> Outcome:
    """``clbench ARGS`` in this process, in folder ``tmp``, with ``plugins`` (and the tiny test plugin of
    :mod:`clbench.testing`) registered beside the installed ones. An exception that escapes ``main`` is
    what Python would print: a traceback and exit 1."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setattr(clbench_cli, "harness_registry",
                   lambda disabled=(): testing.registry(*plugins, disabled=disabled))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = _show_warning
            try:
                clbench_cli.main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - the user would see this traceback
                err.write(traceback.format_exc())
                code = 1
    return Outcome(code, normalise(err.getvalue(), tmp), tmp, normalise(out.getvalue(), tmp))


def tiny(tmp: Path, *args: str, plugins: Sequence[object] = ()) -> Outcome:
    """``clbench run`` on the two-task tiny-vector stream (test profile) into ``<out>``."""
    return clbench(tmp, "run", *TINY, *args, "--out", str(out_of(tmp)), plugins=plugins)


class SetupError(AssertionError):
    """A step before the fault did not go as it must (the scenario itself is broken)."""


def ok(o: Outcome, code: int = 0) -> Outcome:
    if o.code != code:
        raise SetupError(f"setup step exited {o.code}, expected {code}:\n{o.stderr}")
    return o


# --------------------------------------------------------------------------- evidence on disk
def results(tmp: Path) -> dict[str, dict[str, Any]]:
    """Every result.json under ``<out>``, by its folder relative to ``<out>``."""
    out = out_of(tmp)
    return {p.parent.relative_to(out).as_posix(): json.loads(p.read_text()) for p in sorted(out.rglob(RESULT_FILE))}


def result(tmp: Path, cell: str) -> dict[str, Any]:
    return json.loads((out_of(tmp) / cell / RESULT_FILE).read_text())


def matrices(root: Path) -> dict[str, Any]:
    return {p.parent.relative_to(root).as_posix(): json.loads(p.read_text())["accuracy_matrix"]
            for p in sorted(root.rglob(RESULT_FILE))}


def snapshot(tmp: Path) -> None:
    """Record the sha256 of every file under ``<out>`` (see :func:`unchanged`)."""
    out = out_of(tmp)
    digests = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(out.rglob("*")) if p.is_file() and p.name != ".clbench.lock"}
    (tmp / "snapshot.json").write_text(json.dumps(digests, indent=1))


def unchanged(tmp: Path) -> None:
    """Every file recorded by :func:`snapshot` is still there, byte-identical, and no result was added."""
    before = json.loads((tmp / "snapshot.json").read_text())
    out = out_of(tmp)
    for rel, digest in before.items():
        path = out / rel
        assert path.exists(), f"{rel} was deleted"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{rel} was rewritten"
    added = sorted(p.relative_to(out).as_posix() for p in out.rglob(RESULT_FILE)
                   if p.relative_to(out).as_posix() not in before)
    assert not added, f"results were added: {added}"


def evidence(tmp: Path, **data: Any) -> None:
    (tmp / "evidence.json").write_text(json.dumps(data, indent=1, sort_keys=True))


def read_evidence(tmp: Path) -> dict[str, Any]:
    return json.loads((tmp / "evidence.json").read_text())


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def table_rows(text: str) -> list[list[str]]:
    """The rows of a GitHub-style table printed by `clbench verify` / `compare`, cells stripped."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines(text)
            if line.startswith("|") and not line.startswith("|-")]


# --------------------------------------------------------------------------- in-memory plugins
class Specs:
    """A plugin that registers the specs it is given; each fault uses its own subclass, whose name is the
    plugin name clbench reports (``faultsuite.StringMetricPlugin``)."""

    def __init__(self, methods: Sequence[MethodSpec] = (), metrics: Sequence[MetricSpec] = (),
                 streams: Sequence[StreamSpec] = ()) -> None:
        self.methods, self.metrics, self.streams = list(methods), list(metrics), list(streams)

    @hookimpl
    def clbench_add_methods(self) -> list[MethodSpec]:
        return self.methods

    @hookimpl
    def clbench_add_metrics(self) -> list[MetricSpec]:
        return self.metrics

    @hookimpl
    def clbench_add_streams(self) -> list[StreamSpec]:
        return self.streams


@dataclass(frozen=True)
class BoomConfig:
    explode: bool = False
    note: str = ""  # a free string setting: what a sweep value can put into a folder name


class Boom(Method):
    """Fails after its first task when ``boom.explode=true``; plain fine-tuning otherwise."""

    def after_task(self, task: str, index: int) -> None:
        if self.config.explode:
            raise RuntimeError("boom.explode is set")


class Raising(Method):
    def after_task(self, task: str, index: int) -> None:
        raise RuntimeError("plugin bug in after_task")


class Exploding(Method):
    """The loss becomes NaN on the second task: a divergence, which is a result."""

    def loss_terms(self, batch: Any, logits: Any) -> dict[str, torch.Tensor]:
        if batch.task == self.ctx.order[1]:
            return {"boom": logits.sum() * float("nan")}
        return {}


class BlowingUp(Method):
    """From the second epoch of the second task on, a constant 1e4 joins the loss: a blow-up that stays finite."""

    epoch = 0

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self.epoch = 0

    def after_epoch(self, phase: Any, epoch: int) -> None:
        self.epoch = epoch + 1

    def loss_terms(self, batch: Any, logits: Any) -> dict[str, torch.Tensor]:
        if batch.task == self.ctx.order[1] and self.epoch >= 1:
            return {"blowup": logits.new_tensor(1e4)}
        return {}


class TensorReport(Method):
    def report(self) -> Any:
        return torch.tensor(1.0)


class TensorInReport(Method):
    def report(self) -> Any:
        return {"capacity": torch.tensor(0.5)}


class FloatLoss(Method):
    needs_logits = False

    def loss_terms(self, batch: Any, logits: Any) -> Any:
        return 0.5


class BoomPlugin(Specs):
    pass


class RaisingPlugin(Specs):
    pass


class ExplodingPlugin(Specs):
    pass


class StringMetricPlugin(Specs):
    pass


class TensorReportPlugin(Specs):
    pass


class TensorInReportPlugin(Specs):
    pass


class ListStreamPlugin(Specs):
    pass


class FloatLossPlugin(Specs):
    pass


class HigherMetricPlugin(Specs):
    pass


class SparseFootprintPlugin(Specs):
    pass


class TypoPresetPlugin(Specs):
    pass


class CellEndObserver:
    """Raises when the seqft cell ends (the other cells it sees end normally)."""

    @hookimpl
    def clbench_cell_end(self, cell: Any, result: Any) -> None:
        if cell.method == "seqft":
            raise RuntimeError("observer bug on seqft")


class RunStartObserver:
    @hookimpl
    def clbench_run_start(self, plan: Any) -> None:
        raise RuntimeError("tracker is offline")


class RunEndObserver:
    @hookimpl
    def clbench_run_end(self, plan: Any, results: Any) -> None:
        raise RuntimeError("cannot upload the summary")


class TaskEndObserver:
    """Raises after the first task of the ewc cell."""

    @hookimpl
    def clbench_task_end(self, cell: Any, task: str, index: int, accuracy_row: Any) -> None:
        if cell.method == "ewc":
            raise ValueError(f"cannot log task {task!r}")


class NoneFactoryPlugin(Specs):
    pass


def _tiny_preset() -> dict[str, Any]:
    return dict(testing.registry().streams.get("tiny-vector").presets)


# --------------------------------------------------------------------------- the faults
@dataclass(frozen=True)
class Fault:
    """One fault: ``run(tmp)`` sets it up in the empty folder ``tmp`` and runs it; the user must then get
    ``exit_code`` and a line containing ``sees`` (no traceback), and ``check(outcome)`` (which only reads)
    must pass: that is what ``survives`` says in words."""

    id: str
    what: str
    run: Callable[[Path], Outcome]
    exit_code: int
    sees: str
    survives: str
    check: Callable[[Outcome], None] = field(default=lambda o: None)
    # a regex over the line shown in docs/faults.md for a number training produces (it may differ on another
    # CPU); the match is shown as `<n>`
    mask: str | None = None


FAULTS: list[Fault] = []


def fault(id: str, what: str, exit_code: int, sees: str, survives: str) -> Callable[[Callable[[Path], Outcome]], Any]:
    """Decorator: register the scenario below it; its ``check`` is attached with ``@<scenario>.check``."""

    def register(run: Callable[[Path], Outcome]) -> Any:
        holder: dict[str, Callable[[Outcome], None]] = {"check": lambda o: None}
        FAULTS.append(Fault(id, what, run, exit_code, sees, survives, lambda o: holder["check"](o)))

        def set_check(check: Callable[[Outcome], None]) -> Callable[[Outcome], None]:
            holder["check"] = check
            return check

        run.check = set_check  # type: ignore[attr-defined]
        return run

    return register


# ---- 1. a rerun into the same --out -------------------------------------------------------------
def _rerun_with(first: str, second: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        ok(tiny(tmp, "--methods", "ewc", "--set", first))
        snapshot(tmp)
        return tiny(tmp, "--methods", "ewc", "--set", second)

    return scenario


def _refused_and_kept(o: Outcome) -> None:
    unchanged(o.tmp)
    assert "error: 1 of 1 cells already hold results in <out>/ that are not theirs; nothing was run or deleted:" \
        in o.stderr, o.stderr
    assert o.stderr.rstrip().endswith("Use another --out, or move those cell folders away to run them with these "
                                      "settings (a sweep, `--set KEY=a,b`, runs values side by side)"), o.stderr


for _id, _what, _first, _second, _diff in [
    ("rerun-method-setting", "rerun into the same --out with `--set ewc.lambda=3` (was 10)",
     "ewc.lambda=10", "ewc.lambda=3", "methods.ewc.lambda: 10.0 → 3.0"),
    ("rerun-train-setting", "rerun into the same --out with `--set train.epochs=2` (was 1)",
     "train.epochs=1", "train.epochs=2", "train.epochs: 1 → 2"),
    ("rerun-model-setting", "rerun into the same --out with `--set model.hidden=32` (was 16)",
     "model.hidden=16", "model.hidden=32", "model.hidden: [16] → [32]"),
    ("rerun-metrics-setting", "rerun into the same --out with `--set metrics.tolerance=0.01` (was 0.001)",
     "metrics.tolerance=0.001", "metrics.tolerance=0.01", "metrics.tolerance: 0.001 → 0.01"),
]:
    FAULTS.append(Fault(_id, _what, _rerun_with(_first, _second), 2,
                        f"<out>/tiny-vector/ewc/order-1/seed-0/result.json: holds a result for other settings: {_diff}",
                        "nothing runs; the old result.json and footprints are byte-identical", _refused_and_kept))


@fault("rerun-same-settings", "rerun of a finished grid with the same settings", 0,
       "clbench: 1 cell: 1 complete; 1 reused; exit 0", "the cell is reused, not rerun: its files are byte-identical")
def rerun_same(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc", "--set", "ewc.lambda=10"))
    snapshot(tmp)
    return tiny(tmp, "--methods", "ewc", "--set", "ewc.lambda=10")


@rerun_same.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)


@fault("rerun-same-settings-respelled", "rerun with `--set ewc.lambda=1e1` after `--set ewc.lambda=10`", 0,
       "clbench: 1 cell: 1 complete; 1 reused; exit 0", "the cell is reused (the same value, spelt otherwise): files byte-identical")
def rerun_respelled(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc", "--set", "ewc.lambda=10"))
    snapshot(tmp)
    return tiny(tmp, "--methods", "ewc", "--set", "ewc.lambda=1e1")


@rerun_respelled.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)


@fault("rerun-failed-other-settings", "rerun, with other settings, of a cell whose result is `failed`", 0,
       "clbench: 1 cell: 1 complete; 0 reused; exit 0",
       "a complete result with the new settings replaces the failed one (and its error.log is removed)")
def rerun_failed(tmp: Path) -> Outcome:
    plugin = BoomPlugin(methods=[MethodSpec("boom", Boom, BoomConfig)])
    first = ok(tiny(tmp, "--methods", "boom", "--set", "boom.explode=true", plugins=[plugin]), 1)
    evidence(tmp, first=result(tmp, "tiny-vector/boom/order-1/seed-0")["status"], first_err=first.stderr)
    return tiny(tmp, "--methods", "boom", "--set", "boom.explode=false", plugins=[plugin])


@rerun_failed.check
def _(o: Outcome) -> None:
    assert read_evidence(o.tmp)["first"] == "failed"
    r = result(o.tmp, "tiny-vector/boom/order-1/seed-0")
    assert r["status"] == "complete" and r["error"] is None
    assert r["config"]["methods"]["boom"]["explode"] is False
    assert all(v is not None for row in r["accuracy_matrix"] for v in row)
    assert not (out_of(o.tmp) / "tiny-vector/boom/order-1/seed-0/error.log").exists()


# ---- 2. exit codes -------------------------------------------------------------------------------
@fault("failed-cell", "a method raises in `after_task` (`--methods raising,seqft`)", 1,
       "failed: tiny-vector/raising/order-1/seed-0: RuntimeError: plugin bug in after_task in plugin "
       "'faultsuite.RaisingPlugin' (no installed distribution) at faultsuite.py:",
       "that cell's result.json (`failed`) and error.log (the traceback); seqft complete")
def failed_cell(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "raising,seqft", plugins=[RaisingPlugin(methods=[MethodSpec("raising", Raising)])])


@failed_cell.check
def _(o: Outcome) -> None:
    [failed] = [line for line in lines(o.stderr) if line.startswith("failed:")]
    assert failed.endswith(" (traceback: <out>/tiny-vector/raising/order-1/seed-0/error.log)"), failed
    assert lines(o.stderr)[-1] == "clbench: 2 cells: 1 complete, 1 failed; 0 reused; exit 1", o.stderr
    assert result(o.tmp, "tiny-vector/raising/order-1/seed-0")["status"] == "failed"
    assert "Traceback" in (out_of(o.tmp) / "tiny-vector/raising/order-1/seed-0" / ERROR_LOG).read_text()
    assert result(o.tmp, "tiny-vector/seqft/order-1/seed-0")["status"] == "complete"


@fault("diverged-cell", "the loss of a method becomes NaN on the second task", 0,
       "diverged: tiny-vector/exploding/order-1/seed-0: loss became nan on task 't1' (task 2, phase train, epoch 1, step 9)",
       "a `diverged` result with the first task's row; seqft complete")
def diverged_cell(tmp: Path) -> Outcome:
    plugin = ExplodingPlugin(methods=[MethodSpec("exploding", Exploding)])
    return tiny(tmp, "--methods", "exploding,seqft", plugins=[plugin])


def _diverged_beside_seqft(o: Outcome, method: str) -> dict[str, Any]:
    """The run ended exit 0 with ``method``'s cell diverged on its second task (its first row kept) and seqft
    complete; returns where it diverged."""
    assert lines(o.stderr)[-1] == "clbench: 2 cells: 1 complete, 1 diverged; 0 reused; exit 0", o.stderr
    r = result(o.tmp, f"tiny-vector/{method}/order-1/seed-0")
    assert r["status"] == "diverged" and r["accuracy_matrix"][0][0] is not None and r["accuracy_matrix"][1] == [None, None]
    assert result(o.tmp, "tiny-vector/seqft/order-1/seed-0")["status"] == "complete"
    return r["divergence"]


@diverged_cell.check
def _(o: Outcome) -> None:
    assert _diverged_beside_seqft(o, "exploding") == {"task": "t1", "index": 1, "phase": "train", "epoch": 1,
                                                      "step": 9, "loss": "nan", "reference": None}


@fault("blown-up-cell", "a method adds 1e4 to the loss from the second epoch of the second task (finite)", 0,
       "diverged: tiny-vector/blowup/order-1/seed-0: epoch mean loss",
       "a `diverged` result with the first task's row and where it blew up (`divergence`); seqft complete")
def blown_up_cell(tmp: Path) -> Outcome:
    plugin = ExplodingPlugin(methods=[MethodSpec("blowup", BlowingUp)])
    return tiny(tmp, "--methods", "blowup,seqft", plugins=[plugin])


@blown_up_cell.check
def _(o: Outcome) -> None:
    where = _diverged_beside_seqft(o, "blowup")
    assert (where["task"], where["index"], where["phase"], where["epoch"]) == ("t1", 1, "train", 2)
    assert where["loss"] > 100 * where["reference"] >= 100


@fault("fail-fast", "`--fail-fast` and a method that raises", 1,
       "error: stopped at the first failed cell (--fail-fast): tiny-vector/raising/order-1/seed-0: RuntimeError: "
       "plugin bug in after_task", "the failed cell's result.json and error.log; no later cell is started")
def fail_fast(tmp: Path) -> Outcome:
    plugin = RaisingPlugin(methods=[MethodSpec("raising", Raising)])
    return tiny(tmp, "--methods", "raising,seqft", "--fail-fast", plugins=[plugin])


@fail_fast.check
def _(o: Outcome) -> None:
    assert len(lines(o.stderr)) == 2 and lines(o.stderr)[0].startswith("clbench: 2 cells,"), o.stderr  # one line
    assert lines(o.stderr)[-1].endswith("(traceback in <out>/tiny-vector/raising/order-1/seed-0/error.log)"), o.stderr
    assert result(o.tmp, "tiny-vector/raising/order-1/seed-0")["status"] == "failed"
    assert not (out_of(o.tmp) / "tiny-vector" / "seqft").exists()


@fault("usage-error", "a misspelt method (`--methods ewcc`)", 2,
       "error: unknown method 'ewcc' — did you mean 'ewc'?", "nothing: the output folder is not created")
def usage_error(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "ewcc")


def _nothing_written(o: Outcome) -> None:
    assert not out_of(o.tmp).exists(), sorted(str(p) for p in out_of(o.tmp).rglob("*"))
    assert len(lines(o.stderr)) == 1, o.stderr


usage_error.check(_nothing_written)


# ---- 3. plugin faults ----------------------------------------------------------------------------
@fault("metric-returns-string", "a metric plugin returns the string `'high'`", 0,
       "metric high: error: metric 'high' (plugin 'faultsuite.StringMetricPlugin', no installed distribution): "
       "ValueError: returned str 'high', expected a number or None",
       "both cells complete; the metric is null with its error in `metric_errors` (shown by `clbench show`)")
def metric_string(tmp: Path) -> Outcome:
    plugin = StringMetricPlugin(metrics=[MetricSpec("high", lambda inp: "high", "up")])
    run = tiny(tmp, "--methods", "seqft,ewc", plugins=[plugin])
    show = clbench(tmp, "show", str(out_of(tmp) / "tiny-vector/seqft/order-1/seed-0"), plugins=[plugin])
    evidence(tmp, show_code=show.code)
    return Outcome(run.code, run.stderr + show.stdout + show.stderr, tmp, show.stdout)


@metric_string.check
def _(o: Outcome) -> None:
    assert read_evidence(o.tmp)["show_code"] == 0
    for cell in ("tiny-vector/seqft/order-1/seed-0", "tiny-vector/ewc/order-1/seed-0"):
        r = result(o.tmp, cell)
        assert r["status"] == "complete"
        assert r["metrics"]["high"] is None and isinstance(r["metrics"]["AA"], float)
        assert r["metric_errors"]["high"].startswith("metric 'high' (plugin 'faultsuite.StringMetricPlugin',")


@fault("report-returns-tensor", "a method's `report()` returns a tensor (`--methods tensor-report,seqft`)", 1,
       "failed: tiny-vector/tensor-report/order-1/seed-0: PluginError: method 'tensor-report' (plugin "
       "'faultsuite.TensorReportPlugin', no installed distribution): report() returned Tensor, expected a dict",
       "that cell `failed`; the next cell (seqft) runs and completes")
def report_tensor(tmp: Path) -> Outcome:
    plugin = TensorReportPlugin(methods=[MethodSpec("tensor-report", TensorReport)])
    return tiny(tmp, "--methods", "tensor-report,seqft", plugins=[plugin])


@fault("report-holds-tensor", "a method's `report()` is `{'capacity': tensor(0.5)}`", 1,
       "failed: tiny-vector/tensor-in-report/order-1/seed-0: PluginError: method 'tensor-in-report' (plugin "
       "'faultsuite.TensorInReportPlugin', no installed distribution): report() is not JSON-serialisable "
       "(Object of type Tensor is not JSON serializable)",
       "that cell `failed`; the next cell (seqft) runs and completes")
def report_holds_tensor(tmp: Path) -> Outcome:
    plugin = TensorInReportPlugin(methods=[MethodSpec("tensor-in-report", TensorInReport)])
    return tiny(tmp, "--methods", "tensor-in-report,seqft", plugins=[plugin])


def _bad_cell_then_seqft(method: str) -> Callable[[Outcome], None]:
    def check(o: Outcome) -> None:
        assert result(o.tmp, f"tiny-vector/{method}/order-1/seed-0")["status"] == "failed"
        assert result(o.tmp, "tiny-vector/seqft/order-1/seed-0")["status"] == "complete"
        assert lines(o.stderr)[-1] == "clbench: 2 cells: 1 complete, 1 failed; 0 reused; exit 1", o.stderr

    return check


report_tensor.check(_bad_cell_then_seqft("tensor-report"))
report_holds_tensor.check(_bad_cell_then_seqft("tensor-in-report"))


@fault("loss-terms-float", "a method's `loss_terms` returns the float 0.5", 1,
       "failed: tiny-vector/float-loss/order-1/seed-0: PluginError: method 'float-loss' (plugin "
       "'faultsuite.FloatLossPlugin', no installed distribution): loss_terms returned float, expected a mapping "
       "of name → scalar tensor", "that cell `failed` (it did not train as plain fine-tuning); seqft complete")
def loss_float(tmp: Path) -> Outcome:
    plugin = FloatLossPlugin(methods=[MethodSpec("float-loss", FloatLoss)])
    return tiny(tmp, "--methods", "float-loss,seqft", plugins=[plugin])


loss_float.check(_bad_cell_then_seqft("float-loss"))


@fault("stream-factory-type", "a stream factory returns a list", 2,
       "error: stream 'list-stream' (plugin 'faultsuite.ListStreamPlugin', no installed distribution): factory "
       "returned list, expected Stream", "nothing: refused before any cell")
def stream_type(tmp: Path) -> Outcome:
    plugin = ListStreamPlugin(streams=[StreamSpec("list-stream", lambda config: [1, 2], presets=_tiny_preset())])
    return clbench(tmp, "run", "--profile", TEST_PROFILE, "--stream", "list-stream", "--methods", "seqft",
                   "--no-progress", "--out", str(out_of(tmp)), plugins=[plugin])


stream_type.check(_nothing_written)


def _broken_stream(config: object) -> object:
    raise FileNotFoundError("labels.json")


@fault("stream-factory-raises", "a stream factory raises while the grid is planned", 2,
       "error: stream 'broken-stream' (plugin 'faultsuite.ListStreamPlugin', no installed distribution): factory "
       "raised FileNotFoundError: labels.json in plugin 'faultsuite.ListStreamPlugin'", "nothing: refused before any cell")
def stream_raises(tmp: Path) -> Outcome:
    plugin = ListStreamPlugin(streams=[StreamSpec("broken-stream", _broken_stream, presets=_tiny_preset())])
    return clbench(tmp, "run", "--profile", TEST_PROFILE, "--stream", "broken-stream", "--methods", "seqft",
                   "--no-progress", "--out", str(out_of(tmp)), plugins=[plugin])


stream_raises.check(_nothing_written)


@fault("metric-direction", "`MetricSpec(direction=\"higher\")`", 2,
       "error: plugin 'faultsuite.HigherMetricPlugin' (no installed distribution): MetricSpec 'higher' has "
       "direction='higher'; choose one of 'up', 'down'", "nothing: refused when the plugins are loaded")
def metric_direction(tmp: Path) -> Outcome:
    plugin = HigherMetricPlugin(metrics=[MetricSpec("higher", lambda inp: 1.0, "higher")])  # type: ignore[arg-type]
    return tiny(tmp, "--methods", "seqft", plugins=[plugin])


metric_direction.check(_nothing_written)


@fault("footprint-kind", "`MethodSpec(footprint_kind=\"sparse\")`", 2,
       "error: plugin 'faultsuite.SparseFootprintPlugin' (no installed distribution): MethodSpec 'sparse' has "
       "footprint_kind='sparse'; choose one of 'dense', 'lowrank', 'masked', 'none'",
       "nothing: refused when the plugins are loaded")
def footprint_kind(tmp: Path) -> Outcome:
    plugin = SparseFootprintPlugin(methods=[MethodSpec("sparse", Method, footprint_kind="sparse")])  # type: ignore[arg-type]
    return tiny(tmp, "--methods", "seqft", plugins=[plugin])


footprint_kind.check(_nothing_written)


def _typo_preset(key: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        plugin = TypoPresetPlugin(methods=[MethodSpec("typo-preset", Method, presets={key: {}})])
        return tiny(tmp, "--methods", "typo-preset", plugins=[plugin])

    return scenario


FAULTS.append(Fault("preset-unknown-profile", "a method preset keyed `quik`", _typo_preset("quik"), 2,
                    "error: method 'typo-preset' (plugin 'faultsuite.TypoPresetPlugin', no installed distribution) "
                    "has a preset 'quik' that names no profile 'quik' — did you mean 'quick'?",
                    "nothing: refused before any cell", _nothing_written))
FAULTS.append(Fault("preset-unknown-stream", "a method preset keyed `quick/rotated-digit`",
                    _typo_preset("quick/rotated-digit"), 2,
                    "error: method 'typo-preset' (plugin 'faultsuite.TypoPresetPlugin', no installed distribution) "
                    "has a preset 'quick/rotated-digit' that names no stream 'rotated-digit'",
                    "nothing: refused before any cell", _nothing_written))


@fault("set-method-not-in-run", "`--set ewc.c=1` while ewc is not in the run", 2,
       "error: --set ewc.c: method 'ewc' is not in this run (methods: seqft); add it to --methods or drop the setting",
       "nothing: refused before any cell")
def set_not_in_run(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--set", "ewc.c=1")


set_not_in_run.check(_nothing_written)


@fault("disable-unknown-plugin", "`-p no:ewcc` (a typo)", 2,
       "error: -p no:ewcc: no installed plugin is named 'ewcc' — did you mean 'ewc'?", "nothing: refused at start-up")
def disable_typo(tmp: Path) -> Outcome:
    return clbench(tmp, "-p", "no:ewcc", "run", *TINY, "--methods", "seqft", "--out", str(out_of(tmp)))


disable_typo.check(_nothing_written)


@fault("observer-cell-end", "an observer raises in `clbench_cell_end` of the seqft cell", 1,
       "failed: tiny-vector/seqft/order-1/seed-0: ObserverError: observer clbench_cell_end (plugin 'faultsuite.CellEndObserver', "
       "no installed distribution) raised RuntimeError: observer bug on seqft",
       "seqft `failed` (its matrix kept); the ewc cell complete")
def observer_cell_end(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft,ewc", plugins=[CellEndObserver()])


@observer_cell_end.check
def _(o: Outcome) -> None:
    r = result(o.tmp, "tiny-vector/seqft/order-1/seed-0")
    assert r["status"] == "failed" and all(v is not None for row in r["accuracy_matrix"] for v in row)
    assert result(o.tmp, "tiny-vector/ewc/order-1/seed-0")["status"] == "complete"
    assert lines(o.stderr)[-1] == "clbench: 2 cells: 1 complete, 1 failed; 0 reused; exit 1", o.stderr


@fault("observer-run-start", "an observer raises in `clbench_run_start`", 1,
       "fault: observer clbench_run_start (plugin 'faultsuite.RunStartObserver', no installed distribution) raised "
       "RuntimeError: tracker is offline", "the run goes on: every cell complete")
def observer_run_start(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft,ewc", plugins=[RunStartObserver()])


@observer_run_start.check
def _cells_complete_one_fault(o: Outcome) -> None:
    """A run-level observer's fault: every cell complete, the fault counted in the summary (exit 1)."""
    assert [r["status"] for r in results(o.tmp).values()] == ["complete", "complete"]
    assert lines(o.stderr)[-1] == "clbench: 2 cells: 2 complete; 0 reused; 1 observer fault; exit 1", o.stderr


@fault("observer-run-end", "an observer raises in `clbench_run_end`", 1,
       "fault: observer clbench_run_end (plugin 'faultsuite.RunEndObserver', no installed distribution) raised "
       "RuntimeError: cannot upload the summary", "every cell complete")
def observer_run_end(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft,ewc", plugins=[RunEndObserver()])


observer_run_end.check(_cells_complete_one_fault)


@fault("observer-task-end", "an observer raises in `clbench_task_end` of the ewc cell's first task", 1,
       "failed: tiny-vector/ewc/order-1/seed-0: ObserverError: observer clbench_task_end (plugin "
       "'faultsuite.TaskEndObserver', no installed distribution) raised ValueError: cannot log task 't0'",
       "ewc `failed` (its checkpoint kept: a rerun resumes); seqft complete")
def observer_task_end(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft,ewc", plugins=[TaskEndObserver()])


@observer_task_end.check
def _(o: Outcome) -> None:
    assert result(o.tmp, "tiny-vector/ewc/order-1/seed-0")["status"] == "failed"
    assert (out_of(o.tmp) / "tiny-vector/ewc/order-1/seed-0" / CHECKPOINT_FILE).exists()
    assert result(o.tmp, "tiny-vector/seqft/order-1/seed-0")["status"] == "complete"


@fault("method-factory-type", "a method factory returns None (`--methods none-factory,seqft`)", 1,
       "failed: tiny-vector/none-factory/order-1/seed-0: PluginError: method 'none-factory' (plugin "
       "'faultsuite.NoneFactoryPlugin', no installed distribution): factory returned NoneType, expected Method",
       "that cell `failed`; seqft complete")
def method_factory(tmp: Path) -> Outcome:
    plugin = NoneFactoryPlugin(methods=[MethodSpec("none-factory", lambda config, ctx: None)])
    return tiny(tmp, "--methods", "none-factory,seqft", plugins=[plugin])


method_factory.check(_bad_cell_then_seqft("none-factory"))


# ---- 4. sweeps -----------------------------------------------------------------------------------
@fault("sweep-one-method", "`--methods ewc,seqft --set ewc.lambda=1,2`", 0,
       "clbench: 3 cells, profile 'test'", "3 cells: ewc@lambda=1, ewc@lambda=2 and seqft once")
def sweep_one(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "ewc,seqft", "--set", "ewc.lambda=1,2")


@sweep_one.check
def _(o: Outcome) -> None:
    assert sorted(results(o.tmp)) == ["tiny-vector/ewc@lambda=1/order-1/seed-0", "tiny-vector/ewc@lambda=2/order-1/seed-0",
                                      "tiny-vector/seqft/order-1/seed-0"]
    assert result(o.tmp, "tiny-vector/seqft/order-1/seed-0")["method"] == "seqft"


# ---- 5. bad inputs -------------------------------------------------------------------------------
@fault("device-string", "`--set train.device=../../../../x`", 2,
       "error: train.device='../../../../x': choose auto, cpu, mps, cuda or cuda:N", "nothing is run or written")
def device_string(tmp: Path) -> Outcome:
    return clbench(tmp, "run", *TINY, "--methods", "seqft", "--set", "train.device=../../../../x", "--out",
                   str(tmp / "runs"))


@device_string.check
def _(o: Outcome) -> None:
    assert not (o.tmp / "runs").exists()


@fault("sweep-path-escape", "`--set \"boom.note=../../../../x,cuda:7\"` (a sweep value with `/` and `:`)", 0,
       "clbench: 2 cells: 2 complete; 0 reused; exit 0", "both cells complete, in %-escaped folders; every file written is "
       "inside --out")
def sweep_escape(tmp: Path) -> Outcome:
    (tmp / "a").mkdir()
    plugin = BoomPlugin(methods=[MethodSpec("boom", Boom, BoomConfig)])
    o = clbench(tmp, "run", *TINY, "--methods", "boom", "--set", "boom.note=../../../../x,cuda:7",
                "--out", str(tmp / "a" / "runs"), plugins=[plugin])
    return Outcome(o.code, o.stderr.replace("<tmp>/a/runs", "<out>"), tmp, o.stdout)


@sweep_escape.check
def _(o: Outcome) -> None:
    out = (o.tmp / "a" / "runs").resolve()
    written = [p for p in o.tmp.rglob("*") if p.is_file()]
    assert written and all(p.resolve().is_relative_to(out) for p in written), written
    assert sorted(p.name for p in (out / "tiny-vector").iterdir()) == ["boom@note=..%2F..%2F..%2F..%2Fx",
                                                                       "boom@note=cuda%3A7"]
    assert not (o.tmp / "a" / "x").exists() and not (o.tmp / "x").exists()


def _killed_then(tamper: Callable[[Path, Path], None], *sets: str) -> Callable[[Path], Outcome]:
    """A reference ewc run in <tmp>/ref; an ewc run killed after its first task in <out>; ``tamper(tmp,
    checkpoint)``; then the same command again in <out>."""

    def scenario(tmp: Path) -> Outcome:
        ref = tmp / "ref"
        ok(clbench(tmp, "run", *TINY, "--methods", "ewc", "--out", str(ref)))
        ok(tiny(tmp, "--methods", "ewc", *sets, plugins=[testing.KillAfterTask(0)]), 130)
        [checkpoint] = out_of(tmp).rglob(CHECKPOINT_FILE)
        tamper(tmp, checkpoint)
        return tiny(tmp, "--methods", "ewc")

    return scenario


def _drop_a_key(tmp: Path, checkpoint: Path) -> None:
    payload = torch.load(checkpoint, weights_only=True)
    del payload["model"][sorted(payload["model"])[0]]
    torch.save(payload, checkpoint)


def _other_shapes(tmp: Path, checkpoint: Path) -> None:
    other = tmp / "other"
    ok(clbench(tmp, "run", *TINY, "--methods", "ewc", "--set", "model.hidden=32", "--out", str(other),
               plugins=[testing.KillAfterTask(0)]), 130)
    [theirs] = other.rglob(CHECKPOINT_FILE)
    payload = torch.load(theirs, weights_only=True)
    payload["config_hash"] = torch.load(checkpoint, weights_only=True)["config_hash"]  # passes the hash test
    torch.save(payload, checkpoint)


def _same_as_reference(o: Outcome) -> None:
    cell = "tiny-vector/ewc/order-1/seed-0"
    assert result(o.tmp, cell)["status"] == "complete"
    assert matrices(out_of(o.tmp)) == matrices(o.tmp / "ref")
    assert not (out_of(o.tmp) / cell / CHECKPOINT_FILE).exists()


FAULTS += [
    Fault("checkpoint-missing-keys", "a checkpoint with a model weight missing",
          _killed_then(_drop_a_key), 0,
          "warning: <out>/tiny-vector/ewc/order-1/seed-0/checkpoint.pt: checkpoint does not fit this cell "
          "(ValueError: its weights do not match this build (missing ['",
          "the cell starts over and completes with the same matrix as a clean run", _same_as_reference),
    Fault("checkpoint-other-shapes", "a checkpoint of another model's shapes (hidden 32, hash patched to match)",
          _killed_then(_other_shapes), 0,
          "warning: <out>/tiny-vector/ewc/order-1/seed-0/checkpoint.pt: checkpoint does not fit this cell",
          "the cell starts over and completes with the same matrix as a clean run", _same_as_reference),
    Fault("checkpoint-other-settings", "a run killed with `--set ewc.lambda=3`, rerun without it",
          _killed_then(lambda tmp, checkpoint: None, "--set", "ewc.lambda=3"), 0,
          "warning: <out>/tiny-vector/ewc/order-1/seed-0/checkpoint.pt: checkpoint of other settings (config hash ",
          "the cell starts over and completes with the same matrix as a clean run", _same_as_reference),
]


@fault("disk-full-footprints", "the disk is full while footprints.safetensors is written", 1,
       "failed: tiny-vector/ewc/order-1/seed-0: cannot write <out>/tiny-vector/ewc/order-1/seed-0/footprints.safetensors: "
       "No space left on device", "result.json (`failed`, full matrix); no footprint file, no temp file")
def disk_full(tmp: Path) -> Outcome:
    from clbench import footprints

    class Full(io.BytesIO):  # a file on a full disk: its first write fails
        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def opener(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = open(file, mode, *args, **kwargs)
        if "w" in mode and Path(file).name.startswith(f".{FOOTPRINT_FILE}."):
            handle.close()
            return Full()
        return handle

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(footprints, "open", opener, raising=False)  # the footprint writer's open, no other
        return tiny(tmp, "--methods", "ewc")


@disk_full.check
def _(o: Outcome) -> None:
    cell = out_of(o.tmp) / "tiny-vector/ewc/order-1/seed-0"
    r = json.loads((cell / RESULT_FILE).read_text())
    assert r["status"] == "failed" and all(v is not None for row in r["accuracy_matrix"] for v in row)
    assert not (cell / FOOTPRINT_FILE).exists()
    assert not list(out_of(o.tmp).rglob("*.tmp"))


@fault("leaderboard-read-only", "`clbench leaderboard --out` a folder we may not write", 2,
       "error: cannot write leaderboards to <tmp>/boards/: Permission denied", "the results; no leaderboard file")
def leaderboard_read_only(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    boards = tmp / "boards"
    boards.mkdir()
    args = ("leaderboard", str(out_of(tmp)), "--out", str(boards), "--no-plots")
    if os.geteuid() != 0:
        boards.chmod(0o500)
        try:
            return clbench(tmp, *args)
        finally:
            boards.chmod(0o700)
    from clbench import data

    def denied(path: Path, text: str) -> None:  # root ignores permissions: deny as the kernel would
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data, "atomic_write_text", denied)
        return clbench(tmp, *args)


@leaderboard_read_only.check
def _(o: Outcome) -> None:
    assert len(lines(o.stderr)) == 1, o.stderr
    assert not list((o.tmp / "boards").iterdir())
    assert results(o.tmp)["tiny-vector/seqft/order-1/seed-0"]["status"] == "complete"


@fault("show-short-matrix", "`clbench show` on a result.json whose matrix has fewer rows than tasks", 2,
       "error: <out>/tiny-vector/seqft/order-1/seed-0/result.json: not a clbench result", "the file, untouched")
def show_short(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    path = out_of(tmp) / "tiny-vector/seqft/order-1/seed-0" / RESULT_FILE
    data = json.loads(path.read_text())
    data["accuracy_matrix"] = data["accuracy_matrix"][:1]
    path.write_text(json.dumps(data))
    snapshot(tmp)
    return clbench(tmp, "show", str(path.parent))


@show_short.check
def _(o: Outcome) -> None:
    assert len(lines(o.stderr)) == 1, o.stderr
    unchanged(o.tmp)


def _copied_result(tmp: Path) -> Path:
    ok(tiny(tmp, "--methods", "seqft"))
    target = out_of(tmp) / "tiny-vector/seqft/order-2/seed-0"
    target.mkdir(parents=True)
    shutil.copy(out_of(tmp) / "tiny-vector/seqft/order-1/seed-0" / RESULT_FILE, target / RESULT_FILE)
    snapshot(tmp)
    return target


@fault("copied-result-run", "a result.json copied into another cell's folder (order-1's into order-2), then a run", 2,
       "<out>/tiny-vector/seqft/order-2/seed-0/result.json: holds the result of another cell "
       "(tiny-vector/seqft/order-1/seed-0), not of tiny-vector/seqft/order-2/seed-0",
       "nothing runs; both result files byte-identical")
def copied_run(tmp: Path) -> Outcome:
    _copied_result(tmp)
    return tiny(tmp, "--methods", "seqft", "--orders", "1,2")


@copied_run.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    assert not (out_of(o.tmp) / "tiny-vector/seqft/order-2/seed-0" / FOOTPRINT_FILE).exists()


@fault("copied-result-leaderboard", "the same copied result.json, then `clbench leaderboard`", 0,
       "warning: skipping <out>/tiny-vector/seqft/order-2/seed-0/result.json: records cell tiny-vector/seqft/"
       "order-1/seed-0, but sits in tiny-vector/seqft/order-2/seed-0/",
       "the leaderboard is written from the real cell only; the copy is left alone")
def copied_leaderboard(tmp: Path) -> Outcome:
    _copied_result(tmp)
    return clbench(tmp, "leaderboard", str(out_of(tmp)), "--out", str(tmp / "boards"), "--no-plots")


@copied_leaderboard.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    board = (o.tmp / "boards" / f"{TEST_PROFILE}.md").read_text()
    assert "seqft/order-1" in board and "order-2" not in board, board


@fault("orphan-temp-files", "a `.result.json.abc123.tmp` left in --out by a killed write", 0,
       "warning: removed <out>/tiny-vector/seqft/order-1/seed-0/.result.json.abc123.tmp, a temp file left by an "
       "interrupted write", "the orphan is removed; the result and a user's `.notes.tmp` are kept")
def orphan_tmp(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    cell = out_of(tmp) / "tiny-vector/seqft/order-1/seed-0"
    snapshot(tmp)
    (cell / ".result.json.abc123.tmp").write_text('{"half": ')
    (out_of(tmp) / ".notes.tmp").write_text("mine")
    return tiny(tmp, "--methods", "seqft")


@orphan_tmp.check
def _(o: Outcome) -> None:
    assert not (out_of(o.tmp) / "tiny-vector/seqft/order-1/seed-0/.result.json.abc123.tmp").exists()
    assert (out_of(o.tmp) / ".notes.tmp").read_text() == "mine"
    unchanged(o.tmp)


def _under_umask(mask: int, earlier: int | None = None) -> Callable[[Path], Outcome]:
    """A run under ``mask``; with ``earlier``, after a first run in this process under that umask."""

    def scenario(tmp: Path) -> Outcome:
        if earlier is not None:
            old = os.umask(earlier)
            try:
                ok(clbench(tmp, "run", *TINY, "--methods", "seqft", "--out", str(tmp / "earlier")))
            finally:
                os.umask(old)
        old = os.umask(mask)
        try:
            return tiny(tmp, "--methods", "seqft")
        finally:
            os.umask(old)

    return scenario


def _modes(expected: int) -> Callable[[Outcome], None]:
    def check(o: Outcome) -> None:
        cell = out_of(o.tmp) / "tiny-vector/seqft/order-1/seed-0"
        modes = {name: oct((cell / name).stat().st_mode & 0o777) for name in (RESULT_FILE, FOOTPRINT_FILE)}
        assert modes == {RESULT_FILE: oct(expected), FOOTPRINT_FILE: oct(expected)}, modes

    return check


FAULTS += [
    Fault("file-mode-umask-022", "result files under umask 0o022 (written to a temp file, then renamed into place)", _under_umask(0o022), 0,
          "clbench: 1 cell: 1 complete; 0 reused; exit 0", "result.json and footprints.safetensors are 0o644",
          _modes(0o644)),
    # the umask is read at each write: a long-lived process (a notebook, a worker) follows a changed umask
    Fault("file-mode-umask-077", "result files under umask 0o077, after an earlier run under 0o022 in the same process",
          _under_umask(0o077, earlier=0o022), 0, "clbench: 1 cell: 1 complete; 0 reused; exit 0",
          "result.json and footprints.safetensors are 0o600", _modes(0o600)),
]


# click turns a KeyboardInterrupt raised inside a command (SIGTERM is one, clbench._cli.main._terminate) into click.Abort;
# clbench._cli.main.main answers both with the same "interrupted" line and exit code 130.
@fault("sigterm", "SIGTERM to `clbench run` (ewc, split-digits, orders 1-3) after its first cell", 130,
       "interrupted: finished cells and checkpoints are kept; rerun the same command to resume",
       "finished cells; no temp file; the same command again resumes to the matrices of an uninterrupted run")
def sigterm(tmp: Path) -> Outcome:
    out = out_of(tmp)
    args = ["run", *DIGITS, "--methods", "ewc", "--orders", "1,2,3", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "clbench", *args], cwd=tmp, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and not any(out.rglob(RESULT_FILE)) and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        raise SetupError(f"the run ended before SIGTERM (exit {proc.returncode}): {proc.stderr.read()}")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    done = sorted(p.parent.relative_to(out).as_posix() for p in out.rglob(RESULT_FILE))
    temp = sorted(p.name for p in out.rglob("*.tmp"))
    rerun = clbench(tmp, *args)
    ok(clbench(tmp, *[a if a != str(out) else str(tmp / "ref") for a in args]))
    evidence(tmp, done=done, temp=temp, rerun_code=rerun.code, rerun_err=rerun.stderr,
             resumed=matrices(out), reference=matrices(tmp / "ref"))
    return Outcome(proc.returncode, normalise(err, tmp), tmp)


@sigterm.check
def _(o: Outcome) -> None:
    e = read_evidence(o.tmp)
    assert 1 <= len(e["done"]) < 3, e["done"]  # interrupted after the first cell, before the last
    assert e["temp"] == [], e["temp"]
    assert e["rerun_code"] == 0, e["rerun_err"]
    assert len(e["reference"]) == 3 and e["resumed"] == e["reference"]


@fault("negative-seed", "`--seeds -1`", 2, "error: --seeds '-1': seeds are non-negative integers",
       "nothing: refused before any cell")
def negative_seed(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--seeds", "-1")


negative_seed.check(_nothing_written)


def _metrics_check(tamper: Callable[[Path], None]) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        ok(tiny(tmp, "--methods", "ewc"))
        tamper(out_of(tmp) / "tiny-vector/ewc/order-1/seed-0")
        snapshot(tmp)
        return clbench(tmp, "metrics", str(out_of(tmp)), "--check")

    return scenario


def _truncate(cell: Path) -> None:
    path = cell / FOOTPRINT_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _move_aa(cell: Path) -> None:
    data = json.loads((cell / RESULT_FILE).read_text())
    data["metrics"]["AA"] = 12.5
    (cell / RESULT_FILE).write_text(json.dumps(data))


def _checked_nothing_written(o: Outcome) -> None:
    unchanged(o.tmp)  # --check writes nothing


def _intact(o: Outcome) -> None:
    unchanged(o.tmp)
    [summary] = [line for line in lines(o.stderr) if line.startswith("clbench metrics: ")]
    assert re.search(r"\b0 (cells )?differ\b", summary) and not any(
        line.startswith("differs:") for line in lines(o.stderr)), o.stderr


FAULTS += [
    Fault("metrics-check-intact", "`clbench metrics DIR --check` on an intact tree", _metrics_check(lambda cell: None),
          0, "0 unreadable", "every file byte-identical", _intact),
    Fault("metrics-check-truncated", "`clbench metrics DIR --check` with footprints.safetensors cut in half",
          _metrics_check(_truncate), 1,
          "differs: tiny-vector/ewc/order-1/seed-0: <out>/tiny-vector/ewc/order-1/seed-0/footprints.safetensors: ",
          "every file as it was (--check writes nothing)", _checked_nothing_written),
    Fault("metrics-check-changed-value", "`clbench metrics DIR --check` after a stored AA was edited to 12.5",
          _metrics_check(_move_aa), 1, "differs: tiny-vector/ewc/order-1/seed-0: AA: 12.5 → ",
          "every file as it was (--check writes nothing)", _checked_nothing_written, mask=r"(?<=AA: 12\.5 → )[0-9.]+"),
]


# ---- 6. verify and compare -----------------------------------------------------------------------
@fault("verify-fresh-run", "`clbench verify DIR --cells 1` on a fresh run", 0,
       "1 within tolerance, 0 beyond it (atol 0 pp, rtol 0); 0 missing",
       "the tree untouched; the rerun cell's matrix identical")
def verify_fresh(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc"))
    snapshot(tmp)
    return clbench(tmp, "verify", str(out_of(tmp)), "--cells", "1")


@verify_fresh.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    assert table_rows(o.stdout)[1:] == [["tiny-vector/ewc/order-1/seed-0", "0.00", "identical", "ok"]], o.stdout


@fault("compare-moved-entry", "`clbench compare A B --atol 1` where one matrix entry moved by 2 points", 1,
       "0 within tolerance, 1 beyond it (atol 1 pp, rtol 0); 0 missing", "both trees untouched")
def compare_moved(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc"))
    moved = tmp / "moved"
    shutil.copytree(out_of(tmp), moved)
    path = moved / "tiny-vector/ewc/order-1/seed-0" / RESULT_FILE
    data = json.loads(path.read_text())
    data["accuracy_matrix"][0][0] += 2.0
    path.write_text(json.dumps(data))
    snapshot(tmp)
    return clbench(tmp, "compare", str(out_of(tmp)), str(moved), "--atol", "1")


@compare_moved.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    assert table_rows(o.stdout)[1:] == [["tiny-vector/ewc/order-1/seed-0", "2.00", "identical", "DIFFERS"]], o.stdout


# ---- 7. integrity gates: code and data, damaged trees, identity ---------------------------------
_SCALED_SOURCE = """\"\"\"A method plugin a user edits between two runs: fine-tuning plus {scale} × the squared weights.\"\"\"
from clbench.hookspecs import hookimpl
from clbench.method import Method
from clbench.specs import MethodSpec


class Scaled(Method):
    def loss_terms(self, batch, logits):
        return {{"penalty": {scale} * sum((p ** 2).sum() for p in self.model.parameters())}}


@hookimpl
def clbench_add_methods():
    return [MethodSpec("scaled", Scaled)]
"""


def _scaled_plugin(tmp: Path, scale: float) -> Any:
    """The module ``scaled_plugin`` as its file in ``tmp`` now says (written, then imported afresh)."""
    import importlib.util

    path = tmp / "scaled_plugin.py"
    path.write_text(_SCALED_SOURCE.format(scale=scale))
    spec = importlib.util.spec_from_file_location("scaled_plugin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scaled_plugin"] = module
    spec.loader.exec_module(module)
    return module


def _edited_plugin(*args: str) -> Callable[[Path], Outcome]:
    """Run `scaled`, multiply its penalty by 100 in the plugin's source, run the same command again."""
    def scenario(tmp: Path) -> Outcome:
        ok(tiny(tmp, "--methods", "scaled", plugins=[_scaled_plugin(tmp, 0.001)]))
        evidence(tmp, first=result(tmp, "tiny-vector/scaled/order-1/seed-0"))
        snapshot(tmp)
        return tiny(tmp, "--methods", "scaled", *args, plugins=[_scaled_plugin(tmp, 0.1)])

    return scenario


def _edited_plugin_refused(o: Outcome) -> None:
    unchanged(o.tmp)
    assert "Rerun them with --on-change rerun, keep them with --on-change reuse, or use another --out" in o.stderr


def _edited_plugin_rerun(o: Outcome) -> None:
    first, now = read_evidence(o.tmp)["first"], result(o.tmp, "tiny-vector/scaled/order-1/seed-0")
    digest = hashlib.sha256((o.tmp / "scaled_plugin.py").read_bytes()).hexdigest()
    expected = hashlib.sha256(b"scaled_plugin.py\0" + digest.encode() + b"\n").hexdigest()  # source_digest's form
    assert first["provenance"]["code"]["method:scaled"] != expected == now["provenance"]["code"]["method:scaled"]
    assert now["accuracy_matrix"] != first["accuracy_matrix"] or now["timings"] != first["timings"]
    assert now["config_hash"] == first["config_hash"]  # the same settings: only the code moved


def _edited_plugin_reused(o: Outcome) -> None:
    unchanged(o.tmp)
    assert "clbench: 1 cell: 1 complete; 1 reused; exit 0" in o.stderr


FAULTS += [
    Fault("changed-plugin-code", "a method plugin's penalty multiplied by 100 in its source after a run, then the "
          "same command", _edited_plugin(), 2,
          "1 of 1 cells hold results in <out>/ made by other code or data than this run's; nothing was run or deleted:",
          "nothing runs; the old result.json and footprints are byte-identical", _edited_plugin_refused),
    Fault("changed-plugin-code-rerun", "the same edit, rerun with `--on-change rerun`",
          _edited_plugin("--on-change", "rerun"), 0,
          "rerun, made by other code or data: tiny-vector/scaled/order-1/seed-0: method scaled: its plugin's code "
          "changed", "a new result recording the new source's digest (same config hash)", _edited_plugin_rerun),
    Fault("changed-plugin-code-reuse", "the same edit, rerun with `--on-change reuse`",
          _edited_plugin("--on-change", "reuse"), 0,
          "reused, made by other code or data: tiny-vector/scaled/order-1/seed-0: method scaled: its plugin's "
          "code changed", "the old result, byte-identical, named in the summary", _edited_plugin_reused),
]


@dataclass(frozen=True)
class FileStreamConfig:
    data_dir: str = ""


class FileVectorStream(testing.TinyVectorStream):
    """tiny-vector whose test labels are flipped when ``<data_dir>/<task>.json`` says so: a local data set."""

    def __init__(self, config: FileStreamConfig) -> None:
        super().__init__(config)
        self.name, self.folder = "file-vector", Path(config.data_dir)

    def load(self, info: Any) -> Any:
        data = super().load(info)
        if json.loads((self.folder / f"{info.name}.json").read_text())["flip"]:
            data.test.y = 1 - data.test.y
        return data


class FileStreamPlugin(Specs):
    pass


@fault("changed-data-file", "the test labels of a local data set edited after a run, then the same command", 2,
       "file-vector/seqft/order-1/seed-0: data file data_dir:t1.json changed",
       "nothing runs; the old result is byte-identical; it records each data file's sha256")
def changed_data(tmp: Path) -> Outcome:
    data = tmp / "data"
    data.mkdir()
    for task in ("t0", "t1"):
        (data / f"{task}.json").write_text('{"flip": false}')
    plugin = FileStreamPlugin(streams=[StreamSpec("file-vector", FileVectorStream, FileStreamConfig,
                                                  presets={TEST_PROFILE: _tiny_preset()[TEST_PROFILE]})])
    args = ("run", "--profile", TEST_PROFILE, "--stream", "file-vector", "--methods", "seqft", "--data-dir",
            str(data), "--no-progress", "--out", str(out_of(tmp)))
    ok(clbench(tmp, *args, plugins=[plugin]))
    snapshot(tmp)
    (data / "t1.json").write_text('{"flip": true}')
    return clbench(tmp, *args, plugins=[plugin])


@changed_data.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    recorded = results(o.tmp)["file-vector/seqft/order-1/seed-0"]["provenance"]["data"]
    assert set(recorded) == {"data_dir:t0.json", "data_dir:t1.json"}, recorded
    assert recorded["data_dir:t0.json"] == hashlib.sha256(b'{"flip": false}').hexdigest()


def _other_code(tmp: Path, checkpoint: Path) -> None:
    payload = torch.load(checkpoint, weights_only=True)
    payload["code"]["method:ewc"] = "0" * 64  # what an edit of the ewc plugin's sources does to its digest
    torch.save(payload, checkpoint)


FAULTS.append(Fault("checkpoint-other-code", "a run killed after its first task, rerun after the method's code changed",
                    _killed_then(_other_code), 0,
                    "warning: <out>/tiny-vector/ewc/order-1/seed-0/checkpoint.pt: checkpoint made by other code "
                    "(method:ewc); the cell starts over",
                    "the cell starts over (no task of the old code kept) and completes as a clean run does",
                    _same_as_reference))


@fault("metrics-plugins-disabled", "`clbench -p no:metrics metrics DIR` (the metric plugin disabled)", 2,
       "error: no loaded plugin computes the stored metrics", "every result.json byte-identical: no metric erased")
def metrics_disabled(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc"))
    snapshot(tmp)
    return clbench(tmp, "-p", "no:metrics", "metrics", str(out_of(tmp)))


@fault("metrics-plugins-disabled-check", "`clbench -p no:metrics metrics DIR --check`", 2,
       "nothing was checked. Load it and run again", "every file byte-identical; no metric reported as None")
def metrics_disabled_check(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc"))
    snapshot(tmp)
    return clbench(tmp, "-p", "no:metrics", "metrics", str(out_of(tmp)), "--check")


def _unchanged_no_none(o: Outcome) -> None:
    unchanged(o.tmp)
    assert "→ None" not in o.stderr


metrics_disabled.check(_unchanged_no_none)
metrics_disabled_check.check(_unchanged_no_none)


@fault("reuse-without-metrics", "a run made with `-p no:metrics`, then the same run with the metric plugin", 2,
       "tiny-vector/ewc/order-1/seed-0: metrics AA, ACR, AIA, AWOM, AWOM.T, AWOM.norm, A_T.norm, BWT, F.Ra, FWT, GSR, "
       "LA, NucNorm, NucNorm.1, OO, OO.norm, unseen were not computed (no plugin computed them when the cell ran)",
       "nothing runs; the metric-less result is kept and the line names `clbench metrics OUT`")
def reuse_without_metrics(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc", "-p", "no:metrics"))
    snapshot(tmp)
    return tiny(tmp, "--methods", "ewc")


@reuse_without_metrics.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    assert "`clbench metrics OUT` computes the missing metrics without training" in o.stderr


def _damaged(tamper: Callable[[Path], None], *command: str) -> Callable[[Path], Outcome]:
    """A tree of two cells (seqft, ewc); ``tamper`` with the seqft cell; then ``clbench COMMAND`` (``<out>`` and
    ``<good>``, an intact copy, filled in)."""
    def scenario(tmp: Path) -> Outcome:
        ok(tiny(tmp, "--methods", "seqft,ewc"))
        shutil.copytree(out_of(tmp), tmp / "good")
        tamper(out_of(tmp) / "tiny-vector/seqft/order-1/seed-0")
        snapshot(tmp)
        args = [a.replace("<out>", str(out_of(tmp))).replace("<good>", str(tmp / "good")) for a in command]
        return clbench(tmp, *args)

    return scenario


def _cut_result(cell: Path) -> None:
    path = cell / RESULT_FILE
    path.write_bytes(path.read_bytes()[:100])


def _list_result(cell: Path) -> None:
    (cell / RESULT_FILE).write_text("[1, 2, 3]\n")


class _Unlistable:
    """``os.scandir`` that refuses one folder, as the kernel does for mode 000 (root may list every folder)."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.scandir = str(folder), os.scandir

    def __call__(self, path: Any = ".") -> Any:
        if os.fspath(path) == self.folder:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return self.scandir(path)


def _unlistable(*command: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        ok(tiny(tmp, "--methods", "seqft,ewc"))
        snapshot(tmp)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "scandir", _Unlistable(out_of(tmp) / "tiny-vector/seqft"))
            return clbench(tmp, *[a.replace("<out>", str(out_of(tmp))).replace("<tmp>", str(tmp)) for a in command])

    return scenario


FAULTS += [
    Fault("metrics-check-truncated-result", "`clbench metrics DIR --check` with one result.json cut to 100 bytes",
          _damaged(_cut_result, "metrics", "<out>", "--check"), 1,
          "unusable: <out>/tiny-vector/seqft/order-1/seed-0/result.json: cannot read",
          "every file as it was; the other cell checked", _checked_nothing_written),
    Fault("metrics-check-wrong-json", "`clbench metrics DIR --check` with one result.json holding `[1, 2, 3]`",
          _damaged(_list_result, "metrics", "<out>", "--check"), 1,
          "unusable: <out>/tiny-vector/seqft/order-1/seed-0/result.json: not a clbench result",
          "every file as it was", _checked_nothing_written),
    Fault("compare-damaged-tree", "`clbench compare DAMAGED GOOD` with one result.json cut to 100 bytes",
          _damaged(_cut_result, "compare", "<out>", "<good>"), 1,
          "unusable: <out>/tiny-vector/seqft/order-1/seed-0/result.json: cannot read",
          "both trees as they were", _checked_nothing_written),
    Fault("metrics-check-unlistable-folder", "`clbench metrics DIR --check` with a method folder that cannot be "
          "listed (mode 000)", _unlistable("metrics", "<out>", "--check"), 1,
          "unusable: <out>/tiny-vector/seqft: cannot be listed (Permission denied)", "every file as it was",
          _checked_nothing_written),
    Fault("leaderboard-unlistable-folder", "`clbench leaderboard DIR` with a method folder that cannot be listed",
          _unlistable("leaderboard", "<out>", "--out", "<tmp>/boards", "--no-plots"), 0,
          "warning: 1 result skipped (named above): the leaderboard is built without them",
          "the leaderboard of the readable cells; a warning names the folder", _checked_nothing_written),
]


@fault("compare-nested-run", "`clbench compare GOOD TREE` where TREE also holds a second run nested in TREE/zz", 0,
       "extra: zz/tiny-vector/ewc/order-1/seed-0 (only in the second)",
       "each cell is matched with the cell at the same place: no false difference")
def compare_nested(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc"))
    tree = tmp / "tree"
    shutil.copytree(out_of(tmp), tree)
    ok(clbench(tmp, "run", *TINY, "--methods", "ewc", "--set", "train.lr=0.5", "--out", str(tmp / "other")))
    shutil.copytree(tmp / "other", tree / "zz")
    return clbench(tmp, "compare", str(out_of(tmp)), str(tree))


@compare_nested.check
def _(o: Outcome) -> None:
    assert table_rows(o.stdout)[1:] == [["tiny-vector/ewc/order-1/seed-0", "0.00", "identical", "ok"]], o.stdout


@fault("verify-other-code", "`clbench verify DIR` where a result records another digest of its method's code and "
       "its matrix moved", 1, "0 within tolerance, 1 beyond it (atol 0 pp, rtol 0), 1 of them made by other code or "
       "data; 0 missing", "the tree untouched; the verdict is `other code`, not `DIFFERS`")
def verify_other_code(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "ewc"))
    path = out_of(tmp) / "tiny-vector/ewc/order-1/seed-0" / RESULT_FILE
    data = json.loads(path.read_text())
    data["provenance"]["code"]["method:ewc"] = "0" * 64  # made by an earlier version of the ewc plugin
    data["accuracy_matrix"][0][0] -= 2.0
    path.write_text(json.dumps(data))
    snapshot(tmp)
    return clbench(tmp, "verify", str(out_of(tmp)), "--cells", "1")


@verify_other_code.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    [row] = table_rows(o.stdout)[1:]
    assert row[0] == "tiny-vector/ewc/order-1/seed-0" and row[3] == "other code", row
    assert "made by other code or data: code of method ewc" in row[2], row


@fault("run-nested-out", "`clbench run --out <out>/zz`: a run inside another run's tree", 2,
       "error: --out <out>/zz is inside the result tree of another run, <out>/", "nothing is written in <out>")
def run_nested(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    snapshot(tmp)
    return clbench(tmp, "run", *TINY, "--methods", "seqft", "--out", str(out_of(tmp) / "zz"))


@run_nested.check
def _(o: Outcome) -> None:
    unchanged(o.tmp)
    assert not (out_of(o.tmp) / "zz").exists()


@fault("rerun-other-nproc", "rerun into the same --out with `--nproc 2` (was one process)", 2,
       "holds a result for other settings: nproc: (absent) → 2",
       "nothing runs; the old result.json and footprints are byte-identical")
def rerun_nproc(tmp: Path) -> Outcome:
    # split-digits: --nproc's rank processes load plugins from entry points, not this process's tiny plugin
    run = ("run", "--methods", "seqft", *DIGITS, "--orders", "1", "--out", str(out_of(tmp)))
    ok(clbench(tmp, *run))
    snapshot(tmp)
    return clbench(tmp, *run, "--nproc", "2")


rerun_nproc.check(lambda o: unchanged(o.tmp))


class EmptyStreamPlugin(Specs):
    pass


@fault("zero-task-stream", "a stream plugin whose stream has no tasks", 2,
       "error: stream 'no-tasks' (plugin 'faultsuite.EmptyStreamPlugin', no installed distribution) has no tasks",
       "nothing: refused before any cell")
def zero_tasks(tmp: Path) -> Outcome:
    from clbench.data import Stream

    plugin = EmptyStreamPlugin(streams=[StreamSpec("no-tasks", lambda cfg: Stream("no-tasks", [], {"1": []}),
                                                   presets={TEST_PROFILE: _tiny_preset()[TEST_PROFILE]})])
    return clbench(tmp, "run", "--profile", TEST_PROFILE, "--stream", "no-tasks", "--methods", "seqft",
                   "--out", str(out_of(tmp)), plugins=[plugin])


@fault("seed-out-of-range", "`--seeds 18446744073709551616` (2**64, which wrapped to seed 0)", 2,
       "error: seed 18446744073709551616 is out of range: seeds are integers 0 ≤ s < 2**32",
       "nothing: refused before any cell")
def huge_seed(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--seeds", str(2**64))


zero_tasks.check(_nothing_written)
huge_seed.check(_nothing_written)


# ---- 8. one clear line for the confusing cases -------------------------------------------------------
@fault("cell-folder-is-file", "a file where a cell's folder should be", 2,
       "error: cell tiny-vector/seqft/order-1/seed-0: cannot write to <out>/tiny-vector/seqft/order-1/seed-0: "
       "File exists", "the file, untouched")
def cell_folder_file(tmp: Path) -> Outcome:
    folder = out_of(tmp) / "tiny-vector/seqft/order-1"
    folder.mkdir(parents=True)
    (folder / "seed-0").write_text("notes")
    return tiny(tmp, "--methods", "seqft")


@cell_folder_file.check
def _(o: Outcome) -> None:
    assert (out_of(o.tmp) / "tiny-vector/seqft/order-1/seed-0").read_text() == "notes"


@fault("out-is-file", "`--out` names a file", 2, "error: --out <out> is a file; give a folder",
       "the file, untouched")
def out_file(tmp: Path) -> Outcome:
    out_of(tmp).write_text("notes")
    return tiny(tmp, "--methods", "seqft")


@out_file.check
def _(o: Outcome) -> None:
    assert out_of(o.tmp).read_text() == "notes"


@fault("leaderboard-link-space", "`clbench leaderboard` of an --out with a space and parentheses in its name", 0,
       "wrote <tmp>/boards/test.md", "links percent-encoded: `(../my%20runs%20%281%29/tiny-vector/…`")
def link_space(tmp: Path) -> Outcome:
    out = tmp / "my runs (1)"
    ok(clbench(tmp, "run", *TINY, "--methods", "seqft", "--out", str(out)))
    o = clbench(tmp, "leaderboard", str(out), "--out", str(tmp / "boards"), "--no-plots")
    return o._replace(stderr=o.stderr + o.stdout)  # `wrote PATH` is printed on stdout


@link_space.check
def _(o: Outcome) -> None:
    board = (o.tmp / "boards" / f"{TEST_PROFILE}.md").read_text()
    assert "](../my%20runs%20%281%29/tiny-vector/seqft/order-1/seed-0/result.json)" in board, board


@fault("epochs-huge", "`--set train.epochs=1000000000`", 2,
       "error: train.epochs=1000000000 is out of range: it must be >= 1 and <= 10000", "nothing: refused before any cell")
def epochs_huge(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--set", "train.epochs=1000000000")


epochs_huge.check(_nothing_written)


@fault("logger-fault-blamed", "`--logger tensorboard` where the cell's `tb` is a file", 1,
       "failed: tiny-vector/seqft/order-1/seed-0: ObserverError: observer clbench_task_end (plugin 'loggers'",
       "a `failed` result whose error names the first fault (clbench_task_end), then the second")
def logger_fault(tmp: Path) -> Outcome:
    cell = out_of(tmp) / "tiny-vector/seqft/order-1/seed-0"
    cell.mkdir(parents=True)
    (cell / "tb").write_text("")
    return tiny(tmp, "--methods", "seqft", "--logger", "tensorboard")


@logger_fault.check
def _(o: Outcome) -> None:
    r = result(o.tmp, "tiny-vector/seqft/order-1/seed-0")
    assert r["status"] == "failed" and r["error"].startswith("ObserverError: observer clbench_task_end"), r["error"]


def _empty_gate(*command: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        (tmp / "empty").mkdir()
        return clbench(tmp, *[a.replace("<empty>", str(tmp / "empty")) for a in command])

    return scenario


FAULTS += [
    Fault("metrics-empty-tree", "`clbench metrics EMPTY`", _empty_gate("metrics", "<empty>"), 2,
          "error: no complete result under <tmp>/empty: nothing was checked", "nothing"),
    Fault("compare-empty-trees", "`clbench compare EMPTY EMPTY`", _empty_gate("compare", "<empty>", "<empty>"), 2,
          "error: no result under <tmp>/empty or <tmp>/empty: nothing was compared", "nothing"),
    Fault("verify-empty-tree", "`clbench verify EMPTY`", _empty_gate("verify", "<empty>"), 2,
          "error: no complete result under <tmp>/empty: nothing was verified", "nothing"),
    Fault("verify-zero-cells", "`clbench verify DIR --cells 0`", _empty_gate("verify", "<empty>", "--cells", "0"), 2,
          "Invalid value for '--cells': 0 is not in the range x>=1", "nothing"),
    Fault("compare-negative-atol", "`clbench compare A B --atol -1`",
          _empty_gate("compare", "<empty>", "<empty>", "--atol", "-1"), 2,
          "Invalid value for '--atol': '-1' is not a finite number ≥ 0", "nothing"),
]


@fault("leaderboard-interrupted", "Ctrl-C or SIGTERM while `clbench leaderboard --heatmaps` draws", 130,
       "interrupted: every file clbench writes is written whole or not at all; rerun the command",
       "the markdown written before; no half-written plot")
def leaderboard_interrupted(tmp: Path) -> Outcome:
    from clbench._tools import plots

    ok(tiny(tmp, "--methods", "seqft"))

    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "heatmap", interrupted)
        return clbench(tmp, "leaderboard", str(out_of(tmp)), "--out", str(tmp / "boards"), "--heatmaps")


@leaderboard_interrupted.check
def _(o: Outcome) -> None:
    assert (o.tmp / "boards" / f"{TEST_PROFILE}.md").exists() and not list((o.tmp / "boards").rglob("*.tmp"))


class PrintingPlugin:
    @hookimpl
    def clbench_add_methods(self) -> list[MethodSpec]:
        print("myplugin v0.1 loaded")  # what a chatty plugin does when it loads
        return []


@fault("plugin-prints-show-json", "`clbench show --json CELL` with a plugin that prints while it loads", 0,
       "myplugin v0.1 loaded", "stdout is the result.json alone (the plugin's line goes to stderr)")
def printing_plugin(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    return clbench(tmp, "show", "--json", str(out_of(tmp) / "tiny-vector/seqft/order-1/seed-0"),
                   plugins=[PrintingPlugin()])


@printing_plugin.check
def _(o: Outcome) -> None:
    assert "myplugin" not in o.stdout
    # (normalise masks 12 hex digits as <hash>: the fraction of a float may be such a run)
    assert json.loads(o.stdout.replace("<hash>", "0"))["method"] == "seqft", o.stdout


class Unpicklable(Method):
    def state_dict(self) -> dict[str, Any]:
        return {"schedule": lambda step: 0.1}


class UnpicklablePlugin(Specs):
    pass


@fault("state-dict-unpicklable", "a method whose `state_dict()` holds a lambda (the checkpoint cannot be written)", 1,
       "failed: tiny-vector/unpicklable/order-1/seed-0: PluginError: method 'unpicklable' (plugin "
       "'faultsuite.UnpicklablePlugin', no installed distribution): the resume checkpoint cannot hold its state_dict()",
       "that cell `failed` naming the plugin; no checkpoint or temp file")
def unpicklable(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "unpicklable",
                plugins=[UnpicklablePlugin(methods=[MethodSpec("unpicklable", Unpicklable)])])


@unpicklable.check
def _(o: Outcome) -> None:
    cell = out_of(o.tmp) / "tiny-vector/unpicklable/order-1/seed-0"
    assert not (cell / CHECKPOINT_FILE).exists() and not list(cell.glob(".*.tmp"))


class SweepNamePlugin(Specs):
    pass


@fault("method-named-like-sweep", "a plugin registers a method named `ewc@lambda=3`", 2,
       "registered the method 'ewc@lambda=3', whose name holds =, @", "nothing: refused when the plugins load")
def sweep_named(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", plugins=[SweepNamePlugin(methods=[MethodSpec("ewc@lambda=3", Boom)])])


sweep_named.check(_nothing_written)


@fault("threads-oversubscribed", "`--set train.threads=3` where the process may use 2 CPUs (64 threads on 2 CPUs "
       "ran for minutes)", 2,
       "error: train.threads=3 (tiny-vector/seqft/order-1/seed-0) is more threads than the 2 CPUs this process may "
       "use: its cells would run oversubscribed, many times slower; set train.threads to at most 2",
       "nothing: refused before any cell (not clamped: the threads are a setting of the cell's identity)")
def threads_over(tmp: Path) -> Outcome:
    from clbench._exec import local

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local, "usable_cpus", lambda: 2)
        return tiny(tmp, "--methods", "seqft", "--set", "train.threads=3")


@threads_over.check
def _(o: Outcome) -> None:
    assert not list(out_of(o.tmp).rglob("seed-0")), sorted(out_of(o.tmp).rglob("*"))


@fault("model-is-a-file", "`--model afile` (a file that is not a model plugin)", 2,
       "error: --model afile: no model plugin has this name (`clbench list models`), and as a path of weights:",
       "nothing: refused before any cell")
def model_file(tmp: Path) -> Outcome:
    (tmp / "afile").write_text("")
    return tiny(tmp, "--methods", "seqft", "--model", "afile")


@fault("executor-option-ignored", "`--cell-cpus 3` with the local executor", 2,
       "--cell-cpus configures --executor ray; this run uses --executor local, which ignores it",
       "nothing: refused before any cell")
def executor_option(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--cell-cpus", "3")


model_file.check(_nothing_written)
executor_option.check(_nothing_written)


@fault("leaderboard-check-missing", "`clbench leaderboard DIR --check` with no leaderboard on disk", 1,
       "missing: <tmp>/boards/test.md (write it with `clbench leaderboard` without --check)", "nothing written")
def board_missing(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    return clbench(tmp, "leaderboard", str(out_of(tmp)), "--out", str(tmp / "boards"), "--check", "--no-plots")


@board_missing.check
def _(o: Outcome) -> None:
    assert not (o.tmp / "boards").exists()


@fault("list-settings-train", "`clbench list settings train`", 0, "lr: float = 0.01  (> 0)",
       "the train.* settings with defaults, ranges and what each does")
def list_train(tmp: Path) -> Outcome:
    o = clbench(tmp, "list", "settings", "train")
    return o._replace(stderr=o.stdout)  # its answer is printed on stdout


# --------------------------------------------------------------------------- outcomes and the doc
_OUTCOMES: dict[str, Outcome] = {}


def outcome(f: Fault, base: Path) -> Outcome:
    """Run ``f``'s scenario in ``base/<id>`` once per process (the test and the doc share it). A scenario that
    breaks before its fault is an outcome too: exit -1 and the error."""
    if f.id not in _OUTCOMES:
        tmp = base / f.id
        tmp.mkdir(parents=True)
        try:
            _OUTCOMES[f.id] = f.run(tmp)
        except Exception as exc:  # noqa: BLE001
            _OUTCOMES[f.id] = Outcome(-1, normalise(f"scenario broke: {type(exc).__name__}: {exc}", tmp), tmp)
    return _OUTCOMES[f.id]


_PREFIXES = ("error:", "failed:", "fault:", "warning:", "interrupted:", "diverged:", "differs:", "Traceback",
             "scenario broke:")


def seen_line(f: Fault, o: Outcome) -> str:
    """The line of what the user sees that matters: the first holding ``f.sees``; else the first error-like
    line; else the last line."""
    text = lines(o.stderr)
    for line in text:
        if f.sees in line:
            return line.strip()
    for line in text:
        if line.strip().startswith(_PREFIXES):
            return line.strip()
    return text[-1].strip() if text else "(nothing)"


def problems(f: Fault, o: Outcome) -> list[str]:
    """Why ``o`` is not the handling ``f`` asks for; empty when it is."""
    found = []
    if o.code != f.exit_code:
        found.append(f"exit {o.code}, expected {f.exit_code}")
    if f.sees not in o.stderr:
        found.append(f"no line with {f.sees!r}")
    if "Traceback" in o.stderr:
        found.append("a traceback was printed")
    try:
        f.check(o)
    except Exception as exc:  # noqa: BLE001 - named by the check's own line: its message differs under pytest
        here = [fr for fr in traceback.extract_tb(exc.__traceback__) if Path(fr.filename).name == "faultsuite.py"]
        where = f" at faultsuite.py:{here[-1].lineno}: `{(here[-1].line or '').strip()}`" if here else ""
        found.append(f"check failed ({type(exc).__name__}){where}")
    return found


SHOWN_CHARS = 240


def _cell(text: str) -> str:
    text = text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# ---- 9. options and values refused, not read silently ---------------------------------------------
@fault("compare-atol-nan", "`clbench compare A B --atol nan` (NaN passed every difference)", 2,
       "Invalid value for '--atol': 'nan' is not a finite number ≥ 0", "nothing is read or written")
def compare_atol_nan(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    return clbench(tmp, "compare", str(out_of(tmp)), str(out_of(tmp)), "--atol", "nan")


@fault("repeated-option", "`clbench run --methods seqft --methods ewc` (the last used to win silently)", 2,
       "Error: --methods is given 2 times; give it once (a comma list names several values)", "nothing is written")
def repeated_option(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--methods", "ewc")


@repeated_option.check
def _(o: Outcome) -> None:
    assert not out_of(o.tmp).exists()


@fault("repeated-set", "`--set train.lr=0.1 --set train.lr=0.2`", 2,
       "error: --set train.lr is given twice; give it once (a comma list sweeps several values)", "nothing is written")
def repeated_set(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--set", "train.lr=0.1", "--set", "train.lr=0.2")


@fault("empty-seeds", "`--seeds ''` (it used to mean the profile's seeds)", 2,
       "error: --seeds '': names nothing; give at least one value, or leave --seeds out for the default",
       "nothing is written")
def empty_seeds(tmp: Path) -> Outcome:
    return tiny(tmp, "--methods", "seqft", "--seeds", "")


@fault("duplicate-stream", "`--stream tiny-vector,tiny-vector -j 2` (two cells racing into one folder)", 2,
       "error: --stream: 'tiny-vector' is given twice", "nothing is written")
def duplicate_stream(tmp: Path) -> Outcome:
    return clbench(tmp, "run", "--profile", TEST_PROFILE, "--stream", "tiny-vector,tiny-vector", "-j", "2",
                   "--methods", "seqft", "--no-progress", "--out", str(out_of(tmp)))


@duplicate_stream.check
def _(o: Outcome) -> None:
    assert not out_of(o.tmp).exists()


# ---- 10. tampered files, sweeps with no table, tuning inputs, a broken plugin (issue 55) -------------------
def _leaderboard_with(*args: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        ok(tiny(tmp, "--methods", "seqft"))
        snapshot(tmp)
        return clbench(tmp, "leaderboard", str(out_of(tmp)), "--out", str(tmp / "boards"), "--no-plots", *args)

    return scenario


def _unchanged_no_board(o: Outcome) -> None:
    unchanged(o.tmp)
    assert not (o.tmp / "boards").exists()


FAULTS += [
    Fault("leaderboard-bad-margin", "`clbench leaderboard DIR --margin tiny-vector=two`",
          _leaderboard_with("--margin", "tiny-vector=two"), 2,
          "Invalid value for '--margin': 'tiny-vector=two': expected Δ ≥ 0 in the metric's unit",
          "every file as it was; no leaderboard written", _unchanged_no_board),
    Fault("leaderboard-unknown-reference", "`clbench leaderboard DIR --reference ewcc` (no cell of that method)",
          _leaderboard_with("--reference", "ewcc"), 2,
          "error: --reference ewcc: no cell of that method in these results; they hold seqft",
          "every file as it was; no leaderboard written", _unchanged_no_board),
]


@fault("examples-not-base64", "a result whose `examples` entry is not base64, then `clbench leaderboard`", 2,
       "error: <out>/tiny-vector/seqft/order-1/seed-0/result.json: examples[1] of task 't0' is not base64 of zlib "
       "data", "every file as it was; no leaderboard written")
def examples_not_base64(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft"))
    path = out_of(tmp) / "tiny-vector/seqft/order-1/seed-0" / RESULT_FILE
    data = json.loads(path.read_text())
    entry = data["examples"][-1][0]
    entry["bits" if "bits" in entry else "f16"] = "!!!notbase64"  # what an edit by hand leaves
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    snapshot(tmp)
    return clbench(tmp, "leaderboard", str(out_of(tmp)), "--out", str(tmp / "boards"), "--no-plots")


examples_not_base64.check(_unchanged_no_board)


def _tune(*args: str) -> Callable[[Path], Outcome]:
    def scenario(tmp: Path) -> Outcome:
        return clbench(tmp, "tune", "--profile", TEST_PROFILE, "--stream", "tiny-vector", "--no-progress",
                       "--out", str(out_of(tmp)), *[a.replace("<tmp>", str(tmp)) for a in args])

    return scenario


def _nothing_tuned(o: Outcome) -> None:
    assert not out_of(o.tmp).exists(), sorted(str(p) for p in out_of(o.tmp).rglob("*"))


FAULTS += [
    Fault("tune-zero-trials", "`clbench tune --trials 0` (or a negative count: `math domain error`)",
          _tune("--methods", "seqft", "--trials", "0"), 2,
          "Invalid value for '--trials': 0: give a power of two (1, 2, 4, 8, ...)", "nothing: refused before any cell",
          _nothing_tuned),
    Fault("tune-combined-method", "`clbench tune --methods seqft+ewc` (it tuned 0 pairs and exited 0)",
          _tune("--methods", "seqft+ewc"), 2,
          "error: --methods seqft+ewc: seqft+ewc combines methods, and a combination is not tuned (it trains with its "
          "parts' choices); tune its parts: --methods seqft,ewc", "nothing: refused before any cell", _nothing_tuned),
    Fault("tune-negative-margin", "`clbench tune --margin -1`",
          _tune("--methods", "seqft", "--margin", "-1"), 2,
          "Invalid value for '--margin': '-1': expected Δ ≥ 0", "nothing: refused before any cell", _nothing_tuned),
]


FAULTS += [
    Fault("sweep-eval-split", "`--set train.eval_split=val,test` (every cell trained, then `ValueError: task ... "
          "the rows were not scored on one test set`)",
          lambda tmp: tiny(tmp, "--methods", "seqft", "--set", "train.eval_split=val,test"), 2,
          "error: the cells of stream 'tiny-vector' would be scored on different test sets (train.eval_split: val, "
          "test), and a leaderboard table ranks rows scored on one; run each value into its own --out",
          "nothing: refused before any cell", _nothing_written),
    Fault("sweep-eval-limit", "`--set train.eval_limit=0,5`",
          lambda tmp: tiny(tmp, "--methods", "seqft", "--set", "train.eval_limit=0,5"), 2,
          "error: the cells of stream 'tiny-vector' would be scored on different test sets (train.eval_limit: 0, 5)",
          "nothing: refused before any cell", _nothing_written),
]


@fault("mixed-test-sets-leaderboard", "`clbench leaderboard DIR` where one run scored on `train.eval_split=val`, "
       "another on the test split", 2,
       "error: the results of stream 'tiny-vector' were scored on different test sets (train.eval_split=test, "
       "train.eval_limit=0 in <out>/tiny-vector/ewc/order-1/seed-0/result.json; train.eval_split=val, "
       "train.eval_limit=0 in <out>/tiny-vector/seqft/order-1/seed-0/result.json)",
       "every file as it was; no leaderboard written")
def mixed_test_sets(tmp: Path) -> Outcome:
    ok(tiny(tmp, "--methods", "seqft", "--set", "train.eval_split=val"))
    ok(tiny(tmp, "--methods", "ewc"))
    snapshot(tmp)
    return clbench(tmp, "leaderboard", str(out_of(tmp)), "--out", str(tmp / "boards"), "--no-plots")


mixed_test_sets.check(_unchanged_no_board)


def _broken_plugin(*methods: str) -> Callable[[Path], Outcome]:
    """An installed distribution, ``clbench-gone``, whose entry point names a module that is gone."""
    def scenario(tmp: Path) -> Outcome:
        info = tmp / "site" / "clbench_gone-0.3.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: clbench-gone\nVersion: 0.3\n")
        (info / "entry_points.txt").write_text("[clbench]\nclbench_gone = clbench_gone\n")
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(tmp / "site"))
            return tiny(tmp, "--methods", *methods)

    return scenario


BROKEN = ("warning: plugin 'clbench_gone' from distribution 'clbench-gone' failed to import (clbench_gone): "
          "ModuleNotFoundError: No module named 'clbench_gone'; skipped. Disable it with -p no:clbench_gone, or "
          "remove it with `pip uninstall clbench-gone`")


def _ran_despite_broken(o: Outcome) -> None:
    assert result(o.tmp, "tiny-vector/seqft/order-1/seed-0")["status"] == "complete"
    assert sum(BROKEN in line for line in lines(o.stderr)) == 1, o.stderr


def _refused_naming_broken(o: Outcome) -> None:
    assert not out_of(o.tmp).exists()
    assert lines(o.stderr) == [BROKEN, lines(o.stderr)[-1]], o.stderr  # the warning, then the error


FAULTS += [
    Fault("broken-plugin-not-needed", "an installed plugin distribution whose module is gone, then `clbench run` of a "
          "method it does not provide (it exited 2 for every command)", _broken_plugin("seqft"), 0, BROKEN,
          "the run: its cell complete, after the one-line warning", _ran_despite_broken),
    Fault("broken-plugin-needed", "the same broken plugin, then `clbench run --methods shrink` (a method it would "
          "register)", _broken_plugin("shrink"), 2,
          "error: unknown method 'shrink'; plugin 'clbench_gone' from distribution 'clbench-gone' failed to import "
          "(warning above) and may register it: reinstall clbench-gone, or remove it with `pip uninstall "
          "clbench-gone`.", "nothing: refused before any cell", _refused_naming_broken),
]


def render(base: Path) -> str:
    """docs/faults.md: one row per fault, with what a run of the scenario actually printed."""
    rows, handled = [], 0
    for f in FAULTS:
        o = outcome(f, base)
        bad = problems(f, o)
        handled += not bad
        code = str(o.code) if o.code == f.exit_code else f"**{o.code}** (expected {f.exit_code})"
        survives = f.survives if not bad else (f"**NOT HANDLED** (expected: {f.survives}): "
                                               + "; ".join(bad).replace("|", "\\|"))
        line = seen_line(f, o)
        if f.mask:
            line = re.sub(f.mask, "<n>", line)
        rows.append(f"| {f.what} (`{f.id}`) | {_cell(line)} | {code} | {survives} |")
    head = [
        "# Faults clbench is tested against",
        "",
        "Every row is a scenario of `tests/faultsuite.py`, run by `tests/test_trust.py`; this page is generated by",
        "`python docs/gen_faults.py` from an actual run, and a test fails when it is not current. `<out>` is the",
        "run's `--out` and `<tmp>` its scratch folder; a config-hash prefix shows as `<hash>` and a number that",
        "training produces (it may differ on another CPU) as `<n>`. Exit codes: 0 every cell complete or",
        "diverged, 1 a cell failed (or an observer of the run raised), 2 a usage error, 130 interrupted.",
        "A row marked **NOT HANDLED** is a fault clbench does not handle yet (its test fails).",
        "",
        "| fault | what the user sees | exit code | what survives |",
        "|---|---|---|---|",
    ]
    return "\n".join([*head, *rows, "", f"**{len(FAULTS)} faults tried, {handled} handled.**", ""])
