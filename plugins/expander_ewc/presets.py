"""Expander-EWC's and its ablations' quick presets (data: :func:`clbench._core.provenance.settings_only`)."""

# Quick profile (digits, MLP): RMSProp needs a far smaller step than the streams' SGD; each method's own lr and λ
# from `clbench tune` (plugins/_shared/tuned/quick.json, docs/tuning.md). Fisher on 64 examples keeps the cells
# short; split-digits-cil runs the stream's own epochs with a Fisher on every example.
QUICK = {"fisher_samples": 64, "train.epochs": 2}
QUICK_STREAMS = ("permuted-digits", "permuted-digits-til", "split-digits")
