"""Settings: training config, ``--set`` overrides, and preset resolution.

Every setting has one home, a dataclass: ``TrainConfig`` for the loop, a model's ``config_cls``,
a method's ``config_cls``. Values reach it in this order, later wins:

1. the dataclass defaults (with their sources in each field's ``help``),
2. presets for the profile, then ``profile/stream``, then ``profile/stream/order``,
3. the profile's ``sets``,
4. the user's ``--set scope.field=value``.

Every key is validated against the dataclass: unknown fields and values of the wrong type fail
before any training starts, naming the key.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from clbench.errors import ConfigError, did_you_mean


def bounded(
    default: Any,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    help: str = "",
    since: str | None = None,
) -> Any:
    """A config field with a range, checked by :func:`apply` with the setting's name in the message.

    ``lam: float = bounded(1.0, ge=0, help="weight of the penalty")`` — plugin authors declare ranges this way
    instead of writing a ``__post_init__``; every number is also checked to be finite (NaN, ±inf and 1e400 are
    refused). ``help`` is what ``clbench list settings`` prints for the setting (field metadata ``"help"``);
    ``since``, the version a setting appeared in (see :func:`identity_defaults`).
    """
    bounds = {k: v for k, v in {"ge": ge, "gt": gt, "le": le, "lt": lt}.items() if v is not None}
    return field(default=default, metadata={"range": bounds, "help": help, **_since(since)})


def setting(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    help: str,
    since: str | None = None,
) -> Any:
    """A config field without a range, with the help text ``clbench list settings`` prints for it.

    ``name: str = setting("", help="hub name or local folder")``; ``default_factory`` as
    :func:`dataclasses.field` takes it, and neither default for a required field. A field with a range takes its
    help through :func:`bounded` instead. ``since``: as :func:`bounded`'s.
    """
    return field(default=default, default_factory=default_factory, metadata={"help": help, **_since(since)})


def _since(version: str | None) -> dict[str, str]:
    if version is not None and not re.fullmatch(r"\d+\.\d+\.\d+\S*", version):
        raise ValueError(f"since={version!r}: a version such as '0.2.0'")
    return {} if version is None else {"since": version}


def identity_defaults(cls: type) -> dict[str, Any]:
    """The settings of the config class ``cls`` that a cell's identity leaves out at one value (public names): each
    field declared with ``since="VERSION"`` at its default, and the entries of the class's ``IDENTITY_SINCE``.

    A setting added after results were stored declares the version it appeared in; at its default it is then not
    part of the config hash, so every result made before it existed keeps its hash and stays current, and a cell
    set to another value is a new cell. tests/test_config_fields.py fails on a new field that declares none."""
    out = dict(getattr(cls, "IDENTITY_SINCE", {}))
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if "since" in f.metadata:
                default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc,operator]
                out.setdefault(public_name(f.name), default)
    return out


def public_name(field_name: str) -> str:
    """The name ``--set`` and result.json give a config field: ``lambda_`` (a keyword's field) is ``lambda``."""
    return field_name.rstrip("_")


def field_for(key: str, field_names: Iterable[str]) -> str | None:
    """The field of ``field_names`` that the ``--set`` or preset key ``key`` addresses, or None: ``key`` itself,
    ``key_`` (``lambda`` → ``lambda_``), or either with ``-`` read as ``_``."""
    names = set(field_names)
    for candidate in (key, key + "_", key.replace("-", "_"), key.replace("-", "_") + "_"):
        if candidate in names:
            return candidate
    return None


_RANGE_TEXT = {"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}"}
_RANGE_OK = {"ge": lambda v, b: v >= b, "gt": lambda v, b: v > b, "le": lambda v, b: v <= b, "lt": lambda v, b: v < b}


def check_range(value: Any, bounds: Mapping[str, float], where: str) -> None:
    """Raise :class:`ConfigError` naming ``where`` when a number is outside ``bounds`` (see :func:`bounded`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not all(_RANGE_OK[key](value, bound) for key, bound in bounds.items()):
        text = " and ".join(_RANGE_TEXT[key].format(bound) for key, bound in bounds.items())
        raise ConfigError(f"{where}={value!r} is out of range: it must be {text}")


@dataclass(frozen=True)
class TrainConfig:
    """The training loop's settings for one cell."""

    epochs: int = bounded(1, ge=1, le=10_000, help="per task; more is a typo (a task that never ends)")
    batch_size: int = bounded(32, ge=1, help="the global batch: examples per optimizer step")
    memory: int = bounded(
        0,
        ge=0,
        help=(
            "examples every method that keeps examples may store, in total at the stream's end (a replay buffer, GEM's "
            "episodic memories, iCaRL's exemplars, GDumb's memory): each such method's own setting is set from it by "
            "the rule it declares (a total, or M // tasks a task). 0: each method's own setting. docs/budgets.md"
        ),
        since="0.1.0",
    )
    steps_per_task: int = bounded(
        0,
        ge=0,
        le=10_000_000,
        help=(
            "the equal-steps track: 0 trains each method's own phases and epochs; N gives every task exactly N "
            "optimizer steps, shared among the method's phases in proportion to their epochs (largest remainder; "
            "each phase's epochs repeat until its share is spent, the last cut short). docs/tuning.md"
        ),
        since="0.1.0",
    )
    compute_epochs: float = bounded(
        0.0,
        ge=0,
        le=10_000,
        help=(
            "the equal-compute track: 0 trains each method's own phases and epochs; E trains every task until the "
            "model has forwarded, with gradients, E times the task's training examples (what E epochs of plain "
            "fine-tuning forward), as the harness counts them in the task's steps (a replay batch, GEM's memory "
            "gradients included); shared among the method's phases in proportion to their epochs, each phase's "
            "epochs repeating until its share is spent, stopped at the first step boundary past it. docs/budgets.md"
        ),
        since="0.1.0",
    )
    grad_accum: int = bounded(
        1,
        ge=1,
        help=(
            "Micro-batches per optimizer step: each runs forward and backward on batch_size/grad_accum examples with its "
            "loss scaled by its share of the batch, so the step sees the full batch's mean gradient (same numbers up to "
            "float summation order; batch-norm statistics are per micro-batch). Memory of a micro-batch, the result of "
            "the global batch."
        ),
        since="0.1.0",
    )
    eval_batch_size: int = bounded(256, ge=1)
    lr: float = bounded(0.01, gt=0)
    optimizer: str = setting("sgd", help="sgd | adam | adamw | rmsprop")
    momentum: float = bounded(0.0, ge=0)
    weight_decay: float = bounded(0.0, ge=0)
    grad_clip: float = bounded(0.0, ge=0, help="0: off")
    eval_limit: int = bounded(0, ge=0, help="evaluate on at most this many test examples per task (0: all)")
    eval_split: str = setting(
        "test",
        help=(
            'The split the accuracy matrix scores: "test", or "val" (the stream\'s validation split, carved from its '
            "training data) for choosing settings without looking at the test split (`clbench tune`, "
            "docs/tuning.md)."
        ),
        since="0.1.0",
    )
    init: Literal["model", "xavier"] = setting(
        "model",
        help=(
            'The weights training starts from: "model", as the model plugin initialises them (torch\'s layer defaults '
            'for mlp and cnn); "xavier", every Linear and Conv2d weight redrawn Xavier-uniform (gain 1) and its bias '
            "zeroed, heads included (the DER paper's code, Mammoth's backbones). Only for models trained from scratch."
        ),
        since="0.1.0",
    )
    head: Literal["masked", "full", "task"] = setting(
        "masked",
        help=(
            'The shared head of a class-incremental stream: "masked", the logits of classes not seen yet are masked '
            "while a task trains and is scored (a head that grows with the classes, :meth:`CLModel.see_labels`); "
            '"full", one fixed head over every class of the stream from the first task, trained and scored unmasked '
            "(the DER paper's code, Mammoth: a later class's logit is pushed down by every earlier task's loss, and "
            'DER\'s buffer stores all of them); "task", the logits of every class outside the task being trained '
            "masked while it trains, earlier tasks' included, and the seen classes' scored as under \"masked\" (the "
            "prompt papers' train_mask: L2P, DualPrompt, CODA-Prompt). Only on class-incremental streams."
        ),
        since="0.1.0",
    )
    scoring: Literal["stream", "task"] = setting(
        "stream",
        help=(
            'How a class-incremental model is scored: "stream", among every label the head shows (no task identity at '
            'test time: class-incremental); "task", each task among its own classes, the other logits of the same '
            "model masked (task identity at test time: the DER paper's Task-IL column of its class-incremental runs, "
            "Mammoth's mask_classes). Only on class-incremental streams; cells scored differently go in different "
            "trees, as they rank on different questions."
        ),
        since="0.1.0",
    )
    device: str = setting("auto", help="auto | cpu | cuda | cuda:N")
    threads: int = bounded(
        1,
        ge=1,
        help=(
            "torch's intra-op threads while the cell runs. Numbers depend on it (a float sum split over 2 threads rounds "
            "differently from 1), so it is a setting, stored in the config and its hash, never the machine's core count. "
            "1 is reproducible on any machine; profiles for larger models raise it."
        ),
    )
    log_every: int = bounded(
        0,
        ge=0,
        help=(
            "Every N-th optimizer step of the cell, hand the step observers (the `clbench_step` hook: `--logger csv`, "
            "`tensorboard`, `wandb`) the loss, each loss term, the learning rate and the gradient norm; 0: off (no hook "
            "call, no gradient norm, no extra sync on any step). Logging reads numbers and changes none, so this setting "
            "is stored in result.json but is not part of the cell's identity (see NOT_IDENTITY)."
        ),
    )
    checkpoint_every_s: float = bounded(
        60.0,
        ge=0,
        help=(
            "Write the resume checkpoint after a task only when this many seconds have passed since the cell started or "
            "since its last checkpoint; 0: after every task but the last. A checkpoint holds the model, the method's "
            "state and every footprint so far, so after every task of a short cell it costs more than the work it saves: "
            "an interrupted cell redoes at most this many seconds (and resumes to the same numbers)."
        ),
    )
    diverge_factor: float = bounded(
        100.0,
        ge=0,
        help=(
            "A cell whose training blows up is `diverged`, not complete: a step's loss is NaN or infinite, or an epoch's "
            "mean loss (task loss plus the method's terms) exceeds this many times the loss of the first step of the "
            "same phase of the task — the loss the phase starts from, before it has moved a weight (a phase may add "
            "terms of its own scale: LPS's ADMM) — or of 1 nat where that is less (clbench._exec.step.LOSS_FLOOR: joint "
            "training starts a task at 4e-4). 0: only non-finite losses. 100 is far above what a healthy phase does and "
            "far below a blow-up (an SGD step past the penalty's curvature multiplies the loss by ~1e3 an epoch: "
            "split-digits ewc, epoch means 0.49 → 2403 → 5.6e9; permuted-digits ewc λ=1000 reached 3e12 within its first "
            "epoch)."
        ),
        since="0.1.0",
    )
    tf32: bool = setting(
        True,
        help=(
            "On a CUDA GPU with tensor cores (Ampere and later), float32 matmuls and convolutions use TF32: inputs "
            "rounded to 10 bits of mantissa, products accumulated in float32, several times faster (T5-large's fp32 "
            "paper runs). On by default for speed (the reference scripts pass no --tf32; PyTorch's own default is TF32 "
            "for convolutions only); false for full float32 products. No effect on the CPU or on bf16 weights; recorded, "
            "and part of the identity (it changes a GPU's numbers)."
        ),
        since="0.1.0",
    )
    fused: bool = setting(
        True,
        help=(
            "On a CUDA GPU, the fused implementation of the optimizer where torch has one (Adam, AdamW, SGD): one kernel "
            "for every parameter's update instead of a few per tensor group. Numbers may move in the last bits against "
            "the foreach implementation; recorded, part of the identity. No effect on the CPU."
        ),
        since="0.1.0",
    )
    fp32_masters: bool = setting(
        True,
        help=(
            "Low-precision (bf16/fp16) weights that train are stepped through float32 masters, the optimizer's state "
            "float32 (DeepSpeed's bf16 optimizer; 8 more bytes a weight trained whole). false: the torch optimizer "
            "steps the weights themselves, its state in their dtype (what a torch optimizer or the Hugging Face "
            "Trainer does on a model loaded in bf16: what fits Llama-3-8B full fine-tuning with RMSProp on one 80 GiB "
            "GPU, the Expander paper's card); an update below half a weight's ulp is then lost (RMSProp at lr 1e-6 on "
            "bf16 weights of std 0.02 realises a few % of its float32 movement: docs/scale-out.md). No effect on "
            "float32 weights; recorded, part of the identity."
        ),
        since="0.1.0",
    )
    autocast: Literal["off", "bfloat16"] = setting(
        "off",
        help=(
            "Each training forward pass and its loss (the method's terms included) under torch.autocast in this dtype "
            "(matrix products and convolutions in bfloat16, reductions and losses in float32); the weights, their "
            "gradients and the optimizer stay in the weights' dtype (float32 masters of a float32 model). No loss "
            "scaling: bfloat16 has float32's range. Evaluation runs as without it. \"off\": every op in the weights' "
            "dtype. Recorded, part of the identity."
        ),
        since="0.1.0",
    )
    capture: bool = setting(
        False,
        help=(
            "On a CUDA GPU, a phase's training step (forward, backward, the method's hooks, clipping, the optimizer) is "
            "recorded once as a CUDA graph after a few eager steps and replayed for every full-size batch: a small "
            "model's step then costs its arithmetic, not its kernel launches. Only for methods whose step is static "
            "(MethodSpec.static_step: seqft), without gradient accumulation or data parallelism; refused otherwise. "
            "The optimizer is torch's capturable form, whose numbers may move in the last bits; recorded, part of "
            "the identity."
        ),
        since="0.1.0",
    )
    offload_state: bool = setting(
        False,
        help=(
            "On an accelerator, a method's per-weight state that is read one parameter at a time (EWC's Fisher and "
            "anchor; Expander-EWC's Fisher, whose device copy is then the current task's masks only) stays in host "
            "memory and is copied to the device when read: an 8B model's float32 Fisher (28 GiB) leaves the device, "
            "at the cost of a host-to-device copy of it per step (EWC). Changes no number."
        ),
    )
    shard: Literal["off", "full", "offload"] = setting(
        "off",
        help=(
            "With --nproc N: 'full' shards the model's weights, gradients and optimizer state over the N ranks "
            "(PyTorch FSDP2, fully_shard: each module with weights of its own a unit), so a rank holds 1/N of them "
            "and gathers a unit's weights for its forward and backward only; the numbers are one process's at the "
            "same global batch. 'offload' shards them as 'full' does and keeps the shards, their gradients and the "
            "optimizer's state in host memory, where the optimizer steps (FSDP2's CPUOffloadPolicy, as ZeRO-Offload "
            "does): the device holds a unit's gathered weights while it computes; on one GPU (--nproc 1) or N. "
            "Methods that read the weights only through the model (ShardingSpec) run; the others are refused before "
            "a cell starts. docs/scale-out.md"
        ),
        since="0.1.0",
    )
    sync_every: int = bounded(
        0,
        ge=0,
        help=(
            "On an accelerator, the step losses are kept on the device and read every this many optimizer steps (one "
            "host sync instead of one a step); a non-finite loss is still reported at its exact step, up to this many "
            "steps late. 0: every step on the CPU, every 32 on an accelerator. Changes no number."
        ),
    )
    device_data: float = bounded(
        0.25,
        ge=0,
        le=1,
        help=(
            "On an accelerator, a task's tensor splits are copied to the device once (batches are then indexed there) "
            "while every split so copied fits in this fraction of the device's memory; 0: never (each batch is copied "
            "per step). Changes no number."
        ),
    )

    # Settings that change no number: clbench._core.plan.identity leaves them out of config_hash, so changing one
    # neither refuses a rerun into the same --out nor invalidates a result or checkpoint.
    NOT_IDENTITY: ClassVar[tuple[str, ...]] = (
        "log_every",
        "checkpoint_every_s",
        "sync_every",
        "device_data",
        "offload_state",
    )

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"train.optimizer={self.optimizer!r}: choose one of {sorted(OPTIMIZERS)}")
        if self.eval_split not in ("test", "val"):
            raise ConfigError(f"train.eval_split={self.eval_split!r}: choose test or val")
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise ConfigError(f"train.device={self.device!r}: choose auto, cpu, mps, cuda or cuda:N")
        if self.compute_epochs and self.steps_per_task:
            raise ConfigError("train.compute_epochs and train.steps_per_task are two equal budgets: set one of them")
        if self.shard != "off" and self.capture:
            raise ConfigError(
                f"train.shard={self.shard} gathers weights inside the step: it cannot be recorded (train.capture)"
            )
        if self.compute_epochs and self.capture:
            raise ConfigError(
                "train.compute_epochs counts the examples the model forwards, and a replayed train.capture graph "
                "runs no Python hook: set train.capture=false"
            )
        if self.batch_size % self.grad_accum:
            raise ConfigError(
                f"train.grad_accum={self.grad_accum} does not divide train.batch_size="
                f"{self.batch_size}: the global batch is split into equal micro-batches"
            )

    @property
    def micro_batch_size(self) -> int:
        """Examples per forward/backward pass (per device: this process is the only one)."""
        return self.batch_size // self.grad_accum


OPTIMIZERS = {"sgd", "adam", "adamw", "rmsprop"}


@dataclass(frozen=True)
class MetricsConfig:
    """How the footprint metrics of one cell are computed (``--set metrics.…``); stored in result.json."""

    tolerance: float = bounded(
        1e-3,
        ge=0,
        lt=1,
        help=(
            'ACR\'s "non-zero" (N-LoRA eq. 11 gives no threshold): |x| > tolerance·max|ΔW| over what ``acr`` names. '
            "1e-3 is ours (stored in each result; the calibration against the paper's SeqLoRA 0.542 is in "
            "docs/lora-family.md); 0 is the literal definition (every entry that is not exactly 0)."
        ),
    )
    samples: int = bounded(
        0,
        ge=0,
        help=(
            "GSR/ACR: 0 = the exact streaming pass; N > 0 = the sampled estimator at ≈N positions per matrix (low-rank "
            "footprints only; clbench.metrics.scan) — for 7B-scale adapters, where the exact pass takes ~1 min"
        ),
    )
    acr: Literal["layer", "task", "absolute"] = setting(
        "layer",
        help=(
            'ACR\'s threshold: "layer" τ·max|ΔW_t| of each task and layer (cannot see a layer shrunk as a whole), '
            '"task" τ·max|ΔW_t| over all layers of a task, "absolute" τ itself. Masked footprints count their mask.'
        ),
        since="0.1.0",
    )
    awom: Literal["eq8", "transposed"] = setting(
        "eq8",
        help=(
            "AWOM's product: \"eq8\" ‖ΔW_T ΔW_iᵀ‖₂ in PEFT's out × in layout, i.e. N-LoRA eq. 8's ΔW_Tᵀ ΔW_i with its ΔW "
            '= A·B, A ∈ R^{d×r} on the input side (sums over the input index); "transposed" ‖ΔW_Tᵀ ΔW_i‖₂ in PEFT\'s '
            "layout (sums over the output index; the form of results that record awom=transposed)."
        ),
        since="0.1.0",
    )
    delta_w: Literal["applied", "factors"] = setting(
        "applied",
        help=(
            'ΔW of a LoRA footprint: "applied" α/r·B·A, the update the forward adds (W − W₀; what dense footprints are), '
            '"factors" B·A. Changes AWOM (by (α/r)²), the nuclear norms (α/r) and absolute-τ ACR; the paper writes ΔW = '
            "AB without α/r and its repository has no metric code, so it does not settle this."
        ),
        since="0.1.0",
    )
    device: str = setting(
        "cpu",
        help=(
            "Where AWOM's float64 spectral norms of dense footprints run (full fine-tuning and masked cells; LoRA's are "
            'r×r problems): "cpu" LAPACK (a thin QR, then λmax by bisection), or "cuda"/"cuda:N" torch\'s float64 '
            "on a GPU (the same QR, every eigenvalue). One pair of tasks of a dense Llama-3-8B cell is ~170 TFLOP: ~45 "
            "min on 2 CPU cores, seconds on a GPU's float64 units (benchmarks/bench_awom_dense.py); a GPU lease's 1.5 "
            "B-parameter cell was still in it after 85 s on 8 threads. The routes agree to 1e-12 relative "
            "(tests/test_metrics.py)."
        ),
        since="0.1.0",
    )

    def __post_init__(self) -> None:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", self.device):
            raise ConfigError(f"metrics.device={self.device!r}: choose cpu, cuda or cuda:N")

    def describe(self) -> str:
        """The forms in words, for the leaderboard's heading."""
        where = {"layer": "per task and layer", "task": "per task, all layers", "absolute": "absolute"}[self.acr]
        tau = f"τ={self.tolerance:g}" + ("" if self.acr == "absolute" else "·max|ΔW|")
        awom = (
            "eq. 8 (ΔW_T ΔW_iᵀ in PEFT's out × in layout)"
            if self.awom == "eq8"
            else "transposed (ΔW_Tᵀ ΔW_i in PEFT's layout)"
        )
        dw = "α/r·B·A" if self.delta_w == "applied" else "B·A (no α/r)"
        return f"ACR non-zero |x| > {tau} ({where}); AWOM {awom}; LoRA ΔW = {dw}"


# --------------------------------------------------------------------------- parsing
def parse_value(text: str) -> Any:
    """``100`` → 100, ``1e-3`` → 0.001, ``true`` → True, ``[1,2]`` → [1, 2], anything else a string."""
    low = text.strip().lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def parse_sets(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["ewc.lambda=100", "lps.beta=0.5,0.7"]`` → ``{"ewc.lambda": [100], "lps.beta": [0.5, 0.7]}``.

    A comma outside brackets makes a sweep: one cell per value. A list is written in brackets, so a list-valued
    setting can be swept too: ``model.hidden=[512,512]`` is one value, ``model.hidden=[256],[512,512]`` two.
    """
    out: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected SCOPE.FIELD=VALUE, e.g. ewc.lambda=100")
        key, _, value = item.partition("=")
        key = key.strip()
        if "." not in key:
            raise ConfigError(f"--set {item!r}: the key needs a scope, e.g. ewc.lambda or train.epochs")
        if key in out:  # the last would silently win
            raise ConfigError(f"--set {key} is given twice; give it once (a comma list sweeps several values)")
        out[key] = [parse_value(v) for v in split_top_level(value, item)]
    return out


def split_top_level(text: str, item: str) -> list[str]:
    """``text`` cut at the commas outside brackets, braces and quotes (``[1,2],[3]`` → ``[1,2]``, ``[3]``)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"--set {item!r}: a '{ch}' closes nothing")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quote:
        raise ConfigError(f"--set {item!r}: an unclosed {quote or '[ or {'}")
    return [*parts, text[start:]]


# --------------------------------------------------------------------------- dataclass overrides
def _field_name(cls: type, key: str) -> str:
    names = {f.name for f in fields(cls)}
    found = field_for(key, names)
    if found is not None:
        return found
    public = sorted(public_name(n) for n in names)
    hint = did_you_mean(key, public)  # the names --set takes (lambda, not the field's lambda_)
    extra = f" — did you mean {hint!r}?" if hint else ""
    raise ConfigError(f"unknown setting {key!r} for {cls.__name__}{extra} Settings: {', '.join(public)}")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{where}: {value!r} does not fit {tp}")
    if origin is typing.Literal:
        if value in typing.get_args(tp):
            return value
        raise ConfigError(f"{where}: {value!r} is not one of {list(typing.get_args(tp))}")
    if origin in (tuple, list):
        if isinstance(value, (str, int, float)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, where) for v in value]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # NaN, ±inf, or 1e400 parsed as inf: no result file could hold it
                raise ConfigError(f"{where}={value!r}: expected a finite number")
            return float(value)
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def apply(cls: type, base: Any | None, values: Mapping[str, Any], scope: str) -> Any:
    """Build ``cls`` from ``base`` (or defaults) with ``values`` applied, validating every key."""
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{scope}: config class {cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    changes = {}
    for key, value in values.items():
        name = _field_name(cls, key)
        changes[name] = _coerce(value, hints[name], f"{scope}.{key}")
    try:
        obj = cls(**changes) if base is None else dataclasses.replace(base, **changes)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{scope}: {exc}") from exc
    for f in fields(obj):  # declared ranges (`bounded`), defaults included: a bad default is the plugin's bug
        bounds = f.metadata.get("range")
        if bounds:
            check_range(getattr(obj, f.name), bounds, f"{scope}.{public_name(f.name)}")
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-able dict of a config dataclass (keys without the trailing ``_`` of ``lambda_``)."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        out[public_name(f.name)] = list(v) if isinstance(v, tuple) else v
    return out


def preset_keys(profile: str | Sequence[str], stream: str, order: str) -> list[str]:
    """The preset keys a cell reads, the least specific first: ``profile``, ``profile/stream``,
    ``profile/stream/order``; for a profile's lineage (``ProfileSpec.extends``, the most basic first) each one's
    keys in turn, so an extending profile's presets, at any level, are laid over its base's."""
    names = (profile,) if isinstance(profile, str) else tuple(profile)
    return [key for p in names for key in (p, f"{p}/{stream}", f"{p}/{stream}/{order}")]


def preset_values(
    presets: Mapping[str, Mapping[str, Any]], profile: str | Sequence[str], stream: str, order: str
) -> dict[str, Any]:
    """Merge presets from the least to the most specific key (:func:`preset_keys`)."""
    out: dict[str, Any] = {}
    for key in preset_keys(profile, stream, order):
        out.update(presets.get(key, {}))
    return out


def split_scoped(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"train.lr": 1, "model.hidden": 2, "orders": [..]}`` → ``{"train": {"lr": 1}, "model": ..., "": ...}``."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        scope, _, name = key.rpartition(".") if "." in key else ("", "", key)
        out.setdefault(scope, {})[name] = value
    return out
