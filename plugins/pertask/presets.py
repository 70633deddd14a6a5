"""The per-task mask rows' presets (data: :func:`clbench._core.provenance.settings_only`)."""

from clbench_plugins._shared.masked.presets import PAPER_PRESETS

# Table 5 (§6.2): 99 % sparsity on GLUE, also on the offline GLUE-style tasks of the CL benchmark; on the quick
# digits streams the lr of `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md).
MASK_PRESETS = {**PAPER_PRESETS, "paper-expander/glue-cl": PAPER_PRESETS["paper-expander/glue-sparse"]}
