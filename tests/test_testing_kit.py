"""The plugin author's test kit (clbench.testing): every check passes on built-ins and fails, with a message
that says what to fix, on a plugin that breaks its contract."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from clbench import footprints, hookimpl, testing
from clbench.cell import CHECKPOINT_FILE, CellResult
from clbench.data import Split, Stream, TaskData, TaskInfo
from clbench.errors import CheckpointDiscardedWarning
from clbench.method import Method
from clbench.model import CLModel, StreamInfo
from clbench.specs import EmptyConfig, MethodSpec, MetricSpec, ModelSpec, StreamSpec
from clbench.testing import method_checks


# --------------------------------------------------------------------------- broken plugins
class UnknownTaskStream(Stream):
    """Order "2" names a task the stream does not have."""

    def __init__(self, config: Any = None) -> None:
        super().__init__("unknown-task", [TaskInfo("t0", ("a", "b")), TaskInfo("t1", ("a", "b"))],
                         {"1": ["t0", "t1"], "2": ["t1", "t9"]}, modality="vector", input_shape=(4,))

    def load(self, info: TaskInfo) -> TaskData:
        g = torch.Generator().manual_seed(int(info.name[1:]))
        return TaskData(info, Split(torch.randn(8, 4, generator=g), torch.arange(8) % 2),
                        Split(torch.randn(4, 4, generator=g), torch.arange(4) % 2))


class OutOfRangeLabelStream(UnknownTaskStream):
    """Valid orders, but labels 0..2 for a task with two labels."""

    def __init__(self, config: Any = None) -> None:
        Stream.__init__(self, "bad-labels", [TaskInfo("t0", ("a", "b")), TaskInfo("t1", ("a", "b"))],
                        {"1": ["t0", "t1"]}, modality="vector", input_shape=(4,))

    def load(self, info: TaskInfo) -> TaskData:
        return TaskData(info, Split(torch.randn(9, 4), torch.arange(9) % 3), Split(torch.randn(3, 4), torch.arange(3)))


class RandomStream(UnknownTaskStream):
    """Valid, but every load draws from the global RNG: not deterministic."""

    def __init__(self, config: Any = None) -> None:
        Stream.__init__(self, "random", [TaskInfo("t0", ("a", "b")), TaskInfo("t1", ("a", "b"))],
                        {"1": ["t0", "t1"]}, modality="vector", input_shape=(4,))

    def load(self, info: TaskInfo) -> TaskData:
        return TaskData(info, Split(torch.randn(8, 4), torch.arange(8) % 2), Split(torch.randn(4, 4), torch.arange(4) % 2))


class DenseFootprint(Method):
    """SeqFT: the base method, whose footprint is Dense."""


class LowRankFootprint(Method):
    """Returns a low-rank footprint whatever it declares."""

    def footprint(self, task: str, index: int) -> footprints.TaskFootprint:
        return {n: footprints.LowRank(torch.zeros(1, p.shape[1]), torch.zeros(p.shape[0], 1))
                for n, p in self.footprint_parameters().items()}


class Unreloadable(Method):
    """Keeps a counter in its state dict but refuses to load it back."""

    def state_dict(self) -> dict[str, Any]:
        return {"seen": torch.tensor(1)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise RuntimeError("cannot restore 'seen'")


@dataclass
class Memo:
    seen: int = 1


class ObjectState(Method):
    """Keeps a dataclass instance in its state dict: torch.load(weights_only=True) refuses it."""

    def state_dict(self) -> dict[str, Any]:
        return {"memo": Memo()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memo = state["memo"]


class DetachedPenalty(Method):
    """An L2 penalty computed without a graph, ``declared`` value-only or not: undeclared, it trains nothing."""

    declared = False

    def loss_terms(self, batch: Any, logits: Any) -> dict[str, Tensor]:
        assert self.model is not None
        with torch.no_grad():
            penalty = sum((p * p).sum() for p in self.model.parameters())
        return {"l2": 1e-3 * penalty}

    @property
    def value_only_terms(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({"l2"}) if self.declared else frozenset()


class DeclaredPenalty(DetachedPenalty):
    declared = True


class ForgetfulState(Method):
    """Its later tasks depend on a count it does not save: a resumed cell differs from an uninterrupted one."""

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self.tasks_seen = getattr(self, "tasks_seen", 0) + 1

    def loss_terms(self, batch: Any, logits: Tensor | None) -> dict[str, Tensor]:
        first = next(self.model.parameters())
        return {"pull": 0.5 * self.tasks_seen * (first**2).sum()}


class ShiftedLabelsModel(CLModel):
    """A linear model whose predict is off by the number of labels."""

    def __init__(self, info: StreamInfo) -> None:
        super().__init__()
        self.info = info
        self.body = nn.Linear(info.input_shape[0], max(t.num_classes for t in info.tasks))

    def forward(self, x: Tensor, task: str) -> Tensor:
        return self.body(x)

    @torch.no_grad()
    def predict(self, x: Tensor, task: str) -> Tensor:
        return self(x, task).argmax(-1) + 2


class FrozenModel(ShiftedLabelsModel):
    """A model whose forward detaches: training moves nothing."""

    def forward(self, x: Tensor, task: str) -> Tensor:
        return self.body(x).detach().requires_grad_()

    @torch.no_grad()
    def predict(self, x: Tensor, task: str) -> Tensor:
        return self(x, task).argmax(-1)


class UnsavedStateModel(FrozenModel):
    """Keeps a trained offset as a plain attribute, outside state_dict."""

    def forward(self, x: Tensor, task: str) -> Tensor:
        if self.training:
            self.offset = getattr(self, "offset", torch.zeros(self.body.out_features)) + 1.0
        return self.body(x) + torch.tensor([1.0, -1.0]) * getattr(self, "offset", torch.zeros(2))


class BrokenPlugin:
    @hookimpl
    def clbench_add_streams(self) -> list[StreamSpec]:
        return [StreamSpec("unknown-task", UnknownTaskStream, EmptyConfig),
                StreamSpec("bad-labels", OutOfRangeLabelStream, EmptyConfig),
                StreamSpec("random", RandomStream, EmptyConfig)]

    @hookimpl
    def clbench_add_metrics(self) -> list[MetricSpec]:
        return [MetricSpec("stringy", lambda inp: "high", "up"),
                MetricSpec("peeks", lambda inp: float(len(inp.footprints or [])), "up", needs="matrix"),
                MetricSpec("noisy", lambda inp: float(torch.rand(())), "up")]

    @hookimpl
    def clbench_add_methods(self) -> list[MethodSpec]:
        return [MethodSpec("liar-lowrank", DenseFootprint, footprint_kind="lowrank"),
                MethodSpec("liar-none", DenseFootprint, footprint_kind="none"),
                MethodSpec("liar-dense", LowRankFootprint, footprint_kind="dense"),
                MethodSpec("unreloadable", Unreloadable),
                MethodSpec("object-state", ObjectState),
                MethodSpec("forgetful", ForgetfulState), MethodSpec("detached", DetachedPenalty),
                MethodSpec("declared", DeclaredPenalty)]

    @hookimpl
    def clbench_add_models(self) -> list[ModelSpec]:
        return [ModelSpec("shifted", lambda cfg, info: ShiftedLabelsModel(info)),
                ModelSpec("frozen", lambda cfg, info: FrozenModel(info)),
                ModelSpec("unsaved", lambda cfg, info: UnsavedStateModel(info))]


@pytest.fixture
def regs():
    return testing.registry(BrokenPlugin())


# --------------------------------------------------------------------------- check_stream
@pytest.mark.parametrize("stream", ["tiny-vector", "tiny-text", "split-digits"])
def test_check_stream_passes_builtins(regs, stream, tmp_path):
    result = testing.check_stream(regs, stream, tmp_path)
    assert isinstance(result, CellResult) and result.status == "complete"
    T = len(result.tasks)
    assert len(result.accuracy_matrix) == T and T >= 2


def test_check_stream_takes_a_model_and_settings(regs, tmp_path):
    result = testing.check_stream(regs, "permuted-digits", tmp_path, model="mlp", config={"tasks": 2})
    assert result.tasks == ["p0", "p1"] and result.config["stream"]["tasks"] == 2


@pytest.mark.parametrize(("stream", "needle"), [
    ("unknown-task", r"stream 'unknown-task'.*order '2' names unknown task 't9' \(tasks: t0, t1\)"),
    ("bad-labels", r"task 't0', train split: labels run from 0 to 2, outside 0..1"),
    ("random", r"task 't0' loads a different train split the second time; loading must be deterministic"),
])
def test_check_stream_fails_a_broken_stream(regs, stream, needle, tmp_path):
    with pytest.raises(AssertionError, match=needle):
        testing.check_stream(regs, stream, tmp_path)


# --------------------------------------------------------------------------- check_metric
@pytest.mark.parametrize("metric", ["AA", "ACR"])
def test_check_metric_passes_builtins(regs, metric, tmp_path):
    result = testing.check_metric(regs, metric, tmp_path)
    assert result.metrics[metric] is not None


def test_check_metric_runs_lowrank_metrics_on_a_lowrank_method(regs, tmp_path):
    result = testing.check_metric(regs, "OO", tmp_path)
    assert result.method == "seqlora" and result.metrics["OO"] is not None


@pytest.mark.parametrize(("metric", "needle"), [
    ("stringy", r"metric 'stringy'.* failed on a complete seqft cell: .*returned str 'high', expected a number or None"),
    ("peeks", r"metric 'peeks'.*declares needs='matrix' but gives 0.0 without footprints"),
    ("noisy", r"metric 'noisy'.*`clbench metrics` recomputes it from result.json"),
])
def test_check_metric_fails_a_broken_metric(regs, metric, needle, tmp_path):
    with pytest.raises(AssertionError, match=needle):
        testing.check_metric(regs, metric, tmp_path)


# --------------------------------------------------------------------------- check_model
def test_check_model_passes_mlp(regs, tmp_path):
    result = testing.check_model(regs, "mlp", tmp_path)
    assert result.config["model"]["name"] == "mlp" and result.status == "complete"


def test_check_model_with_adapters_and_another_stream(regs, tmp_path):
    assert testing.check_model(regs, "tiny-text", tmp_path / "a", method="seqlora").stream == "tiny-text"
    with pytest.raises(AssertionError, match=r"seqft finds no trainable parameters.*method='seqlora'"):
        testing.check_model(regs, "tiny-text", tmp_path / "b")


@pytest.mark.parametrize(("model", "needle"), [
    ("shifted", r"model 'shifted'.*predict\(x, 't0'\) on 32 inputs returned labels \[2, 3\] outside 0..1"),
    ("frozen", r"model 'frozen'.*changed none of its weights"),
    ("unsaved", r"model 'unsaved'.*a fresh model loaded from state_dict\(\) predicts differently on task 't0'"),
])
def test_check_model_fails_a_broken_model(regs, model, needle, tmp_path):
    with pytest.raises(AssertionError, match=needle):
        testing.check_model(regs, model, tmp_path)


# --------------------------------------------------------------------------- check_method
def test_check_method_keeps_its_signature(regs, tmp_path):
    result = testing.check_method(regs, "seqft", tmp_path, check_resume=False)
    assert result.status == "complete" and not any((tmp_path / "b").rglob("*"))
    assert testing.check_method(regs, "seqft", tmp_path / "again").accuracy_matrix == result.accuracy_matrix


@pytest.mark.parametrize(("method", "needle"), [
    ("liar-lowrank", r"method 'liar-lowrank'.*footprint\['backbone.1.weight'\] is Dense, but the spec's "
                     r"footprint_kind='lowrank' promises LowRank"),
    ("liar-none", r"footprint\['backbone.1.weight'\] is Dense, but the spec's footprint_kind='none' promises nothing"),
    ("liar-dense", r"footprint\[.*\] is LowRank, but the spec's footprint_kind='dense' promises Dense"),
])
def test_a_footprint_kind_that_lies_fails_the_cell(regs, method, needle, tmp_path):
    """The runner checks each task's footprint against the spec (clbench._core.boundary.check_footprint): the cell
    fails, and check_method stops there (fail-fast) with the runner's message."""
    from clbench._exec.runner import FailFast

    with pytest.raises(FailFast, match=needle):
        testing.check_method(regs, method, tmp_path)


@pytest.mark.parametrize(("method", "needle"), [
    ("unreloadable", r"(?s)did not resume, it started over: the method's state_dict\(\) did not load back.*"
                     r"RuntimeError: cannot restore 'seen'"),
    ("object-state", r"did not resume, it started over: .*torch.load\(weights_only=True\): state_dict\(\) may hold only"),
    ("forgetful", r"the resumed cell's matrix .* differs from the uninterrupted"),
])
def test_check_method_fails_state_that_does_not_survive_a_checkpoint(regs, method, needle, tmp_path):
    with pytest.raises(AssertionError, match=needle):
        testing.check_method(regs, method, tmp_path)


def test_a_loss_term_without_a_gradient_must_be_declared_value_only(regs, tmp_path):
    """EWC's penalty carries no graph by design (its gradient is added in after_backward, declared in
    value_only_terms); an undeclared graph-less term would add nothing to training and fails the check."""
    with pytest.raises(AssertionError, match=r"loss_terms\['l2'\] never carried a gradient .* value_only_terms"):
        testing.check_method(regs, "detached", tmp_path / "a", check_resume=False)
    testing.check_method(regs, "declared", tmp_path / "b", check_resume=False)
    testing.check_method(regs, "ewc", tmp_path / "c", check_resume=False)  # declared: {"ewc"}


class WarnOnResume:
    """Says ``warning`` when a cell resumes from its checkpoint, as if the runner had."""

    def __init__(self, warning: Warning) -> None:
        self.warning = warning

    @hookimpl
    def clbench_cell_start(self, cell: Any, resumed_from: int) -> None:
        if resumed_from:
            warnings.warn(self.warning, stacklevel=1)


def test_a_discarded_checkpoint_is_told_by_the_class_of_its_warning_not_its_text(tmp_path):
    """A warning that reads like the runner's but is of another class is passed on, and the cell resumed; a
    CheckpointDiscardedWarning, whatever its text, fails check_method with the fix for its ``reason``."""
    text = "x/checkpoint.pt: checkpoint does not fit this cell (ValueError: no); the cell starts over"
    with pytest.warns(UserWarning, match="checkpoint does not fit this cell") as record:
        testing.check_method(testing.registry(WarnOnResume(UserWarning(text))), "seqft", tmp_path / "text")
    assert not any(isinstance(w.message, CheckpointDiscardedWarning) for w in record)
    discarded = CheckpointDiscardedWarning("something else", "other-settings")
    with pytest.raises(AssertionError, match=r"(?s)did not resume, it started over: the cell's settings hash changed"
                                             r".*The runner said: something else"):
        testing.check_method(testing.registry(WarnOnResume(discarded)), "seqft", tmp_path / "class")


def test_the_runner_discards_a_checkpoint_with_a_warning_of_its_own_class(tmp_path):
    """An unreadable checkpoint: the runner says so with a CheckpointDiscardedWarning (reason ``unreadable``, the
    message as before) and starts the cell over; the kit has a fix for every reason the class names."""
    with pytest.raises(KeyboardInterrupt):
        testing.run(testing.registry(testing.KillAfterTask(0)), tmp_path, "seqft")
    [checkpoint] = tmp_path.rglob(CHECKPOINT_FILE)
    checkpoint.write_bytes(b"not a checkpoint")
    with pytest.warns(CheckpointDiscardedWarning, match=r"checkpoint.pt: unreadable checkpoint \(\w+\); the cell "
                                                        "starts over") as record:
        [result] = testing.run(testing.registry(), tmp_path, "seqft")
    assert result.status == "complete"
    assert [w.message.reason for w in record if isinstance(w.message, CheckpointDiscardedWarning)] == ["unreadable"]
    assert set(method_checks._CHECKPOINT_FIXES) == set(CheckpointDiscardedWarning.REASONS)


def test_kit_without_pytest_names_the_extra_that_brings_it(tmp_path):
    """Importing the kit where pytest is not installed fails with the extra to install, not a bare
    ``No module named 'pytest'``; and that extra is declared and brings pytest."""
    import subprocess
    import sys
    from pathlib import Path

    import tomllib

    code = "import sys; sys.modules['pytest'] = None\nimport clbench.testing"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1
    assert "needs pytest: pip install 'clbench[testing]'" in done.stderr
    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.startswith("pytest") for req in extras["testing"])
