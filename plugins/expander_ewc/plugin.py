"""Registers Expander-EWC and its two ablations; they share one class and differ only in settings."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import PAPER_PRESETS, DenseEWCConfig, ExpanderEWCConfig, ExpanderOnlyConfig, RandomMaskEWCConfig
from .method import ExpanderEWC

# Quick profile (digits, MLP): RMSProp needs a far smaller step than the streams' SGD lr 0.05; lr and λ
# from a small sweep on order 1, seed 0 (docs/expander-ewc.md). Fisher on 64 examples keeps the cells short.
_QUICK = {"lr": 1e-3, "fisher_samples": 64, "train.epochs": 2}
PRESETS = {
    "quick/permuted-digits": {**_QUICK, "lambda": 100.0},
    "quick/permuted-digits-til": {**_QUICK, "lambda": 100.0},
    "quick/split-digits": {**_QUICK, "lambda": 100.0},
    **PAPER_PRESETS,
}
_NO_EWC = {k: {kk: vv for kk, vv in v.items() if kk not in ("lambda", "fisher_samples")} for k, v in PRESETS.items()}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("expander-ewc", ExpanderEWC, ExpanderEWCConfig,
                   "expander-graph sparse masks per task + damped-Fisher EWC (Algorithm 1)",
                   footprint_kind="masked", presets=PRESETS),
        MethodSpec("random-mask-ewc", ExpanderEWC, RandomMaskEWCConfig,
                   "ablation: equally sparse uniform random masks + the same EWC",
                   footprint_kind="masked", presets=PRESETS, tags=frozenset({"ablation"})),
        MethodSpec("expander", ExpanderEWC, ExpanderOnlyConfig,
                   "ablation: expander masks without EWC (λ = 0)",
                   footprint_kind="masked", presets=_NO_EWC, tags=frozenset({"ablation"})),
        MethodSpec("dense-ewc", ExpanderEWC, DenseEWCConfig,
                   "ablation: Algorithm 1 without masks (every coordinate trains; same damped-Fisher EWC, RMSProp)",
                   footprint_kind="masked", presets=PRESETS, tags=frozenset({"ablation"})),
    ]
