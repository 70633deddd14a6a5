"""Generic streams over a folder of your own tasks: no plugin to write.

``--stream arrays --data-dir DIR`` (vectors or images)::

    DIR/<task>/train.npz   arrays ``x`` (N × features, N × H × W or N × C × H × W) and ``y`` (N integer labels)
    DIR/<task>/test.npz    the same; ``val.npz`` optional (``train.eval_split=val`` scores it)

or, per split, ``DIR/<task>/train/X.npy`` and ``DIR/<task>/train/y.npy``.

``--stream prompts --data-dir DIR`` (a language model learns to answer)::

    DIR/<task>/train.jsonl   one {"prompt": "...", "response": "..."} a line; test.jsonl the same

scored by the ROUGE-1 F1 (× 100) of the model's greedy answers to the test prompts against their responses.

``--stream jsonl --data-dir DIR`` (text classification, the CL benchmark's form)::

    DIR/<task>/train.jsonl   one {"sentence": "...", "label": "..."} a line; test.jsonl; dev.jsonl optional

Tasks are the sub-folders, in the order of their names (order ``1``; ``2`` is the reverse). A task's labels are
the labels its training split holds (sorted); a test label the training split lacks is refused. Tasks that share
one label set share one head (domain-incremental); tasks with different label sets get one head each
(task-incremental). Every file and field is checked when the stream is built or a task loads, and an error names
the file, the line or array, and what was expected.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clbench.config import setting
from clbench.data import Split, Stream, TaskData, TaskInfo, confined, read_text
from clbench.errors import ConfigError, DataError
from clbench.model import CLModel

ARRAY_SPLITS = {"train": True, "test": True, "val": False}  # split -> required
TEXT_SPLITS = {"train": ("train",), "test": ("test",), "val": ("dev", "val")}


@dataclass(frozen=True)
class OwnDataConfig:
    data_dir: str = setting("", help="the folder of task folders (--data-dir)")


def _root(config: OwnDataConfig, stream: str, layout: str) -> Path:
    if not config.data_dir:
        raise ConfigError(f"stream {stream!r} reads your own data: give --data-dir DIR, a folder with one "
                          f"sub-folder per task holding {layout}")
    root = Path(config.data_dir).expanduser()
    if not root.is_dir():
        raise DataError(f"--data-dir {root}: not a folder")
    return root


def _task_names(root: Path, stream: str, layout: str) -> list[str]:
    for p in root.iterdir():  # a task folder that is a link to nothing (or to itself) must not silently vanish
        if p.is_symlink() and not p.is_dir() and not p.name.startswith("."):
            raise DataError(f"{p}: a link to {os.readlink(p)}, which is no folder (missing, or a loop); a task is a "
                            "folder")
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not names:
        raise DataError(f"{root}: no task folders; stream {stream!r} expects one sub-folder per task holding {layout}")
    return names


ORDER_SEED = 2026  # the shuffled orders' generator: the same orders of the same task folders on any machine


def _orders(names: list[str]) -> dict[str, list[str]]:
    """Order 1: the folders by name; 2: reversed; 3, 4, 5: shuffled (a fixed generator), as the built-in streams offer
    several orders to average a result over."""
    orders = {"1": names, "2": names[::-1]}
    g = torch.Generator().manual_seed(ORDER_SEED)
    for name in ("3", "4", "5"):
        orders[name] = [names[i] for i in torch.randperm(len(names), generator=g).tolist()]
    return orders


def _indices(labels: list[str], info: TaskInfo, where: str) -> torch.Tensor:
    """Each label's index among the task's labels (its training split's); a label the training split lacks is
    refused, naming ``where``."""
    index = {label: i for i, label in enumerate(info.labels)}
    unknown = sorted(set(labels) - set(index))
    if unknown:
        raise DataError(f"{where}: labels {', '.join(unknown)} are not among the train labels of task {info.name!r} "
                        f"({', '.join(info.labels)})")
    return torch.tensor([index[label] for label in labels], dtype=torch.long)


# --------------------------------------------------------------------------- arrays
ARRAYS_LAYOUT = "train.npz and test.npz (arrays x and y), or train/X.npy, train/y.npy, test/X.npy, test/y.npy"


def _read_array_split(root: Path, task: str, split: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(x, y)`` of one split of one task, or None when the (optional) split is absent."""
    npz, folder = confined(root, task, f"{split}.npz"), confined(root, task, split)
    if npz.exists() and not npz.is_file():
        raise DataError(f"{npz} is not a regular file (a folder, a pipe?); it must hold arrays x and y")
    if npz.is_file() and ((folder / "X.npy").exists() or (folder / "y.npy").exists()):
        raise DataError(f"task {task!r}: both {npz} and {folder}/X.npy, y.npy are there; keep one of the two layouts")
    if npz.is_file():
        try:
            with np.load(npz, allow_pickle=False) as f:
                keys = set(f.files)
                x_key = next((k for k in ("x", "X") if k in keys), None)
                if x_key is None or "y" not in keys:
                    raise DataError(f"{npz}: needs arrays 'x' and 'y'; it holds {sorted(keys) or 'none'}")
                x, y = f[x_key], f["y"]
        except (OSError, ValueError) as exc:
            raise DataError(f"{npz}: not a readable .npz file ({_why_not_numpy(exc)})") from None
        where = str(npz)
    elif (folder / "X.npy").is_file() or (folder / "y.npy").is_file():
        pair = []
        for name in ("X.npy", "y.npy"):
            path = folder / name
            if not path.is_file():
                raise DataError(f"{path} is missing (a split folder holds X.npy and y.npy)")
            try:
                pair.append(np.load(path, allow_pickle=False))
            except (OSError, ValueError) as exc:
                raise DataError(f"{path}: not a readable .npy file ({_why_not_numpy(exc)})") from None
        x, y = pair
        where = str(folder)
    elif ARRAY_SPLITS[split]:
        raise DataError(f"task {task!r}: {npz} is missing (each task folder holds {ARRAYS_LAYOUT})")
    else:
        return None
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{where}: y must be one integer label per example, got shape {y.shape} of {y.dtype}")
    if x.ndim not in (2, 3, 4) or not np.issubdtype(x.dtype, np.number) or np.issubdtype(x.dtype, np.complexfloating):
        raise DataError(f"{where}: x must be real numbers of shape N × features, N × H × W or N × C × H × W; got "
                        f"shape {x.shape} of {x.dtype}")
    if 0 in x.shape[1:]:
        raise DataError(f"{where}: x has no features (shape {x.shape})")
    if len(x) != len(y):
        raise DataError(f"{where}: x has {len(x)} rows but y has {len(y)} labels")
    if len(y) == 0:
        raise DataError(f"{where}: the {split} split is empty")
    if not np.isfinite(x).all():
        raise DataError(f"{where}: x holds NaN or infinite values")
    if np.issubdtype(x.dtype, np.floating) and np.abs(x).max() > np.finfo(np.float32).max:
        raise DataError(f"{where}: x holds values beyond float32's range (|x| up to {np.abs(x).max():.3g}): they "
                        "would train as infinities; rescale them")
    return x, y


def _why_not_numpy(exc: Exception) -> str:
    """numpy's error, except its advice for bytes that are no NumPy file (it suggests allow_pickle, which would
    unpickle untrusted data: never done here)."""
    if "pickled" in str(exc):
        return "its bytes are not NumPy's .npy/.npz format"
    return str(exc)


class ArraysStream(Stream):
    def __init__(self, config: OwnDataConfig) -> None:
        self.root = _root(config, "arrays", ARRAYS_LAYOUT)
        names = _task_names(self.root, "arrays", ARRAYS_LAYOUT)
        infos, shape = [], None
        for task in names:
            x, y = _read_array_split(self.root, task, "train")  # type: ignore[misc]
            sample = x.shape[1:] if x.ndim != 3 else (1, *x.shape[1:])
            if shape is not None and sample != shape:
                raise DataError(f"task {task!r}: inputs of shape {tuple(sample)}, but task {names[0]!r} has "
                                f"{tuple(shape)}; every task's inputs must have one shape")
            shape = sample
            infos.append(TaskInfo(task, tuple(str(v) for v in np.unique(y).tolist())))
        multi_head = len({i.labels for i in infos}) > 1
        super().__init__("arrays", infos, _orders(names), modality="vector" if len(shape) == 1 else "image",
                         input_shape=tuple(int(s) for s in shape), multi_head=multi_head,
                         provenance=f"your arrays in {self.root}")

    def load(self, info: TaskInfo) -> TaskData:
        splits: dict[str, Split | None] = {}
        for split in ARRAY_SPLITS:
            read = _read_array_split(self.root, info.name, split)
            if read is None:
                splits[split] = None
                continue
            x, y = read
            tx = torch.as_tensor(np.asarray(x, dtype=np.float32))
            if tx.ndim == 3:
                tx = tx.unsqueeze(1)  # N × H × W: one channel
            if tuple(tx.shape[1:]) != self.input_shape:
                raise DataError(f"task {info.name!r}, {split} split: inputs of shape {tuple(x.shape[1:])}, but the "
                                f"train split's are {tuple(self.input_shape)}")
            splits[split] = Split(tx, _indices([str(v) for v in y.tolist()], info, f"task {info.name!r}, {split} split"))
        return TaskData(info, splits["train"], splits["test"], splits["val"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- jsonl
JSONL_LAYOUT = 'train.jsonl and test.jsonl, one {"sentence": ..., "label": ...} a line (dev.jsonl optional)'


def _read_jsonl(path: Path, fields: tuple[str, str] = ("sentence", "label")) -> list[tuple[str, str]]:
    out = []
    for n, line in enumerate(read_text(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: line {n} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}: line {n} is {type(record).__name__}, expected an object with "
                            f"{', '.join(fields)}")
        for field in fields:
            if field not in record:
                raise DataError(f"{path}: line {n} has no {field!r} (fields: {', '.join(map(repr, record)) or 'none'})")
        text, target = (record[f] for f in fields)
        if not isinstance(text, str):
            raise DataError(f"{path}: line {n}: {fields[0]!r} is {type(text).__name__}, expected text")
        out.append((text, _target(target, fields[1], f"{path}: line {n}")))
    if not out:
        raise DataError(f"{path}: no examples")
    return out


def _target(value: Any, field: str, where: str) -> str:
    """A label or response as text: a string (a label not empty), or, for a label, an integer (``1`` and ``"1"``
    are one class). ``null``, a float (``1.0`` beside ``1``, ``NaN``), a list or an object is refused."""
    if isinstance(value, str) and (value.strip() or field != "label"):
        return value
    if field == "label" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    kind = "empty" if isinstance(value, str) else "null" if value is None else type(value).__name__
    expected = "text or an integer" if field == "label" else "text"
    raise DataError(f"{where}: {field!r} is {kind} ({json.dumps(value)[:40]}), expected {expected}")


def _text_split(root: Path, task: str, split: str) -> Path | None:
    for name in TEXT_SPLITS[split]:
        path = confined(root, task, f"{name}.jsonl")
        if path.is_file():
            return path
    if split == "val":
        return None
    raise DataError(f"task {task!r}: {confined(root, task, split + '.jsonl')} is missing (each task folder holds "
                    f"{JSONL_LAYOUT})")


class JsonlStream(Stream):
    def __init__(self, config: OwnDataConfig) -> None:
        self.root = _root(config, "jsonl", JSONL_LAYOUT)
        names = _task_names(self.root, "jsonl", JSONL_LAYOUT)
        infos = []
        for task in names:
            path = _text_split(self.root, task, "train")
            assert path is not None
            infos.append(TaskInfo(task, tuple(sorted({label for _, label in _read_jsonl(path)})), group=task))
        super().__init__("jsonl", infos, _orders(names), modality="text",
                         multi_head=len({i.labels for i in infos}) > 1, provenance=f"your JSONL tasks in {self.root}")

    def load(self, info: TaskInfo) -> TaskData:
        splits: dict[str, Split | None] = {}
        for split in TEXT_SPLITS:
            path = _text_split(self.root, info.name, split)
            if path is None:
                splits[split] = None
                continue
            rows = _read_jsonl(path)
            splits[split] = Split([s for s, _ in rows], _indices([label for _, label in rows], info, str(path)))
        return TaskData(info, splits["train"], splits["test"], splits["val"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- prompts
PROMPTS_LAYOUT = 'train.jsonl and test.jsonl, one {"prompt": ..., "response": ...} a line'
PAIR = ("prompt", "response")


@dataclass(frozen=True)
class PromptsConfig:
    data_dir: str = setting("", help="the folder of task folders (--data-dir)")
    max_new_tokens: int = setting(64, help="the longest answer generated for a test prompt")


class PromptsStream(Stream):
    def __init__(self, config: PromptsConfig) -> None:
        self.root = _root(OwnDataConfig(config.data_dir), "prompts", PROMPTS_LAYOUT)
        names = _task_names(self.root, "prompts", PROMPTS_LAYOUT)
        for task in names:  # every task's files, checked when the run is planned
            for split in ("train", "test"):
                _read_jsonl(self._path(task, split), PAIR)
        super().__init__("prompts", [TaskInfo(t, ("",), group=t) for t in names], _orders(names), modality="text",
                         provenance=f"your prompt/response tasks in {self.root}")
        self.config = config
        self.references: dict[str, list[str]] = {}

    def _path(self, task: str, split: str) -> Path:
        path = confined(self.root, task, f"{split}.jsonl")
        if not path.is_file():
            raise DataError(f"task {task!r}: {path} is missing (each task folder holds {PROMPTS_LAYOUT})")
        return path

    def load(self, info: TaskInfo) -> TaskData:
        train = _read_jsonl(self._path(info.name, "train"), PAIR)
        test = _read_jsonl(self._path(info.name, "test"), PAIR)
        self.references[info.name] = [r for _, r in test]
        return TaskData(info, Split(train, torch.zeros(len(train), dtype=torch.long)),
                        Split([p for p, _ in test], torch.zeros(len(test), dtype=torch.long)))

    @torch.no_grad()
    def evaluate(self, model: CLModel, task: str, *, batch_size: int, limit: int | None,
                 device: torch.device, split: str = "test") -> float:
        """ROUGE-1 F1 × 100 of the greedy answers to the task's test prompts (the first ``limit``)."""
        from clbench_plugins._shared.text import greedy, rouge1

        if split != "test":
            raise DataError(f"prompts task {task!r} has no validation split to score (train.eval_split=val)")

        prompts = list(self.data(task).test.x)
        n = len(prompts) if not limit else min(limit, len(prompts))
        return rouge1(greedy(model, prompts[:n], batch_size, self.config.max_new_tokens), self.references[task][:n])
