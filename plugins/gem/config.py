from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class GEMConfig:
    """Gradient Episodic Memory (Lopez-Paz & Ranzato, NeurIPS 2017): an episodic memory of each finished task; a
    step whose gradient g would raise the loss of a past task (⟨g, g_k⟩ < 0 for its memory gradient g_k) is projected
    onto the closest gradient that raises none (eq. 10), found from the dual QP of eq. 11."""

    memory_per_task: int = bounded(256, ge=1, help="§6: 256 examples a task on MNIST (the code's --n_memories)")
    margin: float = bounded(0.5, ge=0, help="the code's memory_strength: the dual variables' lower bound (γ of §3)")
    ridge: float = bounded(1e-3, ge=0, help=(
        "added to the dual's Gram matrix M Mᵀ (the released code's project2cone2 eps = 1e-3, as Avalanche's GEMPlugin; "
        "the paper's eq. 11 has none): keeps the QP strictly convex when past tasks' gradients are nearly collinear"))


@dataclass(frozen=True)
class AGEMConfig:
    """A-GEM (Chaudhry et al., ICLR 2019, "Efficient Lifelong Learning with A-GEM"): one averaged constraint, against
    the gradient of a random batch of the whole episodic memory (eq. 11's projection, closed form)."""

    memory_per_task: int = bounded(256, ge=1, help=(
        "§5: a memory of 250 examples a task on permuted MNIST (ours: GEM's 256)"))
    sample_size: int = bounded(256, ge=1, help="the memory batch the reference gradient is computed on (§5: 256)")
