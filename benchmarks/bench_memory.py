"""The memory plan's estimate against the peak memory a process measures (``clbench run --dry-run``).

    python benchmarks/bench_memory.py [--hidden 1024 2048 4096] [--methods seqft ewc lwf]

For each MLP width and method, a fresh process builds the registry and loads permuted-digits' data, reads its
resident set (VmRSS), resets the kernel's peak counter (``/proc/self/clear_refs``), then runs the cell's measurement
on the CPU with real tensors (:func:`clbench._exec.memory._measure`: the cell's model, a step of each phase of two
tasks, ``after_task``, an evaluation batch) and reads the peak (VmHWM). Beside it, the meta-device estimate of the
same cell (computed in the same process first). The ratio measured/estimated is what the estimator misses: the
allocator's overhead, Python objects, the CPU kernels' scratch buffers; it tends to 1 as tensors grow. Linux only.

Measured 2026-11-25 (AMD EPYC, 2 vCPUs, torch 2.13.0+cpu), batch 256, permuted-digits order 1, MiB:

| hidden | method | estimate (meta) | counted on real tensors | measured peak RSS growth | measured / estimate |
|---|---|---|---|---|---|
| 1024 | seqft | 17.2 | 17.2 | 31.4 | 1.825 |
| 1024 | ewc | 35.8 | 35.8 | 45.0 | 1.259 |
| 1024 | lwf | 21.5 | 21.5 | 34.3 | 1.597 |
| 2048 | seqft | 66.3 | 66.3 | 92.6 | 1.396 |
| 2048 | ewc | 135.5 | 135.5 | 144.8 | 1.069 |
| 2048 | lwf | 82.9 | 82.9 | 99.0 | 1.194 |
| 4096 | seqft | 260.6 | 260.6 | 310.0 | 1.190 |
| 4096 | ewc | 526.8 | 526.8 | 544.3 | 1.033 |
| 4096 | lwf | 325.8 | 325.8 | 366.5 | 1.125 |

The meta estimate equals the bytes of tensors alive on real tensors exactly (tests/test_memory.py asserts it). The
process holds 9–49 MiB more at its peak, growing with the width (not with the state: EWC's three extra copies add
nothing to the gap): the CPU GEMM's packing buffers and the allocator, which a GPU replaces by cuBLAS's workspace
and the caching allocator's block rounding. Read an estimate as a lower bound that is within 3–20 % from ~100 MiB
of tensors up, and leave a margin under ``--device-memory``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

CHILD = r"""
import json, sys, torch
from pathlib import Path
from clbench._exec.local import harness_registry
from clbench._core.plan import RunRequest, make_plan
from clbench._exec import memory
from clbench._exec.session import build_stream

hidden, method = int(sys.argv[1]), sys.argv[2]
regs = harness_registry()
req = RunRequest(methods=method, streams=["permuted-digits"], orders=["1"], seeds=[0], out=Path("unused"),
                 sets={"model.hidden": [[hidden, hidden]], "train.batch_size": [256]})
cell = make_plan(regs, req).cells[0]
est = memory.estimate(regs, cell)
stream = build_stream(regs, cell)
for t in stream.order(cell.order)[:2]:
    stream.data(t)

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)

Path("/proc/self/clear_refs").write_text("5")
before = status("VmRSS")
_, counted, _, _ = memory._measure(regs, cell, torch.device("cpu"))
peak = status("VmHWM")
print(json.dumps({"estimate": est.peak, "device": est.device, "counted": counted, "measured": peak - before}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--methods", nargs="+", default=["seqft", "ewc", "lwf"])
    args = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, torch threads 1; MiB (2^20 bytes)")
    print("| hidden | method | estimate (meta) | counted on real tensors | measured peak RSS growth | measured / estimate |")
    print("|---|---|---|---|---|---|")
    for hidden in args.hidden:
        for method in args.methods:
            out = subprocess.run([sys.executable, "-c", CHILD, str(hidden), method], capture_output=True, text=True,
                                 check=True, env={"OMP_NUM_THREADS": "1", **__import__("os").environ})
            r = json.loads(out.stdout.strip().splitlines()[-1])
            mib = 2**20
            print(f"| {hidden} | {method} | {r['estimate'] / mib:.1f} ({r['device']}) | {r['counted'] / mib:.1f} | "
                  f"{r['measured'] / mib:.1f} | {r['measured'] / r['estimate']:.3f} |")


if __name__ == "__main__":
    main()
