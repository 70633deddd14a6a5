"""EWC's diagonal Fisher against gradients taken one example (or one batch) at a time."""

from __future__ import annotations

import pytest
import torch
from clbench_plugins._shared.penalty import diagonal_fisher
from clbench_plugins.mlp.model import MLPConfig, build

from clbench import testing
from clbench.model import CLModel, StreamInfo


def _loop_fisher(model, split, task, params, order):
    """Mean over the given examples of the squared per-example gradient, one backward each."""
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    for i in order:
        model.zero_grad(set_to_none=True)
        model.task_loss(model(split.x[i : i + 1], task), split.y[i : i + 1]).backward()
        for n, p in params.items():
            total[n] += p.grad**2
    return {n: t / len(order) for n, t in total.items()}


@pytest.mark.parametrize("samples", [0, 20])
def test_per_example_fisher_matches_a_backward_per_example(samples):
    stream = testing.TinyVectorStream(tasks=2, n=100)
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=(16,)), StreamInfo.of(stream))
    model.eval()
    split = stream.data("t1").train
    params = {n: p for n, p in model.named_parameters() if not n.startswith("heads.")}
    fisher = diagonal_fisher(model, split, "t1", params, samples, 1, torch.device("cpu"),
                             torch.Generator().manual_seed(3))
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(3)).tolist()
    expected = _loop_fisher(model, split, "t1", params, order[:samples] if samples else order)
    assert set(fisher) == set(params)
    for n in params:
        torch.testing.assert_close(fisher[n], expected[n], rtol=1e-4, atol=1e-7)
        assert fisher[n].abs().sum() > 0


def test_batched_fisher_squares_batch_means():
    stream = testing.TinyVectorStream(tasks=1, n=64)
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=(8,)), StreamInfo.of(stream))
    split = stream.data("t0").train
    params = dict(model.named_parameters())
    fisher = diagonal_fisher(model, split, "t0", params, 0, 32, torch.device("cpu"), torch.Generator().manual_seed(1))
    order = torch.randperm(64, generator=torch.Generator().manual_seed(1))
    expected = {n: torch.zeros_like(p) for n, p in params.items()}
    for idx in (order[:32], order[32:]):
        model.zero_grad(set_to_none=True)
        model.task_loss(model(split.x[idx], "t0"), split.y[idx]).backward()
        for n, p in params.items():
            expected[n] += p.grad**2 / 2
    for n in params:
        torch.testing.assert_close(fisher[n], expected[n])


@torch.no_grad()
def _penalty_value(weights, params, anchor):
    """Σ_n Σ w_n ⊙ (θ_n − θ*_n)²: the value alone, a pass of its own (the reference for penalty_terms)."""
    return torch.stack([(w * (params[n] - anchor[n]).square()).sum() for n, w in weights.items()]).sum()


@torch.no_grad()
def _add_penalty_gradient(doubled, params, anchor):
    """θ.grad += 2w ⊙ (θ − θ*) (``doubled`` holds 2w): the gradient alone, a pass of its own."""
    for n, w2 in doubled.items():
        g = w2 * (params[n] - anchor[n])
        params[n].grad = g if params[n].grad is None else params[n].grad + g


@pytest.mark.parametrize("lam", [10.0, 0.3, 7e3])
def test_the_penalty_gradient_is_autograds_to_the_last_bit(lam):
    """EWC adds λF ⊙ (θ − θ*) in after_backward instead of differentiating (λ/2)ΣF(θ − θ*)² through autograd:
    the very same float32 numbers, so no committed EWC result moves (and no graph of the penalty is kept)."""
    from clbench_plugins._shared.penalty import Weighted, add_penalty_gradients, penalty_value

    g = torch.Generator().manual_seed(5)
    params = {n: torch.nn.Parameter(torch.randn(64, 32, generator=g)) for n in ("a", "b")}
    fisher = {n: torch.rand(64, 32, generator=g) ** 3 for n in params}
    anchor = {n: p.detach() + 0.01 * torch.randn(64, 32, generator=g) for n, p in params.items()}
    task = sum((p * p.detach().sin()).sum() for p in params.values())  # a task loss with gradients of its own
    total = sum((fisher[n] * (params[n] - anchor[n]) ** 2).sum() for n in params)
    (task + 0.5 * lam * total).backward()
    expected = {n: p.grad.clone() for n, p in params.items()}
    for p in params.values():
        p.grad = None
    task = sum((p * p.detach().sin()).sum() for p in params.values())
    task.backward()
    weighted = Weighted(lambda: fisher.keys(), lambda n: lam * fisher[n])  # EWC's λF, formed when read
    value = penalty_value(weighted, params, anchor)  # EWC's step: loss_terms, then after_backward
    add_penalty_gradients(weighted, params, anchor)
    assert all(torch.equal(params[n].grad, expected[n]) for n in params)
    assert not value.requires_grad and value == pytest.approx(float(0.5 * lam * total.detach()), rel=1e-6)


def test_the_penalty_and_its_gradient_are_the_two_passes_to_the_last_bit():
    """EWC's loss_terms forms the value, its after_backward the gradient, one parameter at a time: the same float32
    gradient as a gradient pass over stored weights, the value as a value pass's up to rounding."""
    from clbench_plugins._shared.penalty import add_penalty_gradients, penalty_value

    g = torch.Generator().manual_seed(7)
    params = {n: torch.nn.Parameter(torch.randn(48, 16, generator=g)) for n in ("a", "b", "c")}
    weights = {n: torch.rand(48, 16, generator=g) ** 3 for n in params}
    anchor = {n: p.detach() + 0.01 * torch.randn(48, 16, generator=g) for n, p in params.items()}
    doubled = {n: 2 * w for n, w in weights.items()}
    _add_penalty_gradient(doubled, params, anchor)
    expected = {n: p.grad.clone() for n, p in params.items()}
    for p in params.values():
        p.grad = None
    add_penalty_gradients(doubled, params, anchor)
    assert all(torch.equal(params[n].grad, expected[n]) for n in params)
    value = penalty_value(doubled, params, anchor)
    assert not value.requires_grad
    assert float(value) == pytest.approx(float(_penalty_value(weights, params, anchor)), rel=1e-6)
    manual = sum(float((weights[n].double() * (params[n].detach().double() - anchor[n].double()) ** 2).sum())
                 for n in params)
    assert float(value) == pytest.approx(manual, rel=1e-5)


def test_the_fisher_of_a_bf16_model_is_summed_in_float32():
    """bf16 weights: the Fisher is float32 and within float32 rounding of a float64 sum of the same bf16 gradients;
    summed in bf16 (the weights' dtype, as before) the same 256 terms come out several % off."""
    stream = testing.TinyVectorStream(tasks=1, n=320)
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=(16,)), StreamInfo.of(stream)).to(torch.bfloat16)
    model.eval()
    split = stream.data("t0").train
    split = type(split)(split.x.to(torch.bfloat16), split.y)
    params = {n: p for n, p in model.named_parameters() if not n.startswith("heads.")}
    fisher = diagonal_fisher(model, split, "t0", params, 256, 1, torch.device("cpu"), torch.Generator().manual_seed(3))
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(3)).tolist()[:256]
    exact = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in params.items()}
    in_bf16 = {n: torch.zeros_like(p) for n, p in params.items()}
    for i in order:
        model.zero_grad(set_to_none=True)
        model.task_loss(model(split.x[i : i + 1], "t0"), split.y[i : i + 1]).backward()
        for n, p in params.items():
            exact[n] += p.grad.double() ** 2
            in_bf16[n] += p.grad**2
    total = sum(e.sum() for e in exact.values()) / 256
    assert all(f.dtype == torch.float32 for f in fisher.values())
    ours = sum(f.double().sum() for f in fisher.values())
    theirs = sum(b.double().sum() for b in in_bf16.values()) / 256
    assert abs(ours / total - 1) < 1e-5
    for n in params:
        torch.testing.assert_close(fisher[n].double(), exact[n] / 256, rtol=1e-5, atol=1e-12)
    assert abs(theirs / total - 1) > 1e-3  # what accumulating in the weights' dtype loses


def _mammoth_fisher(model, split, task, params, order):
    """Mammoth's ewc_on end_task, one example at a time: exp(-loss)·g², divided by the number of examples."""
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    for i in order:
        model.zero_grad(set_to_none=True)
        log_probs = torch.log_softmax(model(split.x[i : i + 1], task), dim=1)
        loss = -torch.nn.functional.nll_loss(log_probs, split.y[i : i + 1], reduction="none")  # the log-likelihood
        prob = loss.detach().exp().mean()
        loss.mean().backward()
        for n, p in params.items():
            total[n] += prob * p.grad**2
    return {n: t / len(order) for n, t in total.items()}


@pytest.mark.parametrize("weight", ["none", "probability"])
@pytest.mark.parametrize("samples", [0, 37, 300])
@pytest.mark.parametrize("route", ["linear", "loop"])
def test_the_per_example_fisher_is_a_backward_per_example(weight, samples, route):
    """EWC's per-example Fisher on both routes (Linear layers' sums of squares a chunk; a backward per example)
    against a backward per example: unweighted as diagonal_fisher's loop, weighted as Mammoth's code."""
    from clbench_plugins.ewc.fisher import per_example_fisher

    stream = testing.TinyVectorStream(tasks=2, n=600)
    torch.manual_seed(0)
    model = build(MLPConfig(hidden=(16, 12)), StreamInfo.of(stream))
    model.train()
    split = stream.data("t1").train
    params = {n: p for n, p in model.named_parameters() if not n.startswith("heads.")}
    fisher = per_example_fisher(model, split, "t1", params, samples, torch.device("cpu"),
                                torch.Generator().manual_seed(3), weight, route)
    assert model.training  # restored
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(3)).tolist()
    order = order[:samples] if samples else order
    expected = (_loop_fisher if weight == "none" else _mammoth_fisher)(model, split, "t1", params, order)
    if weight == "none":  # and the shared batch-size-1 loop EWC used before
        loop = diagonal_fisher(model, split, "t1", params, samples, 1, torch.device("cpu"),
                               torch.Generator().manual_seed(3))
        for n in params:
            torch.testing.assert_close(fisher[n], loop[n], rtol=1e-5, atol=1e-8)
    for n in params:
        torch.testing.assert_close(fisher[n], expected[n], rtol=1e-4, atol=1e-7)
        assert fisher[n].abs().sum() > 0


def test_the_probability_weighted_fisher_is_smaller_and_needs_one_example_a_batch():
    """Each weight is a probability, so the weighted Fisher is at most the unweighted one, everywhere; and a batched
    Fisher cannot weigh its examples: that combination is refused."""
    from clbench_plugins.ewc.config import EWCConfig
    from clbench_plugins.ewc.fisher import per_example_fisher

    from clbench.errors import ConfigError

    stream = testing.TinyVectorStream(tasks=1, n=60)
    torch.manual_seed(1)
    model = build(MLPConfig(hidden=(8,)), StreamInfo.of(stream))
    split = stream.data("t0").train
    params = dict(model.named_parameters())
    plain, weighted = (per_example_fisher(model, split, "t0", params, 0, torch.device("cpu"),
                                          torch.Generator().manual_seed(0), w) for w in ("none", "probability"))
    for n in params:
        assert (weighted[n] <= plain[n] * (1 + 1e-6)).all() and weighted[n].sum() < plain[n].sum()
    with pytest.raises(ConfigError, match="fisher_batch_size=1"):
        EWCConfig(fisher_weight="probability", fisher_batch_size=8)


class _TokenModel(CLModel):
    """One Linear applied to two 4-vectors an example (as a sequence model's layers are): each example's gradient is
    a sum over its vectors, so the Linear route's sum of squares does not apply."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x, task):
        return self.lin(x.view(len(x), 2, 4)).mean(1)


@pytest.mark.parametrize("weight", ["none", "probability"])
def test_a_linear_on_a_sequence_takes_the_loop_in_the_same_order(weight):
    from clbench_plugins.ewc.fisher import _NotLinear, per_example_fisher

    stream = testing.TinyVectorStream(tasks=1, n=80)
    torch.manual_seed(2)
    model = _TokenModel()
    split = stream.data("t0").train
    params = dict(model.named_parameters())
    fisher = per_example_fisher(model, split, "t0", params, 30, torch.device("cpu"),
                                torch.Generator().manual_seed(4), weight)
    with pytest.raises(_NotLinear):
        per_example_fisher(model, split, "t0", params, 30, torch.device("cpu"), torch.Generator(), weight, "linear")
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(4)).tolist()[:30]
    expected = (_loop_fisher if weight == "none" else _mammoth_fisher)(model, split, "t0", params, order)
    for n in params:
        torch.testing.assert_close(fisher[n], expected[n], rtol=1e-5, atol=1e-8)


def test_fisher_weight_at_its_first_value_leaves_a_cells_identity_as_it_was():
    """A method setting added after results were committed (EWCConfig.IDENTITY_SINCE) is left out of the identity at
    its first value: a cell recorded without it hashes as before; the other value is another cell."""
    from clbench_plugins.ewc.config import EWCConfig

    from clbench.cell import config_hash
    from clbench.config import identity_defaults

    recorded = {"methods": {"ewc": {"lambda": 100.0, "decay": 1.0}}, "train": {"lr": 0.1}}
    since = {"methods": {"ewc": identity_defaults(EWCConfig)}}
    now = {"methods": {"ewc": {"lambda": 100.0, "decay": 1.0, "fisher_weight": "none"}}, "train": {"lr": 0.1}}
    weighted = {"methods": {"ewc": {**now["methods"]["ewc"], "fisher_weight": "probability"}}, "train": {"lr": 0.1}}
    assert config_hash(now, "s", "1", 0, since) == config_hash(recorded, "s", "1", 0)
    assert config_hash(weighted, "s", "1", 0, since) != config_hash(recorded, "s", "1", 0)
    assert config_hash(now, "s", "1", 0) != config_hash(recorded, "s", "1", 0)  # without it, a new identity
