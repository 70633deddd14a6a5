"""Counting the bytes a computation holds: :class:`LiveBytes`, a dispatch mode that keeps the live and peak bytes of
every tensor storage produced inside it (on the meta device: sizes without values), and the sizes clbench prints
and parses (``80GiB``). The memory plan (:mod:`clbench._exec.memory`) runs a cell's own code under it."""

from __future__ import annotations

import re
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from clbench.errors import ConfigError

HOST_COPY_EXPANDED_BYTES = 2**20
"""A meta tensor's host copy above this size is a stride-0 zero (:meth:`LiveBytes._host_copy`): planning
paper-expander's Llama-3-8B Expander-EWC cell held 11 GB of host memory with real zeros up to 64 MiB (its q/o
projections' float32 footprint baselines and Fisher are 64 MiB each), 0.6 GB with this bound, the same plan."""

_ITEM = torch.ops.aten._local_scalar_dense.default
_TO_COPY = torch.ops.aten._to_copy.default


def meta_item(tensor: torch.Tensor) -> bool | int | float:
    """A meta tensor's ``.item()``: false, 0 or 0.0 (and a copy of one to the host: zeros). A meta tensor has no
    value; code that asks one mostly checks whether it may skip work (transformers' "is the attention mask all
    ones?", which then keeps the mask), so the answer that does the work keeps the estimate an upper bound on that
    path. Code whose shapes follow from a value (``nonzero``, a quantile's mask) still fails on meta: see
    :func:`estimate`."""
    if tensor.dtype == torch.bool:
        return False
    return 0.0 if tensor.is_floating_point() else 0


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of every tensor storage alive that an op inside the mode produced (or :meth:`add` was given),
    and the peak. A storage counts once however many views share it, and stops counting when freed."""

    def __init__(self, device: torch.device | None = None, values: Any = None, count_host: bool = False) -> None:
        super().__init__()
        self.device = device  # count only tensors on this device (None: all)
        # what ``.item()`` of a meta tensor gives (None: PyTorch's error): :func:`meta_item`
        self.values = values
        # a meta tensor's copies to the host count too: a cell that runs on the CPU, whose host is its device
        self.count_host = count_host
        self.host: set[int] = set()  # storages never counted: the stream's data, which views of a batch share
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0  # since the last reset_peak()
        self.top = 0  # since the start

    def add(self, tensor: Any) -> None:
        if (
            not isinstance(tensor, torch.Tensor)
            or tensor.is_sparse
            or (self.device is not None and tensor.device.type != self.device.type)
        ):
            return
        self._count(tensor.untyped_storage())

    def _count(self, storage: Any, nbytes: int | None = None) -> None:
        key = id(storage)  # a storage keeps its one Python object while it lives (meta storages have no address)
        if key in self.live or key in self.host:
            return
        self.live[key] = storage.nbytes() if nbytes is None else nbytes
        self.now += self.live[key]
        self.peak = max(self.peak, self.now)
        self.top = max(self.top, self.now)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def reset_peak(self) -> None:
        self.peak = self.now

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.values is not None and args and getattr(args[0], "is_meta", False):
            if func is _ITEM:
                return self.values(args[0])
            if func is _TO_COPY and torch.device((kwargs or {}).get("device") or "meta").type == "cpu":
                return self._host_copy(args[0], (kwargs or {}).get("dtype") or args[0].dtype)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.add(t)
        return out

    def _host_copy(self, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A meta tensor's copy to the host (an adapter snapshot, a task's starting weights): zeros, host memory
        rather than the device's unless :attr:`count_host`. A large one is one zero seen at every index, so that
        planning an 8B model's starting weights takes no 30 GiB of host memory (code that writes into such a copy
        fails here, and the cell is measured another way)."""
        nbytes = tensor.numel() * dtype.itemsize
        out = (
            torch.zeros((), dtype=dtype).expand(tensor.shape)
            if nbytes > HOST_COPY_EXPANDED_BYTES
            else torch.zeros(tensor.shape, dtype=dtype)
        )
        if self.count_host:
            self._count(out.untyped_storage(), nbytes)
        return out


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?i?B?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> int:
    """``80GiB``, ``80G``, ``141 GB`` (binary units: 80 GB is read as 80 GiB), ``1e9``-free plain bytes."""
    m = _SIZE.match(text)
    if not m:
        raise ConfigError(f"--device-memory {text!r}: give a size such as 80GiB, 141GiB or 24G")
    return int(float(m.group(1)) * _UNITS[m.group(2)[:1].upper()])
