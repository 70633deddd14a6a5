"""check_stream: a stream's tasks, orders and splits, deterministic loading, and one cell of it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from clbench import config as cfg
from clbench._core.registry import Registries
from clbench.cell import TEST_PROFILE, CellResult
from clbench.data import Split, Stream, TaskData, TaskInfo
from clbench.testing.contract import _check_matrix, _complete, _fail, _require, _same, _who
from clbench.testing.running import _profile_for, run


def _first_order(regs: Registries, stream: str, profile: str, built: Stream) -> str:
    orders = cfg.preset_values(regs.streams.get(stream).presets, profile, stream, "").get("orders")
    return str(list(orders)[0]) if orders else next(iter(built.orders))


def _build_stream_spec(regs: Registries, name: str, config: Mapping[str, Any], who: str) -> Stream:
    spec = regs.streams.get(name)
    try:
        settings = cfg.apply(spec.config_cls, None, config, "stream")
    except Exception as exc:
        _fail(
            f"{who}: its settings do not build ({type(exc).__name__}: {exc}); config_cls must be a dataclass "
            "whose defaults are valid, or pass config={...} to check_stream"
        )
    try:
        stream = spec.factory(settings)
    except Exception as exc:
        raise AssertionError(
            f"{who}: factory({settings!r}) raised {type(exc).__name__}: {exc} (pass "
            "config={...} to check_stream for a stream that needs settings)"
        ) from exc
    _require(
        isinstance(stream, Stream), f"{who}: factory returned {type(stream).__name__}, expected a clbench.data.Stream"
    )
    return stream


def _check_stream_structure(stream: Stream, who: str) -> None:
    tasks = list(stream.tasks)
    _require(tasks, f"{who}: Stream.tasks is empty")
    for t in tasks:
        _require(isinstance(t, TaskInfo), f"{who}: Stream.tasks holds a {type(t).__name__}, expected TaskInfo")
        _require(isinstance(t.name, str) and t.name, f"{who}: a task has the name {t.name!r}")
        _require(
            isinstance(t.labels, tuple) and len(t.labels) >= 1 and all(isinstance(x, str) for x in t.labels),
            f"{who}: task {t.name!r} has labels {t.labels!r}, expected a non-empty tuple of strings "
            "(y holds indices into it)",
        )
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    _require(not twice, f"{who}: task names must be unique; {twice} appear more than once in Stream.tasks")
    _require(
        isinstance(stream.orders, Mapping) and stream.orders,
        f"{who}: Stream.orders is {stream.orders!r}, expected a non-empty dict of order name → task names",
    )
    for order, members in stream.orders.items():
        _require(isinstance(order, str), f"{who}: order name {order!r} is not a string (--orders takes strings)")
        _require(
            isinstance(members, (list, tuple)) and len(members) > 0,
            f"{who}: order {order!r} is {members!r}, expected a non-empty list of task names",
        )
        unknown = [m for m in members if m not in names]
        if unknown:
            _fail(
                f"{who}: order {order!r} names unknown task {unknown[0]!r} (tasks: {', '.join(names)}); every "
                "order must list names from Stream.tasks"
            )
        again = sorted({m for m in members if list(members).count(m) > 1})
        _require(not again, f"{who}: order {order!r} lists task(s) {again} more than once")
    _require(
        isinstance(stream.modality, str) and stream.modality,
        f"{who}: modality is {stream.modality!r}, expected 'vector', 'image', 'text' or another name",
    )


def _check_split(stream: Stream, info: TaskInfo, split_name: str, split: Any, who: str) -> None:
    where = f"{who}, task {info.name!r}, {split_name} split"
    _require(isinstance(split, Split), f"{where}: is {type(split).__name__}, expected clbench.data.Split")
    _require(len(split) > 0, f"{where}: is empty")
    _require(len(split.x) == len(split.y), f"{where}: {len(split.x)} inputs but {len(split.y)} labels")
    y = split.y
    _require(
        isinstance(y, Tensor) and y.dim() == 1 and not y.is_floating_point() and y.dtype != torch.bool,
        f"{where}: y must be a 1-D integer tensor of label indices, got "
        f"{type(y).__name__}{'' if not isinstance(y, Tensor) else f' {y.dtype} of shape {tuple(y.shape)}'}",
    )
    lo, hi = int(y.min()), int(y.max())
    _require(
        0 <= lo and hi < info.num_classes,
        f"{where}: labels run from {lo} to {hi}, outside 0..{info.num_classes - 1} (the task's labels are "
        f"{info.labels}); y holds indices into TaskInfo.labels",
    )
    x = split.x
    if stream.modality in ("vector", "image"):
        _require(
            isinstance(x, Tensor) and x.is_floating_point(),
            f"{where}: a {stream.modality} stream's x must be a float tensor, got {type(x).__name__}"
            f"{f' {x.dtype}' if isinstance(x, Tensor) else ''}",
        )
        _require(
            tuple(stream.input_shape) == tuple(x.shape[1:]),
            f"{where}: inputs have shape {tuple(x.shape[1:])} but Stream.input_shape is "
            f"{tuple(stream.input_shape)} (models are built from input_shape)",
        )
    if isinstance(x, Tensor) and x.is_floating_point():
        _require(bool(torch.isfinite(x).all()), f"{where}: x holds NaN or infinite values")


def check_stream(
    regs: Registries,
    name: str,
    tmp_path: Path,
    *,
    model: str | None = None,
    config: Mapping[str, Any] | None = None,
    method: str | None = None,
) -> CellResult:
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
        _require(
            isinstance(data, TaskData),
            f"{who}: load({info.name!r}) returned {type(data).__name__}, expected clbench.data.TaskData",
        )
        _require(
            data.info == info,
            f"{who}: load({info.name!r}) returned the data of {data.info!r}, not of "
            f"{info!r}; return TaskData(info, ...) with the TaskInfo it was given",
        )
        for split_name in ("train", "test", "val"):
            split = getattr(data, split_name)
            if split is not None or split_name != "val":
                _check_split(stream, info, split_name, split, who)
        loaded[info.name] = data

    again = _build_stream_spec(regs, name, config, who)
    _require(
        list(again.tasks) == list(stream.tasks) and dict(again.orders) == dict(stream.orders),
        f"{who}: a second factory call gives other tasks or orders; they must not depend on randomness or time",
    )
    for task, data in loaded.items():
        other = again.data(task)
        for split_name in ("train", "test", "val"):
            a, b = getattr(data, split_name), getattr(other, split_name)
            _require(
                (a is None) == (b is None) and (a is None or (_same(a.x, b.x) and _same(a.y, b.y))),
                f"{who}: task {task!r} loads a different {split_name} split the second time; loading must be "
                "deterministic (seed every generator: torch.Generator().manual_seed(...))",
            )

    spec = regs.streams.get(name)
    preset_model = cfg.preset_values(spec.presets, TEST_PROFILE, name, "").get("model")
    chosen = model if model is not None else (None if preset_model else _kit_model(stream.modality, who))
    profile = _profile_for(regs, name, chosen)
    order = _first_order(regs, name, profile, stream)
    method = method or ("seqlora" if (chosen or preset_model) == "tiny-text" else "seqft")
    sets = {f"stream.{k}": [v] for k, v in config.items()}
    [result] = run(
        regs, tmp_path / "check-stream", method, name, profile=profile, sets=sets, orders=[order], model=chosen
    )
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
