from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DGRConfig
from .method import DGR

# paper-lps (LPS Table II's DGR column): the LPS paper gives no DGR setting; the defaults are Shin et al.'s loss with
# every task weighed equally, and a VAE generator (DGRConfig says why). Quick learning rates: chosen by the
# validation protocol of scripts/tune_quick.py (docs/tuning.md).
QUICK_PRESETS = {"quick/permuted-digits": {"train.lr": 0.025}, "quick/permuted-digits-til": {"train.lr": 0.05},
                 "quick/split-digits": {"train.lr": 0.05}, "quick/split-digits-cil": {"train.lr": 0.05}}


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("dgr", DGR, DGRConfig, "deep generative replay, a VAE generator (Shin 2017)",
                       footprint_kind="dense", presets=QUICK_PRESETS)]
