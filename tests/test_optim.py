"""PackedState: the torch optimizer's own update on the masked coordinates, with mask-sized state."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from clbench._core.optim import PackedState, make_optimizer
from clbench.errors import ClbenchError
from clbench.method import Phase


def run(phase: Phase, packed: bool, steps: int = 5) -> tuple[list[nn.Parameter], torch.Tensor, object]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(12, 9), nn.Tanh(), nn.Linear(9, 3))
    mask = torch.rand(9, 12) < 0.3
    params = list(net.parameters())
    opt = make_optimizer(params, phase, [(net[0].weight, mask)] if packed else ())
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, 12, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(x), y).backward()
        net[0].weight.grad.mul_(mask)  # what a mask method does in after_backward
        opt.step()
    return params, mask, opt


@pytest.mark.parametrize("phase", [
    Phase("sgd", 1, 0.1, "sgd", momentum=0.9),
    Phase("adam", 1, 0.01, "adam"),
    Phase("rmsprop", 1, 0.01, "rmsprop", momentum=0.5),
], ids=lambda p: p.name)
def test_packed_state_moves_the_weights_exactly_as_the_dense_optimizer(phase):
    dense, _, dense_opt = run(phase, packed=False)
    packed, mask, packed_opt = run(phase, packed=True)
    for a, b in zip(dense, packed, strict=True):
        assert torch.equal(a, b)
    assert isinstance(packed_opt, PackedState)
    # state of the masked matrix: one nnz-sized vector per buffer instead of one 9×12 matrix
    dense_numel = sum(t.numel() for t in dense_opt.state[dense[0]].values() if t.dim() > 0)
    packed_numel = sum(t.numel() for t in packed_opt.state[packed_opt.packed[0][2]].values() if t.dim() > 0)
    buffers = dense_numel // dense[0].numel()
    assert buffers >= 1 and packed_numel == buffers * int(mask.sum())


def test_weight_decay_touches_only_the_masked_coordinates():
    phase = Phase("adamw", 1, 0.01, "adamw", weight_decay=0.1)
    # one step: after it, decay of the dense run's unmasked weights would change every later gradient
    dense, mask, _ = run(phase, packed=False, steps=1)
    packed, _, _ = run(phase, packed=True, steps=1)
    torch.manual_seed(0)
    start = nn.Linear(12, 9).weight.detach()
    assert torch.equal(packed[0][~mask], start[~mask])  # decay did not reach them
    assert not torch.equal(dense[0][~mask], start[~mask])  # (it does for the dense optimizer)
    assert torch.equal(packed[0][mask], dense[0][mask])
    for a, b in zip(dense[1:], packed[1:], strict=True):  # parameters without a mask: the same update
        assert torch.equal(a, b)


def test_a_mask_of_the_wrong_shape_is_refused():
    p = nn.Parameter(torch.zeros(3, 4))
    with pytest.raises(ClbenchError, match=r"shape \(4, 3\)"):
        make_optimizer([p], Phase("t", 1, 0.1), [(p, torch.ones(4, 3, dtype=torch.bool))])
