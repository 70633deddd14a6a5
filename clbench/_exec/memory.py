"""A cell's peak device memory, estimated before anything trains: ``clbench run --dry-run`` and ``--device-memory``.

How: the cell's own model and method run its own code for two optimizer steps of each phase of the first task (the
second with the optimizer's state), the method's ``after_task``, two steps of each phase of the second task (where a
method's penalties and its state weigh) and one evaluation batch, on PyTorch's meta device, which gives every tensor
its size and computes nothing. A dispatch mode (:class:`LiveBytes`) counts the bytes of every tensor storage alive,
from the model's weights on, and keeps the peak: what a device allocator holds, without its rounding and
fragmentation. The same mode on real CPU tensors
measures a run (tests compare the two, and benchmarks/bench_memory.py compares them with the process's RSS).

Why not a formula per method: the state a method keeps (an anchor, a Fisher, masks, masters, a penalty's gradients
held from ``loss_terms`` to ``after_backward``) is whatever its code allocates; running that code is the only
estimate that stays true as methods change.

Limits, said in every estimate's ``notes``: a model whose factory cannot build on the meta device (weights loaded by
``from_pretrained``) is built on the CPU and then moved to it (so it must load there); ``.item()`` of a meta tensor
gives false or 0 and a host copy zeros (:func:`meta_item`), and code whose shapes follow from values (``nonzero``,
a quantile) is measured on the CPU with real tensors; ``scaled_dot_product_attention`` is planned as a GPU's fused
kernel (:func:`_fused_attention`), and greedy generation as one pass that builds its KV cache at full length
(:meth:`~clbench.model.CLModel.predict_peak`).

The same run counts floating-point operations (:class:`clbench._exec.compute.FlopCount`, torch's formulas for
matrix products, convolutions and attention, forward and backward) of one steady optimizer step and one evaluation batch, and the plan multiplies them
by the cell's steps and test batches (:func:`clbench._exec.compute.planned_flops`): the ``compute`` column, from which
a card's time follows at the rate it sustains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast
from unittest import mock

import torch
import torch.fx.experimental._config
import torch.nn.functional as F

from clbench._core.boundary import CheckedMethod
from clbench._core.registry import Registries
from clbench._exec.cards import Card, fmt_seconds, total_seconds
from clbench._exec.compute import FlopCount, planned_flops
from clbench._exec.engine import StepEngine
from clbench._exec.livebytes import LiveBytes, fmt_bytes, meta_item, parse_size
from clbench._exec.session import CellSession, build_method, build_stream, method_label
from clbench._exec.step import cell_masters, task_phases
from clbench.cell import Cell
from clbench.data import Batch, Split, Stream
from clbench.errors import ClbenchError
from clbench.method import CellContext, Method
from clbench.model import CLModel

TERMS = ("weights", "gradients", "optimizer", "method", "activations", "evaluation", "workspace")
"""The parts of an estimate: the model's weights and buffers; the gradients of what trains; the optimizer's state
and fp32 masters; what the method keeps (anchors, Fisher, masks, copies); the activations one micro-batch's
backward keeps beyond the step's steady state; an evaluation batch's beyond the weights; on a GPU, the CUDA
libraries' workspaces (:data:`CUDA_WORKSPACE_BYTES`)."""

CUDA_WORKSPACE_BYTES = 64 * 2**20
"""cuBLAS's workspace, 32 MiB for each thread that multiplies on a GPU, allocated by PyTorch's caching allocator at
the first product and kept: a training process has two such threads (its own and autograd's backward thread).
Measured on an H200 with torch 2.11 (benchmarks/gpu_cublas_workspace.py): 64 MiB after one forward and backward,
96 MiB once a third thread multiplied."""


@dataclass
class MemoryEstimate:
    key: str
    terms: dict[str, int]
    peak: int
    device: str  # "meta" (sizes only) or "cpu" (real tensors: the code needed values)
    notes: list[str] = field(default_factory=list)
    flops: int | None = None  # the cell's planned floating-point operations (clbench._exec.compute.planned_flops)
    unit: int = 0  # the largest weights one module holds of its own: what a sharded rank gathers whole at once
    host: int = 0  # host memory the cell keeps for its training (train.shard=offload: the shards and their state)

    def largest(self, n: int = 2) -> list[tuple[str, int]]:
        return sorted(self.terms.items(), key=lambda kv: -kv[1])[:n]


def _largest_examples(split: Split, n: int, task: str) -> Batch:
    """The ``n`` examples of ``split`` that cost most: the longest texts, or the first ``n`` of equal-size inputs."""
    x = split.x
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], str):
        idx = sorted(range(len(x)), key=lambda i: -len(x[i]))[:n]
        return Batch([x[i] for i in idx], split.y[idx].clone(), task)
    # copies, as a batch on a device is: on the CPU, views would share (and count) the whole split's storage
    return Batch(x[:n].clone() if isinstance(x, torch.Tensor) else x[:n], split.y[:n].clone(), task)


def _text_chars(x: Any) -> int:
    """The characters of a batch of texts (0 for tensors: equal-size inputs cost the same in every task)."""
    return sum(len(t) for t in x) if isinstance(x, (list, tuple)) and x and isinstance(x[0], str) else 0


def _task(
    model: CLModel,
    method: CheckedMethod,
    ctx: CellContext,
    index: int,
    mode: LiveBytes,
    parts: dict[str, int],
    flops: dict[str, int] | None = None,
) -> None:
    """Two optimizer steps of each phase of task ``index`` on its costliest micro-batch, through the training loop's
    own phases, optimizers and step (:func:`~clbench._exec.step.task_phases`, :class:`StepEngine`: the phase's loss,
    autocast, hooks and clipping); notes gradients, optimizer state and activations into ``parts``. The second step is a phase's steady state: torch's optimizers create their state in
    their first step, so the first step's backward and ``after_backward`` (EWC's penalty gradient, formed a parameter
    at a time) run without it, and every later one with it. ``flops``: its "step" gets the first phase's second step's
    floating-point operations (:class:`~clbench._exec.compute.FlopCount`), times ``train.grad_accum``, and
    ``epochs:<index>`` the task's epochs over its own data, summed over its phases."""
    task = ctx.order[index]
    batch = _largest_examples(ctx.data(method.method.train_tasks(index)[0]).train, ctx.train.micro_batch_size, task).to(
        ctx.device
    )
    epochs = 0
    for _, phase, params, opt in task_phases(model, method.method, ctx, index):
        epochs += phase.epochs if phase.batches is None else 0  # a phase over batches of its own is not planned
        engine = StepEngine(model, method, opt, params, ctx.train, ctx.dist, phase.task_loss)
        before = mode.now
        for k in range(2):
            start = mode.now
            mode.reset_peak()
            count = flops is not None and k == 1 and "step" not in flops
            with FlopCount() if count else contextlib.nullcontext() as counter:
                loss, task_loss, terms = engine.backward(batch, parts=1)  # one micro-batch, the costliest
            if count:
                assert flops is not None and isinstance(counter, FlopCount)
                flops["step"] = counter.total * ctx.train.grad_accum
            del loss, task_loss, terms  # (scalars: the step's bytes are the ones that outlive it)
            grads = sum(p.grad.untyped_storage().nbytes() for p in params if p.grad is not None)
            parts["activations"] = max(parts.get("activations", 0), mode.peak - start - grads)
            engine.update()
            parts["gradients"] = max(parts.get("gradients", 0), grads)
            parts["optimizer"] = max(parts.get("optimizer", 0), mode.now - before - grads)
            model.zero_grad(set_to_none=True)
        del opt, engine  # the next phase's optimizer is built once this one is freed
    if flops is not None:
        flops[f"epochs:{index}"] = epochs


def _measure(
    regs: Registries,
    cell: Cell,
    device: torch.device,
    fused_attention: bool = True,
    flops: dict[str, int] | None = None,
    stream_of: Callable[[], Stream] | None = None,
) -> tuple[dict[str, int], int, list[str], int]:
    """The cell's memory terms, its peak, notes and the bytes of the largest weights one module holds of its own
    (a unit of ``train.shard=full``); ``flops`` (given): gets "step", "eval" (a batch) and "cell"
    (:func:`clbench._exec.compute.planned_flops`); ``stream_of``: builds the cell's stream (default: anew)."""
    notes: list[str] = []
    session = CellSession(regs, cell, device, stream=stream_of() if stream_of is not None else None)
    order, ctx = session.order, session.context()
    # a cell that runs on the CPU holds its host copies in the memory it runs in; a GPU cell's are the host's
    mode = LiveBytes(device, meta_item if device.type == "meta" else None, count_host=cell.device_type == "cpu")
    for task in order:  # the data stays on the host: loaded before the count starts, never counted
        data = ctx.data(task)
        for split in (data.train, data.test, getattr(data, "val", None)):
            for t in (getattr(split, "x", None), getattr(split, "y", None)):
                if isinstance(t, torch.Tensor):
                    mode.host.add(id(t.untyped_storage()))
    model = session.model(notes)  # seeded as the runner seeds a cell, so that a plan is the same every time
    for t in (*model.parameters(), *model.buffers()):
        mode.add(t)
    parts = {"weights": mode.now}
    unit = max((sum(p.nbytes for p in m.parameters(recurse=False)) for m in model.modules()), default=0)
    fused = (
        mock.patch.object(F, "scaled_dot_product_attention", _fused_attention)
        if fused_attention and device.type == "meta"
        else contextlib.nullcontext()
    )
    with mode, fused:
        method = session.method(model)
        ctx = method.ctx  # (the one the method reads: its data, its stash)
        checked = CheckedMethod(method, method_label(regs, cell))
        model.train()
        session.before_task(method, 0)
        _task(model, checked, ctx, 0, mode, parts, flops)
        gc.collect()  # a torch optimizer is a reference cycle: its state goes with the collector, not with the task
        before = mode.now
        mode.reset_peak()
        session.after_task(method, 0)
        # what a method computes between tasks (GDumb and SM retrain there, EWC forms its Fisher) lives while the
        # step's gradients and activations do not: the larger of the two is the cell's transient
        parts["activations"] = max(
            parts.get("activations", 0), mode.peak - before - parts.get("gradients", 0) - parts.get("optimizer", 0)
        )
        masters = cell_masters(ctx).nbytes()
        parts["method"] = mode.now - parts["weights"] - masters
        if len(order) > 1:
            session.before_task(method, 1)
            _task(model, checked, ctx, 1, mode, parts, flops)
            gc.collect()
        try:
            parts["evaluation"] = _evaluation(model, method, ctx, mode, flops)
        except (ClbenchError, TypeError, ValueError) as exc:  # a stream that evaluates its own way (lm-eval, judges)
            parts["evaluation"] = 0
            notes.append(f"evaluation not estimated: the model's forward does not take the test inputs ({exc})")
    parts["optimizer"] = parts.get("optimizer", 0) + masters
    if flops is not None:
        splits = [(len(ctx.data(t).train), len(ctx.data(t).test)) for t in order]
        epochs = [flops[f"epochs:{i}"] for i in range(2) if f"epochs:{i}" in flops]
        flops["cell"] = planned_flops(cell.train, splits, flops.get("step", 0), flops.get("eval", 0), epochs)
    return {k: parts.get(k, 0) for k in TERMS}, mode.top, notes, unit


def _fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` as a GPU runs it: a fused kernel (memory-efficient attention; flash keeps
    the same) that keeps the output and its log-sum-exp for backward, never the (L × L) attention matrix. On the
    meta device PyTorch takes the math path, which keeps the matrix and its softmax per layer: T5-large's planned
    activations came out ~5× what an H200 measured (docs/scale-out.md, "Measured on a GPU")."""
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        key = key.repeat_interleave(query.shape[-3] // key.shape[-3], dim=-3)
        value = value.repeat_interleave(query.shape[-3] // value.shape[-3], dim=-3)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:  # what PyTorch converts a boolean mask to before the fused kernel
            attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~attn_mask, float("-inf")
            )
        attn_mask = attn_mask.expand(*query.shape[:-1], key.shape[-2])
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale
    )[0]


@torch.no_grad()
def _evaluation(
    model: CLModel, method: Method, ctx: CellContext, mode: LiveBytes, flops: dict[str, int] | None = None
) -> int:
    """What one evaluation batch (``train.eval_batch_size`` of the costliest examples) holds beyond what lives:
    the model's :meth:`~clbench.model.CLModel.predict_peak` — a forward pass for classifiers and ``model.eval=rank``
    (which scores every label: dbpedia's 14 repeat the prompt's activations 14 times), and for greedy generation one
    pass that builds the KV cache at its full length (on the meta device the token loop took minutes for an 8B
    model)."""
    # every task is evaluated after each one: the costliest batch may be any task's (amazon's reviews, not dbpedia's)
    batches = [_largest_examples(ctx.data(t).test, ctx.train.eval_batch_size, t) for t in ctx.order]
    batch = max(batches, key=lambda b: _text_chars(b.x)).to(ctx.device)
    model.eval()
    before = mode.now
    mode.reset_peak()
    with method.evaluating(batch.task), FlopCount() as counter:
        model.predict_peak(batch.x, batch.task)
    if flops is not None:
        flops["eval"] = counter.total
    return mode.peak - before


@contextlib.contextmanager
def _cpu_threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class NotEstimable(ClbenchError):
    """The memory plan cannot run a cell's code on the meta device, and may not measure it on the CPU."""


CPU_FALLBACK_BYTES = 2 * 2**30
"""Weights above which a cell is not re-measured on the CPU with real tensors (the host would load the model)."""


Loaded = dict[str, dict[str, Any]]  # a stream's configuration -> its tasks' data, loaded once for every cell of a plan


def estimate(regs: Registries, cell: Cell, cpu_fallback: bool = True, loaded: Loaded | None = None) -> MemoryEstimate:
    """The peak device memory of ``cell`` (see the module), on the meta device. Where its code's shapes follow from
    values (``nonzero``, a boolean mask's selection), a small model is measured on the CPU with real tensors instead,
    exactly, and a large one on the meta device with every such selection taken whole: an upper bound, noted.
    ``loaded``: the tasks' data that streams of the same configuration loaded for earlier estimates (filled here)."""
    est = _estimate(regs, cell, cpu_fallback, loaded)
    if cell.device_type == "cuda":
        est.terms["workspace"] = CUDA_WORKSPACE_BYTES
        est.peak += CUDA_WORKSPACE_BYTES
    if (cell.train.shard == "full" and cell.nproc > 1) or cell.train.shard == "offload":
        est = per_rank(est, cell.nproc, offload=cell.train.shard == "offload", built=built(cell, est))
    return est


def built(cell: Cell, est: MemoryEstimate) -> int:
    """The bytes of ``cell``'s whole model on a rank's device before it is sharded: each rank builds it there,
    low-precision weights with float32 masters cast to float32, then shards it (:mod:`clbench._exec.runner`)."""
    low = getattr(cell.model_cfg, "dtype", None) in ("bfloat16", "float16") and cell.train.fp32_masters
    return est.terms["weights"] * (2 if low else 1)


SHARDED = ("weights", "gradients", "optimizer")  # what train.shard=full splits over the ranks


def per_rank(est: MemoryEstimate, ranks: int, offload: bool = False, built: int = 0) -> MemoryEstimate:
    """``est`` (one process's) for one of ``ranks`` ranks of a sharded cell (``train.shard=full``): 1/N of the
    weights, gradients and optimizer state, plus the largest unit's whole weights, gathered for its forward and
    backward, and its whole gradients before they are reduce-scattered. What a method keeps, the activations and an
    evaluation batch's are a rank's own. The peak moves by the same amounts.

    ``offload`` (``train.shard=offload``): the 1/N shares live in the rank's host memory (:attr:`MemoryEstimate.host`)
    and the device keeps the largest unit's whole weights and gradients alone. The host's share is one process's
    three terms over N: FSDP keeps the shards in float32 where one process keeps low-precision weights and
    gradients beside float32 masters (2 + 2 + 4 bytes a weight against 4 + 4), and the optimizer's moments alike.
    ``built``: the bytes of the whole model on the device before it is sharded, a floor of the peak."""
    terms = dict(est.terms)
    shares = {name: -(-est.terms[name] // ranks) for name in SHARDED}
    for name in SHARDED:
        terms[name] = 0 if offload else shares[name]
    terms["weights"] += est.unit
    terms["gradients"] += est.unit if est.terms["gradients"] else 0
    peak = est.peak + sum(terms[n] - est.terms[n] for n in SHARDED)
    notes = list(est.notes)
    if built > peak:
        peak = built
        notes.append(f"the peak is the whole model built on the device before it is sharded ({fmt_bytes(built)})")
    whole = f"the largest unit's whole weights and gradients ({fmt_bytes(est.unit)}) while it computes"
    if offload:
        host = sum(shares.values())
        note = (
            f"per rank of {ranks} (train.shard=offload): on the device {whole}; in host memory 1/{ranks} of the "
            f"weights, gradients and optimizer state ({fmt_bytes(host)}), where the optimizer steps"
        )
        return dataclasses.replace(est, terms=terms, peak=peak, host=est.host + host, notes=[*notes, note])
    note = (
        f"per rank of {ranks} (train.shard=full): 1/{ranks} of the weights, gradients and optimizer state, and {whole}"
    )
    return dataclasses.replace(est, terms=terms, peak=peak, notes=[*notes, note])


@contextlib.contextmanager
def _collect_young() -> Iterator[None]:
    """A plan collects garbage between its steps (a torch optimizer is a reference cycle); under this, a collection
    scans only the objects made since it began (``gc.freeze``): the process's earlier objects (torch, the plugins,
    earlier cells: ~0.3 s a full collection) are alive either way, and what the plan counts is made inside it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _stream(regs: Registries, cell: Cell, loaded: Loaded | None) -> Stream:
    """The cell's stream, its tasks' data shared with the earlier estimates of a stream of the same configuration (a
    stream keeps what it loaded in ``Stream._cache``; one that loads its own way loads anew)."""
    stream = build_stream(regs, cell)
    if loaded is not None and isinstance(getattr(stream, "_cache", None), dict):
        key = json.dumps([cell.stream, cell.resolved().get("stream")], sort_keys=True, default=str)
        stream._cache = loaded.setdefault(key, stream._cache)
    return stream


def _estimate(regs: Registries, cell: Cell, cpu_fallback: bool, loaded: Loaded | None = None) -> MemoryEstimate:
    terms: dict[str, int] | None
    measure = functools.partial(_measure, stream_of=lambda: _stream(regs, cell, loaded))
    with _cpu_threads(cell.train.threads), _collect_young():
        flops: dict[str, int] = {}
        try:
            terms, peak, notes, unit = measure(regs, cell, torch.device("meta"), flops=flops)
            return MemoryEstimate(cell.key, terms, peak, "meta", notes, flops.get("cell"), unit)
        except Exception as exc:  # noqa: BLE001 - a shape that follows from values, or a check of a value meta lacks
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        # ignore: torch's config modules get patch() at import (install_config_module), which the stubs lack
        with torch.fx.experimental._config.patch(meta_nonzero_assume_all_nonzero=True):  # type: ignore[attr-defined]
            try:
                flops.clear()
                terms, peak, notes, unit = measure(regs, cell, torch.device("meta"), flops=flops)
            except Exception:  # noqa: BLE001 - the whole selections may break a method's own checks (LoTTO's)
                terms = None
        if terms is not None and (terms["weights"] > CPU_FALLBACK_BYTES or not cpu_fallback):
            notes.append(f"an upper bound: value-dependent selections taken whole on the meta device ({why})")
            return MemoryEstimate(
                cell.key,
                terms,
                peak - _masks_at_density(regs, cell, peak, notes, loaded),
                "meta",
                notes,
                flops.get("cell"),
                unit,
            )
        if not cpu_fallback:
            raise NotEstimable(f"{cell.key}: the memory plan cannot run its code on the meta device ({why})")
        flops.clear()
        terms, peak, notes, unit = measure(regs, cell, torch.device("cpu"), flops=flops)
        notes.append(f"measured on the CPU: on the meta device {why}")
        return MemoryEstimate(cell.key, terms, peak, "cpu", notes, flops.get("cell"), unit)


def whole_selection_excess(
    masked: int,
    density: float,
    moments: int = 1,
    union: float | None = None,
    anchor: int = 0,
    value: int = 4,
    fisher: int = 0,
) -> int:
    """What a plan with value-dependent selections taken whole (an upper bound, :func:`estimate`) counts beyond the
    run for a method whose optimizer packs its masked coordinates (``PackedState``) at ``density``: for each coordinate
    outside the masks, an int32 index, a packed value and ``moments`` optimizer moments (RMSProp and momentum SGD 1,
    Adam 2) of ``value`` bytes each (float32; a bf16 weight's own 2 under ``train.fp32_masters=false``). ``union``:
    low-precision (bf16) weights, whose fp32 masters hold the coordinates of the masks' union over the planned tasks
    (its density; disjoint masks of two tasks: 2 × ``density``): for each coordinate outside the union also the
    master's value and int32 index, and for each coordinate outside the masks the int32 position of a mask's coordinate
    in the union. ``anchor``: the bytes of a weight's element when the method keeps its anchor at the masks only
    (``anchor_at_masks``: Expander-EWC); ``fisher``: 4 when its float32 Fisher's device copy is at the masks only
    (``fisher_at_masks``). The packed copy of a gradient a step leaves is freed by the next step's ``zero_grad``
    before its backward, in the plan as in the run (:class:`StepEngine`), so it is in neither peak.
    tests/test_memory.py checks these forms against real masks on the CPU."""
    excess = (1 - density) * (4 + value * (1 + moments) + anchor + fisher) * masked
    if union is not None:  # the masters outside the union, and the int32 positions of a mask's coordinates in it
        excess += (1 - union) * 8 * masked + (1 - density) * 4 * masked
    return int(excess)


def _masks_at_density(regs: Registries, cell: Cell, peak: int, notes: list[str], loaded: Loaded | None = None) -> int:
    """What an upper bound of a method whose masks have a set density (it declares them: :meth:`Method.mask_plan`,
    Expander-EWC and its kin) counts beyond the run, by :func:`whole_selection_excess`; 0 for any other method (the
    bound stands). The masters of low-precision weights hold the masks' union at the order's last task, when it is
    largest: ``T × density`` for masks kept apart, else ``1 − (1 − density)^T`` (independent draws, expected). The
    terms stay the bound's: the packed state is spread over several of them."""
    session = CellSession(regs, cell, torch.device("meta"), stream=_stream(regs, cell, loaded))
    order = session.order
    tasks = len(order)
    method = build_method(regs, cell, session.context())
    plan = method.mask_plan()  # the method's own declaration (Method.mask_plan); a composite declares none
    if plan is None:
        return 0
    layers = session.model().adaptable_layers().values()
    masked = sum(cast(torch.Tensor, layer.weight).numel() for layer in layers)  # Linear/Conv2d weights
    phase = method.phases(order[0], 0)[-1]  # the masked phase (a calibration one comes first)
    element = cast(torch.Tensor, next(iter(layers)).weight).element_size()  # bytes of a masked weight's element
    anchor = element if plan.anchor_at_masks else 0
    # the optimizer moments of each packed coordinate: torch's Adam two, RMSProp one (+ a momentum buffer), SGD its
    # momentum buffer
    moments = 2 if phase.optimizer in ("adam", "adamw") else int(phase.optimizer == "rmsprop") + int(phase.momentum > 0)
    d = plan.density
    union, value = None, 4
    if any(layer.weight.dtype != torch.float32 for layer in layers):
        if cell.train.fp32_masters and not plan.dense_first:  # (after a dense phase the masters are whole)
            union = min(1.0, tasks * d) if plan.disjoint else 1 - (1 - d) ** tasks
        else:  # packed and stepped in the weights' own dtype
            value = element
    fisher = 4 if plan.fisher_at_masks else 0
    excess = min(whole_selection_excess(masked, d, moments, union, anchor, value, fisher), peak)
    masters = "" if union is None else f"; float32 masters over the masks' union at task {tasks}, {union:.0%}"
    notes.append(
        f"masks at density {d:g}: the upper bound {fmt_bytes(peak)} less the packed state of the "
        f"coordinates outside them ({fmt_bytes(excess)}, memory.whole_selection_excess{masters}); the "
        "terms are the bound's"
    )
    return excess


def remedies(regs: Registries, cell: Cell, est: MemoryEstimate) -> list[str]:
    """Settings that shrink the largest terms of ``est``."""
    out = []
    top = {name for name, _ in est.largest()}
    if "activations" in top:
        micro = cell.train.micro_batch_size
        if micro > 1:
            out.append(
                f"--set train.grad_accum={cell.train.grad_accum * 2} (micro-batches of {micro // 2}: the same "
                "global batch)"
            )
        spec = regs.models.get(cell.model)
        if spec.setting(cell.model_cfg, "checkpointing") is False:
            out.append(f"--set model.{spec.checkpointing_field}=true")
    if "evaluation" in top:
        out.append(f"--set train.eval_batch_size={max(1, cell.train.eval_batch_size // 2)}")
    if (
        "optimizer" in top
        and cell.train.fp32_masters
        and getattr(cell.model_cfg, "dtype", None) in ("bfloat16", "float16")
    ):
        out.append(
            "--set train.fp32_masters=false (the optimizer steps the low-precision weights, its state in their dtype: "
            "8 bytes a weight fewer, small updates rounded away; docs/scale-out.md)"
        )
    if top & {"method", "activations"} and not cell.train.offload_state and cell.device_type != "cpu":
        out.append("--set train.offload_state=true (a Fisher and an anchor in host memory: the same numbers)")
    shardable = all(regs.methods.get(p).shardable for p in cell.parts if p in regs.methods)
    if top & set(SHARDED) and shardable and cell.train.shard == "off":
        ranks = ", ".join(f"{fmt_bytes(per_rank(est, n, built=built(cell, est)).peak)} at N={n}" for n in (2, 4, 8))
        out.append(
            f"--nproc N --set train.shard=full (the weights, gradients and optimizer state split over N ranks: "
            f"a rank's peak {ranks}; docs/scale-out.md)"
        )
    if top & set(SHARDED) and shardable and cell.train.shard == "off" and cell.device_type != "cpu":
        host = per_rank(est, 1, offload=True, built=built(cell, est))
        out.append(
            f"--set train.shard=offload (one device: the weights, gradients and optimizer state in host memory, "
            f"where the optimizer steps: {fmt_bytes(host.peak)} on the device, {fmt_bytes(host.host)} of host "
            "memory; docs/scale-out.md)"
        )
    if top & {"optimizer", "gradients", "method"}:
        out.append("a method that trains fewer weights (a LoRA method), or optimizer=sgd (no moment state)")
    return out


def plan_key(cell: Cell) -> str:
    """What decides a cell's plan: its settings, stream and order (cells that differ only by seed share one)."""
    return json.dumps([cell.resolved(), cell.stream, cell.order], sort_keys=True, default=str)


def plan_memory(
    regs: Registries, cells: list[Cell], progress: bool = False, cpu_fallback: bool = True
) -> list[tuple[Cell, MemoryEstimate | None]]:
    """An estimate per distinct configuration (cells that differ only by seed share one; the order stays, as it
    decides the first tasks' data): ``(first cell, estimate)``, None where ``cpu_fallback`` is off and the meta device
    could not run the cell's code."""
    from tqdm.auto import tqdm

    groups: dict[str, Cell] = {}
    for cell in cells:
        groups.setdefault(plan_key(cell), cell)
    out: list[tuple[Cell, MemoryEstimate | None]] = []
    loaded: Loaded = {}  # each stream's data loaded once for the plan
    for cell in tqdm(groups.values(), desc="memory plan", unit="cell", disable=not progress, leave=False):
        try:
            out.append((cell, estimate(regs, cell, cpu_fallback, loaded)))
        except NotEstimable:  # (any other error, data out of reach, is the run's own: it stops the command)
            out.append((cell, None))
    return out


def memory_table(rows: list[tuple[Cell, MemoryEstimate | None]], limit: int | None, card: Card | None = None) -> str:
    """The estimates as a markdown table, largest peak first; with ``card``, each cell's time on it at its dense
    peak (a lower bound, :mod:`clbench._exec.cards`)."""
    from tabulate import tabulate

    body = []
    for cell, est in sorted(rows, key=lambda r: -(r[1].peak if r[1] else 0)):
        timed = _time_on(card, cell, est)
        if est is None:
            body.append(
                [
                    cell.key,
                    "-",
                    "not estimated (the meta device cannot run its code)",
                    "",
                    *timed,
                    *[""] * (len(TERMS) + 1),
                ]
            )
            continue
        fits = "" if limit is None else ("fits" if est.peak <= limit else "DOES NOT FIT")
        compute = "-" if est.flops is None else fmt_flops(est.flops)
        body.append(
            [
                cell.key,
                est.device,
                f"{fmt_bytes(est.peak)} {fits}".strip(),
                compute,
                *timed,
                *(fmt_bytes(est.terms[t]) for t in TERMS),
                fmt_bytes(est.host) if est.host else "-",
            ]
        )
    at = [] if card is None else [f"time on {card.name} (peak {card.rate(None)[1]}/bf16)"]
    headers = ["cell", "measured on", "peak", "compute", *at, *TERMS, "host (offloaded)"]
    return tabulate(body, headers=headers, tablefmt="github")


def _time_on(card: Card | None, cell: Cell, est: MemoryEstimate | None) -> list[str]:
    """The time column's cell: the planned FLOPs at ``card``'s dense peak; nothing without a card."""
    if card is None:
        return []
    if est is None or est.flops is None:
        return ["-"]
    return [f"≥ {fmt_seconds(card.seconds(est.flops, cell.train.autocast))}"]


def grid_line(rows: list[tuple[Cell, MemoryEstimate | None]], cells: list[Cell], card: Card | None) -> str:
    """The grid's total below the table: its cells, their planned compute and, with ``card``, the lower bound of
    their time one after another on one such card."""
    flops_of = {plan_key(cell): None if est is None else est.flops for cell, est in rows}
    planned: list[tuple[float, str | None]] = []
    missing = 0
    for cell in cells:
        flops = flops_of.get(plan_key(cell))
        if flops is None:
            missing += 1
        else:
            planned.append((flops, cell.train.autocast))
    line = f"grid: {len(cells)} cells, {fmt_flops(int(sum(f for f, _ in planned)))} planned"
    if card is not None:
        line += (
            f"; on one {card.description} at its dense peak (bf16 under train.autocast, else TF32): "
            f"≥ {fmt_seconds(total_seconds(card, planned))}, the cells one after another (a lower bound: a run "
            "reaches a fraction of the peak)"
        )
    if missing:
        line += f"; {missing} cells without a planned compute are not counted"
    return line


def fmt_flops(n: int) -> str:
    """``2.3 PFLOP``: floating-point operations with an SI prefix."""
    for prefix, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {prefix}FLOP"
    return f"{n} FLOP"


def visible_device_memory() -> int | None:
    """The total memory of the first visible GPU, or None without one."""
    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).total_memory)
    return None


__all__ = [
    "TERMS",
    "LiveBytes",
    "MemoryEstimate",
    "estimate",
    "fmt_bytes",
    "meta_item",
    "parse_size",
    "plan_memory",
    "remedies",
    "whole_selection_excess",
]
