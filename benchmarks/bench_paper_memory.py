"""The paper profiles' order-1 cells, planned on a CPU: estimated peak device memory as the presets run them, and as
one batch without accumulation (what the presets did before the scripts' micro-batches), by the memory plan.

    python benchmarks/bench_paper_memory.py
    python benchmarks/bench_paper_memory.py --methods seqft,replay,ewc,lwf,pertaskft,progprompt,l2p,lfpt5 --presets-only

T5-large (fp32) and LLaMA-7B (bf16) are built from their config.json shapes (no weights: the memory plan reads
none), with MiniLM's tokenizer standing in (the texts are longer than the source length, so every example fills
``model.max_length`` whatever the tokenizer). The data is the standard stream's four tasks, 64 training and 128 test
examples each (one full evaluation batch). Attention is planned as a GPU's fused kernel and greedy generation as its
KV cache at full length (docs/scale-out.md, "Memory plan"); value-dependent selections would be taken whole (none
here). tests/test_memory.py asserts the cells fit 80 GiB as the presets run them.

The tables below plan one process. Since 2026-11-30 paper-llama runs SeqFT and Replay with ``train.shard=offload``
(benchmarks/plan_full_fine_tuning.py has every full fine-tuning row's plan in one process, sharded and offloaded).

Measured 2026-11-26 (torch 2.13.0+cpu; sizes, so the machine does not matter):

| profile | method | batch | as the presets run it | peak | one batch, no accumulation |
|---|---|---|---|---|---|
| paper-t5 | olora | 64 | 8 micro-batches of 8 | 16.8 GiB | 99.7 GiB |
| paper-t5 | nlora | 48 | 1 micro-batches of 48 + checkpointing | 16.8 GiB | 75.5 GiB |
| paper-llama | olora | 64 | 64 micro-batches of 1 | 17.8 GiB | 208.9 GiB |
| paper-llama | nlora | 48 | 8 micro-batches of 6 | 31.0 GiB | 159.8 GiB |

N-LoRA Table 1's other rows (`--methods seqft,replay,ewc,lwf,pertaskft,progprompt,l2p,lfpt5 --presets-only`,
settings from plugins/_shared/table1_presets.py; measured 2026-11-27):

| profile | method | batch | as the presets run it | peak |
|---|---|---|---|---|
| paper-t5 | seqft | 64 | 8 micro-batches of 8 | 24.9 GiB |
| paper-t5 | replay | 64 | 8 micro-batches of 8 | 49.3 GiB |
| paper-t5 | ewc | 64 | 8 micro-batches of 8 | 30.4 GiB |
| paper-t5 | lwf | 64 | 8 micro-batches of 8 | 35.5 GiB |
| paper-t5 | pertaskft | 64 | 8 micro-batches of 8 | 30.4 GiB |
| paper-t5 | progprompt | 8 | 1 micro-batches of 8 | 17.3 GiB |
| paper-t5 | l2p | 64 | 8 micro-batches of 8 | 17.7 GiB |
| paper-llama | seqft | 64 | 64 micro-batches of 1 + checkpointing | 127.0 GiB |
| paper-llama | replay | 64 | 64 micro-batches of 1 + checkpointing | 127.0 GiB |
| paper-llama | ewc | 64 | 64 micro-batches of 1 + checkpointing | 164.6 GiB |
| paper-llama | lwf | 64 | 64 micro-batches of 1 + checkpointing | 139.5 GiB |
| paper-llama | pertaskft | 64 | 64 micro-batches of 1 + checkpointing | 152.1 GiB |
| paper-llama | progprompt | 8 | 1 micro-batches of 8 | 29.8 GiB |
| paper-llama | l2p | 64 | 64 micro-batches of 1 | 18.0 GiB |
| paper-t5 | lfpt5 | 64 | 8 micro-batches of 8 + checkpointing | 24.9 GiB |
| paper-llama | lfpt5 | 64 | 64 micro-batches of 1 | 37.0 GiB |

(LFPT5 on T5-large without activation checkpointing plans at 104.2 GiB: 300 prompt tokens before 512, and the
pseudo batch's student, LM and teacher forwards.)

Every T5-large row fits 80 GiB. On LLaMA-7B the prompt rows do; full fine-tuning with float32 masters and AdamW's
moments (16 bytes a weight before activations) does not, and EWC (its Fisher pass forms one float32 Fisher on the
device) and PerTaskFT exceed even 141 GiB. The paper's Table 2 runs no such row on LLaMA (O-LoRA and N-LoRA only).

The T5 cells peak in their evaluation (128 prompts of 512 tokens: the cross-attention cache of 24 layers, 14.1 GiB
beyond the weights); the LLaMA cells in training. An H200 measured T5-large cells of this kind at 0.94–1.06× their
plan (docs/scale-out.md, "Measured on a GPU").
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from clbench_plugins._shared.cl_data import GROUPS
from clbench_plugins._shared.hf.model import minilm_path
from transformers import AutoTokenizer, LlamaConfig, T5Config

from clbench._core.plan import RunRequest, make_plan
from clbench._exec.local import harness_registry
from clbench._exec.memory import estimate, fmt_bytes

TASKS = {"dbpedia": [f"c{i}" for i in range(14)], "amazon": ["negative", "positive"],
         "yahoo": [f"y{i}" for i in range(10)], "agnews": ["World", "Sports", "Business", "Sci/Tech"]}
CELLS = [("paper-t5", "olora", "t5"), ("paper-t5", "nlora", "t5"), ("paper-llama", "olora", "llama"),
         ("paper-llama", "nlora", "llama")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", help="comma-separated: these methods' cells of both profiles instead of the four above")
    ap.add_argument("--presets-only", action="store_true", help="leave out the one-batch column")
    args = ap.parse_args()
    cells = CELLS if not args.methods else [(p, m, model) for p, model in (("paper-t5", "t5"), ("paper-llama", "llama"))
                                             for m in args.methods.split(",")]
    regs = harness_registry()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models = {}
        for name, config in (("t5", T5Config(vocab_size=32128, d_model=1024, d_kv=64, d_ff=4096, num_layers=24,
                                             num_heads=16, decoder_start_token_id=0, eos_token_id=1)),
                             ("llama", LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                                   num_hidden_layers=32, num_attention_heads=32))):
            AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True).save_pretrained(root / name)
            config.save_pretrained(root / name)
            models[name] = str(root / name)
        data = root / "CL_Benchmark"
        for task, labels in TASKS.items():
            folder = data / GROUPS[task] / task
            folder.mkdir(parents=True)
            (folder / "labels.json").write_text(json.dumps(labels))
            for split, n in (("train", 64), ("test", 128)):
                rows = [{"sentence": "word " * 700, "label": labels[k % len(labels)]} for k in range(n)]
                (folder / f"{split}.json").write_text(json.dumps(rows))
        print("| profile | method | batch | as the presets run it | peak | one batch, no accumulation |")
        print("|---|---|---|---|---|---|")
        for profile, method, model in cells:
            peaks = []
            whole_batch = {"train.grad_accum": [1], "model.gradient_checkpointing": [False]}
            for sets in ({},) if args.presets_only else ({}, whole_batch):
                req = RunRequest(profile=profile, methods=method, streams=["standard"], orders=["1"], seeds=[0],
                                 data_dir=str(data), model_path=models[model], out=root / "out",
                                 sets={"train.device": ["cpu"], **sets})
                cell = make_plan(regs, req).cells[0]
                peaks.append((cell, estimate(regs, cell, cpu_fallback=False)))
            (cell, est), whole = peaks[0], (fmt_bytes(peaks[1][1].peak) if len(peaks) > 1 else "—")
            ckpt = " + checkpointing" if cell.model_cfg.gradient_checkpointing else ""
            print(f"| {profile} | {method} | {cell.train.batch_size} | {cell.train.grad_accum} micro-batches of "
                  f"{cell.train.micro_batch_size}{ckpt} | {fmt_bytes(est.peak)} | {whole} |", flush=True)


if __name__ == "__main__":
    main()
