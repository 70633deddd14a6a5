"""The Avalanche 0.6 side of benchmarks/bench_vs_avalanche_methods.py; runs in an environment with avalanche-lib.

    python benchmarks/avalanche_side.py STREAM.npz SETTINGS.json

SETTINGS (written by the clbench side from its cells' resolved settings): the method, the scenario, the seeds, the
training settings and the method's own. Prints one JSON line: per seed, AA (the mean final accuracy over the tasks,
in %) and the seconds of training and evaluation.

The model is the quick MLP (64-256-256, ReLU) with clbench's heads, reproduced here so that the two sides differ only
in the methods' code:
- task-incremental: a head per task (a MultiTaskModule, each example through its own task's head), 10 wide; on
  split-digits a head's logits outside its task's two digits are masked (−1e4, clbench's ``MASKED``): a masked logit
  passes no gradient, so it is clbench's 2-way head. Replayed examples go through their own task's head.
- class-incremental: one 10-way head whose logits of classes not seen yet are masked, in training and evaluation, as
  clbench's growing head does (DER: see ``_UNMASKED``).
- domain-incremental: one 10-way head, nothing masked.
- the optimizer's state (SGD's momentum) starts afresh at each experience, as clbench builds an optimizer per task
  (Avalanche keeps it by default).
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
from avalanche.benchmarks.scenarios.task_aware import with_task_labels
from avalanche.benchmarks.utils import TaskAwareClassificationDataset, as_classification_dataset
from avalanche.benchmarks.utils.data_attribute import DataAttribute
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.models import MultiTaskModule
from avalanche.training import (
    AGEM,
    DER,
    ER_ACE,
    EWC,
    GEM,
    GDumb,
    ICaRL,
    LwF,
    Naive,
    SynapticIntelligence,
)
from avalanche.training.plugins import EvaluationPlugin, ReplayPlugin, SynapticIntelligencePlugin
from avalanche.training.storage_policy import ReservoirSamplingBuffer
from torch import nn
from torch.utils.data import TensorDataset

MASKED = -1e4
# DER's buffer keeps the logits it stored at an experience's end and matches all of them by MSE: a logit stored masked
# (−1e4, a class not seen then) against the same logit unmasked later would dominate the loss. Avalanche's DER (as
# Mammoth's) runs an unmasked head; clbench's leaves the masked logits out of the match instead.
_UNMASKED = {"der", "derpp"}


class Net(nn.Module):
    """The MLP with clbench's heads: ``heads[t]`` lists the classes head t scores (one head: every class; the classes
    seen so far on a class-incremental stream, ``seen``)."""

    def __init__(self, heads: list[list[int]]) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.heads = nn.ModuleList(nn.Linear(256, 10) for _ in heads)
        table = torch.zeros(len(heads), 10, dtype=torch.bool)
        for t, classes in enumerate(heads):
            table[t, classes] = True
        self.register_buffer("table", table)
        self.register_buffer("seen", torch.ones(10, dtype=torch.bool))

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int | None = None) -> torch.Tensor:
        """All 10 logits of each example's head, masked row by row (MultiTaskModule's own forward sizes its output to
        the classes seen)."""
        h = self.features(x)
        if len(self.heads) == 1:
            tasks, logits = torch.zeros(len(x), dtype=torch.long), self.heads[0](h)
        else:
            tasks = torch.as_tensor(task_labels if task_labels is not None else 0).cpu().expand(len(x))
            logits = torch.stack([head(h) for head in self.heads], 1)[torch.arange(len(x)), tasks]
        return logits.masked_fill(~(self.table[tasks] & self.seen), MASKED)


class TaskNet(Net, MultiTaskModule):
    """Net, given each example's task label by Avalanche (a MultiTaskModule is); with none, every known task's
    logits (LwF's teacher)."""

    def forward(self, x: torch.Tensor, task_labels: torch.Tensor | int | None = None):  # noqa: ANN201
        return self.forward_all_tasks(x) if task_labels is None else Net.forward(self, x, task_labels)

    def forward_single_task(self, x: torch.Tensor, task_label: int) -> torch.Tensor:
        return Net.forward(self, x, task_label)


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
            if isinstance(module, Net):
                module.seen[:] = False
                module.seen[sorted(self.seen)] = True


class SumOfTerms(SupervisedPlugin):
    """Avalanche's Replay and ER-ACE average the new and the replayed term of a batch that replays ((a + b)/2, one
    mean over the joined batch for Replay); clbench adds them. The loss of such a batch is doubled: clbench's sum."""

    def __init__(self, replays) -> None:  # noqa: ANN001 (strategy -> bool)
        super().__init__()
        self.replays = replays

    def before_backward(self, strategy, **kwargs):  # noqa: ANN001, ANN003
        if self.replays(strategy):
            strategy.loss = 2 * strategy.loss


@torch.no_grad()
def _copy_weights(model: nn.Module, target: dict, excluded_parameters: set[str]) -> None:
    """Avalanche's SI keeps θ (and g) as ``param.detach().cpu().flatten()``: on a CPU that is a view of the parameter,
    not a copy, so the weights it keeps before a step move with the step, every Δθ it measures is 0 and Ω stays 0
    (its SI is plain fine-tuning on a CPU; on a GPU ``.cpu()`` copies). The same, copied."""
    for name, param in SynapticIntelligencePlugin.allowed_parameters(model, excluded_parameters):
        target[name].data = param.detach().cpu().flatten().clone()


@torch.no_grad()
def _copy_grad(model: nn.Module, target: dict, excluded_parameters: set[str]) -> None:
    for name, param in SynapticIntelligencePlugin.allowed_parameters(model, excluded_parameters):
        target[name].data = param.grad.detach().cpu().flatten().clone()


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


def benchmark(data: np.lib.npyio.NpzFile, scenario: str, method: str):  # noqa: ANN201
    """One task's data an experience, in clbench's order (Avalanche's EWC estimates its Fisher from batches in that
    order), labels kept; its task label is the task's index on a task-incremental stream, else 0. iCaRL reads the "new
    classes" scenario (nc_benchmark), which sorts an experience's data by class (order-blind: herding, shuffled
    batches)."""
    tasks = int(data["tasks"])

    def ds(split: str, t: int):  # noqa: ANN202
        y = torch.from_numpy(data[f"{split}_y_{t}"])
        d = TensorDataset(torch.from_numpy(data[f"{split}_x_{t}"]), y)
        if method == "icarl":
            d.targets = y.tolist()
            return as_classification_dataset(d)
        task = t if scenario == "task-incremental" else 0
        return TaskAwareClassificationDataset([d], data_attributes=[
            DataAttribute(y.tolist(), "targets"),
            DataAttribute([task] * len(y), "targets_task_labels", use_in_getitem=True)])

    train, test = [ds("train", t) for t in range(tasks)], [ds("test", t) for t in range(tasks)]
    if method == "icarl":
        return nc_benchmark(train, test, tasks, task_labels=False, shuffle=False, one_dataset_per_exp=True)
    return with_classes_timeline(with_task_labels(benchmark_from_datasets(train=train, test=test)))


def strategy(settings: dict, heads: list[list[int]], evaluator: EvaluationPlugin):  # noqa: ANN201
    method, m, t, scenario = settings["method"], settings["method_settings"], settings["train"], settings["scenario"]
    model = TaskNet(heads) if scenario == "task-incremental" else Net(heads)
    masks_seen = scenario == "class-incremental" and method not in _UNMASKED
    plugins = [SeeClasses()] if masks_seen else []
    common = dict(train_mb_size=t["batch_size"], train_epochs=t["epochs"], eval_mb_size=256, device="cpu",
                  evaluator=evaluator, eval_every=-1)
    ce = nn.CrossEntropyLoss()
    replay_batch = m.get("replay_batch_size") or t["batch_size"]
    if method == "icarl":  # the MLP's parts unmasked: Avalanche wraps them in a model of its own (TrainEvalModel, with
        # the nearest-mean classifier for evaluation)
        opt = torch.optim.SGD(list(model.features.parameters()) + list(model.heads[0].parameters()), lr=t["lr"],
                              momentum=t["momentum"])
        return ICaRL(feature_extractor=model.features, classifier=model.heads[0], optimizer=opt,
                     memory_size=m["memory_size"], buffer_transform=None, fixed_memory=True, plugins=plugins, **common)
    opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"])
    base = dict(model=model, optimizer=opt, criterion=ce, plugins=plugins, **common)
    if method == "ewc":  # Avalanche adds λ·ΣF(θ−θ*)², clbench (λ/2)·ΣF(θ−θ*)²
        return EWC(ewc_lambda=m["lambda"] / 2, mode="online", decay_factor=m["decay"], **base)
    if method == "si":  # Avalanche adds (λ/2)·ΣΩ(θ−θ̃)², clbench c·ΣΩ(θ−θ̃)²
        return SynapticIntelligence(si_lambda=2 * m["c"], eps=m["xi"], **base)
    if method == "lwf":  # clbench's distillation term carries Hinton's T² (losses.distillation), Avalanche's does not
        return LwF(alpha=m["lambda"] * m["temperature"] ** 2, temperature=m["temperature"], **base)
    if method == "replay":  # clbench's reservoir (the Replay strategy's default buffer is experience-balanced)
        if m["weight"] != 1:
            raise SystemExit("replay.weight != 1 has no Avalanche counterpart")
        rp = ReplayPlugin(mem_size=m["buffer_size"], batch_size_mem=replay_batch,
                          storage_policy=ReservoirSamplingBuffer(m["buffer_size"]))
        plugins.extend([rp, SumOfTerms(lambda s: len(rp.storage_policy.buffer) > 0)])
        return Naive(**base)
    if method == "gem":
        return GEM(patterns_per_exp=m["memory_per_task"], memory_strength=m["margin"], **base)
    if method == "agem":
        return AGEM(patterns_per_exp=m["memory_per_task"], sample_size=m["sample_size"], **base)
    if method == "gdumb":
        return GDumb(mem_size=m["memory_size"], **{**base, "train_epochs": m["epochs"]})
    if method in ("der", "derpp"):
        # Avalanche's MSE averages over all 10 logits; clbench's over the unmasked ones: 2 of 10 on split-digits (a
        # masked logit matches itself), so α is scaled to the same loss
        scale = 10 / len(heads[0])
        return DER(mem_size=m["buffer_size"], batch_size_mem=replay_batch, alpha=m["alpha"] * scale, beta=m["beta"],
                   **base)
    if method == "er-ace":
        plugins.append(SumOfTerms(lambda s: s.replay_loader is not None))
        return ER_ACE(mem_size=m["buffer_size"], batch_size_mem=replay_batch, **base)
    raise SystemExit(f"no Avalanche counterpart for {method!r}")


def main() -> None:
    data = np.load(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        settings = json.load(f)
    scenario, tasks = settings["scenario"], int(data["tasks"])
    SynapticIntelligencePlugin.extract_weights = staticmethod(_copy_weights)
    SynapticIntelligencePlugin.extract_grad = staticmethod(_copy_grad)
    if scenario == "task-incremental":
        avalanche_der.compute_dataset_logits = _logits_with_task_labels
        heads = [sorted(set(data[f"train_y_{t}"].tolist())) for t in range(tasks)]
    else:
        heads = [list(range(10))]
    bm = benchmark(data, scenario, settings["method"])
    torch.set_num_threads(1)  # as clbench's cells (train.threads=1)
    out = []
    for seed in settings["seeds"]:
        torch.manual_seed(seed)
        np.random.seed(seed)
        evaluator = EvaluationPlugin(accuracy_metrics(experience=True), loggers=[])
        run = strategy(settings, heads, evaluator)
        t0 = time.perf_counter()
        for exp in bm.train_stream:
            run.train(exp, num_workers=0, reset_optimizer_state=True)  # clbench: an optimizer per task
            last = run.eval(bm.test_stream, num_workers=0)
        seconds = time.perf_counter() - t0
        accs = [v for k, v in last.items() if k.startswith("Top1_Acc_Exp/eval_phase/test_stream")]
        assert len(accs) == tasks, sorted(last)
        out.append({"seed": seed, "AA": 100.0 * sum(accs) / len(accs), "seconds": seconds})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
