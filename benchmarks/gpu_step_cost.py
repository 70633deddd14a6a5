"""Step cost of a small model on a GPU: the ``paper-lps`` seqft cell on permuted MNIST (784-2000-2000 MLP, one
head per task, Adam 1e-3, batch 128, 1 epoch a task, 10 tasks of 54,000 images: 4,220 steps) run by ``clbench run``
beside bare PyTorch loops doing the same computation in this process, one after the other:

- ``eager-foreach``: the data on the GPU, a shuffled index per epoch, Adam's default (foreach) implementation;
- ``eager-fused``: the same with ``Adam(fused=True)``;
- ``graph``: the same step (forward, backward, fused capturable Adam) captured as one CUDA graph per task and
  replayed; the last, shorter batch of an epoch runs eagerly.

No side syncs with the host inside its loop; each task makes its own optimizer (as clbench does per phase). The
clbench figure is its own training time over its steps (``timings`` of result.json), and the cell's wall time
beside it (evaluation, footprints, metrics and start-up included).

    python benchmarks/gpu_step_cost.py --data-dir DIR_WITH_MNIST_IDX [--out FILE.json] [--clbench-args "..."]
    python benchmarks/gpu_step_cost.py --from-log STEP.LOG --out FILE.json   # the JSON again from what a run printed

Needs a CUDA GPU; prints a table of ms a step and the ratios the GPU issue's goals read (clbench ÷ eager-fused,
clbench ÷ graph).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

TASKS, BATCH, LR, HIDDEN = 10, 128, 1e-3, 2000


def stream_tensors(data_dir: str, device: torch.device, tasks: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every task's training split (clbench's own permuted-mnist stream: the same images and labels), on ``device``."""
    from clbench_plugins.vision_streams.streams import PermutedMNIST, PermutedMNISTConfig

    stream = PermutedMNIST(PermutedMNISTConfig(data_dir=data_dir, tasks=tasks))
    out = []
    for info in stream.tasks:
        split = stream.load(info).train
        out.append((split.x.reshape(len(split.x), -1).to(device), split.y.to(device)))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(device: torch.device) -> tuple[nn.Module, nn.ModuleList]:
    body = nn.Sequential(nn.Linear(784, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU()).to(device)
    heads = nn.ModuleList(nn.Linear(HIDDEN, 10) for _ in range(TASKS)).to(device)  # clbench builds all 10
    return body, heads


def eager(data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device, fused: bool) -> tuple[float, int]:
    torch.manual_seed(0)
    body, heads = build(device)
    steps = 0
    sync(device)
    t0 = time.perf_counter()
    for k, (x, y) in enumerate(data):
        params = [*body.parameters(), *heads[k].parameters()]
        opt = torch.optim.Adam(params, lr=LR, fused=fused, foreach=None if fused else True)
        order = torch.randperm(len(y), device=device)
        for i in range(0, len(y), BATCH):
            idx = order[i:i + BATCH]
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(heads[k](body(x[idx])), y[idx])
            loss.backward()
            opt.step()
            steps += 1
    sync(device)
    return time.perf_counter() - t0, steps


def graphed(data: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> tuple[float, int]:
    torch.manual_seed(0)
    body, heads = build(device)
    steps = 0
    sync(device)
    t0 = time.perf_counter()
    for k, (x, y) in enumerate(data):
        steps += graphed_task(body, heads[k], x, y, device)
    sync(device)
    return time.perf_counter() - t0, steps


def graphed_task(body: nn.Module, head: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> int:
    """One epoch of one task, its full batches replayed from one captured step; returns the steps taken."""
    opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=LR, fused=True, capturable=True)
    idx = torch.zeros(BATCH, dtype=torch.long, device=device)

    def step(index: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.cross_entropy(head(body(x[index])), y[index])
        loss.backward()
        opt.step()
        return loss

    order = torch.randperm(len(y), device=device)
    full = len(y) // BATCH
    # warm-up on a side stream (the capture's requirement): the first full batch, which is a real step
    idx.copy_(order[:BATCH])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(idx)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # records, does not run
        step(idx)
    for i in range(1, full):
        idx.copy_(order[i * BATCH:(i + 1) * BATCH])
        graph.replay()
    if full * BATCH < len(y):
        step(order[full * BATCH:])
    return full + (full * BATCH < len(y))


def clbench_cell(data_dir: str, extra: list[str], runs: Path | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = str(runs or tmp)
        cmd = ["clbench", "run", "--profile", "paper-lps", "--stream", "permuted-mnist", "--methods", "seqft",
               "--seeds", "0", "--data-dir", data_dir, "--out", out, "--no-leaderboard", *extra]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t0
        result = json.loads(next(Path(out).rglob("result.json")).read_text())
    tasks = result["timings"]["tasks"]
    train = sum(t[p]["seconds"] for t in tasks for p in t["phases"])
    steps = sum(t[p]["steps"] for t in tasks for p in t["phases"])
    return {"train_s": train, "steps": steps, "eval_s": sum(t["eval_s"] for t in tasks),
            "cell_s": result["timings"]["total_s"], "command_s": wall, "aa": result["metrics"].get("AA"),
            "device": result["env"].get("device")}


def from_log(text: str) -> dict[str, Any]:
    """The JSON a run writes, rebuilt from the lines it printed (a lease whose files did not all come back)."""
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines()]
    device = next(line.split(", torch ")[0] for line in lines if ", torch " in line)
    torch_version = next(line.split(", torch ")[1] for line in lines if ", torch " in line)
    ms = {m[1]: float(m[2]) for m in (re.match(r"([\w-]+): ([\d.]+) ms a step", line) for line in lines) if m}
    cell = next(re.match(r"clbench cell: ([\d.]+) s \(([\d.]+) s training, ([\d.]+) s evaluation; command ([\d.]+) "
                         r"s\), AA (\S+)", line) for line in lines if line.startswith("clbench cell:"))
    ratios = {m[1]: float(m[2]) for m in (re.match(r"(clbench/[\w-]+|non-training share of the cell): ([\d.]+)", line)
                                          for line in lines) if m}
    return {"device": device, "torch": torch_version, "ms_per_step": ms,
            "cell": {"cell_s": float(cell[1]), "train_s": float(cell[2]), "eval_s": float(cell[3]),
                     "command_s": float(cell[4]), "aa": float(cell[5])},
            "ratios": ratios, "from_log": True}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-log", type=Path, help="rebuild --out from the output of an earlier run")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--clbench-args", default="", help="more arguments for the clbench cell (e.g. --set ...)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tasks", type=int, default=TASKS, help="fewer tasks: a smoke test")
    ap.add_argument("--runs", type=Path, help="keep the clbench cell's result folder here (default: a temp folder)")
    args = ap.parse_args()
    if args.from_log:
        args.out.write_text(json.dumps(from_log(args.from_log.read_text()), indent=1))
        return
    if not args.data_dir:
        ap.error("--data-dir is required")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_step_cost.py: no CUDA GPU here (--device cpu runs the eager loops only, as a smoke test)")
    extra = [*shlex.split(args.clbench_args), "--set", f"stream.tasks={args.tasks}",
             "--set", f"train.device={device.type}"]
    cell = clbench_cell(args.data_dir, extra, args.runs)
    data = stream_tensors(args.data_dir, device, args.tasks)
    eager(data[:1], device, fused=device.type == "cuda")  # warm-up: kernels, cuBLAS handles, allocator
    rows = {"clbench": (cell["train_s"], int(cell["steps"]))}
    loops = {"eager-foreach": lambda: eager(data, device, fused=False)}
    if device.type == "cuda":  # fused Adam and graphs are CUDA's
        loops.update({"eager-fused": lambda: eager(data, device, fused=True), "graph": lambda: graphed(data, device)})
    for name, run in loops.items():
        rows[name] = run()
    ms = {name: 1000 * s / n for name, (s, n) in rows.items()}
    where = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{where}, torch {torch.__version__}")
    for name, (s, n) in rows.items():
        print(f"{name:>14}: {ms[name]:.3f} ms a step ({n} steps, {s:.2f} s)")
    print(f"clbench cell: {cell['cell_s']:.1f} s ({cell['train_s']:.1f} s training, {cell['eval_s']:.1f} s "
          f"evaluation; command {cell['command_s']:.1f} s), AA {cell['aa']}")
    ratios = {f"clbench/{name}": ms["clbench"] / ms[name] for name in loops}
    ratios["non-training share of the cell"] = 1 - cell["train_s"] / cell["cell_s"]
    for k, v in ratios.items():
        print(f"{k}: {v:.3f}")
    if args.out:
        args.out.write_text(json.dumps({"device": where, "torch": torch.__version__, "ms_per_step": ms, "cell": cell,
                                        "ratios": ratios, "clbench_args": extra}, indent=1))

if __name__ == "__main__":
    main()
