"""``glue-sparse``: the six GLUE tasks of the Expander-EWC paper's Table 5 (RoBERTa-base, 99 % sparsity).

Data come from a local directory in the official GLUE layout (``<data_dir>/<TASK>/{train,dev}.tsv``,
as written by the GLUE download script) or, with ``source = "hub"``, from the Hugging Face hub
(``nyu-mll/glue``). GLUE's test sets have no labels, so the dev split is the test split (as in the
paper and every GLUE paper); a validation split is carved from train.

Inputs are strings; a sentence pair is joined with ``pair_separator`` (RoBERTa's ``</s></s>``).
STS-B is a regression task (scores 0-5). With ``stsb = "regression"`` (default) its labels are
:data:`~clbench_plugins.glue.model.REGRESSION_LABELS`, ``y`` holds the float scores and a model with a
regression head (``glue-encoder``) predicts a float; ``stsb = "classes"`` keeps the earlier reading, 6
classes (the rounded score) for any classifier. Either way its official metric (mean of Pearson's and
Spearman's correlations) is computed against the raw gold score. :meth:`GlueSparse.score` reports every
task's official metric × 100 (:mod:`clbench_plugins.glue.scoring`), so the accuracy matrix holds
official numbers.

The six tasks form a stream (orders 1 and 2) for continual learning; Table 5's protocol — every task
fine-tuned from the same base with its own mask — is the ``pertask-expander`` / ``pertask-random``
methods on this stream (``--profile paper-expander --stream glue-sparse --methods all``).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from clbench.config import bounded, setting
from clbench.data import Split, Stream, TaskData, TaskInfo, confined, read_text, stratified_split
from clbench.errors import ConfigError, DataError

from .model import REGRESSION_LABELS
from .scoring import official


@dataclass(frozen=True)
class GlueTaskFormat:
    """Where a task's fields sit in its GLUE TSV file."""

    directory: str  # folder name in the GLUE layout
    header: bool
    text: tuple[str | int, ...]  # column names (header) or indices (no header) of the sentence(s)
    label: str | int
    labels: tuple[str, ...]  # label words, in class-index order
    metric: str  # the official metric (GLUE paper, Table 1): matthews | f1 | accuracy | pearson_spearman
    hub_text: tuple[str, ...]  # field names in nyu-mll/glue


GLUE_TASKS: dict[str, GlueTaskFormat] = {
    "cola": GlueTaskFormat("CoLA", False, (3,), 1, ("0", "1"), "matthews", ("sentence",)),
    "sst2": GlueTaskFormat("SST-2", True, ("sentence",), "label", ("0", "1"), "accuracy", ("sentence",)),
    "mrpc": GlueTaskFormat("MRPC", True, ("#1 String", "#2 String"), "Quality", ("0", "1"), "f1",
                           ("sentence1", "sentence2")),
    "stsb": GlueTaskFormat("STS-B", True, ("sentence1", "sentence2"), "score", ("0", "1", "2", "3", "4", "5"),
                           "pearson_spearman", ("sentence1", "sentence2")),
    "rte": GlueTaskFormat("RTE", True, ("sentence1", "sentence2"), "label", ("entailment", "not_entailment"),
                          "accuracy", ("sentence1", "sentence2")),
    "qnli": GlueTaskFormat("QNLI", True, ("question", "sentence"), "label", ("entailment", "not_entailment"),
                           "accuracy", ("question", "sentence")),
}
PAPER_ORDER = ["cola", "rte", "mrpc", "stsb", "sst2", "qnli"]  # Table 5, left to right


@dataclass(frozen=True)
class GlueConfig:
    data_dir: str = setting("", help="GLUE layout: <data_dir>/<CoLA|SST-2|MRPC|STS-B|RTE|QNLI>/{train,dev}.tsv")
    source: str = setting("local", help='local | hub (datasets.load_dataset("nyu-mll/glue", task))')
    tasks: tuple[str, ...] = setting(tuple(PAPER_ORDER), help="Table 5's six tasks")
    max_train: int = bounded(0, ge=0, help="cap on training examples per task (0: all)")
    max_test: int = bounded(0, ge=0, help="cap on dev examples per task (0: all)")
    val_fraction: float = bounded(0.1, ge=0, lt=1, help="held out of train for methods that select")
    pair_separator: str = setting(" </s></s> ", help="RoBERTa's pair format")
    stsb: str = setting("regression", help="regression (float scores, a regression head) | classes (6 rounded classes)")

    def __post_init__(self) -> None:
        if self.source not in ("local", "hub"):
            raise ConfigError(f"stream.source={self.source!r}: choose local or hub")
        unknown = [t for t in self.tasks if t not in GLUE_TASKS]
        if unknown:
            raise ConfigError(f"stream.tasks: unknown GLUE task(s) {unknown}; known: {sorted(GLUE_TASKS)}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(f"stream.val_fraction={self.val_fraction} must lie in [0, 1)")
        if self.stsb not in ("regression", "classes"):
            raise ConfigError(f"stream.stsb={self.stsb!r}: choose regression or classes")


def label_index(fmt: GlueTaskFormat, raw: str, where: str) -> int:
    """Class index of a raw label; STS-B scores are rounded to the nearest integer 0-5."""
    if fmt.metric == "pearson_spearman":
        try:
            score = float(raw)
        except ValueError:
            raise DataError(f"{where}: STS-B score {raw!r} is not a number") from None
        if not 0.0 <= score <= 5.0:
            raise DataError(f"{where}: STS-B score {score} outside [0, 5]")
        return int(round(score))
    if raw not in fmt.labels:
        raise DataError(f"{where}: label {raw!r} is not one of {list(fmt.labels)}")
    return fmt.labels.index(raw)


def read_tsv(path: Path, fmt: GlueTaskFormat, separator: str) -> tuple[list[str], list[int], list[float]]:
    """Texts, class indices and raw numeric labels of one GLUE TSV file (build ``path`` with ``confined``)."""
    if not path.exists():
        raise DataError(f"GLUE file {path} is missing (expected the official GLUE layout)")
    texts: list[str] = []
    ys: list[int] = []
    raw: list[float] = []
    with io.StringIO(read_text(path), newline="") as f:  # read_text: a non-UTF-8 file is a DataError naming it
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        fields = (*fmt.text, fmt.label)
        if fmt.header:
            header = next(reader, [])
            missing = [c for c in fields if c not in header]
            if missing:
                raise DataError(f"{path}: header lacks column(s) {missing}; found {header}")
            cols = [header.index(str(c)) for c in fields]
        else:
            cols = [int(c) for c in fields]
        *text_idx, label_idx = cols
        for lineno, row in enumerate(reader, start=2 if fmt.header else 1):
            where = f"{path}, line {lineno}"
            if len(row) <= max(cols):
                raise DataError(f"{where}: {len(row)} fields, expected at least {max(cols) + 1}")
            texts.append(separator.join(row[i] for i in text_idx))
            ys.append(label_index(fmt, row[label_idx], where))
            raw.append(float(row[label_idx]) if fmt.metric == "pearson_spearman" else float(ys[-1]))
    if not texts:
        raise DataError(f"{path}: no records")
    return texts, ys, raw


def read_hub(task: str, split: str, fmt: GlueTaskFormat, separator: str) -> tuple[list[str], list[int], list[float]]:
    """The same from the Hugging Face hub (network or the local HF cache)."""
    from datasets import load_dataset

    ds = load_dataset("nyu-mll/glue", task, split=split)
    texts = [separator.join(str(r[k]) for k in fmt.hub_text) for r in ds]
    if fmt.metric == "pearson_spearman":
        raw = [float(r["label"]) for r in ds]
        ys = [int(round(s)) for s in raw]
    else:
        ys = [int(r["label"]) for r in ds]
        raw = [float(y) for y in ys]
    return texts, ys, raw


class GlueSparse(Stream):
    """The GLUE tasks in the paper's order; one head per task (label sets differ)."""

    def __init__(self, config: GlueConfig) -> None:
        if config.source == "local" and not config.data_dir:
            raise ConfigError("stream.data_dir is empty: point it at a GLUE directory (or set stream.source=hub)")
        tasks = [TaskInfo(t, self.task_labels(t, config), group="glue") for t in config.tasks]
        names = list(config.tasks)
        super().__init__("glue-sparse", tasks, {"1": names, "2": names[::-1]}, modality="text",
                         multi_head=True, provenance="GLUE (Wang et al. 2019); dev split as test")
        self.config = config
        self.gold_scores: dict[str, torch.Tensor] = {}  # raw dev labels (STS-B: float scores) for scoring

    @staticmethod
    def task_labels(task: str, config: GlueConfig) -> tuple[str, ...]:
        return REGRESSION_LABELS if task == "stsb" and config.stsb == "regression" else GLUE_TASKS[task].labels

    def regression(self, task: str) -> bool:
        return self.task(task).labels == REGRESSION_LABELS

    def _read(self, task: str, split: str) -> tuple[list[str], list[int], list[float]]:
        fmt = GLUE_TASKS[task]
        c = self.config
        if c.source == "hub":
            return read_hub(task, "validation" if split == "dev" else split, fmt, c.pair_separator)
        return read_tsv(confined(c.data_dir, fmt.directory, f"{split}.tsv"), fmt, c.pair_separator)

    def load(self, info: TaskInfo) -> TaskData:
        c = self.config
        tx, ty, traw = self._read(info.name, "train")
        dx, dy, draw = self._read(info.name, "dev")
        if c.max_train:
            tx, ty, traw = tx[: c.max_train], ty[: c.max_train], traw[: c.max_train]
        if c.max_test:
            dx, dy, draw = dx[: c.max_test], dy[: c.max_test], draw[: c.max_test]
        regression = self.regression(info.name)  # y: the float scores; else class indices
        train = Split(tx, torch.tensor(traw) if regression else torch.tensor(ty))
        val = None
        if c.val_fraction > 0 and len(ty) >= 10:  # stratified by class (STS-B: by rounded score)
            keep, held = stratified_split(torch.tensor(ty), c.val_fraction, torch.Generator().manual_seed(4321))
            train, val = train.subset(keep), train.subset(held)
        self.gold_scores[info.name] = torch.tensor(draw)
        return TaskData(info, train, Split(dx, torch.tensor(draw) if regression else torch.tensor(dy)), val)

    def score(self, task: str, pred: Tensor, gold: Tensor) -> float:
        """The task's official metric × 100 on the first ``len(gold)`` dev examples (the evaluated ones).

        ``gold`` holds class indices or, for a regression task, the scores; STS-B is always scored against
        its raw float scores, kept at load time (the rounded classes lose the decimals).
        """
        self.data(task)  # loads the task (and its raw scores) if the runner has not yet
        raw = self.gold_scores[task][: len(gold)]
        return 100.0 * official(GLUE_TASKS[task].metric, pred, raw)


def build(config: Any) -> GlueSparse:
    return GlueSparse(config)


# The GLUE/SuperGLUE-style tasks that the CL benchmark copy holds offline (data/README.md): Table 5's
# protocol on them needs no GLUE download. Labels are the CL benchmark's words; every task is scored by
# accuracy (the CL benchmark's number; GLUE's official QQP number is the mean of F1 and accuracy).
CL_GLUE_ORDER = ["MNLI", "QQP", "RTE", "SST-2", "CB", "BoolQA"]


# Orders: the six tasks as a sequence (1, and 2 reversed), and one order per task holding that task alone:
# a cell per task, which evaluates only its own task (a six-task cell scores all six after every task).
CL_GLUE_ORDERS = {"1": CL_GLUE_ORDER, "2": CL_GLUE_ORDER[::-1], **{t: [t] for t in CL_GLUE_ORDER}}


def build_cl(config: Any) -> Stream:
    from clbench_plugins._shared.cl_data import from_dir

    return from_dir("glue-cl", CL_GLUE_ORDERS, config)
