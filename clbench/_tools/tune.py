"""``clbench tune``: choose a profile's learning rates and method strengths by one protocol, apart from reporting.

For every stream × method label that ``clbench run --profile P`` plans (docs/tuning.md says why each step):

1. **Search.** A scrambled Sobol sequence (``scipy.stats.qmc``, seeded per stream × method) over the log ranges of
   its learning rate — its own ``lr`` where :attr:`MethodSpec.tune` names one, else ``train.lr`` over
   :data:`LR_RANGES` of its optimizer — and of its strengths (the other keys of :attr:`MethodSpec.tune`), of
   :func:`trials_for` configurations: under the ``per-setting`` rule ``trials`` for each setting searched, rounded up
   to a power of two (8, 16, 32 for one, two, three settings at ``trials=8``), so that a method with more settings
   is not searched more coarsely (docs/tuning.md says why linearly); under the ``flat`` rule ``trials`` whatever
   the number. The rule a tuning
   tree was searched by is recorded in it (:data:`SEARCH_FILE`). Values are rounded to 3 significant digits.
2. **Apart from reporting.** Each configuration runs on the **tuning seeds** (each reporting seed + ``offset``:
   its twin, never a reported seed) and a **held-out order** (the stream's first order that is not reported; the
   reported one where the stream has no other), scored by AA on the stream's validation split
   (``train.eval_split=val``).
3. **Select** the configuration with the highest mean validation AA among those where every seed completed.
4. **Edges.** A choice in the outer eighth of a range (log scale) extends that range by half its width beyond the
   edge and draws ``trials`` more configurations there (``extensions`` times at most); a choice still on an edge
   is reported as such.
5. **Stability.** The choice at 0.5× and 2× its learning rate, and at 0.5× and 2× its strengths (together), on the
   tuning seeds and order, scored the same way; a 2× move of the mean AA beyond the stream's margin Δ is flagged.

Every cell is an ordinary result under ``root`` (its point in ``config.sweep``; its footprints file deleted after
its stage, as nothing here reads it): the tuner derives each stage from the results already there, so rerunning it
resumes and a finished tree reproduces its report without training.
"""

from __future__ import annotations

import json
import math
import statistics
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clbench._core.registry import Registries
from clbench.cell import FOOTPRINT_FILE, Cell, CellResult
from clbench.config import field_for
from clbench.errors import ConfigError
from clbench.specs import ProfileSpec

# Log ranges of train.lr by optimizer (a method with an ``lr`` of its own declares its range in MethodSpec.tune).
LR_RANGES: dict[str, tuple[float, float]] = {
    "sgd": (0.005, 0.2),
    "adam": (3e-4, 3e-2),
    "adamw": (3e-4, 3e-2),
    "rmsprop": (1e-4, 1e-2),
}
RULES = ("per-setting", "flat")
SEARCH_FILE = "search.json"  # in a tuning tree: {"trials": N, "rule": R}, the search its cells were drawn by
EDGE = 1 / 8  # a coordinate within this share of either end of its log range is on the edge
STABILITY = (("lr", 0.5), ("lr", 2.0), ("strength", 0.5), ("strength", 2.0))


@dataclass(frozen=True)
class Space:
    """What is searched for one label: the learning-rate key, then its strength keys, each with a log range."""

    keys: tuple[str, ...]
    ranges: tuple[tuple[float, float], ...]

    @property
    def lr_key(self) -> str:
        return self.keys[0]

    @property
    def strength_keys(self) -> tuple[str, ...]:
        return self.keys[1:]


def space_for(regs: Registries, cell: Cell) -> Space:
    """The search space of a cell's method label (its parts' ``tune`` ranges; ``train.lr`` unless one owns ``lr``)."""
    lr: tuple[str, tuple[float, float]] | None = None
    strengths: list[tuple[str, tuple[float, float]]] = []
    for part in cell.parts:
        spec = regs.methods.get(part)
        fields = set(getattr(spec.config_cls, "__dataclass_fields__", {}))
        for name, (low, high) in sorted(spec.tune.items()):
            if field_for(name, fields) is None or not 0 < low < high:
                raise ConfigError(
                    f"method {part!r}: tune range {name}={low!r}..{high!r} must name one of its settings "
                    f"({', '.join(sorted(fields)) or 'none'}) with 0 < low < high"
                )
            if name == "lr":
                lr = (f"{part}.lr", (low, high))
            else:
                strengths.append((f"{part}.{name}", (low, high)))
    if lr is None:
        optimizer = str(cell.train.optimizer).lower()
        if optimizer not in LR_RANGES:
            raise ConfigError(
                f"{cell.key}: no learning-rate range for optimizer {optimizer!r} (clbench tune knows "
                f"{', '.join(LR_RANGES)}); give the method an own lr range in MethodSpec.tune"
            )
        lr = ("train.lr", LR_RANGES[optimizer])
    pairs = [lr, *strengths]
    return Space(tuple(k for k, _ in pairs), tuple(r for _, r in pairs))


def round3(x: float) -> float:
    return float(f"{x:.3g}")


def draw(space: Space, ranges: Sequence[tuple[float, float]], trials: int, salt: str) -> list[dict[str, float]]:
    """``trials`` configurations: a scrambled Sobol sequence (seeded by ``salt``) mapped onto the log ``ranges``."""
    from scipy.stats import qmc

    m = int(math.log2(trials))
    if 2**m != trials:
        raise ConfigError(f"trials={trials}: a Sobol sequence is balanced at a power of two (4, 8, 16, ...)")
    sample = qmc.Sobol(len(space.keys), scramble=True, seed=zlib.crc32(salt.encode())).random_base2(m)
    return [
        {
            k: round3(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))))
            for k, u, (lo, hi) in zip(space.keys, row, ranges, strict=True)
        }
        for row in sample
    ]


def trials_for(space: Space, trials: int, rule: str) -> int:
    """Configurations a round for ``space`` under ``rule`` (module docstring, step 1). A Sobol sequence's first 2^m
    points are those of every longer one from the same seed, so a tree searched at ``flat`` holds the first half (or
    quarter) of each ``per-setting`` round of two (or three) settings."""
    if rule not in RULES:
        raise ConfigError(f"search rule {rule!r}: one of {', '.join(RULES)}")
    if rule == "flat":
        return trials
    return 1 << (trials * len(space.keys) - 1).bit_length()


def search_of(root: Path, trials: int | None, rule: str | None) -> tuple[int, str]:
    """The search of the tuning tree ``root``: what it records, or for a tree that records none the one asked for
    (8 configurations a setting, ``per-setting``, by default). Asking for another than a tree records is refused,
    as the tree's choices would mix two searches, but for widening a ``flat`` tree to ``per-setting`` at the same
    ``trials``: its cells are the first points of the wider rounds, and only the rest run."""
    path = root / SEARCH_FILE
    if not path.is_file():
        return trials or 8, rule or "per-setting"
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        have = int(rec["trials"]), str(rec["rule"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f'{path}: not a search record ({err}); it holds {{"trials": N, "rule": R}}') from err
    if have[1] not in RULES:
        raise ConfigError(f"{path}: rule {have[1]!r} is not one of {', '.join(RULES)}")
    asked = (trials or have[0], rule or have[1])
    if asked == (have[0], "per-setting") and have[1] == "flat":
        return asked  # widened in place: a flat round is the first points of the per-setting round (trials_for)
    if asked != have:
        raise ConfigError(
            f"{root} was searched with --trials {have[0]} --search {have[1]}; asked --trials {asked[0]} --search "
            f"{asked[1]}: tune into another --out (a flat tree widens to per-setting in place at its own --trials)"
        )
    return have


def _same(a: Mapping[str, Any], b: Mapping[str, float]) -> bool:
    return set(a) == set(b) and all(math.isclose(float(a[k]), b[k], rel_tol=1e-9) for k in b)


@dataclass
class Trial:
    point: dict[str, float]
    scores: list[float] = field(default_factory=list)  # validation AA of the complete seeds
    statuses: list[str] = field(default_factory=list)

    def complete(self, seeds: int) -> bool:
        return len(self.statuses) == seeds and all(s == "complete" for s in self.statuses)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else float("nan")

    @property
    def sd(self) -> float:
        return statistics.stdev(self.scores) if len(self.scores) > 1 else 0.0


@dataclass
class Pair:
    """One stream × method label: where it is tuned, and (once read) its trials."""

    stream: str
    label: str
    cell: Cell  # the reporting plan's first cell of the label (its settings are the presets to check)
    space: Space
    order: str
    seeds: list[int]
    reported_seeds: list[int]
    reported_orders: list[str]
    rounds: list[list[tuple[float, float]]] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)  # every round's, in draw order
    stability: dict[str, Trial] = field(default_factory=dict)
    scenario: str | None = None  # the stream's, from its results (the verdict rule's Δ depends on it)

    @property
    def key(self) -> str:
        return f"{self.stream}/{self.label}"

    def best(self) -> Trial | None:
        done = [t for t in self.trials if t.complete(len(self.seeds))]
        return max(done, key=lambda t: (t.mean, -t.point[self.space.lr_key])) if done else None

    def edges(self, trial: Trial) -> dict[str, int]:
        """Keys whose value lies on an edge of the searched ranges (their union): -1 low, +1 high."""
        out = {}
        for i, k in enumerate(self.space.keys):
            lo = min(r[i][0] for r in self.rounds)
            hi = max(r[i][1] for r in self.rounds)
            u = (math.log(trial.point[k]) - math.log(lo)) / (math.log(hi) - math.log(lo))
            if u < EDGE:
                out[k] = -1
            elif u > 1 - EDGE:
                out[k] = 1
        return out

    def extended(self, edges: Mapping[str, int]) -> list[tuple[float, float]]:
        """The next round's ranges: each edge key's union range moved half its width past that edge."""
        out = []
        for i, k in enumerate(self.space.keys):
            lo = min(r[i][0] for r in self.rounds)
            hi = max(r[i][1] for r in self.rounds)
            if k not in edges:
                out.append(self.space.ranges[i])
                continue
            half = (math.log(hi) - math.log(lo)) / 2
            out.append((hi, math.exp(math.log(hi) + half)) if edges[k] > 0 else (math.exp(math.log(lo) - half), lo))
        return out

    def variants(self, chosen: Trial) -> dict[str, dict[str, float]]:
        out = {}
        for what, factor in STABILITY:
            keys = [self.space.lr_key] if what == "lr" else list(self.space.strength_keys)
            if keys:
                out[f"{what}×{factor:g}"] = {k: round3(v * factor) if k in keys else v for k, v in chosen.point.items()}
        return out


def pairs_of(regs: Registries, plan_cells: Sequence[Cell], offset: int, seeds: int | None = None) -> list[Pair]:
    """The stream × label pairs of a reporting plan, each with its space, held-out order and tuning seeds (the
    twins of its reported seeds, the first ``seeds`` of them where given)."""
    by: dict[tuple[str, str], list[Cell]] = {}
    for c in plan_cells:
        by.setdefault((c.stream, c.method), []).append(c)
    pairs = []
    n_twins = None if seeds is None else max(1, seeds)
    stream_orders: dict[str, list[str]] = {}  # a stream is built once (a text stream reads its files to build)
    for (stream, label), cells in by.items():
        if "+" in label:  # a composite trains with its parts' choices (its presets are theirs)
            continue
        reported = sorted({c.seed for c in cells})
        orders = sorted({c.order for c in cells})
        twins = [s + offset for s in reported][:n_twins]
        if set(twins) & set(reported):
            raise ConfigError(f"tuning seeds {twins} overlap the reported seeds {reported}: pick another --offset")
        if stream not in stream_orders:
            stream_orders[stream] = list(regs.streams.get(stream).factory(cells[0].stream_cfg).orders)
        held_out = [o for o in stream_orders[stream] if o not in orders]
        pairs.append(
            Pair(
                stream,
                label,
                cells[0],
                space_for(regs, cells[0]),
                held_out[0] if held_out else orders[0],
                twins,
                reported,
                orders,
            )
        )
    return pairs


def read(
    pair: Pair, results: Sequence[CellResult], trials: int, extensions: int, rule: str = "flat"
) -> list[dict[str, float]]:
    """Fill ``pair`` from ``results`` and return the points its next stage needs (empty: done); each round draws
    :func:`trials_for` ``(trials, rule)`` configurations."""
    mine = [
        r
        for r in results
        if r.stream == pair.stream
        and r.method.split("@", 1)[0] == pair.label
        and r.order == pair.order
        and r.seed in pair.seeds
    ]
    pair.scenario = next((r.scenario for r in mine if r.scenario), pair.scenario)

    def trial(point: dict[str, float]) -> Trial:
        t = Trial(point)
        for r in mine:
            if _same(r.config.get("sweep", {}), point):
                t.statuses.append(r.status)
                if r.status == "complete" and r.metrics.get("AA") is not None:
                    t.scores.append(float(r.metrics["AA"]))  # type: ignore[arg-type]
        return t

    pair.rounds, pair.trials, pair.stability = [list(pair.space.ranges)], [], {}
    while True:
        n = trials_for(pair.space, trials, rule)
        points = draw(pair.space, pair.rounds[-1], n, f"{pair.key}/{len(pair.rounds) - 1}")
        round_trials = [trial(p) for p in points]
        pair.trials += round_trials
        if any(len(t.statuses) < len(pair.seeds) for t in round_trials):
            return [t.point for t in round_trials if len(t.statuses) < len(pair.seeds)]
        best = pair.best()
        edges = pair.edges(best) if best is not None else {}
        if not edges or len(pair.rounds) > extensions:
            break
        pair.rounds.append(pair.extended(edges))
    if best is None:
        return []
    pair.stability = {name: trial(p) for name, p in pair.variants(best).items()}
    return [t.point for t in pair.stability.values() if len(t.statuses) < len(pair.seeds)]


LOWER_BOUND = "seqft"  # sequential fine-tuning: what every continual-learning method must beat to be doing anything


@dataclass(frozen=True)
class Choice:
    """What the protocol chose for one pair, for tables and the preset check."""

    pair: Pair
    chosen: Trial | None
    edges: dict[str, int]
    moves: dict[str, float | None]  # stability variant -> mean AA minus the choice's (None: a seed did not complete)
    margin: float
    floor: float | None = None  # the lower bound's (SeqFT's) chosen validation AA on the stream; None: not tuned there

    @property
    def flagged(self) -> list[str]:
        """The 2× variants whose mean AA moved beyond the margin, or did not complete."""
        return [k for k, v in self.moves.items() if k.endswith("×2") and (v is None or abs(v) > self.margin)]

    @property
    def at_lower_bound(self) -> list[str]:
        """Why the choice is indistinguishable from its lower bound (empty: it is not): its validation AA no more
        than the margin Δ above SeqFT's choice on the same stream, tuning seeds and order (a method that does no
        better than no method), or its strengths at 0.5× and 2× moving the AA not at all (the strength is a
        no-op where it was chosen). Read from the tuning results already there: no extra cell."""
        if self.chosen is None or self.pair.label == LOWER_BOUND:
            return []
        out = []
        if self.floor is not None and self.chosen.mean - self.floor <= self.margin:
            out.append(f"within Δ of {LOWER_BOUND} ({self.chosen.mean - self.floor:+.2f})")
        inert = [self.moves.get(k) for k in ("strength×0.5", "strength×2")]
        if self.pair.space.strength_keys and all(m is not None and abs(m) < 1e-9 for m in inert):
            out.append("strength ×0.5 and ×2 move no AA")
        return out


def lower_bounds(pairs: Sequence[Pair]) -> dict[str, float]:
    """Stream -> the lower bound's (SeqFT's) chosen mean validation AA, where it was tuned and something completed."""
    out = {}
    for p in pairs:
        best = p.best() if p.label == LOWER_BOUND else None
        if best is not None:
            out[p.stream] = best.mean
    return out


def choice(pair: Pair, margin: float, floor: float | None = None) -> Choice:
    best = pair.best()
    moves: dict[str, float | None] = {}
    for name, t in pair.stability.items():
        moves[name] = t.mean - best.mean if best is not None and t.complete(len(pair.seeds)) else None
    return Choice(pair, best, pair.edges(best) if best is not None else {}, moves, margin, floor)


def preset_mismatches(choices: Sequence[Choice]) -> list[str]:
    """Where a reporting cell's resolved settings are not the chosen point (or nothing was chosen yet)."""
    out = []
    for c in choices:
        if c.chosen is None:
            out.append(f"{c.pair.key}: nothing chosen yet (run `clbench tune`)")
            continue
        resolved = c.pair.cell.resolved()
        for key, value in c.chosen.point.items():
            have = setting_of(resolved, key)
            if not math.isclose(float(have), value, rel_tol=1e-9):
                out.append(f"{c.pair.key}: {key} is {have:g} in its preset, the protocol chose {value:g}")
    return out


def _steps(r: CellResult) -> list[tuple[Any, ...]]:
    """Per task, the optimizer steps of each of its phases (``train``; GDumb's ``memory``; PackNet's ``prune``...)."""
    return [tuple((t.get(ph) or {}).get("steps") for ph in t.get("phases", ())) for t in r.timings.get("tasks", [])]


def base_tuned_mismatches(spec: ProfileSpec, track: Sequence[CellResult], base: Sequence[CellResult]) -> list[str]:
    """Where ``spec.base_tuned``'s claim fails on result trees: a cell of a declared pair in ``track`` (the profile's
    tree) and its twin in ``base`` (the same stream, label, order and seed in the base profile's tree) must resolve to
    the same settings, but the profile's own and settings one of them does not record (a field added later), and take
    the same optimizer steps on every task. A declared pair with no such twin is a mismatch too."""
    twins = {(r.stream, r.method, r.order, r.seed): r for r in base}
    out = []
    for stream, labels in sorted(spec.base_tuned.items()):
        own = {key.split(".", 1)[1] for key in spec.sets_for(stream) if key.startswith("train.")}
        for label in labels:
            cells = [r for r in track if (r.stream, r.method) == (stream, label)]
            if not cells:
                out.append(f"{stream}/{label}: no cell in the profile's tree")
            for r in cells:
                twin = twins.get((r.stream, r.method, r.order, r.seed))
                where = f"{stream}/{label}/order-{r.order}/seed-{r.seed}"
                if twin is None:
                    out.append(f"{where}: no twin in the base tree")
                    continue
                mine, theirs = r.config, twin.config
                differ = [
                    f"{scope}.{k}"
                    for scope in ("train", "methods", "model", "stream", "metrics")
                    for k in set(mine.get(scope, {})) & set(theirs.get(scope, {}))
                    if mine[scope][k] != theirs[scope][k] and not (scope == "train" and k in own)
                ]
                if differ:
                    out.append(f"{where}: {', '.join(sorted(differ))} differ")
                if _steps(r) != _steps(twin) or any(None in task for task in _steps(r)):
                    out.append(f"{where}: optimizer steps a task {_steps(r)} here, {_steps(twin)} in the base tree")
    return out


def tuning_requests(
    pair: Pair,
    points: Sequence[Mapping[str, float]],
    profile: str,
    out: Path,
    sets: Mapping[str, list[Any]],
    data_dir: str | None = None,
) -> Any:
    from clbench._core.plan import RunRequest

    return RunRequest(
        profile=profile,
        methods=pair.label,
        streams=[pair.stream],
        orders=[pair.order],
        seeds=pair.seeds,
        sets={**sets, "train.eval_split": ["val"]},
        points=list(points),
        out=out,
        data_dir=data_dir,
    )


def tune(
    regs: Registries,
    profile: str,
    root: Path,
    *,
    streams: Sequence[str] | None = None,
    methods: str | None = None,
    sets: Mapping[str, list[Any]] | None = None,
    trials: int | None = None,
    rule: str | None = None,
    extensions: int = 1,
    offset: int = 1000,
    tuning_seeds: int | None = None,
    data_dir: str | None = None,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
    dry_run: bool = False,
) -> tuple[list[Pair], int]:
    """Run every stage the results under ``root`` still lack (none with ``dry_run``); the pairs, read back, and
    the number of cells the next stage needs (0 when the protocol is finished). ``trials`` and ``rule`` default to
    the search ``root`` records (:func:`search_of`); a tree that runs a cell records its search."""
    from clbench._core.plan import RunRequest, make_plan
    from clbench._core.results import iter_results
    from clbench._exec.executors import execute
    from clbench.cell import Plan

    sets = dict(sets or {})
    reporting = make_plan(
        regs,
        RunRequest(
            profile=profile, methods=methods, streams=streams, sets=sets, out=root / "reporting", data_dir=data_dir
        ),
    )
    named = sorted({c.method for c in reporting.cells if "+" in c.method})
    if named and methods not in (None, "all"):  # the profile's own composites are skipped as pairs_of says
        parts = ",".join(dict.fromkeys(p for label in named for p in label.split("+")))
        raise ConfigError(
            f"--methods {methods}: {', '.join(named)} combine{'s' if len(named) == 1 else ''} methods, and a "
            f"combination is not tuned (it trains with its parts' choices); tune its parts: --methods {parts}"
        )
    shared = regs.profiles.get(profile).base_tuned if profile in regs.profiles else {}
    pairs = [
        p for p in pairs_of(regs, reporting.cells, offset, tuning_seeds) if p.label not in shared.get(p.stream, ())
    ]
    n_trials, search = search_of(root, trials, rule)
    seen: set[tuple[str, ...]] = set()
    while True:
        results = list(iter_results(root)) if root.is_dir() else []
        cells: list[Cell] = []
        for pair in pairs:
            points = read(pair, results, n_trials, extensions, search)
            if points:
                cells += make_plan(regs, tuning_requests(pair, points, profile, root, sets, data_dir)).cells
        if not cells or dry_run:
            return pairs, len(cells)
        stage = tuple(sorted(c.key for c in cells))
        if stage in seen:  # the cells ran, yet their results do not read back as the points asked for
            raise ConfigError(f"clbench tune: {len(cells)} cells ran but their results are not found under {root}")
        seen.add(stage)
        root.mkdir(parents=True, exist_ok=True)
        (root / SEARCH_FILE).write_text(json.dumps({"trials": n_trials, "rule": search}) + "\n", encoding="utf-8")
        execute(
            Plan(cells=cells, profile=profile, out=root),
            regs,
            progress=progress,
            options={"jobs": "auto", "on_change": "refuse", **(options or {})},
        )
        for cell in cells:  # a tuning cell keeps its result.json; its footprints (megabytes a cell) are not read
            (cell.directory / FOOTPRINT_FILE).unlink(missing_ok=True)


def setting_of(config: Mapping[str, Any], key: str) -> Any:
    """A resolved configuration's value of a tuned key: ``train.lr`` or a method's ``ewc.lambda``."""
    scope, name = key.split(".", 1)
    return config.get("train", {}).get(name) if scope == "train" else config.get("methods", {}).get(scope, {}).get(name)


def preset_table(profile: str, choices: Sequence[Choice]) -> dict[str, dict[str, dict[str, float]]]:
    """``{method: {"PROFILE/STREAM": {key: value}}}``: each choice as its method's presets name the keys (``train.lr``
    as is, the method's own ``ewc.lambda`` as ``lambda``), for a plugin to lay over its presets."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c in choices:
        if c.chosen is None:
            continue
        method = c.pair.label
        values = {k if k.startswith("train.") else k.split(".", 1)[1]: v for k, v in c.chosen.point.items()}
        out.setdefault(method, {})[f"{profile}/{c.pair.stream}"] = values
    return {m: dict(sorted(v.items())) for m, v in sorted(out.items())}
