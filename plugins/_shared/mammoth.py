"""Mammoth's ``--load_best_args`` rows (the DER paper's code, tag ``neurips2020``) as clbench settings: which clbench
method each of its models is, and the settings one of its ``best_args`` entries gives that method.

plugins/der_paper keeps its own copy of :func:`row` until its committed cells are next rerun (editing its plugin
would make them stale); tests/test_seq_vision.py checks that both give every MNIST row the same settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Mammoth's model name -> clbench's method
METHODS = {"sgd": "seqft", "ewc_on": "ewc", "si": "si", "lwf": "lwf", "er": "replay", "gem": "gem", "agem": "agem",
           "icarl": "icarl", "der": "der", "derpp": "derpp", "joint": "joint"}

BestArgs = Mapping[str, Mapping[int, Mapping[str, Any]]]  # model -> buffer (-1: none) -> its arguments


def entry(best_args: BestArgs, mammoth: str) -> Mapping[int, Mapping[str, Any]] | None:
    """A model's entry of one dataset's ``best_args`` (JOINT reads SGD's), None when the dataset has none."""
    return best_args.get("sgd" if mammoth == "joint" else mammoth)


def row(best_args: BestArgs, tasks: int, mammoth: str, buffer: int) -> dict[str, Any]:
    """The clbench settings of ``--model mammoth --load_best_args --buffer_size buffer`` on a dataset of ``tasks``
    tasks whose ``best_args`` are ``best_args``."""
    e = entry(best_args, mammoth)
    a = None if e is None else e.get(buffer, e.get(-1))
    if a is None:
        raise KeyError(f"best_args has no entry for {mammoth} at buffer {buffer}")
    out: dict[str, Any] = {"train.lr": a["lr"], "train.batch_size": a["batch_size"]}
    if "n_epochs" in a:
        out["train.epochs"] = a["n_epochs"]
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
        out[f"{mammoth}.memory_per_task"] = buffer // tasks
        out.update({"gem.margin": a["gamma"]} if mammoth == "gem" else {"agem.sample_size": a["minibatch_size"]})
    elif mammoth == "icarl":  # its BCE reads the seen classes' logits alone
        out.update({"icarl.memory_size": buffer, "train.head": "masked"})
        if a.get("wd_reg"):
            out["train.weight_decay"] = 2 * a["wd_reg"]
    elif mammoth in ("der", "derpp"):
        out.update({f"{mammoth}.buffer_size": buffer, f"{mammoth}.alpha": a["alpha"],
                    f"{mammoth}.replay_batch_size": a["minibatch_size"]})
        if mammoth == "derpp":
            out["derpp.beta"] = a["beta"]
    return out


def rows(best_args: Mapping[str, BestArgs], tasks: Mapping[str, int], streams: Mapping[str, str], buffer: int,
         with_unbuffered: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """Per stream (``streams``: stream -> its dataset), the rows of one buffer size (and, ``with_unbuffered``, the
    rows without a buffer): clbench method -> settings. A model without an entry for the dataset has no row."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for stream, dataset in streams.items():
        labels = {}
        for mammoth, method in METHODS.items():
            e = entry(best_args[dataset], mammoth)
            if e is not None and ((-1 in e and with_unbuffered) or buffer in e):
                labels[method] = row(best_args[dataset], tasks[dataset], mammoth, buffer)
        out[stream] = labels
    return out
