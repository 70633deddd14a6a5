"""Readers for MNIST and CIFAR from a local directory, or from the Hugging Face hub through ``datasets``.

Formats, all read without pickle:

* MNIST: the original idx files (``train-images-idx3-ubyte[.gz]`` …), as LeCun ships them.
* CIFAR: either the numpy layout of the LPS code (``<dir>/<split>/X.npy`` N×32×32×3, ``y.npy``; that code
  applies no preprocessing and ships no preparation script, docs/reference-code.md §3.7: clbench reads
  uint8 pixels only) or the hub's parquet layout (``<dir>/**/<split>-*.parquet`` with a PNG ``img`` column and a
  ``label`` / ``fine_label`` column). The python-pickle CIFAR archive is refused on purpose.

Every reader returns ``(x uint8 N×C×H×W, y int64 N)``; callers scale to [0, 1]. Every file read is
confined to ``root`` (the data directory the user gave; default the folder read): a symlinked file that
points out of it is refused (:func:`clbench.data.confined`).
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from clbench import hub
from clbench.data import confined
from clbench.errors import DataError

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_IDX_TYPES = {0x08: np.uint8}


def read_idx(path: Path) -> np.ndarray:
    """One idx file (optionally gzip-compressed): magic 0x0000 0x08 ndim, big-endian sizes, then data."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataError(f"{path}: not an idx file of unsigned bytes (magic {raw[:4].hex() or 'missing'})")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    start = 4 + 4 * ndim
    size = int(np.prod(dims))
    if len(raw) - start != size:
        raise DataError(f"{path}: header says {list(dims)} ({size} bytes) but {len(raw) - start} data bytes follow")
    return np.frombuffer(raw, dtype=np.uint8, offset=start).reshape(dims)


def _inside(root: Path, path: Path) -> Path:
    """``path`` (a path under ``root``) resolved; a :class:`DataError` when a symlink takes it out of ``root``."""
    return confined(root, *path.relative_to(root).parts)


def _find(directory: Path, stem: str, root: Path) -> Path:
    for name in (stem, stem + ".gz"):
        hits = sorted(directory.rglob(name))
        if hits:
            return _inside(root, hits[0])
    raise DataError(f"{directory}: no {stem}[.gz] (the MNIST idx files) under this directory")


def mnist_from_dir(directory: Path, split: str, root: Path | None = None) -> tuple[Tensor, Tensor]:
    """MNIST ``split`` from the idx files under ``directory``, confined to ``root`` (default ``directory``)."""
    root = directory if root is None else root
    images, labels = (read_idx(_find(directory, stem, root)) for stem in MNIST_FILES[split])
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise DataError(f"{directory}: MNIST {split} images {images.shape} do not match labels {labels.shape}")
    bad = np.nonzero(labels > 9)[0]
    if len(bad):
        raise DataError(f"{directory}: MNIST {split} label record {int(bad[0])} is {int(labels[bad[0]])}, not 0..9")
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def _decode_png(record: object, where: str) -> np.ndarray:
    from PIL import Image

    data = record.get("bytes") if isinstance(record, dict) else record
    if not isinstance(data, (bytes, bytearray)):
        raise DataError(f"{where}: the image is not encoded bytes")
    try:
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    except Exception as exc:
        raise DataError(f"{where}: cannot decode the image ({exc})") from exc


def _label_column(columns: list[str], where: str) -> str:
    for name in ("fine_label", "label"):
        if name in columns:
            return name
    raise DataError(f"{where}: no label column (expected 'fine_label' or 'label'; found {columns})")


def _image_column(columns: list[str], where: str) -> str:
    for name in ("img", "image"):
        if name in columns:
            return name
    raise DataError(f"{where}: no image column (expected 'img' or 'image'; found {columns})")


def images_from_records(images: list[object], labels: list[int], where: str) -> tuple[Tensor, Tensor]:
    arrays = []
    for i, rec in enumerate(images):
        if isinstance(rec, np.ndarray) or hasattr(rec, "convert"):  # datasets may hand out decoded PIL images
            arrays.append(np.asarray(rec.convert("RGB") if hasattr(rec, "convert") else rec))
        else:
            arrays.append(_decode_png(rec, f"{where}, record {i}"))
    x = np.stack(arrays)
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.tensor(labels, dtype=torch.long)


def cifar_from_dir(directory: Path, split: str, root: Path | None = None) -> tuple[Tensor, Tensor]:
    """CIFAR ``split`` from ``directory`` (numpy or parquet layout), confined to ``root`` (default ``directory``)."""
    root = directory if root is None else root
    if (directory / split / "X.npy").exists():
        return _cifar_npy(_inside(root, directory / split / "X.npy"), _inside(root, directory / split / "y.npy"))
    files = [_inside(root, f) for f in
             sorted(directory.rglob(f"{split}-*.parquet")) or sorted(directory.rglob(f"{split}.parquet"))]
    if not files:
        raise DataError(f"{directory}: no {split}/X.npy and no {split}-*.parquet file for CIFAR "
                        "(the python-pickle archive is not read; convert it, or use the hub)")
    import pyarrow.parquet as pq

    xs, ys = [], []
    for f in files:
        table = pq.read_table(f)
        cols = table.column_names
        img, lab = _image_column(cols, str(f)), _label_column(cols, str(f))
        x, y = images_from_records(table.column(img).to_pylist(), table.column(lab).to_pylist(), str(f))
        xs.append(x)
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DataError(f"{path} is missing (the numpy CIFAR layout needs X.npy and y.npy)") from None
    except (OSError, ValueError) as exc:  # not a .npy file, or a pickled object array
        raise DataError(f"{path}: not a plain .npy array ({exc})") from None


def _cifar_npy(x_path: Path, y_path: Path) -> tuple[Tensor, Tensor]:
    x = _load_npy(x_path)
    y = _load_npy(y_path).reshape(-1)
    if x.ndim != 4 or x.shape[-1] != 3 or len(x) != len(y):
        raise DataError(f"{x_path}: expected N×H×W×3 images matching y.npy, got {x.shape} and {y.shape}")
    if x.dtype != np.uint8:
        raise DataError(f"{x_path}: expected uint8 pixels, got {x.dtype}")
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y.astype(np.int64))


def from_hub(name: str, split: str) -> tuple[Tensor, Tensor]:
    """A hub dataset (e.g. ``ylecun/mnist``, ``uoft-cs/cifar100``) through ``datasets`` (the ``llm`` extra)."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise DataError(f"loading {name!r} from the hub needs the 'datasets' package; or pass --data-dir") from exc
    hub.require(name, "the data set", "pass --data-dir DIR, a local copy (formats: plugins/vision_streams/"
                "loaders.py)", "dataset")
    ds = datasets.load_dataset(name, split=split)
    cols = ds.column_names
    img, lab = _image_column(cols, name), _label_column(cols, name)
    x, y = images_from_records(list(ds[img]), list(ds[lab]), f"{name}:{split}")
    return (x[:, :1] if name.endswith("mnist") else x), y
