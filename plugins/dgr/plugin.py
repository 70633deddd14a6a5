from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DGRConfig
from .method import DGR

# paper-lps (LPS Table II's DGR column): the LPS paper gives no DGR setting; the defaults are Shin et al.'s loss with
# every task weighed equally, and a VAE generator (DGRConfig says why)


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("dgr", DGR, DGRConfig, "deep generative replay, a VAE generator (Shin 2017)",
                       footprint_kind="dense")]
