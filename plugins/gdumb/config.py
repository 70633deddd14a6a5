from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class GDumbConfig:
    """GDumb (Prabhu, Torr & Dokania, ECCV 2020): a greedy class-balanced memory of the stream, and a model trained
    from scratch on that memory alone before every evaluation (§3: "a simple greedy sampler ... and a learner").
    Nothing is learnt from the stream directly."""

    memory_size: int = bounded(200, ge=1, help="k, the memory's examples; recorded")
    epochs: int = bounded(10, ge=1, help="the epochs of each retraining on the memory (the paper: until convergence)")
