"""Which parameters a built-in method acts on, where more than one method chooses the same way."""

from __future__ import annotations

from torch import nn

from clbench.model import CLModel


def shared_trainable(model: CLModel) -> dict[str, nn.Parameter]:
    """The trainable parameters outside the per-task heads (a head every task shares counts like any shared weight:
    ``CLModel.head_parameter_names``): what EWC and SI penalise."""
    heads = model.head_parameter_names()
    return {n: p for n, p in model.named_parameters() if p.requires_grad and n not in heads}
