"""LoRA adapters on a model's ``lora_targets``, shared by every LoRA-family method of a cell.

Why a small LoRA of our own rather than ``peft.inject_adapter_in_model``: the family needs, per task,
to fold the finished adapter into the frozen base weight *for good* and to start a fresh one on the
same layer. PEFT's ``merge()`` is reversible bookkeeping (a ``merged`` flag plus the adapter kept in
the module), permanent folding needs ``merge_and_unload`` which replaces the modules (names change to
``…base_layer``, the optimizer's parameters and the model's state-dict keys go with them), and
``add_adapter``/``delete_adapter`` per task renames the parameters every task, which breaks resuming
from a fixed model state dict. Here the adapter is two parameters registered on the target
``nn.Linear`` itself (``<target>.lora_A``, ``<target>.lora_B``, PEFT's layout and init) and a forward
hook adds ``scale · B(A(dropout(x)))``: the base module, its name and its class stay as the model
plugin built them, and the state-dict keys are the same before and after every task.

The :class:`Adapters` object lives in ``ctx.stash`` under :data:`ADAPTERS`, so ``olora+nlora`` act on
one set of adapters; every structural step (start a task, finish a task) is idempotent per task index,
so a composed method's parts may all call it.

Low-precision bases (bf16/fp16 weights, e.g. the LLaMA profiles): the adapters are created in fp32 (their
updates would round away in bf16, as PEFT's ``autocast_adapter_dtype`` also avoids) and computed in fp32 in
the hook, the base's forward stays in its dtype. A finished adapter's merge is computed in fp32 and rounded
once; its rounding error (the relative error of the realised update ‖round(W+ΔW)−W−ΔW‖/‖ΔW‖) is measured per
layer and recorded per task in the method's report. Where it exceeds :data:`MERGE_ERROR_LIMIT` the layer's
update is kept unmerged instead: frozen fp32 factors added in the hook (no dropout, as a merged W has none),
like the released O-LoRA/N-LoRA code, which never merges. fp32 bases merge as they always did.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from clbench.errors import ConfigError
from clbench.footprints import LowRank, TaskFootprint
from clbench.method import CellContext, StashKey
from clbench.model import CLModel

from .config import LoRAConfig

LOW_PRECISION = (torch.bfloat16, torch.float16)
# A merge into a low-precision W that loses more than this share of the update (relative Frobenius error of
# the realised ΔW) is not made: the layer keeps that task's factors unmerged. 1 %: the precision the fp32
# masters give training (docs/scale-out.md). On N(0, 0.02²) bf16 weights an update of rms 1e-3 loses ~3 %,
# 1e-4 ~30 %: LoRA updates of the papers' size stay unmerged, the extra forward is rank r per finished task.
MERGE_ERROR_LIMIT = 0.01


class LoRAHook:
    """The forward hook of one target: ``y ← y + scale · dropout(x) Aᵀ Bᵀ`` while enabled."""

    def __init__(self, layer: nn.Linear, scale: float, dropout: float) -> None:
        self.layer = layer
        self.scale = scale
        self.dropout = nn.Dropout(dropout)
        self.enabled = True
        self.frozen: tuple[Tensor, Tensor] | None = None  # finished tasks' unmerged (A, scale·B), stacked

    def __call__(self, module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor:
        if not self.enabled:
            return output
        x = inputs[0]
        self.dropout.train(module.training)
        A, B = module.lora_A, module.lora_B
        if self.frozen is None:
            return output + (self.dropout(x.to(A.dtype)) @ A.T @ B.T).to(output.dtype) * self.scale
        x = x.to(A.dtype)
        frozen_A, frozen_B = self.frozen
        return output + (x @ frozen_A.T @ frozen_B.T + self.dropout(x) @ A.T @ B.T * self.scale).to(output.dtype)


class Adapters:
    """One LoRA (A: r×in, B: out×r) on each target Linear, plus the finished tasks' factors."""

    def __init__(self, model: CLModel, config: LoRAConfig) -> None:
        self.config = config
        self.scale = config.scale
        self.layers = _targets(model)
        self.hooks: dict[str, LoRAHook] = {}
        for name, layer in self.layers.items():
            for p in layer.parameters():
                p.requires_grad_(False)
            w = layer.weight
            dtype = torch.float32 if w.dtype in LOW_PRECISION else w.dtype
            layer.register_parameter("lora_A", nn.Parameter(torch.zeros(config.rank, w.shape[1], dtype=dtype,
                                                                         device=w.device)))
            layer.register_parameter("lora_B", nn.Parameter(torch.zeros(w.shape[0], config.rank, dtype=dtype,
                                                                        device=w.device)))
            hook = LoRAHook(layer, self.scale, config.dropout)
            layer.register_forward_hook(hook)
            self.hooks[name] = hook
        self.history: list[dict[str, tuple[Tensor, Tensor]]] = []  # finished tasks' (A, B), on CPU
        self.started = -1  # index of the task whose adapter is live
        self._previous_A: dict[str, Tensor] | None = None
        self.merges: list[dict[str, Any]] = []  # per merge into a low-precision W: its error, layers kept unmerged
        self.unmerged: list[tuple[int, str]] = []  # (task index, layer) whose update stays as frozen factors

    # -- parameters ---------------------------------------------------------------
    def parameters(self) -> list[nn.Parameter]:
        return [p for layer in self.layers.values() for p in (layer.lora_A, layer.lora_B)]

    def current(self) -> dict[str, tuple[Tensor, Tensor]]:
        return {n: (layer.lora_A, layer.lora_B) for n, layer in self.layers.items()}

    @torch.no_grad()
    def reset(self) -> None:
        """A fresh adapter, PEFT's init: A Kaiming-uniform (a=√5), B zero (so ΔW starts at 0)."""
        for layer in self.layers.values():
            nn.init.kaiming_uniform_(layer.lora_A, a=math.sqrt(5))
            layer.lora_B.zero_()

    @torch.no_grad()
    def load(self, factors: dict[str, tuple[Tensor, Tensor]] | None) -> None:
        """Set the live adapter to ``factors`` (zeros where None: the bare base model)."""
        for n, layer in self.layers.items():
            if factors is None:
                layer.lora_A.zero_()
                layer.lora_B.zero_()
            else:
                A, B = factors[n]
                layer.lora_A.copy_(A)
                layer.lora_B.copy_(B)

    def snapshot(self) -> dict[str, tuple[Tensor, Tensor]]:
        return {n: (layer.lora_A.detach().cpu().clone(), layer.lora_B.detach().cpu().clone())
                for n, layer in self.layers.items()}

    # -- task steps (idempotent per index: composed methods' parts all call them) ----
    def start_task(self, index: int, fresh: bool = True) -> None:
        if self.started >= index:
            return
        self.started = index
        if fresh:
            self.reset()

    def finish_task(self, index: int, merge: bool) -> None:
        """Record task ``index``'s adapter; with ``merge``, fold it into W and zero the live one."""
        if len(self.history) > index:
            return
        self.history.append(self.snapshot())
        self._previous_A = None
        if merge:
            self.merge(index)

    @torch.no_grad()
    def merge(self, index: int) -> None:
        """W ← W + scale·B·A, then A = B = 0: the forward of every later task costs what task 1's did. Into a
        low-precision W: computed in fp32, rounded once, measured, and kept unmerged above the limit."""
        low = [n for n, layer in self.layers.items() if layer.weight.dtype in LOW_PRECISION]
        error = norm = 0.0
        for name, layer in self.layers.items():
            delta = (layer.lora_B.float() @ layer.lora_A.float()) * self.scale
            if name not in low:
                layer.weight.add_(delta.to(layer.weight.dtype))
            else:
                base = layer.weight.float()
                merged = (base + delta).to(layer.weight.dtype)
                lost = float(torch.linalg.vector_norm(merged.float() - base - delta))
                size = float(torch.linalg.vector_norm(delta))
                error, norm = error + lost**2, norm + size**2
                if lost <= MERGE_ERROR_LIMIT * size:
                    layer.weight.copy_(merged)
                else:
                    self.unmerged.append((index, name))
            layer.lora_A.zero_()
            layer.lora_B.zero_()
        if low:
            kept = sum(1 for i, _ in self.unmerged if i == index)
            self.merges.append({"task": index, "error": math.sqrt(error / norm) if norm > 0 else 0.0,
                                "unmerged_layers": kept, "layers": len(low)})
            self._freeze()

    def _freeze(self) -> None:
        """Each hook's frozen factors: the stacked (A, scale·B) of the updates kept unmerged on its layer."""
        for name, hook in self.hooks.items():
            tasks = [i for i, n in self.unmerged if n == name]
            if not tasks:
                hook.frozen = None
                continue
            A = hook.layer.lora_A
            hook.frozen = (torch.cat([self.history[i][name][0] for i in tasks]).to(A.device, A.dtype),
                           torch.cat([self.history[i][name][1] * self.scale for i in tasks], 1).to(A.device, A.dtype))

    def previous_A(self) -> dict[str, Tensor]:
        """The finished tasks' A stacked per layer (r_sum × in, on the adapter's device): O-LoRA's lora_A."""
        if self._previous_A is None:
            self._previous_A = {
                n: torch.cat([task[n][0] for task in self.history]).to(layer.lora_A.device, layer.lora_A.dtype)
                for n, layer in self.layers.items()
            } if self.history else {}
        return self._previous_A

    # -- footprints -------------------------------------------------------------------
    def footprint(self, index: int) -> TaskFootprint:
        return {f"{n}.weight": LowRank(A, B, self.scale) for n, (A, B) in self.history[index].items()}

    # -- evaluation -----------------------------------------------------------------
    @contextlib.contextmanager
    def using(self, factors: dict[str, tuple[Tensor, Tensor]] | None) -> Iterator[None]:
        """Evaluate with ``factors`` in place of the live adapter; the live one is restored after."""
        saved = self.snapshot()
        self.load(factors)
        try:
            yield
        finally:
            self.load(saved)

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The finished tasks' factors; the live adapter and merged W are in the model's state dict."""
        return {"started": self.started, "merges": self.merges, "unmerged": [list(u) for u in self.unmerged],
                "history": [{f"{n}|{part}": t for n, (A, B) in task.items() for part, t in (("A", A), ("B", B))}
                            for task in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.started = int(state.get("started", -1))
        self.history = []
        for task in state.get("history", []):
            factors: dict[str, tuple[Tensor, Tensor]] = {}
            for n in self.layers:
                factors[n] = (task[f"{n}|A"].cpu(), task[f"{n}|B"].cpu())
            self.history.append(factors)
        self._previous_A = None
        self.merges = list(state.get("merges", []))
        self.unmerged = [(int(i), str(n)) for i, n in state.get("unmerged", [])]
        self._freeze()


ADAPTERS: StashKey[Adapters] = StashKey()


def adapters_for(ctx: CellContext, model: CLModel, config: LoRAConfig) -> Adapters:
    """The cell's adapters: injected by the first LoRA method set up, found by the others."""
    existing = ctx.stash.get(ADAPTERS)
    if existing is not None:
        if existing.config != config:
            raise ConfigError(f"composed LoRA methods disagree on the adapter ({existing.config} vs {config}); "
                              "set the same rank/alpha/dropout for every part")
        return existing
    adapters = Adapters(model, config)
    ctx.stash[ADAPTERS] = adapters
    return adapters


def _targets(model: CLModel) -> dict[str, nn.Linear]:
    names = getattr(model, "lora_targets", None)
    if not names:
        raise ConfigError(f"model {type(model).__name__} has no `lora_targets`: the LoRA methods need a model "
                          "that provides 'lora' (a list of the q/v nn.Linear module names)")
    modules = dict(model.named_modules())
    out: dict[str, nn.Linear] = {}
    for name in names:
        layer = modules.get(name)
        if not isinstance(layer, nn.Linear):
            raise ConfigError(f"lora target {name!r} of {type(model).__name__} is not an nn.Linear "
                              f"(found {type(layer).__name__})")
        out[name] = layer
    return out
