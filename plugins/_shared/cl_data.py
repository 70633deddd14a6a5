"""The CL benchmark of O-LoRA / N-LoRA read from a directory in the repositories' ``CL_Benchmark`` layout: the
reader behind ``cl_benchmark``'s ``standard``, ``long`` and offline ``cl-quick`` streams and ``glue``'s ``glue-cl``.

Layout: ``<root>/<Group>/<Task>/{train,test}.json`` (a JSON list of ``{"sentence", "label"}``; the
shipped subset uses ``.jsonl``, one record a line) and ``labels.json`` (the label words, in file order).
Every record is checked (fields, label inside ``labels.json``); a bad one raises :class:`DataError` naming
the file and the record index. Missing files are reported together when the stream is built, i.e. at
planning time, before any training. § numbers: docs/reference-code.md.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from clbench.config import bounded, setting
from clbench.data import (
    Split,
    Stream,
    TaskData,
    TaskInfo,
    cache_dir,
    confined,
    read_records,
    stratified_split,
)
from clbench.errors import ConfigError, DataError

# Task → group (the CL_Benchmark category folder, used as "Task:" in the prompt). O-LoRA src/uie_dataset_lora.py.
GROUPS: dict[str, str] = {
    "dbpedia": "TC", "amazon": "SC", "yahoo": "TC", "agnews": "TC", "yelp": "SC", "MNLI": "NLI", "CB": "NLI",
    "RTE": "NLI", "QQP": "QQP", "IMDB": "SC", "SST-2": "SC", "BoolQA": "BoolQA", "MultiRC": "MultiRC",
    "WiC": "WiC", "COPA": "COPA",
}

# configs/instruction_config.json of O-LoRA / N-LoRA (identical in both), first ("single") entry per group.
# COPA has none: its sentences carry the question and the A/B choices.
INSTRUCTIONS: dict[str, str] = {
    "NLI": 'What is the logical relationship between the "sentence 1" and the "sentence 2"? Choose one from the option.\n',
    "QQP": 'Whether the "first sentence" and the "second sentence" have the same meaning? Choose one from the option.\n',
    "SC": "What is the sentiment of the following paragraph? Choose one from the option.\n",
    "TC": "What is the topic of the following paragraph? Choose one from the option.\n",
    "BoolQA": "According to the following passage, is the question true or false? Choose one from the option.\n",
    "MultiRC": "According to the following passage and question, is the candidate answer true or false? "
               "Choose one from the option.\n",
    "WiC": "Given a word and two sentences, whether the word is used with the same sense in both sentence? "
           "Choose one from the option.\n",
}

SPLITS = ("train", "test")


@dataclass(frozen=True)
class CLBenchmarkConfig:
    """Settings of the ``standard`` and ``long`` streams (``--set stream.<field>=...``)."""

    data_dir: str = setting("", help='the CL_Benchmark folder or its parent; "" = $CLBENCH_DATA_DIR')
    source: str = setting("dir", help=(
        "\"dir\": read data_dir as it is. \"hub\": build the stream's tasks that data_dir lacks from hub datasets "
        "(network; once, into data_dir or $CLBENCH_CACHE/cl_benchmark_hub/seed-N) — see hub.py for sources and "
        "stand-ins"))
    train_per_task: int = bounded(0, ge=0, help='0 = all ("sampling strategy": "full" in every task config, §1.7)')
    test_per_task: int = bounded(0, ge=0, help="0 = all (the papers score the full test sets, §1.8)")
    derive_missing: bool = setting(False, help=(
        "Offline copies lack some splits (dbpedia train, yelp/IMDB/MultiRC test): true builds a missing split from "
        "the other one (stratified, `derive_fraction` of it, seeded) and records it in the provenance."))
    derive_fraction: float = bounded(0.5, gt=0, lt=1)
    seed: int = setting(0, help=(
        "seed of the subsampling and of derived splits (fixed: the data never depends on the cell seed)"))

    def __post_init__(self) -> None:
        if self.source not in ("dir", "hub"):
            raise ConfigError(f"stream.source={self.source!r}: choose 'dir' (a CL_Benchmark folder) or 'hub'")


# ------------------------------------------------------------------------------------ files
def read_labels(path: Path) -> tuple[str, ...]:
    labels = read_records(path)
    if not labels or not all(isinstance(label, str) for label in labels) or len(set(labels)) != len(labels):
        raise DataError(f"{path}: expected a non-empty JSON list of distinct label strings")
    return tuple(labels)


def parse_split(path: Path, labels: Sequence[str]) -> Split:
    """Validate every record of ``path`` and return its sentences and label indices."""
    index = {label: i for i, label in enumerate(labels)}
    xs: list[str] = []
    ys: list[int] = []
    for i, rec in enumerate(read_records(path)):
        if not isinstance(rec, dict):
            raise DataError(f"{path}: record {i} is not an object")
        sentence, label = rec.get("sentence"), rec.get("label")
        if not isinstance(sentence, str) or not sentence.strip():
            raise DataError(f"{path}: record {i} has no 'sentence' string")
        if not isinstance(label, str):
            raise DataError(f"{path}: record {i} has no 'label' string")
        if label not in index:
            raise DataError(f"{path}: record {i} has label {label!r}, not in labels.json {list(labels)}")
        xs.append(sentence)
        ys.append(index[label])
    return Split(xs, torch.tensor(ys, dtype=torch.long))


VAL_PER_TASK = 50  # validation examples a task, where train_per_task leaves enough out (cl-quick: 64 of ≈300)


def sample_indices(y: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor | None:
    """Positions of a class-stratified random subset of about ``n`` of the labels ``y`` (None: all of them, when
    ``n`` is 0 or too large)."""
    if n <= 0 or n >= len(y):
        return None
    return stratified_split(y, n / len(y), generator)[1]


def subsample(split: Split, n: int, generator: torch.Generator) -> Split:
    """A class-stratified random subset of about ``n`` examples (all when ``n`` is 0 or too large)."""
    index = sample_indices(split.y, n, generator)
    return split if index is None else split.subset(index)


def task_generator(seed: int, task: str, purpose: str) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(f"{task}/{purpose}".encode()))


# ------------------------------------------------------------------------------------ stream
class CLBenchmarkStream(Stream):
    """Tasks read from ``root/<Group>/<Task>/``; files checked for existence when built."""

    def __init__(self, name: str, root: Path, tasks: Sequence[str], orders: Mapping[str, list[str]],
                 ext: str = "json", train_per_task: int = 0, test_per_task: int = 0, seed: int = 0,
                 derive_missing: bool = False, derive_fraction: float = 0.5, provenance: str = "") -> None:
        self.root, self.ext, self.seed = root, ext, seed
        self.limits = {"train": train_per_task, "test": test_per_task}
        self.derive_missing, self.derive_fraction = derive_missing, derive_fraction
        if not 0 < derive_fraction < 1:
            raise ConfigError(f"stream.derive_fraction={derive_fraction} must be in (0, 1)")
        self.missing = self._check_files(name, tasks)
        infos = [self._task_info(t) for t in tasks]
        derived = sorted(f"{t}/{s}" for t, s in self.missing)
        note = f"; derived splits: {', '.join(derived)}" if derived else ""
        super().__init__(name, infos, {k: list(v) for k, v in orders.items()}, modality="text", multi_head=False,
                         provenance=provenance + note)

    def _file(self, task: str, name: str) -> Path:
        """A task's file, confined to the data folder: a symlinked file that points out of it is refused too."""
        return confined(self.root, GROUPS[task], task, name)

    def _task_info(self, task: str) -> TaskInfo:
        group = GROUPS[task]
        return TaskInfo(task, read_labels(self._file(task, "labels.json")), group, INSTRUCTIONS.get(group, ""))

    def _check_files(self, name: str, tasks: Sequence[str]) -> set[tuple[str, str]]:
        """Missing (task, split) pairs; raises unless each can be derived from the task's other split.
        A file (or folder) that resolves outside the data folder raises here, at planning time."""
        missing = {(t, s) for t in tasks for s in SPLITS if not self._file(t, f"{s}.{self.ext}").is_file()}
        both = {t for t, _ in missing if all((t, s) in missing for s in SPLITS)}
        fatal = [str(self._file(t, f"{s}.{self.ext}")) for t, s in sorted(missing)
                 if t in both or not self.derive_missing]
        fatal += [str(self._file(t, "labels.json")) for t in tasks if not self._file(t, "labels.json").is_file()]
        if fatal:
            files = ", ".join(fatal)
            hint = ("; stream.derive_missing=true builds a missing split from the task's other split"
                    if not self.derive_missing and any(t not in both for t, _ in missing) else "")
            raise DataError(f"stream {name!r}: missing split files: {files}{hint}")
        return missing

    def load(self, info: TaskInfo) -> TaskData:
        splits: dict[str, Split] = {}
        for s in SPLITS:
            if (info.name, s) not in self.missing:
                splits[s] = parse_split(self._file(info.name, f"{s}.{self.ext}"), info.labels)
        for s in SPLITS:
            if s not in splits:  # derive from the other split: a held-out, stratified part of it
                other = "test" if s == "train" else "train"
                keep, held = stratified_split(splits[other].y, self.derive_fraction,
                                              task_generator(self.seed, info.name, "derive"))
                splits[s], splits[other] = splits[other].subset(held), splits[other].subset(keep)
        shipped = splits["train"]
        taken = sample_indices(shipped.y, self.limits["train"], task_generator(self.seed, info.name, "train"))
        splits["test"] = subsample(splits["test"], self.limits["test"], task_generator(self.seed, info.name, "test"))
        if taken is None:
            return TaskData(info, shipped, splits["test"])
        # validation: a class-stratified sample of the training examples the subset left out, from its own
        # generator: data to choose settings on (train.eval_split=val) that is neither trained on nor tested
        rest = torch.ones(len(shipped), dtype=torch.bool)
        rest[taken] = False
        left = shipped.subset(torch.nonzero(rest).flatten())
        val = subsample(left, VAL_PER_TASK, task_generator(self.seed, info.name, "val"))
        return TaskData(info, shipped.subset(taken), splits["test"], val)


def resolve_root(data_dir: str) -> Path:
    """The CL_Benchmark folder from ``stream.data_dir`` or ``$CLBENCH_DATA_DIR`` (the folder or its parent)."""
    raw = data_dir or os.environ.get("CLBENCH_DATA_DIR", "")
    if not raw:
        raise ConfigError("the CL benchmark needs its data: set stream.data_dir=PATH (or CLBENCH_DATA_DIR) to a "
                          "folder in the O-LoRA/N-LoRA CL_Benchmark layout (<Group>/<Task>/train.json ...; "
                          "cmnfriend/O-LoRA ships one), or --set stream.source=hub to build it from hub datasets")
    root = Path(raw).expanduser()
    if (root / "CL_Benchmark").is_dir():
        root = root / "CL_Benchmark"
    if not root.is_dir():
        raise ConfigError(f"stream.data_dir={raw!r}: no such folder")
    return root


def from_dir(name: str, orders: Mapping[str, list[str]], config: CLBenchmarkConfig) -> CLBenchmarkStream:
    """The stream ``name`` of the tasks in ``orders``, read from ``config.data_dir`` (``source = \"hub\"``: built there
    first, where tasks are missing, from hub datasets)."""
    tasks = list(dict.fromkeys(t for order in orders.values() for t in order))
    if config.source == "hub":
        from clbench_plugins._shared.cl_hub import ensure_tasks

        root = (Path(config.data_dir).expanduser() if config.data_dir
                else cache_dir() / "cl_benchmark_hub" / f"seed-{config.seed}")
        ensure_tasks(root, tasks, GROUPS, config.seed)
        provenance = f"built from hub datasets into {root} (sources and stand-ins: {root / 'PROVENANCE.json'})"
    else:
        root = resolve_root(config.data_dir)
        provenance = f"CL_Benchmark from {root}"
    return CLBenchmarkStream(name, root, tasks, orders, "json", config.train_per_task, config.test_per_task,
                             config.seed, config.derive_missing, config.derive_fraction, provenance=provenance)
