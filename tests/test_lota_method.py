"""LoTA / LoTTO: mask = top |task vector| of the calibration run, weights reset, disjoint for LoTTO."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from clbench_plugins.lota.config import LoTAConfig, LoTTOConfig
from clbench_plugins.lota.method import LoTA, top_fraction_mask
from clbench_plugins.mlp.model import MLPConfig, build

from clbench import testing
from clbench._exec.step import train_task
from clbench.config import TrainConfig
from clbench.errors import ConfigError
from clbench.method import CellContext
from clbench.model import StreamInfo


def _cell(config: LoTAConfig, tasks: int = 2) -> tuple[LoTA, torch.nn.Module, CellContext]:
    stream = testing.TinyVectorStream(tasks=tasks, n=64)
    order = [t.name for t in stream.tasks]
    ctx = CellContext(stream=stream, order=order, train=TrainConfig(epochs=1, batch_size=16, lr=0.01),
                      device=torch.device("cpu"), seed=0)
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=(32, 32)), StreamInfo.of(stream))
    method = LoTA(config, ctx)
    method.setup(model)
    return method, model, ctx


def test_top_fraction_mask_picks_largest_and_skips_excluded():
    score = torch.tensor([[0.1, -5.0, 0.3], [2.0, 0.0, -0.2]])
    assert top_fraction_mask(score, 2 / 6).tolist() == [[False, True, False], [True, False, False]]
    excluded = torch.tensor([[False, True, False], [False, False, False]])
    assert top_fraction_mask(score, 2 / 6, excluded).tolist() == [[False, False, True], [True, False, False]]
    with pytest.raises(ConfigError, match="free coordinates"):
        top_fraction_mask(score, 1.0, excluded)


def test_mask_is_calibrated_from_the_task_vector_and_training_is_sparse():
    method, model, ctx = _cell(LoTAConfig(density=0.2))
    start = {n: p.detach().clone() for n, p in method.masked_parameters().items()}
    method.before_task("t0", 0)
    calibrate, train = method.phases("t0", 0)
    assert (calibrate.name, train.name) == ("calibrate", "train")
    seen: dict[str, torch.Tensor] = {}
    original = method.before_phase

    def spy(phase, task, index):  # the task vector just before the mask is chosen
        if phase.name == "train":
            seen.update({n: p.detach() - start[n] for n, p in method.masked_parameters().items()})
        original(phase, task, index)

    method.before_phase = spy  # type: ignore[method-assign]
    train_task(model, method, ctx, 0)
    for n, p in method.masked_parameters().items():
        mask = method.masks[n]
        k = round(0.2 * mask.numel())
        assert int(mask.sum()) == k
        assert torch.equal(mask, top_fraction_mask(seen[n], 0.2))
        moved = p.detach() != start[n]
        assert not (moved & ~mask).any()  # reset, then only the mask trained


def test_lotto_masks_are_disjoint_and_capacity_is_checked():
    method, model, ctx = _cell(LoTTOConfig(density=0.3), tasks=3)
    for i, task in enumerate(ctx.order):
        method.before_task(task, i)
        train_task(model, method, ctx, i)
        method.after_task(task, i)
    for n, p in method.masked_parameters().items():
        masks = [np.unpackbits(h[n])[: p.numel()].astype(bool) for h in method.history]
        assert (np.sum(masks, axis=0) <= 1).all()
    assert all(j == 0 for r in method.report()["masks"] for s in r["layers"].values() for j in s["jaccard"])
    with pytest.raises(ConfigError, match="density"):
        _cell(LoTTOConfig(density=0.4), tasks=3)
