"""SI, GEM, A-GEM and SM (LPS Table II's columns) against numbers computed another way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from clbench_plugins.gem.method import project_agem, project_gem
from clbench_plugins.si.config import SIConfig
from clbench_plugins.si.method import SI
from scipy.optimize import minimize

from clbench import testing
from clbench.config import TrainConfig
from clbench.method import CellContext


def _tiny_model():
    from clbench_plugins.mlp.model import MLPConfig, build

    from clbench.data import TaskInfo
    from clbench.model import StreamInfo

    tasks = tuple(TaskInfo(f"t{i}", ("a", "b")) for i in range(2))
    return build(MLPConfig(hidden=()), StreamInfo("x", tasks, "vector", (2,), True))  # a linear model, a head a task


def test_si_importance_is_the_path_integral_normalised_by_the_change():
    model = _tiny_model()
    ctx = CellContext(stream=None, order=["t0", "t1"], train=TrainConfig(), device=torch.device("cpu"), seed=0)
    si = SI(SIConfig(c=0.1, xi=0.5), ctx)
    si.setup(model)
    # with hidden=() the body is empty: give SI one shared parameter to follow, the first head's weight, by treating
    # the model as single-headed for this test
    model.head_parameter_names = lambda: set()  # type: ignore[method-assign]
    si.before_task("t0", 0)
    w = dict(model.named_parameters())["heads.t0.weight"]
    start = w.detach().clone()
    steps = [(torch.full_like(w, 2.0), -0.1), (torch.full_like(w, -1.0), 0.3)]  # (gradient g, the step Δθ)
    for g, delta in steps:
        w.grad = g.clone()
        si.after_backward()
        with torch.no_grad():
            w.add_(delta)
        si.after_step()
    si.after_task("t0", 0)
    path = -(2.0 * -0.1) - (-1.0 * 0.3)  # −Σ g·Δθ = 0.2 + 0.3
    total = (-0.1 + 0.3) ** 2  # (θ_end − θ_start)² = 0.04
    assert torch.allclose(si.omega["heads.t0.weight"], torch.full_like(w, path / (total + 0.5)))
    assert torch.equal(si.anchor["heads.t0.weight"], w.detach()) and not torch.equal(w.detach(), start)
    # the surrogate c·Σ Ω (θ − θ̃)² and its gradient 2c·Ω (θ − θ̃), added after the task loss's gradient
    with torch.no_grad():
        w.add_(1.0)
    value = si.loss_terms(None, None)["si"]
    omega = path / (total + 0.5)
    assert float(value) == pytest.approx(0.1 * omega * w.numel())
    w.grad = torch.zeros_like(w)
    si.after_backward()
    assert torch.allclose(w.grad, torch.full_like(w, 2 * 0.1 * omega))


def test_gem_projection_is_the_qp_optimum_and_meets_every_constraint():
    rng = np.random.default_rng(0)
    memory = rng.standard_normal((3, 12))
    g = -memory.sum(axis=0) + 0.1 * rng.standard_normal(12)  # violates the constraints
    assert (memory @ g < 0).any()
    z = project_gem(g, memory, margin=0.0, ridge=0.0)  # the paper's eq. 10 exactly: no ridge
    assert (memory @ z >= -1e-9).all()
    # the primal: the closest gradient to g that raises no past task's loss (eq. 10), by a general solver
    primal = minimize(lambda x: 0.5 * np.sum((x - g) ** 2), g, jac=lambda x: x - g, method="SLSQP",
                      constraints=[{"type": "ineq", "fun": lambda x: memory @ x, "jac": lambda x: memory}],
                      options={"ftol": 1e-12, "maxiter": 500})
    np.testing.assert_allclose(z, primal.x, atol=1e-6)
    agreeing = np.array([1.0, 1.0])
    assert project_gem(agreeing, np.eye(2), 0.5) is agreeing  # raises no past loss: stepped as it is


def test_gem_ridge_on_an_ill_conditioned_memory_is_the_released_codes_qp():
    """Nearly collinear and duplicated past-task gradients (M Mᵀ singular to working precision): the projection is
    the ridged dual's optimum (GEM's project2cone2: P = M Mᵀ + 1e-3·I, v ≥ margin) found by a general bounded solver,
    meets every constraint up to the ridge's relaxation (KKT: M z ≥ −ridge·v) and stays bounded."""
    from clbench_plugins.gem.config import GEMConfig

    assert GEMConfig().ridge == 1e-3  # the released code's default eps
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(40), rng.standard_normal(40)
    memory = np.stack([a, a + 1e-9 * b, a, -0.2 * a + 0.05 * b])
    assert np.linalg.cond(memory @ memory.T) > 1e15
    g = -1.5 * a + 0.3 * rng.standard_normal(40)
    assert (memory @ g < 0).any()
    margin, ridge = 0.5, 1e-3
    z = project_gem(g, memory, margin, ridge)
    # the reference: the dual of eq. 11 as the released code poses it, by L-BFGS-B on v ≥ margin
    gram = memory @ memory.T + ridge * np.eye(4)
    lin = memory @ g
    dual = minimize(lambda v: 0.5 * v @ gram @ v + lin @ v, np.full(4, margin), jac=lambda v: gram @ v + lin,
                    method="L-BFGS-B", bounds=[(margin, None)] * 4, options={"ftol": 1e-15, "gtol": 1e-12})
    np.testing.assert_allclose(z, memory.T @ dual.x + g, atol=1e-6)
    v = dual.x
    assert (memory @ z >= -ridge * v - 1e-6).all()  # every constraint, up to the ridge's own slack
    # bounded: ‖z‖² + ridge‖v‖² ≤ ‖g + margin·Mᵀ1‖² + ridge·t·margin² (u = 0 is feasible in the NNLS form)
    w = g + margin * memory.sum(axis=0)
    assert np.linalg.norm(z) <= np.sqrt(w @ w + ridge * 4 * margin**2) + 1e-9
    assert np.linalg.norm(z) < 2 * np.linalg.norm(w)
    # without the ridge the duplicated rows make the dual degenerate: a different (unregularised) step
    assert not np.allclose(project_gem(g, memory, margin, 0.0), z, atol=1e-6)


def test_gem_margin_is_the_dual_lower_bound():
    rng = np.random.default_rng(1)
    memory = rng.standard_normal((2, 6))
    g = -memory[0] * 2
    z = project_gem(g, memory, margin=0.5)
    # z = Mᵀv + g with v ≥ 0.5: solve v back from z and check the bound (M has full row rank)
    v, *_ = np.linalg.lstsq(memory.T, z - g, rcond=None)
    assert (v >= 0.5 - 1e-9).all()


def test_agem_projection_by_hand():
    g, ref = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    out = project_agem(g, ref)  # ⟨g, ref⟩ = −1, ‖ref‖² = 2: g + ref / 2
    assert torch.allclose(out, torch.tensor([0.5, 0.5])) and float(torch.dot(out, ref)) == pytest.approx(0.0)
    same = torch.tensor([-1.0, 2.0])
    assert project_agem(same, ref) is same  # agrees: unchanged


@pytest.mark.parametrize("method", ["si", "gem", "agem", "der", "derpp", "er-ace", "gdumb", "dgr"])
def test_the_new_methods_run_and_resume_to_the_same_numbers(tmp_path, method):
    regs = testing.registry()
    sets = {"train.checkpoint_every_s": [0]}
    [reference] = testing.run(regs, tmp_path / "ref", method, sets=sets)
    killer = testing.KillAfterTask(0)
    regs.pm.register(killer)
    with pytest.raises(KeyboardInterrupt):
        testing.run(regs, tmp_path / "killed", method, sets=sets)
    regs.pm.unregister(killer)
    [resumed] = testing.run(regs, tmp_path / "killed", method, sets=sets)
    assert resumed.status == reference.status == "complete"
    assert resumed.accuracy_matrix == reference.accuracy_matrix


def test_sm_scores_each_task_with_its_own_model(tmp_path):
    [r] = testing.run(testing.registry(), tmp_path, "sm")  # tiny-vector: one head per task (task-incremental)
    a = r.accuracy_matrix
    assert [a[-1][j] for j in range(len(a))] == [a[j][j] for j in range(len(a))]  # nothing forgotten: kept apart
    assert r.metrics["F.Ra"] == 0 and r.metrics["AA"] == pytest.approx(r.metrics["LA"])


# --------------------------------------------------------------------------- the class-incremental scenario
def test_a_class_incremental_model_scores_only_the_labels_seen_so_far():
    from clbench_plugins.mlp.model import MLPConfig, build

    from clbench.data import TaskInfo
    from clbench.model import MASKED, StreamInfo

    digits = tuple(str(d) for d in range(4))
    tasks = (TaskInfo("0-1", digits, classes=("0", "1")), TaskInfo("2-3", digits, classes=("2", "3")))
    model = build(MLPConfig(hidden=(8,)), StreamInfo("s", tasks, "vector", (5,), False))
    x = torch.randn(6, 5)
    model.see_labels({"0", "1"})
    logits = model(x, "0-1")
    assert (logits[:, 2:] == MASKED).all() and (logits[:, :2] != MASKED).all()
    assert set(model.predict(x, "2-3").tolist()) <= {0, 1}  # no task identity: yet only seen digits are answers
    model.see_labels(None)
    assert (model(x, "0-1") != MASKED).all()


def test_split_digits_cil_is_class_incremental_and_skips_the_task_identity_methods(tmp_path):
    from clbench._core.plan import RunRequest, make_plan

    plan = make_plan(testing.registry(), RunRequest(methods="all", streams=["split-digits-cil"], out=tmp_path))
    methods = {c.method for c in plan.cells}
    assert {"seqft", "replay", "der", "er-ace", "gdumb", "gem"} <= methods
    assert not methods & {"packnet", "lps", "sm", "pertask-random"}  # they need the task identity
    [r] = testing.run(testing.registry(), tmp_path / "run", "seqft", stream="split-digits-cil", profile="quick",
                      seeds=[0])
    assert r.scenario == "class-incremental"
    # after the first task only its two digits can be answered: the other tasks' digits score 0
    assert r.accuracy_matrix[0][1:] == [0.0] * 4


def test_der_replays_the_logits_it_stored():
    from clbench_plugins._shared.reservoir import Reservoir

    buffer = Reservoir(3)
    g = torch.Generator().manual_seed(0)
    x, y = torch.arange(10.0).reshape(5, 2), torch.tensor([0, 1, 0, 1, 0])
    logits = torch.arange(10.0).reshape(5, 2) * 10
    buffer.add(x, y, 0, g, logits)
    assert len(buffer) == 3 and buffer.seen == 5
    for slot in range(3):  # each kept example carries its own logits and label, whichever were kept
        row = int((x == buffer.x[slot]).all(dim=1).nonzero())
        assert torch.equal(buffer.logits[slot], logits[row]) and int(buffer.y[slot]) == int(y[row])


def test_er_ace_masks_the_classes_absent_from_the_batch():
    import torch.nn.functional as F
    from clbench_plugins.er_ace.method import asymmetric_ce

    logits, y = torch.tensor([[2.0, 1.0, 5.0], [0.5, 3.0, 4.0]]), torch.tensor([0, 1])
    expected = F.cross_entropy(logits[:, :2], y)  # class 2 is in no example of the batch
    assert float(asymmetric_ce(logits, y)) == pytest.approx(float(expected))


def test_gdumb_memory_is_class_balanced():
    from clbench_plugins.gdumb.method import greedy_balanced

    memory: list[tuple[int, int, int]] = []
    g = torch.Generator().manual_seed(0)
    for i in range(60):  # 40 examples of class 0 first, then 20 of class 1
        greedy_balanced(memory, (0 if i < 40 else 1, 0, i), 10, g)
    counts = [sum(1 for c, _, _ in memory if c == k) for k in (0, 1)]
    assert counts == [5, 5]


def test_icarl_herding_is_greedy_mean_matching_checked_by_brute_force():
    from clbench_plugins.icarl.method import herding

    g = torch.Generator().manual_seed(0)
    feats = torch.nn.functional.normalize(torch.randn(7, 3, generator=g), dim=1)
    chosen = herding(feats, 4)
    mu = feats.mean(dim=0)
    total = torch.zeros(3)
    for k, pick in enumerate(chosen, 1):  # each pick is the remaining row that brings the running mean closest
        left = [i for i in range(7) if i not in chosen[: k - 1]]
        best = min(left, key=lambda i: float(torch.linalg.vector_norm(mu - (total + feats[i]) / k)))
        assert pick == best
        total = total + feats[pick]
    assert len(set(chosen)) == 4


def test_icarl_runs_class_incremental_and_classifies_by_the_nearest_mean(tmp_path):
    [r] = testing.run(testing.registry(), tmp_path, "icarl", stream="tiny-cil")
    assert r.status == "complete" and r.scenario == "class-incremental"
    assert sum(r.report["exemplars_per_class"].values()) <= 200 and set(r.report["exemplars_per_class"]) == {
        "0", "1", "2", "3"}


def test_dgr_replays_generated_samples_labelled_by_the_frozen_previous_solver():
    """Task 1's replay term is (1 − r)·(L(replay) − L(new)) with r = 1/2: the previous generator's samples, labelled
    by the solver as it was when the task began (every earlier head), computed here by hand."""
    from types import SimpleNamespace

    import torch.nn.functional as F
    from clbench_plugins.dgr.config import DGRConfig
    from clbench_plugins.dgr.method import DGR

    from clbench.data import Batch, Split

    model = _tiny_model()  # a linear model with inputs of 2 and a head of 2 labels per task
    data = SimpleNamespace(train=Split(torch.randn(8, 2), torch.zeros(8, dtype=torch.long)))
    stream = SimpleNamespace(name="s", scenario="task-incremental", modality="vector", data=lambda task: data)
    ctx = CellContext(stream=stream, order=["t0", "t1"], train=TrainConfig(), device=torch.device("cpu"), seed=0)
    dgr = DGR(DGRConfig(hidden=4, latent_dim=2), ctx)
    dgr.setup(model)
    dgr.before_task("t1", 1)
    assert dgr.r == 0.5 and dgr.teacher is not model
    solver = {n: p.detach().clone() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the solver moves on; its frozen copy labels the replay
        for p in model.parameters():
            p.add_(3 * torch.randn(p.shape, generator=g))
    batch = Batch(torch.randn(4, 2), torch.tensor([0, 1, 1, 0]), "t1")
    logits = model(batch.x, "t1")
    torch.manual_seed(7)
    fake = dgr.previous.decoder(torch.randn(4, 2))  # what previous.sample draws from the same seed
    w, b = solver["heads.t0.weight"], solver["heads.t0.bias"]
    labels = (fake @ w.T + b).argmax(dim=1)  # the frozen solver's answers on its one earlier head
    replay = F.cross_entropy(model(fake, "t0"), labels)
    expected = 0.5 * (replay - F.cross_entropy(logits, batch.y))
    torch.manual_seed(7)
    term = dgr.loss_terms(batch, logits)["dgr"]
    assert float(term.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    # the generator phase: the VAE's loss on the batch and the previous generator's samples, weighed r and 1 − r
    [_, generator] = dgr.phases("t1", 1)
    dgr.before_phase(generator, "t1", 1)
    assert not generator.task_loss and dgr.parameters(model, generator) == list(dgr.generator.parameters())
    torch.manual_seed(7)
    [(name, own)] = dgr.loss_terms(batch, None).items()
    torch.manual_seed(7)  # the same draws in the same order: the samples, then each loss's latent noise
    fake = dgr.previous.decoder(torch.randn(4, 2))
    by_hand = 0.5 * dgr.generator.loss(batch.x) + 0.5 * dgr.generator.loss(fake)
    assert name == "generator" and own.requires_grad
    assert float(own.detach()) == pytest.approx(float(by_hand.detach()), rel=1e-6)


@pytest.mark.parametrize("stored", ["all", "seen"])
def test_der_stores_every_class_logit_on_a_class_incremental_stream(stored):
    """stored_logits="all": the buffer holds the head's logits of the classes not seen yet too (the paper's unmasked
    network), computed with no label masked; "seen": those are MASKED. Either way the model is masked again after."""
    from types import SimpleNamespace

    from clbench_plugins.der.config import DERConfig
    from clbench_plugins.der.method import DER
    from clbench_plugins.mlp.model import MLPConfig, build

    from clbench.data import Batch, TaskInfo
    from clbench.model import MASKED, StreamInfo

    digits = tuple(str(d) for d in range(4))
    tasks = (TaskInfo("0-1", digits, classes=("0", "1")), TaskInfo("2-3", digits, classes=("2", "3")))
    model = build(MLPConfig(hidden=(8,)), StreamInfo("s", tasks, "vector", (5,), False))
    stream = SimpleNamespace(name="s", modality="vector", scenario="class-incremental", tasks=tasks,
                             task={t.name: t for t in tasks}.__getitem__)
    ctx = CellContext(stream=stream, order=["0-1", "2-3"], train=TrainConfig(), device=torch.device("cpu"), seed=0)
    der = DER(DERConfig(buffer_size=6, stored_logits=stored), ctx)
    der.setup(model)
    model.see_labels({"0", "1"})
    der.before_task("0-1", 0)
    x = torch.randn(6, 5)
    der.loss_terms(Batch(x, torch.tensor([0, 1, 0, 1, 0, 1]), "0-1"), model(x, "0-1"))
    model.see_labels(None)
    raw = model(x, "0-1").detach()
    model.see_labels({"0", "1"})
    order = [int((x == row).all(dim=1).nonzero()) for row in der.buffer.x.flatten(1)]
    assert torch.allclose(der.buffer.logits[:, :2], raw[order, :2])
    if stored == "all":
        assert torch.allclose(der.buffer.logits[:, 2:], raw[order, 2:])
    else:
        assert (der.buffer.logits[:, 2:] == MASKED).all()
    assert (model(x, "0-1")[:, 2:] == MASKED).all()  # masked again


def test_der_logits_at_task_end_are_the_trained_models():
    from types import SimpleNamespace

    from clbench_plugins.der.config import DERConfig
    from clbench_plugins.der.method import DER

    from clbench.data import Batch

    model = _tiny_model()  # a head per task: nothing masked
    stream = SimpleNamespace(name="s", modality="vector", scenario="task-incremental", tasks=model.info.tasks)
    ctx = CellContext(stream=stream, order=["t0", "t1"], train=TrainConfig(), device=torch.device("cpu"), seed=0)
    der = DER(DERConfig(buffer_size=4, logits_at="task_end"), ctx)
    der.setup(model)
    der.before_task("t0", 0)
    x = torch.randn(4, 2)
    der.loss_terms(Batch(x, torch.tensor([0, 1, 0, 1]), "t0"), model(x, "t0"))
    with torch.no_grad():  # the task trains on
        for p in model.parameters():
            p.add_(0.5)
    der.after_task("t0", 0)
    order = [int((x == row).all(dim=1).nonzero()) for row in der.buffer.x]
    assert torch.allclose(der.buffer.logits, model(x, "t0").detach()[order])


# --------------------------------------------------------------------------- joint training's batches
def test_mixed_batches_hold_every_example_once_and_mix_tasks():
    from clbench.data import Split, mixed_batches

    a = Split(torch.arange(0, 20).float().unsqueeze(1), torch.zeros(20, dtype=torch.long))
    b = Split(torch.arange(100, 130).float().unsqueeze(1), torch.ones(30, dtype=torch.long))
    empty = Split(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long))
    got = list(mixed_batches([a, empty, b], 8, "t1", torch.Generator().manual_seed(0)))
    assert [len(x) for x in got] == [8] * 6 + [2] and {x.task for x in got} == {"t1"}
    xs = torch.cat([x.x for x in got]).flatten()
    assert sorted(xs.tolist()) == [*range(0, 20), *range(100, 130)]  # the union, each example once
    for x in got:  # each label is its own example's: 0 below 100, 1 from 100
        assert torch.equal(x.y, (x.x.flatten() >= 100).long())
    assert sum(len(set(x.y.tolist())) == 2 for x in got) >= 4  # batches mix the two tasks
    again = list(mixed_batches([a, empty, b], 8, "t1", torch.Generator().manual_seed(0)))
    assert all(torch.equal(p.x, q.x) for p, q in zip(got, again, strict=True))  # deterministic per generator
    # list inputs (texts) take the same order, example by example
    texts = [Split([f"a{i}" for i in range(20)], a.y), empty, Split([f"b{i}" for i in range(30)], b.y)]
    listed = list(mixed_batches(texts, 8, "t1", torch.Generator().manual_seed(0)))
    as_names = [f"a{int(v)}" if v < 100 else f"b{int(v) - 100}" for v in xs.tolist()]
    assert [s for x in listed for s in x.x] == as_names
    assert torch.equal(torch.cat([x.y for x in listed]), torch.cat([x.y for x in got]))


def _joint_batches(monkeypatch, tmp_path, stream: str, mix: bool = True):
    """The (task, labels) of every training batch of a Joint cell on ``stream``, and its result."""
    from clbench_plugins.joint.method import Joint

    from clbench.model import CLModel

    seen: list[tuple[str, set[int]]] = []
    original = CLModel.training_loss

    def spy(self, x, task, y, need_logits=True):
        seen.append((task, set(y.tolist())))
        return original(self, x, task, y, need_logits)

    monkeypatch.setattr(CLModel, "training_loss", spy)
    monkeypatch.setattr(Joint, "mix_tasks", mix)
    [r] = testing.run(testing.registry(), tmp_path, "joint", stream=stream)
    assert r.status == "complete"
    return seen, r


def test_joint_mixes_tasks_in_a_batch_on_a_class_incremental_stream(monkeypatch, tmp_path):
    # tiny-cil: task t0 holds labels a, b (0, 1) and t1 c, d (2, 3) of one shared head
    seen, _ = _joint_batches(monkeypatch, tmp_path / "mixed", "tiny-cil")
    both = [labels for _, labels in seen if labels & {0, 1} and labels & {2, 3}]
    assert both, "no batch held labels of both tasks"
    seen, _ = _joint_batches(monkeypatch, tmp_path / "per-task", "tiny-cil", mix=False)
    assert not [labels for _, labels in seen if labels & {0, 1} and labels & {2, 3}]  # the old behaviour


def test_joint_keeps_one_task_a_batch_with_a_head_per_task(monkeypatch, tmp_path):
    # tiny-vector is task-incremental: a head per task, each batch to one head; its second task trains both tasks'
    # batches, interleaved, each named by its own task (as before: the same accuracy matrix with mixing off)
    seen, r = _joint_batches(monkeypatch, tmp_path / "til", "tiny-vector")
    assert {task for task, _ in seen} == {"t0", "t1"}
    _, off = _joint_batches(monkeypatch, tmp_path / "til-off", "tiny-vector", mix=False)
    assert r.accuracy_matrix == off.accuracy_matrix
