"""``causal-lm-sft``: a causal LM trained by supervised fine-tuning on (prompt, response) pairs.

The capability-chain tasks have free-form targets (a GSM8K solution, an SQL query, a summary), not a
label set, so this model's ``forward`` takes a batch of (prompt, response) pairs and returns each
pair's summed response-token log-likelihood (shape ``(B, 1)``); ``task_loss`` is the usual SFT loss,
the negative log-likelihood per response token (prompt tokens masked out, an EOS appended to the
response). Loading, freezing, LoRA targets and dtypes are the ``causal-lm`` plugin's
(:mod:`clbench_plugins._shared.hf`); evaluation is the stream's (lm-eval, ROUGE, refusal rate, judge).
"""

from __future__ import annotations

from typing import Any

import torch
from clbench_plugins._shared.hf.config import GenerativeConfig
from clbench_plugins._shared.hf.model import CausalLMModel, build_causal_lm, pad_rows, token_logprobs
from torch import Tensor

from clbench.errors import DataError
from clbench.model import StreamInfo


class SFTCausalLM(CausalLMModel):
    def pair_ids(self, pairs: list[tuple[str, str]]) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids of prompt + response + EOS (cut to max_length, response kept first) and the targets."""
        tok = self.tokenizer
        eos = [] if self.eos_id is None else [self.eos_id]
        rows, targets = [], []
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise DataError(f"causal-lm-sft trains on (prompt, response) pairs, got {type(pair).__name__}")
            prompt, response = pair
            p = list(tok(prompt, add_special_tokens=True)["input_ids"])
            r = list(tok(response, add_special_tokens=False)["input_ids"]) + eos
            r = r[: self.config.max_length - 1]
            p = p[-(self.config.max_length - len(r)):]  # keep the prompt's end next to the response
            rows.append(p + r)
            targets.append([-100] * len(p) + r)
        return rows, targets

    def forward(self, x: list[Any], task: str) -> Tensor:
        rows, targets = self.pair_ids(list(x))
        pad = int(self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id or 0)
        ids = pad_rows(rows, pad).to(self.device)
        attention = pad_rows([[1] * len(r) for r in rows], 0).to(self.device)
        tgt = pad_rows(targets, -100).to(self.device)
        if self.training:
            self.tokens_seen += sum(len(r) for r in rows)  # attention's sum, counted on the host: no device sync
        logits = self.backbone(input_ids=ids, attention_mask=attention).logits
        lp = token_logprobs(logits[:, :-1], tgt[:, 1:])  # next-token prediction
        self._last_lengths = (tgt[:, 1:] != -100).sum(-1)
        return lp.sum(-1, keepdim=True)

    def task_loss(self, logits: Tensor, y: Tensor) -> Tensor:
        assert self._last_lengths is not None
        return -logits.sum() / self._last_lengths.sum().clamp(min=1)

    @torch.no_grad()
    def predict(self, x: Any, task: str) -> Tensor:
        raise DataError("causal-lm-sft tasks are evaluated by their stream (lm-eval, ROUGE, refusal rate, judge)")


def build_sft(config: GenerativeConfig, info: StreamInfo) -> SFTCausalLM:
    base = build_causal_lm(config, info)
    return SFTCausalLM(config, info, base.backbone, base.tokenizer)
