#!/usr/bin/env python3
"""Regenerate the tables of docs/lora-family.md and README.md that come from committed results, never typed.

Each generated table sits between two markers in the document:

    <!-- generated: NAME (scripts/docs_tables.py) -->
    ...                                   (replaced on every run)
    <!-- end generated: NAME -->

    python scripts/docs_tables.py            # rewrite the generated sections in place
    python scripts/docs_tables.py --check    # write nothing; exit 1 when the document differs (CI)

Sections (all from ``results/quick/cl-quick/*/order-1/seed-0``, the LoRA-family cells of the quick profile):

- ``cl-quick-cells``: AA, F.Ra, OO, AWOM, GSR, ACR and ‖A_T‖_F as recorded in each cell's result.json.
- ``quick-excerpt`` (README.md): the summary that opens leaderboards/quick.md (AA-ranked, F.Ra, separation).
- ``quick-size`` (README.md): the committed quick default's cell count per stream.
- ``reproducibility`` (README.md): how far the quick cells move with AVX2 kernels or another thread count
  (``results/reproducibility/*``, result.json only, compared with ``clbench._tools.verify.compare``).
- ``tuning-choices``, ``tuning-cost``, ``tuning-fragility`` (docs/tuning.md): the quick presets' tuning protocol as
  committed under ``results/tuning/quick`` (``clbench tune``): what was searched, each choice, its stability, and
  what it cost; each choice's neighbours on the reported cells (``results/fragility/quick``, ``--fragility``);
  ``bench-tuning-choices``, ``bench-tuning-cost`` (docs/bench.md) the same for ``results/tuning/bench``, and
  ``bench-equal-compute-tuning-*`` for ``results/tuning/bench-equal-compute``.
- ``bench-size`` (docs/bench.md), ``bench-summary`` (README.md, docs/bench.md): the committed bench tracks
  (``results/bench``, ``results/bench-equal-steps``): cells and wall time, and per stream the verdict counts
  against the reference and the verdicts that differ between the tracks.
- ``method-state`` (docs/scale-out.md): each method's memory per 1 B parameters, from the memory plan of its quick
  split-digits cell (computed, not read from results).
- ``gpu-lease`` (docs/scale-out.md): the GPU lease's cells (``results/gpu-lease``): measured peak memory beside the
  memory plan's estimate of the same cell (``plan.json``), throughput, wall time, AA beside the papers'.
- ``gpu-step-cost``, ``gpu-table2`` (docs/scale-out.md): per GPU lease with a ``step_cost.json``
  (benchmarks/gpu_step_cost.py), the paper-lps step cost beside bare loops, and its permuted-MNIST cells at the
  paper's epochs beside LPS Table II.
- ``acr-tau``: ACR recomputed from each cell's committed ``footprints.safetensors`` at several τ, with the
  metric plugin's own function; the recomputed value at the cell's recorded τ must equal its recorded ACR.

Exit status: 0 written / up to date, 1 stale (``--check``), 2 cannot generate (no footprints, broken markers).
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lora-family.md"
RESULTS = ROOT / "results" / "quick"
STREAM, ORDER, SEED = "cl-quick", "1", 0
TAUS = (1e-4, 1e-3, 1e-2, 0.1, 0.3)
CLAIM_OVER, CLAIM_FACTOR = ("olora", "seqlora"), 10.0  # issue 4: ACR(nlora) ≥ 10× below ACR(olora) and ACR(seqlora)
RECORDED_RTOL = 1e-6  # the recomputed ACR at the recorded τ against result.json (same inputs, same code)

BEGIN = "<!-- generated: {name} (scripts/docs_tables.py) -->"
END = "<!-- end generated: {name} -->"
_MARK = re.compile(
    r"^<!-- (?P<end>end )?generated: (?P<name>[A-Za-z0-9_.-]+)(?(end)| \(scripts/docs_tables\.py\)) -->$"
)


class DocsTableError(Exception):
    """The document cannot be generated (markers, or the results it is generated from)."""


class MissingFootprints(DocsTableError):
    """A cell the tables need has no committed footprints.safetensors."""


# --------------------------------------------------------------------------- markers
def replace_sections(text: str, sections: Mapping[str, str]) -> str:
    """``text`` with the body between each pair of markers replaced by ``sections[NAME]``.

    Every name in ``sections`` must have exactly one begin marker and one end marker after it, each alone on
    its line, not nested in another section; a marker whose name is not in ``sections`` is an error too (a
    section nobody regenerates would silently go stale)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    current: str | None = None
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        mark = _MARK.match(line.rstrip("\n"))
        if mark is None:
            if line.lstrip().startswith(("<!-- generated:", "<!-- end generated:")):
                raise DocsTableError(
                    f"line {number}: malformed marker {line.strip()!r}; write "
                    f"{BEGIN.format(name='NAME')!r} … {END.format(name='NAME')!r}"
                )
            if current is None:
                out.append(line)
            continue
        name, is_end = mark["name"], bool(mark["end"])
        if not is_end:
            if current is not None:
                raise DocsTableError(f"line {number}: section {name!r} starts inside section {current!r}")
            if name in seen:
                raise DocsTableError(f"line {number}: section {name!r} appears twice")
            if name not in sections:
                raise DocsTableError(
                    f"line {number}: no generator for section {name!r} (known: {', '.join(sorted(sections)) or 'none'})"
                )
            seen.add(name)
            current = name
            body = sections[name].strip("\n")
            out.append(BEGIN.format(name=name) + "\n")
            out.append(body + "\n" if body else "")
        else:
            if current != name:
                raise DocsTableError(
                    f"line {number}: end of section {name!r} without its start"
                    + (f" (inside {current!r})" if current else "")
                )
            out.append(END.format(name=name) + "\n")
            current = None
    if current is not None:
        raise DocsTableError(f"section {current!r} has no end marker {END.format(name=current)!r}")
    missing = sorted(set(sections) - seen)
    if missing:
        raise DocsTableError(f"no markers for section(s) {', '.join(missing)} in the document")
    return "".join(out)


def section_names(text: str) -> list[str]:
    """The names of the sections the document has begin markers for, in order."""
    return [m["name"] for line in text.splitlines() if (m := _MARK.match(line)) and not m["end"]]


# --------------------------------------------------------------------------- the cells
def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


@functools.cache
def _results(tree: Path) -> tuple[Any, ...]:
    """Every result under ``tree``, read once per run: several sections read the same trees (bench's and its tracks'
    1,780 and 580 cells each, ~1.4 ms a cell), and a cell's result is not changed by a section."""
    from clbench._core.results import iter_results

    return tuple(iter_results(tree))


def lora_cells(results: Path, regs: Any) -> list[Any]:
    """The complete LoRA-family cells (every part of the method requires the model's "lora") of the
    stream/order/seed, sorted by method."""

    root = results / STREAM
    if not root.is_dir():
        raise DocsTableError(f"{_shown(root)}: no such directory")
    cells = []
    for r in _results(root):
        if (r.stream, str(r.order), r.seed, r.status) != (STREAM, ORDER, SEED, "complete"):
            continue
        parts = r.method.split("+")
        if all(p in regs.methods and "lora" in regs.methods.get(p).requires for p in parts):
            cells.append(r)
    if not cells:
        raise DocsTableError(f"{_shown(root)}: no complete LoRA-family cell of order {ORDER}, seed {SEED}")
    return sorted(cells, key=lambda r: r.method)


def _label(r: Any) -> str:
    nlora = r.config.get("methods", {}).get("nlora")
    if not nlora:
        return f"`{r.method}`"
    form = nlora.get("penalty", "code")
    lam = nlora.get("lambda_paper" if form == "paper" else "lambda")
    return f"`{r.method}`, {form} form (λ={lam:g})" if isinstance(lam, (int, float)) else f"`{r.method}`, {form} form"


def _sig(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    s = f"{x:#.{digits}g}"
    if "e" in s:
        return f"{x:.{digits - 1}e}"
    return s.rstrip(".")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _tau(t: float) -> str:
    """1e-4 → "1e-4", 0.3 → "0.3"."""
    return f"{t:g}" if t >= 0.01 and f"{t:g}" != "0.01" else re.sub(r"e-0*(\d)", r"e-\1", f"{t:.0e}")


def _source(results: Path) -> str:
    return f"`{_shown(results)}/{STREAM}/*/order-{ORDER}/seed-{SEED}`"


def table_cells(results: Path, regs: Any) -> str:
    """The committed cells' recorded metrics."""
    cols = [
        ("AA", "AA", _pct),
        ("F.Ra", "F.Ra", _pct),
        ("OO", "OO", _sig),
        ("AWOM", "AWOM", _sig),
        ("GSR", "GSR", _sig),
        ("ACR", "ACR (τ=1e-3)", _sig),
        ("A_T.norm", "‖A_T‖_F", _sig),
    ]
    rows = [
        f"_From the result.json of each committed cell {_source(results)}; "
        "regenerate with `python scripts/docs_tables.py`._",
        "",
        "| cell | " + " | ".join(h for _, h, _ in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for r in lora_cells(results, regs):
        tau = r.config.get("metrics", {}).get("tolerance", 1e-3)
        if not math.isclose(tau, 1e-3):
            raise DocsTableError(f"{r.key}: recorded τ is {_tau(tau)}, the table's ACR column says 1e-3")
        rows.append(f"| {_label(r)} | " + " | ".join(fmt(r.metrics.get(k)) for k, _, fmt in cols) + " |")
    return "\n".join(rows)


def _footprints(r: Any) -> list[Any]:
    from clbench import footprints as fps
    from clbench.cell import FOOTPRINT_FILE

    path = r.path.parent / FOOTPRINT_FILE
    if not path.exists():
        raise MissingFootprints(f"{_shown(path)}: missing (ACR at other τ recomputes from the committed footprints)")
    from clbench.errors import ResultFileError

    try:
        return fps.load(path, r.footprints)  # checked against the sha256/size result.json records, when it does
    except ResultFileError as exc:
        raise DocsTableError(str(exc)) from None


def acr_at(r: Any, taus: tuple[float, ...], acr: Callable[[Any], float | None]) -> list[float | None]:
    """ACR of one cell at each τ, from its footprint file, through the metric plugin's function."""
    from clbench.metrics import MetricInput

    footprints = _footprints(r)
    samples = int(r.config.get("metrics", {}).get("samples", 0))
    matrix = [[float(v) for v in row] for row in r.accuracy_matrix]
    return [
        acr(MetricInput(matrix=matrix, footprints=footprints, tasks=list(r.tasks), tolerance=tau, samples=samples))
        for tau in taus
    ]


def table_acr_tau(results: Path, regs: Any) -> str:
    """ACR against τ per cell, and the ratios the issue's claim is about (ACR of O-LoRA, SeqLoRA over N-LoRA)."""
    acr = regs.metrics.get("ACR").fn
    cells = lora_cells(results, regs)
    values: dict[str, list[float | None]] = {}
    recorded_tau: float | None = None
    for r in cells:
        tau = float(r.config.get("metrics", {}).get("tolerance", 1e-3))
        if recorded_tau is not None and not math.isclose(tau, recorded_tau):
            raise DocsTableError(f"{r.key}: recorded τ {tau:g}, other cells {recorded_tau:g}")
        recorded_tau = tau
        taus = TAUS if any(math.isclose(tau, t) for t in TAUS) else (*TAUS, tau)
        got = acr_at(r, taus, acr)
        at_recorded = got[[math.isclose(tau, t) for t in taus].index(True)]
        stored = r.metrics.get("ACR")
        if (stored is None) != (at_recorded is None) or (
            stored is not None
            and at_recorded is not None
            and not math.isclose(stored, at_recorded, rel_tol=RECORDED_RTOL)
        ):
            raise DocsTableError(
                f"{r.key}: ACR at the recorded τ={tau:g} recomputes to {at_recorded!r}, result.json "
                f"has {stored!r}: run `clbench metrics {_shown(results)} --check`"
            )
        values[r.method] = got[: len(TAUS)]
    heads = [
        f"τ={_tau(t)}" + (" (recorded)" if recorded_tau is not None and math.isclose(t, recorded_tau) else "")
        for t in TAUS
    ]
    rows = [
        f"_ACR recomputed from the committed `footprints.safetensors` of {_source(results)} "
        "(the ACR metric plugin at each τ, exact pass); regenerate with `python scripts/docs_tables.py`._",
        "",
        "| method | " + " | ".join(f"ACR {h}" if i == 0 else h for i, h in enumerate(heads)) + " |",
        "|---|" + "---|" * len(TAUS),
    ]
    for method, vals in values.items():
        rows.append(f"| `{method}` | " + " | ".join("n/a" if v is None else f"{v:.4f}" for v in vals) + " |")
    ref = values.get("nlora") or []
    others = [o for o in CLAIM_OVER if o in values] if ref else []
    ratio: dict[str, list[float | None]] = {}
    for other in others:
        ratio[other] = [
            None if a is None or b is None else math.inf if b == 0 else a / b
            for a, b in zip(values[other], ref, strict=True)
        ]
        cells_ = ["n/a" if x is None else "∞" if math.isinf(x) else f"{x:.2f}×" for x in ratio[other]]
        rows.append(f"| ACR(`{other}`) ÷ ACR(`nlora`) | " + " | ".join(cells_) + " |")
    if recorded_tau is not None and any(math.isclose(recorded_tau, t) for t in TAUS):
        col = [math.isclose(recorded_tau, t) for t in TAUS].index(True)
        at = [x for v in values.values() if (x := v[col]) is not None]
        if at:
            rows += [
                "",
                f"At the recorded τ = {_tau(recorded_tau)}, ACR lies between {min(at):.4f} and {max(at):.4f} "
                f"for these {len(at)} methods.",
            ]
    if len(others) == len(CLAIM_OVER):
        holds = [
            _tau(t)
            for i, t in enumerate(TAUS)
            if all((x := ratio[o][i]) is not None and x >= CLAIM_FACTOR for o in others)
        ]
        rows.append(
            f"The issue's claim, ACR(`nlora`) at least {CLAIM_FACTOR:g}× below ACR(`olora`) and ACR(`seqlora`), "
            + (f"holds at τ = {', '.join(holds)} of these." if holds else "holds at none of these τ.")
        )
    return "\n".join(rows)


# --------------------------------------------------------------------------- README.md
def quick_excerpt(results: Path, regs: Any) -> str:
    """The summary that opens leaderboards/quick.md: per stream and scenario, methods ranked by AA (every order and
    seed of a row pooled) with their intervals, F.Ra, the verdict rule's answer, and what each row cost."""
    from clbench._tools.leaderboard import (
        SUMMARY_LEGEND,
        Judging,
        method_labels,
        section_results,
        section_title,
        summarise,
        summary_caption,
        summary_table,
    )

    cells = list(_results(results))
    seeds = sorted({r.seed for r in cells})
    orders = sorted({r.order for r in cells})
    head = (
        f"`clbench run --methods all`: seeds {', '.join(map(str, seeds))}, order{'s' * (len(orders) > 1)} "
        f"{', '.join(orders)}. {SUMMARY_LEGEND} Scores in percent.\n"
    )
    blocks = []
    judging = Judging.of(regs)
    for (stream, scenario), section in section_results(cells).items():
        summary = summarise(section, regs.methods.items, judging.rule(stream, scenario))
        labels = method_labels([r.method for r in summary.rows], regs.methods.items, "quick", stream)
        blocks.append(
            f"**{section_title(stream, scenario)}**\n\n{summary_caption(summary)}\n\n{summary_table(summary, labels)}"
        )
    return head + "\n" + "\n".join(blocks).rstrip("\n")


def profile_size(tree: Path, goal: str) -> str:
    """How many cells a committed profile run has (methods × orders × seeds per stream) and its recorded wall time
    (``tree/wall-time.json``, benchmarks/bench_quick.py --record)."""

    cells = list(_results(tree))
    if not cells:
        raise DocsTableError(f"{_shown(tree)}: no results")
    parts = []
    for stream in sorted({r.stream for r in cells}, key=lambda s: (s == "cl-quick", s)):
        mine = [r for r in cells if r.stream == stream]
        methods, orders, seeds = ({getattr(r, k) for r in mine} for k in ("method", "order", "seed"))
        parts.append(
            f"{len(methods)} methods × {len(orders)} order{'s' * (len(orders) > 1)} × "
            f"{len(seeds)} seed{'s' * (len(seeds) > 1)} on `{stream}`"
        )
    text = f"{len(cells)} cells ({'; '.join(parts)})."
    wall = tree / "wall-time.json"
    if not wall.exists():
        raise DocsTableError(f"{_shown(wall)}: missing (benchmarks/bench_quick.py --out ... --record {_shown(wall)})")
    w = json.loads(wall.read_text(encoding="utf-8"))
    if w["cells"] != len(cells):
        raise DocsTableError(f"{_shown(wall)}: timed {w['cells']} cells, the tree holds {len(cells)}; time it again")
    minutes, seconds = divmod(round(w["wall_s"]), 60)
    # a record of a run that shared the machine says so ("beside": what ran beside it): its time is an upper bound
    how = (
        f"measured beside {w['beside']}: an upper bound" if w.get("beside") else "`benchmarks/bench_quick.py --record`"
    )
    kernels = f", {w['cpu_capability']} kernels" if w.get("cpu_capability") else ""  # (records made before: none)
    reruns = "".join(
        f" Rerun since: {r['cells']} of its cells, `{r['command']}`, {r['wall_s'] / 60:.1f} min ({r['date']}"
        + (f", beside {r['beside']}" if r.get("beside") else "")
        + ")."
        for r in w.get("reruns", [])
    )
    return (
        text
        + (
            f" On {w['cpu']} ({w['cpus']} CPUs{kernels}, `--jobs {w['jobs']}`) `{w['command']}` took {minutes} min "
            f"{seconds:02d} s from the command to its last line ({w['date']}, {how}; the goal is {goal} on 2 "
            "cores)."
        )
        + reruns
    )


def quick_size(results: Path, regs: Any) -> str:
    """How many cells the committed quick default has: methods × orders × seeds per stream."""
    return "The quick default is " + profile_size(results, "5 minutes")


BENCH = ROOT / "results" / "bench"
BENCH_TRACKS = {
    "bench": "the methods' own budgets",
    "bench-equal-steps": "equal steps (`train.steps_per_task`)",
    "bench-equal-compute": "equal compute (`train.compute_epochs`)",
}


def bench_size(results: Path, regs: Any) -> str:
    """The committed bench tracks' cells and wall times (results/bench, results/bench-equal-steps,
    results/bench-equal-compute), and all together."""
    walls = [
        json.loads((ROOT / "results" / t / "wall-time.json").read_text(encoding="utf-8"))["wall_s"]
        for t in BENCH_TRACKS
    ]
    minutes, seconds = divmod(round(sum(walls)), 60)
    return "\n".join(
        [
            *(
                f"- {words}: " + profile_size(ROOT / "results" / track, "90 minutes")
                for track, words in BENCH_TRACKS.items()
            ),
            f"- the {len(walls)} tracks, one after the other: {minutes} min {seconds:02d} s.",
        ]
    )


def bench_summary(results: Path, regs: Any) -> str:
    """Per bench stream and track: the best non-oracle mean AA, how many rows the verdict rule (no declared
    reference: every row against every other) calls below, behind, equivalent or not separated, the smallest
    Holm-adjusted p the table can reach; then the rows whose verdict differs between the own budgets and each
    equal-budget track, the own budgets judged on that track's orders and seeds alone (the own-budget tree may hold
    more seeds, and more cells alone change verdicts)."""
    from clbench import verdicts as V
    from clbench._tools.leaderboard import Judging, section_results, summarise

    tables: dict[str, dict[str, Any]] = {}
    words_of = (V.BELOW, V.BEHIND, V.EQUIVALENT, V.NOT_SEPARATED)
    lines = [
        "| stream (scenario) | track | ranked rows | Δ (pp) | best: AA (95 % CI) | "
        + " | ".join(words_of)
        + " | smallest attainable p | oracles apart: AA |",
        "|---|---|---|---|---|" + "---|" * len(words_of) + "---|---|",
    ]
    judging = Judging.of(regs)
    sections = {track: section_results(_results(ROOT / "results" / track)) for track in BENCH_TRACKS}
    for track, words in BENCH_TRACKS.items():
        for (stream, scenario), section in sections[track].items():
            table = summarise(section, regs.methods.items, judging.rule(stream, scenario)).table
            title = f"{stream} ({scenario})" if scenario else stream
            tables.setdefault(title, {})[track] = table
            best = next(r for r in table.rows if r.verdict == V.BEST)
            count = {v: sum(r.verdict == v for r in table.rows) for v in words_of}
            oracle = ", ".join(f"{r.name} {r.mean:.2f}" for r in table.rows if r.oracle) or "—"
            lo, hi = best.interval or (float("nan"), float("nan"))
            ranked = sum(not r.oracle for r in table.rows)
            lines.append(
                f"| {title} | {words} | {ranked} | {table.rule.margin:g} | `{best.name}` "
                f"{best.mean:.2f} ({lo:.2f}–{hi:.2f}) | "
                + " | ".join(str(count[v]) for v in words_of)
                + f" | {V.fmt_p(table.min_p)} | {oracle} |"
            )
    own, *equal = BENCH_TRACKS
    out = "\n".join(lines)
    for track in equal:
        changes = []
        for title, by_track in tables.items():
            if not {own, track} <= set(by_track):
                continue
            key = next(k for k in sections[track] if (f"{k[0]} ({k[1]})" if k[1] else k[0]) == title)
            cells = {(r.order, r.seed) for r in sections[track][key]}
            paired = [r for r in sections[own][key] if (r.order, r.seed) in cells]
            mine = summarise(paired, regs.methods.items, judging.rule(*key)).table
            a, b = ({r.name: r.verdict for r in t.rows} for t in (mine, by_track[track]))
            moved = [f"`{m}` {a[m]} → {b[m]}" for m in sorted(set(a) & set(b)) if a[m] != b[m]]
            changes.append(f"- {title}: " + ("; ".join(moved) if moved else "no verdict changes"))
        words = BENCH_TRACKS[track].split(" (")[0]
        out += (
            f"\n\nVerdicts that differ between the own budgets and {words}, on the cells both hold (own → {words}):"
            "\n\n" + "\n".join(changes)
        )
    return out


MEMORY_TRACKS = (200, 500)  # results/bench-memory/<M>: the bench profile's methods that keep examples at train.memory=M


def bench_memory(results: Path, regs: Any) -> str:
    """Per bench stream, the methods that keep examples: the examples each keeps and its AA at its own budget
    (results/bench, on the memory trees' orders and seeds), then at each equal memory (results/bench-memory/M, every one of them keeping M) with that
    board's verdict (no declared reference: every row against every other); then each memory tree's size."""
    from clbench._tools.leaderboard import Judging, section_results, summarise
    from clbench._tools.summary import memory_of

    boards: dict[int, dict[str, dict[str, Any]]] = {}  # memory -> stream -> method -> judged row
    judging = Judging.of(regs)
    for m in MEMORY_TRACKS:
        for (stream, scenario), section in section_results(
            _results(ROOT / "results" / "bench-memory" / str(m))
        ).items():
            table = summarise(section, regs.methods.items, judging.rule(stream, scenario)).table
            boards.setdefault(m, {})[stream] = {r.name: r for r in table.rows}
    own: dict[str, dict[str, list[Any]]] = {}  # stream -> method -> its results at its own budget
    methods = {name for board in boards.values() for rows in board.values() for name in rows}
    # the own budget on the memory tracks' orders and seeds alone (the own-budget tree may hold more seeds)
    paired = {(r.order, r.seed) for m in MEMORY_TRACKS for r in _results(ROOT / "results" / "bench-memory" / str(m))}
    for r in _results(BENCH):
        if r.method in methods and r.status == "complete" and (r.order, r.seed) in paired:
            own.setdefault(r.stream, {}).setdefault(r.method, []).append(r)
    head = "| stream | method | own budget: memory, AA | " + " | ".join(
        f"memory {m}: AA (verdict)" for m in MEMORY_TRACKS
    )
    lines = [head + " |", "|---|---|---|" + "---|" * len(MEMORY_TRACKS)]
    for stream in sorted({s for board in boards.values() for s in board}):
        for method in sorted({n for board in boards.values() for n in board.get(stream, {})}):
            cells = own.get(stream, {}).get(method, [])
            kept = max((memory_of(r, regs.methods.items) or 0 for r in cells), default=0)
            mine = f"{kept:,}: {statistics.fmean(float(r.metrics['AA']) for r in cells):.2f}" if cells else "—"
            at = []
            for m in MEMORY_TRACKS:
                row = boards.get(m, {}).get(stream, {}).get(method)
                at.append("—" if row is None else f"{row.mean:.2f} ({row.verdict})")
            lines.append(f"| {stream} | `{method}` | {mine} | " + " | ".join(at) + " |")
    sizes = [
        f"- memory {m}: " + profile_size(ROOT / "results" / "bench-memory" / str(m), "90 minutes")
        for m in MEMORY_TRACKS
    ]
    return "\n".join(lines) + "\n\n" + "\n".join(sizes)


# folder under results/reproducibility -> (how it was made, the one setting allowed to differ from the committed cell)
REPRO_RUNS = {
    "quick-sse": (
        "SSE kernels instead of AVX2 or AVX-512: `ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 clbench run "
        "--methods all` (another CPU's vector kernels, on this one)",
        None,
    ),
    "quick-threads2": ("2 threads instead of 1: `clbench run --methods all --set train.threads=2`", "train.threads"),
}
BENCH_REPRO_RUNS = {
    "bench-sse": (
        "SSE kernels instead of AVX2 or AVX-512: `ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 clbench run "
        "--profile bench --seeds 0 --orders 1` (one cell a row)",
        None,
    ),
}


def reproducibility(results: Path, regs: Any, runs: Mapping[str, tuple[str, str | None]] = REPRO_RUNS) -> str:
    """How far the committed cells of ``results`` move under each change of ``runs`` (folders of
    results/reproducibility), per stream; and a check that the tree's cross-machine tolerance (its TOLERANCE)
    covers every move."""
    from clbench._tools.verify import compare, percent_metrics
    from clbench.cell import config_diff, identity

    percent = percent_metrics(regs)
    committed = list(_results(results))
    rows = [
        "| change | stream | cells | identical | max \\|Δa[i][j]\\| (pp) | max \\|Δ\\| of "
        + ", ".join(sorted(percent))
        + " (pp) | max relative Δ of the other metrics |",
        "|---|---|---|---|---|---|---|",
    ]
    worst_abs = worst_rel = 0.0
    by_key = {r.key: r for r in committed}
    for folder, (how, allowed) in runs.items():
        root = results.parent / "reproducibility" / folder
        if not root.is_dir():
            raise DocsTableError(f"{_shown(root)}: missing (make it with: {how})")
        other = list(_results(root))
        deltas, _, only_new = compare(by_key, {r.key: r for r in other})
        for r in other:  # each cell must differ from its committed twin in the named setting at most
            twin = by_key.get(r.key)
            diff = (
                []
                if twin is None
                else config_diff(
                    identity(twin.config, r.stream, r.order, r.seed), identity(r.config, r.stream, r.order, r.seed)
                )
            )
            if twin is None or any(not line.startswith(f"{allowed}:") for line in diff):
                raise DocsTableError(
                    f"{_shown(root)}: {r.key} is not the committed cell"
                    + (f" with {allowed} changed" if allowed else "")
                    + f": {'; '.join(diff)}"
                )
        for stream in sorted({d.key.split("/", 1)[0] for d in deltas}):
            ds = [d for d in deltas if d.key.startswith(stream + "/")]
            moves = [
                (k in percent, abs(a - b), max(abs(a), abs(b)))
                for d in ds
                for k, (a, b) in d.metrics.items()
                if a is not None and b is not None
            ]
            matrix = max(d.matrix for d in ds)
            pct = max((m for is_pct, m, _ in moves if is_pct), default=0.0)
            rel = max((m / scale for is_pct, m, scale in moves if not is_pct and scale), default=0.0)
            worst_abs, worst_rel = max(worst_abs, matrix, pct), max(worst_rel, rel)
            # a metric one side lacks (added after the rerun was made) is not a move
            same = sum(
                1
                for d in ds
                if d.matrix == 0 and not any(a is not None and b is not None for a, b in d.metrics.values())
            )
            if allowed:
                for d in ds:
                    d.note = ""  # the allowed setting differs by construction
            rows.append(
                f"| {how.split(':')[0]} | {stream} | {len(ds)} | {same} | {matrix:.2f} | {pct:.2f} | {rel:.1e} |"
            )
    atol, rtol = _tolerance(results / "TOLERANCE")
    if worst_abs > atol or worst_rel > rtol:
        raise DocsTableError(
            f"{_shown(results / 'TOLERANCE')}: atol={atol:g}, rtol={rtol:g} do not cover the measured "
            f"moves (largest {worst_abs:.2f} pp, relative {worst_rel:.2g}); raise them"
        )
    return "\n".join(rows) + (
        f"\n\nCommitted tolerance (`{_shown(results / 'TOLERANCE')}`): atol = {atol:g} pp, "
        f"rtol = {rtol:g}; the largest moves above are {worst_abs:.2f} pp and {worst_rel:.2g}."
    )


def bench_reproducibility(results: Path, regs: Any) -> str:
    return reproducibility(BENCH, regs, BENCH_REPRO_RUNS)


def _tolerance(path: Path) -> tuple[float, float]:
    """(atol, rtol) as the workflow reads them: through scripts/leaderboard_ci.sh, the one parser of the file."""
    import subprocess

    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "leaderboard_ci.sh"), "tolerance", str(path.parent)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise DocsTableError(done.stderr.strip() or f"{_shown(path)}: unreadable")
    atol, rtol = done.stdout.split()
    return float(atol), float(rtol)


def table_smol_cells(results: Path, regs: Any) -> str:
    """The committed `smol` profile's cells (results/smol beside results/quick), as ``cl-quick-cells``."""
    return table_cells(results.parent / "smol", regs)


# --------------------------------------------------------------------------- cl-claims (issue 13)
CLAIMS_FOLDERS = ("equal-steps", "scripts")  # results/cl-claims/<folder>: the profiles cl-claims, cl-claims-scripts
# the scripts' budget of each method: N-LoRA's 10 epochs at 32 are the cl-claims cells themselves
SCRIPTS_BUDGET = {"nlora": "equal-steps", "olora+nlora": "equal-steps"}
PAPER_SEQLORA_ACR = 0.542  # N-LoRA §4.2: SeqLoRA's ACR (Large Number of Tasks, T5-large)
CALIBRATED = ("layer", "task", "absolute")


def claims_cells(results: Path, regs: Any) -> dict[tuple[str, str], list[Any]]:
    """(folder, method) → the complete cells of results/cl-claims/<folder>, by seed."""

    out: dict[tuple[str, str], list[Any]] = {}
    for folder in CLAIMS_FOLDERS:
        root = results.parent / "cl-claims" / folder
        if not root.is_dir():
            raise DocsTableError(
                f"{_shown(root)}: missing (make it with `clbench run --profile "
                f"{'cl-claims' if folder == 'equal-steps' else 'cl-claims-scripts'} --out {_shown(root)}`)"
            )
        for r in _results(root):
            if r.status == "complete":
                out.setdefault((folder, r.method), []).append(r)
    for cells in out.values():
        cells.sort(key=lambda r: r.seed)
    return out


def _budget(folder: str) -> str:
    return "equal steps" if folder == "equal-steps" else "scripts'"


def budget_cells(cells: Mapping[tuple[str, str], list[Any]], budget: str, method: str) -> list[Any]:
    folder = "equal-steps" if budget == "equal-steps" else SCRIPTS_BUDGET.get(method, "scripts")
    return list(cells.get((folder, method), []))


_FOOTPRINTS: dict[Path, Any] = {}


def _cell_footprints(r: Any) -> Any:
    if r.path not in _FOOTPRINTS:
        _FOOTPRINTS[r.path] = _footprints(r)
    return _FOOTPRINTS[r.path]


def _acr(r: Any, tau: float, form: str) -> float | None:
    from clbench import metrics as m

    return m.collision_rate(_cell_footprints(r), tau, acr=form)  # type: ignore[arg-type]


def calibrate(seqlora: list[Any], form: str, target: float = PAPER_SEQLORA_ACR) -> float:
    """The τ at which the mean ACR of ``seqlora`` over seeds is ``target`` (bisection on log τ; ACR falls as τ
    rises). Relative forms search (1e-9, 0.99), the absolute form (1e-12, 1)."""
    lo, hi = (math.log(1e-12), 0.0) if form == "absolute" else (math.log(1e-9), math.log(0.99))

    def mean_acr(log_tau: float) -> float:
        values = [_acr(r, math.exp(log_tau), form) for r in seqlora]
        return sum(v for v in values if v is not None) / len(values)

    if not mean_acr(hi) <= target <= mean_acr(lo):
        raise DocsTableError(f"seqlora's ACR ({form}) does not reach {target} for any τ in the search range")
    while hi - lo > 1e-6:  # τ to a relative 1e-6: far below the two digits it is shown with
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_acr(mid) > target else (lo, mid)
    return math.exp((lo + hi) / 2)


def _mean_std(values: list[float | None]) -> tuple[float, float] | None:
    """Mean and sample std over seeds (std 0 for one seed); None when a seed has no value."""
    if not values or any(v is None for v in values):
        return None
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def _fmt_ms(stat: tuple[float, float] | None, fmt: Callable[[float | None], str], n: int | None = None) -> str:
    if stat is None:
        return "n/a"
    return f"{fmt(stat[0])} ± {fmt(stat[1])}" + ("" if n is None else f" ({n})")


def _claim_rows(
    cells: Mapping[tuple[str, str], list[Any]], taus: Mapping[str, float], margin: float
) -> list[tuple[str, ...]]:
    """One row per (claim, metric form, budget): the paper's numbers, ours, the verdict rule's answer (paired by cell,
    Holm across the table's rows; Δ = ``margin`` pp for AA and F.Ra, none for footprint metrics) with its p."""
    from clbench import metrics as m

    def recorded(name: str) -> Callable[[Any], float | None]:
        return lambda r: r.metrics.get(name)

    def fp(fn: Callable[[Any], float | None]) -> Callable[[Any], float | None]:
        return lambda r: fn(_cell_footprints(r))

    # (claim, paper (ours vs theirs), form, value of a cell, lower is the claim, ours, theirs, number format)
    claims: list[tuple[str, str, str, Callable[[Any], float | None], bool, str, str, Callable[[float | None], str]]] = [
        ("AA ↑", "79.2 vs 75.4 (Table 1, order 1)", "recorded", recorded("AA"), False, "nlora", "olora", _pct),
        ("F.Ra ↓", "2.37 vs 4.20 (Fig. 5, mean)", "recorded", recorded("F.Ra"), True, "nlora", "olora", _pct),
        ("ACR ↓", "×58 lower (§1)", "per layer, τ=1e-3 (leaderboard)", recorded("ACR"), True, "nlora", "olora", _sig),
        (
            "ACR ↓",
            "×58 lower (§1)",
            "τ = 0 (eq. 11 literally)",
            lambda r: _acr(r, 0.0, "layer"),
            True,
            "nlora",
            "olora",
            _sig,
        ),
        *[
            (
                "ACR ↓",
                "×58 lower (§1)",
                f"{form}, τ={_sig(taus[form], 2)} (SeqLoRA at 0.542)",
                functools.partial(_acr, tau=taus[form], form=form),
                True,
                "nlora",
                "olora",
                _sig,
            )
            for form in CALIBRATED
        ],
        ("OO ↓", "3.80 vs 21.00 (Table 3, order 1)", "eq. 7", recorded("OO"), True, "nlora", "olora", _sig),
        (
            "AWOM ↓",
            "0.13 vs 55.42 (Table 3, order 1)",
            "eq. 8: ΔW_T ΔW_iᵀ (default)",
            fp(lambda f: m.adapter_weight_overlap(f, "eq8")),
            True,
            "nlora",
            "olora",
            _sig,
        ),
        (
            "AWOM ↓",
            "0.13 vs 55.42 (Table 3, order 1)",
            "transposed: ΔW_Tᵀ ΔW_i (before)",
            fp(lambda f: m.adapter_weight_overlap(f, "transposed")),
            True,
            "nlora",
            "olora",
            _sig,
        ),
        ("GSR ↓", "lower (Fig. 5; no table)", "eq. 9", recorded("GSR"), True, "nlora", "olora", _sig),
        (
            "nuclear norm ↓",
            "0.14 vs 6.80 (§3.3, first task)",
            "first task, mean over layers",
            fp(lambda f: m.mean_nuclear_norm(f, first=True)),
            True,
            "nlora",
            "olora",
            _sig,
        ),
        (
            "nuclear norm ↓",
            "0.14 vs 6.80 (§3.3, first task)",
            "all tasks and layers",
            recorded("NucNorm"),
            True,
            "nlora",
            "olora",
            _sig,
        ),
        ("AA ↑ (Table 4)", "79.7 vs 75.4 (order 1)", "recorded", recorded("AA"), False, "olora+nlora", "olora", _pct),
        ("AA ↑ (Table 4)", "79.7 vs 79.2 (order 1)", "recorded", recorded("AA"), False, "olora+nlora", "nlora", _pct),
    ]
    from clbench import verdicts as V

    rows, tests, rules = [], [], []
    for claim, paper, form, value, lower, ours, theirs, fmt in claims:
        rule = V.Rule(margin=margin if fmt is _pct else 0.0)  # Δ in pp; a footprint metric has none
        for budget in CLAIMS_FOLDERS:
            a = {f"{r.order}/{r.seed}": value(r) for r in budget_cells(cells, budget, ours)}
            b = {f"{r.order}/{r.seed}": value(r) for r in budget_cells(cells, budget, theirs)}
            tests.append(
                V.claim(
                    {k: v for k, v in a.items() if v is not None},
                    {k: v for k, v in b.items() if v is not None},
                    lower,
                    rule,
                )
            )
            rules.append(rule)
            rows.append(
                (
                    claim,
                    f"`{ours}` vs `{theirs}`",
                    paper,
                    form,
                    _budget(budget),
                    _fmt_ms(_mean_std(list(a.values())), fmt, len(a)),
                    _fmt_ms(_mean_std(list(b.values())), fmt, len(b)),
                )
            )
    verdicts = V.claim_verdicts(tests, rules)
    return [
        (*row, f"{'**reversed**' if v == V.REVERSED else v} ({V.fmt_p(p)})")
        for row, (v, p) in zip(rows, verdicts, strict=True)
    ]


def claims_verdict(results: Path, regs: Any) -> str:
    """N-LoRA's claims, ours as mean ± std over seeds in both budgets and every metric form, with a verdict."""
    cells = claims_cells(results, regs)
    seqlora = budget_cells(cells, "equal-steps", "seqlora")
    if not seqlora:
        raise DocsTableError("results/cl-claims/equal-steps: no complete seqlora cell to calibrate ACR's τ on")
    taus = {form: calibrate(seqlora, form) for form in CALIBRATED}
    seeds = sorted({r.seed for rs in cells.values() for r in rs})
    head = (
        "| claim | methods | paper | metric form | budget | first (mean ± std (seeds)) | second | verdict |",
        "|---|---|---|---|---|---|---|---|",
    )
    from clbench import verdicts as V
    from clbench._tools.leaderboard import Judging

    scenario = next(r.scenario for rs in cells.values() for r in rs)
    margin = Judging.of(regs).rule(STREAM, scenario).margin
    rows = _claim_rows(cells, taus, margin)
    pairs = max(len(rs) for rs in cells.values())
    floor = V.claims_floor(len(rows), pairs)
    lines = [
        f"_Generated by `python scripts/docs_tables.py` from `results/cl-claims/` (seeds {', '.join(map(str, seeds))}); "
        "verdicts by the one rule (docs/verdicts.md): the first method against the second paired by seed, a "
        f"{V.CLAIMS_RULE} ({len(rows)} rows; the adjusted p in brackets), Δ = {margin:g} pp for AA "
        "and F.Ra (the scenario's, fixed in advance) and none for footprint metrics: **holds** / **reversed** "
        "when the difference is shown to exceed Δ in / against the claimed direction, **equivalent** when the "
        f"90 % interval of the difference lies within ±Δ, **not separated** otherwise. With {pairs} seeds no "
        f"Holm-adjusted p is below {floor:.2g}"
        + (": no claim can hold or be reversed here. " if floor >= 0.05 else ". ")
        + "Forms other than the recorded ones "
        "are recomputed from each cell's footprints.safetensors; ACR's calibrated τ puts the mean ACR of the "
        f"equal-steps `seqlora` cells at the paper's SeqLoRA {PAPER_SEQLORA_ACR}._",
        "",
        *head,
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def claims_cost(results: Path, regs: Any) -> str:
    """What each cl-claims cell cost: training steps a task, seconds a cell (as recorded), per method and budget."""
    cells = claims_cells(results, regs)
    lines = [
        "| folder | method | cells | steps a task | train s a cell | eval s a cell | total s a cell |",
        "|---|---|---|---|---|---|---|",
    ]
    total = 0.0
    for (folder, method), rs in sorted(cells.items()):
        tasks = [t for r in rs for t in r.timings["tasks"]]
        steps = sorted({t["train"]["steps"] for t in tasks})
        train = sum(t["train_s"] for t in tasks) / len(rs)
        ev = sum(t["eval_s"] for t in tasks) / len(rs)
        cell_total = sum(float(r.timings["total_s"]) for r in rs)
        total += cell_total
        span = f"{steps[0]}–{steps[-1]}" if len(steps) > 1 else str(steps[0])
        lines.append(
            f"| {folder} | `{method}` | {len(rs)} | {span} | {train:.0f} | {ev:.0f} | {cell_total / len(rs):.0f} |"
        )
    lines.append(f"\nAll {sum(map(len, cells.values()))} cells: {total / 60:.0f} min of recorded cell time.")
    return "\n".join(lines)


def untrained_oo(layers: list[tuple[int, int]], tasks: int) -> float:
    """E[OO] of adapters still at PEFT's init (A: Kaiming-uniform a=√5, U(±1/√in), variance 1/(3·in)), for layers
    given as (rank, in): each of the r² entries of A_i A_Tᵀ has variance in·(1/(3·in))² = 1/(9·in)."""
    return (tasks - 1) * sum(r * r / (9 * n) for r, n in layers)


def orth_ratios(footprints: list[Any]) -> list[float]:
    """Per task t ≥ 2: Σ|A_i A_tᵀ| at the end of task t over its expectation with A_t at init. At init every entry
    of A_i A_tᵀ is a sum of ``in`` independent terms, ≈ N(0, ‖row of A_i‖²/(3·in)), so E|x| = √(2/π)·σ."""
    out = []
    for t in range(1, len(footprints)):
        end = start = 0.0
        for name, fp in footprints[t].items():
            A_t = fp.A.double()
            fan_in = A_t.shape[1]
            for prev in footprints[:t]:
                if name in prev:
                    A_i = prev[name].A.double()
                    end += float((A_i @ A_t.T).abs().sum())
                    start += (
                        A_t.shape[0] * math.sqrt(2 / math.pi) * float(A_i.norm(dim=1).sum()) / math.sqrt(3 * fan_in)
                    )
        if start > 0:
            out.append(end / start)
    return out


def claims_oo(results: Path, regs: Any) -> str:
    """OO and ‖A_T‖_F of every LoRA method against the level of untrained adapters of the same shapes."""
    cells = claims_cells(results, regs)
    lines = [
        "| budget | method | OO (mean ± std (seeds)) | OO / untrained | ‖A_T‖_F (mean ± std) | ‖A_T‖_F / untrained |",
        "|---|---|---|---|---|---|",
    ]
    reference = None
    for budget in CLAIMS_FOLDERS:
        for method in ("seqlora", "inclora", "olora", "nlora", "olora+nlora", "mtl"):
            rs = budget_cells(cells, budget, method)
            if not rs:
                continue
            last = _cell_footprints(rs[0])[-1]
            shapes = [(fp.A.shape[0], fp.A.shape[1]) for fp in last.values()]
            oo0 = untrained_oo(shapes, len(rs[0].tasks))
            norm0 = math.sqrt(sum(r * n / (3 * n) for r, n in shapes))  # E‖A‖_F² = r·in·1/(3·in) a layer
            reference = (len(shapes), shapes[0], len(rs[0].tasks), oo0, norm0)
            oo, norm = _mean_std([r.metrics.get("OO") for r in rs]), _mean_std([r.metrics.get("A_T.norm") for r in rs])
            ratio = "n/a" if oo is None else f"{oo[0] / oo0:.2f}"
            nratio = "n/a" if norm is None else f"{norm[0] / norm0:.2f}"
            lines.append(
                f"| {_budget(budget)} | `{method}` | {_fmt_ms(oo, _sig, len(rs))} | {ratio} | "
                f"{_fmt_ms(norm, _sig)} | {nratio} |"
            )
    if reference is None:
        raise DocsTableError("results/cl-claims: no LoRA cell")
    n, (r, inp), tasks, oo0, norm0 = reference
    t5 = untrained_oo([(8, 1024)] * 144, 4)  # T5-large, q and v: 144 Linear 1024→1024, r 8 (docs/reference-code.md)
    lines += [
        "",
        f"Untrained here: {n} layers of rank {r} on {inp} inputs, {tasks} tasks: OO {_sig(oo0)}, "
        f"‖A_T‖_F {_sig(norm0)}. The paper's T5-large order 1 (144 layers, 1024 inputs, r 8, 4 tasks): "
        f"OO {_sig(t5)} untrained, so its O-LoRA 21.00 is {21.00 / t5:.1f}× and its N-LoRA 3.80 "
        f"{3.80 / t5:.1f}× that level (Table 3).",
    ]
    lines += [
        "",
        "O-LoRA's loss term in its code form, L = Σ_layers Σ_{i<t} Σ|A_i A_tᵀ| (entrywise l1), at the end of "
        "task t over its expected value at the task's start (A_t at PEFT's init, A_i as trained), mean over "
        "tasks 2..T and seeds:",
        "",
        "| budget | method | L end / L start |",
        "|---|---|---|",
    ]
    for budget in CLAIMS_FOLDERS:
        for method in ("inclora", "olora", "olora+nlora"):
            ratios = [x for r in budget_cells(cells, budget, method) for x in orth_ratios(_cell_footprints(r))]
            if ratios:
                mean = sum(ratios) / len(ratios)
                lines.append(f"| {_budget(budget)} | `{method}` | {_sig(mean)} (tasks × seeds: {len(ratios)}) |")
    return "\n".join(lines)


def _tuning(profile: str) -> Path:
    return ROOT / "results" / "tuning" / profile


_CHOICES: dict[str, list[Any]] = {}  # per profile: read once for the tables that show it


def _choices(regs: Any, profile: str) -> list[Any]:
    """A profile's tuning, read back from results/tuning/PROFILE (`clbench tune`; nothing is trained)."""
    if profile not in _CHOICES:
        _CHOICES[profile] = _read_choices(regs, profile)
    return _CHOICES[profile]


def _read_choices(regs: Any, profile: str) -> list[Any]:
    from clbench._tools.tables import Judging
    from clbench._tools.tune import choice, lower_bounds, tune

    tuning = _tuning(profile)
    if not tuning.is_dir():
        raise DocsTableError(f"{_shown(tuning)}: no tuning results; run `clbench tune --profile {profile}`")
    # the tuning seeds it ran (`clbench tune --tuning-seeds`), from the cells' folders (tune reads the results)
    seeds = len({f.parent.name for f in tuning.rglob("result.json")})
    pairs, left = tune(regs, profile, tuning, tuning_seeds=seeds, dry_run=True)
    if left:
        raise DocsTableError(f"{_shown(tuning)}: {left} tuning cells still to run (`clbench tune --profile {profile}`)")
    floors = lower_bounds(pairs)
    judging = Judging.of(regs)
    return [choice(p, judging.rule(p.stream, p.scenario).margin, floors.get(p.stream)) for p in pairs]


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _pp(x: float | None) -> str:
    return "not complete" if x is None else f"{x:+.2f}"


def tuning_choices(results: Path, regs: Any, profile: str = "quick") -> str:
    """Per stream × method of ``profile``: what was searched, the choice and its validation AA, whether it sits on an
    edge, and how the AA moves at 0.5× and 2× its learning rate and strengths (results/tuning/PROFILE)."""
    lines = [
        "| stream | method | searched (log ranges of every round) | choice | configurations | validation AA "
        "(tuning seeds) | on an edge | lr ×0.5 | lr ×2 | strength ×0.5 | strength ×2 | Δ | 2× beyond Δ | "
        "at its lower bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(_choices(regs, profile), key=lambda c: (c.pair.stream, c.pair.label)):
        p = c.pair
        if c.chosen is None:
            raise DocsTableError(
                f"{p.key}: no configuration completed on every tuning seed in {_shown(_tuning(profile))}"
            )
        searched = "; ".join(
            f"`{k}` " + " ∪ ".join(f"{_g(r[i][0])}–{_g(r[i][1])}" for r in p.rounds) for i, k in enumerate(p.space.keys)
        )
        point = ", ".join(f"{_g(v)}" for v in c.chosen.point.values())
        moves = [_pp(c.moves[k]) if k in c.moves else "—" for k in ("lr×0.5", "lr×2", "strength×0.5", "strength×2")]
        lines.append(
            f"| {p.stream} | {p.label} | {searched} | **{point}** | {len(p.trials)} | "
            f"{c.chosen.mean:.2f} ± {c.chosen.sd:.2f} | {', '.join(c.edges) or 'no'} | {' | '.join(moves)} | "
            f"{_g(c.margin)} | {', '.join(c.flagged) or 'no'} | {'; '.join(c.at_lower_bound) or 'no'} |"
        )
    return "\n".join(lines)


def tuning_fragility(results: Path, regs: Any, profile: str = "quick") -> str:
    """Per stream × method of ``profile``: the choice and its neighbours (0.5× and 2× its lr and strengths) rerun on
    the reported seeds and orders, scored on the test split (results/fragility/PROFILE, `clbench tune --fragility`):
    the choice's AA there, each neighbour's move from it, and the worst."""
    from clbench._tools.fragility import fragility, fragility_of

    tree = ROOT / "results" / "fragility" / profile
    choices = _choices(regs, profile)
    scores, left = fragility(regs, [c.pair for c in choices], profile, tree, dry_run=True)
    if left:
        raise DocsTableError(
            f"{_shown(tree)}: {left} cells still to run (`clbench tune --profile {profile} --fragility {_shown(tree)}`)"
        )
    lines = [
        "| stream | method | AA at the choice (reported seeds and orders) | lr ×0.5 | lr ×2 | strength ×0.5 | "
        "strength ×2 | worst neighbour | Δ | beyond Δ |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(choices, key=lambda c: (c.pair.stream, c.pair.label)):
        s = scores[c.pair.key]
        centre = s["choice"]
        if centre is None:
            raise DocsTableError(f"{c.pair.key}: the choice did not complete on every reported cell in {_shown(tree)}")
        moves = [
            "—" if k not in s else _pp(None if s[k] is None else s[k] - centre)  # type: ignore[operator]
            for k in ("lr×0.5", "lr×2", "strength×0.5", "strength×2")
        ]
        worst = fragility_of(s)
        assert worst is not None  # (the choice completed, and every pair has an lr neighbour)
        lines.append(
            f"| {c.pair.stream} | {c.pair.label} | {centre:.2f} | {' | '.join(moves)} | {worst[0]} "
            f"({_pp(None if worst[1] == -math.inf else worst[1])}) | {_g(c.margin)} | "
            f"{'yes' if worst[1] < -c.margin else 'no'} |"
        )
    return "\n".join(lines)


def _reported_tree(profile: str) -> Path:
    """The committed tree of the bench profile or one of its tracks (results/bench-memory/M for bench-memory-M)."""
    if profile.startswith("bench-memory-"):
        return ROOT / "results" / "bench-memory" / profile.rsplit("-", 1)[1]
    return ROOT / "results" / profile


def bench_fragility(results: Path, regs: Any) -> str:
    """Per bench profile (own budgets and every track) and stream: the rows whose neighbours ran (results/fragility/
    PROFILE, on how many of a row's cells; a track's row that trains as at bench reads bench's), those whose worst
    neighbour falls more than Δ below the choice there, and the most fragile row: the leaderboards' fragility column
    (:func:`clbench._tools.fragility.row_fragility`) counted."""
    from clbench._tools.fragility import row_fragility
    from clbench._tools.leaderboard import section_results
    from clbench._tools.tables import Judging

    judging = Judging.of(regs)
    lines = [
        "| profile | stream (scenario) | rows | rows with neighbours run (cells of a row's) | worst neighbour beyond Δ | "
        "Δ | most fragile row |",
        "|---|---|---|---|---|---|---|",
    ]
    for profile in ("bench", *TRACK_PROFILES):
        base = regs.profiles.get(profile).extends
        neighbours = [
            r
            for p in dict.fromkeys((profile, base or profile))
            if (ROOT / "results" / "fragility" / p).is_dir()
            for r in _results(ROOT / "results" / "fragility" / p)
        ]
        reported = list(_results(_reported_tree(profile)))
        scores = row_fragility(regs, reported, neighbours)
        for (stream, scenario), section in section_results(reported).items():
            rows = {r.method for r in section}
            margin = judging.rule(stream, scenario).margin
            found = {m: f for m in sorted(rows) if (f := scores.get((stream, m))) is not None}
            cells = sorted({f"{f.cells} of {f.of}" for f in found.values()})
            borrowed = sum(f.at is not None for f in found.values())
            ran = f"{len(found)} ({', '.join(cells) or '—'})" + (f"; {borrowed} at {base}" if borrowed else "")
            beyond = [m for m, f in found.items() if f.move < -margin]
            worst = min(found.items(), key=lambda kv: kv[1].move, default=None)
            shown = (
                "—"
                if worst is None
                else f"`{worst[0]}` {_pp(None if worst[1].move == -math.inf else worst[1].move)} ({worst[1].neighbour})"
            )
            lines.append(
                f"| `{profile}` | {stream} ({scenario}) | {len(rows)} | {ran} | "
                f"{len(beyond)}{': ' + ', '.join(beyond) if beyond else ''} | {_g(margin)} | {shown} |"
            )
    return "\n".join(lines)


def tuning_cost(results: Path, regs: Any, profile: str = "quick") -> str:
    """What the protocol ran on ``profile``, per stream: cells, their statuses and recorded cell time."""

    by: dict[str, list[Any]] = {}
    for r in _results(_tuning(profile)):
        by.setdefault(r.stream, []).append(r)
    rows = []
    for stream, cells in sorted(by.items()):
        status: dict[str, int] = {}
        for r in cells:
            status[r.status] = status.get(r.status, 0) + 1
        seconds = sum(float(r.timings.get("total_s", 0.0)) for r in cells)
        counts = ", ".join(f"{n} {s}" for s, n in sorted(status.items()))
        rows.append(f"| {stream} | {len(cells)} ({counts}) | {seconds / 60:.1f} |")
    return "\n".join(
        ["| stream | cells | cell time (min, as recorded, one CPU thread a cell) |", "|---|---|---|", *rows]
    )


# the bench profile's tracks that are profiles of their own, each tuned on its own budget (plugins/bench_tracks)
TRACK_PROFILES = ("bench-equal-compute", "bench-equal-steps", "bench-memory-200", "bench-memory-500")


def track_tuning(results: Path, regs: Any) -> str:
    """Per track profile: the pairs its own tuning searched (results/tuning/PROFILE), and those it declares to train
    as the bench profile's do (``ProfileSpec.base_tuned``, checked by tests/test_tune.py), whose presets are bench's."""
    lines = [
        "| profile | pairs tuned at its budget | pairs that train as at their own budget: bench's presets |",
        "|---|---|---|",
    ]
    for profile in TRACK_PROFILES:
        shared = regs.profiles.get(profile).base_tuned
        named = "; ".join(f"`{s}`: {', '.join(sorted(m))}" for s, m in sorted(shared.items())) or "none"
        lines.append(f"| `{profile}` | {len(_choices(regs, profile))} | {named} |")
    return "\n".join(lines)


def method_state(results: Path, regs: Any) -> str:
    """Each method's memory per 1 B model parameters, from the memory plan (clbench._exec.memory) of its quick
    split-digits cell: an fp32 MLP, every weight trained, scaled linearly (state the size of the weights grows with
    them; what grows with the data, such as a replay buffer, does not scale so)."""
    from tabulate import tabulate

    from clbench._core.plan import RunRequest, make_plan
    from clbench._exec import memory

    plan = make_plan(
        regs, RunRequest(methods="all", streams=["split-digits"], orders=["1"], seeds=[0], out=Path("unused"))
    )
    rows = []
    for cell in sorted(plan.cells, key=lambda c: c.method):
        est = memory.estimate(regs, cell)
        per = 1e9 / (est.terms["weights"] / 4) / 2**30  # GiB per 1 B fp32 parameters
        rows.append(
            [
                cell.method,
                f"{est.terms['method'] * per:.1f}",
                f"{est.terms['optimizer'] * per:.1f}",
                f"{est.terms['gradients'] * per:.1f}",
                f"{est.peak * per:.1f}",
                est.device,
            ]
        )
    return (
        f"GiB per 1 B parameters (fp32 weights: 3.7 GiB), measured by `clbench run --dry-run` on the quick profile's "
        f"split-digits cells (an MLP of {est.terms['weights'] // 4:,} parameters, SGD with momentum) and scaled:\n\n"
        + tabulate(
            rows,
            headers=["method", "method state", "optimizer", "gradients", "peak", "measured on"],
            tablefmt="github",
            disable_numparse=True,
        )
        + "\n"
    )


# AA of the papers' full protocol beside the lease's cells (benchmarks/gpu_paper_t5.py, docs/lps-packnet.md)
LEASE_PAPER = {
    "olora": "75.4 (N-LoRA Table 1)",
    "nlora": "79.2 (N-LoRA Table 1)",
    "lps": "98.58 (LPS Table II)",
    "packnet": "98.14 (LPS Table II)",
}
LEASE_DATA = {
    "t5-real": "CL benchmark, 256 train / 256 test a task",
    "t5-long": "texts at the source length, 64 / 64",
    "mnist": "permuted MNIST, 60,000 / 10,000, 1/10 of the epochs",
    "bf16": "prompts from dbpedia and amazon, 128 / 32 a task; Llama-3-8B's shapes, 2 layers, bf16",
}


def gpu_lease(results: Path, regs: Any) -> str:
    """The GPU lease's cells (results/gpu-lease): measured peak memory beside the memory plan's estimate of the same
    cell (plan.json, benchmarks/gpu_lease_plan.py), training throughput and wall time, and AA beside the paper's
    where the weights were real."""
    import json

    from clbench._core.results import read_result

    lease = ROOT / "results" / "gpu-lease"
    plan = json.loads((lease / "plan.json").read_text(encoding="utf-8"))
    rows = []
    for path in sorted(lease.glob("*/*/*/order-*/seed-*/result.json")):
        r = read_result(path)
        key = str(path.parent.relative_to(lease))
        tasks = r.timings["tasks"]
        peak = max(t["peak_memory_bytes"] for t in tasks)
        est = plan["cells"][key]["peak_bytes"]
        tokens = [t["train"]["tokens_per_s"] for t in tasks if "tokens_per_s" in t.get("train", {})]
        train_s = sum(t["train_s"] for t in tasks)
        speed = (
            f"{statistics.fmean(tokens):,.0f} tokens/s"
            if tokens
            else (f"{train_s / len(tasks):.1f} s a task; Table I's 10× the epochs ≈ {10 * train_s / 60:.0f} min")
        )
        random_weights = r.config["model"].get("name") in ("t5", "causal-lm-sft")  # the lease's random models
        aa = "random weights" if random_weights else f"{r.metrics['AA']:.2f}"
        rows.append(
            f"| {r.method} | {LEASE_DATA[key.split('/')[0]]} | {peak / 2**30:.2f} GiB | {est / 2**30:.2f} GiB | "
            f"{peak / est:.2f} | {speed} | {r.timings['total_s']:.0f} s | {aa} | {LEASE_PAPER.get(r.method, '—')} |"
        )
    env = (lease / "env.txt").read_text(encoding="utf-8").splitlines()
    return (
        "\n".join(
            [
                f"{env[1]}; {env[3]}; memory plan at commit {plan['plan_commit']}.",
                "",
                "| method | data | measured peak | plan | measured / plan | training | cell wall time | AA | paper |",
                "|---|---|---|---|---|---|---|---|---|",
                *rows,
            ]
        )
        + "\n"
    )


# LPS Table II, permuted MNIST: final average accuracy (%) of every column (the paper's "IS" is SI)
TABLE2_PERMUTED_MNIST = {
    "sm": 98.80,
    "ewc": 96.81,
    "si": 97.52,
    "lwf": 68.22,
    "dgr": 90.73,
    "gem": 93.03,
    "packnet": 98.14,
    "lps": 98.58,
}


def _leases() -> list[Path]:
    """The lease folders of results/gpu-lease that hold a step-cost measurement (benchmarks/gpu_step_cost.py)."""
    return sorted({p.parent for p in (ROOT / "results" / "gpu-lease").glob("*/step_cost*.json")})


# what each measurement of a lease ran: the step as it is, or (step_cost_old.json, mnist-old) as it was before
# train.fused, train.sync_every and train.device_data; mnist-tenth: 1/10 of Table I's epochs
STEP_KINDS = {"step_cost.json": "the step", "step_cost_old.json": "the step before fused/sync/device data"}
RUN_KINDS = {
    "mnist-full": "paper's",
    "mnist-old": "paper's, the step before fused/sync/device data",
    "mnist-tenth": "1/10 of Table I's",
}


def gpu_step_cost(results: Path, regs: Any) -> str:
    """Per lease: ms a step of the paper-lps seqft cell (clbench's training time over its steps) beside the bare
    loops of benchmarks/gpu_step_cost.py, the ratios the GPU issue's goals read, and the cell's non-training share."""
    import json

    rows = []
    for lease in _leases():
        for name, kind in STEP_KINDS.items():
            if not (lease / name).exists():
                continue
            m = json.loads((lease / name).read_text(encoding="utf-8"))
            ms, cell = m["ms_per_step"], m["cell"]
            loops = " · ".join(f"{k} {v:.2f}" for k, v in ms.items() if k != "clbench")
            rows.append(
                f"| {lease.name} | {kind} | {m['device']}, torch {m['torch']} | {ms['clbench']:.2f} | {loops} | "
                f"{ms['clbench'] / ms['eager-fused']:.2f} | {ms['clbench'] / ms['graph']:.2f} | "
                f"{cell['cell_s']:.1f} s ({1 - cell['train_s'] / cell['cell_s']:.0%} not training) |"
            )
    return (
        "\n".join(
            [
                "| lease | clbench ran | device | clbench ms a step | bare loops, ms a step | clbench ÷ "
                "eager-fused | clbench ÷ graph | cell wall time |",
                "|---|---|---|---|---|---|---|---|",
                *rows,
            ]
        )
        + "\n"
    )


def gpu_table2(results: Path, regs: Any) -> str:
    """Per lease: the permuted-MNIST paper-lps cells, AA beside LPS Table II's column, and each cell's step cost."""
    from clbench._core.results import read_result

    rows = []
    for lease in _leases():
        for folder, epochs in RUN_KINDS.items():
            for path in sorted(lease.glob(f"{folder}/permuted-mnist/*/order-*/seed-*/result.json")):
                r = read_result(path)
                phases = [t[p] for t in r.timings["tasks"] for p in t["phases"]]
                steps, seconds = sum(p["steps"] for p in phases), sum(p["seconds"] for p in phases)
                paper = TABLE2_PERMUTED_MNIST.get(r.method)
                rows.append(
                    f"| {lease.name} | {r.method} | {epochs} | {r.seed} | {r.metrics['AA']:.2f} | "
                    f"{r.metrics['F.Ra']:.2f} | {steps:,} | {1000 * seconds / steps:.2f} ms | "
                    f"{r.timings['total_s']:.0f} s | {'—' if paper is None else f'{paper:.2f}'} |"
                )
    return (
        "\n".join(
            [
                "| lease | method | epochs | seed | AA | F.Ra | steps | a step | cell wall time | LPS Table II |",
                "|---|---|---|---|---|---|---|---|---|---|",
                *rows,
            ]
        )
        + "\n"
    )


GENERATORS: dict[str, Callable[[Path, Any], str]] = {
    "gpu-step-cost": gpu_step_cost,
    "gpu-table2": gpu_table2,
    "tuning-choices": tuning_choices,
    "tuning-cost": tuning_cost,
    "tuning-fragility": tuning_fragility,
    "bench-tuning-choices": functools.partial(tuning_choices, profile="bench"),
    "bench-tuning-cost": functools.partial(tuning_cost, profile="bench"),
    **{f"{p}-tuning-choices": functools.partial(tuning_choices, profile=p) for p in TRACK_PROFILES},
    **{f"{p}-tuning-cost": functools.partial(tuning_cost, profile=p) for p in TRACK_PROFILES},
    "track-tuning": track_tuning,
    "bench-fragility": bench_fragility,
    "bench-size": bench_size,
    "bench-summary": bench_summary,
    "bench-memory": bench_memory,
    "bench-reproducibility": bench_reproducibility,
    "claims-verdict": claims_verdict,
    "claims-oo": claims_oo,
    "claims-cost": claims_cost,
    "cl-quick-cells": table_cells,
    "smol-cells": table_smol_cells,
    "acr-tau": table_acr_tau,
    "quick-excerpt": quick_excerpt,
    "quick-size": quick_size,
    "reproducibility": reproducibility,
    "method-state": method_state,
    "gpu-lease": gpu_lease,
}
# what `python scripts/docs_tables.py` regenerates
DOCUMENTS = (
    DOC,
    ROOT / "README.md",
    ROOT / "docs" / "text-streams-and-models.md",
    ROOT / "docs" / "tuning.md",
    ROOT / "docs" / "scale-out.md",
    ROOT / "docs" / "bench.md",
)


def generate(text: str, results: Path, memo: dict[str, Any] | None = None) -> str:
    """``text`` with every generated section it holds regenerated (a section's name picks its generator). ``memo``,
    shared by the documents of one run, keeps the registry and each section made, so a section that two documents
    show (bench-summary: ~20 s of bootstraps) is computed once."""
    from clbench._exec.local import harness_registry

    memo = {} if memo is None else memo
    names = section_names(text)
    unknown = sorted(set(names) - set(GENERATORS))
    if unknown:
        raise DocsTableError(f"no generator for section(s) {', '.join(unknown)}")
    if names and "registry" not in memo:
        memo["registry"] = harness_registry()
    for name in names:
        if name not in memo:
            memo[name] = GENERATORS[name](results, memo["registry"])
    return replace_sections(text, {name: memo[name] for name in names})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--doc",
        type=Path,
        action="append",
        default=None,
        help=f"a document (default: {', '.join(_shown(d) for d in DOCUMENTS)}); repeatable",
    )
    ap.add_argument("--results", type=Path, default=RESULTS, help=f"the result tree (default {_shown(RESULTS)})")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when the document differs")
    args = ap.parse_args(argv)
    memo: dict[str, Any] = {}
    return max(0, *(_one(doc, args.results, args.check, memo) for doc in args.doc or DOCUMENTS))


def _one(doc: Path, results: Path, check: bool, memo: dict[str, Any]) -> int:
    try:
        old = doc.read_text(encoding="utf-8")
        new = generate(old, results, memo)
    except (DocsTableError, OSError) as exc:
        print(f"docs_tables: {exc}", file=sys.stderr)
        return 2
    if new == old:
        print(f"docs_tables: {_shown(doc)} is up to date", file=sys.stderr)
        return 0
    if check:
        sys.stderr.writelines(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                f"{_shown(doc)} (committed)",
                f"{_shown(doc)} (generated)",
            )
        )
        print(f"docs_tables: {_shown(doc)} is stale; run `python scripts/docs_tables.py`", file=sys.stderr)
        return 1
    doc.write_text(new, encoding="utf-8")
    print(f"docs_tables: wrote {_shown(doc)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
