"""Evaluation: a row of the accuracy matrix, every task scored with the model as it is, one process or several."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator

import torch
from torch import Tensor

from clbench.config import TrainConfig
from clbench.data import Stream
from clbench.distributed import SINGLE, Dist
from clbench.method import Method
from clbench.model import CLModel


@torch.no_grad()
def evaluate(
    model: CLModel,
    method: Method,
    stream: Stream,
    tasks: list[str],
    train: TrainConfig,
    device: torch.device,
    dist: Dist = SINGLE,
    shown: Collection[str] | None = None,
) -> tuple[list[float], list[Tensor | None]]:
    """Score (0-100, by the stream's :meth:`Stream.score`) on every task of ``tasks`` with the model as it is now,
    and each task's per-example scores (:meth:`Stream.example_scores`; None where the stream has none).

    Data-parallel (``dist``), each rank predicts its share of the test batches (:meth:`Stream.predictions`) and
    every rank scores all predictions gathered: the same batches, predictions and score as one process. A
    stream with an evaluation of its own (an overridden :meth:`Stream.evaluate`) is run whole on rank 0.

    ``shown``: the labels the model is told it knows now (:func:`clbench._exec.runner.show_labels`); with
    ``train.scoring="task"`` each task is scored among its own classes and the model is shown ``shown`` again after."""
    was_training = model.training
    model.eval()
    row: list[float] = []
    examples: list[Tensor | None] = []
    if not dist.active or type(stream).evaluate is not Stream.evaluate:
        for task in tasks if dist.is_main else ():
            with method.evaluating(task), _scored_within(model, stream, task, train, shown):
                score, per_example = stream.evaluate_examples(
                    model,
                    task,
                    batch_size=train.eval_batch_size,
                    limit=train.eval_limit,
                    device=device,
                    split=train.eval_split,
                    device_data=train.device_data,
                )
            row.append(float(score))
            examples.append(per_example)
        row = dist.broadcast(row)
    else:
        mine = {}
        for task in tasks:
            with method.evaluating(task), _scored_within(model, stream, task, train, shown):
                mine[task] = stream.predictions(
                    model,
                    task,
                    batch_size=train.eval_batch_size,
                    limit=train.eval_limit,
                    device=device,
                    shard=(dist.rank, dist.world_size),
                    split=train.eval_split,
                    device_data=train.device_data,
                )
        every = dist.gather(mine)
        n = dist.world_size
        for task in tasks:
            count = sum(len(part[task]) for part in every)
            preds = [every[i % n][task][i // n] for i in range(count)]  # batch i was rank i mod N's
            score, per_example = stream.score_examples(task, preds, train.eval_limit, train.eval_split)
            row.append(float(score))
            examples.append(per_example)
    model.train(was_training)
    return row, examples


@contextlib.contextmanager
def _scored_within(
    model: CLModel, stream: Stream, task: str, train: TrainConfig, shown: Collection[str] | None
) -> Iterator[None]:
    """Under ``train.scoring="task"``, the model shown ``task``'s own classes alone while it is scored (its other
    logits masked: task identity at test time), then ``shown`` again; otherwise nothing."""
    if train.scoring != "task":
        yield
        return
    model.see_labels(stream.task(task).own_labels)
    try:
        yield
    finally:
        model.see_labels(shown)
