"""check_model: a model built by the runner's own builders: it trains, predicts label indices, round trips its
state, and completes a cell."""

from __future__ import annotations

import io
from pathlib import Path

import torch
from torch import Tensor

from clbench._core.boundary import CheckedMethod
from clbench._core.plan import make_plan
from clbench._core.registry import Registries
from clbench._exec.session import build_method, build_model, build_stream, method_label
from clbench._exec.step import train_task
from clbench.cell import Cell, CellResult
from clbench.data import Batch, Stream
from clbench.errors import ClbenchError
from clbench.method import CellContext, Method, derive_seed, seed_torch
from clbench.model import CLModel
from clbench.specs import MethodSpec, ModelSpec
from clbench.testing.contract import _check_matrix, _complete, _fail, _require, _same, _who
from clbench.testing.running import _profile_for, _request, run


def _stream_for_model(regs: Registries, spec: ModelSpec, method: MethodSpec) -> str | None:
    """A tiny stream the model takes (the digits stream for image-only models, when installed)."""
    if not method.requires <= spec.provides:
        return None
    for stream, modality in (("tiny-vector", "vector"), ("tiny-text", "text"), ("split-digits", "image")):
        if (
            modality in spec.modalities
            and (not method.modalities or modality in method.modalities)
            and (stream in regs.streams)
        ):
            return stream
    return None


def check_model(
    regs: Registries, name: str, tmp_path: Path, *, stream: str | None = None, method: str = "seqft"
) -> CellResult:
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
    _require(
        stream is not None,
        f"{who}: no tiny stream takes modalities {sorted(spec.modalities)} with method {method!r}; pass stream='NAME'",
    )
    assert stream is not None
    profile = _profile_for(regs, stream, name)
    cell = make_plan(regs, _request(tmp_path / "check-model", method, stream, profile, model=name)).cells[0]
    stream_obj = build_stream(regs, cell)
    order_name = cell.order  # the first order the profile runs
    order = stream_obj.order(order_name)
    device = torch.device(cell.device_type)

    def build(seed_salt: int) -> tuple[CLModel, Method]:
        ctx = CellContext(
            stream=stream_obj, order=order, train=cell.train, device=device, seed=cell.seed, options=dict(cell.options)
        )
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
        _require(
            torch.equal(preds[t], again[t]),
            f"{who}: a fresh model loaded from state_dict() predicts differently on task {t!r}: state that "
            "predictions depend on is missing from state_dict() (register tensors as parameters or buffers)",
        )

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
        train_task(model, CheckedMethod(meth, method_label(regs, cell)), meth.ctx, 0)
    except ClbenchError as exc:
        if "no trainable parameters" in str(exc):
            _fail(
                f"{who}: {method} finds no trainable parameters in it ({exc}); a model meant for adapters only "
                "is checked with check_model(..., method='seqlora')"
            )
        raise
    meth.after_task(task, 0)
    changed = [
        n for n, p in model.named_parameters() if id(p) in trained and not torch.equal(p.detach(), trained[id(p)][1])
    ]
    _require(
        changed,
        f"{who}: one task of {method} training changed none of its weights: does forward() detach "
        "its output, or keep weights outside registered nn.Parameters / submodules?",
    )


def _check_state_round_trip(model: CLModel, meth: Method, fresh: CLModel, fresh_method: Method, who: str) -> None:
    """The model's and method's state dicts, through torch.save and torch.load(weights_only=True) as a checkpoint
    is, load into a freshly built pair, whose state is then the same."""
    state = io.BytesIO()
    torch.save({"model": model.state_dict(), "method": meth.state_dict()}, state)
    state.seek(0)
    try:
        payload = torch.load(state, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise AssertionError(
            f"{who}: its state_dict() does not load with torch.load(weights_only=True), as a "
            f"checkpoint is read ({type(exc).__name__}: {exc}); keep only tensors in it"
        ) from exc
    try:
        fresh_method.load_state_dict(payload["method"])
        fresh.load_state_dict(payload["model"])
    except Exception as exc:
        raise AssertionError(
            f"{who}: a freshly built model does not load its state_dict() ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:400]}): the structure must not depend on training"
        ) from exc
    mine, theirs = model.state_dict(), fresh.state_dict()
    _require(
        mine.keys() == theirs.keys() and all(_same(mine[k], theirs[k]) for k in mine),
        f"{who}: after load_state_dict(state_dict()) a fresh model's state differs: "
        f"{sorted(k for k in mine.keys() | theirs.keys() if k not in mine or k not in theirs or not _same(mine[k], theirs[k]))[:5]}",
    )


@torch.no_grad()
def _check_predict(
    model: CLModel, method: Method, stream: Stream, order: list[str], batch_size: int, device: torch.device, who: str
) -> dict[str, Tensor]:
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
        _require(
            isinstance(pred, Tensor), f"{where} returned {type(pred).__name__}, expected a tensor of label indices"
        )
        _require(
            tuple(pred.shape) == (n,),
            f"{where} returned shape {tuple(pred.shape)}, expected ({n},): one "
            "label index per input (argmax over the label logits)",
        )
        _require(
            not pred.is_floating_point() and pred.dtype != torch.bool,
            f"{where} returned {pred.dtype}, expected integer label indices",
        )
        k = stream.task(task).num_classes
        bad = sorted({int(v) for v in pred.cpu().tolist() if not 0 <= int(v) < k})
        _require(
            not bad,
            f"{where} returned labels {bad[:5]} outside 0..{k - 1}: task {task!r} has {k} labels "
            f"{stream.task(task).labels}; predict must return indices into TaskInfo.labels",
        )
        out[task] = pred.cpu()
    model.train(was_training)
    return out
