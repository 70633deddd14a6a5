"""The three built-in loggers behind ``--logger``: one object per cell, opened at ``clbench_cell_start``.

Each x axis is the optimizer step counted across the cell (``clbench_step``'s ``step``; the task rows and
metrics at the step their task or cell ended), so steps, accuracies and metrics share one axis and a
resumed cell goes on where its checkpoint left it.
"""

from __future__ import annotations

import csv
import itertools
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CSV_FILE = "log.csv"
EPOCH_LOSS = "loss/epoch"  # an epoch's mean loss (task loss and the method's terms), logged at the step it ended
_FILE_IDS = itertools.count()  # event files opened by this process (their names' last part, as TensorBoard's)
TB_DIR = "tb"
WANDB_DIR = "wandb"


StepRow = tuple[str, int, str, int, int, dict[str, float]]  # task, index, phase, epoch, step, values


class Logger:
    """What a built-in logger does with each hook; :meth:`close` runs whether the cell ended or not.

    Logged steps are kept in memory and handed to :meth:`write_steps` at the end of each task (before its
    accuracy row, so a file stays in step order), and files are flushed (:meth:`flush`) only once
    ``WRITE_EVERY_S`` have passed since the last flush — then kept steps are written mid-task too — and at
    :meth:`close` (TensorBoard itself flushes every 120 s). Writing and flushing as events came cost
    ~0.9 ms a logged step (an event, a queue put and a wake-up of TensorBoard's writer thread, which then
    takes the GIL from the training loop) and a TensorBoard flush ~3.7 ms a task: 10 % of the quick MLP's
    time at ``log_every=10`` (benchmarks/bench_overhead.py). A killed process loses what it had not
    flushed of its unfinished task, which its resume drops anyway (it restarts that task).
    """

    WRITE_EVERY_S = 30.0

    def __init__(self, cell: Any, resumed_from: int) -> None:
        self.cell = cell
        self.resumed_from = resumed_from
        self.last_step = 0
        self.kept: list[StepRow] = []
        self.flushed = time.monotonic()

    def step(self, task: str, index: int, phase: str, epoch: int, step: int, values: dict[str, float]) -> None:
        self.last_step = step
        self.kept.append((task, index, phase, epoch, step, values))
        if self.due():
            self.write_kept()
            self.flush_now()

    def due(self) -> bool:
        return time.monotonic() - self.flushed >= self.WRITE_EVERY_S

    def write_kept(self) -> None:
        if self.kept:
            self.write_steps(self.kept)
            self.kept = []

    def flush_now(self) -> None:
        self.flush()
        self.flushed = time.monotonic()

    def write_steps(self, rows: list[StepRow]) -> None:
        """Write logged steps, in step order."""

    def flush(self) -> None:
        """Push what was written to the file."""

    def task_end(self, task: str, index: int, row: list[float], tasks: list[str], step: int,
                 epochs: Iterable[dict[str, Any]] = ()) -> None:
        """Writes the task's kept steps and its loss curve (``loss/epoch`` per epoch, logged whatever
        ``train.log_every`` says), merged in step order; subclasses write the task's row after this, then call
        :meth:`task_written`."""
        curve = [(task, index, e["phase"], e["epoch"], e["step"], {EPOCH_LOSS: float(e["loss"])}) for e in epochs]
        self.kept = sorted([*self.kept, *curve], key=lambda r: r[4])  # stable: a step row before its epoch's row
        self.write_kept()
        self.last_step = step

    def task_written(self) -> None:
        if self.due():
            self.flush_now()

    def cell_end(self, result: Any) -> None:
        pass

    def close(self) -> None:
        self.write_kept()


def task_values(index: int, row: list[float], tasks: list[str]) -> dict[str, float]:
    """``accuracy/<task>`` for every task of the order, and ``accuracy/seen``: the mean over tasks 0..index."""
    out = {f"accuracy/{t}": float(v) for t, v in zip(tasks, row, strict=True)}
    out["accuracy/seen"] = sum(row[: index + 1]) / (index + 1)
    return out


def metric_values(result: Any) -> dict[str, float]:
    return {f"metric/{k}": float(v) for k, v in sorted(result.metrics.items()) if v is not None}


# ------------------------------------------------------------------------------------------------ csv
class CsvLogger(Logger):
    """``<cell>/log.csv``, one row per event: ``kind`` is ``step`` (a logged step), ``epoch`` (an epoch's mean loss,
    ``loss/epoch``), ``task`` (a task's accuracy row) or ``cell`` (status and metrics). Columns: kind, index, task,
    phase, epoch, step, then each value in the order first seen (loss/epoch, loss, loss/task, loss/<term>, lr,
    grad_norm, accuracy/<task>..., metric/<name>...);
    a row leaves the columns it has no value for empty. Floats are written exactly (Python's repr)."""

    FIXED = ["kind", "index", "task", "phase", "epoch", "step", "status"]

    def __init__(self, cell: Any, resumed_from: int) -> None:
        super().__init__(cell, resumed_from)
        self.path = Path(cell.directory) / CSV_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rows: list[list[str]] = []
        columns: list[str] = []
        if resumed_from and self.path.exists():  # keep what the tasks before the resume logged
            columns, old = self._read()
            rows = [r for r in old if r.get("kind") in ("step", "epoch", "task") and _index(r) < resumed_from]
        self.columns = self.FIXED + [c for c in columns if c not in self.FIXED]
        self.fh: Any = None
        self._rewrite([[r.get(c) or "" for c in self.columns] for r in rows])

    def _read(self) -> tuple[list[str], list[dict[str, str]]]:
        with self.path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            return list(reader.fieldnames or []), list(reader)

    def _rewrite(self, rows: Iterable[list[str]]) -> None:
        """The file with the current columns and ``rows`` (in their order), then open for appending."""
        if self.fh is not None:
            self.fh.close()
        tmp = self.path.with_name(f".{CSV_FILE}.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(self.columns)
            writer.writerows(rows)
        os.replace(tmp, self.path)
        self.fh = self.path.open("a", newline="", encoding="utf-8")
        self.writer = csv.writer(self.fh)
        self.known = set(self.columns)

    def _write(self, row: dict[str, Any]) -> None:
        new = [k for k in row if k not in self.known]
        if new:  # a value first seen (a loss term that starts on task 2, the task rows, the metrics): widen the file
            # as plain rows padded with empty fields (the C reader and writer): DictReader and DictWriter took
            # ~15 µs a row, and the cell's row widens a file that holds every logged step
            self.fh.close()
            self.fh = None
            with self.path.open(newline="", encoding="utf-8") as fh:
                old = list(csv.reader(fh))[1:]
            pad = [""] * len(new)
            self.columns += new
            self._rewrite(r + pad for r in old)
        self.writer.writerow([row.get(c, "") for c in self.columns])

    def write_steps(self, rows: list[StepRow]) -> None:
        for task, index, phase, epoch, step, values in rows:
            self._write({"kind": "epoch" if EPOCH_LOSS in values else "step", "index": index, "task": task, "phase": phase, "epoch": epoch, "step": step,
                         **values})

    def task_end(self, task: str, index: int, row: list[float], tasks: list[str], step: int,
                 epochs: Iterable[dict[str, Any]] = ()) -> None:
        super().task_end(task, index, row, tasks, step, epochs)
        self._write({"kind": "task", "index": index, "task": task, "step": step, **task_values(index, row, tasks)})
        self.task_written()

    def flush(self) -> None:
        self.fh.flush()

    def cell_end(self, result: Any) -> None:
        self._write({"kind": "cell", "step": self.last_step, "status": result.status, **metric_values(result)})

    def close(self) -> None:
        if self.fh is not None:
            super().close()
            self.fh.close()
            self.fh = None


def _index(row: dict[str, str]) -> int:
    try:
        return int(row.get("index") or -1)
    except ValueError:
        return -1


# ---------------------------------------------------------------------------------------- tensorboard
class TensorboardLogger(Logger):
    """Event files under ``<cell>/tb/`` (``tensorboard --logdir runs/``): scalars ``loss``, ``loss/task``,
    ``loss/<term>``, ``lr``, ``grad_norm`` per logged step, ``accuracy/<task>`` and ``accuracy/seen`` per task,
    ``metric/<name>`` per cell, all against the cell's optimizer step.

    Written with TensorBoard's own record format and protos (``RecordWriter``, ``Event``, ``Summary``), in this
    thread: ``SummaryWriter`` hands every event to a writer thread through a queue, ~44 µs an event of which
    the protos are 5 µs, and wakes that thread to take the GIL from training. One event holds a step's values
    (as ``add_scalar`` writes each: ``simple_value``, the same tags). A resumed cell's file starts with
    ``SessionLog.START`` at its first step, what ``SummaryWriter(purge_step=...)`` writes: TensorBoard drops
    the earlier attempt's events from that step on.
    """

    def __init__(self, cell: Any, resumed_from: int) -> None:
        super().__init__(cell, resumed_from)
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._session_log, self._summary = event_pb2.Event, event_pb2.SessionLog, summary_pb2.Summary
        self._record_writer = RecordWriter
        self.dir = Path(cell.directory) / TB_DIR
        if not resumed_from:  # a fresh cell: the event files of an earlier attempt would draw beside ours
            for old in self.dir.glob("events.out.tfevents.*"):
                old.unlink(missing_ok=True)
        self.fh: Any = None
        self.writer: Any = None

    def _write(self, step: int, **fields: Any) -> None:
        if self.writer is None:  # opened at the first event: a resumed cell purges from there on
            self.dir.mkdir(parents=True, exist_ok=True)
            now = time.time()
            name = f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}"
            self.fh = (self.dir / name).open("xb")  # never another attempt's file (a resume within the second)
            self.writer = self._record_writer(self.fh)
            self.writer.write(self._event(wall_time=now, file_version="brain.Event:2").SerializeToString())
            if self.resumed_from:
                start = self._session_log(status=self._session_log.START)
                self.writer.write(self._event(wall_time=now, step=step, session_log=start).SerializeToString())
        self.writer.write(self._event(wall_time=time.time(), step=step, **fields).SerializeToString())

    def _scalars(self, values: dict[str, float], step: int) -> None:
        Summary = self._summary
        self._write(step, summary=Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values.items()]))

    def write_steps(self, rows: list[StepRow]) -> None:
        for *_, step, values in rows:
            self._scalars(values, step)

    def task_end(self, task: str, index: int, row: list[float], tasks: list[str], step: int,
                 epochs: Iterable[dict[str, Any]] = ()) -> None:
        super().task_end(task, index, row, tasks, step, epochs)
        self._scalars(task_values(index, row, tasks), step)
        self.task_written()

    def flush(self) -> None:
        if self.fh is not None:
            self.fh.flush()

    def cell_end(self, result: Any) -> None:
        self._scalars(metric_values(result), self.last_step)

    def close(self) -> None:
        super().close()
        if self.fh is not None:
            self.fh.close()
            self.fh = self.writer = None


# ---------------------------------------------------------------------------------------------- wandb
class WandbLogger(Logger):
    """One W&B run per cell attempt, named by the cell's key, grouped by stream/method, its config the cell's
    resolved settings; files under ``<cell>/wandb/``. Project: ``$WANDB_PROJECT`` (default ``clbench``);
    ``WANDB_MODE=offline`` logs without an account (``wandb sync`` uploads later)."""

    def __init__(self, cell: Any, resumed_from: int) -> None:
        super().__init__(cell, resumed_from)
        try:
            import wandb
        except ImportError:
            raise RuntimeError("--logger wandb needs the wandb package: pip install 'clbench[wandb]'") from None
        directory = Path(cell.directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "clbench"), dir=str(directory), name=cell.key,
                              group=f"{cell.stream}/{cell.method}", job_type=cell.profile, reinit="create_new",
                              config={**cell.resolved(), "config_hash": cell.config_hash,
                                      "resumed_from": resumed_from})

    def write_steps(self, rows: list[StepRow]) -> None:
        for *_, step, values in rows:
            self.run.log(values, step=step)

    def task_end(self, task: str, index: int, row: list[float], tasks: list[str], step: int,
                 epochs: Iterable[dict[str, Any]] = ()) -> None:
        super().task_end(task, index, row, tasks, step, epochs)
        self.run.log(task_values(index, row, tasks), step=step)

    def cell_end(self, result: Any) -> None:
        self.run.summary.update({**metric_values(result), "status": result.status})

    def close(self) -> None:
        if self.run is not None:
            super().close()
            self.run.finish()
            self.run = None


LOGGERS: dict[str, type[Logger]] = {"csv": CsvLogger, "tensorboard": TensorboardLogger, "wandb": WandbLogger}
