"""The full fine-tuning rows of ``paper-llama`` (LLaMA-7B) and ``paper-expander`` (Llama-3-8B) planned for 80 GiB
cards: each row's peak device memory in one process, per rank sharded over N = 2, 4, 8 (``train.shard=full``), and
offloaded on one card (``train.shard=offload``: the float32 shards, gradients and optimizer state in host memory),
with the host memory that takes.

    python benchmarks/plan_full_fine_tuning.py [--layers N]

The models are built from their config.json shapes (no weights) on the meta device, MiniLM's tokenizer standing in;
every text is longer than the model's source length. Sizes only, so the machine does not matter. A method that reads
whole weights has no sharded form (``ShardingSpec``): its sharded and offloaded columns read "refused", as
``clbench run`` refuses them before a cell starts. The profile column says how the profile runs the row (its
``rows``).

Measured 2026-11-30 (torch 2.13.0+cpu; sizes, so the machine does not matter; 3 min 26 s on one AMD EPYC core),
``python benchmarks/plan_full_fine_tuning.py``:

| profile | method | as the profile runs it | one process | N=2 | N=4 | N=8 | offloaded, one card | host (offloaded) |
|---|---|---|---|---|---|---|---|---|
| paper-llama | seqft | train.shard=offload | 101.9 GiB (over 80 GiB) | 52.2 GiB | 27.1 GiB | 25.1 GiB | 25.1 GiB | 100.4 GiB |
| paper-llama | replay | train.shard=offload | 101.9 GiB (over 80 GiB) | 52.2 GiB | 27.1 GiB | 25.1 GiB | 25.1 GiB | 100.4 GiB |
| paper-llama | ewc | train.shard=off | 101.9 GiB (over 80 GiB) | refused | refused | refused | refused | - |
| paper-llama | lwf | train.shard=off | 114.5 GiB (over 80 GiB) | refused | refused | refused | refused | - |
| paper-llama | pertaskft | train.shard=off | 101.9 GiB (over 80 GiB) | refused | refused | refused | refused | - |
| paper-expander | seqft | train.shard=offload | 94.2 GiB (over 80 GiB) | 51.3 GiB | 29.9 GiB | 29.9 GiB | 29.9 GiB | 89.7 GiB |
| paper-expander | lota | train.shard=off | 91.3 GiB (over 80 GiB) | refused | refused | refused | refused | - |

Where a sharded or offloaded peak stops falling with N (LLaMA-7B at N = 8 and offloaded, Llama-3-8B from N = 4), it is
the whole model as a rank builds it on its device, cast to float32, before it is sharded (the plan's note says so);
what the sharded step itself needs is below it. EWC keeps its Fisher and
anchor in host memory (``train.offload_state``, the profile's), so its one-process peak is SeqFT's; LwF adds its
teacher's copy. The rows refused sharded run in one process on a card above their peak (an H200's 141 GiB).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from clbench_plugins._shared.cl_data import GROUPS
from clbench_plugins._shared.hf.model import minilm_path
from transformers import AutoTokenizer, LlamaConfig

from clbench._core.plan import RunRequest, make_plan
from clbench._exec.local import harness_registry
from clbench._exec.memory import estimate, fmt_bytes

LLAMA_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                num_attention_heads=32)
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0)
LONG = "word " * 1200
# the standard stream's four tasks and a label each (its reader takes every label the labels file names)
STANDARD = {"dbpedia": "Company", "amazon": "positive", "yahoo": "Sports", "agnews": "World"}
CHAIN = {"gsm8k": {"question": LONG, "answer": LONG}, "sql": {"context": LONG, "question": "q", "answer": LONG}}
ROWS = {"paper-llama": ("seqft", "replay", "ewc", "lwf", "pertaskft"), "paper-expander": ("seqft", "lota")}


def _model(folder: Path, config: dict, layers: int) -> str:
    AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True).save_pretrained(folder)
    LlamaConfig(**{**config, "num_hidden_layers": layers}).save_pretrained(folder)
    return str(folder)


def _data(root: Path) -> tuple[str, str]:
    """A CL_Benchmark folder with the standard stream's tasks, and a capability-chain folder with gsm8k and sql."""
    for task, label in STANDARD.items():
        folder = root / "CL_Benchmark" / GROUPS[task] / task
        folder.mkdir(parents=True)
        (folder / "labels.json").write_text(json.dumps([label]))
        for split, n in (("train", 64), ("test", 128)):  # test: one full evaluation batch (LLaMA-7B's: 128)
            (folder / f"{split}.json").write_text(json.dumps([{"sentence": LONG, "label": label}] * n))
    for task, row in CHAIN.items():
        (root / "chain" / task).mkdir(parents=True)
        (root / "chain" / task / "train.jsonl").write_text("\n".join(json.dumps(row) for _ in range(16)))
    return str(root / "CL_Benchmark"), str(root / "chain")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=32, help="decoder layers (32: both models; fewer plans faster)")
    args = p.parse_args()
    regs = harness_registry()
    limit = 80 * 2**30
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        standard, chain = _data(root)
        models = {"paper-llama": _model(root / "llama-7b", LLAMA_7B, args.layers),
                  "paper-expander": _model(root / "llama-3-8b", LLAMA3_8B, args.layers)}
        print("| profile | method | as the profile runs it | one process | N=2 | N=4 | N=8 | offloaded, one card | host "
              "(offloaded) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for profile, methods in ROWS.items():
            for method in methods:
                stream, sets = (
                    ("standard", {"stream.data_dir": [standard]})
                    if profile == "paper-llama"
                    else ("capability-chain", {"stream.data_dir": [chain]})
                )

                def cell(shard: str, profile=profile, method=method, stream=stream, sets=sets):
                    req = RunRequest(profile=profile, methods=method, streams=[stream],
                                     orders=["1" if profile == "paper-llama" else "gsm8k-sql"], seeds=[0],
                                     model_path=models[profile], out=root / "out",
                                     sets={**sets, "train.device": ["cuda"], **({"train.shard": [shard]} if shard else {})})
                    return make_plan(regs, req).cells[0]

                as_run = cell("").train.shard
                one = estimate(regs, cell("off"), cpu_fallback=False)
                shardable = regs.methods.get(method).shardable

                def fits(n: int) -> str:
                    return f"{fmt_bytes(n)}{'' if n <= limit else ' (over 80 GiB)'}"

                ranks = [
                    fits(estimate(regs, dataclasses.replace(cell("full"), nproc=n), cpu_fallback=False).peak)
                    if shardable else "refused"
                    for n in (2, 4, 8)
                ]
                offloaded = estimate(regs, cell("offload"), cpu_fallback=False) if shardable else None
                print(f"| {profile} | {method} | train.shard={as_run} | {fits(one.peak)} | " + " | ".join(ranks)
                      + f" | {fits(offloaded.peak) if offloaded else 'refused'} | "
                      f"{fmt_bytes(offloaded.host) if offloaded else '-'} |", flush=True)


if __name__ == "__main__":
    main()
