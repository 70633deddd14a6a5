"""LoTA / LoTTO on the masked-training machinery of Expander-EWC (no code of its own for masking).

Per task: phase ``calibrate`` trains densely (no mask); at the start of phase ``train`` the mask is
the top-``density`` fraction of |task vector| per matrix (LoTTO: among coordinates no earlier task
used), the weights are reset to where the task started, and only the mask trains.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from clbench_plugins._shared.masked.masks import describe
from clbench_plugins._shared.masked.method import MaskedTraining

from clbench.errors import ConfigError
from clbench.method import MaskPlan, Phase
from clbench.model import CLModel

from .config import LoTAConfig


def top_fraction_mask(score: torch.Tensor, density: float, excluded: torch.Tensor | None = None) -> torch.Tensor:
    """Bool mask of the round(density·numel) largest scores, never choosing an ``excluded`` entry."""
    k = int(round(density * score.numel()))
    flat = score.detach().abs().reshape(-1).float().clone()
    if excluded is not None:
        free = int((~excluded).sum())
        if free < k:
            raise ConfigError(f"LoTTO: only {free} free coordinates left for a mask of {k}; lower lotto.density")
        flat[excluded.reshape(-1)] = -1.0
    mask = torch.zeros(flat.numel(), dtype=torch.bool, device=flat.device)
    mask[torch.topk(flat, k).indices] = True
    return mask.reshape(score.shape)


class LoTA(MaskedTraining):
    config: LoTAConfig

    def setup(self, model: CLModel) -> None:
        super().setup(model)
        if self.config.disjoint and self.config.density * len(self.ctx.order) > 1.0 + 1e-9:
            raise ConfigError(f"lotto.density={self.config.density} × {len(self.ctx.order)} tasks exceeds 1: "
                              "disjoint masks cannot all fit; lower lotto.density")

    def mask_plan(self) -> MaskPlan:
        """The masked methods' plan, after a dense calibration phase (whole masters of low-precision weights)."""
        return replace(super().mask_plan(), dense_first=True)

    def phases(self, task: str, index: int) -> list[Phase]:
        train = self.train_phase()
        return [replace(train, name="calibrate", epochs=self.config.calibration_epochs), train]

    def before_task(self, task: str, index: int) -> None:
        super().before_task(task, index)
        self._start = {n: self.offload.copy(p.detach()) for n, p in self.penalized().items()}  # (read at the reset)
        self.masks = {}

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        super().before_phase(phase, task, index)
        if phase.name != "train":
            self.masks = {}  # calibration is dense
            return
        # (planning: the selections the plan takes whole, no host copies, no statistics)
        masks: dict[str, np.ndarray | torch.Tensor] = dict(self.unread_masks()) if self.planning() else {}
        stats: dict[str, dict[str, Any]] = {}
        for n, p in self.masked_parameters().items():
            if n in masks:
                continue
            excluded = self.used(n, p) if self.config.disjoint else None
            mask = top_fraction_mask(self.ctx.trained_value(p) - self.task_start(n), self.config.density,
                                     excluded).cpu().numpy()
            masks[n] = mask
            stats[n] = describe(mask.reshape(mask.shape[0], -1), self.earlier(n),
                                spectral=mask.size <= 4_000_000).as_dict()
        if self.config.reset:
            with torch.no_grad():
                for n, p in self.penalized().items():
                    p.copy_(self.offload.read(self._start[n]))
        self.set_masks(masks, stats)

    def used(self, name: str, p: torch.Tensor) -> torch.Tensor:
        """Union of earlier tasks' masks of ``name`` (bool, shape of ``p``)."""
        out = np.zeros(p.numel(), dtype=bool)
        for packed in self.earlier(name):
            out |= np.unpackbits(packed)[: p.numel()].astype(bool)
        return torch.from_numpy(out).to(p.device).reshape(p.shape)
