"""Result files: one directory per cell, ``result.json`` validated against a published JSON Schema.

Layout: ``<out>/<stream>/<method>/order-<o>/seed-<s>/`` holding ``result.json``,
``footprints.safetensors`` and, while the cell runs, ``checkpoint.pt``. Every write goes to a temp
file in the same directory and is moved into place with ``os.replace``, so a reader (or a killed run)
never sees half a file.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import re
import secrets
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from clbench.errors import ResultFileError

if TYPE_CHECKING:
    from clbench.config import TrainConfig

SCHEMA_VERSION = 2  # 2: config_hash, metric_errors, footprints (1 is still read)
RESULT_FILE = "result.json"
FOOTPRINT_FILE = "footprints.safetensors"
CHECKPOINT_FILE = "checkpoint.pt"
ERROR_LOG = "error.log"


# --------------------------------------------------------------------------- layout
_UNSAFE = re.compile(r"[^A-Za-z0-9@=,.+_\-]")


def path_component(text: str) -> str:
    """``text`` as one folder name: a method label or sweep value can never add folders or leave ``--out``
    (``/``, ``\\`` and other unsafe characters are %-escaped; ``.`` and ``..`` become ``%2E``…)."""
    safe = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), text)
    if safe in ("", ".", ".."):
        safe = safe.replace(".", "%2E") or "%00"
    return safe


def cell_key(stream: str, method: str, order: str, seed: int) -> str:
    """``split-digits/ewc/order-1/seed-0``: how a cell is named in messages and matched across result trees."""
    return f"{stream}/{method}/order-{order}/seed-{seed}"


_CELL_DEPTH = 4  # <stream>/<method>/order-<o>/seed-<s>


def cell_folders(stream: str, method: str, order: str, seed: int) -> list[str]:
    """The folder names of a cell below ``--out``, each a safe :func:`path_component` (a label with ``/`` stays
    one folder, so the key cannot simply be split)."""
    return [path_component(p) for p in (stream, method, f"order-{order}", f"seed-{seed}")]


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(resources.files("clbench").joinpath("schema/result.schema.json").read_text())


OPTIONAL_FIELDS = ("scenario", "divergence", "provenance")


@dataclass
class CellResult:
    """The content of one ``result.json``."""

    method: str
    stream: str
    order: str
    seed: int
    tasks: list[str]
    accuracy_matrix: list[list[float | None]]
    status: str = "complete"  # complete | failed | diverged
    metrics: dict[str, float | None] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    config_hash: str | None = None  # identity of the resolved settings (clbench.plan.config_hash); None: schema 1
    metric_errors: dict[str, str] = field(default_factory=dict)  # metric -> why its value is null
    footprints: dict[str, Any] | None = None  # {"file", "sha256", "bytes"} of the footprint file beside it
    # The test-time scenario the stream ran in (clbench.data.SCENARIOS); None: written before it was recorded.
    scenario: str | None = None
    # Where training blew up (status "diverged"): task, index, phase, epoch, step, loss, reference.
    divergence: dict[str, Any] | None = None
    # What made it beyond its settings: versions, plugin source digests, data file digests (clbench.provenance);
    # None: written before it was recorded.
    provenance: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    path: Path | None = None  # where it was read from; not serialised

    @property
    def key(self) -> str:
        return cell_key(self.stream, self.method, self.order, self.seed)

    def to_json(self) -> dict[str, Any]:
        # fields added in schema 2's lifetime are written only when set: an older result reads back unchanged
        return {k: v for k, v in self.__dict__.items() if k != "path" and not (k in OPTIONAL_FIELDS and v is None)}

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path | None = None) -> CellResult:
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ResultFileError(
                f"{path or 'result'}: schema_version {version} is newer than this clbench supports "
                f"({SCHEMA_VERSION}); upgrade clbench to read it"
            )
        validate(data, path)
        T = len(data["tasks"])
        if len(data["accuracy_matrix"]) != T or any(len(row) != T for row in data["accuracy_matrix"]):
            raise ResultFileError(f"{path or 'result'}: not a clbench result (accuracy_matrix is not "
                                  f"{T}×{T} for its {T} tasks)")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known, path=path)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema())
    return cls(schema())


def validate(data: Any, path: Path | None = None) -> None:
    try:
        _validator().validate(data)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise ResultFileError(f"{path or 'result'}: not a clbench result ({where}: {exc.message})") from None


# --------------------------------------------------------------------------- atomic I/O
def atomic_write_with(path: Path, write: Callable[[Path], None], durable: bool = True) -> None:
    """Call ``write(tmp)`` on a temp file beside ``path`` then move it into place. ``durable`` also fsyncs
    it first, so it survives a machine crash, not only a killed process (≈5 ms a file here)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_file(path)
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


TMP_SUFFIX = ".tmp"
_TMP_NAME = re.compile(r"^\.(result\.json|footprints\.safetensors|checkpoint\.pt|error\.log|.+\.md|.+\.png)\."
                       r"[A-Za-z0-9_]{6,}\.tmp$")


def _new_temp_file(path: Path) -> Path:
    """A new empty ``.<name>.<random>.tmp`` beside ``path`` with the mode a plain ``open`` gives (0o666 less the
    umask, which the kernel applies). Not ``tempfile.mkstemp``: it makes 0o600, and setting the mode after needs
    the umask, which can only be read by changing it for the whole process — a race with a thread that creates
    a file meanwhile (a cell writes its footprint file in a worker thread)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{TMP_SUFFIX}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def remove_orphan_temp_files(root: Path) -> list[Path]:
    """Delete the temp files a killed write left under ``root`` (only names :func:`atomic_write_with` makes).
    Call it while holding the output lock: no other clbench process is writing there."""
    removed = []
    for path in Path(root).rglob(f".*{TMP_SUFFIX}"):
        if _TMP_NAME.match(path.name) and path.is_file():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_result(result: CellResult, directory: Path) -> Path:
    # Not validated against the schema here: what this process builds from CellResult's own fields is checked
    # by every read (read_result, in the tests and in each command that reads results), not on every write.
    data = result.to_json()
    path = directory / RESULT_FILE
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
    return path


def read_result(path: Path) -> CellResult:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultFileError(f"{path}: cannot read ({exc})") from None
    return CellResult.from_json(data, Path(path))


def check_location(result: CellResult, path: Path) -> None:
    """A result must sit in its own cell's folder, ``<stream>/<method>/order-<o>/seed-<s>/result.json``: one
    copied into another cell's folder would otherwise be read as that cell's."""
    expected = cell_folders(result.stream, result.method, result.order, result.seed)
    found = list(Path(path).parent.parts[-4:])
    if found != expected:
        raise ResultFileError(f"{path}: records cell {result.key}, but sits in {'/'.join(found)}/ "
                              f"(expected {'/'.join(expected)}/): a result moved or copied by hand")


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
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
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
