"""What clbench prints while it runs, kept readable: one line per warning, through the progress bar's writer.

Third-party libraries warn from inside every step or cell (a masked-tensor warning with its source line, a
Hugging Face deprecation): printed as Python does, each is several lines that break the ``\\r`` progress bar,
and repeated per cell a log line grows to kilobytes. Here each distinct warning prints once per process, as
``warning: <message>``, through ``tqdm.write`` (which redraws the bar below it). ``--debug`` keeps Python's
own format.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO


def quiet_third_party_bars() -> None:
    """Hugging Face's download and "Loading weights" bars off unless the user set ``HF_HUB_DISABLE_PROGRESS_BARS``
    (transformers reads it when imported): they would draw over clbench's own."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


_cell: list[str] = []  # the key of the cell this process runs now (in_cell), which a warning then names


@contextlib.contextmanager
def in_cell(key: str) -> Iterator[None]:
    """Warnings printed inside the block name the cell ``key`` (unless their message already does): with several
    worker processes, a line no longer leaves the reader to guess which cell it came from."""
    _cell.append(key)
    try:
        yield
    finally:
        _cell.pop()


def one_line_warnings() -> None:
    """Every warning from now on as one line, each distinct message once (see the module's docstring)."""
    seen: set[str] = set()

    def show(
        message: Any, category: Any, filename: str, lineno: int, file: TextIO | None = None, line: str | None = None
    ) -> None:
        where = f"{_cell[-1]}: " if _cell and _cell[-1] not in str(message) else ""
        text = " ".join(f"warning: {where}{message}".split())
        if text in seen:
            return
        seen.add(text)
        from tqdm.auto import tqdm

        tqdm.write(text, file=file or sys.stderr)

    warnings.showwarning = show
