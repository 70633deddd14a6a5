"""Masked sparse training with a damped-Fisher EWC penalty (Algorithm 1), and Expander-EWC on top of it.

:class:`MaskedTraining` holds everything that does not depend on where a mask comes from: only the
coordinates of the current task's mask move (gradients masked after ``backward``, values outside the
mask restored after the step when weight decay could move them), the penalty
(λ/2)·(θ − θ_ref)ᵀ(F + γI)(θ − θ_ref), the diagonal Fisher on the active coordinates after each task
(F ← F + F_k, θ_ref ← θ), ``Masked`` footprints and per-task mask statistics. Subclasses only decide
the masks: :class:`ExpanderEWC` draws expander (or uniform) masks before the task; LoTA/LoTTO
(``clbench_plugins.lota``) calibrate them from a short dense phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from clbench_plugins._shared.penalty import (
    Offload,
    Weighted,
    add_penalty_gradients,
    diagonal_fisher,
    penalty_value,
)
from torch import Tensor, nn

from clbench.data import Batch
from clbench.footprints import Masked, TaskFootprint
from clbench.method import MaskPlan, Method, Phase, derive_seed
from clbench.model import CLModel

from .config import ExpanderEWCConfig, MaskedTrainingConfig
from .masks import make_mask, pack


class Anchor(Mapping[str, Tensor]):
    """θ_ref of every penalised parameter, in the penalty's order. An entry is a whole tensor; or ``None``, the
    weight itself (θ_ref between a task's end and the next one's start); or ``(mask, values)``, a masked weight whose
    task started from θ_ref: θ_ref at the mask, the weight itself elsewhere, since those coordinates do not move in
    the task. The penalty reads it at the mask only (θ − θ_ref is 0 elsewhere), so a packed entry keeps density × the
    weight's bytes instead of all of them (~13 GiB of bf16 for Llama-3-8B at 10 %). Each read is a fresh whole tensor
    of one parameter: the same values as a stored θ_ref, so the penalty's numbers are unchanged."""

    def __init__(self, entries: dict[str, Tensor | tuple[Tensor, Tensor] | None],
                 weights: Callable[[], Mapping[str, nn.Parameter]], read: Callable[[Tensor], Tensor]) -> None:
        self.entries = entries
        self._weights = weights
        self._read = read  # a whole entry on the device (it may be kept on the host: Offload)

    def __getitem__(self, name: str) -> Tensor:
        entry = self.entries[name]
        if isinstance(entry, Tensor):
            return self._read(entry)
        out = self._weights()[name].detach().clone()
        if entry is not None:
            out[entry[0]] = entry[1]
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def pack(self, masks: Mapping[str, Tensor]) -> None:
        """At a task's start (the weights are θ_ref): keep each masked weight's θ_ref at its mask only."""
        weights = self._weights()
        for name, mask in masks.items():
            if name in self.entries:
                self.entries[name] = (mask, weights[name].detach()[mask])

    def stored(self) -> dict[str, Tensor]:
        """The whole entries (a checkpoint's: one is written between tasks, when the rest are the weights)."""
        return {n: e for n, e in self.entries.items() if isinstance(e, Tensor)}


class MaskedTraining(Method):
    """Trains the masked coordinates of the shared weight matrices; the mask source is the subclass's."""

    config: MaskedTrainingConfig
    needs_logits = False  # the penalty reads the weights, never the logits
    value_only_terms = frozenset({"ewc"})  # its gradient is added in after_backward
    # masks drawn before a task that starts from θ_ref (Expander-EWC): the anchor keeps θ_ref at the mask only
    # (:class:`Anchor`). Not for a mask found during the task (LoTA's dense phase moves every coordinate first)
    # nor a task that starts elsewhere (per-task masks start from the base weights).
    anchor_at_masks = False

    def setup(self, model: CLModel) -> None:
        self._found: dict[str, dict[str, nn.Parameter]] = {}  # masked_parameters and penalized, this phase's
        super().setup(model)
        # F and θ_ref on the device or in host memory (train.offload_state); with masks drawn before the task
        # (anchor_at_masks) an offloaded Fisher's device copy is the task's masks only (_fisher_at_mask)
        self.offload = Offload(self.ctx.device, self.ctx.train.offload_state)
        self._at_mask: dict[str, tuple[Tensor, Tensor]] = {}  # name -> (the mask, the Fisher there, on the device)
        for p in self.masked_parameters().values():
            p.requires_grad_(True)  # sparse adaptation moves pretrained weights, even of a frozen base
        self.masks: dict[str, Tensor] = {}  # current task's masks (bool, on the parameter's device)
        self.history: list[dict[str, np.ndarray]] = []  # earlier tasks' masks, bit-packed
        self.stats: list[dict[str, Any]] = []  # per task: mask statistics
        self.fisher: dict[str, Tensor] = {}
        self.anchor = self._anchor_now()  # θ_ref ← θ⁽⁰⁾ (Alg. 1 line 1)
        self._phase: Phase | None = None
        self._restore: dict[str, Tensor] = {}  # a weight-decay phase's starting values on the device (before_phase)
        self._pending_stats: dict[str, dict[str, Any]] = {}
        self._doubled: Mapping[str, Tensor] = {}  # 2 × (λ/2)(F + γ): the penalty's gradient is 2w ⊙ (θ − θ*)

    def mask_plan(self) -> MaskPlan:
        """Masks of ``density`` each; kept apart from earlier tasks' where the config says so (``overlap_policy``
        avoid; LoTTO's ``disjoint``)."""
        disjoint = getattr(self.config, "overlap_policy", None) == "avoid" or bool(getattr(self.config, "disjoint", False))
        offloaded = Offload(self.ctx.device, self.ctx.train.offload_state).on
        return MaskPlan(self.config.density, disjoint, self.anchor_at_masks,
                        self.anchor_at_masks and offloaded and self.config.lambda_ > 0)

    # -- which parameters ---------------------------------------------------------
    def masked_parameters(self) -> dict[str, nn.Parameter]:
        """The weight matrices of the model's adaptable Linear/Conv layers (heads and embeddings excluded)."""
        if "masked" not in self._found:
            assert self.model is not None
            self._found["masked"] = {f"{name}.weight": m.weight for name, m in self.model.adaptable_layers().items()}
        return self._found["masked"]

    def footprint_parameters(self) -> dict[str, nn.Parameter]:
        return self.masked_parameters()

    def vector_parameters(self) -> dict[str, nn.Parameter]:
        assert self.model is not None
        heads = self.model.output_parameter_names()  # train_heads: the output layers, shared or not
        masked = self.masked_parameters()
        return {n: p for n, p in self.model.named_parameters()
                if p.requires_grad and n not in heads and n not in masked}

    def head_parameters(self) -> dict[str, nn.Parameter]:
        assert self.model is not None
        heads = self.model.output_parameter_names()  # train_heads: the output layers, shared or not
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad and n in heads}

    def _anchor_now(self) -> Anchor:
        """θ_ref ← θ: the weights themselves for the masked weights an anchor packs at its next masks, copies else."""
        masked = self.masked_parameters() if self.anchor_at_masks else {}
        copy = self.offload.copy
        return Anchor({n: None if n in masked else copy(p.detach()) for n, p in self.penalized().items()},
                      self.penalized, self.offload.read)

    def penalized(self) -> dict[str, nn.Parameter]:
        """Everything that can move: the penalty of Alg. 1 runs "over all parameters", and parameters
        that never move contribute zero. A shared head is penalised like any other shared weight.

        Both are found once per task and phase (a phase may freeze parameters, a step cannot): walking the
        model a dozen times a step was ~8 % of a quick expander-ewc cell's time."""
        if "penalized" not in self._found:
            out = dict(self.masked_parameters())
            if self.config.train_vectors:
                out.update(self.vector_parameters())
            if self.config.train_heads:
                out.update(self.head_parameters())
            self._found["penalized"] = out
        return self._found["penalized"]

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return list(self.penalized().values())

    def sparse_coordinates(self, phase: Phase) -> list[tuple[nn.Parameter, Tensor]]:
        params = self.masked_parameters()
        return [(params[n], m) for n, m in self.masks.items()]

    def train_phase(self, name: str = "train") -> Phase:
        c = self.config
        train = self.ctx.train
        optimizer = train.optimizer if c.optimizer == "train" else c.optimizer
        momentum = 0.0 if optimizer == "rmsprop" and c.optimizer != "train" else train.momentum
        return Phase.from_train(train, name, optimizer=optimizer, lr=c.lr or train.lr, momentum=momentum)

    def phases(self, task: str, index: int) -> list[Phase]:
        return [self.train_phase()]

    # -- masks ----------------------------------------------------------------------
    def set_masks(self, masks: Mapping[str, np.ndarray | Tensor], stats: dict[str, dict[str, Any]]) -> None:
        params = self.masked_parameters()
        self.masks = {
            n: (m if isinstance(m, Tensor) else torch.from_numpy(m)).to(params[n].device).reshape(params[n].shape)
            for n, m in masks.items()
        }
        self._pending_stats = stats

    def planning(self) -> bool:
        """Whether this is the memory plan's run on the meta device: a mask's values are then never read (the plan
        takes every selection whole and counts the masks at their density, :meth:`mask_plan`), so none is drawn
        (an 8B model's would be 7.5 G booleans drawn and checked on the host)."""
        return self.ctx.device.type == "meta"

    def unread_masks(self) -> dict[str, Tensor]:
        """Masks of the right shapes whose values nothing reads (:meth:`planning`)."""
        return {n: torch.empty(p.shape, dtype=torch.bool, device="meta") for n, p in self.masked_parameters().items()}

    def earlier(self, name: str) -> list[np.ndarray]:
        return [h[name] for h in self.history if name in h]

    # -- training hooks -----------------------------------------------------------------
    def before_task(self, task: str, index: int) -> None:
        self._found.clear()
        super().before_task(task, index)
        # 2 × (λ/2)(F + γ), formed when read, a parameter at a time (ewc.Weighted: no full copy beside F)
        self._doubled = Weighted(lambda: self.anchor.keys(), self._doubled_weight)

    def _doubled_weight(self, n: str) -> Tensor:
        c = self.config
        if n not in self.fisher:
            f = torch.full_like(self.penalized()[n].detach(), c.gamma)
        elif self.offload.on and self.anchor_at_masks and n in self.masks:
            # θ − θ_ref is exactly 0 off the mask (those coordinates do not move in the task, and the anchor reads
            # the weight there), so the penalty and its gradient are the same whatever the weight is there: F + γ at
            # the mask, γ elsewhere, from a device copy of F at the mask only
            f = torch.full_like(self.fisher[n], c.gamma, device=self.ctx.device)
            f[self.masks[n]] = self._fisher_at_mask(n) + c.gamma
        else:
            f = self.offload.read(self.fisher[n]) + c.gamma
        return 2 * (0.5 * c.lambda_ * f)

    def _fisher_at_mask(self, n: str) -> Tensor:
        """The Fisher of ``n`` at the current task's mask, on the device, copied from the host once per mask."""
        mask = self.masks[n]
        cached = self._at_mask.get(n)
        if cached is None or cached[0] is not mask:
            cached = self._at_mask[n] = (mask, self.offload.read(self.fisher[n])[mask])
        return cached[1]

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        self._found.clear()
        self._phase = phase
        # weight decay moves unmasked coordinates, which after_step puts back to the task's start every step: those
        # starting values on the device for the phase (they live on the host otherwise: Method.before_task)
        self._restore = ({n: self.task_start(n) for n in self.masked_parameters() if n in self._before}
                         if phase.weight_decay else {})

    def after_backward(self) -> None:
        if self.config.lambda_ != 0:  # the penalty's gradient first: the mask applies to it as to the loss's
            add_penalty_gradients(self._doubled, self.penalized(), self.anchor)
        for n, p in self.masked_parameters().items():
            if p.grad is not None and n in self.masks:
                p.grad.mul_(self.masks[n])

    def after_step(self) -> None:
        # Plain gradient masking keeps unmasked coordinates fixed unless weight decay moves them.
        if self._phase is None or self._phase.weight_decay == 0 or not self.masks:
            return
        with torch.no_grad():
            for n, p in self.masked_parameters().items():
                if n in self.masks:
                    p.copy_(torch.where(self.masks[n], p, self._restore[n]))

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        if self.config.lambda_ == 0:
            return {}
        # the value only: the gradient is formed and added in after_backward (as EWC's step)
        return {"ewc": penalty_value(self._doubled, self.penalized(), self.anchor)}

    def after_task(self, task: str, index: int) -> None:
        assert self.model is not None
        self._found.clear()
        self._at_mask.clear()  # (the task's device copies of F: F changes now, and the next masks are new)
        params = self.penalized()
        if self.config.lambda_ > 0:  # λ = 0 never reads F: skip the Fisher pass
            # offloaded, F_k is formed at the masks only (no whole float32 copy of the weights on the device)
            at = self.masks if self.offload.on else None
            fk = diagonal_fisher(self.model, self.ctx.data(task).train, task, params, self.config.fisher_samples,
                                 self.config.fisher_batch_size, self.ctx.device, self.ctx.generator(index, 9999), at)
            keep, read = self.offload.keep, self.offload.read
            for n in list(fk):
                f = fk.pop(n)
                if at is not None and n in at:  # F ← F + F_k at m_k (F_k packed there), F elsewhere
                    whole = read(self.fisher[n]) if n in self.fisher else torch.zeros_like(params[n], dtype=torch.float32)
                    whole[at[n]] += f
                    self.fisher[n] = keep(whole)
                    continue
                if n in self.masks:
                    f = f * self.masks[n]  # F_k restricted to the active coordinates m_k (Alg. 1 line 13)
                self.fisher[n] = keep(read(self.fisher[n]) + f if n in self.fisher else f)
        self.anchor = self._anchor_now()
        self.history.append({n: pack(m.cpu().numpy()) for n, m in self.masks.items() if not m.is_meta})
        self.stats.append({"task": task, "layers": self._pending_stats})

    def footprint(self, task: str, index: int) -> TaskFootprint:
        now = self.footprint_parameters()
        return {n: Masked.from_delta(self.ctx.trained_value(now[n]).cpu() - before, self.masks[n].cpu())
                for n, before in self._before.items() if n in self.masks}

    # -- reporting and resume ---------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        per_task = []
        for entry in self.stats:
            layers = entry["layers"]
            sig = [s["sigma2"] for s in layers.values() if s.get("sigma2") is not None]
            jac = [j for s in layers.values() for j in s.get("jaccard", [])]
            per_task.append({"task": entry["task"], "sigma2_max": max(sig) if sig else None,
                             "spectral_gap_min": 1 - max(sig) if sig else None,
                             "jaccard_max": max(jac) if jac else None, "layers": layers})
        return {"masks": per_task}

    def state_dict(self) -> dict[str, Any]:
        history = [{n: torch.from_numpy(m.copy()) for n, m in h.items()} for h in self.history]
        return {"fisher": dict(self.fisher), "anchor": self.anchor.stored(), "history": history, "stats": self.stats}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load = self.offload.load
        self.fisher = {n: load(t) for n, t in state.get("fisher", {}).items()}
        saved = state.get("anchor", {})  # (a masked weight's left out where the anchor packs: the weight itself)
        self.anchor = self._anchor_now()
        for n in self.anchor.entries:
            if n in saved:
                self.anchor.entries[n] = load(saved[n])
        self.history = [{n: t.numpy() for n, t in h.items()} for h in state.get("history", [])]
        self.stats = list(state.get("stats", []))


class ExpanderEWC(MaskedTraining):
    """Expander-EWC: per task and matrix, a fresh expander mask (Alg. 1 lines 3-9), then masked EWC."""

    config: ExpanderEWCConfig
    anchor_at_masks = True  # each task starts from θ_ref with masks drawn before it

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        if self.planning():
            self.set_masks(self.unread_masks(), {})
            if self.anchor_at_masks:
                self.anchor.pack(self.masks)
            return
        spec = self.config.mask_spec()
        masks, stats = {}, {}
        for i, (n, p) in enumerate(self.masked_parameters().items()):
            rng = np.random.default_rng(derive_seed(self.ctx.seed, index, i, 0x5EED))
            mask, st = make_mask(tuple(p.shape), spec, rng, self.earlier(n))
            masks[n], stats[n] = mask, st.as_dict()
        self.set_masks(masks, stats)
        if self.anchor_at_masks:
            self.anchor.pack(self.masks)
