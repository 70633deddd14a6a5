"""The soft-prompt methods (ProgPrompt, L2P) and the models' soft-prompt plumbing.

The plumbing is checked against the Hugging Face models fed by hand: the prompt's vectors and the tokens' embeddings
concatenated, one unpadded sequence at a time. The methods' mechanisms are checked on the testing kit's tiny text
model against what they must be: ProgPrompt's earlier prompts bitwise unchanged, L2P's choice against a brute-force
ranking of the keys.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from clbench_plugins._shared.hf.config import EncoderConfig, GenerativeConfig
from clbench_plugins._shared.hf.model import build_causal_lm, build_encoder, build_t5
from clbench_plugins.l2p.config import L2PConfig
from clbench_plugins.l2p.method import L2P
from clbench_plugins.progprompt.config import ProgPromptConfig
from clbench_plugins.progprompt.method import ProgPrompt
from test_hf_models import AG, INFO, MINILM, SST, TEXTS, needs_minilm, tiny_llama, tiny_t5  # noqa: F401 (fixtures)

from clbench import testing
from clbench._exec.step import train_task
from clbench.config import TrainConfig
from clbench.data import Batch
from clbench.errors import ConfigError
from clbench.method import CellContext
from clbench.model import StreamInfo

P = 3  # soft prompt length in the plumbing tests


def fixed_prompt(dim: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(P, dim, generator=torch.Generator().manual_seed(seed)) * 0.05


def set_prompt(model, prompt: torch.Tensor) -> None:  # noqa: ANN001 - an HF text model
    model.soft_prompt = lambda ids, attention: prompt.unsqueeze(0).expand(ids.shape[0], -1, -1)


# ----------------------------------------------------------------------------------------- plumbing
@needs_minilm
def test_encoder_puts_the_prompt_before_the_sentence_and_not_before_the_label_words() -> None:
    model = build_encoder(EncoderConfig(prompt_header=False), INFO)
    model.eval()
    prompt = fixed_prompt(model.embedding_dim)
    set_prompt(model, prompt)
    with torch.no_grad():
        logits = model(TEXTS, "SST-2")
    tok, backbone = model.tokenizer, model.backbone

    def embed(text: str, prompted: bool) -> torch.Tensor:
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            tokens = backbone.get_input_embeddings()(ids)
            if prompted:
                tokens = torch.cat([prompt.unsqueeze(0), tokens], dim=1)
            hidden = backbone(inputs_embeds=tokens).last_hidden_state[0]
        return F.normalize(hidden.mean(0), dim=0)

    labels = torch.stack([embed(w, prompted=False) for w in SST.labels])
    for i, sentence in enumerate(model.prompts(TEXTS, SST)):
        torch.testing.assert_close(logits[i], 20.0 * labels @ embed(sentence, prompted=True), rtol=1e-4, atol=1e-4)
    model.soft_prompt = lambda ids, attention: None  # no prompt for this input: the plain model, bit for bit
    with torch.no_grad():
        plain = model(TEXTS, "SST-2")
    model.soft_prompt = None
    with torch.no_grad():
        assert torch.equal(plain, model(TEXTS, "SST-2"))
    assert not torch.allclose(plain, logits)


def test_causal_lm_scores_and_generates_after_the_prompt(tiny_llama: str) -> None:  # noqa: F811
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama, eval="rank", max_new_tokens=4), INFO)
    model.eval()
    prompt = fixed_prompt(model.embedding_dim, seed=1) * 20  # the tiny model's embeddings are N(0, 1)
    set_prompt(model, prompt)
    backbone, tok = model.backbone, model.tokenizer
    with torch.no_grad():
        logits = model(TEXTS, "agnews")
        full, _ = model._label_loglik_full(model.prompts(TEXTS, AG), model.label_ids(AG))
    torch.testing.assert_close(full, logits, rtol=1e-4, atol=1e-4)  # the no-cache path agrees

    def embeds(ids: list[int]) -> torch.Tensor:
        return torch.cat([prompt, backbone.get_input_embeddings()(torch.tensor(ids))]).unsqueeze(0)

    for i, ids in enumerate(model.prompt_ids(model.prompts(TEXTS, AG))):
        for j, label in enumerate(model.label_ids(AG)):
            with torch.no_grad():
                logp = torch.log_softmax(backbone(inputs_embeds=embeds(ids + label)).logits[0].float(), -1)
            expected = sum(float(logp[P + len(ids) + k - 1, t]) for k, t in enumerate(label))
            assert float(logits[i, j]) == pytest.approx(expected, abs=1e-4)
        answer: list[int] = []  # greedy by hand, one prompt at a time
        with torch.no_grad():
            for _ in range(4):
                nxt = int(backbone(inputs_embeds=embeds(ids + answer)).logits[0, -1].argmax())
                if nxt == tok.sep_token_id:
                    break
                answer.append(nxt)
        generated = model.generate(model.prompts(TEXTS[i:i + 1], AG))[0]
        assert generated == tok.decode(answer, skip_special_tokens=True).rsplit("Answer:", 1)[-1].strip()


def test_t5_puts_the_prompt_before_the_encoder_input(tiny_t5: str) -> None:  # noqa: F811
    model = build_t5(GenerativeConfig(name_or_path=tiny_t5, eval="rank"), INFO)
    model.eval()
    prompt = fixed_prompt(model.embedding_dim, seed=2) * 20
    set_prompt(model, prompt)
    backbone, tok = model.backbone, model.tokenizer
    with torch.no_grad():
        logits = model(TEXTS, "SST-2")
    for i, text in enumerate(model.prompts(TEXTS, SST)):
        ids = tok(text, return_tensors="pt")["input_ids"]
        for j, label in enumerate(model.label_ids(SST)):
            target = torch.tensor([label])
            with torch.no_grad():
                tokens = torch.cat([prompt.unsqueeze(0), backbone.get_input_embeddings()(ids)], dim=1)
                out = backbone(inputs_embeds=tokens, labels=target)
            logp = torch.log_softmax(out.logits[0].float(), -1)
            assert float(logits[i, j]) == pytest.approx(float(logp.gather(1, target.T).sum()), abs=1e-4)
    assert isinstance(model.generate(model.prompts(TEXTS[:1], SST))[0], str)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_t5"])
def test_a_prompt_chosen_per_input_sees_the_example_alone_on_every_scoring_route(
        arch: str, request: pytest.FixtureRequest) -> None:
    """An L2P-like prompt computed from the input's query: the gold-only LM loss (one row of prompt and target), the
    per-label scores and, for the causal LM, the no-cache route all give the prompt the example alone, so the three
    agree; were the target in the query, the gold-only loss would differ."""
    build = build_causal_lm if arch == "tiny_llama" else build_t5
    model = build(GenerativeConfig(name_or_path=request.getfixturevalue(arch)), INFO)
    model.eval()
    model.soft_prompt = lambda ids, attention: model.query_features(ids, attention).unsqueeze(1) * 5
    y = torch.tensor([3, 0, 2])
    with torch.no_grad():
        logits, full = model.training_loss(TEXTS, "agnews", y, need_logits=True)
        _, gold = model.training_loss(TEXTS, "agnews", y, need_logits=False)
    assert float(gold) == pytest.approx(float(full), rel=1e-5)
    if arch == "tiny_llama":
        with torch.no_grad():
            every, _ = model._label_loglik_full(model.prompts(TEXTS, AG), model.label_ids(AG))
        torch.testing.assert_close(every, logits, rtol=1e-4, atol=1e-4)


def test_query_features_are_the_plain_models_mean_pooled_states_without_dropout(tiny_llama: str) -> None:  # noqa: F811
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama), INFO)
    set_prompt(model, fixed_prompt(model.embedding_dim))  # the query never sees the prompt
    ids = [model.prompt_ids(model.prompts([t], SST))[0] for t in TEXTS]
    width = max(len(i) for i in ids)
    input_ids = torch.tensor([[0] * (width - len(i)) + i for i in ids])  # left-padded, as the model pads
    attention = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    model.train()
    query = model.query_features(input_ids, attention)
    assert model.training  # the mode is put back
    for b, row in enumerate(ids):
        with torch.no_grad():
            hidden = model.backbone.base_model(input_ids=torch.tensor([row])).last_hidden_state[0]
        torch.testing.assert_close(query[b], hidden.mean(0).float(), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------- methods
def tiny_cell(method_cls, config):  # noqa: ANN001, ANN201
    stream = testing.TinyTextStream()
    ctx = CellContext(stream=stream, order=stream.order("1"), train=TrainConfig(epochs=2, batch_size=16, lr=0.05),
                      device=torch.device("cpu"), seed=0)
    torch.manual_seed(0)
    model = testing.TinyTextModel(StreamInfo.of(stream), dim=16)
    method = method_cls(config, ctx)
    method.setup(model)
    return method, model, ctx


def run_task(method, model, ctx, index: int) -> None:  # noqa: ANN001
    method.before_task(ctx.order[index], index)
    train_task(model, method, ctx, index)
    method.after_task(ctx.order[index], index)


def test_progprompt_stacks_new_prompts_before_frozen_ones_that_never_change() -> None:
    method, model, ctx = tiny_cell(ProgPrompt, ProgPromptConfig(length=2, reparam="residual-mlp", bottleneck=8))
    weights = {n: p.clone() for n, p in model.state_dict().items()}
    first, second = ctx.order
    run_task(method, model, ctx, 0)
    p1 = method.frozen[0].clone()
    x = ctx.data(first).test.x[:8]
    with torch.no_grad(), method.evaluating(first):
        after_first = model(x, first)
    method.before_task(second, 1)
    seen: list[torch.Tensor] = []
    inner = method.soft_prompt
    method.soft_prompt = lambda ids, att: seen.append(inner(ids, att)) or seen[-1]  # type: ignore[method-assign]
    model.soft_prompt = method.soft_prompt
    train_task(model, method, ctx, 1)
    method.after_task(second, 1)
    # every training input read [P_2; P_1]: the trainable prompt (through its MLP) first, P_1 as it ended task 1
    assert seen and all(s.shape[1] == 4 and torch.equal(s[0, 2:].detach(), p1) for s in seen)
    assert torch.equal(method.frozen[0], p1)  # bitwise: P_1 never trained again
    assert not torch.equal(method.frozen[1], seen[0][0, :2].detach())  # P_2 did train
    assert all(torch.equal(p, weights[n]) for n, p in model.state_dict().items())  # the model never moves
    with torch.no_grad(), method.evaluating(first):
        assert torch.equal(model(x, first), after_first)  # task 1 reads [P_1] alone, as right after it
        assert torch.equal(method.soft_prompt(*model._ids(["alpha"]))[0], p1)
    with torch.no_grad(), method.evaluating(second):
        got = method.soft_prompt(*model._ids(["alpha"]))[0]
    assert torch.equal(got, torch.cat([method.frozen[1], p1]))


def test_progprompt_scores_a_task_not_trained_yet_as_the_frozen_model() -> None:
    method, model, ctx = tiny_cell(ProgPrompt, ProgPromptConfig(length=2))
    first, second = ctx.order
    x = ctx.data(second).test.x[:8]
    with torch.no_grad():
        model.soft_prompt = None
        plain = model(x, second)
        model.soft_prompt = method.soft_prompt
    run_task(method, model, ctx, 0)
    with torch.no_grad(), method.evaluating(second):
        assert torch.equal(model(x, second), plain)


def test_l2p_chooses_the_top_k_keys_by_cosine_and_its_key_loss_is_as_defined() -> None:
    config = L2PConfig(pool_size=6, length=2, top_k=3, key_lambda=0.5)
    method, model, ctx = tiny_cell(L2P, config)
    texts = ["alpha beta", "gamma omega sigma", "kappa", "theta theta delta"]
    ids, attention = model._ids(texts)
    query = model.query_features(ids, attention)
    model.train()
    prompt = method.soft_prompt(ids, attention)
    keys = method.keys.detach()
    for b in range(len(texts)):  # brute force: every key's cosine, ranked
        cos = [float(F.cosine_similarity(query[b], keys[i], dim=0)) for i in range(6)]
        best = sorted(range(6), key=lambda i: -cos[i])[:3]
        assert torch.equal(prompt[b].detach(), torch.cat([method.prompts[i].detach() for i in best]))
    expected = sum(sum(1 - c for c in sorted(
        (float(F.cosine_similarity(query[b], keys[i], dim=0)) for i in range(6)), reverse=True)[:3])
        for b in range(len(texts))) / len(texts)
    terms = method.loss_terms(None, None)  # type: ignore[arg-type]
    assert float(terms["key"].detach()) == pytest.approx(0.5 * expected, rel=1e-5)
    terms["key"].backward()
    assert method.keys.grad is not None and method.keys.grad.abs().sum() > 0
    assert method.loss_terms(None, None) == {}  # type: ignore[arg-type]  # (one term a forward)


def test_l2p_trains_only_its_pool_and_is_task_agnostic() -> None:
    method, model, ctx = tiny_cell(L2P, L2PConfig(pool_size=4, length=2, top_k=2))
    weights = {n: p.clone() for n, p in model.state_dict().items()}
    before = method.prompts.detach().clone()
    first, second = ctx.order
    run_task(method, model, ctx, 0)
    run_task(method, model, ctx, 1)
    assert not torch.equal(method.prompts.detach(), before)
    assert all(torch.equal(p, weights[n]) for n, p in model.state_dict().items())
    x = ctx.data(first).test.x[:8]
    with torch.no_grad():
        plain = model(x, first)
        with method.evaluating(second):  # the task named changes nothing: the input chooses
            assert torch.equal(model(x, first), plain)


def test_prompt_methods_refuse_a_model_without_soft_prompts_and_bad_settings() -> None:
    from clbench_plugins.mlp.model import MLPConfig, build

    stream = testing.TinyVectorStream()
    ctx = CellContext(stream=stream, order=stream.order("1"), train=TrainConfig(), device=torch.device("cpu"), seed=0)
    with pytest.raises(ConfigError, match="takes no soft prompt"):
        ProgPrompt(ProgPromptConfig(), ctx).setup(build(MLPConfig(hidden=[8]), StreamInfo.of(stream)))
    with pytest.raises(ConfigError, match="top_k=6 is more than pool_size=4"):
        L2PConfig(pool_size=4, top_k=6)


@pytest.mark.parametrize("method", ["progprompt", "l2p"])
def test_prompt_methods_have_no_footprint_and_say_how_they_are_scored(method: str, tmp_path) -> None:  # noqa: ANN001
    (result,) = testing.run(testing.registry(), tmp_path, method, stream="tiny-text")
    assert result.status == "complete"
    assert all(result.metrics.get(name) is None for name in ("OO", "AWOM", "GSR", "ACR"))
    assert "task identity" in result.report["protocol"] if method == "progprompt" else "task-agnostic" in \
        result.report["protocol"]


# ----------------------------------------------------------------------------------------- paper profiles
@pytest.mark.parametrize("profile", ["paper-t5", "paper-llama"])
def test_the_paper_profiles_plan_table_1s_rows_with_their_documented_settings(profile: str, tmp_path) -> None:  # noqa: ANN001
    """Table 1's thirteen rows, each with plugins/_shared/table1_presets.py's settings: the full-fine-tuning rows train the
    model whole at their lr, ProgPrompt runs its T5 command, L2P and LFPT5 the scripts' batch at their lr."""
    from clbench_plugins.cl_benchmark.presets import PAPER_METHODS
    from test_hf_models import fabricated_standard

    from clbench._core.plan import RunRequest, make_plan

    data = fabricated_standard(tmp_path / "data")
    plan = make_plan(testing.registry(), RunRequest(profile=profile, streams=["standard"], orders=["1"], seeds=[0],
                                                    data_dir=str(data), out=tmp_path / "out"))
    cells = {c.method: c for c in plan.cells}
    assert set(cells) == set(PAPER_METHODS) and len(PAPER_METHODS) == 15  # 13 rows + pertask (LoRA) + olora+nlora
    full_lr = 1e-4 if profile == "paper-t5" else 2e-5
    for method in ("seqft", "replay", "ewc", "lwf", "pertaskft"):
        cell = cells[method]
        assert cell.model_config["train_base"] is True, method
        assert (cell.train_config["lr"], cell.train_config["batch_size"], cell.train_config["epochs"]) == (
            full_lr, 64, 1), method
    prog = cells["progprompt"].train_config
    assert (prog["optimizer"], prog["lr"], prog["batch_size"], prog["epochs"]) == ("adamw", 0.3, 8, 10)
    assert cells["progprompt"].method_config["progprompt"]["length"] == 10
    assert cells["l2p"].train_config["lr"] == 0.3 and cells["l2p"].train_config["batch_size"] == 64
    assert cells["lfpt5"].train_config["lr"] == 0.5 and cells["lfpt5"].method_config["lfpt5"]["length"] == 300
    # T5-large recomputes activations: 300 prompt tokens and the pseudo batch's forwards plan past 80 GiB without
    assert cells["lfpt5"].model_config["gradient_checkpointing"] is (profile == "paper-t5")
    assert all(cells[m].model_config["train_base"] is False for m in ("progprompt", "l2p", "lfpt5", "olora", "nlora"))


# ----------------------------------------------------------------------------------------- LFPT5
def test_lfpt5_parses_a_pseudo_sample_only_as_one_input_and_an_exact_label() -> None:
    from clbench_plugins.lfpt5.method import parse

    labels = ("World", "Sports")
    assert parse("a match in Paris __ans__ Sports", labels) == ("a match in Paris", 1)
    assert parse("a match __ans__ sports", labels) is None  # the code's case-sensitive match
    assert parse("a __ans__ b __ans__ World", labels) is None  # exactly two parts
    assert parse("  __ans__ World", labels) is None  # no input
    assert parse("no answer marker", labels) is None


def test_lfpt5_writes_pseudo_samples_with_the_prompt_the_last_task_left_and_keeps_a_few_a_label() -> None:
    from clbench_plugins.lfpt5.config import LFPT5Config
    from clbench_plugins.lfpt5.method import LFPT5

    method, model, ctx = tiny_cell(LFPT5, LFPT5Config(length=3, samples=40, per_class=2))
    first, second = ctx.order
    calls: list[tuple[list[str], torch.Tensor, list[str]]] = []
    sample = model.sample

    def recording(prompts, *args):  # noqa: ANN001, ANN202
        texts = sample(prompts, *args)
        calls.append((prompts, method.prompt.detach().clone(), texts))
        return texts

    model.sample = recording  # type: ignore[method-assign]
    run_task(method, model, ctx, 0)
    assert calls == []  # nothing to remember before the first task
    ended_first = method.prompt.detach().clone()
    method.before_task(second, 1)
    [(prompts, prompt_then, texts)] = calls
    assert prompts == [f"classify{first}"] * 40 and torch.equal(prompt_then, ended_first)
    assert torch.equal(method.teacher, ended_first)
    labels = ctx.data(first).info.labels
    parsed = [(t.split("__ans__")[0].strip(), labels.index(t.split("__ans__")[1].strip())) for t in texts
              if t.split("__ans__")[1].strip() in labels]
    assert method.pool and all((x, y) in parsed and t == 0 for t, x, y in method.pool)
    for y in range(len(labels)):  # per label: every one found, or per_class of them
        found = sum(1 for _, label in parsed if label == y)
        assert sum(1 for _, _, label in method.pool if label == y) == min(2, found)
    train_task(model, method, ctx, 1)
    assert torch.equal(method.teacher, ended_first)  # the teacher never trains
    assert not torch.equal(method.prompt.detach(), ended_first)  # the one prompt goes on training


def test_lfpt5_loss_terms_are_the_stated_weights_of_losses_computed_another_way() -> None:
    from clbench_plugins.lfpt5.config import LFPT5Config
    from clbench_plugins.lfpt5.method import LFPT5

    config = LFPT5Config(length=3, samples=40, lm_lambda=0.25, kd_lambda=0.1)
    method, model, ctx = tiny_cell(LFPT5, config)
    first, second = ctx.order
    run_task(method, model, ctx, 0)
    method.before_task(second, 1)
    with torch.no_grad():
        method.prompt.add_(0.3)  # the student has moved away from the teacher
    data = ctx.data(second).train
    batch = Batch(data.x[:6], data.y[:6], second)
    torch.manual_seed(7)
    terms = method.loss_terms(batch, None)
    torch.manual_seed(7)
    pick = torch.randint(len(method.pool), (min(6, len(method.pool)),)).tolist()
    rows = [method.pool[i] for i in pick]
    labels2, labels1 = ctx.data(second).info.labels, ctx.data(first).info.labels
    lm = model.generation_loss([f"classify{second}"] * 6,
                               [f"{x} __ans__ {labels2[int(y)]}" for x, y in zip(batch.x, batch.y, strict=True)])
    assert float(terms["lm"].detach()) == pytest.approx(0.25 * float(lm.detach()), rel=1e-6)
    x, y = [r[1] for r in rows], torch.tensor([r[2] for r in rows])  # every pseudo sample is of task 1 here
    student = model(x, first)
    assert float(terms["pseudo"].detach()) == pytest.approx(float(F.cross_entropy(student, y).detach()), rel=1e-6)
    pseudo_lm = model.generation_loss([f"classify{first}"] * len(x),
                                      [f"{t} __ans__ {labels1[label]}" for t, label in zip(x, y.tolist(), strict=True)])
    assert float(terms["pseudo_lm"].detach()) == pytest.approx(0.25 * float(pseudo_lm.detach()), rel=1e-6)
    with torch.no_grad():
        live = method.prompt.detach().clone()
        method.prompt.copy_(method.teacher)
        teacher = model(x, first)
        method.prompt.copy_(live)
    p, q = teacher.softmax(-1), student.detach().softmax(-1)
    kl = float((p * (p.log() - q.log())).sum())  # KL(teacher ‖ student), summed over the pseudo samples
    assert kl > 0 and float(terms["kd"].detach()) == pytest.approx(0.1 * kl, rel=1e-4)
    total = sum(terms.values())
    total.backward()
    assert method.prompt.grad is not None and method.prompt.grad.abs().sum() > 0


def test_generative_models_sample_after_the_prompt_and_score_any_text(tiny_llama: str) -> None:  # noqa: F811
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama), INFO)
    model.eval()
    prompt = fixed_prompt(model.embedding_dim, seed=3) * 20
    set_prompt(model, prompt)
    backbone, tok = model.backbone, model.tokenizer
    ids = tok("classifyagnews", add_special_tokens=True)["input_ids"]
    target = tok("a goal in extra time __ans__ Sports", add_special_tokens=False)["input_ids"] + [tok.sep_token_id]
    embeds = torch.cat([prompt, backbone.get_input_embeddings()(torch.tensor(ids + target))]).unsqueeze(0)
    labels = torch.tensor([[-100] * (P + len(ids)) + target])
    with torch.no_grad():
        expected = backbone(inputs_embeds=embeds, labels=labels).loss  # HF's mean cross-entropy over the target
        got = model.generation_loss(["classifyagnews"], ["a goal in extra time __ans__ Sports"])
    assert float(got) == pytest.approx(float(expected), rel=1e-5)
    torch.manual_seed(0)
    texts = model.sample(["classifyagnews"] * 3, 5, 64, 2.5)
    torch.manual_seed(0)
    with torch.no_grad():
        out = backbone.generate(inputs_embeds=embeds[:, : P + len(ids)].expand(3, -1, -1),
                                attention_mask=torch.ones(3, P + len(ids), dtype=torch.long), do_sample=True,
                                top_k=64, num_beams=1, repetition_penalty=2.5, max_new_tokens=5,
                                pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id)
    assert texts == [t.strip() for t in tok.batch_decode(out, skip_special_tokens=True)]
