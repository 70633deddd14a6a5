"""GLUE's official metrics (Wang et al. 2019, Table 1), computed from predicted class indices.

The runner scores every task by accuracy of ``model.predict``; :func:`evaluate_official` gives the
official number for a task with the same model and method (used by docs and tests; a core hook that
lets a stream score its own tasks is proposed in docs/expander-ewc.md).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from clbench.data import Batch
from clbench.method import Method
from clbench.model import CLModel

from .streams import GLUE_TASKS, GlueSparse


def matthews(pred: Tensor, gold: Tensor) -> float:
    tp = float(((pred == 1) & (gold == 1)).sum())
    tn = float(((pred == 0) & (gold == 0)).sum())
    fp = float(((pred == 1) & (gold == 0)).sum())
    fn = float(((pred == 0) & (gold == 1)).sum())
    denom = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denom if denom else 0.0


def f1(pred: Tensor, gold: Tensor) -> float:
    tp = float(((pred == 1) & (gold == 1)).sum())
    fp = float(((pred == 1) & (gold == 0)).sum())
    fn = float(((pred == 0) & (gold == 1)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def pearson(pred: Tensor, gold: Tensor) -> float:
    x = pred.double() - pred.double().mean()
    y = gold.double() - gold.double().mean()
    denom = float(x.norm() * y.norm())
    return float((x * y).sum()) / denom if denom else 0.0


def official_score(task: str, pred: Tensor, gold: Tensor) -> float:
    """The task's official metric in [−1, 1] or [0, 1]; ``gold`` holds raw labels (STS-B: float scores)."""
    metric = GLUE_TASKS[task].metric
    if metric == "matthews":
        return matthews(pred, gold.long())
    if metric == "f1":
        return f1(pred, gold.long())
    if metric == "pearson":
        return pearson(pred.double(), gold)  # predicted class = rounded score
    return float((pred == gold.long()).double().mean())


@torch.no_grad()
def evaluate_official(model: CLModel, method: Method, stream: GlueSparse, task: str, batch_size: int = 64,
                      device: torch.device | None = None) -> float:
    split = stream.data(task).test
    preds = []
    with method.evaluating(task):
        for start in range(0, len(split), batch_size):
            batch = Batch(split.x[start:start + batch_size], split.y[start:start + batch_size], task)
            if device is not None:
                batch = batch.to(device)
            preds.append(model.predict(batch.x, task).cpu())
    return official_score(task, torch.cat(preds), stream.gold_scores[task])
