"""``train.offload_state``: EWC's and the masked methods' per-weight state in host memory changes no number, and
``train.fp32_masters=false`` steps bf16 weights (masked ones packed) in their own dtype."""

from __future__ import annotations

import pytest
import torch
from clbench_plugins._shared.masked.config import ExpanderEWCConfig
from clbench_plugins._shared.masked.method import ExpanderEWC, MaskedTraining
from clbench_plugins._shared.penalty import Offload, diagonal_fisher
from test_packnet_method import make_cell  # tests/ is on sys.path (rootdir conftest)
from torch import nn

from clbench import testing
from clbench._core.optim import PackedState, make_optimizer
from clbench.cell import FOOTPRINT_FILE
from clbench.method import Phase


def _offloaded_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """What an accelerator's offload does, on the CPU: the state is kept as a separate host copy and read from it."""

    def init(self: Offload, device: torch.device, enabled: bool) -> None:
        self.device, self.on = device, enabled

    monkeypatch.setattr(Offload, "__init__", init)


@pytest.mark.parametrize("method", ["ewc", "expander-ewc", "lota"])
def test_state_kept_on_the_host_gives_the_same_numbers(method, tmp_path, monkeypatch):
    """The second task trains under the first one's Fisher: the accuracy matrix, the metrics and the footprints are
    bit-identical with the state on the device and in host memory; Expander-EWC read its Fisher at the masks."""
    regs = testing.registry()
    (ref,) = testing.run(regs, tmp_path / "device", method)
    _offloaded_on_the_cpu(monkeypatch)
    reads: list[str] = []
    at_mask = MaskedTraining._fisher_at_mask
    monkeypatch.setattr(MaskedTraining, "_fisher_at_mask", lambda self, n: reads.append(n) or at_mask(self, n))
    (off,) = testing.run(regs, tmp_path / "host", method, sets={"train.offload_state": [True]})
    assert ref.status == off.status == "complete"
    assert off.config["train"]["offload_state"] is True and ref.config_hash == off.config_hash  # changes no number
    assert off.accuracy_matrix == ref.accuracy_matrix
    assert off.metrics == ref.metrics
    saved = [next((tmp_path / where).rglob(FOOTPRINT_FILE)).read_bytes() for where in ("device", "host")]
    assert saved[0] == saved[1]
    assert bool(reads) == (method == "expander-ewc")  # masks drawn before the task: the Fisher at the masks only


def test_the_fisher_at_a_mask_is_the_whole_fishers_values_there():
    """diagonal_fisher(at=masks) keeps a masked weight's Fisher packed at its mask: the whole one's values there,
    in the mask's order, and the whole one for the other parameters."""
    _, model, ctx = make_cell(ExpanderEWC, ExpanderEWCConfig())
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    masked = next(n for n, p in params.items() if p.dim() == 2)
    mask = torch.rand(params[masked].shape, generator=torch.Generator().manual_seed(0)) < 0.3
    task = ctx.order[0]
    args = (model, ctx.data(task).train, task, params, 16, 4, torch.device("cpu"))
    whole = diagonal_fisher(*args, torch.Generator().manual_seed(1))
    packed = diagonal_fisher(*args, torch.Generator().manual_seed(1), at={masked: mask})
    assert list(packed) == list(whole)
    assert torch.equal(packed[masked], whole[masked][mask]) and bool((packed[masked] > 0).any())
    assert all(torch.equal(packed[n], whole[n]) for n in whole if n != masked)


def test_masters_none_packs_masked_bf16_coordinates_in_bf16():
    """Without masters a masked bf16 weight's packed values and RMSProp's state are bf16, and the step is the one
    torch's RMSProp takes on the bf16 coordinates themselves."""
    torch.manual_seed(0)
    weight = nn.Parameter((torch.randn(16, 16) * 0.02).to(torch.bfloat16))
    packed = nn.Parameter(weight.detach().clone())
    mask = torch.rand(16, 16) < 0.5
    phase = Phase("p", 1, 1e-2, "rmsprop")
    opt = make_optimizer([weight], phase, [(weight, mask)], fp32_masters=False)
    reference = torch.nn.Parameter(packed.detach()[mask].clone())
    ref_opt = torch.optim.RMSprop([reference], lr=1e-2)
    assert isinstance(opt, PackedState) and opt.packed[0][2].dtype == torch.bfloat16
    for step in range(5):
        grad = torch.randn(16, 16, generator=torch.Generator().manual_seed(step)).to(torch.bfloat16)
        weight.grad = grad * mask
        reference.grad = grad[mask]
        opt.step()
        ref_opt.step()
    state = next(iter(opt.state.values()))
    assert state["square_avg"].dtype == torch.bfloat16
    assert torch.equal(weight.detach()[mask], reference.detach())
    assert torch.equal(weight.detach()[~mask], packed.detach()[~mask])


def test_a_plan_over_the_card_names_the_settings_that_shrink_masters_and_method_state():
    """A bf16 cell whose optimizer state and method state are its largest parts is pointed at
    ``train.fp32_masters=false`` and ``train.offload_state=true``; an fp32 cell, or one already set so, is not."""
    from types import SimpleNamespace

    from clbench._exec import memory
    from clbench.config import TrainConfig

    est = memory.MemoryEstimate("k", {"optimizer": 60, "method": 30, "weights": 15, "activations": 1}, 106, "meta")

    def cell(dtype: str, **train: object) -> SimpleNamespace:
        return SimpleNamespace(train=TrainConfig(**train), model_cfg=SimpleNamespace(dtype=dtype), device_type="cuda",
                               parts=("ewc",))

    said = " ".join(memory.remedies(testing.registry(), cell("bfloat16"), est))  # type: ignore[arg-type]
    assert "train.fp32_masters=false" in said and "train.offload_state=true" in said
    said = " ".join(memory.remedies(testing.registry(), cell("float32"), est))  # type: ignore[arg-type]
    assert "fp32_masters" not in said and "train.offload_state=true" in said
    done = cell("bfloat16", fp32_masters=False, offload_state=True)
    said = " ".join(memory.remedies(testing.registry(), done, est))  # type: ignore[arg-type]
    assert "fp32_masters" not in said and "offload_state" not in said


def test_the_paper_expander_profile_keeps_its_penalty_state_in_host_memory(tmp_path):
    from clbench._core.plan import RunRequest, make_plan

    regs = testing.registry()
    req = RunRequest(profile="paper-expander", methods="expander-ewc", streams=["capability-chain"],
                     orders=["gsm8k-sql"], seeds=[0], out=tmp_path)
    (cell,) = make_plan(regs, req).cells
    assert cell.train.offload_state is True and cell.train.fp32_masters is True  # masters: the default
