"""The standard CL metrics: the objectives AA, F.Ra, BWT, LA, AIA, FWT from the accuracy matrix; the diagnostics ACR,
GSR, OO, AWOM (raw and normalised, both orientations) and NucNorm from footprints."""

from __future__ import annotations

import math

from clbench import hookimpl
from clbench import metrics as m
from clbench.metrics import MetricInput
from clbench.specs import MetricSpec


def _aa(inp: MetricInput) -> float | None:
    return m.average_accuracy(inp.matrix)


def _fra(inp: MetricInput) -> float | None:
    return m.forgetting_rate(inp.matrix)


def _bwt(inp: MetricInput) -> float | None:
    return m.backward_transfer(inp.matrix)


def _unseen(inp: MetricInput) -> float | None:
    return m.unseen_task_score(inp.matrix)


def _la(inp: MetricInput) -> float | None:
    return m.learning_accuracy(inp.matrix)


def _aia(inp: MetricInput) -> float | None:
    return m.average_incremental_accuracy(inp.matrix)


def _fwt(inp: MetricInput) -> float | None:
    return m.forward_transfer(inp.matrix, inp.initial, inp.scenario)  # n/a (None) on a class-incremental stream


def _acr(inp: MetricInput) -> float | None:
    scan = inp.footprint_scan()
    return scan.collision_rate() if scan else None


def _gsr(inp: MetricInput) -> float | None:
    scan = inp.footprint_scan()
    return scan.sparsity_rate() if scan else None


def _oo(inp: MetricInput) -> float | None:
    return m.orthogonal_overlap(inp.footprints)


def _oo_norm(inp: MetricInput) -> float | None:
    return m.normalised_overlap(inp.footprints)


def _awom_of(inp: MetricInput, form: str) -> float | None:
    """AWOM in orientation ``form``, once per cell (AWOM.norm divides the same number)."""
    key = f"awom:{form}"
    if key not in inp.cache:
        inp.cache[key] = m.adapter_weight_overlap(inp.footprints, form, inp.factors, inp.device)
    return inp.cache[key]


def _awom(inp: MetricInput) -> float | None:
    return _awom_of(inp, inp.awom)


# The second AWOM orientation and AWOM's normalised form cost as much again as AWOM on dense footprints (a float64
# Gram and eigensolve per pair of tasks and layer: ~40 s a cell of LPS's 2000 × 2000 MLP on one thread); on layers
# above this many entries they are n/a unless every footprint is low-rank (r × r problems, microseconds).
EXTRA_DENSE_LIMIT = 1 << 20


def _extra_forms(inp: MetricInput) -> bool:
    """Whether AWOM.T and AWOM.norm are computed for this cell (see EXTRA_DENSE_LIMIT)."""
    if not inp.footprints or m.lowrank_only(inp.footprints):
        return True
    return all(math.prod(fp.shape) <= EXTRA_DENSE_LIMIT for task in inp.footprints for fp in task.values())


def _awom_other(inp: MetricInput) -> float | None:
    return _awom_of(inp, "transposed" if inp.awom == "eq8" else "eq8") if _extra_forms(inp) else None


def _awom_norm(inp: MetricInput) -> float | None:
    return m.normalised_awom(inp.footprints, _awom_of(inp, inp.awom), inp.factors) if _extra_forms(inp) else None


def _a_norm(inp: MetricInput) -> float | None:
    return m.last_adapter_norm(inp.footprints)


def _nuclear(inp: MetricInput) -> float | None:
    # low-rank only: an r×r SVD per layer; a dense ΔW of a large model would need a full SVD each
    return m.mean_nuclear_norm(inp.footprints, inp.factors) if m.lowrank_only(inp.footprints) else None


def _nuclear_first(inp: MetricInput) -> float | None:
    return m.mean_nuclear_norm(inp.footprints, inp.factors, first=True) if m.lowrank_only(inp.footprints) else None


@hookimpl
def clbench_add_metrics() -> list[MetricSpec]:
    return [
        MetricSpec("AA", _aa, "up", "matrix", "average accuracy over all tasks after the last one"),
        MetricSpec("F.Ra", _fra, "down", "matrix", "forgetting rate (Chaudhry et al.): best earlier score minus final"),
        MetricSpec("BWT", _bwt, "up", "matrix", "backward transfer: final minus just-trained score"),
        MetricSpec("LA", _la, "up", "matrix", "learning accuracy: each task's score just after training it"),
        MetricSpec("AIA", _aia, "up", "matrix", "average incremental accuracy: mean over the run of the seen tasks' mean"),
        MetricSpec("FWT", _fwt, "up", "matrix",
                   "forward transfer: a[j−1][j] minus the untrained model's score on task j, mean over j > 1 "
                   "(n/a class-incremental: an unseen task's labels cannot be predicted)"),
        MetricSpec("unseen", _unseen, "up", "matrix", "score on the last task before training it, a[T-1][T]",
                   leaderboard=False),
        MetricSpec("ACR", _acr, "down", "footprint", "average collision rate of task updates (N-LoRA eq. 10)"),
        MetricSpec("GSR", _gsr, "down", "footprint", "generalised sparsity rate of task updates (N-LoRA eq. 9)"),
        MetricSpec("OO", _oo, "down", "lowrank", "orthogonal overlap Σ‖A_i A_Tᵀ‖_F² of LoRA down-projections"),
        MetricSpec("OO.norm", _oo_norm, "down", "lowrank",
                   "OO divided by Σ‖A_i‖_F²‖A_T‖_F²: in [0, 1], free of the adapters' size"),
        MetricSpec("A_T.norm", _a_norm, "up", "lowrank",
                   "‖A_T‖_F of the last task's LoRA down-projections, beside OO (a penalty can shrink A_T to 0)"),
        MetricSpec("AWOM", _awom, "down", "footprint", "adapter weight orthogonality magnitude Σ‖ΔW_Tᵀ ΔW_i‖₂ (N-LoRA eq. 8)"),
        MetricSpec("AWOM.norm", _awom_norm, "down", "footprint",
                   "AWOM divided by Σ‖ΔW_T‖₂‖ΔW_i‖₂: in [0, 1], free of the updates' size (dense layers ≤ 2²⁰ entries)"),
        MetricSpec("AWOM.T", _awom_other, "down", "footprint",
                   "AWOM in the other orientation than metrics.awom (by default ‖ΔW_Tᵀ ΔW_i‖₂ in PEFT's out × in layout; "
                   "dense layers ≤ 2²⁰ entries)"),
        MetricSpec("NucNorm", _nuclear, "down", "lowrank",
                   "mean nuclear norm ‖ΔW_t‖_* over tasks and layers (N-LoRA Fig. 3: subspace dimension used)"),
        MetricSpec("NucNorm.1", _nuclear_first, "down", "lowrank",
                   "mean nuclear norm ‖ΔW_1‖_* of the first task over layers, as N-LoRA §3.3 reports it"),
    ]
