"""Registers the DER paper's MNIST streams and its Table 2 profiles: ``paper-der`` (buffer 200 and the rows without a
buffer), ``paper-der-500`` and ``paper-der-5120`` (the buffer rows), each row with the settings the paper's code gives
it (:mod:`.presets`) and the paper's numbers beside it (``PROFILE.targets.json``; docs/parity.md)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from clbench import hookimpl
from clbench.specs import ProfileSpec, StreamSpec

from .presets import BEST_ARGS, METHODS, TASKS
from .streams import MNISTConfig, PermMNIST, PermMNISTConfig, RotMNIST, RotMNISTConfig, SeqMNIST

# Mammoth's protocol (its backbone MNISTMLP, utils/training.py): an MLP 784-100-100 with one fixed 10-way head,
# Xavier-uniform weights and zero biases, plain SGD (no momentum, no weight decay), one epoch a task, the tasks in
# their natural order; train.lr and train.batch_size come with each row
PROTOCOL = {"model": "mlp", "model.hidden": [100, 100], "model.multi_head": False, "train.optimizer": "sgd",
            "train.momentum": 0.0, "train.epochs": 1, "train.init": "xavier", "orders": ["1"]}
SEQ = {**PROTOCOL, "train.head": "full"}  # a fixed head over the ten digits from the first task, unmasked
STREAMS = {"seq-mnist": SEQ, "seq-mnist-til": {**SEQ, "train.scoring": "task"}, "perm-mnist": PROTOCOL,
           "rot-mnist": PROTOCOL}
DATASET = {"seq-mnist": "seq-mnist", "seq-mnist-til": "seq-mnist", "perm-mnist": "perm-mnist",
           "rot-mnist": "rot-mnist"}
PROFILES = {"paper-der": 200, "paper-der-500": 500, "paper-der-5120": 5120}


def row(dataset: str, mammoth: str, buffer: int) -> dict[str, Any]:
    """The clbench settings of Mammoth's ``--model mammoth --load_best_args --buffer_size buffer`` on ``dataset``."""
    entry = BEST_ARGS[dataset]["sgd" if mammoth == "joint" else mammoth]
    a = entry.get(buffer, entry.get(-1))
    assert a is not None, (dataset, mammoth, buffer)
    out: dict[str, Any] = {"train.lr": a["lr"], "train.batch_size": a["batch_size"]}
    if mammoth == "joint":  # models/joint.py: trained once, after the last task, on every task's data
        out["joint.schedule"] = "final"
    elif mammoth == "ewc_on":  # models/ewc_on.py: CE + e_lambda·ΣF(θ−θ*)², clbench's penalty is (λ/2)·ΣF(θ−θ*)²
        out.update({"ewc.lambda": 2 * a["e_lambda"], "ewc.decay": a["gamma"], "ewc.fisher_samples": 0})
    elif mammoth == "si":
        out.update({"si.c": a["c"], "si.xi": a["xi"]})
    elif mammoth == "lwf":  # its CE and distillation read the seen classes' logits alone: a masked head
        out.update({"lwf.lambda": a["alpha"], "lwf.temperature": a["softmax_temp"], "train.head": "masked",
                    "train.weight_decay": 2 * a["wd_reg"]})  # wd_reg·Σθ² in the loss: a decay of 2·wd_reg
    elif mammoth == "er":  # models/er.py: reservoir from the first batch, one CE over batch and replay together
        out.update({"replay.buffer_size": buffer, "replay.replay_batch_size": a["minibatch_size"],
                    "replay.fill": "during", "replay.loss": "combined"})
    elif mammoth in ("gem", "agem"):  # buffer_size // tasks examples of each finished task
        out[f"{mammoth}.memory_per_task"] = buffer // TASKS[dataset]
        out.update({"gem.margin": a["gamma"]} if mammoth == "gem" else {"agem.sample_size": a["minibatch_size"]})
    elif mammoth == "icarl":  # its BCE reads the seen classes' logits alone; wd_reg is 0 on MNIST
        out.update({"icarl.memory_size": buffer, "train.head": "masked"})
    elif mammoth in ("der", "derpp"):
        out.update({f"{mammoth}.buffer_size": buffer, f"{mammoth}.alpha": a["alpha"],
                    f"{mammoth}.replay_batch_size": a["minibatch_size"]})
        if mammoth == "derpp":
            out["derpp.beta"] = a["beta"]
    return out


def rows(buffer: int, with_unbuffered: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """Every stream's rows of one buffer size (and, ``with_unbuffered``, the rows without a buffer): label -> settings."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for stream, dataset in DATASET.items():
        labels = {}
        for mammoth, method in METHODS.items():
            entry = BEST_ARGS[dataset].get("sgd" if mammoth == "joint" else mammoth)
            if entry is None:  # not a row of this dataset's column (LwF, iCaRL on P- and R-MNIST)
                continue
            if (-1 in entry and with_unbuffered) or buffer in entry:
                labels[method] = row(dataset, mammoth, buffer)
        out[stream] = labels
    return out


@functools.cache
def targets(profile: str) -> dict[str, Any]:
    return dict(json.loads(resources.files(__package__).joinpath(f"{profile}.targets.json").read_text("utf-8")))


@hookimpl
def clbench_add_streams() -> list[StreamSpec]:
    def presets_of(stream: str) -> dict[str, dict[str, Any]]:
        return {p: {**STREAMS[stream], "methods": sorted(rows(b, p == "paper-der")[stream])} for p, b in PROFILES.items()}

    tags = frozenset({"image"})
    return [
        StreamSpec("seq-mnist", SeqMNIST, MNISTConfig, "the DER paper's Seq-MNIST: 5 × 2 digits, class-incremental, "
                   "one head over the ten digits; --data-dir or the hub", presets=presets_of("seq-mnist"), tags=tags),
        StreamSpec("seq-mnist-til", functools.partial(SeqMNIST, name="seq-mnist-til"), MNISTConfig,
                   "seq-mnist scored task-incremental (each task among its two digits: train.scoring=task), the "
                   "paper's Task-IL column", presets=presets_of("seq-mnist-til"), tags=tags),
        StreamSpec("perm-mnist", PermMNIST, PermMNISTConfig, "the DER paper's P-MNIST: 20 permutations of all of "
                   "MNIST, one shared head (domain-incremental)", presets=presets_of("perm-mnist"), tags=tags),
        StreamSpec("rot-mnist", RotMNIST, RotMNISTConfig, "the DER paper's R-MNIST: 20 rotations in [0°, 180°) of all "
                   "of MNIST, one shared head (domain-incremental)", presets=presets_of("rot-mnist"), tags=tags),
    ]


@hookimpl
def clbench_add_profiles() -> list[ProfileSpec]:
    return [
        ProfileSpec(profile, f"the DER paper's Table 2, MNIST columns, buffer {buffer}"
                    + (" and the rows without a buffer" if profile == "paper-der" else "")
                    + ": each row with its code's best_args, 5 seeds, CPU (docs/parity.md)",
                    version="1", seeds=(0, 1, 2, 3, 4), streams=tuple(STREAMS),
                    rows=rows(buffer, profile == "paper-der"), targets=targets(profile))
        for profile, buffer in PROFILES.items()
    ]
