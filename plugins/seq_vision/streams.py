"""The class-incremental image streams of the DER paper and Mammoth (``datasets/seq_cifar10.py``,
``seq_tinyimagenet.py``; Seq-CIFAR-100 as Mammoth's later ``seq_cifar100.py`` splits it):

* ``seq-cifar10``: CIFAR-10 in 5 tasks of 2 classes (0/1, 2/3, …), 5,000 training and 1,000 test images a class;
* ``seq-cifar100``: CIFAR-100 in 10 tasks of 10 classes; ``seq-cifar100-20``: 20 tasks of 5;
* ``seq-tinyimg``: TinyImageNet in 10 tasks of 20 classes (64×64), its validation images the test set;
* ``imagenet-r``: ImageNet-R in 10 tasks of 20 classes (224×224), split by CODA-Prompt's file lists (the prompt
  papers' benchmark; Mammoth's ``seq-imagenet-r``), trained with a random resized crop and flip at 224
  (:class:`clbench.data.ResizedCropFlip`), its images in [0, 1] (Mammoth normalises it with mean 0, sd 1).

Each is class-incremental (one head over every class of the stream; no task identity at test time). Scored with
``train.scoring=task`` (each task among its own classes) the same runs give the Task-IL column: the paper profiles'
``seq-cifar10-til`` and ``seq-tinyimg-til`` are these streams under that setting. Classes keep the dataset's numbering and tasks take
them in that order, as Mammoth does.

Images are stored normalised with the dataset's published mean and sd (Mammoth's; ``normalise=false``: in [0, 1]), and training batches are
augmented as Mammoth's ``TRANSFORM``: a random crop with padding 4 and a horizontal flip (:class:`clbench.data.
CropFlip`, padding with the normalised value of black, so the result equals normalising an augmented image).
Test and validation images are never augmented. Mammoth trains on every training image: ``val_fraction`` is 0 by
default (set it for a tuning split, held out of train, stratified, with a fixed seed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from clbench.config import bounded, setting
from clbench.data import CropFlip, ResizedCropFlip, Split, Stream, TaskData, TaskInfo, stratified_split
from clbench.errors import DataError

from . import loaders

SEED = 2020  # the validation hold-out's generator
# (mean, sd) per channel of the training images in [0, 1], as Mammoth normalises each dataset
NORMALISE = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2615)),
    "cifar100": ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
    "tinyimg": ((0.4802, 0.4480, 0.3975), (0.2770, 0.2691, 0.2821)),
    "imagenet-r": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
}
SIZES = {"cifar10": 32, "cifar100": 32, "tinyimg": 64, "imagenet-r": 224}


@dataclass(frozen=True)
class VisionConfig:
    data_dir: str = setting("", help=(
        'a folder holding the dataset as its authors distribute it (plugins/seq_vision/loaders.py); "": the hub'))
    val_fraction: float = bounded(0.0, ge=0, lt=1, help=(
        "held out of train for selection (stratified, fixed seed); 0, Mammoth's default: every training image trains"))
    train_limit: int = bounded(0, ge=0, help=">0: the first N training images a task (tests, timing); 0: all")
    test_limit: int = bounded(0, ge=0, help=">0: the first N test images a task (tests); 0: all")
    augment: bool = setting(True, help="random crop (padding 4) and horizontal flip of training batches, Mammoth's")
    split_file: str = setting("", help=(
        'ImageNet-R\'s train and test lists: "", CODA-Prompt\'s (shipped); or a JSON file {"train": [[PATH, LABEL], '
        '...], "test": [...]} of paths under imagenet-r/'))
    normalise: bool = setting(True, help=(
        "images normalised with the dataset's mean and sd (Mammoth's); false: in [0, 1], as the prompt papers' code "
        "feeds a pretrained ViT (the model plugin normalises, model.mean and model.std)"))


@functools.cache
def _images(dataset: str, data_dir: str, split: str, split_file: str = "") -> tuple[Tensor, Tensor]:
    """``dataset``'s ``split`` as (uint8 N×3×H×W, int64 labels), read once a process: kept as bytes, a quarter of
    float32's size (TinyImageNet's training split: 1.2 GB); each task normalises its own images (:func:`_normalised`)."""
    if dataset == "imagenet-r":
        if not data_dir:
            raise DataError("ImageNet-R is read from --data-dir DIR, a folder holding imagenet-r/ as "
                            "https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar unpacks (its split lists "
                            "name the archive's files)")
        return loaders.imagenet_r_from_dir(Path(data_dir), split, split_file)
    if dataset == "tinyimg":
        x, y = (loaders.tiny_from_dir(Path(data_dir), split) if data_dir
                else loaders.from_hub(loaders.TINY_HUB, "train" if split == "train" else "valid"))
    else:
        x, y = (loaders.cifar_from_dir(Path(data_dir), dataset, split) if data_dir
                else loaders.from_hub(loaders.CIFAR[dataset]["hub"], split))
    return x, y


def _normalised(x: Tensor, dataset: str, normalise: bool = True) -> Tensor:
    """uint8 images scaled to [0, 1] and (``normalise``) normalised with ``dataset``'s per-channel mean and sd."""
    if not normalise:
        return x.float().div_(255.0)
    mean, sd = (torch.tensor(v).view(1, 3, 1, 1) for v in NORMALISE[dataset])
    return (x.float().div_(255.0) - mean) / sd


class SeqVision(Stream):
    """``dataset`` in ``tasks`` tasks of consecutive classes, class-incremental (scored as the profile says)."""

    def __init__(self, config: VisionConfig, *, name: str, dataset: str, classes: int, tasks: int) -> None:
        per = classes // tasks
        labels = tuple(str(c) for c in range(classes))
        infos = [TaskInfo(f"{k * per}-{(k + 1) * per - 1}", labels, group=dataset,
                          classes=labels[k * per : (k + 1) * per]) for k in range(tasks)]
        names = [t.name for t in infos]
        size = SIZES[dataset]
        mean, sd = NORMALISE[dataset] if config.normalise else ((0.0,) * 3, (1.0,) * 3)
        augment: CropFlip | ResizedCropFlip = (
            ResizedCropFlip(size) if dataset == "imagenet-r"
            else CropFlip(size, 4, True, tuple(-m / s for m, s in zip(mean, sd, strict=True))))
        super().__init__(
            name=name,
            tasks=infos,
            orders={"1": names, "2": names[::-1]},
            modality="image",
            input_shape=(3, size, size),
            multi_head=False,
            scenario="class-incremental",
            provenance=f"{dataset} ({config.data_dir or 'the hub'})",
            augment=augment if config.augment else None,
        )
        self.config, self.dataset = config, dataset

    def load(self, info: TaskInfo) -> TaskData:
        c = self.config
        keep = torch.tensor([int(k) for k in info.classes])

        def part(split: str, limit: int) -> tuple[Tensor, Tensor]:
            x, y = _images(self.dataset, c.data_dir, split, c.split_file)
            idx = torch.nonzero(torch.isin(y, keep)).flatten()
            idx = idx[:limit] if limit else idx
            return _normalised(x[idx], self.dataset, c.normalise), y[idx]

        x, y = part("train", 0)
        val = None
        fit = torch.arange(len(y))
        if c.val_fraction:
            fit, held = stratified_split(y, c.val_fraction, torch.Generator().manual_seed(SEED))
            val = Split(x[held], y[held])
        if c.train_limit:
            fit = fit[: c.train_limit]
        return TaskData(info, Split(x[fit], y[fit]), Split(*part("test", c.test_limit)), val)


STREAMS = {  # name -> (dataset, classes, tasks)
    "seq-cifar10": ("cifar10", 10, 5),
    "seq-cifar100": ("cifar100", 100, 10),
    "seq-cifar100-20": ("cifar100", 100, 20),
    "seq-tinyimg": ("tinyimg", 200, 10),
    "imagenet-r": ("imagenet-r", 200, 10),
}
