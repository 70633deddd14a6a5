"""The method contract: the object a :class:`~clbench.specs.MethodSpec` builds for one cell.

The runner owns the loop; a method only answers questions at fixed points:

=====================  ==============================================================
``setup``              once per cell, after the model is built (inject adapters, masks)
``train_tasks``        which tasks' data to train on for this step (joint training: all seen)
``phases``             the training phases of a task (default: one, from the cell's TrainConfig); a phase may
                       bring its own batches and loss (GDumb's memory, DGR's generator): see :class:`Phase`
``before_task``        before the first phase of a task
``before_phase``       before each phase (a fresh optimizer is built after it)
``parameters``         what the optimizer of a phase updates
``sparse_coordinates`` where each masked parameter may move in a phase: optimizer state only there
``loss_terms``         extra loss terms for one batch, by name (EWC penalty, O-LoRA orthogonality)
``after_backward``     after ``backward()``, before the step: mask gradients here
``after_step``         after the optimizer step: re-apply masks, projections
``after_epoch``        after each epoch of a phase (ADMM dual updates)
``after_task``         after the last phase (Fisher, pruning, merging, freezing)
``footprint``          what this task changed, per parameter (LowRank / Masked / Dense)
``evaluating``         a context for evaluating one task (select that task's mask / adapter)
``report``             JSON-able numbers for the result file (capacity used, share ratio, ...)
``state_dict``         everything needed to resume after a task (tensors, lists, numbers)
=====================  ==============================================================

Methods return values; they do not reach into the runner. Per-cell shared state (e.g. the LoRA
adapters two composed methods act on) lives in ``ctx.stash``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch
from torch import Tensor, nn

from clbench.data import Batch, Stream, TaskData
from clbench.distributed import SINGLE, Dist, full_value
from clbench.errors import ClbenchError
from clbench.footprints import Dense, TaskFootprint

if TYPE_CHECKING:
    from clbench.config import TrainConfig
    from clbench.model import CLModel

T = TypeVar("T")


class StashKey(Generic[T]):
    """A typed key into a :class:`Stash` (as in pytest)."""

    __slots__ = ()


class Stash:
    """Typed per-cell storage shared by the parts of a composed method."""

    def __init__(self) -> None:
        self._data: dict[StashKey[Any], Any] = {}

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._data[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        return self._data[key]

    def get(self, key: StashKey[T], default: T | None = None) -> T | None:
        return self._data.get(key, default)

    def setdefault(self, key: StashKey[T], default: T) -> T:
        return self._data.setdefault(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data


MASTERS: StashKey[Any] = StashKey()
"""The cell's float32 masters of its low-precision trained weights (``clbench._core.optim.Masters``), in
``ctx.stash``; read them through :meth:`CellContext.trained_value`."""


@dataclass
class CellContext:
    """What a method may know about its cell."""

    stream: Stream
    order: list[str]
    train: TrainConfig
    device: torch.device
    seed: int
    stash: Stash = field(default_factory=Stash)
    options: dict[str, Any] = field(default_factory=dict)
    # data parallelism (``--nproc``): this process's rank; every rank runs the method on the same weights, a
    # step's batch is split between them and gradients are summed before ``after_backward`` (clbench.distributed)
    dist: Dist = SINGLE

    def data(self, task: str) -> TaskData:
        return self.stream.data(task)

    def trained_value(self, p: nn.Parameter) -> Tensor:
        """``p`` as the optimizer holds it: the float32 master of a low-precision weight that trains (a step below
        one bf16 ulp moves the master, not the weight: a footprint of the weight would measure rounding), the weight
        itself otherwise (float32 weights, frozen ones)."""
        masters = self.stash.get(MASTERS)
        value = masters.value(p) if masters is not None else None
        return full_value(p.detach()) if value is None else value  # (a sharded weight: gathered whole)

    def generator(self, *salt: int) -> torch.Generator:
        """A CPU generator seeded from the cell seed and ``salt`` (deterministic, resumable)."""
        g = torch.Generator()
        g.manual_seed(derive_seed(self.seed, *salt))
        return g


def derive_seed(seed: int, *salt: int) -> int:
    h = seed & 0xFFFFFFFF
    for s in salt:
        h = (h * 1_000_003 + int(s) + 0x9E3779B9) & 0x7FFFFFFF
    return h


def seed_torch(seed: int) -> None:
    """``torch.manual_seed`` for the devices this machine has: the CPU generator, and CUDA's and MPS's only
    where they exist. On a machine without them ``torch.manual_seed`` still queues a lazy CUDA seeding call
    holding a formatted stack trace (~1 ms each, and never freed): a tenth of a quick cell's fixed cost."""
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


@dataclass(frozen=True)
class MaskPlan:
    """A masked method's declaration for the memory plan (:meth:`Method.mask_plan`): each weight matrix's mask keeps
    ``density`` of it; ``disjoint``: a task's masks avoid the earlier tasks' (their union grows by ``density`` a
    task), else they are drawn independently; ``anchor_at_masks``: the method keeps its anchor at the masks only;
    ``fisher_at_masks``: its device copy of a float32 Fisher too (the whole one in host memory); ``dense_first``: a
    phase that trains every coordinate comes before the masked one (LoTA's calibration), so low-precision weights
    have whole float32 masters, not masters of the masks' union."""

    density: float
    disjoint: bool = False
    anchor_at_masks: bool = False
    fisher_at_masks: bool = False
    dense_first: bool = False


@dataclass(frozen=True)
class Phase:
    """One training phase of a task: epochs over the data with its own optimizer.

    ``lr_milestones``: the rate is multiplied by ``lr_gamma`` after each listed epoch of the phase (counted
    from 1; torch's MultiStepLR, stepped once per epoch). ``optimizer_group``: consecutive phases of a task
    with the same non-empty group share one optimizer, built for the first of them, its state (momentum,
    Adam's moments and step count) carried on; they must train the same parameters.

    A method fits on data of its own through the harness's step by declaring a phase for it, so the step budget
    (``train.steps_per_task``, shared among a task's phases by their epochs), fp32 masters, clipping, the divergence
    check, data parallelism and the steps counted in the result's timings apply to it as to any phase:
    ``batches(epoch)``: the phase's own batches for that epoch (GDumb's memory), deterministic per epoch (every
    rank and a resumed cell draw the same); None: the task's training data (:meth:`Method.train_tasks`).
    ``task_loss=False``: the model is not run on the batch and the loss is the method's loss terms alone
    (``loss_terms(batch, None)``; DGR's generator, whose parameters :meth:`Method.parameters` gives for the phase).
    """

    name: str
    epochs: int
    lr: float
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_milestones: tuple[int, ...] = ()
    lr_gamma: float = 0.1
    optimizer_group: str = ""
    batches: Callable[[int], Iterable[Batch]] | None = field(default=None, compare=False, repr=False)
    task_loss: bool = True

    def __post_init__(self) -> None:
        if list(self.lr_milestones) != sorted(set(self.lr_milestones)) or any(m < 1 for m in self.lr_milestones):
            raise ClbenchError(
                f"phase {self.name!r}: lr_milestones {list(self.lr_milestones)} must be increasing epochs ≥ 1"
            )
        if not self.lr_gamma > 0:
            raise ClbenchError(f"phase {self.name!r}: lr_gamma {self.lr_gamma} must be positive")

    @classmethod
    def from_train(cls, train: TrainConfig, name: str = "train", **changes: Any) -> Phase:
        base = cls(name, train.epochs, train.lr, train.optimizer, train.momentum, train.weight_decay)
        return replace(base, **changes)

    def torch_optimizer(
        self, params: list[Tensor], fused: bool = False, capturable: bool = False
    ) -> torch.optim.Optimizer:
        """The phase's torch optimizer over ``params`` (what the runner builds for it); ``fused`` (``train.fused`` on
        a GPU): torch's fused implementation for Adam, AdamW and SGD, where every parameter is a floating-point CUDA
        tensor; ``capturable`` (``train.capture``): Adam's, AdamW's and RMSProp's form that a CUDA graph can record (its
        step count on the device), where every parameter is a CUDA tensor."""
        cuda = bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)
        kw: dict[str, Any] = {"fused": True} if fused and cuda else {}
        if capturable and cuda and self.optimizer != "sgd":  # (SGD keeps no step count: recordable as it is)
            kw["capturable"] = True
        if self.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, **kw)
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay, **kw)
        if self.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay, **kw)
        if self.optimizer == "rmsprop":
            kw.pop("fused", None)  # (torch has no fused RMSProp)
            return torch.optim.RMSprop(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay, **kw)
        raise ClbenchError(f"unknown optimizer {self.optimizer!r}")


class Method:
    """Base class with neutral defaults: subclassing it and overriding nothing gives SeqFT."""

    # False: loss_terms never reads ``logits`` (it gets None), so the model may skip scoring every label
    # during training (CLModel.training_loss). True is the safe default for a method that does not say.
    needs_logits: bool = True
    # The loss terms this method returns as values only, without a graph: their gradient is formed and added to
    # ``p.grad`` in ``after_backward`` (EWC's quadratic penalty, whose autograd graph would hold two more copies of
    # every penalised weight). Any other term must carry its gradient; the plugin kit's checks hold methods to it.
    value_only_terms: frozenset[str] = frozenset()
    # Where ``train_tasks`` names several tasks: True draws each batch from their union, shuffled together, when the
    # model's one head is shared by every task (class- and domain-incremental; clbench.data.mixed_batches), as a
    # multi-task learner trains; with a head per task (task-incremental), or False, each batch holds one task and the
    # tasks' batches are interleaved at random (each batch goes to one head).
    mix_tasks: bool = False

    def __init__(self, config: Any, ctx: CellContext) -> None:
        self.config = config
        self.ctx = ctx
        self.model: CLModel | None = None
        self._before: dict[str, Tensor] = {}

    # -- structure ----------------------------------------------------------------
    def setup(self, model: CLModel) -> None:
        self.model = model

    def parameters(self, model: CLModel, phase: Phase) -> list[nn.Parameter]:
        return [p for p in model.parameters() if p.requires_grad]

    def sparse_coordinates(self, phase: Phase) -> list[tuple[nn.Parameter, Tensor]]:
        """(parameter, bool mask) pairs: the only coordinates of that parameter this phase moves.

        Asked after ``before_phase``. The runner then keeps optimizer state for those coordinates
        only (:class:`clbench._core.optim.PackedState`); the method must still keep the other coordinates
        still (zero their gradients in ``after_backward``) — the packing only saves the memory.
        """
        return []

    def mask_plan(self) -> MaskPlan | None:
        """For a method that trains masks of a set density, what the memory plan needs to count its packed state
        (:mod:`clbench._exec.memory`); None (the default): no masks, or masks whose size follows from values."""
        return None

    def train_tasks(self, index: int) -> list[str]:
        return [self.ctx.order[index]]

    def phases(self, task: str, index: int) -> list[Phase]:
        return [Phase.from_train(self.ctx.train)]

    # -- task lifecycle -----------------------------------------------------------
    def before_task(self, task: str, index: int) -> None:
        assert self.model is not None
        # the task's starting values, on the host: read once at the task's end (the footprint), they need not take
        # device memory (an 8B bf16 model's fp32 masters: 30 GiB); read them on the device with task_start
        self._before = {
            n: self.ctx.trained_value(p).to("cpu", copy=True) for n, p in self.footprint_parameters().items()
        }

    def task_start(self, name: str) -> Tensor:
        """The value footprint parameter ``name`` had when the task started, on the cell's device."""
        return self._before[name].to(self.ctx.device)

    def before_phase(self, phase: Phase, task: str, index: int) -> None:
        pass

    def loss_terms(self, batch: Batch, logits: Tensor | None) -> dict[str, Tensor]:
        """Extra loss terms for this batch, by name; each joins the loss and must carry its gradient, but for a
        name in :attr:`value_only_terms`. ``logits`` is None when ``needs_logits`` is False."""
        return {}

    def after_backward(self) -> None:
        pass

    def after_step(self) -> None:
        pass

    def after_epoch(self, phase: Phase, epoch: int) -> None:
        pass

    def after_task(self, task: str, index: int) -> None:
        pass

    # -- reporting ----------------------------------------------------------------
    def footprint_parameters(self) -> dict[str, nn.Parameter]:
        """Shared weight matrices whose change is this task's footprint (output heads excluded)."""
        assert self.model is not None
        heads = self.model.output_parameter_names()
        return {n: p for n, p in self.model.named_parameters() if p.dim() >= 2 and n not in heads}

    def footprint(self, task: str, index: int) -> TaskFootprint:
        now = self.footprint_parameters()
        return {n: Dense(self.ctx.trained_value(now[n]).cpu() - before) for n, before in self._before.items()}

    @contextlib.contextmanager
    def evaluating(self, task: str) -> Iterator[None]:
        yield

    def report(self) -> dict[str, Any]:
        return {}

    # -- resume -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
