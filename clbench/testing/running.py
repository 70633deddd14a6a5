"""Running cells the way the kit does: a fresh registry with the tiny plugin, a grid planned and run in this
process without progress bars, the profile and tiny stream a kit cell takes, and a simulated kill."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from clbench import config as cfg
from clbench._core.plan import RunRequest, make_plan
from clbench._core.registry import Registries
from clbench._exec.executors import execute
from clbench._exec.local import harness_registry
from clbench.cell import TEST_PROFILE, CellResult
from clbench.hookspecs import hookimpl
from clbench.testing.tiny import TinyPlugin


def registry(*plugins: object, autoload: bool = True, disabled: Iterable[str] = ()) -> Registries:
    """A fresh registry: installed plugins (unless ``autoload=False``), the tiny plugin, and ``plugins``."""
    return harness_registry(disabled=disabled, extra_plugins=(TinyPlugin(), *plugins), autoload=autoload)


def run(
    regs: Registries,
    out: Path,
    methods: str,
    stream: str = "tiny-vector",
    profile: str = TEST_PROFILE,
    sets: dict[str, list[Any]] | None = None,
    seeds: Iterable[int] = (0,),
    orders: Iterable[str] | None = None,
    fail_fast: bool = False,
    model: str | None = None,
    options: Mapping[str, Any] | None = None,
    nproc: int | None = None,
) -> list[CellResult]:
    """Plan and run a grid in-process, without progress bars (``model``: as ``clbench run --model``;
    ``options``: the run options plugins add, as ``{"logger": "csv"}`` for ``--logger csv``; ``nproc``: as
    ``--nproc``, each cell on that many rank processes, which load the tiny plugin too)."""
    req = _request(out, methods, stream, profile, sets, seeds, orders, model, options)
    run_options = dict(req.options)
    if nproc is not None:
        run_options.update(nproc=nproc, rank_plugins=[f"{TinyPlugin.__module__}:{TinyPlugin.__qualname__}"])
    return execute(make_plan(regs, req), regs, fail_fast=fail_fast, progress=False, options=run_options)


def _request(
    out: Path,
    methods: str,
    stream: str,
    profile: str = TEST_PROFILE,
    sets: dict[str, list[Any]] | None = None,
    seeds: Iterable[int] = (0,),
    orders: Iterable[str] | None = None,
    model: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> RunRequest:
    return RunRequest(
        profile=profile,
        methods=methods,
        streams=[stream],
        seeds=list(seeds),
        orders=list(orders) if orders else None,
        sets=sets or {},
        out=out,
        model=model,
        options=dict(options or {}),
    )


def fitting_stream(regs: Registries, method: str) -> str | None:
    """The tiny stream whose test-profile model meets ``method``'s requirements and scenarios."""
    spec = regs.methods.get(method)
    for stream, model in (
        ("tiny-vector", "mlp"),
        ("tiny-cil", "mlp"),
        ("tiny-text", "tiny-text"),
        ("tiny-image", "vit-b16"),
    ):
        if model not in regs.models or stream not in regs.streams:
            continue
        m = regs.models.get(model)
        built = regs.streams.get(stream).factory(None)
        if (
            spec.requires <= m.provides
            and built.modality in m.modalities
            and (not spec.modalities or built.modality in spec.modalities)
            and (not spec.scenarios or built.scenario in spec.scenarios)
        ):
            return stream
    return None


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


class KillAfterTask:
    """An observer that interrupts a cell right after task ``index`` is checkpointed (tests only)."""

    def __init__(self, index: int) -> None:
        self.index = index

    @hookimpl
    def clbench_task_end(self, cell: Any, task: str, index: int, accuracy_row: list[float]) -> None:
        if index == self.index:
            raise KeyboardInterrupt(f"simulated kill after task {index}")
