from __future__ import annotations

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ERACEConfig
from .method import ERACE


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("er-ace", ERACE, ERACEConfig, "experience replay, asymmetric cross-entropy (Caccia 2022)",
                       footprint_kind="dense")]
