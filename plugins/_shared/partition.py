"""Disjoint weight partitions across tasks: the machinery PackNet and LPS share.

Every pruned layer (each shared Linear/Conv weight, heads excluded) carries an *owner map*: 0 for a
free entry, ``k`` for an entry kept by the k-th task of the run. Supports are disjoint by
construction, so the ACR of two tasks' footprints is exactly 0. The owner map is stored as one byte
per weight (``uint8``, ≤ 255 tasks); per-task boolean masks (LPS share masks) are bit-packed.

Projections follow LPS §IV-C on the GEMM view of a layer (out × rest): ``irregular`` keeps the
largest |w| entries, ``column`` the columns of largest L2 norm, ``filter`` the rows (output
channels; conv layers only). Only free entries (or fully free columns/rows) are eligible.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from clbench.errors import ConfigError
from clbench.footprints import Masked, TaskFootprint
from clbench.method import Method, Phase
from clbench.model import CLModel

# --------------------------------------------------------------------------- settings
PROJECTIONS = ("irregular", "column", "filter")


def check_shares(setting: str, key: str, values: Iterable[float]) -> None:
    """α and β are shares of a layer: each must lie in (0, 1]. Raised at plan time, before any cell runs."""
    values = list(values)
    if not values:
        raise ConfigError(f"{setting}.{key} is empty: give one value, or one per pruned layer")
    for v in values:
        if not 0.0 < v <= 1.0:
            raise ConfigError(f"{setting}.{key}={v} must lie in (0, 1] (a share of the layer's weights)")


def check_partition(setting: str, alpha: Iterable[float], alpha_first: float, projection: Iterable[str],
                    epochs: dict[str, int]) -> None:
    """The checks that need no model: ranges, projection names, epoch counts (shape checks run in setup)."""
    check_shares(setting, "alpha", alpha)
    if alpha_first != 0.0:
        check_shares(setting, "alpha_first", [alpha_first])
    for kind in projection:
        if kind not in PROJECTIONS:
            raise ConfigError(f"{setting}.projection={kind!r}: choose one of {list(PROJECTIONS)}")
    for key, value in epochs.items():
        if value < 0:
            raise ConfigError(f"{setting}.{key}={value} must be ≥ 0")


# --------------------------------------------------------------------------- projections
def topk_positions(scores: Tensor, eligible: Tensor, k: int) -> Tensor:
    """Boolean mask of the ``k`` largest ``scores`` among ``eligible`` positions; ties at the threshold go
    to the lowest flat indices, so the mask has exactly ``min(k, |eligible|)`` ones and is deterministic.

    The threshold (the k-th largest score) comes from a selection, not a sort: ``numpy.partition`` on
    CPU (O(n); about 4× faster than ``torch.topk`` with k = 10% of a 2000×2000 layer, see
    benchmarks/bench_lps_admm.py), ``kthvalue`` on other devices.
    """
    return (_topk_numpy if scores.device.type == "cpu" else _topk_torch)(scores, eligible, k)


def _topk_torch(scores: Tensor, eligible: Tensor, k: int) -> Tensor:
    flat, elig = scores.detach().flatten().float(), eligible.flatten()
    k = min(k, int(torch.count_nonzero(elig)))  # never pick an ineligible position
    if k <= 0:
        return torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    flat = flat.masked_fill(~elig, -math.inf)
    thr = flat.kthvalue(flat.numel() - k + 1).values
    out = flat > thr
    need = k - int(torch.count_nonzero(out))
    if need > 0:
        tie = (flat == thr) & elig
        out |= tie & (tie.cumsum(0) <= need)
    return out.reshape(scores.shape)


def _topk_numpy(scores: Tensor, eligible: Tensor, k: int) -> Tensor:
    s = scores.detach().reshape(-1).float().numpy()
    e = eligible.reshape(-1).numpy()
    n_elig = int(np.count_nonzero(e))
    k = min(k, n_elig)  # never pick an ineligible position
    if k <= 0 or k == n_elig:
        return eligible.clone() if k > 0 else torch.zeros(scores.shape, dtype=torch.bool)
    vals = s[e]  # a copy of the eligible scores only: no -inf padding for the selection to wade through
    vals.partition(n_elig - k)
    thr = vals[n_elig - k]  # the k-th largest eligible score
    out = s > thr
    out &= e
    need = k - int(np.count_nonzero(out))
    if need > 0:  # ties at the threshold (e.g. a share mask still at 1 everywhere): lowest indices first
        out[np.flatnonzero((s == thr) & e)[:need]] = True
    return torch.from_numpy(out).reshape(scores.shape)


def units(shape: Sequence[int], kind: str) -> int:
    """How many prunable units a layer has: entries, GEMM columns or GEMM rows."""
    rest = math.prod(shape[1:])
    return {"irregular": shape[0] * rest, "column": rest, "filter": shape[0]}[kind]


def keep_mask(weight: Tensor, eligible: Tensor, count: int, kind: str) -> Tensor:
    """The support of the projection of ``weight`` onto "at most ``count`` units among ``eligible``"."""
    if kind == "irregular":
        return topk_positions(weight.abs(), eligible, count)
    mat = weight.detach().reshape(weight.shape[0], -1).float()
    elig = eligible.reshape(mat.shape)
    dim = 0 if kind == "column" else 1  # column: norm over rows; filter: norm over each row
    norms = (mat * elig).norm(dim=dim)
    chosen = topk_positions(norms, elig.all(dim=dim), count)
    grid = chosen.unsqueeze(0) if kind == "column" else chosen.unsqueeze(1)
    return (grid.expand_as(mat) & elig).reshape(weight.shape)


def share_projection(scores: Tensor, old: Tensor, beta: float) -> Tensor:
    """LPS eq. (8): a {0,1} mask with exactly round(β·|old|) ones, on the largest scores among old entries."""
    return topk_positions(scores, old, int(round(beta * int(torch.count_nonzero(old)))))


def pack(mask: Tensor) -> Tensor:
    return torch.from_numpy(np.packbits(mask.detach().cpu().numpy().reshape(-1)))


def unpack(bits: Tensor, shape: Sequence[int]) -> Tensor:
    size = math.prod(shape)
    return torch.from_numpy(np.unpackbits(bits.numpy())[:size].astype(bool).reshape(tuple(shape)))


def per_layer(values: Sequence[Any], layers: Sequence[str], setting: str) -> dict[str, Any]:
    """One value for every layer, or one per layer in order."""
    if len(values) == 1:
        return {n: values[0] for n in layers}
    if len(values) != len(layers):
        raise ConfigError(f"{setting}: give one value or one per pruned layer ({len(layers)}: {list(layers)}), "
                          f"got {len(values)}")
    return dict(zip(layers, values, strict=True))


# --------------------------------------------------------------------------- the shared method
class PartitionMethod(Method):
    """Task-owned disjoint weights, per-task heads, biases fixed after the first task.

    Subclasses define ``phases`` and decide which entries a task keeps (``self.kept``) before
    ``after_task``; this class handles gradient masks, the owner map, task-aware evaluation,
    footprints, report and resume.
    """

    needs_logits = False  # LPS's ADMM terms read the weights, never the logits

    setting = "partition"  # the settings scope named in errors

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if not model.info.multi_head or not hasattr(model, "head"):
            raise ConfigError(f"{self.setting} needs one output head per task: set model.multi_head=true")
        self.layers: dict[str, nn.Parameter] = {f"{n}.weight": m.weight for n, m in model.adaptable_layers().items()}
        if not self.layers:
            raise ConfigError(f"{self.setting}: the model has no Linear/Conv2d layer to partition")
        names = list(self.layers)
        self.kind: dict[str, str] = per_layer(self.config.projection, names, f"{self.setting}.projection")
        self.alpha: dict[str, float] = per_layer(self.config.alpha, names, f"{self.setting}.alpha")
        self._validate(model)
        dev = self.ctx.device
        self.owner = {n: torch.zeros(p.shape, dtype=torch.uint8, device=dev) for n, p in self.layers.items()}
        self._owner_masks: dict[str, tuple[Tensor, Tensor]] = {}
        self.kept: dict[str, Tensor] = {}
        self.trainable: dict[str, Tensor] = {}
        self.index = -1
        self.task = ""

    def _validate(self, model: CLModel) -> None:
        modules = dict(model.adaptable_layers())
        T = len(self.ctx.order)
        if self.ctx.train.weight_decay > 0:
            raise ConfigError(f"train.weight_decay={self.ctx.train.weight_decay}: {self.setting} needs 0, decay "
                              "would move the frozen weights of earlier tasks")
        if len(self.ctx.order) > 255:
            raise ConfigError(f"{self.setting}: at most 255 tasks (the owner map is one byte per weight)")
        for n, p in self.layers.items():
            kind = self.kind[n]
            if kind not in PROJECTIONS:
                raise ConfigError(f"{self.setting}.projection={kind!r} for {n}: choose one of {list(PROJECTIONS)}")
            if kind == "filter" and not isinstance(modules[n.rsplit(".", 1)[0]], nn.Conv2d):
                raise ConfigError(f"{self.setting}.projection='filter' does not fit {n}: filter pruning needs a "
                                  "Conv2d layer (use 'irregular' or 'column' on Linear layers)")
            for name, value in (("alpha", self.alpha[n]), ("alpha_first", self.config.alpha_first or self.alpha[n])):
                if not 0.0 < value <= 1.0:
                    raise ConfigError(f"{self.setting}.{name}={value} for {n} must lie in (0, 1]")
            need = sum(self.count(n, i) for i in range(T))
            if need > units(p.shape, kind):
                raise ConfigError(
                    f"{self.setting}.alpha: capacity overrun on {n}: {T} tasks need {need} of its "
                    f"{units(p.shape, kind)} {kind} units (α_first={self.config.alpha_first or self.alpha[n]}, "
                    f"α={self.alpha[n]}); lower α or run fewer tasks")

    def count(self, name: str, index: int) -> int:
        """Units task ``index`` keeps in layer ``name`` (α of the layer's units; task 1 may differ)."""
        frac = self.config.alpha_first if index == 0 and self.config.alpha_first > 0 else self.alpha[name]
        return max(1, math.floor(frac * units(self.layers[name].shape, self.kind[name]) + 1e-9))

    # -- what trains ----------------------------------------------------------------
    def base_phase(self, name: str, epochs: int) -> Phase:
        return Phase.from_train(self.ctx.train, name, epochs=epochs)

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        head = list(model.head(self.task).parameters())  # type: ignore[operator]
        weights = list(self.layers.values())
        if self.index > 0:  # biases and normalisation: learned on the first task only (LPS §V-A)
            return weights + head
        skip = {id(p) for p in weights + head} | {id(p) for n, p in model.named_parameters()
                                                   if n in model.head_parameter_names()}
        return weights + head + [p for p in model.parameters() if id(p) not in skip]

    def free(self, name: str) -> Tensor:
        """Entries no task owns yet (cached until the owner map changes; callers must not write to it)."""
        return self._split(name)[0]

    def old(self, name: str) -> Tensor:
        """Entries some earlier task owns (cached like ``free``)."""
        return self._split(name)[1]

    def _split(self, name: str) -> tuple[Tensor, Tensor]:
        hit = self._owner_masks.get(name)
        if hit is None:  # the owner map only changes after a task: compute once per task, not per step
            free = self.owner[name] == 0
            hit = self._owner_masks[name] = (free, ~free)
        return hit

    def before_task(self, task: str, index: int) -> None:
        self.task, self.index = task, index
        self.kept = {}
        self._reinit_free(index)
        self.set_trainable({n: self.free(n) for n in self.layers})

    def _reinit_free(self, index: int) -> None:
        """Free entries start from a fresh default init, old ones keep their values.

        As the LPS code does between tasks (docs/reference-code.md §3.6, step 0).
        """
        g = self.ctx.generator(index, 7777)
        with torch.no_grad():
            for n, p in self.layers.items():
                bound = 1.0 / math.sqrt(math.prod(p.shape[1:]))
                fresh = torch.empty(p.shape).uniform_(-bound, bound, generator=g).to(p.device)
                p.copy_(torch.where(self.free(n), fresh, p))

    def set_trainable(self, masks: dict[str, Tensor]) -> None:
        self.trainable = {n: m.to(self.layers[n].dtype) for n, m in masks.items()}

    def sparse_coordinates(self, phase: Phase) -> list[tuple[nn.Parameter, Tensor]]:
        return [(p, self.trainable[n] > 0) for n, p in self.layers.items()]

    def after_backward(self) -> None:
        for n, p in self.layers.items():
            if p.grad is not None:
                p.grad.mul_(self.trainable[n])

    def after_task(self, task: str, index: int) -> None:
        with torch.no_grad():
            for n, p in self.layers.items():
                released = self.free(n) & ~self.kept[n]
                p.masked_fill_(released, 0.0)
                self.owner[n][self.kept[n]] = index + 1
        self._owner_masks.clear()

    # -- evaluation ------------------------------------------------------------------
    def eval_mask(self, name: str, index: int) -> Tensor:
        """Entries task ``index`` computes with (PackNet: every entry of tasks ≤ index)."""
        own = self.owner[name]
        return (own > 0) & (own <= index + 1)

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        """Build task j's masked weights once on entering, restore them on exit (not per forward)."""
        j = self.ctx.order.index(task)
        if j > self.index or not self.kept:  # a task not trained yet: the network as it is
            yield
            return
        saved = {n: p.detach().clone() for n, p in self.layers.items()}
        with torch.no_grad():
            for n, p in self.layers.items():
                p.mul_(self.eval_mask(n, j))
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in self.layers.items():
                    p.copy_(saved[n])

    # -- reporting -------------------------------------------------------------------
    def footprint(self, task: str, index: int) -> TaskFootprint:
        """W^t of LPS eq. (2): the task's own entries (its values; everything else is zero)."""
        return {n: Masked.from_delta(p.detach().cpu(), (self.owner[n] == index + 1).cpu())
                for n, p in self.layers.items()}

    def capacity_used(self) -> float:
        owned = sum(int(o.gt(0).sum()) for o in self.owner.values())
        return owned / sum(o.numel() for o in self.owner.values())

    def report(self) -> dict[str, Any]:
        per_task = [sum(int((o == t + 1).sum()) for o in self.owner.values()) for t in range(self.index + 1)]
        total = sum(o.numel() for o in self.owner.values())
        return {"capacity_used": self.capacity_used(), "capacity_per_task": [c / total for c in per_task],
                "mask_bytes_per_task": self.mask_bytes_per_task()}

    def mask_bytes_per_task(self) -> float:
        """Bytes of mask storage per task: the shared owner map (1 B/weight) amortised over the tasks."""
        return sum(o.numel() for o in self.owner.values()) / max(self.index + 1, 1)

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"index": self.index, "owner": {n: o.cpu() for n, o in self.owner.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.index = int(state.get("index", -1))
        self.task = self.ctx.order[self.index] if self.index >= 0 else ""
        for n, o in state.get("owner", {}).items():
            self.owner[n] = o.to(self.ctx.device)
        self._owner_masks.clear()
        self.kept = {n: o == self.index + 1 for n, o in self.owner.items()} if self.index >= 0 else {}
