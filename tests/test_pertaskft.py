"""PerTaskFT (N-LoRA Table 1): independent models, one a task, each evaluated with its own weights."""

from __future__ import annotations

import torch
from clbench_plugins.pertask.fullft import PerTaskFT
from test_packnet_method import make_cell, run_task  # tests/ is on sys.path (rootdir conftest)

from clbench import testing


def test_training_a_task_leaves_every_other_tasks_predictions_unchanged(tmp_path):
    """A column of the accuracy matrix never moves once its task is trained, and a task not trained yet scores what
    the untrained model scores: each task's model is its own, fine-tuned from the base weights."""
    (result,) = testing.run(testing.registry(), tmp_path, "pertaskft")
    a, initial = result.accuracy_matrix, result.initial_row
    assert result.status == "complete" and initial is not None
    for j in range(len(a)):
        assert all(a[i][j] == a[j][j] for i in range(j, len(a))), j  # trained: its own weights, whatever came after
        assert all(a[i][j] == initial[j] for i in range(j)), j  # not trained yet: the base model


def test_each_task_starts_from_the_base_weights_and_its_predictions_are_bitwise_its_own():
    method, model, ctx = make_cell(PerTaskFT, None)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    first_task, second_task = ctx.order
    x = ctx.data(first_task).test.x[:8]
    run_task(method, model, ctx, 0)
    with torch.no_grad():
        after_first = model(x, first_task)
    starts = []
    original = method.before_task

    def before(task: str, index: int) -> None:
        original(task, index)
        starts.append({n: p.detach().clone() for n, p in model.named_parameters()})

    method.before_task = before  # type: ignore[method-assign]
    run_task(method, model, ctx, 1)
    assert all(torch.equal(starts[0][n], base[n]) for n in base)  # task 2 started from the base model
    assert any(not torch.equal(p, base[n]) for n, p in model.named_parameters())  # and moved
    with torch.no_grad(), method.evaluating(first_task):
        assert torch.equal(model(x, first_task), after_first)  # task 1's own model, bit for bit
    assert all(torch.equal(p, method.saved[-1][n]) for n, p in model.named_parameters())  # task 2's, put back
