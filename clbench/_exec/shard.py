"""Sharded data parallelism (``train.shard=full`` with ``--nproc N``): the model's weights, gradients and optimizer
state split over the ranks with PyTorch's FSDP2 (``torch.distributed.fsdp.fully_shard``); with
``train.shard=offload`` the shards, their gradients and the optimizer's state held in host memory, on one rank or N
(ZeRO-Offload's arrangement, through FSDP2's ``CPUOffloadPolicy``).

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
* low-precision weights with float32 masters become float32 shards computed in the low precision (FSDP's
  mixed-precision policy, :func:`compute_precision`);
* a resume checkpoint holds the whole weights, gathered to rank 0's host memory a tensor at a time
  (:func:`full_state_dict`), as one process's does: a resumed cell loads it into every rank's fresh, unsharded build
  and shards that.
"""

from __future__ import annotations

import torch
from torch import nn

from clbench.errors import ConfigError


def compute_precision(model: nn.Module, fp32_masters: bool = True) -> torch.dtype | None:
    """The low precision ``model``'s weights compute in when sharded as float32 (None: they shard as they are).

    Low-precision (bfloat16, float16) weights with ``train.fp32_masters`` are what one process keeps as float32
    masters: sharded, the weights themselves are cast to float32 (the masters; the runner casts them before a resume
    loads into them) and FSDP's mixed-precision policy gathers them in the low precision for the forward and
    backward and reduces the gradients in float32, so the optimizer steps float32 as with masters (the gradients
    are summed in float32 rather than in the weights' precision: the same to that precision's rounding). Without
    ``fp32_masters`` they stay in their precision."""
    low = {p.dtype for p in model.parameters() if p.dtype != torch.float32}
    if len(low) > 1:
        raise ConfigError(f"train.shard=full: the model's weights are of several precisions ({sorted(map(str, low))})")
    return low.pop() if low and fp32_masters else None


def shard_model(model: nn.Module, compute: torch.dtype | None = None, offload: bool = False, pin: bool = False) -> None:
    """Shard ``model`` over the default process group in place: every module with parameters of its own a unit,
    then the root (its own parameters, if any); ``compute``: the precision float32 weights are gathered in for the
    forward and backward (:func:`compute_precision`; the weights float32 already). ``offload``
    (``train.shard=offload``): the shards and their gradients live in host memory (pinned with ``pin``, for
    asynchronous copies to a GPU), so the optimizer's state is created and stepped there too; a unit's shard is
    copied to the device to be gathered for its forward and backward (FSDP2's ``CPUOffloadPolicy``)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    policy = MixedPrecisionPolicy()  # (FSDP's default: compute in the weights' own precision)
    if compute is not None:
        policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
    host = CPUOffloadPolicy(pin_memory=pin) if offload else OffloadPolicy()  # (the base class: no offload)
    units = [m for m in model.modules() if m is not model and next(m.parameters(recurse=False), None) is not None]
    for module in (*units, model):
        fully_shard(module, mp_policy=policy, offload_policy=host)


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The sharded ``model``'s state whole, under the names an unsharded build gives (FSDP2 shards modules in place):
    on rank 0 in host memory, gathered a tensor at a time, so no rank holds the whole model on its device; empty on
    every other rank. Every rank must call it (each tensor's gather is a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}
