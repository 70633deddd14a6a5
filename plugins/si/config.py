from dataclasses import dataclass

from clbench.config import bounded


@dataclass(frozen=True)
class SIConfig:
    """Synaptic Intelligence (Zenke, Poole & Ganguli, ICML 2017, "Continual Learning Through Synaptic Intelligence").

    Each weight's importance is the path integral of its gradient along the training trajectory (eq. 3, summed per
    step: ω_k += −g_k Δθ_k, g the gradient of the task loss alone), normalised at the end of task μ by its total
    change and a damping ξ (eq. 5: Ω_k += ω_k / ((Δ_k)² + ξ)), and penalised by the surrogate loss c·Σ Ω_k (θ_k − θ̃_k)²
    (eq. 4) around the weights θ̃ at the end of the previous task.
    """

    c: float = bounded(0.1, ge=0, help="§5: c = 0.1 on permuted MNIST (split MNIST 1.0)")
    xi: float = bounded(1e-3, gt=0, help="§5: the damping ξ = 1e-3 (Avalanche's SynapticIntelligence eps: 1e-7)")
