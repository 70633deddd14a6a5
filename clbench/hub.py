"""The Hugging Face Hub, reached or not, decided once per process and in seconds.

Offline, ``datasets`` and ``transformers`` retry a hub name for tens of seconds per load (25 s for
``ylecun/mnist``, 51 s for a MiniLM), once per cell, and then say only that they could not reach it. A plugin calls
:func:`require` before it loads a hub name: when the hub does not answer a TCP connection within :data:`TIMEOUT_S`
(or ``HF_HUB_OFFLINE`` is set), the libraries are switched to offline mode (what is in the local cache loads,
without retrying), and a name that is not in the cache raises :class:`~clbench.errors.HubUnreachable`, naming the
local alternative (``--data-dir``, ``--model-path``). The runner lets it stop the run: one line, not one failed
cell each. Planning never asks the hub (a paper profile can be planned, and dry-run, offline).
"""

from __future__ import annotations

import os
import socket
import time
import urllib.parse
from pathlib import Path

from clbench.errors import HubUnreachable

TIMEOUT_S = 3.0
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
_reached: tuple[bool, str] | None = None  # (reachable, why not), once per process


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def reachable() -> tuple[bool, str]:
    """Whether the hub answers, and why not; asked once per process (at most :data:`TIMEOUT_S`)."""
    global _reached
    if _reached is None:
        if _truthy("HF_HUB_OFFLINE"):
            _reached = (False, "HF_HUB_OFFLINE is set")
        else:
            host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
            start = time.perf_counter()
            try:
                socket.create_connection((host or "huggingface.co", 443), timeout=TIMEOUT_S).close()
                _reached = (True, "")
            except OSError as exc:
                _reached = (
                    False,
                    f"{host} did not answer in {time.perf_counter() - start:.1f} s: {exc.strerror or exc}",
                )
        if not _reached[0]:
            for name in _OFFLINE_VARS:  # the libraries read these when imported: no retries, the cache only
                os.environ[name] = "1"
            _set_imported_offline()
    return _reached


def _set_imported_offline() -> None:
    """``huggingface_hub`` reads ``HF_HUB_OFFLINE`` once, when imported: tell a copy already imported too."""
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]


def _cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return home / "hub"


def cached(repo_id: str, repo_type: str = "model") -> bool:
    """Whether a hub repository has a copy in the local hub cache (what offline mode can load)."""
    return (_cache_dir() / f"{repo_type}s--{repo_id.replace('/', '--')}").is_dir()


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` that is not a local path: what the libraries would fetch from the hub."""
    return bool(name) and "/" in name and not Path(name).expanduser().exists() and not name.startswith((".", "/", "~"))


def require(repo_id: str, what: str, alternative: str, repo_type: str = "model") -> None:
    """Refuse, in seconds and once, a hub name that can be neither fetched nor found in the local cache."""
    ok, why = reachable()
    if ok or cached(repo_id, repo_type):
        return
    raise HubUnreachable(
        f"{what} {repo_id!r}: on the Hugging Face Hub, which cannot be reached ({why}), and not in "
        f"the local cache ({_cache_dir()}); {alternative}"
    )
