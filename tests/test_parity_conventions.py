"""The protocol conventions a published table depends on, each a setting checked against numbers computed another
way: the class-incremental head (masked or full), task-incremental scoring of a class-incremental model, and DER's
buffer under the full head."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from clbench import testing
from clbench._exec.evaluation import evaluate
from clbench._exec.runner import show_labels
from clbench.config import TrainConfig
from clbench.data import Batch, TaskInfo
from clbench.errors import ConfigError
from clbench.method import CellContext, Method
from clbench.model import MASKED, StreamInfo

DIGITS = tuple(str(d) for d in range(4))
TASKS = (TaskInfo("0-1", DIGITS, classes=("0", "1")), TaskInfo("2-3", DIGITS, classes=("2", "3")))


def _model():
    from clbench_plugins.mlp.model import MLPConfig, build

    torch.manual_seed(0)
    return build(MLPConfig(hidden=(8,)), StreamInfo("s", TASKS, "vector", (5,), False))


def _stream():
    return SimpleNamespace(name="s", modality="vector", scenario="class-incremental", tasks=TASKS,
                           task={t.name: t for t in TASKS}.__getitem__)


@pytest.mark.parametrize("head", ["masked", "full"])
def test_the_full_head_trains_the_logits_of_classes_not_seen_yet_and_the_masked_head_does_not(head):
    """One CE step on task 0's digits: the gradient of the head's row of class j is mean_i (p_ij − 1[y_i=j]) h_i. A
    class not seen yet has p_ij = 0 under the masked head (its logit is MASKED), so its row gets no gradient; under
    the full head p_ij > 0 and its row is pushed down."""
    model = _model()
    shown = show_labels(model, _stream(), ["0-1", "2-3"], 1, head)
    assert shown == (frozenset({"0", "1"}) if head == "masked" else None)
    x, y = torch.randn(6, 5), torch.tensor([0, 1, 0, 1, 0, 1])
    F.cross_entropy(model(x, "0-1"), y).backward()
    h = model.backbone(x).detach()
    logits = model.heads["shared"](h).detach()
    if head == "masked":
        logits[:, 2:] = MASKED
    p = logits.softmax(-1)
    by_hand = (p - F.one_hot(y, 4)).T @ h / len(y)
    grad = model.heads["shared"].weight.grad
    assert torch.allclose(grad, by_hand, atol=1e-6)
    unseen = grad[2:].abs().sum()
    assert (unseen == 0) if head == "masked" else (unseen > 1e-3)


def test_der_under_the_full_head_stores_every_logit_unmasked_and_leaves_the_model_unmasked():
    from clbench_plugins.der.config import DERConfig
    from clbench_plugins.der.method import DER

    model = _model()
    ctx = CellContext(stream=_stream(), order=["0-1", "2-3"], train=TrainConfig(head="full"),
                      device=torch.device("cpu"), seed=0)
    der = DER(DERConfig(buffer_size=6), ctx)
    der.setup(model)
    show_labels(model, ctx.stream, ctx.order, 1, "full")
    der.before_task("0-1", 0)
    x = torch.randn(6, 5)
    der.loss_terms(Batch(x, torch.tensor([0, 1, 0, 1, 0, 1]), "0-1"), model(x, "0-1"))
    raw = model.heads["shared"](model.backbone(x)).detach()  # the head's ten (here four) logits, computed directly
    order = [int((x == row).all(dim=1).nonzero()) for row in der.buffer.x.flatten(1)]
    assert (der.buffer.logits != MASKED).all()
    assert torch.allclose(der.buffer.logits, raw[order])
    assert (model(x, "0-1") != MASKED).all()  # nothing masked after the store either


@pytest.mark.parametrize("head", ["masked", "full"])
def test_task_scoring_ranks_each_task_among_its_own_classes(head):
    """evaluate() under train.scoring=task equals the accuracy of argmax over each task's own two logits, computed
    from the head directly; under scoring=stream, argmax over the labels shown. The model shows what it showed
    before afterwards."""
    from clbench.data import Split, Stream, TaskData

    g = torch.Generator().manual_seed(1)
    data = {}
    for k, t in enumerate(TASKS):
        x = torch.randn(40, 5, generator=g)
        y = torch.randint(2 * k, 2 * k + 2, (40,), generator=g)
        data[t.name] = TaskData(t, Split(x, y), Split(x, y))

    class Fixed(Stream):
        def load(self, info):
            return data[info.name]

    stream = Fixed("s", list(TASKS), {"1": ["0-1", "2-3"]}, scenario="class-incremental")
    model = _model().eval()
    method = Method(SimpleNamespace(), CellContext(stream=stream, order=["0-1", "2-3"], train=TrainConfig(),
                                                   device=torch.device("cpu"), seed=0))
    shown = show_labels(model, stream, ["0-1", "2-3"], 1, head)
    with torch.no_grad():
        raw = {t: model.heads["shared"](model.backbone(d.test.x)) for t, d in data.items()}
    for scoring in ("stream", "task"):
        row, _ = evaluate(model, method, stream, ["0-1", "2-3"], TrainConfig(scoring=scoring), torch.device("cpu"),
                          shown=shown)
        expected = []
        for k, (t, d) in enumerate(data.items()):
            logits = raw[t].clone()
            allowed = [2 * k, 2 * k + 1] if scoring == "task" else (
                [0, 1] if head == "masked" else [0, 1, 2, 3])
            keep = torch.zeros(4, dtype=torch.bool)
            keep[allowed] = True
            logits[:, ~keep] = -torch.inf
            expected.append(100.0 * float((logits.argmax(-1) == d.test.y).float().mean()))
        assert row == pytest.approx(expected)
        assert (model(data["2-3"].test.x, "2-3")[:, 2:] == MASKED).all() == (head == "masked")


def test_task_scoring_of_a_class_incremental_run_is_a_task_incremental_result_never_below_the_stream_scoring(
        tmp_path):
    """The same training (scoring changes no weight) scored two ways: a prediction right among every seen class is
    right among its task's two, so the task-scored matrix is at least the stream-scored one, entry by entry."""
    regs = testing.registry()
    [cil] = testing.run(regs, tmp_path / "cil", "seqft", stream="split-digits-cil", profile="quick", seeds=[0],
                        orders=["1"])
    [til] = testing.run(regs, tmp_path / "til", "seqft", stream="split-digits-cil", profile="quick", seeds=[0],
                        orders=["1"], sets={"train.scoring": ["task"]})
    assert (cil.scenario, til.scenario) == ("class-incremental", "task-incremental")
    assert til.config["train"]["scoring"] == "task"
    pairs = [(a, b) for ra, rb in zip(til.accuracy_matrix, cil.accuracy_matrix, strict=True)
             for a, b in zip(ra, rb, strict=True)]
    assert all(a >= b for a, b in pairs) and any(a > b for a, b in pairs)
    assert cil.accuracy_matrix[0][1:] == [0.0] * 4  # masked: an unseen digit is never the answer ...
    assert min(til.accuracy_matrix[0][1:]) > 20  # ... scored among its own two, it is a coin toss or better


@pytest.mark.parametrize("key,value", [("train.head", "full"), ("train.scoring", "task")])
def test_class_incremental_conventions_are_refused_on_other_streams(tmp_path, key, value):
    from clbench._core.plan import RunRequest, make_plan

    with pytest.raises(ConfigError, match=f"{key}={value}: stream 'split-digits' is task-incremental"):
        make_plan(testing.registry(), RunRequest(methods="seqft", streams=["split-digits"], out=tmp_path,
                                                 sets={key: [value]}))


def test_xavier_init_draws_every_layer_from_glorots_uniform_and_zeroes_the_biases(tmp_path):
    """train.init=xavier: each Linear weight within ±√(6/(fan_in+fan_out)) with the uniform's variance a²/3, biases 0;
    the default keeps torch's (Kaiming-uniform bound 1/√fan_in, non-zero biases)."""
    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec.session import build_model

    regs = testing.registry()
    for init in ("model", "xavier"):
        [cell] = make_plan(regs, RunRequest(methods="seqft", streams=["split-digits-cil"], profile="quick", seeds=[0],
                                            orders=["1"], out=tmp_path, sets={"train.init": [init]})).cells
        torch.manual_seed(3)
        model = build_model(regs, cell, regs.streams.get(cell.stream).factory(cell.stream_cfg))
        layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        assert len(layers) >= 2
        for m in layers:
            fan_out, fan_in = m.weight.shape
            a = (6 / (fan_in + fan_out)) ** 0.5
            if init == "xavier":
                assert m.weight.abs().max() <= a and (m.bias == 0).all()
                assert float(m.weight.detach().var()) == pytest.approx(a * a / 3, rel=0.25)
            else:
                assert m.weight.abs().max() <= fan_in ** -0.5 and (m.bias != 0).any()


def test_er_combined_loss_is_the_mean_over_the_batch_and_the_replayed_examples():
    """replay.loss=combined: task loss + term = the mean CE over the n batch examples and the k replayed ones,
    computed here by concatenating them; replay.fill=during fills the reservoir from the first batch on."""
    from clbench_plugins.replay.config import ReplayConfig
    from clbench_plugins.replay.method import Replay

    model = _model()
    ctx = CellContext(stream=_stream(), order=["0-1", "2-3"], train=TrainConfig(head="full"),
                      device=torch.device("cpu"), seed=0)
    er = Replay(ReplayConfig(buffer_size=8, replay_batch_size=3, fill="during", loss="combined"), ctx)
    er.setup(model)
    er.before_task("0-1", 0)
    x0, y0 = torch.randn(4, 5), torch.tensor([0, 1, 0, 1])
    assert er.loss_terms(Batch(x0, y0, "0-1"), model(x0, "0-1")) == {}  # nothing stored before the first batch
    assert len(er.copies) == 4
    x1, y1 = torch.randn(5, 5), torch.tensor([1, 0, 1, 1, 0])
    logits = model(x1, "0-1")
    torch.manual_seed(11)
    pick = er.copies.draw(3)  # the draw loss_terms makes next: its four slots hold batch 0 in order
    torch.manual_seed(11)
    term = er.loss_terms(Batch(x1, y1, "0-1"), logits)["replay"]
    xs, ys = torch.cat([x1, x0[pick]]), torch.cat([y1, y0[pick]])
    combined = F.cross_entropy(model(xs, "0-1"), ys)
    assert float((F.cross_entropy(logits, y1) + term).detach()) == pytest.approx(float(combined.detach()), rel=1e-6)
    assert len(er.copies) == 8 and er.copies.seen == 9


def test_joint_final_trains_nothing_until_the_last_task_then_the_union_from_the_untrained_weights(tmp_path):
    """joint.schedule=final (the DER paper's JOINT): under the full head every row before the last is the untrained
    model's row (the same weights, scored the same way), and only the last task takes optimizer steps."""
    [r] = testing.run(testing.registry(), tmp_path, "joint", stream="split-digits-cil", profile="quick", seeds=[0],
                      orders=["1"], sets={"joint.schedule": ["final"], "train.head": ["full"]})
    *before, last = r.accuracy_matrix
    assert all(row == r.initial_row for row in before)
    steps = [sum(t[p]["steps"] for p in t["phases"]) for t in r.timings["tasks"]]
    assert steps[:-1] == [0] * len(before) and steps[-1] > 0
    assert sum(last) / len(last) > sum(r.initial_row) / len(last) + 30


def test_icarl_scored_within_each_task_answers_among_that_tasks_classes_alone(tmp_path):
    """Under train.scoring=task iCaRL's nearest mean of exemplars ranks the task's own classes only: its task-scored
    matrix is at least its class-scored one entry by entry, and higher somewhere (the same training)."""
    regs = testing.registry()
    [cil] = testing.run(regs, tmp_path / "cil", "icarl", stream="split-digits-cil", profile="quick", seeds=[0],
                        orders=["1"])
    [til] = testing.run(regs, tmp_path / "til", "icarl", stream="split-digits-cil", profile="quick", seeds=[0],
                        orders=["1"], sets={"train.scoring": ["task"]})
    pairs = [(a, b) for ra, rb in zip(til.accuracy_matrix, cil.accuracy_matrix, strict=True)
             for a, b in zip(ra, rb, strict=True)]
    assert all(a >= b for a, b in pairs) and til.metrics["AA"] > cil.metrics["AA"] + 1


class _Recorder(Method):
    """Records which of the shared head's labels the model shows at each training step and each evaluation."""

    seen: list[tuple[str, str, tuple[bool, ...] | None]] = []

    def loss_terms(self, batch, logits):
        visible = self.model._visible
        _Recorder.seen.append(("train", batch.task, None if visible is None else tuple(visible.tolist())))
        return {}

    def evaluating(self, task):
        visible = self.model._visible
        _Recorder.seen.append(("eval", task, None if visible is None else tuple(visible.tolist())))
        return super().evaluating(task)


class _RecorderPlugin:
    from clbench import hookimpl

    @hookimpl
    def clbench_add_methods(self):
        from clbench.specs import MethodSpec

        return [MethodSpec("recorder", _Recorder)]


@pytest.mark.parametrize("head", ["masked", "task"])
def test_the_task_head_trains_among_the_tasks_classes_and_scores_among_the_seen_ones(tmp_path, head):
    """train.head=task (the prompt papers' train_mask): while t1 trains, a and b (t0's) are masked too; scored after,
    every seen class shows, as under the masked head, which masks only the classes not seen yet while training."""
    _Recorder.seen = []
    regs = testing.registry(_RecorderPlugin())
    (result,) = testing.run(regs, tmp_path, "recorder", "tiny-cil", sets={"train.head": [head]})
    assert result.status == "complete" and result.config["train"]["head"] == head
    training = {(task, v) for kind, task, v in _Recorder.seen if kind == "train"}
    scored = {v for kind, _, v in _Recorder.seen if kind == "eval"}
    t0_only, both = (True, True, False, False), (True, True, True, True)
    t1 = (False, False, True, True) if head == "task" else both
    assert training == {("t0", t0_only), ("t1", t1)}
    assert scored == {None, t0_only, both}  # the untrained row, after t0, after t1
