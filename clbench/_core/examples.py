"""Per-example scores of a cell's evaluations, stored compactly in ``result.json`` (``examples``).

``examples[i][j]`` holds the test examples of task j scored after training task i (run order), each in [0, 1],
their mean × 100 being ``accuracy_matrix[i][j]``: what the verdicts' two-level bootstrap resamples
(:mod:`clbench.verdicts`). 0/1 scores (correctness) are stored as bits, others as float16, each zlib-compressed
and base64-encoded: a 10-task stream of 10,000 test images a task takes ~50 KB a cell at 97 % accuracy.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from clbench.errors import ResultFileError

Entry = dict[str, Any] | None


def encode(scores: torch.Tensor | None) -> Entry:
    """One task's per-example scores as a result.json entry (None stays None)."""
    if scores is None:
        return None
    a = scores.detach().to("cpu", torch.float32).numpy().ravel()
    if np.all((a == 0) | (a == 1)):
        return {"n": len(a), "bits": _pack(np.packbits(a.astype(bool)).tobytes())}
    return {"n": len(a), "f16": _pack(a.astype("<f2").tobytes())}


def decode(entry: Entry) -> np.ndarray | None:
    """The scores of one entry as float32 (None stays None). An entry that does not decode to its ``n`` scores
    (a result.json edited by hand or cut) is a :class:`~clbench.errors.ResultFileError` saying what is wrong."""
    if entry is None:
        return None
    n = int(entry["n"])
    if "bits" in entry:
        raw = np.frombuffer(_unpack(entry["bits"]), dtype=np.uint8)
        if len(raw) != (n + 7) // 8:
            raise ResultFileError(f"holds {len(raw) * 8} bits for its n={n} scores")
        return np.unpackbits(raw, count=n).astype(np.float32)
    if "f16" not in entry:
        raise ResultFileError("holds neither `bits` nor `f16`")
    data = _unpack(entry["f16"])
    if len(data) != 2 * n:
        raise ResultFileError(f"holds {len(data)} bytes of float16 for its n={n} scores")
    return np.frombuffer(data, dtype="<f2").astype(np.float32)


def encode_row(row: Sequence[torch.Tensor | None]) -> list[Entry]:
    return [encode(s) for s in row]


def final_row(examples: Sequence[Sequence[Entry]] | None, tasks: Sequence[str]) -> dict[str, np.ndarray] | None:
    """Task → per-example scores of the last evaluation, or None unless every task of it has them."""
    if not examples or len(examples) != len(tasks):
        return None
    last = len(examples) - 1
    if len(examples[last]) != len(tasks):
        raise ResultFileError(f"examples[{last}] holds {len(examples[last])} entries for its {len(tasks)} tasks")
    decoded = []
    for task, entry in zip(tasks, examples[last], strict=True):
        try:
            decoded.append(decode(entry))
        except ResultFileError as exc:  # the caller names the file
            raise ResultFileError(f"examples[{last}] of task {task!r} {exc}") from None
    if any(d is None for d in decoded):
        return None
    return {t: d for t, d in zip(tasks, decoded, strict=True) if d is not None}


def _pack(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 9)).decode("ascii")


def _unpack(text: str) -> bytes:
    try:
        return zlib.decompress(base64.b64decode(text, validate=True))
    except (binascii.Error, zlib.error) as exc:
        raise ResultFileError(f"is not base64 of zlib data ({exc})") from None
