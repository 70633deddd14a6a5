"""The paper profiles' order-1 cells, planned on a CPU: estimated peak device memory as the presets run them, and as
one batch without accumulation (what the presets did before the scripts' micro-batches), by the memory plan.

    python benchmarks/bench_paper_memory.py

T5-large (fp32) and LLaMA-7B (bf16) are built from their config.json shapes (no weights: the memory plan reads
none), with MiniLM's tokenizer standing in (the texts are longer than the source length, so every example fills
``model.max_length`` whatever the tokenizer). The data is the standard stream's four tasks, 64 examples each. The
figures are upper bounds: value-dependent selections are taken whole on the meta device, and its attention
kernels keep the attention matrix (a GPU's memory-efficient attention does not); the evaluation part is a forward
pass scoring every label (dbpedia's 14), not generation. tests/test_memory.py asserts the cells fit 80 GiB as the
presets run them (on 3 labels a task).

Measured 2026-11-25 (torch 2.13.0+cpu; sizes, so the machine does not matter):

| profile | method | batch | as the presets run it | peak | one batch, no accumulation |
|---|---|---|---|---|---|
| paper-t5 | olora | 64 | 8 micro-batches of 8 | 25.2 GiB | 147.7 GiB |
| paper-t5 | nlora | 48 | 1 micro-batches of 48 + checkpointing | 25.2 GiB | 111.4 GiB |
| paper-llama | olora | 64 | 64 micro-batches of 1 | 74.2 GiB | 303.2 GiB |
| paper-llama | nlora | 48 | 8 micro-batches of 6 | 74.2 GiB | 230.6 GiB |

The "as the presets run it" peaks of a model are all its evaluation's (T5-large 22.5 GiB, LLaMA-7B 61.6 GiB beyond
the weights: a forward of 128 / 16 prompts scoring 14 labels): the training step is smaller. The LLaMA cells fit 80
GiB by 6 GiB; evaluating with ``model.eval=generate`` (the presets') keeps a KV cache instead, which this does not
measure.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from clbench_plugins.cl_benchmark.streams import GROUPS
from clbench_plugins.hf.model import minilm_path
from transformers import AutoTokenizer, LlamaConfig, T5Config

from clbench._core.plan import RunRequest, make_plan
from clbench._exec.local import harness_registry
from clbench._exec.memory import estimate, fmt_bytes

TASKS = {"dbpedia": [f"c{i}" for i in range(14)], "amazon": ["negative", "positive"],
         "yahoo": [f"y{i}" for i in range(10)], "agnews": ["World", "Sports", "Business", "Sci/Tech"]}
CELLS = [("paper-t5", "olora", "t5"), ("paper-t5", "nlora", "t5"), ("paper-llama", "olora", "llama"),
         ("paper-llama", "nlora", "llama")]


def main() -> None:
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
            for split, n in (("train", 64), ("test", 16)):
                rows = [{"sentence": "word " * 700, "label": labels[k % len(labels)]} for k in range(n)]
                (folder / f"{split}.json").write_text(json.dumps(rows))
        print("| profile | method | batch | as the presets run it | peak | one batch, no accumulation |")
        print("|---|---|---|---|---|---|")
        for profile, method, model in CELLS:
            peaks = []
            for sets in ({}, {"train.grad_accum": [1], "model.gradient_checkpointing": [False]}):
                req = RunRequest(profile=profile, methods=method, streams=["standard"], orders=["1"], seeds=[0],
                                 data_dir=str(data), model_path=models[model], out=root / "out",
                                 sets={"train.device": ["cpu"], **sets})
                cell = make_plan(regs, req).cells[0]
                peaks.append((cell, estimate(regs, cell, cpu_fallback=False)))
            (cell, est), (_, whole) = peaks
            ckpt = " + checkpointing" if cell.model_cfg.gradient_checkpointing else ""
            print(f"| {profile} | {method} | {cell.train.batch_size} | {cell.train.grad_accum} micro-batches of "
                  f"{cell.train.micro_batch_size}{ckpt} | {fmt_bytes(est.peak)} | {fmt_bytes(whole.peak)} |")


if __name__ == "__main__":
    main()
