"""LPS: warm-up, ADMM pruning with a learned binary sharing mask, masked retraining (Alg. of §IV-E).

Effective weights of task t (eq. 4): W^t + M^t ⊙ W̄^{t-1}. The layer's tensor holds W^t on free
entries and M ⊙ W̄^{t-1} on old ones while task t trains; M is a real-valued parameter of the method
whose gradient is ∂L/∂W_eff ⊙ W̄^{t-1} on old entries (set in ``after_backward``). ADMM adds
½ρ‖W − Z + U‖² and ½ρ‖M − Y + K‖² (Appendix A, eq. 13); Z/U and Y/K are updated after every
``admm_interval`` epochs (eq. 14). The final phase projects once more (top-α of the free entries,
top-β of M) and retrains only the kept entries.

Honest-protocol choices (the LPS code is neu-spiral/LPSforLifelong main.py/admm.py, summarised in
docs/reference-code.md §3.6; the comparison is in docs/lps-packnet.md): Z projects the free entries only (the
code's Z also sees the restored old weights); every task, the last included, is pruned and scored with its
own weights and share mask; no epoch is selected on the test set (none is selected at all).

The released code's optimizer handling is optional (``lr_milestones``: its MultiStepLR in the warm-up and
retrain phases; ``optimizer_across_stages``: one optimizer for all ρ stages), expressed with the phases'
``lr_milestones`` and ``optimizer_group`` (docs/reference-code.md §3.8).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from clbench_plugins._shared.partition import (
    PartitionMethod,
    keep_mask,
    pack,
    per_layer,
    share_projection,
    unpack,
)
from torch import Tensor, nn

from clbench.data import Batch
from clbench.method import Phase
from clbench.model import CLModel

from .config import LPSConfig


class LPS(PartitionMethod):
    setting = "lps"
    config: LPSConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        # ranges were checked when the config was built (LPSConfig.__post_init__); here: one β per layer
        self.beta: dict[str, float] = per_layer(self.config.beta, list(self.layers), "lps.beta")
        self.shares: dict[int, dict[str, Tensor]] = {}  # task index -> layer -> bool share mask
        self.learned: list[float] = []  # per task ≥ 2: share of old entries with M ≥ 0.5 before projection
        self._reset_admm()

    def _reset_admm(self) -> None:
        self.M: dict[str, nn.Parameter] = {}
        self.w_old: dict[str, Tensor] = {}
        self.old_f: dict[str, Tensor] = {}  # old entries as floats (the penalty's weight on M)
        self.Z: dict[str, Tensor] = {}
        self.U: dict[str, Tensor] = {}
        self.Y: dict[str, Tensor] = {}
        self.K: dict[str, Tensor] = {}
        self.rho = 0.0
        self.admm = False

    # -- phases -----------------------------------------------------------------------
    def phases(self, task: str, index: int) -> list[Phase]:
        """Warm-up and retrain with ``lr_milestones`` (main.py l.554/l.564–571, l.310–331: a new optimizer and
        MultiStepLR per phase; the code steps it per batch, so it decays one batch before clbench's per-epoch
        step); the ρ stages of ADMM at a constant rate (admm.py l.757 at --admm-epochs 1), in one optimizer
        group with ``optimizer_across_stages`` (main.py l.217–222, built before the ρ loop of l.271)."""
        c = self.config
        decay = {"lr_milestones": c.lr_milestones, "lr_gamma": c.lr_gamma}
        out = [replace(self.base_phase("warmup", c.warmup_epochs), **decay)] if c.warmup_epochs else []
        if c.admm_epochs:
            per, extra = divmod(c.admm_epochs, c.rho_stages)
            group = "admm" if c.optimizer_across_stages else ""
            out += [replace(self.base_phase(f"admm{i + 1}", per + (1 if i < extra else 0)), optimizer_group=group)
                    for i in range(c.rho_stages)]
        return out + [replace(self.base_phase("retrain", c.retrain_epochs), **decay)]

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        params = super().parameters(model, phase)
        return params + list(self.M.values()) if phase.name.startswith("admm") else params

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self._reset_admm()
        if index > 0:
            dev = self.ctx.device
            for n, p in self.layers.items():
                self.old_f[n] = self.old(n).to(p.dtype)
                self.w_old[n] = p.detach() * self.old_f[n]
                self.M[n] = nn.Parameter(torch.ones(p.shape, device=dev))

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        if phase.name.startswith("admm"):
            self._start_admm(int(phase.name[4:]) - 1, index)
        elif phase.name == "retrain":
            self._final_projection(index)

    def _start_admm(self, stage: int, index: int) -> None:
        """A ρ stage starts afresh (main.py re-creates its ADMM object): Z = Π(W), U = 0, Y = Π(M), K = 0."""
        self.admm = True
        self.rho = self.config.rho * 10**stage
        for n, p in self.layers.items():
            w = p.detach() * self.free(n)
            self.Z[n] = self._project(n, w, index)
            self.U[n] = torch.zeros_like(w)
            if n in self.M:
                self.Y[n] = share_projection(self.M[n], self.old(n), self.beta[n]).float()
                self.K[n] = torch.zeros_like(w)

    def _project(self, name: str, w: Tensor, index: int) -> Tensor:
        return w * keep_mask(w, self.free(name), self.count(name, index), self.kind[name])

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        if not self.admm:
            return {}
        half = 0.5 * self.rho
        terms = {"admm_w": half * sum(((p * self.trainable[n] - self.Z[n] + self.U[n]) ** 2).sum()
                                      for n, p in self.layers.items())}
        if self.M:
            terms["admm_m"] = half * sum((((m - self.Y[n] + self.K[n]) * self.old_f[n]) ** 2).sum()
                                         for n, m in self.M.items())
        return terms

    def after_backward(self) -> None:
        if self.admm and self.M:  # ∂L/∂M = ∂L/∂W_eff ⊙ W̄^{t-1}, on old entries only
            for n, m in self.M.items():
                g = self.layers[n].grad
                if g is not None:
                    share_grad = g * self.w_old[n] * self.config.mask_lr_scale
                    m.grad = share_grad if m.grad is None else m.grad + share_grad
        super().after_backward()

    def after_step(self) -> None:
        if self.admm and self.M:  # old entries of the layer follow M ⊙ W̄^{t-1}
            with torch.no_grad():
                for n, p in self.layers.items():
                    p.copy_(torch.where(self.old(n), self.M[n] * self.w_old[n], p))

    def after_epoch(self, phase: Phase, epoch: int) -> None:
        if not self.admm or (epoch + 1) % self.config.admm_interval:
            return
        self.admm_update()

    def admm_update(self) -> None:
        """Eq. (14): Z ← Π_S(W + U), U ← U + W − Z; Y ← Π_S'(M + K), K ← K + M − Y.

        With V = W + U the updates are Z = V ⊙ keep and U = V − Z = V ⊙ ¬keep: one selection and two
        masked writes per layer, no sort (see benchmarks/bench_lps_admm.py for its cost).
        """
        with torch.no_grad():
            for n, p in self.layers.items():  # self.trainable[n] is the free mask (as floats) in ADMM phases
                v = self.U[n].add_(p.detach() * self.trainable[n])  # V = W + U, in U's storage
                keep = keep_mask(v, self.free(n), self.count(n, self.index), self.kind[n])
                self.Z[n] = v * keep
                self.U[n] = v.sub_(self.Z[n])
                if n in self.M:
                    v = self.K[n].add_(self.M[n].detach())  # M + K
                    y = share_projection(v, self.old(n), self.beta[n])
                    self.Y[n] = y.float()
                    self.K[n] = v.sub_(self.Y[n])

    def _final_projection(self, index: int) -> None:
        """Hard-prune W to its top-α free entries, binarise M to its top-β; retrain the kept entries."""
        self.admm = False
        share: dict[str, Tensor] = {}
        with torch.no_grad():
            for n, p in self.layers.items():
                self.kept[n] = keep_mask(p, self.free(n), self.count(n, index), self.kind[n])
                p.masked_fill_(self.free(n) & ~self.kept[n], 0.0)
                if n in self.M:
                    share[n] = share_projection(self.M[n], self.old(n), self.beta[n])
                    p.copy_(torch.where(self.old(n), share[n] * self.w_old[n], p))
        if share:
            old = sum(int(self.old(n).sum()) for n in share)
            self.learned.append(sum(int((self.M[n].detach()[self.old(n)] >= 0.5).sum()) for n in share) / max(old, 1))
            self.shares[index] = share
        self.M = {}
        self.set_trainable(self.kept)

    def after_task(self, task: str, index: int) -> None:
        with torch.no_grad():
            for n, p in self.layers.items():  # frozen old weights come back whole
                if n in self.w_old:
                    p.copy_(torch.where(self.old(n), self.w_old[n], p))
        self._reset_admm()
        super().after_task(task, index)

    # -- evaluation and reporting --------------------------------------------------------
    def eval_mask(self, name: str, index: int) -> Tensor:
        own = self.owner[name] == index + 1
        return own | self.shares[index][name] if index in self.shares else own

    def report(self) -> dict[str, Any]:
        out = super().report()
        ratios = [sum(int(s.sum()) for s in share.values()) /
                  max(sum(int((self.owner[n].gt(0) & self.owner[n].lt(t + 1)).sum()) for n in share), 1)
                  for t, share in sorted(self.shares.items())]
        out.update(share_ratio=sum(ratios) / len(ratios) if ratios else None, share_ratio_per_task=ratios,
                   share_learned=sum(self.learned) / len(self.learned) if self.learned else None)
        return out

    def mask_bytes_per_task(self) -> float:
        bits = sum(pack(s).numel() for share in self.shares.values() for s in share.values())
        return super().mask_bytes_per_task() + bits / max(self.index + 1, 1)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["shares"] = {str(t): {n: pack(s) for n, s in share.items()} for t, share in self.shares.items()}
        state["learned"] = list(self.learned)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        dev = self.ctx.device
        self.shares = {int(t): {n: unpack(b, self.layers[n].shape).to(dev) for n, b in share.items()}
                       for t, share in state.get("shares", {}).items()}
        self.learned = [float(v) for v in state.get("learned", [])]
