"""GPUs a plan can be made for (``clbench run --dry-run --card NAME``): their memory and dense peak rates.

A card's time for a cell is a lower bound: the cell's planned floating-point operations (:mod:`clbench._exec.compute`)
at the card's dense peak rate in the precision its steps run in: bfloat16 under ``train.autocast=bfloat16``, else
TF32, the fastest path float32 weights have (PyTorch runs convolutions in TF32 by default on these cards; matrix
products only with ``torch.backends.cuda.matmul.allow_tf32``). No run is faster; a real one reaches a fraction of
it (its model FLOP utilisation), which only a measurement on the card tells (benchmarks/gpu_lease.sh).

The rates are NVIDIA's published dense (not 2:4-sparse) tensor-core peaks of the SXM parts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clbench.errors import ConfigError, did_you_mean

GIB = 1024**3
TERA = 1e12


@dataclass(frozen=True)
class Card:
    name: str
    description: str
    memory: int  # bytes
    tf32: float  # dense peak, FLOP/s
    bf16: float

    def rate(self, autocast: str | None) -> tuple[float, str]:
        """The dense peak rate of a step in ``autocast`` (``train.autocast``) and the precision's name."""
        return (self.bf16, "bf16") if autocast == "bfloat16" else (self.tf32, "TF32")

    def seconds(self, flops: float, autocast: str | None) -> float:
        """``flops`` at this card's dense peak in the step's precision: a lower bound on their time."""
        return flops / self.rate(autocast)[0]


CARDS = {
    c.name: c
    for c in (
        Card("a100-80gb", "NVIDIA A100 SXM 80 GB", 80 * GIB, 156 * TERA, 312 * TERA),
        Card("h100-80gb", "NVIDIA H100 SXM 80 GB", 80 * GIB, 494.7 * TERA, 989.4 * TERA),
        Card("h200", "NVIDIA H200 SXM 141 GB", 141 * GIB, 494.7 * TERA, 989.4 * TERA),
    )
}


def card(name: str) -> Card:
    """The card named ``name`` (case-insensitive), or a ConfigError listing the known ones."""
    found = CARDS.get(name.strip().lower())
    if found is None:
        close = did_you_mean(name.strip().lower(), CARDS)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise ConfigError(f"--card {name!r}: not a card clbench plans for{hint}; known: {', '.join(CARDS)}")
    return found


def fmt_seconds(seconds: float) -> str:
    """``3.2 h``, ``41 min``, ``12 s``."""
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.2f} s"


def total_seconds(card: Card, cells: Iterable[tuple[float, str | None]]) -> float:
    """The lower bound of ``(flops, autocast)`` cells run one after another on one ``card``."""
    return sum(card.seconds(flops, autocast) for flops, autocast in cells)
