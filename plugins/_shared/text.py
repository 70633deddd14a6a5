"""Text generation and its scoring for streams that evaluate free-form answers (``capability-chain``, ``prompts``)."""

from __future__ import annotations

from collections.abc import Sequence

from clbench.model import CLModel


def rouge1(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Mean ROUGE-1 F1 × 100 (rouge_score, Porter stemming as in HF ``evaluate``'s rouge); offline."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=True)
    scores = [scorer.score(ref, pred)["rouge1"].fmeasure for pred, ref in zip(predictions, references, strict=True)]
    return 100.0 * sum(scores) / max(len(scores), 1)


def greedy(model: CLModel, prompts: list[str], batch_size: int, max_new_tokens: int) -> list[str]:
    """Greedy continuations of raw prompts (no clbench prompt template) by a model with ``backbone`` and
    ``tokenizer`` (``causal-lm-sft``), new tokens only, stripped, in the order of ``prompts``.

    Batches hold prompts of similar token counts (sorted by length, then put back in order): a batch pads every
    prompt to its longest, so mixing a 20-token prompt with a 1000-token one pays 1000 tokens of KV cache and
    attention for each."""
    backbone, tok = model.backbone, model.tokenizer  # type: ignore[attr-defined]
    device = next(backbone.parameters()).device
    side, tok.padding_side = tok.padding_side, "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    lengths = [len(ids) for ids in tok(list(prompts))["input_ids"]]
    order = sorted(range(len(prompts)), key=lambda i: lengths[i])
    out: dict[int, str] = {}
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            # no token_type_ids: a decoder's generate() refuses them, and a BERT-style tokenizer returns them
            enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True,
                      return_token_type_ids=False).to(device)
            gen = backbone.generate(**enc, do_sample=False, num_beams=1, pad_token_id=pad,
                                    max_new_tokens=max_new_tokens)
            out.update(zip(idx, tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True),
                           strict=True))
    finally:
        tok.padding_side = side
    return [out[i].strip() for i in range(len(prompts))]
