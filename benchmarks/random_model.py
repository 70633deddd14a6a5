"""Write a randomly initialised T5-large or Llama-3-8B-shaped model with a given tokenizer, for machines without a hub.

No package ships T5 or Llama weights and the GPU machines reach no hub, so the runbook's offline lease measures
memory and speed on the papers' architectures with random weights (accuracy meaningless) and a WordPiece tokenizer:

    python benchmarks/random_model.py TOKENIZER_DIR OUT_DIR [--arch t5|llama] [--layers N] [--tiny] [--device cuda]
                                      [--config-only]

``--arch llama`` is Llama-3-8B's config (meta-llama/Meta-Llama-3-8B config.json: width 4096, MLP 14336, 32 heads,
8 key-value heads, vocabulary 128256) with ``--layers`` of its 32 decoder layers (default 2: 1.5 B parameters, which
keep the 8B model's per-weight terms and its largest tensors, the embeddings and the head).
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration


def t5_config(tok, tiny: bool) -> T5Config:
    # T5-large (google-t5/t5-large config.json) but for the vocabulary, which is the tokenizer's
    shape = (dict(d_model=32, d_ff=64, d_kv=8, num_layers=1, num_decoder_layers=1, num_heads=4) if tiny else
             dict(d_model=1024, d_ff=4096, d_kv=64, num_layers=24, num_decoder_layers=24, num_heads=16))
    return T5Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                    decoder_start_token_id=tok.pad_token_id, **shape)


def llama_config(tok, tiny: bool, layers: int) -> LlamaConfig:
    shape = (dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=len(tok)) if tiny else
             dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                  vocab_size=128256))
    return LlamaConfig(num_hidden_layers=layers, rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192,
                       bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id,
                       tie_word_embeddings=False, **shape)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tokenizer")
    p.add_argument("out")
    p.add_argument("--arch", choices=("t5", "llama"), default="t5")
    p.add_argument("--layers", type=int, default=2, help="llama: decoder layers (Llama-3-8B has 32)")
    p.add_argument("--tiny", action="store_true", help="a narrow model (for a CPU rehearsal)")
    p.add_argument("--device", default="cpu", help="where to initialise the weights (cuda is much faster)")
    p.add_argument("--config-only", action="store_true",
                   help="write config.json and the tokenizer, no weights (enough for clbench run --dry-run)")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    config = t5_config(tok, args.tiny) if args.arch == "t5" else llama_config(tok, args.tiny, args.layers)
    tok.save_pretrained(args.out)
    if args.config_only:
        config.save_pretrained(args.out)
        print(f"{args.arch} config and tokenizer -> {args.out}")
        return
    torch.manual_seed(0)
    cls = T5ForConditionalGeneration if args.arch == "t5" else LlamaForCausalLM
    with torch.device(args.device):
        model = cls(config)
    model.save_pretrained(args.out)
    print(f"random {args.arch} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters) -> {args.out}")


if __name__ == "__main__":
    main()
