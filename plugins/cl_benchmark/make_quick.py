"""Cut the ``cl-quick`` subset shipped in ``data/cl-quick`` from a CL_Benchmark folder (run once, by hand).

    python -m clbench_plugins.cl_benchmark.make_quick PATH/TO/CL_Benchmark [--seed 0]

Per task and class, a fixed-seed random sample without replacement: ``TRAIN_PER_TASK // classes`` train and
``TEST_PER_TASK // classes`` test examples. dbpedia's train set is absent from the offline copy, so both of
its splits come from its test set (disjoint); yelp's test set is absent, so its test split comes from its
train set (disjoint). Records are copied unchanged, one JSON object a line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from clbench_plugins._shared.cl_data import GROUPS, parse_split, read_labels, task_generator

from .streams import quick_root

TASKS = ("dbpedia", "amazon", "yelp", "agnews")
TRAIN_PER_TASK = 300
TEST_PER_TASK = 150


def per_class_sample(y: torch.Tensor, counts: tuple[int, ...], generator: torch.Generator) -> list[list[int]]:
    """Disjoint index lists, the k-th with ``counts[k]`` examples of every class."""
    out: list[list[int]] = [[] for _ in counts]
    for c in sorted(torch.unique(y).tolist()):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)].tolist()
        start = 0
        for k, n in enumerate(counts):
            out[k] += idx[start:start + n]
            start += n
    return [sorted(i) for i in out]


def write_jsonl(path: Path, sentences: list[str], labels: list[str]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for s, label in zip(sentences, labels, strict=True):
            f.write(json.dumps({"sentence": s, "label": label}, ensure_ascii=False) + "\n")


def cut_task(src: Path, dst: Path, task: str, seed: int) -> None:
    folder = src / GROUPS[task] / task
    labels = read_labels(folder / "labels.json")
    n_train, n_test = TRAIN_PER_TASK // len(labels), TEST_PER_TASK // len(labels)
    gen = task_generator(seed, task, "cut")
    if (folder / "train.json").is_file() and (folder / "test.json").is_file():
        train, test = parse_split(folder / "train.json", labels), parse_split(folder / "test.json", labels)
        parts = [(train, per_class_sample(train.y, (n_train,), gen)[0]), (test, per_class_sample(test.y, (n_test,), gen)[0])]
    else:  # one split only: both cut from it, disjoint
        only = parse_split(folder / ("train.json" if (folder / "train.json").is_file() else "test.json"), labels)
        tr, te = per_class_sample(only.y, (n_train, n_test), gen)
        parts = [(only, tr), (only, te)]
    out = dst / GROUPS[task] / task
    out.mkdir(parents=True, exist_ok=True)
    (out / "labels.json").write_text(json.dumps(list(labels), ensure_ascii=False) + "\n", encoding="utf-8")
    for name, (split, idx) in zip(("train", "test"), parts, strict=True):
        write_jsonl(out / f"{name}.jsonl", [split.x[i] for i in idx], [labels[int(split.y[i])] for i in idx])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="the CL_Benchmark folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=quick_root())
    args = parser.parse_args()
    for task in TASKS:
        cut_task(args.src, args.out, task, args.seed)


if __name__ == "__main__":
    main()
