from dataclasses import dataclass


@dataclass(frozen=True)
class SeqFTConfig:
    """Naive sequential fine-tuning: no settings beyond the training loop's (the lower bound)."""
