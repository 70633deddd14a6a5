"""Errors a user can cause and fix. The CLI prints their message (no traceback) and exits 2. Beside them, the
warnings a caller may want to tell apart from others by their class."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


class ClbenchError(Exception):
    """A user-facing error: the message says what is wrong and where."""

    exit_code = 2


def did_you_mean(name: str, options: Iterable[str]) -> str | None:
    """The closest of ``options`` to ``name`` (difflib, ratio ≥ 0.6), or None."""
    match = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return match[0] if match else None


def plural_of(noun: str) -> str:
    """``method`` → ``methods``, ``registry`` → ``registries``: the plural of a one-word kind."""
    if noun.endswith("y") and noun[-2:-1] not in ("", *"aeiou"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


class UnknownNameError(ClbenchError):
    """``unknown order '9' of stream 'split-digits' — did you mean ...? Known orders: 1, 2, 3``.

    ``kind`` is one noun (``method``, ``order``); ``of`` names what the kind belongs to (``stream 'x'``);
    ``plural`` overrides the plural :func:`plural_of` forms.
    """

    def __init__(
        self, kind: str, name: str, known: list[str], *, of: str = "", plural: str | None = None, hint: str = ""
    ) -> None:
        match = did_you_mean(name, known)
        hint = hint or (f" — did you mean {match!r}?" if match else "")
        listing = ", ".join(known) if known else "(none registered)"
        owner = f" of {of}" if of else ""
        super().__init__(f"unknown {kind} {name!r}{owner}{hint} Known {plural or plural_of(kind)}: {listing}")
        self.kind, self.name, self.known, self.of = kind, name, known, of


class PluginError(ClbenchError):
    """A plugin failed to import, is malformed, or returned the wrong thing."""


class ConfigError(ClbenchError):
    """A setting is unknown, of the wrong type, or out of range."""


class DataError(ClbenchError):
    """A data file is missing or malformed; the message names the file and the record."""


class HubUnreachable(ClbenchError):
    """A hub name that can be neither fetched nor found in the local cache (clbench.hub): a fault of the machine,
    not of a cell, so it stops the run (every later cell would meet it); finished cells stay."""


class ResultFileError(ClbenchError):
    """A result file is corrupt, foreign, or from an unsupported schema version."""


class Diverged(RuntimeError):
    """The training loss became NaN or infinite, or blew up (``train.diverge_factor``); the cell is recorded as
    ``diverged``, with ``where`` (task, its index, phase, epoch, optimizer step of the cell, the loss and the
    reference it was compared with) as the result's ``divergence``."""

    def __init__(self, message: str, where: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.where = dict(where or {})


class PluginSkippedWarning(UserWarning):
    """An installed plugin failed to import and was skipped: commands that do not need it go on; a name it would
    have registered is then unknown, and that error names the plugin too."""


class CheckpointDiscardedWarning(UserWarning):
    """A cell's resume checkpoint was not used, and the cell starts over (right numbers, lost time). ``reason`` says
    why: ``unreadable`` (``torch.load(weights_only=True)`` failed), ``other-settings`` (another config hash),
    ``other-code`` (written by other code of the method, model or stream) or ``does-not-fit`` (the method's or
    model's state did not load into this cell's). The message names the checkpoint file and says the same in words.
    """

    REASONS = ("unreadable", "other-settings", "other-code", "does-not-fit")

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason
