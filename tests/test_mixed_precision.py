"""bf16 models: fp32 masters for every trainable weight, fp32 adapters, fp32 merges with their error recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
from clbench_plugins._shared.lora.adapters import MERGE_ERROR_LIMIT, Adapters
from clbench_plugins._shared.lora.config import LoRAConfig
from torch import Tensor, nn
from torch.optim.optimizer import register_optimizer_step_post_hook

import clbench._exec.engine as engine
import clbench._exec.step as runner
from clbench import footprints as fps
from clbench import testing
from clbench._core.optim import Masters, PackedState, make_optimizer, torch_optimizer
from clbench.cell import FOOTPRINT_FILE
from clbench.config import TrainConfig
from clbench.hookspecs import hookimpl
from clbench.method import CellContext, Method, Phase
from clbench.model import CLModel, StreamInfo
from clbench.specs import ModelSpec

BF16 = torch.bfloat16


class Net(CLModel):
    """Two Linear layers of std 0.02 (an LLM's init) held in ``dtype``; the forward computes in ``compute``."""

    def __init__(self, info: StreamInfo, dtype: torch.dtype, compute: torch.dtype = BF16, dim: int = 8) -> None:
        super().__init__()
        self.info, self.compute = info, compute
        torch.manual_seed(0)
        self.hidden, self.out = nn.Linear(dim, 64), nn.Linear(64, 2)
        for p in self.parameters():
            nn.init.normal_(p, std=0.02)
        self.to(dtype)
        self.lora_targets = ["hidden"]

    def _linear(self, layer: nn.Linear, x: Tensor) -> Tensor:
        return nn.functional.linear(x.to(self.compute), layer.weight.to(self.compute), layer.bias.to(self.compute))

    def forward(self, x: Tensor, task: str) -> Tensor:
        return self._linear(self.out, torch.tanh(self._linear(self.hidden, x))).float()


def _train(dtype: torch.dtype, start: dict[str, Tensor] | None = None, tasks: int = 1, n: int = 128,
           fp32_masters: bool = True) -> tuple[Net, dict[str, Tensor], list[Tensor]]:
    """Tasks of RMSProp at lr 1e-6 through the runner's loop, forward in bf16: the model, its start and the
    tensors the torch optimizer stepped last (the fp32 masters of a bf16 model, unless ``fp32_masters`` is off)."""
    stream = testing.TinyVectorStream(tasks=tasks, n=n)
    train = TrainConfig(batch_size=4, epochs=2, optimizer="rmsprop", lr=1e-6, fp32_masters=fp32_masters)
    ctx = CellContext(stream=stream, order=stream.order("1"), train=train, device=torch.device("cpu"), seed=0)
    model = Net(StreamInfo.of(stream), dtype)
    if start is not None:
        model.load_state_dict(start)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stepped: list[list[Tensor]] = []
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: stepped.append(opt.param_groups[0]["params"]))
    try:
        method = Method(None, ctx)
        method.setup(model)
        for index in range(tasks):
            runner.train_task(model, method, ctx, index)
    finally:
        handle.remove()
    return model, before, stepped[-1]


def _relative(a: Tensor, b: Tensor) -> float:
    return float(torch.linalg.vector_norm(a.detach() - b.detach()) / torch.linalg.vector_norm(b.detach()))


def test_a_bf16_model_trained_with_rmsprop_at_lr_1e_6_realises_its_fp32_update():
    bf16, start, masters = _train(BF16)
    fp32, _, _ = _train(torch.float32, {k: v.float() for k, v in start.items()})
    names = [n for n, _ in bf16.named_parameters()]
    assert len(masters) == len(names) and all(m.dtype == torch.float32 for m in masters)
    for name, master, weight in zip(names, masters, bf16.parameters(), strict=True):
        # the fp32 run (fp32 weights, the same bf16 forward: autocast's semantics) from the same start
        reference = fp32.state_dict()[name] - start[name].float()
        assert _relative(master.view_as(weight) - start[name].float(), reference) < 0.01, name
        assert torch.equal(weight.detach(), master.view_as(weight).to(BF16))  # the weight is its rounding


def test_without_fp32_masters_the_optimizer_steps_the_bf16_weights_and_rounds_most_of_the_update_away():
    """``train.fp32_masters=false``: the torch optimizer steps the bf16 weights themselves, its state bf16 (no master in
    the stash, no float32 tensor stepped), which is what a bf16 model under a plain torch optimizer gets: the same
    run realises under half of the float32 update, the loss the masters exist to avoid."""
    bf16, start, stepped = _train(BF16, fp32_masters=False)
    assert [t.dtype for t in stepped] == [BF16] * 4 and all(isinstance(t, nn.Parameter) for t in stepped)
    fp32, _, _ = _train(torch.float32, {k: v.float() for k, v in start.items()})
    name = "hidden.weight"
    reference = fp32.state_dict()[name] - start[name].float()
    realised = bf16.state_dict()[name].float() - start[name].float()
    assert float((realised * reference).sum() / reference.pow(2).sum()) < 0.5  # what the review found


def test_masked_bf16_coordinates_get_packed_fp32_masters_and_take_a_methods_edits():
    torch.manual_seed(0)
    weight = nn.Parameter((torch.randn(16, 16) * 0.02).to(BF16))
    reference = nn.Parameter(weight.detach().float())
    mask = torch.rand(16, 16) < 0.5
    phase = Phase("p", 1, 1e-6, "rmsprop")
    opt = make_optimizer([weight], phase, [(weight, mask)])
    ref_opt = make_optimizer([reference], phase, [(reference, mask)])
    assert isinstance(opt, PackedState) and opt.packed[0][2].dtype == torch.float32
    g = torch.Generator().manual_seed(1)
    for _ in range(100):
        grad = torch.randn(16, 16, generator=g) * mask
        weight.grad = grad.to(BF16)
        reference.grad = weight.grad.float()  # the gradient the bf16 model gets
        opt.step()
        ref_opt.step()
    master, start = opt.packed[0][2].detach(), weight.detach().float()[mask]
    assert torch.equal(master, reference.detach()[mask])  # same start, same gradients: the fp32 numbers exactly
    assert torch.equal(weight.detach()[mask], master.to(BF16))
    assert _relative(weight.detach()[mask].float() - start, master - start) > 0  # (bf16 alone cannot hold them)
    with torch.no_grad():  # a method edits one coordinate (a projection, a restored value): the master takes it
        first = int(mask.reshape(-1).nonzero()[0])
        weight.view(-1)[first] = 0.5
    weight.grad = torch.zeros(16, 16, dtype=BF16)
    kept = master.clone()
    opt.step()  # RMSProp with a zero gradient and no momentum does not move
    assert float(master[0]) == 0.5 and torch.equal(master[1:], kept[1:])


def test_masked_bf16_masters_hold_only_their_masks_union_and_give_whole_masters_numbers():
    """Three phases (tasks) with overlapping masks, then one trained whole: the masters equal fp32 training with the
    same masks and gradients exactly (what whole masters give: an fp32 weight has no rounding to lose), while they
    hold 8 bytes (an fp32 value, an int32 index) for each coordinate of the masks' union only."""
    torch.manual_seed(0)
    weight = nn.Parameter((torch.randn(32, 32) * 0.02).to(BF16))
    reference = nn.Parameter(weight.detach().float())
    masters = Masters()
    g = torch.Generator().manual_seed(2)
    masks = [torch.rand(32, 32, generator=g) < 0.1 for _ in range(3)] + [None]
    union = torch.zeros(32, 32, dtype=torch.bool)
    for mask in masks:
        phase = Phase("p", 1, 1e-6, "rmsprop")
        coords = [] if mask is None else [(weight, mask)]
        opt = make_optimizer([weight], phase, coords, masters)
        ref_opt = make_optimizer([reference], phase, [] if mask is None else [(reference, mask)])
        for _ in range(20):
            grad = torch.randn(32, 32, generator=g) * (1 if mask is None else mask)
            weight.grad = grad.to(BF16)
            reference.grad = weight.grad.float()
            opt.step()
            ref_opt.step()
        assert torch.equal(masters.value(weight), reference.detach())
        if mask is not None:
            union |= mask
            assert masters.nbytes() == 8 * int(union.sum()) < 4 * weight.numel()
    assert masters.nbytes() == 4 * weight.numel()  # trained whole: a whole master
    assert (weight.detach().float() != reference.detach()).any()  # (bf16 alone could not have held them)


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_bf16_parameters_are_stepped_one_at_a_time_with_the_same_numbers(optimizer):
    """Each low-precision parameter's fp32 gradient exists only while it is stepped (an 8B model's would take 30 GiB at
    once): the masters equal one fp32 optimizer's over every parameter at once, bit for bit, a fp32 parameter beside
    them is stepped once a step, and a step holds well under one fp32 copy of every gradient."""
    from clbench._exec.memory import LiveBytes

    torch.manual_seed(0)
    weights = [nn.Parameter((torch.randn(64, 64) * 0.02).to(BF16)) for _ in range(12)]
    plain = nn.Parameter(torch.randn(8))  # fp32: stepped by the same inner optimizer, once
    references = [nn.Parameter(w.detach().float()) for w in weights] + [nn.Parameter(plain.detach().clone())]
    phase = Phase("p", 1, 1e-3, optimizer)
    opt = make_optimizer([*weights, plain], phase)
    ref = torch_optimizer(references, phase)
    g = torch.Generator().manual_seed(1)
    peaks = []
    for _ in range(5):
        for w, r in zip([*weights, plain], references, strict=True):
            w.grad = torch.randn(w.shape, generator=g).to(w.dtype)
            r.grad = w.grad.float()
        mode = LiveBytes()
        for t in (*weights, plain, *(w.grad for w in [*weights, plain]), *(v for _, _, v in opt.packed),
                  *(x for st in opt.state.values() for x in st.values())):
            mode.add(t)  # what lives before the step: only what the step adds counts
        mode.reset_peak()
        before = mode.now
        with mode:
            opt.step()
        peaks.append(mode.peak - before)
        ref.step()
    for w, r in zip(weights, references[:-1], strict=True):
        assert torch.equal(_masters(opt).value(w), r.detach())
    assert torch.equal(plain.detach(), references[-1].detach())
    every_grad_fp32 = sum(w.numel() for w in weights) * 4
    # one parameter's fp32 gradient and the optimizer's temporaries for it (Adam: 3 fp32 copies of one parameter)
    assert max(peaks[1:]) <= 3 * 64 * 64 * 4 < every_grad_fp32 / 2  # (the first step creates the state)


def _masters(opt: PackedState) -> Masters:
    masters = Masters()
    for p, index, values in opt.packed:
        if index is None and values.dtype != p.dtype:
            masters.tensors[id(p)] = (p, None, values)
    return masters


def test_masters_outlive_the_task_so_updates_below_the_ulp_are_kept():
    """Two tasks of 10 steps: each task's movement is below bf16's ulp; the masters carry it to the next task."""
    bf16, start, masters = _train(BF16, tasks=2, n=20)
    fp32, _, _ = _train(torch.float32, {k: v.float() for k, v in start.items()}, tasks=2, n=20)
    for (name, weight), master in zip(bf16.named_parameters(), masters, strict=True):
        reference = fp32.state_dict()[name]
        assert torch.equal(master.view_as(weight), reference), name  # what a master restarted per task is not
        assert (weight.detach() == start[name]).float().mean() > 0.2  # (many bf16 weights show no movement yet)


def test_masters_go_into_the_checkpoint_by_parameter_name():
    model = Net(StreamInfo.of(testing.TinyVectorStream()), BF16)
    masters = Masters()
    master = masters.of(model.hidden.weight)
    master.add_(1e-6)
    names = {id(p): n for n, p in model.named_parameters()}
    fresh = Net(StreamInfo.of(testing.TinyVectorStream()), BF16)
    again = Masters()
    again.load_state_dict(masters.state_dict(names), dict(fresh.named_parameters()))
    assert torch.equal(again.of(fresh.hidden.weight), master)
    # a masked weight's master: its coordinates and their values
    index = torch.tensor([1, 5, 7], dtype=torch.int32)
    packed, where = masters.at(model.out.weight, index)
    assert where is None and torch.equal(packed, model.out.weight.detach().reshape(-1)[index.long()].float())
    packed.add_(1e-6)
    again.load_state_dict(masters.state_dict(names), dict(fresh.named_parameters()))
    assert torch.equal(again.value(fresh.out.weight).reshape(-1)[index.long()], packed)


@dataclass(frozen=True)
class NetConfig:
    hidden: Any = None  # (the test profile's presets for tiny-vector set it; Net has its own width)


class Bf16Plugin:
    @hookimpl
    def clbench_add_models(self):
        return [ModelSpec("bf16-net", lambda config, info: Net(info, BF16), NetConfig)]


@pytest.mark.parametrize("method", ["seqft", "expander-ewc"])
def test_a_resumed_bf16_cell_follows_the_uninterrupted_one(tmp_path, method):
    """The masters cross the checkpoint: task 2 of a cell killed after task 1 moves as in one go (footprints); for a
    masked method, the masters of its first mask's coordinates, grown by the second's."""
    regs = testing.registry(Bf16Plugin())
    kw = dict(model="bf16-net", sets={"train.optimizer": ["rmsprop"], "train.lr": [1e-6], "train.batch_size": [4],
                                      "train.checkpoint_every_s": [0]})
    [reference] = testing.run(regs, tmp_path / "ref", method, **kw)
    killer = testing.KillAfterTask(0)
    regs.pm.register(killer)
    with pytest.raises(KeyboardInterrupt):
        testing.run(regs, tmp_path / "killed", method, **kw)
    regs.pm.unregister(killer)
    [resumed] = testing.run(regs, tmp_path / "killed", method, **kw)
    one, two = (fps.load(r.path.parent / FOOTPRINT_FILE) for r in (reference, resumed))
    for task_one, task_two in zip(one, two, strict=True):
        for name, fp in task_one.items():
            assert torch.equal(fp.dense(), task_two[name].dense()), name
    assert resumed.accuracy_matrix == reference.accuracy_matrix


def test_fp32_models_take_the_plain_torch_optimizer():
    params = list(nn.Linear(4, 4).parameters())
    assert isinstance(make_optimizer(params, Phase("p", 1, 0.1)), torch.optim.SGD)


# ------------------------------------------------------------------ adapters and merges
def _adapted(rms: float) -> tuple[Net, Adapters, Tensor]:
    """A bf16 Net with an adapter on ``hidden`` whose update ΔW (fp32) has entries of rms ``rms``."""
    model = Net(StreamInfo.of(testing.TinyVectorStream()), BF16)
    adapters = Adapters(model, LoRAConfig(rank=4, alpha=8, dropout=0.0))
    layer = model.hidden
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        layer.lora_A.copy_(torch.randn(4, 8, generator=g))
        layer.lora_B.copy_(torch.randn(64, 4, generator=g))
        delta = layer.lora_B @ layer.lora_A * adapters.scale
        layer.lora_B.mul_(rms / float(delta.pow(2).mean().sqrt()))
    return model, adapters, (layer.lora_B @ layer.lora_A * adapters.scale).detach()


# bf16 keeps 8 significant bits: one rounding of an output entry is 2^-9 relative. The adapted function (hidden
# layer's output) stays within 2^-7 of the fp32 function W + ΔW, merged or not.
FUNCTION_TOLERANCE = 2**-7


@pytest.mark.parametrize("rms", [1e-4, 3e-2], ids=["small-update-kept-unmerged", "large-update-merged"])
def test_a_bf16_merge_is_made_in_fp32_measured_and_keeps_the_function(rms):
    model, adapters, delta = _adapted(rms)
    layer = model.hidden
    assert layer.lora_A.dtype == torch.float32 and layer.weight.dtype == BF16
    W0 = layer.weight.detach().float().clone()
    x = torch.randn(32, 8).to(BF16)
    reference = x.float() @ (W0 + delta).T + layer.bias.float()  # the fp32 function
    adapters.finish_task(0, merge=True)
    expected_error = _relative((W0 + delta).to(BF16).float() - W0, delta)  # one rounding of W + ΔW
    record = adapters.merges[0]
    assert record["error"] == pytest.approx(expected_error, rel=1e-4)
    merged = expected_error <= MERGE_ERROR_LIMIT
    assert record["unmerged_layers"] == (0 if merged else 1) and merged == (rms > 1e-2)
    if merged:
        assert torch.equal(layer.weight.detach(), (W0 + delta).to(BF16))
    else:  # W untouched, the update exact in the hook's frozen fp32 factors
        assert torch.equal(layer.weight.detach().float(), W0)
        frozen_A, frozen_B = adapters.hooks["hidden"].frozen
        torch.testing.assert_close(frozen_B @ frozen_A, delta)
    out = layer(x).float()
    assert _relative(out, reference) < FUNCTION_TOLERANCE
    # resuming rebuilds the unmerged factors from the recorded history
    fresh, again, _ = _adapted(rms)
    again.load_state_dict(adapters.state_dict())
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(fresh.hidden(x), layer(x)) and again.merges == adapters.merges


def test_fp32_merges_are_unchanged_and_unrecorded():
    model, _ = testing.TinyTextModel(StreamInfo.of(testing.TinyTextStream()), dim=16), None
    adapters = Adapters(model, LoRAConfig())
    with torch.no_grad():
        for A, B in adapters.current().values():
            A.normal_()
            B.normal_()
    layer = model.blocks[0]["q"]
    expected = layer.weight.detach() + (layer.lora_B.float() @ layer.lora_A.float()) * adapters.scale
    adapters.finish_task(0, merge=True)
    assert torch.equal(layer.weight.detach(), expected) and adapters.merges == [] and adapters.unmerged == []


def test_a_bf16_cells_footprint_is_its_fp32_masters_movement():
    """RMSProp at lr 1e-6 moves bf16 coordinates by an ulp or less: the weight's own change is its rounding (a third
    off the true movement in norm here), the footprint is the fp32 masters' movement, exactly."""
    stream = testing.TinyVectorStream(tasks=1, n=128)
    train = TrainConfig(batch_size=4, epochs=2, optimizer="rmsprop", lr=1e-6)
    ctx = CellContext(stream=stream, order=stream.order("1"), train=train, device=torch.device("cpu"), seed=0)
    model = Net(StreamInfo.of(stream), BF16)
    start = model.hidden.weight.detach().clone()
    method = Method(None, ctx)
    method.setup(model)
    method.before_task(ctx.order[0], 0)
    runner.train_task(model, method, ctx, 0)
    delta = method.footprint(ctx.order[0], 0)["hidden.weight"].delta
    master = runner.cell_masters(ctx).value(model.hidden.weight)
    assert master is not None and delta.dtype == torch.float32
    assert torch.equal(delta, master - start.float())
    realised = model.hidden.weight.detach().float() - start.float()
    assert _relative(realised, delta) > 0.2 and float((delta != 0).float().mean()) > 0.9


def test_a_bf16_weight_trained_whole_then_at_a_mask_keeps_one_master():
    """LoTA's order: a dense calibration phase (a whole master, stepped by its optimizer) and then a masked phase from
    the same master: the masked phase steps a fresh packed copy of the master at the mask, and both phases give the
    float32 run's numbers exactly."""
    torch.manual_seed(0)
    weight = nn.Parameter((torch.randn(16, 16) * 0.02).to(BF16))
    reference = nn.Parameter(weight.detach().float())
    masters = Masters()
    mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(3)) < 0.3
    g = torch.Generator().manual_seed(4)
    for coords in ([], [(weight, mask)]):
        phase = Phase("p", 1, 1e-6, "rmsprop")
        opt = make_optimizer([weight], phase, coords, masters)
        ref_opt = make_optimizer([reference], phase, [(reference, mask)] if coords else [])
        for _ in range(10):
            grad = torch.randn(16, 16, generator=g) * (mask if coords else 1)
            weight.grad = grad.to(BF16)
            reference.grad = weight.grad.float()
            opt.step()
            ref_opt.step()
        assert torch.equal(masters.value(weight), reference.detach())


# --------------------------------------------------------------------------- train.autocast
def test_autocast_runs_each_training_forward_in_bf16_and_keeps_fp32_weights_and_gradients(tmp_path):
    """train.autocast=bfloat16 on a float32 model: the logits a method sees are bf16 (the linear layers ran under
    autocast), the task loss float32, weights and gradients float32; with it off, float32 throughout."""
    seen: dict[str, set[Any]] = {"logits": set(), "grads": set(), "weights": set()}

    class Spy(Method):
        def loss_terms(self, batch, logits):  # noqa: ANN001, ANN201
            seen["logits"].add(logits.dtype)
            return {}

        def after_backward(self) -> None:
            seen["grads"].update(p.grad.dtype for p in self.model.parameters() if p.grad is not None)
            seen["weights"].update(p.dtype for p in self.model.parameters())

        def setup(self, model):  # noqa: ANN001, ANN201
            super().setup(model)
            self.model = model

    class Plugin:
        @hookimpl
        def clbench_add_methods(self):  # noqa: ANN201
            from clbench.specs import MethodSpec

            return [MethodSpec("spy", Spy, description="records dtypes")]

    regs = testing.registry(Plugin())
    for mode, expected in (("bfloat16", BF16), ("off", torch.float32)):
        seen = {k: set() for k in seen}
        [r] = testing.running.run(regs, tmp_path / mode, "spy", sets={"train.autocast": [mode]}, orders=["1"])
        assert r.status == "complete", r.error
        assert seen == {"logits": {expected}, "grads": {torch.float32}, "weights": {torch.float32}}, mode
        assert ("autocast" in r.config["train"]) and (r.config["train"]["autocast"] == mode)


def test_autocast_is_part_of_the_identity_only_when_on():
    from clbench.cell import identity

    resolved = {"train": {"lr": 0.1, "autocast": "off"}}
    assert "autocast" not in identity(resolved, "s", "1", 0)["train"]
    assert identity({"train": {"lr": 0.1, "autocast": "bfloat16"}}, "s", "1", 0)["train"]["autocast"] == "bfloat16"


class _Plain(CLModel):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 2))

    def forward(self, x: Tensor, task: str) -> Tensor:
        return self.net(x)


def test_the_loss_under_autocast_is_the_loss_computed_under_torch_autocast_by_hand():
    from clbench._core.boundary import CheckedMethod

    model = _Plain()
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    method = CheckedMethod(Method(None, None), "seqft")
    loss, _, _ = engine.batch_loss(model, method, runner.Batch(x, y, "t"), amp=BF16)
    with torch.autocast("cpu", dtype=BF16):
        by_hand = torch.nn.functional.cross_entropy(model(x, "t"), y)
    assert loss.dtype == torch.float32 and torch.equal(loss, by_hand)
    assert not torch.equal(loss, torch.nn.functional.cross_entropy(model(x, "t"), y))  # bf16 moved it
