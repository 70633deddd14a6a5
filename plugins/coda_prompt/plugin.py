from __future__ import annotations

from clbench_plugins._shared.soft_prompt import PREFIX

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import CodaPromptConfig
from .method import CodaPrompt


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("coda-prompt", CodaPrompt, CodaPromptConfig,
                       "CODA-Prompt: prompt components weighed by each input's query, as attention prefixes of a "
                       "frozen ViT; each task adds components and freezes the earlier ones (task-agnostic)",
                       footprint_kind="none", requires=PREFIX)]
