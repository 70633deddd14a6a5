"""The grid: which cells a ``clbench run`` command means, with every setting resolved up front.

A :class:`Cell` is plain data (picklable, JSON-able) so any executor can ship it to a worker. All
validation happens here, before the first cell trains: an unknown name or a bad ``--set`` value
fails the command, not cell 37.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clbench import config as cfg
from clbench.errors import ConfigError
from clbench.registry import Registries, did_you_mean
from clbench.specs import MethodSpec, ModelSpec, StreamSpec

RESERVED_SCOPES = ("train", "model", "stream", "metrics")


@dataclass(frozen=True)
class Cell:
    method: str  # label: "ewc", "olora+nlora", "lps@beta=0.5"
    parts: tuple[str, ...]  # registered method names, in composition order
    stream: str
    order: str
    seed: int
    profile: str
    model: str
    method_config: Mapping[str, Mapping[str, Any]]  # part -> settings
    model_config: Mapping[str, Any]
    train_config: Mapping[str, Any]
    stream_config: Mapping[str, Any]
    out: str
    options: Mapping[str, Any] = field(default_factory=dict)
    sweep: Mapping[str, Any] = field(default_factory=dict)
    metrics_config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return Path(self.out) / self.stream / self.method / f"order-{self.order}" / f"seed-{self.seed}"

    @property
    def key(self) -> str:
        return f"{self.stream}/{self.method}/order-{self.order}/seed-{self.seed}"

    def resolved(self) -> dict[str, Any]:
        """The cell's full configuration, as stored in ``result.json``."""
        return {
            "profile": self.profile,
            "methods": {k: dict(v) for k, v in self.method_config.items()},
            "model": {"name": self.model, **self.model_config},
            "train": dict(self.train_config),
            "stream": dict(self.stream_config),
            "metrics": dict(self.metrics_config),
            "sweep": dict(self.sweep),
            "options": dict(self.options),
        }


@dataclass
class Plan:
    cells: list[Cell]
    profile: str
    out: Path
    skipped: list[str] = field(default_factory=list)  # "method on stream: why", for --methods all


@dataclass
class RunRequest:
    """What the user asked for; ``None`` means "the profile's default"."""

    profile: str = "quick"
    methods: str | None = None
    streams: Sequence[str] | None = None
    orders: Sequence[str] | None = None
    seeds: Sequence[int] | None = None
    sets: Mapping[str, list[Any]] = field(default_factory=dict)
    model: str | None = None
    out: Path = Path("runs")
    options: Mapping[str, Any] = field(default_factory=dict)
    data_dir: str | None = None  # --data-dir: sets `data_dir` of every stream config that has one
    model_path: str | None = None  # --model-path: sets `name_or_path` of the model config


def _with_path(cls: type, values: dict[str, Any], key: str, value: str | None) -> dict[str, Any]:
    import dataclasses

    if value is not None and dataclasses.is_dataclass(cls) and key in {f.name for f in dataclasses.fields(cls)}:
        values = {key: value, **values}  # an explicit --set wins over the flag
    return values


def _fits(method: MethodSpec, model: ModelSpec, modality: str) -> str | None:
    missing = method.requires - model.provides
    if missing:
        return f"needs a model with {sorted(missing)}; {model.name!r} provides {sorted(model.provides) or 'none'}"
    if modality not in model.modalities:
        return f"model {model.name!r} does not take {modality!r} inputs"
    return None


def _check_scopes(sets: Mapping[str, Any], regs: Registries) -> None:
    for key in sets:
        scope = key.split(".", 1)[0]
        if scope in RESERVED_SCOPES or scope in regs.methods:
            continue
        known = list(RESERVED_SCOPES) + list(regs.methods)
        hint = did_you_mean(scope, known)
        extra = f" — did you mean {hint!r}?" if hint else ""
        raise ConfigError(f"--set {key}: unknown scope {scope!r}{extra} Scopes: train, model, stream, metrics, or a method name")


def _select(scoped: Mapping[str, Mapping[str, Any]], scope: str) -> dict[str, Any]:
    return dict(scoped.get(scope, {}))


def make_plan(regs: Registries, req: RunRequest) -> Plan:
    profile = regs.profiles.get(req.profile)
    _check_scopes(req.sets, regs)
    _check_scopes(profile.sets, regs)

    if req.streams:
        stream_names = list(req.streams)
    elif profile.streams is not None:
        stream_names = list(profile.streams)
    else:
        stream_names = [s.name for s in regs.streams.values() if profile.name in s.presets]
    if not stream_names:
        raise ConfigError(f"profile {profile.name!r} has no streams; pass --stream")
    streams = [regs.streams.get(n) for n in stream_names]

    explicit = req.methods not in (None, "all")
    method_expr = req.methods if req.methods is not None else (
        profile.methods if isinstance(profile.methods, str) else ",".join(profile.methods)
    )
    labels = sorted(regs.methods) if method_expr == "all" else [m.strip() for m in method_expr.split(",") if m.strip()]
    # A stream preset may name the methods that "all" means on it for this profile (the quick profile
    # keeps the expensive text stream to the LoRA family); composites like "olora+nlora" are allowed.
    base_presets = {s.name: cfg.preset_values(s.presets, profile.name, s.name, "") for s in streams}
    stream_labels: dict[str, list[str]] = {}
    for sspec in streams:
        preset_methods = base_presets[sspec.name].get("methods")
        stream_labels[sspec.name] = list(preset_methods) if method_expr == "all" and preset_methods else labels
    parts_of = {label: tuple(p.strip() for p in label.split("+")) for ls in stream_labels.values() for label in ls}
    for label, parts in parts_of.items():
        specs = [regs.methods.get(p) for p in parts]
        if len(specs) > 1:
            for s in specs[1:]:
                if not s.composable:
                    raise ConfigError(f"method {s.name!r} cannot be composed ('{label}'): it only adds structure")

    sweep_keys = sorted(k for k, v in req.sets.items() if len(v) > 1)
    sweep_points = list(itertools.product(*(req.sets[k] for k in sweep_keys))) or [()]
    single = {k: v[0] for k, v in req.sets.items() if len(v) == 1}

    cells: list[Cell] = []
    skipped: list[str] = []
    for sspec in streams:
        base_preset = base_presets[sspec.name]
        stream_cfg_values = {**cfg.split_scoped(base_preset).get("stream", {}),
                             **cfg.split_scoped({**profile.sets, **single}).get("stream", {})}
        stream_cfg_values = _with_path(sspec.config_cls, stream_cfg_values, "data_dir", req.data_dir)
        stream_cfg = cfg.apply(sspec.config_cls, None, stream_cfg_values, "stream")
        stream = sspec.factory(stream_cfg)
        orders = list(req.orders) if req.orders else list(base_preset.get("orders", stream.orders))
        for o in orders:
            stream.order(o)  # validates the name
        seeds = list(req.seeds) if req.seeds else list(base_preset.get("seeds", profile.seeds))
        if stream_labels[sspec.name] is not labels:
            left_out = sorted(set(labels) - set(stream_labels[sspec.name]))
            if left_out:
                skipped.append(f"{', '.join(left_out)} on {sspec.name}: not in the {profile.name!r} preset's methods")
        for label in stream_labels[sspec.name]:
            parts = parts_of[label]
            mspecs = [regs.methods.get(p) for p in parts]
            for order, seed, point in itertools.product(orders, seeds, sweep_points):
                sweep = dict(zip(sweep_keys, point, strict=True))
                cell = _make_cell(regs, profile.name, profile.sets, sspec, stream.modality, order, seed,
                                  label, mspecs, {**single, **sweep}, sweep, req)
                if isinstance(cell, str):
                    if explicit:
                        raise ConfigError(f"method {label!r} cannot run on stream {sspec.name!r}: {cell}")
                    if (order, seed, point) == (orders[0], seeds[0], sweep_points[0]):
                        skipped.append(f"{label} on {sspec.name}: {cell}")
                    continue
                cells.append(cell)
    if not cells:
        raise ConfigError("nothing to run: " + ("; ".join(skipped) or "the grid is empty"))
    # A flag no planned plugin reads would be silently ignored; say so instead.
    if req.model_path is not None and not any("name_or_path" in c.model_config for c in cells):
        models = sorted({c.model for c in cells})
        raise ConfigError(f"--model-path {req.model_path}: no planned model takes weights from a path ({', '.join(models)})")
    if req.data_dir is not None and not any("data_dir" in c.stream_config for c in cells):
        raise ConfigError(f"--data-dir {req.data_dir}: no planned stream reads a data directory "
                          f"({', '.join(s.name for s in streams)})")
    return Plan(cells=cells, profile=profile.name, out=Path(req.out), skipped=skipped)


def _label(label: str, sweep: Mapping[str, Any]) -> str:
    if not sweep:
        return label
    return label + "@" + ",".join(f"{k.split('.', 1)[1] if k.split('.', 1)[0] in label.split('+') else k}={v}"
                                  for k, v in sweep.items())


def _make_cell(
    regs: Registries,
    profile: str,
    profile_sets: Mapping[str, Any],
    sspec: StreamSpec,
    modality: str,
    order: str,
    seed: int,
    label: str,
    mspecs: list[MethodSpec],
    user_sets: Mapping[str, Any],
    sweep: Mapping[str, Any],
    req: RunRequest,
) -> Cell | str:
    stream_preset = cfg.split_scoped(cfg.preset_values(sspec.presets, profile, sspec.name, order))
    method_presets = [cfg.split_scoped(cfg.preset_values(m.presets, profile, sspec.name, order)) for m in mspecs]
    prof = cfg.split_scoped(profile_sets)
    user = cfg.split_scoped(user_sets)

    model_name = req.model or next(
        (mp[""]["model"] for mp in method_presets if "model" in mp.get("", {})), None
    ) or stream_preset.get("", {}).get("model")
    if model_name is None:
        raise ConfigError(f"stream {sspec.name!r} names no model for profile {profile!r}; pass --model")
    mspec = regs.models.get(model_name)
    for m in mspecs:
        why = _fits(m, mspec, modality)
        if why:
            return why

    def layered(scope: str) -> dict[str, Any]:
        values = _select(stream_preset, scope)
        for mp in method_presets:
            values.update(_select(mp, scope))
        values.update(_select(prof, scope))
        values.update(_select(user, scope))
        return values

    train = cfg.apply(cfg.TrainConfig, None, layered("train"), "train")
    metrics_cfg = cfg.apply(cfg.MetricsConfig, None, layered("metrics"), "metrics")
    model_values = _with_path(mspec.config_cls, layered("model"), "name_or_path", req.model_path)
    model_cfg = cfg.apply(mspec.config_cls, None, model_values, "model")
    stream_values = _with_path(sspec.config_cls, {**_select(stream_preset, "stream"), **_select(prof, "stream"),
                                                   **_select(user, "stream")},
                               "data_dir", req.data_dir)
    stream_cfg = cfg.apply(sspec.config_cls, None, stream_values, "stream")
    method_cfgs = {}
    for m, mp in zip(mspecs, method_presets, strict=True):
        values = {k: v for k, v in mp.get("", {}).items() if k != "model"}
        values.update(_select(prof, m.name))
        values.update(_select(user, m.name))
        method_cfgs[m.name] = cfg.to_dict(cfg.apply(m.config_cls, None, values, m.name))
    return Cell(
        method=_label(label, sweep),
        parts=tuple(m.name for m in mspecs),
        stream=sspec.name,
        order=str(order),
        seed=int(seed),
        profile=profile,
        model=mspec.name,
        method_config=method_cfgs,
        model_config=cfg.to_dict(model_cfg),
        train_config=cfg.to_dict(train),
        stream_config=cfg.to_dict(stream_cfg),
        out=str(req.out),
        options=dict(req.options),
        sweep=dict(sweep),
        metrics_config=cfg.to_dict(metrics_cfg),
    )
