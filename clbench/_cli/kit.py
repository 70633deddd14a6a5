"""What a plugin author needs to test a plugin against the contract, in one import.

In a plugin's ``conftest.py``::

    pytest_plugins = ["clbench.testing"]

then use the fixtures ``clbench_registry`` (a fresh registry: installed plugins + the tiny test
plugin below) and ``run_cell`` (run one cell on a tiny stream in a temp directory), or call a check
directly. Each runs the plugin through the real runner and fails with an AssertionError that says
what the plugin must fix:

* :func:`check_method` — a two-task cell: status, matrix, finite metrics, the footprint kind the
  MethodSpec declares, and a cell killed after its first task resumes (not restarts) to the same numbers;
* :func:`check_stream` — tasks, orders, every task's splits and labels, deterministic loading, one cell;
* :func:`check_metric` — valid spec, recorded in result.json, reproduced by ``clbench metrics``,
  deterministic, true to its declared ``needs``;
* :func:`check_model` — a CLModel whose weights train, whose ``predict`` gives label indices in range
  and whose ``state_dict`` round trips, and a complete cell.

The tiny streams are synthetic on purpose: they test plumbing, never accuracy claims.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, get_args

import pytest
import torch
from torch import Tensor, nn

from clbench import config as cfg
from clbench import footprints as fps
from clbench._core.boundary import describe, metric_value
from clbench._core.plan import RunRequest, make_plan  # TEST_PROFILE: plugins key test presets to it
from clbench._core.registry import Registries
from clbench._core.results import read_result
from clbench._exec.executors import execute
from clbench._exec.local import harness_registry
from clbench._exec.runner import build_method, build_model, build_stream, method_label
from clbench._exec.step import train_task
from clbench._tools import verify
from clbench.cell import (
    CHECKPOINT_FILE,
    ERROR_LOG,
    FOOTPRINT_FILE,
    RESULT_FILE,
    TEST_PROFILE,  # TEST_PROFILE: plugins key test presets to it
    Cell,
    CellResult,
)
from clbench.data import Batch, Split, Stream, TaskData, TaskInfo
from clbench.errors import ClbenchError
from clbench.hookspecs import hookimpl
from clbench.method import CellContext, Method, derive_seed, seed_torch
from clbench.metrics import MetricInput
from clbench.model import CLModel, StreamInfo
from clbench.specs import (
    EmptyConfig,
    FootprintKind,
    MethodSpec,
    MetricSpec,
    ModelSpec,
    ProfileSpec,
    StreamSpec,
)

_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")


# --------------------------------------------------------------------------- tiny streams
class TinyVectorStream(Stream):
    """Two (or more) tasks of 2-class Gaussian blobs in 8 dimensions; each task has its own means."""

    def __init__(self, config: Any = None, tasks: int = 2, n: int = 64) -> None:
        names = [f"t{i}" for i in range(tasks)]
        super().__init__("tiny-vector", [TaskInfo(t, ("a", "b")) for t in names],
                         {"1": names, "2": names[::-1]}, modality="vector", input_shape=(8,), multi_head=True)
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        g = torch.Generator().manual_seed(1000 + int(info.name[1:]))
        means = torch.randn(2, 8, generator=g) * 2

        def split(n: int) -> Split:
            y = torch.arange(n) % 2
            return Split(means[y] + torch.randn(n, 8, generator=g), y)

        return TaskData(info, split(self.n), split(self.n // 2), split(self.n // 4))


class TinyClassIncrementalStream(TinyVectorStream):
    """tiny-vector as a class-incremental stream: task t0 holds classes a, b and t1 c, d; one head over the four."""

    def __init__(self, config: Any = None, n: int = 64) -> None:
        labels = ("a", "b", "c", "d")
        Stream.__init__(self, "tiny-cil", [TaskInfo("t0", labels, classes=("a", "b")),
                                           TaskInfo("t1", labels, classes=("c", "d"))],
                        {"1": ["t0", "t1"], "2": ["t1", "t0"]}, modality="vector", input_shape=(8,), multi_head=False,
                        scenario="class-incremental")
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        data = super().load(info)
        first = 2 * int(info.name[1:])  # t0: a, b (0, 1); t1: c, d (2, 3)
        return TaskData(info, *(Split(s.x, s.y + first) for s in (data.train, data.test, data.val)))


class TinyTextStream(Stream):
    """Two tasks over short word strings: the label is which of two marker words the text contains."""

    def __init__(self, config: Any = None, tasks: int = 2, n: int = 32) -> None:
        names = [f"w{i}" for i in range(tasks)]
        super().__init__("tiny-text", [TaskInfo(t, (_WORDS[2 * i], _WORDS[2 * i + 1]), group="TC")
                                       for i, t in enumerate(names)],
                         {"1": names, "2": names[::-1]}, modality="text", multi_head=False)
        self.n = n

    def load(self, info: TaskInfo) -> TaskData:
        g = torch.Generator().manual_seed(2000 + int(info.name[1:]))

        def split(n: int) -> Split:
            y = torch.randint(0, 2, (n,), generator=g)
            fillers = torch.randint(0, len(_WORDS), (n, 3), generator=g).tolist()
            texts = [" ".join([_WORDS[f] for f in fill] + [info.labels[int(c)]]) for fill, c in zip(fillers, y, strict=True)]
            return Split(texts, y)

        return TaskData(info, split(self.n), split(self.n // 2), split(self.n // 4))


class TinyTextModel(CLModel):
    """A bag-of-words text model with attention-like ``q``/``v`` Linear layers for LoRA plumbing tests.

    Logits are the similarity of the pooled text feature with each label word's feature, as the
    ``encoder`` plugin does with a real sentence encoder. It provides ``lora_targets``.
    """

    def __init__(self, info: StreamInfo, dim: int = 16) -> None:
        super().__init__()
        self.info = info
        self.vocab = {w: i for i, w in enumerate(_WORDS)}
        self.embed = nn.EmbeddingBag(len(_WORDS) + 1, dim, mode="mean")
        self.blocks = nn.ModuleList(nn.ModuleDict({"q": nn.Linear(dim, dim), "v": nn.Linear(dim, dim)})
                                    for _ in range(2))
        self.lora_targets = [f"blocks.{i}.{n}" for i in range(2) for n in ("q", "v")]
        for p in self.parameters():
            p.requires_grad_(False)

    def _encode(self, texts: list[str]) -> Tensor:
        ids = [[self.vocab.get(w, len(_WORDS)) for w in t.split()] or [len(_WORDS)] for t in texts]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        device = self.embed.weight.device
        h = self.embed(torch.tensor([j for i in ids for j in i], device=device), offsets.to(device))
        for block in self.blocks:
            h = h + torch.tanh(block["v"](h) * torch.sigmoid(block["q"](h)))
        return h

    def forward(self, x: list[str], task: str) -> Tensor:
        labels = list(self.info.tasks[[t.name for t in self.info.tasks].index(task)].labels)
        if self.training:
            self.tokens_seen += sum(len(s.split()) for s in x)
        return 4.0 * nn.functional.normalize(self._encode(x), dim=-1) @ nn.functional.normalize(
            self._encode(labels), dim=-1).T


@dataclass(frozen=True)
class TinyTextConfig:
    dim: int = 16
    multi_head: bool | None = None


class TinyPlugin:
    """Registers the tiny streams, the tiny text model and the ``test`` profile."""

    @hookimpl
    def clbench_add_streams(self) -> list[StreamSpec]:
        preset = {"orders": ["1"], "train.epochs": 2, "train.batch_size": 16, "train.lr": 0.05}
        return [
            StreamSpec("tiny-vector", TinyVectorStream, EmptyConfig, "synthetic 2-task blobs (tests only)",
                       presets={TEST_PROFILE: {**preset, "model": "mlp", "model.hidden": [16]}}),
            StreamSpec("tiny-text", TinyTextStream, EmptyConfig, "synthetic 2-task word strings (tests only)",
                       presets={TEST_PROFILE: {**preset, "model": "tiny-text"}}),
            StreamSpec("tiny-cil", TinyClassIncrementalStream, EmptyConfig,
                       "synthetic 2-task blobs, class-incremental (tests only)",
                       presets={TEST_PROFILE: {**preset, "model": "mlp", "model.hidden": [16]}}),
        ]

    @hookimpl
    def clbench_add_models(self) -> list[ModelSpec]:
        return [ModelSpec("tiny-text", lambda cfg, info: TinyTextModel(info, cfg.dim), TinyTextConfig,
                          "bag-of-words model with q/v layers (tests only)", modalities=frozenset({"text"}),
                          provides=frozenset({"lora"}))]

    @hookimpl
    def clbench_add_profiles(self) -> list[ProfileSpec]:
        # a checkpoint after every task: the resume checks kill a cell after its first task
        return [ProfileSpec(TEST_PROFILE, "tiny synthetic streams for plugin tests", seeds=(0,),
                            streams=("tiny-vector", "tiny-text"), sets={"train.checkpoint_every_s": 0})]


# --------------------------------------------------------------------------- helpers
def registry(*plugins: object, autoload: bool = True, disabled: Iterable[str] = ()) -> Registries:
    """A fresh registry: installed plugins (unless ``autoload=False``), the tiny plugin, and ``plugins``."""
    return harness_registry(disabled=disabled, extra_plugins=(TinyPlugin(), *plugins), autoload=autoload)


def run(regs: Registries, out: Path, methods: str, stream: str = "tiny-vector", profile: str = TEST_PROFILE,
        sets: dict[str, list[Any]] | None = None, seeds: Iterable[int] = (0,), orders: Iterable[str] | None = None,
        fail_fast: bool = False, model: str | None = None, options: Mapping[str, Any] | None = None,
        nproc: int | None = None) -> list[CellResult]:
    """Plan and run a grid in-process, without progress bars (``model``: as ``clbench run --model``;
    ``options``: the run options plugins add, as ``{"logger": "csv"}`` for ``--logger csv``; ``nproc``: as
    ``--nproc``, each cell on that many rank processes, which load the tiny plugin too)."""
    req = _request(out, methods, stream, profile, sets, seeds, orders, model, options)
    run_options = dict(req.options)
    if nproc is not None:
        run_options.update(nproc=nproc, rank_plugins=[f"{__name__}:{TinyPlugin.__name__}"])
    return execute(make_plan(regs, req), regs, fail_fast=fail_fast, progress=False, options=run_options)


def _request(out: Path, methods: str, stream: str, profile: str = TEST_PROFILE,
             sets: dict[str, list[Any]] | None = None, seeds: Iterable[int] = (0,),
             orders: Iterable[str] | None = None, model: str | None = None,
             options: Mapping[str, Any] | None = None) -> RunRequest:
    return RunRequest(profile=profile, methods=methods, streams=[stream], seeds=list(seeds),
                      orders=list(orders) if orders else None, sets=sets or {}, out=out, model=model,
                      options=dict(options or {}))


def fitting_stream(regs: Registries, method: str) -> str | None:
    """The tiny stream whose test-profile model meets ``method``'s requirements and scenarios."""
    spec = regs.methods.get(method)
    for stream, model in (("tiny-vector", "mlp"), ("tiny-cil", "mlp"), ("tiny-text", "tiny-text")):
        if model not in regs.models or stream not in regs.streams:
            continue
        m = regs.models.get(model)
        built = regs.streams.get(stream).factory(None)
        if spec.requires <= m.provides and built.modality in m.modalities and (
                not spec.scenarios or built.scenario in spec.scenarios):
            return stream
    return None


def _fail(message: str) -> NoReturn:
    """A contract failure: the message says what the plugin author must fix (no assertion rewriting noise)."""
    raise AssertionError(message)


def _require(condition: object, message: str) -> None:
    if not condition:
        _fail(message)


def _who(regs: Registries, kind: str, name: str) -> str:
    """``stream 'x' (plugin 'y', dist 1.0)``: how the kit names the plugin under test in its messages."""
    return f"{kind} {name!r}{describe(regs.kind(kind + 's').origins.get(name))}"


def _complete(result: CellResult, what: str) -> None:
    _require(result.status == "complete", f"{what} did not complete: status {result.status!r}: {result.error}"
             + (f" (traceback in {result.path.parent / ERROR_LOG})" if result.path is not None else ""))


def _check_matrix(result: CellResult, tasks: list[str], what: str) -> None:
    """T×T accuracy matrix of finite scores in [0, 100], tasks in run order."""
    T = len(tasks)
    _require(list(result.tasks) == list(tasks), f"{what}: the result records tasks {result.tasks}, expected {tasks}")
    matrix = result.accuracy_matrix
    _require(len(matrix) == T and all(len(row) == T for row in matrix),
             f"{what}: the accuracy matrix is {len(matrix)}×{[len(r) for r in matrix]}, expected {T}×{T}")
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            _require(v is not None and math.isfinite(v) and 0.0 <= v <= 100.0,
                     f"{what}: score a[{i}][{j}] (task {tasks[j]!r} after training {tasks[i]!r}) is {v!r}, "
                     "expected a number in [0, 100] (Stream.score / Stream.evaluate return percent)")


# --------------------------------------------------------------------------- check_method
_FOOTPRINT_CLASSES: dict[str, type] = {"lowrank": fps.LowRank, "masked": fps.Masked, "dense": fps.Dense}


def check_method(regs: Registries, method: str, tmp: Path, check_resume: bool = True) -> CellResult:
    """Run ``method`` on a two-task tiny stream and check the result contract; returns the result.

    Checks: the cell completes; the matrix is 2×2 of scores in [0, 100]; metrics are finite or None;
    every task's footprint, read back from ``footprints.safetensors``, is of the kind the MethodSpec
    declares (``lowrank``: LowRank, ``masked``: Masked, ``dense``: Dense, ``none``: empty); and
    (``check_resume``) a cell killed after its first task resumes from the checkpoint (``state_dict`` /
    ``load_state_dict`` round trip) and ends with the same matrix, metrics and footprints.
    """
    stream = fitting_stream(regs, method)
    if stream is None:
        pytest.skip(f"no tiny test model meets the requirements of {method!r}")
    what = f"{_who(regs, 'method', method)} on {stream!r}"
    [result] = run(regs, tmp / "a", method, stream, fail_fast=True)
    _complete(result, what)
    assert result.path is not None
    try:  # the runner does not validate what it writes: the method's report() and metrics land in the file
        read_result(result.path)
    except ClbenchError as exc:
        _fail(f"{what}: its result.json does not validate: {exc}")
    T = len(result.tasks)
    _require(T == 2, f"{what}: {T} tasks recorded, expected the tiny stream's 2")
    _check_matrix(result, list(result.tasks), what)
    if "AA" in result.metrics:
        _require(result.metrics["AA"] == pytest.approx(sum(result.accuracy_matrix[-1]) / T),
                 f"{what}: AA {result.metrics['AA']} is not the mean of the last row {result.accuracy_matrix[-1]}")
    for name, value in result.metrics.items():
        _require(value is None or math.isfinite(value), f"{what}: metric {name!r} is {value!r}")
    _check_footprint_kind(regs, method, result, what)
    if check_resume:
        _check_resume(regs, method, stream, tmp / "b", result)
    return result


def _check_footprint_kind(regs: Registries, method: str, result: CellResult, what: str) -> None:
    """Every task's footprint, as stored, is of the kind ``MethodSpec.footprint_kind`` declares."""
    kind = regs.methods.get(method).footprint_kind
    _require(kind in get_args(FootprintKind),
             f"{what}: MethodSpec.footprint_kind={kind!r} is not one of {list(get_args(FootprintKind))}")
    assert result.path is not None
    path = result.path.parent / FOOTPRINT_FILE
    _require(path.exists(), f"{what}: no {FOOTPRINT_FILE} beside {result.path}")
    saved = fps.load(path, result.footprints)
    _require(len(saved) == len(result.tasks),
             f"{what}: {path.name} holds {len(saved)} task footprints for {len(result.tasks)} tasks")
    for index, (task, footprint) in enumerate(zip(result.tasks, saved, strict=True)):
        if kind == "none":
            _require(not footprint, f"{what}: declares footprint_kind='none' but footprint() of task {task!r} "
                     f"(index {index}) returned footprints of {sorted(footprint)[:3]}: return {{}} "
                     "from footprint(), or declare the kind it returns in its MethodSpec")
            continue
        want = _FOOTPRINT_CLASSES[kind]
        for name, fp in footprint.items():
            _require(isinstance(fp, want),
                     f"{what}: declares footprint_kind={kind!r} but footprint() of task {task!r} (index {index}) "
                     f"returned {type(fp).__name__} for {name!r}: return clbench.footprints.{want.__name__} "
                     f"values, or declare footprint_kind={getattr(fp, 'kind', '?')!r} in its MethodSpec (footprint "
                     "metrics such as OO read only the kind a method declares)")
    if kind != "none":
        _require(any(saved), f"{what}: declares footprint_kind={kind!r} but footprint() returned {{}} for every "
                 "task: record what each task changed, or declare footprint_kind='none'")


class _ResumeWatcher:
    """Records the task index each cell starts from (``clbench_cell_start``'s ``resumed_from``)."""

    def __init__(self) -> None:
        self.starts: list[int] = []

    @hookimpl
    def clbench_cell_start(self, cell: Any, resumed_from: int) -> None:
        self.starts.append(resumed_from)


# runner warnings that mean a checkpoint was thrown away, and what the method author must fix for each
_CHECKPOINT_PROBLEMS = (
    ("checkpoint does not fit this cell",
     "the method's state_dict() did not load back: load_state_dict(state_dict()) must succeed on a freshly "
     "built method right after setup(model), and afterwards the model's state_dict must load too (rebuild any "
     "structure the method added to the model, e.g. adapters of later tasks, in load_state_dict)"),
    ("unreadable checkpoint",
     "the checkpoint could not be read back with torch.load(weights_only=True): state_dict() may hold only "
     "tensors, numbers, strings, None, and lists, tuples, sets and dicts of them (no numpy arrays, dataclasses "
     "or other objects)"),
    ("checkpoint of other settings",
     "the cell's settings hash changed between two runs: a setting of the method is not deterministic"),
)


def _check_resume(regs: Registries, method: str, stream: str, out: Path, reference: CellResult) -> None:
    """Kill the cell after its first task (as Ctrl-C would), rerun: it must resume from that task's
    checkpoint (not start over) and end with the same matrix, metrics and footprints."""
    label = _who(regs, "method", method) if method in regs.methods else f"method {method!r}"  # or "a+b"
    what = f"{label} on {stream!r}"
    killer = KillAfterTask(0)
    regs.pm.register(killer)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(regs, out, method, stream, fail_fast=True)
    finally:
        regs.pm.unregister(killer)
    _require(any(out.rglob(CHECKPOINT_FILE)), f"{what}: no checkpoint was left after the first task")
    _require(not any(out.rglob(RESULT_FILE)), f"{what}: a killed cell must not write result.json")
    watcher = _ResumeWatcher()
    regs.pm.register(watcher)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            [resumed] = run(regs, out, method, stream, fail_fast=True)
    finally:
        regs.pm.unregister(watcher)
    for w in caught:
        text = str(w.message)
        for needle, fix in _CHECKPOINT_PROBLEMS:
            if needle in text:
                _fail(f"{what}: the cell killed after task 1 did not resume, it started over: {fix}.\n"
                      f"The runner said: {text}")
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)  # not ours: pass on
    _require(watcher.starts == [1], f"{what}: the cell killed after task 1 started again from task "
             f"{watcher.starts[0] + 1 if watcher.starts else '?'} instead of resuming at task 2")
    _complete(resumed, f"{what}, resumed after task 1,")
    _require(resumed.accuracy_matrix == reference.accuracy_matrix,
             f"{what}: the resumed cell's matrix {resumed.accuracy_matrix} differs from the uninterrupted "
             f"{reference.accuracy_matrix}: state_dict() must hold everything later tasks depend on (Fisher "
             "information, masks, replay buffers, anchors) and draw randomness only from ctx.generator(...)")
    _require(resumed.metrics == reference.metrics,
             f"{what}: the resumed cell's metrics {resumed.metrics} differ from the uninterrupted {reference.metrics}")
    if resumed.footprints and reference.footprints:
        _require(resumed.footprints.get("sha256") == reference.footprints.get("sha256"),
                 f"{what}: the resumed cell's footprints differ from the uninterrupted cell's: state_dict() must "
                 "restore what footprint() of later tasks reads")


class KillAfterTask:
    """An observer that interrupts a cell right after task ``index`` is checkpointed (tests only)."""

    def __init__(self, index: int) -> None:
        self.index = index

    @hookimpl
    def clbench_task_end(self, cell: Any, task: str, index: int, accuracy_row: list[float]) -> None:
        if index == self.index:
            raise KeyboardInterrupt(f"simulated kill after task {index}")


# --------------------------------------------------------------------------- check_stream
def _profile_for(regs: Registries, stream: str, model: str | None) -> str:
    """The profile to plan a kit cell in: the test profile, unless its preset for ``stream`` sets ``model.*``
    keys for another model than ``model`` (they would not fit its config); then ``quick`` (or any profile)
    whose preset does not."""
    spec = regs.streams.get(stream)
    for profile in (TEST_PROFILE, "quick", *regs.profiles):
        if profile not in regs.profiles:
            continue
        preset = cfg.preset_values(spec.presets, profile, stream, "")
        if model is None or preset.get("model", model) == model or not any(k.startswith("model.") for k in preset):
            return profile
    return TEST_PROFILE


def _first_order(regs: Registries, stream: str, profile: str, built: Stream) -> str:
    orders = cfg.preset_values(regs.streams.get(stream).presets, profile, stream, "").get("orders")
    return str(list(orders)[0]) if orders else next(iter(built.orders))


def _build_stream_spec(regs: Registries, name: str, config: Mapping[str, Any], who: str) -> Stream:
    spec = regs.streams.get(name)
    try:
        settings = cfg.apply(spec.config_cls, None, config, "stream")
    except Exception as exc:
        _fail(f"{who}: its settings do not build ({type(exc).__name__}: {exc}); config_cls must be a dataclass "
              "whose defaults are valid, or pass config={...} to check_stream")
    try:
        stream = spec.factory(settings)
    except Exception as exc:
        raise AssertionError(f"{who}: factory({settings!r}) raised {type(exc).__name__}: {exc} (pass "
                             "config={...} to check_stream for a stream that needs settings)") from exc
    _require(isinstance(stream, Stream), f"{who}: factory returned {type(stream).__name__}, expected a "
             "clbench.data.Stream")
    return stream


def _check_stream_structure(stream: Stream, who: str) -> None:
    tasks = list(stream.tasks)
    _require(tasks, f"{who}: Stream.tasks is empty")
    for t in tasks:
        _require(isinstance(t, TaskInfo), f"{who}: Stream.tasks holds a {type(t).__name__}, expected TaskInfo")
        _require(isinstance(t.name, str) and t.name, f"{who}: a task has the name {t.name!r}")
        _require(isinstance(t.labels, tuple) and len(t.labels) >= 1 and all(isinstance(x, str) for x in t.labels),
                 f"{who}: task {t.name!r} has labels {t.labels!r}, expected a non-empty tuple of strings "
                 "(y holds indices into it)")
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    _require(not twice, f"{who}: task names must be unique; {twice} appear more than once in Stream.tasks")
    _require(isinstance(stream.orders, Mapping) and stream.orders,
             f"{who}: Stream.orders is {stream.orders!r}, expected a non-empty dict of order name → task names")
    for order, members in stream.orders.items():
        _require(isinstance(order, str), f"{who}: order name {order!r} is not a string (--orders takes strings)")
        _require(isinstance(members, (list, tuple)) and len(members) > 0,
                 f"{who}: order {order!r} is {members!r}, expected a non-empty list of task names")
        unknown = [m for m in members if m not in names]
        if unknown:
            _fail(f"{who}: order {order!r} names unknown task {unknown[0]!r} (tasks: {', '.join(names)}); every "
                  "order must list names from Stream.tasks")
        again = sorted({m for m in members if list(members).count(m) > 1})
        _require(not again, f"{who}: order {order!r} lists task(s) {again} more than once")
    _require(isinstance(stream.modality, str) and stream.modality,
             f"{who}: modality is {stream.modality!r}, expected 'vector', 'image', 'text' or another name")


def _check_split(stream: Stream, info: TaskInfo, split_name: str, split: Any, who: str) -> None:
    where = f"{who}, task {info.name!r}, {split_name} split"
    _require(isinstance(split, Split), f"{where}: is {type(split).__name__}, expected clbench.data.Split")
    _require(len(split) > 0, f"{where}: is empty")
    _require(len(split.x) == len(split.y), f"{where}: {len(split.x)} inputs but {len(split.y)} labels")
    y = split.y
    _require(isinstance(y, Tensor) and y.dim() == 1 and not y.is_floating_point() and y.dtype != torch.bool,
             f"{where}: y must be a 1-D integer tensor of label indices, got "
             f"{type(y).__name__}{'' if not isinstance(y, Tensor) else f' {y.dtype} of shape {tuple(y.shape)}'}")
    lo, hi = int(y.min()), int(y.max())
    _require(0 <= lo and hi < info.num_classes,
             f"{where}: labels run from {lo} to {hi}, outside 0..{info.num_classes - 1} (the task's labels are "
             f"{info.labels}); y holds indices into TaskInfo.labels")
    x = split.x
    if stream.modality in ("vector", "image"):
        _require(isinstance(x, Tensor) and x.is_floating_point(),
                 f"{where}: a {stream.modality} stream's x must be a float tensor, got {type(x).__name__}"
                 f"{f' {x.dtype}' if isinstance(x, Tensor) else ''}")
        _require(tuple(stream.input_shape) == tuple(x.shape[1:]),
                 f"{where}: inputs have shape {tuple(x.shape[1:])} but Stream.input_shape is "
                 f"{tuple(stream.input_shape)} (models are built from input_shape)")
    if isinstance(x, Tensor) and x.is_floating_point():
        _require(bool(torch.isfinite(x).all()), f"{where}: x holds NaN or infinite values")


def _same(a: Any, b: Any) -> bool:
    """Equal values, tensors compared exactly (shape, dtype, entries), lists and tuples item by item."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and a.dtype == b.dtype \
            and torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b, strict=True))
    return bool(a == b)


def check_stream(regs: Registries, name: str, tmp_path: Path, *, model: str | None = None,
                 config: Mapping[str, Any] | None = None, method: str | None = None) -> CellResult:
    """Check stream ``name`` against the contract and run one cell of it; returns the cell's result.

    Checks: the factory (default settings, or ``config``: stream settings by field name) returns a Stream;
    task names are unique, every order is a non-empty list of known tasks; every task's train and test
    splits are non-empty with as many inputs as labels, labels are indices into ``TaskInfo.labels``
    (tensor inputs match ``input_shape``); building and loading again gives the same data; and a
    sequential fine-tuning cell on the stream's first order completes with a T×T matrix in [0, 100].

    The cell's model: ``model``, else the one the stream's test-profile preset names, else ``mlp`` for
    vector and image streams and the kit's ``tiny-text`` (trained through ``seqlora``: it has no trainable
    weights of its own) for text. The cell's method: ``method``, else ``seqft`` (``seqlora`` on ``tiny-text``).
    """
    who = _who(regs, "stream", name)
    config = dict(config or {})
    stream = _build_stream_spec(regs, name, config, who)
    _check_stream_structure(stream, who)
    loaded: dict[str, TaskData] = {}
    for info in stream.tasks:
        try:
            data = stream.data(info.name)
        except Exception as exc:
            raise AssertionError(f"{who}: loading task {info.name!r} raised {type(exc).__name__}: {exc}") from exc
        _require(isinstance(data, TaskData), f"{who}: load({info.name!r}) returned {type(data).__name__}, "
                 "expected clbench.data.TaskData")
        _require(data.info == info, f"{who}: load({info.name!r}) returned the data of {data.info!r}, not of "
                 f"{info!r}; return TaskData(info, ...) with the TaskInfo it was given")
        for split_name in ("train", "test", "val"):
            split = getattr(data, split_name)
            if split is not None or split_name != "val":
                _check_split(stream, info, split_name, split, who)
        loaded[info.name] = data

    again = _build_stream_spec(regs, name, config, who)
    _require(list(again.tasks) == list(stream.tasks) and dict(again.orders) == dict(stream.orders),
             f"{who}: a second factory call gives other tasks or orders; they must not depend on randomness "
             "or time")
    for task, data in loaded.items():
        other = again.data(task)
        for split_name in ("train", "test", "val"):
            a, b = getattr(data, split_name), getattr(other, split_name)
            _require((a is None) == (b is None) and (a is None or (_same(a.x, b.x) and _same(a.y, b.y))),
                     f"{who}: task {task!r} loads a different {split_name} split the second time; loading must be "
                     "deterministic (seed every generator: torch.Generator().manual_seed(...))")

    spec = regs.streams.get(name)
    preset_model = cfg.preset_values(spec.presets, TEST_PROFILE, name, "").get("model")
    chosen = model if model is not None else (None if preset_model else _kit_model(stream.modality, who))
    profile = _profile_for(regs, name, chosen)
    order = _first_order(regs, name, profile, stream)
    method = method or ("seqlora" if (chosen or preset_model) == "tiny-text" else "seqft")
    sets = {f"stream.{k}": [v] for k, v in config.items()}
    [result] = run(regs, tmp_path / "check-stream", method, name, profile=profile, sets=sets, orders=[order],
                   model=chosen)
    what = f"{who}: a {method} cell (model {chosen or preset_model!r}, order {order!r})"
    _complete(result, what)
    _check_matrix(result, stream.order(order), what)
    return result


def _kit_model(modality: str, who: str) -> str:
    if modality in ("vector", "image"):
        return "mlp"
    if modality == "text":
        return "tiny-text"
    _fail(f"{who}: no test model for modality {modality!r}; pass model='NAME' to check_stream")


# --------------------------------------------------------------------------- check_metric
def check_metric(regs: Registries, name: str, tmp_path: Path, *, method: str | None = None,
                 stream: str | None = None) -> CellResult:
    """Check metric ``name`` on a complete tiny cell; returns that cell's result (as stored).

    Checks: ``direction`` and ``needs`` are valid; on a cell of ``method`` (default ``seqft``; ``seqlora``
    for a metric that needs low-rank footprints) the metric is recorded in result.json as a finite number
    or None, raised nothing, is reproduced by ``clbench metrics`` (:func:`clbench._tools.verify.recompute`) twice,
    leaves its input unchanged, and a ``needs="matrix"`` or ``"report"`` metric gives the same value
    without footprints (``clbench metrics`` recomputes only those when the footprint file is gone).
    """
    spec = regs.metrics.get(name)
    who = _who(regs, "metric", name)
    _require(isinstance(spec.name, str) and spec.name, f"{who}: MetricSpec.name must be a non-empty string")
    _require(callable(spec.fn), f"{who}: MetricSpec.fn is {type(spec.fn).__name__}, expected a function")
    # direction, needs and aggregate: the registry refused the spec at registration when they are out of their words
    if method is None:
        method = "seqlora" if spec.needs == "lowrank" and "seqlora" in regs.methods else "seqft"
    stream = stream or fitting_stream(regs, method)
    _require(stream is not None, f"check_metric: no tiny stream fits method {method!r}; pass stream='NAME'")
    assert stream is not None
    [result] = run(regs, tmp_path / "check-metric", method, stream)
    _complete(result, f"the {method} cell on {stream!r} that check_metric runs {who} on")
    assert result.path is not None
    stored = read_result(result.path)
    fix = "fn(inp) must return a finite float, or None when the metric does not apply"
    if name in stored.metric_errors:
        _fail(f"{who} failed on a complete {method} cell: "
              f"{stored.metric_errors[name].removeprefix(who + ': ')}; {fix}")
    _require(name in stored.metrics, f"{who} is not recorded in {result.path}")
    value = stored.metrics[name]
    _require(value is None or (isinstance(value, float) and math.isfinite(value)),
             f"{who}: result.json records {value!r}; {fix}")
    _require(value == result.metrics.get(name), f"{who}: result.json records {value!r}, the run returned "
             f"{result.metrics.get(name)!r}")

    for attempt in ("", " again"):
        recomputed, errors, _ = verify.recompute(regs, stored)
        _require(name not in errors, f"{who}: `clbench metrics` recomputing it from result.json and "
                 f"{FOOTPRINT_FILE}{attempt} fails: {errors.get(name)}")
        _require(_close(recomputed.get(name), value),
                 f"{who}: `clbench metrics` recomputes it{attempt} from result.json and {FOOTPRINT_FILE} as "
                 f"{recomputed.get(name)!r}, but the run recorded {value!r}: the value must depend only on the "
                 "MetricInput (matrix, footprints, report, tasks and the metrics settings), deterministically")

    _check_pure(spec, verify._metric_input(stored), value, who)
    return stored


def _check_pure(spec: MetricSpec, inp: MetricInput, value: float | None, who: str) -> None:
    """``spec.fn`` leaves its input unchanged, and a metric that needs only the matrix (or the report) gives
    ``value`` without the footprints (and the report)."""
    before = (copy.deepcopy(inp.matrix), copy.deepcopy(inp.report), list(inp.tasks),
              fps.to_tensors(inp.footprints) if inp.footprints else None)
    metric_value(spec.fn(inp))
    after_footprints = fps.to_tensors(inp.footprints) if inp.footprints else None
    _require(inp.matrix == before[0] and inp.report == before[1] and inp.tasks == before[2]
             and (before[3] is None) == (after_footprints is None)
             and (before[3] is None or all(torch.equal(v, after_footprints[k]) for k, v in before[3].items())),
             f"{who}: fn(inp) changed its input (matrix, report, tasks or footprints); the metrics of a cell share "
             "one MetricInput, so a metric must not modify it")
    if spec.needs in ("matrix", "report"):
        # the same input and settings, without footprints (and without the report for needs="matrix")
        bare = dataclasses.replace(inp, matrix=copy.deepcopy(inp.matrix), footprints=None, tasks=list(inp.tasks),
                                   report=copy.deepcopy(inp.report) if spec.needs == "report" else {}, cache={})
        try:
            without = metric_value(spec.fn(bare))
        except Exception as exc:
            raise AssertionError(f"{who}: declares needs={spec.needs!r} but raises without footprints"
                                 f"{'' if spec.needs == 'report' else ' or report'} ({type(exc).__name__}: {exc}); "
                                 "declare needs='footprint' (or 'report') if it reads them") from exc
        _require(_close(without, value),
                 f"{who}: declares needs={spec.needs!r} but gives {without!r} without footprints"
                 f"{'' if spec.needs == 'report' else ' or report'} and {value!r} with them; declare the needs it "
                 "has ('footprint', 'lowrank' or 'report'): `clbench metrics` recomputes matrix and report metrics "
                 "when the footprint file is absent")


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) or a == b


# --------------------------------------------------------------------------- check_model
def _stream_for_model(regs: Registries, spec: ModelSpec, method: MethodSpec) -> str | None:
    """A tiny stream the model takes (the digits stream for image-only models, when installed)."""
    if not method.requires <= spec.provides:
        return None
    for stream, modality in (("tiny-vector", "vector"), ("tiny-text", "text"), ("split-digits", "image")):
        if modality in spec.modalities and stream in regs.streams:
            return stream
    return None


def check_model(regs: Registries, name: str, tmp_path: Path, *, stream: str | None = None,
                method: str = "seqft") -> CellResult:
    """Check model ``name``: built by the runner's own builders on a tiny stream, trained with ``method``.

    Checks: the factory returns a CLModel; one task of training changes its weights; ``predict`` returns
    one label index per input, within the task's labels, for every task; ``state_dict`` survives a
    ``torch.save``/``torch.load(weights_only=True)`` round trip into a freshly built model, which then
    predicts the same; and a whole cell of ``method`` completes with a T×T matrix in [0, 100]. A model
    with no trainable weights of its own (meant for adapters) is checked with ``method="seqlora"``.
    """
    spec = regs.models.get(name)
    who = _who(regs, "model", name)
    mspec = regs.methods.get(method)
    stream = stream or _stream_for_model(regs, spec, mspec)
    _require(stream is not None, f"{who}: no tiny stream takes modalities {sorted(spec.modalities)} with method "
             f"{method!r}; pass stream='NAME'")
    assert stream is not None
    profile = _profile_for(regs, stream, name)
    cell = make_plan(regs, _request(tmp_path / "check-model", method, stream, profile, model=name)).cells[0]
    stream_obj = build_stream(regs, cell)
    order_name = cell.order  # the first order the profile runs
    order = stream_obj.order(order_name)
    device = torch.device(cell.device_type)

    def build(seed_salt: int) -> tuple[CLModel, Method]:
        ctx = CellContext(stream=stream_obj, order=order, train=cell.train, device=device, seed=cell.seed,
                          options=dict(cell.options))
        seed_torch(derive_seed(cell.seed, seed_salt))
        try:
            model = build_model(regs, cell, stream_obj)
        except Exception as exc:
            raise AssertionError(f"{who}: building it on {stream!r} raised {type(exc).__name__}: {exc}") from exc
        model = model.to(device)
        m = build_method(regs, cell, ctx)
        m.setup(model)
        return model, m

    model, meth = build(0)
    _check_trains(regs, cell, model, meth, who)
    preds = _check_predict(model, meth, stream_obj, order, cell.train.eval_batch_size, device, who)
    fresh, fresh_method = build(1)  # another initialisation: everything must come from the state dict
    _check_state_round_trip(model, meth, fresh, fresh_method, who)
    again = _check_predict(fresh, fresh_method, stream_obj, order, cell.train.eval_batch_size, device, who)
    for t in order:
        _require(torch.equal(preds[t], again[t]),
                 f"{who}: a fresh model loaded from state_dict() predicts differently on task {t!r}: state that "
                 "predictions depend on is missing from state_dict() (register tensors as parameters or buffers)")

    [result] = run(regs, tmp_path / "check-model", method, stream, profile=profile, orders=[order_name], model=name)
    what = f"{who}: a {method} cell on {stream!r}"
    _complete(result, what)
    _check_matrix(result, order, what)
    return result


def _check_trains(regs: Registries, cell: Cell, model: CLModel, meth: Method, who: str) -> None:
    """One task of the cell's method changes the model's weights."""
    method, task = cell.method, meth.ctx.order[0]
    trained = {id(p): (n, p.detach().clone()) for n, p in model.named_parameters()}
    meth.before_task(task, 0)
    try:
        train_task(model, meth, meth.ctx, 0, method_label(regs, cell))
    except ClbenchError as exc:
        if "no trainable parameters" in str(exc):
            _fail(f"{who}: {method} finds no trainable parameters in it ({exc}); a model meant for adapters only "
                  "is checked with check_model(..., method='seqlora')")
        raise
    meth.after_task(task, 0)
    changed = [n for n, p in model.named_parameters() if id(p) in trained and not torch.equal(p.detach(), trained[id(p)][1])]
    _require(changed, f"{who}: one task of {method} training changed none of its weights: does forward() detach "
             "its output, or keep weights outside registered nn.Parameters / submodules?")


def _check_state_round_trip(model: CLModel, meth: Method, fresh: CLModel, fresh_method: Method, who: str) -> None:
    """The model's and method's state dicts, through torch.save and torch.load(weights_only=True) as a checkpoint
    is, load into a freshly built pair, whose state is then the same."""
    state = io.BytesIO()
    torch.save({"model": model.state_dict(), "method": meth.state_dict()}, state)
    state.seek(0)
    try:
        payload = torch.load(state, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise AssertionError(f"{who}: its state_dict() does not load with torch.load(weights_only=True), as a "
                             f"checkpoint is read ({type(exc).__name__}: {exc}); keep only tensors in it") from exc
    try:
        fresh_method.load_state_dict(payload["method"])
        fresh.load_state_dict(payload["model"])
    except Exception as exc:
        raise AssertionError(f"{who}: a freshly built model does not load its state_dict() ({type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:400]}): the structure must not depend on training") from exc
    mine, theirs = model.state_dict(), fresh.state_dict()
    _require(mine.keys() == theirs.keys() and all(_same(mine[k], theirs[k]) for k in mine),
             f"{who}: after load_state_dict(state_dict()) a fresh model's state differs: "
             f"{sorted(k for k in mine.keys() | theirs.keys() if k not in mine or k not in theirs or not _same(mine[k], theirs[k]))[:5]}")


@torch.no_grad()
def _check_predict(model: CLModel, method: Method, stream: Stream, order: list[str], batch_size: int,
                   device: torch.device, who: str) -> dict[str, Tensor]:
    """``predict`` on the first test batch of every task: one label index per input, within the task's labels."""
    was_training = model.training
    model.eval()
    out = {}
    for task in order:
        split = stream.data(task).test
        n = min(batch_size, len(split))
        batch = Batch(split.x[:n], split.y[:n], task).to(device)
        with method.evaluating(task):
            pred = model.predict(batch.x, task)
        where = f"{who}: predict(x, {task!r}) on {n} inputs"
        _require(isinstance(pred, Tensor), f"{where} returned {type(pred).__name__}, expected a tensor of label indices")
        _require(tuple(pred.shape) == (n,), f"{where} returned shape {tuple(pred.shape)}, expected ({n},): one "
                 "label index per input (argmax over the label logits)")
        _require(not pred.is_floating_point() and pred.dtype != torch.bool,
                 f"{where} returned {pred.dtype}, expected integer label indices")
        k = stream.task(task).num_classes
        bad = sorted({int(v) for v in pred.cpu().tolist() if not 0 <= int(v) < k})
        _require(not bad, f"{where} returned labels {bad[:5]} outside 0..{k - 1}: task {task!r} has {k} labels "
                 f"{stream.task(task).labels}; predict must return indices into TaskInfo.labels")
        out[task] = pred.cpu()
    model.train(was_training)
    return out


# --------------------------------------------------------------------------- pytest fixtures
@pytest.fixture
def clbench_registry() -> Registries:
    """A fresh registry per test: installed plugins + the tiny test plugin."""
    return registry()


@pytest.fixture
def run_cell(clbench_registry: Registries, tmp_path: Path):
    """``run_cell("ewc", stream="tiny-vector", sets=...) -> CellResult`` in a temp directory."""

    def _run(method: str, stream: str = "tiny-vector", **kw: Any) -> CellResult:
        return run(clbench_registry, tmp_path / "runs", method, stream, **kw)[0]

    return _run
