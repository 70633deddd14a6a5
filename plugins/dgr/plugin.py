from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DGRConfig
from .method import DGR

# paper-lps (LPS Table II's DGR column): the LPS paper gives no DGR setting; the defaults are Shin et al.'s loss with
# every task weighed equally, and a VAE generator (DGRConfig says why). Quick learning rates: `clbench tune`
# (plugins/_shared/tuned/quick.json, docs/tuning.md).


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("dgr", DGR, DGRConfig, "deep generative replay, a VAE generator (Shin 2017)",
                       footprint_kind="dense", presets=tuned("dgr", {}), data_parallel=False)]
