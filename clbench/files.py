"""Files a stream reads and clbench writes: paths kept inside a data folder, JSON/JSONL records and text read with
their errors named, atomic writes, the plugins' cache folder, and the paths a stream opened while it loaded (their
digests are a result's data record: :mod:`clbench._core.provenance`). :mod:`clbench.data` re-exports the public
names."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from clbench.errors import DataError


def cache_dir() -> Path:
    """Where plugins keep what they build once (converted checkpoints, hub-built data): ``$CLBENCH_CACHE``,
    default ``~/.cache/clbench``."""
    return Path(os.environ.get("CLBENCH_CACHE", Path.home() / ".cache" / "clbench"))


def confined(root: Path | str, *parts: str) -> Path:
    """``root/parts...``, refusing a path that leaves ``root`` (``..``, absolute parts, symlinks out).

    Stream loaders build every file path with it, so a task name or config entry cannot make clbench
    read outside the data directory the user gave.
    """
    base = Path(root).expanduser().resolve()
    path = base.joinpath(*parts).resolve()
    if path != base and base not in path.parents:
        raise DataError(f"{Path(root).joinpath(*parts)} resolves to {path}, outside the data directory {base}")
    return path


def read_text(path: Path) -> str:
    """The UTF-8 text of a data file, exactly as stored (no newline translation); a missing, unreadable or
    non-UTF-8 file is a :class:`DataError` naming the file (and the offending byte)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path} is missing") from None
    except OSError as exc:  # a folder where a file should be, no permission ...
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}, "
            f"line {line}); save it as UTF-8"
        ) from None


def read_records(path: Path) -> list[Any]:
    """The records of a ``.jsonl`` (one JSON value a line, blank lines skipped) or ``.json`` (a list) file;
    a missing, non-UTF-8 or malformed file is a :class:`DataError` naming the file and the line.

    Build ``path`` with :func:`confined`: this function reads whatever it is given."""
    text = read_text(path)
    if path.suffix == ".jsonl":
        out = []
        # JSON Lines ends lines with \n (or \r\n) only: str.splitlines() would also cut at U+2028, U+0085 ...,
        # which JSON allows unescaped inside strings (json.dumps(..., ensure_ascii=False) writes them)
        for i, line in enumerate(text.split("\n")):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}: line {i + 1} is not JSON ({exc.msg})") from None
        return out
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- atomic writes
TMP_SUFFIX = ".tmp"


def atomic_write_with(path: Path, write: Callable[[Path], object], durable: bool = True) -> None:
    """Call ``write(tmp)`` on a temp file beside ``path`` then move it into place. ``durable`` also fsyncs
    it first, so it survives a machine crash, not only a killed process (≈5 ms a file here). The temp file is
    named before it is made, so an interrupt at any point after (even between its creation and the next line)
    deletes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    made = path.with_name(f".{path.name}.{secrets.token_hex(6)}{TMP_SUFFIX}")
    tmp: Path | None = made  # what to delete on an error: None once the name turns out to be another's
    try:
        try:
            # the mode a plain ``open`` gives (0o666 less the umask, which the kernel applies). Not
            # ``tempfile.mkstemp``: it makes 0o600, and setting the mode after needs the umask, which can only be
            # read by changing it for the whole process — a race with a thread that creates a file meanwhile (a
            # cell writes its footprint file in a worker thread)
            os.close(os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:  # another writer's (a 48-bit name): not ours to delete
            tmp = None
            raise FileExistsError(f"{made}: a temporary file of this name exists already") from None
        write(made)
        if durable:
            with open(made, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(made, path)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_with(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# --------------------------------------------------------------------------- files a stream reads (clbench._core.provenance
# records their digests as the cell's data)
_local = threading.local()


_hook_installed = False


_hook_lock = threading.Lock()


def _importing() -> bool:
    """Whether this thread is running an import: what a module reads as it loads (a library imported lazily by a
    stream's loader reads /proc/stat, time zones, its own resources) is code's, not the stream's data."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _on_audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "open":
        return
    opened = getattr(_local, "opened", None)
    if opened is None:
        return
    path, mode = args[0], args[1] if len(args) > 1 else None
    if (
        isinstance(path, (str, bytes))
        and (mode is None or not any(c in str(mode) for c in "wax+"))
        and not _importing()
    ):
        opened.add(os.fsdecode(path))


@contextlib.contextmanager
def reading() -> Iterator[set[str]]:
    """The paths this thread opens for reading inside the block (files only; other threads are not seen)."""
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:  # an audit hook cannot be removed: one, installed on first use, checks a flag
            sys.addaudithook(_on_audit)
            _hook_installed = True
    outer = getattr(_local, "opened", None)
    opened: set[str] = set()
    _local.opened = opened
    try:
        yield opened
    finally:
        _local.opened = outer
        if outer is not None:
            outer.update(opened)


_seen: dict[str, set[str]] = {}  # owner (a stream's package) -> every data file its loads opened in this process


def owner(stream: object) -> str:
    """The package a stream's class lives in (``clbench_plugins.digits``): streams of one package may share what
    their plugin caches in the process."""
    base = getattr(stream, "form_of", None)  # a form of another stream (clbench.data.stream_form) reads its data
    if base is not None:
        return owner(base)
    module = type(stream).__module__
    return module.rpartition(".")[0] or module


def remember(stream: object, opened: set[str]) -> None:
    """Note the files a stream's factory or loader opened, for :func:`clbench._core.provenance.stream_files` of a later stream of its
    package that finds the data cached (called wherever a stream is built or loads a task, plan time too)."""
    _seen.setdefault(owner(stream), set()).update(opened)


def seen_by_package(stream: object) -> set[str]:
    """Every path the streams of ``stream``'s package opened in this process (:func:`remember`)."""
    return _seen.get(owner(stream), set())
