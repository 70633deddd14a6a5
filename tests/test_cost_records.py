"""What a result records of what its cell cost and where it ran: examples forwarded (and of them with gradients),
counted by the harness; the CPU's vector kernels."""

from __future__ import annotations

import copy

import torch

from clbench import testing
from clbench._exec.compute import ExampleCounter


def _train_sizes(result) -> list[int]:
    stream = testing.TinyVectorStream()
    return [len(stream.data(t).train) for t in result.tasks]


def test_plain_training_forwards_each_training_example_once_an_epoch_with_gradients(tmp_path):
    regs = testing.registry()
    [seqft] = testing.run(regs, tmp_path / "a", "seqft")
    [lwf] = testing.run(regs, tmp_path / "b", "lwf")
    assert seqft.env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # AVX2, AVX512, ...
    epochs = seqft.config["train"]["epochs"]
    sizes = _train_sizes(seqft)
    tasks = seqft.timings["tasks"]
    assert [t["examples_grad"] for t in tasks] == [epochs * n for n in sizes]
    assert [t["examples_forward"] for t in tasks] == [epochs * n for n in sizes]
    # LwF on a stream with a head per task: from the second task on, every batch goes through the teacher (a copy of
    # the model, without gradients) and through the student again for each earlier task's head (with gradients)
    assert [t["examples_grad"] for t in lwf.timings["tasks"]] == [epochs * n * (1 + i) for i, n in enumerate(sizes)]
    assert [t["examples_forward"] for t in lwf.timings["tasks"]] == [
        epochs * n * (1 + 2 * i) for i, n in enumerate(sizes)
    ]


def test_the_counter_counts_copies_only_while_active_and_gradients_apart():
    counter = ExampleCounter()
    model = torch.nn.Linear(3, 2)
    handle = counter.attach(model)
    model(torch.zeros(4, 3))  # inactive: not counted
    counter.active = True
    model(torch.zeros(5, 3))
    with torch.no_grad():
        copy.deepcopy(model)(torch.zeros(7, 3))  # a copy keeps the hook, and counts into the same counter
    assert counter.take() == (12, 5) and counter.take() == (0, 0)
    handle.remove()
    model(torch.zeros(2, 3))
    assert counter.take() == (0, 0)


def test_flop_count_is_two_per_multiply_add_of_each_product_forward_and_backward():
    """An MLP 20-16-3 on a batch of 8, its input without a gradient: forward 2·B·(20·16 + 16·3); backward the two
    weight gradients (the same again) and the second layer's input gradient (2·B·16·3), no input gradient of the
    first. The meta device counts the same."""
    from clbench._exec.compute import FlopCount

    batch, width_in, hidden, width_out = 8, 20, 16, 3
    for device in ("cpu", "meta"):
        net = torch.nn.Sequential(
            torch.nn.Linear(width_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width_out)
        )
        x = torch.randn(batch, width_in, device=device)
        y = torch.zeros(batch, dtype=torch.long, device=device)
        with FlopCount() as count:
            torch.nn.functional.cross_entropy(net.to(device)(x), y).backward()
        assert count.total == 4 * batch * width_in * hidden + 6 * batch * hidden * width_out


def test_the_planned_flops_are_the_steps_and_the_test_batches_of_every_evaluation():
    from dataclasses import replace

    from clbench._exec.compute import planned_flops
    from clbench.config import TrainConfig

    train = TrainConfig(epochs=3, batch_size=10, eval_batch_size=4)
    splits = [(25, 9), (10, 4)]  # 3 and 1 batches an epoch; 3 and 1 test batches
    assert planned_flops(train, splits, step=100, eval_batch=7) == (3 * 3 + 3 * 1) * 100 + 3 * (3 + 1) * 7
    fixed = replace(train, steps_per_task=5, eval_limit=4)
    assert planned_flops(fixed, splits, step=100, eval_batch=7) == 2 * 5 * 100 + 3 * (1 + 1) * 7
    # equal compute: 1.5 × 25 → 38 and 1.5 × 10 = 15 examples at batch 10 plan ⌈3.8⌉ = 4 and ⌈1.5⌉ = 2 steps
    counted = replace(train, compute_epochs=1.5)
    assert planned_flops(counted, splits, step=100, eval_batch=7) == (4 + 2) * 100 + 3 * (3 + 1) * 7
    # a method's phases: 4 epochs on the first task, 2 on the second and every later one
    three = [(25, 9), (10, 4), (30, 4)]
    assert planned_flops(train, three, step=100, eval_batch=7, epochs=[4, 2]) == (
        (4 * 3 + 2 * 1 + 2 * 3) * 100 + 4 * (3 + 1 + 1) * 7
    )
