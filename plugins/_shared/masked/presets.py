"""Settings shared by the masked-training methods (Expander-EWC, its ablations, LoTA/LoTTO, the per-task masks):
data only, so editing them changes which cells a profile makes, not the code digest of the cells made before."""

from __future__ import annotations

# What `clbench tune` searches (MethodSpec.tune): the methods' own RMSProp step, and EWC's λ where it applies.
OWN_LR: dict[str, tuple[float, float]] = {"lr": (1e-4, 1e-2)}
EWC_TUNE: dict[str, tuple[float, float]] = {**OWN_LR, "lambda": (1.0, 1e4)}

# paper-expander presets shared by expander-ewc, its ablations and LoTA/LoTTO: §6 "expander mask with 10%
# sparsity" on Llama-3-8B (also "applied for LoTA"); §6.2 "99% sparsity" on RoBERTa-base.
PAPER_PRESETS: dict[str, dict[str, float]] = {"paper-expander/capability-chain": {"density": 0.1},
                                              "paper-expander/glue-sparse": {"density": 0.01}}
