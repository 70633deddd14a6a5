from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DERConfig, DERPPConfig
from .method import DER


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("der", DER, DERConfig, "dark experience replay: logits of a reservoir buffer (Buzzega 2020)",
                   footprint_kind="dense"),
        MethodSpec("derpp", DER, DERPPConfig, "DER++: replay of logits and labels (Buzzega 2020)",
                   footprint_kind="dense"),
    ]
