from __future__ import annotations

from clbench_plugins._shared.lora.presets import BASELINE
from clbench_plugins._shared.table1_presets import FULL_FT, QUICK_FULL_FT
from clbench_plugins._shared.tuned import tuned

from clbench import hookimpl
from clbench.specs import MethodSpec

from .config import PerTaskConfig, PerTaskFTConfig, PerTaskMaskConfig, PerTaskRandomConfig
from .fullft import PerTaskFT
from .masked import PerTaskMasked
from .method import PerTask
from .presets import MASK_PRESETS

TASK_ID = frozenset({"task-incremental"})  # each task is evaluated with its own adapter or mask


@hookimpl
def clbench_add_methods() -> list[MethodSpec]:
    return [MethodSpec("pertaskft", PerTaskFT, PerTaskFTConfig,
                       "a separate fully fine-tuned model per task, each evaluated with its own weights (N-LoRA Table 1)",
                       footprint_kind="dense", tags=frozenset({"reference"}), scenarios=TASK_ID,
                       presets=tuned("pertaskft", {**FULL_FT, "quick/cl-quick": QUICK_FULL_FT})),
            MethodSpec("pertask", PerTask, PerTaskConfig, "a separate LoRA per task, each evaluated with its own adapter",
                       footprint_kind="lowrank", requires=frozenset({"lora"}), presets=BASELINE,
                       tags=frozenset({"reference"}), scenarios=TASK_ID),
            MethodSpec("pertask-expander", PerTaskMasked, PerTaskMaskConfig,
                       "each task from the base weights with its own expander mask, no EWC (Table 5's protocol)",
                       footprint_kind="masked", presets=tuned("pertask-expander", MASK_PRESETS),
                       tags=frozenset({"reference"}), scenarios=TASK_ID),
            MethodSpec("pertask-random", PerTaskMasked, PerTaskRandomConfig,
                       "each task from the base weights with its own uniform random mask, no EWC (Table 5's "
                       "Random Mask row)", footprint_kind="masked", presets=tuned("pertask-random", MASK_PRESETS),
                       tags=frozenset({"reference", "ablation"}), scenarios=TASK_ID)]
