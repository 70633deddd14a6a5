"""What a plugin author needs to test a plugin against the contract, in one import.

In a plugin's ``conftest.py``::

    pytest_plugins = ["clbench.testing"]

then use the fixtures ``clbench_registry`` (a fresh registry: installed plugins + the tiny test
plugin below) and ``run_cell`` (run one cell on a tiny stream in a temp directory), or call
:func:`check_method` directly: it runs a method on a two-task stream and checks the result contract
(status, matrix shape, finite scores, footprint kind, metrics, resume equality).

The tiny streams are synthetic on purpose: they test plumbing, never accuracy claims.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from clbench.data import Split, Stream, TaskData, TaskInfo
from clbench.executors import execute
from clbench.hookspecs import hookimpl
from clbench.model import CLModel, StreamInfo
from clbench.plan import TEST_PROFILE, RunRequest, make_plan  # TEST_PROFILE: plugins key test presets to it
from clbench.registry import Registries, build_registry
from clbench.results import CHECKPOINT_FILE, RESULT_FILE, CellResult
from clbench.specs import EmptyConfig, ModelSpec, ProfileSpec, StreamSpec

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
        ]

    @hookimpl
    def clbench_add_models(self) -> list[ModelSpec]:
        return [ModelSpec("tiny-text", lambda cfg, info: TinyTextModel(info, cfg.dim), TinyTextConfig,
                          "bag-of-words model with q/v layers (tests only)", modalities=frozenset({"text"}),
                          provides=frozenset({"lora"}))]

    @hookimpl
    def clbench_add_profiles(self) -> list[ProfileSpec]:
        return [ProfileSpec(TEST_PROFILE, "tiny synthetic streams for plugin tests", seeds=(0,),
                            streams=("tiny-vector", "tiny-text"))]


# --------------------------------------------------------------------------- helpers
def registry(*plugins: object, autoload: bool = True, disabled: Iterable[str] = ()) -> Registries:
    """A fresh registry: installed plugins (unless ``autoload=False``), the tiny plugin, and ``plugins``."""
    return build_registry(disabled=disabled, extra_plugins=(TinyPlugin(), *plugins), autoload=autoload)


def run(regs: Registries, out: Path, methods: str, stream: str = "tiny-vector", profile: str = TEST_PROFILE,
        sets: dict[str, list[Any]] | None = None, seeds: Iterable[int] = (0,), orders: Iterable[str] | None = None,
        fail_fast: bool = False) -> list[CellResult]:
    """Plan and run a grid in-process, without progress bars."""
    req = RunRequest(profile=profile, methods=methods, streams=[stream], seeds=list(seeds),
                     orders=list(orders) if orders else None, sets=sets or {}, out=out)
    return execute(make_plan(regs, req), regs, fail_fast=fail_fast, progress=False)


def fitting_stream(regs: Registries, method: str) -> str | None:
    """The tiny stream whose test-profile model meets ``method``'s requirements."""
    spec = regs.methods.get(method)
    for stream, model in (("tiny-vector", "mlp"), ("tiny-text", "tiny-text")):
        m = regs.models.get(model)
        if spec.requires <= m.provides and regs.streams.get(stream).factory(None).modality in m.modalities:
            return stream
    return None


def check_method(regs: Registries, method: str, tmp: Path, check_resume: bool = True) -> CellResult:
    """Run ``method`` on a two-task tiny stream and check the result contract; returns the result."""
    stream = fitting_stream(regs, method)
    if stream is None:
        pytest.skip(f"no tiny test model meets the requirements of {method!r}")
    [result] = run(regs, tmp / "a", method, stream, fail_fast=True)
    assert result.status == "complete", result.error
    T = len(result.tasks)
    assert T == 2 and len(result.accuracy_matrix) == T
    for row in result.accuracy_matrix:
        assert len(row) == T and all(v is not None and 0.0 <= v <= 100.0 for v in row)
    assert result.metrics["AA"] == pytest.approx(sum(result.accuracy_matrix[-1]) / T)
    for value in result.metrics.values():
        assert value is None or math.isfinite(value)
    if check_resume:
        _check_resume(regs, method, stream, tmp / "b", result)
    return result


def _check_resume(regs: Registries, method: str, stream: str, out: Path, reference: CellResult) -> None:
    """Kill the cell after its first task (as Ctrl-C would), rerun: the matrix must be identical."""
    killer = KillAfterTask(0)
    regs.pm.register(killer)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(regs, out, method, stream, fail_fast=True)
    finally:
        regs.pm.unregister(killer)
    assert any(out.rglob(CHECKPOINT_FILE)), "no checkpoint was left after the first task"
    assert not any(out.rglob(RESULT_FILE)), "a killed cell must not write result.json"
    [resumed] = run(regs, out, method, stream, fail_fast=True)
    assert resumed.accuracy_matrix == reference.accuracy_matrix
    assert resumed.metrics == reference.metrics


class KillAfterTask:
    """An observer that interrupts a cell right after task ``index`` is checkpointed (tests only)."""

    def __init__(self, index: int) -> None:
        self.index = index

    @hookimpl
    def clbench_task_end(self, cell: Any, task: str, index: int, accuracy_row: list[float]) -> None:
        if index == self.index:
            raise KeyboardInterrupt(f"simulated kill after task {index}")


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
