"""Registers Expander-EWC and its two ablations; they share one class and differ only in settings."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DenseEWCConfig, ExpanderEWCConfig, ExpanderOnlyConfig, RandomMaskEWCConfig
from .method import ExpanderEWC

# Quick profile (digits, MLP): RMSProp needs a far smaller step than the streams' SGD lr 0.05; lr and λ
# from a small sweep on order 1, seed 0 (docs/expander-ewc.md). Fisher on 64 examples keeps the cells short.
_QUICK = {"lr": 1e-3, "fisher_samples": 64, "train.epochs": 2}
QUICK_PRESETS = {
    "quick/permuted-digits": {**_QUICK, "lambda": 100.0},
    "quick/split-digits": {**_QUICK, "lambda": 100.0},
}
# paper-expander: §6 "expander mask with 10% sparsity" on Llama-3-8B; §6.2 "99% sparsity" on RoBERTa-base.
PAPER_PRESETS = {"paper-expander/capability-chain": {"density": 0.1},
                 "paper-expander/glue-sparse": {"density": 0.01}}
QUICK_PRESETS.update(PAPER_PRESETS)
_NO_EWC = {k: {kk: vv for kk, vv in v.items() if kk not in ("lambda", "fisher_samples")} for k, v in QUICK_PRESETS.items()}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("expander-ewc", ExpanderEWC, ExpanderEWCConfig,
                   "expander-graph sparse masks per task + damped-Fisher EWC (Algorithm 1)",
                   footprint_kind="masked", presets=QUICK_PRESETS),
        MethodSpec("random-mask-ewc", ExpanderEWC, RandomMaskEWCConfig,
                   "ablation: equally sparse uniform random masks + the same EWC",
                   footprint_kind="masked", presets=QUICK_PRESETS, tags=frozenset({"ablation"})),
        MethodSpec("expander", ExpanderEWC, ExpanderOnlyConfig,
                   "ablation: expander masks without EWC (λ = 0)",
                   footprint_kind="masked", presets=_NO_EWC, tags=frozenset({"ablation"})),
        MethodSpec("dense-ewc", ExpanderEWC, DenseEWCConfig,
                   "ablation: Algorithm 1 without masks (every coordinate trains; same damped-Fisher EWC, RMSProp)",
                   footprint_kind="masked", presets=QUICK_PRESETS, tags=frozenset({"ablation"})),
    ]
