"""Optimizers for a phase, with state kept only where a mask lets weights move.

torch's optimizers keep their state (momentum, RMSProp's square average, Adam's two moments) as
dense as the parameter. A mask method that trains 10 % of an 8B model's weights would then carry
optimizer state for all of them: one to two extra copies of the model. :class:`PackedState` gives the
torch optimizer a packed vector of the trainable coordinates instead, so its state is as large as the
mask, and the update is the torch optimizer's own (same kernels, same numbers: a coordinate whose
gradient is always zero never moves under SGD, RMSProp or Adam without weight decay, and mask
methods either forbid decay or restore what it moves).

Low precision (bf16/fp16 trainable weights): stepping the weights themselves rounds small updates
away (RMSProp at lr 1e-6 on bf16 weights of std 0.02 realises ~6 % of its fp32 movement: the ulp of
0.02 is 1.2e-4). :class:`PackedState` then keeps an fp32 *master* of every trainable low-precision
coordinate, casts the gradients to fp32, steps the masters and writes them back rounded: the forward
runs in the model's dtype, the updates accumulate in fp32, as DeepSpeed's bf16 optimizer does. The
masters (:class:`Masters`) live as long as the cell, across phases and tasks, and go into its checkpoints:
a task's update smaller than the weight's ulp is not lost at the task's end either. fp32 models never
take this path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from clbench.errors import ClbenchError
from clbench.method import Phase

Coordinates = Sequence[tuple[nn.Parameter, Tensor]]
LOW_PRECISION = (torch.bfloat16, torch.float16)  # trainable weights of these dtypes get fp32 masters


class Masters:
    """The fp32 masters of a cell's low-precision weights, kept across phases and tasks.

    A weight trained whole (no mask) has a whole flat master. A weight trained only at masked coordinates has a
    master of the coordinates any of its masks has named so far (sorted flat indices and their values): a
    coordinate no mask named never moved, so its master is its weight exactly and need not be held. The numbers
    are those of whole masters (a test), the memory 8 bytes (value and int32 index) a coordinate of the masks' union
    instead of 4 a coordinate of the weight (an 8B model after one task's masks at 10 % density: 6 GB instead of 30).
    """

    def __init__(self) -> None:
        # id(p) -> (p, sorted flat indices or None for the whole parameter, fp32 values)
        self.tensors: dict[int, tuple[nn.Parameter, Tensor | None, Tensor]] = {}

    @torch.no_grad()
    def of(self, p: nn.Parameter) -> Tensor:
        """``p``'s whole master, taking the weight's value wherever it no longer holds the master's rounding."""
        entry = self.tensors.get(id(p))
        weight = p.detach().reshape(-1)
        if entry is not None and entry[1] is None:
            master = entry[2]
            master.copy_(synced(master, weight))
        elif entry is None:  # none yet: the weight
            master = weight.float()
        else:  # the coordinates of earlier masks: the rest is the weight
            assert entry[1] is not None  # a whole master took the branch above
            master = _whole(weight, entry[1], entry[2])
        self.tensors[id(p)] = (p, None, master)
        return master

    @torch.no_grad()
    def at(self, p: nn.Parameter, index: Tensor) -> tuple[Tensor, Tensor | None]:
        """The master holding ``p``'s sorted flat coordinates ``index`` and their positions in it (None: the master
        is exactly those coordinates): a whole master where ``p`` has one, else the masks' union, grown by
        ``index`` (synced with the weight, as :meth:`of`)."""
        entry = self.tensors.get(id(p))
        if entry is not None and entry[1] is None:
            return self.of(p), index
        weight = p.detach().reshape(-1)
        if entry is None:
            union, values, same = index, weight.index_select(0, index).float(), True
        else:
            assert entry[1] is not None  # a whole master returned above
            union, values = entry[1], entry[2]
            values.copy_(synced(values, weight.index_select(0, union)))
            same = _same(union, index)
            if not same:
                flags = torch.zeros(weight.numel(), dtype=torch.bool, device=weight.device)
                flags[union] = True
                flags[index] = True
                grown = flags.nonzero().squeeze(1).to(index.dtype)
                del flags
                merged = weight.index_select(0, grown).float()
                merged[torch.searchsorted(grown, union)] = values
                union, values = grown, merged
                same = _same(union, index)  # index held every coordinate of the union
        self.tensors[id(p)] = (p, union, values)
        if same:
            return values, None
        return values, torch.searchsorted(union, index, out_int32=index.dtype == torch.int32)

    @torch.no_grad()
    def value(self, p: nn.Parameter) -> Tensor | None:
        """``p``'s master in ``p``'s shape (synced with the weight, as :meth:`of`), or None when it has none."""
        entry = self.tensors.get(id(p))
        if entry is None:
            return None
        weight = p.detach().reshape(-1)
        _, index, values = entry
        return (synced(values, weight) if index is None else _whole(weight, index, values)).view(p.shape)

    def nbytes(self) -> int:
        """The bytes the masters hold (values and the indices of masked ones)."""
        return sum(
            v.untyped_storage().nbytes() + (0 if i is None else i.untyped_storage().nbytes())
            for _, i, v in self.tensors.values()
        )

    def state_dict(self, names: dict[int, str]) -> dict[str, Any]:
        return {
            names[k]: v.cpu() if i is None else {"index": i.cpu(), "values": v.cpu()}
            for k, (_, i, v) in self.tensors.items()
            if k in names
        }

    def load_state_dict(self, state: dict[str, Any], params: dict[str, nn.Parameter]) -> None:
        self.tensors = {}
        for name, saved in state.items():
            if name in params:
                p = params[name]
                index, values = (None, saved) if isinstance(saved, Tensor) else (saved["index"], saved["values"])
                self.tensors[id(p)] = (p, None if index is None else index.to(p.device), values.to(p.device))


def _whole(weight: Tensor, index: Tensor, values: Tensor) -> Tensor:
    """A flat fp32 master of the whole weight from the master of its coordinates ``index``: the weight elsewhere."""
    out = weight.float()
    out.index_put_((index,), synced(values, weight.index_select(0, index)))
    return out


def _same(a: Tensor, b: Tensor) -> bool:
    """Whether two index vectors are equal (on the meta device, where values are unknown: only the same tensor)."""
    return a is b or (not a.is_meta and a.shape == b.shape and torch.equal(a, b))


def synced(master: Tensor, weight: Tensor) -> Tensor:
    """The master where ``weight`` is still its rounding, the weight where it was edited since."""
    return torch.where(weight == master.to(weight.dtype), master, weight.float())


def torch_optimizer(
    params: Sequence[Tensor], phase: Phase, fused: bool = False, capturable: bool = False
) -> torch.optim.Optimizer:
    """The phase's torch optimizer over ``params``: :meth:`Phase.torch_optimizer`."""
    return phase.torch_optimizer(list(params), fused, capturable)


def make_optimizer(
    params: Sequence[nn.Parameter],
    phase: Phase,
    coordinates: Coordinates = (),
    masters: Masters | None = None,
    fused: bool = False,
    fp32_masters: bool = True,
    capturable: bool = False,
) -> torch.optim.Optimizer | PackedState:
    """The optimizer of one phase; with ``coordinates`` (parameter, bool mask) its state covers only the masks;
    low-precision parameters are stepped through fp32 masters (``masters``: the cell's, else new ones), or, without
    ``fp32_masters`` (``train.fp32_masters=false``), in their own dtype like any other. ``fused``: see
    :func:`torch_optimizer`, as ``capturable``."""
    if not params:
        raise ClbenchError(f"phase {phase.name!r} has no trainable parameters")
    if not coordinates and (not fp32_masters or not any(p.dtype in LOW_PRECISION for p in params)):
        return torch_optimizer(params, phase, fused, capturable)
    return PackedState(
        params,
        coordinates,
        lambda packed: torch_optimizer(packed, phase, fused, capturable),
        (masters or Masters()) if fp32_masters else None,
    )


def torch_optimizer_of(opt: torch.optim.Optimizer | PackedState) -> torch.optim.Optimizer:
    """The torch optimizer that holds the learning rate (what an LR scheduler takes)."""
    return opt.inner if isinstance(opt, PackedState) else opt


class PackedState:
    """Steps a torch optimizer over the masked coordinates of some parameters, packed into vectors.

    Each step gathers the current values and gradients at the mask (so weights edited outside the
    optimizer, by projections or masks, are always read fresh), lets the inner optimizer update the
    packed vector, and scatters it back. Parameters without a mask are passed to the inner optimizer
    as they are, except low-precision ones, which get a whole fp32 master (masked ones: a master of their masks'
    coordinates, :class:`Masters`; with ``masters`` None, ``train.fp32_masters=false``, they are packed and stepped
    in their own dtype like fp32 ones). Memory: per masked parameter nnz indices and nnz values plus the inner
    optimizer's nnz-sized state, instead of numel-sized state.

    The values of a low-precision parameter are its fp32 master: read fresh only where the weight no
    longer holds the master's rounding (a method's edit, a projection or a restored coordinate, is taken;
    the fp32 digits of untouched coordinates are kept), written back rounded after the step.
    """

    def __init__(
        self,
        params: Sequence[nn.Parameter],
        coordinates: Coordinates,
        build: Callable[[list[Tensor]], torch.optim.Optimizer],
        masters: Masters | None = None,
    ) -> None:
        masks = {id(p): m for p, m in coordinates}
        # (parameter, flat indices or None for all, values: fp32 for a low-precision parameter)
        self.packed: list[tuple[nn.Parameter, Tensor | None, Tensor]] = []
        # each masked low-precision parameter's master and the positions of its mask's coordinates in it
        self.masters: dict[int, tuple[Tensor, Tensor]] = {}
        inner: list[Tensor] = []
        for p in params:
            mask = masks.get(id(p))
            low = p.dtype in LOW_PRECISION and masters is not None  # None: stepped in the weight's dtype
            if mask is None and not low:
                inner.append(p)
                continue
            if (mask is not None and mask.shape != p.shape) or not p.is_contiguous():
                what = f"coordinate mask of shape {tuple(mask.shape)}" if mask is not None else "fp32 master"
                raise ClbenchError(
                    f"{what} for a parameter of shape "
                    f"{tuple(p.shape)}{'' if p.is_contiguous() else ' (not contiguous)'}"
                )
            if mask is None:  # the whole master itself (the inner optimizer steps it in place)
                assert masters is not None  # (low)
                index, values = None, masters.of(p)
            else:
                # Flat indices, int32 where they fit: 4 bytes a coordinate, 3× faster than boolean
                # masked_select/masked_scatter on CPU, and no device sync on GPU (sizes known in advance).
                index = mask.to(p.device).reshape(-1).nonzero().squeeze(1)
                index = index.int() if p.numel() < 2**31 else index
                if low and masters is not None:
                    master, where = masters.at(p, index)
                    if where is None:  # the master holds just these coordinates: the inner optimizer steps it
                        values = master
                    else:
                        # a fresh leaf: the master may be a whole one an earlier phase's optimizer stepped
                        values = master.detach().index_select(0, where)
                        self.masters[id(p)] = (master, where)
                else:
                    values = p.detach().reshape(-1).index_select(0, index)
            self.packed.append((p, index, values.requires_grad_(True)))
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
        cast = []  # low-precision parameters: stepped one at a time, so one fp32 copy of a gradient exists at once
        for p, index, values in self.packed:
            current = p.view(-1) if index is None else p.view(-1).index_select(0, index)
            if values.dtype == p.dtype:
                values.copy_(current)
            else:  # the master stays where the weight is its rounding; a coordinate edited since is taken
                values.copy_(synced(values, current))
            values.grad = None
            if p.grad is not None and values.dtype == p.dtype:
                grad = p.grad.reshape(-1)
                values.grad = grad if index is None else grad.index_select(0, index)
            elif p.grad is not None:
                cast.append((p, index, values))
        self.inner.step()  # what needs no cast (a parameter without a gradient is skipped by torch's optimizers)
        if cast:
            self._step_cast(cast)
        for p, index, values in self.packed:
            self._write_back(p, index, values)

    def _step_cast(self, cast: list[tuple[nn.Parameter, Tensor | None, Tensor]]) -> None:
        """Steps each low-precision parameter alone, from its gradient cast to fp32, the others' gradients hidden:
        the same per-parameter update (every optimizer here updates each parameter from its own gradient and
        state), without an fp32 copy of every gradient at once (30 GiB for an 8B bf16 model)."""
        hidden = [(t, t.grad) for group in self.inner.param_groups for t in group["params"] if t.grad is not None]
        for t, _ in hidden:
            t.grad = None
        try:
            for p, index, values in cast:
                assert p.grad is not None  # step() passes only parameters with a gradient; it hides only inner's
                grad = p.grad.reshape(-1)
                values.grad = (grad if index is None else grad.index_select(0, index)).to(values.dtype)
                self.inner.step()
                values.grad = None
        finally:
            for t, g in hidden:
                t.grad = g

    def _write_back(self, p: nn.Parameter, index: Tensor | None, values: Tensor) -> None:
        if index is None:
            p.view(-1).copy_(values)  # rounded to the weight's dtype
        else:
            p.view(-1).index_put_((index,), values.to(p.dtype))
            if id(p) in self.masters:
                master, where = self.masters[id(p)]
                master.index_put_((where,), values)
