"""Typed specs that plugins return from the registration hooks.

A spec is a frozen description of something a plugin offers: its name, a factory, the dataclass that
holds its settings, and the tags the planner needs to decide what can run with what. Specs carry no
state; the objects they build do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from clbench.data import Stream
    from clbench.method import Method
    from clbench.metrics import MetricInput
    from clbench.model import CLModel, StreamInfo

FootprintKind = Literal["dense", "lowrank", "masked", "none"]
Direction = Literal["up", "down"]
MetricNeeds = Literal["matrix", "footprint", "lowrank", "report"]


@dataclass(frozen=True)
class EmptyConfig:
    """Settings dataclass for plugins that have none."""


# A preset maps dotted keys to values; presets are looked up by "profile", "profile/stream" and
# "profile/stream/order" (most specific wins), see clbench.config.
Presets = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Memory:
    """How a method's examples are counted in one of its settings: ``setting`` (a field of its config) holds the
    examples it keeps in total (``per="total"``: a reservoir, GDumb's memory, iCaRL's K) or a task (``per="task"``:
    GEM's episodic memory of each finished task, so T tasks keep T × the setting)."""

    setting: str
    per: Literal["total", "task"] = "total"

    def value_for(self, budget: int, tasks: int) -> int:
        """The setting that keeps at most ``budget`` examples at the end of a stream of ``tasks`` tasks."""
        return budget if self.per == "total" else budget // tasks

    def capacity(self, value: int, tasks: int) -> int:
        """The examples the setting at ``value`` lets it keep at the end of a stream of ``tasks`` tasks."""
        return value if self.per == "total" else value * tasks


@dataclass(frozen=True)
class MemorySpec:
    """A method's :class:`Memory`, given apart from its :class:`MethodSpec` (``clbench_add_memory``): by the
    method's plugin or by another, as :class:`TargetsSpec` gives a profile its paper's numbers."""

    method: str
    memory: Memory

    @property
    def name(self) -> str:  # (registries key specs by name: one declaration a method)
        return self.method


@dataclass(frozen=True)
class CapabilitySpec:
    """What a method takes and needs, or what a model provides, given apart from its own spec
    (``clbench_add_capabilities``), as :class:`MemorySpec` gives a method its memory: a declaration decides which
    cells the planner builds, never a cell's numbers. ``kind="method"``: ``modalities``, the inputs it takes (a stream
    of another modality is refused at plan time; its own spec must leave them open), and ``requires``, interfaces its
    model must provide (added to its own); ``kind="model"``: ``provides`` (added to its own)."""

    kind: Literal["method", "model"]
    target: str
    modalities: frozenset[str] = frozenset()
    requires: frozenset[str] = frozenset()
    provides: frozenset[str] = frozenset()

    @property
    def name(self) -> str:  # (registries key specs by name: one declaration a method or model)
        return f"{self.kind}:{self.target}"


@dataclass(frozen=True)
class ShardingSpec:
    """That a method runs correctly with its model's weights sharded over the ranks (``train.shard=full``), given
    apart from its :class:`MethodSpec` (``clbench_add_sharding``): a method whose only use of the weights is the
    model's forward and backward (no copy, anchor, mask or per-weight state of its own)."""

    method: str
    shardable: bool = True

    @property
    def name(self) -> str:  # (registries key specs by name: one declaration a method)
        return self.method


@dataclass(frozen=True)
class MethodSpec:
    """A continual-learning method.

    ``factory(config, ctx)`` builds a fresh :class:`clbench.method.Method` for one cell.
    ``requires`` lists capabilities the model must provide (e.g. ``{"lora"}``); the planner skips
    methods whose requirements a stream's model cannot meet when running ``--methods all``.
    ``composable`` methods only contribute loss terms on shared structure and may be joined with ``+``.
    ``tune`` gives the log-uniform ranges ``(low, high)`` that ``clbench tune`` searches for its own settings: its
    strength(s) (EWC's ``lambda``) and, under the name ``lr``, a learning rate of its own that replaces
    ``train.lr`` (the expander family's RMSProp step); a method without ``lr`` there is tuned on ``train.lr``.
    ``scenarios`` are the test-time scenarios it can run in (:data:`clbench.data.SCENARIOS`; empty: all): a
    method that picks a per-task mask, head or adapter at test time needs ``{"task-incremental"}``, and is
    reported as unable to run on another stream, never moved to another scenario. ``modalities`` are the inputs it
    takes (``vector``, ``image``, ``text``; empty: any): a method that stores or generates input tensors takes no
    text, and is refused on a text stream before any cell starts (:class:`CapabilitySpec` declares it apart).
    """

    name: str
    factory: Callable[..., Method]
    config_cls: type = EmptyConfig
    description: str = ""
    footprint_kind: FootprintKind = "dense"
    requires: frozenset[str] = frozenset()
    composable: bool = False
    presets: Presets = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    scenarios: frozenset[str] = frozenset()
    tune: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # Whether it trains the model's own weights in full (a model config with ``train_base=false`` then leaves it
    # nothing to train, refused at plan time). None: a method whose footprint is dense; LoRA methods bring their
    # adapters and masked methods select their coordinates themselves.
    trains_base: bool | None = None
    # Whether its training step is the same tensor program at every step of a phase: its loss terms and hooks make no
    # Python decision on a value and keep no state outside tensors. Only such a step may be recorded as a CUDA graph
    # and replayed (``train.capture``; clbench/_exec/capture.py).
    static_step: bool = False
    # Whether a data-parallel cell (``--nproc N``, torchrun) gives the numbers of one process accumulating the ranks'
    # micro-batches (``train.grad_accum=N``). False for a method whose state is built per rank from what that rank
    # saw: a buffer filled from its own micro-batches (DER, ER-ACE), a random draw per micro-batch from each rank's own
    # generator (DGR's samples). Such a method is refused before any cell starts, naming it; tests/test_ddp.py holds
    # every registered method that says True to the one-process numbers.
    data_parallel: bool = True
    # The examples it keeps, as one of its settings (``train.memory`` sets it); None: it keeps none. A plugin may
    # declare it here or with ``clbench_add_memory`` (:class:`MemorySpec`), not both.
    memory: Memory | None = None
    # Whether it gives one process's numbers with the model's weights sharded over the ranks (``train.shard=full``):
    # it reads the weights only through the model's forward and backward. False: refused before a sharded cell starts.
    # A plugin may declare it here or with ``clbench_add_sharding`` (:class:`ShardingSpec`).
    shardable: bool = False
    # The inputs it takes (``vector``, ``image``, ``text``; empty: any), checked against a stream's modality at plan
    # time. A plugin may declare it here or with ``clbench_add_capabilities`` (:class:`CapabilitySpec`).
    modalities: frozenset[str] = frozenset()

    @property
    def trains_model(self) -> bool:
        return self.footprint_kind == "dense" if self.trains_base is None else self.trains_base


@dataclass(frozen=True)
class ModelSpec:
    """A network builder. ``factory(config, info)`` returns a :class:`clbench.model.CLModel`.

    The core reads three fields of the model's config, by the names declared here (None: the config has none):
    ``weights_field`` names the weights to load (``--model-path`` sets it), ``heads_field`` overrides the stream's
    heads (a bool: one head per task; refused where it would change the stream's scenario), and
    ``checkpointing_field`` switches activation checkpointing (the memory plan suggests it where it is off).
    """

    name: str
    factory: Callable[[Any, StreamInfo], CLModel]
    config_cls: type = EmptyConfig
    description: str = ""
    modalities: frozenset[str] = frozenset({"vector"})
    provides: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()
    weights_field: str | None = "name_or_path"
    heads_field: str | None = "multi_head"
    checkpointing_field: str | None = "gradient_checkpointing"

    def setting(self, config: Any, role: Literal["weights", "heads", "checkpointing"]) -> Any:
        """The value ``config`` holds in the field declared for ``role``; None where there is none."""
        name = {"weights": self.weights_field, "heads": self.heads_field, "checkpointing": self.checkpointing_field}[
            role
        ]
        return None if name is None else getattr(config, name, None)


@dataclass(frozen=True)
class StreamSpec:
    """A task stream. ``factory(config)`` returns a :class:`clbench.data.Stream`.

    ``presets`` give, per profile, the orders to run and the model and training settings, e.g.
    ``{"quick": {"orders": ["1", "2"], "model": "mlp", "train.epochs": 2}}``. A stream belongs to a
    profile when it has a preset for it. Its data files are named in results relative to the folder in the config
    field ``data_dir_field`` (None: the stream reads no folder).
    """

    name: str
    factory: Callable[[Any], Stream]
    config_cls: type = EmptyConfig
    description: str = ""
    presets: Presets = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    data_dir_field: str | None = "data_dir"  # the config field naming the data's folder (--data-dir sets it)
    # Every task is scored on the same test examples, in the same order, each transformed its own way (permuted or
    # rotated images): the verdict rule's bootstrap then resamples them once for all tasks (their errors correlate).
    # Also given apart from the spec (:class:`TestSetSpec`).
    shared_test_set: bool = False


@dataclass(frozen=True)
class TestSetSpec:
    """That every task of a stream is scored on the same test examples in the same order (each task transforming them
    its own way: permuted or rotated images), given apart from its :class:`StreamSpec` (``clbench_add_test_sets``).
    The verdict rule's bootstrap resamples such a stream's test examples once for all its tasks."""

    __test__ = False  # (not a pytest test class, whatever its name)

    stream: str
    shared_test_set: bool = True

    @property
    def name(self) -> str:  # (registries key specs by name: one declaration a stream)
        return self.stream


FORMS = {
    "class-incremental": "the tasks, each with its own labels, as one class-incremental problem: one head over the "
    "union of their labels and no task identity at test time",
}
"""The forms a stream can be given (:class:`StreamFormSpec`), with what each makes of it."""


@dataclass(frozen=True)
class StreamFormSpec:
    """Another stream made from a registered one by a transform the core knows (``form``, one of :data:`FORMS`),
    registered as ``name`` (``clbench_add_stream_forms``). ``class-incremental``: a task-incremental stream's tasks,
    each with its own label set, trained and scored as one class-incremental problem — one head over the union of
    their labels (each task's labels kept, or named ``task/label`` where two tasks share a name), the base's data,
    orders, settings and augmentation. The form's cells are identified by the base stream's code and data: the
    transform is the core's (:class:`clbench.data.ClassIncrementalForm`). It takes the base's presets (the model and
    settings each profile gives it) but is none of a profile's default streams: it runs when named (``--stream``)."""

    name: str
    base: str
    form: str = "class-incremental"
    description: str = ""


@dataclass(frozen=True)
class MetricSpec:
    """A number computed from a cell's result.

    ``fn(inp)`` returns a float, or ``None`` when the metric does not apply (printed "n/a", never 0).
    ``needs`` says what it reads: the accuracy matrix, any footprint, low-rank footprints only, or the
    method's report. ``aggregate`` is how the leaderboard combines cells (mean ± std over seeds).
    """

    name: str
    fn: Callable[[MetricInput], float | None]
    direction: Direction
    needs: MetricNeeds = "matrix"
    description: str = ""
    aggregate: Literal["mean"] = "mean"
    leaderboard: bool = True
    # A diagnostic describes how updates interfere (or what a method reports) and is never ranked or bold; an
    # objective (AA, F.Ra, ...) is judged by the verdict rule. None: diagnostic unless it reads only the matrix.
    diagnostic: bool | None = None

    @property
    def is_diagnostic(self) -> bool:
        return self.needs != "matrix" if self.diagnostic is None else self.diagnostic


@dataclass(frozen=True)
class Workers:
    """How a cell runs in another process, handed to every executor as :attr:`ExecutorContext.worker`, so an executor
    plugin needs nothing of the harness but this. ``start(disabled, fail_fast, parent=None, started=None)`` sets up
    a worker process (a process pool's initializer; ``parent``: the pid of the process that starts the pool, whose
    death ends the worker; ``started``: a queue that gets (pid, cell key) as each cell starts) and ``run(cell)``
    runs a cell there; ``run_one(cell, disabled, fail_fast, nproc)`` sets up the process it is called in and runs
    one cell on ``nproc`` data-parallel ranks (a remote task)."""

    start: Callable[..., None]  # (disabled, fail_fast, parent=None, started=None)
    run: Callable[[Any], Any]
    run_one: Callable[[Any, Sequence[str], bool, int], Any]


@dataclass(frozen=True)
class ExecutorContext:
    """What an executor is built with: the run's settings the core decides, and ``options``, the executor's own
    (``--jobs``: ``jobs``; Ray's ``address``, ``cell_cpus``, ``cell_gpus``). ``nproc``: the data-parallel
    processes a cell was asked to run on (None: the executor decides, else 1)."""

    worker: Workers
    options: Mapping[str, Any] = field(default_factory=dict)
    disabled: tuple[str, ...] = ()
    fail_fast: bool = False
    requires_gpu: bool = False
    in_process_plugins: tuple[str, ...] = ()
    nproc: int | None = None


class Executor(Protocol):
    """What an :class:`ExecutorSpec`'s factory builds: ``run`` runs ``cells`` through ``run_cell`` (the harness's
    own) wherever it places them, yielding each result as it finishes; ``nproc`` is the processes each cell runs
    on there (part of every cell's identity)."""

    nproc: int

    def run(self, cells: Iterable[Any], run_cell: Callable[[Any], Any]) -> Iterator[Any]: ...


@dataclass(frozen=True)
class ExecutorSpec:
    """Where cells run. ``factory(context)`` (an :class:`ExecutorContext`) returns an :class:`Executor`."""

    name: str
    factory: Callable[[ExecutorContext], Executor]
    description: str = ""


@dataclass(frozen=True)
class ProfileSpec:
    """A named, versioned set of defaults for ``clbench run``.

    The streams of a profile are those whose ``StreamSpec.presets`` name it (unless ``streams`` lists
    them); its methods are ``methods`` (``"all"``: every registered method that fits the stream).
    ``sets`` are ``--set``-style overrides applied before the user's own; ``stream_sets`` add one stream's own
    (``{stream: {"train.steps_per_task": 85}}``: a budget that depends on the stream's task size), laid over
    ``sets`` on that stream. ``rows`` give a method label its own
    settings on one stream, ``{stream: {label: {"train.lr": 0.03, "der.alpha": 0.2}}}``: the settings a paper's
    table used for each of its rows (its code's per-method arguments), laid over the stream's and the method's
    presets and under ``sets`` and ``--set``.
    """

    name: str
    description: str = ""
    version: str = "1"
    seeds: tuple[int, ...] = (0,)
    methods: str | tuple[str, ...] = "all"
    streams: tuple[str, ...] | None = None
    sets: Mapping[str, Any] = field(default_factory=dict)
    stream_sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    requires_gpu: bool = False
    rows: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    # the paper's published numbers for these rows (clbench._tools.parity: its file format and the verdict rule);
    # `clbench leaderboard` shows them beside clbench's
    targets: Mapping[str, Any] = field(default_factory=dict)
    # Another profile whose presets this one reads first: every stream's and method's preset keyed by the base's
    # name applies, then those keyed by this one's (a track of a profile, tuned on its own budget, gets its own
    # presets over the base's). Its streams default to the base's; its seeds, methods, sets and rows are its own.
    extends: str | None = None
    # Per stream, the method labels that train at this profile exactly as at the one it extends (the same settings
    # but the track's own, the same optimizer steps a task): the base's tuning is theirs, and `clbench tune` does not
    # search them again. A claim about computation, checked against result trees (docs/tuning.md).
    base_tuned: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def sets_for(self, stream: str) -> dict[str, Any]:
        """The profile's settings of a cell of ``stream``: its ``sets``, then that stream's ``stream_sets``."""
        return {**self.sets, **self.stream_sets.get(stream, {})}


@dataclass(frozen=True)
class TargetsSpec:
    """A paper's published numbers for a profile another plugin registers (``clbench_add_targets``): the same data
    as ``ProfileSpec.targets`` (:mod:`clbench._tools.parity` gives the format), kept apart from the profile so that
    a paper's numbers can be added, or corrected, without changing the plugin whose code makes the cells. A
    profile takes its targets from one place: its own spec or one such plugin."""

    profile: str
    targets: Mapping[str, Any]

    @property
    def name(self) -> str:  # (registries key specs by name: one set of targets a profile)
        return self.profile


@dataclass(frozen=True)
class OptionSpec:
    """An extra ``clbench run`` option a plugin adds: ``--<name>``; its value lands in ``Cell.options`` for
    every plugin of the run, under the option's name with ``-`` as ``_`` (``--task-log`` →
    ``cell.options["task_log"]``); run plumbing, not part of a cell's config hash."""

    name: str
    help: str
    default: Any = None
    type: Any = str
    is_flag: bool = False
    # the executor this option configures (``ray``): given to a run on another executor it is refused, not ignored
    executor: str = ""
