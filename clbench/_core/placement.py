"""Where a planned cell runs on a machine with a GPU: a tiny model on the CPU's cores (``train.device=auto``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clbench._core.registry import Registries
    from clbench.cell import Cell

# Below this many parameters a model's step on a GPU is launch latency, not arithmetic: on a machine with a GPU,
# `train.device=auto` runs such a cell on the CPU, and `--jobs auto` then runs one such cell a core
# (docs/scale-out.md: the quick default's cells, 85-166 k parameters, 123 of them in 34 s on a 16-core H100 host's
# CPUs, against one cell in 45 s on its GPU, one cell at a time).
TINY_PARAMETERS = 2_000_000


def place(regs: Registries, cells: list[Cell]) -> list[Cell]:
    """The cells with ``placed="cpu"`` where ``train.device=auto`` would pick a GPU for a model of fewer than
    :data:`TINY_PARAMETERS` parameters (counted once per model and stream, built on the meta device); unchanged on a
    machine without a GPU, or for a model that cannot be built there."""
    import dataclasses
    import json

    import torch

    if not torch.cuda.is_available():
        return cells
    counts: dict[str, int | None] = {}
    out = []
    for cell in cells:
        if cell.train.device != "auto" or cell.train.capture:  # (a captured step is a GPU's)
            out.append(cell)
            continue
        key = json.dumps([cell.model, cell.model_config, cell.stream, cell.stream_config], sort_keys=True, default=str)
        if key not in counts:
            counts[key] = _parameters_on_meta(regs, cell)
        n = counts[key]
        out.append(dataclasses.replace(cell, placed="cpu") if n is not None and n < TINY_PARAMETERS else cell)
    return out


def _parameters_on_meta(regs: Registries, cell: Cell) -> int | None:
    """The model's parameter count, built on the meta device (no memory, no weights read); None where it cannot be."""
    import torch

    from clbench.model import StreamInfo

    try:
        stream = regs.streams.get(cell.stream).factory(cell.stream_cfg)
        with torch.device("meta"):
            model = regs.models.get(cell.model).factory(
                cell.model_cfg, StreamInfo.of(stream, regs.models.get(cell.model).setting(cell.model_cfg, "heads"))
            )
        return sum(p.numel() for p in model.parameters())
    except Exception:  # a model that loads weights from files, or needs the data: left where auto puts it
        return None
