from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class ICaRLConfig:
    """iCaRL (Rebuffi, Kolesnikov, Sperl & Lampert, CVPR 2017): a memory of K exemplars split evenly over the classes
    seen, chosen by herding (Algorithm 4) in the normalised feature space; training on the new data and the exemplars
    with sigmoid binary cross-entropy whose targets for the old classes are the previous model's outputs (Algorithm 3,
    the distillation); classification by the nearest mean of exemplars (Algorithm 1)."""

    memory_size: int = bounded(200, ge=1, help="K; recorded")
