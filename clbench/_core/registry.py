"""Plugin discovery and the typed registries built from the registration hooks.

Discovery goes through the ``clbench`` entry-point group only; built-in plugins are registered there
by this project's own pyproject.toml, exactly as a third-party package would.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pluggy

from clbench import hookspecs
from clbench.errors import PluginError, PluginSkippedWarning, UnknownNameError, did_you_mean  # noqa: F401
from clbench.specs import (
    CapabilitySpec,
    ExecutorSpec,
    MemorySpec,
    MethodSpec,
    MetricSpec,
    ModelSpec,
    OptionSpec,
    ProfileSpec,
    ShardingSpec,
    StreamFormSpec,
    StreamSpec,
    TargetsSpec,
    TestSetSpec,
)

ENTRY_POINT_GROUP = "clbench"
AUTOLOAD_ENV = "CLBENCH_DISABLE_PLUGIN_AUTOLOAD"
CORE = "clbench.local"  # the name the core plugins (local executor, quick profile) register under

T = TypeVar("T")


@dataclass(frozen=True)
class Origin:
    """Where a spec came from: the plugin name and the distribution that installed it."""

    plugin: str
    dist: str
    version: str

    @property
    def distribution(self) -> str:
        """``clbench 0.1.0``, or ``no installed distribution``."""
        return self.dist if self.version == "-" else f"{self.dist} {self.version}"

    def __str__(self) -> str:
        return f"plugin {self.plugin!r}, {self.distribution}"


_RESERVED_CHARS = frozenset(",+@=/")


@dataclass
class Registry(Generic[T]):
    """Name → spec, with a clear error and a "did you mean" for unknown names."""

    kind: str
    items: dict[str, T] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)
    disabled: tuple[str, ...] = ()  # the plugins -p no:NAME turned off: an unknown name may be theirs
    failed: Mapping[str, str] = field(default_factory=dict)  # plugin -> distribution, of those that failed to import

    def add(self, spec: T, origin: Origin) -> None:
        name = getattr(spec, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(
                f"plugin {origin.plugin!r} ({origin.distribution}) registered a {self.kind} without a name"
            )
        bad = sorted(set(name) & _RESERVED_CHARS) + (["a space"] if any(c.isspace() for c in name) else [])
        if self.kind != "metric" and bad:  # `--methods a+b,c@k=v` and folder names give these a meaning
            raise PluginError(
                f"plugin {origin.plugin!r} ({origin.distribution}) registered the {self.kind} "
                f"{name!r}, whose name holds {', '.join(bad)}: the command line reads ',' as a list, "
                "'+' as a composition, '@' and '=' as a sweep and '/' as a folder; rename it"
            )
        if name in self.items:
            other = self.origins[name]
            raise PluginError(
                f"{self.kind} {name!r} is registered twice: by {other.plugin!r} ({other.distribution}) "
                f"and by {origin.plugin!r} ({origin.distribution})"
            )
        self.items[name] = spec
        self.origins[name] = origin

    def get(self, name: str) -> T:
        try:
            return self.items[name]
        except KeyError:
            off = [d for d in self.disabled if d == name or d.endswith(f".{name}")]
            hint = f"; is it plugin {off[0]!r}, disabled by -p no:{off[0]}?" if off else ""
            if not hint and self.failed:  # a plugin that did not load may be the one that registers it
                match = did_you_mean(name, list(self.items))
                broken = "; ".join(
                    f"plugin {p!r} from distribution {d!r} failed to import (warning above) and may register it: "
                    f"reinstall {d}, or remove it with `pip uninstall {d}`"
                    for p, d in sorted(self.failed.items())
                )
                hint = (f" — did you mean {match!r}?" if match else "") + f"; {broken}."
            raise UnknownNameError(self.kind, name, sorted(self.items), hint=hint) from None

    def __contains__(self, name: object) -> bool:
        return name in self.items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.items))

    def __len__(self) -> int:
        return len(self.items)

    def values(self) -> list[T]:
        return [self.items[k] for k in sorted(self.items)]


_HOOKS: dict[str, tuple[str, type]] = {
    "methods": ("clbench_add_methods", MethodSpec),
    "models": ("clbench_add_models", ModelSpec),
    "streams": ("clbench_add_streams", StreamSpec),
    "metrics": ("clbench_add_metrics", MetricSpec),
    "profiles": ("clbench_add_profiles", ProfileSpec),
    "executors": ("clbench_add_executors", ExecutorSpec),
    "options": ("clbench_add_options", OptionSpec),
    "targets": ("clbench_add_targets", TargetsSpec),
    "memory": ("clbench_add_memory", MemorySpec),
    "sharding": ("clbench_add_sharding", ShardingSpec),
    "test_sets": ("clbench_add_test_sets", TestSetSpec),
    "capabilities": ("clbench_add_capabilities", CapabilitySpec),
    "stream_forms": ("clbench_add_stream_forms", StreamFormSpec),
}


@dataclass
class Registries:
    """Everything registered, by kind, plus the plugin manager that produced it."""

    pm: pluggy.PluginManager
    methods: Registry[MethodSpec]
    models: Registry[ModelSpec]
    streams: Registry[StreamSpec]
    metrics: Registry[MetricSpec]
    profiles: Registry[ProfileSpec]
    executors: Registry[ExecutorSpec]
    options: Registry[OptionSpec]
    targets: Registry[TargetsSpec]  # each also in its profile's ``targets`` (:func:`collect`)
    memory: Registry[MemorySpec]  # each also in its method's ``memory`` (:func:`collect`)
    sharding: Registry[ShardingSpec]  # each also in its method's ``shardable`` (:func:`collect`)
    test_sets: Registry[TestSetSpec]  # each also in its stream's ``shared_test_set`` (:func:`collect`)
    capabilities: Registry[CapabilitySpec]  # each also in its method's or model's spec (:func:`collect`)
    stream_forms: Registry[StreamFormSpec]  # each also a stream of its own (:func:`collect`)
    disabled: tuple[str, ...] = ()  # -p no:NAME, so remote workers can rebuild the same registries
    failed: Mapping[str, str] = field(default_factory=dict)  # plugin -> distribution, of those that failed to import

    @property
    def not_loaded(self) -> tuple[str, ...]:
        """The plugins a worker rebuilding these registries leaves out: those disabled, and those that failed to
        import here (the worker would meet the same failure, and warn again)."""
        return (*self.disabled, *sorted(set(self.failed) - set(self.disabled)))

    def plugin(self, name: str) -> object | None:
        """The plugin object (a module, an instance) registered under ``name`` as :func:`plugin_name` gives it."""
        return next((p for p in self.pm.get_plugins() if plugin_name(self.pm, p) == name), None)

    def kind(self, kind: str) -> Registry[Any]:
        if kind not in _HOOKS:
            raise UnknownNameError("registry", kind, sorted(_HOOKS))
        return getattr(self, kind)


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    setattr(pm, _DISTS_ATTR, {})  # id(plugin) -> (distribution, version), for `clbench list` and errors
    setattr(pm, _FAILED_ATTR, {})  # entry point name -> distribution, of the plugins that failed to import
    return pm


_DISTS_ATTR = "_clbench_dists"
_FAILED_ATTR = "_clbench_failed"


def _dist_of(plugin: object, pm: pluggy.PluginManager) -> tuple[str, str]:
    found = getattr(pm, _DISTS_ATTR, {}).get(id(plugin))
    if found is not None:
        return found
    module = getattr(plugin, "__name__", "")
    if module.startswith("clbench."):
        return "clbench", _own_version()
    return "no installed distribution", "-"


def in_process_plugins(pm: pluggy.PluginManager) -> list[str]:
    """Plugins registered in this process only (neither core nor an entry point): a worker process that
    rebuilds the registries with :func:`build_registry` would not have them."""
    dists = getattr(pm, _DISTS_ATTR, {})
    return [plugin_name(pm, p) for p in pm.get_plugins() if id(p) not in dists and pm.get_name(p) != CORE]


def plugin_name(pm: pluggy.PluginManager, plugin: object) -> str:
    """The name ``-p no:NAME`` takes; for an object registered without one (pluggy then names it by its
    ``id``), its module or class, which a reader can find."""
    name = pm.get_name(plugin)
    if name and not name.isdigit():
        return name
    return getattr(plugin, "__name__", None) or f"{type(plugin).__module__}.{type(plugin).__qualname__}"


@functools.cache  # parses clbench's METADATA (~0.3 ms), asked once per core plugin and registry
def _own_version() -> str:
    try:
        return md.version("clbench")
    except md.PackageNotFoundError:
        return "dev"


def load_entry_points(pm: pluggy.PluginManager, disabled: Iterable[str] = ()) -> None:
    """Load every ``clbench`` entry point not disabled. One that fails to import is skipped with a
    :class:`PluginSkippedWarning` naming its distribution, the error, and how to disable or remove it: a broken
    third-party package must not block the commands that do not need it (a name it would have registered is
    unknown, and that error names it: :meth:`Registry.get`)."""
    blocked = set(disabled)
    for name in blocked:
        pm.set_blocked(name)
    seen: set[str] = set()
    # each .metadata / .version parses the distribution's METADATA file again (~1 ms): once per distribution
    dists: dict[int, tuple[str, str]] = {}
    for ep in sorted(md.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in blocked or ep.name in seen or pm.has_plugin(ep.name):
            continue
        seen.add(ep.name)
        if ep.dist is not None and id(ep.dist) not in dists:
            meta = ep.dist.metadata
            dists[id(ep.dist)] = (meta["name"], meta["version"])
        dist, version = dists[id(ep.dist)] if ep.dist is not None else ("unknown distribution", "-")
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party package must not look like our bug, nor stop every command
            getattr(pm, _FAILED_ATTR)[ep.name] = dist
            why = " ".join(str(exc).split())  # one line
            warnings.warn(
                PluginSkippedWarning(
                    f"plugin {ep.name!r} from distribution {dist!r} failed to import ({ep.value}): "
                    f"{type(exc).__name__}: {why}; skipped. Disable it with -p no:{ep.name}, or remove it "
                    f"with `pip uninstall {dist}`"
                ),
                stacklevel=2,
            )
            continue
        try:
            pm.register(plugin, name=ep.name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {ep.name!r} from distribution {dist!r} is malformed: {exc}") from exc
        if ep.dist is not None:
            getattr(pm, _DISTS_ATTR)[id(plugin)] = (dist, version)


def check_disabled(disabled: Iterable[str]) -> None:
    """``-p no:NAME`` must name an installed plugin (an entry point of group ``clbench`` or a core plugin):
    a typo would otherwise disable nothing, silently."""
    known = sorted({ep.name for ep in md.entry_points(group=ENTRY_POINT_GROUP)} | {CORE})
    for name in disabled:
        if name not in known:
            hint = did_you_mean(name, known)
            raise PluginError(
                f"-p no:{name}: no installed plugin is named {name!r}"
                + (f" — did you mean {hint!r}?" if hint else "")
                + f" Plugins: {', '.join(known)}"
            )


def build_plugin_manager(
    disabled: Iterable[str] = (),
    extra_plugins: Iterable[object] = (),
    autoload: bool | None = None,
    core: object | None = None,
) -> pluggy.PluginManager:
    """A plugin manager with the core plugins, the entry points (unless autoload is off) and extras.

    ``autoload`` defaults to "on unless CLBENCH_DISABLE_PLUGIN_AUTOLOAD is set". ``core``: the core plugins,
    registered as :data:`CORE` (``clbench._exec.local``, handed in by the layer above: the registry does not
    import the execution layer).
    """
    disabled = list(disabled)
    pm = new_plugin_manager()
    if core is not None and CORE not in disabled:
        pm.register(core, name=CORE)
    if autoload is None:
        autoload = not os.environ.get(AUTOLOAD_ENV)
    if autoload:
        load_entry_points(pm, disabled)
    for plugin in extra_plugins:
        try:
            pm.register(plugin)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {plugin!r} is malformed: {exc}") from exc
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = plugin_name(pm, exc.plugin)
        dist, _ = _dist_of(exc.plugin, pm)
        raise PluginError(f"plugin {name!r} from distribution {dist!r}: {exc}") from exc
    return pm


def collect(pm: pluggy.PluginManager, disabled: Iterable[str] = ()) -> Registries:
    """Call every registration hook on every plugin, one plugin at a time, so errors name it."""
    disabled = tuple(disabled)
    failed = dict(getattr(pm, _FAILED_ATTR, {}))
    regs: dict[str, Registry[Any]] = {
        kind: Registry(kind[:-3] + "y" if kind.endswith("ies") else kind.rstrip("s"), disabled=disabled, failed=failed)
        for kind in _HOOKS
    }
    for plugin in pm.get_plugins():
        name = plugin_name(pm, plugin)
        dist, version = _dist_of(plugin, pm)
        origin = Origin(name, dist, version)
        for kind, (hook, spec_type) in _HOOKS.items():
            impl = getattr(plugin, hook, None)
            if impl is None or not hasattr(impl, hookspecs.PROJECT + "_impl"):
                continue
            try:
                specs = impl()
            except Exception as exc:
                raise PluginError(
                    f"plugin {name!r} ({origin.distribution}) raised in {hook}: {type(exc).__name__}: {exc}"
                ) from exc
            if specs is None:
                continue
            if not isinstance(specs, (list, tuple)):
                raise PluginError(
                    f"plugin {name!r} ({origin.distribution}): {hook} must return a list of {spec_type.__name__}, "
                    f"got {type(specs).__name__}"
                )
            for spec in specs:
                if not isinstance(spec, spec_type):
                    raise PluginError(
                        f"plugin {name!r} ({origin.distribution}): {hook} returned {type(spec).__name__}, "
                        f"expected {spec_type.__name__}"
                    )
                _check_spec(spec, origin)
                regs[kind].add(spec, origin)
    _derive(regs["streams"], regs["stream_forms"], regs["methods"])
    _give(regs["profiles"], regs["targets"], "profile", "targets")
    _give(regs["methods"], regs["memory"], "method", "memory")
    _give(regs["methods"], regs["sharding"], "method", "shardable")
    _give(regs["streams"], regs["test_sets"], "stream", "shared_test_set")
    _give_capabilities(regs["methods"], regs["models"], regs["capabilities"])
    _check_memory(regs["methods"])
    return Registries(pm=pm, disabled=disabled, failed=failed, **regs)


def _give(owners: Registry[Any], given: Registry[Any], kind: str, field: str) -> None:
    """Each spec of ``given`` becomes the ``field`` of the ``kind`` it names (``spec.name``): a profile's targets
    (:class:`TargetsSpec`), a method's memory (:class:`MemorySpec`), so every reader of the profile or method sees
    them. One that names nothing registered (unless a disabled plugin may be the one that registers it), or whose
    owner has its own already, is refused naming the plugin."""
    import dataclasses

    for spec in given.values():
        origin = given.origins.get(spec.name)
        owner = _owner(owners, spec.name, f"{origin} gives {field} for {kind} {spec.name!r}")
        if owner is None:
            continue
        if getattr(owner, field):
            raise PluginError(
                f"{kind} {spec.name!r} has {field} of its own ({owners.origins.get(spec.name)}) and from {origin}: "
                "give them in one place"
            )
        owners.items[spec.name] = dataclasses.replace(owner, **{field: getattr(spec, field)})


def _owner(owners: Registry[Any], name: str, giving: str) -> Any:
    """The spec ``name`` of ``owners`` that a declaration (``giving``: who gives what for it) is for. None: nobody
    registers it but a disabled plugin may (warned); an unknown name otherwise is refused with a "did you mean"."""
    owner = owners.items.get(name)
    if owner is None:
        message = f"{giving}, which no plugin registers"
        if not owners.disabled:
            hint = did_you_mean(name, list(owners))
            raise PluginError(message + (f" — did you mean {hint!r}?" if hint else ""))
        warnings.warn(f"{message} (or a disabled plugin does); they are not used", stacklevel=2)
    return owner


_CAPABILITY_FIELDS = {"method": ("modalities", "requires"), "model": ("provides",)}


def _give_capabilities(
    methods: Registry[MethodSpec], models: Registry[ModelSpec], given: Registry[CapabilitySpec]
) -> None:
    """Each :class:`CapabilitySpec` into the spec of the method or model it names: ``requires`` and ``provides`` are
    added to the spec's own, ``modalities`` set where the spec leaves them open. A declaration of a field its kind has
    not, of a name nobody registers (but where a disabled plugin may), or of modalities a method declares itself, is
    refused naming the plugin."""
    import dataclasses

    for spec in given.values():
        origin = given.origins.get(spec.name)
        if spec.kind not in _CAPABILITY_FIELDS:
            raise PluginError(f"{origin} declares capabilities of a {spec.kind!r}; kinds: method, model")
        owners: Registry[Any] = methods if spec.kind == "method" else models
        wrong = [f for f in ("modalities", "requires", "provides") if getattr(spec, f)]
        wrong = [f for f in wrong if f not in _CAPABILITY_FIELDS[spec.kind]]
        if wrong:
            raise PluginError(
                f"{origin} gives {spec.kind} {spec.target!r} {', '.join(wrong)}, which a {spec.kind} has not"
            )
        owner = _owner(owners, spec.target, f"{origin} gives capabilities for {spec.kind} {spec.target!r}")
        if owner is None:
            continue
        if spec.modalities and owner.modalities:
            raise PluginError(
                f"method {spec.target!r} has modalities of its own ({owners.origins.get(spec.target)}) and from "
                f"{origin}: give them in one place"
            )
        changes = {f: getattr(owner, f) | getattr(spec, f) for f in _CAPABILITY_FIELDS[spec.kind]}
        owners.items[spec.target] = dataclasses.replace(owner, **changes)


_SCENARIO_KEYS = frozenset({"model.multi_head", "train.scoring"})  # what a form does not take of its base's presets


def _derive(streams: Registry[StreamSpec], forms: Registry[StreamFormSpec], methods: Registry[MethodSpec]) -> None:
    """Each form (:class:`StreamFormSpec`) becomes a stream: its base's spec under the form's name, built by the
    base's factory then transformed (:func:`clbench.data.stream_form`), with the base's presets, and every method's
    presets for the base under the form's name too, but for the head and scoring of the base's scenario (a profile's
    default streams leave it out: clbench._core.plan._streams). A cell's code digest names the base's plugin
    (:mod:`clbench._core.provenance`), whose code makes its data; the transform is the core's. A form of an unknown
    stream or form, or under a taken name, is refused naming the plugin that declares it."""
    import dataclasses
    import functools

    from clbench.data import stream_form
    from clbench.specs import FORMS

    for spec in forms.values():
        origin = forms.origins[spec.name]
        if spec.form not in FORMS:
            raise PluginError(f"{origin} declares stream {spec.name!r} in form {spec.form!r}; forms: {sorted(FORMS)}")
        base = streams.items.get(spec.base)
        if base is None:
            message = (
                f"{origin} declares stream {spec.name!r} as a form of stream {spec.base!r}, which no plugin registers"
            )
            if streams.disabled:
                warnings.warn(f"{message} (or a disabled plugin does); it is not registered", stacklevel=2)
                continue
            hint = did_you_mean(spec.base, list(streams))
            raise PluginError(message + (f" — did you mean {hint!r}?" if hint else ""))
        if spec.name in streams:
            raise PluginError(f"{origin} declares stream {spec.name!r}, which {streams.origins[spec.name]} registers")
        description = spec.description or f"{spec.base} in {spec.form} form: {FORMS[spec.form]}"
        derived = dataclasses.replace(
            base,
            name=spec.name,
            factory=functools.partial(stream_form, base.factory, spec.name, spec.form),
            description=description,
            # (a task-incremental base's heads and scoring are not the form's scenario's)
            presets={p: {k: v for k, v in s.items() if k not in _SCENARIO_KEYS} for p, s in base.presets.items()},
        )
        streams.add(derived, origin)
        for name, method in list(methods.items.items()):  # "profile/base[/order]" keys as "profile/form[/order]"
            given = {
                key.replace(f"/{spec.base}", f"/{spec.name}", 1): {
                    k: v for k, v in values.items() if k not in _SCENARIO_KEYS
                }
                for key, values in method.presets.items()
                if key.split("/")[1:2] == [spec.base]
            }
            if given:
                methods.items[name] = dataclasses.replace(method, presets={**method.presets, **given})


def _check_memory(methods: Registry[MethodSpec]) -> None:
    """A method's memory names one of its settings (what ``train.memory`` sets)."""
    import dataclasses

    for method in methods.values():
        fields = {f.name for f in dataclasses.fields(method.config_cls)}
        if method.memory is not None and method.memory.setting not in fields:
            raise PluginError(
                f"method {method.name!r}'s memory is its setting {method.memory.setting!r}, which "
                f"{method.config_cls.__name__} does not have (its settings: {', '.join(sorted(fields)) or 'none'})"
            )


def _check_spec(spec: object, origin: Origin) -> None:
    """Fields typed as a closed set of words (``direction``, ``needs``, ``footprint_kind``, ``aggregate``)
    must hold one of them: ``direction="higher"`` would otherwise render as ↓ and rank backwards."""
    import dataclasses
    import typing

    from clbench import specs

    closed = {
        "direction": specs.Direction,
        "needs": specs.MetricNeeds,
        "footprint_kind": specs.FootprintKind,
        "aggregate": typing.Literal["mean"],
    }
    name = getattr(spec, "name", "?")
    for field_name, literal in closed.items():
        allowed = typing.get_args(literal)
        if hasattr(spec, field_name) and getattr(spec, field_name) not in allowed:
            raise PluginError(
                f"plugin {origin.plugin!r} ({origin.distribution}): {type(spec).__name__} {name!r} has "
                f"{field_name}={getattr(spec, field_name)!r}; choose one of {', '.join(map(repr, allowed))}"
            )
    config_cls = getattr(spec, "config_cls", None)
    if config_cls is not None and not dataclasses.is_dataclass(config_cls):
        raise PluginError(
            f"plugin {origin.plugin!r} ({origin.distribution}): {type(spec).__name__} {name!r} has "
            f"config_cls={config_cls!r}, which is not a dataclass"
        )


def build_registry(
    disabled: Iterable[str] = (),
    extra_plugins: Iterable[object] = (),
    autoload: bool | None = None,
    core: object | None = None,
) -> Registries:
    """The registries of every plugin (see :func:`build_plugin_manager`). The harness builds them with
    :func:`clbench._exec.local.harness_registry`, which adds the core plugins."""
    disabled = tuple(disabled)
    return collect(build_plugin_manager(disabled, extra_plugins, autoload, core), disabled)
