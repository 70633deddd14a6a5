"""Registers Expander-EWC and its two ablations; they share one class and differ only in settings."""

from __future__ import annotations

from clbench_plugins._shared.masked.config import (
    PAPER_PRESETS,
    DenseEWCConfig,
    ExpanderEWCConfig,
    ExpanderOnlyConfig,
    RandomMaskEWCConfig,
)
from clbench_plugins._shared.masked.method import ExpanderEWC

from clbench import hookimpl
from clbench.specs import MethodSpec

# Quick profile (digits, MLP): RMSProp needs a far smaller step than the streams' SGD; each method's own lr and λ
# on each stream from the validation protocol of scripts/tune_quick.py (docs/tuning.md). Fisher on 64 examples keeps
# the cells short.
_QUICK = {"fisher_samples": 64, "train.epochs": 2}
_STREAMS = ("permuted-digits", "permuted-digits-til", "split-digits")
# method -> (lr, λ) on each of _STREAMS
_TUNED = {"expander-ewc": ((1e-3, 10.0), (2e-3, 10.0), (1e-3, 10.0)),
          "random-mask-ewc": ((1e-3, 10.0), (2e-3, 10.0), (5e-4, 10.0)),
          "dense-ewc": ((2e-3, 10.0), (2e-3, 10.0), (5e-4, 100.0)),
          "expander": ((1e-3, None), (1e-3, None), (2e-3, None))}
# split-digits-cil (5 tasks): tuned with the stream's own epochs and a Fisher on every example, and run so
_CIL = {"expander-ewc": (1e-3, 1000.0), "random-mask-ewc": (5e-4, 10.0), "dense-ewc": (2e-3, 10.0),
        "expander": (1e-3, None)}


def presets(method: str) -> dict[str, dict[str, object]]:
    """The method's presets: its tuned quick ones, then the paper profiles' (``expander``: without EWC's keys)."""
    drop = ("lambda", "fisher_samples") if method == "expander" else ()
    quick = {f"quick/{stream}": {**_QUICK, "lr": lr, "lambda": lam}
             for stream, (lr, lam) in zip(_STREAMS, _TUNED[method], strict=True)}
    quick["quick/split-digits-cil"] = {"lr": _CIL[method][0], "lambda": _CIL[method][1]}
    return {k: {kk: vv for kk, vv in v.items() if kk not in drop} for k, v in {**quick, **PAPER_PRESETS}.items()}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("expander-ewc", ExpanderEWC, ExpanderEWCConfig,
                   "expander-graph sparse masks per task + damped-Fisher EWC (Algorithm 1)",
                   footprint_kind="masked", presets=presets("expander-ewc")),
        MethodSpec("random-mask-ewc", ExpanderEWC, RandomMaskEWCConfig,
                   "ablation: equally sparse uniform random masks + the same EWC",
                   footprint_kind="masked", presets=presets("random-mask-ewc"), tags=frozenset({"ablation"})),
        MethodSpec("expander", ExpanderEWC, ExpanderOnlyConfig,
                   "ablation: expander masks without EWC (λ = 0)",
                   footprint_kind="masked", presets=presets("expander"), tags=frozenset({"ablation"})),
        MethodSpec("dense-ewc", ExpanderEWC, DenseEWCConfig,
                   "ablation: Algorithm 1 without masks (every coordinate trains; same damped-Fisher EWC, RMSProp)",
                   footprint_kind="masked", presets=presets("dense-ewc"), tags=frozenset({"ablation"})),
    ]
