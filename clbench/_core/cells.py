"""One cell of a plan: its settings resolved from the layers (a stream's presets, the profile, the user's
``--set``), checked against its model and stream, and a cell rebuilt from a result file."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clbench import config as cfg
from clbench._core.registry import Registries
from clbench.cell import Cell, CellResult
from clbench.data import Stream, scenario_needs
from clbench.errors import ConfigError
from clbench.specs import MethodSpec, ModelSpec, StreamSpec


@dataclass
class RunRequest:
    """What the user asked for; ``None`` means "the profile's default"."""

    profile: str = "quick"
    methods: str | None = None
    streams: Sequence[str] | None = None
    orders: Sequence[str] | None = None
    seeds: Sequence[int] | None = None
    sets: Mapping[str, list[Any]] = field(default_factory=dict)
    # Zipped sweep points (each a {key: value} of the same keys): one cell per point, not per combination of values
    # as ``sets`` sweeps; what a tuner's random search plans (clbench._tools.tune).
    points: Sequence[Mapping[str, Any]] = ()
    model: str | None = None
    out: Path = Path("runs")
    options: Mapping[str, Any] = field(default_factory=dict)
    data_dir: str | None = None  # --data-dir: sets each stream's StreamSpec.data_dir_field
    model_path: str | None = None  # --model-path: sets the model's ModelSpec.weights_field


def _with_path(
    cls: type, values: dict[str, Any], key: str | None, value: str | None, explicit: Mapping[str, Any]
) -> dict[str, Any]:
    """``values`` (presets, then the user's settings) with a path flag's ``value`` for ``key``: it wins over every
    preset (a profile's ``model.name_or_path`` is a hub name the flag replaces), and an explicit ``--set`` of the
    same key (in ``explicit``) wins over it. ``key`` None: the plugin declares no such field."""
    import dataclasses

    if (
        value is not None
        and key
        and dataclasses.is_dataclass(cls)
        and key in {f.name for f in dataclasses.fields(cls)}
        and key not in explicit
    ):
        values = {**values, key: value}
    return values


def _fits(method: MethodSpec, model: ModelSpec, stream: Stream) -> str | None:
    missing = method.requires - model.provides
    if missing:
        return f"needs a model with {sorted(missing)}; {model.name!r} provides {sorted(model.provides) or 'none'}"
    if stream.modality not in model.modalities:
        return f"model {model.name!r} does not take {stream.modality!r} inputs"
    if method.modalities and stream.modality not in method.modalities:
        return (
            f"takes {' or '.join(sorted(method.modalities))} inputs; {stream.name!r} gives {stream.modality} "
            "(its declared modalities)"
        )
    if method.scenarios and stream.scenario not in method.scenarios:
        return (
            f"runs only {' or '.join(sorted(method.scenarios))} ({scenario_needs(method.scenarios)}); "
            f"{stream.name!r} is {stream.scenario}"
        )
    return None


def _check_heads(mspec: ModelSpec, model_cfg: Any, stream: Stream) -> None:
    """A model's heads setting (its spec's ``heads_field``) that differs from the stream's heads would change the
    scenario under the stream's name (one head per task hands the model the task identity); refuse it."""
    multi_head = mspec.setting(model_cfg, "heads")
    if multi_head is None or bool(multi_head) == stream.multi_head:
        return
    raise ConfigError(
        f"model.{mspec.heads_field}={str(multi_head).lower()} on stream {stream.name!r}, which is "
        f"{stream.scenario} ({'one head per task' if stream.multi_head else 'one shared head'}): "
        "it would run another scenario under this stream's name; drop the setting, or run a stream "
        "of that scenario (`clbench list streams`)"
    )


def _select(scoped: Mapping[str, Mapping[str, Any]], scope: str) -> dict[str, Any]:
    return dict(scoped.get(scope, {}))


def _label(label: str, sweep: Mapping[str, Any]) -> str:
    if not sweep:
        return label
    return (
        label
        + "@"
        + ",".join(
            f"{k.split('.', 1)[1] if k.split('.', 1)[0] in label.split('+') else k}={v}" for k, v in sweep.items()
        )
    )


Scoped = dict[str, dict[str, Any]]  # {"train": {"lr": 1e-3}, "ewc": {...}, "": {"model": "mlp"}}
Layer = tuple[str, Scoped]  # (where the values come from, the values)


def profile_lineage(regs: Registries, name: str) -> tuple[str, ...]:
    """The profiles whose presets a cell of profile ``name`` reads, the most basic first: ``name`` itself and,
    where it extends another (``ProfileSpec.extends``), that one's lineage before it."""
    out: list[str] = []
    while True:
        if name in out:
            raise ConfigError(f"profile {out[0]!r} extends itself: {' → '.join([*reversed(out), name])}")
        out.insert(0, name)
        base = regs.profiles.get(name).extends if name in regs.profiles else None
        if base is None:
            return tuple(out)
        if base not in regs.profiles:
            raise ConfigError(f"profile {name!r} extends profile {base!r}, which is not registered")
        name = base


def _preset_layers(
    presets: Mapping[str, Mapping[str, Any]], profile: Sequence[str], stream: str, order: str, owner: str
) -> list[Layer]:
    """A plugin's presets for a cell, least specific key first (:func:`clbench.config.preset_keys`' order)."""
    keys = cfg.preset_keys(profile, stream, order)
    return [(f"{owner} preset {key!r}", cfg.split_scoped(presets[key])) for key in keys if presets.get(key)]


def _merged(chain: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _, values in chain:
        out.update(values)
    return out


@dataclass
class _Layers:
    """The settings of one cell as named layers, lowest first: the stream's presets, each method part's, the
    profile's row for the label (``ProfileSpec.rows``), the profile's ``sets`` and the user's ``--set``. Each
    setting is resolved from a chain of them (:meth:`scope`, :meth:`stream_scope`, :meth:`method`); the same
    chains say where each value came from (:meth:`origins`)."""

    stream: list[Layer]
    methods: list[list[Layer]]
    row: Scoped
    profile: Scoped
    user: Scoped

    @classmethod
    def of(
        cls,
        profile: Sequence[str],
        profile_sets: Mapping[str, Any],
        sspec: StreamSpec,
        order: str,
        mspecs: Sequence[MethodSpec],
        user_sets: Mapping[str, Any],
        row: Mapping[str, Any] = {},  # noqa: B006 (read, never written)
    ) -> _Layers:
        return cls(
            _preset_layers(sspec.presets, profile, sspec.name, order, f"stream {sspec.name}"),
            [_preset_layers(m.presets, profile, sspec.name, order, f"method {m.name}") for m in mspecs],
            cfg.split_scoped(row),
            cfg.split_scoped(profile_sets),
            cfg.split_scoped(user_sets),
        )

    def _top(self, scope: str) -> list[tuple[str, Mapping[str, Any]]]:
        """The layers above the plugins' presets: the profile's row for the label, its sets, the user's."""
        return [
            ("profile row", self.row.get(scope, {})),
            ("profile sets", self.profile.get(scope, {})),
            ("--set", self.user.get(scope, {})),
        ]

    def chain(self, scope: str) -> list[tuple[str, Mapping[str, Any]]]:
        """``train``, ``metrics`` or ``model``: every layer, method presets between the stream's and the profile's
        (a later method part's over an earlier one's)."""
        presets = [*self.stream, *(layer for part in self.methods for layer in part)]
        return [(name, values.get(scope, {})) for name, values in presets] + self._top(scope)

    def stream_chain(self) -> list[tuple[str, Mapping[str, Any]]]:
        """``stream``: the stream's presets, the profile's sets and the user's (no method or row sets a stream)."""
        return [(name, values.get("stream", {})) for name, values in self.stream] + self._top("stream")[1:]

    def method_chain(self, index: int, name: str) -> list[tuple[str, Mapping[str, Any]]]:
        """A method part's own settings: its presets' unscoped keys (but ``model``), then the row, profile, user."""
        own = [(n, {k: v for k, v in values.get("", {}).items() if k != "model"}) for n, values in self.methods[index]]
        return own + self._top(name)

    def model_name(self) -> tuple[str, str] | None:
        """The model the presets name, and which preset: the first method part's, else the stream's."""
        for part in [*self.methods, self.stream]:
            named = [(values[""]["model"], name) for name, values in part if "model" in values.get("", {})]
            if named:
                return named[-1]
        return None

    def scope(self, scope: str) -> dict[str, Any]:
        return _merged(self.chain(scope))

    def stream_scope(self) -> dict[str, Any]:
        return _merged(self.stream_chain())

    def method(self, index: int, name: str) -> dict[str, Any]:
        return _merged(self.method_chain(index, name))

    def origins(self, parts: Sequence[str]) -> dict[str, list[tuple[str, Any]]]:
        """Per ``--set`` key a layer sets (``train.lr``, ``ewc.lambda``, ``stream.tasks``), every layer that sets
        it with its value, lowest first: the last one is the value the cell resolved."""
        chains = {s: self.chain(s) for s in ("train", "metrics", "model")}
        chains["stream"] = self.stream_chain()
        chains.update({p: self.method_chain(i, p) for i, p in enumerate(parts)})
        out: dict[str, list[tuple[str, Any]]] = {}
        for scope, chain in chains.items():
            for layer, values in chain:
                for key, value in values.items():
                    name = cfg.public_name(key.replace("-", "_"))  # as clbench.config.field_for reads a key
                    out.setdefault(f"{scope}.{name}", []).append((layer, value))
        return out


def _make_cell(
    regs: Registries,
    profile: str,
    profile_sets: Mapping[str, Any],
    sspec: StreamSpec,
    stream: Stream,
    order: str,
    seed: int,
    label: str,
    mspecs: list[MethodSpec],
    user_sets: Mapping[str, Any],
    sweep: Mapping[str, Any],
    req: RunRequest,
    row: Mapping[str, Any] = {},  # noqa: B006 (read, never written)
) -> Cell | str:
    """The cell of one method label, stream order, seed and sweep point, or why its methods do not fit; ``row``: the
    profile's settings for the label on this stream (``ProfileSpec.rows``)."""
    layers = _Layers.of(profile_lineage(regs, profile), profile_sets, sspec, order, mspecs, user_sets, row)
    named = layers.model_name()
    model_name = req.model or (named[0] if named else None)
    if model_name is None:
        raise ConfigError(f"stream {sspec.name!r} names no model for profile {profile!r}; {_model_hint(regs, sspec)}")
    mspec = regs.models.get(model_name)
    for m in mspecs:
        why = _fits(m, mspec, stream)
        if why:
            return why
    model_values = _with_path(
        mspec.config_cls, layers.scope("model"), mspec.weights_field, req.model_path, _select(layers.user, "model")
    )
    model_cfg = cfg.apply(mspec.config_cls, None, model_values, "model")
    _check_heads(mspec, model_cfg, stream)
    # a model that keeps its own weights frozen (the text models' `train_base`, off for LoRA methods) leaves a
    # method that trains them nothing to train: found here, not after the model has loaded
    if getattr(model_cfg, "train_base", True) is False:
        frozen = [m.name for m in mspecs if m.trains_model]
        if frozen:
            return (
                f"{', '.join(frozen)} trains the model's own weights, which model {mspec.name!r} keeps frozen "
                "(model.train_base=false): add --set model.train_base=true, or run a LoRA method"
            )
    stream_values = _with_path(
        sspec.config_cls, layers.stream_scope(), sspec.data_dir_field, req.data_dir, _select(layers.user, "stream")
    )
    train = cfg.apply(cfg.TrainConfig, None, layers.scope("train"), "train")
    methods_values = [layers.method(i, m.name) for i, m in enumerate(mspecs)]
    if train.memory:
        train = _give_memory(train, mspecs, methods_values, layers.user, len(stream.order(order)))
    _check_class_incremental(train, stream)
    if train.init != "model" and mspec.weights_field and hasattr(model_cfg, mspec.weights_field):
        raise ConfigError(
            f"train.init={train.init} redraws every weight, and model {mspec.name!r} loads trained weights "
            f"(model.{mspec.weights_field}): the setting is for models trained from scratch"
        )
    if train.capture:
        from clbench.distributed import resolve_device

        why = _capture_refusal(
            all(m.static_step for m in mspecs), label, resolve_device(train.device).type, train.grad_accum
        )
        if why:
            return why
    return Cell(
        method=_label(label, sweep),
        parts=tuple(m.name for m in mspecs),
        stream=sspec.name,
        order=str(order),
        seed=int(seed),
        profile=profile,
        model=mspec.name,
        methods_cfg={m.name: cfg.apply(m.config_cls, None, methods_values[i], m.name) for i, m in enumerate(mspecs)},
        model_cfg=model_cfg,
        train=train,
        stream_cfg=cfg.apply(sspec.config_cls, None, stream_values, "stream"),
        metrics=cfg.apply(cfg.MetricsConfig, None, layers.scope("metrics"), "metrics"),
        out=str(req.out),
        options=dict(req.options),
        sweep=dict(sweep),
        tasks=tuple(stream.order(order)),
    )


def _give_memory(
    train: cfg.TrainConfig, mspecs: Sequence[MethodSpec], values: list[dict[str, Any]], user: Scoped, tasks: int
) -> cfg.TrainConfig:
    """``train.memory`` set: the one method part that keeps examples (:attr:`MethodSpec.memory`) gets its setting from
    it, by the rule it declares, over the layers' value (``values``, changed in place). A cell whose parts keep no
    example gets ``train.memory=0``: the budget changes none of its numbers, and its identity stays that of the
    cell without it."""
    keeping = [(i, m, m.memory) for i, m in enumerate(mspecs) if m.memory is not None]
    if not keeping:
        return dataclasses.replace(train, memory=0)
    if len(keeping) > 1:
        own = ", ".join(f"{m.name}.{memory.setting}" for _, m, memory in keeping)
        raise ConfigError(
            f"train.memory={train.memory}: {' and '.join(m.name for _, m, _ in keeping)} both keep examples, and one "
            f"budget does not say how they share it; set each one's own setting instead ({own})"
        )
    i, m, memory = keeping[0]
    value = memory.value_for(train.memory, tasks)
    if value < 1:
        raise ConfigError(
            f"train.memory={train.memory} over {tasks} tasks leaves {m.name} no example a task "
            f"({m.name}.{memory.setting} keeps examples per task): give at least {tasks}"
        )
    mine = {k.replace("-", "_"): v for k, v in user.get(m.name, {}).items()}.get(memory.setting)
    if mine is not None and mine != value:
        raise ConfigError(
            f"--set {m.name}.{memory.setting}={mine} and train.memory={train.memory} (which gives {value}) say "
            "different things: set one"
        )
    values[i] = {k: v for k, v in values[i].items() if k.replace("-", "_") != memory.setting}
    values[i][memory.setting] = value
    return train


@dataclass(frozen=True)
class Origin:
    """Where one setting of a cell came from: ``layer`` set ``value`` (``default``: no layer set it), over the
    values of the lower layers in ``shadowed`` (layer, value), lowest first."""

    key: str
    value: Any
    layer: str
    shadowed: tuple[tuple[str, Any], ...] = ()


def explain(regs: Registries, req: RunRequest, cell: Cell) -> list[Origin]:
    """Every setting of ``cell`` (planned from ``req``) with the layer that gave its value: a preset of the stream
    or a method part (by its key), the profile's row or sets, ``--set``, ``--data-dir``, ``--model-path``,
    ``--model``, or the default. What ``clbench run --explain`` prints."""
    profile = regs.profiles.get(cell.profile)
    sspec = regs.streams.get(cell.stream)
    label = cell.method.split("@", 1)[0]
    single = {k: v[0] for k, v in req.sets.items() if len(v) == 1}
    layers = _Layers.of(
        profile_lineage(regs, profile.name),
        profile.sets_for(sspec.name),
        sspec,
        cell.order,
        [regs.methods.get(p) for p in cell.parts],
        {**single, **cell.sweep},
        profile.rows.get(sspec.name, {}).get(label, {}),
    )
    found = layers.origins(cell.parts)
    mspec = regs.models.get(cell.model)
    for flag, value, scope, key in (
        ("--data-dir", req.data_dir, "stream", sspec.data_dir_field),
        ("--model-path", req.model_path, "model", mspec.weights_field),
    ):
        chain = found.get(f"{scope}.{key}", [])
        if value is not None and key and not any(layer == "--set" for layer, _ in chain):
            found[f"{scope}.{key}"] = [*chain, (flag, value)]
    named = layers.model_name()
    found["model"] = [(named[1], named[0])] if named else []
    if req.model:
        found["model"].append(("--model", req.model))
    if cell.train.memory:  # the setting train.memory gave the part that keeps examples (_give_memory)
        for part in cell.parts:
            memory = regs.methods.get(part).memory
            if memory is not None:
                key = f"{part}.{memory.setting}"
                found[key] = [*found.get(key, []), ("train.memory", getattr(cell.methods_cfg[part], memory.setting))]
    elif found.get("train.memory"):  # set, but no part keeps examples: left at 0
        found["train.memory"] = [*found["train.memory"], ("no part keeps examples", 0)]
    config = cell.resolved()
    values: dict[str, Any] = {"model": cell.model}
    for scope in ("train", "model", "stream", "metrics"):
        values.update({f"{scope}.{k}": v for k, v in config[scope].items() if not (scope == "model" and k == "name")})
    for part, settings in config["methods"].items():
        values.update({f"{part}.{k}": v for k, v in settings.items()})
    out = []
    for key, value in values.items():
        layers_of = found.get(key)
        if layers_of:
            out.append(Origin(key, value, layers_of[-1][0], tuple(layers_of[:-1])))
        else:
            out.append(Origin(key, value, "default"))
    return out


def _check_class_incremental(train: cfg.TrainConfig, stream: Stream) -> None:
    """``train.head`` and ``train.scoring`` choose among conventions of a class-incremental stream's shared head;
    set on another stream they would change nothing, so they are refused rather than recorded as if they had."""
    if stream.scenario == "class-incremental":
        return
    for key, default in (("head", "masked"), ("scoring", "stream")):
        value = getattr(train, key)
        if value != default:
            raise ConfigError(
                f"train.{key}={value}: stream {stream.name!r} is {stream.scenario}, and the setting applies to "
                "the shared head of a class-incremental stream alone"
            )


def _capture_refusal(static_step: bool, method: str, device_type: str, grad_accum: int) -> str | None:
    """Why ``train.capture`` cannot record this cell's step, or None."""
    if device_type != "cuda":
        return f"train.capture records the step as a CUDA graph: this cell runs on {device_type}"
    if not static_step:
        return (
            f"train.capture: {method}'s step is not declared static (MethodSpec.static_step): its loss terms or hooks "
            "may decide on values or keep state outside tensors, which a recorded graph would replay unchanged"
        )
    if grad_accum > 1:  # (--nproc > 1 is refused when the cell starts: the plan does not know it)
        return "train.capture records one whole step: it cannot run with train.grad_accum > 1"
    return None


def _model_hint(regs: Registries, sspec: StreamSpec) -> str:
    """What would give the stream a model: a profile whose preset names one, or --model with a model that takes the
    stream's inputs."""
    profiles = sorted(
        {f"{key.split('/')[0]} (model {preset['model']})" for key, preset in sspec.presets.items() if "model" in preset}
    )
    modalities = set(sspec.tags) & {"vector", "image", "text"}  # a stream spec tags its modality
    models = sorted(name for name, spec in regs.models.items.items() if not modalities or spec.modalities & modalities)
    hint = f"use --profile {' or '.join(profiles)}, or " if profiles else ""
    return hint + f"pass --model ({', '.join(models)})"


def cell_from_result(regs: Registries, result: CellResult, out: Path | str) -> Cell:
    """The cell a result file records, rebuilt from its stored settings (to rerun or verify it)."""
    c = result.config
    parts = tuple(c.get("parts") or result.method.split("@", 1)[0].split("+"))
    model = dict(c.get("model", {}))
    model_name = model.pop("name", None)
    if model_name is None:
        raise ConfigError(f"{result.path}: the result records no model")
    mspec, sspec = regs.models.get(model_name), regs.streams.get(result.stream)
    try:
        return _stored_cell(regs, result, out, parts, model_name, model, mspec, sspec)
    except ConfigError as exc:  # a setting renamed or removed since the result was made
        made = (result.provenance or {}).get("versions", {})
        by = ", ".join(f"{k} {v}" for k, v in made.items()) or "an unrecorded version"
        raise ConfigError(
            f"{result.path}: its stored settings do not fit the plugins installed now ({exc}). It was made by {by}: "
            "rerun the cell with the settings as they are named now, or install the version that made it"
        ) from None


def _stored_cell(
    regs: Registries,
    result: CellResult,
    out: Path | str,
    parts: tuple[str, ...],
    model_name: str,
    model: dict[str, Any],
    mspec: ModelSpec,
    sspec: StreamSpec,
) -> Cell:
    c = result.config
    return Cell(
        method=result.method,
        parts=parts,
        stream=result.stream,
        order=result.order,
        seed=result.seed,
        profile=str(c.get("profile", "custom")),
        model=model_name,
        methods_cfg={
            p: cfg.apply(regs.methods.get(p).config_cls, None, c.get("methods", {}).get(p, {}), p) for p in parts
        },
        model_cfg=cfg.apply(mspec.config_cls, None, model, "model"),
        train=cfg.apply(cfg.TrainConfig, None, c.get("train", {}), "train"),
        stream_cfg=cfg.apply(sspec.config_cls, None, c.get("stream", {}), "stream"),
        metrics=cfg.apply(cfg.MetricsConfig, None, c.get("metrics", {}), "metrics"),
        out=str(out),
        options=dict(c.get("options", {})),
        sweep=dict(c.get("sweep", {})),
        nproc=int(c.get("nproc", 1)),
    )
