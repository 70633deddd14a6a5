"""Fragility on the reported cells (docs/tuning.md): each tuned choice and its neighbours (0.5× and 2× its learning
rate and strengths) rerun where a table reports (``clbench tune --fragility``), and each leaderboard row's worst
neighbour read back from that tree (``clbench leaderboard --fragility``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from clbench._core.registry import Registries
from clbench._tools.tune import STABILITY, Pair, _same, setting_of
from clbench.cell import FOOTPRINT_FILE, Cell, CellResult
from clbench.errors import ConfigError


def fragility(
    regs: Registries,
    pairs: Sequence[Pair],
    profile: str,
    out: Path,
    *,
    sets: Mapping[str, list[Any]] | None = None,
    data_dir: str | None = None,
    seeds: Sequence[int] | None = None,
    orders: Sequence[str] | None = None,
    options: Mapping[str, Any] | None = None,
    progress: bool = True,
    dry_run: bool = False,
) -> tuple[dict[str, dict[str, float | None]], int]:
    """Each pair's neighbours — its choice at 0.5× and 2× its learning rate, and at 0.5× and 2× its strengths
    (:meth:`Pair.variants`) — and the choice itself (``"choice"``) run on the reported seeds and orders and scored on
    the test split, as the reported cells are, under ``out``: what the stability check measures on the tuning seeds,
    measured where the table reports, the choice rerun beside them so that both come from one machine's kernels.
    ``seeds``, ``orders``: a subset of the reported ones to run them on (a profile whose rows hold many cells; the
    leaderboard says on how many of a row's cells). Returns per pair key the mean AA of each over those cells (None
    where one did not complete), and the cells still to run (0 when every one is there; ``dry_run`` runs none)."""
    from clbench._core.plan import RunRequest, make_plan
    from clbench._core.results import iter_results
    from clbench._exec.executors import execute
    from clbench.cell import Plan

    planned: list[tuple[Pair, dict[str, dict[str, float]], list[Cell]]] = []  # a pair, its points by name, its cells
    for pair in pairs:
        best = pair.best()
        if best is None:
            continue
        points = {"choice": dict(best.point), **pair.variants(best)}
        req = RunRequest(
            profile=profile,
            methods=pair.label,
            streams=[pair.stream],
            orders=_subset(orders, pair.reported_orders, "orders", pair.key),
            seeds=_subset(seeds, pair.reported_seeds, "seeds", pair.key),
            sets=dict(sets or {}),
            points=list(points.values()),
            out=out,
            data_dir=data_dir,
        )
        planned.append((pair, points, make_plan(regs, req).cells))
    cells = [c for _, _, mine in planned for c in mine]
    found = {r.key: r for r in iter_results(out)} if out.is_dir() else {}
    left = [c for c in cells if c.key not in found]
    if left and not dry_run:
        execute(
            Plan(cells=cells, profile=profile, out=out),
            regs,
            progress=progress,
            options={"jobs": "auto", "on_change": "refuse", **(options or {})},
        )
        for cell in cells:  # a neighbour keeps its result.json; its footprints (megabytes a cell) are not read
            (cell.directory / FOOTPRINT_FILE).unlink(missing_ok=True)
        found = {r.key: r for r in iter_results(out)}
        left = [c for c in cells if c.key not in found]
    scores: dict[str, dict[str, float | None]] = {}
    for pair, points, mine in planned:
        n = len(mine) // len(points)
        done = [found[c.key] for c in mine if c.key in found]
        scores[pair.key] = {}
        for name, point in points.items():
            aa = [
                float(r.metrics["AA"])  # type: ignore[arg-type]
                for r in done
                if _same(r.config.get("sweep", {}), point)
                and r.status == "complete"
                and r.metrics.get("AA") is not None
            ]
            scores[pair.key][name] = statistics.fmean(aa) if len(aa) == n else None
    return scores, len(left)


def _subset(chosen: Sequence[Any] | None, reported: list[Any], what: str, pair: str) -> list[Any]:
    """``chosen`` (default: every reported one), each one a reported seed or order of ``pair``."""
    if chosen is None:
        return reported
    if not chosen or set(chosen) - set(reported):
        raise ConfigError(
            f"--fragility-{what} {','.join(map(str, chosen))}: {pair} reports {what} "
            f"{','.join(map(str, reported))}; the neighbours run on a subset of them"
        )
    return list(chosen)


@dataclass(frozen=True)
class RowFragility:
    """A leaderboard row's fragility: its worst neighbour, that one's mean AA minus the rerun choice's (-inf: it did
    not complete), over how many of the row's cells (``cells`` of ``of``); ``at``: the profile the neighbours ran
    under when it is not the row's own (a track's row that trains as at its base, measured there)."""

    neighbour: str
    move: float
    cells: int
    of: int
    at: str | None = None


def fragility_of(scores: Mapping[str, float | None]) -> tuple[str, float] | None:
    """A pair's fragility from its :func:`fragility` scores: the neighbour whose AA falls furthest below the choice's
    and by how much (its AA minus the choice's; a neighbour that did not complete is the worst, at -inf); None when the
    choice itself did not complete."""
    centre = scores.get("choice")
    if centre is None:
        return None
    moves = {k: (-math.inf if v is None else v - centre) for k, v in scores.items() if k != "choice"}
    if not moves:
        return None
    worst = min(moves, key=lambda k: moves[k])
    return worst, moves[worst]


def _is_lr(key: str) -> bool:
    """Whether a tuned key is a learning rate (``train.lr``, a method's own ``*.lr``) rather than a strength."""
    return key == "train.lr" or key.endswith(".lr")


def neighbour_of(point: Mapping[str, float], choice: Mapping[str, float]) -> str | None:
    """Which of :meth:`Pair.variants` ``point`` is for ``choice`` (``"lr×2"``, ``"strength×0.5"``, or ``"choice"``
    itself), by the keys that moved and their factor; None when it is none of them."""
    if set(point) != set(choice):
        return None
    moved = {k: point[k] / choice[k] for k in point if not math.isclose(point[k], choice[k], rel_tol=1e-9)}
    if not moved:
        return "choice"
    lr = next((k for k in choice if _is_lr(k)), None)
    what = "lr" if set(moved) == {lr} else "strength" if set(moved) == set(choice) - {lr} else None
    for kind, factor in STABILITY:  # values are rounded to 3 digits: a factor within 1 %
        if kind == what and all(abs(math.log(f / factor)) < 0.01 for f in moved.values()):
            return f"{kind}×{factor:g}"
    return None


def fragility_scores(
    reported: Sequence[CellResult], neighbours: Sequence[CellResult]
) -> dict[tuple[str, str], RowFragility | None]:
    """What :func:`fragility` measured, read from a ``clbench tune --fragility`` tree alone: per (stream, method) of
    the ``reported`` cells, the worst neighbour of the choice — the point of ``neighbours`` that equals the reported
    cells' settings — over the reported cells the choice ran on there (all of them, or the subset ``clbench tune
    --fragility-seeds/--fragility-orders`` chose; a neighbour's cell that failed or diverged counts as not complete).
    A row whose choice, or one of whose neighbours, is not in the tree on those cells yet is left out (None: the
    choice did not complete)."""
    rows: dict[tuple[str, str], list[CellResult]] = {}
    for r in reported:
        rows.setdefault((r.stream, r.method), []).append(r)
    points: dict[tuple[str, str], dict[tuple[tuple[str, float], ...], list[CellResult]]] = {}
    for r in neighbours:
        point = r.config.get("sweep") or {}
        if point:
            key = (r.stream, r.method.split("@", 1)[0])
            points.setdefault(key, {}).setdefault(tuple(sorted(point.items())), []).append(r)
    out: dict[tuple[str, str], RowFragility | None] = {}
    for key, cells in rows.items():
        wanted = {(c.order, c.seed) for c in cells}
        named: dict[str, list[CellResult]] = {}
        expected: set[str] = set()  # the neighbours of the choice (Pair.variants)
        for items, found in points.get(key, {}).items():
            point = dict(items)
            choice = {k: setting_of(cells[0].config, k) for k in point}
            if any(v is None for v in choice.values()):
                continue
            name = neighbour_of(point, {k: float(v) for k, v in choice.items()})
            if name is None:
                continue
            named[name] = [c for c in found if (c.order, c.seed) in wanted]
            if name == "choice":
                lr = [k for k in point if _is_lr(k)]
                expected = {f"{kind}×{f:g}" for kind, f in STABILITY if (lr if kind == "lr" else set(point) - set(lr))}
        ran = {(c.order, c.seed) for c in named.get("choice", [])}
        if not ran or set(named) != {"choice"} | expected:
            continue  # not run, or still running: a neighbour is not there yet
        if any({(c.order, c.seed) for c in found} != ran for found in named.values()):
            continue  # still running: a neighbour has not reached the choice's cells
        scores: dict[str, float | None] = {}
        for name, found in named.items():
            aa = [
                float(c.metrics["AA"])  # type: ignore[arg-type]
                for c in found
                if c.status == "complete" and c.metrics.get("AA") is not None
            ]
            scores[name] = statistics.fmean(aa) if len(aa) == len(ran) else None
        worst = fragility_of(scores)
        out[key] = None if worst is None else RowFragility(worst[0], worst[1], len(ran), len(wanted))
    return out


def row_fragility(
    regs: Registries, reported: Sequence[CellResult], neighbours: Sequence[CellResult]
) -> dict[tuple[str, str], RowFragility | None]:
    """:func:`fragility_scores` per profile: a row reads the neighbours its own profile ran; a row that a track
    declares to train exactly as at the profile it extends (``ProfileSpec.base_tuned``, a claim `clbench tune` checks
    on the trees) has no neighbours of its own at the track and reads the base profile's (``RowFragility.at``). A
    row of a labelled tree (`clbench leaderboard A B --label a --label b`: ``METHOD@a``, its tree's profile in
    ``tree_profile``) reads its tree profile's neighbours of METHOD."""
    ran: dict[str, list[CellResult]] = {}
    for r in neighbours:
        ran.setdefault(str(r.config.get("profile", "custom")), []).append(r)
    rows: dict[tuple[str, str], list[CellResult]] = {}  # (profile, label) → its rows, named by their method
    for r in reported:
        if "tree_profile" in r.config:
            method, label = r.method.split("@", 1)
            rows.setdefault((str(r.config["tree_profile"]), label), []).append(replace(r, method=method))
        else:
            rows.setdefault((str(r.config.get("profile", "custom")), ""), []).append(r)
    out: dict[tuple[str, str], RowFragility | None] = {}
    for (profile, label), mine in rows.items():
        found = fragility_scores(mine, ran.get(profile, []))
        spec = regs.profiles.get(profile) if profile in regs.profiles else None
        if spec is not None and spec.extends is not None:
            shared = [
                r for r in mine if r.method in spec.base_tuned.get(r.stream, ()) and (r.stream, r.method) not in found
            ]
            for key, worst in fragility_scores(shared, ran.get(spec.extends, [])).items():
                found[key] = None if worst is None else replace(worst, at=spec.extends)
        out.update({(stream, f"{method}@{label}" if label else method): w for (stream, method), w in found.items()})
    return out
