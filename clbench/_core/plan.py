"""The grid: which cells a ``clbench run`` command means, with every setting resolved up front.

A :class:`Cell` is plain data (picklable, JSON-able) so any executor can ship it to a worker. All
validation happens here, before the first cell trains: an unknown name or a bad ``--set`` value
fails the command, not cell 37.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clbench import config as cfg
from clbench._core import provenance
from clbench._core.boundary import blame, check_type, describe
from clbench._core.cells import RunRequest, _Layers, _make_cell, _with_path, profile_lineage
from clbench._core.placement import place
from clbench._core.registry import Registries, Registry
from clbench.cell import RESERVED_SCOPES, SEED_LIMIT, TEST_PROFILE, Cell, Plan
from clbench.data import Stream
from clbench.errors import ClbenchError, ConfigError, PluginError, did_you_mean
from clbench.specs import MethodSpec, ProfileSpec, StreamSpec


def _check_scopes(sets: Mapping[str, Any], regs: Registries) -> None:
    for key in sets:
        scope = key.split(".", 1)[0]
        if scope in RESERVED_SCOPES or scope in regs.methods:
            continue
        known = list(RESERVED_SCOPES) + list(regs.methods)
        hint = did_you_mean(scope, known)
        extra = f" — did you mean {hint!r}?" if hint else ""
        raise ConfigError(
            f"--set {key}: unknown scope {scope!r}{extra} Scopes: train, model, stream, metrics, or a method name"
        )


def _once(values: Sequence[Any] | None, what: str, hint: str = "") -> None:
    """A value given twice would plan two cells for one folder (the second overwrites the first)."""
    seen: list[Any] = []
    for v in values or ():
        if v in seen:
            raise ConfigError(f"{what}: {v!r} is given twice{hint}")
        seen.append(v)


def make_plan(regs: Registries, req: RunRequest) -> Plan:
    """The cells ``req`` means, every setting resolved and checked before anything runs, in named steps: the
    request, the streams, the methods (and what "all" means on each stream), the sweep, then per stream its
    settings, orders, seeds and cells; last, what was asked but would be ignored."""
    profile = regs.profiles.get(req.profile)
    _check_request(regs, req, profile)
    streams = _streams(regs, req, profile)
    methods = _methods(regs, req, profile, streams)
    sweep = _Sweep.of(req)
    cells: list[Cell] = []
    skipped: list[str] = []
    known_orders: dict[str, list[str]] = {}
    for sspec in streams:
        preset = methods.presets[sspec.name]
        stream = _build_stream(regs, req, profile, sspec, sweep.single)
        known_orders[sspec.name] = list(stream.orders)
        orders, seeds = _orders_and_seeds(regs, req, profile, sspec, stream, preset)
        labels = methods.on_stream[sspec.name]
        left_out = sorted(set(methods.labels) - set(labels))
        if left_out:
            skipped.append(f"{', '.join(left_out)} on {sspec.name}: not in the {profile.name!r} preset's methods")
        for label in labels:
            cells += _label_cells(regs, req, profile, sspec, stream, label, methods, sweep, orders, seeds, skipped)
    _check_presets(regs, streams, {p: regs.methods.get(p) for p in methods.in_run}, known_orders)
    _check_ignored(regs, req, cells, skipped, streams)
    _check_one_test_set(cells)
    return Plan(cells=place(regs, cells), profile=profile.name, out=Path(req.out), skipped=skipped)


def _check_request(regs: Registries, req: RunRequest, profile: ProfileSpec) -> None:
    """No value given twice, every ``--set`` scope known."""
    _once(req.orders, "--orders")
    _once(req.seeds, "--seeds")
    _once(req.streams, "--stream")  # two cells of one stream into one folder would race (-j 2)
    for key, values in req.sets.items():
        _once(
            values,
            f"--set {key}",
            " (a comma makes a sweep of distinct values; a list is written in brackets, e.g. model.hidden=[256,256])",
        )
    _check_scopes(req.sets, regs)
    _check_scopes(profile.sets, regs)
    for stream, sets in profile.stream_sets.items():
        if stream not in regs.streams:
            raise ConfigError(f"profile {profile.name!r} sets stream {stream!r}, which is not registered")
        _check_scopes(sets, regs)
    if req.points:
        keys = set(req.points[0])
        if any(set(p) != keys for p in req.points):
            raise ConfigError("sweep points must all set the same keys")
        both = keys & set(req.sets)
        if both:
            raise ConfigError(f"{', '.join(sorted(both))}: set both by --set and by the sweep points")
        _check_scopes(dict.fromkeys(keys), regs)
        if any(k.startswith("stream.") for k in keys):
            raise ConfigError("sweep points cannot set stream settings (a stream is built once per run)")
        _once([tuple(sorted(p.items())) for p in req.points], "sweep points")


def _streams(regs: Registries, req: RunRequest, profile: ProfileSpec) -> list[StreamSpec]:
    """``--stream``, else the profile's streams (or, for a profile that extends another and names none, its
    base's), else every stream with a preset for it or a profile it extends (not those of your own data: tag
    ``own-data``, they need --data-dir, nor a form of another stream, :class:`~clbench.specs.StreamFormSpec`)."""
    lineage = profile_lineage(regs, profile.name)
    named = [p.streams for p in (regs.profiles.get(n) for n in reversed(lineage) if n in regs.profiles) if p.streams]
    if req.streams:
        names = list(req.streams)
    elif named:
        names = list(named[0])
    else:
        names = [
            s.name
            for s in regs.streams.values()
            # (a form of another stream has its base's presets, and runs when named: --stream)
            if any(p in s.presets for p in lineage) and "own-data" not in s.tags and s.name not in regs.stream_forms
        ]
    if not names:
        raise ConfigError(f"profile {profile.name!r} has no streams; pass --stream")
    return [regs.streams.get(n) for n in names]


@dataclass
class _Methods:
    """The method labels of a request and what they mean per stream."""

    explicit: bool  # named by --methods (a cell that cannot run is an error), not "all" or the profile's
    labels: list[str]
    on_stream: dict[str, list[str]]  # stream -> its labels ("all" may mean a stream preset's methods)
    parts_of: dict[str, tuple[str, ...]]  # label -> registered methods, in composition order
    presets: dict[str, dict[str, Any]]  # stream -> its preset for the profile (stream-level keys)

    @property
    def in_run(self) -> set[str]:
        return {p for parts in self.parts_of.values() for p in parts}


def _methods(regs: Registries, req: RunRequest, profile: ProfileSpec, streams: Sequence[StreamSpec]) -> _Methods:
    """The labels, what "all" means on each stream (a stream preset may name them: the quick profile keeps the
    expensive text stream to the LoRA family), their parts (composites like "olora+nlora" must compose), and no
    ``--set`` for a method that does not run (it would be silently ignored)."""
    expr = (
        req.methods
        if req.methods is not None
        else (profile.methods if isinstance(profile.methods, str) else ",".join(profile.methods))
    )
    labels = sorted(regs.methods) if expr == "all" else [m.strip() for m in expr.split(",") if m.strip()]
    _once(labels, "--methods")
    lineage = profile_lineage(regs, profile.name)
    presets = {s.name: cfg.preset_values(s.presets, lineage, s.name, "") for s in streams}
    on_stream = {}
    for sspec in streams:
        preset_methods = presets[sspec.name].get("methods")
        on_stream[sspec.name] = list(preset_methods) if expr == "all" and preset_methods else labels
    parts_of = {label: tuple(p.strip() for p in label.split("+")) for ls in on_stream.values() for label in ls}
    for label, parts in parts_of.items():
        _once(parts, f"--methods {label}", ": a method composed with itself is one method")
        for spec in [regs.methods.get(p) for p in parts][1:]:
            if not spec.composable:
                raise ConfigError(f"method {spec.name!r} cannot be composed ('{label}'): it only adds structure")
    methods = _Methods(req.methods not in (None, "all"), labels, on_stream, parts_of, presets)
    for key in [*req.sets, *(req.points[0] if req.points else ())]:
        scope = key.split(".", 1)[0]
        if scope not in RESERVED_SCOPES and scope not in methods.in_run:
            raise ConfigError(
                f"--set {key}: method {scope!r} is not in this run (methods: "
                f"{', '.join(sorted(methods.in_run))}); add it to --methods or drop the setting"
            )
    return methods


@dataclass
class _Sweep:
    """``--set`` split into single values and swept keys (a comma: one cell per value), and the request's zipped
    points (one cell per point)."""

    sets: Mapping[str, list[Any]]
    keys: list[str]
    single: dict[str, Any]
    zipped: Sequence[Mapping[str, Any]] = ()

    @classmethod
    def of(cls, req: RunRequest) -> _Sweep:
        return cls(
            req.sets,
            sorted(k for k, v in req.sets.items() if len(v) > 1),
            {k: v[0] for k, v in req.sets.items() if len(v) == 1},
            req.points,
        )

    def points(self, parts: tuple[str, ...]) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The sweep a label takes part in: the reserved scopes' and its own methods' keys (a sweep of ``si.c``
        does not multiply ``ewc``), and their value combinations (each grid point with each zipped point)."""

        def own(key: str) -> bool:
            return key.split(".", 1)[0] in RESERVED_SCOPES or key.split(".", 1)[0] in parts

        keys = [k for k in self.keys if own(k)]
        grid = list(itertools.product(*(self.sets[k] for k in keys))) or [()]
        zkeys = sorted(k for k in (self.zipped[0] if self.zipped else ()) if own(k))
        zipped = list(dict.fromkeys(tuple(p[k] for k in zkeys) for p in self.zipped)) or [()]
        return keys + zkeys, [g + z for g in grid for z in zipped]


def _build_stream(
    regs: Registries,
    req: RunRequest,
    profile: ProfileSpec,
    sspec: StreamSpec,
    single: Mapping[str, Any],
) -> Stream:
    """The stream with its settings (preset, profile, ``--set``, ``--data-dir``); a plugin's fault names it."""
    # the cells' stream settings, by one rule
    layers = _Layers.of(profile_lineage(regs, profile.name), profile.sets_for(sspec.name), sspec, "", (), single)
    values = _with_path(
        sspec.config_cls, layers.stream_scope(), sspec.data_dir_field, req.data_dir, layers.user.get("stream", {})
    )
    config = cfg.apply(sspec.config_cls, None, values, "stream")
    origin = regs.streams.origins.get(sspec.name)
    try:
        stream = provenance.observed(lambda: sspec.factory(config))  # (a plugin that caches its data reads it here)
    except ClbenchError:
        raise
    except Exception as exc:  # a plugin's bug at planning: one line naming it, not a traceback
        raise PluginError(
            f"stream {sspec.name!r}{describe(origin)}: factory raised {type(exc).__name__}: {exc}{blame(exc, regs)}"
        ) from exc
    check_type(stream, Stream, f"stream {sspec.name!r}", "factory", origin)
    if not stream.tasks:
        raise ConfigError(f"stream {sspec.name!r}{describe(origin)} has no tasks")
    return stream


def _orders_and_seeds(
    regs: Registries,
    req: RunRequest,
    profile: ProfileSpec,
    sspec: StreamSpec,
    stream: Stream,
    preset: Mapping[str, Any],
) -> tuple[list[str], list[int]]:
    """The orders (``--orders``, the preset's, the stream's) and seeds (``--seeds``, the preset's, the profile's),
    each order known and not empty, each seed in range."""
    orders = list(req.orders) if req.orders else list(preset.get("orders", stream.orders))
    for o in orders:
        if not stream.order(o):  # (validates the name)
            raise ConfigError(f"stream {sspec.name!r}, order {o!r} has no tasks: nothing to train or evaluate")
    seeds = list(req.seeds) if req.seeds else list(preset.get("seeds", profile.seeds))
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
            raise ConfigError(
                f"seed {seed!r} is out of range: seeds are integers 0 ≤ s < 2**32 (every random "
                "generator of a cell is derived from 32 bits of it; larger ones would repeat smaller)"
            )
    return orders, seeds


def _label_cells(
    regs: Registries,
    req: RunRequest,
    profile: ProfileSpec,
    sspec: StreamSpec,
    stream: Stream,
    label: str,
    methods: _Methods,
    sweep: _Sweep,
    orders: list[str],
    seeds: list[int],
    skipped: list[str],
) -> list[Cell]:
    """A label's cells on one stream (orders × seeds × its sweep points). One that cannot run is an error when
    the label and the stream were both named, else noted once in ``skipped`` (a profile's other streams)."""
    parts = methods.parts_of[label]
    mspecs = [regs.methods.get(p) for p in parts]
    keys, points = sweep.points(parts)
    row = profile.rows.get(sspec.name, {}).get(label, {})
    stray = [k for k in row if k.split(".", 1)[0] not in {*RESERVED_SCOPES, *parts} - {"stream"}]
    if stray:  # a key no setting of the cell reads would be recorded nowhere and change nothing
        raise ConfigError(
            f"profile {profile.name!r}: its row {label!r} on stream {sspec.name!r} sets {', '.join(stray)}, which "
            f"no setting of the cell reads (a row sets train.*, model.*, metrics.* or {', '.join(parts)}.*)"
        )
    cells = []
    for order, seed, point in itertools.product(orders, seeds, points):
        swept = dict(zip(keys, point, strict=True))
        cell = _make_cell(
            regs,
            profile.name,
            profile.sets_for(sspec.name),
            sspec,
            stream,
            order,
            seed,
            label,
            mspecs,
            {**sweep.single, **swept},
            swept,
            req,
            row,
        )
        if isinstance(cell, str):
            if methods.explicit and req.streams:  # both named: the user asked for exactly this cell
                raise ConfigError(f"method {label!r} cannot run on stream {sspec.name!r}: {cell}")
            if (order, seed, point) == (orders[0], seeds[0], points[0]):
                skipped.append(f"{label} on {sspec.name}: {cell}")
            continue
        cells.append(cell)
    return cells


def _check_ignored(
    regs: Registries, req: RunRequest, cells: Sequence[Cell], skipped: Sequence[str], streams: Sequence[StreamSpec]
) -> None:
    """An empty grid, or a flag no planned plugin reads (it would be silently ignored), is refused."""
    if not cells:
        raise ConfigError("nothing to run: " + ("; ".join(skipped) or "the grid is empty"))
    if req.model_path is not None and not any(regs.models.get(c.model).weights_field in c.model_config for c in cells):
        models = sorted({c.model for c in cells})
        raise ConfigError(
            f"--model-path {req.model_path}: no planned model takes weights from a path ({', '.join(models)})"
        )
    if req.data_dir is not None and not any(
        regs.streams.get(c.stream).data_dir_field in c.stream_config for c in cells
    ):
        raise ConfigError(
            f"--data-dir {req.data_dir}: no planned stream reads a data directory "
            f"({', '.join(s.name for s in streams)})"
        )


TEST_SET_KEYS = ("eval_split", "eval_limit")  # the train.* settings that choose the examples a matrix is scored on


def _check_one_test_set(cells: Sequence[Cell]) -> None:
    """The cells a leaderboard table ranks together (one stream, one track) must be scored on one test set: rows
    of a table are compared example by example, so a sweep of ``train.eval_split`` or ``train.eval_limit`` would
    train every cell and then have no table to go in. Refused here, before any cell."""
    tables: dict[tuple[str, bool, bool], list[Cell]] = {}
    for c in cells:
        tables.setdefault((c.stream, bool(c.train.steps_per_task), bool(c.train.compute_epochs)), []).append(c)
    for (stream, *_), group in tables.items():
        differ = [k for k in TEST_SET_KEYS if len({getattr(c.train, k) for c in group}) > 1]
        if differ:
            values = "; ".join(
                f"train.{k}: {', '.join(map(str, dict.fromkeys(getattr(c.train, k) for c in group)))}" for k in differ
            )
            raise ConfigError(
                f"the cells of stream {stream!r} would be scored on different test sets ({values}), and a "
                "leaderboard table ranks rows scored on one; run each value into its own --out (e.g. --set "
                f"train.{differ[0]}={getattr(group[0].train, differ[0])} --out runs-{getattr(group[0].train, differ[0])})"
            )


def _check_presets(
    regs: Registries,
    streams: Sequence[StreamSpec],
    methods: Mapping[str, MethodSpec],
    orders: Mapping[str, Sequence[str]],
) -> None:
    """A preset keyed to a profile, stream or order that does not exist would be ignored; refuse it,
    naming the plugin. Keys are ``profile``, ``profile/stream`` or ``profile/stream/order``."""
    owners: list[tuple[str, Any, Registry[Any]]] = [(f"stream {s.name!r}", s, regs.streams) for s in streams]
    owners += [(f"method {m.name!r}", m, regs.methods) for m in methods.values()]
    for what, spec, reg in owners:
        for key in spec.presets:
            parts = str(key).split("/")
            problem, maybe_disabled = None, False
            streamed = [k for k in spec.presets[key] if str(k).startswith("stream.")]
            if len(parts) > 3 or not all(parts):
                problem = "is not 'profile', 'profile/stream' or 'profile/stream/order'"
            elif streamed and (reg is regs.methods or len(parts) == 3):  # a stream is built once for a run
                problem = (
                    f"sets {', '.join(streamed)}: a stream's settings are the same for every method and order of a "
                    "run (set them in the stream's 'profile' or 'profile/stream' preset)"
                )
            elif parts[0] not in regs.profiles and parts[0] != TEST_PROFILE:
                problem, maybe_disabled = _unknown("profile", parts[0], regs.profiles), True
            elif len(parts) > 1 and parts[1] not in regs.streams:
                problem, maybe_disabled = _unknown("stream", parts[1], regs.streams), True
            elif len(parts) > 2 and parts[1] in orders and parts[2] not in orders[parts[1]]:
                problem = _unknown(f"order of stream {parts[1]!r}", parts[2], orders[parts[1]])
            if problem:
                origin = reg.origins.get(spec.name)
                message = f"{what}{f' ({origin})' if origin else ''} has a preset {key!r} that {problem}"
                if maybe_disabled and regs.disabled:  # -p no:NAME may have removed that profile or stream
                    warnings.warn(
                        f"{message} (or one of the disabled plugins {', '.join(regs.disabled)} "
                        "provides it); the preset is not used",
                        stacklevel=2,
                    )
                    continue
                raise PluginError(message)


def _unknown(kind: str, name: str, known: Any) -> str:
    hint = did_you_mean(name, list(known))
    return f"names no {kind} {name!r}" + (f" — did you mean {hint!r}?" if hint else "")


__all__ = ["RunRequest", "make_plan"]  # RunRequest lives in clbench._core.cells, beside the cells it asks for
