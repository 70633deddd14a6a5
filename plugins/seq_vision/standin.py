"""Stand-in copies of CIFAR-10, CIFAR-100, TinyImageNet and ImageNet-R in their distributed formats (:mod:`.loaders`;
ImageNet-R with a split file of its own), with a few random images a class: for tests, timing and a dry run of a pipeline before the real data are downloaded. No
package ships these datasets; a number measured on a stand-in is never a benchmark result.

    python -m clbench_plugins.seq_vision.standin DIR [--train N] [--test N]   # writes DIR/cifar-10-batches-py, …
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np

from .loaders import CIFAR, IMAGENET_R_FOLDER, TINY_FOLDER


def write_cifar(root: Path, which: str, train: int, test: int, seed: int = 0) -> Path:
    """``root/<folder>`` with ``train`` and ``test`` random 32×32 images a class in the python-batch format (CIFAR-10
    split over its five training batches); returns the folder."""
    spec = CIFAR[which]
    folder = root / spec["folder"]
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    classes = spec["classes"]
    for split, per in (("train", train), ("test", test)):
        labels = np.tile(np.arange(classes), per)
        rng.shuffle(labels)
        data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
        for name, part in zip(spec[split], np.array_split(np.arange(len(labels)), len(spec[split])), strict=True):
            record = {b"batch_label": name.encode(), b"data": data[part], spec["label"]: labels[part].tolist(),
                      b"filenames": [f"{k}.png".encode() for k in part]}
            (folder / name).write_bytes(pickle.dumps(record, protocol=2))
    return folder


def write_tinyimagenet(root: Path, classes: int, train: int, test: int, seed: int = 0) -> Path:
    """``root/tiny-imagenet-200`` with ``classes`` made-up wnids, ``train`` and ``test`` random 64×64 JPEGs a class,
    laid out as the real archive; returns the folder."""
    from PIL import Image

    folder = root / TINY_FOLDER
    rng = np.random.default_rng(seed)
    wnids = [f"n{10_000_000 + 7919 * k:08d}" for k in range(classes)]
    (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
    (folder / "wnids.txt").write_text("".join(f"{w}\n" for w in wnids[::-1]))  # the real file is not sorted either
    notes = []
    for w in wnids:
        images = folder / "train" / w / "images"
        images.mkdir(parents=True, exist_ok=True)
        for k in range(train):
            Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(images / f"{w}_{k}.JPEG", "JPEG")
        for _ in range(test):
            name = f"val_{len(notes)}.JPEG"
            Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / "val" / "images" / name,
                                                                                    "JPEG")
            notes.append(f"{name}\t{w}\t0\t0\t63\t63\n")
    (folder / "val" / "val_annotations.txt").write_text("".join(notes))
    return folder


def write_imagenet_r(root: Path, classes: int, train: int, test: int, seed: int = 0) -> tuple[Path, Path]:
    """``root/imagenet-r`` with ``classes`` made-up wnids of random JPEGs of assorted sizes (``train`` + ``test`` a
    class), and ``root/imagenet-r-split.json``, their train and test lists in the shipped lists' form (the real
    lists name the real archive's 30,000 files); returns both."""
    import json

    from PIL import Image

    folder = root / IMAGENET_R_FOLDER
    rng = np.random.default_rng(seed)
    lists: dict[str, list[list[object]]] = {"train": [], "test": []}
    for label in range(classes):
        wnid = f"n{20_000_000 + 7919 * label:08d}"
        (folder / wnid).mkdir(parents=True, exist_ok=True)
        for k in range(train + test):
            h, w = (int(v) for v in rng.integers(20, 90, 2))
            name = f"{wnid}/art_{k}.jpg"
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(folder / name, "JPEG")
            lists["train" if k < train else "test"].append([name, label])
    split = root / "imagenet-r-split.json"
    split.write_text(json.dumps(lists))
    return folder, split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--train", type=int, default=10, help="training images a class")
    parser.add_argument("--test", type=int, default=2, help="test images a class")
    args = parser.parse_args()
    for which in CIFAR:
        print(write_cifar(args.root, which, args.train, args.test))
    print(write_tinyimagenet(args.root, 200, args.train, args.test))
    print(*write_imagenet_r(args.root, 200, args.train, args.test))


if __name__ == "__main__":
    main()
