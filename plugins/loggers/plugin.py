"""Built-in loggers: ``clbench run --logger csv,tensorboard,wandb``.

Plain observers on the lifecycle hooks, with no path of their own in the runner: whatever they log, a
third-party observer plugin gets through the same hooks.

* per epoch, always: its mean loss, ``loss/epoch`` (``clbench_task_end``'s ``epochs``), at the step it ended;
* per logged step (``--set train.log_every=N``; 0, the default, logs no step): ``clbench_step``'s
  ``loss``, ``loss/task``, ``loss/<term>``, ``lr`` and ``grad_norm``;
* per task: ``clbench_task_end``'s accuracy row, one value per task of the order (``accuracy/<task>``);
* per cell: the metrics of ``clbench_cell_end``'s result (``metric/<name>``) and its status.

Where each writes, under the cell's folder: ``csv`` → ``log.csv``, ``tensorboard`` → ``tb/`` (event files),
``wandb`` → ``wandb/`` (one W&B run per cell and attempt; ``WANDB_MODE=offline`` keeps it local;
``pip install 'clbench[wandb]'``). A fresh cell starts its logs over; a resumed cell keeps what its
finished tasks logged and drops what the interrupted task had begun (csv: its rows; tensorboard: the
steps from the first one logged again, TensorBoard's ``purge_step``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import click

from clbench import hookimpl
from clbench.errors import ConfigError
from clbench.specs import OptionSpec

from .backends import LOGGERS, Logger

OPTION = "logger"


def parse(value: Any) -> list[str]:
    """``"csv, tensorboard"`` → ``["csv", "tensorboard"]``; an unknown name is a :class:`ConfigError`
    naming the known ones."""
    if value is None or value == "":
        return []
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    names = list(dict.fromkeys(str(v).strip().lower() for v in items if str(v).strip()))
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(f"--logger: unknown logger {', '.join(map(repr, unknown))}; known: {', '.join(LOGGERS)}")
    return names


class LoggerList(click.ParamType):
    """``--logger a,b``: checked when the command line is parsed (a usage error, exit 2)."""

    name = "LOGGER[,LOGGER...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            names = parse(value)
        except ConfigError as exc:
            self.fail(str(exc).removeprefix("--logger: "), param, ctx)
        for name in ("tensorboard", "wandb"):  # optional packages (extras of their own): named before a cell runs
            if name in names and importlib.util.find_spec(name) is None:
                self.fail(f"the {name} logger needs the {name} package: pip install 'clbench[{name}]'", param, ctx)
        return ",".join(names) or None


@hookimpl
def clbench_add_options() -> list[OptionSpec]:
    return [OptionSpec(OPTION, f"Log to {', '.join(LOGGERS)} (a comma list), under each cell's folder: per task "
                               "the accuracy row, per cell the metrics, and per step the losses, lr and gradient "
                               "norm with --set train.log_every=N", type=LoggerList())]


# Open loggers per cell, keyed by (out, cell key): cells may share a process (the local executor runs them
# one after the other) but never a folder.
_open: dict[tuple[str, str], list[Logger]] = {}


def _key(cell: Any) -> tuple[str, str]:
    return str(cell.out), cell.key


def _selected(options: Mapping[str, Any]) -> list[str]:
    return parse(options.get(OPTION)) if options else []


@hookimpl
def clbench_cell_start(cell: Any, resumed_from: int) -> None:
    _close(_key(cell))  # an attempt of this cell interrupted in this process (a simulated kill)
    names = _selected(cell.options)
    if names:
        loggers: list[Logger] = []
        _open[_key(cell)] = loggers
        for name in names:  # one by one: a logger that fails to open leaves the others to be closed
            loggers.append(LOGGERS[name](cell, resumed_from))


@hookimpl
def clbench_step(cell: Any, task: str, index: int, phase: str, epoch: int, step: int,
                 values: dict[str, float]) -> None:
    for logger in _open.get(_key(cell), ()):
        logger.step(task, index, phase, epoch, step, values)


@hookimpl
def clbench_task_end(cell: Any, task: str, index: int, accuracy_row: list[float], tasks: list[str],
                     step: int, epochs: list[dict[str, Any]]) -> None:
    for logger in _open.get(_key(cell), ()):
        logger.task_end(task, index, accuracy_row, tasks, step, epochs)


@hookimpl
def clbench_cell_end(cell: Any, result: Any) -> None:
    loggers = _open.pop(_key(cell), [])
    try:
        for logger in loggers:
            logger.cell_end(result)
    finally:
        for logger in loggers:
            logger.close()


def _close(key: tuple[str, str]) -> None:
    for logger in _open.pop(key, []):
        logger.close()
