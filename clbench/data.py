"""Tasks, streams and batches.

A stream is a list of tasks plus named orders over them. A task's splits are small in-memory
datasets: ``x`` is a tensor (images, vectors) or a list (texts), ``y`` a tensor of label indices into
the task's ``labels``. Batching indexes them directly; a ``torch.utils.data.DataLoader`` would add
worker and collation overhead that dominates small CL streams (see benchmarks/bench_overhead.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from clbench.errors import DataError
from clbench.files import (
    TMP_SUFFIX,
    atomic_write_text,
    atomic_write_with,
    cache_dir,
    confined,
    owner,
    read_records,
    read_text,
    reading,
    remember,
    seen_by_package,
)

if TYPE_CHECKING:
    from clbench.model import CLModel


@dataclass
class Split:
    """One split of one task."""

    x: Tensor | list[Any]
    y: Tensor

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise DataError(f"split has {len(self.x)} inputs but {len(self.y)} labels")

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, index: Tensor) -> Split:
        return Split(self.take(index), self.y[index])

    def take(self, index: Tensor) -> Tensor | list[Any]:
        """The inputs at ``index`` (a tensor of positions)."""
        if isinstance(self.x, Tensor):
            return self.x[index]
        return [self.x[i] for i in index.tolist()]


@dataclass(frozen=True)
class TaskInfo:
    """What a model needs to know about a task before seeing its data."""

    name: str
    labels: tuple[str, ...]
    group: str = ""  # e.g. the CL-benchmark category (TC, SC, NLI ...) used in prompts
    instruction: str = ""
    # a class-incremental stream's task: the labels its data holds, among ``labels`` (every task's labels are the
    # stream's whole label set there); empty: all of ``labels``
    classes: tuple[str, ...] = ()

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def own_labels(self) -> tuple[str, ...]:
        """The labels this task's data holds."""
        return self.classes or self.labels


def seen_labels(tasks: Sequence[TaskInfo]) -> frozenset[str]:
    """The labels a class-incremental learner has seen after ``tasks``: the union of their own labels."""
    return frozenset(label for t in tasks for label in t.own_labels)


def shown_labels(stream: Stream, known: Sequence[str], head: str = "masked") -> frozenset[str] | None:
    """What a model scores once the tasks ``known`` (names, in the order trained) are known: on a class-incremental
    stream under the ``masked`` and ``task`` heads (``train.head``), their labels alone; else None, every label (a
    ``full`` head, and every other scenario)."""
    if stream.scenario != "class-incremental" or head == "full":
        return None
    return seen_labels([stream.task(t) for t in known])


@dataclass
class TaskData:
    info: TaskInfo
    train: Split
    test: Split
    val: Split | None = None

    @property
    def name(self) -> str:
        return self.info.name


@dataclass
class Batch:
    """One mini-batch; all examples of a batch belong to the same task. ``raw``: a training batch's inputs before the
    stream's augmentation (:attr:`Stream.augment`; None without one), what a method that stores examples keeps."""

    x: Tensor | list[Any]
    y: Tensor
    task: str
    raw: Tensor | None = None

    def __len__(self) -> int:
        return len(self.y)

    def to(self, device: torch.device) -> Batch:
        x = self.x.to(device, non_blocking=True) if isinstance(self.x, Tensor) else self.x
        raw = None if self.raw is None else self.raw.to(device, non_blocking=True)
        return Batch(x, self.y.to(device, non_blocking=True), self.task, raw)


@dataclass(frozen=True)
class CropFlip:
    """The training augmentation of the CIFAR and TinyImageNet benchmarks (torchvision's ``RandomCrop(size,
    padding)`` then ``RandomHorizontalFlip()``, as Mammoth's ``seq_cifar10.py`` composes them), on a whole batch
    (N, C, H, W) where it lies: each image padded by ``padding`` on every side, a ``size``×``size`` window at an
    offset drawn uniformly in [0, 2·padding] per axis, mirrored left-right with probability 1/2. The draws come
    from ``generator`` on the CPU (the same crops on every device); the gather runs on the batch's device, one
    index copy a batch and no synchronisation. ``fill``: the value padding takes per channel, the normalised value
    of a black pixel (−mean/std) for a stream that stores normalised images, so cropping them equals normalising
    a crop of the zero-padded pixels; () pads with 0."""

    size: int
    padding: int = 4
    flip: bool = True
    fill: tuple[float, ...] = ()

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        n, c, h, w = x.shape
        p = self.padding
        tops = torch.randint(0, h + 2 * p - self.size + 1, (n,), generator=generator)
        lefts = torch.randint(0, w + 2 * p - self.size + 1, (n,), generator=generator)
        mirror = torch.rand(n, generator=generator) < 0.5 if self.flip else torch.zeros(n, dtype=torch.bool)
        padded = x.new_zeros((n, c, h + 2 * p, w + 2 * p))
        if self.fill:
            padded += torch.tensor(self.fill, dtype=x.dtype, device=x.device).view(1, c, 1, 1)
        padded[..., p : p + h, p : p + w] = x
        span = torch.arange(self.size)
        rows = tops[:, None] + span  # (n, size)
        cols = lefts[:, None] + torch.where(mirror[:, None], span.flip(0), span)
        rows, cols = (t.to(x.device, non_blocking=True) for t in (rows, cols))
        batch = torch.arange(n, device=x.device)[:, None, None, None]
        channel = torch.arange(c, device=x.device)[None, :, None, None]
        return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


@dataclass(frozen=True)
class ResizedCropFlip:
    """torchvision's ``RandomResizedCrop(size, scale, ratio)`` then ``RandomHorizontalFlip()`` (the ImageNet-R
    training transform of the prompt papers' code), on a whole batch (N, C, H, W) where it lies: per image, an area
    fraction s ~ U(scale) of the image and an aspect ratio r with log r ~ U(log ratio) give a w × h = √(s·r) ×
    √(s/r) box (relative to the image's sides) when it fits, else the whole image (torchvision's fallback after its
    ten tries, here after one); the box's position is uniform, it is resized to ``size`` × ``size`` bilinearly
    (``grid_sample``; torchvision's default interpolation is bilinear too, and it reads a PIL image, not this
    batch of already resized pixels) and mirrored left-right with probability 1/2. The draws come from
    ``generator`` on the CPU."""

    size: int
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True

    def __call__(self, x: Tensor, generator: torch.Generator) -> Tensor:
        n = len(x)
        area = torch.empty(n).uniform_(*self.scale, generator=generator)
        log_r = torch.empty(n).uniform_(math.log(self.ratio[0]), math.log(self.ratio[1]), generator=generator)
        w, h = (area * log_r.exp()).sqrt(), (area / log_r.exp()).sqrt()
        fits = (w <= 1) & (h <= 1)
        w, h = torch.where(fits, w, 1.0), torch.where(fits, h, 1.0)
        left = torch.rand(n, generator=generator) * (1 - w)
        top = torch.rand(n, generator=generator) * (1 - h)
        mirror = torch.rand(n, generator=generator) < 0.5 if self.flip else torch.zeros(n, dtype=torch.bool)
        # the affine map from the output's [-1, 1] square to the box in the input's [-1, 1] coordinates
        sx = torch.where(mirror, -w, w)
        theta = torch.zeros(n, 2, 3)
        theta[:, 0, 0], theta[:, 0, 2] = sx, 2 * left + w - 1
        theta[:, 1, 1], theta[:, 1, 2] = h, 2 * top + h - 1
        theta = theta.to(device=x.device, dtype=x.dtype)
        grid = F.affine_grid(theta, [n, x.shape[1], self.size, self.size], align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


Augment = Callable[[Tensor, torch.Generator], Tensor]
"""A training-time transform of a batch of inputs, drawing its randomness from the generator (:class:`CropFlip`,
:class:`ResizedCropFlip`)."""


# What a method receives at test time (van de Ven et al. 2022, "Three types of incremental learning"). A leaderboard
# ranks cells of one scenario only: a method given the task identity solves an easier problem.
SCENARIOS = {
    "task-incremental": "the task identity is given at test time (one head, mask or label set per task)",
    "domain-incremental": "no task identity at test time; every task shares one label set and one head",
    "class-incremental": "no task identity at test time; the label set grows with every task",
}

# Why a method that declares its scenarios (MethodSpec.scenarios) is built for each: what it relies on at test time.
SCENARIO_NEEDS = {
    "task-incremental": "built on the task identity at test time",
    "domain-incremental": "built for one label set that every task shares, without the task identity",
    "class-incremental": "built to predict among every label seen so far, without the task identity",
}


def scenario_needs(scenarios: Iterable[str]) -> str:
    """Why a method runs only in ``scenarios`` (its MethodSpec.scenarios), for refusals and leaderboards."""
    return "; ".join(SCENARIO_NEEDS.get(s, f"built for {s}") for s in sorted(scenarios))


@dataclass
class Stream:
    """A task stream: the tasks, named orders over them, and a loader per task.

    Subclasses (or instances built by a plugin) implement :meth:`load`. ``modality`` tells which
    models fit ("vector", "image", "text"); ``input_shape`` is set for tensor inputs. ``scenario`` (one of
    :data:`SCENARIOS`) is what a method receives at test time; left empty it follows from the heads: one head
    per task, or tasks with different label sets (scored among the task's own labels), is task-incremental,
    one shared head over one label set is domain-incremental.
    """

    name: str
    tasks: Sequence[TaskInfo]
    orders: dict[str, list[str]]
    modality: str = "vector"
    input_shape: tuple[int, ...] = ()
    multi_head: bool = False
    provenance: str = ""
    scenario: str = ""
    # applied to every training batch (never to a test or validation one): :class:`CropFlip`; None trains on the
    # stored inputs as they are
    augment: Augment | None = None
    _cache: dict[str, TaskData] = field(default_factory=dict, repr=False)
    # splits copied to an accelerator (on_device): (task, split, device) → the copy, and their bytes
    _on_device: dict[tuple[str, str, str], Split] = field(default_factory=dict, repr=False)
    # the paths opened while the factory built it and while a task loaded (clbench._core.provenance: the cell's data)
    opened: set[str] = field(default_factory=set, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.scenario:
            one_label_set = len({t.labels for t in self.tasks}) <= 1
            self.scenario = "domain-incremental" if one_label_set and not self.multi_head else "task-incremental"
        if self.scenario not in SCENARIOS:
            raise DataError(f"stream {self.name!r}: scenario {self.scenario!r} is none of {sorted(SCENARIOS)}")

    def task(self, name: str) -> TaskInfo:
        for t in self.tasks:
            if t.name == name:
                return t
        raise DataError(f"stream {self.name!r} has no task {name!r}; tasks: {[t.name for t in self.tasks]}")

    def order(self, name: str) -> list[str]:
        from clbench.errors import UnknownNameError

        if name not in self.orders:
            raise UnknownNameError("order", name, sorted(self.orders), of=f"stream {self.name!r}")
        return list(self.orders[name])

    def data(self, task: str) -> TaskData:
        if task not in self._cache:
            with reading() as opened:
                data = self.load(self.task(task))
            self.opened.update(opened)
            remember(self, opened)
            for split_name in ("train", "test"):
                if len(getattr(data, split_name)) == 0:
                    raise DataError(f"stream {self.name!r}, task {task!r}: the {split_name} split is empty")
            self._cache[task] = data
        return self._cache[task]

    def on_device(self, task: str, split: str, device: torch.device, fraction: float) -> Split:
        """``task``'s ``split`` ("train", "test", "val"), copied to ``device`` the first time it is asked for while
        every split this stream copied there fits in ``fraction`` of the device's memory (``train.device_data``);
        else, and on the CPU or for inputs that are no tensor (texts), the split as it is. Batches indexed on the
        device then cost no host-to-device copy a step."""
        data = self.data(task)
        host = getattr(data, split)
        if device.type == "cpu" or not fraction or host is None or not isinstance(host.x, Tensor):
            return host
        key = (task, split, str(device))
        if key not in self._on_device:
            size = host.x.numel() * host.x.element_size() + host.y.numel() * host.y.element_size()
            # only splits whose x is a tensor are copied (above)
            held = sum(
                cast(Tensor, t.x).numel() * cast(Tensor, t.x).element_size() + t.y.numel() * t.y.element_size()
                for t in self._on_device.values()
            )
            if held + size > fraction * _device_memory(device):
                return host
            self._on_device[key] = Split(host.x.to(device), host.y.to(device))
        return self._on_device[key]

    def load(self, info: TaskInfo) -> TaskData:  # pragma: no cover - abstract
        raise NotImplementedError

    def score(self, task: str, pred: Tensor, gold: Tensor) -> float:
        """Score in [0, 100] of predicted label indices on ``task``'s test split: percent correct.

        Override for a task's official metric (GLUE: Matthews correlation, F1, Pearson/Spearman × 100).
        """
        return 100.0 * float((pred == gold).sum()) / max(len(gold), 1)

    @torch.no_grad()
    def evaluate(
        self,
        model: CLModel,
        task: str,
        *,
        batch_size: int,
        limit: int | None,
        device: torch.device,
        split: str = "test",
    ) -> float:
        """Score of ``model`` on ``task``'s ``split`` (the first ``limit`` examples when given): ``test``, or
        ``val`` where settings are being chosen (``train.eval_split``; a stream without one raises DataError).

        The runner calls it inside ``method.evaluating(task)`` with the model in eval mode. The default
        runs ``model.predict`` over batches (:meth:`predictions`) and hands the predictions to :meth:`score`;
        override it for evaluations ``predict`` cannot express (an lm-eval task, generation scored by ROUGE).
        """
        return self.score_batches(
            task,
            self.predictions(model, task, batch_size=batch_size, limit=limit, device=device, split=split),
            limit,
            split,
        )

    @torch.no_grad()
    def predictions(
        self,
        model: CLModel,
        task: str,
        *,
        batch_size: int,
        limit: int | None,
        device: torch.device,
        shard: tuple[int, int] = (0, 1),
        split: str = "test",
        device_data: float = 0.0,
    ) -> list[Tensor]:
        """``model.predict`` on the batches of ``task``'s ``split`` (CPU tensors, in order); with ``shard=(r, N)``
        only on batches r, r+N, ... (data-parallel evaluation: each rank its batches, the same batches as one
        process). On an accelerator the split is copied there once while the stream's copies fit in
        ``device_data`` of its memory (``train.device_data``), else batch by batch."""
        split_data, n = self._test_split(task, limit, split)
        if device.type != "cpu":
            split_data = self.on_device(task, split, device, device_data)
        preds = []
        rank, world = shard
        for start in range(rank * batch_size, n, world * batch_size):
            x = split_data.x[start : min(start + batch_size, n)]
            if isinstance(x, Tensor) and x.device != device:
                x = x.to(device, non_blocking=True)
            preds.append(model.predict(x, task))
        if preds and all(isinstance(p, Tensor) and p.device.type != "cpu" for p in preds):
            # one copy to the host for the task, not one (and a sync) a batch
            return list(torch.cat(preds).cpu().split([len(p) for p in preds]))
        return [p.cpu() if isinstance(p, Tensor) else p for p in preds]

    def _test_split(self, task: str, limit: int | None, split_name: str = "test") -> tuple[Split, int]:
        """``task``'s ``split_name`` split ("test" or "val") and how many of its examples are evaluated (the first
        ``limit``, when given)."""
        if split_name not in ("test", "val"):
            raise DataError(f"stream {self.name!r} scores its test or val split, not {split_name!r}")
        data = self.data(task)
        split = data.test if split_name == "test" else data.val
        if split is None or len(split) == 0:
            raise DataError(f"stream {self.name!r}, task {task!r} has no validation split (train.eval_split=val)")
        return split, len(split) if not limit else min(limit, len(split))

    def score_batches(self, task: str, preds: list[Tensor], limit: int | None, split: str = "test") -> float:
        """:meth:`score` of the predictions of every batch of ``task``'s ``split``, in order (see
        :meth:`predictions`)."""
        return self.score_examples(task, preds, limit, split)[0]

    def example_scores(self, task: str, pred: Tensor, gold: Tensor) -> Tensor | None:
        """Each test example's score in [0, 1], whose mean × 100 is :meth:`score` (1.0 a correct prediction), or None
        where the score is not a mean over examples (Matthews correlation, F1): the verdicts' bootstrap resamples
        them (:mod:`clbench.verdicts`). The default: correctness, unless :meth:`score` is overridden."""
        if type(self).score is not Stream.score:
            return None
        return (pred == gold).to(torch.float32)

    def score_examples(
        self, task: str, preds: list[Tensor], limit: int | None, split: str = "test"
    ) -> tuple[float, Tensor | None]:
        """:meth:`score` and :meth:`example_scores` of the predictions of every batch of ``task``'s ``split``."""
        split_data, n = self._test_split(task, limit, split)
        pred, gold = preds[0] if len(preds) == 1 else torch.cat(preds), split_data.y[:n]
        return self.score(task, pred, gold), self.example_scores(task, pred, gold)

    @torch.no_grad()
    def evaluate_examples(
        self,
        model: CLModel,
        task: str,
        *,
        batch_size: int,
        limit: int | None,
        device: torch.device,
        split: str = "test",
        device_data: float = 0.0,
    ) -> tuple[float, Tensor | None]:
        """:meth:`evaluate` and each test example's score (:meth:`example_scores`; None from a stream that overrides
        :meth:`evaluate` but not this). What the runner calls; override it beside :meth:`evaluate` to store
        per-example scores of an evaluation of your own (each in [0, 1], their mean × 100 the score)."""
        if type(self).evaluate is not Stream.evaluate:
            return self.evaluate(model, task, batch_size=batch_size, limit=limit, device=device, split=split), None
        preds = self.predictions(
            model, task, batch_size=batch_size, limit=limit, device=device, split=split, device_data=device_data
        )
        return self.score_examples(task, preds, limit, split)


# what a form must leave to the default: a stream that scores its own way is scored on its own labels
_OWN_SCORING = ("score", "evaluate", "predictions", "evaluate_examples", "score_examples", "example_scores")


class ClassIncrementalForm(Stream):
    """A task-incremental stream's tasks as one class-incremental problem (:class:`clbench.specs.StreamFormSpec`):
    every task's labels are the union of all tasks' labels, in the order of the base's tasks (each label as the base
    names it, or ``task/label`` for every label when two tasks share a name); a task's data are the base's, each
    label index moved to its place in the union; one shared head, no task identity at test time. The base's orders,
    input shape and training augmentation are kept. A stream with one label set (domain-incremental), or one that
    scores its own way (:meth:`Stream.score` and the other evaluation entry points), has no such form."""

    def __init__(self, base: Stream, name: str) -> None:
        if base.scenario != "task-incremental" or len({t.labels for t in base.tasks}) <= 1:
            raise DataError(
                f"stream {name!r}: a class-incremental form needs a task-incremental stream whose tasks have label "
                f"sets of their own; {base.name!r} is {base.scenario} with "
                f"{len({t.labels for t in base.tasks})} label set(s)"
            )
        own = [m for m in _OWN_SCORING if getattr(type(base), m) is not getattr(Stream, m)]
        if own:
            raise DataError(
                f"stream {name!r}: {base.name!r} scores its tasks its own way ({', '.join(own)}), which a "
                "class-incremental form cannot carry over"
            )
        names = [label for t in base.tasks for label in t.labels]
        shared = len(set(names)) < len(names)
        self._index: dict[str, Tensor] = {}  # a task's local label index → its index in the union
        union: list[str] = []
        for t in base.tasks:
            self._index[t.name] = torch.arange(len(union), len(union) + len(t.labels))
            union += [f"{t.name}/{label}" if shared else label for label in t.labels]
        labels = tuple(union)
        tasks = [
            TaskInfo(t.name, labels, t.group, t.instruction, classes=labels[int(i[0]) : int(i[-1]) + 1])
            for t, i in zip(base.tasks, self._index.values(), strict=True)
        ]
        provenance = f"{base.provenance}; its tasks as one class-incremental problem" if base.provenance else ""
        super().__init__(
            name=name,
            tasks=tasks,
            orders={k: list(v) for k, v in base.orders.items()},
            modality=base.modality,
            input_shape=base.input_shape,
            multi_head=False,
            provenance=provenance,
            scenario="class-incremental",
            augment=base.augment,
        )
        self.form_of = base
        self.config = getattr(base, "config", None)  # (what a plugin's code may read of its stream)

    def load(self, info: TaskInfo) -> TaskData:
        data = self.form_of.data(info.name)
        index = self._index[info.name]

        def moved(split: Split | None) -> Split | None:
            return None if split is None else Split(split.x, index[split.y.long()])

        train, test = moved(data.train), moved(data.test)
        assert train is not None and test is not None  # (a base's task has both)
        return TaskData(info, train, test, moved(data.val))


def stream_form(factory: Callable[[Any], Stream], name: str, form: str, config: Any) -> Stream:
    """The stream ``factory`` builds from ``config``, in ``form`` (:data:`clbench.specs.FORMS`), named ``name``: what a
    :class:`~clbench.specs.StreamFormSpec` registers as its stream's factory."""
    if form != "class-incremental":
        raise DataError(f"stream {name!r}: unknown form {form!r}")
    return ClassIncrementalForm(factory(config), name)


def _device_memory(device: torch.device) -> int:
    """The total memory of an accelerator (bytes); 0 where torch cannot say (then nothing is copied there)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return 0


def batches(split: Split, batch_size: int, task: str, generator: torch.Generator | None = None) -> Iterator[Batch]:
    """Mini-batches of ``split``; shuffled when a generator is given (deterministic per generator)."""
    n = len(split)
    x, y = split.x, split.y
    if n == 0:  # (an empty tensor's split() is one empty piece)
        return
    if generator is None:
        for start in range(0, n, batch_size):
            sl = slice(start, start + batch_size)
            yield Batch(x[sl], y[sl], task)
    elif isinstance(x, Tensor):  # a training step's batch: no Split, method call or type check per batch
        order = torch.randperm(n, generator=generator)  # on the CPU: the same order wherever the split is
        if x.device.type != "cpu":
            order = order.to(x.device)  # one copy an epoch, then every batch is indexed on the device
        for index in order.split(batch_size):
            yield Batch(x[index], y[index], task)
    else:
        for index in torch.randperm(n, generator=generator).split(batch_size):
            yield Batch(split.take(index), y[index], task)


def mixed_batches(splits: Sequence[Split], batch_size: int, task: str, generator: torch.Generator) -> Iterator[Batch]:
    """Mini-batches of the union of ``splits`` (several tasks' training splits), shuffled together, so that one batch
    holds examples of several tasks; each batch is named ``task``. For a model whose one head every task shares (a
    class- or domain-incremental stream, whose labels index one label set): a per-task head would need one task a
    batch. Deterministic per generator; the splits' order and sizes fix which example each index is."""
    sizes = [len(s) for s in splits]
    n = sum(sizes)
    if n == 0:
        return
    order = torch.randperm(n, generator=generator)  # on the CPU: the same order wherever the splits are
    if all(isinstance(s.x, Tensor) for s in splits):
        xs = [cast(Tensor, s.x) for s in splits if len(s)]
        x = torch.cat(xs) if len(xs) > 1 else xs[0]  # one copy of the union an epoch; batches index it
        y = torch.cat([s.y for s in splits if len(s)])
        if x.device.type != "cpu":
            order = order.to(x.device)
        for index in order.split(batch_size):
            yield Batch(x[index], y[index], task)
        return
    starts = torch.tensor([0, *itertools.accumulate(sizes)][:-1])  # list inputs (texts): gathered per batch
    for index in order.split(batch_size):
        which = torch.searchsorted(starts, index, right=True) - 1
        picks = list(zip(which.tolist(), (index - starts[which]).tolist(), strict=True))
        yield Batch([splits[i].x[j] for i, j in picks], torch.stack([splits[i].y[j] for i, j in picks]), task)


def stratified_split(y: Tensor, fraction: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Indices (keep, held_out) with ``fraction`` of each class held out; deterministic per generator."""
    keep, held = [], []
    for c in torch.unique(y).tolist():
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        k = int(round(len(idx) * fraction))
        held.append(idx[:k])
        keep.append(idx[k:])
    return torch.sort(torch.cat(keep)).values, torch.sort(torch.cat(held)).values


__all__ = [  # the data contract here, the file helpers from clbench.files
    "Augment",
    "Batch",
    "CropFlip",
    "SCENARIOS",
    "Split",
    "Stream",
    "TMP_SUFFIX",
    "TaskData",
    "TaskInfo",
    "atomic_write_text",
    "atomic_write_with",
    "batches",
    "cache_dir",
    "confined",
    "owner",
    "read_records",
    "read_text",
    "reading",
    "remember",
    "seen_by_package",
    "seen_labels",
    "stratified_split",
]
