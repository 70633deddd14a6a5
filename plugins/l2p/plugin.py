from __future__ import annotations

from clbench_plugins._shared.soft_prompt import SOFT_PROMPT
from clbench_plugins._shared.table1_presets import PROMPT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import L2PConfig
from .method import L2P


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("l2p", L2P, L2PConfig,
                       "Learning to Prompt: a pool of prompts with learnable keys, chosen per input by the frozen "
                       "model's query (task-agnostic)", footprint_kind="none", requires=SOFT_PROMPT,
                       presets=tuned("l2p", PROMPT["l2p"]))]
