from __future__ import annotations

from dataclasses import dataclass

from clbench.config import bounded, setting


@dataclass(frozen=True)
class CodaPromptConfig:
    """CODA-Prompt (Smith et al., CVPR 2023): in each of its blocks a pool of prompt components P_m with keys K_m and
    attention vectors A_m; an input's prefix is Σ_m α_m P_m with α_m = cos(q ⊙ A_m, K_m) (no softmax), q the frozen
    model's query. Each task adds pool_size / tasks components; earlier tasks' are frozen. A component of length L
    gives L/2 key and L/2 value vectors. Defaults: the released code (GT-RIPL/CODA-Prompt at 6417d4f: pool 100,
    length 8, blocks 0-4, new components Gram-Schmidt-orthogonalised to the earlier ones, ortho_mu 0); the paper's
    form adds the orthogonality penalty, ortho_mu=0.1 (the code's first release, 22948d2)."""

    pool_size: int = bounded(100, ge=1, help="components in all (a multiple of the stream's tasks)")
    length: int = bounded(8, ge=2, help="vectors of a component: half keys, half values (even)")
    blocks: tuple[int, ...] = setting((0, 1, 2, 3, 4), help="the blocks the prefixes enter")
    ortho_mu: float = bounded(0.0, ge=0, help=(
        "weight of Σ mean((TTᵀ − I)²) over K, A and P of the components so far (the paper's §4.3); 0: the released "
        "code's default"))
