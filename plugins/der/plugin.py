from __future__ import annotations

from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DERConfig, DERPPConfig
from .method import DER


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [
        MethodSpec("der", DER, DERConfig, "dark experience replay: logits of a reservoir buffer (Buzzega 2020)",
                   footprint_kind="dense", presets=tuned("der", {}), tune={"alpha": (0.03, 3.0)},
                   data_parallel=False),
        MethodSpec("derpp", DER, DERPPConfig, "DER++: replay of logits and labels (Buzzega 2020)",
                   footprint_kind="dense", presets=tuned("derpp", {}),
                   tune={"alpha": (0.03, 3.0), "beta": (0.05, 5.0)}, data_parallel=False),
    ]
