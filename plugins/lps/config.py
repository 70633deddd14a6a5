from __future__ import annotations

from dataclasses import dataclass

from clbench_plugins._shared.partition import check_partition, check_shares

from clbench.config import bounded, setting
from clbench.errors import ConfigError


@dataclass(frozen=True)
class LPSConfig:
    """Learn-Prune-Share (Wang, Jian, Chowdhury, Wang, Dy, Ioannidis; ICDM 2020 / arXiv 2012.06956).

    ``alpha``: share of each pruned layer a task keeps (constraint 6/7, α_l^t as "% total layer
    params"); ``beta``: share of the earlier tasks' entries the task's binary mask reuses (constraint 8,
    β_l^t as "% total W̄_l^{t-1} params"). Each is one value or one per pruned layer, as in the paper.
    Ranges are checked when the config is built (plan time, before any cell runs); capacity and
    projection-vs-layer checks need the model and run in ``setup``, before training.
    """

    alpha: tuple[float, ...] = setting((0.1,), help="Table I, permuted MNIST: α = 10% (split CIFAR n≠1: 10%)")
    alpha_first: float = bounded(0.0, ge=0, le=1, help="task 1's α when > 0; Table I split CIFAR: 50% for n = 1")
    beta: tuple[float, ...] = setting((0.9,), help="Table I, permuted MNIST: β = 90% (split CIFAR: 92%)")
    projection: tuple[str, ...] = setting(("irregular",), help="Table I: irregular on MNIST and CIFAR (column on RF)")
    rho: float = bounded(1e-3, gt=0, help=(
        '§V-A: "We set all ρ_i = 10^-3 and increase by a factor of 10 at equal intervals"'))
    rho_stages: int = bounded(3, ge=1, help=(
        "no count in the paper; run_cifar.sh --rho-num 3 (docs/reference-code.md §3.7)"))
    warmup_epochs: int = bounded(30, ge=0, help="Table I, permuted MNIST: warm-up/ADMM/final = 30/90/30")
    admm_epochs: int = bounded(90, ge=0, help="Table I (split across the ρ stages)")
    retrain_epochs: int = bounded(30, ge=0, help="Table I")
    admm_interval: int = bounded(1, ge=1, help=(
        "epochs between Z/U and Y/K updates; main.py argparse default --admm-epochs 1"))
    mask_lr_scale: float = bounded(1.0, gt=0, help=(
        "the mask M shares the phase optimiser (main.py: one optimiser for W and M)"))
    lr_milestones: tuple[int, ...] = setting((), help=(
        "Learning-rate schedule of the warm-up and retrain phases: lr × lr_gamma after each listed epoch of the "
        "phase (counted from 1 in each phase; a milestone ≥ the phase's epoch count never fires). The paper only "
        "says it \"initialize[s] the learning rate to 0.001\" (§V-A), so the default is a constant rate; the "
        "released code's MultiStepLR is (65, 100, 130, 190, 220, 250, 280) × 0.5 (main.py l.564–571 warm-up, "
        "l.323–331 retrain; docs/reference-code.md §3.8) and is the paper-lps preset's. The ADMM phase never gets "
        "it: there the code sets the rate per epoch (admm.py l.757, constant at --admm-epochs 1)."))
    lr_gamma: float = bounded(0.5, gt=0, le=1, help="main.py l.571, l.331: gamma=0.5")
    optimizer_across_stages: bool = setting(False, help=(
        "True: one optimizer for all ρ stages of a task's ADMM phase, its state (Adam's moments and step count) "
        "carried from stage to stage, as main.py l.217–222 builds it once before the ρ loop (l.271). False: a fresh "
        "optimizer per stage (clbench's phases; the paper says nothing)."))

    def __post_init__(self) -> None:
        check_partition("lps", self.alpha, self.alpha_first, self.projection,
                        {"warmup_epochs": self.warmup_epochs, "admm_epochs": self.admm_epochs,
                         "retrain_epochs": self.retrain_epochs})
        check_shares("lps", "beta", self.beta)
        for key in ("rho_stages", "admm_interval"):
            if getattr(self, key) < 1:
                raise ConfigError(f"lps.{key}={getattr(self, key)} must be ≥ 1")
        if self.admm_epochs and self.admm_epochs < self.rho_stages:
            raise ConfigError(f"lps.admm_epochs={self.admm_epochs} is fewer than lps.rho_stages={self.rho_stages}: "
                              "every ρ stage needs an epoch")
        if not self.rho > 0:
            raise ConfigError(f"lps.rho={self.rho} must be positive")
        if not self.mask_lr_scale > 0:
            raise ConfigError(f"lps.mask_lr_scale={self.mask_lr_scale} must be positive")
        if not 0 < self.lr_gamma <= 1:
            raise ConfigError(f"lps.lr_gamma={self.lr_gamma} must lie in (0, 1]")
        if any(m < 1 for m in self.lr_milestones) or list(self.lr_milestones) != sorted(set(self.lr_milestones)):
            raise ConfigError(f"lps.lr_milestones={list(self.lr_milestones)} must be increasing epochs ≥ 1 "
                              "(e.g. [65,100,130,190]; [] for a constant rate)")
