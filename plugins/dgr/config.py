from dataclasses import dataclass
from typing import Literal

from clbench.config import bounded, setting


@dataclass(frozen=True)
class DGRConfig:
    """Deep Generative Replay (Shin, Lee, Kim & Kim, NeurIPS 2017, "Continual Learning with Deep Generative Replay").

    A scholar is a generator and a solver. While task t trains, the generator learns the mixture of the task's inputs
    and inputs sampled from the generator as it was after task t−1 (§3.1), and the solver minimises
    r·L(new) + (1 − r)·L(replay) (eq. 2), where the replayed inputs are the previous generator's samples labelled by
    the previous solver (§3.2). The generator is a variational autoencoder, not the paper's WGAN-GP: it trains stably
    at MNIST scale with one setting for every stream, as van de Ven & Tolias (2018) use for DGR on MNIST.
    """

    new_weight: float = bounded(0.0, ge=0, le=1, help="r of eq. 2; 0: 1/(tasks seen), every task weighed equally")
    targets: Literal["hard", "soft"] = setting("hard", help=(
        "hard: the previous solver's argmax (§3.2); soft: its outputs distilled at `temperature` (van de Ven & "
        "Tolias)"))
    temperature: float = bounded(2.0, gt=0, help="the soft targets' temperature (van de Ven & Tolias 2018: 2)")
    latent_dim: int = bounded(32, ge=1, help="the VAE's latent size")
    hidden: int = bounded(400, ge=1, help="the VAE's one hidden layer (encoder and decoder)")
    generator_lr: float = bounded(1e-3, gt=0, help="the generator's Adam step, in its own phase of as many epochs as the solver's")
    replay_batch_size: int = bounded(0, ge=0, help="0: the training batch size")
