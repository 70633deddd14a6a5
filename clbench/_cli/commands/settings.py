"""The settings of a method, model or stream, read from its config dataclass: what ``clbench list settings``
prints, as rows another tool (a docs generator) can reuse.

A row holds the setting's ``--set`` key, its type as annotated, its default, the range declared with
:func:`clbench.config.bounded`, its preset values per profile key, and the help text that documents it: the
field's ``help`` metadata, given with ``bounded(..., help=...)`` or :func:`clbench.config.setting`. The name
``--set`` takes is :func:`clbench.config.public_name` of the field's (``lambda_`` → ``lambda``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clbench.config import field_for, public_name
from clbench.errors import ClbenchError, UnknownNameError

KINDS = ("method", "model", "stream")
_RANGE_TEXT = {"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}"}  # as clbench.config words them


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # the default of a field that has none


@dataclass(frozen=True)
class Setting:
    """One setting of a plugin, or one key its presets set outside its config dataclass.

    ``name`` is what ``--set SCOPE.NAME`` takes (``lambda``, not the field's ``lambda_``); ``key`` is the full
    ``--set`` key (``ewc.lambda``, ``model.hidden``, ``stream.tasks``). For a preset key outside the config
    dataclass (``train.lr``, ``orders``, ``model``) ``in_config`` is false and ``name`` and ``key`` are that key.
    ``default`` is :data:`REQUIRED` for a field without one (and for a key outside the dataclass). ``range`` reads as ``clbench.config``'s
    errors do (``>= 0 and <= 1``), empty when none is declared. ``presets`` maps a profile key (``quick``,
    ``quick/split-digits``, ``quick/split-digits/1``) to the value set there, in the plugin's order. ``help``
    is the field's ``help`` metadata (empty when it has none).
    """

    name: str
    key: str
    type: str = ""
    default: Any = REQUIRED
    range: str = ""
    presets: Mapping[str, Any] = field(default_factory=dict)
    help: str = ""
    in_config: bool = True


# --------------------------------------------------------------------------- rows of a config dataclass
def config_settings(cls: type, scope: str = "") -> list[Setting]:
    """One row per field of the dataclass ``cls``, without presets; ``scope`` prefixes the ``--set`` key.

    A field's help is its ``help`` metadata; :func:`dataclasses.fields` gives a subclass's own field object for a
    field it declares again, so a subclass's help (or its lack of one) wins over its base's."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        public = public_name(f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        bounds = f.metadata.get("range") or {}
        rows.append(
            Setting(
                name=public,
                key=f"{scope}.{public}" if scope else public,
                type=type_text(f.type),
                default=default,
                range=" and ".join(_RANGE_TEXT[k].format(v) for k, v in bounds.items() if k in _RANGE_TEXT),
                help=f.metadata.get("help", ""),
            )
        )
    return rows


def type_text(tp: Any) -> str:
    """A field's type as its author wrote it (``tuple[int, ...]``, ``bool | None``)."""
    if isinstance(tp, str):
        return tp
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


# --------------------------------------------------------------------------- a registered plugin's settings
def find(regs: Any, name: str, kind: str | None = None) -> tuple[str, Any]:
    """``(kind, spec)`` of the method, model or stream called ``name``; an unknown name gets a "did you
    mean", and a name that is both (a model and a stream, say) asks for ``kind``."""
    kinds = [kind] if kind else list(KINDS)
    for k in kinds:
        if k not in KINDS:
            raise UnknownNameError("kind", k, list(KINDS))
    hits = [k for k in kinds if name in regs.kind(k + "s")]
    if len(hits) > 1:
        raise ClbenchError(f"{name!r} is a {' and a '.join(hits)}: add --kind {'|'.join(hits)}")
    if not hits:
        known = sorted({n for k in kinds for n in regs.kind(k + "s")})
        what = kinds[0] if len(kinds) == 1 else "method, model or stream"
        raise UnknownNameError(what, name, known, plural=None if len(kinds) == 1 else "methods, models and streams")
    return hits[0], regs.kind(hits[0] + "s").get(name)


def settings(regs: Any, name: str, kind: str | None = None) -> list[Setting]:
    """The settings of a registered method, model or stream with their preset values, then the keys its
    presets set outside its config dataclass (``train.lr``, ``model.multi_head``, ``orders``).

    Presets come from the spec's ``presets`` (keys ``profile``, ``profile/stream``, ``profile/stream/order``):
    a method's own settings are its unscoped keys, a stream's are its ``stream.*`` keys. A model has no
    presets of its own; its settings are preset by the ``model.*`` keys of the streams whose preset
    names it (``"model": "mlp"``), shown under ``profile/stream[/order]``.
    """
    kind, spec = find(regs, name, kind)
    scope = name if kind == "method" else kind
    rows = config_settings(spec.config_cls, scope)
    fields_by_public = {f.name: public_name(f.name) for f in dataclasses.fields(spec.config_cls)}
    presets: dict[str, dict[str, Any]] = {r.name: {} for r in rows}
    extra: dict[str, dict[str, Any]] = {}
    for label, key, value in _preset_entries(regs, kind, name, spec):
        own = key if kind == "method" and "." not in key else None
        if kind in ("stream", "model") and key.startswith(kind + "."):
            own = key.split(".", 1)[1]
        target = field_for(own, fields_by_public) if own is not None else None
        if target is not None:
            presets[fields_by_public[target]][label] = value
        else:
            extra.setdefault(key, {})[label] = value
    out = [dataclasses.replace(r, presets=presets[r.name]) for r in rows]
    return out + [Setting(name=key, key=key, presets=values, in_config=False) for key, values in extra.items()]


def _preset_entries(regs: Any, kind: str, name: str, spec: Any) -> Iterable[tuple[str, str, Any]]:
    """``(profile key, preset key, value)`` for every value the presets give this plugin."""
    if kind != "model":
        for label, values in spec.presets.items():
            for key, value in values.items():
                yield str(label), str(key), value
        return
    for stream in regs.streams.values():
        for label, values in stream.presets.items():
            parts = str(label).split("/")
            merged: dict[str, Any] = {}
            for i in range(1, len(parts) + 1):
                merged.update(stream.presets.get("/".join(parts[:i]), {}))
            if merged.get("model") != name:
                continue
            where = label if len(parts) > 1 else f"{label}/{stream.name}"
            for key, value in values.items():
                if str(key).startswith("model."):
                    yield where, str(key), value
