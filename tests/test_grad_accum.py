"""train.batch_size is the global batch; train.grad_accum splits it into micro-batches with the same result."""

from __future__ import annotations

import pytest
import torch
from clbench_plugins.ewc.config import EWCConfig
from clbench_plugins.ewc.method import EWC
from clbench_plugins.olora.config import OLoRAConfig
from clbench_plugins.olora.method import OLoRA

from clbench import testing
from clbench._exec.engine import micro_batches
from clbench._exec.step import train_task
from clbench.cell import identity
from clbench.config import TrainConfig, apply
from clbench.errors import ConfigError
from clbench.method import CellContext, Method
from clbench.model import StreamInfo


def _mlp(stream):
    from clbench_plugins.mlp.model import MLPConfig, build

    torch.manual_seed(0)
    return build(MLPConfig(hidden=(16,)), StreamInfo.of(stream))


def _text(stream):
    torch.manual_seed(0)
    return testing.TinyTextModel(StreamInfo.of(stream), dim=16)


CASES = {  # method, model, stream, settings: seqft, a penalty on the weights (EWC), one on the adapters (O-LoRA)
    "seqft": (lambda ctx: Method(None, ctx), _mlp, lambda: testing.TinyVectorStream(n=96), {}),
    "ewc": (lambda ctx: EWC(EWCConfig(lambda_=1e3), ctx), _mlp, lambda: testing.TinyVectorStream(n=96), {}),
    "olora": (lambda ctx: OLoRA(OLoRAConfig(lambda1=0.5, lambda2=0.1, dropout=0.0), ctx), _text,
              testing.TinyTextStream, {"optimizer": "adamw", "lr": 5e-3}),
}


def _train(case: str, accum: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Two tasks of ``case`` at global batch 32 in ``accum`` micro-batches: final weights and the epoch losses."""
    build, model_of, stream_of, settings = CASES[case]
    stream = stream_of()
    train = TrainConfig(batch_size=32, grad_accum=accum, epochs=2, **settings)
    ctx = CellContext(stream=stream, order=stream.order("1"), train=train, device=torch.device("cpu"), seed=0)
    model = model_of(stream)
    method = build(ctx)
    method.setup(model)
    losses: list[float] = []
    for index, task in enumerate(ctx.order):
        torch.manual_seed(index + 1)
        method.before_task(task, index)
        losses += train_task(model, method, ctx, index).phase("train").loss
        method.after_task(task, index)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses


@pytest.mark.parametrize("case", list(CASES))
def test_two_accumulated_halves_equal_one_batch_of_32(case):
    one, loss_one = _train(case, 1)
    two, loss_two = _train(case, 2)
    assert one.keys() == two.keys()
    for name in one:  # float summation order only: measured max |Δ| 3e-8 (weights up to 0.35, 3.4)
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    assert loss_two == pytest.approx(loss_one, rel=1e-5)  # the penalty counted once per step, not twice
    moved = max(float((one[n] - _train(case, 1)[0][n]).abs().max()) for n in one)
    assert moved == 0.0  # (and the reference is deterministic: the tolerance above is the accumulation's)


def test_micro_batches_cover_the_batch_in_near_equal_parts():
    stream = testing.TinyVectorStream(n=64)
    from clbench.data import batches

    batch = next(batches(stream.data("t0").train, 11, "t0"))
    parts = micro_batches(batch, 3)
    assert [len(p) for p in parts] == [4, 3, 4]
    assert torch.equal(torch.cat([p.x for p in parts]), batch.x) and torch.equal(torch.cat([p.y for p in parts]), batch.y)
    assert len(micro_batches(batch, 20)) == 11  # never an empty micro-batch


def test_grad_accum_must_divide_the_global_batch_and_is_left_out_of_old_identities():
    with pytest.raises(ConfigError, match="grad_accum=3 does not divide train.batch_size=32"):
        apply(TrainConfig, None, {"batch_size": 32, "grad_accum": 3}, "train")
    assert TrainConfig(batch_size=64, grad_accum=8).micro_batch_size == 8
    # a result written before grad_accum existed keeps its config hash; any other value is a new identity
    base = {"train": {"batch_size": 32, "lr": 0.1}}
    assert identity({"train": {**base["train"], "grad_accum": 1}}, "s", "1", 0) == identity(base, "s", "1", 0)
    assert identity({"train": {**base["train"], "grad_accum": 2}}, "s", "1", 0) != identity(base, "s", "1", 0)


def test_env_records_how_the_global_batch_is_split(tmp_path):
    regs = testing.registry()
    results = testing.run(regs, tmp_path, "seqft", sets={"train.batch_size": [16], "train.grad_accum": [2]})
    env = results[0].env
    assert (env["global_batch_size"], env["per_device_batch_size"], env["grad_accum"], env["world_size"]) == \
        (16, 8, 2, 1)
