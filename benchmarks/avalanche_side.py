"""The Avalanche 0.6 side of benchmarks/bench_vs_avalanche_methods.py; runs in an environment with avalanche-lib.

    python benchmarks/avalanche_side.py STREAM.npz SETTINGS.json

SETTINGS (written by the clbench side from its cells' resolved settings): the method, the scenario, the seeds, the
training settings and the method's own. Prints one JSON line: per seed, AA (the mean final accuracy over the tasks,
in %) and the seconds of training and evaluation.

The model is the quick MLP (64-256-256-10, ReLU). clbench's conventions, reproduced here so that the two sides
differ only in the methods' code:
- task-incremental (a head per task): one 10-way layer whose logits outside the task's two classes are masked
  (−1e4, clbench's ``MASKED``). A masked 10-way layer is a 2-way head per task: the rows of different tasks are
  disjoint and a masked logit passes no gradient. Replayed examples are masked by their own task label.
- class-incremental: the logits of classes not seen yet are masked, in training and evaluation, as clbench's
  growing head does (DER: see ``_UNMASKED``).
"""

from __future__ import annotations

import json
import sys
import time

import avalanche.training.supervised.der as avalanche_der
import numpy as np
import torch
from avalanche.benchmarks.scenarios.dataset_scenario import benchmark_from_datasets
from avalanche.benchmarks.scenarios.deprecated.generators import nc_benchmark
from avalanche.benchmarks.scenarios.supervised import with_classes_timeline
from avalanche.benchmarks.scenarios.task_aware import task_incremental_benchmark
from avalanche.benchmarks.utils import as_classification_dataset
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.models import MultiTaskModule
from avalanche.training import AGEM, DER, ER_ACE, GEM, GDumb, ICaRL, SynapticIntelligence
from avalanche.training.plugins import EvaluationPlugin
from torch import nn
from torch.utils.data import TensorDataset

MASKED = -1e4
# DER's buffer keeps the logits it stored at an experience's end and matches all of them by MSE: a logit stored masked
# (−1e4, a class not seen then) against the same logit unmasked later would dominate the loss. Avalanche's DER (as
# Mammoth's) runs an unmasked head; clbench's leaves the masked logits out of the match instead.
_UNMASKED = {"der", "derpp"}


class Masked(nn.Module):
    """The MLP with clbench's masking: per task (task-incremental) or to the classes seen so far."""

    def __init__(self, classes_of_task: list[list[int]] | None) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.classifier = nn.Linear(256, 10)
        self.classes_of_task = classes_of_task
        self.register_buffer("seen", torch.zeros(10, dtype=torch.bool))

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int | None = None) -> torch.Tensor:
        """All 10 logits, masked row by row (MultiTaskModule's own forward sizes its output to the classes seen)."""
        logits = self.classifier(self.features(x))
        if self.classes_of_task is None:
            keep = self.seen.expand_as(logits)
        else:
            tasks = torch.as_tensor(task_labels if task_labels is not None else 0).expand(len(x))
            table = torch.zeros(len(self.classes_of_task), 10, dtype=torch.bool)
            for t, classes in enumerate(self.classes_of_task):
                table[t, classes] = True
            keep = table[tasks.cpu()].to(logits.device)
        return logits.masked_fill(~keep, MASKED)



class TaskMasked(Masked, MultiTaskModule):
    """Masked, given each example's task label by Avalanche (a MultiTaskModule is)."""

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return self.forward(x, task_label)


class SeeClasses(SupervisedPlugin):
    """Class-incremental: an experience's classes join the seen classes before it trains; the model is told them
    before every forward (GDumb trains a fresh copy of the initial model at each experience)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[int] = set()

    def before_training_exp(self, strategy, **kwargs):  # noqa: ANN001, ANN003 (Avalanche's plugin signature)
        self.seen |= set(strategy.experience.classes_in_this_experience)

    def before_forward(self, strategy, **kwargs):  # noqa: ANN001, ANN003
        self._show(strategy.model)

    def before_eval_forward(self, strategy, **kwargs):  # noqa: ANN001, ANN003
        self._show(strategy.model)

    def _show(self, model: nn.Module) -> None:
        for module in model.modules():
            if isinstance(module, Masked):
                module.seen[:] = False
                module.seen[sorted(self.seen)] = True


@torch.no_grad()
def _logits_with_task_labels(dataset, model, batch_size, device, num_workers=0):  # noqa: ANN001, ANN201
    """Avalanche's DER stores an experience's logits by ``model(x)``, with no task labels: a model with a head per
    task cannot answer that. The same, with each example's task label (task-incremental runs only)."""
    was = model.training
    model.eval()
    out = []
    for x, _, t in torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False):
        out.extend(torch.clone(row) for row in model(x.to(device), t.to(device)).cpu())
    model.train(was)
    return out


def benchmark(data: np.lib.npyio.NpzFile, task_incremental: bool):  # noqa: ANN201
    tasks = int(data["tasks"])

    def ds(split: str, t: int):  # noqa: ANN202
        y = torch.from_numpy(data[f"{split}_y_{t}"])
        d = TensorDataset(torch.from_numpy(data[f"{split}_x_{t}"]), y)
        d.targets = y.tolist()
        return as_classification_dataset(d)

    train, test = [ds("train", t) for t in range(tasks)], [ds("test", t) for t in range(tasks)]
    if not task_incremental:  # the "new classes" scenario, one task's data an experience: what iCaRL's plugin reads
        return nc_benchmark(train, test, tasks, task_labels=False, shuffle=False, one_dataset_per_exp=True)
    return with_classes_timeline(task_incremental_benchmark(benchmark_from_datasets(train=train, test=test)))


def strategy(settings: dict, classes_of_task: list[list[int]] | None, evaluator: EvaluationPlugin):  # noqa: ANN201
    method, m, t = settings["method"], settings["method_settings"], settings["train"]
    model = Masked(classes_of_task) if classes_of_task is None else TaskMasked(classes_of_task)
    if method in _UNMASKED and classes_of_task is None:
        model.seen[:] = True
    # iCaRL gets the MLP's parts unmasked: Avalanche wraps them in a model of its own (TrainEvalModel, with the
    # nearest-mean classifier for evaluation)
    common = dict(train_mb_size=t["batch_size"], train_epochs=t["epochs"], eval_mb_size=256, device="cpu",
                  evaluator=evaluator, eval_every=-1)
    plugins = [SeeClasses()] if classes_of_task is None and method not in _UNMASKED else []
    ce = nn.CrossEntropyLoss()
    replay_batch = m.get("replay_batch_size") or t["batch_size"]
    if method == "icarl":
        opt = torch.optim.SGD(list(model.features.parameters()) + list(model.classifier.parameters()), lr=t["lr"],
                              momentum=t["momentum"])
        return ICaRL(feature_extractor=model.features, classifier=model.classifier, optimizer=opt,
                     memory_size=m["memory_size"], buffer_transform=None, fixed_memory=True, plugins=plugins, **common)
    opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"])
    if method == "si":
        return SynapticIntelligence(model=model, optimizer=opt, criterion=ce, si_lambda=m["c"], eps=m["xi"],
                                    plugins=plugins, **common)
    if method == "gem":
        return GEM(model=model, optimizer=opt, criterion=ce, patterns_per_exp=m["memory_per_task"],
                   memory_strength=m["margin"], plugins=plugins, **common)
    if method == "agem":
        return AGEM(model=model, optimizer=opt, criterion=ce, patterns_per_exp=m["memory_per_task"],
                    sample_size=m["sample_size"], plugins=plugins, **common)
    if method == "gdumb":
        return GDumb(model=model, optimizer=opt, criterion=ce, mem_size=m["memory_size"], plugins=plugins,
                     **{**common, "train_epochs": m["epochs"]})
    if method in ("der", "derpp"):
        # Avalanche's MSE averages over all 10 logits; clbench's over the unmasked ones: 2 of 10 on a task-incremental
        # stream (a masked logit matches itself), so α is scaled to the same loss
        scale = 10 / 2 if classes_of_task is not None else 1.0
        return DER(model=model, optimizer=opt, criterion=ce, mem_size=m["buffer_size"], batch_size_mem=replay_batch,
                   alpha=m["alpha"] * scale, beta=m["beta"], plugins=plugins, **common)
    if method == "er-ace":
        return ER_ACE(model=model, optimizer=opt, criterion=ce, mem_size=m["buffer_size"],
                      batch_size_mem=replay_batch, plugins=plugins, **common)
    raise SystemExit(f"no Avalanche counterpart for {method!r}")


def main() -> None:
    data = np.load(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        settings = json.load(f)
    task_incremental = settings["scenario"] == "task-incremental"
    if task_incremental:
        avalanche_der.compute_dataset_logits = _logits_with_task_labels
    classes_of_task = ([sorted(set(data[f"train_y_{t}"].tolist())) for t in range(int(data["tasks"]))]
                       if task_incremental else None)
    bm = benchmark(data, task_incremental)
    torch.set_num_threads(1)  # as clbench's cells (train.threads=1)
    out = []
    for seed in settings["seeds"]:
        torch.manual_seed(seed)
        np.random.seed(seed)
        evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
        run = strategy(settings, classes_of_task, evaluator)
        t0 = time.perf_counter()
        for exp in bm.train_stream:
            run.train(exp, num_workers=0)
            last = run.eval(bm.test_stream, num_workers=0)
        seconds = time.perf_counter() - t0
        accs = [v for k, v in last.items() if k.startswith("Top1_Acc_Exp/eval_phase/test_stream")]
        out.append({"seed": seed, "AA": 100.0 * sum(accs) / len(accs), "seconds": seconds})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
