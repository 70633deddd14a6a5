"""Expander-EWC: only the task's mask moves, the damped-Fisher penalty, Fisher on m_k, report, ablations."""

from __future__ import annotations

import pytest
import torch
from clbench_plugins._shared.masked.config import (
    DenseEWCConfig,
    ExpanderEWCConfig,
    ExpanderOnlyConfig,
    RandomMaskEWCConfig,
)
from clbench_plugins._shared.masked.method import ExpanderEWC
from test_packnet_method import make_cell, run_task  # tests/ is on sys.path (rootdir conftest)

from clbench import footprints, testing
from clbench.cell import FOOTPRINT_FILE
from clbench.config import TrainConfig
from clbench.errors import ConfigError
from clbench.method import CellContext


def _cell(config: ExpanderEWCConfig) -> tuple[ExpanderEWC, torch.nn.Module, CellContext]:
    return make_cell(ExpanderEWC, config, train=TrainConfig(epochs=1, batch_size=16, lr=0.01))


_run_task = run_task


def test_only_masked_coordinates_move_and_fisher_lives_on_the_mask():
    method, model, ctx = _cell(ExpanderEWCConfig(density=0.25, lambda_=1.0, fisher_samples=16))
    before = {n: p.detach().clone() for n, p in method.masked_parameters().items()}
    vectors = {n: p.detach().clone() for n, p in method.vector_parameters().items()}
    _run_task(method, model, ctx, 0)
    for n, p in method.masked_parameters().items():
        moved = (p.detach() != before[n])
        mask = method.masks[n]
        assert moved.any() and not (moved & ~mask).any(), n
        assert (method.fisher[n][~mask] == 0).all() and (method.fisher[n][mask] > 0).any()
        assert torch.equal(method.anchor[n], p.detach())  # θ_ref ← θ
    for n, p in method.vector_parameters().items():  # biases are frozen by default
        assert torch.equal(p.detach(), vectors[n])


def test_with_weight_decay_only_masked_coordinates_move_either():
    """Weight decay moves every coordinate; after each step the unmasked ones are put back to the task's start (held
    on the device for the phase), so a task still moves only its mask."""
    method, model, ctx = make_cell(ExpanderEWC, ExpanderEWCConfig(density=0.25, lambda_=1.0, fisher_samples=16,
                                                                   optimizer="train"),
                                   train=TrainConfig(epochs=1, batch_size=16, lr=0.01, weight_decay=0.1))
    before = {n: p.detach().clone() for n, p in method.masked_parameters().items()}
    _run_task(method, model, ctx, 0)
    assert method._restore  # the phase decayed weights
    for n, p in method.masked_parameters().items():
        moved = p.detach() != before[n]
        assert moved.any() and not (moved & ~method.masks[n]).any(), n


def test_penalty_is_damped_fisher_quadratic():
    """(λ/2)·(θ − θ_ref)ᵀ(F + γI)(θ − θ_ref) against θ_ref copied whole at the task's end, while the anchor keeps a
    masked weight's θ_ref at the new task's mask only (the coordinates that can move); its gradient likewise."""
    cfg = ExpanderEWCConfig(density=0.25, lambda_=3.0, gamma=0.5, fisher_samples=16)
    method, model, ctx = _cell(cfg)
    _run_task(method, model, ctx, 0)
    ref = {n: p.detach().clone() for n, p in method.penalized().items()}
    method.before_task("t1", 1)
    for n, mask in method.masks.items():
        entry = method.anchor.entries[n]
        assert isinstance(entry, tuple) and entry[1].numel() == int(mask.sum()) < mask.numel() / 2
    with torch.no_grad():  # a step moves the masked coordinates and the heads
        for n, p in method.penalized().items():
            p.add_(0.01 * torch.randn_like(p) * method.masks.get(n, torch.ones_like(p)))
    expected = sum(((method.fisher.get(n, torch.zeros_like(p)) + 0.5) * (p - ref[n]) ** 2).sum()
                   for n, p in method.penalized().items()) * 3.0 / 2
    got = method.loss_terms(None, None)["ewc"].detach()  # type: ignore[arg-type]
    assert float(got) == pytest.approx(float(expected.detach()), rel=1e-5)
    for p in method.penalized().values():
        p.grad = None
    method.after_backward()
    for n, p in method.penalized().items():
        grad = 3.0 * (method.fisher.get(n, torch.zeros_like(p)) + 0.5) * (p.detach() - ref[n])
        torch.testing.assert_close(p.grad, grad * method.masks[n] if n in method.masks else grad)


def test_report_gives_jaccard_and_spectral_gap_per_task():
    method, model, ctx = _cell(ExpanderEWCConfig(density=0.25, fisher_samples=8))
    _run_task(method, model, ctx, 0)
    _run_task(method, model, ctx, 1)
    report = method.report()["masks"]
    assert [r["task"] for r in report] == ["t0", "t1"]
    name = "backbone.3.weight"
    m0 = torch.from_numpy(__import__("numpy").unpackbits(method.history[0][name])[:32 * 32].astype(bool))
    m1 = method.masks[name].reshape(-1)
    jac = float((m0 & m1).sum() / (m0 | m1).sum())
    assert report[1]["layers"][name]["jaccard"] == [pytest.approx(jac)]
    assert report[0]["layers"][name]["jaccard"] == []
    s = report[1]["layers"][name]
    assert s["spectral_gap"] == pytest.approx(1 - s["sigma2"]) and s["sigma2"] <= 1.1 * s["bound"]
    assert jac == 0.0 and s["shared"] == 0  # two 25 % masks: disjoint by default (overlap_policy="avoid")


def test_ablations_are_settings_of_one_method(tmp_path):
    assert RandomMaskEWCConfig().construction == "uniform" and RandomMaskEWCConfig().lambda_ > 0
    assert ExpanderOnlyConfig().lambda_ == 0 and ExpanderOnlyConfig().construction == "random"
    method, model, ctx = _cell(ExpanderOnlyConfig(density=0.25))
    _run_task(method, model, ctx, 0)
    assert method.loss_terms(None, None) == {} and method.fisher == {}  # type: ignore[arg-type]
    dense, dmodel, dctx = _cell(DenseEWCConfig())  # "EWC without masks": every coordinate moves
    before = {n: p.detach().clone() for n, p in dense.masked_parameters().items()}
    _run_task(dense, dmodel, dctx, 0)
    for n, p in dense.masked_parameters().items():
        assert bool(dense.masks[n].all())
        assert float((p.detach() != before[n]).float().mean()) > 0.5  # a 10 % mask would move ≤ 10 %
    dense.before_task("t1", 1)
    assert set(dense.fisher) >= set(before) and float(dense.loss_terms(None, None)["ewc"]) == 0.0  # type: ignore[arg-type]
    regs = testing.registry()
    sets = {"random-mask-ewc.density": [0.5], "random-mask-ewc.overlap_policy": ["independent"]}
    [res] = testing.run(regs, tmp_path / "a", "random-mask-ewc", sets=sets)
    assert res.status == "failed" and "overlap" in res.error  # two independent 50 % masks overlap by ≈1/3 > δ = 0.2
    [res] = testing.run(regs, tmp_path / "b", "random-mask-ewc", sets={"random-mask-ewc.density": [0.5]})
    assert res.status == "complete", res.error  # the default avoids: the second mask is the first's complement
    first, second = footprints.load(next((tmp_path / "b").rglob(FOOTPRINT_FILE)))
    for name, fp in first.items():
        assert fp.kind == "masked" and int(fp.mask.sum()) == round(0.5 * fp.mask.numel())
        assert int(second[name].mask.sum()) == int(fp.mask.sum()) and not (fp.mask & second[name].mask).any()


def test_overlap_policy_is_a_setting_with_the_paper_as_default():
    assert ExpanderEWCConfig().overlap_policy == "avoid" == ExpanderEWCConfig().mask_spec().overlap_policy
    assert ExpanderEWCConfig(overlap_policy="independent").mask_spec().overlap_policy == "independent"
    assert DenseEWCConfig().overlap_policy == "independent"  # full matrices: nothing to avoid
    with pytest.raises(ConfigError, match="expander-ewc setting: overlap_policy='none'"):
        ExpanderEWCConfig(overlap_policy="none")


def test_the_penalized_parameters_are_found_once_a_phase_and_again_when_a_phase_freezes_one(monkeypatch):
    method, model, ctx = _cell(ExpanderEWCConfig(density=0.25, lambda_=1.0, fisher_samples=8, train_vectors=True))
    phase = method.phases("t0", 0)[0]
    method.before_task("t0", 0)
    method.before_phase(phase, "t0", 0)
    bias = next(n for n in method.penalized() if n.endswith(".bias"))
    walks: list[str] = []
    named_parameters, named_modules = type(model).named_parameters, type(model).named_modules
    monkeypatch.setattr(type(model), "named_parameters", lambda self, *a, **k: walks.append("p") or named_parameters(self, *a, **k))
    monkeypatch.setattr(type(model), "named_modules", lambda self, *a, **k: walks.append("m") or named_modules(self, *a, **k))
    for _ in range(3):  # steps: the penalty's value and gradient, the gradient masked
        method.loss_terms(None, None)  # type: ignore[arg-type]
        method.after_backward()
    assert walks == []
    model.get_parameter(bias).requires_grad_(False)  # a later phase freezes it
    method.before_phase(phase, "t0", 0)
    assert bias not in method.penalized() and walks
    # heads and vectors both train here: everything left trainable, found anew
    assert set(method.parameters(model, phase)) == {p for p in model.parameters() if p.requires_grad}
