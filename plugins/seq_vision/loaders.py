"""Readers of CIFAR-10, CIFAR-100 and TinyImageNet in the formats their authors distribute, or from the hub.

* CIFAR: the python batches, as ``cifar-10-python.tar.gz`` / ``cifar-100-python.tar.gz`` unpack
  (``cifar-10-batches-py/data_batch_1`` … ``data_batch_5``, ``test_batch``; ``cifar-100-python/train``, ``test``):
  each a pickled dict of ``data`` (N×3072 uint8, the red, green then blue planes of 32×32 images, row-major) and
  ``labels`` (CIFAR-10) or ``fine_labels`` (CIFAR-100). Read by an unpickler that builds nothing but numpy arrays,
  lists, dicts and byte strings (:class:`_ArraysOnly`): ``pickle.load`` would run whatever a file names.
* TinyImageNet: ``tiny-imagenet-200/`` as distributed: ``wnids.txt`` (200 WordNet ids), ``train/<wnid>/images/
  *.JPEG`` (500 a class) and ``val/images/*.JPEG`` with ``val/val_annotations.txt`` (file, wnid, box; 50 a class),
  64×64 pixels. Classes are numbered in the sorted order of their wnids (torchvision's ``ImageFolder``). The
  validation images are the test split, as in Mammoth and every paper on it (the test set's labels are not public).
* ImageNet-R: ``imagenet-r/`` as ``imagenet-r.tar`` unpacks (``<wnid>/<file>.jpg``, 200 classes, 30,000 images of
  any size), split into train and test by fixed file lists: CODA-Prompt's (24,000 and 6,000 images, with their
  labels; shipped, ``imagenet_r_split.json.gz``), or a JSON file of the same form (``split_file``). Training images
  are resized to 224×224 (bicubic: Mammoth's unaugmented copy, which its augmentation crops from), test images to
  256×256 then cropped to their centre 224×224 (its test transform).
* The hub (``--data-dir`` not given): ``uoft-cs/cifar10``, ``uoft-cs/cifar100``, ``zh-plus/tiny-imagenet`` through
  ``datasets``; ImageNet-R is read from a folder only (its split lists name the archive's files).

Every reader returns ``(x uint8 N×3×H×W, y int64 N)`` and checks what it read against the format (a missing batch,
a wrong shape, a label out of range), naming the file. Files are confined to the data directory the user gave.
"""

from __future__ import annotations

import gzip
import json
import pickle
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from clbench import hub
from clbench.data import confined
from clbench.errors import DataError

CIFAR = {
    "cifar10": {"folder": "cifar-10-batches-py", "train": [f"data_batch_{k}" for k in range(1, 6)],
                "test": ["test_batch"], "label": b"labels", "classes": 10, "hub": "uoft-cs/cifar10"},
    "cifar100": {"folder": "cifar-100-python", "train": ["train"], "test": ["test"], "label": b"fine_labels",
                 "classes": 100, "hub": "uoft-cs/cifar100"},
}
TINY_FOLDER = "tiny-imagenet-200"
TINY_HUB = "zh-plus/tiny-imagenet"


class _ArraysOnly(pickle.Unpickler):
    """Unpickles the CIFAR batches and nothing else: the only callables it resolves rebuild numpy arrays (and byte
    strings written by Python 3's protocol 2); any other global a file names is refused."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}; only numpy arrays are read from a batch")
        return super().find_class(module, name)


def read_cifar_batch(path: Path, label_key: bytes, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR python batch: (images N×3×32×32 uint8, labels N int64), checked."""
    try:
        with open(path, "rb") as fh:
            record = _ArraysOnly(fh, encoding="bytes").load()
    except FileNotFoundError:
        raise DataError(f"{path} is missing: a CIFAR python batch (unpack the dataset's python archive)") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise DataError(f"{path}: not a CIFAR python batch ({exc})") from None
    if not isinstance(record, dict) or b"data" not in record or label_key not in record:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise DataError(f"{path}: a CIFAR batch holds b'data' and {label_key!r}; found {keys}")
    data, labels = record[b"data"], np.asarray(record[label_key])
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        shape = getattr(data, "shape", None)
        raise DataError(f"{path}: data must be N×3072 uint8 (32×32 RGB planes); got {shape} {getattr(data, 'dtype', '')}")
    if labels.ndim != 1 or len(labels) != len(data):
        raise DataError(f"{path}: {len(data)} images but {labels.shape} labels")
    bad = np.nonzero((labels < 0) | (labels >= classes))[0]
    if len(bad):
        raise DataError(f"{path}: label {int(labels[bad[0]])} of image {int(bad[0])} is outside 0..{classes - 1}")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _folder(root: Path, name: str) -> Path:
    """``root/name``, or ``root`` itself when the user pointed at the folder; confined to ``root``."""
    if (root / name).is_dir():
        return confined(root, name)
    if root.name == name:
        return root
    raise DataError(f"{root}: no {name}/ folder (the dataset's archive unpacked here)")


def cifar_from_dir(root: Path, which: str, split: str) -> tuple[Tensor, Tensor]:
    spec = CIFAR[which]
    folder = _folder(root, spec["folder"])
    xs, ys = [], []
    for name in spec[split]:
        x, y = read_cifar_batch(confined(folder, name), spec["label"], spec["classes"])
        xs.append(x)
        ys.append(y)
    return torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys))


def _jpeg(path: Path, size: int) -> np.ndarray:
    from PIL import Image

    try:
        with Image.open(path) as im:
            a = np.asarray(im.convert("RGB"))  # a few TinyImageNet images are greyscale
    except OSError as exc:
        raise DataError(f"{path}: cannot decode the image ({exc})") from None
    if a.shape != (size, size, 3):
        raise DataError(f"{path}: a {a.shape[1]}×{a.shape[0]} image; TinyImageNet's are {size}×{size}")
    return a


def tiny_from_dir(root: Path, split: str, size: int = 64) -> tuple[Tensor, Tensor]:
    folder = _folder(root, TINY_FOLDER)
    try:
        wnids = sorted(w for w in (folder / "wnids.txt").read_text().split() if w)
    except FileNotFoundError:
        raise DataError(f"{folder}/wnids.txt is missing (TinyImageNet's list of its 200 classes)") from None
    index = {w: k for k, w in enumerate(wnids)}
    files: list[tuple[Path, int]] = []
    if split == "train":
        for w in wnids:
            images = sorted((folder / "train" / w / "images").glob("*.JPEG"))
            if not images:
                raise DataError(f"{folder}/train/{w}/images/ holds no .JPEG image of class {w}")
            files += [(confined(folder, "train", w, "images", f.name), index[w]) for f in images]
    else:
        notes = folder / "val" / "val_annotations.txt"
        if not notes.exists():
            raise DataError(f"{notes} is missing (the validation images' classes)")
        for n, line in enumerate(notes.read_text().splitlines(), 1):
            parts = line.split("\t")
            if len(parts) < 2 or parts[1] not in index:
                raise DataError(f"{notes}, line {n}: expected 'FILE<TAB>WNID…' with a wnid of wnids.txt; got {line!r}")
            files.append((confined(folder, "val", "images", parts[0]), index[parts[1]]))
    x = np.stack([_jpeg(f, size) for f, _ in files])
    y = np.array([k for _, k in files], dtype=np.int64)
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y)


def from_hub(name: str, split: str) -> tuple[Tensor, Tensor]:
    """A hub dataset through ``datasets`` (the ``llm`` extra); images decoded to uint8 N×3×H×W."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise DataError(f"loading {name!r} from the hub needs the 'datasets' package; or pass --data-dir") from exc
    hub.require(name, "the data set", "pass --data-dir DIR, a local copy (formats: plugins/seq_vision/loaders.py)",
                "dataset")
    ds = datasets.load_dataset(name, split=split)
    image = next((c for c in ("img", "image") if c in ds.column_names), None)
    label = next((c for c in ("fine_label", "label") if c in ds.column_names), None)
    if image is None or label is None:
        raise DataError(f"{name}: expected an image and a label column; found {ds.column_names}")
    x = np.stack([np.asarray(im.convert("RGB")) for im in ds[image]])
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.tensor(ds[label], dtype=torch.long)


IMAGENET_R_FOLDER = "imagenet-r"
IMAGENET_R_CLASSES = 200


def imagenet_r_split(split: str, split_file: str = "") -> list[tuple[str, int]]:
    """``(path under imagenet-r/, label)`` of each image of ``split``: the shipped lists, or ``split_file``'s."""
    try:
        if split_file:
            data = json.loads(Path(split_file).read_text(encoding="utf-8"))
        else:
            blob = resources.files(__package__).joinpath("imagenet_r_split.json.gz").read_bytes()
            data = json.loads(gzip.decompress(blob))
        entries = [(str(p), int(k)) for p, k in data[split]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{split_file or 'the shipped ImageNet-R lists'}: expected JSON "
                        f'{{"train": [[PATH, LABEL], ...], "test": [...]}} ({exc})') from None
    bad = next((e for e in entries if not 0 <= e[1] < IMAGENET_R_CLASSES), None)
    if bad is not None:
        raise DataError(f"{split_file or 'the ImageNet-R lists'}: {bad[0]} has label {bad[1]}, not in 0-199")
    return entries


def _resized(path: Path, size: int, crop: int) -> np.ndarray:
    """The image at ``path`` in RGB, resized to ``size``×``size`` (bicubic), then its centre ``crop``×``crop``."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im = im.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)
    except OSError as exc:
        raise DataError(f"{path}: cannot decode the image ({exc})") from None
    a = np.asarray(im)
    start = (size - crop) // 2
    return a[start : start + crop, start : start + crop]


def imagenet_r_from_dir(root: Path, split: str, split_file: str = "", size: int = 224) -> tuple[Tensor, Tensor]:
    folder = _folder(root, IMAGENET_R_FOLDER)
    entries = imagenet_r_split(split, split_file)
    missing = [p for p, _ in entries if not (folder / p).is_file()]
    if missing:
        raise DataError(f"{folder}: {len(missing)} of the {len(entries)} {split} images the split lists name are "
                        f"missing (the first: {missing[0]}); the lists are for the archive imagenet-r.tar")
    resize = size if split == "train" else size * 256 // 224
    x = np.stack([_resized(confined(folder, *p.split("/")), resize, size) for p, _ in entries])
    y = np.array([k for _, k in entries], dtype=np.int64)
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y)
