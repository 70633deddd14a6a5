"""Write a randomly initialised T5 (T5-large's shapes, or a tiny one) with a given tokenizer, for machines without a hub.

No package ships T5 weights and the GPU machines reach no hub, so the runbook's offline lease measures memory and
speed on T5-large's architecture with random weights (accuracy meaningless) and a WordPiece tokenizer:

    python benchmarks/random_t5.py TOKENIZER_DIR OUT_DIR [--tiny] [--device cuda] [--config-only]
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tokenizer")
    p.add_argument("out")
    p.add_argument("--tiny", action="store_true", help="a 1-layer T5 of width 32 (for a CPU rehearsal)")
    p.add_argument("--device", default="cpu", help="where to initialise the weights (cuda is much faster)")
    p.add_argument("--config-only", action="store_true",
                   help="write config.json and the tokenizer, no weights (enough for clbench run --dry-run)")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    # T5-large (google-t5/t5-large config.json) but for the vocabulary, which is the tokenizer's
    shape = (dict(d_model=32, d_ff=64, d_kv=8, num_layers=1, num_decoder_layers=1, num_heads=4) if args.tiny else
             dict(d_model=1024, d_ff=4096, d_kv=64, num_layers=24, num_decoder_layers=24, num_heads=16))
    config = T5Config(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id,
                      decoder_start_token_id=tok.pad_token_id, **shape)
    tok.save_pretrained(args.out)
    if args.config_only:
        config.save_pretrained(args.out)
        print(f"T5 config and tokenizer -> {args.out}")
        return
    torch.manual_seed(0)
    with torch.device(args.device):
        model = T5ForConditionalGeneration(config)
    model.save_pretrained(args.out)
    print(f"random T5 ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters) -> {args.out}")


if __name__ == "__main__":
    main()
