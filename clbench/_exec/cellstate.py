"""What a cell has produced so far (its rows, footprints, timings, per-example scores) and its resume checkpoint."""

from __future__ import annotations

import concurrent.futures
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from clbench import footprints as fps
from clbench._core import provenance
from clbench._core.boundary import CheckedMethod, compute_metrics
from clbench._core.examples import Entry, encode_row
from clbench._core.registry import Registries
from clbench._exec.stats import TaskStats
from clbench._exec.step import cell_masters
from clbench.cell import CHECKPOINT_FILE, FOOTPRINT_FILE, Cell, CellResult
from clbench.data import Stream, atomic_write_with
from clbench.errors import CheckpointDiscardedWarning, PluginError
from clbench.method import Method
from clbench.metrics import MetricInput
from clbench.model import CLModel

if TYPE_CHECKING:
    from clbench._exec.session import CellSession


def tensor_bytes(state: Any) -> int:
    """The bytes of every tensor in a (nested) state_dict."""
    if isinstance(state, Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(tensor_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(tensor_bytes(v) for v in state)
    return 0


@torch.no_grad()
def fingerprint(tensor: Tensor) -> list[float]:
    """Three float64 reductions of a tensor (its sum, its norm, the sum of every 97th entry), accumulated without a
    float64 copy: any change training or a merge makes to a value changes them, short of an exact cancellation."""
    t = tensor.detach()
    if not t.is_floating_point():
        t = t.double()
    flat = t.reshape(-1)
    return [
        float(flat.sum(dtype=torch.float64)),
        float(torch.linalg.vector_norm(flat, dtype=torch.float64)),
        float(flat[::97].sum(dtype=torch.float64)),
    ]


def fingerprints(model: nn.Module) -> dict[str, list[float]]:
    return {name: fingerprint(t) for name, t in model.state_dict().items()}


class CellState:
    """What a cell has produced so far; checkpointed after every task."""

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.tasks: list[str] = []
        self.rows: list[list[float]] = []
        self.examples: list[list[Entry]] | None = []  # per-example scores of each row; None: a resume lost them
        self.initial: list[float] | None = None  # the untrained model's row (FWT's reference)
        self.initial_s = 0.0
        self.method_state_bytes: int | None = None  # what the method keeps after the last task (its state_dict)
        self.example_bytes: int | None = None  # one training example's input (clbench._exec.compute.ExampleCounter)
        self.footprints: list[fps.TaskFootprint] = []
        self.task_timings: list[TaskStats] = []
        self.report: dict[str, Any] = {}
        self.env: dict[str, Any] = {}
        self.status = "failed"
        self.error: str | None = "the cell did not start"
        self.divergence: dict[str, Any] | None = None  # where training blew up (status "diverged")
        self.scenario: str | None = None  # the stream's test-time scenario (Stream.scenario)
        self.stream: Stream | None = None  # for the data files it read (provenance)
        self.session: CellSession | None = None  # its lifecycle's outcomes: where it stopped, if it failed
        self.code: tuple[dict[str, str], dict[str, str]] | None = None  # provenance.code_record, set by the runner
        self.started = time.perf_counter()
        self.base: dict[str, list[float]] = {}  # fingerprints of a fresh build's state entries

    @property
    def path(self) -> Path:
        return self.cell.directory / CHECKPOINT_FILE

    def fail(self, status: str, error: str) -> None:
        self.status, self.error = status, error

    def save_checkpoint(self, model: CLModel, checked: CheckedMethod, whole: dict[str, Tensor] | None = None) -> None:
        """The cell's state after its last finished task; ``whole``: the model's state gathered whole from its shards
        (``train.shard=full``: :func:`clbench._exec.shard.full_state_dict`), else its own ``state_dict()``."""
        method = checked.method
        payload = {
            "config_hash": self.cell.config_hash,
            "code": self.trained_by(),
            "done": len(self.rows),
            "rows": self.rows,
            "examples": self.examples,
            "initial": self.initial,
            "timings": [t.to_json() for t in self.task_timings],
            "report": self.report,
            **self._changed_weights(model.state_dict() if whole is None else whole),
            "method": method.state_dict(),
            "footprints": fps.to_tensors(self.footprints),
            "masters": cell_masters(method.ctx).state_dict({id(p): n for n, p in model.named_parameters()}),
        }
        # not fsynced: a killed process keeps it (the page cache survives), and the rare checkpoint a machine
        # crash garbles is read as absent below: the cell starts over, it does not fail
        try:
            atomic_write_with(self.path, lambda tmp: torch.save(payload, tmp), durable=False)
        except OSError:
            raise
        except Exception as exc:  # pickling: an object in a state_dict that torch.save cannot write
            raise PluginError(
                f"{checked.label}: the resume checkpoint cannot hold its state_dict() ({type(exc).__name__}: "
                f"{exc}); return tensors, numbers, strings and lists or dicts of them"
            ) from exc

    def _changed_weights(self, weights: dict[str, Tensor]) -> dict[str, Any]:
        """The model's state entries (``weights``) that differ from a fresh build's (``self.base``), and under
        ``unchanged`` the fingerprints of the others, left out: a LoRA cell on a frozen 8B base checkpoints
        its adapters, not 16 GB of base weights it never moved."""
        changed, unchanged = {}, {}
        for name, tensor in weights.items():
            mark = fingerprint(tensor)
            if self.base.get(name) == mark:
                unchanged[name] = mark
            else:
                changed[name] = tensor
        return {"model": changed, "unchanged": unchanged}

    def _load_weights(self, model: CLModel, payload: dict[str, Any]) -> None:
        """The checkpoint's changed weights into ``model``; the ones it left out must be this build's own."""
        unchanged = payload.get("unchanged", {})
        missing, unexpected = model.load_state_dict(payload["model"], strict=not unchanged)
        moved = [n for n in unchanged if self.base.get(n) != unchanged[n]]
        if set(missing) != set(unchanged) or unexpected or moved:
            raise ValueError(
                f"its weights do not match this build (missing {sorted(set(missing) - set(unchanged))[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}, left out with other values {moved[:5]})"
            )

    def load_checkpoint(self, model: CLModel, method: Method) -> int:
        """Tasks done by the checkpoint (0: none or unusable, with a warning), or -1 when it was for this
        cell but did not load into it (missing keys, other shapes): the caller rebuilds model and method."""
        if not self.path.exists():
            return 0
        try:
            payload = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # truncated or garbled: torch raises RuntimeError, EOFError, UnpicklingError...
            warnings.warn(
                CheckpointDiscardedWarning(
                    f"{self.path}: unreadable checkpoint ({type(exc).__name__}); the cell starts over", "unreadable"
                ),
                stacklevel=2,
            )
            return 0
        recorded = payload.get("config_hash") if isinstance(payload, dict) else None
        if recorded != self.cell.config_hash:
            warnings.warn(
                CheckpointDiscardedWarning(
                    f"{self.path}: checkpoint of other settings (config hash {str(recorded)[:12]}, this cell "
                    f"{self.cell.config_hash[:12]}); the cell starts over",
                    "other-settings",
                ),
                stacklevel=2,
            )
            return 0
        code, now = payload.get("code"), self.trained_by()
        if code is not None and code != now:
            moved = sorted(k for k in set(code) | set(now) if code.get(k) != now.get(k))
            warnings.warn(
                CheckpointDiscardedWarning(
                    f"{self.path}: checkpoint made by other code ({', '.join(moved)}); the cell starts over",
                    "other-code",
                ),
                stacklevel=2,
            )
            return 0
        try:
            method.load_state_dict(payload["method"])  # first: it may rebuild structure the weights need
            self._load_weights(model, payload)
            cell_masters(method.ctx).load_state_dict(payload.get("masters", {}), dict(model.named_parameters()))
            self.rows = payload["rows"]
            self.examples = payload.get("examples")  # None from a checkpoint written before they were kept
            self.initial = payload.get("initial")
            self.task_timings = [TaskStats.from_json(t) for t in payload["timings"]]
            self.report = payload["report"]
            self.footprints = fps.from_tensors(payload["footprints"])
            done = int(payload["done"])
            if not 0 < done == len(self.rows) == len(self.footprints) < len(self.tasks) + 1:
                raise ValueError(
                    f"it records {done} tasks done, {len(self.rows)} rows, {len(self.footprints)} footprints"
                )
        except Exception as exc:
            first = " ".join(str(exc).split())[:400]  # torch lists the missing keys and shapes after a header
            warnings.warn(
                CheckpointDiscardedWarning(
                    f"{self.path}: checkpoint does not fit this cell ({type(exc).__name__}: {first}); the cell starts over",
                    "does-not-fit",
                ),
                stacklevel=2,
            )
            self.rows, self.task_timings, self.report, self.footprints = [], [], {}, []
            self.examples, self.initial = [], None
            return -1
        return done

    def result(self, regs: Registries, write: bool = True) -> CellResult:
        """The result so far; with ``write`` (the process that writes: rank 0) its metrics computed and its
        footprints saved, else the matrix and status only."""
        cell = self.cell
        T = len(self.tasks)
        matrix: list[list[float | None]] = [list(r) for r in self.rows]
        matrix += [[None] * T for _ in range(T - len(self.rows))]
        metrics: dict[str, float | None] = {}
        errors: dict[str, str] = {}
        footprints = None
        if self.status == "complete" and write:
            inp = MetricInput.with_settings(
                cell.metrics,
                matrix=[list(map(float, r)) for r in self.rows],
                initial=self.initial,
                scenario=self.scenario,
                footprints=self.footprints,
                report=self.report,
                tasks=self.tasks,
            )
            # the footprint file (serialized, hashed, written: ~11 ms for a 10-task dense cell, GIL mostly
            # released) is written beside the metrics (~25 ms of BLAS) rather than after them
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="clbench-footprints") as pool:
                saving = pool.submit(fps.save, self.footprints, cell.directory / FOOTPRINT_FILE)
                metrics, errors = compute_metrics(regs.metrics.values(), inp, regs.metrics.origins)
                try:
                    footprints = saving.result()
                except OSError as exc:  # a full disk: the numbers stay in result.json, the cell is not complete
                    self.fail("failed", f"cannot write {cell.directory / FOOTPRINT_FILE}: {exc.strerror or exc}")
        return CellResult(
            method=cell.method,
            stream=cell.stream,
            order=cell.order,
            seed=cell.seed,
            tasks=self.tasks or ["(not loaded)"],
            accuracy_matrix=matrix if self.tasks else [[None]],
            status=self.status,
            metrics=metrics,
            config=cell.resolved(),
            env=self.env,
            timings={
                "total_s": time.perf_counter() - self.started,
                "initial_eval_s": self.initial_s,
                "tasks": [t.to_json() for t in self.task_timings],
            },
            report=self.report,
            error=None if self.status == "complete" else self.error,
            config_hash=cell.config_hash,
            metric_errors=errors,
            footprints=footprints,
            scenario=self.scenario,
            divergence=self.divergence if self.status == "diverged" else None,
            provenance=self.provenance(regs) if write else None,
            examples=self.examples if self.examples and len(self.examples) == len(self.rows) else None,
            initial_row=cast("list[float | None] | None", self.initial),  # floats only
            compute=self.compute(),
        )

    def record(self, row: list[float], per_example: list[Tensor | None], stats: TaskStats) -> None:
        """A finished task's accuracy row, per-example scores and timings."""
        self.rows.append(row)
        if self.examples is not None:
            self.examples.append(encode_row(per_example))
        self.task_timings.append(stats)

    def finish(self, method: Method) -> None:
        """The last task is done: what the method keeps, and the cell is complete."""
        self.method_state_bytes = tensor_bytes(method.state_dict())
        self.status = "complete"

    def evaluate_untrained(self, row: Callable[[], list[float]]) -> None:
        """Record the untrained model's row (``row()``) and what it took."""
        t0 = time.perf_counter()
        self.initial = row()
        self.initial_s = time.perf_counter() - t0

    def compute(self) -> dict[str, Any] | None:
        """What the cell cost beyond its timings: the method's state after the last task, the most parameters a
        phase trained (None before a task finished), and one training example's bytes where they were seen."""
        trainable = [p.trainable for t in self.task_timings for p in t.phases]
        if self.method_state_bytes is None and not trainable:
            return None
        out = {"method_state_bytes": self.method_state_bytes, "trainable_parameters": max(trainable, default=None)}
        if self.example_bytes is not None:
            out["example_bytes"] = self.example_bytes
        return out

    def trained_by(self) -> dict[str, str]:
        """The code digests of the method, model and stream (not the metrics: they run after the last task): what
        a checkpoint must have been written by to be resumed."""
        return {k: v for k, v in (self.code[0] if self.code else {}).items() if not k.startswith("metric:")}

    def provenance(self, regs: Registries) -> dict[str, Any] | None:
        """What made this result beyond its settings (:mod:`clbench._core.provenance`); None before the stream loaded."""
        if self.code is None:
            return None
        code, versions = self.code
        read = provenance.stream_files(self.stream, self.stream.opened) if self.stream is not None else []
        return {
            "versions": versions,
            "code": code,
            "data": provenance.data_digests(read, self.cell, regs.streams.get(self.cell.stream).data_dir_field),
        }
