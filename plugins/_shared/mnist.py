"""MNIST from its idx files in a local directory, or from the hub through ``datasets``: ``(x uint8 N×1×28×28,
y int64 N)``. Every file read is confined to ``root`` (the data directory the user gave): a symlinked file that
points out of it is refused (:func:`clbench.data.confined`)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from clbench import hub
from clbench.data import confined
from clbench.errors import DataError

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: Path) -> np.ndarray:
    """One idx file of unsigned bytes (optionally gzip-compressed): magic 0x0000 0x08 ndim, big-endian sizes, data."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08":
        raise DataError(f"{path}: not an idx file of unsigned bytes (magic {raw[:4].hex() or 'missing'})")
    dims = np.frombuffer(raw, dtype=">u4", count=raw[3], offset=4).astype(int)
    start, size = 4 + 4 * raw[3], int(np.prod(dims))
    if len(raw) - start != size:
        raise DataError(f"{path}: header says {dims.tolist()} ({size} bytes) but {len(raw) - start} data bytes follow")
    return np.frombuffer(raw, dtype=np.uint8, offset=start).reshape(dims)


def from_dir(directory: Path, split: str, root: Path | None = None) -> tuple[Tensor, Tensor]:
    """MNIST ``split`` from the idx files anywhere under ``directory``, confined to ``root`` (default ``directory``)."""
    root = directory if root is None else root
    found = []
    for stem in FILES[split]:
        hits = [h for name in (stem, stem + ".gz") for h in sorted(directory.rglob(name))]
        if not hits:
            raise DataError(f"{directory}: no {stem}[.gz] (the MNIST idx files) under this directory")
        found.append(read_idx(confined(root, *hits[0].relative_to(root).parts)))
    images, labels = found
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"{directory}: MNIST {split} images {images.shape} do not match labels {labels.shape}")
    if len(labels) and int(labels.max()) > 9:
        bad = int(np.argmax(labels > 9))
        raise DataError(f"{directory}: MNIST {split} label record {bad} is {int(labels[bad])}, not 0..9")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def from_hub(name: str, split: str) -> tuple[Tensor, Tensor]:
    """MNIST ``split`` of the hub data set ``name`` (``ylecun/mnist``) through ``datasets`` (the ``llm`` extra)."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise DataError(f"loading {name!r} from the hub needs the 'datasets' package; or pass --data-dir") from exc
    hub.require(name, "the data set", "pass --data-dir DIR, a folder holding the four MNIST idx files", "dataset")
    ds = datasets.load_dataset(name, split=split)
    x = np.stack([np.asarray(img.convert("L"), dtype=np.uint8) for img in ds["image"]])
    return torch.from_numpy(x).unsqueeze(1), torch.tensor(ds["label"], dtype=torch.int64)
