from __future__ import annotations

from clbench_plugins._shared.soft_prompt import PREFIX

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import DualPromptConfig
from .method import DualPrompt


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("dualprompt", DualPrompt, DualPromptConfig,
                       "DualPrompt: a shared G-prompt and per-task E-prompts as attention prefixes of a frozen ViT, "
                       "the E-prompt chosen by its key at test (task-agnostic)", footprint_kind="none",
                       requires=PREFIX)]
