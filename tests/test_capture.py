"""``train.capture``: the recorded step trains exactly as the eager one (on the CPU, with the graph a stand-in that
runs the recorded step again on each replay), and the plan refuses what a CUDA graph cannot record."""

from __future__ import annotations

import pytest
import torch
from clbench_plugins.mlp.model import MLPConfig, build

import clbench.distributed
from clbench import testing
from clbench._exec.capture import WARMUP, EagerGraph
from clbench._exec.step import GRAPH, train_task
from clbench.config import TrainConfig
from clbench.errors import ConfigError
from clbench.method import CellContext, Method, Phase
from clbench.model import StreamInfo


class Recordings(EagerGraph):
    made = 0

    def __init__(self) -> None:
        super().__init__()
        Recordings.made += 1


class Scheduled(Method):
    """SeqFT with a learning-rate milestone after the second epoch of each task."""

    def phases(self, task: str, index: int) -> list[Phase]:
        return [Phase.from_train(self.ctx.train, lr_milestones=(2,), lr_gamma=0.1)]


def _train(capture: bool, milestones: bool = False, device: str = "cpu", **train: object
           ) -> tuple[dict[str, torch.Tensor], float]:
    """Two tasks of the tiny stream (70 examples: an epoch of four full batches of 16 and one of 6) through the
    runner's loop; the weights after them and the loss of the last logged step."""
    stream = testing.TinyVectorStream(tasks=2, n=70)
    settings: dict[str, object] = {"batch_size": 16, "epochs": 3, "lr": 0.05, "log_every": 1, **train}
    config = TrainConfig(capture=capture, **settings)  # type: ignore[arg-type]
    ctx = CellContext(stream=stream, order=stream.order("1"), train=config, device=torch.device(device), seed=0)
    if device == "cpu":  # (on CUDA: the graph itself)
        ctx.stash[GRAPH] = Recordings
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=[16]), StreamInfo.of(stream)).to(device)
    method = Scheduled(None, ctx) if milestones else Method(None, ctx)
    method.setup(model)
    logged: list[float] = []
    for index in range(2):
        method.before_task(ctx.order[index], index)
        train_task(model, method, ctx, index, on_step=lambda phase, epoch, step, values: logged.append(values["loss"]))
    return {n: p.detach().cpu() for n, p in model.named_parameters()}, logged[-1]


@pytest.mark.parametrize(
    "train",
    [
        {},
        {"optimizer": "adam", "lr": 0.01, "grad_clip": 1.0},
        {"optimizer": "rmsprop", "lr": 0.01, "weight_decay": 1e-3},
        {"momentum": 0.9, "milestones": True},
    ],
    ids=["sgd", "adam-clipped", "rmsprop", "sgd-schedule"],
)
def test_the_captured_step_trains_exactly_as_the_eager_one(train):
    """Warm-up steps, the recorded step, its replays, the short last batch of every epoch stepped eagerly into the
    graph's gradients, and a learning-rate milestone (a new recording): the weights and the logged losses are the
    eager run's, bit for bit."""
    Recordings.made = 0
    eager, eager_loss = _train(False, **train)
    assert Recordings.made == 0
    captured, captured_loss = _train(True, **train)
    assert eager.keys() == captured.keys() and all(torch.equal(eager[k], captured[k]) for k in eager)
    assert captured_loss == eager_loss
    # one recording a task (12 full batches a task, WARMUP of them eager), one more after the milestone
    assert 12 > WARMUP and Recordings.made == 2 * (2 if "milestones" in train else 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_on_a_gpu_the_cuda_graph_trains_as_the_eager_step(optimizer):
    """The real recording: SGD's replayed kernels are the eager ones; capturable Adam keeps its step count on the
    device, which may move the last bits."""
    eager, eager_loss = _train(False, device="cuda", optimizer=optimizer, lr=0.01)
    captured, captured_loss = _train(True, device="cuda", optimizer=optimizer, lr=0.01)
    for k in eager:
        torch.testing.assert_close(captured[k], eager[k], rtol=1e-5, atol=1e-6)
    assert captured_loss == pytest.approx(eager_loss, rel=1e-5)


def _plan(regs, tmp_path, methods: str, **sets: object):
    from clbench._core.plan import RunRequest, make_plan

    req = RunRequest(profile=testing.TEST_PROFILE, methods=methods, streams=["tiny-vector"], seeds=[0], out=tmp_path,
                     sets={"train.capture": [True], **{k: [v] for k, v in sets.items()}})
    return make_plan(regs, req)


def test_the_plan_refuses_what_a_graph_cannot_record(tmp_path, monkeypatch):
    regs = testing.registry()
    with pytest.raises(ConfigError, match="CUDA graph: this cell runs on cpu"):
        _plan(regs, tmp_path, "seqft")
    monkeypatch.setattr(clbench.distributed, "resolve_device", lambda device: torch.device("cuda"))
    assert len(_plan(regs, tmp_path, "seqft").cells) == 1
    with pytest.raises(ConfigError, match="ewc's step is not declared static"):
        _plan(regs, tmp_path, "ewc")
    with pytest.raises(ConfigError, match="grad_accum"):
        _plan(regs, tmp_path, "seqft", **{"train.grad_accum": 2})
