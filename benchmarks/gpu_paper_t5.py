"""GPU runbook: the N-LoRA paper's T5-large order-1 cells of N-LoRA and O-LoRA, and their numbers beside the paper's.

Runs exactly the cells of

    clbench run --profile paper-t5 --stream standard --orders 1 --seeds 0 --methods nlora,olora

(planned by ``clbench._core.plan.make_plan``, so the stream's and the methods' presets give every hyperparameter; nothing
is retyped here), then prints one table per method: AA (the mean over tasks of the last row, from the result),
training tokens/s and peak GPU memory (from the result's timings), wall time, beside N-LoRA's Table 1 (order 1) and,
for O-LoRA, the output stored in the released O-LoRA repository.

    python benchmarks/gpu_paper_t5.py --data-dir /data/CL_Benchmark --model-path /models/t5-large
    python benchmarks/gpu_paper_t5.py --dry-run                     # the cells and their settings (no GPU, no data)
    python benchmarks/gpu_paper_t5.py --data-dir D --limit 16       # smoke run: 16 train / 16 test examples a task
    python benchmarks/gpu_paper_t5.py --data-dir D --report         # the tables of results already in --out

Without CUDA it refuses to train (exit 2) unless ``--allow-cpu`` is given. ``--limit N`` sets the stream's
``train_per_task`` and ``test_per_task`` to N: they are stored in result.json like every setting (and change the
cell's config hash), and a result with either set is printed as a smoke run whose AA is not comparable.
Results go to ``--out`` (default runs/gpu-paper-t5) in clbench's layout; rerunning the same command resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

PROFILE, STREAM, ORDER, SEED = "paper-t5", "standard", "1", 0
DEFAULT_METHODS = "nlora,olora"
DEFAULT_OUT = Path("runs/gpu-paper-t5")

# AA (%) of the N-LoRA paper (Is Parameter Collision Hindering Continual Learning in LLMs?, COLING 2025), T5-large,
# standard order 1: Table 1 (N-LoRA, O-LoRA) and Table 4 (O-LoRA + N-LoRA).
PAPER_AA: dict[str, tuple[float, str]] = {
    "nlora": (79.2, "N-LoRA paper, Table 1, order 1"),
    "olora": (75.4, "N-LoRA paper, Table 1, order 1"),
    "olora+nlora": (79.7, "N-LoRA paper, Table 4, order 1"),
}
# The output stored in the released O-LoRA repository (cmnfriend/O-LoRA) for order 1, as a mean over tasks (on the
# 4-task benchmark every test set has 7,600 examples, so it equals the pooled exact match; docs/reference-code.md §0).
RELEASED_AA: dict[str, tuple[float, str]] = {
    "olora": (78.37, "released O-LoRA code's stored output, order 1"),
}
# Settings that cut the data: a result with any of them non-zero is a smoke run.
LIMIT_KEYS = (("stream", "train_per_task"), ("stream", "test_per_task"), ("train", "eval_limit"))
NO_CUDA = ("gpu_paper_t5: no CUDA device (torch.cuda.is_available() is false); refusing to train T5-large on the CPU "
           "— pass --allow-cpu to run anyway (with --limit N for a smoke run), or --dry-run to see the cells")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=None,
                   help="the CL_Benchmark folder (or its parent); default: $CLBENCH_DATA_DIR")
    p.add_argument("--model-path", default=None,
                   help="local T5-large folder or hub name (default: the profile's google-t5/t5-large)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"result folder (default {DEFAULT_OUT})")
    p.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma-separated (default {DEFAULT_METHODS})")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="smoke run: N training and N test examples a task (stream.train_per_task/test_per_task)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="SCOPE.KEY=VALUE",
                   help="an extra setting, as clbench run --set (recorded; listed under the table as a deviation)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved cells and their settings and exit")
    p.add_argument("--report", action="store_true", help="print the tables of the results in --out; train nothing")
    p.add_argument("--allow-cpu", action="store_true", help="train without CUDA (slow: for a --limit smoke run)")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error("--limit N: N must be at least 1 (leave it out for the full data)")
    if args.data_dir is None and os.environ.get("CLBENCH_DATA_DIR"):
        args.data_dir = Path(os.environ["CLBENCH_DATA_DIR"])
    return args


# ------------------------------------------------------------------------------------------------ planning
def extra_sets(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The settings this run adds to the profile's: ``--limit`` and ``--set``."""
    from clbench.config import parse_sets

    sets = parse_sets(args.sets)
    if args.limit is not None:
        sets = {"stream.train_per_task": [args.limit], "stream.test_per_task": [args.limit], **sets}
    for key, values in sets.items():
        if len(values) != 1:
            raise SystemExit(f"gpu_paper_t5: --set {key}: one value (this runbook runs no sweeps)")
    return sets


def request(args: argparse.Namespace, data_dir: Path, sets: Mapping[str, list[Any]] | None = None) -> Any:
    """The RunRequest of ``clbench run --profile paper-t5 --stream standard --orders 1 --seeds 0 --methods ...``."""
    from clbench._core.plan import RunRequest

    # --model-path replaces the profile's model.name_or_path preset (google-t5/t5-large); a --set of it wins
    return RunRequest(profile=PROFILE, methods=args.methods, streams=[STREAM], orders=[ORDER], seeds=[SEED],
                      sets=dict(sets or {}), out=args.out, data_dir=str(data_dir), model_path=args.model_path or None)


@contextlib.contextmanager
def placeholder_data() -> Iterator[Path]:
    """A CL_Benchmark folder with the standard stream's files and one placeholder record each: enough to plan the
    cells (planning checks that the files exist; their records are read when a cell trains), never to train."""
    from clbench_plugins._shared.cl_data import GROUPS
    from clbench_plugins.cl_benchmark.streams import STANDARD_ORDERS

    with tempfile.TemporaryDirectory(prefix="gpu-paper-t5-placeholder-") as tmp:
        root = Path(tmp) / "CL_Benchmark"
        for task in sorted({t for order in STANDARD_ORDERS.values() for t in order}):
            folder = root / GROUPS[task] / task
            folder.mkdir(parents=True)
            (folder / "labels.json").write_text('["placeholder"]', encoding="utf-8")
            for split in ("train", "test"):
                (folder / f"{split}.json").write_text('[{"sentence": "placeholder", "label": "placeholder"}]',
                                                      encoding="utf-8")
        yield root


def plan_cells(regs: Any, args: argparse.Namespace, data_dir: Path) -> tuple[list[Any], dict[str, Any]]:
    """This run's cells, and per method the cell the bare clbench command plans (no --limit, no --set)."""
    from clbench._core.plan import make_plan

    cells = make_plan(regs, request(args, data_dir, extra_sets(args))).cells
    # the bare command is planned against placeholder files: the real folder may need a --set to plan at all
    # (stream.derive_missing on an offline copy), which is then listed as a deviation
    with placeholder_data() as placeholder:
        bare = {c.method: c for c in make_plan(regs, request(args, placeholder)).cells}
    return cells, bare


# ------------------------------------------------------------------------------------------------ describing
def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return json.dumps(dict(value), sort_keys=True) if value else "{}"
    return str(value)


def key_settings(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The hyperparameters worth reading before a GPU hour is spent, from a cell's resolved config (or a result's)."""
    train, model, stream = config.get("train", {}), config.get("model", {}), config.get("stream", {})
    rows: list[tuple[str, Any]] = [
        ("model", f"{model.get('name')} {model.get('name_or_path')}"),
        ("dtype", model.get("dtype")),
        ("optimizer", f"{train.get('optimizer')}, weight_decay {_fmt(train.get('weight_decay'))}, "
                      f"grad_clip {_fmt(train.get('grad_clip'))}"),
        ("lr", train.get("lr")),
        ("batch", f"{train.get('batch_size')} (global; grad_accum {train.get('grad_accum')}, "
                  f"eval batch {train.get('eval_batch_size')})"),
        ("epochs", train.get("epochs")),
    ]
    for part, m in config.get("methods", {}).items():
        lam = {k: v for k, v in m.items() if k.startswith("lambda") and (v or k in ("lambda", "lambda1", "lambda2"))
               and (k != "lambda_paper" or m.get("penalty") == "paper")}
        rows.append((f"{part} λ", ", ".join(f"{k} {_fmt(v)}" for k, v in lam.items()) + f" (penalty {m.get('penalty')})"))
        rows.append((f"{part} LoRA", f"rank {m.get('rank')}, alpha {_fmt(m.get('alpha'))}, dropout {_fmt(m.get('dropout'))}"))
        for k in ("lr_per_task", "epochs_per_task"):
            if m.get(k):
                rows.append((f"{part} {k}", _fmt(m[k])))
    rows += [
        ("max lengths", f"source {model.get('max_length')}, target {model.get('max_target_length')}, "
                        f"generated {model.get('max_new_tokens')}"),
        ("evaluation", f"{model.get('eval')} (loss {model.get('loss')})"),
        ("data", f"{stream.get('data_dir') or '$CLBENCH_DATA_DIR'} (source {stream.get('source')})"),
        ("examples a task", limits_text(config) or "all (train and test)"),
    ]
    return rows


def limits(config: Mapping[str, Any]) -> dict[str, int]:
    """The settings of ``config`` that cut the data (``stream.train_per_task`` ...), where non-zero."""
    out = {}
    for scope, key in LIMIT_KEYS:
        value = config.get(scope, {}).get(key, 0)
        if value:
            out[f"{scope}.{key}"] = int(value)
    return out


def limits_text(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in limits(config).items())


def describe_cell(cell: Any, bare: Any | None = None) -> str:
    lines = [f"cell {cell.key}  (config hash {cell.config_hash[:12]}, folder {cell.directory})"]
    lines += [f"  {name:<16} {_fmt(value)}" for name, value in key_settings(cell.resolved())]
    diff = deviations(cell.resolved(), bare.resolved()) if bare is not None else []
    if diff:
        lines.append("  not the profile's settings: " + "; ".join(diff))
    return "\n".join(lines)


def deviations(config: Mapping[str, Any], bare: Mapping[str, Any]) -> list[str]:
    """How ``config`` differs from the bare command's cell ``bare`` (clbench._core.plan.config_diff of their identities)."""
    from clbench.cell import config_diff, identity

    diff = config_diff(identity(bare, STREAM, ORDER, SEED), identity(config, STREAM, ORDER, SEED))
    return [d for d in diff if not d.startswith("stream.data_dir:")]  # where the data is, not what it is


# ------------------------------------------------------------------------------------------------ the tables
def summarize(result: Any) -> dict[str, Any]:
    """AA, training tokens/s, peak GPU memory and times of a CellResult, from its metrics and timings."""
    tasks = result.timings.get("tasks", [])
    seconds = tokens = 0.0
    peaks = []
    for t in tasks:
        for name in t.get("phases", []):
            phase = t.get(name, {})
            if "tokens_per_s" in phase:
                seconds += phase["seconds"]
                tokens += phase["tokens_per_s"] * phase["seconds"]
        if "peak_memory_bytes" in t:
            peaks.append(t["peak_memory_bytes"])
    return {
        "aa": result.metrics.get("AA"),
        "tokens_per_s": tokens / seconds if seconds else None,
        "peak_memory_bytes": max(peaks) if peaks else None,
        "wall_s": result.timings.get("total_s"),
        "train_s": sum(t.get("train_s", 0.0) for t in tasks),
        "eval_s": sum(t.get("eval_s", 0.0) for t in tasks),
        "device": f"{result.env.get('device', '?')} ({result.env.get('device_name', '?')})",
        "last_row": result.accuracy_matrix[-1] if result.accuracy_matrix else [],
    }


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def format_table(result: Any, bare: Mapping[str, Any] | None = None) -> str:
    """One method's table: this run's AA, tokens/s, peak GPU memory and wall time beside the paper's AA and the
    released code's; a result whose data was cut (``--limit``) is marked as a smoke run, and with ``bare`` (the
    bare command's resolved cell) every other deviation from the profile's settings is listed."""
    s = summarize(result)
    cut = limits(result.config)
    aa = "n/a" if s["aa"] is None else f"{s['aa']:.2f}"
    if cut:
        aa += " (smoke run: not comparable)"
    tps = "n/a" if s["tokens_per_s"] is None else f"{s['tokens_per_s']:,.0f}"
    mem = "n/a" if s["peak_memory_bytes"] is None else f"{s['peak_memory_bytes'] / 2**30:.1f} GiB"
    rows = [("source", "AA", "train tokens/s", "peak GPU memory", "wall time"),
            (f"clbench, this run ({result.status})", aa, tps, mem,
             f"{_hms(s['wall_s'])} (train {_hms(s['train_s'])}, eval {_hms(s['eval_s'])})")]
    method = result.method
    for table in (PAPER_AA, RELEASED_AA):
        if method in table:
            value, source = table[method]
            rows.append((source, f"{value:.2f}", "—", "—", "—"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    out = [f"## {method}: {result.key}"]
    if cut:
        out.append(f"SMOKE RUN ({limits_text(result.config)}): a cut of the data, its AA is not comparable with the "
                   "paper's or the released code's")
    out += [line(rows[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows[1:])]
    out.append(f"device: {s['device']}; per-task accuracy after the last task: "
               + ", ".join(f"{t} {'n/a' if a is None else f'{a:.2f}'}"
                           for t, a in zip(result.tasks, s["last_row"], strict=False)))
    if result.status != "complete":
        out.append(f"status {result.status}: {result.error}")
    if bare is not None:
        other = [d for d in deviations(result.config, bare) if not any(d.startswith(k + ":") for k in cut)]
        if other:
            out.append("not the profile's settings: " + "; ".join(other))
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not (args.dry_run or args.report) and not torch.cuda.is_available() and not args.allow_cpu:
        print(NO_CUDA, file=sys.stderr)
        return 2
    from clbench._exec.local import harness_registry
    from clbench.errors import ClbenchError

    try:
        regs = harness_registry()
        with contextlib.ExitStack() as stack:
            data_dir = args.data_dir
            if data_dir is None:
                if not args.dry_run:
                    print("gpu_paper_t5: pass --data-dir (the CL_Benchmark folder) or set CLBENCH_DATA_DIR",
                          file=sys.stderr)
                    return 2
                data_dir = stack.enter_context(placeholder_data())
                print("no --data-dir: the settings are resolved against a placeholder folder (a dry run only)")
            cells, bare = plan_cells(regs, args, data_dir)
            if args.dry_run:
                return dry_run(args, cells, bare)
            if args.report:
                return report(args, cells, bare)
            return train(args, regs, cells, bare)
    except ClbenchError as exc:
        print(f"gpu_paper_t5: {exc}", file=sys.stderr)
        return exc.exit_code


def command_line(args: argparse.Namespace) -> str:
    parts = [f"clbench run --profile {PROFILE} --stream {STREAM} --orders {ORDER} --seeds {SEED} "
             f"--methods {args.methods}"]
    if args.data_dir is not None:
        parts.append(f"--data-dir {args.data_dir}")
    if args.model_path:
        parts.append(f"--model-path {args.model_path}")
    parts.append(f"--out {args.out}")
    for key, values in extra_sets(args).items():
        parts.append(f"--set {key}={values[0]}")
    return " ".join(parts)


def dry_run(args: argparse.Namespace, cells: list[Any], bare: Mapping[str, Any]) -> int:
    print(f"the cells of: {command_line(args)}")
    for cell in cells:
        print(describe_cell(cell, bare.get(cell.method)))
    return 0


def report(args: argparse.Namespace, cells: list[Any], bare: Mapping[str, Any]) -> int:
    from clbench._core.results import read_result
    from clbench.cell import RESULT_FILE

    missing = 0
    for cell in cells:
        path = cell.directory / RESULT_FILE
        if not path.exists():
            print(f"## {cell.method}: no result at {path}")
            missing += 1
            continue
        b = bare.get(cell.method)
        print(format_table(read_result(path), b.resolved() if b is not None else None))
        print()
    return 1 if missing else 0


def train(args: argparse.Namespace, regs: Any, cells: list[Any], bare: Mapping[str, Any]) -> int:
    from clbench._exec.executors import execute
    from clbench.cell import Plan

    print(f"running: {command_line(args)}", flush=True)
    for cell in cells:
        print(describe_cell(cell, bare.get(cell.method)), flush=True)
    # one cell at a time (--jobs 1): the wall times and peak memory are each cell's alone
    results = execute(Plan(cells=cells, profile=PROFILE, out=args.out), regs, progress=True,
                      options={"jobs": 1, "nproc": None})
    print()
    for result in results:
        b = bare.get(result.method)
        print(format_table(result, b.resolved() if b is not None else None))
        print()
    return 0 if all(r.status == "complete" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
