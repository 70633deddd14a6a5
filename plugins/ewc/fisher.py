"""EWC's per-example empirical Fisher, computed a chunk of examples at a time where the model allows it.

One example at a time (:func:`clbench_plugins._shared.penalty.diagonal_fisher` at batch size 1) is one forward and
one backward per example: on Permuted MNIST's 60,000 images a task, most of a 20-task cell's 20 minutes. When every
penalised parameter is an ``nn.Linear``'s weight or bias, applied once to one vector an example (the MLPs), example
i's gradient of the weight is δᵢ ⊗ aᵢ (δ the gradient at the layer's output, a its input), so the sum of the squares
is (δ²)ᵀ(a²): one matrix product a chunk (the sums of squares BackPACK computes), the same numbers as the loop up to
float summation order (tests/test_ewc.py). Any other model takes the loop.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from clbench_plugins._shared.penalty import diagonal_fisher
from torch import Tensor, nn
from torch.func import vmap

from clbench.data import Batch, Split, batches
from clbench.model import CLModel

LINEAR_CHUNK = 256  # examples a chunk on the Linear route: its memory is a chunk's activations


class _NotLinear(Exception):
    """The model's Linear layers see more than one vector an example, or run twice: the loop applies."""


def per_example_fisher(model: CLModel, split: Split, task: str, params: dict[str, nn.Parameter], samples: int,
                       device: torch.device, generator: torch.Generator, weight: str = "none",
                       route: str = "auto") -> dict[str, Tensor]:
    """The mean over examples of w·g², g the gradient of the task loss of one example (minus the log-likelihood of
    its label) with respect to each of ``params``, in float32. w is 1 (``weight="none"``: the empirical Fisher) or
    the model's probability of the example's label (``"probability"``: Mammoth's ``ewc_on``, which weighs each
    square by ``exp(-loss)``). The first ``samples`` examples (0: all) of the split in the generator's shuffled
    order: the examples ``diagonal_fisher`` reads at batch size 1, in the same order. In eval mode, as that.
    ``route``: "auto" (Linear where it applies, else the loop), "linear" or "loop" (tests)."""
    total = min(samples, len(split)) if samples else len(split)
    layers = _linear_layers(model, params) if route != "loop" else None
    if route == "linear" and layers is None:
        raise ValueError("the Linear route needs every penalised parameter to be a Linear's weight or bias")
    if layers is not None:
        state = generator.get_state()
        fisher = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
        was_training = model.training
        model.eval()
        try:
            chunks = _chunks(split, LINEAR_CHUNK, task, generator, total, device)
            seen = _linear_route(model, layers, chunks, task, weight, fisher)
            return {n: f / max(seen, 1) for n, f in fisher.items()}
        except _NotLinear:
            if route == "linear":
                raise
            generator.set_state(state)  # the loop draws the same order
        finally:
            model.train(was_training)
    if weight == "none":
        return diagonal_fisher(model, split, task, params, samples, 1, device, generator)
    return _weighted_loop(model, split, task, params, total, device, generator)


def _chunks(split: Split, chunk: int, task: str, generator: torch.Generator, total: int,
            device: torch.device) -> Iterator[Batch]:
    seen = 0
    for batch in batches(split, chunk, task, generator):
        if seen >= total:
            return
        take = min(len(batch), total - seen)
        batch = batch.to(device)
        yield Batch(batch.x[:take], batch.y[:take], task)
        seen += take


def _weighted_loop(model: CLModel, split: Split, task: str, params: dict[str, nn.Parameter], total: int,
                   device: torch.device, generator: torch.Generator) -> dict[str, Tensor]:
    """p(y|x)·g² one example at a time (Mammoth's loop), for the models the Linear route does not cover."""
    fisher = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
    was_training = model.training
    model.eval()
    seen = 0
    try:
        for batch in batches(split, 1, task, generator):
            if seen >= total:
                break
            batch = batch.to(device)
            model.zero_grad(set_to_none=True)
            loss = model.task_loss(model(batch.x, task), batch.y)
            loss.backward()
            w = torch.exp(-loss.detach().float())
            for n, p in params.items():
                if p.grad is not None:
                    fisher[n] += w * p.grad.detach().float() ** 2
            seen += 1
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return {n: f / max(seen, 1) for n, f in fisher.items()}


def _linear_layers(model: nn.Module, params: dict[str, nn.Parameter]) -> dict[nn.Linear, dict[str, str]] | None:
    """{layer: {"weight"/"bias": name in params}} when every one of ``params`` is a Linear's, else None."""
    owners: dict[nn.Linear, dict[str, str]] = {}
    found = set()
    for prefix, module in model.named_modules():
        if isinstance(module, nn.Linear):
            for kind in ("weight", "bias"):
                name = f"{prefix}.{kind}" if prefix else kind
                if name in params:
                    owners.setdefault(module, {})[kind] = name
                    found.add(name)
    return owners if found == set(params) else None


def _linear_route(model: CLModel, layers: dict[nn.Linear, dict[str, str]], chunks: Iterator[Batch], task: str,
                  weight: str, fisher: dict[str, Tensor]) -> int:
    seen_io: dict[nn.Module, list[tuple[Tensor, Tensor]]] = {m: [] for m in layers}

    def keep(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        seen_io[module].append((inputs[0], output))

    handles = [m.register_forward_hook(keep) for m in layers]
    seen = 0
    try:
        for batch in chunks:
            for io in seen_io.values():
                io.clear()
            with torch.enable_grad():
                logits = model(batch.x, task)
                # each example's task loss, by the model's own loss function applied to one example at a time
                nll = vmap(lambda z, t: model.task_loss(z.unsqueeze(0), t.unsqueeze(0)))(logits, batch.y)
                used = [m for m in layers if seen_io[m]]
                if any(len(seen_io[m]) != 1 or seen_io[m][0][0].dim() != 2 for m in used):
                    raise _NotLinear
                deltas = torch.autograd.grad(nll.sum(), [seen_io[m][0][1] for m in used], allow_unused=True)
            w = torch.exp(-nll.detach().float()) if weight == "probability" else None
            for m, delta in zip(used, deltas, strict=True):
                if delta is None:
                    continue
                d2 = delta.detach().float() ** 2  # example i's gradient at the output, squared
                if w is not None:
                    d2 = d2 * w[:, None]
                a = seen_io[m][0][0].detach().float()
                if "weight" in layers[m]:
                    fisher[layers[m]["weight"]] += d2.T @ a**2  # Σᵢ (δᵢ ⊗ aᵢ)²
                if "bias" in layers[m]:
                    fisher[layers[m]["bias"]] += d2.sum(0)
            seen += len(batch.y)
    finally:
        for h in handles:
            h.remove()
    return seen
