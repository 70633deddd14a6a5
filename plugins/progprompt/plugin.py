from __future__ import annotations

from clbench_plugins._shared.soft_prompt import SOFT_PROMPT
from clbench_plugins._shared.table1_presets import PROMPT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import ProgPromptConfig
from .method import ProgPrompt


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("progprompt", ProgPrompt, ProgPromptConfig,
                       "Progressive Prompts: a new soft prompt per task before the frozen earlier ones, the model "
                       "frozen; a task evaluated with its prompts (task identity)", footprint_kind="none",
                       requires=SOFT_PROMPT, scenarios=frozenset({"task-incremental"}),
                       presets=tuned("progprompt", PROMPT["progprompt"]))]
