"""Optimizers for a phase, with state kept only where a mask lets weights move.

torch's optimizers keep their state (momentum, RMSProp's square average, Adam's two moments) as
dense as the parameter. A mask method that trains 10 % of an 8B model's weights would then carry
optimizer state for all of them: one to two extra copies of the model. :class:`PackedState` gives the
torch optimizer a packed vector of the trainable coordinates instead, so its state is as large as the
mask, and the update is the torch optimizer's own (same kernels, same numbers: a coordinate whose
gradient is always zero never moves under SGD, RMSProp or Adam without weight decay, and mask
methods either forbid decay or restore what it moves).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from clbench.errors import ClbenchError
from clbench.method import Phase

Coordinates = Sequence[tuple[nn.Parameter, Tensor]]


def torch_optimizer(params: Sequence[Tensor], phase: Phase) -> torch.optim.Optimizer:
    """The phase's torch optimizer over ``params``."""
    if phase.optimizer == "sgd":
        return torch.optim.SGD(params, lr=phase.lr, momentum=phase.momentum, weight_decay=phase.weight_decay)
    if phase.optimizer == "adam":
        return torch.optim.Adam(params, lr=phase.lr, weight_decay=phase.weight_decay)
    if phase.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=phase.lr, weight_decay=phase.weight_decay)
    if phase.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=phase.lr, momentum=phase.momentum, weight_decay=phase.weight_decay)
    raise ClbenchError(f"unknown optimizer {phase.optimizer!r}")


def make_optimizer(params: Sequence[nn.Parameter], phase: Phase,
                   coordinates: Coordinates = ()) -> torch.optim.Optimizer | PackedState:
    """The optimizer of one phase; with ``coordinates`` (parameter, bool mask) its state covers only the masks."""
    if not params:
        raise ClbenchError(f"phase {phase.name!r} has no trainable parameters")
    if not coordinates:
        return torch_optimizer(params, phase)
    return PackedState(params, coordinates, lambda packed: torch_optimizer(packed, phase))


def torch_optimizer_of(opt: torch.optim.Optimizer | PackedState) -> torch.optim.Optimizer:
    """The torch optimizer that holds the learning rate (what an LR scheduler takes)."""
    return opt.inner if isinstance(opt, PackedState) else opt


class PackedState:
    """Steps a torch optimizer over the masked coordinates of some parameters, packed into vectors.

    Each step gathers the current values and gradients at the mask (so weights edited outside the
    optimizer, by projections or masks, are always read fresh), lets the inner optimizer update the
    packed vector, and scatters it back. Parameters without a mask are passed to the inner optimizer
    as they are. Memory: per masked parameter nnz indices and nnz values plus the inner optimizer's
    nnz-sized state, instead of numel-sized state.
    """

    def __init__(self, params: Sequence[nn.Parameter], coordinates: Coordinates,
                 build: Callable[[list[Tensor]], torch.optim.Optimizer]) -> None:
        masks = {id(p): m for p, m in coordinates}
        self.packed: list[tuple[nn.Parameter, Tensor, Tensor]] = []  # (parameter, flat indices, values)
        inner: list[Tensor] = []
        for p in params:
            mask = masks.get(id(p))
            if mask is None:
                inner.append(p)
                continue
            if mask.shape != p.shape or not p.is_contiguous():
                raise ClbenchError(f"coordinate mask of shape {tuple(mask.shape)} for a parameter of shape "
                                   f"{tuple(p.shape)}{'' if p.is_contiguous() else ' (not contiguous)'}")
            # Flat indices, int32 where they fit: 4 bytes a coordinate, 3× faster than boolean
            # masked_select/masked_scatter on CPU, and no device sync on GPU (sizes known in advance).
            index = mask.to(p.device).reshape(-1).nonzero().squeeze(1)
            index = index.int() if p.numel() < 2**31 else index
            values = p.detach().reshape(-1).index_select(0, index).requires_grad_(True)
            self.packed.append((p, index, values))
            inner.append(values)
        self.inner = build(inner)

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups

    @property
    def state(self) -> dict:
        return self.inner.state  # type: ignore[return-value]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, _, _ in self.packed:
            p.grad = None if set_to_none else (p.grad.zero_() if p.grad is not None else None)
        self.inner.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self) -> None:
        for p, index, values in self.packed:
            values.copy_(p.view(-1).index_select(0, index))
            values.grad = None if p.grad is None else p.grad.reshape(-1).index_select(0, index)
        self.inner.step()
        for p, index, values in self.packed:
            p.view(-1).index_put_((index,), values)
