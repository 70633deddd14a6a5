"""paper-expander's Llama-3-8B cells planned on a CPU: the memory plan's estimated peak and its parts, planned for a GPU
(``train.device=cuda``: the footprint baseline on the host, cuBLAS's workspace counted).

    python benchmarks/bench_expander_memory.py [--methods seqft,expander-ewc,lota] [--orders gsm8k-sql,chain4]
        [--layers N] [--set train.fp32_masters=false]

Llama-3-8B is built from its config.json shapes (no weights), with MiniLM's tokenizer standing in; the data is the
capability chain's gsm8k-sql and chain4 orders, 16 pairs a task, every text longer than ``model.max_length`` (1024). The masked
methods' masks follow from values, so on the meta device none is drawn and their selections are taken whole: their
optimizer state and masked copies are planned dense, an upper bound (said in the notes), less what the masks at the
preset's density leave out (``memory.whole_selection_excess``, checked against real masks on the CPU in
tests/test_memory.py). The evaluation is lm-eval's and ROUGE's own (not planned).

The tables below plan one process. Since 2026-11-30 the profile runs SeqFT with ``train.shard=offload`` (its
masters, gradients and state in host memory: benchmarks/plan_full_fine_tuning.py); ``--set train.shard=off`` plans it
as below.

Measured 2026-11-27 (torch 2.13.0+cpu; sizes, so the machine does not matter; planning on AMD EPYC, 2 vCPUs, 0.6 GB
of host memory at most), with the profile's ``train.offload_state`` (EWC's and Expander-EWC's Fisher in host memory,
Expander-EWC's on the device at the task's masks only; LoTA's starting weights on the host). Each step of a phase is
planned twice (the second with the optimizer's state: the steady state). Masked methods' masks are counted at the
preset's 10 % density by the plan itself (``memory._masks_at_density``); their other terms are the whole selections'
bound. ``python benchmarks/bench_expander_memory.py --methods seqft,ewc,lota,expander-ewc``:

| method | order | peak | weights | gradients | optimizer | method | activations | planned in |
|---|---|---|---|---|---|---|---|---|
| seqft | gsm8k-sql | 94.2 GiB | 15.0 GiB | 15.0 GiB | 59.8 GiB | 0 B | 961.9 MiB | 10 s |
| ewc | gsm8k-sql | 104.8 GiB | 15.0 GiB | 15.0 GiB | 59.8 GiB | 8 B | 15.0 GiB | 27 s |
| lota | gsm8k-sql | 91.3 GiB | 15.0 GiB | 14.0 GiB | 56.9 GiB | 7.0 GiB | 1.9 GiB | 17 s |
| expander-ewc | gsm8k-sql | 69.8 GiB | 15.0 GiB | 14.0 GiB | 112.8 GiB | 7.0 GiB | 29.9 GiB | 30 s |
| seqft, ewc, lota | chain4 | as gsm8k-sql | | | | | | |
| expander-ewc | chain4 | 81.0 GiB | 15.0 GiB | 14.0 GiB | 112.8 GiB | 7.0 GiB | 29.9 GiB | 28 s |

With float32 masters (the default), a bf16 weight that trains whole carries its master and RMSProp's float32 square
average: 8 bytes a weight (what DeepSpeed's bf16 optimizer keeps too). SeqFT, EWC and LoTA (whose calibration phase
trains every weight) need an H200 (140.4 GiB as torch reports it); Expander-EWC's masters hold the masks' union only
(40 % of its masked weights by chain4's fourth task, 1.6 GiB more a task) and fit 80 GiB for two tasks, not chain4's
four.

Without float32 masters, the paper's card (``--set train.fp32_masters=false``), the same command:

| method | order | peak | weights | gradients | optimizer | method | activations | planned in |
|---|---|---|---|---|---|---|---|---|
| seqft | gsm8k-sql, chain4 | 45.9 GiB | 15.0 GiB | 15.0 GiB | 15.0 GiB | 0 B | 961.9 MiB | 10 s |
| ewc | gsm8k-sql, chain4 | 74.9 GiB | 15.0 GiB | 15.0 GiB | 15.0 GiB | 8 B | 29.9 GiB | 26 s |
| lota | gsm8k-sql, chain4 | 46.0 GiB | 15.0 GiB | 14.0 GiB | 28.9 GiB | 7.0 GiB | 1.9 GiB | 14 s |
| expander-ewc | gsm8k-sql, chain4 | 54.5 GiB | 15.0 GiB | 14.0 GiB | 56.9 GiB | 7.0 GiB | 29.9 GiB | 30 s |

RMSProp's square average is bf16 (2 bytes a weight) and no master exists, so no state grows with the tasks. EWC's
activations column is its Fisher pass after a task, which forms one float32 Fisher of every weight on the device
before it leaves (28 GiB). Every cell fits one 80 GiB GPU (tests/test_memory.py asserts it).

Before this session's changes (2026-11-26, float32 masters, everything on the device, one step a phase planned):
SeqFT 93.7 GiB; Expander-EWC 118.7 GiB (gsm8k-sql) and 129.9 GiB (chain4), planned in 7 minutes each with its
expander masks drawn on the host; EWC not planned; LoTA not estimable on the meta device.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from clbench_plugins._shared.hf.model import minilm_path
from transformers import AutoTokenizer, LlamaConfig

from clbench._core.plan import RunRequest, make_plan
from clbench._exec.local import harness_registry
from clbench._exec.memory import TERMS, estimate, fmt_bytes
from clbench.config import parse_sets

LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=500000.0)
LONG = "word " * 1200


# one long row a task, in each task's own fields (the capability chain's readers, plugins/capability_chain/streams.py)
ROWS = {"gsm8k": {"question": LONG, "answer": LONG},
        "sql": {"context": LONG, "question": "q", "answer": LONG},
        "instruct": {"prompt": LONG, "chosen": LONG},
        "arc_c": {"question": LONG, "choices": {"label": ["A", "B"], "text": [LONG, "b"]}, "answerKey": "A"},
        "samsum": {"dialogue": LONG, "summary": LONG}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="seqft,expander-ewc")
    p.add_argument("--orders", default="gsm8k-sql,chain4")
    p.add_argument("--layers", type=int, default=LLAMA3_8B["num_hidden_layers"],
                   help="decoder layers (32: Llama-3-8B; fewer plans faster, for a look at the parts)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a setting of every cell, as clbench run --set (train.fp32_masters=false, train.offload_state=true)")
    args = p.parse_args()
    extra = parse_sets(args.sets)
    regs = harness_registry()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = root / "llama-3-8b"
        AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True).save_pretrained(model)
        LlamaConfig(**{**LLAMA3_8B, "num_hidden_layers": args.layers}).save_pretrained(model)
        for task, row in ROWS.items():
            (root / "data" / task).mkdir(parents=True)
            (root / "data" / task / "train.jsonl").write_text("\n".join(json.dumps(row) for _ in range(16)))
        print("| method | order | peak | " + " | ".join(TERMS) + " | planned in | notes |")
        print("|---|---|---|" + "---|" * len(TERMS) + "---|---|")
        for order in args.orders.split(","):
            for method in args.methods.split(","):
                # chain4 starts with the instruct task, whose win rate needs a judge: named, never called by the plan
                req = RunRequest(profile="paper-expander", methods=method, streams=["capability-chain"],
                                 orders=[order], seeds=[0], model_path=str(model), out=root / "out",
                                 sets={"stream.data_dir": [str(root / "data")], "train.device": ["cuda"],
                                       "stream.judge": ["json:dumps"], **extra})
                cell = make_plan(regs, req).cells[0]
                start = time.perf_counter()
                try:
                    est = estimate(regs, cell, cpu_fallback=False)
                except Exception as exc:  # noqa: BLE001 - a method the meta device cannot run (LoTA): said, not hidden
                    print(f"| {method} | {order} | not estimated | " + " | ".join("" for _ in TERMS)
                          + f" | | {exc} |", flush=True)
                    continue
                print(f"| {method} | {order} | {fmt_bytes(est.peak)} | "
                      + " | ".join(fmt_bytes(est.terms[t]) for t in TERMS)
                      + f" | {time.perf_counter() - start:.0f} s | {'; '.join(est.notes)} |", flush=True)


if __name__ == "__main__":
    main()
