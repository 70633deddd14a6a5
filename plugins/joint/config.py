from dataclasses import dataclass


@dataclass(frozen=True)
class JointConfig:
    """Multi-task upper bound: no settings beyond the training loop's."""
