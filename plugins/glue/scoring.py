"""GLUE's official metrics (Wang et al. 2019, Table 1), computed from predicted class indices.

:meth:`clbench_plugins.glue.streams.GlueSparse.score` reports ``100 × official(metric, pred, gold)``,
so the accuracy matrix of a glue-sparse run holds each task's official number: Matthews correlation
(CoLA), F1 of the positive class (MRPC), accuracy (SST-2, RTE, QNLI) and, for STS-B, the mean of
Pearson's and Spearman's correlations between the predicted class (the rounded score) and the gold
score. Correlations can be negative, so a cell may lie in [−100, 100]; undefined correlations (a
constant prediction) are 0, as in scikit-learn's ``matthews_corrcoef``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

METRICS = ("matthews", "f1", "accuracy", "pearson_spearman")


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


def average_ranks(x: Tensor) -> Tensor:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    _, inverse, counts = np.unique(x.double().numpy(), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # last rank of each distinct value
    return torch.from_numpy(ends - (counts - 1) / 2.0)[torch.from_numpy(inverse.ravel())]


def spearman(pred: Tensor, gold: Tensor) -> float:
    return pearson(average_ranks(pred.cpu()), average_ranks(gold.cpu()))


def official(metric: str, pred: Tensor, gold: Tensor) -> float:
    """The official metric in [−1, 1] or [0, 1]; ``gold`` holds raw labels (STS-B: float scores)."""
    pred, gold = pred.cpu(), gold.cpu()
    if metric == "matthews":
        return matthews(pred, gold.long())
    if metric == "f1":
        return f1(pred, gold.long())
    if metric == "pearson_spearman":
        return 0.5 * (pearson(pred, gold) + spearman(pred, gold))
    if metric == "accuracy":
        return float((pred == gold.long()).double().mean()) if len(gold) else 0.0
    raise ValueError(f"unknown GLUE metric {metric!r}; known: {METRICS}")
