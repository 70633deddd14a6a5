"""The settings of a method, model or stream, read from its config dataclass: what ``clbench list settings``
prints, as rows another tool (a docs generator) can reuse.

A row holds the setting's ``--set`` key, its type as annotated, its default, the range declared with
:func:`clbench.config.bounded`, its preset values per profile key, and the comment that documents it in the
source: the trailing ``# ...`` of the field's line and the full-line comments directly above it (read with
:mod:`tokenize`, so a ``#`` inside a string is never taken for one).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clbench.errors import ClbenchError, UnknownNameError

KINDS = ("method", "model", "stream")
_RANGE_TEXT = {"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}"}  # as clbench.config words them
_PRAGMAS = ("noqa", "type:", "pragma:", "fmt:", "pyright:", "mypy:")


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
    ``quick/split-digits``, ``quick/split-digits/1``) to the value set there, in the plugin's order.
    """

    name: str
    key: str
    type: str = ""
    default: Any = REQUIRED
    range: str = ""
    presets: Mapping[str, Any] = field(default_factory=dict)
    comment: str = ""
    in_config: bool = True


# --------------------------------------------------------------------------- comments in the source
def field_comments(cls: type) -> dict[str, str]:
    """Field name → the comments documenting it in the source of ``cls`` (and of its dataclass bases, a
    subclass's own comment winning). Full-line comments directly above the field come first (a blank line
    or another statement ends the block), then the comments on the field's own line(s). Empty when the
    source cannot be read (a class made in a REPL or with :func:`dataclasses.make_dataclass`)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is not object and dataclasses.is_dataclass(klass):
            out.update(_class_comments(klass))
    return out


def _class_comments(klass: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return {}
    found: dict[str, str] = {}
    depth = 0  # 1: the class body
    above: list[tuple[int, str]] = []  # (column, text) of the full-line comments since a blank line or statement
    in_statement = False
    name: str | None = None  # the field whose statement this is
    column = 0
    own: list[str] = []  # comments inside the field's statement
    for i, tok in enumerate(tokens):
        kind = tok.type
        if kind == tokenize.INDENT:
            depth += 1
        elif kind == tokenize.DEDENT:
            depth -= 1
        elif kind == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if text.startswith(_PRAGMAS) or not text:
                continue
            if in_statement:
                own.append(text)
            else:
                above.append((tok.start[1], text))
        elif kind == tokenize.NL:
            if not in_statement and not tok.line.strip():
                above = []  # a blank line: the comments above belong to nothing below
        elif kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if name is not None:
                found[name] = " ".join([t for col, t in above if col == column] + own)
            in_statement, name, own, above = False, None, [], []
        elif not in_statement:
            in_statement = True
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if depth == 1 and kind == tokenize.NAME and nxt is not None and nxt.type == tokenize.OP and nxt.string == ":":
                name, column = tok.string, tok.start[1]  # `name: type [= default]`, an annotated field
    return found


# --------------------------------------------------------------------------- rows of a config dataclass
def config_settings(cls: type, scope: str = "") -> list[Setting]:
    """One row per field of the dataclass ``cls``, without presets; ``scope`` prefixes the ``--set`` key."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    comments = field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        public = f.name.rstrip("_")
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        bounds = f.metadata.get("range") or {}
        rows.append(Setting(
            name=public,
            key=f"{scope}.{public}" if scope else public,
            type=type_text(f.type),
            default=default,
            range=" and ".join(_RANGE_TEXT[k].format(v) for k, v in bounds.items() if k in _RANGE_TEXT),
            comment=comments.get(f.name, ""),
        ))
    return rows


def type_text(tp: Any) -> str:
    """A field's type as its author wrote it (``tuple[int, ...]``, ``bool | None``)."""
    if isinstance(tp, str):
        return tp
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _field_for(key: str, names: Iterable[str]) -> str | None:
    """The field a preset key addresses, as :func:`clbench.config.apply` matches it (``lambda`` → ``lambda_``)."""
    names = set(names)
    for candidate in (key, key + "_", key.replace("-", "_"), key.replace("-", "_") + "_"):
        if candidate in names:
            return candidate
    return None


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
    fields_by_public = {f.name: f.name.rstrip("_") for f in dataclasses.fields(spec.config_cls)}
    presets: dict[str, dict[str, Any]] = {r.name: {} for r in rows}
    extra: dict[str, dict[str, Any]] = {}
    for label, key, value in _preset_entries(regs, kind, name, spec):
        own = key if kind == "method" and "." not in key else None
        if kind in ("stream", "model") and key.startswith(kind + "."):
            own = key.split(".", 1)[1]
        target = _field_for(own, fields_by_public) if own is not None else None
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
