"""The DER paper's MNIST streams (Buzzega et al. 2020, §4 and Table 2), as its code (Mammoth, tag neurips2020)
builds them:

* ``seq-mnist``: five tasks of two digits (0/1, …, 8/9), class-incremental: one head over the ten digits, each task
  scored on the test images of its two digits; ``seq-mnist-til`` is the same stream scored task-incremental (each
  task among its own two digits: its profiles set ``train.scoring=task``), the paper's Task-IL column of the same runs;
* ``perm-mnist``: 20 tasks, each all of MNIST under its own fixed pixel permutation (every task permuted, the first
  too), domain-incremental, each scored on the full test set permuted alike;
* ``rot-mnist``: 20 tasks, each all of MNIST rotated by an angle drawn uniformly in [0°, 180°) for the task, scored on
  the full test set rotated alike.

Mammoth trains on every training image (no validation hold-out unless ``--validation``): ``val_fraction`` defaults
to 0 here. Its permutations and angles are drawn from the run's seed; here each task's is drawn from a fixed
generator of the task index, so every seed sees the same tasks (the paper's spread over runs includes the draws).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from clbench_plugins._shared import mnist
from torch import Tensor

from clbench.config import bounded, setting
from clbench.data import Split, Stream, TaskData, TaskInfo, stratified_split
from clbench.errors import ConfigError

SEED = 2020  # the permutations', angles' and hold-out's generators
DIGITS = tuple(str(d) for d in range(10))
PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))


@dataclass(frozen=True)
class MNISTConfig:
    data_dir: str = setting("", help='a folder holding the four MNIST idx files; "": the hub (hub_name)')
    hub_name: str = "ylecun/mnist"
    val_fraction: float = bounded(0.0, ge=0, lt=1, help=(
        "held out of train for selection (stratified, fixed seed); 0, the paper's code: every training image trains "
        "and there is no validation split"))
    train_limit: int = bounded(0, ge=0, help=">0: the first N training examples per task (tests); 0: all")


@dataclass(frozen=True)
class PermMNISTConfig(MNISTConfig):
    tasks: int = bounded(20, ge=1, le=100, help="the DER paper's P-MNIST: 20 tasks")


@dataclass(frozen=True)
class RotMNISTConfig(MNISTConfig):
    tasks: int = bounded(20, ge=1, le=100, help="the DER paper's R-MNIST: 20 tasks")
    interpolation: Literal["nearest", "bilinear"] = setting("nearest", help=(
        "how rotated pixels are resampled: nearest is the paper's code (torchvision's rotate of a PIL image, "
        "torchvision 0.4); bilinear is smoother"))

    def __post_init__(self) -> None:
        if self.interpolation not in ("nearest", "bilinear"):
            raise ConfigError(f"stream.interpolation={self.interpolation!r}: choose nearest or bilinear")


@functools.cache
def _mnist(data_dir: str, hub: str, split: str) -> tuple[Tensor, Tensor]:
    if data_dir:
        return mnist.from_dir(Path(data_dir), split, root=Path(data_dir))
    return mnist.from_hub(hub, split)


def _split(x: Tensor, y: Tensor) -> Split:
    return Split(x.float().div_(255.0), y)


def _task_data(info: TaskInfo, c: MNISTConfig, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor]) -> TaskData:
    """The task's splits scaled to [0, 1]; with ``val_fraction=0`` every training image, in file order, and no
    validation split."""
    x, y = train
    if c.val_fraction == 0:
        fit, val = torch.arange(len(y)), None
    else:
        fit, held = stratified_split(y, c.val_fraction, torch.Generator().manual_seed(SEED))
        val = _split(x[held], y[held])
    if c.train_limit:
        fit = fit[: c.train_limit]
    return TaskData(info, _split(x[fit], y[fit]), _split(*test), val)


def _orders(names: list[str]) -> dict[str, list[str]]:
    return {"1": names, "2": names[::-1]}


class SeqMNIST(Stream):
    """Seq-MNIST, class-incremental: the label is the digit, one head over the ten."""

    def __init__(self, config: MNISTConfig, name: str = "seq-mnist") -> None:
        super().__init__(
            name=name,
            tasks=[TaskInfo(f"{a}-{b}", DIGITS, group="mnist", classes=(str(a), str(b))) for a, b in PAIRS],
            orders=_orders([f"{a}-{b}" for a, b in PAIRS]),
            modality="image",
            input_shape=(1, 28, 28),
            multi_head=False,
            scenario="class-incremental",
            provenance=f"MNIST idx files ({config.data_dir or config.hub_name})",
        )
        self.config = config

    def load(self, info: TaskInfo) -> TaskData:
        c = self.config
        a, b = (int(d) for d in info.name.split("-"))

        def part(split: str) -> tuple[Tensor, Tensor]:
            x, y = _mnist(c.data_dir, c.hub_name, split)
            keep = (y == a) | (y == b)
            return x[keep], y[keep]

        return _task_data(info, c, part("train"), part("test"))


class PermMNIST(Stream):
    """P-MNIST: task ``pk`` is MNIST under the pixel permutation :meth:`permutation` (``pk``)."""

    def __init__(self, config: PermMNISTConfig) -> None:
        names = [f"p{k}" for k in range(config.tasks)]
        super().__init__(
            name="perm-mnist",
            tasks=[TaskInfo(n, DIGITS, group="mnist") for n in names],
            orders=_orders(names),
            modality="image",
            input_shape=(1, 28, 28),
            multi_head=False,
            provenance=f"MNIST idx files ({config.data_dir or config.hub_name})",
        )
        self.config = config

    @staticmethod
    def permutation(task: str) -> Tensor:
        return torch.randperm(784, generator=torch.Generator().manual_seed(SEED + 100 + int(task[1:])))

    def load(self, info: TaskInfo) -> TaskData:
        c, perm = self.config, self.permutation(info.name)

        def permuted(split: str) -> tuple[Tensor, Tensor]:
            x, y = _mnist(c.data_dir, c.hub_name, split)
            return x.reshape(len(x), -1)[:, perm].reshape(x.shape), y

        return _task_data(info, c, permuted("train"), permuted("test"))


def rotate(images: Tensor, degrees: float, mode: str = "nearest", chunk: int = 8192) -> Tensor:
    """``images`` (N, C, H, W uint8) rotated ``degrees`` counter-clockwise as displayed (row 0 on top) about the
    image's centre, the size kept and what comes from outside the image 0: PIL's ``Image.rotate`` (torchvision's
    ``rotate`` of a PIL image, as Mammoth does), pixel centres at (i + 0.5). By
    :func:`torch.nn.functional.grid_sample` in float64 (``align_corners=False``: −1 and 1 are the outer edges, so
    (0, 0) is the centre), rounded back to uint8: nearest copies input values; bilinear's convex combinations stay
    in [0, 255] up to float error, which the clamp removes."""
    a = torch.tensor(degrees, dtype=torch.float64).deg2rad()
    cos, sin = float(torch.cos(a)), float(torch.sin(a))
    # theta maps each output location to the input location it samples, in (x right, y down) coordinates: on screen
    # [[cos, −sin], [sin, cos]] turns the sampling grid clockwise, so the image turns counter-clockwise (90°: torch.rot90
    # with k=1, as PIL's rotate(90))
    theta = torch.tensor([[[cos, -sin, 0.0], [sin, cos, 0.0]]], dtype=torch.float64)
    n, c, h, w = images.shape
    grid = F.affine_grid(theta, [1, 1, h, w], align_corners=False)
    flat = images.reshape(1, n * c, h, w)  # every image a channel: one grid for all
    out = torch.empty(flat.shape, dtype=torch.uint8)
    for start in range(0, n * c, chunk):
        part = flat[:, start : start + chunk].to(torch.float64)
        turned = F.grid_sample(part, grid, mode=mode, padding_mode="zeros", align_corners=False)
        out[:, start : start + chunk] = turned.round_().clamp_(0, 255).to(torch.uint8)
    return out.reshape(n, c, h, w)


class RotMNIST(Stream):
    """R-MNIST: task ``rk`` is MNIST rotated by :meth:`angle` (``rk``) degrees."""

    def __init__(self, config: RotMNISTConfig) -> None:
        names = [f"r{k}" for k in range(config.tasks)]
        super().__init__(
            name="rot-mnist",
            tasks=[TaskInfo(n, DIGITS, group="mnist") for n in names],
            orders=_orders(names),
            modality="image",
            input_shape=(1, 28, 28),
            multi_head=False,
            provenance=f"MNIST idx files ({config.data_dir or config.hub_name})",
        )
        self.config = config

    @staticmethod
    def angle(task: str) -> float:
        """Task ``task``'s rotation in degrees, in [0, 180), counter-clockwise as displayed."""
        g = torch.Generator().manual_seed(SEED + 200 + int(task[1:]))
        return 180.0 * float(torch.rand((), generator=g, dtype=torch.float64))

    def load(self, info: TaskInfo) -> TaskData:
        c, degrees = self.config, self.angle(info.name)

        def rotated(split: str) -> tuple[Tensor, Tensor]:
            x, y = _mnist(c.data_dir, c.hub_name, split)
            return rotate(x.reshape(len(x), 1, 28, 28), degrees, c.interpolation).reshape(x.shape), y

        return _task_data(info, c, rotated("train"), rotated("test"))
