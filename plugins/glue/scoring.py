"""GLUE's official metrics (Wang et al. 2019, Table 1), computed with scikit-learn and scipy.

:meth:`clbench_plugins.glue.streams.GlueSparse.score` reports ``100 × official(metric, pred, gold)``,
so the accuracy matrix of a glue-sparse run holds each task's official number: Matthews correlation
(CoLA), F1 of the positive class (MRPC), accuracy (SST-2, RTE, QNLI) and, for STS-B, the mean of
Pearson's and Spearman's correlations between the predicted and the gold similarity score (a float
from the regression head, or the predicted class when STS-B runs as six rounded classes).
Correlations can be negative, so a cell may lie in [−100, 100]. An undefined correlation (a constant
prediction) is 0, as scikit-learn's ``matthews_corrcoef`` makes it; scipy returns NaN there.
"""

from __future__ import annotations

import math

from torch import Tensor

METRICS = ("matthews", "f1", "accuracy", "pearson_spearman")


def correlation(pred: Tensor, gold: Tensor) -> float:
    """Mean of Pearson's and Spearman's r (STS-B's official number); 0 when either is undefined."""
    from scipy.stats import pearsonr, spearmanr  # imported to score: every command loads this plugin

    x, y = pred.double().numpy(), gold.double().numpy()
    if len(x) < 2 or x.min() == x.max() or y.min() == y.max():
        return 0.0
    r = 0.5 * (float(pearsonr(x, y).statistic) + float(spearmanr(x, y).statistic))
    return 0.0 if math.isnan(r) else r


def official(metric: str, pred: Tensor, gold: Tensor) -> float:
    """The official metric in [−1, 1] or [0, 1]; ``gold`` holds raw labels (STS-B: float scores)."""
    pred, gold = pred.detach().cpu(), gold.detach().cpu()
    if metric == "pearson_spearman":
        return correlation(pred, gold)
    if metric not in METRICS:
        raise ValueError(f"unknown GLUE metric {metric!r}; known: {METRICS}")
    if len(gold) == 0:
        return 0.0
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef  # (at module level: 1.3 s a command)

    p, g = pred.long().numpy(), gold.long().numpy()
    if metric == "matthews":
        return float(matthews_corrcoef(g, p))
    if metric == "f1":
        return float(f1_score(g, p, zero_division=0.0))
    return float(accuracy_score(g, p))
