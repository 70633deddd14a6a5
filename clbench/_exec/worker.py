"""The one way a process that runs cells starts: a ``--jobs`` worker, a data-parallel rank, a Ray task.

Each rebuilds the parent's registries (the same ``-p no:`` list, plus plugins named ``module:name`` that were
registered in the parent only), prints warnings on one line, keeps tqdm off multiprocessing locks and, when it
has a parent to follow, leaves Ctrl-C to it and ends at its death.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch and the registries load in bootstrap, after the process follows its parent
    from clbench._exec.runner import Runner
    from clbench.distributed import Dist


def load_plugin(spec: str) -> object:
    """The plugin ``module:name`` names (a class is instantiated): how a plugin registered in the parent process
    only (a test's) reaches the ranks, which otherwise load the installed entry points alone."""
    module, _, name = spec.partition(":")
    obj = getattr(importlib.import_module(module), name)
    return obj() if isinstance(obj, type) else obj


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with(parent: int) -> None:
    """End this process at its parent's death (a SIGKILL gives the parent no chance to stop it): an orphan would
    go on with its cell while the rerun of the same command starts that cell again. On Linux the kernel kills it
    at once (``PR_SET_PDEATHSIG``); a thread that looks for the parent every second covers other systems, and a
    loaded machine, where the thread could wait seconds for its turn (5 processes on 2 cores)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    threading.Thread(target=_poll_parent, args=(parent,), daemon=True).start()


def _poll_parent(parent: int) -> None:
    while os.getppid() == parent:  # (also when the parent died before the kernel was asked to watch it)
        time.sleep(1.0)
    os._exit(1)


def _stop(signum: int, frame: Any) -> None:
    """How the parent ends us (``Pool.terminate`` sends SIGTERM): unwind as an exit, so that a file being written
    is finished or its temp file deleted (:func:`clbench.data.atomic_write_with`) — SIGTERM's default, death where
    the process stands, left temp files beside the results. SystemExit, not KeyboardInterrupt: multiprocessing
    prints a traceback for the latter, and a cell's handlers let both through. Not for ranks: one blocked in a
    collective with a dead peer would run the handler only when the collective times out, and the parent
    waits for it; the orphan temp files of a terminated rank go at the next run (``remove_orphan_temp_files``)."""
    raise SystemExit(128 + signum)


def bootstrap(
    disabled: Sequence[str],
    fail_fast: bool,
    plugins: Sequence[str] = (),
    parent: int | None = None,
    join: Callable[[], Dist] | None = None,
) -> Runner:
    """This process's :class:`~clbench._exec.runner.Runner`, the process set up to run cells (see the module). ``parent``:
    follow that process (Ctrl-C is its to handle); ``join``: joins the process group, once the process is set up
    and before the registries load (a rank)."""
    if parent is not None:  # first: the imports below take seconds, tens of them on a loaded machine
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent ends us
        exit_with(parent)
    from tqdm.auto import tqdm

    from clbench._core import console
    from clbench._exec.local import harness_registry
    from clbench._exec.runner import Runner
    from clbench.distributed import SINGLE

    # tqdm's default lock is a multiprocessing lock, a named semaphore of the parent's resource tracker; a process
    # terminated on Ctrl-C could not release it ("leaked semaphore" at exit). No bar is drawn here.
    tqdm.set_lock(threading.RLock())
    console.one_line_warnings()  # (a spawned process starts with Python's own: several lines a warning)
    dist = join() if join is not None else SINGLE
    regs = harness_registry(disabled=tuple(disabled), extra_plugins=[load_plugin(spec) for spec in plugins])
    freeze_loaded()
    return Runner(regs, fail_fast=fail_fast, progress=False, dist=dist)


def freeze_loaded() -> None:
    """Move every object alive now (libraries, plugins, registries) out of the cyclic collector's reach, so that
    collecting after each cell (:func:`clbench._exec.runner.release`) scans only what cells made. For processes that
    run cells: an object frozen here that later becomes cyclic garbage is never freed."""
    gc.collect()
    gc.freeze()


_runner: Runner | None = None
_started: Any = None  # where run() says which cell this process starts: (pid, cell key)


def start(disabled: Sequence[str], fail_fast: bool, parent: int | None = None, started: Any = None) -> None:
    """A ``--jobs`` worker process's initializer (:class:`clbench._exec.local.LocalExecutor`): set up, following
    ``parent``, the pid of the process that started the pool (default: this process's parent now). Given, a worker
    whose start-up (seconds of imports on a loaded machine) outlived that process ends instead of following init.
    ``started``: a queue that gets (pid, cell key) as each cell starts, so that the pool's owner knows which cell
    a worker that dies (the out-of-memory killer) took with it."""
    global _runner, _started
    signal.signal(signal.SIGTERM, _stop)
    _started = started
    _runner = bootstrap(disabled, fail_fast, parent=os.getppid() if parent is None else parent)


def run(cell: Any) -> Any:
    """Run one cell in a ``--jobs`` worker process set up by :func:`start`."""
    assert _runner is not None
    if _started is not None:
        _started.put((os.getpid(), cell.key))
    return _runner.run(cell)
