"""The built-in methods' tuned presets: one JSON file a profile beside this module, written by
``clbench tune --profile P --write plugins/_shared/tuned/P.json`` from the committed tuning results (docs/tuning.md).
Nobody edits the files by hand; ``clbench tune --check`` fails when a preset is not what the results choose."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any


@functools.cache
def _files() -> dict[str, dict[str, dict[str, float]]]:
    """method -> "PROFILE/STREAM" -> tuned values, from every profile's file."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            for method, presets in json.loads(entry.read_text(encoding="utf-8"))["methods"].items():
                out.setdefault(method, {}).update(presets)
    return out


def tuned(method: str, presets: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``presets`` with ``method``'s tuned values laid over the matching entries (an entry added where none is)."""
    out = {key: dict(values) for key, values in presets.items()}
    for key, values in _files().get(method, {}).items():
        out.setdefault(key, {}).update(values)
    return out
