"""What ``clbench list`` prints — every registered name with its description and origin, and what each plugin offers —
without importing a plugin when nothing installed has changed.

Building the registries imports every plugin (and with them torch: seconds of CPU) for what is a few hundred names.
The listing of one build is kept in the cache folder (:func:`clbench.files.cache_dir`, ``listing/``), under a key
that changes whenever something that could change it does: clbench's version, each entry point of the ``clbench``
group (name, module, its distribution's metadata file), the plugins disabled by ``-p no:NAME``, and the size and
modification time of every ``*.py`` file of clbench and of each entry point's top-level package. The next ``clbench
list`` with the same key prints the cached listing (lm-eval indexes its task files instead of importing them, to the
same end). A build that warned (a plugin that failed to import) is not kept, so its warning shows every time.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clbench._core.registry import Origin, Registries
    from clbench.specs import OptionSpec

KINDS = ("methods", "models", "streams", "metrics", "profiles", "executors")
FORMAT = 2  # the cached file's layout: a new one makes every older file a miss


@dataclass(frozen=True)
class Entry:
    name: str
    description: str  # with what another plugin adds to it: a profile's paper numbers, a method's memory
    origin: str  # "plugin lota, clbench 0.1.0"


@dataclass(frozen=True)
class Listing:
    """Per kind its entries, and per plugin (name, distribution, what it offers)."""

    kinds: dict[str, list[Entry]]
    plugins: list[tuple[str, str, str]]
    # the options plugins add to `clbench run` (OptionSpec), for its help screen: each type by its click name
    options: list[OptionSpec] | None = None

    @classmethod
    def of(cls, regs: Registries) -> Listing:
        from clbench._core.boundary import origin_of

        kinds = {}
        for kind in KINDS:
            reg = regs.kind(kind)
            entries = []
            for name in reg:
                spec = reg.get(name)
                desc = getattr(spec, "description", "")
                if kind == "profiles" and name in regs.targets:  # a paper's numbers another plugin gives
                    desc += f"; the paper's numbers from {where(regs.targets.origins[name])}"
                memory = getattr(spec, "memory", None)
                if kind == "methods" and memory is not None:  # what train.memory sets
                    desc += f"; memory: {name}.{memory.setting}" + (" a task" if memory.per == "task" else "")
                if kind == "methods" and getattr(spec, "shardable", False):  # what train.shard=full allows
                    desc += "; runs sharded"
                entries.append(Entry(name, desc, where(reg.origins[name])))
            kinds[kind] = entries
        plugins = []
        for plugin in regs.pm.get_plugins():
            origin = origin_of(regs, plugin)
            offers = [
                f"{k} {', '.join(n for n in regs.kind(k) if regs.kind(k).origins[n].plugin == origin.plugin)}"
                for k in (*KINDS, "options", "targets", "memory", "sharding", "test_sets", "stream_forms")
            ]
            offers = [o for o in offers if not o.endswith(" ")]
            hooks = sorted(
                h.name.removeprefix("clbench_")
                for h in regs.pm.get_hookcallers(plugin) or ()
                if not h.name.startswith("clbench_add_")
            )
            if hooks:
                offers.append(f"observes {', '.join(hooks)}")
            plugins.append((origin.plugin, origin.distribution, "; ".join(offers) or "nothing"))
        return cls(kinds, sorted(plugins), list(regs.options.values()))

    def to_json(self) -> dict[str, Any]:
        import click

        kinds = {k: [asdict(e) for e in v] for k, v in self.kinds.items()}
        options = [
            {
                **{f: getattr(o, f) for f in ("name", "help", "default", "is_flag", "executor")},
                "type": None if o.is_flag else click.types.convert_type(o.type).name,
            }
            for o in self.options or ()
        ]
        return {"format": FORMAT, "kinds": kinds, "plugins": [list(p) for p in self.plugins], "options": options}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Listing:
        from clbench.specs import OptionSpec

        return cls(
            {k: [Entry(**e) for e in v] for k, v in data["kinds"].items()},
            [(str(a), str(b), str(c)) for a, b, c in data["plugins"]],
            [OptionSpec(**{**o, "type": None if o["is_flag"] else _shown(o["type"])}) for o in data["options"]],
        )


def _shown(name: str) -> Any:
    """A click type that only names itself: an option read back from a listing is shown (``clbench run --help``),
    never parsed (a run builds the registries, and with them the plugin's own type)."""
    import click

    return type("Shown", (click.ParamType,), {"name": name})()


def where(origin: Origin) -> str:
    """``plugin lota, clbench 0.1.0``: the name ``-p no:NAME`` takes and the distribution that installed it."""
    return f"plugin {origin.plugin}, {origin.distribution}"


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def key(disabled: Sequence[str]) -> str:
    """What a cached listing is valid for (the module docstring says what goes into it)."""
    parts: list[str] = [f"format {FORMAT}", f"disabled {sorted(disabled)}"]
    folders = {Path(__file__).resolve().parent.parent}  # clbench itself
    for ep in sorted(importlib.metadata.entry_points(group="clbench"), key=lambda e: (e.name, e.value)):
        # the distribution's metadata file as read, not its parsed name and version: `Distribution.name`/`.version`
        # parse the file with the email parser each time (~4 ms; the built-ins' ~50 entry points would take 0.4 s)
        meta = (ep.dist.read_text("METADATA") or ep.dist.read_text("PKG-INFO")) if ep.dist is not None else None
        parts.append(f"{ep.name}={ep.value} {hashlib.sha256((meta or '?').encode()).hexdigest()[:16]}")
        spec = importlib.util.find_spec(ep.value.split(":")[0].split(".")[0])  # the top-level package: not run
        if spec is not None and spec.submodule_search_locations:
            folders.update(Path(p).resolve() for p in spec.submodule_search_locations)
        elif spec is not None and spec.origin:  # a plugin that is one module
            parts.append(_stamp(Path(spec.origin)))
    for folder in sorted(folders):
        parts += [_stamp(p) for p in sorted(folder.rglob("*.py"))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _file(disabled: Sequence[str]) -> Path:
    from clbench.files import cache_dir

    return cache_dir() / "listing" / f"{key(disabled)}.json"


def load(disabled: Sequence[str]) -> Listing | None:
    """The listing cached for what is installed now; None when there is none (or it cannot be read)."""
    try:
        data = json.loads(_file(disabled).read_text(encoding="utf-8"))
        return Listing.from_json(data) if data.get("format") == FORMAT else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(listing: Listing, disabled: Sequence[str]) -> None:
    """Keep ``listing`` for the next ``clbench list``; a cache that cannot be written is skipped silently (the
    listing is only slower next time)."""
    from clbench.files import atomic_write_text

    try:
        path = _file(disabled)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(listing.to_json()))
    except OSError:
        pass
