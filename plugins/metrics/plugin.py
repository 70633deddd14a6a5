"""The standard CL metrics: AA, F.Ra, BWT from the accuracy matrix; ACR, GSR, OO, AWOM from footprints."""

from __future__ import annotations

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


def _acr(inp: MetricInput) -> float | None:
    scan = inp.footprint_scan()
    return scan.collision_rate() if scan else None


def _gsr(inp: MetricInput) -> float | None:
    scan = inp.footprint_scan()
    return scan.sparsity_rate() if scan else None


def _oo(inp: MetricInput) -> float | None:
    return m.orthogonal_overlap(inp.footprints)


def _awom(inp: MetricInput) -> float | None:
    return m.adapter_weight_overlap(inp.footprints, inp.awom, inp.factors, inp.device)


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
        MetricSpec("unseen", _unseen, "up", "matrix", "score on the last task before training it, a[T-1][T]",
                   leaderboard=False),
        MetricSpec("ACR", _acr, "down", "footprint", "average collision rate of task updates (N-LoRA eq. 10)"),
        MetricSpec("GSR", _gsr, "down", "footprint", "generalised sparsity rate of task updates (N-LoRA eq. 9)"),
        MetricSpec("OO", _oo, "down", "lowrank", "orthogonal overlap Σ‖A_i A_Tᵀ‖_F² of LoRA down-projections"),
        MetricSpec("A_T.norm", _a_norm, "up", "lowrank",
                   "‖A_T‖_F of the last task's LoRA down-projections, beside OO (a penalty can shrink A_T to 0)"),
        MetricSpec("AWOM", _awom, "down", "footprint", "adapter weight orthogonality magnitude Σ‖ΔW_Tᵀ ΔW_i‖₂ (N-LoRA eq. 8)"),
        MetricSpec("NucNorm", _nuclear, "down", "lowrank",
                   "mean nuclear norm ‖ΔW_t‖_* over tasks and layers (N-LoRA Fig. 3: subspace dimension used)"),
        MetricSpec("NucNorm.1", _nuclear_first, "down", "lowrank",
                   "mean nuclear norm ‖ΔW_1‖_* of the first task over layers, as N-LoRA §3.3 reports it"),
    ]
