"""Sharded data parallelism (``train.shard=full`` with ``--nproc N``): the model's weights, gradients and optimizer
state split over the ranks with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

Why FSDP2 and not DeepSpeed ZeRO-3: it is part of torch (no second engine with its own launcher, config file and
optimizer wrappers), it shards the module in place, so the harness's own step, optimizers, clipping, accumulation
and method hooks run unchanged on its parameters (DTensors), and it runs on gloo, so the CPU tests check the same
code a GPU node runs.

What changes against plain data parallelism (clbench.distributed):

* every module with weights of its own is a unit (``fully_shard``), then the root: a rank keeps 1/N of each weight
  and gathers a unit's full weights for its forward and again for its backward;
* the gradients are reduce-scattered by FSDP in the backward, averaged over the ranks; each rank's micro-batch
  losses are already scaled by their share of the global batch, so they are scaled by N as well and the average is
  the one-process mean gradient (a divide factor of 1 would need ``ReduceOp.PREMUL_SUM``, which gloo lacks);
* a forward is a collective: every rank evaluates every test batch (not its share of them);
* a value read outside the step (a task's footprint) is gathered whole on every rank
  (:func:`clbench.distributed.full_value`);
* no resume checkpoint is written yet: a sharded cell that stops starts over.
"""

from __future__ import annotations

import torch
from torch import nn

from clbench.errors import ConfigError


def shard_model(model: nn.Module) -> None:
    """Shard ``model`` over the default process group in place: every module with parameters of its own a unit,
    then the root (its own parameters, if any). Float32 weights only: a low-precision model's float32 masters
    (``train.fp32_masters``) would need FSDP's mixed-precision policy, which is not wired in."""
    from torch.distributed.fsdp import fully_shard

    low = sorted({str(p.dtype) for p in model.parameters() if p.dtype != torch.float32})
    if low:
        raise ConfigError(
            f"train.shard=full keeps float32 weights; this model has {', '.join(low)} weights (train.autocast "
            "computes in bfloat16 on float32 weights)"
        )
    units = [m for m in model.modules() if m is not model and next(m.parameters(recurse=False), None) is not None]
    for unit in units:
        fully_shard(unit)
    fully_shard(model)
