"""The prompt family on a ViT (L2P, DualPrompt, CODA-Prompt) against its definitions computed by hand: which
prompt an input takes in training and in test, the keys' loss, CODA's weighted components and Gram-Schmidt start,
and what trains (prompts and head) and what does not (the encoder, earlier tasks' components)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from clbench_plugins.coda_prompt.config import CodaPromptConfig
from clbench_plugins.coda_prompt.method import CodaPrompt, gram_schmidt, ortho_penalty
from clbench_plugins.dualprompt.config import DualPromptConfig
from clbench_plugins.dualprompt.method import DualPrompt
from clbench_plugins.vit.model import ViTConfig, build

from clbench import testing
from clbench.config import TrainConfig
from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import CellContext
from clbench.model import StreamInfo

pytestmark = pytest.mark.usefixtures("one_thread")

STREAM = testing.TinyImageStream()
VIT = ViTConfig(weights="", img_size=8, patch_size=4, embed_dim=24, depth=5, num_heads=2, mlp_ratio=1.0)


def _setup(method_cls, config, seed: int = 0):
    torch.manual_seed(seed)
    model = build(VIT, StreamInfo.of(STREAM))
    ctx = CellContext(stream=STREAM, order=["t0", "t1"], train=TrainConfig(head="task"), device=torch.device("cpu"),
                      seed=seed)
    method = method_cls(config, ctx)
    method.setup(model)
    return model, method


def test_gram_schmidt_extends_an_orthonormal_set_to_a_larger_one():
    q, _ = torch.linalg.qr(torch.randn(10, 3))
    rows = torch.cat([q.T, torch.randn(4, 10)])  # 3 orthonormal rows, then 4 to redraw
    out = gram_schmidt(rows, 3, 7, torch.Generator().manual_seed(0))
    assert torch.equal(out[:3], rows[:3])
    torch.testing.assert_close(out @ out.T, torch.eye(7), atol=1e-5, rtol=0)
    assert ortho_penalty(out) < 1e-10 and ortho_penalty(torch.ones(3, 4)) > 1
    # the released code's loop, one projection at a time, with the same draws
    g, looped = torch.Generator().manual_seed(0), rows.clone()
    for k in range(3, 7):
        v = torch.randn(10, generator=g)
        u = v.clone()
        for j in range(k):
            u -= (v @ looped[j]) / (looped[j] @ looped[j]) * looped[j]
        looped[k] = u
    looped[3:] /= looped[3:].norm(dim=1, keepdim=True)
    torch.testing.assert_close(out, looped, atol=1e-6, rtol=0)


def test_coda_prefix_is_the_cosine_weighted_sum_of_the_components_so_far():
    model, coda = _setup(CodaPrompt, CodaPromptConfig(pool_size=8, length=4, blocks=(0, 3)))
    coda.before_task("t1", 1)
    model.eval()
    x = torch.rand(3, 3, 8, 8)
    q = model.query_features(x)
    prefixes = coda.prefix(x)
    assert set(prefixes) == {0, 3}
    for i, b in enumerate((0, 3)):
        K, A, P = coda.K[i][:8], coda.A[i][:8], coda.P[i][:8]  # both tasks' components (4 a task)
        for n in range(3):
            alpha = torch.stack([F.cosine_similarity(q[n] * A[m], K[m], dim=0) for m in range(8)])
            prompt = (alpha[:, None, None] * P).sum(0)
            torch.testing.assert_close(prefixes[b][n, 0], prompt[:2], rtol=1e-4, atol=1e-6)  # keys
            torch.testing.assert_close(prefixes[b][n, 1], prompt[2:], rtol=1e-4, atol=1e-6)  # values
    model.train()
    assert coda.prefix(x)[0].shape == (3, 2, 2, 24)


def test_coda_trains_the_current_tasks_components_alone_and_the_paper_penalty_when_asked():
    model, coda = _setup(CodaPrompt, CodaPromptConfig(pool_size=8, length=4, blocks=(1,), ortho_mu=0.1))
    before = [p.detach().clone() for p in (*coda.K, *coda.A, *coda.P)]
    coda.before_task("t1", 1)  # components 4-7 redrawn orthogonal to 0-3; 0-3 kept
    for b, p in zip(before, (*coda.K, *coda.A, *coda.P), strict=True):
        assert torch.equal(p[:4], b[:4]) and not torch.equal(p[4:], b[4:])
    model.train()
    x, y = torch.rand(4, 3, 8, 8), torch.tensor([2, 3, 2, 3])
    loss = F.cross_entropy(model(x, "t1"), y)
    terms = coda.loss_terms(Batch(x, y, "t1"), None)
    assert set(terms) == {"ortho"} and float(terms["ortho"]) > 0
    (loss + terms["ortho"]).backward()
    for p in (*coda.K, *coda.A, *coda.P):
        assert p.grad[:4].abs().sum() == 0 and p.grad[4:].abs().sum() > 0
    assert all(p.grad is None for p in model.backbone.parameters())  # the encoder is frozen
    with pytest.raises(ConfigError, match="not a multiple"):
        _setup(CodaPrompt, CodaPromptConfig(pool_size=7, length=4, blocks=(1,)))
    with pytest.raises(ConfigError, match="cannot be orthogonal"):
        _setup(CodaPrompt, CodaPromptConfig(pool_size=30, length=4, blocks=(1,)))


def test_dualprompt_trains_the_tasks_e_prompt_and_tests_by_the_nearest_key():
    model, dual = _setup(DualPrompt, DualPromptConfig(pool_size=3, e_length=2, g_length=3))
    dual.before_task("t1", 1)
    assert torch.equal(dual.e[1], dual.e[0])  # started as the previous task's (shared_prompt_pool)
    x = torch.rand(5, 3, 8, 8)
    q = model.query_features(x)
    model.train()
    prefixes = dual.prefix(x)
    assert {b: tuple(p.shape) for b, p in prefixes.items()} == {0: (5, 2, 3, 24), 1: (5, 2, 3, 24),
                                                                2: (5, 2, 2, 24), 3: (5, 2, 2, 24), 4: (5, 2, 2, 24)}
    assert all(torch.equal(prefixes[b + 2][n], dual.e[1, b]) for b in range(3) for n in range(5))
    assert torch.equal(prefixes[0][2], dual.g[0])
    key_loss = dual.loss_terms(Batch(x, torch.zeros(5, dtype=torch.long), "t1"), None)["key"]
    assert float(key_loss) == pytest.approx(float((1 - F.cosine_similarity(q, dual.keys[1][None], dim=1)).mean()))
    model.eval()
    nearest = [int(torch.stack([F.cosine_similarity(q[n], k, dim=0) for k in dual.keys]).argmax()) for n in range(5)]
    tested = dual.prefix(x)
    assert all(torch.equal(tested[2][n], dual.e[nearest[n], 0]) for n in range(5))
    assert not dual.loss_terms(Batch(x, torch.zeros(5, dtype=torch.long), "t1"), None)
    with pytest.raises(ConfigError, match="one E-prompt a task"):
        _setup(DualPrompt, DualPromptConfig(pool_size=1))


def test_l2p_on_a_vit_trains_its_prompts_keys_and_the_head_not_the_encoder():
    from clbench_plugins.l2p.config import L2PConfig
    from clbench_plugins.l2p.method import L2P

    model, l2p = _setup(L2P, L2PConfig(pool_size=4, length=2, top_k=2, init="uniform"))
    names = {id(p) for p in l2p.parameters(model, None)}
    assert names == {id(l2p.prompts), id(l2p.keys), *(id(p) for p in model.heads.parameters())}
    model.train()
    x, y = torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 0, 1])
    loss = F.cross_entropy(model(x, "t0"), y) + l2p.loss_terms(Batch(x, y, "t0"), None)["key"]
    loss.backward()
    assert l2p.prompts.grad.abs().sum() > 0 and l2p.keys.grad.abs().sum() > 0
    assert model.heads["shared"].weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.backbone.parameters())


@pytest.mark.parametrize("method", ["l2p", "dualprompt", "coda-prompt"])
def test_prompt_methods_learn_the_tiny_image_stream(tmp_path, method):
    """A cell on the tiny image stream (each class an image plus noise) and a tiny random ViT, frozen: the prompts
    and the head learn each task well above chance (50 % among its two classes)."""
    sets = {"train.epochs": [15], **({"l2p.init": ["uniform"]} if method == "l2p" else {})}
    (result,) = testing.run(testing.registry(), tmp_path, method, "tiny-image", sets=sets, orders=["1"])
    assert result.status == "complete" and result.config["train"]["head"] == "task"
    first, last = result.accuracy_matrix[0][0], result.accuracy_matrix[-1][-1]
    assert first is not None and last is not None and first > 75 and last > 75, result.accuracy_matrix


def test_paper_prompt_vit_plans_each_row_with_its_codes_settings_and_the_papers_targets(tmp_path):
    """The profile's cells: Split CIFAR-100 and ImageNet-R in [0, 1] on vit-b16, the current task's logits alone in
    training, and each row's released-code settings (the lr scaled by batch / 256 for the Google-derived codes)."""
    from clbench_plugins.seq_vision import standin

    from clbench._core.cells import RunRequest
    from clbench._core.plan import make_plan

    standin.write_cifar(tmp_path, "cifar100", train=1, test=1)
    _, split = standin.write_imagenet_r(tmp_path, classes=200, train=1, test=1)
    regs = testing.registry()
    req = RunRequest(profile="paper-prompt-vit", out=tmp_path / "runs", data_dir=str(tmp_path),
                     sets={"stream.split_file": [str(split)]})
    plan = make_plan(regs, req)
    cells = {(c.stream, c.method): c.resolved() for c in plan.cells if c.seed == 0}
    assert len(plan.cells) == 30 and sorted(cells) == [
        (s, m) for s in ("imagenet-r", "seq-cifar100") for m in ("coda-prompt", "dualprompt", "l2p")]
    for c in plan.cells:
        r = c.resolved()
        assert (c.model, c.order) == ("vit-b16", "1")
        assert (r["stream"]["normalise"], r["train"]["head"], r["train"]["optimizer"]) == (False, "task", "adam")
    l2p, dual, coda = (cells["seq-cifar100", m] for m in ("l2p", "dualprompt", "coda-prompt"))
    assert (l2p["train"]["lr"], l2p["train"]["batch_size"], l2p["train"]["epochs"]) == (0.015, 128, 5)
    assert l2p["methods"]["l2p"] == {"pool_size": 10, "length": 5, "top_k": 5, "key_lambda": 0.1, "init": "uniform"}
    assert (dual["train"]["lr"], dual["train"]["batch_size"], dual["methods"]["dualprompt"]["e_length"]) == (
        0.0225, 192, 5)
    assert (coda["train"]["lr"], coda["train"]["epochs"], coda["methods"]["coda-prompt"]["pool_size"]) == (
        0.001, 20, 100)
    assert l2p["model"]["weights"].endswith("orig_in21k") and coda["model"]["weights"].endswith("in21k_ft_in1k")
    imr = cells["imagenet-r", "dualprompt"]
    assert (imr["train"]["lr"], imr["train"]["epochs"], imr["methods"]["dualprompt"]["e_length"]) == (0.00375, 50, 20)
    targets = {(r["stream"], r["method"]): r["mean"] for r in regs.profiles.get("paper-prompt-vit").targets["rows"]}
    assert targets == {("seq-cifar100", "l2p"): 83.83, ("seq-cifar100", "dualprompt"): 86.51,
                       ("seq-cifar100", "coda-prompt"): 86.25, ("imagenet-r", "l2p"): 61.57,
                       ("imagenet-r", "dualprompt"): 68.13, ("imagenet-r", "coda-prompt"): 75.45}


@pytest.mark.parametrize("method", ["l2p", "coda-prompt"])  # prompt tokens; prefixes
def test_the_memory_plan_of_a_vit_cell_is_its_measurement_on_real_tensors(method, tmp_path):
    """The dry run's meta-device estimate of a prompt cell on the tiny ViT against the same code on real CPU tensors
    (the CPU's attention: the math kernel, planned alike), within the 20 % the vision issue asks."""
    from clbench._core.cells import RunRequest
    from clbench._core.plan import make_plan
    from clbench._exec import memory

    regs = testing.registry()
    sets = {"l2p.init": ["uniform"]} if method == "l2p" else {}
    cell = make_plan(regs, RunRequest(profile="test", methods=method, streams=["tiny-image"], orders=["1"], seeds=[0],
                                      sets=sets, out=tmp_path)).cells[0]
    meta, meta_peak, _, _ = memory._measure(regs, cell, torch.device("meta"), fused_attention=False)
    cpu, cpu_peak, _, _ = memory._measure(regs, cell, torch.device("cpu"))
    assert meta_peak == pytest.approx(cpu_peak, rel=0.2) and meta["method"] == cpu["method"] > 0
