"""Errors a user can cause and fix. The CLI prints their message (no traceback) and exits 2."""

from __future__ import annotations

import difflib


class ClbenchError(Exception):
    """A user-facing error: the message says what is wrong and where."""

    exit_code = 2


class UnknownNameError(ClbenchError):
    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" — did you mean {match[0]!r}?" if match else ""
        listing = ", ".join(known) if known else "(none registered)"
        super().__init__(f"unknown {kind} {name!r}{hint} Known {kind}s: {listing}")
        self.kind, self.name, self.known = kind, name, known


class PluginError(ClbenchError):
    """A plugin failed to import, is malformed, or returned the wrong thing."""


class ConfigError(ClbenchError):
    """A setting is unknown, of the wrong type, or out of range."""


class DataError(ClbenchError):
    """A data file is missing or malformed; the message names the file and the record."""


class ResultFileError(ClbenchError):
    """A result file is corrupt, foreign, or from an unsupported schema version."""


class Diverged(RuntimeError):
    """The training loss became NaN or infinite; the cell is recorded as ``diverged``."""
