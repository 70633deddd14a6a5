"""The harness core, no processes: the registry, the plan, result files, the checks at the plugin boundary, the
optimizer and fp32 masters, method composition and provenance. Imports the contract (``clbench.*``) only."""
