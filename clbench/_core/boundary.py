"""The boundary between clbench and its plugins: everything a plugin returns is checked here, and every
fault names the plugin and the distribution it came from.

A fault inside a cell (a method's ``loss_terms`` of the wrong type, a ``report()`` that is not JSON, an
observer that raises) fails that cell and no other; a fault outside every cell (an observer of the run)
is reported and the run goes on. Checks are cheap: type tests on what crosses the boundary, never a
second pass over tensors.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType, ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from torch import Tensor

from clbench.errors import PluginError
from clbench.metrics import MetricInput
from clbench.specs import MetricSpec

if TYPE_CHECKING:
    import pluggy

    from clbench._core.registry import Origin, Registries
    from clbench.data import Batch
    from clbench.method import Method


class ObserverError(PluginError):
    """An observer hook raised; the message names the hook and the plugin."""


def describe(origin: Origin | None) -> str:
    """`` (plugin 'ewc', clbench 0.1.0)`` — appended to every message about a plugin's fault."""
    return "" if origin is None else f" ({origin})"


def check_type(obj: Any, cls: type, what: str, hook: str, origin: Origin | None) -> None:
    """``what``'s ``hook`` must return a ``cls``: a stream factory a Stream, a model factory a CLModel..."""
    if not isinstance(obj, cls):
        raise PluginError(f"{what}{describe(origin)}: {hook} returned {type(obj).__name__}, expected {cls.__name__}")


def check_loss_terms(terms: Any, what: str) -> Mapping[str, Tensor]:
    """``loss_terms`` must return a mapping of name → scalar tensor (a float would carry no gradient and be
    silently ignored: the method would train as plain fine-tuning)."""
    if not isinstance(terms, Mapping):
        raise PluginError(
            f"{what}: loss_terms returned {type(terms).__name__}, expected a mapping of name → scalar tensor"
        )
    for name, value in terms.items():
        if not isinstance(value, Tensor) or value.ndim != 0:
            got = type(value).__name__ if not isinstance(value, Tensor) else f"a tensor of shape {tuple(value.shape)}"
            raise PluginError(
                f"{what}: loss_terms[{name!r}] is {got}, expected a scalar tensor (a float carries "
                "no gradient; use a tensor computed from the parameters)"
            )
    return terms


def check_footprint(footprint: Any, kind: str, what: str) -> Any:
    """A task's footprint must be a mapping of parameter name → the form its ``MethodSpec.footprint_kind``
    declares (``none``: empty); metrics pick their inputs by that form, so a lie would read as n/a."""
    from clbench.footprints import Dense, LowRank, Masked

    expected = {"dense": Dense, "lowrank": LowRank, "masked": Masked}.get(kind)
    if not isinstance(footprint, Mapping):
        raise PluginError(f"{what}: footprint returned {type(footprint).__name__}, expected a mapping")
    for name, value in footprint.items():
        if expected is None or not isinstance(value, expected):
            want = "nothing (footprint_kind='none')" if expected is None else expected.__name__
            raise PluginError(
                f"{what}: footprint[{name!r}] is {type(value).__name__}, but the spec's "
                f"footprint_kind={kind!r} promises {want}"
            )
    return footprint


def check_report(report: Any, what: str) -> dict[str, Any]:
    """``report()`` must be a JSON-serialisable dict of finite values: it goes into result.json as it is."""
    if not isinstance(report, dict):
        raise PluginError(f"{what}: report() returned {type(report).__name__}, expected a dict")
    try:
        json.dumps(report, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PluginError(
            f"{what}: report() is not JSON-serialisable ({exc}); return numbers, strings, lists "
            "and dicts (call .item() / .tolist() on tensors)"
        ) from None
    return report


@dataclass(frozen=True)
class CheckedMethod:
    """A cell's method as the core calls it: what its hooks return is checked here, and a wrong value is a
    :class:`PluginError` naming ``label`` (``method 'ewc' (plugin 'ewc', clbench 0.1.0)``, from
    :func:`clbench._exec.runner.method_label`). The other hooks are called on ``method`` itself."""

    method: Method
    label: str = "method"

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> Mapping[str, Tensor]:
        terms = self.method.loss_terms(batch, logits)
        if type(terms) is dict and not terms:  # {}, most steps of most methods, has nothing to check
            return terms
        return check_loss_terms(terms, self.label)

    def footprint(self, task: str, index: int, kind: str) -> Any:
        return check_footprint(self.method.footprint(task, index), kind, self.label)

    def report(self) -> dict[str, Any]:
        return check_report(self.method.report(), self.label)


def metric_value(value: Any) -> float | None:
    """A metric's return value as a float, or None; anything else (a string, a tensor, NaN) is a ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"returned {type(value).__name__} {value!r:.60}, expected a number or None")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"returned {value}, expected a finite number or None")
    return value


def notify(regs: Registries, hook: str, **kwargs: Any) -> None:
    """Call observer ``hook`` on every plugin, one at a time, so a fault names its plugin (pluggy's own
    call stops at the first exception and does not say whose it was). Same order as pluggy: last
    registered first; hook wrappers go through pluggy."""
    observers(regs, hook)(**kwargs)


def observers(regs: Registries, hook: str) -> Callable[..., None]:
    """:func:`notify` for ``hook`` with its observers looked up now, once, for a hook called many times over
    (``clbench_step``: finding them again costs a logged step ~5 µs)."""
    caller = getattr(regs.pm.hook, hook)
    impls = caller.get_hookimpls()
    if any(i.hookwrapper or getattr(i, "wrapper", False) for i in impls):
        return caller  # type: ignore[no-any-return]
    calls = [(impl.plugin, impl.function, impl.argnames) for impl in reversed(impls)]

    def call(**kwargs: Any) -> None:
        for plugin, function, argnames in calls:
            try:
                function(*[kwargs[a] for a in argnames])
            except Exception as exc:
                raise ObserverError(
                    f"observer {hook}{describe(origin_of(regs, plugin))} raised {type(exc).__name__}: {exc}"
                ) from exc

    return call


def origin_of(regs: Registries, plugin: object) -> Origin:
    from clbench._core.registry import Origin, _dist_of, plugin_name

    dist, version = _dist_of(plugin, regs.pm)
    return Origin(plugin_name(regs.pm, plugin), dist, version)


def _plugin_modules(pm: pluggy.PluginManager) -> list[tuple[str, str, object]]:
    """(module, package, plugin) for every plugin that is not the core: a plugin module and its package
    (``a.b`` for ``a.b.plugin``; a package plugin is its own package), a class instance's module; sorted
    longest package first, then by plugin name, so the answer never depends on registration order."""
    out = []
    for plugin in pm.get_plugins():
        is_module = isinstance(plugin, ModuleType)
        module = plugin.__name__ if is_module else type(plugin).__module__
        package = (
            module.rsplit(".", 1)[0] if is_module and not hasattr(plugin, "__path__") and "." in module else module
        )
        if module and package != "clbench" and not package.startswith("clbench."):
            out.append((module, package, plugin))
    return sorted(out, key=lambda m: (-len(m[1]), pm.get_name(m[2]) or ""))


def blame(exc: BaseException, regs: Registries) -> str:
    """`` in plugin 'ewc' (clbench 0.1.0) at clbench_plugins/ewc/method.py:42`` — the innermost frame of
    the traceback in a registered plugin's code: its own module first, else its package (two plugins of one
    package: the first by name; one module per plugin keeps blame exact), or ``""`` (then it is clbench's).
    Code a plugins' package shares that no plugin registered (``clbench_plugins._shared``) is blamed on the plugin
    that runs it, at the shared line: the one whose object is the frame's ``self`` (:func:`_runner_of`), else the
    next plugin frame out (the plugin's own code that called it)."""
    tb: TracebackType | None = exc.__traceback__
    frames: list[FrameType] = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    modules = _plugin_modules(regs.pm)
    tops = {package.split(".")[0] for _, package, _ in modules}
    shared: FrameType | None = None  # the innermost frame in shared code
    for frame in reversed(frames):
        name = frame.f_globals.get("__name__", "")
        plugin = _plugin_of_module(name, modules)
        found = origin_of(regs, plugin) if plugin is not None else None
        if found is None and name.split(".")[0] in tops:
            shared = shared or frame
            found = _runner_of(frame, modules, regs)
        if found is not None:
            at = shared or frame
            return (
                f" in plugin {found.plugin!r} ({found.distribution}) at {_short(at.f_code.co_filename)}:{at.f_lineno}"
            )
    return ""


def _plugin_of_module(name: str, modules: list[tuple[str, str, object]]) -> object | None:
    """The plugin whose code module ``name`` is: the plugin module itself, else one in its package."""
    return next((p for m, _, p in modules if name == m), None) or next(
        (p for _, pkg, p in modules if name == pkg or name.startswith(pkg + ".")), None
    )


def _runner_of(frame: FrameType, modules: list[tuple[str, str, object]], regs: Registries) -> Origin | None:
    """The plugin that runs shared code executing in ``frame``, from the frame's ``self`` (or ``cls``): the first
    class of its MRO that is a plugin's (defined in a plugin's package: ``NLoRA`` running ``LoRAMethod``'s code), is
    a spec's class or factory (a method class registered as it is), or is defined in a module whose registered
    factories are all one plugin's (a model class its plugin's factory function builds); None when nothing says."""
    obj = frame.f_locals.get("self", frame.f_locals.get("cls"))
    if obj is None:
        return None
    registered: dict[int, Origin] = {}  # by id: a factory need not be hashable
    by_module: dict[str, set[Origin]] = {}
    for kind in ("methods", "models", "streams"):
        registry = regs.kind(kind)
        for spec_name, spec in registry.items.items():
            origin = registry.origins[spec_name]
            registered[id(spec.factory)] = origin
            by_module.setdefault(getattr(spec.factory, "__module__", ""), set()).add(origin)
    for cls in (obj if isinstance(obj, type) else type(obj)).__mro__:
        plugin = _plugin_of_module(cls.__module__, modules)
        if plugin is not None:
            return origin_of(regs, plugin)
        owners = by_module.get(cls.__module__, set())
        if id(cls) in registered or len(owners) == 1:
            return registered.get(id(cls)) or next(iter(owners))
    return None


def _short(path: str) -> str:
    for root in sorted(sys.path, key=len, reverse=True):
        if root and path.startswith(root.rstrip("/") + "/"):
            return path[len(root.rstrip("/")) + 1 :]
    return path


def compute_metrics(
    specs: Iterable[MetricSpec], inp: MetricInput, origins: Mapping[str, Origin] | None = None
) -> tuple[dict[str, float | None], dict[str, str]]:
    """Run every metric; one that raises or returns something other than a finite number or None is
    recorded as an error naming its plugin (value None), never as a number, and never stops the others.

    A metric that reads footprints is n/a (None) when no task has one: a method that moves no weight of the model
    (the soft-prompt methods) has nothing whose overlap or sparsity could be 0."""
    values: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    no_footprint = not any(inp.footprints or [])
    for spec in specs:
        if no_footprint and spec.needs in ("footprint", "lowrank"):
            values[spec.name] = None
            continue
        try:
            values[spec.name] = metric_value(spec.fn(inp))
        except Exception as exc:
            who = describe((origins or {}).get(spec.name))
            values[spec.name], errors[spec.name] = None, f"metric {spec.name!r}{who}: {type(exc).__name__}: {exc}"
    return values, errors
