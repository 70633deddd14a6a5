"""Result files: one directory per cell, ``result.json`` validated against a published JSON Schema.

Layout: ``<out>/<stream>/<method>/order-<o>/seed-<s>/`` holding ``result.json``,
``footprints.safetensors`` and, while the cell runs, ``checkpoint.pt``. Every write goes to a temp
file in the same directory and is moved into place with ``os.replace``, so a reader (or a killed run)
never sees half a file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clbench.cell import _CELL_DEPTH, RESULT_FILE, CellResult, cell_folders
from clbench.data import TMP_SUFFIX, atomic_write_text
from clbench.errors import ResultFileError

if TYPE_CHECKING:
    from clbench.config import TrainConfig


# --------------------------------------------------------------------------- atomic I/O
_TMP_NAME = re.compile(
    r"^\.(result\.json|footprints\.safetensors|checkpoint\.pt|error\.log|.+\.md|.+\.png)\."
    r"[A-Za-z0-9_]{6,}\.tmp$"
)


def remove_orphan_temp_files(root: Path) -> list[Path]:
    """Delete the temp files a killed write left under ``root`` (only names :func:`atomic_write_with` makes).
    Call it while holding the output lock: no other clbench process is writing there."""
    removed = []
    for path in Path(root).rglob(f".*{TMP_SUFFIX}"):
        if _TMP_NAME.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def write_result(result: CellResult, directory: Path) -> Path:
    # Not validated against the schema here: what this process builds from CellResult's own fields is checked
    # by every read (read_result, in the tests and in each command that reads results), not on every write.
    data = result.to_json()
    path = directory / RESULT_FILE
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


# Digests of the result files this process has validated: the schema check costs 2–10 ms a file, and a command
# that reads a tree several times (the doc tables read ~20,000 files, ~4,000 of them distinct) checks each text
# once. Keyed by content, so an edited file is checked again.
_VALIDATED: set[bytes] = set()


def read_result(path: Path) -> CellResult:
    try:
        raw = Path(path).read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ResultFileError(f"{path}: not a result.json (binary, not UTF-8 JSON text)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultFileError(f"{path}: cannot read ({exc})") from None
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    result = CellResult.from_json(data, Path(path), validated=digest in _VALIDATED)
    _VALIDATED.add(digest)
    return result


def check_location(result: CellResult, path: Path) -> None:
    """A result must sit in its own cell's folder, ``<stream>/<method>/order-<o>/seed-<s>/result.json``: one
    copied into another cell's folder would otherwise be read as that cell's."""
    expected = cell_folders(result.stream, result.method, result.order, result.seed)
    found = list(Path(path).parent.parts[-4:])
    if found != expected:
        raise ResultFileError(
            f"{path}: records cell {result.key}, but sits in {'/'.join(found)}/ "
            f"(expected {'/'.join(expected)}/): a result moved or copied by hand"
        )


@dataclass
class Scan:
    """What a result tree holds: its readable results (each in its own cell's folder) and every problem that kept
    a result out: an unreadable or malformed file, a result outside its cell's folder, a folder that cannot be
    listed. A tree may hold several runs side by side (``results/cl-claims``): see :func:`located`."""

    results: list[CellResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def scan(root: Path) -> Scan:
    """Every result under ``root``, sorted by path, and the problems met on the way (see :class:`Scan`)."""
    found = Scan()
    root = Path(root)
    if not root.exists():
        found.problems.append(f"{root}: does not exist")
        return found
    if root.is_file():
        found.problems.append(f"{root}: is a file, not a folder of results")
        return found
    paths = []

    def unreadable(exc: OSError) -> None:
        found.problems.append(f"{exc.filename}: cannot be listed ({exc.strerror or exc}); results in it are not read")

    for folder, dirs, files in os.walk(root, onerror=unreadable):
        dirs.sort()
        if RESULT_FILE in files:
            paths.append(Path(folder) / RESULT_FILE)
    for path in sorted(paths):
        try:
            result = read_result(path)
            check_location(result, path)
        except ResultFileError as exc:
            found.problems.append(str(exc))
            continue
        found.results.append(result)
    return found


def located(result: CellResult, root: Path) -> str:
    """A result's cell key with the folders between ``root`` and its cell folder in front (``equal-steps/cl-quick/
    inclora/order-1/seed-0`` in a tree holding several runs): how two trees are matched cell by cell, so a cell
    that two runs of one tree hold is never matched with the other run's."""
    assert result.path is not None
    above = Path(os.path.relpath(result.path.parent, root)).parts[:-_CELL_DEPTH]
    return "/".join([*above, result.key])


def iter_results(root: Path, warn: bool = True) -> Iterator[CellResult]:
    """Every readable result under ``root`` that sits in its own cell's folder, sorted by path; the others
    (see :func:`scan`) are named in a warning and skipped."""
    found = scan(root)
    if warn:
        for problem in found.problems:
            warnings.warn(f"skipping {problem}", stacklevel=2)
    yield from found.results


# --------------------------------------------------------------------------- environment
def _git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@functools.cache
def _static_env() -> dict[str, Any]:
    import importlib.metadata as md

    versions = {}
    for dist in ("clbench", "torch", "numpy", "pluggy", "transformers", "peft", "scikit-learn"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    import torch

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        # the vector kernels torch runs on this CPU (AVX2, AVX512, or what ATEN_CPU_CAPABILITY forces): cells made
        # on two machines that name one CPU alike may still differ by these
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "packages": versions,
        "git_revision": _git_revision(),
    }


def environment(device: str, train: TrainConfig, plugins: dict[str, str], world_size: int = 1) -> dict[str, Any]:
    """The ``env`` block: versions, device, threads, and how the global batch was split (per device × ranks ×
    accumulation)."""
    import torch

    env = dict(_static_env())
    env.update(
        device=device,
        device_name=torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor() or "cpu",
        torch_threads=torch.get_num_threads(),
        world_size=world_size,
        global_batch_size=train.batch_size,
        per_device_batch_size=train.batch_size // (world_size * train.grad_accum),
        grad_accum=train.grad_accum,
        plugins=plugins,
    )
    return env
