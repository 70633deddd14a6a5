"""Execution: the training loop, the per-cell runner, the one worker bootstrap, data-parallel ranks, executors and
the core plugins (local executor, quick profile). Imports the contract and ``clbench._core``."""
