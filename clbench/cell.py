"""The cell: one run of one method on one stream order and seed, as the harness plans it (:class:`Cell`, with every
setting resolved), and as it records it (:class:`CellResult`, the content of ``result.json``).

Layout of a run: ``<out>/<stream>/<method>/order-<o>/seed-<s>/`` holding ``result.json``, validated against the
published JSON Schema, ``footprints.safetensors`` and, while the cell runs, ``checkpoint.pt``. A :class:`Cell` is
plain data (picklable, JSON-able) so any executor can ship it to a worker.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

import clbench.config as cfg
from clbench.errors import ConfigError, ResultFileError

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


OPTIONAL_FIELDS = ("scenario", "divergence", "provenance", "examples", "initial_row", "compute")


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
    config_hash: str | None = None  # identity of the resolved settings (clbench._core.plan.config_hash); None: schema 1
    metric_errors: dict[str, str] = field(default_factory=dict)  # metric -> why its value is null
    footprints: dict[str, Any] | None = None  # {"file", "sha256", "bytes"} of the footprint file beside it
    # The test-time scenario the stream ran in (clbench.data.SCENARIOS); None: written before it was recorded.
    scenario: str | None = None
    # Where training blew up (status "diverged"): task, index, phase, epoch, step, loss, reference.
    divergence: dict[str, Any] | None = None
    # What made it beyond its settings: versions, plugin source digests, data file digests (clbench._core.provenance);
    # None: written before it was recorded.
    provenance: dict[str, Any] | None = None
    # Per-example scores of every evaluation (clbench._core.examples); None: not stored (older, or a stream whose
    # score is no mean over examples).
    examples: list[list[dict[str, Any] | None]] | None = None
    # The untrained model's score on every task (run order): FWT's reference; None: not recorded.
    initial_row: list[float | None] | None = None
    # What the cell cost beyond timings: method_state_bytes (its state_dict after the last task), trainable_parameters.
    compute: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    path: Path | None = None  # where it was read from; not serialised

    @property
    def key(self) -> str:
        return cell_key(self.stream, self.method, self.order, self.seed)

    def to_json(self) -> dict[str, Any]:
        # fields added in schema 2's lifetime are written only when set: an older result reads back unchanged
        return {k: v for k, v in self.__dict__.items() if k != "path" and not (k in OPTIONAL_FIELDS and v is None)}

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path | None = None, validated: bool = False) -> CellResult:
        """The result ``data`` holds, checked against the schema unless ``validated`` (the same document passed
        before) and for a square accuracy matrix."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ResultFileError(
                f"{path or 'result'}: schema_version {version} is newer than this clbench supports "
                f"({SCHEMA_VERSION}); upgrade clbench to read it"
            )
        if not validated:
            validate(data, path)
        T = len(data["tasks"])
        if len(data["accuracy_matrix"]) != T or any(len(row) != T for row in data["accuracy_matrix"]):
            raise ResultFileError(
                f"{path or 'result'}: not a clbench result (accuracy_matrix is not {T}×{T} for its {T} tasks)"
            )
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


RESERVED_SCOPES = ("train", "model", "stream", "metrics")
SEED_LIMIT = 2**32  # clbench.method.derive_seed keeps a seed's low 32 bits
# The profile clbench.testing registers for plugin test suites: a plugin may key presets to it although
# it exists only while a test runs.
TEST_PROFILE = "test"


@dataclass(frozen=True)
class Cell:
    """One cell of the grid with every setting resolved: the one configuration object that flows from
    planning to the runner (and to remote workers: it pickles). Settings are the plugins' own config
    dataclasses, validated once, here; ``resolved()`` is their JSON form, ``config_hash`` its identity."""

    method: str  # label: "ewc", "olora+nlora", "lps@beta=0.5"
    parts: tuple[str, ...]  # registered method names, in composition order
    stream: str
    order: str
    seed: int
    profile: str
    model: str
    methods_cfg: Mapping[str, Any]  # part -> its config dataclass
    model_cfg: Any
    train: cfg.TrainConfig
    stream_cfg: Any
    metrics: cfg.MetricsConfig
    out: str
    options: Mapping[str, Any] = field(default_factory=dict)  # plugin run options: not part of the identity
    sweep: Mapping[str, Any] = field(default_factory=dict)
    # processes a data-parallel cell runs on (--nproc, torchrun's world size): part of the identity, as the global
    # batch is split into nproc × train.grad_accum micro-batches and a reduction across ranks rounds otherwise
    nproc: int = 1
    # the order's task names when the cell was planned (the stream read then); () where unknown. Not part of the
    # settings: a result of other tasks (a task folder added to the data) is other data, found by the reuse check
    tasks: tuple[str, ...] = ()
    # where ``train.device=auto`` puts the cell on a machine with a GPU ("cpu" for a tiny model, see
    # clbench._core.placement.place); "": as train.device resolves. Not a setting: the result's env records the device
    placed: str = ""

    @property
    def directory(self) -> Path:
        return Path(self.out).joinpath(*cell_folders(self.stream, self.method, self.order, self.seed))

    def in_ranks(self, nproc: int) -> bool:
        """Whether the cell runs in rank processes of its own (:class:`clbench._exec.ranks.RankPool`) on a run of
        ``nproc`` processes a cell: data-parallel, or sharded (``train.shard``: FSDP2 needs a process group, even of
        one)."""
        return nproc > 1 or self.train.shard != "off"

    @property
    def device_type(self) -> str:
        """Where the cell runs, "cpu" or "cuda" (…): its placement, else ``train.device`` resolved."""
        from clbench.distributed import resolve_device

        return self.placed or resolve_device(self.train.device).type

    @property
    def key(self) -> str:
        return cell_key(self.stream, self.method, self.order, self.seed)

    # dict views of the settings, as stored in result.json: parts of the one resolved configuration (read only)
    @property
    def method_config(self) -> dict[str, dict[str, Any]]:
        return self._resolved["methods"]

    @property
    def model_config(self) -> dict[str, Any]:
        return {k: v for k, v in self._resolved["model"].items() if k != "name"}

    @property
    def train_config(self) -> dict[str, Any]:
        return self._resolved["train"]

    @property
    def stream_config(self) -> dict[str, Any]:
        return self._resolved["stream"]

    @property
    def metrics_config(self) -> dict[str, Any]:
        return self._resolved["metrics"]

    def resolved(self) -> dict[str, Any]:
        """The cell's full configuration, as stored in ``result.json``: built once per cell object (the planner's
        checks, the config hash, the rerun comparison and the result file share it); read it, do not modify it."""
        return self._resolved

    @functools.cached_property
    def _resolved(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "parts": list(self.parts),
            "methods": {k: cfg.to_dict(v) for k, v in self.methods_cfg.items()},
            "model": {"name": self.model, **cfg.to_dict(self.model_cfg)},
            "train": cfg.to_dict(self.train),
            "stream": cfg.to_dict(self.stream_cfg),
            "metrics": cfg.to_dict(self.metrics),
            "sweep": dict(self.sweep),
            "options": dict(self.options),
            # only when more than one: the identity (config hash) of a one-process cell stays what it was
            **({"nproc": self.nproc} if self.nproc > 1 else {}),
        }

    @property
    def identity_since(self) -> dict[str, Any]:
        """The settings of the cell's model, stream and each method part that its identity leaves out at one value
        (:func:`clbench.config.identity_defaults`), by scope: ``{"methods": {part: {...}}, "model": {...},
        "stream": {...}}`` (train and metrics: their classes', always)."""
        return {
            "methods": {k: cfg.identity_defaults(type(v)) for k, v in self.methods_cfg.items()},
            "model": cfg.identity_defaults(type(self.model_cfg)),
            "stream": cfg.identity_defaults(type(self.stream_cfg)),
        }

    @functools.cached_property
    def config_hash(self) -> str:
        return config_hash(self.resolved(), self.stream, self.order, self.seed, self.identity_since)


IDENTITY_EXCLUDES = ("sweep", "options")  # the label's sweep repeats the settings; options are run plumbing


def identity(
    resolved: Mapping[str, Any],
    stream: str,
    order: str,
    seed: int,
    since: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What makes a cell's numbers: every resolved setting, the stream, the order and the seed. Settings added
    after results were committed are left out at the value they had before they existed
    (:func:`clbench.config.identity_defaults`: the train and metrics scopes' always; ``since`` by scope, the
    cell's model, stream and method parts', :attr:`Cell.identity_since`), so those results keep their config
    hash."""
    out = {k: v for k, v in resolved.items() if k not in IDENTITY_EXCLUDES}
    since = since or {}
    parts = since.get("methods", {})
    if parts and isinstance(out.get("methods"), Mapping):
        out["methods"] = {
            part: _left_out(values, parts.get(part, {})) if isinstance(values, Mapping) else values
            for part, values in out["methods"].items()
        }
    for scope in ("model", "stream"):
        if since.get(scope) and isinstance(out.get(scope), Mapping):
            out[scope] = _left_out(out[scope], since[scope])
    for scope, cls in (("train", cfg.TrainConfig), ("metrics", cfg.MetricsConfig)):
        if isinstance(out.get(scope), Mapping):  # settings that change no number (train.log_every)
            out[scope] = _left_out(out[scope], cfg.identity_defaults(cls), getattr(cls, "NOT_IDENTITY", ()))
    out["cell"] = {"stream": stream, "order": str(order), "seed": int(seed)}
    return out


def _left_out(values: Mapping[str, Any], since: Mapping[str, Any], never: tuple[str, ...] = ()) -> dict[str, Any]:
    """``values`` without the settings in ``never`` and those at their ``since`` value."""
    return {k: v for k, v in values.items() if k not in never and (k not in since or v != since[k])}


def config_hash(
    resolved: Mapping[str, Any],
    stream: str,
    order: str,
    seed: int,
    since: Mapping[str, Any] | None = None,
) -> str:
    """sha256 of the canonical JSON of :func:`identity` (sorted keys, no spaces): stable across runs,
    processes and machines for the same settings."""
    try:
        text = json.dumps(
            identity(resolved, stream, order, seed, since),
            sort_keys=True,
            separators=(",", ":"),
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cell {stream}/order-{order}/seed-{seed}: a setting is not JSON ({exc})") from None
    return hashlib.sha256(text.encode()).hexdigest()


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``["methods.ewc.lambda: 10.0 → 3.0", "train.threads: (absent) → 1"]`` between two identities."""
    a, b = _flatten(old), _flatten(new)
    absent = "(absent)"
    return [
        f"{k}: {a.get(k, absent)!r} → {b.get(k, absent)!r}".replace(repr(absent), absent)
        for k in sorted(set(a) | set(b))
        if a.get(k, absent) != b.get(k, absent)
    ]


@dataclass
class Plan:
    cells: list[Cell]
    profile: str
    out: Path
    skipped: list[str] = field(default_factory=list)  # "method on stream: why", for --methods all
