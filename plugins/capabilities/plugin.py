"""What the built-in methods take and need, and what the built-in models provide (``clbench_add_capabilities``):
checked before any cell starts, so that a method that cannot run on a stream or model is named in the plan, not by a
failed cell. Declared apart from the specs, as ``memory_budgets`` declares the methods' memory: a declaration decides
which cells are planned, never a cell's numbers, so the methods' and models' code (and every result it made) is
unchanged by it.

- DER, DER++, ER-ACE and iCaRL store the inputs of past examples as tensors, and DGR generates inputs: they take
  vectors and images, not texts (their ``setup`` refuses a text stream too, for a plan made without this plugin).
- iCaRL classifies by the nearest class mean of its model's features, ``model.backbone(x)``: the models built as a
  backbone and heads (:class:`clbench.model.HeadedModel`) provide it."""

from __future__ import annotations

from clbench import hookimpl
from clbench.specs import CapabilitySpec

TENSOR_INPUTS = frozenset({"vector", "image"})
STORE_OR_GENERATE_INPUTS = ("der", "derpp", "er-ace", "dgr", "icarl")
NEEDS = {"icarl": frozenset({"backbone"})}
BACKBONE_MODELS = ("mlp", "cnn", "cifarnet", "resnet18", "vit-b16")


@hookimpl
def clbench_add_capabilities() -> list[CapabilitySpec]:
    methods = [
        CapabilitySpec("method", name, modalities=TENSOR_INPUTS, requires=NEEDS.get(name, frozenset()))
        for name in STORE_OR_GENERATE_INPUTS
    ]
    models = [CapabilitySpec("model", name, provides=frozenset({"backbone"})) for name in BACKBONE_MODELS]
    return methods + models
