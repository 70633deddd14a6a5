"""What one task changed in the weights, per parameter.

Three forms, so metrics never need more than the method actually stores:

* :class:`LowRank` — ΔW = scale · B @ A with A (r × in) and B (out × r), the PEFT layout.
* :class:`Masked` — ΔW is non-zero only where ``mask`` is true; ``values`` holds those entries in
  row-major order. Masks are stored bit-packed on disk.
* :class:`Dense` — the full ΔW.

Footprints are saved to ``footprints.safetensors`` next to ``result.json`` so metrics can be recomputed
without retraining.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor


@dataclass
class LowRank:
    A: Tensor  # r × in
    B: Tensor  # out × r
    scale: float = 1.0

    kind = "lowrank"

    @property
    def shape(self) -> tuple[int, int]:
        return (self.B.shape[0], self.A.shape[1])

    def rows(self, chunk: int) -> Iterator[Tensor]:
        """ΔW in row chunks, never all of it at once."""
        A = self.A.float()
        B = self.B.float() * self.scale
        for s in range(0, B.shape[0], chunk):
            yield B[s : s + chunk] @ A

    def dense(self) -> Tensor:
        return (self.B.float() @ self.A.float()) * self.scale


@dataclass
class Masked:
    mask: Tensor  # bool, shape of the parameter
    values: Tensor  # 1-D, the entries of ΔW where mask is true (row-major)

    kind = "masked"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.mask.shape)

    @classmethod
    def from_delta(cls, delta: Tensor, mask: Tensor) -> Masked:
        mask = mask.bool()
        return cls(mask, delta[mask].float())

    def rows(self, chunk: int) -> Iterator[Tensor]:
        m = self.mask.reshape(self.mask.shape[0], -1)
        offset = 0
        for s in range(0, m.shape[0], chunk):
            block = m[s : s + chunk]
            out = torch.zeros(block.shape, dtype=torch.float32)
            n = int(block.sum())
            out[block] = self.values[offset : offset + n]
            offset += n
            yield out

    def dense(self) -> Tensor:
        out = torch.zeros(self.mask.shape, dtype=torch.float32)
        out[self.mask] = self.values
        return out


@dataclass
class Dense:
    delta: Tensor

    kind = "dense"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.delta.shape)

    def rows(self, chunk: int) -> Iterator[Tensor]:
        d = self.delta.reshape(self.delta.shape[0], -1).float()
        for s in range(0, d.shape[0], chunk):
            yield d[s : s + chunk]

    def dense(self) -> Tensor:
        return self.delta.float()


Footprint = LowRank | Masked | Dense
TaskFootprint = dict[str, Footprint]  # parameter name -> footprint


def kinds(footprints: list[TaskFootprint]) -> set[str]:
    return {fp.kind for task in footprints for fp in task.values()}


# --------------------------------------------------------------------------- storage
_SEP = "|"


def to_tensors(footprints: list[TaskFootprint]) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for t, task in enumerate(footprints):
        for name, fp in task.items():
            key = f"{t}{_SEP}{name}{_SEP}{fp.kind}"
            if isinstance(fp, LowRank):
                out[key + f"{_SEP}A"] = fp.A.detach().float().contiguous().cpu()
                out[key + f"{_SEP}B"] = fp.B.detach().float().contiguous().cpu()
                out[key + f"{_SEP}scale"] = torch.tensor([fp.scale], dtype=torch.float64)
            elif isinstance(fp, Masked):
                packed = np.packbits(fp.mask.cpu().numpy().reshape(-1))
                out[key + f"{_SEP}mask"] = torch.from_numpy(packed)
                out[key + f"{_SEP}shape"] = torch.tensor(list(fp.mask.shape), dtype=torch.int64)
                out[key + f"{_SEP}values"] = fp.values.detach().float().contiguous().cpu()
            else:
                out[key + f"{_SEP}delta"] = fp.delta.detach().float().contiguous().cpu()
    if not out:  # safetensors cannot write an empty file meaningfully; keep the task count
        out["__empty__"] = torch.zeros(1)
    out["__tasks__"] = torch.tensor([len(footprints)])
    return out


def from_tensors(tensors: dict[str, Tensor]) -> list[TaskFootprint]:
    n = int(tensors["__tasks__"][0])
    result: list[TaskFootprint] = [{} for _ in range(n)]
    groups: dict[tuple[int, str, str], dict[str, Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("__"):
            continue
        task, name, kind, part = key.split(_SEP)
        groups.setdefault((int(task), name, kind), {})[part] = value
    for (t, name, kind), parts in sorted(groups.items()):
        if kind == "lowrank":
            result[t][name] = LowRank(parts["A"], parts["B"], float(parts["scale"][0]))
        elif kind == "masked":
            shape = tuple(int(s) for s in parts["shape"])
            size = int(np.prod(shape))
            bits = np.unpackbits(parts["mask"].numpy())[:size].astype(bool)
            result[t][name] = Masked(torch.from_numpy(bits.reshape(shape)), parts["values"])
        else:
            result[t][name] = Dense(parts["delta"])
    return result


_HASH_CHUNK = 64 * 2**20


def _digest(path: Path) -> tuple[str, int]:
    """sha256 and size of a file, read in chunks (an 8B model's dense footprints are tens of GB)."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


# safetensors' name of each dtype a footprint file holds, and its rank in safetensors' ``Dtype`` order: the file lays
# tensors out by that order, largest first, then by name (checked against safetensors' own serialiser in a test)
_SAFETENSORS = {
    torch.int64: ("I64", 7),
    torch.float64: ("F64", 6),
    torch.float32: ("F32", 5),
    torch.int32: ("I32", 4),
    torch.bfloat16: ("BF16", 3),
    torch.float16: ("F16", 2),
    torch.uint8: ("U8", 1),
    torch.bool: ("BOOL", 0),
}


def _write_safetensors(tensors: Mapping[str, Tensor], fh: Any) -> tuple[str, int]:
    """Write ``tensors`` in safetensors' format to the open binary file ``fh``, one tensor at a time from its own
    memory, and return the sha256 and size of what was written. The same bytes as ``safetensors.torch.save`` (a
    test), which builds the whole file in memory first — an 8B model's dense footprints are tens of GB — while
    ``save_file`` writes through a temp file of its own, which neither our atomic write nor the orphan sweep knows
    (a process killed mid-write would leave it behind). The format: a little-endian u64 header size, a JSON header of each
    tensor's dtype, shape and byte range padded with spaces to 8 bytes, then the tensors' bytes."""
    import json
    import struct

    order = sorted(tensors, key=lambda k: (-_SAFETENSORS[tensors[k].dtype][1], k))
    header, offset = {}, 0
    for key in order:
        t = tensors[key]
        n = t.numel() * t.element_size()
        header[key] = {"dtype": _SAFETENSORS[t.dtype][0], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    h, size = hashlib.sha256(), 0
    for entry in [None, *order]:
        if entry is None:
            data: Any = struct.pack("<Q", len(text)) + text
        else:  # the tensor's own bytes (a view, no copy, for a contiguous CPU tensor)
            # ignore: ndarray is a buffer; numpy's stubs declare __buffer__ only for Python >= 3.12
            data = memoryview(tensors[entry].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
        fh.write(data)
        h.update(data)
        size += data.nbytes if isinstance(data, memoryview) else len(data)
    return h.hexdigest(), size


def save(footprints: list[TaskFootprint], path: Path) -> dict[str, Any]:
    """Write the footprints, tensor by tensor (:func:`_write_safetensors`); returns ``{"file", "sha256", "bytes"}``
    for result.json, so a truncated or swapped file is caught when the metrics are recomputed (``clbench metrics``)."""
    from clbench.data import atomic_write_with

    written: list[tuple[str, int]] = []

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            written.append(_write_safetensors(to_tensors(footprints), fh))

    atomic_write_with(path, write)
    sha, size = written[0]
    return {"file": path.name, "sha256": sha, "bytes": size}


def load(path: Path, digest: Mapping[str, Any] | None = None) -> list[TaskFootprint]:
    """Read footprints; with ``digest`` (result.json's ``footprints``) a file that does not match it is a
    :class:`~clbench.errors.ResultFileError` (truncated, or another cell's). Hashed in chunks and read tensor by
    tensor, never held twice."""
    from safetensors.torch import load_file

    from clbench.errors import ResultFileError

    try:
        sha, size = _digest(Path(path))
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if digest is not None and (size != digest.get("bytes") or sha != digest.get("sha256")):
        raise ResultFileError(
            f"{path}: {size} bytes that do not match the sha256 and size ({digest.get('bytes')}) "
            "recorded in result.json: truncated or another cell's file"
        )
    try:
        return from_tensors(load_file(str(path)))
    except Exception as exc:  # safetensors raises its own errors on a damaged header
        raise ResultFileError(f"{path}: not a clbench footprint file ({type(exc).__name__}: {exc})") from None
