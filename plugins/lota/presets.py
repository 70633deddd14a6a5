"""LoTA's and LoTTO's quick presets (data: :func:`clbench._core.provenance.settings_only`)."""

# Quick profile: RMSProp as expander-ewc's quick preset, each method's own lr from `clbench tune`
# (plugins/_shared/tuned/quick.json, docs/tuning.md); 10 % masks (the default) leave room for LoTTO's five disjoint
# masks on every quick stream. LoTTO on split-digits-cil runs the stream's own epochs.
QUICK = {"train.epochs": 1, "calibration_epochs": 1}
LOTTO_QUICK_STREAMS = ("permuted-digits", "permuted-digits-til", "split-digits")
